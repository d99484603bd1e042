//! Lone claims (ARCHITECTURE.md, "Lone claims"): a producer alone on a multi-producer ring
//! claims with plain stores to its own entry, and the counter takes over where it stopped
//! when a second producer claims, the ring stops, or it detaches. Each test checks the
//! sequences handed out: one owner per sequence, no hole, no rewind.

use std::time::Duration;

use shmring::{ConsumerOptions, ProducerMode, PublishError, Ring, RingConfig};
use shmring_testkit::raw::RawSegment;
use shmring_testkit::Namespace;

mod common;
use common::{poll_all, small};

fn multi(ns: &Namespace, capacity: u64) -> Ring {
    let cfg = RingConfig {
        producer_mode: ProducerMode::Multi,
        ..small(capacity)
    };
    Ring::create(ns.name(), "r", &cfg).expect("create")
}

/// The table index of the producer that has the line to itself, if any.
fn lone(ring: &Ring) -> Option<u32> {
    let info = ring.info();
    let lone: Vec<u32> = info
        .producers
        .iter()
        .filter(|p| p.lone)
        .map(|p| p.index)
        .collect();
    assert!(lone.len() <= 1, "two lone producers: {lone:?}");
    lone.first().copied()
}

#[test]
fn one_producer_claims_alone_until_a_second_one_claims() {
    let ns = Namespace::new("lone_second");
    let ring = multi(&ns, 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut first = ring.producer().unwrap();
    for v in 0..5u64 {
        assert_eq!(first.publish(&(100 + v).to_le_bytes()), Ok(v));
    }
    assert_eq!(
        lone(&ring),
        Some(0),
        "the only producer has the line to itself"
    );
    let mut second = ring.producer().unwrap();
    assert_eq!(
        lone(&ring),
        Some(0),
        "attaching alone does not end the lone claims"
    );
    assert_eq!(second.publish(&200u64.to_le_bytes()), Ok(5));
    assert_eq!(lone(&ring), None, "the second producer's claim ended them");
    assert_eq!(first.publish(&105u64.to_le_bytes()), Ok(6));
    assert_eq!(second.publish(&201u64.to_le_bytes()), Ok(7));
    let mut got = Vec::new();
    shmring_testkit::poll::read_values_to(&mut c, 8, &mut got);
    assert_eq!(
        got,
        [
            (0, 100),
            (1, 101),
            (2, 102),
            (3, 103),
            (4, 104),
            (5, 200),
            (6, 105),
            (7, 201)
        ]
    );
    assert_eq!(ring.info().head, 8);
}

/// The ordinary maintenance sequence (stop, restart consumers, start) on a multi-producer
/// ring whose producer claims alone: the stop ends the lone claims where they are, the
/// refused publish spends no sequence, and the run after the start begins at the stop.
#[test]
fn a_stop_ends_the_lone_claims_and_the_start_reopens_at_the_stop() {
    let ns = Namespace::new("lone_stop");
    let ring = multi(&ns, 16);
    let mut p = ring.producer().unwrap();
    assert_eq!(p.publish(b"a"), Ok(0));
    assert_eq!(lone(&ring), Some(0));
    assert_eq!(ring.stop(), Ok(1));
    assert_eq!(lone(&ring), None, "a stopped line has no lone producer");
    assert_eq!(p.publish(b"x"), Err(PublishError::Closed));
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    ring.start().unwrap();
    assert_eq!(p.publish(b"b"), Ok(1));
    assert_eq!(poll_all(&mut c), [1]);
}

/// A lone claim checks the lifecycle word against the very word its run began with, and
/// after 2^24 transitions the word comes back to that value. What then tells the lone
/// producer its run ended is its entry's `lone_end` record: here a stop ended the run, the
/// ring started again, another producer claimed the next sequence, and the word is set back
/// to the run's first value, as the wrap leaves it. The lone producer's claim does not take
/// that sequence again.
#[test]
fn a_lifecycle_word_back_at_its_first_value_does_not_reopen_ended_lone_claims() {
    let ns = Namespace::new("lone_wrap");
    let ring = multi(&ns, 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    assert_eq!(p.publish(b"a"), Ok(0));
    assert_eq!(lone(&ring), Some(0));
    let raw = RawSegment::open(&ring);
    let began = raw.lifecycle_word();
    assert_eq!(ring.stop(), Ok(1));
    ring.start().unwrap();
    let mut q = ring.producer().unwrap();
    assert_eq!(q.publish(b"q"), Ok(1));
    raw.set_lifecycle_word(began);
    assert_eq!(p.publish(b"b"), Ok(2), "1 is the other producer's");
    assert_eq!(q.publish(b"r"), Ok(3));
    assert_eq!(poll_all(&mut c), [0, 1, 2, 3]);
}

#[test]
fn a_detach_ends_the_lone_claims_at_the_producers_position() {
    let ns = Namespace::new("lone_detach");
    let ring = multi(&ns, 16);
    let mut p = ring.producer().unwrap();
    for s in 0..3 {
        assert_eq!(p.publish(b"e"), Ok(s));
    }
    drop(p);
    assert_eq!(lone(&ring), None);
    assert_eq!(ring.info().head, 3, "the counter took over at the position");
    let mut q = ring.producer().unwrap();
    assert_eq!(lone(&ring), Some(0), "the next producer alone claims alone");
    assert_eq!(q.publish(b"e"), Ok(3));
}

/// A producer whose lone claims another producer ended takes the line again once it is
/// alone, at its first look after `LONE_RETRY` (4096) claims through the counter.
#[test]
fn a_producer_alone_again_takes_the_line_again() {
    let ns = Namespace::new("lone_again");
    let ring = multi(&ns, 16);
    let mut first = ring.producer().unwrap();
    assert_eq!(first.publish(b"e"), Ok(0));
    let mut second = ring.producer().unwrap();
    assert_eq!(second.publish(b"e"), Ok(1));
    drop(second);
    assert_eq!(lone(&ring), None);
    let mut next = 2;
    while lone(&ring).is_none() {
        assert!(next < 2 + 4100, "not alone again after {} claims", next - 2);
        assert_eq!(first.publish(b"e"), Ok(next));
        next += 1;
    }
    assert_eq!(lone(&ring), Some(0));
    assert!(
        next > 2 + 4000,
        "took the line again after {} claims",
        next - 2
    );
    assert_eq!(first.publish(b"e"), Ok(next), "no rewind, no gap");
}

/// Every publish form of a lone producer, then the same after a second producer ended
/// its lone claims: one owner per sequence, in order.
#[test]
fn every_publish_form_claims_alone_and_after() {
    let ns = Namespace::new("lone_forms");
    let ring = multi(&ns, 64);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let mut expect = Vec::new();
    let forms = |p: &mut shmring::Producer, expect: &mut Vec<u64>| {
        let s = p.publish(b"1").unwrap();
        expect.push(s);
        let mut claim = p.claim().unwrap();
        claim.write(b"2").unwrap();
        expect.push(claim.commit());
        let mut batch = p.claim_batch(2).unwrap();
        batch.write(0, b"3").unwrap();
        batch.write(1, b"4").unwrap();
        let first = batch.commit();
        expect.extend([first, first + 1]);
        expect.push(p.try_publish(b"5").unwrap());
        expect.push(p.publish_timeout(b"6", Duration::from_secs(30)).unwrap());
        let first = p.try_publish_batch(&[b"7", b"8"]).unwrap();
        expect.extend([first, first + 1]);
        let first = p.publish_batch(&[b"9", b"a"]).unwrap();
        expect.extend([first, first + 1]);
    };
    forms(&mut p, &mut expect);
    assert_eq!(lone(&ring), Some(0));
    let mut other = ring.producer().unwrap();
    forms(&mut other, &mut expect);
    assert_eq!(lone(&ring), None);
    forms(&mut p, &mut expect);
    assert_eq!(expect, (0..30).collect::<Vec<_>>());
    assert_eq!(poll_all(&mut c), expect);
}

/// Two threads, each with its own producer, publish numbered events: the first claims
/// alone until the second starts. A consumer sees every event of each, in its order, and
/// the ring's sequences without a hole or a repeat.
#[test]
fn two_producers_on_threads_lose_and_repeat_nothing() {
    const EACH: u64 = 20_000;
    let ns = Namespace::new("lone_threads");
    let ring = multi(&ns, 64);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut first = ring.producer().unwrap();
    assert_eq!(first.publish(&0u64.to_le_bytes()), Ok(0));
    assert_eq!(lone(&ring), Some(0));
    let reader = std::thread::spawn(move || {
        let mut next = [0u64, 0];
        let mut seq = 0u64;
        let mut seen = 0;
        let deadline = std::time::Instant::now() + shmring_testkit::WAIT;
        while seen < 2 * EACH {
            assert!(
                std::time::Instant::now() < deadline,
                "events stopped coming"
            );
            c.poll_once(|ev| {
                let v = u64::from_le_bytes(ev.bytes().try_into().unwrap());
                let (who, n) = ((v >> 32) as usize, v & 0xffff_ffff);
                assert_eq!(
                    ev.sequence(),
                    seq,
                    "a hole or a repeat in the ring's sequences"
                );
                assert_eq!(n, next[who], "producer {who}'s events out of order");
                next[who] += 1;
                seq += 1;
                seen += 1;
            })
            .expect("poll");
        }
        next
    });
    let second = {
        let mut p = ring.producer().unwrap();
        std::thread::spawn(move || {
            for n in 0..EACH {
                p.publish(&((1u64 << 32) | n).to_le_bytes()).unwrap();
            }
        })
    };
    for n in 1..EACH {
        first.publish(&n.to_le_bytes()).unwrap();
    }
    second.join().unwrap();
    assert_eq!(reader.join().unwrap(), [EACH, EACH]);
}

/// Another process overwrites a lone producer's words with values no ring holds: a claim
/// through the counter and a stop refuse them with an error, and never install them (a
/// position past any sequence would reopen the counter there, one shaped as a lone counter
/// would keep the line lone for good).
#[test]
fn corrupt_lone_words_are_refused_not_installed() {
    use shmring_layout::{claim_lone, claim_lone_index, MAX_SEQUENCE};
    use shmring_testkit::raw::RawSegment;
    // (what, the lone position, the record, the counter), each overwritten if given.
    let cases = [
        (
            "a position past any sequence",
            Some((1 << 63) | 5),
            None,
            None,
        ),
        (
            "a position shaped as a lone counter",
            Some(claim_lone(0)),
            None,
            None,
        ),
        (
            "a record past any sequence",
            None,
            Some(MAX_SEQUENCE + 3),
            None,
        ),
        (
            "a counter naming an entry past the table",
            None,
            None,
            Some(claim_lone(200)),
        ),
    ];
    for (what, position, record, counter) in cases {
        let ns = Namespace::new("lone_corrupt");
        let ring = multi(&ns, 16);
        let mut p = ring.producer().unwrap();
        assert_eq!(p.publish(b"e"), Ok(0));
        assert_eq!(lone(&ring), Some(0));
        let raw = RawSegment::open(&ring);
        if let Some(v) = position {
            raw.set_producer_lone(0, v);
        }
        if let Some(v) = record {
            raw.set_producer_lone_end(0, v);
        }
        if let Some(v) = counter {
            raw.set_claim_word(v);
        }
        let named = claim_lone_index(raw.claim_word());
        let mut q = ring.producer().unwrap();
        assert!(
            matches!(q.publish(b"e"), Err(PublishError::CorruptPosition { .. })),
            "{what}: a claim through the counter"
        );
        assert!(ring.stop().is_err(), "{what}: a stop");
        assert_eq!(
            claim_lone_index(raw.claim_word()),
            named,
            "{what}: the counter was reopened at a corrupt value"
        );
        assert_eq!(
            ring.state(),
            Some(shmring::RingState::Running),
            "{what}: the refused stop left the word as it was"
        );
        if record.is_some() {
            // The lone producer's own claim finds the record too, and says so.
            assert!(
                matches!(p.publish(b"e"), Err(PublishError::CorruptPosition { .. })),
                "{what}: the lone producer's claim"
            );
        }
        // A remove still ends the ring: its clients get `Deleted`.
        Ring::remove(ns.name(), "r").unwrap_or_else(|e| panic!("{what}: remove: {e}"));
        assert_eq!(p.publish(b"e"), Err(PublishError::Deleted), "{what}");
        assert_eq!(q.publish(b"e"), Err(PublishError::Deleted), "{what}");
    }
}

/// `Sharing` is no state of a single-producer ring: a lifecycle word that says it is
/// corrupt there. Stops refuse it, and a remove still ends the ring.
#[test]
fn a_single_producer_ring_whose_word_says_sharing_can_be_removed() {
    use shmring_layout::lifecycle;
    use shmring_testkit::raw::RawSegment;
    let ns = Namespace::new("lone_single_sharing");
    let cfg = RingConfig {
        producer_mode: ProducerMode::Single,
        ..small(16)
    };
    let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
    let mut p = ring.producer().unwrap();
    assert_eq!(p.publish(b"e"), Ok(0));
    // Its owner a process that is gone: a live one would make the stop wait and fail too.
    let (dead, _) = shmring_testkit::fault::dead_process();
    let word = lifecycle::pack(3, shmring::RingState::Sharing as u32, dead);
    RawSegment::open(&ring).set_lifecycle_word(word);
    assert_eq!(
        ring.stop(),
        Err(shmring::LifecycleError::CorruptState(word)),
        "a stop of a corrupt word"
    );
    assert_eq!(p.publish(b"e"), Err(PublishError::Closed));
    Ring::remove(ns.name(), "r").expect("remove");
    assert_eq!(p.publish(b"e"), Err(PublishError::Deleted));
}

/// A multi-producer ring of 16 slots with an anonymous consumer, whose only producer (lone,
/// returned) published 0, 1 and 2, and whose lone position says one claim more (a claim of
/// 3 stored and not decided yet); the raw segment that wrote it.
fn lone_with_a_stored_claim(
    ns: &Namespace,
) -> (Ring, shmring::Consumer, shmring::Producer, RawSegment) {
    let ring = multi(ns, 16);
    let c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for s in 0..3 {
        assert_eq!(p.publish(b"e"), Ok(s));
    }
    assert_eq!(lone(&ring), Some(0));
    let raw = RawSegment::open(&ring);
    raw.set_producer_lone(0, 4);
    (ring, c, p, raw)
}

/// A repair's search for a hole nobody can name (a producer that died announcing its
/// claim) ends the lone claims first and reads the head from the counter: a lone position
/// may hold a last claim that a sharing refuses, whose sequences the counter hands out
/// again. Here the lone producer's position says one claim more than it published (as a
/// claim stored and not decided yet would): the repair tombstones that sequence as a hole
/// only once the counter stands past it, and the lone producer's next event comes after.
#[test]
fn a_repair_ends_the_lone_claims_before_it_looks_for_holes() {
    use shmring_layout::IN_FLIGHT_CLAIMING;
    let ns = Namespace::new("lone_repair");
    let (ring, mut c, mut p, raw) = lone_with_a_stored_claim(&ns);
    let (pid, start) = shmring_testkit::fault::dead_process();
    let word = raw.fabricate_dead_producer(1, pid, start, IN_FLIGHT_CLAIMING, 1);
    let repair = ring.repair_dead_producer(1, word);
    assert_eq!(repair.waiting, 0, "{repair:?}");
    assert_eq!(lone(&ring), None, "the repair ended the lone claims");
    assert_eq!(
        repair.tombstoned, 1,
        "sequence 3, claimed by nobody: {repair:?}"
    );
    assert_eq!(p.publish(b"e"), Ok(4), "after the hole, not into it");
    assert_eq!(poll_all(&mut c), [0, 1, 2, 4]);
    assert_eq!(c.stats().skipped, 1);
}

/// `Ring::tombstone` (a caller's repair of a hole) marks nothing a lone producer has
/// claimed while a sharing decides its last claim (as while a stop does): refused, its
/// sequences are handed out again from the counter, where a tombstone left in the slot
/// would be delivered in place of the next event. Here the lone position says one claim
/// more than was published (a claim stored, not decided yet) and a sharing's owner died
/// part-way: `Wait` until a second producer's claim finishes the sharing (which accepts
/// that claim: it reads the lone position), then the hole is marked, and consumers skip it.
#[test]
fn a_tombstone_waits_while_a_sharing_decides_a_lone_producers_claim() {
    use shmring::Tombstone;
    use shmring_layout::{lifecycle, RingState};
    let ns = Namespace::new("lone_tombstone");
    let (ring, mut c, mut p, raw) = lone_with_a_stored_claim(&ns);
    let (dead, _) = shmring_testkit::fault::dead_process();
    let word = raw.lifecycle_word();
    raw.set_lifecycle_word(lifecycle::next(word, RingState::Sharing as u32, dead));
    assert_eq!(
        ring.tombstone(3),
        Tombstone::Wait,
        "a lone claim a sharing still decides"
    );
    let mut second = ring.producer().unwrap();
    assert_eq!(second.publish(b"s"), Ok(4), "the counter takes over at 4");
    assert_eq!(lone(&ring), None);
    assert_eq!(
        ring.tombstone(3),
        Tombstone::Written,
        "accepted, never filled"
    );
    assert_eq!(p.publish(b"e"), Ok(5));
    assert_eq!(poll_all(&mut c), [0, 1, 2, 4, 5]);
    assert_eq!(c.stats().skipped, 1);
}
