//! Attaching while a producer runs. A producer process publishes without pause (no
//! consumer holds it back before the first attach, so it laps the ring freely); another
//! process attaches a consumer, takes some events, detaches, and does it again, many times.
//!
//! - A required consumer sees the contiguous run of sequences starting exactly at the
//!   position `attach` returned: nothing published after the attach is missed, and no event
//!   it is handed was overwritten under it (every payload passes its checksum).
//! - An optional consumer may be lapped, but never hands out a torn slot (its seqlock copy),
//!   and its counters account for every sequence it walked past.
//!
//! The ring is stopped by removing it; the producer must see that as a clean end.

use shmring::{Ring, RingConfig};
use shmring_testkit::report::{line, num};
use shmring_testkit::{testkit, Namespace};

fn attach_while_running(test: &str, size: &str, optional: bool) {
    let ns = Namespace::new(test);
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "live", &config).expect("create ring");
    let mut producer = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring live --count 0 --size {size} --mode mixed"
    );
    // Attach only once publishing is under way.
    producer.expect_line("started");
    // A lapped optional consumer makes slow progress against a free-running producer on a
    // loaded machine (it must copy a slot before the producer comes round again, ~16 events
    // later; measured ~20 events/s with two CPU hogs on two cores): short rounds.
    let (rounds, events, optional_flag) = if optional {
        (12, 25, "--optional")
    } else {
        (25, 400, "")
    };
    let mut attacher = testkit!(
        ns,
        "attacher",
        "attach-loop --ns {ns} --ring live --rounds {rounds} --events {events} --size {size} \
         {optional_flag}"
    );
    attacher.expect_line("ready");
    let out = attacher.wait_ok();
    assert_eq!(num(line(&out, "done"), "rounds"), rounds);
    let mut later_starts = 0;
    let mut last_start = None;
    for l in out.iter().filter(|l| l.starts_with("round")) {
        let start = num(l, "start");
        if !optional {
            // Nothing missed: the first event is the attach position itself.
            assert_eq!(num(l, "first"), start, "{l}");
            assert_eq!(num(l, "dropped"), 0, "{l}");
        }
        assert!(start > 0, "attached before anything was published: {l}");
        if last_start.is_some_and(|s| start > s) {
            later_starts += 1;
        }
        last_start = Some(start);
    }
    assert_eq!(
        later_starts,
        rounds - 1,
        "attach positions must increase: {out:#?}"
    );

    // Stop the stream: removal closes the claim counter and the producer ends cleanly.
    Ring::remove(ns.name(), "live").expect("remove ring");
    let out = producer.wait_ok();
    assert!(num(line(&out, "done"), "published") > 0);
    drop(ring);
}

#[test]
fn a_required_consumer_attaching_mid_stream_misses_nothing_8_byte() {
    attach_while_running("attach_required_8", "8", false);
}

#[test]
fn a_required_consumer_attaching_mid_stream_misses_nothing_full_slot() {
    attach_while_running("attach_required_full", "max", false);
}

#[test]
fn an_optional_consumer_attaching_mid_stream_never_reads_a_torn_slot() {
    attach_while_running("attach_optional_full", "max", true);
}
