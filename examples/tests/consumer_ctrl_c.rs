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
