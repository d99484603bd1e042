//! Hostile values in the tables, aimed rather than random (`hostile.rs` writes random words):
//! out-of-range positions and indices, claims of absurd length, counters at their limit,
//! header words that are not checksummed, a checksum-valid header describing an absurd or
//! resized ring, and pid fields naming an unrelated live process (pid 1) with a wrong
//! start time. Each is a clear error or a bounded, in-bounds operation: no panic, no
//! out-of-bounds access, no unbounded loop, and nothing treats the unrelated process as the
//! entry's owner. Every test build has overflow checks on, so values at their limit are
//! checked for overflow panics too.

use std::fs::OpenOptions;
use std::mem::offset_of;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use shmring::{
    AttachError, ConsumerOptions, CorruptWord, HealthThresholds, LayoutError, LeaseError,
    OpenError, PollError, ProducerMode, PublishError, Ring, RingConfig, TryPublishError,
};
use shmring_layout::{
    config_checksum, consumer_state, owned_word, producer_state, ClaimLine, ConfigWords,
    ConsumerCold, ConsumerEntry, ConsumerHot, CursorLine, Geometry, Header, LifecycleLine,
    ProducerEntry, SequenceLines, HEADER_SIZE, IN_FLIGHT_CLAIMING, MAX_SEQUENCE, SEQ_LINES_OFFSET,
};

mod common;
use common::{hostile, poll_quiet};
use shmring_testkit::Namespace;

fn put(path: &Path, off: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).expect("open");
    f.write_all_at(bytes, off).expect("write");
}

fn put64(path: &Path, off: u64, v: u64) {
    put(path, off, &v.to_ne_bytes());
}

fn get64(path: &Path, off: u64) -> u64 {
    let mut b = [0u8; 8];
    let f = OpenOptions::new().read(true).open(path).expect("open");
    f.read_exact_at(&mut b, off).expect("read");
    u64::from_ne_bytes(b)
}

fn put32(path: &Path, off: u64, v: u32) {
    put(path, off, &v.to_ne_bytes());
}

fn consumer_field(ring: &Ring, i: u32, field: usize) -> u64 {
    ring.geometry().consumer_offset(i).expect("entry") + field as u64
}

fn producer_field(ring: &Ring, i: u32, field: usize) -> u64 {
    ring.geometry().producer_offset(i).expect("entry") + field as u64
}

const HOT_NEXT: usize = offset_of!(ConsumerEntry, hot) + offset_of!(ConsumerHot, next);
const HOT_WORD: usize = offset_of!(ConsumerEntry, hot) + offset_of!(ConsumerHot, word);
const COLD_START: usize = offset_of!(ConsumerEntry, cold) + offset_of!(ConsumerCold, start_time);
const COLD_COUNTERS: usize = offset_of!(ConsumerEntry, cold) + offset_of!(ConsumerCold, counters);

/// Start time of pid 1: a live process that has nothing to do with any ring.
fn init_start() -> u64 {
    shmring::process::start_time(1).expect("pid 1 exists")
}

// ---------------------------------------------------------------------------------------
// A checksum-valid header that describes another ring than the file holds.

/// Rewrite the segment's configuration words (and their checksum) through `edit`.
fn rewrite_config(path: &Path, edit: impl FnOnce(&mut ConfigWords)) {
    let f = OpenOptions::new().read(true).open(path).expect("open");
    let mut h = [0u8; HEADER_SIZE];
    f.read_exact_at(&mut h, 0).expect("read header");
    let u32_at = |o: usize| u32::from_ne_bytes(h[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_ne_bytes(h[o..o + 8].try_into().unwrap());
    let mut w = ConfigWords {
        producer_mode: u32_at(offset_of!(Header, producer_mode)),
        capacity: u64_at(offset_of!(Header, capacity)),
        slot_size: u32_at(offset_of!(Header, slot_size)),
        max_consumers: u32_at(offset_of!(Header, max_consumers)),
        max_producers: u32_at(offset_of!(Header, max_producers)),
        file_mode: u32_at(offset_of!(Header, file_mode)),
        optional_slack: u64_at(offset_of!(Header, optional_slack)),
        created_unix_ns: u64_at(offset_of!(Header, created_unix_ns)),
        total_size: u64_at(offset_of!(Header, total_size)),
        slot_format: u32_at(offset_of!(Header, slot_format)),
    };
    edit(&mut w);
    put32(
        path,
        offset_of!(Header, producer_mode) as u64,
        w.producer_mode,
    );
    put64(path, offset_of!(Header, capacity) as u64, w.capacity);
    put32(path, offset_of!(Header, slot_size) as u64, w.slot_size);
    put32(
        path,
        offset_of!(Header, max_consumers) as u64,
        w.max_consumers,
    );
    put32(
        path,
        offset_of!(Header, max_producers) as u64,
        w.max_producers,
    );
    put64(
        path,
        offset_of!(Header, optional_slack) as u64,
        w.optional_slack,
    );
    put64(path, offset_of!(Header, total_size) as u64, w.total_size);
    put32(path, offset_of!(Header, slot_format) as u64, w.slot_format);
    put64(
        path,
        offset_of!(Header, config_checksum) as u64,
        config_checksum(&w),
    );
}

fn layout_error(ns: &Namespace) -> LayoutError {
    match Ring::open(ns.name(), "r") {
        Err(OpenError::Layout { source, .. }) => source,
        other => panic!("expected a layout error, got {other:?}"),
    }
}

#[test]
fn an_absurd_capacity_with_a_valid_checksum_is_refused_before_mapping() {
    let ns = Namespace::concurrent("absurd");
    let path = Ring::create(ns.name(), "r", &hostile())
        .unwrap()
        .path()
        .to_owned();
    for capacity in [0, 3, 1 << 25, 1 << 40, 1 << 63, u64::MAX] {
        rewrite_config(&path, |w| w.capacity = capacity);
        assert_eq!(layout_error(&ns), LayoutError::BadCapacity(capacity));
        let msg = Ring::open(ns.name(), "r").unwrap_err().to_string();
        assert!(msg.contains(&capacity.to_string()), "{msg}");
    }
    // Each in range, together 256 TiB: refused as too large, nothing is mapped.
    rewrite_config(&path, |w| {
        w.capacity = 1 << 24;
        w.slot_size = 16 << 20;
    });
    assert!(matches!(layout_error(&ns), LayoutError::TooLarge(_)));
}

#[test]
fn grown_and_truncated_files_are_refused() {
    let ns = Namespace::concurrent("grown");
    let path = Ring::create(ns.name(), "r", &hostile())
        .unwrap()
        .path()
        .to_owned();
    let len = std::fs::metadata(&path).unwrap().len();
    for new_len in [len + 1, len + 4096, len * 4, len - 64] {
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(new_len)
            .unwrap();
        assert!(
            matches!(layout_error(&ns), LayoutError::SizeMismatch { actual, .. } if actual == new_len),
            "length {new_len}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The table sizes rewritten (checksum and total size kept consistent), the file resized
    /// to match or not: either a clear error, or a ring whose every operation stays inside
    /// the file (the tables are indexed only below the validated counts).
    #[test]
    fn resized_tables_open_consistently_or_not_at_all(
        consumers in 0u32..=300,
        producers in 0u32..=300,
        resize in any::<bool>(),
    ) {
        let ns = Namespace::concurrent("tables");
        let path = Ring::create(ns.name(), "r", &hostile()).unwrap().path().to_owned();
        let geometry = Geometry::new(8, 64, consumers, producers, shmring::ProducerMode::Multi, 4);
        rewrite_config(&path, |w| {
            w.max_consumers = consumers;
            w.max_producers = producers;
            if let Ok(g) = &geometry {
                w.total_size = g.total_size;
            }
        });
        if let (true, Ok(g)) = (resize, &geometry) {
            OpenOptions::new().write(true).open(&path).unwrap().set_len(g.total_size).unwrap();
        }
        match Ring::open(ns.name(), "r") {
            Ok(ring) => {
                let g = *ring.geometry();
                prop_assert_eq!(g.max_consumers, consumers);
                prop_assert_eq!(g.max_producers, producers);
                prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), g.total_size);
                let mut held = Vec::new();
                while let Ok(c) = ring.consumer(ConsumerOptions::anonymous()) {
                    held.push(c);
                    prop_assert!(held.len() <= consumers as usize);
                }
                let mut ps = Vec::new();
                while let Ok(p) = ring.producer() {
                    ps.push(p);
                    prop_assert!(ps.len() <= producers as usize);
                }
                let info = ring.info();
                prop_assert!(info.consumers.iter().all(|c| c.index < consumers));
                prop_assert!(info.producers.iter().all(|p| p.index < producers));
                if let Some(p) = ps.first_mut() {
                    let _ = p.try_publish(b"x");
                }
                for c in &mut held {
                    let _ = poll_quiet(&ring, c, |_| {});
                }
            }
            Err(OpenError::Layout { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Out-of-range indices and absurd claims.

#[test]
fn out_of_range_entry_indices_are_refused_by_every_entry_operation() {
    let ns = Namespace::concurrent("indices");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let word = owned_word::pack(1, consumer_state::ACTIVE, 1);
    for index in [3, 4, 255, 256, u32::MAX] {
        assert!(!ring.release_consumer(index, word));
        assert!(!ring.free_consumer(index, word));
        assert_eq!(
            ring.repair_dead_producer(index, word),
            shmring::Repair::default()
        );
    }
}

/// A dead producer's entry claiming a huge in-flight range, or one ending at `u64::MAX`:
/// the repair touches at most `capacity / 2` sequences and returns.
#[test]
fn a_dead_producer_claim_of_absurd_length_is_repaired_in_bounded_steps() {
    let ns = Namespace::concurrent("absurd_claim");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    let (pid, start) = (1, init_start() + 1);
    for (first_plus_one, len) in [
        (1, u64::MAX),
        (u64::MAX - 1, u64::MAX),
        (u64::MAX - 1, 0),
        (1 << 62, 1 << 40),
    ] {
        let p = |f| producer_field(&ring, 0, f);
        let word = owned_word::pack(1, producer_state::ACTIVE, pid);
        put64(&path, p(offset_of!(ProducerEntry, word)), word);
        put64(&path, p(offset_of!(ProducerEntry, start_time)), start);
        put64(
            &path,
            p(offset_of!(ProducerEntry, in_flight)),
            first_plus_one,
        );
        put64(&path, p(offset_of!(ProducerEntry, in_flight_len)), len);
        let r = ring.repair_dead_producer(0, word);
        assert!(
            r.tombstoned + r.waiting <= ring.capacity() / 2,
            "{first_plus_one:#x}+{len:#x}: {r:?}"
        );
    }
}

/// A fixed-size ring's dead single producer whose claim word says it claimed far past the
/// cursor (a single producer's claim is at most `capacity / 2` ahead of it, so only a
/// damaged word says more): the repair tombstones at most `capacity / 2` sequences, takes
/// the word back to where it stopped, and returns; a new producer then publishes from
/// there and a consumer reads its event after the tombstones.
#[test]
fn a_dead_fixed_producer_claim_far_past_the_cursor_is_repaired_in_bounded_steps() {
    let ns = Namespace::concurrent("fixed_absurd_claim");
    let config = RingConfig {
        event_size: Some(8),
        producer_mode: ProducerMode::Single,
        ..hostile()
    };
    let ring = Ring::create(ns.name(), "r", &config).unwrap();
    let path = ring.path().to_owned();
    let (pid, start) = (1, init_start() + 1);
    let claim = SEQ_LINES_OFFSET as u64;
    let cap = ring.capacity();
    for damaged in [10 * cap, 1 << 40, (1 << 62) - 1, u64::MAX >> 1] {
        // Published up to here: the cursor, before the damaged claim.
        let cursor = {
            let mut p = ring.producer().expect("producer");
            p.publish(&[1; 8]).expect("publish") + 1
        };
        let p = |f| producer_field(&ring, 0, f);
        let word = owned_word::pack(1, producer_state::ACTIVE, pid);
        put64(&path, p(offset_of!(ProducerEntry, word)), word);
        put64(&path, p(offset_of!(ProducerEntry, start_time)), start);
        put64(&path, claim, damaged);
        let r = ring.repair_dead_producer(0, word);
        assert!(
            r.tombstoned + r.waiting <= cap / 2,
            "claim {damaged:#x}: {r:?}"
        );
        assert_eq!(r.waiting, 0, "nothing gates the repair: {r:?}");
        let mut c = ring
            .consumer(ConsumerOptions::anonymous())
            .expect("consumer");
        let mut p = ring.producer().expect("a producer after the repair");
        let at = p.publish(&[2; 8]).expect("publish after the repair");
        assert_eq!(
            at,
            cursor + r.tombstoned,
            "claim {damaged:#x}: the new producer starts after the tombstones"
        );
        let mut got = Vec::new();
        let _ = poll_quiet(&ring, &mut c, |ev| got.push((ev.sequence(), ev.bytes()[0])));
        assert_eq!(got, [(at, 2)], "claim {damaged:#x}");
    }
}

/// A ring of `capacity` 8-byte fixed-size events (single producer), otherwise `hostile`.
fn fixed_config(capacity: u64) -> RingConfig {
    RingConfig {
        event_size: Some(8),
        producer_mode: ProducerMode::Single,
        capacity,
        ..hostile()
    }
}

/// Ring "r" of 8-byte fixed-size events in `ns` (single producer), and an anonymous consumer
/// of it.
fn fixed_ring(ns: &Namespace) -> (Ring, shmring::Consumer) {
    let ring = Ring::create(ns.name(), "r", &fixed_config(hostile().capacity)).unwrap();
    let c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    (ring, c)
}

/// A fixed-size ring's cursor (its producer's claim word) moved by another process past what
/// the producer can have published: the producer refuses to publish (`CorruptPosition`)
/// rather than skip sequences (its general path looks; a cursor moved back below the common
/// case's bound is published at, unchecked, as a claim word moved back was before layout
/// 13), and its counters and its drop (which records them) never overflow.
#[test]
fn a_fixed_producer_s_cursor_moved_by_another_process_is_refused_not_reused() {
    for moved in [1 << 40, u64::MAX - 1] {
        let ns = Namespace::concurrent("fixed_moved_cursor");
        let (ring, mut c) = fixed_ring(&ns);
        {
            let mut first = ring.producer().expect("first producer");
            for _ in 0..3 {
                first.publish(&[1; 8]).expect("publish");
            }
        }
        let _ = poll_quiet(&ring, &mut c, |_| {});
        let mut p = ring.producer().expect("second producer, starting at 3");
        assert_eq!(p.publish(&[2; 8]), Ok(3));
        assert_eq!(p.publish(&[2; 8]), Ok(4));
        assert_eq!(p.stats().published, 2);
        put64(ring.path(), CURSOR, moved);
        match p.publish(&[3; 8]) {
            Err(e @ PublishError::CorruptPosition { .. }) => {
                assert!(e.to_string().contains("corrupt"), "{e}")
            }
            other => panic!("cursor moved to {moved:#x}: {other:?}"),
        }
        assert!(p.stats().published <= 2, "cursor moved to {moved:#x}");
        assert!(
            matches!(
                p.try_publish(&[3; 8]),
                Err(TryPublishError::CorruptPosition { .. })
            ),
            "cursor moved to {moved:#x}"
        );
        drop(p);
    }
}

/// Offset of the claim word.
const CLAIM_WORD: u64 =
    (SEQ_LINES_OFFSET + offset_of!(SequenceLines, claim) + offset_of!(ClaimLine, value)) as u64;
/// Offset of the stop sequence.
const STOP_SEQ: u64 = (SEQ_LINES_OFFSET
    + offset_of!(SequenceLines, lifecycle)
    + offset_of!(LifecycleLine, stop_seq)) as u64;
/// Offset of a fixed-size ring's cursor.
const CURSOR: u64 =
    (SEQ_LINES_OFFSET + offset_of!(SequenceLines, cursor) + offset_of!(CursorLine, cursor)) as u64;

/// A position past any sequence a ring reaches, written by another process: on a
/// multi-producer ring a claim word closed with the largest stop sequence (the state still
/// Running), on a fixed-size ring a claim word and cursor near 2^64. A consumer's attach
/// refuses it with `CorruptPosition` (where it would start at that position and overflow
/// counting past it), and a consumer already attached that was lapped stays where it is.
#[test]
fn a_position_past_any_sequence_is_refused_at_a_consumer_s_attach() {
    let ns = Namespace::concurrent("corrupt_position");
    let multi = Ring::create(ns.name(), "m", &hostile()).unwrap();
    let mut behind = multi
        .consumer(ConsumerOptions::anonymous().optional())
        .expect("an optional consumer, before the damage");
    put64(multi.path(), STOP_SEQ, u64::MAX);
    put64(multi.path(), CLAIM_WORD, shmring_layout::CLAIM_CLOSED);
    for opts in [
        ConsumerOptions::anonymous(),
        ConsumerOptions::anonymous().optional(),
        ConsumerOptions::durable("d"),
    ] {
        match multi.consumer(opts) {
            Err(AttachError::CorruptPosition { position }) => assert_eq!(position, u64::MAX),
            other => panic!(
                "attached at a corrupt position: {:?}",
                other.map(|c| c.next_sequence())
            ),
        }
    }
    // The optional consumer attached before: nothing to deliver, no jump to the position.
    assert_eq!(poll_quiet(&multi, &mut behind, |_| {}), Ok(0));
    assert_eq!(behind.next_sequence(), 0);

    let fixed = Ring::create(ns.name(), "f", &fixed_config(16)).unwrap();
    put64(fixed.path(), CLAIM_WORD, u64::MAX - 5);
    put64(fixed.path(), CURSOR, u64::MAX);
    match fixed.consumer(ConsumerOptions::anonymous()) {
        Err(AttachError::CorruptPosition { position }) => assert!(position >= MAX_SEQUENCE),
        other => panic!(
            "attached at a corrupt position: {:?}",
            other.map(|c| c.next_sequence())
        ),
    }
}

/// An optional consumer of `ring`, lapped: three laps of 8-byte events published past it.
fn lapped_optional(ring: &Ring) -> shmring::Consumer {
    let behind = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .expect("an optional consumer");
    let mut p = ring.producer().expect("producer");
    for i in 0..3 * ring.capacity() {
        p.publish(&i.to_ne_bytes()).expect("publish");
    }
    behind
}

/// A consumer already attached that is lapped while the ring's position reads past any
/// sequence (another process overwrote it) cannot jump to that position: every poll says so
/// with `PollError::CorruptPosition` instead of delivering nothing, silently, for ever.
#[test]
fn a_lapped_consumer_at_a_corrupt_position_gets_an_error() {
    let ns = Namespace::concurrent("corrupt_lapped");
    let multi = Ring::create(ns.name(), "m", &hostile()).unwrap();
    let mut behind = lapped_optional(&multi);
    put64(multi.path(), STOP_SEQ, u64::MAX);
    put64(multi.path(), CLAIM_WORD, shmring_layout::CLAIM_CLOSED);
    for _ in 0..2 {
        assert_eq!(
            poll_quiet(&multi, &mut behind, |_| {}),
            Err(PollError::CorruptPosition { position: u64::MAX })
        );
    }
    assert!(behind.next_sequence() < MAX_SEQUENCE);

    let fixed = Ring::create(ns.name(), "f", &fixed_config(16)).unwrap();
    let mut behind = lapped_optional(&fixed);
    put64(fixed.path(), CLAIM_WORD, u64::MAX - 5);
    put64(fixed.path(), CURSOR, u64::MAX);
    for _ in 0..2 {
        match poll_quiet(&fixed, &mut behind, |_| {}) {
            Err(PollError::CorruptPosition { position }) => assert!(position >= MAX_SEQUENCE),
            other => panic!(
                "{other:?} at a corrupt position, next {}",
                behind.next_sequence()
            ),
        }
    }
    assert!(behind.next_sequence() < MAX_SEQUENCE);
}

/// A required consumer released (as the broker releases a stalled one) while the ring's
/// position reads past any sequence: it stays released and every poll says so, where
/// gating again first left it ACTIVE at its old position, reading in place slots that
/// producers were not held back from while it was released.
#[test]
fn a_released_consumer_at_a_corrupt_position_stays_released() {
    let ns = Namespace::concurrent("corrupt_released");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("a required consumer");
    let mut p = ring.producer().expect("producer");
    for i in 0..4u64 {
        p.publish(&i.to_ne_bytes()).expect("publish");
    }
    drop(p);
    let entry = ring
        .info()
        .consumers
        .into_iter()
        .find(|e| e.index == c.index())
        .expect("its entry");
    let released = owned_word::next(
        entry.word,
        consumer_state::RELEASED,
        owned_word::owner(entry.word),
    );
    put64(
        ring.path(),
        consumer_field(&ring, c.index(), HOT_WORD),
        released,
    );
    put64(ring.path(), STOP_SEQ, u64::MAX);
    put64(ring.path(), CLAIM_WORD, shmring_layout::CLAIM_CLOSED);
    for _ in 0..2 {
        let mut got = Vec::new();
        assert_eq!(
            poll_quiet(&ring, &mut c, |ev| got.push(ev.sequence())),
            Err(PollError::CorruptPosition { position: u64::MAX })
        );
        assert_eq!(got, [0u64; 0], "read in place after gating again");
    }
    let word = ring
        .info()
        .consumers
        .into_iter()
        .find(|e| e.index == c.index());
    assert_eq!(word.map(|e| e.word), Some(released));
}

/// A multi-producer ring's claim word overwritten by another process with a position past
/// any sequence while its producers are attached: each publish form says so, where the
/// waiting forms waited for room for ever (or until their deadline) and `try_publish`
/// reported a full ring. (A second producer's claim ends the first one's lone claims first,
/// so that every claim goes through the counter: a lone producer does not read it.)
#[test]
fn a_multi_producer_claim_past_any_sequence_is_an_error() {
    let ns = Namespace::concurrent("corrupt_multi_claim");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let _gating = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("a required consumer");
    let mut p = ring.producer().expect("producer");
    assert_eq!(p.publish(&[1; 8]), Ok(0));
    assert!(ring.info().producers.iter().any(|e| e.lone));
    let mut other = ring.producer().expect("a second producer");
    assert_eq!(other.publish(&[1; 8]), Ok(1));
    assert!(ring.info().producers.iter().all(|e| !e.lone));
    let bad = MAX_SEQUENCE + 5;
    put64(ring.path(), CLAIM_WORD, bad);
    let corrupt = TryPublishError::CorruptPosition { position: bad };
    assert_eq!(p.try_publish(&[2; 8]), Err(corrupt));
    assert_eq!(
        p.publish_timeout(&[2; 8], Duration::from_secs(30)),
        Err(corrupt)
    );
    assert_eq!(p.try_publish_batch(&[[2u8; 8]; 2]), Err(corrupt));
    // The waiting form on a thread of its own, so that a wait for ever fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = p.publish(&[3; 8]);
        let _ = tx.send((r, p.stats().refused));
    });
    let (r, refused) = rx
        .recv_timeout(shmring_testkit::WAIT)
        .expect("publish waited for room at a corrupt position");
    assert_eq!(r, Err(PublishError::CorruptPosition { position: bad }));
    assert_eq!(refused, 4);
}

/// A worker group's work sequence overwritten by another process with a position past any
/// sequence: a member's attach refuses it, and a member already attached whose next claim
/// comes from it gets `PollError::CorruptPosition` instead of waiting, silently, for a
/// sequence no ring reaches.
#[test]
fn a_group_s_work_sequence_past_any_sequence_is_an_error() {
    let ns = Namespace::concurrent("corrupt_work");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let mut a = ring
        .consumer(ConsumerOptions::worker("g"))
        .expect("a member");
    let group = ring
        .info()
        .consumers
        .iter()
        .find(|e| e.name == "g")
        .map(|e| e.index)
        .expect("the group's entry");
    let mut p = ring.producer().expect("producer");
    assert_eq!(p.publish(&[1; 8]), Ok(0));
    let bad = u64::MAX - 3;
    put64(ring.path(), consumer_field(&ring, group, HOT_NEXT), bad);
    match ring.consumer(ConsumerOptions::worker("g")) {
        Err(AttachError::CorruptPosition { position }) => assert_eq!(position, bad),
        other => panic!(
            "a member attached at a corrupt work sequence: {:?}",
            other.map(|c| c.next_sequence())
        ),
    }
    // The claim taken at the join (sequence 0) is delivered; the next one comes from the
    // damaged work sequence.
    let mut got = Vec::new();
    let mut outcome = Ok(0);
    for _ in 0..4 {
        outcome = poll_quiet(&ring, &mut a, |ev| got.push(ev.sequence()));
        if outcome.is_err() {
            break;
        }
    }
    assert_eq!(got, [0]);
    assert_eq!(outcome, Err(PollError::CorruptPosition { position: bad }));
}

/// A fixed-size ring's claim word overwritten by another process while its producer is
/// attached: the producer's next publish, and its counters, take its position from the
/// cursor (where its last publish left it) instead of counting on from a position no ring
/// reaches.
#[test]
fn a_fixed_producer_s_claim_word_overwritten_past_any_sequence_is_no_overflow() {
    let ns = Namespace::concurrent("corrupt_claim");
    let (ring, mut c) = fixed_ring(&ns);
    let mut p = ring.producer().expect("producer");
    assert_eq!(p.publish(&[1; 8]), Ok(0));
    assert_eq!(p.publish(&[2; 8]), Ok(1));
    put64(ring.path(), CLAIM_WORD, u64::MAX);
    // Its counters read the position from the cursor too, not a count near 2^64.
    assert_eq!(p.stats().published, 2);
    assert_eq!(p.publish(&[3; 8]), Ok(2));
    assert_eq!(p.try_publish(&[4; 8]), Ok(3));
    assert_eq!(p.stats().published, 4);
    let mut got = Vec::new();
    while poll_quiet(&ring, &mut c, |ev| got.push(ev.bytes()[0])).expect("poll") > 0 {}
    assert_eq!(got, [1, 2, 3, 4]);
}

/// A dead producer caught between announcing and recording a claim (IN_FLIGHT_CLAIMING),
/// with a head far ahead of every consumer: the search for its hole is bounded.
#[test]
fn an_unattributed_hole_search_is_bounded() {
    let ns = Namespace::concurrent("claiming");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    let (pid, start) = (1, init_start() + 1);
    let p = |f| producer_field(&ring, 0, f);
    let word = owned_word::pack(1, producer_state::ACTIVE, pid);
    put64(&path, p(offset_of!(ProducerEntry, word)), word);
    put64(&path, p(offset_of!(ProducerEntry, start_time)), start);
    put64(
        &path,
        p(offset_of!(ProducerEntry, in_flight)),
        IN_FLIGHT_CLAIMING,
    );
    let claim = shmring_layout::SEQ_LINES_OFFSET as u64;
    for head in [1 << 40, (1 << 62) - 1, shmring_layout::CLAIM_SEQ_MASK] {
        put64(&path, claim, head);
        let r = ring.repair_dead_producer(0, word);
        let bound = u64::from(ring.geometry().max_producers) * ring.capacity();
        assert!(r.tombstoned + r.waiting <= bound, "head {head:#x}: {r:?}");
    }
}

// ---------------------------------------------------------------------------------------
// A pid field naming an unrelated live process.

#[test]
fn pid_1_with_a_wrong_start_time_is_not_alive() {
    let init = init_start();
    assert!(shmring::process::is_alive(1, init), "pid 1 itself is alive");
    for start in [0, init + 1, init.wrapping_sub(1), u64::MAX] {
        assert!(!shmring::process::is_alive(1, start), "start {start}");
    }
    for pid in [0, u32::MAX, i32::MAX as u32, 4_194_305] {
        assert!(!shmring::process::is_alive(pid, 1), "pid {pid}");
    }
}

/// A durable consumer's entry rewritten to name pid 1 with a wrong start time: the name is
/// not held by a live process, so a new process takes it over (and nothing waits on or
/// reports pid 1 as its owner).
#[test]
fn a_durable_entry_naming_pid_1_is_taken_over() {
    let ns = Namespace::concurrent("pid1_consumer");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    let c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    let index = c.index();
    std::mem::forget(c); // as if its process died: the entry stays ACTIVE
    put64(
        &path,
        consumer_field(&ring, index, HOT_WORD),
        owned_word::pack(9, consumer_state::ACTIVE, 1),
    );
    put64(
        &path,
        consumer_field(&ring, index, COLD_START),
        init_start() + 1,
    );
    let c = ring
        .consumer(ConsumerOptions::durable("d"))
        .expect("pid 1 with a wrong start time is not the owner");
    assert_eq!(c.index(), index);
    let info = ring.info();
    assert_eq!(info.consumers[0].pid, std::process::id());
}

/// The same with pid 1's real start time: indistinguishable from pid 1 owning the entry, so
/// the name is refused as in use, with a clear error (a writer who can forge the entry can
/// always hold a name; file permissions are what keep such writers out).
#[test]
fn a_durable_entry_forged_with_pid_1s_real_start_time_is_refused_clearly() {
    let ns = Namespace::concurrent("pid1_real");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    let c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    let index = c.index();
    std::mem::forget(c);
    put64(
        &path,
        consumer_field(&ring, index, HOT_WORD),
        owned_word::pack(9, consumer_state::ACTIVE, 1),
    );
    put64(
        &path,
        consumer_field(&ring, index, COLD_START),
        init_start(),
    );
    match ring.consumer(ConsumerOptions::durable("d")) {
        Err(e @ AttachError::NameInUse { pid: 1, .. }) => {
            assert!(e.to_string().contains("pid 1"), "{e}")
        }
        other => panic!(
            "expected NameInUse by pid 1, got {:?}",
            other.map(|c| c.index())
        ),
    }
}

/// Every producer entry ACTIVE under pid 1 with a wrong start time and no claim: a new
/// producer reclaims one instead of finding the table full.
#[test]
fn producer_entries_naming_pid_1_are_reclaimed() {
    let ns = Namespace::concurrent("pid1_producer");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    for i in 0..ring.geometry().max_producers {
        let p = |f| producer_field(&ring, i, f);
        let word = owned_word::pack(1, producer_state::ACTIVE, 1);
        put64(&path, p(offset_of!(ProducerEntry, word)), word);
        put64(
            &path,
            p(offset_of!(ProducerEntry, start_time)),
            init_start() + 1,
        );
        put64(&path, p(offset_of!(ProducerEntry, in_flight)), 0);
    }
    let mut p = ring.producer().expect("a dead-looking entry is reclaimed");
    p.try_publish(b"ok").unwrap();
}

// ---------------------------------------------------------------------------------------
// Values at their limits that still panic (overflow checks) or mislead: what needs fixing.

/// A durable consumer resumes at the position in its entry. A position beyond the head is
/// corrupt (a consumer only commits what was published); `u64::MAX` makes `poll_once`
/// overflow `start + n` (the never-written slot's stamp, `STAMP_EMPTY == u64::MAX`, looks
/// published at sequence `u64::MAX`).
#[test]
fn a_durable_position_beyond_the_head_is_not_trusted() {
    for next in [u64::MAX, u64::MAX - 3, 1 << 62, 1000] {
        let ns = Namespace::concurrent("next");
        let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
        let path = ring.path().to_owned();
        let index = ring
            .consumer(ConsumerOptions::durable("d"))
            .unwrap()
            .index();
        let mut p = ring.producer().unwrap();
        p.publish(b"one").unwrap();
        put64(&path, consumer_field(&ring, index, HOT_NEXT), next);
        // The position is not trusted: the consumer attaches, at or below the head.
        let mut c = ring
            .consumer(ConsumerOptions::durable("d"))
            .unwrap_or_else(|e| panic!("a durable position of {next}: attach refused: {e}"));
        assert!(c.next_sequence() <= ring.head(), "resumed at {next}");
        poll_quiet(&ring, &mut c, |_| {}).unwrap();
        p.publish(b"two").unwrap();
        let mut got = 0;
        poll_quiet(&ring, &mut c, |_| got += 1).unwrap();
        assert!(got >= 1, "resumed at {next} and misses new events");
    }
}

/// A single producer starts at the line's position, a word every process of the ring may
/// write. One at or past `MAX_SEQUENCE` (no ring lives long enough to get there; near
/// `u64::MAX` the publish arithmetic overflows) is refused at a producer's and a consumer's
/// attach, saying the segment is corrupt. The position of a running ring is the claim word
/// less the claim still being written (at most half the capacity), but not from a word
/// at or past `MAX_SEQUENCE`: stepped back from `MAX_SEQUENCE + 1`, the position read as a
/// sequence just below it, and a consumer attached there.
#[test]
fn a_single_producer_position_past_any_real_sequence_is_refused() {
    let max = shmring_layout::MAX_SEQUENCE;
    for event_size in [None, Some(8)] {
        for word in [max, max + 1, max + 64, u64::MAX - 1, u64::MAX] {
            let ns = Namespace::concurrent("position");
            let config = RingConfig {
                producer_mode: ProducerMode::Single,
                max_producers: 1,
                event_size,
                ..hostile()
            };
            let ring = Ring::create(ns.name(), "r", &config).unwrap();
            // A ring published by a cursor claims on its cursor.
            let claim_word = if event_size.is_some() {
                CURSOR
            } else {
                CLAIM_WORD
            };
            put64(ring.path(), claim_word, word);
            match ring.producer() {
                Err(e @ AttachError::CorruptPosition { position }) => {
                    assert!(position >= shmring_layout::MAX_SEQUENCE, "{e}");
                    assert!(e.to_string().contains("corrupt"), "{e}");
                }
                Err(e) => panic!("claim word {word:#x} ({event_size:?}): {e}"),
                Ok(_) => panic!("claim word {word:#x} ({event_size:?}): attached"),
            }
            match ring.consumer(ConsumerOptions::anonymous()) {
                Err(AttachError::CorruptPosition { position }) => assert_eq!(position, word),
                Err(e) => panic!("claim word {word:#x} ({event_size:?}): {e}"),
                Ok(c) => panic!(
                    "claim word {word:#x} ({event_size:?}): a consumer attached at {:#x}",
                    c.next_sequence()
                ),
            }
        }
    }
}

/// A durable consumer resumes its counters from the entry; near `u64::MAX` the next
/// commit's `+=` overflows.
#[test]
fn resumed_counters_at_their_limit_do_not_panic() {
    let ns = Namespace::concurrent("counters");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    let index = ring
        .consumer(ConsumerOptions::durable("d"))
        .unwrap()
        .index();
    for c in 0..8 {
        put64(
            &path,
            consumer_field(&ring, index, COLD_COUNTERS + 8 * c),
            u64::MAX,
        );
    }
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    let mut p = ring.producer().unwrap();
    p.publish(b"x").unwrap();
    assert_eq!(c.poll_once(|_| {}), Ok(1));
}

/// The run counter and the broker epoch are not checksummed; at `u64::MAX` neither the run
/// word's count (`line::count_start`, `+ 1` on the number without its mark: it wraps to 0)
/// nor the `+ 1` after the epoch's `fetch_add` in `Ring::adopt` may overflow.
#[test]
fn run_and_epoch_at_their_limit_do_not_panic() {
    let ns = Namespace::concurrent("run_epoch");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    put64(&path, offset_of!(Header, run) as u64, u64::MAX);
    put64(&path, offset_of!(Header, broker_epoch) as u64, u64::MAX);
    ring.stop().unwrap();
    assert_eq!(ring.start(), Ok(0));
    let _ = ring.adopt(1);
}

/// Header words outside the checksum, set to values no ring has: the lifecycle calls say
/// what is wrong, the data path carries on or refuses cleanly, nothing hangs.
#[test]
fn corrupt_state_words_give_errors_not_hangs() {
    let ns = Namespace::concurrent("state");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let path = ring.path().to_owned();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    put64(&path, LIFECYCLE_WORD, 77);
    assert_eq!(ring.state(), None);
    assert_eq!(ring.stop(), Err(shmring::LifecycleError::CorruptState(77)));
    assert_eq!(ring.start(), Err(shmring::LifecycleError::CorruptState(77)));
    assert!(ring.drain(Duration::ZERO).is_err());
    assert!(ring.stop().unwrap_err().to_string().contains("corrupt"));
    p.try_publish(b"still flows").unwrap();
    assert_eq!(c.poll_once(|_| {}), Ok(1));
    // A consumer entry in a state no code writes: not gating, shown as CORRUPT.
    put64(
        &path,
        consumer_field(&ring, c.index(), HOT_WORD),
        owned_word::pack(9, 99, std::process::id()),
    );
    assert_eq!(ring.info().consumers[0].state, "CORRUPT");
    assert!(!consumer_state::gates(99));
    for _ in 0..ring.capacity() * 2 {
        p.try_publish(b"not gated by a corrupt entry").unwrap();
    }
}

/// A fixed-size ring's cursor overwritten by another process with a value more than a ring
/// past a consumer's position. No producer can publish that far past a consumer (the wrap
/// gate holds a required one's producers within the capacity, and an optional one further
/// behind than that is lapped, which the write horizon says). So the slots between are not
/// events: every poll form says so with `PollError::CorruptCursor`, delivers nothing and
/// keeps the consumer where it is, where it delivered whatever the slots held before. Once
/// the cursor is put back where the producer left it, the consumer goes on from where it
/// was.
#[test]
fn a_fixed_ring_s_cursor_more_than_a_ring_ahead_delivers_nothing() {
    let ns = Namespace::concurrent("corrupt_cursor");
    let ring = Ring::create(ns.name(), "f", &fixed_config(16)).unwrap();
    let mut required = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("a required consumer");
    let mut optional = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .expect("an optional consumer");
    let mut p = ring.producer().expect("producer");
    assert_eq!(p.publish(&[1; 8]), Ok(0));
    assert_eq!(p.publish(&[2; 8]), Ok(1));
    let cap = ring.capacity();
    for damaged in [cap + 1, 1 << 40, MAX_SEQUENCE - 1, u64::MAX] {
        put64(ring.path(), CURSOR, damaged);
        for (what, c) in [("required", &mut required), ("optional", &mut optional)] {
            let mut got = Vec::new();
            let once = poll_quiet(&ring, c, |ev| got.push(ev.sequence()));
            let runs = c.poll_runs(|seq, _| got.push(seq));
            for r in [once, runs] {
                assert_eq!(
                    r,
                    Err(PollError::CorruptCursor {
                        cursor: damaged,
                        next: 0,
                        capacity: cap,
                    }),
                    "{what} consumer, cursor {damaged:#x}"
                );
            }
            assert_eq!(got, [0u64; 0], "{what} consumer, cursor {damaged:#x}");
            assert_eq!(c.next_sequence(), 0, "{what} consumer moved");
        }
        // Reading ahead (a required consumer's lease, the bridge exporter's read) too.
        let mut got = Vec::new();
        assert_eq!(
            required.read_ahead(0, 100, |ev| got.push(ev.sequence())),
            Err(LeaseError::CorruptCursor {
                cursor: damaged,
                next: 0,
                capacity: cap,
            }),
            "cursor {damaged:#x}"
        );
        assert_eq!(got, [0u64; 0], "read ahead, cursor {damaged:#x}");
    }
    // The cursor put back where the producer left it: the producer goes on from there.
    put64(ring.path(), CURSOR, 2);
    assert_eq!(p.publish(&[3; 8]), Ok(2));
    for c in [&mut required, &mut optional] {
        let mut got = Vec::new();
        while poll_quiet(&ring, c, |ev| got.push(ev.bytes()[0])).expect("poll") > 0 {}
        assert_eq!(got, [1, 2, 3]);
    }
}

/// Offset of the lifecycle word.
const LIFECYCLE_WORD: u64 = (SEQ_LINES_OFFSET
    + offset_of!(SequenceLines, lifecycle)
    + offset_of!(LifecycleLine, lifecycle)) as u64;

/// Every word holding a value no ring writes there (another process overwrote it) is named
/// by the snapshot (`RingInfo::corrupt`) and makes the health check unhealthy, which
/// `broker status` reports. Before, the snapshot carried such a position like any other and
/// the check called the ring healthy: a caught-up consumer never reads the position, and
/// polls `Ok(0)` for ever while the claim word is damaged.
#[test]
fn damaged_words_are_named_by_the_snapshot_and_make_a_ring_unhealthy() {
    let ns = Namespace::concurrent("corrupt_words");
    let multi = Ring::create(ns.name(), "m", &hostile()).unwrap();
    let index = multi
        .consumer(ConsumerOptions::durable("d"))
        .expect("a durable consumer")
        .index();
    let other = multi
        .consumer(ConsumerOptions::anonymous())
        .expect("another consumer");
    let mut health = multi.health(HealthThresholds::default());
    assert_eq!(multi.info().corrupt, []);
    assert!(health.check().is_healthy());

    put64(multi.path(), STOP_SEQ, u64::MAX);
    put64(multi.path(), CLAIM_WORD, shmring_layout::CLAIM_CLOSED);
    put64(
        multi.path(),
        consumer_field(&multi, index, HOT_NEXT),
        MAX_SEQUENCE + 3,
    );
    put64(
        multi.path(),
        consumer_field(&multi, other.index(), HOT_WORD),
        owned_word::pack(9, 99, std::process::id()),
    );
    let expected = [
        CorruptWord::Position { position: u64::MAX },
        CorruptWord::ConsumerPosition {
            index,
            next: MAX_SEQUENCE + 3,
        },
        CorruptWord::ConsumerState {
            index: other.index(),
            state: 99,
        },
    ];
    assert_eq!(multi.info().corrupt, expected);
    let report = health.check();
    assert_eq!(report.corrupt, expected);
    assert!(!report.is_healthy());
    for word in &expected {
        assert!(word.to_string().contains("corrupt"), "{word}");
    }

    put64(multi.path(), LIFECYCLE_WORD, 77);
    put32(multi.path(), offset_of!(Header, fence_mode) as u64, 9);
    let corrupt = multi.info().corrupt;
    assert!(
        corrupt.contains(&CorruptWord::Lifecycle { word: 77 }),
        "{corrupt:?}"
    );
    assert!(
        corrupt.contains(&CorruptWord::FenceMode { word: 9 }),
        "{corrupt:?}"
    );

    // A single producer's claim word just past any sequence: the position is the word as it
    // is, not stepped back over the slots it has not published to below `MAX_SEQUENCE`.
    let single = Ring::create(
        ns.name(),
        "s",
        &RingConfig {
            producer_mode: ProducerMode::Single,
            ..hostile()
        },
    )
    .unwrap();
    put64(single.path(), CLAIM_WORD, MAX_SEQUENCE + 1);
    assert_eq!(
        single.info().corrupt,
        [CorruptWord::Position {
            position: MAX_SEQUENCE + 1
        }]
    );

    // A fixed-size ring's cursor is never past its write horizon (the producer raises it
    // before it writes past it, and a start that takes a refused claim back takes it to the
    // stop sequence).
    let fixed = Ring::create(ns.name(), "f", &fixed_config(16)).unwrap();
    let mut p = fixed.producer().expect("producer");
    p.publish(&[1; 8]).expect("publish");
    p.publish(&[2; 8]).expect("publish");
    assert_eq!(fixed.info().corrupt, []);
    let horizon = get64(fixed.path(), CLAIM_WORD);
    assert!((2..=16).contains(&horizon), "horizon {horizon}");
    put64(fixed.path(), CURSOR, 100);
    assert_eq!(
        fixed.info().corrupt,
        [CorruptWord::Cursor {
            cursor: 100,
            claim: horizon
        }]
    );
    assert!(!fixed
        .health(HealthThresholds::default())
        .check()
        .is_healthy());
    // The cursor put back where the producer left it: its next publish goes on from there.
    put64(fixed.path(), CURSOR, 2);
    p.publish(&[3; 8]).expect("publish");
    assert_eq!(fixed.info().corrupt, []);
}

/// Offset of the producers' shared gate (a lower bound of every gating consumer's next).
const SHARED_GATE: u64 = (SEQ_LINES_OFFSET
    + offset_of!(SequenceLines, gating)
    + offset_of!(shmring_layout::Padded<std::sync::atomic::AtomicU64>, value))
    as u64;

/// The producers' shared gate written far past the ring by another process: no gate a scan
/// finds lies past the line's position, so producers do not trust one that does. A durable
/// required consumer that read nothing keeps every event: the producer that filled the ring
/// finds it full still, and so does one attaching after it (which takes the shared gate as
/// its first); the consumer reads all of them intact. On stamped slots (multi-producer), on a
/// fixed-size ring and on a ring of sized events.
#[test]
fn a_shared_gate_moved_past_the_position_is_not_trusted() {
    let kinds = [
        ("stamped", hostile()),
        ("fixed", fixed_config(8)),
        (
            "sized",
            RingConfig {
                max_event_size: Some(8),
                producer_mode: ProducerMode::Single,
                ..hostile()
            },
        ),
    ];
    for (kind, cfg) in kinds {
        let ns = Namespace::concurrent("moved_shared_gate");
        let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
        let mut c = ring
            .consumer(ConsumerOptions::durable("d"))
            .expect("consumer");
        let mut p = ring.producer().expect("producer");
        for v in 0..8u64 {
            assert_eq!(p.try_publish(&v.to_le_bytes()), Ok(v), "{kind}");
        }
        assert_eq!(p.try_publish(&[9; 8]), Err(TryPublishError::Full), "{kind}");
        put64(ring.path(), SHARED_GATE, 1 << 61);
        assert_eq!(
            p.try_publish(&[9; 8]),
            Err(TryPublishError::Full),
            "{kind}: the producer trusted the moved gate"
        );
        drop(p);
        let mut q = ring
            .producer()
            .expect("a producer attaching after the write");
        assert_eq!(
            q.try_publish(&[9; 8]),
            Err(TryPublishError::Full),
            "{kind}: a new producer trusted the moved gate"
        );
        let mut got = Vec::new();
        while poll_quiet(&ring, &mut c, |ev| got.extend(ev.read::<u64>())).expect("poll") > 0 {}
        assert_eq!(got, (0..8).collect::<Vec<_>>(), "{kind}");
        assert_eq!(q.try_publish(&[9; 8]), Ok(8), "{kind}: room once it read");
    }
}

/// A slot's stamp overwritten by another process with an older lap's, on a slot whose
/// previous lap this producer wrote in an earlier run of its claims: the try forms say the
/// ring is full, and the timed form times out, instead of taking the claim and then waiting
/// for ever to write it. Before, the look at the room counted the slot free from the
/// earlier run, the write took it by its stamp, found it held, and waited for a late write
/// that never comes (found by the `segment` fuzz target).
#[test]
fn a_slot_stamp_moved_back_by_another_process_is_full_for_the_try_forms() {
    let ns = Namespace::concurrent("stamp_moved_back");
    let ring = Ring::create(ns.name(), "r", &hostile()).unwrap();
    let mut p = ring.producer().expect("producer");
    for i in 0..6u64 {
        assert_eq!(p.publish(&[1; 8]), Ok(i));
    }
    let mut other = ring.producer().expect("a second producer");
    for i in 6..8u64 {
        assert_eq!(other.publish(&[1; 8]), Ok(i));
    }
    // The slot of sequence 0 (and 8) says sequence 1: a lap older than 0's for that slot.
    put64(ring.path(), ring.geometry().slot_offset(0), 1);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let tried = p.try_publish(&[2; 8]);
        let timed = p.publish_timeout(&[2; 8], Duration::from_millis(50));
        let _ = tx.send((tried, timed));
    });
    let (tried, timed) = rx
        .recv_timeout(shmring_testkit::WAIT)
        .expect("a try form waited for ever to write a claim it took");
    assert_eq!(tried, Err(TryPublishError::Full));
    assert_eq!(timed, Err(TryPublishError::Timeout));
}

/// A batch try whose first slot is vouched for by the range a required consumer's reads
/// gave an earlier write, and whose second slot gets a short range during the try's look at
/// the room (a sixteenth of a ring or less), the first slot's stamp moved back by another
/// process: the batch is refused as full or written, never taken and then waited on for
/// ever. Before, the look replaced the range with the second one, the write of the first
/// slot no longer found it covered, could not look for a witness again yet, and took the
/// slot by its stamp: held. (Found by review.)
#[test]
fn a_batch_try_keeps_the_range_its_look_counted_on() {
    let ns = Namespace::concurrent("vouch_replaced");
    let cfg = RingConfig {
        capacity: 64,
        slot_size: 64,
        max_consumers: 3,
        max_producers: 2,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().batch_cap(1))
        .expect("consumer");
    let mut p = ring.producer().expect("producer");
    let mut q = ring.producer().expect("a second producer");
    for i in 0..64u64 {
        assert_eq!(q.publish(&[1; 8]), Ok(i));
    }
    for _ in 0..20 {
        assert_eq!(poll_quiet(&ring, &mut c, |_| ()), Ok(1));
    }
    // p's write of 64 (previous lap 0) finds the consumer's reads: 0..20 vouched for.
    assert_eq!(p.publish(&[1; 8]), Ok(64));
    for i in 65..83u64 {
        assert_eq!(q.publish(&[1; 8]), Ok(i));
    }
    for _ in 0..2 {
        assert_eq!(poll_quiet(&ring, &mut c, |_| ()), Ok(1));
    }
    // The slot of 83 (previous lap 19) says sequence 1.
    put64(ring.path(), ring.geometry().slot_offset(83), 1);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(p.try_publish_batch(&[[2u8; 8], [2u8; 8]]));
    });
    let tried = rx
        .recv_timeout(shmring_testkit::WAIT)
        .expect("try_publish_batch waited for ever to write a claim it took");
    assert!(
        matches!(tried, Err(TryPublishError::Full) | Ok(83)),
        "{tried:?}"
    );
}
