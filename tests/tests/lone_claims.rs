//! Lone claims across processes (ARCHITECTURE.md, "Lone claims"): a producer process alone
//! on a multi-producer ring claims with plain stores to its own entry; another producer
//! process that claims ends that, and the counter takes over where the lone claims ended.
//!
//! Checked: every event of both producers reaches a required consumer exactly once, in each
//! producer's order, and the ring's sequences have no hole and no repeat, with the second
//! producer claiming all through the first one's run; and a lone producer killed holding a
//! claim leaves the counter past that claim (a hole the repair tombstones), never below it.

use shmring::{ConsumerOptions, Ring, RingConfig};
use shmring_testkit::report::{line, num};
use shmring_testkit::{eventually, testkit, Namespace};

/// The table index of the producer that has the line to itself, if any.
fn lone(ring: &Ring) -> Option<u32> {
    ring.info()
        .producers
        .iter()
        .find(|p| p.lone)
        .map(|p| p.index)
}

/// Producer 0 publishes without end, alone at first; producer 1 publishes `COUNT` events
/// while it runs (its first claim ends producer 0's lone claims; once it detached, producer
/// 0 may take the line again); then the ring stops. The required consumer gets every accepted
/// event once, in order per producer.
#[test]
fn a_second_producer_process_ends_a_lone_run_without_a_lost_or_repeated_event() {
    const COUNT: u64 = 50_000;
    let ns = Namespace::new("lone_two");
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut reader = testkit!(
        ns,
        "required reader",
        "consume --ns {ns} --ring r --name reader --producers 2 --per-producer {} \
         --until-stdin --wait block",
        u64::MAX / 4
    );
    reader.expect_line("ready");
    let mut first = testkit!(
        ns,
        "producer 0",
        "produce --ns {ns} --ring r --producer-id 0 --count 0 --mode mixed"
    );
    first.expect_line("started");
    assert!(lone(&ring).is_some(), "the only producer claims alone");
    let second = testkit!(
        ns,
        "producer 1",
        "produce --ns {ns} --ring r --producer-id 1 --count {COUNT} --mode mixed"
    );
    let out = second.wait_ok();
    assert_eq!(num(line(&out, "done"), "published"), COUNT);
    let stop = ring.stop().expect("stop");
    let out = first.wait_ok();
    let published = num(line(&out, "done"), "published");
    assert_eq!(published + COUNT, stop, "accepted = the stop sequence");
    reader.send_line(&format!("until {stop}"));
    let out = reader.wait_ok();
    let done = line(&out, "done");
    assert_eq!(
        num(done, "delivered"),
        stop,
        "every accepted event, once: {done}"
    );
    assert_eq!(num(done, "skipped"), 0, "{done}");
}

/// A lone producer fills the ring and waits for room holding its next claim; it is
/// killed there. This process's producer claims next: the counter takes over after the
/// dead claim, which the repair tombstones, and the consumer reads the dead producer's
/// events, skips the hole, and reads this one's.
#[test]
fn a_lone_producer_killed_holding_a_claim_leaves_the_counter_past_it() {
    const CAPACITY: u64 = 16;
    let ns = Namespace::new("lone_kill");
    let config = RingConfig {
        capacity: CAPACITY,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut first = testkit!(
        ns,
        "lone producer",
        "produce --ns {ns} --ring r --producer-id 0 --count 0 --mode publish"
    );
    first.expect_line("started");
    assert_eq!(lone(&ring), Some(0));
    // Full: its claim of sequence CAPACITY is taken (lone) and waits for room.
    eventually("the producer holds a claim past the full ring", || {
        ring.info()
            .producers
            .iter()
            .any(|p| p.in_flight == Some(CAPACITY))
    });
    first.kill();
    let mut mine = ring.producer().expect("a second producer");
    let dead = ring
        .info()
        .producers
        .into_iter()
        .find(|p| p.index == 0)
        .expect("the dead producer's entry");
    // Room for this producer's claim: read what the dead one published.
    let mut seen = Vec::new();
    while c.poll_once(|ev| seen.push(ev.sequence())).expect("poll") > 0 {}
    assert_eq!(seen, (0..CAPACITY).collect::<Vec<_>>());
    assert_eq!(
        mine.publish(b"after"),
        Ok(CAPACITY + 1),
        "the counter took over past the dead claim"
    );
    assert_eq!(lone(&ring), None);
    let repair = ring.repair_dead_producer(dead.index, dead.word);
    assert_eq!(repair.tombstoned, 1, "{repair:?}");
    let mut after = Vec::new();
    while c
        .poll_once(|ev| after.push((ev.sequence(), ev.bytes().to_vec())))
        .expect("poll")
        > 0
    {}
    assert_eq!(after, [(CAPACITY + 1, b"after".to_vec())]);
    assert_eq!(c.stats().skipped, 1, "the dead claim, skipped once");
}
