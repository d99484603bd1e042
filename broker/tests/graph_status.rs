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
