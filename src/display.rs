//! Printing buffers the way the seed's `write_to` does:
//! `DeviceBuffer([1, 2, 3])`; 1000 elements or more print the first three
//! and the last three: `HostBuffer([0.0, 1.0, 2.0, ..., 998.0, 999.0, 1000.0])`.
//! Elements print with `Debug` (integers plainly, floats in shortest
//! round-trip form with `.0` on whole values). A read that fails prints its
//! error inside the parentheses instead of panicking. Both ends of a long
//! buffer come from one snapshot: one operation on the buffer, which no
//! other operation falls between.

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
/// `read(ranges)` reading the elements of the (start, len) ranges needed,
/// one after the other, in one snapshot.
fn elements<T: Debug>(
    len: usize,
    read: impl FnOnce(&[(usize, usize)]) -> Result<Vec<T>>,
) -> Result<String> {
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
        list(&mut out, &read(&[(0, len)])?);
    } else {
        let ends = read(&[(0, EDGE), (len - EDGE, EDGE)])?;
        let (head, tail) = ends.split_at(EDGE.min(ends.len()));
        list(&mut out, head);
        out.push_str(", ..., ");
        list(&mut out, tail);
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
    /// The elements of `T` of each (start, len) range, one range after the
    /// other, read without writing anything back, as one operation (under
    /// the memory's exclusive operation lock): no operation on the buffer
    /// falls between the ranges' reads.
    fn read_elements<T: Pod>(&self, ranges: &[(usize, usize)]) -> Result<Vec<T>> {
        let op = "Display::fmt";
        let views = ranges
            .iter()
            .map(|&(start, len)| self.sub_view::<T>(op, String::new, start, len))
            .collect::<Result<Vec<View>>>()?;
        let total = ranges.iter().map(|r| r.1).sum();
        let mut out = vec![T::zeroed(); total];
        let ctx = self.memory.owner();
        let _ops = self.memory.lock_ops(true);
        let mut rest: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        for view in &views {
            let (part, after) = std::mem::take(&mut rest).split_at_mut(view.bytes as usize);
            crate::transfer::download_held(&ctx, op, &view.memory, view.offset, part)?;
            rest = after;
        }
        Ok(out)
    }
}

impl<T: Pod + Debug> Display for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let contents = elements(self.len(), |ranges| self.view.read_elements::<T>(ranges));
        write_buffer(f, "DeviceBuffer", contents)
    }
}

impl<T: Pod + Debug> Display for HostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let contents = self.as_slice().and_then(|slice| {
            elements(slice.len(), |ranges| {
                Ok(ranges
                    .iter()
                    .flat_map(|&(start, len)| &slice[start..start + len])
                    .copied()
                    .collect())
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
