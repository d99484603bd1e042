//! `broker status` draws the consumer dependency graph (`ConsumerOptions::after`): each
//! dependent consumer, the names it reads behind, and how far it trails the slowest of
//! them, in the text and in `--json`.

mod common;

use common::{consumer, num, BrokerNs, Namespace};
use shmring::{ConsumerOptions, Ring};

#[test]
fn role() {
    common::roles::run_if_child();
}

#[test]
fn status_shows_what_each_consumer_reads_behind_and_its_stage_lag() {
    let ns = Namespace::new("graph_status");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    let r = Ring::open(ns.name(), "r").expect("open");
    let mut journal = r
        .consumer(ConsumerOptions::durable("journal"))
        .expect("journal");
    let mut risk = r
        .consumer(ConsumerOptions::durable("risk").batch_cap(4))
        .expect("risk");
    let _apply = r
        .consumer(ConsumerOptions::durable("apply").after(["journal", "risk"]))
        .expect("apply");
    let mut producer = r.producer().expect("producer");
    for i in 0..10u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    assert_eq!(journal.poll_once(|_| {}).expect("journal polls"), 10);
    assert_eq!(risk.poll_once(|_| {}).expect("risk polls"), 4);

    let v = ns.wait_status("apply's stage lag in the report", |v, _| {
        let apply = consumer(v, "r", "apply")?;
        (apply["stage_lag"].as_u64() == Some(4)).then(|| v.clone())
    });
    let apply = consumer(&v, "r", "apply").expect("apply listed");
    assert_eq!(
        apply["upstream"],
        serde_json::json!(["journal", "risk"]),
        "{v:#}"
    );
    assert_eq!(num(apply, "lag"), 10, "{v:#}");
    let journal_row = consumer(&v, "r", "journal").expect("journal listed");
    assert!(journal_row["stage_lag"].is_null(), "no upstream: {v:#}");
    assert_eq!(journal_row["upstream"], serde_json::json!([]), "{v:#}");

    let text = String::from_utf8_lossy(&ns.cli(&["status"]).stdout).into_owned();
    assert!(
        text.contains("apply after: journal, risk (stage lag 4)"),
        "{text}"
    );
}

/// After a worker group, the stage lag counts what its members have finished, not what
/// they have claimed (the group's work sequence).
#[test]
fn the_stage_lag_after_a_worker_group_counts_finished_events() {
    let ns = Namespace::new("graph_status_group");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    let r = Ring::open(ns.name(), "r").expect("open");
    // The member claims sequence 0 as it joins (not published yet).
    let mut member = r
        .consumer(ConsumerOptions::worker("w").batch_cap(4))
        .expect("member");
    let _audit = r
        .consumer(ConsumerOptions::durable("audit").after(["w"]))
        .expect("audit");
    let mut producer = r.producer().expect("producer");
    for i in 0..10u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    // Handles its claim (event 0), then claims events 1 to 4, which it has not handled.
    assert_eq!(member.poll_once(|_| {}).expect("member polls"), 1);
    // A report of a sweep after the member's poll (the group's work sequence at 5): one
    // made before it would show a lag of 1 from the old reading too.
    let v = ns.wait_status("audit's stage lag in the report", |v, _| {
        let audit = consumer(v, "r", "audit")?;
        let group = consumer(v, "r", "w")?;
        (num(group, "sequence") == 5 && audit["stage_lag"].as_u64() == Some(1)).then(|| v.clone())
    });
    let audit = consumer(&v, "r", "audit").expect("audit listed");
    assert_eq!(audit["upstream"], serde_json::json!(["w"]), "{v:#}");
}

/// A worker group after other consumers: its row names them, and its stage lag counts from
/// what its members have finished, not from what they have claimed.
#[test]
fn a_worker_group_after_a_consumer_shows_its_upstream_and_stage_lag() {
    let ns = Namespace::new("graph_status_group_after");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    let r = Ring::open(ns.name(), "r").expect("open");
    let mut journal = r
        .consumer(ConsumerOptions::durable("journal"))
        .expect("journal");
    // The member claims sequence 0 as it joins (not published yet).
    let mut member = r
        .consumer(ConsumerOptions::worker("w").after(["journal"]).batch_cap(4))
        .expect("member");
    let mut producer = r.producer().expect("producer");
    for i in 0..10u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    assert_eq!(journal.poll_once(|_| {}).expect("journal polls"), 10);
    // Handles its claim (event 0), then claims events 1 to 4: the group's work sequence
    // is 5, what its members have finished 1.
    assert_eq!(member.poll_once(|_| {}).expect("member polls"), 1);
    let v = ns.wait_status("the group's stage lag in the report", |v, _| {
        let group = consumer(v, "r", "w")?;
        (num(group, "sequence") == 5 && group["stage_lag"].as_u64() == Some(9)).then(|| v.clone())
    });
    let group = consumer(&v, "r", "w").expect("group listed");
    assert_eq!(group["upstream"], serde_json::json!(["journal"]), "{v:#}");
    let text = String::from_utf8_lossy(&ns.cli(&["status"]).stdout).into_owned();
    assert!(text.contains("w after: journal (stage lag 9)"), "{text}");
}
