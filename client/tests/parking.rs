//! Parking, in one process with threads: blocking consumers, producers parked on a full
//! ring, and the WakeSet. Cross-process versions live in the `shmring-tests` package.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use shmring::{
    ConsumerOptions, Fallback, Ring, RunExit, WaitOutcome, WaitStrategy, WakeReason, WakeSet,
};

use shmring_testkit::Namespace;

mod common;
use common::small;

/// Wait for `cond` with a deadline; the watchdog of every wait in these tests.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn every_strategy_delivers_everything_with_no_lost_wakeups() {
    let strategies = [
        WaitStrategy::Blocking,
        WaitStrategy::Adaptive,
        WaitStrategy::TimeoutBlocking {
            timeout: Duration::from_millis(5),
        },
        WaitStrategy::PhasedBackoff {
            spins: 10,
            yields: 2,
            fallback: Fallback::Park,
        },
        WaitStrategy::PhasedBackoff {
            spins: 10,
            yields: 2,
            fallback: Fallback::Sleep(Duration::from_micros(50)),
        },
        WaitStrategy::sleeping(),
        WaitStrategy::Yielding { spins: 10 },
    ];
    for wait in strategies {
        let ns = Namespace::concurrent("strategies");
        let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
        let mut c = ring
            .consumer(ConsumerOptions::anonymous().wait(wait))
            .unwrap();
        let n = 2_000u64;
        let consumer = thread::spawn(move || {
            let expect = std::cell::Cell::new(0u64);
            let exit = c
                .run(
                    |ev| {
                        assert_eq!(ev.read::<u64>(), Some(expect.get()));
                        expect.set(expect.get() + 1);
                    },
                    || expect.get() == n,
                )
                .unwrap();
            assert_eq!(exit, RunExit::Stopped);
            (expect.get(), c.stats())
        });
        let mut p = ring.producer().unwrap();
        for i in 0..n {
            p.publish(&i.to_le_bytes()).unwrap();
            if i % 97 == 0 {
                // Let the consumer go idle (and park) now and then.
                thread::sleep(Duration::from_micros(200));
            }
        }
        drop(p);
        let (got, stats) = consumer.join().unwrap();
        assert_eq!(got, n, "{wait:?}");
        assert_eq!(stats.net_wakeups, 0, "{wait:?} lost a wake-up");
        // Only a timeout shorter than the net can pass while the producer is merely slow to
        // wake; with the net as the only timeout, a late wake is one that never arrived.
        if !matches!(wait, WaitStrategy::TimeoutBlocking { .. }) {
            assert_eq!(stats.late_wakeups, 0, "{wait:?}: a wake did not arrive");
        }
        if matches!(
            wait,
            WaitStrategy::Blocking | WaitStrategy::TimeoutBlocking { .. }
        ) {
            assert!(stats.wakeups > 0, "{wait:?}: never woken from a park");
        }
    }
}

#[test]
fn timeout_blocking_returns_control() {
    let ns = Namespace::concurrent("timeout");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut c = ring
        .consumer(
            ConsumerOptions::anonymous().wait(WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_millis(2),
            }),
        )
        .unwrap();
    assert_eq!(c.wait().unwrap(), WaitOutcome::TimedOut);
    let mut p = ring.producer().unwrap();
    p.publish(&[1]).unwrap();
    assert_eq!(c.wait().unwrap(), WaitOutcome::Ready);
}

#[test]
fn a_producer_on_a_full_ring_parks_and_resumes() {
    let ns = Namespace::concurrent("fullpark");
    let ring = Ring::create(ns.name(), "r", &small(4)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let r2 = ring.clone();
    let producer = thread::spawn(move || {
        let mut p = r2.producer().unwrap();
        for i in 0..40u64 {
            p.publish(&i.to_le_bytes()).unwrap();
        }
        p.stats()
    });
    eventually("the producer to park", || {
        ring.info()
            .producers
            .first()
            .is_some_and(|p| p.stats.parks > 0)
    });
    let mut got = Vec::new();
    eventually("all events", || {
        c.poll_once(|ev| got.push(ev.read::<u64>().unwrap()))
            .unwrap();
        got.len() == 40
    });
    assert_eq!(got, (0..40).collect::<Vec<_>>());
    let stats = producer.join().unwrap();
    assert!(stats.parks > 0);
    // The consumer's commits woke it: no park ended by a timeout after the wake line moved
    // (a wake that never arrived) or by the net with room there (a wake lost).
    assert_eq!(stats.late_wakeups, 0, "{stats:?}");
    assert_eq!(stats.net_wakeups, 0, "{stats:?}");
}

#[test]
fn wakeset_over_64_rings_wakes_on_any_publish() {
    let ns = Namespace::concurrent("wakeset");
    let rings: Vec<Ring> = (0..64)
        .map(|i| Ring::create(ns.name(), &format!("r{i}"), &small(4)).unwrap())
        .collect();
    let mut consumers: Vec<_> = rings
        .iter()
        .map(|r| r.consumer(ConsumerOptions::anonymous()).unwrap())
        .collect();
    let parked = Arc::new(AtomicBool::new(false));
    let parked2 = parked.clone();
    let stepper = thread::spawn(move || {
        let mut set = WakeSet::new();
        for c in &consumers {
            set.add(c).unwrap();
        }
        assert_eq!(set.len(), 64);
        let mut got = Vec::new();
        while got.len() < 3 {
            let mut any = false;
            for (i, c) in consumers.iter_mut().enumerate() {
                any |= c.poll_once(|ev| got.push((i, ev.bytes()[0]))).unwrap() > 0;
            }
            if !any {
                parked2.store(true, Ordering::SeqCst);
                set.park_unless(|| consumers.iter().any(|c| c.has_pending()));
            }
        }
        (got, set.stats())
    });
    let mut producers: Vec<_> = rings.iter().map(|r| r.producer().unwrap()).collect();
    for (k, ring) in [(5usize, 1u8), (63, 2), (0, 3)] {
        eventually("the stepper to park", || parked.load(Ordering::SeqCst));
        parked.store(false, Ordering::SeqCst);
        producers[k].publish(&[ring]).unwrap();
    }
    let (got, stats) = stepper.join().unwrap();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    assert_eq!(got_sorted, vec![(0, 3), (5, 1), (63, 2)]);
    assert_eq!(stats.net_wakeups, 0, "{stats:?}");
    assert_eq!(
        stats.late_wakeups, 0,
        "a publish moved a wake word but its wake did not arrive: {stats:?}"
    );
    assert!(stats.wakeups > 0, "never woken by a publish: {stats:?}");
}

#[test]
fn park_until_a_past_deadline_returns_at_once() {
    let ns = Namespace::concurrent("deadline");
    let ring = Ring::create(ns.name(), "r", &small(4)).unwrap();
    let mut set = WakeSet::new();
    set.add_ring(&ring).unwrap();
    set.add_ring(&ring).unwrap();
    assert_eq!(set.len(), 1, "a ring is added once");
    let past = Instant::now();
    assert_eq!(set.park_until(past, || false), WakeReason::Deadline);
    assert_eq!(set.park_until(past, || true), WakeReason::Ready);
    assert_eq!(
        set.park_until(Instant::now() + Duration::from_millis(1), || false),
        WakeReason::Deadline
    );
}

/// A durable consumer whose holder died between its commit and its wake is resumed before
/// any broker sweeps: the resume wakes the producers parked for the room that commit freed
/// (as the broker does at a death it sees), so their park ends by a wake, not at its 50 ms
/// net. The entry is laid down as this process's, at 0 behind a full ring; the producer
/// parks for room; the entry moves on by one (the commit) and its owner becomes a dead
/// process, with no wake; then this process resumes the name. Without the resume's wake
/// every try's park ends at the net with the wake line unmoved (`net_wakeups`); a resume
/// later than the net (a loaded machine) would too, so each of three rings gets one try.
#[test]
fn resuming_a_dead_holders_durable_consumer_wakes_the_producers_parked_for_room() {
    use shmring_testkit::parked::{in_one_try, woken, ParkedProducer};
    let ns = Namespace::concurrent("resume-wakes");
    let (dead, _) = shmring_testkit::fault::dead_process();
    // A resume later than the net counts at the net, a wake after it late, and a park that
    // found the room before it slept counts no park: try again.
    in_one_try(
        &["r0", "r1", "r2"],
        "no park for room ended by a wake",
        |r| {
            let ring = Ring::create(ns.name(), r, &small(16)).expect("create");
            let raw = shmring_testkit::raw::RawSegment::open(&ring);
            let producer = ParkedProducer::behind_a_live_consumer(&ring, &raw, "audit");
            ParkedProducer::commit_one_and_die(&raw, dead);
            let c = ring
                .consumer(ConsumerOptions::durable("audit"))
                .expect("resume the durable consumer");
            assert_eq!(c.next_sequence(), 1, "resumed where its holder committed");
            producer.join()
        },
        woken,
    );
}

/// A process that waits on a ring without attaching to it (`Ring::wait_published`, a
/// `WakeSet`) writes its fence mode into the ring before it parks, as an attach does: a
/// process without membarrier parks with a plain fence, and the publishers must then pay
/// the full one, or a publish and a park can miss each other (a wake lost to the 50 ms
/// net). The mode starts unset, so either mode written shows.
#[test]
fn waiting_on_a_ring_without_attaching_writes_the_fence_mode() {
    let ns = Namespace::concurrent("wait-mode");
    for how in ["wait_published", "wake_set"] {
        let ring = Ring::create(ns.name(), how, &small(16)).expect("create");
        assert_eq!(ring.fence_mode(), Some(shmring::FenceMode::Unset), "{how}");
        if how == "wait_published" {
            assert!(!ring.wait_published(0, Duration::from_millis(1)));
        } else {
            WakeSet::new().add_ring(&ring).expect("add");
        }
        assert_ne!(ring.fence_mode(), Some(shmring::FenceMode::Unset), "{how}");
    }
}

/// A gating consumer that goes away (an anonymous one dropped, a durable one unsubscribed)
/// frees the room the producers parked for: its detach wakes them, so their park ends by a
/// wake, not at its 50 ms net. Each form gets three tries (a wake later than the net, on a
/// loaded machine, counts as none).
#[test]
fn a_gating_consumer_that_detaches_wakes_the_producers_parked_for_room() {
    use shmring_testkit::parked::{in_one_try, woken, ParkedProducer};
    let ns = Namespace::concurrent("detach-wakes");
    for (form, options, rings) in [
        ("dropped", ConsumerOptions::anonymous(), ["d0", "d1", "d2"]),
        (
            "unsubscribed",
            ConsumerOptions::durable("gone"),
            ["u0", "u1", "u2"],
        ),
    ] {
        in_one_try(
            &rings,
            &format!("no park for room ended by a wake ({form})"),
            |r| {
                let ring = Ring::create(ns.name(), r, &small(16)).expect("create");
                let raw = shmring_testkit::raw::RawSegment::open(&ring);
                let c = ring.consumer(options.clone()).expect("attach");
                let producer = ParkedProducer::park_behind(&ring, &raw);
                if form == "unsubscribed" {
                    c.unsubscribe();
                } else {
                    drop(c);
                }
                producer.join()
            },
            woken,
        );
    }
}

/// The states a member's entry is left in when its member dies holding a claim: ACTIVE, or
/// RESUMING (a member that died delivering an adopted claim), by name (the status name of
/// RESUMING is ATTACHING).
const HELD_STATES: [(&str, u32); 2] = [
    ("ACTIVE", shmring_layout::consumer_state::ACTIVE),
    ("RESUMING", shmring_layout::consumer_state::RESUMING),
];

/// Member entry `index` commits up to `next` and dies holding the entry in `state`: its
/// word names `dead`, a process that no longer runs. Nothing is woken.
fn die_holding(
    raw: &shmring_testkit::raw::RawSegment,
    index: u32,
    state: u32,
    next: u64,
    dead: u32,
) {
    use shmring_layout::owned_word;
    let w = raw.consumer_word(index);
    raw.set_consumer_word(
        index,
        owned_word::pack(owned_word::generation(w), state, owned_word::owner(w)),
    );
    shmring_testkit::parked::ParkedProducer::commit_and_die(raw, index, next, dead);
}

/// The same gap in a worker group: member `a` holds the claim of sequence 0 (taken as it
/// joined), a producer parks for room behind it, then `a` commits its claim and dies with
/// no wake, holding its entry ACTIVE, or RESUMING (as a member that died delivering an
/// adopted claim leaves it). Member `b` joins before any broker sweep and carries on with
/// `a`'s entry: the takeover wakes the parked producer, which would otherwise wait for its
/// net (the broker would never see `a` dead once `b` holds the entry). One try per ring,
/// as above.
#[test]
fn a_member_carrying_on_with_a_dead_members_entry_wakes_the_producers_parked_for_room() {
    use shmring_testkit::parked::{in_one_try, woken, ParkedProducer};
    for (label, state) in HELD_STATES {
        let ns = Namespace::concurrent("member-takeover-wakes");
        let (dead, _) = shmring_testkit::fault::dead_process();
        let what = format!("{label}: no park for room ended by a wake");
        let attempt = |r: &str| {
            let ring = Ring::create(ns.name(), r, &small(16)).expect("create");
            let raw = shmring_testkit::raw::RawSegment::open(&ring);
            let a = ring
                .consumer(ConsumerOptions::worker("w"))
                .expect("member a");
            let producer = ParkedProducer::park_behind(&ring, &raw);
            die_holding(&raw, a.index(), state, 1, dead);
            let b = ring
                .consumer(ConsumerOptions::worker("w"))
                .expect("member b");
            assert_eq!(b.index(), a.index(), "b carries on with a's entry");
            assert_eq!(b.next_sequence(), 1, "where a committed");
            let stats = producer.join();
            // `a`'s handle drops after `b` took its entry: it leaves the entry alone.
            drop((a, b));
            stats
        };
        in_one_try(&["r0", "r1", "r2"], &what, attempt, woken);
    }
}

/// The running member's side of the same takeover: member `b` has delivered every event of
/// its own claims, and `a`, which holds sequence 0 (claimed as it joined), commits it and
/// dies with no wake, holding its entry ACTIVE or RESUMING, a producer parked for room
/// behind it. `b` adopts `a`'s entry on one of its idle polls (`adopt_left_claims`) and the
/// takeover wakes the producer, whose event `b` then delivers. One try per ring, as above.
#[test]
fn a_running_member_adopting_a_dead_members_entry_wakes_the_producers_parked_for_room() {
    use shmring_layout::{consumer_state, owned_word};
    use shmring_testkit::parked::{in_one_try, woken, ParkedProducer};
    for (label, state) in HELD_STATES {
        let ns = Namespace::concurrent("member-adopt-wakes");
        let (dead, _) = shmring_testkit::fault::dead_process();
        let what = format!("{label}: no park for room ended by a wake");
        let attempt = |r: &str| {
            let ring = Ring::create(ns.name(), r, &small(16)).expect("create");
            let raw = shmring_testkit::raw::RawSegment::open(&ring);
            let worker = || ConsumerOptions::worker("w").batch_cap(1);
            // Claims of one: `a` claims sequence 0 as it joins, `b` sequence 1.
            let a = ring.consumer(worker()).expect("member a");
            let mut b = ring.consumer(worker()).expect("member b");
            let mut p = ring.producer().expect("producer");
            for v in 0..ring.capacity() {
                p.publish(&v.to_le_bytes()).expect("publish");
            }
            drop(p);
            let mut got = Vec::new();
            for _ in 0..1000 {
                if got.len() == 15 {
                    break;
                }
                b.poll_once(|ev| got.push(ev.sequence())).expect("b polls");
            }
            assert_eq!(got, (1..16).collect::<Vec<_>>(), "b delivers its claims");
            // The ring is full behind `a` at 0.
            let producer = ParkedProducer::park_on_full(&ring, &raw);
            die_holding(&raw, a.index(), state, 1, dead);
            // Polled without a pause: an adoption later than the producer's 50 ms net
            // leaves the wait to the net (a try that fails, not the test). The scans come
            // every 1024 idle polls; slot 1 keeps its event, so `b` adopts `a`'s entry
            // whether or not the net let the producer publish first.
            let adopted = || {
                let left = raw.consumer_word(a.index());
                owned_word::state(left) == consumer_state::FREE
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            while !(got.contains(&16) && adopted()) {
                assert!(
                    Instant::now() < deadline,
                    "b never adopted a's entry and delivered sequence 16"
                );
                b.poll_once(|ev| got.push(ev.sequence())).expect("b polls");
            }
            let stats = producer.join();
            // `a`'s handle drops after its entry was taken over: it leaves the entry alone.
            drop((a, b));
            stats
        };
        in_one_try(&["r0", "r1", "r2"], &what, attempt, woken);
    }
}

/// The consumer line of the same resume: a consumer `after` a durable consumer parks
/// waiting for it; the upstream's entry moves on by one (the commit) and its owner becomes
/// a dead process, with no wake; then this process resumes the name. The downstream must be
/// woken (a park of its ended by a wake), not left to its net: a net that ends with the
/// upstream's entry changed counts nothing (see `Consumer::event_waiting`), so the test
/// reads the downstream's wake-ups from its entry before and after. One try per ring, as
/// above (a resume later than the downstream's net lets the net deliver the event).
#[test]
fn resuming_a_dead_holders_durable_consumer_wakes_the_consumers_parked_behind_it() {
    resume_wakes_the_consumer_behind(false);
}

/// The same, with the holder killed inside its commit's wake: after the reset of its
/// line's waiter count and before the wake, so that nobody is counted there while the
/// downstream sleeps. The resume wakes the line all the same.
#[test]
fn resuming_a_holder_killed_inside_its_wake_wakes_the_consumers_parked_behind_it() {
    resume_wakes_the_consumer_behind(true);
}

fn resume_wakes_the_consumer_behind(killed_inside_its_wake: bool) {
    use shmring_testkit::parked::{in_one_try, ParkedProducer};
    use shmring_testkit::ParkedConsumer;
    let ns = Namespace::concurrent("resume-wakes-down");
    let (dead, _) = shmring_testkit::fault::dead_process();
    let attempt = |r: &str| {
        let ring = Ring::create(ns.name(), r, &small(16)).expect("create");
        let raw = shmring_testkit::raw::RawSegment::open(&ring);
        ParkedProducer::lay_down_live_consumer(&raw, "audit");
        let down = blocking_after(&ring, "audit");
        let index = down.index();
        // Published before the downstream runs, so that no wake from the publish reaches
        // it after the count below is read.
        let mut p = ring.producer().expect("producer");
        p.publish(&7u64.to_le_bytes()).expect("publish");
        let down = ParkedConsumer::spawn(down);
        // Parked with the event published: its upstream has not committed it.
        down.wait_parked_at(&ring, 0);
        let before = wakeups_of(&ring, index);
        ParkedProducer::commit_one_and_die(&raw, dead);
        if killed_inside_its_wake {
            assert_eq!(raw.consumer_waiters(0), 1, "parked on the upstream's entry");
            raw.reset_consumer_waiters(0);
        }
        let c = ring
            .consumer(ConsumerOptions::durable("audit"))
            .expect("resume the durable consumer");
        assert_eq!(c.next_sequence(), 1, "resumed where its holder committed");
        down.wait_parked_at(&ring, 1);
        let woken = wakeups_of(&ring, index) > before;
        let (exit, seen, _) = down.finish(&ring);
        assert_eq!(exit, RunExit::Closed);
        assert_eq!(seen, vec![(0, 7)]);
        woken
    };
    in_one_try(
        &["r0", "r1", "r2"],
        "the downstream was never woken for the event, only its net",
        attempt,
        |&w| w,
    );
}

/// An anonymous `Blocking` consumer of `ring` reading after the consumer named `upstream`.
fn blocking_after(ring: &Ring, upstream: &str) -> shmring::Consumer {
    let opts = ConsumerOptions::anonymous()
        .after([upstream])
        .wait(WaitStrategy::Blocking);
    ring.consumer(opts)
        .unwrap_or_else(|e| panic!("attach after {upstream}: {e}"))
}

/// The wake-ups (parks ended by a wake) that consumer entry `index` has counted.
fn wakeups_of(ring: &Ring, index: u32) -> u64 {
    let info = ring.info();
    let e = info.consumers.iter().find(|e| e.index == index);
    e.expect("the consumer's entry").stats.wakeups
}

/// The consumer line of a member's takeover: member `a` delivers sequence 0 and claims 1
/// and 2; a consumer `after` the group takes 0 and parks for the group at 1. `a` dies having
/// decided to skip sequence 1 (step A of a skip, see `policy`), with no wake. Member `b`
/// joins, carries on with `a`'s entry and finishes the skip, which moves the group's floor
/// past sequence 1 while the claim goes on (no new claim, whose own wake would hide a
/// missing one): the downstream must be woken, not left to its net. One try per ring, as
/// above.
#[test]
fn a_member_finishing_a_dead_members_skip_wakes_the_consumers_after_the_group() {
    use shmring_testkit::parked::{in_one_try, ParkedProducer};
    use shmring_testkit::ParkedConsumer;
    /// The decision of a skip in a poison record (`policy::begin_skip`).
    const SKIPPING: u64 = 1 << 63;
    let ns = Namespace::concurrent("member-skip-wakes-down");
    let (dead, _) = shmring_testkit::fault::dead_process();
    let attempt = |r: &str| {
        let ring = Ring::create(ns.name(), r, &small(16)).expect("create");
        let raw = shmring_testkit::raw::RawSegment::open(&ring);
        // Nothing published: `a` claims sequence 0 alone as it joins.
        let mut a = ring
            .consumer(ConsumerOptions::worker("w"))
            .expect("member a");
        let down = blocking_after(&ring, "w");
        let index = down.index();
        let mut p = ring.producer().expect("producer");
        for v in 10..13u64 {
            p.publish(&v.to_le_bytes()).expect("publish");
        }
        let mut got = Vec::new();
        a.poll_once(|ev| got.push(ev.sequence())).expect("a polls");
        assert_eq!(
            got,
            vec![0],
            "a delivers its first claim, then claims 1 and 2"
        );
        let down = ParkedConsumer::spawn(down);
        down.wait_parked_at(&ring, 1);
        let before = wakeups_of(&ring, index);
        raw.set_consumer_poison(a.index(), 2 | SKIPPING, 0);
        ParkedProducer::commit_and_die(&raw, a.index(), 1, dead);
        let mut b = ring
            .consumer(ConsumerOptions::worker("w"))
            .expect("member b");
        assert_eq!(b.index(), a.index(), "b carries on with a's entry");
        assert_eq!(b.next_sequence(), 2, "past the skip a had begun");
        down.wait_parked_at(&ring, 2);
        let woken = wakeups_of(&ring, index) > before;
        got.clear();
        b.poll_once(|ev| got.push(ev.sequence())).expect("b polls");
        assert_eq!(got, vec![2], "b delivers the rest of a's claim");
        let (exit, seen, _) = down.finish(&ring);
        assert_eq!(exit, RunExit::Closed);
        assert_eq!(seen, vec![(0, 10), (1, 11), (2, 12)]);
        drop((a, b));
        woken
    };
    in_one_try(
        &["r0", "r1", "r2"],
        "the downstream was never woken past the skip, only its net",
        attempt,
        |&w| w,
    );
}

/// A consumer `after` an upstream that has not committed parks on that upstream's entry,
/// where its commits wake it and nothing else does: publishing behind it issues no wake at
/// all (the producer pays one load per publish, as with nobody parked), another consumer's
/// commits wake nobody, and the upstream's commit then wakes it, with no park ended by the
/// net. Once the upstream is released, publishes wake it again. In each producer mode and
/// on a fixed-size ring; the wake-up counts in one of three tries, as above (a commit that
/// lands as the downstream's net ends is seen without a wake).
#[test]
fn a_downstream_parked_behind_its_upstream_is_woken_by_its_commits_not_by_publishes() {
    use shmring::{ProducerMode, RingConfig};
    use shmring_testkit::parked::in_one_try;
    use shmring_testkit::ParkedConsumer;
    let ns = Namespace::concurrent("downstream-line");
    let single = RingConfig {
        producer_mode: ProducerMode::Single,
        ..small(64)
    };
    let configs = [
        ("single", single.clone()),
        (
            "multi",
            RingConfig {
                producer_mode: ProducerMode::Multi,
                ..small(64)
            },
        ),
        (
            "fixed",
            RingConfig {
                event_size: Some(8),
                ..single
            },
        ),
    ];
    for (mode, config) in configs {
        let attempt = |name: &str| {
            let ring = Ring::create(ns.name(), name, &config).expect("create");
            let mut up = ring.consumer(ConsumerOptions::durable("up")).expect("up");
            let mut other = ring.consumer(ConsumerOptions::anonymous()).expect("other");
            let down = blocking_after(&ring, "up");
            let index = down.index();
            let down = ParkedConsumer::spawn(down);
            down.wait_parked_at(&ring, 0);
            let mut p = ring.producer().expect("producer");
            let info = ring.info();
            let (publish_wakes, entry_wakes) = (info.consumer_wakes, info.downstream_wakes);
            for v in 0..20u64 {
                p.publish(&v.to_le_bytes()).expect("publish");
            }
            assert_eq!(
                ring.info().consumer_wakes,
                publish_wakes,
                "{mode}: a publish woke the downstream its upstream holds"
            );
            let parks = wakeups_of(&ring, index);
            assert_eq!(other.poll_once(|_| {}).expect("other polls"), 20);
            assert_eq!(
                (ring.info().downstream_wakes, wakeups_of(&ring, index)),
                (entry_wakes, parks),
                "{mode}: another consumer's commit woke the downstream"
            );
            assert_eq!(up.poll_once(|_| {}).expect("up polls"), 20);
            down.wait_parked_at(&ring, 20);
            let woken = wakeups_of(&ring, index) > parks;
            release(&ring, "up");
            p.publish(&20u64.to_le_bytes())
                .expect("publish after the release");
            down.wait_parked_at(&ring, 21);
            let (exit, seen, stats) = down.finish(&ring);
            assert_eq!(exit, RunExit::Closed, "{mode}");
            assert_eq!(seen, (0..21).map(|v| (v, v)).collect::<Vec<_>>(), "{mode}");
            drop((up, other));
            (woken, stats.net_wakeups)
        };
        let names = ["0", "1", "2"].map(|k| format!("{mode}{k}"));
        in_one_try(
            &names.each_ref().map(String::as_str),
            &format!("{mode}: the upstream's commit did not wake the downstream, or its net did"),
            attempt,
            |&(woken, lost)| woken && lost == 0,
        );
    }
}

/// Release the consumer named `name` from gating, as the broker does.
fn release(ring: &Ring, name: &str) {
    let e = ring.info().consumers.into_iter().find(|c| c.name == name);
    let e = e.expect("the consumer's entry");
    assert!(ring.release_consumer(e.index, e.word), "release {name}");
}

/// Each `wait` with `TimeoutBlocking` waits its whole timeout, whatever idle time came
/// before it: a run that a `stop` predicate ended while the consumer was idle does not
/// leave its idle time to shorten the next wait. Before, the next `wait` timed out early.
#[test]
fn a_wait_after_an_idle_run_waits_its_whole_timeout() {
    let ns = Namespace::concurrent("park_stale_idle");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let timeout = Duration::from_secs(1);
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().wait(WaitStrategy::TimeoutBlocking { timeout }))
        .unwrap();
    let idle = Instant::now();
    let exit = c
        .run(|_| {}, || idle.elapsed() >= Duration::from_millis(200))
        .unwrap();
    assert_eq!(exit, RunExit::Stopped);
    let start = Instant::now();
    assert_eq!(c.wait(), Ok(WaitOutcome::TimedOut));
    assert!(
        start.elapsed() >= timeout,
        "timed out after {:?}",
        start.elapsed()
    );
}
