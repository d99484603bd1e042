//! `broker demo` end to end with a short duration, and interrupted: either way every
//! process it started is gone and its namespace is removed.

mod common;

use std::process::Command;
use std::time::Instant;

use common::{Namespace, BIN};
use rustix::process::Signal;

#[test]
fn role() {
    common::roles::run_if_child();
}

/// The namespace named on the demo's first line.
fn namespace_of(first_line: &str) -> String {
    let rest = first_line
        .split("demo namespace ")
        .nth(1)
        .unwrap_or_else(|| panic!("no namespace in {first_line:?}"));
    rest[..rest.find(':').expect("a colon")].to_owned()
}

/// Pids of live processes whose command line mentions `namespace`.
fn processes_of(namespace: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(namespace))
                .unwrap_or(false)
        })
        .collect()
}

fn assert_cleaned_up(namespace: &str) {
    let dir = shmring::names::namespace_dir(namespace).expect("valid");
    assert!(!dir.exists(), "{} is left behind", dir.display());
    common::wait_until("every demo process gone", || {
        processes_of(namespace).is_empty().then_some(())
    });
}

#[test]
fn the_demo_runs_end_to_end_and_cleans_up() {
    let _serial = common::serial();
    let out = shmring_testkit::output("demo", Command::new(BIN).args(["demo", "--duration", "3s"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let namespace = namespace_of(text.lines().next().unwrap_or(""));
    assert!(text.contains("killed \"restarted\""), "{text}");
    assert!(text.contains("started \"restarted\" again"), "{text}");
    assert!(
        text.contains("ring \"demo\""),
        "the live status was shown: {text}"
    );
    let table = &text[text
        .find("what each consumer saw")
        .expect("the final table")..];
    // "N events published in ...; what each consumer saw": the ring is stopped and drained
    // at the end, so every consumer that ran throughout saw every event.
    let published: u64 = text[..text.find(" events published in").expect("the count")]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("the published count");
    assert!(published > 0, "{text}");
    for (name, wait) in [
        ("spin", "busy-spin"),
        ("blocking", "blocking"),
        ("adaptive", "adaptive"),
        ("restarted", "timeout-blocking"),
    ] {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], wait, "{row}");
        let events: u64 = cols[2].parse().expect("events");
        assert!(events > 0, "{name} saw nothing: {table}");
        if name == "restarted" {
            // Only what it received after its restart.
            assert!(events <= published, "{table}");
        } else {
            assert_eq!(events, published, "{name} did not drain the ring: {table}");
        }
    }
    assert_cleaned_up(&namespace);
}

#[test]
fn an_interrupted_demo_cleans_up() {
    // The demo makes a namespace of its own; this one owns the demo process.
    let ns = Namespace::new("demo_int");
    let mut cmd = Command::new(BIN);
    cmd.args(["demo", "--duration", "10m"]);
    let mut demo = ns.spawn("demo", cmd);
    let first = demo.expect("demo namespace ");
    let namespace = namespace_of(&format!("demo namespace {first}"));
    demo.expect("ring \"demo\"");
    assert!(!processes_of(&namespace).is_empty());
    let started = Instant::now();
    let status = demo.signal_and_wait(Signal::INT);
    assert_eq!(status.code(), Some(1), "an interrupted demo exits 1");
    assert_cleaned_up(&namespace);
    eprintln!("cleaned up {:?} after SIGINT", started.elapsed());
}
