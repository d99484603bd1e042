//! What the client's test files share beyond the workspace's test kit: the small ring
//! configurations, and a poll that fails the test if the client panics.

#![allow(dead_code)] // each test file uses a different part

use shmring::RingConfig;

/// A small ring: `capacity` slots of 64 bytes, 4 consumers, 4 producers.
pub fn small(capacity: u64) -> RingConfig {
    RingConfig {
        capacity,
        slot_size: 64,
        max_consumers: 4,
        max_producers: 4,
        ..RingConfig::default()
    }
}

/// The ring of the hostile-input tests: 8 slots of 64 bytes, 3 consumers, 2 producers.
pub fn hostile() -> RingConfig {
    RingConfig {
        capacity: 8,
        slot_size: 64,
        max_consumers: 3,
        max_producers: 2,
        ..RingConfig::default()
    }
}

/// `poll_once` with a handler that cannot panic, on a consumer this test owns. Such a
/// handler never makes `poll_once` report `HandlerPanicked` (only the handler's own panic
/// does), so that error, or the `Failed` that follows it, is the client panicking inside
/// its delivery loop: fail the test. The consumer's entry must not be FAILED afterwards.
pub fn poll_quiet(
    ring: &shmring::Ring,
    c: &mut shmring::Consumer,
    handler: impl FnMut(shmring::Event<'_>),
) -> Result<usize, shmring::PollError> {
    let r = c.poll_once(handler);
    assert!(
        !matches!(
            r,
            Err(shmring::PollError::HandlerPanicked { .. } | shmring::PollError::Failed)
        ),
        "poll_once with a handler that cannot panic returned {r:?}: the client panicked"
    );
    let index = c.index();
    if let Some(e) = ring.info().consumers.iter().find(|e| e.index == index) {
        assert_ne!(e.state, "FAILED", "consumer {index} left FAILED: {e:?}");
    }
    r
}

/// Ring `r` of the dependency tests: 64 slots, `consumers` consumer entries.
pub fn graph_ring(ns: &shmring_testkit::Namespace, consumers: u32) -> shmring::Ring {
    let config = RingConfig {
        max_consumers: consumers,
        ..small(64)
    };
    shmring::Ring::create(ns.name(), "r", &config).expect("create ring r")
}

/// Publish the values of `range`, one 8-byte event each.
pub fn publish_range(ring: &shmring::Ring, range: std::ops::Range<u64>) {
    let mut p = ring.producer().expect("a producer");
    for i in range {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
}

/// The ring's health at one check with no stall threshold: a consumer with work waiting
/// and no progress is STALLED at once (for the tests of who is held by whom).
pub fn health_now(ring: &shmring::Ring) -> shmring::RingHealth {
    ring.health(shmring::HealthThresholds {
        stall: std::time::Duration::ZERO,
    })
    .check()
}

/// Poll until nothing is delivered; the sequences delivered, in order.
pub fn poll_all(c: &mut shmring::Consumer) -> Vec<u64> {
    let mut seen = Vec::new();
    while c.poll_once(|ev| seen.push(ev.sequence())).expect("poll") > 0 {}
    seen
}

/// What every ring published by the cursor refuses, for a configuration `config` of one
/// (fixed-size or sized events) in namespace `ns`: many producers, worker groups declared
/// or joined, and a second producer.
pub fn cursor_ring_refusals(ns: &str, config: &RingConfig) {
    use shmring::{
        AttachError, ConsumerOptions, DeclaredError, LayoutError, OpenError, ProducerMode, Ring,
    };
    let multi = RingConfig {
        producer_mode: ProducerMode::Multi,
        ..config.clone()
    };
    assert!(matches!(
        Ring::create(ns, "m", &multi),
        Err(OpenError::Config(LayoutError::FixedNeedsSingleProducer))
    ));
    let groups = RingConfig {
        declared_groups: vec!["w".into()],
        ..config.clone()
    };
    assert!(matches!(
        Ring::create(ns, "g", &groups),
        Err(OpenError::Declared(DeclaredError::GroupOnFixedRing(g))) if g == "w"
    ));
    let ring = Ring::create(ns, "refusing", config).expect("create the ring");
    assert!(matches!(
        ring.consumer(ConsumerOptions::worker("w")),
        Err(AttachError::FixedSizeRing { .. })
    ));
    let _p = ring.producer().expect("the one producer");
    assert!(matches!(
        ring.producer(),
        Err(AttachError::SingleProducerTaken { .. })
    ));
}
