//! `Producer::publisher`: a producer lent to a loop of publishes with its position held by
//! value. Every publish through it is a `Producer::publish` (same sequences, refusals and
//! wake-ups), and the position goes back to the producer however the closure ends.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use shmring::{
    ConsumerOptions, ProducerMode, PublishError, Ring, RingConfig, RunExit, WaitStrategy,
};
use shmring_testkit::{Namespace, ParkedConsumer};

/// A ring of `capacity` slots: fixed-size 8-byte events (`fixed`), or 256-byte stamped
/// slots.
fn config(capacity: u64, mode: ProducerMode, fixed: bool) -> RingConfig {
    RingConfig {
        capacity,
        slot_size: 256,
        producer_mode: mode,
        event_size: fixed.then_some(8),
        max_consumers: 4,
        ..RingConfig::default()
    }
}

/// Say so when this process could not register for membarrier: every publish then goes
/// through the handle, and a test checks the hand-over, not the common case.
fn report_common_case() {
    if !shmring::membarrier_registered() {
        eprintln!("membarrier unavailable: the common-case publish is not reached here");
    }
}

fn fixed_ring(ns: &Namespace, name: &str, capacity: u64) -> Ring {
    Ring::create(
        ns.name(),
        name,
        &config(capacity, ProducerMode::Single, true),
    )
    .expect("create a fixed-size ring")
}

/// Every event published so far, as (sequence, first 8 bytes as a number).
fn drain(c: &mut shmring::Consumer) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    while c
        .poll_once(|ev| {
            let v = ev.bytes().get(..8).map_or(u64::MAX, |b| {
                u64::from_le_bytes(b.try_into().expect("an 8-byte prefix"))
            });
            seen.push((ev.sequence(), v));
        })
        .expect("poll")
        > 0
    {}
    seen
}

fn expected(range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    range.map(|i| (i, i)).collect()
}

/// A publisher starts at the producer's position, laps the ring (each refresh of the cached
/// gate goes through the handle and comes back), and hands its position back: the
/// producer's next publish follows its last one, and the counters count both.
#[test]
fn a_publisher_continues_the_producers_sequence_and_hands_it_back() {
    let ns = Namespace::concurrent("publisher-continues");
    let ring = fixed_ring(&ns, "r", 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..3u64 {
        assert_eq!(p.publish_value(&i), Ok(i));
    }
    report_common_case();
    let mut seen = drain(&mut c);
    let got = p.publisher(|w| {
        let mut sequences = Vec::new();
        for i in 3..103u64 {
            sequences.push(w.publish(&i.to_le_bytes()));
            if i % 8 == 7 {
                seen.extend(drain(&mut c));
            }
        }
        assert_eq!(w.stats().published, 103);
        sequences
    });
    assert_eq!(got, (3..103).map(Ok).collect::<Vec<_>>());
    assert_eq!(p.publish_value(&103u64), Ok(103));
    assert_eq!(p.publish_value(&104u64), Ok(104));
    seen.extend(drain(&mut c));
    assert_eq!(seen, expected(0..105));
    assert_eq!(p.stats().published, 105);
}

/// A closure that panics still hands the position back: the producer goes on after the
/// last event the publisher published, never at a sequence it already used. On rings of
/// stamped slots, where the handle keeps its position and every publish is its own, the
/// publisher has nothing to hand back and must not write an older position over it.
#[test]
fn a_panic_in_the_closure_hands_the_position_back() {
    let ns = Namespace::concurrent("publisher-panic");
    for (name, mode, fixed) in [
        ("fixed", ProducerMode::Single, true),
        ("single", ProducerMode::Single, false),
        ("multi", ProducerMode::Multi, false),
    ] {
        let ring = Ring::create(ns.name(), name, &config(64, mode, fixed)).unwrap();
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        let unwound = catch_unwind(AssertUnwindSafe(|| {
            p.publisher(|w| {
                for i in 0..5u64 {
                    assert_eq!(w.publish_value(&i), Ok(i), "{name}");
                }
                panic!("the loop's own failure");
            })
        }));
        let payload = unwound.expect_err("the closure panicked");
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"the loop's own failure"),
            "{name}"
        );
        assert_eq!(p.publish_value(&5u64), Ok(5), "{name}");
        assert_eq!(drain(&mut c), expected(0..6), "{name}");
        assert_eq!(p.stats().published, 6, "{name}");
    }
}

/// A stop refuses the publisher's next publish without spending a sequence, after a start
/// it publishes at the sequence the stop left, and once the ring is removed it is refused
/// as deleted.
#[test]
fn a_stop_refuses_a_publisher_and_a_start_resumes_it() {
    let ns = Namespace::concurrent("publisher-stop");
    let ring = fixed_ring(&ns, "r", 64);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    p.publisher(|w| {
        assert_eq!(w.publish_value(&0u64), Ok(0));
        assert_eq!(w.publish_value(&1u64), Ok(1));
        assert_eq!(ring.stop(), Ok(2));
        assert_eq!(w.publish_value(&99u64), Err(PublishError::Closed));
        ring.start().unwrap();
        assert_eq!(w.publish_value(&2u64), Ok(2));
    });
    report_common_case();
    assert_eq!(p.publish_value(&3u64), Ok(3));
    assert_eq!(drain(&mut c), expected(0..4));
    let stats = p.stats();
    assert_eq!((stats.published, stats.refused), (4, 1));
    p.publisher(|w| {
        assert_eq!(w.publish_value(&4u64), Ok(4));
        Ring::remove(ns.name(), "r").unwrap();
        assert_eq!(w.publish_value(&5u64), Err(PublishError::Deleted));
    });
    assert_eq!(p.publish_value(&5u64), Err(PublishError::Deleted));
}

/// A publisher that runs a small ring's consumer a lap behind again and again waits for
/// room at the wrap gate each time, and never writes over an event its consumer has not
/// read: every event arrives with its own value.
#[test]
fn a_publisher_lapping_a_small_ring_never_overwrites_an_unread_event() {
    let ns = Namespace::concurrent("publisher-laps");
    let ring = fixed_ring(&ns, "r", 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    assert_eq!(p.publish_value(&0u64), Ok(0));
    report_common_case();
    let n = 20_000u64;
    let consumer = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut wrong = Vec::new();
        let mut next = 0;
        while next < n && Instant::now() < deadline {
            c.poll_once(|ev| {
                let v = ev.read::<u64>().unwrap_or(u64::MAX);
                if v != ev.sequence() && wrong.len() < 10 {
                    wrong.push((ev.sequence(), v));
                }
                next = ev.sequence() + 1;
            })
            .unwrap();
        }
        (next, wrong, c.stats().skipped)
    });
    let published = p.publisher(|w| (1..n).map(|i| w.publish_value(&i)).collect::<Vec<_>>());
    assert_eq!(published, (1..n).map(Ok).collect::<Vec<_>>());
    let (next, wrong, skipped) = consumer.join().unwrap();
    assert_eq!((next, skipped), (n, 0), "the consumer reached every event");
    assert_eq!(wrong, vec![], "events overwritten before they were read");
    assert!(
        p.stats().room_waits > 0,
        "the producer never ran a lap ahead: the test did not reach the wrap gate"
    );
}

/// A claim guard leaked before a publisher is published as a tombstone by the publisher's
/// first publish (through the handle), and the publisher goes on after it.
#[test]
fn a_claim_leaked_before_a_publisher_is_a_tombstone_before_its_first_event() {
    let ns = Namespace::concurrent("publisher-leak");
    let ring = fixed_ring(&ns, "r", 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    assert_eq!(p.publish_value(&0u64), Ok(0));
    std::mem::forget(p.claim().unwrap());
    p.publisher(|w| {
        assert_eq!(w.publish_value(&2u64), Ok(2));
        assert_eq!(w.publish_value(&3u64), Ok(3));
    });
    assert_eq!(drain(&mut c), vec![(0, 0), (2, 2), (3, 3)]);
    assert_eq!(c.stats().skipped, 1);
    assert_eq!((p.stats().published, p.stats().tombstoned), (3, 1));
}

/// Each publish through a publisher wakes a consumer parked on the ring, as
/// `Producer::publish` does: none of the consumer's wake-ups comes from its timed net.
#[test]
fn each_publish_wakes_a_parked_consumer() {
    let ns = Namespace::concurrent("publisher-wakes");
    let ring = fixed_ring(&ns, "r", 64);
    let c = ring
        .consumer(ConsumerOptions::anonymous().wait(WaitStrategy::Blocking))
        .unwrap();
    let mut p = ring.producer().unwrap();
    let consumer = ParkedConsumer::spawn(c);
    let n = 10u64;
    p.publisher(|w| {
        for i in 0..n {
            consumer.wait_parked_at(&ring, i);
            assert_eq!(w.publish_value(&i), Ok(i));
        }
    });
    consumer.wait_parked_at(&ring, n);
    let (exit, seen, stats) = consumer.finish(&ring);
    assert_eq!(exit, RunExit::Closed);
    assert_eq!(seen, expected(0..n));
    assert_eq!(
        stats.net_wakeups, 0,
        "a publish left a parked consumer asleep"
    );
}

/// On a stamped ring (single or multi-producer) a publisher publishes as the handle does,
/// events of any size up to the slot; on every ring it refuses what the handle refuses,
/// spends no sequence on it and goes on.
#[test]
fn every_ring_publishes_and_refuses_as_the_handle_does() {
    let ns = Namespace::concurrent("publisher-rings");
    for (name, mode, fixed) in [
        ("single", ProducerMode::Single, false),
        ("multi", ProducerMode::Multi, false),
        ("fixed", ProducerMode::Single, true),
    ] {
        let ring = Ring::create(ns.name(), name, &config(32, mode, fixed)).unwrap();
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        let max = p.max_payload();
        assert_eq!(p.publish_value(&0u64), Ok(0), "{name}");
        let (wrong, refused) = p.publisher(|w| {
            assert_eq!(w.publish_value(&1u64), Ok(1), "{name}");
            let wrong = w.publish(&vec![7u8; max + 1]);
            // Longer than the publisher copies before it hands an event over.
            let mut longer = 2u64.to_le_bytes().to_vec();
            longer.extend_from_slice(&[b'+'; 92]);
            let longer = w.publish(&longer);
            (wrong, longer)
        });
        if fixed {
            assert_eq!(
                wrong,
                Err(PublishError::WrongSize { len: 9, size: 8 }),
                "{name}"
            );
            assert_eq!(
                refused,
                Err(PublishError::WrongSize { len: 100, size: 8 }),
                "{name}"
            );
            assert_eq!(p.publish_value(&2u64), Ok(2), "{name}");
        } else {
            assert_eq!(
                wrong,
                Err(PublishError::TooLarge { len: max + 1, max }),
                "{name}"
            );
            assert_eq!(refused, Ok(2), "{name}");
        }
        assert_eq!(p.publish_value(&3u64), Ok(3), "{name}");
        assert_eq!(drain(&mut c), expected(0..4), "{name}");
        let refusals = if fixed { 2 } else { 1 };
        assert_eq!(
            (p.stats().published, p.stats().refused),
            (4, refusals),
            "{name}"
        );
    }
}
