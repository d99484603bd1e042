//! Fault injection: the broker SIGKILLed during its sweeps, during a stop and during a
//! drain. The broker is never on the data path: producers and consumers carry on without
//! it, and the next broker adopts the ring (epoch + 1) and finishes what a dead process
//! left (frees a dead anonymous consumer's entry, tombstones a dead producer's claim).
//!
//! Producers and consumers are the `fproducer` / `fconsumer` roles (`common::fault`):
//! self-checking events with per-producer sequence numbers, checked by every consumer. A
//! consumer attached before the first publish (`audit`) must, at the end, have been handed
//! every event every producer accepted, once and in order; whatever else it walked past is
//! a tombstone it counted. Every decision (what to kill, when) comes from a seeded
//! generator whose seed is printed; `SHMRING_FAULT_SEED` replays it.
//!
//! Three more tests lay down the exact state a kill between two particular instructions of
//! a stop leaves (a window of nanoseconds no random kill hits in a test run), or a drain
//! abandoned by its broker, and check what the next broker and the CLI make of it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::fault::{
    check_delivered_all, cli_finish, cli_spawn, dead_entries, expect_done, ledger_path, published,
    spawn_consumer, spawn_producer, Accepted, DWELL_WAIT, WAITS,
};
use common::{num, ring, BrokerNs, Child, Namespace};
use shmring::{Ring, RingState};
use shmring_testkit::fault::Rng;
use shmring_testkit::raw::RawSegment;

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

const PROGRESS: u64 = 16;

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// `@acc` from every live producer, read past whatever they printed before: events flow.
fn publishing_goes_on(producers: &mut [(u32, Child)]) {
    for (_, p) in producers.iter_mut() {
        p.try_lines();
        p.expect("@acc");
    }
}

/// Send `finish` to every child and stop the ring through the running broker; the
/// producers' `@done` lines say exactly what each accepted.
fn finish_and_stop(
    ns: &Namespace,
    producers: &mut [(u32, Child)],
    consumers: &mut [&mut Child],
    accepted: &mut BTreeMap<u32, Accepted>,
) {
    for (_, p) in producers.iter_mut() {
        p.send_line("finish");
    }
    for c in consumers.iter_mut() {
        c.send_line("finish");
    }
    let out = ns.cli(&["stop", "r"]);
    assert!(
        out.status.success(),
        "stop: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (id, p) in producers.iter_mut() {
        accepted.insert(*id, Accepted::Exactly(published(&p.expect("@done"))));
    }
}

/// The ring as a stop left it: running and open, or stopped with the line closed. Anything
/// else is a half-done stop. (Where it stopped is checked against the producers' count by
/// [`stop_at_what_was_accepted`].)
fn stop_outcome(handle: &Ring, raw: &RawSegment) -> &'static str {
    let (state, closed) = (handle.state(), handle.is_closed());
    match (state, closed) {
        (Some(RingState::Running), false) => "not stopped",
        (Some(RingState::Stopped), true) => "stopped",
        _ => panic!(
            "a half-done stop: state {state:?}, closed {closed}, stop sequence {}",
            raw.stop_seq()
        ),
    }
}

/// On a stopped ring whose producers (`ROLE_ON_CLOSED=retry`, never killed, no tombstones)
/// each said `@refused acc=N`: the recorded stop sequence is the sum of what they accepted,
/// a count taken from the producers rather than from the ring. Returns it.
fn stop_at_what_was_accepted(producers: &mut [(u32, Child)], raw: &RawSegment) -> u64 {
    let accepted: u64 = producers
        .iter_mut()
        .map(|(_, p)| shmring_testkit::report::num(&p.expect("@refused"), "acc"))
        .sum();
    assert_eq!(
        raw.stop_seq(),
        accepted,
        "the stop sequence is not the number of events the producers accepted"
    );
    accepted
}

#[test]
fn the_broker_killed_at_random_points_of_its_sweeps_leaves_the_data_path_alone() {
    let mut rng = Rng::for_test("broker_killed_in_sweeps");
    let ns = Namespace::new("fbsweep");
    // A 4 ms stall threshold: a sweep every 2 ms, so a kill often lands inside one.
    let config = "[rings.r]\ncapacity = 32\nslot_size = 128\nstall_threshold = \"4ms\"\n\
                  unblock_timeout = \"20ms\"\n";
    let mut broker = ns.broker(Some(config));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let producer_env = [
        ("ROLE_PROGRESS", s(PROGRESS)),
        ("ROLE_DWELL_US", s(2000)),
        ("ROLE_DWELL_EVERY", s(4)),
        ("ROLE_PACE_US", s(20)),
    ];
    let (mut audit, _) = spawn_consumer(
        &ns,
        "r",
        &[
            ("ROLE_NAME", s("audit")),
            ("ROLE_FROM_ZERO", s(1)),
            ("ROLE_WAIT", s("block")),
            ("ROLE_BATCH", s(rng.range(1..=32))),
        ],
    );
    let anon_env = |rng: &mut Rng| {
        vec![
            ("ROLE_WAIT", s(rng.pick(&WAITS))),
            ("ROLE_BATCH", s(rng.range(1..=32))),
        ]
    };
    let (mut anon, _) = spawn_consumer(&ns, "r", &anon_env(&mut rng));
    let mut accepted: BTreeMap<u32, Accepted> = BTreeMap::new();
    let mut producers: Vec<(u32, Child)> = Vec::new();
    let mut next_id = 0u32;
    for _ in 0..2 {
        producers.push((
            next_id,
            spawn_producer(&ns, "r", next_id, rng.fork(), &producer_env),
        ));
        next_id += 1;
    }
    let brokers = rng.range(4..=7);
    let (mut producer_kills, mut consumer_kills, mut flowing) = (0, 0, 0);
    for b in 0..brokers {
        // Work for this broker: a dead producer (maybe holding a claim) or a dead
        // anonymous consumer, or nothing.
        match rng.below(3) {
            0 => {
                let i = rng.below(producers.len() as u64) as usize;
                let (id, victim) = &mut producers[i];
                if rng.chance(1, 2) {
                    victim.try_lines();
                    victim.expect_within("@dwell", DWELL_WAIT);
                } else {
                    std::thread::sleep(Duration::from_millis(rng.range(0..=10)));
                }
                victim.kill();
                victim.rest_of_stdout();
                accepted.insert(*id, Accepted::killed(&ledger_path(&ns, *id)));
                producers[i] = (
                    next_id,
                    spawn_producer(&ns, "r", next_id, rng.fork(), &producer_env),
                );
                next_id += 1;
                producer_kills += 1;
            }
            1 => {
                anon.kill();
                anon = spawn_consumer(&ns, "r", &anon_env(&mut rng)).0;
                consumer_kills += 1;
            }
            _ => {}
        }
        // Kill the broker wherever it is: sweeping, repairing, freeing, or asleep.
        std::thread::sleep(Duration::from_millis(rng.range(0..=30)));
        let nothing_pending = dead_entries(&handle) == 0;
        broker.kill();
        if nothing_pending {
            // Nothing for a broker to do: the data path goes on without one.
            publishing_goes_on(&mut producers);
            flowing += 1;
        }
        broker = ns.broker(Some(config));
        let (v, _) = ns.status();
        assert_eq!(
            num(ring(&v, "r").expect("r"), "epoch"),
            b + 2,
            "adopted once more: {v:#}"
        );
    }
    // The last broker finishes what the others left: dead entries freed or repaired.
    common::wait_until("every dead process's entry to be freed or repaired", || {
        (dead_entries(&handle) == 0).then_some(())
    });
    publishing_goes_on(&mut producers);
    finish_and_stop(
        &ns,
        &mut producers,
        &mut [&mut audit, &mut anon],
        &mut accepted,
    );
    let a = expect_done(&mut audit);
    let total = check_delivered_all("audit", &a, &accepted);
    expect_done(&mut anon);
    assert_eq!(a.next, handle.head());
    assert_eq!(a.net, 0, "wake-ups by the net: {a:?}");
    let (v, _) = ns.status();
    assert_eq!(num(&v["broker"], "epoch"), brokers + 1, "{v:#}");
    println!(
        "brokers killed: {brokers} ({flowing} with the data path checked while brokerless); \
         producer kills {producer_kills}, consumer kills {consumer_kills}; events {total}, \
         tombstones skipped {}",
        a.skipped
    );
}

#[test]
fn the_broker_killed_during_a_stop_leaves_the_ring_running_or_stopped() {
    let mut rng = Rng::for_test("broker_killed_during_stop");
    let ns = Namespace::new("fbstop");
    let config = "[rings.r]\ncapacity = 64\nstall_threshold = \"1s\"\n";
    let mut broker = ns.broker(Some(config));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = RawSegment::open(&handle);
    let consumer = |name: &str, wait: &str| {
        let mut pairs = vec![
            ("ROLE_FROM_ZERO", s(1)),
            ("ROLE_WAIT", s(wait)),
            ("ROLE_ON_CLOSED", s("again")),
        ];
        if !name.is_empty() {
            pairs.push(("ROLE_NAME", s(name)));
        }
        spawn_consumer(&ns, "r", &pairs).0
    };
    let mut audit = consumer("audit", "block");
    let wait = rng.pick(&WAITS).to_string();
    let mut second = consumer("", &wait);
    let mut producers: Vec<(u32, Child)> = (0..2)
        .map(|id| {
            let env = [
                ("ROLE_PROGRESS", s(PROGRESS)),
                ("ROLE_PACE_US", s(20)),
                ("ROLE_ON_CLOSED", s("retry")),
            ];
            (id, spawn_producer(&ns, "r", id, rng.fork(), &env))
        })
        .collect();
    let rounds = rng.range(5..=8);
    let mut outcomes = Vec::new();
    for round in 0..rounds {
        publishing_goes_on(&mut producers);
        let cli = cli_spawn(&ns, &["stop", "r"]);
        std::thread::sleep(Duration::from_micros(rng.range(0..=8000)));
        broker.kill();
        let (ok, said) = cli_finish(cli);
        let outcome = stop_outcome(&handle, &raw);
        outcomes.push(format!("{outcome} (CLI ok={ok})"));
        if outcome == "stopped" {
            let stop = stop_at_what_was_accepted(&mut producers, &raw);
            for c in [&mut audit, &mut second] {
                let closed = c.expect("@closed");
                assert_eq!(
                    shmring_testkit::report::num(&closed, "next"),
                    stop,
                    "drained to the stop: {closed}"
                );
            }
        } else {
            assert!(!ok, "the CLI says it stopped the ring, but it runs: {said}");
        }
        broker = ns.broker(Some(config));
        if outcome == "stopped" {
            let out = ns.cli(&["start", "r"]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            for c in [&mut audit, &mut second] {
                c.expect("@reopened");
            }
        }
        assert_eq!(handle.state(), Some(RingState::Running), "round {round}");
    }
    let mut accepted = BTreeMap::new();
    finish_and_stop(
        &ns,
        &mut producers,
        &mut [&mut audit, &mut second],
        &mut accepted,
    );
    let a = expect_done(&mut audit);
    let b = expect_done(&mut second);
    let total = check_delivered_all("audit", &a, &accepted);
    check_delivered_all(&format!("anonymous {wait}"), &b, &accepted);
    assert_eq!(
        (a.skipped, b.skipped),
        (0, 0),
        "no tombstones: nobody died holding a claim"
    );
    assert_eq!(a.net, 0, "{a:?}");
    assert_eq!(b.net, 0, "{b:?}");
    println!(
        "broker kills during a stop: {rounds}; events {total}; outcomes: {}",
        outcomes.join(", ")
    );
}

#[test]
fn the_broker_killed_during_a_drain_leaves_consumers_draining_and_the_ring_restartable() {
    let mut rng = Rng::for_test("broker_killed_during_drain");
    let ns = Namespace::new("fbdrain");
    let config = "[rings.r]\ncapacity = 32\nstall_threshold = \"1s\"\n";
    let mut broker = ns.broker(Some(config));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = RawSegment::open(&handle);
    let (mut audit, _) = spawn_consumer(
        &ns,
        "r",
        &[
            ("ROLE_NAME", s("audit")),
            ("ROLE_FROM_ZERO", s(1)),
            ("ROLE_WAIT", s("block")),
            ("ROLE_ON_CLOSED", s("again")),
        ],
    );
    // A slow consumer: the drain has to wait for it.
    let (mut slow, _) = spawn_consumer(
        &ns,
        "r",
        &[
            ("ROLE_NAME", s("slow")),
            ("ROLE_FROM_ZERO", s(1)),
            ("ROLE_WAIT", s(rng.pick(&WAITS))),
            ("ROLE_BATCH", s(1)),
            ("ROLE_SLOW_US", s(rng.range(2000..=5000))),
            ("ROLE_ON_CLOSED", s("again")),
        ],
    );
    let mut producers: Vec<(u32, Child)> = (0..2)
        .map(|id| {
            let env = [
                ("ROLE_PROGRESS", s(PROGRESS)),
                ("ROLE_ON_CLOSED", s("retry")),
            ];
            (id, spawn_producer(&ns, "r", id, rng.fork(), &env))
        })
        .collect();
    publishing_goes_on(&mut producers);
    let cli = cli_spawn(&ns, &["drain", "r", "--timeout", "30s"]);
    // Begun (DRAINING), or, if the slow consumer was not far behind, already over.
    common::wait_until("the drain to begin", || handle.is_closed().then_some(()));
    std::thread::sleep(Duration::from_millis(rng.range(0..=30)));
    broker.kill();
    let left = handle.state();
    let (ok, said) = cli_finish(cli);
    assert!(handle.is_closed());
    let stop = stop_at_what_was_accepted(&mut producers, &raw);
    // The data path: both consumers drain to the stop sequence without any broker, and
    // `run` returns Closed at the end of the run.
    for c in [&mut audit, &mut slow] {
        let closed = c.expect("@closed");
        assert_eq!(
            shmring_testkit::report::num(&closed, "next"),
            stop,
            "{closed}"
        );
    }
    let mut broker = ns.broker(Some(config));
    let out = ns.cli(&["start", "r"]);
    assert!(
        out.status.success(),
        "start after an interrupted drain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for c in [&mut audit, &mut slow] {
        c.expect("@reopened");
    }
    publishing_goes_on(&mut producers);
    let mut accepted = BTreeMap::new();
    finish_and_stop(
        &ns,
        &mut producers,
        &mut [&mut audit, &mut slow],
        &mut accepted,
    );
    let a = expect_done(&mut audit);
    let b = expect_done(&mut slow);
    let total = check_delivered_all("audit", &a, &accepted);
    check_delivered_all("slow", &b, &accepted);
    broker.kill();
    println!(
        "broker killed during a drain: ring left {left:?} at stop sequence {stop}; the drain \
         CLI said (ok={ok}) {said:?}; events {total}"
    );
}

/// The ring as a broker killed inside `Ring::stop` leaves it after closing the line and
/// before leaving the STOPPING state it owns: the claim counter is closed at the recorded
/// stop sequence, and the lifecycle word names the dead broker as its owner. Returns the
/// handles; the ring's head is 40.
fn stop_cut_short(ns: &Namespace, config: &str) -> (Ring, shmring::Consumer, shmring::Producer) {
    let mut broker = ns.broker(Some(config));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = RawSegment::open(&handle);
    let mut consumer = handle
        .consumer(shmring::ConsumerOptions::durable("c"))
        .expect("consumer");
    let mut producer = handle.producer().expect("producer");
    for i in 0..40u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    while consumer.poll_once(|_| {}).expect("poll") > 0 {}
    assert_eq!(consumer.next_sequence(), 40);
    let dead = broker.pid();
    broker.kill();
    raw.set_stop_seq(40);
    raw.set_claim_word(raw.claim_word() | shmring_layout::CLAIM_CLOSED);
    raw.set_lifecycle_word(shmring_layout::lifecycle::next(
        raw.lifecycle_word(),
        RingState::Stopping as u32,
        dead,
    ));
    assert_eq!(handle.state(), Some(RingState::Stopping));
    assert_eq!(
        handle.head(),
        40,
        "the position of a closed line is its stop sequence"
    );
    assert_eq!(
        producer.publish(&40u64.to_le_bytes()),
        Err(shmring::PublishError::Closed),
        "the closed line refuses publishes"
    );
    (handle, consumer, producer)
}

/// After a stop cut short between closing the line and storing the state, the way out
/// (`broker stop`, then `broker start`) finishes the stop at the recorded sequence and
/// reopens the line there: no sequence is handed out twice, and the consumer gets what is
/// published next.
#[test]
fn after_a_stop_cut_short_stop_and_start_recover_without_reusing_a_sequence() {
    let ns = Namespace::new("fbstopcut");
    let config = "[rings.r]\ncapacity = 64\nstall_threshold = \"1s\"\n";
    let (handle, mut consumer, mut producer) = stop_cut_short(&ns, config);
    let _broker: Child = ns.broker(Some(config));
    let out = ns.cli(&["stop", "r"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && said.contains("sequence 40"),
        "stop after the cut-short one: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ns.cli(&["start", "r"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(handle.head(), 40, "reopened at the stop sequence");
    let seq = producer
        .publish(&40u64.to_le_bytes())
        .expect("publish after the start");
    assert_eq!(seq, 40, "no sequence handed out twice");
    let mut got = Vec::new();
    common::wait_until("the consumer to get the new event", || {
        consumer
            .poll_once(|ev| got.push(ev.sequence()))
            .expect("poll");
        (!got.is_empty()).then_some(())
    });
    assert_eq!(got, vec![40]);
}

/// The same cut-short stop, seen by the next broker: the stop's owner is dead, so the next
/// broker finishes it: the segment says STOPPED, with the line closed at the 40 events that
/// were published (counted by the test, not read from the ring), it says so in its log, and
/// `broker start` then reopens it there.
#[test]
fn a_stop_cut_short_is_finished_by_the_next_broker() {
    let ns = Namespace::new("fbstopcut");
    let config = "[rings.r]\ncapacity = 64\nstall_threshold = \"1s\"\n";
    let (handle, _consumer, mut producer) = stop_cut_short(&ns, config);
    let raw = RawSegment::open(&handle);
    let next = ns.broker(Some(config));
    common::wait_until("the next broker to finish the stop", || {
        (handle.state() == Some(RingState::Stopped)).then_some(())
    });
    assert!(
        next.stderr_has("finished a stop or start"),
        "the new broker finished the stop without saying so:\n{}",
        next.stderr_so_far()
    );
    assert!(handle.is_closed(), "stopped with the line open");
    assert_eq!(
        raw.stop_seq(),
        40,
        "stopped elsewhere than the 40 events published"
    );
    let out = ns.cli(&["start", "r"]);
    assert!(
        out.status.success(),
        "start after the finished stop: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        next.stderr_so_far()
    );
    assert_eq!(producer.publish(&40u64.to_le_bytes()), Ok(40));
}

/// A drain whose broker was killed while it waited: the ring is left DRAINING with nobody
/// draining it. Once every gating consumer has reached the stop sequence, the next broker
/// finishes it: STOPPED, the line closed at the 10 events published, and restartable.
#[test]
fn an_abandoned_drain_is_finished_by_the_next_broker() {
    let ns = Namespace::new("fbleft");
    let config = "[rings.r]\ncapacity = 64\nstall_threshold = \"1s\"\n";
    let mut broker = ns.broker(Some(config));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let mut consumer = handle
        .consumer(shmring::ConsumerOptions::durable("c"))
        .expect("consumer");
    let mut producer = handle.producer().expect("producer");
    for i in 0..10u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    let cli = cli_spawn(&ns, &["drain", "r", "--timeout", "30s"]);
    common::wait_until("the drain to begin", || {
        (handle.state() == Some(RingState::Draining)).then_some(())
    });
    broker.kill();
    let _ = cli_finish(cli);
    while consumer.poll_once(|_| {}).expect("poll") > 0 {}
    assert_eq!(consumer.next_sequence(), 10, "drained without a broker");

    let raw = RawSegment::open(&handle);
    let next = ns.broker(Some(config));
    common::wait_until("the next broker to finish the drain", || {
        (handle.state() == Some(RingState::Stopped)).then_some(())
    });
    assert!(handle.is_closed(), "stopped with the line open");
    assert_eq!(
        raw.stop_seq(),
        10,
        "stopped elsewhere than the 10 events published"
    );
    let out = ns.cli(&["start", "r"]);
    assert!(
        out.status.success(),
        "start after the finished drain: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        next.stderr_so_far()
    );
    assert_eq!(producer.publish(&10u64.to_le_bytes()), Ok(10));
}
