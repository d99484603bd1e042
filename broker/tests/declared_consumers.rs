//! Declared consumers through the broker: a ring created from a config with
//! `declared_consumers = ["writer"]` keeps what a producer process published before the
//! writer process first started, and the writer's first attach reads it all from sequence
//! 0. Until then the broker shows it DECLARED, never applies a dead-consumer policy to it,
//! reports the ring BLOCKED when producers wait for it, and a drain times out naming it. A
//! broker adopting a ring that exists leaves its declared entries as they are.

mod common;

use common::{consumer, num, ring, BrokerNs, Namespace};
use serde_json::Value;

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = vec![("ROLE_RING", "r".to_owned())];
    v.extend(pairs.iter().map(|(k, val)| (*k, (*val).to_owned())));
    v
}

/// A release policy for every consumer: it must still never touch a declared consumer that
/// has no process yet.
fn config(capacity: u64) -> String {
    format!(
        "[rings.r]\ncapacity = {capacity}\ndead_policy = \"release\"\ndeclared_consumers = [\"writer\"]\n"
    )
}

fn writer(v: &Value) -> Option<&Value> {
    consumer(v, "r", "writer")
}

#[test]
fn a_declared_consumer_receives_what_was_published_before_its_first_attach() {
    let ns = Namespace::new("declared");
    let _broker = ns.broker(Some(&config(64)));
    let w = ns.wait_status("the declared writer in the status", |v, _| {
        writer(v).cloned()
    });
    assert_eq!(
        (&w["state"], &w["pid"], &w["declared"], &w["attached_ever"]),
        (
            &Value::from("DETACHED"),
            &Value::from(0),
            &Value::from(true),
            &Value::from(false)
        ),
        "{w:#}"
    );

    let mut producer = ns.role("producer", &env(&[("ROLE_COUNT", "40")]));
    producer.expect("@ready");
    assert_eq!(producer.expect("@published"), "40");
    producer.wait_ok();

    // Two full sweeps after the producer is gone: the writer still holds all 40 events,
    // DETACHED, not released by the release policy.
    let (v, _) = ns.status();
    let swept = num(&v["broker"], "sweeps");
    let v = ns.wait_status("two more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= swept + 2).then(|| v.clone())
    });
    let w = writer(&v).unwrap_or_else(|| panic!("no writer: {v:#}"));
    assert_eq!(
        (w["state"].as_str(), num(w, "sequence"), num(w, "lag")),
        (Some("DETACHED"), 0, 40),
        "{w:#}"
    );
    assert_eq!(num(&ring(&v, "r").expect("ring")["health"], "releases"), 0);
    let human = ns.cli(&["status"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("DECLARED") && text.contains("writer is DECLARED and has not attached yet"),
        "{text}"
    );

    let mut w = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "writer"), ("ROLE_EXPECT", "40")]),
    );
    assert_eq!(w.expect("@ready"), "index=0 next=0");
    assert_eq!(
        w.expect("@done"),
        "count=40 first=0 last=39 skipped=0 dropped=0"
    );
    let v = ns.wait_status("the writer attached", |v, _| {
        writer(v)
            .filter(|w| w["attached_ever"] == true && w["state"] == "HEALTHY")
            .cloned()
    });
    assert_eq!(v["declared"], true, "{v:#}");
    assert_eq!(num(&v, "sequence"), 40, "{v:#}");
}

#[test]
fn a_drain_waiting_for_a_declared_consumer_that_never_attached_names_it() {
    let ns = Namespace::new("declaredrain");
    let _broker = ns.broker(Some(&config(8)));
    let mut producer = ns.role("producer", &env(&[("ROLE_COUNT", "8")]));
    producer.expect("@ready");
    assert_eq!(producer.expect("@published"), "8");
    producer.wait_ok();

    // The ring is full and nobody can move the writer: BLOCKED, by a consumer to start.
    ns.wait_status("the ring BLOCKED by the writer", |v, _| {
        (ring(v, "r")?["blocked_by"]["name"] == "writer").then_some(())
    });
    let text = String::from_utf8_lossy(&ns.cli(&["status"]).stdout).into_owned();
    assert!(
        text.contains("BLOCKED by writer (DECLARED)")
            && text.contains("start it (a declared consumer that never attached)"),
        "{text}"
    );

    let out = ns.cli(&["drain", "r", "--timeout", "200ms"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("declared consumer \"writer\" never attached")
            && said.contains(&format!(
                "`broker unsubscribe --namespace={} r writer`",
                ns.name()
            )),
        "{said}"
    );

    // The advice works: unsubscribed, the writer gates nothing and a drain finishes.
    let out = ns.cli(&["unsubscribe", "r", "writer"]);
    assert!(out.status.success(), "{out:?}");
    let out = ns.cli(&["drain", "r", "--timeout", "10s"]);
    assert!(out.status.success(), "{out:?}");
}

/// A broker adopting a ring that exists leaves its declared entries as they are (still
/// waiting for their first attach, at sequence 0) and adds none: a name declared in the
/// config that the ring has no entry for is logged.
#[test]
fn a_broker_adopts_an_existing_ring_with_its_declared_consumers_as_they_are() {
    let ns = Namespace::new("declaredadopt");
    let created = shmring::Ring::create(
        ns.name(),
        "r",
        &shmring::RingConfig {
            capacity: 64,
            declared: vec!["writer".into()],
            ..shmring::RingConfig::default()
        },
    )
    .expect("create");
    let mut p = created.producer().expect("producer");
    for i in 0..5u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    drop(p);
    let broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\ndeclared_consumers = [\"writer\", \"late\"]\n",
    ));
    let v = ns.wait_status("the adopted ring", |v, _| {
        ring(v, "r")
            .filter(|r| r["consumers"].as_array().is_some_and(|c| !c.is_empty()))
            .cloned()
    });
    let consumers = v["consumers"].as_array().expect("consumers");
    assert_eq!(consumers.len(), 1, "{v:#}");
    let w = &consumers[0];
    assert_eq!(
        (
            w["name"].as_str(),
            w["state"].as_str(),
            num(w, "sequence"),
            num(w, "lag")
        ),
        (Some("writer"), Some("DETACHED"), 0, 5),
        "{w:#}"
    );
    assert!(
        w["declared"] == true && w["attached_ever"] == false,
        "{w:#}"
    );
    assert!(
        broker.expect_stderr_within(
            "declared consumer \"late\" is not in the existing ring",
            common::WAIT
        ),
        "{}",
        broker.stderr_so_far()
    );
}

/// `declared_groups = ["g"]`: the group gates from the ring's creation, so what a producer
/// process published and exited with before any member started reaches the first member,
/// from sequence 0; the status shows the group, DETACHED, before it has members.
#[test]
fn a_declared_group_receives_what_was_published_before_its_first_member() {
    let ns = Namespace::new("declared_group");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\ndeclared_groups = [\"g\"]\n",
    ));
    let g = ns.wait_status("the declared group in the status", |v, _| {
        consumer(v, "r", "g").cloned()
    });
    assert_eq!(
        (&g["state"], &g["is_group"], &g["pid"]),
        (
            &Value::from("DETACHED"),
            &Value::from(true),
            &Value::from(0)
        ),
        "{g:#}"
    );
    let mut producer = ns.role("producer", &env(&[("ROLE_COUNT", "40")]));
    producer.expect("@ready");
    assert_eq!(producer.expect("@published"), "40");
    producer.wait_ok();
    let mut member = ns.role(
        "consumer",
        &env(&[("ROLE_GROUP", "g"), ("ROLE_EXPECT", "40")]),
    );
    member.expect("@ready");
    assert_eq!(
        member.expect("@done"),
        "count=40 first=0 last=39 skipped=0 dropped=0"
    );
}
