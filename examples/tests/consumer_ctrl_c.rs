//! The quickstart consumer detaches on Ctrl-C: it says so, exits 0, and its durable entry is
//! left DETACHED (keeping its position for the next run), not ACTIVE under a dead pid.
//!
//! It runs the built example (`cargo test` builds a package's examples next to its tests:
//! `target/<profile>/examples/consumer`) in a namespace of its own, and interrupts it with
//! SIGINT once it has attached. Every wait is bounded.

use rustix::process::Signal;
use shmring::Ring;
use shmring_examples::{READER, RING};
use shmring_testkit::Namespace;

mod common;
use common::example;

#[test]
fn the_consumer_example_detaches_on_ctrl_c() {
    // Owns the example process and removes the ring it creates, also when the test fails.
    let ns = Namespace::new("ex_ctrlc");
    let mut cmd = std::process::Command::new(example("consumer"));
    cmd.env(shmring::names::NAMESPACE_ENV, ns.name());
    let mut child = ns.spawn("consumer example", cmd);
    // It prints a line once it has attached.
    let first = child
        .next_line()
        .expect("the consumer example never said it attached");
    let ring = Ring::open(ns.name(), RING).expect("the example created its ring");
    let entry = |ring: &Ring| {
        ring.info()
            .consumers
            .into_iter()
            .find(|c| c.name == READER)
            .unwrap_or_else(|| panic!("no consumer {READER:?} in {:#?}", ring.info()))
    };
    assert_eq!(entry(&ring).state, "ACTIVE", "attached: {first}");

    let exit = child.signal_and_wait(Signal::INT);
    let mut said = vec![first];
    said.extend(child.rest_of_stdout());
    assert!(exit.success(), "exit {exit:?}; it said {said:#?}");
    assert!(
        said.iter()
            .any(|l| l.contains("interrupted (Ctrl-C): detaching")),
        "it did not say why it stopped: {said:#?}"
    );
    assert_eq!(
        entry(&ring).state,
        "DETACHED",
        "a durable consumer that detached keeps its position"
    );
}

/// The multi-process examples end on Ctrl-C (SIGINT to the parent alone, as `kill -INT`
/// sends it) as on an error: exit 1 with the reason, every child process stopped, their
/// rings, their namespace directory and the logger's file removed. Before, the signal's
/// default action ended the parent at once and left all of them behind.
#[test]
fn the_multi_process_examples_clean_up_on_ctrl_c() {
    for (name, args) in [
        ("fanout", &["100000000"][..]),
        ("async_logger", &["block", "100000000"][..]),
        ("order_pipeline", &["100000000"][..]),
    ] {
        let ns = Namespace::new("ex_ctrlc_multi");
        let mut cmd = std::process::Command::new(example(name));
        cmd.args(args).env(shmring::names::NAMESPACE_ENV, ns.name());
        let mut child = ns.spawn(name, cmd);
        let pid = child.pid();
        let first = child
            .next_line()
            .unwrap_or_else(|| panic!("{name} never said what it made"));
        // Its children run once it has said so; let them start before the signal.
        shmring_testkit::wait_until(&format!("{name}'s child processes"), || {
            (children_of(pid).len() >= 2).then_some(())
        });
        let kids = children_of(pid);
        let exit = child.signal_and_wait(Signal::INT);
        let err = child.stderr();
        assert_eq!(exit.code(), Some(1), "{name}: {first}\n{err}");
        assert!(err.contains("interrupted (Ctrl-C)"), "{name}: {err}");
        let left = shmring::names::rings_in(ns.dir()).unwrap_or_default();
        assert_eq!(left, Vec::<String>::new(), "{name} left rings behind");
        assert!(!ns.dir().exists(), "{name} left {}", ns.dir().display());
        for kid in kids {
            assert!(
                !std::path::Path::new(&format!("/proc/{kid}")).exists(),
                "{name} left its child {kid} running"
            );
        }
        let log = std::env::temp_dir().join(format!("async-logger-{pid}.log"));
        assert!(!log.exists(), "{name} left {}", log.display());
    }
}

/// The pids whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}
