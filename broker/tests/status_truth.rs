//! `broker status` tells the truth: a ring whose producers wait behind a consumer that
//! cannot move is BLOCKED (exit 1), claimed but unpublished sequences are not lag, and the
//! wake-up side (fence mode, parked waiters, the wake-ups publishers paid) is shown.

mod common;

use std::time::Duration;

use common::{consumer, num, ring, BrokerNs, Namespace};
use shmring::{ConsumerOptions, ErrorPolicy, Ring, TryPublishError, WaitStrategy};

#[test]
fn role() {
    common::roles::run_if_child();
}

#[test]
fn a_full_ring_behind_a_detached_consumer_is_blocked_until_released() {
    let ns = Namespace::new("blocked");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    let r = Ring::open(ns.name(), "r").expect("open");
    drop(
        r.consumer(ConsumerOptions::durable("away"))
            .expect("consumer"),
    );
    let mut producer = r.producer().expect("producer");
    for i in 0..60u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    // A claim taken and not committed: sequence 60 is claimed, not published.
    let claim = producer.claim().expect("claim");
    let v = ns.wait_status("the claim in the report", |v, _| {
        (num(ring(v, "r")?, "head") == 61).then(|| v.clone())
    });
    let away = consumer(&v, "r", "away").expect("away listed");
    assert_eq!(num(away, "lag"), 60, "a claimed sequence is not lag: {v:#}");
    drop(claim); // published as a tombstone
    loop {
        match producer.try_publish(b"fill") {
            Ok(_) => {}
            Err(TryPublishError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let (v, code) = ns.wait_status("the ring blocked", |v, code| {
        ring(v, "r")?["blocked_by"]
            .is_object()
            .then(|| (v.clone(), code))
    });
    assert_eq!(code, 1, "a blocked ring is unhealthy: {v:#}");
    let r_report = ring(&v, "r").expect("r");
    assert_eq!(r_report["blocked_by"]["name"], "away");
    assert_eq!(num(r_report, "free"), 0);
    let away = consumer(&v, "r", "away").expect("away");
    assert_eq!(away["state"], "DETACHED");
    assert!(
        num(away, "lag") <= 64,
        "lag never exceeds the capacity: {v:#}"
    );
    let text = String::from_utf8_lossy(&ns.cli(&["status"]).stdout).into_owned();
    assert!(text.contains("BLOCKED by away (DETACHED)"), "{text}");
    assert!(text.contains("broker release r away"), "{text}");

    assert_eq!(ns.cli(&["release", "r", "away"]).status.code(), Some(0));
    ns.wait_status("healthy after the release", |v, code| {
        (code == 0 && ring(v, "r")?["blocked_by"].is_null()).then_some(())
    });
}

#[test]
fn waiters_fence_mode_and_the_wake_up_bill_are_shown() {
    let ns = Namespace::new("wakes");
    let _broker = ns.broker(Some("[rings.w]\ncapacity = 64\n"));
    let r = Ring::open(ns.name(), "w").expect("open");
    let mut c = r
        .consumer(
            ConsumerOptions::anonymous().wait(WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_secs(20),
            }),
        )
        .expect("consumer");
    let waiter = std::thread::spawn(move || {
        let _ = c.wait();
        c
    });
    let v = ns.wait_status("a parked consumer", |v, _| {
        (num(ring(v, "w")?, "consumer_waiters") == 1).then(|| v.clone())
    });
    let w = ring(&v, "w").expect("w");
    assert!(
        ["membarrier", "seqcst-fence"].contains(&w["fence_mode"].as_str().unwrap_or("")),
        "{w:#}"
    );
    let before = num(w, "consumer_wakes");
    r.producer()
        .expect("producer")
        .publish(b"wake")
        .expect("publish");
    drop(waiter.join().expect("waiter"));
    let v = ns.wait_status("the wake-up counted", |v, _| {
        (num(ring(v, "w")?, "consumer_wakes") > before).then(|| v.clone())
    });
    let text = String::from_utf8_lossy(&ns.cli(&["status", "w"]).stdout).into_owned();
    assert!(
        text.contains("wake-ups paid by publishers"),
        "{text}\n{v:#}"
    );
}

#[test]
fn the_error_policy_and_the_poison_event_are_shown() {
    let ns = Namespace::new("poison");
    let _broker = ns.broker(Some("[rings.p]\ncapacity = 64\n"));
    let r = Ring::open(ns.name(), "p").expect("open");
    let mut c = r
        .consumer(ConsumerOptions::durable("d").on_error(ErrorPolicy::Skip { attempts: 5 }))
        .expect("consumer");
    let mut producer = r.producer().expect("producer");
    for i in 0..3u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    for _ in 0..2 {
        c.poll_once_fallible(|ev| match ev.sequence() {
            1 => Err("bad"),
            _ => Ok(()),
        })
        .expect("the policy keeps it going");
    }
    let v = ns.wait_status("the poison event in the report", |v, _| {
        let d = consumer(v, "p", "d")?;
        (d["poison_sequence"] == 1).then(|| v.clone())
    });
    let d = consumer(&v, "p", "d").expect("d");
    assert_eq!(d["error_policy"], "skip", "{d:#}");
    assert_eq!(num(d, "poison_attempts"), 2, "{d:#}");
    assert_eq!(num(d, "retries"), 2, "{d:#}");
    assert_eq!(num(d, "dead_lettered"), 0, "{d:#}");
    let text = String::from_utf8_lossy(&ns.cli(&["status", "p"]).stdout).into_owned();
    assert!(text.contains("skip: 1 x2"), "{text}");
}
