//! Hostile bytes in a live segment, interleaved with bounded client operations.
//!
//! Each input names a ring format and lists operations on one fresh ring of it (capacity 8,
//! 3 consumer entries; stamped slots with 2 producer entries, or fixed-size 8-byte or sized
//! events of up to 24 bytes with one producer): writes of chosen values into chosen fields
//! of the sequence lines (a cursor ring's cursor, tomb bound and `pending` word included),
//! the tables, the slots and the non-checksummed header words (the way another process with
//! write access could scribble over them), and the client calls a process or the broker
//! makes that cannot wait forever by design: attach and detach, `try_publish`,
//! `publish_timeout`, `poll_once`, `has_pending`, `stop`, `start`, `drain` with a zero
//! timeout, `info`, the broker's repairs (`repair_dead_producer`, `tombstone`,
//! `release_consumer`, `free_consumer`) and a re-open. The blocking forms (`publish`,
//! `publish_batch`, `claim`, `Consumer::run`/`wait`) are left out: they wait for room or
//! events by contract, and corrupt gating can legitimately make that forever.
//!
//! The property: every call returns (libFuzzer's `-timeout` catches a hang), nothing
//! panics (`poll_once` catches the handler's own panics and only those, so handler checks
//! are made outside it, and a `HandlerPanicked` from this handler, which cannot panic, is
//! a crash), a poll returns `Failed` only after an error that ended its handle
//! (`EntryLost`, `HandlerFailed`), no event longer than the slot's payload is delivered,
//! and `info()` only names entries that exist. Built without `-a`, overflow checks are off as in a release build; with
//! `cargo fuzz run -a` they are on and an arithmetic overflow on a hostile value is a crash.

#![no_main]

use std::fs::{File, OpenOptions};
use std::mem::offset_of;
use std::os::unix::fs::FileExt;
use std::sync::{Once, OnceLock};
use std::time::Duration;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use shmring::{Consumer, ConsumerOptions, PollError, Producer, Ring, RingConfig};
use shmring_layout::{
    ConsumerCold, ConsumerCounters, ConsumerEntry, ConsumerHot, CursorLine, Geometry, Header,
    LifecycleLine, ProducerEntry, SequenceLines, SlotHeader, WakeLine, CLAIM_CLOSED,
    IN_FLIGHT_CLAIMING, LINE, SLOT_HEADER_SIZE, STAMP_WRITING,
};

const MAX_OPS: usize = 48;

/// The ring's event format: stamped slots, or a ring published by a cursor.
#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Stamped,
    /// Fixed-size 8-byte events.
    Fixed,
    /// Sized events of at most 24 bytes.
    Sized,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Field {
    Claim,
    Cursor,
    TombEnd,
    Pending,
    Gating,
    ConsumerWaiters,
    ConsumerWord,
    ProducerWaiters,
    ProducerWord,
    State,
    Run,
    StopSeq,
    BrokerEpoch,
    FenceMode,
    ConsumerNext(u8),
    ConsumerState(u8),
    ConsumerFlags(u8),
    ConsumerPid(u8),
    ConsumerStart(u8),
    ConsumerName(u8, u8),
    ConsumerCounter(u8, u8),
    ConsumerParked(u8),
    ConsumerDownstreamWaiters(u8),
    ConsumerDownstreamWord(u8),
    ProducerState(u8),
    ProducerPid(u8),
    ProducerStart(u8),
    ProducerInFlight(u8),
    ProducerInFlightLen(u8),
    ProducerCounter(u8, u8),
    SlotStamp(u8),
    SlotLen(u8),
    SlotFlags(u8),
    SlotPayload(u8, u8),
    /// Any 8-byte-aligned word past the header.
    Raw(u32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Value {
    Zero,
    One,
    Small(u8),
    Max,
    MaxMinus(u8),
    Closed(u8),
    Writing(u8),
    /// The current head plus a small signed delta.
    Head(i8),
    /// Pid 1 (a live process unrelated to the ring).
    Pid1,
    OwnPid,
    OwnStart,
    Claiming,
    Any(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Kind {
    Anonymous,
    Durable(u8),
    OptionalDurable(u8),
    OptionalAnonymous,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Write(Field, Value),
    AttachConsumer(Kind),
    DropConsumer(u8),
    Unsubscribe(u8),
    Poll(u8),
    HasPending(u8),
    AttachProducer,
    DropProducer(u8),
    TryPublish(u8, u8),
    PublishTimeout(u8, u8),
    Stop,
    Start,
    Drain,
    Info,
    RepairDeadProducers,
    Tombstone(i8),
    IsPublished(i8),
    Release(u8),
    Free(u8),
    Reopen,
}

fn namespace() -> String {
    format!("fuzz-{}", std::process::id())
}

/// Remove namespaces left by fuzzing processes that crashed (their pid is gone).
fn sweep_stale() {
    let root = shmring::names::root();
    let Ok(dir) = std::fs::read_dir(&root) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("shmring.fuzz-") else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn config(format: Format) -> RingConfig {
    let stamped = RingConfig {
        capacity: 8,
        slot_size: 64,
        max_consumers: 3,
        max_producers: 2,
        ..RingConfig::default()
    };
    let cursor = RingConfig {
        producer_mode: shmring::ProducerMode::Single,
        max_producers: 1,
        ..stamped.clone()
    };
    match format {
        Format::Stamped => stamped,
        Format::Fixed => RingConfig {
            event_size: Some(8),
            ..cursor
        },
        Format::Sized => RingConfig {
            max_event_size: Some(24),
            ..cursor
        },
    }
}

/// A publish's length from the fuzzer's byte: any length up to 63, or (every other byte)
/// the size a fixed-size ring takes.
fn payload_len(format: Format, len: u8) -> usize {
    if format == Format::Fixed && len % 2 == 0 {
        8
    } else {
        usize::from(len) % 64
    }
}

/// Where a field lives and how wide it is.
fn locate(g: &Geometry, f: Field) -> (u64, usize) {
    let lines = shmring_layout::SEQ_LINES_OFFSET as u64;
    let line = |field: usize| lines + field as u64;
    let consumer = |i: u8| {
        g.consumer_offset(u32::from(i) % g.max_consumers)
            .unwrap_or(0)
    };
    let producer = |i: u8| {
        g.producer_offset(u32::from(i) % g.max_producers)
            .unwrap_or(0)
    };
    let slot = |i: u8| g.slot_offset(u64::from(i));
    let hot =
        |i: u8, field: usize| consumer(i) + offset_of!(ConsumerEntry, hot) as u64 + field as u64;
    let cold =
        |i: u8, field: usize| consumer(i) + offset_of!(ConsumerEntry, cold) as u64 + field as u64;
    match f {
        Field::Claim => (line(offset_of!(SequenceLines, claim)), 8),
        Field::Cursor => (
            line(offset_of!(SequenceLines, cursor) + offset_of!(CursorLine, cursor)),
            8,
        ),
        Field::TombEnd => (
            line(offset_of!(SequenceLines, cursor) + offset_of!(CursorLine, tomb_end)),
            8,
        ),
        Field::Pending => (
            line(offset_of!(SequenceLines, cursor) + offset_of!(CursorLine, pending)),
            8,
        ),
        Field::Gating => (line(offset_of!(SequenceLines, gating)), 8),
        Field::ConsumerWaiters => (
            line(offset_of!(SequenceLines, consumer_wake) + offset_of!(WakeLine, waiters)),
            8,
        ),
        Field::ConsumerWord => (
            line(offset_of!(SequenceLines, consumer_wake) + offset_of!(WakeLine, word)),
            4,
        ),
        Field::ProducerWaiters => (
            line(offset_of!(SequenceLines, producer_wake) + offset_of!(WakeLine, waiters)),
            8,
        ),
        Field::ProducerWord => (
            line(offset_of!(SequenceLines, producer_wake) + offset_of!(WakeLine, word)),
            4,
        ),
        Field::State => (
            line(offset_of!(SequenceLines, lifecycle) + offset_of!(LifecycleLine, lifecycle)),
            8,
        ),
        Field::Run => (offset_of!(Header, run) as u64, 8),
        Field::StopSeq => (
            line(offset_of!(SequenceLines, lifecycle) + offset_of!(LifecycleLine, stop_seq)),
            8,
        ),
        Field::BrokerEpoch => (offset_of!(Header, broker_epoch) as u64, 8),
        Field::FenceMode => (offset_of!(Header, fence_mode) as u64, 4),
        Field::ConsumerNext(i) => (hot(i, offset_of!(ConsumerHot, next)), 8),
        // The entry's whole word, and its low half: the holder's pid (little-endian).
        Field::ConsumerState(i) => (hot(i, offset_of!(ConsumerHot, word)), 8),
        Field::ConsumerFlags(i) => (hot(i, offset_of!(ConsumerHot, flags)), 4),
        Field::ConsumerPid(i) => (hot(i, offset_of!(ConsumerHot, word)), 4),
        Field::ConsumerStart(i) => (cold(i, offset_of!(ConsumerCold, start_time)), 8),
        Field::ConsumerName(i, w) => (
            cold(i, offset_of!(ConsumerCold, name) + 8 * usize::from(w % 6)),
            8,
        ),
        Field::ConsumerCounter(i, c) => (
            cold(
                i,
                offset_of!(ConsumerCold, counters)
                    + 8 * (usize::from(c) % (size_of::<ConsumerCounters>() / 8)),
            ),
            8,
        ),
        Field::ConsumerParked(i) => (cold(i, offset_of!(ConsumerCold, parked)), 4),
        Field::ConsumerDownstreamWaiters(i) => (
            hot(
                i,
                offset_of!(ConsumerHot, downstream) + offset_of!(WakeLine, waiters),
            ),
            8,
        ),
        Field::ConsumerDownstreamWord(i) => (
            hot(
                i,
                offset_of!(ConsumerHot, downstream) + offset_of!(WakeLine, word),
            ),
            4,
        ),
        Field::ProducerState(i) => (producer(i) + offset_of!(ProducerEntry, word) as u64, 8),
        Field::ProducerPid(i) => (producer(i) + offset_of!(ProducerEntry, word) as u64, 4),
        Field::ProducerStart(i) => (
            producer(i) + offset_of!(ProducerEntry, start_time) as u64,
            8,
        ),
        Field::ProducerInFlight(i) => {
            (producer(i) + offset_of!(ProducerEntry, in_flight) as u64, 8)
        }
        Field::ProducerInFlightLen(i) => (
            producer(i) + offset_of!(ProducerEntry, in_flight_len) as u64,
            8,
        ),
        Field::ProducerCounter(i, c) => (
            producer(i) + offset_of!(ProducerEntry, published) as u64 + 8 * u64::from(c % 5),
            8,
        ),
        // A ring published by a cursor has no slot header: its slots (and their tomb
        // words, after them) are payload words.
        Field::SlotStamp(i) | Field::SlotLen(i) | Field::SlotFlags(i) if g.fixed => (
            g.slots_offset + (8 * u64::from(i)) % (g.total_size - g.slots_offset),
            8,
        ),
        Field::SlotPayload(i, w) if g.fixed => (
            g.slots_offset
                + (8 * (u64::from(i) * 256 + u64::from(w))) % (g.total_size - g.slots_offset),
            8,
        ),
        Field::SlotStamp(i) => (slot(i) + offset_of!(SlotHeader, stamp) as u64, 8),
        Field::SlotLen(i) => (slot(i) + offset_of!(SlotHeader, len) as u64, 4),
        Field::SlotFlags(i) => (slot(i) + offset_of!(SlotHeader, flags) as u64, 4),
        Field::SlotPayload(i, w) => (
            slot(i)
                + SLOT_HEADER_SIZE as u64
                + 8 * u64::from(u32::from(w) % ((g.slot_size - 16) / 8)),
            8,
        ),
        Field::Raw(at) => {
            let start = LINE as u64 * 2;
            (start + (u64::from(at) * 8) % (g.total_size - start), 8)
        }
    }
}

fn value(v: Value, ring: &Ring) -> u64 {
    let me = shmring::process::current();
    match v {
        Value::Zero => 0,
        Value::One => 1,
        Value::Small(n) => u64::from(n),
        Value::Max => u64::MAX,
        Value::MaxMinus(n) => u64::MAX - u64::from(n),
        Value::Closed(n) => CLAIM_CLOSED | u64::from(n),
        Value::Writing(n) => STAMP_WRITING | u64::from(n),
        Value::Head(d) => ring.head().saturating_add_signed(i64::from(d)),
        Value::Pid1 => 1,
        Value::OwnPid => u64::from(me.pid),
        Value::OwnStart => me.start_time,
        Value::Claiming => IN_FLIGHT_CLAIMING,
        Value::Any(n) => n,
    }
}

/// With `SHMRING_FUZZ_MASK_KNOWN=1`, writes that reach the overflow findings of the first
/// runs (fixed since, each with its test in `client/tests/hostile_tables.rs`) are skipped,
/// so that a run looks for new ones.
fn masked(f: Field, v: u64, ring: &Ring) -> bool {
    static MASK: OnceLock<bool> = OnceLock::new();
    if !*MASK.get_or_init(|| std::env::var_os("SHMRING_FUZZ_MASK_KNOWN").is_some()) {
        return false;
    }
    match f {
        Field::Run | Field::BrokerEpoch | Field::ConsumerCounter(..) | Field::Raw(_) => true,
        Field::ConsumerNext(_) => v > ring.head(),
        _ => false,
    }
}

fn write(file: &File, ring: &Ring, f: Field, v: Value) {
    let (off, width) = locate(ring.geometry(), f);
    let v = value(v, ring);
    if masked(f, v, ring) {
        return;
    }
    let r = if width == 4 {
        file.write_all_at(&(v as u32).to_ne_bytes(), off)
    } else {
        file.write_all_at(&v.to_ne_bytes(), off)
    };
    r.expect("writing into the segment");
}

fn options(k: Kind) -> ConsumerOptions {
    let name = |n: u8| format!("c{}", n % 3);
    match k {
        Kind::Anonymous => ConsumerOptions::anonymous(),
        Kind::Durable(n) => ConsumerOptions::durable(name(n)),
        Kind::OptionalDurable(n) => ConsumerOptions::durable(name(n)).optional(),
        Kind::OptionalAnonymous => ConsumerOptions::anonymous().optional(),
    }
    .batch_cap(4)
}

fn pick<T>(v: &mut [T], i: u8) -> Option<&mut T> {
    let n = v.len();
    (n > 0).then(|| &mut v[usize::from(i) % n])
}

fn check_info(ring: &Ring) {
    let g = ring.geometry();
    let info = ring.info();
    assert!(info.consumers.len() <= g.max_consumers as usize);
    assert!(info.consumers.iter().all(|c| c.index < g.max_consumers));
    assert!(info.producers.len() <= g.max_producers as usize);
    assert!(info.producers.iter().all(|p| p.index < g.max_producers));
}

fn run(format: Format, ops: &[Op]) {
    let ns = namespace();
    clear(&ns);
    let ring = Ring::create(&ns, "r", &config(format)).expect("create the fuzzing ring");
    let file = OpenOptions::new()
        .write(true)
        .open(ring.path())
        .expect("open the segment");
    let max_payload = ring.max_payload();
    // Each consumer, and whether a poll of it returned an error after which the handle
    // delivers nothing more (`PollError::Failed` from then on).
    let mut consumers: Vec<(Consumer, bool)> = Vec::new();
    let mut producers: Vec<Producer> = Vec::new();
    // A producer and a durable consumer that saw some traffic: the tables start populated.
    if let (Ok(mut p), Ok(c)) = (ring.producer(), ring.consumer(options(Kind::Durable(0)))) {
        for i in 0..5u64 {
            let _ = p.try_publish(&i.to_le_bytes());
        }
        producers.push(p);
        consumers.push((c, false));
    }
    for &op in ops.iter().take(MAX_OPS) {
        match op {
            Op::Write(f, v) => write(&file, &ring, f, v),
            Op::AttachConsumer(k) => {
                if consumers.len() < 4 {
                    if let Ok(c) = ring.consumer(options(k)) {
                        consumers.push((c, false));
                    }
                }
            }
            Op::DropConsumer(i) => {
                if !consumers.is_empty() {
                    let n = consumers.len();
                    drop(consumers.swap_remove(usize::from(i) % n));
                }
            }
            Op::Unsubscribe(i) => {
                if !consumers.is_empty() {
                    let n = consumers.len();
                    consumers.swap_remove(usize::from(i) % n).0.unsubscribe();
                }
            }
            Op::Poll(i) => {
                if let Some((c, ended)) = pick(&mut consumers, i) {
                    let mut longest = 0;
                    let r = c.poll_once(|ev| longest = longest.max(ev.bytes().len()));
                    // `Failed` only after an error that ended the handle: its entry taken
                    // (hostile writes do that) or a handler failure (a hostile poison
                    // record can report one); a handler that cannot panic never panics.
                    assert!(
                        !matches!(r, Err(PollError::HandlerPanicked { .. }))
                            && (*ended || !matches!(r, Err(PollError::Failed))),
                        "poll_once with a handler that cannot panic: {r:?}"
                    );
                    *ended |= matches!(
                        r,
                        Err(PollError::EntryLost | PollError::HandlerFailed { .. })
                    );
                    assert!(longest <= max_payload, "delivered {longest} bytes");
                }
            }
            Op::HasPending(i) => {
                if let Some((c, _)) = pick(&mut consumers, i) {
                    let _ = c.has_pending();
                    let _ = c.stats();
                }
            }
            Op::AttachProducer => {
                if producers.len() < 3 {
                    if let Ok(p) = ring.producer() {
                        producers.push(p);
                    }
                }
            }
            Op::DropProducer(i) => {
                if !producers.is_empty() {
                    let n = producers.len();
                    drop(producers.swap_remove(usize::from(i) % n));
                }
            }
            Op::TryPublish(i, len) => {
                if let Some(p) = pick(&mut producers, i) {
                    let _ = p.try_publish(&vec![len; payload_len(format, len)]);
                }
            }
            Op::PublishTimeout(i, len) => {
                if let Some(p) = pick(&mut producers, i) {
                    let _ = p.publish_timeout(
                        &vec![len; payload_len(format, len)],
                        Duration::from_micros(50),
                    );
                }
            }
            Op::Stop => {
                let _ = ring.stop();
            }
            Op::Start => {
                let _ = ring.start();
            }
            Op::Drain => {
                let _ = ring.drain(Duration::ZERO);
            }
            Op::Info => check_info(&ring),
            Op::RepairDeadProducers => {
                // What the broker does after the unblock timeout, for every dead producer.
                // The repair itself checks that the entry's holder is gone.
                for p in ring.info().producers {
                    let _ = ring.repair_dead_producer(p.index, p.word);
                }
            }
            Op::Tombstone(d) => {
                let _ = ring.tombstone(ring.head().saturating_add_signed(i64::from(d)));
            }
            Op::IsPublished(d) => {
                let _ = ring.is_published(ring.head().saturating_add_signed(i64::from(d)));
            }
            Op::Release(i) | Op::Free(i) => {
                let info = ring.info();
                if let Some(c) = info
                    .consumers
                    .get(usize::from(i) % info.consumers.len().max(1))
                {
                    if matches!(op, Op::Release(_)) {
                        let _ = ring.release_consumer(c.index, c.word);
                    } else {
                        let _ = ring.free_consumer(c.index, c.word);
                    }
                }
            }
            Op::Reopen => {
                if let Ok(other) = Ring::open(&ns, "r") {
                    check_info(&other);
                }
            }
        }
    }
    check_info(&ring);
    drop(consumers);
    drop(producers);
    clear(&ns);
}

/// Remove the ring `r` of namespace `ns`, and its file if the remove is refused: an input
/// may leave a lifecycle word naming a live process (pid 1, this one, any pid it wrote) as
/// the owner of a change in progress, which `Ring::remove` waits for and then refuses
/// (`Busy`), as it must; the next input needs a fresh ring all the same. Then the
/// namespace directory, so that a run that ends (libFuzzer exits without unwinding) leaves
/// nothing in the shared-memory root; the next input's create makes it again.
fn clear(ns: &str) {
    let removed = Ring::remove(ns, "r");
    if let Ok(dir) = shmring::names::namespace_dir(ns) {
        if removed.is_err() {
            let _ = std::fs::remove_file(dir.join("r.ring"));
        }
        let _ = std::fs::remove_dir(dir);
    }
}

fuzz_target!(|input: (Format, Vec<Op>)| {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(sweep_stale);
    run(input.0, &input.1);
});
