//! Which commands of a batch need a pipeline barrier between them.
//!
//! The tracker remembers the byte ranges read and written since the last
//! barrier, per buffer. A new command needs a barrier first when it reads
//! what an earlier command wrote, or writes what an earlier command read or
//! wrote. Commands on disjoint memory need none, so a run of independent
//! copies records no barrier at all.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Bound::{Excluded, Included};

/// One command's access to a byte range of a buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Access {
    /// The buffer's handle, as a number (`vk::Buffer::as_raw`).
    pub(crate) buffer: u64,
    /// First byte.
    pub(crate) start: u64,
    /// One past the last byte.
    pub(crate) end: u64,
    /// Whether the command writes the range (it may read it too).
    pub(crate) write: bool,
}

/// A set of byte ranges kept as disjoint, merged intervals.
#[derive(Default, Debug)]
pub(crate) struct IntervalSet {
    /// start -> end; no two intervals overlap or touch.
    intervals: BTreeMap<u64, u64>,
}

impl IntervalSet {
    /// Whether any byte of `start..end` is in the set.
    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return false;
        }
        // The interval starting last before `end` is the only candidate:
        // intervals are disjoint, so any earlier one ends before it starts.
        self.intervals
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > start)
    }

    /// Adds `start..end`, merging it with the intervals it overlaps or
    /// touches. Extending the interval before it (the common case of
    /// ascending, adjacent ranges) updates it in place, without allocating.
    pub(crate) fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let before = self
            .intervals
            .range(..=start)
            .next_back()
            .map(|(&s, &e)| (s, e))
            .filter(|&(_, e)| e >= start);
        if let Some((_, e)) = before {
            if e >= end {
                return; // already covered
            }
        }
        let first = before.map_or(start, |(s, _)| s);
        let mut last = end;
        // Absorb the intervals that start inside the new one (or touch it).
        while let Some((s, e)) = self
            .intervals
            .range((Excluded(first), Included(last)))
            .next()
            .map(|(&s, &e)| (s, e))
        {
            self.intervals.remove(&s);
            last = last.max(e);
        }
        match self.intervals.get_mut(&first) {
            Some(e) => *e = (*e).max(last),
            None => {
                self.intervals.insert(first, last);
            }
        }
    }
}

#[derive(Default, Debug)]
struct BufferRanges {
    reads: IntervalSet,
    writes: IntervalSet,
}

/// The ranges touched since the last barrier of the batch being recorded.
/// Hashes buffer handles: one multiplication (they are distinct numbers
/// already, only badly spread), instead of SipHash on every command.
#[derive(Default)]
struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Default, Debug)]
pub(crate) struct HazardTracker {
    buffers: HashMap<u64, BufferRanges, BuildHasherDefault<HandleHasher>>,
}

impl HazardTracker {
    /// Whether a command making `accesses` must wait for earlier commands.
    pub(crate) fn conflicts(&self, accesses: &[Access]) -> bool {
        accesses.iter().any(|a| {
            self.buffers.get(&a.buffer).is_some_and(|r| {
                r.writes.overlaps(a.start, a.end) || (a.write && r.reads.overlaps(a.start, a.end))
            })
        })
    }

    /// Notes a recorded command's accesses.
    pub(crate) fn record(&mut self, accesses: &[Access]) {
        for a in accesses {
            let ranges = self.buffers.entry(a.buffer).or_default();
            if a.write {
                ranges.writes.insert(a.start, a.end);
            } else {
                ranges.reads.insert(a.start, a.end);
            }
        }
    }

    /// Forgets everything: a barrier was recorded (or a new batch begun).
    ///
    /// `HashMap::clear` keeps the table's capacity and takes time in
    /// proportion to it, and this runs at every barrier: after one batch
    /// touched thousands of buffers (100,000 fills of distinct buffers),
    /// each later barrier paid for those buckets, which made
    /// `enqueue_cost` 2x slower for the rest of the stream's life (bench
    /// `scale_buffers`). So the capacity shrinks to what this use held, and
    /// a clear costs about what the commands since the last one did.
    pub(crate) fn clear(&mut self) {
        let held = self.buffers.len();
        self.buffers.clear();
        self.buffers.shrink_to(held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(buffer: u64, start: u64, end: u64) -> Access {
        Access {
            buffer,
            start,
            end,
            write: false,
        }
    }

    fn write(buffer: u64, start: u64, end: u64) -> Access {
        Access {
            buffer,
            start,
            end,
            write: true,
        }
    }

    #[test]
    fn interval_set_merges_touching_and_overlapping_ranges() {
        let mut set = IntervalSet::default();
        set.insert(10, 20);
        set.insert(30, 40);
        set.insert(20, 30);
        assert_eq!(set.intervals.len(), 1);
        assert_eq!(set.intervals.get(&10), Some(&40));
        set.insert(5, 12);
        set.insert(39, 50);
        assert_eq!(set.intervals.iter().collect::<Vec<_>>(), vec![(&5, &50)]);
    }

    #[test]
    fn interval_set_overlap_is_exact_at_the_edges() {
        let mut set = IntervalSet::default();
        set.insert(100, 200);
        set.insert(300, 400);
        assert!(!set.overlaps(0, 100));
        assert!(set.overlaps(99, 101));
        assert!(set.overlaps(199, 200));
        assert!(!set.overlaps(200, 300));
        assert!(set.overlaps(250, 301));
        assert!(!set.overlaps(400, 500));
        assert!(!set.overlaps(150, 150), "an empty range overlaps nothing");
    }

    #[test]
    fn interval_set_matches_a_byte_model() {
        // Pseudo-random ranges against a bitmap of 512 bytes.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..200 {
            let mut set = IntervalSet::default();
            let mut model = [false; 512];
            for _ in 0..20 {
                let s = next(512);
                let e = (s + next(40)).min(512);
                set.insert(s, e);
                model[s as usize..e as usize].fill(true);
                let qs = next(512);
                let qe = (qs + next(40)).min(512);
                let expect = model[qs as usize..qe as usize].iter().any(|&b| b);
                assert_eq!(set.overlaps(qs, qe), expect, "query {qs}..{qe}");
            }
        }
    }

    #[test]
    fn clearing_gives_back_the_room_of_a_large_batch() {
        let mut t = HazardTracker::default();
        let many: Vec<Access> = (1..=4096).map(|b| write(b, 0, 4)).collect();
        t.record(&many);
        assert!(t.buffers.capacity() >= 4096);
        t.clear();
        // The next barrier after a one-buffer command costs one buffer's
        // room, not 4,096.
        t.record(&[write(1, 0, 4)]);
        t.clear();
        assert!(t.buffers.capacity() < 16, "{}", t.buffers.capacity());
        assert!(!t.conflicts(&[write(1, 0, 4)]));
    }

    #[test]
    fn disjoint_commands_need_no_barrier() {
        let mut t = HazardTracker::default();
        for i in 0..100 {
            let accesses = [
                read(1, i * 256, i * 256 + 256),
                write(2, i * 256, i * 256 + 256),
            ];
            assert!(!t.conflicts(&accesses));
            t.record(&accesses);
        }
    }

    #[test]
    fn read_after_write_write_after_read_and_write_after_write_conflict() {
        let mut t = HazardTracker::default();
        t.record(&[write(1, 0, 16)]);
        assert!(t.conflicts(&[read(1, 8, 9)]), "read after write");
        assert!(t.conflicts(&[write(1, 15, 20)]), "write after write");
        assert!(!t.conflicts(&[read(1, 16, 32)]));
        assert!(!t.conflicts(&[write(2, 0, 16)]), "another buffer");
        t.clear();
        t.record(&[read(1, 0, 16)]);
        assert!(t.conflicts(&[write(1, 0, 1)]), "write after read");
        assert!(!t.conflicts(&[read(1, 0, 16)]), "read after read");
        t.clear();
        assert!(!t.conflicts(&[write(1, 0, 16)]), "nothing after a clear");
    }
}
