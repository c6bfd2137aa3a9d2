//! Kernels that talk back: `debugPrintfEXT` (`NonSemantic.DebugPrintf`'s
//! instruction 1) rewritten into appends to a record buffer the runtime
//! binds, and assertions (`VK_ASSERT` of [`INCLUDE`]), with no layer.
//!
//! Each call becomes: an atomic add of the record's size to the buffer's
//! cursor; the record (its format's number, the invocation's global id
//! and the argument values, each a 32-bit word or two) written at the
//! offset it got where the record fits below the capacity, else into a
//! trash area past it, and the dropped count raised; no branch is added.
//! The host reads the records once the dispatch completes (`Format`
//! renders them). The buffer's layout, in 32-bit words: cursor, capacity,
//! dropped, 0, then the records ([`HEADER_WORDS`]).
//!
//! A kernel without a call is not touched; a call no invocation reaches
//! costs the branch around it where the driver skips such a branch (GPUs,
//! Mesa 25's lavapipe), and its append, masked off, where it runs both
//! sides (Mesa 22's lavapipe).

mod arguments;
pub mod format;
#[cfg(test)]
mod format_tests;
mod parts;
mod pass;

pub use format::{Arg, ArgKind, ArgType, Conversion, Format, Piece};
pub(crate) use pass::instrument;

/// The words before the records: cursor, capacity, dropped, unused.
pub const HEADER_WORDS: u32 = 4;

/// Words of every record before its values: the format's number (from 1:
/// a zero word is a record never written), and the global invocation id.
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
    /// The most words one record takes: the trash area past the capacity.
    pub fn max_record_words(&self) -> u32 {
        self.calls
            .iter()
            .map(Call::record_words)
            .max()
            .unwrap_or(RECORD_PREFIX_WORDS)
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
    /// The records of a buffer's data words `data` (after the header)
    /// that the cursor `cursor` and capacity `capacity` say were written,
    /// in the order they were appended.
    pub fn records(&self, data: &[u32], cursor: u32, capacity: u32) -> Vec<Record> {
        let end = (cursor.min(capacity) as usize).min(data.len());
        let mut out = Vec::new();
        let mut at = 0usize;
        while at < end {
            let number = data[at] as usize;
            let Some(call) = number.checked_sub(1).and_then(|i| self.calls.get(i)) else {
                break; // a record that did not fit, never written
            };
            let len = call.record_words() as usize;
            if at + len > end {
                break;
            }
            let words = &data[at..at + len];
            out.push(Record {
                call: number - 1,
                invocation: [words[1], words[2], words[3]],
                text: call.format.render(&words[RECORD_PREFIX_WORDS as usize..]),
            });
            at += len;
        }
        out
    }
}
