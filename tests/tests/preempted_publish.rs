//! A single producer frozen (SIGSTOP) at a random instruction of its publish loop while the
//! ring stops, then let go: its claim may have read the ring Running before the stop and
//! store its claim after the stopper read the claim word, and is then refused with the claim
//! word one past its position (`line`: the start takes that claim back). Whatever the point,
//! the producer must go on from its own position: after each refusal it counts exactly the
//! events it was told were accepted (the `produce` role checks), each round's first refusal
//! comes at that round's stop sequence, and the last stop's sequence is the number accepted.
//!
//! The producer publishes with nobody gating it, so it spends its time in the publish
//! itself, the fixed-size ring's common case most of all, where the position lives in the
//! claim word (`Producer::position`). Each round waits for the producer to be frozen
//! (`/proc`), stops the ring, lets it go, waits for its report of a refusal, starts the ring
//! and waits for it to publish again: the rounds are ordered by those events, not by time.

use rustix::process::Signal;
use shmring::{FenceMode, ProducerMode, Ring, RingConfig};
use shmring_testkit::procfs::main_thread_state;
use shmring_testkit::report::{line, num};
use shmring_testkit::{eventually, testkit, Namespace};

const ROUNDS: u32 = 400;

fn frozen_mid_publish(mode: ProducerMode, event_size: Option<u32>, form: &str) {
    let ns = Namespace::new("preempted");
    let config = RingConfig {
        capacity: 64,
        producer_mode: mode,
        event_size,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut producer = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring r --count 0 --mode {form} --retry-closed --report-refusals"
    );
    producer.expect_line("ready");
    producer.expect_line("started");
    // The fixed-size common case, and a single producer's stop, need membarrier: the
    // producer wrote its mode into the ring when it attached.
    assert_eq!(ring.fence_mode(), Some(FenceMode::Membarrier));
    let pid = producer.pid();
    let mut last_stop = 0;
    for round in 0..ROUNDS {
        producer.signal(Signal::STOP);
        eventually("the producer is frozen", || {
            main_thread_state(pid) == Some('T')
        });
        let stop = ring.stop().expect("stop");
        assert!(
            stop >= last_stop,
            "round {round}: the line only moves forward"
        );
        last_stop = stop;
        producer.signal(Signal::CONT);
        let refused = producer.expect_line("refused");
        assert_eq!(
            num(&refused, "at"),
            stop,
            "round {round}: the producer was refused at the stop sequence"
        );
        ring.start().expect("start");
        eventually("the producer publishes again", || ring.head() > stop);
    }
    let stop = ring.stop().expect("final stop");
    Ring::remove(ns.name(), "r").expect("remove");
    let out = producer.wait_ok();
    let done = line(&out, "done");
    assert_eq!(
        num(done, "published"),
        stop,
        "accepted = the stop sequence: {done}"
    );
    assert_eq!(num(done, "stats_published"), stop, "{done}");
}

#[test]
fn a_fixed_size_producer_frozen_mid_publish_across_stops_keeps_its_position() {
    frozen_mid_publish(ProducerMode::Single, Some(8), "publish");
}

/// The same through a `Publisher`, whose common case holds the position in a register and
/// hands it to the handle outside it.
#[test]
fn a_fixed_size_publisher_frozen_mid_publish_across_stops_keeps_its_position() {
    frozen_mid_publish(ProducerMode::Single, Some(8), "publisher");
}

#[test]
fn a_single_producer_frozen_mid_publish_across_stops_keeps_its_position() {
    frozen_mid_publish(ProducerMode::Single, None, "publish");
}

#[test]
fn a_multi_producer_frozen_mid_publish_across_stops_keeps_its_position() {
    frozen_mid_publish(ProducerMode::Multi, None, "publish");
}
