//! Rings of fixed-size events (`RingConfig::event_size`): payload-only slots published by a
//! cursor (see `shmring::fixed`). Every publish form, the claim guards and their tombstones,
//! required and optional consumers, the lifecycle, and what such a ring refuses.

mod common;

use std::sync::{Arc, Mutex};

use shmring::{
    ConsumerOptions, ErrorPolicy, FenceMode, LayoutError, OpenError, PollError, ProducerMode,
    PublishError, Recall, Ring, RingConfig, RunExit, TryPublishError, WaitStrategy,
};

use shmring_testkit::{Namespace, ParkedConsumer};

/// A single-producer ring of `capacity` 8-byte events.
fn config(capacity: u64) -> RingConfig {
    RingConfig {
        capacity,
        producer_mode: ProducerMode::Single,
        event_size: Some(8),
        max_consumers: 4,
        ..RingConfig::default()
    }
}

fn ring(ns: &Namespace, capacity: u64) -> Ring {
    Ring::create(ns.name(), "r", &config(capacity)).expect("create a fixed-size ring")
}

fn value(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte events"))
}

/// Every event published so far, as (sequence, value), in `poll_once` steps.
fn drain(c: &mut shmring::Consumer) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    while c
        .poll_once(|ev| seen.push((ev.sequence(), value(ev.bytes()))))
        .expect("poll")
        > 0
    {}
    seen
}

#[test]
fn events_of_the_ring_size_arrive_in_order_and_other_sizes_are_refused() {
    let ns = Namespace::concurrent("fixed-basic");
    let ring = ring(&ns, 8);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    assert_eq!(p.max_payload(), 8);
    assert_eq!(p.publish(&10u64.to_le_bytes()), Ok(0));
    for bad in [&[1u8; 7][..], &[1u8; 9][..], &[][..]] {
        assert_eq!(
            p.publish(bad),
            Err(PublishError::WrongSize {
                len: bad.len(),
                size: 8
            })
        );
        assert_eq!(
            p.try_publish(bad),
            Err(TryPublishError::WrongSize {
                len: bad.len(),
                size: 8
            })
        );
    }
    assert_eq!(
        p.publish_batch(&[&[0u8; 8][..], &[0u8; 4][..]]),
        Err(PublishError::WrongSize { len: 4, size: 8 }),
        "a batch with one wrong size publishes nothing"
    );
    assert_eq!(p.publish_value(&11u64), Ok(1), "no sequence was spent");
    assert_eq!(p.try_publish(&12u64.to_le_bytes()), Ok(2));
    assert_eq!(
        p.publish_timeout(&13u64.to_le_bytes(), std::time::Duration::from_millis(10)),
        Ok(3)
    );
    assert_eq!(p.publish_batch_values(&[14u64, 15, 16]), Ok(4));
    let seen = drain(&mut c);
    assert_eq!(seen, (0..7).map(|s| (s, 10 + s)).collect::<Vec<_>>());
    let stats = p.stats();
    assert_eq!((stats.published, stats.refused), (7, 7));
    let info = ring.info();
    assert_eq!(info.head, 7);
    assert_eq!(
        info.producers[0].stats.published, 7,
        "derived from the cursor"
    );
    drop(p);
    assert!(
        ring.info().producers.is_empty(),
        "the entry is freed on drop"
    );
}

#[test]
fn a_required_consumer_holds_the_producer_across_laps() {
    let ns = Namespace::concurrent("fixed-laps");
    let ring = ring(&ns, 4);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let mut seen = Vec::new();
    for s in 0..4u64 {
        p.publish(&s.to_le_bytes()).unwrap();
    }
    assert_eq!(
        p.try_publish(&4u64.to_le_bytes()),
        Err(TryPublishError::Full),
        "the consumer has read nothing: no room"
    );
    for s in 4..40u64 {
        seen.extend(drain(&mut c));
        p.publish(&s.to_le_bytes()).unwrap();
    }
    seen.extend(drain(&mut c));
    assert_eq!(seen, (0..40).map(|s| (s, s)).collect::<Vec<_>>());
    assert_eq!(c.stats().delivered, 40);
}

#[test]
fn claims_are_written_in_place_and_a_dropped_one_is_a_counted_tombstone() {
    let ns = Namespace::concurrent("fixed-claims");
    let ring = ring(&ns, 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let mut claim = p.claim().unwrap();
    assert_eq!(claim.payload_mut().len(), 8, "the event itself");
    assert_eq!(
        claim.set_len(4),
        Err(PublishError::WrongSize { len: 4, size: 8 })
    );
    claim.payload_mut().copy_from_slice(&100u64.to_le_bytes());
    assert_eq!(claim.commit(), 0);
    let mut dropped = p.claim().unwrap();
    dropped.payload_mut().copy_from_slice(&666u64.to_le_bytes());
    drop(dropped);
    let mut batch = p.claim_batch(3).unwrap();
    for i in 0..3 {
        batch.write_value(i, &(200 + i as u64)).unwrap();
    }
    assert_eq!(batch.commit(), 2);
    let mut batch = p.claim_batch(2).unwrap();
    batch.write_value(0, &666u64).unwrap();
    drop(batch);
    std::mem::forget(p.claim().unwrap());
    assert_eq!(
        p.publish_value(&300u64),
        Ok(8),
        "the leaked claim became a tombstone"
    );
    let seen = drain(&mut c);
    assert_eq!(
        seen,
        vec![(0, 100), (2, 200), (3, 201), (4, 202), (8, 300)],
        "never a dropped claim's bytes"
    );
    assert_eq!(c.stats().skipped, 4);
    assert_eq!(c.stats().delivered, 5);
    let stats = p.stats();
    assert_eq!((stats.published, stats.tombstoned), (5, 4));
    assert_eq!(ring.info().producers[0].stats.published, 5);
    let mut buf = Vec::new();
    assert_eq!(ring.recall(1, &mut buf), Recall::Tombstone);
    assert_eq!(ring.recall(3, &mut buf), Recall::Event);
    assert_eq!(value(&buf), 201);
    assert_eq!(ring.recall(9, &mut buf), Recall::NotClaimed);
}

/// A claim guard leaked while `publish` runs its common case (set up by the publishes
/// before it) sends the next publish the general way, which tombstones the leaked
/// sequences first; the common case's own checks would not see them.
#[test]
fn a_claim_leaked_between_publishes_is_a_tombstone_before_the_next_event() {
    let ns = Namespace::concurrent("fixed-leak");
    let ring = ring(&ns, 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for v in 0..3u64 {
        assert_eq!(p.publish_value(&v), Ok(v));
    }
    if !shmring::membarrier_registered() {
        // Without membarrier every publish goes the general way: the test still checks the
        // tombstones, not the common case's bound.
        eprintln!("membarrier unavailable: the common-case publish is not reached here");
    }
    // Each read right after the publish that follows the leak: a later claim would tombstone
    // a leak that publish skipped, and hide it.
    std::mem::forget(p.claim().unwrap());
    assert_eq!(p.publish_value(&4u64), Ok(4));
    assert_eq!(
        drain(&mut c),
        vec![(0, 0), (1, 1), (2, 2), (4, 4)],
        "the leaked claim is a tombstone, not an event"
    );
    assert_eq!(c.stats().skipped, 1);
    std::mem::forget(p.claim_batch(2).unwrap());
    assert_eq!(p.publish_value(&7u64), Ok(7));
    assert_eq!(drain(&mut c), vec![(7, 7)], "the leaked batch too");
    assert_eq!(p.publish_value(&8u64), Ok(8));
    assert_eq!(drain(&mut c), vec![(8, 8)]);
    assert_eq!(c.stats().skipped, 3);
    let stats = p.stats();
    assert_eq!((stats.published, stats.tombstoned), (6, 3));
}

#[test]
fn a_tombstone_word_left_from_an_earlier_lap_does_not_hide_an_event() {
    // Tombstones raise the bound below which consumers check tomb words; a slot whose tomb
    // word names an earlier lap's sequence holds an event.
    let ns = Namespace::concurrent("fixed-tomb-lap");
    let ring = ring(&ns, 4);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    drop(p.claim().unwrap()); // 0: a tombstone
    assert_eq!(drain(&mut c), vec![]);
    for s in 1..5u64 {
        p.publish_value(&s).unwrap(); // 4 reuses slot 0
    }
    let mut seen = drain(&mut c);
    p.publish_value(&5u64).unwrap();
    drop(p.claim().unwrap()); // 6: raises the bound past 4
    p.publish_value(&7u64).unwrap();
    seen.extend(drain(&mut c));
    assert_eq!(seen, vec![(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (7, 7)]);
    assert_eq!(c.stats().skipped, 2);
}

/// A ring of 4 slots whose producer never waits for optional consumers, an optional
/// consumer at 0, and the producer.
fn optional_without_slack(ns: &Namespace) -> (Ring, shmring::Consumer, shmring::Producer) {
    optional_without_slack_of(ns, 4)
}

/// As [`optional_without_slack`], a ring of `capacity` events.
fn optional_without_slack_of(
    ns: &Namespace,
    capacity: u64,
) -> (Ring, shmring::Consumer, shmring::Producer) {
    let ring = Ring::create(
        ns.name(),
        "r",
        &RingConfig {
            optional_slack: Some(0),
            ..config(capacity)
        },
    )
    .unwrap();
    let c = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let p = ring.producer().unwrap();
    (ring, c, p)
}

#[test]
fn an_optional_consumer_that_is_lapped_counts_the_gap_and_never_a_torn_event() {
    let ns = Namespace::concurrent("fixed-optional");
    let (ring, mut c, mut p) = optional_without_slack(&ns);
    for s in 0..10u64 {
        p.publish_value(&s).unwrap();
    }
    // The first poll finds the position overwritten: it jumps to the head, counting the gap.
    assert_eq!(c.poll_once(|_| {}).unwrap(), 0);
    assert_eq!(c.next_sequence(), 10);
    assert_eq!(c.stats().dropped_behind, 10);
    for s in 10..13u64 {
        p.publish_value(&s).unwrap();
    }
    let seen = drain(&mut c);
    assert_eq!(seen, vec![(10, 10), (11, 11), (12, 12)]);
    let mut buf = Vec::new();
    assert_eq!(ring.recall(2, &mut buf), Recall::Gone);
}

/// A publish refused while the ring is stopped writes nothing: an optional consumer (and
/// `recall`) three quarters of a ring behind still reads every event the ring holds, none
/// counted as overwritten. Three quarters, not a whole ring: the producer raises its write
/// horizon up to a quarter ring ahead of its position (see `fixed`), and a copy of an event
/// a ring below the horizon is dropped, written over or not. (A publish that races the stop
/// writes its event before the stop refuses it; its slot is a ring past the oldest event's,
/// which `loom_folded` `an_optional_copy_checked_against_the_horizon_is_never_another_laps`
/// drops.)
#[test]
fn a_publish_refused_while_stopped_overwrites_nothing_for_a_reader_a_ring_behind() {
    let ns = Namespace::concurrent("fixed-optional-stopped");
    let (ring, mut c, mut p) = optional_without_slack_of(&ns, 16);
    for s in 0..12u64 {
        p.publish_value(&s).unwrap();
    }
    assert_eq!(ring.stop(), Ok(12));
    assert_eq!(p.publish_value(&99u64), Err(PublishError::Closed));
    let mut buf = Vec::new();
    assert_eq!(ring.recall(0, &mut buf), Recall::Event);
    assert_eq!(value(&buf), 0);
    assert_eq!(drain(&mut c), (0..12).map(|s| (s, s)).collect::<Vec<_>>());
    assert_eq!(c.stats().dropped_behind, 0);
    ring.start().unwrap();
    // The next run goes on at 12 and overwrites sequence 0's slot at 16: now it is gone.
    for s in 12..17u64 {
        assert_eq!(p.publish_value(&s), Ok(s));
    }
    assert_eq!(ring.recall(0, &mut buf), Recall::Gone);
    assert_eq!(drain(&mut c), (12..17).map(|s| (s, s)).collect::<Vec<_>>());
}

/// The price of the write horizon: an optional reader more than three quarters of a ring
/// behind the producer may drop intact events (counted as dropped behind, never delivered
/// torn); within three quarters it keeps every one.
#[test]
fn an_optional_reader_within_three_quarters_of_a_ring_keeps_every_event() {
    let ns = Namespace::concurrent("fixed-optional-horizon");
    let (_ring, mut c, mut p) = optional_without_slack_of(&ns, 16);
    for s in 0..12u64 {
        p.publish_value(&s).unwrap();
    }
    assert_eq!(drain(&mut c), (0..12).map(|s| (s, s)).collect::<Vec<_>>());
    assert_eq!(c.stats().dropped_behind, 0);
    // Sixteen more: the reader, at 12, is a whole ring behind the producer's position (28)
    // and more than that behind its horizon; what it gets is intact and counted.
    for s in 12..28u64 {
        p.publish_value(&s).unwrap();
    }
    let got = drain(&mut c);
    assert!(got.iter().all(|&(s, v)| s == v), "{got:?}");
    assert_eq!(
        got.len() as u64 + c.stats().dropped_behind,
        16,
        "every event delivered or counted: {got:?}"
    );
    assert_eq!(c.next_sequence(), 28);
}

#[test]
fn a_consumer_attached_while_stopped_gets_the_first_event_of_the_next_run() {
    // The maintenance sequence of the claim line's issue, on a fixed-size ring.
    let ns = Namespace::concurrent("fixed-stop");
    let ring = ring(&ns, 8);
    let mut p = ring.producer().unwrap();
    p.publish_value(&1u64).unwrap();
    assert_eq!(ring.stop(), Ok(1));
    assert_eq!(p.publish_value(&2u64), Err(PublishError::Closed));
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    ring.start().unwrap();
    assert_eq!(p.publish_value(&3u64), Ok(1));
    assert_eq!(drain(&mut c), vec![(1, 3)]);
}

#[test]
fn read_ahead_and_commit_to_work_in_place() {
    let ns = Namespace::concurrent("fixed-lease");
    let ring = ring(&ns, 8);
    let mut c = ring.consumer(ConsumerOptions::durable("fwd")).unwrap();
    let mut p = ring.producer().unwrap();
    p.publish_batch_values(&[1u64, 2, 3]).unwrap();
    drop(p.claim().unwrap());
    let mut sent = Vec::new();
    let end = c
        .read_ahead(0, 16, |ev| sent.push(value(ev.bytes())))
        .unwrap();
    assert_eq!((sent, end), (vec![1, 2, 3], 4));
    c.commit_to(end).unwrap();
    assert_eq!((c.stats().delivered, c.stats().skipped), (3, 1));
}

#[test]
fn a_skipped_event_is_dead_lettered_with_its_payload_in_place_and_copied() {
    for required in [true, false] {
        let ns = Namespace::concurrent("fixed-policy");
        let ring = ring(&ns, 8);
        let mut opts = ConsumerOptions::anonymous().on_error(ErrorPolicy::Skip { attempts: 2 });
        if !required {
            opts = opts.optional();
        }
        let mut c = ring.consumer(opts).unwrap();
        let letters = Arc::new(Mutex::new(Vec::new()));
        let l = letters.clone();
        c.on_dead_letter(move |d| {
            l.lock()
                .unwrap()
                .push((d.sequence, value(d.payload), d.attempts))
        });
        let mut p = ring.producer().unwrap();
        p.publish_batch_values(&[1u64, 13, 3]).unwrap();
        let mut got = Vec::new();
        for _ in 0..4 {
            c.poll_once_fallible(|ev| {
                let v = value(ev.bytes());
                if v == 13 {
                    return Err("unlucky");
                }
                got.push(v);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(got, vec![1, 3], "required {required}");
        assert_eq!(
            *letters.lock().unwrap(),
            vec![(1, 13, 2)],
            "required {required}"
        );
    }
}

#[test]
fn a_consumer_after_another_reads_only_what_it_finished() {
    let ns = Namespace::concurrent("fixed-after");
    let ring = ring(&ns, 8);
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let mut b = ring
        .consumer(ConsumerOptions::durable("b").after(["a"]))
        .unwrap();
    let mut p = ring.producer().unwrap();
    p.publish_batch_values(&[1u64, 2, 3]).unwrap();
    assert_eq!(drain(&mut b), vec![], "a has read nothing");
    assert_eq!(a.poll_once(|_| {}).unwrap(), 3);
    assert_eq!(drain(&mut b), vec![(0, 1), (1, 2), (2, 3)]);
}

#[test]
fn what_a_fixed_size_ring_refuses() {
    let ns = Namespace::concurrent("fixed-refuse");
    let odd = RingConfig {
        event_size: Some(12),
        ..config(8)
    };
    assert!(matches!(
        Ring::create(ns.name(), "o", &odd),
        Err(OpenError::Config(LayoutError::BadEventSize(12)))
    ));
    common::cursor_ring_refusals(ns.name(), &config(8));
}

/// Publish `values` from a thread whose last publish waits at the wrap gate; returns once
/// the producer is parked there (bounded: a producer that never parks fails the test).
fn blocked_publisher(
    ring: &Ring,
    values: std::ops::Range<u64>,
) -> std::thread::JoinHandle<Vec<u64>> {
    let mut p = ring.producer().unwrap();
    let handle = std::thread::spawn(move || {
        values
            .map(|v| p.publish_value(&v).expect("publish"))
            .collect::<Vec<u64>>()
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while ring.info().producer_waiters == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the producer never parked at the wrap gate"
        );
        std::thread::yield_now();
    }
    handle
}

#[test]
fn a_durable_consumer_reattaching_while_the_producer_waits_for_it_keeps_its_events() {
    // The producer waits at the wrap gate for the detached durable consumer: nothing of the
    // ring was overwritten, so the consumer resumes where it was.
    let ns = Namespace::concurrent("fixed-resume-full");
    let ring = ring(&ns, 8);
    drop(ring.consumer(ConsumerOptions::durable("d")).unwrap());
    let publisher = blocked_publisher(&ring, 0..9);
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    assert_eq!(c.next_sequence(), 0, "resumed, not jumped to the head");
    assert_eq!(c.stats().dropped_behind, 0);
    let mut seen = Vec::new();
    while seen.len() < 9 {
        seen.extend(drain(&mut c));
        std::thread::yield_now();
    }
    assert_eq!(publisher.join().unwrap(), (0..9).collect::<Vec<_>>());
    assert_eq!(seen, (0..9).map(|s| (s, s)).collect::<Vec<_>>());
}

#[test]
fn read_ahead_reaches_the_end_of_a_full_ring_while_the_producer_waits() {
    let ns = Namespace::concurrent("fixed-lease-full");
    let ring = ring(&ns, 8);
    let mut c = ring.consumer(ConsumerOptions::durable("fwd")).unwrap();
    let publisher = blocked_publisher(&ring, 0..9);
    let mut sent = Vec::new();
    let end = c
        .read_ahead(0, 16, |ev| sent.push(value(ev.bytes())))
        .unwrap();
    assert_eq!((sent, end), ((0..8).collect::<Vec<_>>(), 8));
    assert!(ring.is_published(7));
    c.commit_to(8).unwrap();
    publisher.join().unwrap();
    assert_eq!(drain(&mut c), vec![(8, 8)]);
}

#[test]
fn an_optional_consumer_the_producer_waits_for_is_not_lapped() {
    let ns = Namespace::concurrent("fixed-optional-full");
    let ring = ring(&ns, 8);
    let mut required = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut optional = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let publisher = blocked_publisher(&ring, 0..9);
    assert_eq!(
        drain(&mut optional),
        (0..8).map(|s| (s, s)).collect::<Vec<_>>(),
        "everything the ring holds, nothing dropped"
    );
    assert_eq!(optional.stats().dropped_behind, 0);
    let mut seen = Vec::new();
    while seen.len() < 9 {
        seen.extend(drain(&mut required));
        std::thread::yield_now();
    }
    publisher.join().unwrap();
    assert_eq!(drain(&mut optional), vec![(8, 8)]);
}

#[test]
fn a_claim_committed_without_a_write_never_carries_an_earlier_event() {
    let ns = Namespace::concurrent("fixed-claim-unwritten");
    let ring = ring(&ns, 4);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for v in 100..104u64 {
        p.publish_value(&v).unwrap();
    }
    assert_eq!(drain(&mut c).len(), 4);
    assert_eq!(
        p.claim().unwrap().commit(),
        4,
        "the slot of 0, never written"
    );
    let mut batch = p.claim_batch(2).unwrap();
    batch.write_value(1, &7u64).unwrap();
    batch.commit();
    assert_eq!(drain(&mut c), vec![(4, 0), (5, 0), (6, 7)]);
}

#[test]
fn a_single_sequence_is_never_marked_out_of_order() {
    // `Ring::tombstone` belongs to stamped slots; on a fixed-size ring it touches nothing.
    let ns = Namespace::concurrent("fixed-tombstone-api");
    let ring = ring(&ns, 8);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for v in 0..8u64 {
        p.publish_value(&v).unwrap();
    }
    assert_eq!(drain(&mut c).len(), 8);
    assert_eq!(ring.tombstone(9), shmring::Tombstone::Wait);
    assert_eq!(ring.tombstone(3), shmring::Tombstone::NotNeeded);
    let mut buf = Vec::new();
    assert_eq!(ring.recall(1, &mut buf), Recall::Event);
    assert_eq!(value(&buf), 1, "event 1 untouched");
}

/// Every run `poll_runs` hands over, as (first sequence, values).
fn runs(c: &mut shmring::Consumer) -> Vec<(u64, Vec<u64>)> {
    let mut got = Vec::new();
    while c
        .poll_runs(|first, bytes| got.push((first, bytes.chunks(8).map(value).collect::<Vec<_>>())))
        .expect("poll_runs")
        > 0
    {}
    got
}

#[test]
fn runs_are_cut_where_the_slots_wrap_and_around_tombstones() {
    for optional in [false, true] {
        let ns = Namespace::concurrent("fixed-runs");
        let ring = ring(&ns, 8);
        let opts = if optional {
            ConsumerOptions::anonymous().optional()
        } else {
            ConsumerOptions::anonymous()
        };
        let mut c = ring.consumer(opts).unwrap();
        let mut p = ring.producer().unwrap();
        for v in 0..6u64 {
            p.publish_value(&v).unwrap();
        }
        assert_eq!(
            runs(&mut c),
            vec![(0, (0..6).collect())],
            "optional {optional}"
        );
        for v in 6..9u64 {
            p.publish_value(&v).unwrap();
        }
        drop(p.claim().unwrap()); // 9: a tombstone
        for v in 10..12u64 {
            p.publish_value(&v).unwrap();
        }
        assert_eq!(
            runs(&mut c),
            vec![(6, vec![6, 7]), (8, vec![8]), (10, vec![10, 11])],
            "optional {optional}: cut at the wrap (slot 7) and at the tombstone"
        );
        assert_eq!(
            (c.stats().delivered, c.stats().skipped),
            (11, 1),
            "optional {optional}"
        );
        assert_eq!(c.next_sequence(), 12);
    }
}

/// A run reader that pauses after each run (`gather`) still gets every event once and in
/// order from a producer on another thread publishing one at a time.
#[test]
fn a_gathering_run_reader_gets_every_event_in_order() {
    const N: u64 = 200_000;
    let ns = Namespace::concurrent("fixed-gather");
    let ring = ring(&ns, 64);
    let mut c =
        ring.consumer(ConsumerOptions::anonymous().gather(16).wait(
            WaitStrategy::TimeoutBlocking {
                timeout: shmring_testkit::WAIT,
            },
        ))
        .unwrap();
    let mut p = ring.producer().unwrap();
    let producer = std::thread::spawn(move || {
        for v in 0..N {
            p.publish_value(&v).expect("publish");
        }
    });
    let mut next = 0u64;
    while next < N {
        let got = c
            .poll_runs(|first, bytes| {
                assert_eq!(first, next, "a run starts where the last ended");
                for v in bytes.chunks(8).map(value) {
                    assert_eq!(v, next, "lost or reordered");
                    next += 1;
                }
            })
            .expect("poll_runs");
        if got == 0 {
            assert_eq!(
                c.wait().expect("wait"),
                shmring::WaitOutcome::Ready,
                "timed out at {next}"
            );
        }
    }
    producer.join().expect("the producer");
    assert_eq!(c.stats().delivered, N);
}

#[test]
fn a_panicking_run_handler_fails_the_consumer_at_its_first_event() {
    let ns = Namespace::concurrent("fixed-runs-panic");
    let ring = ring(&ns, 8);
    // A batch cap of 2: the marking window of a durable attach (one event per slice, as
    // `poll_once` hands them over) covers the first two events, then runs are up to two.
    let mut c = ring
        .consumer(ConsumerOptions::durable("d").batch_cap(2))
        .unwrap();
    let mut p = ring.producer().unwrap();
    for v in 0..6u64 {
        p.publish_value(&v).unwrap();
    }
    assert_eq!(
        runs(&mut c),
        vec![(0, vec![0]), (1, vec![1]), (2, vec![2, 3]), (4, vec![4, 5])]
    );
    for v in 6..10u64 {
        p.publish_value(&v).unwrap();
    }
    let panicky = |first: u64, _: &[u8]| {
        if first == 8 {
            panic!("the second slice");
        }
    };
    assert_eq!(c.poll_runs(panicky), Ok(2));
    let r = c.poll_runs(panicky);
    assert_eq!(r, Err(shmring::PollError::HandlerPanicked { sequence: 8 }));
    assert_eq!(c.next_sequence(), 8, "the slice before it committed");
    let info = ring.info();
    let entry = info
        .consumers
        .iter()
        .find(|e| e.index == c.index())
        .expect("its entry");
    assert_eq!(
        entry.poison,
        Some((8, 1)),
        "the attempt is recorded, as for a handler failing in poll_once"
    );
    drop(c);
    let mut again = ring
        .consumer(ConsumerOptions::durable("d").batch_cap(2))
        .unwrap();
    assert_eq!(
        again.next_sequence(),
        8,
        "a re-attach resumes at the failing slice"
    );
    // Its marking window hands the events over one at a time.
    assert_eq!(runs(&mut again), vec![(8, vec![8]), (9, vec![9])]);
}

#[test]
fn runs_are_a_fixed_size_rings() {
    let ns = Namespace::concurrent("fixed-runs-stamped");
    let ring = Ring::create(ns.name(), "s", &RingConfig::default()).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    assert_eq!(
        c.poll_runs(|_, _| {}),
        Err(shmring::PollError::NotFixedSize)
    );
}

#[test]
fn a_stop_refuses_a_publish_waiting_for_room_at_once() {
    // Nothing is claimed while a publish waits for room (on a fixed-size ring every form
    // waits first; `publish_timeout` on any ring), so a stop refuses it without waiting out
    // its timeout. The bound is a liveness check far above the wake-up (50 ms at most).
    for fixed in [true, false] {
        for timed in [true, false] {
            if !fixed && !timed {
                continue; // a stamped ring's blocking publish holds its claim: delivered later
            }
            let ns = Namespace::concurrent("fixed-stop-waiting");
            let cfg = if fixed {
                config(4)
            } else {
                RingConfig {
                    capacity: 4,
                    ..RingConfig::default()
                }
            };
            let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
            let _c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
            let mut p = ring.producer().unwrap();
            for v in 0..4u64 {
                p.publish_value(&v).unwrap();
            }
            let waiting = std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let r = if timed {
                    p.publish_timeout(&9u64.to_le_bytes(), std::time::Duration::from_secs(120))
                        .map_err(|e| e.to_string())
                } else {
                    p.publish_value(&9u64).map_err(|e| e.to_string())
                };
                (r, t0.elapsed())
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while ring.info().producer_waiters == 0 {
                assert!(std::time::Instant::now() < deadline, "never parked");
                std::thread::yield_now();
            }
            assert_eq!(ring.stop(), Ok(4));
            let (r, took) = waiting.join().unwrap();
            assert_eq!(
                r,
                Err("ring is stopped: publish refused".to_owned()),
                "fixed {fixed}, timed {timed}"
            );
            assert!(
                took < std::time::Duration::from_secs(60),
                "fixed {fixed}, timed {timed}: waited {took:?}"
            );
        }
    }
}

/// A handler failing after a tombstone in the same run: the event before it is delivered and
/// committed, the tombstone skipped, the failing event not counted, for a required consumer
/// (in place) and an optional one (copied).
#[test]
fn a_handler_failing_after_a_tombstone_commits_what_came_before_it() {
    for required in [true, false] {
        let ns = Namespace::concurrent("fixed-fail-after-tomb");
        let ring = ring(&ns, 16);
        let opts = if required {
            ConsumerOptions::anonymous()
        } else {
            ConsumerOptions::anonymous().optional()
        };
        let mut c = ring.consumer(opts).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish_value(&1u64).unwrap();
        drop(p.claim().unwrap());
        p.publish_value(&2u64).unwrap();
        p.publish_value(&3u64).unwrap();
        let r = c.poll_once_fallible(|ev| match value(ev.bytes()) {
            2 => Err("two"),
            _ => Ok(()),
        });
        assert!(
            matches!(r, Err(PollError::HandlerFailed { sequence: 2, .. })),
            "required {required}: {r:?}"
        );
        let s = c.stats();
        assert_eq!(
            (s.delivered, s.skipped, s.failures),
            (1, 1, 1),
            "required {required}"
        );
        assert_eq!(c.next_sequence(), 2, "required {required}");
    }
}

/// The same with the tombstone right after the failing event: a copying (optional) reader
/// has looked past the failing event before handing it over, and what it found there is not
/// counted until the consumer passes it, so each tombstone is counted once, whatever the
/// retries.
#[test]
fn a_handler_failing_just_before_a_tombstone_counts_it_once_passed() {
    for required in [true, false] {
        let ns = Namespace::concurrent("fixed-fail-before-tomb");
        let ring = ring(&ns, 16);
        let opts = if required {
            ConsumerOptions::anonymous()
        } else {
            ConsumerOptions::anonymous().optional()
        };
        let mut c = ring
            .consumer(opts.on_error(ErrorPolicy::Skip { attempts: 3 }))
            .unwrap();
        let mut p = ring.producer().unwrap();
        p.publish_value(&1u64).unwrap();
        p.publish_value(&2u64).unwrap();
        drop(p.claim().unwrap());
        p.publish_value(&3u64).unwrap();
        let mut handed = Vec::new();
        let mut polls = 0;
        while c.next_sequence() < 4 {
            polls += 1;
            assert!(
                polls < 16,
                "required {required}: stuck at {}",
                c.next_sequence()
            );
            let _ = c.poll_once_fallible(|ev| {
                let v = value(ev.bytes());
                handed.push(v);
                match v {
                    2 => Err("two"),
                    _ => Ok(()),
                }
            });
            if c.next_sequence() <= 1 {
                assert_eq!(
                    c.stats().skipped,
                    0,
                    "required {required}: nothing passed yet"
                );
            }
        }
        let s = c.stats();
        assert_eq!(
            (s.delivered, s.skipped, s.dead_lettered),
            (2, 1, 1),
            "required {required}: events 1 and 3 delivered, the tombstone skipped once and the failing event dead-lettered ({handed:?})"
        );
    }
}

/// A publish's common case needs the ring's fence mode to be membarrier (its fences are then
/// compiler-only). Once a process without membarrier has raised the mode, publishes go the
/// general way with full fences: they stay contiguous, and each still wakes a parked consumer
/// (none of the consumer's wake-ups comes from its timed net).
#[test]
fn a_raised_fence_mode_leaves_the_common_case_and_still_wakes_a_parked_consumer() {
    let ns = Namespace::concurrent("fixed-fence-raised");
    let ring = ring(&ns, 64);
    let c = ring
        .consumer(ConsumerOptions::anonymous().wait(WaitStrategy::Blocking))
        .unwrap();
    let mut p = ring.producer().unwrap();
    // The first publish registers the process and opens the common case for the next ones.
    for i in 0..4u64 {
        assert_eq!(p.publish_value(&i), Ok(i));
    }
    // What a process without membarrier does when it attaches (the mode only rises).
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    raw.write_u32(
        std::mem::offset_of!(shmring_layout::Header, fence_mode) as u64,
        FenceMode::SeqCstFence as u32,
    );
    assert_eq!(ring.fence_mode(), Some(FenceMode::SeqCstFence));
    let n = 10u64;
    let consumer = ParkedConsumer::spawn(c);
    // Each publish goes to a consumer that has taken everything before it and parked: only
    // the publish's wake (or the 50 ms net, which the stats count) gets it going again.
    for i in 4..n {
        consumer.wait_parked_at(&ring, i);
        assert_eq!(p.publish_value(&i), Ok(i));
    }
    consumer.wait_parked_at(&ring, n);
    let (exit, seen, stats) = consumer.finish(&ring);
    assert_eq!(exit, RunExit::Closed);
    assert_eq!(seen, (0..n).map(|i| (i, i)).collect::<Vec<_>>());
    assert_eq!(
        stats.net_wakeups, 0,
        "a publish left a parked consumer asleep"
    );
    assert_eq!(p.stats().published, n);
}

/// A batch event whose `AsRef` gives one length to the batch's check and another to its
/// write (a type that answers differently each call): the event is written at its own
/// sequence, cut or padded to the event size, and no other event is touched.
#[test]
fn a_batch_event_whose_bytes_change_length_is_written_in_its_own_slot() {
    use shmring_testkit::payload::Fickle;
    let ns = Namespace::concurrent("fixed-fickle");
    let config = RingConfig {
        event_size: Some(16),
        ..config(16)
    };
    let ring = Ring::create(ns.name(), "r", &config).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let events = [
        Fickle::new(&[1; 16], &[1; 8]),
        Fickle::new(&[2; 16], &[2; 8]),
    ];
    assert_eq!(p.publish_batch(&events), Ok(0));
    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.bytes().to_vec())).unwrap();
    let mut second = vec![2u8; 8];
    second.resize(16, 0);
    let mut first = vec![1u8; 8];
    first.resize(16, 0);
    assert_eq!(got, [first, second]);
}

/// A caught-up busy-spin consumer in `run` (every event published only once the last was
/// handled, so that each arrives while it waits): each reaches the handler once and in
/// order, with and without `gather`, and a stop ends the run once it has everything.
#[test]
fn a_caught_up_busy_spin_run_gets_each_event_as_it_comes_and_ends_at_a_stop() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const N: u64 = 2_000;
    for gather in [0, 16] {
        let ns = Namespace::concurrent("fixed-spin");
        let ring = ring(&ns, 64);
        let mut c = ring
            .consumer(
                ConsumerOptions::anonymous()
                    .wait(WaitStrategy::BusySpin)
                    .gather(gather),
            )
            .unwrap();
        let handled = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&handled);
        let consumer = std::thread::spawn(move || {
            let mut order = Vec::with_capacity(N as usize);
            let exit = c
                .run(
                    |ev| {
                        order.push((ev.sequence(), value(ev.bytes())));
                        // Release: the producer's Acquire load below; it publishes the
                        // next event only after this one was handled.
                        seen.fetch_add(1, Ordering::Release);
                    },
                    || false,
                )
                .expect("run");
            (exit, order, c.stats().delivered)
        });
        let mut p = ring.producer().unwrap();
        for v in 0..N {
            p.publish_value(&(v * 3)).unwrap();
            let deadline = std::time::Instant::now() + shmring_testkit::WAIT;
            // Acquire: pairs with the handler's Release increment.
            while handled.load(Ordering::Acquire) <= v {
                assert!(
                    std::time::Instant::now() < deadline,
                    "event {v} not handled (gather {gather})"
                );
                std::hint::spin_loop();
            }
        }
        ring.stop().expect("stop");
        let (exit, order, delivered) = consumer.join().expect("the consumer");
        assert_eq!(exit, RunExit::Closed, "gather {gather}");
        let want: Vec<(u64, u64)> = (0..N).map(|v| (v, v * 3)).collect();
        assert_eq!(order, want, "gather {gather}");
        assert_eq!(delivered, N);
    }
}
