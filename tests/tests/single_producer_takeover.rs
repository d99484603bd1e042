//! A single-producer ring whose producer died mid-claim: its claim is the line's position,
//! not recorded in its entry, so the next producer to attach repairs what it left (the
//! unstamped sequences become tombstones that consumers skip and count) before it takes
//! the entry. No hole is left for consumers to wait at forever, and no sequence is handed
//! out twice.

use shmring::{ConsumerOptions, ProducerMode, Ring, RingConfig};
use shmring_testkit::raw::RawSegment;
use shmring_testkit::Namespace;

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

/// A single-producer ring of 16 slots in `ns` with a consumer attached (anonymous, from
/// sequence 0), where a producer published 0, 1 and 2 and detached, and what a producer
/// SIGKILLed in entry 0 leaves: its entry ACTIVE under a dead pid.
fn ring_with_a_dead_producer(ns: &Namespace) -> (Ring, shmring::Consumer, RawSegment) {
    let config = RingConfig {
        capacity: 16,
        producer_mode: ProducerMode::Single,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    let mut first = ring.producer().expect("producer");
    for i in 0..3u8 {
        first.publish(&[i]).expect("publish");
    }
    drop(first);
    let raw = RawSegment::open(&ring);
    raw.fabricate_dead_producer(0, dead_pid(), 1, 0, 0);
    (ring, c, raw)
}

#[test]
fn a_producer_that_died_mid_batch_leaves_tombstones_not_a_hole() {
    let ns = Namespace::new("sp_takeover");
    let (ring, mut c, raw) = ring_with_a_dead_producer(&ns);
    // Killed inside `publish_batch` of two events: its position 5, sequences 3 and 4 never
    // stamped.
    raw.set_claim_word(5);
    let mut next = ring.producer().expect("the next producer takes over");
    assert_eq!(
        next.publish(b"x").expect("publish"),
        5,
        "no sequence handed out twice"
    );
    let mut got = Vec::new();
    // Bounded: each poll delivers or skips something until the ring is drained.
    for _ in 0..4 {
        c.poll_once(|ev| got.push(ev.sequence())).expect("poll");
    }
    assert_eq!(
        got,
        vec![0, 1, 2, 5],
        "the dead claim is skipped, not waited for"
    );
    assert_eq!(c.stats().skipped, 2, "its two sequences are tombstones");
}

/// A producer that died between its last stamp and its wake (a publish stamps, then wakes)
/// left an event that consumers parked right then do not know about. The next producer
/// repairs the dead one before it takes the entry, and so is the first to see the death:
/// it wakes the consumer line, even though there is nothing to tombstone (without a broker,
/// nobody else would until the consumers' 50 ms net).
#[test]
fn a_producer_taking_over_a_dead_one_wakes_the_consumer_line() {
    use shmring_testkit::raw::Line;
    let ns = Namespace::new("sp_takeover_wake");
    // Killed right after its last stamp: every claim stamped, nothing to repair.
    let (ring, _c, raw) = ring_with_a_dead_producer(&ns);
    // Nothing parks on this ring: nothing else moves the consumer line's word.
    let word = raw.wake_word(Line::Consumer);
    let mut next = ring.producer().expect("the next producer takes over");
    assert_eq!(
        raw.wake_word(Line::Consumer).wrapping_sub(word),
        1,
        "the takeover woke the consumer line once"
    );
    assert_eq!(next.publish(b"x").expect("publish"), 3);
}
