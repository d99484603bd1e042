//! Repairing a dead producer's claim while live producers publish.
//!
//! A producer SIGKILLed between announcing a claim and learning its sequence
//! (`in_flight == IN_FLIGHT_CLAIMING`, the store just before its `fetch_add`) leaves a hole
//! nobody can name. `Ring::repair_dead_producer` then tombstones every unpublished sequence
//! below the head (from `max_producers * capacity` below it) that no other live producer
//! holds. That must
//! never include a sequence a live producer is publishing: its publish returns `Ok`, so the
//! event was accepted and has to reach every required consumer.
//!
//! The dead producer is laid down in the segment exactly as such a kill leaves it (a window
//! of one instruction that a random SIGKILL does not hit in a test run), and the repair is
//! run the way the broker runs it, over and over, while a live producer thread publishes
//! self-checking events and a required consumer thread checks that every one of them
//! arrives, in order. No sequence was ever left unpublished here, so a correct repair finds
//! nothing to tombstone.
//!
//! Regression test: `repair_unattributed` used to scan the live producers' claims before
//! reading the head, so a claim taken in between was tombstoned under its producer (the
//! publish returned `Ok`, consumers skipped the event or read it torn); it failed within a
//! few hundred thousand events every run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring::{ConsumerOptions, PublishError, Ring, RingConfig};
use shmring_layout::IN_FLIGHT_CLAIMING;
use shmring_testkit::fault::dead_process;
use shmring_testkit::payload::{decode, encode, Origin};
use shmring_testkit::raw::RawSegment;
use shmring_testkit::{Namespace, WAIT};

/// Repairs run while the producer publishes (the old bug lost an event every few
/// thousand of them).
const REPAIRS: u64 = 200_000;
/// The dead producer's entry (the live one takes entry 0).
const DEAD_ENTRY: u32 = 3;

#[test]
fn repairing_an_unattributed_claim_never_tombstones_a_live_producers_sequence() {
    let ns = Namespace::new("repair_race");
    let config = RingConfig {
        capacity: 64,
        max_producers: 4,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let raw = RawSegment::open(&ring);
    let mut consumer = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    // Set when the repairs are done; then the producer stops and says how many it published.
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(u64::MAX));
    let (live, stop_p, total_p) = (ring.clone(), stop.clone(), total.clone());
    let producer = std::thread::spawn(move || {
        let mut p = live.producer().expect("producer");
        let mut seq = 0;
        while !stop_p.load(Ordering::SeqCst) {
            match p.publish(&encode(Origin { producer: 0, seq }, 8)) {
                Ok(_) => seq += 1,
                // The consumer gave up on a violation and the test is ending.
                Err(PublishError::Deleted) => break,
                Err(e) => panic!("publish {seq}: {e}"),
            }
        }
        total_p.store(seq, Ordering::SeqCst);
        seq
    });
    let checker = std::thread::spawn(move || {
        let deadline = Instant::now() + WAIT;
        let mut next = 0u64;
        let mut violations = Vec::new();
        while next < total.load(Ordering::SeqCst)
            && violations.len() < 5
            && Instant::now() < deadline
        {
            let n = consumer
                .poll_once(|ev| match decode(ev.bytes()) {
                    Ok(o) if o.seq == next => next += 1,
                    Ok(o) => {
                        violations.push(format!(
                            "ring sequence {} carries producer seq {}, expected {next}: \
                             events {next}..{} lost",
                            ev.sequence(),
                            o.seq,
                            o.seq
                        ));
                        next = o.seq + 1;
                    }
                    Err(e) => violations.push(format!("ring sequence {}: {e}", ev.sequence())),
                })
                .expect("poll");
            if n == 0 {
                std::thread::yield_now();
            }
        }
        (next, consumer.stats(), violations)
    });

    let (pid, start) = dead_process();
    let mut tombstoned = 0u64;
    for repair in 1..=REPAIRS {
        let word = raw.fabricate_dead_producer(DEAD_ENTRY, pid, start, IN_FLIGHT_CLAIMING, 0);
        tombstoned += ring.repair_dead_producer(DEAD_ENTRY, word).tombstoned;
        if repair % 64 == 0 {
            // Let the producer and the consumer share the cores too.
            std::thread::sleep(Duration::from_micros(10));
        }
    }
    stop.store(true, Ordering::SeqCst);
    let published = producer.join().expect("producer");
    let (next, stats, violations) = checker.join().expect("checker");
    println!(
        "repairs {REPAIRS}, sequences tombstoned by them {tombstoned}; producer published \
         {published}; consumer at {next}, {stats:?}"
    );
    assert!(
        violations.is_empty(),
        "accepted events lost to the repair: {violations:#?}"
    );
    assert_eq!(next, published, "every event arrived");
    assert_eq!(
        (tombstoned, stats.skipped),
        (0, 0),
        "nothing was ever a hole, yet the repair tombstoned live sequences"
    );
}
