//! Fault injection: a consumer and a producer SIGKILLed while parked on the futex.
//!
//! A parker raises its wake line's waiter count before it sleeps and lowers it when it
//! wakes; killed in between, it never lowers it. What that may cost: the next waker sees
//! the raised count and pays one wake (the wake word goes up by one, with a `futex_wake`
//! behind it). That wake resets the count, so the waker after it sees zero and pays
//! nothing: a publish (or, for a parked producer, a consumer's commit) no longer wakes.
//!
//! A child is killed only once its main thread is asleep in `futex` and the count shows its
//! raise; the park's 50 ms net makes a parker lower and raise again, so a kill that lands
//! in that gap (the count then reads zero) is retried with a new child.

use shmring::{ConsumerOptions, Ring, RingConfig};
use shmring_testkit::payload::{encode, Origin};
use shmring_testkit::procfs::{blocked_in, SYS_FUTEX};
use shmring_testkit::raw::{Line, RawSegment};
use shmring_testkit::{eventually, testkit, Child, Namespace};

/// Kills that may land between two parks before one lands inside a park.
const ATTEMPTS: usize = 5;

/// Spawn children with `spawn` until one is killed asleep in the futex with its raise
/// still counted on `line`. Returns the killed child (reaped).
fn kill_parked(raw: &RawSegment, line: Line, mut spawn: impl FnMut() -> Child) -> Child {
    for _ in 0..ATTEMPTS {
        let mut child = spawn();
        let pid = child.pid();
        eventually(
            "the child's main thread to sleep in futex with its raise counted",
            || blocked_in(pid, pid) == Some(SYS_FUTEX) && raw.waiters(line) == 1,
        );
        child.kill();
        if raw.waiters(line) == 1 {
            return child;
        }
    }
    panic!("{ATTEMPTS} kills all landed between two parks");
}

fn event(seq: u64) -> Vec<u8> {
    encode(Origin { producer: 0, seq }, 8)
}

#[test]
fn a_consumer_killed_parked_costs_the_next_publish_one_wake_and_later_ones_nothing() {
    let ns = Namespace::new("parked_kill_consumer");
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let raw = RawSegment::open(&ring);
    let _dead = kill_parked(&raw, Line::Consumer, || {
        let mut c = testkit!(
            ns,
            "blocking consumer",
            "consume --ns {ns} --ring r --per-producer 1000 --wait block"
        );
        c.expect_line("ready");
        c
    });
    // Its anonymous entry would gate the producer: free it, as the broker does.
    for c in ring.info().consumers {
        assert!(
            ring.free_consumer(c.index, c.word),
            "the dead consumer's entry: {c:?}"
        );
    }
    assert_eq!(raw.waiters(Line::Consumer), 1, "the dead parker's raise");

    let mut producer = ring.producer().expect("producer");
    let word = raw.wake_word(Line::Consumer);
    producer.publish(&event(0)).expect("publish");
    assert_eq!(
        raw.wake_word(Line::Consumer),
        word.wrapping_add(1),
        "the first publish after the kill wakes once"
    );
    assert_eq!(
        raw.waiters(Line::Consumer),
        0,
        "that wake leaves no waiter counted"
    );
    for seq in 1..8 {
        producer.publish(&event(seq)).expect("publish");
    }
    assert_eq!(
        raw.wake_word(Line::Consumer),
        word.wrapping_add(1),
        "later publishes wake nobody"
    );
    assert_eq!(raw.waiters(Line::Consumer), 0);
}

#[test]
fn a_producer_killed_parked_for_room_costs_the_next_commit_one_wake_and_later_ones_nothing() {
    let ns = Namespace::new("parked_kill_producer");
    let capacity = 8;
    let config = RingConfig {
        capacity,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let raw = RawSegment::open(&ring);
    // Reads nothing until the producer is dead, then two batches of four.
    let mut consumer = ring
        .consumer(ConsumerOptions::durable("c").batch_cap(4))
        .expect("consumer");
    let _dead = kill_parked(&raw, Line::Producer, || {
        let mut p = testkit!(
            ns,
            "producer on a full ring",
            "produce --ns {ns} --ring r --count 100 --mode publish"
        );
        p.expect_line("ready");
        p
    });
    // The dead producer's entry (it holds the claim of sequence 8, waiting for room) and a
    // previous attempt's: theirs to repair once the slots are read, not this test's.
    assert_eq!(raw.waiters(Line::Producer), 1, "the dead parker's raise");

    let word = raw.wake_word(Line::Producer);
    assert_eq!(consumer.poll_once(|_| {}).expect("poll"), 4);
    assert_eq!(
        raw.wake_word(Line::Producer),
        word.wrapping_add(1),
        "the first commit after the kill wakes once"
    );
    assert_eq!(
        raw.waiters(Line::Producer),
        0,
        "that wake leaves no waiter counted"
    );
    assert_eq!(consumer.poll_once(|_| {}).expect("poll"), 4);
    assert_eq!(
        raw.wake_word(Line::Producer),
        word.wrapping_add(1),
        "a later commit wakes nobody"
    );
    assert_eq!(raw.waiters(Line::Producer), 0);
}
