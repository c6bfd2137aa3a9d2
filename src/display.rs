//! Printing buffers the way the seed's `write_to` does:
//! `DeviceBuffer([1, 2, 3])`; 1000 elements or more print the first three
//! and the last three: `HostBuffer([0.0, 1.0, 2.0, ..., 998.0, 999.0, 1000.0])`.
//! Elements print with `Debug` (integers plainly, floats in shortest
//! round-trip form with `.0` on whole values). A read that fails prints its
//! error inside the parentheses instead of panicking.

use std::fmt::{self, Debug, Display, Write as _};

use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::host::HostBuffer;
use crate::view::View;

/// Buffers of this many elements or more print only their ends.
const SUMMARY_FROM: usize = 1000;
/// Elements printed at each end of a long buffer.
const EDGE: usize = 3;

/// `[a, b, c]`, or `[a, b, c, ..., x, y, z]` for long buffers, with
/// `read(start, len)` reading the elements needed.
fn elements<T: Debug>(len: usize, read: impl Fn(usize, usize) -> Result<Vec<T>>) -> Result<String> {
    let mut out = String::from("[");
    let list = |out: &mut String, items: &[T]| {
        for (i, v) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            // Writing to a String cannot fail.
            let _ = write!(out, "{v:?}");
        }
    };
    if len < SUMMARY_FROM {
        list(&mut out, &read(0, len)?);
    } else {
        list(&mut out, &read(0, EDGE)?);
        out.push_str(", ..., ");
        list(&mut out, &read(len - EDGE, EDGE)?);
    }
    out.push(']');
    Ok(out)
}

fn write_buffer(f: &mut fmt::Formatter<'_>, kind: &str, contents: Result<String>) -> fmt::Result {
    match contents {
        Ok(s) => write!(f, "{kind}({s})"),
        Err(e) => write!(f, "{kind}(<unreadable: {e}>)"),
    }
}

impl View {
    /// `len` elements of `T` starting at element `start`, read without
    /// writing anything back.
    fn read_elements<T: Pod>(&self, start: usize, len: usize) -> Result<Vec<T>> {
        let op = "Display::fmt";
        self.sub_view::<T>(op, String::new, start, len)?.to_vec(op)
    }
}

impl<T: Pod + Debug> Display for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let contents = elements(self.len(), |start, len| {
            self.view.read_elements::<T>(start, len)
        });
        write_buffer(f, "DeviceBuffer", contents)
    }
}

impl<T: Pod + Debug> Display for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let contents = self.as_slice().and_then(|slice| {
            elements(slice.len(), |start, len| {
                Ok(slice[start..start + len].to_vec())
            })
        });
        write_buffer(f, "HostBuffer", contents)
    }
}

impl<T: Pod> Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(&Self::type_name())
            .field("len", &self.len())
            .field("raw", &self.raw())
            .finish()
    }
}
