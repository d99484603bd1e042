//! Consumer health: a SIGKILLed consumer is DEAD at once (pidfd + epoll) and handled by its
//! policy (release: producers move on; alert: its events wait for its restart); a consumer
//! that stops polling is STALLED, and HEALTHY again when it resumes.

mod common;

use std::time::Duration;

use common::{consumer, num, ring, Ns, Proc};

#[test]
fn role() {
    common::roles::run_if_child();
}

/// Two sweep periods with a 2 s stall threshold: death must be reported well within this
/// (it is seen by epoll at once, not by the periodic sweep).
const TWO_PERIODS: Duration = Duration::from_secs(2);

fn config(policy: &str) -> String {
    format!(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"2s\"\ndead_policy = \"alert\"\n[rings.r.policies]\nvictim = \"{policy}\"\n"
    )
}

fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = vec![("ROLE_RING", "r".to_owned())];
    v.extend(pairs.iter().map(|(k, val)| (*k, (*val).to_owned())));
    v
}

/// A paused consumer "victim" and a producer stuck behind it with a full ring.
fn victim_holding_a_producer(ns: &Ns, count: u64) -> (Proc, Proc) {
    let mut victim = Proc::role(
        "consumer",
        &ns.name,
        &env(&[("ROLE_NAME", "victim"), ("ROLE_PAUSED", "1")]),
    );
    victim.expect("@ready");
    let count = count.to_string();
    let mut producer = Proc::role("producer", &ns.name, &env(&[("ROLE_COUNT", &count)]));
    producer.expect("@ready");
    ns.wait_status("the ring to fill up behind the victim", |v, _| {
        let r = ring(v, "r")?;
        let published = num(r["producers"].as_array()?.first()?, "published");
        (published == 64 && num(r, "free") == 0 && consumer(v, "r", "victim").is_some())
            .then_some(())
    });
    (victim, producer)
}

#[test]
fn killed_consumer_with_release_lets_the_producer_move_on() {
    let _serial = common::serial();
    let ns = Ns::new("release");
    let _broker = ns.broker(Some(&config("release")));
    let (mut victim, mut producer) = victim_holding_a_producer(&ns, 200);

    victim.kill();
    let state = ns.wait_status_for("the victim to be DEAD/RELEASED", TWO_PERIODS, |v, code| {
        let s = consumer(v, "r", "victim")?["state"].as_str()?.to_owned();
        (s == "DEAD" || s == "RELEASED").then_some((s, code))
    });
    // DEAD is unhealthy (exit 1); once released it no longer holds anyone.
    if state.0 == "DEAD" {
        assert_eq!(state.1, 1);
    }
    assert_eq!(
        producer.expect("@published"),
        "200",
        "the producer moved on"
    );
    let (v, _) = ns.status();
    let h = &ring(&v, "r").expect("r")["health"];
    assert_eq!((num(h, "deaths"), num(h, "releases")), (1, 1), "{v:#}");
    assert_eq!(
        consumer(&v, "r", "victim").expect("victim")["state"],
        "RELEASED"
    );

    // Re-attached, it resumes at the head and the gap is counted.
    let ring = shmring::Ring::open(&ns.name, "r").expect("open");
    let c = ring
        .consumer(shmring::ConsumerOptions::durable("victim"))
        .expect("re-attach");
    assert_eq!(c.next_sequence(), 200);
    assert_eq!(c.stats().dropped_behind, 200);
}

#[test]
fn killed_consumer_with_alert_keeps_holding_and_its_restart_gets_everything() {
    let _serial = common::serial();
    let ns = Ns::new("alert");
    let _broker = ns.broker(Some(&config("alert")));
    let (mut victim, mut producer) = victim_holding_a_producer(&ns, 100);

    victim.kill();
    let sweeps = ns.wait_status_for("the victim to be DEAD", TWO_PERIODS, |v, code| {
        let c = consumer(v, "r", "victim")?;
        (c["state"] == "DEAD" && code == 1).then(|| num(&v["broker"], "sweeps"))
    });
    // Two more sweeps later it still holds the producer.
    let v = ns.wait_status("two more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= sweeps + 2).then(|| v.clone())
    });
    let r = ring(&v, "r").expect("r");
    assert_eq!(
        consumer(&v, "r", "victim").expect("victim")["state"],
        "DEAD"
    );
    let published = num(&r["producers"][0], "published");
    assert_eq!((published, num(r, "free")), (64, 0), "still held: {v:#}");
    assert_eq!(num(&r["health"], "deaths"), 1);
    assert_eq!(num(&r["health"], "releases"), 0);

    let mut again = Proc::role(
        "consumer",
        &ns.name,
        &env(&[("ROLE_NAME", "victim"), ("ROLE_EXPECT", "100")]),
    );
    assert_eq!(again.expect("@ready"), "index=0 next=0");
    assert_eq!(
        again.expect("@done"),
        "count=100 first=0 last=99 skipped=0 dropped=0"
    );
    assert_eq!(producer.expect("@published"), "100");
    ns.wait_status("the restarted victim to be HEALTHY", |v, code| {
        (consumer(v, "r", "victim")?["state"] == "HEALTHY" && code == 0).then_some(())
    });
}

#[test]
fn a_consumer_that_stops_polling_is_stalled_then_healthy_again() {
    let _serial = common::serial();
    let ns = Ns::new("stall");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"100ms\"\n",
    ));
    let mut c = Proc::role("consumer", &ns.name, &env(&[("ROLE_NAME", "slow")]));
    c.expect("@ready");
    c.send("pause");
    c.expect("@paused");
    let ring = shmring::Ring::open(&ns.name, "r").expect("open");
    let mut p = ring.producer().expect("producer");
    for i in 0..10u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    ns.wait_status("STALLED", |v, code| {
        let s = consumer(v, "r", "slow")?;
        (s["state"] == "STALLED" && code == 1).then_some(())
    });
    c.send("resume");
    let v = ns.wait_status("HEALTHY again", |v, code| {
        let s = consumer(v, "r", "slow")?;
        (s["state"] == "HEALTHY" && num(s, "sequence") == 10 && code == 0).then(|| v.clone())
    });
    let h = &common::ring(&v, "r").expect("r")["health"];
    assert_eq!((num(h, "stalls"), num(h, "recoveries")), (1, 1), "{v:#}");
}

#[test]
fn a_failed_handler_is_reported_and_released_and_stays_released_after_its_handle_drops() {
    let _serial = common::serial();
    let ns = Ns::new("failed");
    let _broker = ns.broker(Some(&config("release").replace("victim", "failing")));
    let mut c = Proc::role(
        "consumer",
        &ns.name,
        &env(&[("ROLE_NAME", "failing"), ("ROLE_PANIC_AT", "10")]),
    );
    c.expect("@ready");
    let mut p = Proc::role("producer", &ns.name, &env(&[("ROLE_COUNT", "200")]));
    assert_eq!(c.expect("@failed"), "sequence=10");
    ns.wait_status("FAILED (then released)", |v, _| {
        let s = consumer(v, "r", "failing")?;
        (s["state"] == "FAILED" || s["state"] == "RELEASED").then_some(())
    });
    assert_eq!(
        p.expect("@published"),
        "200",
        "released: the producer moved on"
    );
    // The failed handle drops: a released entry stays released (the drop never puts a
    // broker's RELEASED back to FAILED), so it does not gate again and needs no second
    // release.
    c.close_stdin();
    assert!(c.wait().success());
    let v = ns.wait_status("the dropped handle still released", |v, _| {
        let s = consumer(v, "r", "failing")?;
        (s["state"] == "RELEASED").then(|| v.clone())
    });
    let health = &ring(&v, "r").expect("r")["health"];
    assert_eq!(num(health, "releases"), 1, "{v:#}");
    assert_eq!(num(health, "deaths"), 1, "{v:#}");
    let ring = shmring::Ring::open(&ns.name, "r").expect("open");
    let mut producer = ring.producer().expect("producer");
    for i in 0..100u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
}
