//! Hostile bytes in a live segment: whatever another process writes into the tables and
//! slots, the client's operations return (no panic, no out-of-bounds access, no endless
//! loop) and reading clamps what it must.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use shmring::{ConsumerOptions, Ring};
use shmring_layout::{SlotHeader, MAX_SEQUENCE, SEQ_LINES_OFFSET, STAMP_WRITING};

mod common;
use common::{hostile, poll_quiet};
use shmring_testkit::Namespace;

/// Every operation that cannot wait forever by design, on a ring whose bytes were damaged.
/// Returns how many events the consumers were handed (each checked against the slot).
fn exercise(ring: &Ring) -> usize {
    let mut handed = 0;
    let _ = ring.info();
    let _ = ring.state();
    let _ = ring.head();
    if let Ok(mut p) = ring.producer() {
        let _ = p.try_publish(&[7; 8]);
        let _ = p.publish_timeout(&[7; 8], std::time::Duration::from_micros(200));
    }
    for opts in [
        ConsumerOptions::anonymous(),
        ConsumerOptions::durable("c0"),
        ConsumerOptions::durable("c1").optional(),
    ] {
        if let Ok(mut c) = ring.consumer(opts) {
            for _ in 0..3 {
                // Checked outside the handler: poll_once catches a handler's panic.
                let mut longest = 0;
                let got = poll_quiet(ring, &mut c, |ev| longest = longest.max(ev.bytes().len()));
                handed += got.unwrap_or(0);
                assert!(longest <= ring.max_payload());
            }
            let _ = c.has_pending();
        }
    }
    handed
}

/// A word to write: anything, or (three times in four) a value at an edge of what the
/// fields hold: 0, small sequence-like numbers, the `WRITING` bit, `STAMP_EMPTY` and its
/// neighbours, 32-bit limits in either half, and the largest valid sequence.
fn hostile_word() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => any::<u64>(),
        3 => prop_oneof![
            Just(0u64),
            0u64..16,
            (0u64..16).prop_map(|s| s | STAMP_WRITING),
            (0u64..4).prop_map(|d| u64::MAX - d),
            Just(u64::from(u32::MAX)),
            Just(u64::from(u32::MAX) << 32),
            Just(MAX_SEQUENCE),
            Just(MAX_SEQUENCE - 1),
        ],
    ]
}

/// Writes anywhere past the validated header (sequence lines, tables, slots), half of them
/// into the slot headers and consumer entries (what a consumer reads), of edge values more
/// often than not. The oracle is the client's: every call returns, nothing panics, no event
/// is longer than a slot's payload. Prints how many cases damaged a slot header or a
/// consumer entry and still had events handed to a handler (where the clamp is checked),
/// and fails if those are few.
#[test]
fn damaged_tables_and_slots_never_panic() {
    const CASES: u32 = 64;
    let g = *Ring::create(Namespace::concurrent("geo").name(), "r", &hostile())
        .unwrap()
        .geometry();
    let reader = g.consumers_offset..g.producers_offset;
    let slot_header = move |k: u64, field: u64| {
        g.slots_offset + (k % g.capacity) * u64::from(g.slot_size) + (field % 2) * 8
    };
    let target = prop_oneof![
        1 => any::<u64>().prop_map(|a| (a, false)),
        1 => (any::<u64>(), any::<u64>()).prop_map(move |(k, f)| (slot_header(k, f), true)),
        1 => any::<u64>().prop_map(move |a| (reader.start + a % (reader.end - reader.start), true)),
    ];
    let writes = proptest::collection::vec((target, hostile_word()), 1..24);
    let reached = AtomicU32::new(0);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    });
    let result = runner.run(&writes, |writes| {
        let ns = Namespace::concurrent("prop");
        let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
        {
            let mut p = ring.producer().unwrap();
            let _c = ring.consumer(ConsumerOptions::durable("c0")).unwrap();
            for i in 0..6u64 {
                p.try_publish(&i.to_le_bytes()).unwrap();
            }
        }
        let total = ring.geometry().total_size;
        let start = SEQ_LINES_OFFSET as u64;
        let file = OpenOptions::new().write(true).open(ring.path()).unwrap();
        let mut read_side = false;
        for ((at, aimed), value) in writes {
            let off = start + at.saturating_sub(start) % (total - start - 8);
            file.write_all_at(&value.to_ne_bytes(), off & !7).unwrap();
            read_side |= aimed;
        }
        if exercise(&ring) > 0 && read_side {
            reached.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let reached = reached.into_inner();
    println!("damaged tables: {reached} of {CASES} cases damaged what a consumer reads and still delivered");
    assert!(reached >= CASES / 8, "{reached} of {CASES}");
}

#[test]
fn a_corrupt_length_is_clamped_and_counted() {
    let ns = Namespace::concurrent("len");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    p.publish(b"hello").unwrap();
    let off = ring.geometry().slot_offset(0) + std::mem::offset_of!(SlotHeader, len) as u64;
    let file = OpenOptions::new().write(true).open(ring.path()).unwrap();
    file.write_all_at(&u32::MAX.to_ne_bytes(), off).unwrap();
    let mut lens = Vec::new();
    poll_quiet(&ring, &mut c, |ev| lens.push(ev.bytes().len())).unwrap();
    assert_eq!(lens, vec![ring.max_payload()]);
    assert_eq!(c.stats().clamped, 1);
}
