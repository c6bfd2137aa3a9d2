//! Kernels that talk back: `debugPrintfEXT` (`NonSemantic.DebugPrintf`'s
//! instruction 1) rewritten into appends to a record buffer the runtime
//! binds, and assertions (`VK_ASSERT` of [`INCLUDE`]), with no layer.
//!
//! Every record of a module takes one slot of [`Printf::slot_words`]
//! words (its largest call's record, rounded up to whole `uvec4`s). Each
//! call becomes: an atomic add of one to the buffer's cursor, which gives
//! the record its number `n`; then the record (its format's number, the
//! invocation's global id, and the argument values, each a 32-bit word or
//! two) stored four words at a time into slot `n + 2` where that slot is
//! in the buffer, else into slot 0, the trash slot. An assertion's record
//! that does not fit goes instead into slot 1, the assertion slot, where
//! no other took it before (an atomic exchange on the header's word 1):
//! a failed assertion is never lost to a full buffer. No branch is added,
//! and nothing but the cursor (and an assertion's claim) is read or
//! counted: the slot count comes from the buffer's length
//! (`OpArrayLength`), and the host knows how many records were dropped
//! from the cursor. The host reads the records once the dispatch
//! completes (`Format` renders them). The buffer's layout, in 32-bit
//! words: the cursor, the assertion slot's claim and two unused words
//! ([`HEADER_WORDS`]), then the trash slot, the assertion slot and the
//! records' slots. Every store stays inside the buffer: a slot past its
//! end, and a cursor that wrapped past 2^32 records in one dispatch (whose
//! later records then take earlier ones' slots, and whose dropped count is
//! then wrong), go to the trash slot or to a record's slot.
//!
//! A kernel without a call is not touched; a call no invocation reaches
//! costs the branch around it where the driver skips such a branch (GPUs,
//! Mesa 25's lavapipe), and its append (an atomic and a store per four
//! words), masked off, where it runs both sides (Mesa 22's lavapipe).

mod arguments;
pub mod format;
#[cfg(test)]
mod format_tests;
mod parts;
mod pass;
#[cfg(test)]
mod slot_tests;

pub use format::{Arg, ArgKind, ArgType, Conversion, Format, Piece};
pub(crate) use pass::instrument;

/// The words before the slots: the cursor (records asked for), the
/// assertion slot's claim (1 once an assertion's record took it), then two
/// unused words, so that the slots start 16-byte aligned.
pub const HEADER_WORDS: u32 = 4;

/// The slot of an assertion's record that did not fit (the first such to
/// claim it); slot 0 is the trash slot.
pub const ASSERTION_SLOT: u32 = 1;

/// The slot of record 0; record `n` takes slot `n + FIRST_RECORD_SLOT`.
pub const FIRST_RECORD_SLOT: u32 = 2;

/// Words of every record before its values: the format's number (call
/// `k` writes `k + 1`), and the global invocation id.
pub const RECORD_PREFIX_WORDS: u32 = 4;

/// The marker `VK_ASSERT` passes as a call's last argument (after the
/// line): the call is an assertion.
pub const ASSERT_MARKER: u32 = 0x07A5_5E27;

/// What `#include <vkcompute.glsl>` brings: the printf extension and the
/// assertion macros. `VK_ASSERT(cond, "message")` (and `VK_ASSERT1` to
/// `VK_ASSERT3` with a format and one to three values) records the message
/// and returns from the function it is in (in `main`, the invocation ends;
/// GLSL has no other way to stop one).
pub const INCLUDE: &str = "\
// vkcompute.glsl: printf and assertions for kernels loaded by vkcompute.
#ifndef VKCOMPUTE_GLSL
#define VKCOMPUTE_GLSL
#extension GL_EXT_debug_printf : require
#define VK_ASSERT(cond, msg) if (!(cond)) { debugPrintfEXT(msg, __LINE__, 0x07A55E27u); return; }
#define VK_ASSERT1(cond, fmt, a) if (!(cond)) { debugPrintfEXT(fmt, a, __LINE__, 0x07A55E27u); return; }
#define VK_ASSERT2(cond, fmt, a, b) if (!(cond)) { debugPrintfEXT(fmt, a, b, __LINE__, 0x07A55E27u); return; }
#define VK_ASSERT3(cond, fmt, a, b, c) if (!(cond)) { debugPrintfEXT(fmt, a, b, c, __LINE__, 0x07A55E27u); return; }
#endif
";

/// The name `#include` finds [`INCLUDE`] under.
pub const INCLUDE_NAME: &str = "vkcompute.glsl";

/// One call site's format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// How its record's values render.
    pub format: Format,
    /// Where the call is: (source file, line), from the module's line
    /// information where it has some.
    pub location: Option<(String, u32)>,
    /// For an assertion, its line (`__LINE__` where `VK_ASSERT` stands).
    pub assert_line: Option<u32>,
}

impl Call {
    /// The words of one record of this call.
    pub fn record_words(&self) -> u32 {
        RECORD_PREFIX_WORDS + self.format.value_words()
    }
}

/// What the rewriting made: where the record buffer binds, and each call
/// site (record `k`'s first word is `k + 1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Printf {
    /// The descriptor set of the record buffer.
    pub set: u32,
    /// Its binding.
    pub binding: u32,
    /// The call sites, by number.
    pub calls: Vec<Call>,
}

impl Printf {
    /// The words of one slot: the most words one record of this module
    /// takes, rounded up to a multiple of four (records are stored as
    /// `uvec4`s).
    pub fn slot_words(&self) -> u32 {
        self.calls
            .iter()
            .map(Call::record_words)
            .max()
            .unwrap_or(RECORD_PREFIX_WORDS)
            .next_multiple_of(4)
    }

    /// The records a buffer holds when `bytes` of records are asked for
    /// and one binding covers at most `max_binding_bytes`: whole slots, at
    /// least one (so that an assertion is never lost to a small setting),
    /// and no more than the binding, with the header and the trash and
    /// assertion slots, covers.
    pub fn capacity(&self, bytes: u64, max_binding_bytes: u64) -> u32 {
        let slot = u64::from(self.slot_words());
        let asked = bytes / (slot * 4);
        // The whole buffer in one binding, and its length in `uvec4`s in a
        // 32-bit word (`OpArrayLength`).
        let binding = (max_binding_bytes / 4).saturating_sub(u64::from(HEADER_WORDS)) / slot;
        let length = u64::from(u32::MAX) / (slot / 4);
        let most = binding
            .min(length)
            .saturating_sub(u64::from(FIRST_RECORD_SLOT));
        asked.min(most).max(1) as u32
    }

    /// The words of a buffer of `capacity` records: the header, the trash
    /// and assertion slots and the records' slots.
    pub fn buffer_words(&self, capacity: u32) -> u64 {
        u64::from(HEADER_WORDS)
            + (u64::from(capacity) + u64::from(FIRST_RECORD_SLOT)) * u64::from(self.slot_words())
    }

    /// The records a dispatch asked for (its final cursor) and did not
    /// write, its buffer holding `capacity`.
    pub fn dropped(cursor: u32, capacity: u32) -> u32 {
        cursor.saturating_sub(capacity)
    }
}

/// One record read from a buffer: which call made it, the invocation, the
/// rendered text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The call's number (index into [`Printf::calls`]).
    pub call: usize,
    /// The global invocation id.
    pub invocation: [u32; 3],
    /// The text.
    pub text: String,
}

impl Printf {
    /// The records of a buffer's record slots `data` (the words from slot
    /// [`FIRST_RECORD_SLOT`] on), the cursor `cursor` and the capacity
    /// `capacity` saying how many were written, in the order they were
    /// appended.
    pub fn records(&self, data: &[u32], cursor: u32, capacity: u32) -> Vec<Record> {
        let slot = self.slot_words() as usize;
        let written = cursor.min(capacity) as usize;
        // Every slot below the cursor was written once the dispatch
        // completed; a number no call has is skipped, not trusted.
        data.chunks_exact(slot)
            .take(written)
            .filter_map(|words| self.record(words))
            .collect()
    }

    /// The record in one slot's `words`; `None` where its first word is
    /// no call's number (or the slot is short).
    pub fn record(&self, words: &[u32]) -> Option<Record> {
        let number = *words.first()? as usize;
        let call = self.calls.get(number.checked_sub(1)?)?;
        let values = words.get(RECORD_PREFIX_WORDS as usize..call.record_words() as usize)?;
        Some(Record {
            call: number - 1,
            invocation: [words[1], words[2], words[3]],
            text: call.format.render(values),
        })
    }
}
