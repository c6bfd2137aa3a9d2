//! Locking the operations of several buffer memories at once, always in
//! address order, so that two threads never wait for each other.

use std::sync::Arc;

use super::{BufferMemory, OpsGuard};

/// Locks the operations of two different memories exclusively, in address
/// order as [`lock_all`] takes them (for an operation of several commands
/// on both, a copy between devices): returns `a`'s guard, then `b`'s.
pub(crate) fn lock_two<'a>(a: &'a BufferMemory, b: &'a BufferMemory) -> [OpsGuard<'a>; 2] {
    if (a as *const BufferMemory) < (b as *const BufferMemory) {
        let first = a.lock_ops(true);
        [first, b.lock_ops(true)]
    } else {
        let first = b.lock_ops(true);
        [a.lock_ops(true), first]
    }
}

/// Shared locks on the operations of several memories (see `lock_all`).
pub(crate) struct OpsGuards<'a> {
    _small: [Option<OpsGuard<'a>>; 8],
    _large: Vec<OpsGuard<'a>>,
}

/// Locks the operations of every memory in `memories` (shared), in address
/// order so that two threads never wait for each other, skipping `held`
/// (which the caller has locked already) and repeats. Allocates nothing for
/// up to eight memories.
pub(crate) fn lock_all<'a>(
    memories: impl Iterator<Item = &'a Arc<BufferMemory>>,
    held: Option<&BufferMemory>,
) -> OpsGuards<'a> {
    let address = |m: &Arc<BufferMemory>| Arc::as_ptr(m) as usize;
    let mut sorted: [Option<&'a Arc<BufferMemory>>; 8] = [None; 8];
    let mut overflow: Vec<&'a Arc<BufferMemory>> = Vec::new();
    let mut n = 0;
    for m in memories {
        if held.is_some_and(|h| std::ptr::eq(h, &**m)) {
            continue;
        }
        match sorted.get_mut(n) {
            Some(slot) => *slot = Some(m),
            None => overflow.push(m),
        }
        n += 1;
    }
    let mut guards = OpsGuards {
        _small: Default::default(),
        _large: Vec::new(),
    };
    if overflow.is_empty() {
        let list = &mut sorted[..n];
        list.sort_unstable_by_key(|m| m.map_or(0, address));
        let mut last = 0;
        let mut slots = guards._small.iter_mut();
        for m in list.iter().flatten() {
            if address(m) != last {
                last = address(m);
                if let Some(slot) = slots.next() {
                    *slot = Some(m.lock_ops(false));
                }
            }
        }
    } else {
        overflow.extend(sorted.iter().flatten().copied());
        overflow.sort_unstable_by_key(|m| address(m));
        overflow.dedup_by_key(|m| address(m));
        guards._large = overflow.iter().map(|m| m.lock_ops(false)).collect();
    }
    guards
}
