//! [`Kept`]: allocations kept between calls for reuse, bounded in number
//! and in bytes. A communicator keeps its pinned staging buffers, its
//! pieces' buffers and its requests' buffers in them (`transport::pool`):
//! a large allocation made afresh at every call is fresh pages, faulted in
//! and cleared each time.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// Allocations of type `A` kept for reuse: at most `max_count` of them and
/// `max_bytes` in all, the oldest dropped first when either bound is
/// passed; an allocation larger than `max_bytes` (or of no bytes) is not
/// kept at all. [`take`](Self::take) hands out the smallest that fits.
pub(crate) struct Kept<A> {
    max_count: usize,
    max_bytes: usize,
    /// Oldest first, each with its size in bytes.
    items: Mutex<VecDeque<(usize, A)>>,
}

impl<A> Kept<A> {
    pub(crate) const fn new(max_count: usize, max_bytes: usize) -> Kept<A> {
        Kept {
            max_count,
            max_bytes,
            items: Mutex::new(VecDeque::new()),
        }
    }

    /// The kept allocation that fits and is smallest, taken out: `fits`
    /// gives an allocation's size where it fits, `None` where it does not.
    pub(crate) fn take(&self, fits: impl Fn(&A) -> Option<usize>) -> Option<A> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let best = (items.iter().enumerate())
            .filter_map(|(i, (_, item))| fits(item).map(|size| (i, size)))
            .min_by_key(|&(_, size)| size)
            .map(|(i, _)| i);
        best.and_then(|i| items.remove(i)).map(|(_, item)| item)
    }

    /// Keeps `item`, of `bytes` bytes, dropping the oldest kept beyond the
    /// bounds (outside the lock: dropping may free device memory).
    pub(crate) fn keep(&self, bytes: usize, item: A) {
        if bytes == 0 || bytes > self.max_bytes || self.max_count == 0 {
            return;
        }
        let mut dropped = Vec::new();
        {
            let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
            items.push_back((bytes, item));
            let mut total: usize = items.iter().map(|&(b, _)| b).sum();
            while items.len() > self.max_count || total > self.max_bytes {
                let Some((b, oldest)) = items.pop_front() else {
                    break;
                };
                total -= b;
                dropped.push(oldest);
            }
        }
        drop(dropped);
    }

    /// The sizes kept, oldest first.
    #[cfg(test)]
    pub(crate) fn sizes(&self) -> Vec<usize> {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.iter().map(|&(b, _)| b).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smallest_that_fits_within_both_bounds() {
        let kept = Kept::<Vec<u8>>::new(3, 100);
        let fits = |len: usize| move |v: &Vec<u8>| (v.capacity() >= len).then_some(v.capacity());
        for n in [40, 10, 30] {
            kept.keep(n, Vec::with_capacity(n));
        }
        assert_eq!(kept.sizes(), [40, 10, 30]);
        // The smallest that holds 20 bytes; none holds 50.
        assert_eq!(kept.take(fits(20)).map(|v| v.capacity()), Some(30));
        assert!(kept.take(fits(50)).is_none());
        assert_eq!(kept.sizes(), [40, 10]);
        // Past the count: the oldest goes.
        kept.keep(5, Vec::with_capacity(5));
        kept.keep(6, Vec::with_capacity(6));
        assert_eq!(kept.sizes(), [10, 5, 6]);
        // Past the bytes, whatever the count: as many of the oldest as it
        // takes. Nothing empty, nothing over the bound.
        kept.keep(90, Vec::with_capacity(90));
        assert_eq!(kept.sizes(), [6, 90]);
        kept.keep(0, Vec::new());
        kept.keep(101, Vec::with_capacity(101));
        assert_eq!(kept.sizes(), [6, 90]);
        // A bound of nothing keeps nothing.
        let none = Kept::<Vec<u8>>::new(0, 100);
        none.keep(1, vec![0]);
        assert!(none.sizes().is_empty());
    }
}
