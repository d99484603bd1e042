//! The publishing conveniences beside `publish`: the room snapshot, the try and bounded
//! batch forms, typed batches and the multi-slot claim guard. Each runs on a single- and a
//! multi-producer ring.

use std::time::{Duration, Instant};

use shmring::{
    Consumer, ConsumerOptions, ProducerMode, PublishError, Ring, RingConfig, TryPublishError,
};

use shmring_testkit::Namespace;

mod common;
use common::small;

const MODES: [ProducerMode; 2] = [ProducerMode::Single, ProducerMode::Multi];

fn ring(ns: &Namespace, mode: ProducerMode) -> Ring {
    let cfg = RingConfig {
        producer_mode: mode,
        ..small(16)
    };
    Ring::create(ns.name(), "r", &cfg).unwrap()
}

/// One event as a consumer saw it: sequence, value, end-of-batch edge.
type Seen = (u64, u64, bool);

/// Everything published so far, in `poll_once` steps.
fn drain(c: &mut Consumer) -> Vec<Seen> {
    let mut seen = Vec::new();
    while c
        .poll_once(|ev| {
            let v = u64::from_le_bytes(ev.bytes().try_into().expect("8-byte events"));
            seen.push((ev.sequence(), v, ev.is_end_of_batch()));
        })
        .unwrap()
        > 0
    {}
    seen
}

fn values(seen: &[Seen]) -> Vec<u64> {
    seen.iter().map(|s| s.1).collect()
}

fn events(range: std::ops::Range<u64>) -> Vec<[u8; 8]> {
    range.map(u64::to_le_bytes).collect()
}

#[test]
fn remaining_capacity_is_the_room_behind_the_slowest_gating_consumer() {
    for mode in MODES {
        let ns = Namespace::concurrent("room");
        let ring = ring(&ns, mode);
        let mut p = ring.producer().unwrap();
        assert_eq!(p.remaining_capacity(), 16, "{mode:?}: no consumer");
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        p.publish_batch(&events(0..5)).unwrap();
        assert_eq!(p.remaining_capacity(), 11, "{mode:?}");
        p.publish_batch(&events(5..16)).unwrap_err();
        p.publish_batch(&events(5..13)).unwrap();
        p.publish_batch(&events(13..16)).unwrap();
        assert_eq!(p.remaining_capacity(), 0, "{mode:?}");
        assert_eq!(p.try_publish(&[0; 8]), Err(TryPublishError::Full));
        assert_eq!(values(&drain(&mut c)), (0..16).collect::<Vec<_>>());
        // The snapshot reads the consumer's commit, not a cached gate.
        assert_eq!(p.remaining_capacity(), 16, "{mode:?}");
        ring.stop().unwrap();
        assert_eq!(p.remaining_capacity(), 0, "{mode:?}: stopped");
    }
}

/// A full ring refuses the whole batch and spends no sequence: the next accepted publish
/// takes the sequence the batch would have started at.
#[test]
fn try_publish_batch_is_all_or_nothing_and_a_refusal_spends_no_sequence() {
    for mode in MODES {
        let ns = Namespace::concurrent("trybatch");
        let ring = ring(&ns, mode);
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish_batch(&events(0..8)).unwrap();
        p.publish_batch(&events(8..10)).unwrap();
        // 6 slots free: a batch of 8 does not fit, and none of it is written.
        assert_eq!(
            p.try_publish_batch(&events(100..108)),
            Err(TryPublishError::Full),
            "{mode:?}"
        );
        assert_eq!(
            p.publish_batch_timeout(&events(100..108), Duration::from_millis(20)),
            Err(TryPublishError::Timeout),
            "{mode:?}"
        );
        // Bad counts and a too-large event are refused before the claim.
        let none: [[u8; 8]; 0] = [];
        assert_eq!(
            p.try_publish_batch(&none),
            Err(TryPublishError::BatchSize { len: 0, max: 8 })
        );
        assert_eq!(
            p.try_publish_batch(&events(0..9)),
            Err(TryPublishError::BatchSize { len: 9, max: 8 })
        );
        let max = p.max_payload();
        let big = [vec![0u8; 8], vec![0u8; max + 1]];
        assert_eq!(
            p.try_publish_batch(&big),
            Err(TryPublishError::TooLarge { len: max + 1, max })
        );
        assert_eq!(p.stats().refused, 5, "{mode:?}");
        assert_eq!(p.try_publish(&10u64.to_le_bytes()), Ok(10), "{mode:?}");
        let seen = drain(&mut c);
        assert_eq!(values(&seen), (0..11).collect::<Vec<_>>(), "{mode:?}");

        // Now there is room: the batch is contiguous, right after the single event, and a
        // consumer sees its end-of-batch edge on its last event.
        assert_eq!(p.try_publish_batch(&events(11..19)), Ok(11), "{mode:?}");
        let seen = drain(&mut c);
        let want: Vec<Seen> = (11..19).map(|s| (s, s, s == 18)).collect();
        assert_eq!(seen, want, "{mode:?}");
        assert_eq!(p.stats().published, 19, "{mode:?}");
    }
}

/// The bounded batch waits for room and publishes once a consumer makes it.
#[test]
fn publish_batch_timeout_waits_for_room_for_the_whole_batch() {
    for mode in MODES {
        let ns = Namespace::concurrent("batchwait");
        let ring = ring(&ns, mode);
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish_batch(&events(0..8)).unwrap();
        p.publish_batch(&events(8..14)).unwrap();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let mut seen = drain(&mut c);
            // Watchdog: the publisher below gives up after 10 s, so this loop ends too.
            for _ in 0..10_000 {
                if seen.len() >= 22 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
                seen.extend(drain(&mut c));
            }
            seen
        });
        let first = p
            .publish_batch_timeout(&events(14..22), Duration::from_secs(10))
            .unwrap();
        assert_eq!(first, 14, "{mode:?}");
        let seen = reader.join().unwrap();
        assert_eq!(values(&seen), (0..22).collect::<Vec<_>>(), "{mode:?}");
    }
}

#[test]
fn publish_batch_values_publishes_each_value_as_one_event() {
    for mode in MODES {
        let ns = Namespace::concurrent("batchvals");
        let ring = ring(&ns, mode);
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        let vals: Vec<u64> = (40..45).collect();
        assert_eq!(p.publish_batch_values(&vals), Ok(0), "{mode:?}");
        let want: Vec<Seen> = (0..5).map(|s| (s, 40 + s, s == 4)).collect();
        assert_eq!(drain(&mut c), want, "{mode:?}");
        let none: [u64; 0] = [];
        assert_eq!(
            p.publish_batch_values(&none),
            Err(PublishError::BatchSize { len: 0, max: 8 })
        );
    }
}

#[test]
fn a_committed_claim_batch_is_one_contiguous_run() {
    for mode in MODES {
        let ns = Namespace::concurrent("claimbatch");
        let ring = ring(&ns, mode);
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish(&0u64.to_le_bytes()).unwrap();
        assert_eq!(
            p.claim_batch(9).err(),
            Some(PublishError::BatchSize { len: 9, max: 8 })
        );
        assert_eq!(
            p.claim_batch(0).err(),
            Some(PublishError::BatchSize { len: 0, max: 8 })
        );
        let max = p.max_payload();
        let mut b = p.claim_batch(4).unwrap();
        assert_eq!((b.len(), b.first_sequence()), (4, 1), "{mode:?}");
        assert!(b.payload_mut(4).is_none());
        assert_eq!(
            b.write(4, &[0; 8]),
            Err(PublishError::BatchIndex { index: 4, len: 4 })
        );
        assert_eq!(
            b.set_len(0, max + 1),
            Err(PublishError::TooLarge { len: max + 1, max })
        );
        // Written out of order, in place and by copy: the stamps still go in order.
        b.write_value(3, &4u64).unwrap();
        b.write(0, &1u64.to_le_bytes()).unwrap();
        for i in [2usize, 1] {
            let payload = b.payload_mut(i).unwrap();
            payload[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            b.set_len(i, 8).unwrap();
        }
        assert_eq!(
            drain(&mut c),
            vec![(0, 0, true)],
            "{mode:?}: nothing before commit"
        );
        assert_eq!(b.commit(), 1);
        let want: Vec<Seen> = (1..5).map(|s| (s, s, s == 4)).collect();
        assert_eq!(drain(&mut c), want, "{mode:?}");
        assert_eq!(p.stats().published, 5, "{mode:?}");
        assert_eq!(p.publish(&5u64.to_le_bytes()), Ok(5), "{mode:?}");
    }
}

/// A `ClaimBatch` dropped without commit publishes every slot as a tombstone: consumers
/// skip and count them, and are not held at the batch.
#[test]
fn a_dropped_claim_batch_is_tombstoned_whole() {
    for mode in MODES {
        let ns = Namespace::concurrent("dropbatch");
        let ring = ring(&ns, mode);
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish(&0u64.to_le_bytes()).unwrap();
        let mut b = p.claim_batch(3).unwrap();
        b.write(0, &99u64.to_le_bytes()).unwrap();
        drop(b);
        assert_eq!(p.publish(&4u64.to_le_bytes()), Ok(4), "{mode:?}");
        assert_eq!(values(&drain(&mut c)), vec![0, 4], "{mode:?}");
        assert_eq!(c.stats().skipped, 3, "{mode:?}");
        assert_eq!(p.stats().tombstoned, 3, "{mode:?}");
        assert_eq!(p.stats().published, 2, "{mode:?}");
    }
}

/// A `ClaimBatch` leaked with `mem::forget` still holds its sequences: its producer
/// publishes them as tombstones before its next claim, or at detach.
#[test]
fn a_leaked_claim_batch_is_tombstoned_at_the_next_publish_and_at_detach() {
    for mode in MODES {
        let ns = Namespace::concurrent("leakbatch");
        let ring = ring(&ns, mode);
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish(&0u64.to_le_bytes()).unwrap();
        let mut b = p.claim_batch(3).unwrap();
        b.write(1, &99u64.to_le_bytes()).unwrap();
        std::mem::forget(b);
        assert_eq!(p.publish(&4u64.to_le_bytes()), Ok(4), "{mode:?}");
        assert_eq!(values(&drain(&mut c)), vec![0, 4], "{mode:?}");
        assert_eq!(c.stats().skipped, 3, "{mode:?}");
        assert_eq!(p.stats().tombstoned, 3, "{mode:?}");

        // Leaked, then the producer detaches: the batch is tombstoned at the detach, and a
        // new producer carries on after it.
        std::mem::forget(p.claim_batch(2).unwrap());
        drop(p);
        assert_eq!(values(&drain(&mut c)), Vec::<u64>::new(), "{mode:?}");
        assert_eq!(c.stats().skipped, 5, "{mode:?}");
        let mut p = ring.producer().unwrap();
        assert_eq!(p.publish(&7u64.to_le_bytes()), Ok(7), "{mode:?}");
        assert_eq!(values(&drain(&mut c)), vec![7], "{mode:?}");
    }
}

/// Three producers batching at once, each through another form (try, bounded, claim
/// guard), on a small ring that is mostly full: every batch lands at consecutive
/// sequences, none is lost or repeated, and the refused tries spent no sequence.
#[test]
fn batch_forms_of_concurrent_producers_land_contiguous() {
    const THREADS: u64 = 3;
    const BATCHES: u64 = 200;
    let ns = Namespace::concurrent("formsconc");
    let ring = ring(&ns, ProducerMode::Multi);
    let mut c = ring.consumer(ConsumerOptions::durable("c")).unwrap();
    let tag = |t: u64, b: u64, i: u64, n: u64| (t << 48 | b << 16 | i << 8 | n).to_le_bytes();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut p = ring.producer().unwrap();
                for b in 0..BATCHES {
                    let n = 1 + (b * 7 + t * 3) % 8;
                    let events: Vec<_> = (0..n).map(|i| tag(t, b, i, n)).collect();
                    match t {
                        0 => loop {
                            assert!(std::time::Instant::now() < deadline, "thread 0 at {b}");
                            match p.try_publish_batch(&events) {
                                Ok(_) => break,
                                Err(TryPublishError::Full) => std::thread::yield_now(),
                                Err(e) => panic!("try_publish_batch: {e}"),
                            }
                        },
                        1 => {
                            p.publish_batch_timeout(&events, Duration::from_secs(30))
                                .unwrap();
                        }
                        _ => {
                            let mut batch = p.claim_batch(n as usize).unwrap();
                            for (i, e) in events.iter().enumerate() {
                                batch.write(i, e).unwrap();
                            }
                            batch.commit();
                        }
                    }
                }
            })
        })
        .collect();
    // Per thread: the next batch expected, and the batch being read (index, size).
    let mut next_batch = [0u64; THREADS as usize];
    let mut open: Option<(u64, u64, u64, u64)> = None;
    let mut last = None;
    while next_batch.iter().any(|&b| b < BATCHES) || open.is_some() {
        assert!(std::time::Instant::now() < deadline, "at {next_batch:?}");
        c.poll_once(|ev| {
            // No sequence was spent and left unpublished: the consumer sees every one.
            assert_eq!(ev.sequence(), last.map_or(0, |l: u64| l + 1));
            last = Some(ev.sequence());
            let v = u64::from_le_bytes(ev.bytes().try_into().unwrap());
            let (t, b, i, n) = (v >> 48, (v >> 16) & 0xffff_ffff, (v >> 8) & 0xff, v & 0xff);
            match open.take() {
                Some((ot, ob, oi, on)) => assert_eq!(
                    (t, b, i, n),
                    (ot, ob, oi + 1, on),
                    "sequence {}: batch {ob} of thread {ot} interrupted",
                    ev.sequence()
                ),
                None => {
                    assert_eq!(i, 0, "sequence {}: a batch starts mid-way", ev.sequence());
                    assert_eq!(
                        b, next_batch[t as usize],
                        "thread {t}: batch lost or repeated"
                    );
                    next_batch[t as usize] += 1;
                }
            }
            if i + 1 < n {
                open = Some((t, b, i, n));
            }
        })
        .unwrap();
    }
    for h in producers {
        h.join().unwrap();
    }
    assert_eq!(c.stats().skipped, 0);
}

/// The bounded forms wait at most their bound, and for it: on a full ring each returns
/// `Timeout` no sooner than its timeout (a deadline already past: at once, without
/// waiting for room that cannot come), and no sequence is spent.
#[test]
fn a_timed_publish_waits_for_its_timeout_then_gives_up() {
    const BOUND: Duration = Duration::from_millis(50);
    // Far above any wait for room the ring's back-off adds (a watchdog, not a timing
    // target).
    const LATE: Duration = Duration::from_secs(10);
    for mode in MODES {
        let ns = Namespace::concurrent("timed");
        let ring = ring(&ns, mode);
        let _c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish_batch(&events(0..8)).unwrap();
        p.publish_batch(&events(8..16)).unwrap();
        let t = Instant::now();
        assert_eq!(
            p.publish_timeout(&[1; 8], BOUND),
            Err(TryPublishError::Timeout)
        );
        let waited = t.elapsed();
        assert!(waited >= BOUND && waited < LATE, "{mode:?}: {waited:?}");
        let t = Instant::now();
        assert_eq!(
            p.publish_batch_timeout(&events(100..102), BOUND),
            Err(TryPublishError::Timeout)
        );
        let waited = t.elapsed();
        assert!(waited >= BOUND && waited < LATE, "{mode:?}: {waited:?}");
        let past = Instant::now();
        assert_eq!(
            p.publish_deadline(&[1; 8], past),
            Err(TryPublishError::Timeout)
        );
        assert_eq!(
            p.publish_batch_deadline(&events(100..102), past),
            Err(TryPublishError::Timeout)
        );
        assert_eq!(p.remaining_capacity(), 0, "{mode:?}");
        assert_eq!(ring.info().head, 16, "{mode:?}: a timeout spent a sequence");
    }
}

/// A claim that no consumer gates (every consumer attached after it was taken) is not
/// lapped before its producer writes it: the next lap's publish into the same slot waits
/// for that write (the try forms are refused as `Full`, a bounded publish times out, a
/// blocking one returns once the claim is committed), and the consumer gets every event
/// past the claim, the later lap included, whole. Without the wait the later lap was
/// written at once and the claim's commit then stamped the slot with its older sequence:
/// the consumer waited at sequence 16 for good.
#[test]
fn a_later_lap_waits_for_a_claim_no_consumer_gates() {
    let ns = Namespace::concurrent("latelap");
    let ring = ring(&ns, ProducerMode::Multi);
    let mut a = ring.producer().unwrap();
    let mut b = ring.producer().unwrap();
    // A stop and a start end `a`'s lone claims (ARCHITECTURE.md, "Lone claims"): a lone
    // claim's unstamped slot is where a consumer attaching starts, as on a single-producer
    // ring, and this test needs a claim taken from the counter, which one attaching after it
    // does not gate.
    ring.stop().unwrap();
    ring.start().unwrap();
    let mut claim = a.claim().unwrap();
    assert_eq!(claim.sequence(), 0);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    assert_eq!(
        c.next_sequence(),
        1,
        "attached after the claim: it does not gate it"
    );
    for v in 1..16u64 {
        assert_eq!(b.publish(&v.to_le_bytes()), Ok(v));
    }
    // Sequence 16 goes to the claim's slot; the consumer at 1 leaves room for it.
    let lap = 16u64.to_le_bytes();
    assert_eq!(b.try_publish(&lap), Err(TryPublishError::Full));
    assert_eq!(
        b.publish_timeout(&lap, Duration::from_millis(20)),
        Err(TryPublishError::Timeout)
    );
    assert_eq!(
        (b.stats().lap_waits, b.stats().room_waits),
        (1, 0),
        "the bounded publish waited for the slot, not for room"
    );
    assert_eq!(
        b.try_publish_batch(&events(16..18)),
        Err(TryPublishError::Full)
    );
    let later = std::thread::spawn(move || (b.publish(&lap), b));
    // The blocking publish takes sequence 16, then waits for the claim's write.
    shmring_testkit::poll::eventually("the later lap's claim", || ring.head() == 17);
    claim.write(&0u64.to_le_bytes()).unwrap();
    assert_eq!(claim.commit(), 0);
    let (published, mut b) = later.join().expect("the later lap's publisher");
    assert_eq!(published, Ok(16));
    let seen = drain(&mut c);
    assert_eq!(values(&seen), (1..17).collect::<Vec<_>>());
    assert_eq!(seen.last().map(|s| s.0), Some(16));
    assert_eq!(
        b.try_publish(&17u64.to_le_bytes()),
        Ok(17),
        "the next slot is free"
    );
    assert_eq!(values(&drain(&mut c)), [17]);
}

/// Producers of a multi-producer ring taking turns break their runs of claims at every
/// turn, so a publish's slot is not known written from the producer's own claims. A
/// required consumer that has read the slot's previous lap vouches for it: from the second
/// lap on the slot is stored plainly, with no CAS (`ProducerStats::slot_takes` counts only
/// the first lap's slots). Without the witness every publish took its slot with a CAS.
#[test]
fn producers_taking_turns_take_no_slot_a_consumer_has_read() {
    let ns = Namespace::concurrent("vouched");
    let ring = ring(&ns, ProducerMode::Multi);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut a = ring.producer().unwrap();
    let mut b = ring.producer().unwrap();
    let mut seen = Vec::new();
    for v in 0..64u64 {
        let p = if v % 2 == 0 { &mut a } else { &mut b };
        assert_eq!(p.publish(&v.to_le_bytes()), Ok(v));
        seen.extend(values(&drain(&mut c)));
    }
    assert_eq!(seen, (0..64).collect::<Vec<_>>());
    assert_eq!(
        (a.stats().slot_takes, b.stats().slot_takes),
        (8, 8),
        "the first lap's 16 slots are taken with a CAS, no later one"
    );
}

/// The witness's bad case: a consumer that reads one event at a time on a full ring is one
/// step past each slot's previous lap, so a look vouches for a single slot. Looking again
/// at every publish would pull the line that consumer commits to at every publish; a
/// producer whose look vouched for less than a sixteenth of the ring looks again only a
/// sixteenth of the ring on (here 16 sequences, 8 of its own publishes), and takes the
/// slots in between with a CAS. So of 160 publishes past the first lap, each producer
/// looks 10 times and takes 70 slots: fewer than every slot (the looks vouch), more than
/// none (the looks are rate-limited).
#[test]
fn a_witness_that_vouches_for_one_slot_is_looked_for_once_per_sixteenth_of_a_ring() {
    let ns = Namespace::concurrent("witness-rate");
    let cfg = RingConfig {
        producer_mode: ProducerMode::Multi,
        ..small(256)
    };
    let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().batch_cap(1))
        .unwrap();
    let mut a = ring.producer().unwrap();
    let mut b = ring.producer().unwrap();
    for v in 0..256u64 {
        let p = if v % 2 == 0 { &mut a } else { &mut b };
        assert_eq!(p.publish(&v.to_le_bytes()), Ok(v));
    }
    let first_lap = (a.stats().slot_takes, b.stats().slot_takes);
    assert_eq!(first_lap, (128, 128), "every slot of the first lap");
    for v in 256..416u64 {
        let mut got = Vec::new();
        assert_eq!(
            c.poll_once(|ev| got.push(ev.sequence())).unwrap(),
            1,
            "one event per poll"
        );
        assert_eq!(got, [v - 256]);
        let p = if v % 2 == 0 { &mut a } else { &mut b };
        assert_eq!(
            p.publish(&v.to_le_bytes()),
            Ok(v),
            "the ring is full but one"
        );
    }
    let takes = (
        a.stats().slot_takes - first_lap.0,
        b.stats().slot_takes - first_lap.1,
    );
    assert_eq!(
        takes,
        (70, 70),
        "each producer: 80 publishes, a look at every eighth, a CAS for the rest"
    );
}

/// A try form counts a slot's previous lap as its own only if it lies in the producer's
/// last run of claims, not anywhere past the run's start: after another producer's claims
/// the next claim starts a new run. Here `b`'s run is sequence 0, `a` holds sequence 1 open
/// and `c` publishes the rest of the lap, so sequence 17's slot waits for the open claim:
/// `b.try_publish` is refused as `Full`. Counted as `b`'s own, the claim was taken and the
/// write then waited for the slot with no deadline.
#[test]
fn a_try_publish_after_another_producers_claims_looks_at_the_slot() {
    let ns = Namespace::concurrent("stalerun");
    let ring = ring(&ns, ProducerMode::Multi);
    let mut a = ring.producer().unwrap();
    let mut b = ring.producer().unwrap();
    let mut c = ring.producer().unwrap();
    assert_eq!(b.publish(&0u64.to_le_bytes()), Ok(0));
    let mut claim = a.claim().unwrap();
    assert_eq!(claim.sequence(), 1);
    for v in 2..17u64 {
        assert_eq!(c.publish(&v.to_le_bytes()), Ok(v));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let tried = std::thread::spawn(move || {
        let r = b.try_publish(&17u64.to_le_bytes());
        let _ = tx.send(r);
        b
    });
    let refused = rx.recv_timeout(shmring_testkit::WAIT);
    claim.write(&1u64.to_le_bytes()).unwrap();
    assert_eq!(claim.commit(), 1);
    let mut b = tried.join().expect("the try publish");
    assert_eq!(
        refused,
        Ok(Err(TryPublishError::Full)),
        "the try form took the claim and waited for the slot"
    );
    assert_eq!(b.try_publish(&17u64.to_le_bytes()), Ok(17));
}

/// What a consumer entry vouches for is remembered no further than the head at the look:
/// an entry whose `next` another process overwrote with a value past the head (here one of
/// 1000 on a ring at 17) vouches for sequences not claimed yet. Once that entry is gone,
/// sequence 17, an open claim taken after the look, still holds its slot's next lap.
#[test]
fn a_vouched_range_ends_at_the_head_of_its_look() {
    use shmring_layout::{consumer_flags, consumer_state, owned_word};
    let ns = Namespace::concurrent("vouchclamp");
    let ring = ring(&ns, ProducerMode::Multi);
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    let mut a = ring.producer().unwrap();
    let mut b = ring.producer().unwrap();
    let word = owned_word::pack(1, consumer_state::ACTIVE, std::process::id());
    raw.fabricate_consumer(0, word, consumer_flags::REQUIRED, "", 1000);
    assert_eq!(a.publish(&0u64.to_le_bytes()), Ok(0));
    for v in 1..17u64 {
        assert_eq!(b.publish(&v.to_le_bytes()), Ok(v));
    }
    // Sequence 16's previous lap is `a`'s: `b` looked for a witness there.
    raw.set_consumer_word(0, owned_word::next(word, consumer_state::FREE, 0));
    let mut claim = a.claim().unwrap();
    assert_eq!(claim.sequence(), 17);
    for v in 18..33u64 {
        assert_eq!(b.publish(&v.to_le_bytes()), Ok(v));
    }
    let lap = 33u64.to_le_bytes();
    assert_eq!(
        b.try_publish(&lap),
        Err(TryPublishError::Full),
        "the overwritten entry vouched for the open claim"
    );
    claim.write(&17u64.to_le_bytes()).unwrap();
    assert_eq!(claim.commit(), 17);
    assert_eq!(b.try_publish(&lap), Ok(33));
}

/// How a released consumer gets past the open claim it waited at.
#[derive(Debug, Clone, Copy)]
enum Past {
    /// It gates again by itself, at the head.
    Regates,
    /// Re-attached under its durable name, at the head.
    Reattaches,
    /// `commit_to` the head while released (the bridge exporter's confirmation), then it
    /// gates again there: no jump left to make.
    CommitsTo,
}

/// A consumer that moves past sequences without reading them vouches for none of them: one
/// the broker released while it waited at an open claim goes to the head when it gates
/// again (by itself, re-attached under its durable name, or confirming the head with
/// `commit_to` first), and the next lap of that claim's slot still waits for the claim's
/// write.
#[test]
fn a_consumer_that_jumped_over_a_claim_does_not_vouch_for_it() {
    for past in [Past::Regates, Past::Reattaches, Past::CommitsTo] {
        let ns = Namespace::concurrent("jumpvouch");
        let ring = ring(&ns, ProducerMode::Multi);
        let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
        let mut a = ring.producer().unwrap();
        let mut b = ring.producer().unwrap();
        let mut claim = a.claim().unwrap();
        assert_eq!(claim.sequence(), 0);
        for v in 1..5u64 {
            assert_eq!(b.publish(&v.to_le_bytes()), Ok(v));
        }
        assert!(drain(&mut c).is_empty(), "it waits at the open claim");
        let word = ring
            .info()
            .consumers
            .iter()
            .find(|e| e.index == c.index())
            .expect("the consumer's entry")
            .word;
        assert!(ring.release_consumer(c.index(), word));
        match past {
            Past::Regates => assert!(drain(&mut c).is_empty()),
            Past::Reattaches => {
                drop(c);
                c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
            }
            Past::CommitsTo => {
                assert_eq!(c.commit_to(5), Ok(()));
                assert!(drain(&mut c).is_empty());
            }
        }
        assert_eq!(c.next_sequence(), 5, "{past:?}: gates again from the head");
        for v in 5..16u64 {
            assert_eq!(b.publish(&v.to_le_bytes()), Ok(v));
        }
        // Sequence 16 goes to the open claim's slot.
        let lap = 16u64.to_le_bytes();
        assert_eq!(
            b.try_publish(&lap),
            Err(TryPublishError::Full),
            "{past:?}: the consumer vouched for the claim it passed"
        );
        claim.write(&0u64.to_le_bytes()).unwrap();
        assert_eq!(claim.commit(), 0);
        assert_eq!(b.try_publish(&lap), Ok(16));
        assert_eq!(values(&drain(&mut c)), (5..17).collect::<Vec<_>>());
    }
}

/// A producer of a multi-producer ring killed between taking a sequence and recording it
/// leaves a hole with no name; when every consumer attached after it, none gates it, and
/// the next lap's producer waits for that slot. The repair finds the hole below the gate
/// and tombstones it, and that producer goes on. Before, the repair looked only from the
/// slowest gating consumer on, and the next lap waited for good.
#[test]
fn a_hole_no_consumer_gates_is_repaired_for_the_next_lap() {
    use shmring_layout::IN_FLIGHT_CLAIMING;
    let ns = Namespace::concurrent("ungatedhole");
    let ring = ring(&ns, ProducerMode::Multi);
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    // Sequence 0, taken by a process that died before it knew which.
    raw.set_claim_word(1);
    let (pid, start) = shmring_testkit::fault::dead_process();
    let word = raw.fabricate_dead_producer(1, pid, start, IN_FLIGHT_CLAIMING, 0);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    assert_eq!(c.next_sequence(), 1, "attached after the hole");
    let mut b = ring.producer().unwrap();
    for v in 1..16u64 {
        assert_eq!(b.publish(&v.to_le_bytes()), Ok(v));
    }
    let lap = 16u64.to_le_bytes();
    assert_eq!(
        b.try_publish(&lap),
        Err(TryPublishError::Full),
        "slot 0 waits"
    );
    let repair = ring.repair_dead_producer(1, word);
    assert_eq!((repair.tombstoned, repair.waiting), (1, 0));
    assert_eq!(b.try_publish(&lap), Ok(16));
    assert_eq!(values(&drain(&mut c)), (1..17).collect::<Vec<_>>());
}
