//! Fan-out across processes: 1P1C, 1P3C and 3P2C on a 16-slot ring, for 8-byte and for
//! full-slot events. Every consumer process must receive every event exactly once, in
//! publish order per producer (per-producer sequence numbers and checksums, checked in the
//! consumer child), over at least 100 wraps of the ring.
//!
//! Consumers (alternately anonymous and durable) are attached, and say `ready`, before any
//! producer starts, so nothing is published that they are not entitled to. Producers use
//! every publishing form in turn (`--mode mixed`). The consumers' wait strategies vary per
//! test (yielding, sleeping, blocking on the futex, adaptive), so the cross-process park and
//! wake path carries some of the streams; none spins, so two cores are enough.

use shmring::{Ring, RingConfig};
use shmring_testkit::report::{self, line, num};
use shmring_testkit::{testkit, Child, Namespace};

const CAPACITY: u64 = 16;

fn fan_out(test: &str, producers: u32, consumers: u32, per_producer: u64, size: &str, wait: &str) {
    let ns = Namespace::new(test);
    let config = RingConfig {
        capacity: CAPACITY,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "fan", &config).expect("create ring");

    let mut cons: Vec<Child> = (0..consumers)
        .map(|i| {
            // Alternately anonymous and durable.
            let name = if i % 2 == 1 {
                format!("--name durable-{i}")
            } else {
                String::new()
            };
            let mut c = testkit!(
                ns,
                format!("consumer {i}"),
                "consume --ns {ns} --ring fan --producers {producers} --per-producer \
                 {per_producer} --size {size} --wait {wait} {name}"
            );
            let ready = c.expect_line("ready");
            assert_eq!(num(&ready, "start"), 0, "{ready}");
            c
        })
        .collect();
    let prods: Vec<Child> = (0..producers)
        .map(|p| {
            testkit!(
                ns,
                format!("producer {p}"),
                "produce --ns {ns} --ring fan --producer-id {p} --count {per_producer} \
                 --size {size} --mode mixed"
            )
        })
        .collect();

    for p in prods {
        let out = p.wait_ok();
        let done = line(&out, "done");
        assert_eq!(num(done, "published"), per_producer, "{done}");
        assert_eq!(num(done, "stats_published"), per_producer, "{done}");
        assert_eq!(num(done, "tombstones"), 0, "{done}");
    }
    let total = per_producer * u64::from(producers);
    for (i, c) in cons.drain(..).enumerate() {
        let out = c.wait_ok();
        let done = line(&out, "done");
        // Exactly once: the child checked order and integrity per producer and saw each
        // producer's last event; the counts say nothing was delivered twice.
        assert_eq!(num(done, "delivered"), total, "consumer {i}: {done}");
        assert_eq!(num(done, "stats_delivered"), total, "consumer {i}: {done}");
        assert_eq!(num(done, "skipped"), 0, "consumer {i}: {done}");
        assert_eq!(num(done, "dropped"), 0, "consumer {i}: {done}");
        assert_eq!(num(done, "clamped"), 0, "consumer {i}: {done}");
        assert_eq!(num(done, "next"), total, "consumer {i}: {done}");
        assert_eq!(num(done, "first_ring"), 0, "consumer {i}: {done}");
        assert_eq!(num(done, "last_ring"), total - 1, "consumer {i}: {done}");
        let firsts = report::per_producer(done, "firsts");
        let lasts = report::per_producer(done, "lasts");
        for p in 0..producers {
            assert_eq!(firsts.get(&p), Some(&0), "consumer {i}: {done}");
            assert_eq!(
                lasts.get(&p),
                Some(&(per_producer - 1)),
                "consumer {i}: {done}"
            );
        }
    }
    // No sequence was claimed beyond the events: nothing left as a hole or published twice.
    assert_eq!(ring.head(), total);
    assert!(
        ring.head() / CAPACITY >= 100,
        "only {} wraps",
        ring.head() / CAPACITY
    );
    // The durable consumers stay in the table, detached at the end of the stream.
    let info = ring.info();
    for c in &info.consumers {
        assert!(c.durable, "anonymous consumer left in the table: {c:?}");
        assert_eq!(c.next, total, "{c:?}");
        assert_eq!(c.stats.delivered, total, "{c:?}");
    }
    assert_eq!(info.consumers.len(), (consumers / 2) as usize);
}

#[test]
fn one_producer_one_consumer_8_byte_events() {
    fan_out("1p1c_8", 1, 1, 4000, "8", "yield");
}

#[test]
fn one_producer_one_consumer_full_slot_events() {
    fan_out("1p1c_full", 1, 1, 4000, "max", "sleep");
}

#[test]
fn one_producer_three_consumers_8_byte_events() {
    fan_out("1p3c_8", 1, 3, 4000, "8", "block");
}

#[test]
fn one_producer_three_consumers_full_slot_events() {
    fan_out("1p3c_full", 1, 3, 4000, "max", "adaptive");
}

#[test]
fn three_producers_two_consumers_8_byte_events() {
    fan_out("3p2c_8", 3, 2, 1400, "8", "adaptive");
}

#[test]
fn three_producers_two_consumers_full_slot_events() {
    fan_out("3p2c_full", 3, 2, 1400, "max", "block");
}

/// The harness can fail: two producers publishing 100 events each under the same id make a
/// stream in which sequences 0..100 appear twice; a consumer waiting for 0..200 from that
/// producer must reject it, whatever the interleaving.
#[test]
fn the_consumer_child_rejects_a_duplicated_stream() {
    let ns = Namespace::new("checker_self_test");
    let config = RingConfig {
        capacity: CAPACITY,
        ..RingConfig::default()
    };
    let _ring = Ring::create(ns.name(), "dup", &config).expect("create ring");
    let mut c = testkit!(
        ns,
        "consumer",
        "consume --ns {ns} --ring dup --per-producer 200"
    );
    c.expect_line("ready");
    let producers: Vec<Child> = (0..2)
        .map(|i| {
            testkit!(
                ns,
                format!("producer {i}"),
                "produce --ns {ns} --ring dup --producer-id 0 --count 100"
            )
        })
        .collect();
    let status = c.wait_status();
    assert!(!status.success(), "a duplicated stream was accepted");
    let stderr = c.stderr();
    assert!(stderr.contains("duplicate or reordered"), "{stderr}");
    // The child returned its error normally, so its anonymous entry was freed on the way
    // out and stopped gating: the producers finish.
    for p in producers {
        p.wait_ok();
    }
}
