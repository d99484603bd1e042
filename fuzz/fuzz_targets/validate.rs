//! `shmring_layout::validate` on any bytes and any file length: it returns, never panics,
//! never reads past the buffer, and whatever it accepts is a ring whose every region lies
//! inside the file.
//!
//! Three shapes of input, so the fuzzer gets past the magic and the checksum:
//! - raw bytes and a length;
//! - a valid header for a fuzzed geometry, then byte overwrites (the checksum catches
//!   them, or they land outside the configuration words);
//! - fuzzed configuration words with a correct checksum (reaches every range check in
//!   `Geometry::new`: absurd capacities, slot sizes, table sizes, total sizes).

#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use shmring_layout::{
    config_checksum, header_image, validate, ConfigWords, Geometry, Header, ProducerMode,
    CONSUMER_ENTRY_SIZE, HEADER_SIZE, LINE, PRODUCER_ENTRY_SIZE, SEQ_LINES_OFFSET, SEQ_LINES_SIZE,
};
use std::mem::offset_of;

#[derive(Arbitrary, Debug)]
enum Len {
    /// The length the header asks for.
    Exact,
    /// That length plus a small signed delta (truncated or grown file).
    Near(i16),
    /// Anything.
    Any(u64),
}

#[derive(Arbitrary, Debug)]
struct Shape {
    capacity_log2: u8,
    slot_lines: u16,
    max_consumers: u16,
    max_producers: u16,
    single: bool,
    slack: u64,
}

#[derive(Arbitrary, Debug)]
enum Input {
    Raw {
        bytes: Vec<u8>,
        len: u64,
    },
    Overwritten {
        shape: Shape,
        writes: Vec<(u8, u8)>,
        len: Len,
    },
    Words {
        producer_mode: u32,
        capacity: u64,
        slot_size: u32,
        max_consumers: u32,
        max_producers: u32,
        file_mode: u32,
        optional_slack: u64,
        created: u64,
        total_size: u64,
        slot_format: u32,
        len: Len,
    },
}

fn geometry(s: &Shape) -> Option<Geometry> {
    let capacity = 1u64.checked_shl(u32::from(s.capacity_log2 % 26))?;
    Geometry::new(
        capacity,
        u32::from(s.slot_lines % 300 + 1) * 64,
        u32::from(s.max_consumers % 300),
        u32::from(s.max_producers % 300),
        if s.single {
            ProducerMode::Single
        } else {
            ProducerMode::Multi
        },
        s.slack % (capacity + 2),
    )
    .ok()
}

fn length(len: &Len, expected: u64) -> u64 {
    match *len {
        Len::Exact => expected,
        Len::Near(d) => expected.saturating_add_signed(i64::from(d)),
        Len::Any(n) => n,
    }
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// What an accepted header must satisfy: the client maps `total_size` bytes and trusts every
/// offset below.
fn check_accepted(bytes: &[u8], len: u64) {
    let Ok(v) = validate(bytes, len) else {
        return;
    };
    let g = v.geometry;
    assert_eq!(g.total_size, len, "accepted a file of another size");
    assert!(g.capacity.is_power_of_two() && g.capacity >= 2);
    if g.producer_mode == ProducerMode::Single {
        assert_eq!(g.max_producers, 1, "one entry for a single producer");
    }
    if g.sized {
        assert!(g.fixed, "a ring of sized events is published by the cursor");
        assert!(g.slot_size >= 16, "a length word and room for an event");
        assert_eq!(g.max_payload(), g.slot_size as usize - 8);
    }
    if g.fixed {
        assert!(g.slot_size >= 8 && g.slot_size.is_multiple_of(8));
        assert_eq!(g.producer_mode, ProducerMode::Single);
        assert_eq!(g.tombs_offset % LINE as u64, 0);
    } else {
        assert!(g.slot_size >= 64 && g.slot_size.is_multiple_of(64));
    }
    assert!(g.max_consumers >= 1 && g.max_producers >= 1);
    assert!(g.optional_slack <= g.capacity);
    assert_eq!(
        g.consumers_offset,
        (SEQ_LINES_OFFSET + SEQ_LINES_SIZE) as u64
    );
    let last_consumer = g
        .consumer_offset(g.max_consumers - 1)
        .expect("last consumer");
    assert!(last_consumer + CONSUMER_ENTRY_SIZE as u64 <= g.producers_offset);
    assert_eq!(g.consumer_offset(g.max_consumers), None);
    let last_producer = g
        .producer_offset(g.max_producers - 1)
        .expect("last producer");
    assert!(last_producer + PRODUCER_ENTRY_SIZE as u64 <= g.slots_offset);
    assert_eq!(g.producer_offset(g.max_producers), None);
    assert_eq!(g.slots_offset % LINE as u64, 0);
    // Every sequence, however large, maps to a slot inside the file.
    for seq in [0, 1, g.capacity - 1, g.capacity, u64::MAX, u64::MAX / 3] {
        assert!(g.slot_offset(seq) + u64::from(g.slot_size) <= g.total_size);
        if g.fixed {
            assert!(g.slot_offset(seq) + u64::from(g.slot_size) <= g.tombs_offset);
            assert!(g.tomb_offset(seq) + 8 <= g.total_size);
        }
    }
    assert!(g.max_payload() <= g.slot_size as usize);
    // Deterministic, and the header a creator would write for it validates the same way.
    assert_eq!(validate(bytes, len), Ok(v));
    let again = header_image(&g, v.file_mode, v.created_unix_ns);
    assert_eq!(validate(&again, len), Ok(v));
}

fuzz_target!(|input: Input| {
    match input {
        Input::Raw { bytes, len } => {
            let _ = validate(&bytes, len);
            check_accepted(&bytes, len);
        }
        Input::Overwritten { shape, writes, len } => {
            let Some(g) = geometry(&shape) else {
                return;
            };
            let mut img = header_image(&g, 0o600, 42);
            for (at, value) in writes {
                img[usize::from(at) % HEADER_SIZE] = value;
            }
            let len = length(&len, g.total_size);
            check_accepted(&img, len);
            // A snapshot shorter than a header is refused, whatever the file length says.
            for cut in [0, 1, HEADER_SIZE / 2, HEADER_SIZE - 1] {
                assert!(validate(&img[..cut], len).is_err());
            }
        }
        Input::Words {
            producer_mode,
            capacity,
            slot_size,
            max_consumers,
            max_producers,
            file_mode,
            optional_slack,
            created,
            total_size,
            slot_format,
            len,
        } => {
            let words = ConfigWords {
                producer_mode,
                capacity,
                slot_size,
                max_consumers,
                max_producers,
                file_mode,
                optional_slack,
                created_unix_ns: created,
                total_size,
                slot_format,
            };
            let valid = Geometry::new(16, 64, 1, 1, ProducerMode::Multi, 0).expect("valid");
            let mut img = header_image(&valid, 0o600, 0);
            put32(&mut img, offset_of!(Header, producer_mode), producer_mode);
            put64(&mut img, offset_of!(Header, capacity), capacity);
            put32(&mut img, offset_of!(Header, slot_size), slot_size);
            put32(&mut img, offset_of!(Header, max_consumers), max_consumers);
            put32(&mut img, offset_of!(Header, max_producers), max_producers);
            put32(&mut img, offset_of!(Header, file_mode), file_mode);
            put64(&mut img, offset_of!(Header, optional_slack), optional_slack);
            put64(&mut img, offset_of!(Header, created_unix_ns), created);
            put64(&mut img, offset_of!(Header, total_size), total_size);
            put32(&mut img, offset_of!(Header, slot_format), slot_format);
            put64(
                &mut img,
                offset_of!(Header, config_checksum),
                config_checksum(&words),
            );
            let len = length(&len, total_size);
            check_accepted(&img, len);
        }
    }
});
