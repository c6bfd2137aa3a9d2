//! Which chunks each rank exchanges with which peer, step by step, in a
//! reduce-scatter and an allgather over `size` chunks (chunk `k` ends up
//! owned by rank `k`): the ring, or recursive halving (the reduce-scatter)
//! and recursive doubling (the allgather) on a power-of-two number of
//! ranks. Both move the same bytes, `(size - 1) / size` of the buffer out
//! of every rank in each phase; the ring in `size - 1` steps of one chunk,
//! halving and doubling in `log2(size)` steps of `size / 2`, `size / 4`,
//! ... chunks (fewer messages, longer ones).
//!
//! In both, a chunk is reduced in full only by its owner, from operands
//! that each hold disjoint sets of ranks' contributions, so every rank
//! gets the owner's bits after the allgather. The schedules depend only on
//! the rank, the number of ranks and the algorithm, so ranks that agreed
//! on the algorithm pair their messages whichever memory path each takes.

use std::ops::Range;

/// How a collective's chunks travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// `size - 1` steps to the right-hand neighbour, from the left.
    Ring,
    /// Recursive halving, then recursive doubling: `log2(size)` steps,
    /// each with the partner `rank ^ d`. Only on a power-of-two `size`;
    /// elsewhere [`reduce_scatter`] and [`allgather`] take the ring.
    Halving,
}

/// One step of a schedule: send chunks `send` to rank `to` and receive
/// chunks `recv` (the same ones the peer sends) from rank `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) to: i32,
    pub(crate) from: i32,
    /// Chunk indices, a contiguous run.
    pub(crate) send: Range<usize>,
    pub(crate) recv: Range<usize>,
}

fn halves(algorithm: Algorithm, size: usize) -> bool {
    algorithm == Algorithm::Halving && size.is_power_of_two()
}

/// The reduce-scatter of `rank` among `size`: after its steps, each
/// reducing what it receives into the same chunks of its own buffer,
/// chunk `rank` holds the reduction over every rank.
pub(crate) fn reduce_scatter(algorithm: Algorithm, rank: usize, size: usize) -> Vec<Step> {
    if halves(algorithm, size) {
        let (mut lo, mut hi) = (0, size);
        let mut d = size / 2;
        let mut steps = Vec::new();
        while d >= 1 {
            let partner = (rank ^ d) as i32;
            let mid = lo + d;
            let (keep, give) = if rank & d == 0 {
                (lo..mid, mid..hi)
            } else {
                (mid..hi, lo..mid)
            };
            (lo, hi) = (keep.start, keep.end);
            steps.push(Step {
                to: partner,
                from: partner,
                send: give,
                recv: keep,
            });
            d /= 2;
        }
        return steps;
    }
    ring(rank, size, |step| {
        let k = rank + 2 * size - step;
        ((k - 1) % size, (k - 2) % size)
    })
}

/// The allgather of `rank` among `size`: chunk `rank` is this rank's; after
/// its steps, each storing what it receives, every chunk is its owner's.
pub(crate) fn allgather(algorithm: Algorithm, rank: usize, size: usize) -> Vec<Step> {
    if halves(algorithm, size) {
        let mut d = 1;
        let mut steps = Vec::new();
        while d < size {
            let partner = rank ^ d;
            let mine = rank / d * d;
            let theirs = partner / d * d;
            steps.push(Step {
                to: partner as i32,
                from: partner as i32,
                send: mine..mine + d,
                recv: theirs..theirs + d,
            });
            d *= 2;
        }
        return steps;
    }
    ring(rank, size, |step| {
        let k = rank + 2 * size - step;
        (k % size, (k - 1) % size)
    })
}

/// The `size - 1` ring steps of `rank`: to the right-hand neighbour, from
/// the left, the chunks `chunks(step)` says (sent, received).
fn ring(rank: usize, size: usize, chunks: impl Fn(usize) -> (usize, usize)) -> Vec<Step> {
    let right = ((rank + 1) % size) as i32;
    let left = ((rank + size - 1) % size) as i32;
    (0..size.saturating_sub(1))
        .map(|step| {
            let (send, recv) = chunks(step);
            Step {
                to: right,
                from: left,
                send: send..send + 1,
                recv: recv..recv + 1,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs every rank's schedule at once, step by step, on sets of
    /// contributions (bit `r`: rank `r`'s), checking that the messages
    /// pair (the receiver expects what the sender sends, from it) and
    /// that a reduction never combines two operands that share a
    /// contribution (which would count a rank twice).
    fn run(
        algorithm: Algorithm,
        size: usize,
        schedule: fn(Algorithm, usize, usize) -> Vec<Step>,
        state: &mut [Vec<u64>],
        reduces: bool,
    ) {
        let all: Vec<Vec<Step>> = (0..size).map(|r| schedule(algorithm, r, size)).collect();
        let steps = all[0].len();
        assert!(
            all.iter().all(|s| s.len() == steps),
            "ranks take one number of steps"
        );
        for i in 0..steps {
            let before: Vec<Vec<u64>> = state.to_vec();
            for (sender, mine) in all.iter().enumerate() {
                let step = &mine[i];
                let to = step.to as usize;
                let theirs = &all[to][i];
                assert_eq!(
                    theirs.from as usize, sender,
                    "step {i}: {to} receives from {sender}"
                );
                assert_eq!(theirs.recv, step.send, "step {i}: {sender} -> {to}");
                let apart = step.send.end <= step.recv.start || step.recv.end <= step.send.start;
                assert!(
                    apart,
                    "step {i}: {sender} sends and receives disjoint chunks"
                );
                for k in step.send.clone() {
                    let (incoming, held) = (before[sender][k], state[to][k]);
                    if reduces {
                        assert_eq!(incoming & held, 0, "chunk {k} counted twice at {to}");
                        state[to][k] = held | incoming;
                    } else {
                        state[to][k] = incoming;
                    }
                }
            }
        }
    }

    fn check(algorithm: Algorithm, size: usize) {
        let everyone = (1u64 << size) - 1;
        let mut state: Vec<Vec<u64>> = (0..size).map(|r| vec![1 << r; size]).collect();
        run(algorithm, size, reduce_scatter, &mut state, true);
        for (r, chunks) in state.iter_mut().enumerate() {
            assert_eq!(
                chunks[r], everyone,
                "{algorithm:?} on {size}: chunk {r} at its owner"
            );
            for (k, c) in chunks.iter_mut().enumerate() {
                if k != r {
                    *c = 0; // what the allgather must overwrite
                }
            }
        }
        run(algorithm, size, allgather, &mut state, false);
        for chunks in &state {
            assert!(
                chunks.iter().all(|&c| c == everyone),
                "{algorithm:?} on {size}"
            );
        }
    }

    #[test]
    fn every_rank_ends_with_every_chunk_reduced_once() {
        for size in 1..=16 {
            check(Algorithm::Ring, size);
            check(Algorithm::Halving, size);
        }
    }

    #[test]
    fn halving_takes_log2_steps_of_halving_runs() {
        let steps = reduce_scatter(Algorithm::Halving, 5, 8);
        let lens: Vec<usize> = steps.iter().map(|s| s.send.len()).collect();
        assert_eq!(lens, [4, 2, 1]);
        assert_eq!(steps.last().map(|s| s.recv.clone()), Some(5..6));
        let lens: Vec<usize> = allgather(Algorithm::Halving, 5, 8)
            .iter()
            .map(|s| s.send.len())
            .collect();
        assert_eq!(lens, [1, 2, 4]);
        // Not a power of two: the ring.
        assert_eq!(reduce_scatter(Algorithm::Halving, 1, 6).len(), 5);
    }
}
