//! Absurd configurations that pass the checksum: a header written by a buggy or hostile
//! creator, whose configuration words are consistent with their checksum but not with any
//! ring. `validate` must refuse them with the matching error, or accept only a geometry
//! whose every region lies inside the file (the client maps `total_size` bytes and trusts
//! every offset `Geometry` gives). The same oracle runs in `fuzz/fuzz_targets/validate.rs`.

use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use shmring_layout::{
    config_checksum, header_image, validate, ConfigWords, Geometry, Header, LayoutError,
    ProducerMode, CONSUMER_ENTRY_SIZE, HEADER_SIZE, LINE, MAX_CAPACITY, MAX_CONSUMERS,
    MAX_PRODUCERS, MAX_SEGMENT_SIZE, MAX_SLOT_SIZE, PRODUCER_ENTRY_SIZE, SLOT_FORMAT_FIXED,
    SLOT_FORMAT_SIZED, SLOT_FORMAT_STAMPED,
};

/// A header carrying `w` with a checksum that matches it.
fn header_with(w: &ConfigWords) -> [u8; HEADER_SIZE] {
    let valid = Geometry::new(16, 64, 1, 1, ProducerMode::Multi, 0).unwrap();
    let mut b = header_image(&valid, 0o600, 0);
    let mut put32 = |off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put32(offset_of!(Header, producer_mode), w.producer_mode);
    put32(offset_of!(Header, slot_size), w.slot_size);
    put32(offset_of!(Header, max_consumers), w.max_consumers);
    put32(offset_of!(Header, max_producers), w.max_producers);
    put32(offset_of!(Header, file_mode), w.file_mode);
    put32(offset_of!(Header, slot_format), w.slot_format);
    let mut put64 = |off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    put64(offset_of!(Header, capacity), w.capacity);
    put64(offset_of!(Header, optional_slack), w.optional_slack);
    put64(offset_of!(Header, created_unix_ns), w.created_unix_ns);
    put64(offset_of!(Header, total_size), w.total_size);
    put64(offset_of!(Header, config_checksum), config_checksum(w));
    b
}

fn words(capacity: u64, slot_size: u32, consumers: u32, producers: u32) -> ConfigWords {
    ConfigWords {
        producer_mode: ProducerMode::Multi as u32,
        capacity,
        slot_size,
        max_consumers: consumers,
        max_producers: producers,
        file_mode: 0o600,
        optional_slack: 0,
        created_unix_ns: 1,
        total_size: 1 << 20,
        slot_format: SLOT_FORMAT_STAMPED,
    }
}

/// The invariants of an accepted header.
fn check_accepted(v: &shmring_layout::Validated, len: u64) {
    let g = v.geometry;
    assert_eq!(g.total_size, len);
    assert!(g.total_size <= MAX_SEGMENT_SIZE);
    assert!(g.capacity.is_power_of_two() && g.capacity <= MAX_CAPACITY);
    if g.producer_mode == ProducerMode::Single {
        assert_eq!(g.max_producers, 1, "one entry for a single producer");
    }
    let align = if g.fixed { 8 } else { 64 };
    if g.sized {
        assert!(g.fixed && g.slot_size >= 16, "a length word and a payload");
    }
    assert!(g.slot_size <= MAX_SLOT_SIZE && g.slot_size.is_multiple_of(align));
    assert!(g.max_payload() <= g.slot_size as usize);
    assert!((1..=MAX_CONSUMERS).contains(&g.max_consumers));
    assert!((1..=MAX_PRODUCERS).contains(&g.max_producers));
    let last_c = g.consumer_offset(g.max_consumers - 1).unwrap();
    assert!(last_c + CONSUMER_ENTRY_SIZE as u64 <= g.producers_offset);
    let last_p = g.producer_offset(g.max_producers - 1).unwrap();
    assert!(last_p + PRODUCER_ENTRY_SIZE as u64 <= g.slots_offset);
    assert_eq!(g.slots_offset % LINE as u64, 0);
    for seq in [0, g.capacity - 1, u64::MAX] {
        assert!(g.slot_offset(seq) + u64::from(g.slot_size) <= g.total_size);
        if g.fixed {
            assert!(g.slot_offset(seq) + u64::from(g.slot_size) <= g.tombs_offset);
            assert!(g.tomb_offset(seq) + 8 <= g.total_size);
            assert_eq!(g.tombs_offset % LINE as u64, 0);
        }
    }
}

#[test]
fn absurd_capacities_are_refused_even_with_a_valid_checksum() {
    for capacity in [
        0,
        1,
        3,
        MAX_CAPACITY * 2,
        1 << 40,
        1 << 62,
        1 << 63,
        u64::MAX,
        u64::MAX - 1,
    ] {
        let img = header_with(&words(capacity, 64, 1, 1));
        assert_eq!(
            validate(&img, 1 << 20),
            Err(LayoutError::BadCapacity(capacity)),
            "capacity {capacity}"
        );
    }
    for slot in [0, 1, 63, 65, MAX_SLOT_SIZE + 64, u32::MAX - 63, u32::MAX] {
        let img = header_with(&words(16, slot, 1, 1));
        assert_eq!(validate(&img, 1 << 20), Err(LayoutError::BadSlotSize(slot)));
    }
    for n in [0, MAX_CONSUMERS + 1, u32::MAX] {
        let img = header_with(&words(16, 64, n, 1));
        assert_eq!(
            validate(&img, 1 << 20),
            Err(LayoutError::BadMaxConsumers(n))
        );
        let img = header_with(&words(16, 64, 1, n));
        assert_eq!(
            validate(&img, 1 << 20),
            Err(LayoutError::BadMaxProducers(n))
        );
    }
    // Each bound on its own is fine; together they exceed the segment limit.
    let img = header_with(&words(MAX_CAPACITY, MAX_SLOT_SIZE, 1, 1));
    assert!(matches!(
        validate(&img, u64::MAX),
        Err(LayoutError::TooLarge(_))
    ));
    let mut w = words(16, 64, 1, 1);
    w.slot_format = 3;
    assert_eq!(
        validate(&header_with(&w), 1 << 20),
        Err(LayoutError::BadSlotFormat(3))
    );
    for event in [0, 4, 12, MAX_SLOT_SIZE + 8, u32::MAX] {
        let mut w = words(16, event, 1, 1);
        w.slot_format = SLOT_FORMAT_FIXED;
        w.producer_mode = ProducerMode::Single as u32;
        assert_eq!(
            validate(&header_with(&w), 1 << 20),
            Err(LayoutError::BadEventSize(event))
        );
    }
    // A sized ring's slot is its length word (8 bytes) and at least 8 payload bytes.
    for slot in [0, 4, 8, 20, MAX_SLOT_SIZE + 8, u32::MAX] {
        let mut w = words(16, slot, 1, 1);
        w.slot_format = SLOT_FORMAT_SIZED;
        w.producer_mode = ProducerMode::Single as u32;
        assert_eq!(
            validate(&header_with(&w), 1 << 20),
            Err(LayoutError::BadMaxEventSize(slot.saturating_sub(8)))
        );
    }
    for format in [SLOT_FORMAT_FIXED, SLOT_FORMAT_SIZED] {
        let mut w = words(16, 16, 1, 1);
        w.slot_format = format;
        assert_eq!(
            validate(&header_with(&w), 1 << 20),
            Err(LayoutError::FixedNeedsSingleProducer)
        );
    }
    let mut w = words(16, 64, 1, 1);
    w.producer_mode = 7;
    assert_eq!(
        validate(&header_with(&w), 1 << 20),
        Err(LayoutError::BadProducerMode(7))
    );
    let mut w = words(16, 64, 1, 1);
    w.optional_slack = 17;
    assert_eq!(
        validate(&header_with(&w), 1 << 20),
        Err(LayoutError::BadSlack {
            slack: 17,
            capacity: 16
        })
    );
}

#[test]
fn a_header_that_disagrees_with_its_file_size_is_refused() {
    let g = Geometry::new(16, 64, 4, 2, ProducerMode::Multi, 0).unwrap();
    let mut w = g.config_words(0o600, 1);
    // The stored total size lies, consistently with the checksum.
    w.total_size = g.total_size + 4096;
    let img = header_with(&w);
    for len in [g.total_size, g.total_size + 4096] {
        assert_eq!(
            validate(&img, len),
            Err(LayoutError::SizeMismatch {
                expected: g.total_size,
                actual: len
            })
        );
    }
    // Truncated and grown files under an honest header.
    let img = header_image(&g, 0o600, 1);
    for len in [
        HEADER_SIZE as u64,
        g.total_size - 1,
        g.total_size + 1,
        u64::MAX,
    ] {
        assert!(matches!(
            validate(&img, len),
            Err(LayoutError::SizeMismatch { .. })
        ));
    }
    assert!(validate(&img, g.total_size).is_ok());
}

/// Any configuration words with a matching checksum: refused, or a geometry inside the
/// file. Each word is valid seven times in eight (so that many cases pass every check and
/// reach `check_accepted`), otherwise near its bounds (a capacity that is not a power of
/// two, a slot size off a multiple of 64, a table of 0 or one too many entries) or
/// anything; the length is what the words ask for seven times in eight, and anything
/// otherwise. Prints how many cases were accepted, and
/// fails if too few were for the oracle to mean anything.
#[test]
fn checksummed_configurations_are_refused_or_in_bounds() {
    const CASES: u32 = 2048;
    let strategy = (
        prop_oneof![14 => prop_oneof![Just(1u32), Just(2u32)], 1 => 0u32..4, 1 => any::<u32>()],
        prop_oneof![
            14 => (0u32..=12).prop_map(|s| 1u64 << s),
            1 => 0u64..=4097,
            1 => any::<u64>(),
        ],
        prop_oneof![
            14 => (1u32..=64).prop_map(|l| l * 64),
            1 => 0u32..=4161,
            1 => any::<u32>(),
        ],
        prop_oneof![14 => 1u32..=MAX_CONSUMERS, 1 => 0u32..=MAX_CONSUMERS + 1, 1 => any::<u32>()],
        // One producer entry often: a single-producer ring (every fixed-size or sized one)
        // takes exactly one.
        prop_oneof![8 => Just(1u32), 6 => 1u32..=MAX_PRODUCERS, 1 => 0u32..=MAX_PRODUCERS + 1, 1 => any::<u32>()],
        (any::<u64>(), 0u8..8),
        (0u8..8, any::<u64>()),
        prop_oneof![12 => Just(SLOT_FORMAT_STAMPED), 3 => Just(SLOT_FORMAT_FIXED), 3 => Just(SLOT_FORMAT_SIZED), 1 => any::<u32>()],
    );
    let accepted_sized = AtomicU32::new(0);
    let accepted = AtomicU32::new(0);
    let mut runner = TestRunner::new(ProptestConfig {
        cases: CASES,
        ..ProptestConfig::default()
    });
    let result = runner.run(
        &strategy,
        |(
            producer_mode,
            capacity,
            slot_size,
            max_consumers,
            max_producers,
            (slack, sk),
            (lk, len),
            slot_format,
        )| {
            // A slack below the capacity seven times in eight.
            let optional_slack = if sk == 0 {
                slack
            } else {
                slack % capacity.max(1)
            };
            let mut w = ConfigWords {
                producer_mode,
                capacity,
                slot_size,
                max_consumers,
                max_producers,
                file_mode: 0o660,
                optional_slack,
                created_unix_ns: 9,
                total_size: 0,
                slot_format,
            };
            let mode = ProducerMode::from_u32(producer_mode).unwrap_or(ProducerMode::Multi);
            let size = Geometry::with_format(
                slot_format,
                capacity,
                slot_size,
                max_consumers,
                max_producers,
                mode,
                optional_slack,
            )
            .map_or(len, |g| g.total_size);
            let len = if lk == 0 { len } else { size };
            w.total_size = len;
            let img = header_with(&w);
            if let Ok(v) = validate(&img, len) {
                accepted.fetch_add(1, Ordering::Relaxed);
                if v.geometry.sized {
                    accepted_sized.fetch_add(1, Ordering::Relaxed);
                }
                check_accepted(&v, len);
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    let accepted = accepted.into_inner();
    let sized = accepted_sized.into_inner();
    println!(
        "checksummed configurations: {accepted} of {CASES} cases accepted and checked, {sized} of them sized"
    );
    assert!(
        accepted >= CASES / 16,
        "only {accepted} of {CASES} cases reached the accepted branch"
    );
    assert!(
        sized >= CASES / 256,
        "only {sized} of {CASES} cases were accepted rings of sized events"
    );
}
