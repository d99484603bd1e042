//! A producer killed between claim and commit: after the unblock timeout the broker
//! tombstones its hole, consumers skip it (and count it), and nothing else is lost.

mod common;

use std::time::Instant;

use common::{num, ring, Ns, Proc};
use shmring::{ConsumerOptions, Ring};

#[test]
fn role() {
    common::roles::run_if_child();
}

#[test]
fn a_producer_killed_holding_a_claim_is_repaired_after_the_timeout() {
    let _serial = common::serial();
    let ns = Ns::new("claim");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"2s\"\nunblock_timeout = \"200ms\"\n",
    ));
    let ring_handle = Ring::open(&ns.name, "r").expect("open");
    let mut consumer = ring_handle
        .consumer(ConsumerOptions::durable("reader"))
        .expect("consumer");
    let mut producer = ring_handle.producer().expect("producer");
    for v in 0..5u64 {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    let mut claimer = Proc::role("claimer", &ns.name, &[("ROLE_RING", "r".to_owned())]);
    assert_eq!(claimer.expect("@claimed"), "5");
    for v in 5..10u64 {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    claimer.kill();

    // The consumer gets 0..5, then waits at the hole until the broker repairs it.
    let mut got = Vec::new();
    let deadline = Instant::now() + common::WAIT;
    while got.len() < 10 {
        let n = consumer
            .poll_once(|ev| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&ev.bytes()[..8]);
                got.push(u64::from_le_bytes(b));
            })
            .expect("poll");
        if n == 0 {
            assert!(Instant::now() < deadline, "stuck at the hole; got {got:?}");
            std::thread::sleep(common::POLL);
        }
    }
    assert_eq!(
        got,
        (0..10).collect::<Vec<u64>>(),
        "nothing lost, nothing extra"
    );
    assert_eq!(
        consumer.stats().skipped,
        1,
        "the hole is skipped and counted"
    );
    assert_eq!(consumer.next_sequence(), 11);

    // The sweep that repaired read the consumer before the repair: wait for a later one.
    let v = ns.wait_status("the repair in the status", |v, _| {
        let h = &ring(v, "r")?["health"];
        let reader = common::consumer(v, "r", "reader")?;
        (num(h, "repaired_claims") == 1 && num(reader, "delivered") == 10).then(|| v.clone())
    });
    let r = ring(&v, "r").expect("r");
    assert_eq!(num(&r["health"], "tombstoned"), 1);
    let reader = common::consumer(&v, "r", "reader").expect("reader");
    assert_eq!((num(reader, "skipped"), num(reader, "delivered")), (1, 10));
    assert_eq!(
        r["producers"].as_array().map(Vec::len),
        Some(1),
        "the dead producer's entry is freed: {v:#}"
    );
}
