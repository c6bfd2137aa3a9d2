//! The planner: which algorithm a collective takes, how its buffer is cut
//! into chunks (one per rank) and its chunks into pieces, and which
//! chunks each rank exchanges with which peer, step by step
//! ([`schedule`]). Pure functions of what every rank agreed on (the
//! element type, the length, the number of ranks, and what each rank
//! offered in its header), so every rank plans alike and the messages of
//! ranks on different transports pair.
#![deny(unsafe_code)]

mod choose;
pub(crate) mod schedule;

pub(crate) use choose::{plan, Ask, Collective, Plan, Route};

use std::mem::size_of;
use std::ops::Range;

use schedule::{Algorithm, Step};

/// The shortest piece (bytes) a chunk is cut into: a chunk of at most this
/// travels as one message.
pub(crate) const MIN_PIECE_BYTES: usize = 4 << 20;
/// The most pieces of one chunk: longer chunks take longer pieces, so the
/// host buffers stay four times the longest chunk in all.
pub(crate) const MAX_PIECES: usize = 8;
/// Pieces are a multiple of this many bytes (so of any binding alignment,
/// which Vulkan caps at 256).
const PIECE_ROUND: usize = 64 << 10;

/// The piece length, in elements of `T`, of chunks of at most `longest`
/// elements. The same on every rank that agreed on `T` and the chunks.
pub(crate) fn piece_len<T>(longest: usize) -> usize {
    piece_elements(longest, size_of::<T>())
}

/// [`piece_len`] for elements of `size` bytes.
pub(crate) fn piece_elements(longest: usize, size: usize) -> usize {
    let size = size.max(1);
    let bytes = longest.saturating_mul(size);
    let pieces = bytes.div_ceil(MIN_PIECE_BYTES).clamp(1, MAX_PIECES);
    (bytes.div_ceil(pieces).next_multiple_of(PIECE_ROUND) / size).max(1)
}

/// `range` cut into pieces of `piece` elements: at least one, empty for an
/// empty range (which still travels as one empty message).
pub(crate) fn split(range: Range<usize>, piece: usize) -> Vec<Range<usize>> {
    if range.is_empty() {
        let empty = range.start..range.start;
        return std::iter::once(empty).collect();
    }
    let end = range.end;
    range
        .step_by(piece.max(1))
        .map(|start| start..(start + piece).min(end))
        .collect()
}

/// The largest allreduce (in bytes) that takes recursive doubling rather
/// than the ring, where the number of ranks is a power of two and at least
/// 4: log2(n) steps, each exchanging and reducing the whole buffer,
/// against the ring's 2 (n - 1) steps over chunks of 1/n of it. Measured
/// (release mpi_bench, mapped path, two runs each, microseconds per
/// allreduce, ring against doubling): 4 ranks 4 KiB 799/858 against
/// 337/514, 64 KiB 1480/2417 against 1235/1274, 256 KiB 3063/3321 against
/// 3435/4079; 2 ranks 4 KiB 58/51 against 60/66 (so never on 2 ranks).
pub(crate) const DOUBLING_MAX_BYTES: usize = 64 << 10;

/// The largest buffer (in bytes) whose reduce-scatter and allgather take
/// recursive halving and doubling (`schedule`) rather than the ring, where
/// the number of ranks is a power of two and at least 4 (on 2 ranks the
/// two are one step alike): the same bytes in `log2(n)` steps instead of
/// `n - 1`, with host buffers of up to half the buffer (the ring's: one
/// chunk). Above it the ring (the staged allreduce pipelines chunks of
/// over 4 MiB). A reduce_scatter whose blocks leave gaps between them
/// (not a multiple of the binding alignment) keeps the ring. Measured for
/// allreduce only; reduce, reduce_scatter and allgather follow the same
/// rule unmeasured. Release mpi_bench, 4 ranks, allreduce of f32, 18 runs
/// of a build with halving and one without taking turns; median time with
/// halving over time with the ring: mapped path 256 KiB 0.67x, 1 MiB
/// 0.85x, 4 MiB 0.90x; staged 1.04x, 0.84x, 0.96x; at 16 MiB (both the
/// ring) 1.00x and 1.01x, and the same-node path (unchanged) 0.80-1.16x,
/// which is this VM's noise. 4 MiB is the largest size measured.
pub(crate) const HALVING_MAX_BYTES: usize = 4 << 20;

/// The most ranks whose mapped allreduce sends every chunk to its owner
/// at once (`Communicator::takes_direct`): each rank then has
/// `size - 1` messages under way at once and a landing of `size - 1`
/// chunks; above it the ring.
pub(crate) const DIRECT_MAX_RANKS: usize = 8;

/// The largest landing (bytes of pinned host memory, `size - 1` chunks)
/// that the direct reduce-scatter takes; above it the ring (one chunk).
pub(crate) const DIRECT_MAX_LANDING_BYTES: usize = 256 << 20;

/// How an allreduce moves and reduces its data
/// ([`Communicator::allreduce_algorithm`](crate::Communicator::allreduce_algorithm)), chosen by size and path alike
/// on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllreduceAlgorithm {
    /// No data moves: an empty buffer, or a communicator of one rank
    /// (the ranks still exchange headers).
    Local,
    /// Recursive doubling: log2(n) exchanges of the whole buffer (4, 8,
    /// ... ranks, at most 64 KiB).
    Doubling,
    /// Recursive halving (the reduce-scatter) and doubling (the
    /// allgather): log2(n) steps each (4, 8, ... ranks, at most 4 MiB).
    Halving,
    /// The ring: n - 1 steps of one chunk in each half (in pieces through
    /// pinned host memory on the staged path).
    Ring,
    /// The reduce-scatter sends every chunk to its owner at once, which
    /// reduces them in one kernel pass; the allgather is the ring's (3 to
    /// 8 ranks, where the ring would run with chunks of one piece, on the
    /// mapped and the staged path alike).
    Direct,
    /// Every rank reads every rank's chunks: it reduces its own chunk of
    /// every rank's memory, then copies every reduced chunk out of its
    /// owner's (the same-node path, where the ranks read each other's
    /// exported memory).
    AllToAll,
    /// MPI's own allreduce (`MPI_Iallreduce`, the reduction on the host)
    /// over the buffer in pieces: in the buffer's mapping where it maps in
    /// place, else through pinned host memory, each piece's copies to and
    /// from the device overlapping the others' reductions (where the ring
    /// would run with chunks of more than one piece). `reduce` over MPI
    /// takes MPI's reduce (`MPI_Ireduce`) alike, through pinned host
    /// memory.
    Mpi,
}

impl AllreduceAlgorithm {
    /// The name [`AllreduceAlgorithm::AllToAll`] had before (it named the
    /// algorithm after the transport it runs on, [`Path::SameNode`](crate::Path::SameNode)).
    #[deprecated(note = "renamed `AllreduceAlgorithm::AllToAll`")]
    #[doc(hidden)]
    #[allow(non_upper_case_globals, reason = "the old variant's name")]
    pub const SameNode: AllreduceAlgorithm = AllreduceAlgorithm::AllToAll;

    /// A short name: `local`, `doubling`, `halving`, `ring`, `direct`,
    /// `all_to_all` or `mpi`.
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgorithm::Local => "local",
            AllreduceAlgorithm::Doubling => "doubling",
            AllreduceAlgorithm::Halving => "halving",
            AllreduceAlgorithm::Ring => "ring",
            AllreduceAlgorithm::Direct => "direct",
            AllreduceAlgorithm::AllToAll => "all_to_all",
            AllreduceAlgorithm::Mpi => "mpi",
        }
    }
}

/// Where each rank's chunk lies in a collective's working buffer: chunk
/// `k` is `starts[k]..starts[k] + lens[k]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Chunks {
    pub(crate) ranges: Vec<Range<usize>>,
}

impl Chunks {
    /// `len` elements cut into `size` chunks of `stride` (the last ones
    /// shorter or empty).
    pub(crate) fn contiguous(len: usize, size: usize, stride: usize) -> Chunks {
        Chunks {
            ranges: (0..size)
                .map(|k| {
                    let start = (k * stride).min(len);
                    start..(start + stride).min(len)
                })
                .collect(),
        }
    }

    /// `size` chunks of `len` elements each, `stride` apart.
    pub(crate) fn blocks(len: usize, size: usize, stride: usize) -> Chunks {
        Chunks {
            ranges: (0..size).map(|k| k * stride..k * stride + len).collect(),
        }
    }

    pub(crate) fn longest(&self) -> usize {
        self.ranges.iter().map(|r| r.len()).max().unwrap_or(0)
    }

    /// The elements of the chunks `ks` (a run of chunk indices), with any
    /// gaps between them.
    pub(crate) fn span(&self, ks: &Range<usize>) -> Range<usize> {
        match (
            self.ranges.get(ks.start),
            self.ranges.get(ks.end.wrapping_sub(1)),
        ) {
            (Some(first), Some(last)) if !ks.is_empty() => first.start..last.end,
            _ => 0..0,
        }
    }

    /// The longest chunk, or span that any of `steps` sends or receives.
    pub(crate) fn longest_step(&self, steps: &[Step]) -> usize {
        let spans = steps.iter().flat_map(|s| [&s.send, &s.recv]);
        let longest = spans.map(|ks| self.span(ks).len()).max().unwrap_or(0);
        longest.max(self.longest())
    }

    /// The piece (bytes) that `steps`' messages travel in, on every path
    /// ([`piece_len`] of the longest step), so that ranks on
    /// different paths cut their messages alike.
    pub(crate) fn piece_bytes<T>(&self, steps: &[Step]) -> usize {
        piece_len::<T>(self.longest_step(steps)) * size_of::<T>()
    }
}

/// The algorithm of a reduce-scatter or allgather of `bytes` in all over
/// `size` ranks (see [`HALVING_MAX_BYTES`]).
pub(crate) fn algorithm(size: usize, bytes: usize) -> Algorithm {
    if size >= 4 && size.is_power_of_two() && bytes <= HALVING_MAX_BYTES {
        Algorithm::Halving
    } else {
        Algorithm::Ring
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_chunks_cover_the_buffer_in_order() {
        let c = Chunks::contiguous(10, 3, 4);
        assert_eq!(c.ranges, vec![0..4, 4..8, 8..10]);
        let short = Chunks::contiguous(3, 4, 64);
        assert_eq!(short.ranges, vec![0..3, 3..3, 3..3, 3..3]);
        assert_eq!(short.longest(), 3);
    }

    #[test]
    fn blocks_are_a_stride_apart() {
        let c = Chunks::blocks(5, 3, 64);
        assert_eq!(c.ranges, vec![0..5, 64..69, 128..133]);
    }

    #[test]
    fn halving_is_chosen_on_powers_of_two_from_4_up_to_its_limit() {
        for size in [4, 8, 16] {
            assert_eq!(algorithm(size, 1), Algorithm::Halving);
            assert_eq!(algorithm(size, HALVING_MAX_BYTES), Algorithm::Halving);
            assert_eq!(algorithm(size, HALVING_MAX_BYTES + 1), Algorithm::Ring);
        }
        for size in [1, 2, 3, 5, 6, 7, 12] {
            assert_eq!(algorithm(size, 1 << 20), Algorithm::Ring, "{size} ranks");
        }
    }

    #[test]
    fn spans_cover_runs_of_chunks_and_their_gaps() {
        let c = Chunks::blocks(5, 4, 64);
        assert_eq!(c.span(&(1..3)), 64..133);
        assert_eq!(c.span(&(3..4)), 192..197);
        assert_eq!(c.span(&(2..2)), 0..0);
        assert_eq!(c.span(&(3..5)), 0..0); // past the end: nothing
        let halving = schedule::reduce_scatter(Algorithm::Halving, 0, 4);
        assert_eq!(c.longest_step(&halving), 69); // 0..2 and 2..4: 0..69 and 128..197
        let short = Chunks::contiguous(3, 4, 64);
        assert_eq!(short.span(&(0..2)), 0..3);
        assert_eq!(short.span(&(2..4)), 3..3);
        // One chunk (recursive doubling's): the chunk itself.
        let whole = Chunks::contiguous(7, 1, 7);
        let ring = schedule::reduce_scatter(Algorithm::Ring, 2, 4);
        assert_eq!(whole.longest_step(&ring), 7);
    }

    #[test]
    fn pieces_cover_the_range() {
        assert_eq!(split(5..5, 4), vec![5..5]);
        assert_eq!(split(0..10, 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(split(3..7, 4), vec![3..7]);
    }

    #[test]
    fn piece_lengths_depend_on_the_chunk() {
        // At most MIN_PIECE_BYTES: one piece.
        assert!(piece_len::<f32>(1000) >= 1000);
        assert!(piece_len::<f32>((4 << 20) / 4) >= (4 << 20) / 4);
        // 32 MiB of f32: eight pieces of 4 MiB.
        assert_eq!(piece_len::<f32>((32 << 20) / 4), (4 << 20) / 4);
        // 256 MiB of f64: eight pieces, not 64.
        assert_eq!(piece_len::<f64>((256 << 20) / 8), (32 << 20) / 8);
        assert_eq!(piece_len::<f32>(0), 1);
        assert_eq!((piece_len::<u64>(12345) * 8) % PIECE_ROUND, 0);
    }
}
