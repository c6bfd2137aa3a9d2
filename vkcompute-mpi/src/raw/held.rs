//! Owned memory lent to MPI: a [`Held`] buffer posts sends from or
//! receives into its buffer, and gives the buffer back only once every
//! transfer over it is over. Dropped while some are under way (a request
//! abandoned after a timeout), it leaks the buffer instead of freeing
//! memory MPI may still touch. The memory of the non-blocking requests
//! (`Communicator::isend` and `irecv`), which outlive any one call.

use std::ops::Range;

use bytemuck::Pod;

use super::transfer::{irecv, isend, Transfer};
use super::Comm;
use crate::error::{Error, Result};

/// A buffer whose bytes stay where they are when the value moves (a heap
/// allocation, a pinned host buffer's mapping), which a [`Held`] may lend
/// to MPI.
///
/// # Safety
///
/// Once [`settle`](Self::settle) has returned `Ok`, and until a method of
/// the buffer that takes `&mut self` other than `bytes_mut` runs, `bytes`
/// and `bytes_mut` return the same memory, whether the value moves or
/// not, and nothing but these methods reaches that memory.
pub(crate) unsafe trait Stable: Send {
    /// Makes the buffer ready to be lent: waits for whatever else may
    /// reach its memory (the device's copies of a pinned buffer).
    fn settle(&mut self, _op: &'static str) -> Result<()> {
        Ok(())
    }
    /// The buffer's bytes.
    fn bytes(&self) -> &[u8];
    /// The buffer's bytes, to write.
    fn bytes_mut(&mut self) -> &mut [u8];
}

// SAFETY: a box's contents live on the heap, where moving the box leaves
// them.
unsafe impl<const N: usize> Stable for Box<[u8; N]> {
    fn bytes(&self) -> &[u8] {
        &self[..]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self[..]
    }
}

// SAFETY: a vector's elements live on the heap, where moving the vector
// leaves them; `Held` never resizes it.
unsafe impl<T: Pod + Send> Stable for Vec<T> {
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self)
    }
}

/// What MPI does with a [`Held`] buffer's memory now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lent {
    /// Nothing: the buffer is here.
    No,
    /// Sends read it.
    ToRead,
    /// Receives write it.
    ToWrite,
}

/// A buffer and the MPI transfers over it (see the module documentation).
pub(crate) struct Held<B: Stable> {
    /// `None` only while dropping, or once taken ([`take`](Self::take)).
    buf: Option<B>,
    transfers: Vec<Transfer>,
    lent: Lent,
}

impl<B: Stable> Held<B> {
    pub(crate) fn new(buf: B) -> Held<B> {
        Held {
            buf: Some(buf),
            transfers: Vec::new(),
            lent: Lent::No,
        }
    }

    /// The buffer, where no transfer is under way over it.
    pub(crate) fn get(&self) -> Option<&B> {
        (self.lent == Lent::No)
            .then_some(self.buf.as_ref())
            .flatten()
    }

    /// The buffer to write, where no transfer is under way over it.
    pub(crate) fn get_mut(&mut self) -> Option<&mut B> {
        (self.lent == Lent::No)
            .then_some(self.buf.as_mut())
            .flatten()
    }

    /// Takes the buffer back, where no transfer is under way over it
    /// (`None` otherwise, and once taken).
    pub(crate) fn take(&mut self) -> Option<B> {
        match self.lent {
            Lent::No => self.buf.take(),
            _ => None,
        }
    }

    /// Makes the buffer ready to be lent ([`Stable::settle`]), where no
    /// transfer is under way over it (nothing otherwise).
    pub(crate) fn settle(&mut self, op: &'static str) -> Result<()> {
        match (&mut self.buf, self.lent) {
            (Some(buf), Lent::No) => buf.settle(op),
            _ => Ok(()),
        }
    }

    /// Whether transfers over the buffer are under way.
    pub(crate) fn is_lent(&self) -> bool {
        self.lent != Lent::No
    }

    /// Posts `MPI_Isend`s of bytes `range` of the buffer to `dest` with
    /// `tag`, one message per `piece` bytes (the last shorter; none for an
    /// empty range). The buffer may be read by other sends
    /// meanwhile, not written: `false` where receives write it.
    pub(crate) fn send(
        &mut self,
        (op, comm): (&'static str, &Comm),
        (range, piece): (Range<usize>, usize),
        dest: i32,
        tag: i32,
    ) -> Result<bool> {
        if self.lent == Lent::ToWrite {
            return Ok(false);
        }
        let Some(buf) = &mut self.buf else {
            return Ok(false);
        };
        if self.lent == Lent::No {
            buf.settle(op)?;
        }
        let bytes = &buf.bytes()[range];
        self.lent = Lent::ToRead;
        for part in split(bytes.len(), piece) {
            let part = &bytes[part];
            // SAFETY: `part` lies in the buffer, which `Stable` keeps in
            // place, reached by nothing else, from its `settle` (above,
            // or before the first send that lent it) while it lives and
            // no `&mut` method runs (none can: `get_mut` refuses while
            // lent); it is not written until every transfer
            // over it completes (`get_mut` refuses while lent, and
            // receives are refused while sends read it), and a `Held`
            // dropped with transfers under way leaks the buffer.
            unsafe {
                isend(
                    op,
                    comm,
                    part.as_ptr(),
                    part.len(),
                    dest,
                    tag,
                    &mut self.transfers,
                )?
            };
        }
        Ok(true)
    }

    /// Posts `MPI_Irecv`s into bytes `range` of the buffer from `source`
    /// with `tag`, one message of exactly `piece` bytes each (the last
    /// shorter; none for an empty range). `false` where
    /// transfers over the buffer are under way already.
    pub(crate) fn recv(
        &mut self,
        (op, comm): (&'static str, &Comm),
        (range, piece): (Range<usize>, usize),
        source: i32,
        tag: i32,
    ) -> Result<bool> {
        if self.lent != Lent::No {
            return Ok(false);
        }
        let Some(buf) = &mut self.buf else {
            return Ok(false);
        };
        buf.settle(op)?;
        let bytes = &mut buf.bytes_mut()[range];
        self.lent = Lent::ToWrite;
        let base = bytes.as_mut_ptr();
        for part in split(bytes.len(), piece) {
            // SAFETY: `base + part` lies in the buffer, which `Stable`
            // keeps in place, reached by nothing else, from its `settle`
            // (above) while it lives and no `&mut` method runs (none can
            // while lent); nothing else reads or writes
            // it until every transfer over it completes (`get` and
            // `get_mut` refuse while lent), and a `Held` dropped with
            // transfers under way leaks the buffer.
            unsafe {
                irecv(
                    op,
                    comm,
                    base.add(part.start),
                    part.len(),
                    source,
                    tag,
                    &mut self.transfers,
                )?
            };
        }
        Ok(true)
    }

    /// Tests the transfers under way; `Ok(true)` once none is (the buffer
    /// is back). An error completes its transfer too; the first is
    /// returned once they are all over.
    pub(crate) fn poll(&mut self, op: &'static str, error: &mut Option<Error>) -> bool {
        let mut i = 0;
        while i < self.transfers.len() {
            match self.transfers[i].test(op) {
                Ok(false) => i += 1,
                Ok(true) => {
                    self.transfers.swap_remove(i);
                }
                Err(e) => {
                    self.transfers.swap_remove(i);
                    error.get_or_insert(e);
                }
            }
        }
        if self.transfers.is_empty() {
            self.lent = Lent::No;
        }
        !self.is_lent()
    }

    /// Cancels a receive under way as one message (`MPI_Cancel`, then
    /// `MPI_Wait`): whether nothing was received. Anything else under way
    /// (several messages, or sends) is left as it is: `Ok(false)`.
    pub(crate) fn cancel_receive(&mut self, op: &'static str) -> Result<bool> {
        if self.lent != Lent::ToWrite || self.transfers.len() != 1 {
            return Ok(false);
        }
        let cancelled = self.transfers[0].cancel(op)?;
        self.transfers.clear();
        self.lent = Lent::No;
        Ok(cancelled)
    }
}

impl<B: Stable> Drop for Held<B> {
    /// Leaks the buffer where MPI may still touch it.
    fn drop(&mut self) {
        if self.is_lent() {
            std::mem::forget(self.buf.take());
        }
    }
}

/// `len` bytes in messages of `piece` (none for none).
fn split(len: usize, piece: usize) -> impl Iterator<Item = Range<usize>> {
    let piece = piece.max(1);
    (0..len.div_ceil(piece)).map(move |i| i * piece..((i + 1) * piece).min(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_cover_the_range_and_an_empty_range_is_none() {
        assert_eq!(split(10, 4).collect::<Vec<_>>(), vec![0..4, 4..8, 8..10]);
        assert_eq!(split(0, 4).count(), 0);
        assert_eq!(split(3, 0).count(), 3);
    }
}
