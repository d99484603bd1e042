//! The defaults the README states, each checked by what it does: an optional consumer's
//! slack, the batch cap, and a consumer's default wait strategy.

use std::thread;
use std::time::{Duration, Instant};

use shmring::{ConsumerOptions, Ring, RingConfig, WaitOutcome, DEFAULT_BATCH_CAP};

use shmring_testkit::Namespace;

mod common;
use common::small;

/// How many events a producer may publish past a required consumer caught up at
/// `capacity` while an optional consumer sits `capacity / 2` behind it, on a ring with
/// `slack`: `capacity / 2` if the optional consumer holds it (within the slack), `capacity`
/// if it does not (the required consumer alone holds it).
fn room_past(ns: &Namespace, name: &str, capacity: u64, slack: Option<u64>) -> u64 {
    let config = RingConfig {
        optional_slack: slack,
        ..small(capacity)
    };
    let ring = Ring::create(ns.name(), name, &config).expect("create");
    let mut req = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("required");
    let half = capacity / 2;
    let mut opt = ring
        .consumer(
            ConsumerOptions::anonymous()
                .optional()
                .batch_cap(half as usize),
        )
        .expect("optional");
    let mut p = ring.producer().expect("producer");
    for s in 0..capacity {
        assert_eq!(p.try_publish(&s.to_le_bytes()), Ok(s));
    }
    while req.poll_once(|_| {}).expect("poll") > 0 {}
    assert_eq!(opt.poll_once(|_| {}).expect("poll"), half as usize);
    let mut more = 0;
    while p.try_publish(&[0; 8]).is_ok() {
        more += 1;
        assert!(more <= capacity, "nothing held the producer");
    }
    more
}

/// `RingConfig::optional_slack`, by default half the capacity: an optional consumer half a
/// ring behind the slowest required one holds the producer, as with that slack set, and
/// one event less of slack lets it be lapped.
#[test]
fn an_optional_consumers_slack_is_half_the_capacity_by_default() {
    let ns = Namespace::concurrent("default-slack");
    for capacity in [16u64, 64] {
        let half = capacity / 2;
        let c = capacity;
        assert_eq!(room_past(&ns, &format!("d{c}"), c, None), half);
        assert_eq!(room_past(&ns, &format!("h{c}"), c, Some(half)), half);
        assert_eq!(
            room_past(&ns, &format!("l{c}"), c, Some(half - 1)),
            capacity
        );
    }
}

/// A poll delivers at most `DEFAULT_BATCH_CAP` = 1024 events unless the consumer sets its
/// own cap.
#[test]
fn a_poll_delivers_at_most_1024_events_by_default() {
    assert_eq!(DEFAULT_BATCH_CAP, 1024);
    let ns = Namespace::concurrent("default-cap");
    let ring = Ring::create(ns.name(), "r", &small(2048)).expect("create");
    let mut c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    let mut p = ring.producer().expect("producer");
    for s in 0..1100u64 {
        p.publish(&s.to_le_bytes()).expect("publish");
    }
    assert_eq!(c.poll_once(|_| {}), Ok(1024));
    assert_eq!(c.poll_once(|_| {}), Ok(76));
}

/// The default wait strategy spins, then yields, then parks on the ring's futex: a
/// consumer left waiting on an empty ring shows as parked, and a publish wakes it.
#[test]
fn a_consumer_that_waits_with_the_default_strategy_parks() {
    let ns = Namespace::concurrent("default-wait");
    let ring = Ring::create(ns.name(), "r", &small(8)).expect("create");
    let mut c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    let waiter = thread::spawn(move || {
        let outcome = c.wait();
        (outcome, c)
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ring.info().consumers.iter().any(|e| e.parked) {
        assert!(
            Instant::now() < deadline,
            "a consumer waiting with the default strategy never parked"
        );
        thread::sleep(Duration::from_millis(1));
    }
    let mut p = ring.producer().expect("producer");
    p.publish(b"wake").expect("publish");
    let (outcome, mut c) = waiter.join().expect("the waiting thread");
    assert_eq!(outcome, Ok(WaitOutcome::Ready));
    assert_eq!(c.poll_once(|_| {}), Ok(1));
}
