//! Health without a broker: `Ring::health` judges a ring as `broker status` does.

use std::time::{Duration, Instant};

use shmring::{ConsumerOptions, HealthState, HealthThresholds, Ring, RingConfig, TryPublishError};
use shmring_testkit::Namespace;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_stalled_consumer_and_a_blocked_ring_are_seen_without_a_broker() {
    let ns = Namespace::concurrent("health");
    let ring = Ring::create(
        ns.name(),
        "h",
        &RingConfig {
            capacity: 64,
            ..RingConfig::default()
        },
    )
    .expect("create");
    let mut health = ring.health(HealthThresholds {
        stall: Duration::from_millis(1),
    });
    assert!(health.check().is_healthy(), "an empty ring is healthy");

    let idle = ring
        .consumer(ConsumerOptions::durable("idle"))
        .expect("consumer");
    let mut producer = ring.producer().expect("producer");
    producer.publish(b"pending").expect("publish");
    // The consumer never polls: once the threshold has passed between two checks it is
    // STALLED (bounded wait, no duration asserted).
    let deadline = Instant::now() + WAIT;
    let stalled = loop {
        let h = health.check();
        if h.consumers.iter().any(|c| c.state == HealthState::Stalled) {
            break h;
        }
        assert!(Instant::now() < deadline, "never stalled: {h:?}");
        std::thread::yield_now();
    };
    assert!(!stalled.is_healthy());
    assert_eq!(stalled.consumers[0].lag, 1);

    drop(idle); // durable and required: DETACHED, still gating
    loop {
        match producer.try_publish(b"fill") {
            Ok(_) => {}
            Err(TryPublishError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let h = health.check();
    assert_eq!(h.consumers[0].state, HealthState::Detached);
    assert_eq!(h.gate.free, 0);
    assert_eq!(h.blocked_by, Some(h.consumers[0].index), "{h:?}");
    assert!(h.consumers[0].lag <= 64);
    assert!(!h.is_healthy());

    drop(producer);
    Ring::remove(ns.name(), "h").expect("remove");
}
