//! `broker status` tells the truth: a ring whose producers wait behind a consumer that
//! cannot move is BLOCKED (exit 1), claimed but unpublished sequences are not lag, and the
//! wake-up side (fence mode, parked waiters, the wake-ups publishers paid) is shown.

mod common;

use std::time::Duration;

use common::{consumer, get, metrics_address, num, ring, BrokerNs, Namespace};
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
    // A claim taken and not committed: sequence 60 is claimed, not published. (The head
    // is 60 or 61: a producer alone claims alone, and the position of a lone producer, as
    // of a single producer, is before its last claim's unstamped slots; ARCHITECTURE.md,
    // "Lone claims".)
    let claim = producer.claim().expect("claim");
    let v = ns.wait_status("the claim in the report", |v, _| {
        let r = ring(v, "r")?;
        let claimed = r["producers"]
            .as_array()?
            .iter()
            .any(|p| p["in_flight"].as_u64() == Some(60));
        claimed.then(|| v.clone())
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
    assert!(
        text.contains(&format!("broker release --namespace={} r away", ns.name())),
        "{text}"
    );

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

/// Offset of the claim word (the ring's position on a running multi-producer ring).
const CLAIM_WORD: u64 = (shmring_layout::SEQ_LINES_OFFSET
    + std::mem::offset_of!(shmring_layout::SequenceLines, claim)
    + std::mem::offset_of!(shmring_layout::ClaimLine, value)) as u64;

fn put64(path: &std::path::Path, off: u64, v: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open the segment");
    f.write_all_at(&v.to_ne_bytes(), off).expect("write");
}

/// A position another process overwrote with one no ring reaches makes the ring unhealthy
/// in `broker status` (exit 1, the word named, what to do said), in the JSON, with the
/// broker down too, and in the metrics; healthy again once the word is sound. Before, the
/// report showed the damaged position as the head and called the ring healthy, while its
/// caught-up consumer polled `Ok(0)` for ever and every attach was refused.
#[test]
fn a_damaged_position_makes_the_ring_unhealthy_and_says_what_to_do() {
    let ns = Namespace::new("corrupt");
    let config = ns.config("[rings.r]\ncapacity = 64\nproducer_mode = \"multi\"\n");
    let broker = ns.broker_with(Some(&config), &["--metrics-listen", "127.0.0.1:0"]);
    let r = Ring::open(ns.name(), "r").expect("open");
    let mut c = r.consumer(ConsumerOptions::anonymous()).expect("consumer");
    let mut p = r.producer().expect("producer");
    assert_eq!(p.publish(b"one"), Ok(0));
    assert_eq!(c.poll_once(|_| {}), Ok(1));
    ns.wait_status("healthy before the damage", |v, code| {
        (code == 0 && num(ring(v, "r")?, "head") == 1).then_some(())
    });

    let damaged = shmring_layout::MAX_SEQUENCE + 7;
    put64(r.path(), CLAIM_WORD, damaged);
    assert_eq!(
        c.poll_once(|_| {}),
        Ok(0),
        "a caught-up consumer sees nothing"
    );
    let (v, code) = ns.wait_status("the damage reported", |v, code| {
        (!ring(v, "r")?["corrupt"].as_array()?.is_empty()).then(|| (v.clone(), code))
    });
    assert_eq!(code, 1, "a corrupt ring is unhealthy: {v:#}");
    assert_eq!(v["healthy"], false);
    let corrupt = &ring(&v, "r").expect("r")["corrupt"][0];
    assert_eq!(corrupt["word"], "position", "{v:#}");
    assert!(
        num(corrupt, "value") >= shmring_layout::MAX_SEQUENCE,
        "{v:#}"
    );
    let text = String::from_utf8_lossy(&ns.cli(&["status"]).stdout).into_owned();
    assert!(text.contains("CORRUPT: position"), "{text}");
    assert!(
        text.contains(&format!(
            "`broker delete --namespace={} r` and create it again",
            ns.name()
        )),
        "{text}"
    );
    assert!(
        broker.expect_stderr_within("the segment is corrupt", common::WAIT),
        "the broker logs the damage: {}",
        broker.stderr_so_far()
    );

    let (_, scrape) = get(&metrics_address(&broker), "/metrics");
    assert!(
        scrape.contains("shmring_ring_corrupt_words{ring=\"r\"} 1"),
        "{scrape}"
    );
    assert!(scrape.contains("shmring_healthy 0"), "{scrape}");

    // With the broker down, `status` reads the segment and judges it the same way.
    drop(broker);
    let out = ns.cli(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        ring(&v, "r").expect("r")["corrupt"][0]["word"],
        "position",
        "{v:#}"
    );
    assert_eq!(v["healthy"], false, "{v:#}");

    // The word sound again (as the producer's next claim would leave it): healthy, and the
    // broker says so.
    let broker = ns.broker_with(Some(&config), &[]);
    ns.wait_status("the damage reported again", |v, _| {
        (!ring(v, "r")?["corrupt"].as_array()?.is_empty()).then_some(())
    });
    put64(r.path(), CLAIM_WORD, 1);
    ns.wait_status("healthy once the word is sound", |v, code| {
        (code == 0 && ring(v, "r")?["corrupt"].as_array()?.is_empty()).then_some(())
    });
    assert!(
        broker.expect_stderr_within("reads sound again", common::WAIT),
        "{}",
        broker.stderr_so_far()
    );
}
