//! Consumer health: a SIGKILLed consumer is DEAD at once (pidfd + epoll) and handled by its
//! policy (release: producers move on; alert: its events wait for its restart); a consumer
//! that stops polling is STALLED, and HEALTHY again when it resumes.

mod common;

use std::time::Duration;

use common::{consumer, num, ring, BrokerNs, Child, Namespace};

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
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
fn victim_holding_a_producer(ns: &Namespace, count: u64) -> (Child, Child) {
    let mut victim = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "victim"), ("ROLE_PAUSED", "1")]),
    );
    victim.expect("@ready");
    let count = count.to_string();
    let mut producer = ns.role("producer", &env(&[("ROLE_COUNT", &count)]));
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
    let ns = Namespace::new("release");
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
    let ring = shmring::Ring::open(ns.name(), "r").expect("open");
    let c = ring
        .consumer(shmring::ConsumerOptions::durable("victim"))
        .expect("re-attach");
    assert_eq!(c.next_sequence(), 200);
    assert_eq!(c.stats().dropped_behind, 200);
}

/// The status a sweep leaves is what its policies made of the ring: a death released in
/// that sweep shows RELEASED at once, not DEAD until the next periodic sweep (here half an
/// hour away: the stall threshold is an hour, and the death itself triggers the sweep).
/// Before, the report was built from the table as it was before the release.
#[test]
fn a_release_by_policy_shows_in_the_status_of_the_sweep_that_made_it() {
    let ns = Namespace::new("release_now");
    let _broker = ns.broker(Some(&config("release").replace("\"2s\"", "\"1h\"")));
    let mut victim = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "victim"), ("ROLE_PAUSED", "1")]),
    );
    victim.expect("@ready");
    // A lifecycle request is followed by a sweep: it sees the victim and watches it.
    let out = ns.cli(&["start", "r"]);
    assert!(out.status.success(), "{out:?}");
    let (v, _) = ns.status();
    assert_eq!(
        consumer(&v, "r", "victim").expect("victim")["state"],
        "HEALTHY"
    );
    victim.kill();
    let v = ns.wait_status("the victim RELEASED", |v, _| {
        (consumer(v, "r", "victim")?["state"] == "RELEASED").then(|| v.clone())
    });
    let h = &ring(&v, "r").expect("r")["health"];
    assert_eq!((num(h, "deaths"), num(h, "releases")), (1, 1), "{v:#}");
}

#[test]
fn killed_consumer_with_alert_keeps_holding_and_its_restart_gets_everything() {
    let ns = Namespace::new("alert");
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

    let mut again = ns.role(
        "consumer",
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

/// Ring `r` with no dead-consumer policy named: the default applies.
const NO_POLICY: &str = "[rings.r]\ncapacity = 64\nstall_threshold = \"2s\"\n";

/// Report `v` (with exit code `code`) says ring `r` is BLOCKED by consumer `name`, and so
/// does the status screen, with the consumer's `state`; a blocked ring is unhealthy.
fn assert_blocked_by(ns: &Namespace, v: &serde_json::Value, code: i32, name: &str, state: &str) {
    let r = ring(v, "r").expect("r");
    assert_eq!(r["blocked_by"]["name"], name, "{v:#}");
    assert_eq!(code, 1, "a blocked ring is unhealthy: {v:#}");
    let text = String::from_utf8_lossy(&ns.cli(&["status"]).stdout).into_owned();
    assert!(
        text.contains(&format!("BLOCKED by {name} ({state})")),
        "{text}"
    );
}

/// A ring whose config names no policy: a durable consumer that dies keeps gating (`alert`
/// is the default), and once the producer has filled the ring behind it the ring is
/// BLOCKED by it, named with its state, in the JSON and in the text.
#[test]
fn a_dead_consumer_under_the_default_policy_keeps_gating_and_blocks_the_ring() {
    let ns = Namespace::new("deflt");
    let _broker = ns.broker(Some(NO_POLICY));
    let (mut victim, _producer) = victim_holding_a_producer(&ns, 100);

    victim.kill();
    let sweeps = ns.wait_status_for("the victim to be DEAD", TWO_PERIODS, |v, _| {
        let c = consumer(v, "r", "victim")?;
        (c["state"] == "DEAD").then(|| num(&v["broker"], "sweeps"))
    });
    let (v, code) = ns.wait_status("two more sweeps", |v, code| {
        (num(&v["broker"], "sweeps") >= sweeps + 2).then(|| (v.clone(), code))
    });
    let r = ring(&v, "r").expect("r");
    assert_eq!(
        consumer(&v, "r", "victim").expect("victim")["state"],
        "DEAD",
        "the default policy released or freed it: {v:#}"
    );
    assert_eq!(num(&r["health"], "releases"), 0, "{v:#}");
    assert_eq!(
        (num(&r["producers"][0], "published"), num(r, "free")),
        (64, 0),
        "still held: {v:#}"
    );
    assert_blocked_by(&ns, &v, code, "victim", "DEAD");
}

/// A durable consumer whose handler failed keeps gating at the failing event under the
/// default policy: the producer stops a ring ahead of it and the ring is BLOCKED by it.
#[test]
fn a_failed_consumer_under_the_default_policy_blocks_the_ring() {
    let ns = Namespace::new("deffail");
    let _broker = ns.broker(Some(NO_POLICY));
    let mut c = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "failing"), ("ROLE_PANIC_AT", "10")]),
    );
    c.expect("@ready");
    let _p = ns.role("producer", &env(&[("ROLE_COUNT", "200")]));
    assert_eq!(c.expect("@failed"), "sequence=10");
    let (v, code) = ns.wait_status("the ring blocked by the failed consumer", |v, code| {
        let r = ring(v, "r")?;
        (r["blocked_by"].is_object() && num(r, "free") == 0).then(|| (v.clone(), code))
    });
    let r = ring(&v, "r").expect("r");
    assert_eq!(
        consumer(&v, "r", "failing").expect("failing")["state"],
        "FAILED",
        "{v:#}"
    );
    assert_eq!(num(&r["producers"][0], "published"), 74, "{v:#}");
    assert_blocked_by(&ns, &v, code, "failing", "FAILED");
}

#[test]
fn a_consumer_that_stops_polling_is_stalled_then_healthy_again() {
    let ns = Namespace::new("stall");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"100ms\"\n",
    ));
    let mut c = ns.role("consumer", &env(&[("ROLE_NAME", "slow")]));
    c.expect("@ready");
    c.send_line("pause");
    c.expect("@paused");
    let ring = shmring::Ring::open(ns.name(), "r").expect("open");
    let mut p = ring.producer().expect("producer");
    for i in 0..10u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    ns.wait_status("STALLED", |v, code| {
        let s = consumer(v, "r", "slow")?;
        (s["state"] == "STALLED" && code == 1).then_some(())
    });
    c.send_line("resume");
    let v = ns.wait_status("HEALTHY again", |v, code| {
        let s = consumer(v, "r", "slow")?;
        (s["state"] == "HEALTHY" && num(s, "sequence") == 10 && code == 0).then(|| v.clone())
    });
    let h = &common::ring(&v, "r").expect("r")["health"];
    assert_eq!((num(h, "stalls"), num(h, "recoveries")), (1, 1), "{v:#}");
}

#[test]
fn a_failed_handler_is_reported_and_released_and_stays_released_after_its_handle_drops() {
    let ns = Namespace::new("failed");
    let _broker = ns.broker(Some(&config("release").replace("victim", "failing")));
    let mut c = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "failing"), ("ROLE_PANIC_AT", "10")]),
    );
    c.expect("@ready");
    let mut p = ns.role("producer", &env(&[("ROLE_COUNT", "200")]));
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
    assert!(c.wait_status().success());
    let v = ns.wait_status("the dropped handle still released", |v, _| {
        let s = consumer(v, "r", "failing")?;
        (s["state"] == "RELEASED").then(|| v.clone())
    });
    let health = &ring(&v, "r").expect("r")["health"];
    assert_eq!(num(health, "releases"), 1, "{v:#}");
    assert_eq!(num(health, "deaths"), 1, "{v:#}");
    let ring = shmring::Ring::open(ns.name(), "r").expect("open");
    let mut producer = ring.producer().expect("producer");
    for i in 0..100u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
}

/// `stop-ring`: a durable consumer under it dies and the broker stops the ring (the segment
/// says STOPPED, publishes are refused). `broker start` reopens it; a new broker, finding
/// the consumer still dead, stops it again, and counts from zero (epoch + 1).
#[test]
fn killed_consumer_with_stop_ring_stops_the_ring_and_a_new_broker_stops_it_again() {
    let ns = Namespace::new("stopring");
    let mut broker = ns.broker(Some(&config("stop-ring")));
    let handle = shmring::Ring::open(ns.name(), "r").expect("open");
    let mut victim = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "victim"), ("ROLE_PAUSED", "1")]),
    );
    victim.expect("@ready");
    let mut p = handle.producer().expect("producer");
    for i in 0..5u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    victim.kill();
    common::wait_until("the policy to stop the ring", || {
        (handle.state() == Some(shmring::RingState::Stopped)).then_some(())
    });
    assert_eq!(
        p.try_publish(&[0; 8]),
        Err(shmring::TryPublishError::Closed)
    );
    let stopped = |v: &serde_json::Value| -> Option<(u64, u64, u64)> {
        let r = ring(v, "r")?;
        let h = &r["health"];
        (r["state"] == "STOPPED" && consumer(v, "r", "victim")?["state"] == "DEAD").then(|| {
            (
                num(h, "deaths"),
                num(h, "policy_stops"),
                num(&v["broker"], "epoch"),
            )
        })
    };
    let first = ns.wait_status("STOPPED by the policy", |v, _| stopped(v));
    assert_eq!(first, (1, 1, 1), "deaths, policy stops, epoch");

    let out = ns.cli(&["start", "r"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(handle.state(), Some(shmring::RingState::Running));
    assert_eq!(p.publish(&5u64.to_le_bytes()), Ok(5));

    broker.kill();
    let _broker = ns.broker(Some(&config("stop-ring")));
    common::wait_until("the new broker to stop the ring again", || {
        (handle.state() == Some(shmring::RingState::Stopped)).then_some(())
    });
    let second = ns.wait_status("STOPPED again, seen by the new broker", |v, _| stopped(v));
    assert_eq!(
        second,
        (1, 1, 2),
        "a new broker counts from zero: deaths, policy stops, epoch"
    );
}

/// Optional consumers killed: an anonymous one is freed (`deaths` and `freed` + 1, its row
/// gone); a durable one stays DEAD under `alert` but never holds the producer beyond the
/// ring's slack, so a producer publishes three rings' worth past it.
#[test]
fn killed_optional_consumers_are_freed_or_left_behind_without_holding_producers() {
    use common::fault::spawn_consumer;
    let ns = Namespace::new("optkill");
    let _broker = ns.broker(Some(&config("alert")));
    let handle = shmring::Ring::open(ns.name(), "r").expect("open");
    let s = |v: &str| v.to_owned();
    let (mut anon, _) = spawn_consumer(
        &ns,
        "r",
        &[("ROLE_OPTIONAL", s("1")), ("ROLE_WAIT", s("block"))],
    );
    let (mut peek, _) = spawn_consumer(
        &ns,
        "r",
        &[
            ("ROLE_OPTIONAL", s("1")),
            ("ROLE_NAME", s("peek")),
            ("ROLE_WAIT", s("block")),
        ],
    );
    anon.kill();
    peek.kill();
    let v = ns.wait_status("the anonymous one freed, the durable one DEAD", |v, _| {
        let r = ring(v, "r")?;
        let rows = r["consumers"].as_array()?.len();
        (rows == 1 && consumer(v, "r", "peek")?["state"] == "DEAD").then(|| v.clone())
    });
    let h = &ring(&v, "r").expect("r")["health"];
    assert_eq!((num(h, "deaths"), num(h, "freed")), (2, 1), "{v:#}");
    let mut p = handle.producer().expect("producer");
    for i in 0..192u64 {
        assert_eq!(
            p.publish_timeout(&i.to_le_bytes(), common::WAIT),
            Ok(i),
            "held by a dead optional consumer"
        );
    }
}

/// A handler panic in an anonymous consumer: the status shows it FAILED with `failures` 1
/// while its process lives (it keeps gating, it is required); once the process is killed
/// the broker frees the entry (`freed` + 1) and the row is gone.
#[test]
fn a_handler_panic_in_an_anonymous_consumer_is_failed_then_freed() {
    let ns = Namespace::new("anonpanic");
    let _broker = ns.broker(Some(&config("alert")));
    let mut c = ns.role("consumer", &env(&[("ROLE_PANIC_AT", "5")]));
    c.expect("@ready");
    let handle = shmring::Ring::open(ns.name(), "r").expect("open");
    let mut p = handle.producer().expect("producer");
    for i in 0..10u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    assert_eq!(c.expect("@failed"), "sequence=5");
    let v = ns.wait_status("the anonymous consumer FAILED", |v, _| {
        let row = ring(v, "r")?["consumers"].as_array()?.first()?.clone();
        (row["state"] == "FAILED").then(|| v.clone())
    });
    let row = &ring(&v, "r").expect("r")["consumers"][0];
    assert_eq!(
        (
            num(row, "failures"),
            num(row, "sequence"),
            num(row, "delivered")
        ),
        (1, 5, 5),
        "{v:#}"
    );
    c.kill();
    let v = ns.wait_status("the failed anonymous entry freed", |v, _| {
        let r = ring(v, "r")?;
        r["consumers"].as_array()?.is_empty().then(|| v.clone())
    });
    let h = &ring(&v, "r").expect("r")["health"];
    assert_eq!(num(h, "freed"), 1, "{v:#}");
}

/// A consumer's name is chosen by whichever process attached it (any bytes but NUL): the
/// broker's log gives it escaped, in its fields as in its messages, so a line break in the
/// name cannot forge a log line of its own. Before, the `consumer` field was written raw.
#[test]
fn a_line_break_in_a_consumer_name_does_not_forge_a_broker_log_line() {
    let ns = Namespace::new("forged");
    let broker = ns.broker(Some(&config("alert")));
    let name = "victim\nFORGED shmring_broker: ring r deleted";
    let mut victim = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", name), ("ROLE_PAUSED", "1")]),
    );
    victim.expect("@ready");
    victim.kill();
    assert!(
        broker.expect_stderr_within("policy alert", common::WAIT),
        "no death logged: {}",
        broker.stderr_so_far()
    );
    let log = broker.stderr_so_far();
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED")),
        "a name wrote a log line of its own:\n{log}"
    );
    assert!(log.contains(r"victim\nFORGED"), "{log}");
}

/// A worker group's creator killed between making the group's entry ACTIVE and leaving it
/// DETACHED, the moment in which it stores the group's work sequence: the group's entry
/// says a process that is gone holds it. That entry is no consumer a dead-consumer policy
/// acts on (the next member to join finishes the creation, and no process ever holds it
/// otherwise), so a ring whose policy is stop-ring keeps running. Before, the broker
/// stopped it.
#[test]
fn a_group_creator_dead_mid_creation_does_not_trigger_the_dead_consumer_policy() {
    use shmring_layout::{consumer_state, owned_word, ConsumerEntry, ConsumerHot};
    use std::os::unix::fs::FileExt;
    /// Above any pid_max: no process has it.
    const GONE: u32 = 0x3fff_fff0;
    let ns = Namespace::new("group_creator");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"2s\"\ndead_policy = \"stop-ring\"\n",
    ));
    let handle = shmring::Ring::open(ns.name(), "r").expect("open");
    let member = handle
        .consumer(shmring::ConsumerOptions::worker("w"))
        .expect("a member, which makes the group");
    let group = handle
        .info()
        .consumers
        .into_iter()
        .find(|c| c.is_group)
        .expect("the group's entry");
    assert_eq!(group.state, "DETACHED");
    let offset = handle
        .geometry()
        .consumer_offset(group.index)
        .expect("entry")
        + (std::mem::offset_of!(ConsumerEntry, hot) + std::mem::offset_of!(ConsumerHot, word))
            as u64;
    let creating = owned_word::next(group.word, consumer_state::ACTIVE, GONE);
    std::fs::OpenOptions::new()
        .write(true)
        .open(handle.path())
        .expect("open the segment")
        .write_all_at(&creating.to_ne_bytes(), offset)
        .expect("write the group's word");
    common::two_sweeps(&handle);
    common::two_sweeps(&handle);
    assert_eq!(handle.state(), Some(shmring::RingState::Running));
    let (v, _) = ns.status();
    let r = ring(&v, "r").expect("r");
    assert_eq!(r["state"], "RUNNING", "{v:#}");
    assert_eq!(num(&r["health"], "policy_stops"), 0, "{v:#}");
    drop(member);
}
