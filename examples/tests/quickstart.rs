//! The README's quick start, run as a newcomer runs it: the consumer example, then the
//! producer example; the consumer again after the producer ran alone (it resumes where it
//! committed); batches; `--remove`; and the fan-out example across four processes.
//!
//! The built examples run in a namespace of their own (`$SHMRING_NAMESPACE`); every wait
//! is bounded by the test kit's watchdog.

use std::process::Command;

use shmring::{OpenError, Ring};
use shmring_examples::RING;
use shmring_testkit::Namespace;

mod common;
use common::example;

fn command(ns: &Namespace, name: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(example(name));
    cmd.args(args).env(shmring::names::NAMESPACE_ENV, ns.name());
    cmd
}

/// The line of `lines` that starts with `prefix`.
fn line<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in {lines:#?}"))
}

#[test]
fn the_quick_start_delivers_everything_resumes_after_a_restart_and_removes_the_ring() {
    let ns = Namespace::new("ex_quick");
    // Terminal 1: the consumer, first; it stops at the producer's last event.
    let mut consumer = ns.spawn("consumer example", command(&ns, "consumer", &[]));
    let attached = consumer.next_line().expect("the consumer's first line");
    assert!(attached.contains("at sequence 0 (0 waiting)"), "{attached}");
    // Terminal 2: the producer.
    let produced = ns
        .spawn("producer example", command(&ns, "producer", &["3000"]))
        .wait_ok();
    assert!(line(&produced, "published ").starts_with("published 3000 events"));
    let said = consumer.wait_ok();
    assert_eq!(
        line(&said, "stopped: "),
        "stopped: the producer's last event arrived"
    );
    assert!(
        line(&said, "received ").starts_with("received 3000 events"),
        "{said:#?}"
    );

    // The producer alone, in batches of 100: the durable consumer's events wait for it, and
    // it resumes at its last commit.
    ns.spawn(
        "producer example",
        command(&ns, "producer", &["2000", "100"]),
    )
    .wait_ok();
    let mut consumer = ns.spawn("consumer example", command(&ns, "consumer", &[]));
    let attached = consumer.next_line().expect("the consumer's first line");
    assert!(
        attached.contains("at sequence 3000 (2000 waiting)"),
        "{attached}"
    );
    let said = consumer.wait_ok();
    assert!(
        line(&said, "received ").starts_with("received 2000 events"),
        "{said:#?}"
    );

    let removed = ns
        .spawn("producer example", command(&ns, "producer", &["--remove"]))
        .wait_ok();
    assert!(
        line(&removed, "removed ring").contains(RING),
        "{removed:#?}"
    );
    assert!(matches!(
        Ring::open(ns.name(), RING),
        Err(OpenError::NotFound { .. })
    ));
}

#[test]
fn the_fanout_example_gives_every_consumer_every_event() {
    let ns = Namespace::new("ex_fanout");
    let said = ns
        .spawn("fanout example", command(&ns, "fanout", &["20000"]))
        .wait_ok();
    let consumers: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("received 40000 (per producer 20000 + 20000)"))
        .collect();
    assert_eq!(consumers.len(), 2, "{said:#?}");
    for c in consumers {
        assert!(c.contains("out of order 0, foreign 0, checksum ok"), "{c}");
    }
    assert!(
        line(&said, "every consumer received").starts_with("every consumer received 40000 events"),
        "{said:#?}"
    );
    let left: Vec<_> = std::fs::read_dir(ns.dir())
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "the fan-out ring was left behind: {left:?}"
    );
}
