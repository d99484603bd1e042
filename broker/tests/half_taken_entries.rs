//! Table entries left half-taken by a process that died between two steps: a consumer entry
//! CLAIMED (attaching) or RESUMING (being taken over by name), a producer entry ATTACHING or
//! REPAIRING. The broker gives each back at its sweeps: the anonymous one freed, a durable
//! one that gated as required DETACHED with its name and position, one that did not
//! (REATTACHING) RELEASED, one whose attacher died before its start (STARTING) RELEASED
//! whatever the policy, the producer entries freed. The pid in an
//! entry's word is the process that took it, so a pid no process has proves the holder is
//! gone.

mod common;

use common::{ring, BrokerNs, Namespace};
use shmring::{ConsumerOptions, Ring};
use shmring_layout::{consumer_flags, consumer_state, owned_word, producer_state};

#[test]
fn entries_left_half_taken_by_dead_processes_are_given_back() {
    let ns = Namespace::new("halftaken");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nmax_producers = 4\nstall_threshold = \"20ms\"\nunblock_timeout = \"100ms\"\n",
    ));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = shmring_testkit::raw::RawSegment::open(&handle);
    let mut producer = handle.producer().expect("producer");
    for v in 0..5u64 {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    let (dead, _) = shmring_testkit::fault::dead_process();
    raw.fabricate_consumer(
        0,
        owned_word::pack(3, consumer_state::CLAIMED, dead),
        0,
        "",
        0,
    );
    raw.fabricate_consumer(
        1,
        owned_word::pack(5, consumer_state::RESUMING, dead),
        consumer_flags::REQUIRED | consumer_flags::DURABLE,
        "d",
        2,
    );
    // Taken over from a released state: it did not gate while being taken over, and must
    // not start gating at its stale position now.
    raw.fabricate_consumer(
        2,
        owned_word::pack(9, consumer_state::REATTACHING, dead),
        consumer_flags::REQUIRED | consumer_flags::DURABLE,
        "r",
        0,
    );
    // Dead inside its attach, after its ACTIVE CAS and before it stored its start: its
    // position was read before it gated, and nothing there is kept for it, so it holds no
    // producers, whatever the policy (the default, alert, would keep a dead one gating).
    raw.fabricate_consumer(
        3,
        owned_word::pack(7, consumer_state::ACTIVE, dead),
        consumer_flags::REQUIRED | consumer_flags::DURABLE | consumer_flags::STARTING,
        "s",
        1,
    );
    raw.set_producer_word(2, owned_word::pack(2, producer_state::ATTACHING, dead));
    raw.set_producer_word(3, owned_word::pack(4, producer_state::REPAIRING, dead));

    ns.wait_status("every half-taken entry given back", |v, _| {
        let r = ring(v, "r")?;
        let consumers = r["consumers"].as_array()?;
        let producers = r["producers"].as_array()?;
        let d = consumers.iter().find(|c| c["name"] == "d")?;
        let r = consumers.iter().find(|c| c["name"] == "r")?;
        let s = consumers.iter().find(|c| c["name"] == "s")?;
        (consumers.len() == 3
            && d["state"] == "DETACHED"
            && r["state"] == "RELEASED"
            && s["state"] == "RELEASED"
            && producers.len() == 1)
            .then_some(())
    });
    let info = handle.info();
    assert_eq!(info.producers.len(), 1, "{info:?}");
    assert_eq!(info.producers[0].pid, std::process::id());
    let d = handle
        .consumer(ConsumerOptions::durable("d"))
        .expect("the durable name resumes");
    assert_eq!(d.next_sequence(), 2, "it kept its position");
    let r = handle
        .consumer(ConsumerOptions::durable("r"))
        .expect("the released name resumes");
    assert_eq!(
        r.next_sequence(),
        5,
        "at the head: it did not gate while released"
    );
    let s = handle
        .consumer(ConsumerOptions::durable("s"))
        .expect("the name of the attach that died resumes");
    assert_eq!(s.next_sequence(), 5, "at the head");
    assert_eq!(
        s.stats().dropped_behind,
        4,
        "counting the gap from its position"
    );
}
