//! Hostile bytes in a live segment: whatever another process writes into the tables and
//! slots, the client's operations return (no panic, no out-of-bounds access, no endless
//! loop) and reading clamps what it must.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;
use shmring::{ConsumerOptions, Ring, RingConfig};
use shmring_layout::{SlotHeader, SEQ_LINES_OFFSET};

mod common;
use common::{poll_quiet, Ns};

fn cfg() -> RingConfig {
    RingConfig {
        capacity: 8,
        slot_size: 64,
        max_consumers: 3,
        max_producers: 2,
        ..RingConfig::default()
    }
}

/// Every operation that cannot wait forever by design, on a ring whose bytes were damaged.
fn exercise(ring: &Ring) {
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
                let _ = poll_quiet(ring, &mut c, |ev| longest = longest.max(ev.bytes().len()));
                assert!(longest <= ring.max_payload());
            }
            let _ = c.has_pending();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random writes anywhere past the validated header (sequence lines, tables, slots).
    #[test]
    fn damaged_tables_and_slots_never_panic(
        writes in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..24)
    ) {
        let ns = Ns::new("prop");
        let ring = Ring::create(&ns.0, "r", &cfg()).unwrap();
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
        for (at, value) in writes {
            let off = start + at % (total - start - 8);
            file.write_all_at(&value.to_ne_bytes(), off & !7).unwrap();
        }
        exercise(&ring);
    }
}

#[test]
fn a_corrupt_length_is_clamped_and_counted() {
    let ns = Ns::new("len");
    let ring = Ring::create(&ns.0, "r", &cfg()).unwrap();
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
