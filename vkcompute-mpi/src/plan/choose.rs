//! [`plan`]: how a collective runs, from what every rank agreed on (the
//! collective, the element size, the length, the number of ranks, whether
//! the communicator is all on the same-node transport) and how this rank's
//! buffer meets MPI (mapped in place, or staged). A pure function: the
//! same inputs give the same plan on every rank, so their messages pair,
//! whichever transport each rank's buffer takes.

use super::schedule::Algorithm;
use super::{
    algorithm, piece_elements, AllreduceAlgorithm, Chunks, DIRECT_MAX_LANDING_BYTES,
    DIRECT_MAX_RANKS, DOUBLING_MAX_BYTES,
};

/// The collective being planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Collective {
    Broadcast,
    Allreduce,
    Reduce,
    Allgather,
    ReduceScatter,
}

/// How a collective's data moves on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Through every rank's exported device memory (the same-node
    /// transport, where every pair of the communicator takes it).
    SameNode,
    /// Over MPI, in the device buffer's mapping, the kernels reducing into
    /// the buffer between the mappings (allreduce and broadcast of a
    /// device buffer that maps directly; an allreduce of chunks longer
    /// than one piece: MPI's allreduce in the mapping, in pieces).
    Mapped,
    /// Over MPI through pinned host buffers of one piece each, each
    /// piece's copies and kernel overlapping the others' transfers (the
    /// executor's pieces: chunks longer than one piece, the ring; an
    /// allreduce or a reduce: MPI's own in pieces).
    Pieces,
    /// Over MPI through pinned host buffers of the whole buffer (small
    /// chunks, halving, doubling; and the header exchange alone where no
    /// data moves).
    Whole,
}

/// What a plan is made from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    pub(crate) collective: Collective,
    /// The ranks of the communicator.
    pub(crate) ranks: usize,
    /// Elements: of the buffer (broadcast, allreduce, reduce), or of one
    /// rank's block (allgather, reduce_scatter).
    pub(crate) len: usize,
    /// Bytes of one element.
    pub(crate) element: usize,
    /// Elements of the binding alignment: chunks and blocks start at a
    /// multiple of it, so a kernel binds any of them where it lies.
    pub(crate) align: usize,
    /// Whether every pair of the communicator takes the same-node transport.
    pub(crate) same_node: bool,
    /// Whether this rank's buffer takes the mapped route (an allreduce's
    /// device buffer that maps directly and binds in place; a broadcast's
    /// that maps directly).
    pub(crate) mapped: bool,
}

/// How a collective runs on this rank ([`plan`]).
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) route: Route,
    /// The allreduce's algorithm (the others' where it applies):
    /// `Direct` where this rank offers the direct reduce-scatter (taken
    /// where every rank offers it), `AllToAll` on the same-node route.
    pub(crate) algorithm: AllreduceAlgorithm,
    /// The steps of the reduce-scatter and the allgather.
    pub(crate) schedule: Algorithm,
    /// Where each rank's chunk (or block) lies in the working buffer.
    pub(crate) chunks: Chunks,
    /// The elements a chunk's messages carry each (the last shorter).
    pub(crate) piece: usize,
}

impl Ask {
    /// The chunk stride of a reduction of `len` elements over the ranks:
    /// a multiple of the alignment.
    pub(crate) fn stride(&self, len: usize) -> usize {
        let align = self.align.max(1);
        len.div_ceil(self.ranks.max(1))
            .next_multiple_of(align)
            .max(align)
    }

    fn bytes(&self, len: usize) -> usize {
        len.saturating_mul(self.element)
    }

    /// Whether an allreduce takes recursive doubling: a power-of-two
    /// number of ranks, at least 4, and at most [`DOUBLING_MAX_BYTES`].
    fn doubles(&self) -> bool {
        self.ranks >= 4
            && self.ranks.is_power_of_two()
            && self.bytes(self.len) <= DOUBLING_MAX_BYTES
    }

    /// Whether this rank offers the direct reduce-scatter of an allreduce
    /// whose steps take `schedule`: the ring on 3 to [`DIRECT_MAX_RANKS`]
    /// ranks, with a landing of `ranks - 1` chunks of at most
    /// [`DIRECT_MAX_LANDING_BYTES`], on either route.
    fn offers_direct(&self, schedule: Algorithm) -> bool {
        let landing =
            self.bytes((self.ranks.saturating_sub(1)).saturating_mul(self.stride(self.len)));
        schedule == Algorithm::Ring
            && (3..=DIRECT_MAX_RANKS).contains(&self.ranks)
            && landing <= DIRECT_MAX_LANDING_BYTES
    }
}

/// The plan of `ask` (see the module documentation).
pub(crate) fn plan(ask: &Ask) -> Plan {
    let (n, size) = (ask.len, ask.ranks);
    let whole = |algorithm| Plan {
        route: Route::Whole,
        algorithm,
        schedule: Algorithm::Ring,
        chunks: Chunks::contiguous(n, 1, n),
        piece: n.max(1),
    };
    if n == 0 || size <= 1 {
        return whole(AllreduceAlgorithm::Local);
    }
    let (chunks, schedule) = match ask.collective {
        Collective::Broadcast => (Chunks::contiguous(n, 1, n), Algorithm::Ring),
        Collective::Allreduce | Collective::Reduce => (
            Chunks::contiguous(n, size, ask.stride(n)),
            algorithm(size, ask.bytes(n)),
        ),
        Collective::Allgather => (
            Chunks::blocks(n, size, n),
            algorithm(size, ask.bytes(n * size)),
        ),
        Collective::ReduceScatter => {
            let stride = n.next_multiple_of(ask.stride(1));
            // Halving's steps send runs of blocks, so only blocks with no
            // gap between them (which would travel, unwritten) take it.
            let schedule = match algorithm(size, ask.bytes(stride.saturating_mul(size))) {
                Algorithm::Halving if stride == n => Algorithm::Halving,
                _ => Algorithm::Ring,
            };
            (Chunks::blocks(n, size, stride), schedule)
        }
    };
    let piece = piece_elements(chunks.longest(), ask.element);
    let named = match schedule {
        Algorithm::Halving => AllreduceAlgorithm::Halving,
        Algorithm::Ring => AllreduceAlgorithm::Ring,
    };
    let routed = |route, algorithm| Plan {
        route,
        algorithm,
        schedule,
        piece,
        chunks: chunks.clone(),
    };
    if ask.same_node {
        return routed(Route::SameNode, AllreduceAlgorithm::AllToAll);
    }
    let allreduce = ask.collective == Collective::Allreduce;
    let in_pieces = schedule == Algorithm::Ring && piece < chunks.longest();
    // MPI's own reduction in pieces: allreduce on either route, reduce
    // through pinned host buffers (it never takes the mapped route).
    if (allreduce || ask.collective == Collective::Reduce) && in_pieces {
        let route = if allreduce && ask.mapped {
            Route::Mapped
        } else {
            Route::Pieces
        };
        return routed(route, AllreduceAlgorithm::Mpi);
    }
    if allreduce && ask.doubles() {
        let doubling = whole(AllreduceAlgorithm::Doubling);
        let route = if ask.mapped {
            Route::Mapped
        } else {
            Route::Whole
        };
        return Plan { route, ..doubling };
    }
    // The direct reduce-scatter, where this rank offers it, on either
    // route (taken where every rank's header offers it).
    let named = if allreduce && ask.offers_direct(schedule) {
        AllreduceAlgorithm::Direct
    } else {
        named
    };
    if ask.mapped
        && matches!(
            ask.collective,
            Collective::Allreduce | Collective::Broadcast
        )
    {
        return routed(Route::Mapped, named);
    }
    if in_pieces {
        return routed(Route::Pieces, named);
    }
    routed(Route::Whole, named)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(collective: Collective, ranks: usize, bytes: usize) -> Ask {
        Ask {
            collective,
            ranks,
            len: bytes / 4,
            element: 4,
            align: 64,
            same_node: false,
            mapped: false,
        }
    }

    fn route_and_algorithm(a: Ask) -> (Route, AllreduceAlgorithm) {
        let p = plan(&a);
        (p.route, p.algorithm)
    }

    #[test]
    fn allreduces_choose_by_ranks_size_and_route() {
        use AllreduceAlgorithm::*;
        use Collective::Allreduce as A;
        let mapped = |a: Ask| Ask { mapped: true, ..a };
        let cases = [
            // (ask, expected)
            (ask(A, 1, 1 << 20), (Route::Whole, Local)),
            (ask(A, 4, 0), (Route::Whole, Local)),
            (ask(A, 4, 64 << 10), (Route::Whole, Doubling)),
            (mapped(ask(A, 4, 64 << 10)), (Route::Mapped, Doubling)),
            (ask(A, 2, 64 << 10), (Route::Whole, Ring)),
            (ask(A, 4, 1 << 20), (Route::Whole, Halving)),
            (ask(A, 4, 4 << 20), (Route::Whole, Halving)),
            (ask(A, 3, 1 << 20), (Route::Whole, Direct)),
            (mapped(ask(A, 3, 1 << 20)), (Route::Mapped, Direct)),
            (mapped(ask(A, 4, 1 << 20)), (Route::Mapped, Halving)),
            // Chunks of one piece (4 MiB): the ring on 2 or more than 8
            // ranks, else the direct reduce-scatter, on either route.
            (ask(A, 2, 8 << 20), (Route::Whole, Ring)),
            (mapped(ask(A, 2, 8 << 20)), (Route::Mapped, Ring)),
            (mapped(ask(A, 3, 12 << 20)), (Route::Mapped, Direct)),
            (ask(A, 3, 12 << 20), (Route::Whole, Direct)),
            (ask(A, 4, 16 << 20), (Route::Whole, Direct)),
            (ask(A, 8, 32 << 20), (Route::Whole, Direct)),
            (mapped(ask(A, 9, 36 << 20)), (Route::Mapped, Ring)),
            (ask(A, 9, 36 << 20), (Route::Whole, Ring)),
            // Chunks of more than one piece: MPI's allreduce in pieces,
            // on either route.
            (ask(A, 2, (8 << 20) + 256), (Route::Pieces, Mpi)),
            (ask(A, 4, 64 << 20), (Route::Pieces, Mpi)),
            (mapped(ask(A, 4, 64 << 20)), (Route::Mapped, Mpi)),
            (mapped(ask(A, 2, 64 << 20)), (Route::Mapped, Mpi)),
            (mapped(ask(A, 9, 64 << 20)), (Route::Mapped, Mpi)),
            (mapped(ask(A, 3, 576 << 20)), (Route::Mapped, Mpi)),
        ];
        for (a, want) in cases {
            assert_eq!(route_and_algorithm(a), want, "{a:?}");
        }
        let on_node = Ask {
            same_node: true,
            ..ask(A, 4, 64 << 20)
        };
        assert_eq!(route_and_algorithm(on_node), (Route::SameNode, AllToAll));
    }

    #[test]
    fn the_other_collectives_take_pieces_past_one_piece_a_chunk() {
        use Collective::*;
        for c in [Broadcast, Reduce, Allgather, ReduceScatter] {
            assert_eq!(plan(&ask(c, 3, 4 << 10)).route, Route::Whole, "{c:?}");
        }
        // Chunks of 16 MiB (a reduce of 48 MiB, blocks of 16 MiB): pieces,
        // the reduce by MPI's own, the others by the ring.
        for c in [Reduce, Allgather, ReduceScatter] {
            let bytes = if c == Reduce { 48 << 20 } else { 16 << 20 };
            let p = plan(&ask(c, 3, bytes));
            assert_eq!((p.route, p.piece), (Route::Pieces, (4 << 20) / 4), "{c:?}");
            let by_mpi = p.algorithm == AllreduceAlgorithm::Mpi;
            assert_eq!(by_mpi, c == Reduce, "{c:?}");
        }
        // A reduce of chunks of one piece keeps the ring (or halving).
        let small = plan(&ask(Reduce, 2, 8 << 20));
        assert_eq!(
            (small.route, small.algorithm),
            (Route::Whole, AllreduceAlgorithm::Ring)
        );
        let broadcast = plan(&ask(Broadcast, 2, 64 << 20));
        assert_eq!(
            (broadcast.route, broadcast.piece),
            (Route::Pieces, (8 << 20) / 4)
        );
        let mapped = Ask {
            mapped: true,
            ..ask(Broadcast, 2, 64 << 20)
        };
        assert_eq!(plan(&mapped).route, Route::Mapped);
        // Only allreduce and broadcast take the mapped route.
        let reduce = Ask {
            mapped: true,
            ..ask(Reduce, 3, 48 << 20)
        };
        assert_eq!(plan(&reduce).route, Route::Pieces);
    }

    #[test]
    fn reduce_scatter_blocks_with_gaps_keep_the_ring() {
        // Blocks of 100 elements, a stride of 128 apart (the alignment).
        let gapped = plan(&ask(Collective::ReduceScatter, 4, 400));
        assert_eq!(gapped.schedule, Algorithm::Ring);
        assert_eq!(gapped.chunks.ranges[1], 128..228);
        let gapless = plan(&ask(Collective::ReduceScatter, 4, 512));
        assert_eq!(gapless.schedule, Algorithm::Halving);
        assert_eq!(gapless.chunks.ranges[1], 128..256);
    }

    #[test]
    fn chunks_start_at_the_alignment_and_cover_the_buffer() {
        let p = plan(&ask(Collective::Allreduce, 3, 4000));
        assert_eq!(p.chunks.ranges, [0..384, 384..768, 768..1000]);
        let doubling = plan(&ask(Collective::Allreduce, 8, 4000));
        assert_eq!(doubling.chunks.ranges.len(), 1);
        assert_eq!(doubling.chunks.ranges[0], 0..1000);
    }
}
