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

#[test]
fn a_producer_that_died_mid_batch_leaves_tombstones_not_a_hole() {
    let ns = Namespace::new("sp_takeover");
    let config = RingConfig {
        capacity: 16,
        producer_mode: ProducerMode::Single,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    let mut first = ring.producer().expect("producer");
    for i in 0..3u8 {
        first.publish(&[i]).expect("publish");
    }
    drop(first);
    // What a producer SIGKILLed inside `publish_batch` of two events leaves: its entry
    // ACTIVE under a dead pid, its position 5, sequences 3 and 4 never stamped.
    let raw = RawSegment::open(&ring);
    raw.fabricate_dead_producer(0, dead_pid(), 1, 0, 0);
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
