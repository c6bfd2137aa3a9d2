//! The record buffer's arithmetic: slot sizes, capacities under the
//! binding's limits, and which slots the host reads.

use super::format::{parse, Arg, ArgKind, ArgType};
use super::{Call, Printf, HEADER_WORDS};

/// A table of calls printing `values` 32-bit unsigned values each.
fn table(values: &[u32]) -> Printf {
    let calls = values
        .iter()
        .map(|&n| {
            let arg = Arg::Value(ArgType {
                kind: ArgKind::Unsigned,
                width: 32,
                components: 1,
            });
            let text = vec!["%u"; n as usize].join(" ");
            Call {
                format: parse(&text, &vec![arg; n as usize]).unwrap(),
                location: None,
                assert_line: None,
            }
        })
        .collect();
    Printf {
        set: 0,
        binding: 0,
        calls,
    }
}

#[test]
fn a_slot_is_the_largest_record_in_whole_uvec4s() {
    assert_eq!(table(&[]).slot_words(), 4);
    assert_eq!(table(&[0]).slot_words(), 4);
    assert_eq!(table(&[1]).slot_words(), 8);
    assert_eq!(table(&[4]).slot_words(), 8);
    assert_eq!(table(&[1, 9, 2]).slot_words(), 16);
}

#[test]
fn the_capacity_is_whole_slots_at_least_one_and_fits_one_binding() {
    let t = table(&[1]); // 32-byte slots
    let big = u64::MAX;
    assert_eq!(t.capacity(64, big), 2);
    assert_eq!(t.capacity(95, big), 2);
    assert_eq!(t.capacity(96, big), 3);
    // Less than one slot asked for: one slot all the same.
    assert_eq!(t.capacity(0, big), 1);
    // And where the binding holds less than the two slots (a limit no
    // device has: Vulkan's least maxStorageBufferRange is 128 MiB).
    assert_eq!(t.capacity(1 << 20, 64), 1);
    // A binding of 128 MiB holds the header, the trash slot and the rest.
    let limit = 128 << 20;
    let c = t.capacity(1 << 30, limit);
    assert!(t.buffer_words(c) * 4 <= limit);
    assert!(t.buffer_words(c + 1) * 4 > limit);
    // The buffer's length in uvec4s stays a 32-bit number.
    let c = t.capacity(u64::MAX, big);
    let units = (u64::from(c) + 2) * u64::from(t.slot_words() / 4);
    assert!(units <= u64::from(u32::MAX), "{units}");
    assert_eq!(
        t.buffer_words(c),
        u64::from(HEADER_WORDS) + units * 4,
        "the header, the trash and assertion slots and the records"
    );
}

#[test]
fn the_host_reads_the_slots_below_the_cursor_and_counts_the_rest() {
    let t = table(&[1, 2]); // 8-word slots
    let slot = |call: u32, x: u32, v: &[u32]| {
        let mut w = vec![call, x, 0, 0];
        w.extend_from_slice(v);
        w.resize(8, 0xdead_beef);
        w
    };
    let data: Vec<u32> = [slot(1, 7, &[70]), slot(2, 3, &[30, 31]), slot(1, 9, &[90])].concat();
    let texts = |cursor, capacity| -> Vec<String> {
        t.records(&data, cursor, capacity)
            .into_iter()
            .map(|r| format!("{}:{}:{}", r.call, r.invocation[0], r.text))
            .collect()
    };
    assert_eq!(texts(3, 3), ["0:7:70", "1:3:30 31", "0:9:90"]);
    // The cursor says how many were written, and the capacity how many fit.
    assert_eq!(texts(2, 3), ["0:7:70", "1:3:30 31"]);
    assert_eq!(texts(5, 2), ["0:7:70", "1:3:30 31"]);
    assert_eq!(Printf::dropped(5, 2), 3);
    assert_eq!(Printf::dropped(2, 3), 0);
    // A slot whose number is no call's is skipped, not trusted.
    let mut bad = data.clone();
    bad[8] = 77;
    let read: Vec<usize> = t.records(&bad, 3, 3).iter().map(|r| r.call).collect();
    assert_eq!(read, [0, 0]);
    // Fewer words than the cursor claims: only whole slots are read.
    assert_eq!(t.records(&data[..20], 3, 3).len(), 2);
}
