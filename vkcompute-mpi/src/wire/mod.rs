//! The wire: what the ranks say to each other besides the data. The
//! header every operation exchanges first ([`header`]), the tags the
//! crate's own messages take, and the point-to-point protocol as one
//! state machine per message end ([`op`]): header, answer, data pieces,
//! trailer, in MPI's matching order (`raw::Ticket`).
//!
//! The same-node transport's memory reaches the protocol through two small
//! traits ([`SharedMessages`], [`LentOutbox`]), so that the protocol knows
//! nothing of how that memory is exported or imported.

mod header;
mod op;
mod owned;

pub(crate) use header::{agree, Failure, Header, Kind, SharedMemory, MAX_NOTES};
pub(crate) use op::{Body, End, Op, Step};
pub(crate) use owned::{Dest, Owned, PinnedBuffers};

use vkcompute::DeviceBuffer;

use crate::error::{Error, Result};

/// The largest tag [`Communicator::send`](crate::Communicator::send) and
/// [`Communicator::recv`](crate::Communicator::recv) take. Higher tags
/// carry this crate's own messages (answers, data pieces and the
/// collectives' steps), on the communicator's private duplicate.
pub const MAX_TAG: i32 = 8191;

/// Tag offsets of a message's answer and data, above the user's tag.
pub(crate) const ACK_TAGS: i32 = MAX_TAG + 1;
pub(crate) const DATA_TAGS: i32 = 2 * (MAX_TAG + 1);
/// The tag of the collectives' point-to-point steps (below 32767, the
/// smallest `MPI_TAG_UB` the standard allows).
pub(crate) const COLLECTIVE_TAG: i32 = 3 * (MAX_TAG + 1);

/// A trailer after the data of a message: 0, or the sender's `Failure`
/// code where a piece could not be read after the header went out.
pub(crate) const TRAILER_BYTES: usize = 8;

/// The receiving side of the same-node transport, as the protocol sees
/// it: messages whose data lies in memory the sender exported.
pub(crate) trait SharedMessages: Send + Sync {
    /// The memory `source` announces a message in (`shared`, from its
    /// header), imported where new; its descriptor comes off the socket
    /// whatever becomes of the message.
    fn inbox(
        &self,
        op: &'static str,
        source: i32,
        shared: SharedMemory,
    ) -> Result<DeviceBuffer<u8>>;

    /// Runs `write` (which copies bytes of `inbox` out on the device)
    /// between an acquire and a release of bytes `own` of the memory (the
    /// range the sender released: the whole memory, or one piece), and
    /// submits the work without waiting for it ([`settle`](Self::settle)
    /// does), `message` being `(source, inbox)`. `Ok(Some(e))`: `write`
    /// failed, the memory is released all the same.
    fn take_part(
        &self,
        op: &'static str,
        message: (i32, &DeviceBuffer<u8>),
        own: std::ops::Range<usize>,
        write: &mut dyn FnMut() -> vkcompute::Result<()>,
    ) -> Result<Option<Error>>;

    /// Waits for the device work of [`take_part`](Self::take_part): the
    /// sender may write the memory again once this returns.
    fn settle(&self, op: &'static str) -> Result<()>;
}

/// A sender's memory on the same-node transport, lent to one message
/// until the receiver answers.
pub(crate) trait LentOutbox: Send {
    /// The receiver answered (`refused`: it refused the message, maybe
    /// without importing the memory): the memory goes back to the sender.
    fn answered(self: Box<Self>, refused: bool);

    /// The pieces the sender is still writing, in the order it writes
    /// them (their number is the header's `Header::notes`); 0 where the
    /// data was written before the header.
    fn pieces(&self) -> usize {
        0
    }

    /// Waits until piece `index` is written and released to the receiver.
    /// Errors: the device's, where the piece could not be written.
    fn piece_written(&mut self, _op: &'static str, _index: usize) -> Result<()> {
        Ok(())
    }
}
