//! Consumer dependencies in one process (`ConsumerOptions::after`): the barrier of a
//! diamond, the attach errors, an upstream that fails, re-attaches, is released or freed,
//! and a parked downstream woken by its upstream's commit. The multi-process kill test is
//! `tests/tests/graph_kill.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use shmring::{
    AttachError, ConsumerOptions, HealthState, HealthThresholds, PollError, ProducerMode, Ring,
    RingConfig, WaitOutcome, WaitStrategy,
};

use shmring_testkit::Namespace;

mod common;
use common::{graph_ring, health_now, poll_all, publish_range, small};

/// A watchdog for waits that must end: far beyond any honest run, never a timing assertion.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Durable `a`, and `c` after it with a `Blocking` wait.
fn upstream_and_blocking_downstream(ring: &Ring) -> (shmring::Consumer, shmring::Consumer) {
    let a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let c = ring
        .consumer(
            ConsumerOptions::durable("c")
                .after(["a"])
                .wait(WaitStrategy::Blocking),
        )
        .unwrap();
    (a, c)
}

/// Release the consumer named `name` from gating, as the broker does.
fn release(ring: &Ring, name: &str) {
    let e = ring
        .info()
        .consumers
        .into_iter()
        .find(|c| c.name == name)
        .expect("the consumer's entry");
    assert!(ring.release_consumer(e.index, e.word), "release {name}");
}

/// Until a consumer of `ring` counts itself parked (raised the waiter count).
fn until_parked(ring: &Ring) {
    let watchdog = std::time::Instant::now();
    while ring.info().consumer_waiters == 0 {
        assert!(watchdog.elapsed() < WATCHDOG, "watchdog: nobody parked");
        std::thread::yield_now();
    }
}

fn next_of(ring: &Ring, name: &str) -> u64 {
    ring.info()
        .consumers
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.next)
        .unwrap_or_else(|| panic!("no consumer {name}"))
}

/// The error of an attach that must be refused.
trait Refused {
    fn refused(self) -> AttachError;
}

impl Refused for Result<shmring::Consumer, AttachError> {
    fn refused(self) -> AttachError {
        match self {
            Ok(c) => panic!("attached consumer {} that must be refused", c.index()),
            Err(e) => e,
        }
    }
}

#[test]
fn a_diamond_downstream_never_passes_either_upstream() {
    const N: u64 = 2_000;
    let ns = Namespace::concurrent("deps-diamond");
    let ring = graph_ring(&ns, 4);
    let a = ring
        .consumer(ConsumerOptions::durable("a").batch_cap(3))
        .unwrap();
    let b = ring
        .consumer(ConsumerOptions::durable("b").batch_cap(7))
        .unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::durable("c").after(["a", "b"]))
        .unwrap();
    let info = ring.info();
    let idx = |n: &str| info.consumers.iter().find(|c| c.name == n).unwrap().index;
    let cinfo = info.consumers.iter().find(|c| c.name == "c").unwrap();
    let mut ups = cinfo.upstream.clone();
    ups.sort_unstable();
    assert_eq!(ups, {
        let mut v = vec![idx("a"), idx("b")];
        v.sort_unstable();
        v
    });

    let done = Arc::new(AtomicBool::new(false));
    let upstream = |mut u: shmring::Consumer| {
        let done = done.clone();
        std::thread::spawn(move || {
            u.run(
                |_| std::thread::yield_now(),
                || done.load(Ordering::Relaxed),
            )
            .unwrap();
        })
    };
    let (ta, tb) = (upstream(a), upstream(b));
    let producer = {
        let ring = Ring::open(ring.namespace(), ring.name()).unwrap();
        std::thread::spawn(move || publish_range(&ring, 0..N))
    };
    let mut seen = 0u64;
    let watchdog = std::time::Instant::now();
    while seen < N {
        assert!(
            watchdog.elapsed() < WATCHDOG,
            "watchdog: c saw {seen} of {N}"
        );
        c.poll_once(|ev| {
            let s = ev.sequence();
            let (na, nb) = (next_of(&ring, "a"), next_of(&ring, "b"));
            assert!(
                s < na && s < nb,
                "c was handed {s} before a ({na}) and b ({nb}) committed past it"
            );
            assert_eq!(s, seen, "in order, each once");
            seen += 1;
        })
        .unwrap();
    }
    done.store(true, Ordering::Relaxed);
    for t in [ta, tb, producer] {
        t.join().unwrap();
    }
}

#[test]
fn an_unknown_upstream_is_refused_and_leaves_no_entry() {
    let ns = Namespace::concurrent("deps-unknown");
    let ring = graph_ring(&ns, 4);
    let _a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let err = ring
        .consumer(ConsumerOptions::durable("c").after(["a", "nope"]))
        .refused();
    assert_eq!(
        err,
        AttachError::UnknownUpstream {
            name: "nope".into()
        }
    );
    // An anonymous consumer, though durable, is not nameable: only names are.
    assert_eq!(ring.info().consumers.len(), 1);
}

#[test]
fn a_consumer_naming_itself_is_refused() {
    let ns = Namespace::concurrent("deps-self");
    let ring = graph_ring(&ns, 4);
    let err = ring
        .consumer(ConsumerOptions::durable("a").after(["a"]))
        .refused();
    assert_eq!(err, AttachError::SelfUpstream { name: "a".into() });
    assert!(ring.info().consumers.is_empty());
}

#[test]
fn more_upstreams_than_an_entry_records_are_refused() {
    let ns = Namespace::concurrent("deps-many");
    let ring = graph_ring(&ns, 8);
    let names = ["u0", "u1", "u2", "u3", "u4"];
    let _ups: Vec<_> = names
        .iter()
        .map(|n| ring.consumer(ConsumerOptions::durable(*n)).unwrap())
        .collect();
    let err = ring
        .consumer(ConsumerOptions::durable("c").after(names))
        .refused();
    assert_eq!(
        err,
        AttachError::TooManyUpstreams {
            max: shmring_layout::MAX_UPSTREAM
        }
    );
    // A name given twice counts once.
    let c = ring
        .consumer(ConsumerOptions::durable("c").after(["u0", "u1", "u2", "u3", "u0"]))
        .unwrap();
    drop(c);
}

#[test]
fn a_cycle_is_refused_and_the_entry_given_back() {
    let ns = Namespace::concurrent("deps-cycle");
    let ring = graph_ring(&ns, 4);
    publish_range(&ring, 0..0);
    let a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let b = ring
        .consumer(ConsumerOptions::durable("b").after(["a"]))
        .unwrap();
    let c = ring
        .consumer(ConsumerOptions::durable("c").after(["b"]))
        .unwrap();
    drop(a);
    publish_range(&ring, 0..3);

    // a -> b -> a
    let err = ring
        .consumer(ConsumerOptions::durable("a").after(["b"]))
        .refused();
    assert_eq!(
        err,
        AttachError::Cycle {
            names: vec!["a".into(), "b".into(), "a".into()]
        }
    );
    // a -> c -> b -> a
    let err = ring
        .consumer(ConsumerOptions::durable("a").after(["c"]))
        .refused();
    assert_eq!(
        err,
        AttachError::Cycle {
            names: vec!["a".into(), "c".into(), "b".into(), "a".into()]
        }
    );
    // The entry was given back as it was: detached, holding its events, no dependency.
    let info = ring.info();
    let ai = info.consumers.iter().find(|c| c.name == "a").unwrap();
    assert_eq!((ai.state, ai.next), ("DETACHED", 0));
    assert!(ai.upstream.is_empty());
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    assert_eq!(poll_all(&mut a), vec![0, 1, 2]);
    drop((b, c));
}

#[test]
fn a_failed_upstream_holds_its_downstream_until_it_comes_back() {
    let ns = Namespace::concurrent("deps-failed");
    let ring = graph_ring(&ns, 4);
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::durable("c").after(["a"]))
        .unwrap();
    publish_range(&ring, 0..6);
    let r = a.poll_once(|ev| assert!(ev.sequence() != 3, "a fails on 3"));
    assert_eq!(r, Err(PollError::HandlerPanicked { sequence: 3 }));
    drop(a);
    assert_eq!(poll_all(&mut c), vec![0, 1, 2]);
    assert!(
        !c.has_pending(),
        "held below a: nothing waits, so `wait` parks"
    );
    assert_eq!(c.poll_once(|_| {}).unwrap(), 0);

    // a re-attaches (a new tenure of its entry: a new word) and goes on.
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    assert_eq!(a.next_sequence(), 3);
    a.poll_once(|_| {}).unwrap();
    assert!(c.has_pending());
    assert_eq!(poll_all(&mut c), vec![3, 4, 5]);
    // And again after a plain detach and re-attach.
    drop(a);
    publish_range(&ring, 6..8);
    assert_eq!(poll_all(&mut c), Vec::<u64>::new());
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    a.poll_once(|_| {}).unwrap();
    assert_eq!(poll_all(&mut c), vec![6, 7]);
}

#[test]
fn a_released_upstream_no_longer_holds_its_downstream() {
    let ns = Namespace::concurrent("deps-released");
    let ring = graph_ring(&ns, 4);
    let a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::durable("c").after(["a"]))
        .unwrap();
    drop(a);
    publish_range(&ring, 0..4);
    assert_eq!(poll_all(&mut c), Vec::<u64>::new());
    release(&ring, "a");
    assert_eq!(poll_all(&mut c), vec![0, 1, 2, 3]);
}

#[test]
fn an_unsubscribed_upstream_ends_its_downstream_with_upstream_lost() {
    let ns = Namespace::concurrent("deps-lost");
    let ring = graph_ring(&ns, 4);
    let a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::durable("c").after(["a"]))
        .unwrap();
    publish_range(&ring, 0..2);
    a.unsubscribe();
    // Its entry taken by another consumer meanwhile, with a position ahead of a's.
    let _other = ring.consumer(ConsumerOptions::durable("other")).unwrap();
    let lost = PollError::UpstreamLost { name: "a".into() };
    assert_eq!(
        c.poll_once(|_| panic!("nothing passes a lost upstream")),
        Err(lost.clone())
    );
    assert_eq!(c.poll_once(|_| {}), Err(lost));
}

/// On a ring where nothing was ever published, in either producer mode: a caught-up
/// downstream's idle poll, and its last look before parking, still find the upstream gone.
#[test]
fn an_idle_downstream_sees_its_upstream_lost_in_either_producer_mode() {
    for (mode, tag) in [(ProducerMode::Single, "sp"), (ProducerMode::Multi, "mp")] {
        let ns = Namespace::concurrent(&format!("deps-idle-lost-{tag}"));
        let config = RingConfig {
            max_consumers: 4,
            producer_mode: mode,
            ..small(64)
        };
        let ring = shmring::Ring::create(ns.name(), "r", &config).expect("create ring r");
        let a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
        let mut c = ring
            .consumer(ConsumerOptions::durable("c").after(["a"]))
            .unwrap();
        a.unsubscribe();
        let _other = ring.consumer(ConsumerOptions::durable("other")).unwrap();
        assert!(c.has_pending(), "{tag}: the lost upstream reads as pending");
        assert_eq!(
            c.poll_once(|_| panic!("nothing was published")),
            Err(PollError::UpstreamLost { name: "a".into() }),
            "{tag}"
        );
    }
}

#[test]
fn a_parked_downstream_is_woken_by_its_upstreams_commit() {
    let ns = Namespace::concurrent("deps-park");
    let ring = graph_ring(&ns, 4);
    let (mut a, mut c) = upstream_and_blocking_downstream(&ring);
    for round in 0..20u64 {
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let outcome = c.wait();
            let mut got = Vec::new();
            c.poll_once(|ev| got.push(ev.sequence())).unwrap();
            tx.send(()).unwrap();
            (c, outcome, got)
        });
        // Published first: c must stay parked, held by a, until a commits.
        publish_range(&ring, round..round + 1);
        until_parked(&ring);
        assert_eq!(a.poll_once(|_| {}).unwrap(), 1);
        rx.recv_timeout(WATCHDOG)
            .expect("watchdog: c was not woken");
        let (back, outcome, got) = waiter.join().unwrap();
        c = back;
        assert_eq!(outcome.unwrap(), WaitOutcome::Ready);
        assert_eq!(got, vec![round]);
    }
    assert_eq!(
        c.stats().net_wakeups,
        0,
        "every park ended by the upstream's wake, none by the net"
    );
}

/// A downstream waiting behind an upstream that does not move learns that its ring was
/// deleted: `wait` returns `Deleted`, as every other call of an attached client does.
/// Before, it saw nothing to hand over and the ring not closed, and parked again for ever.
#[test]
fn a_waiting_downstream_held_by_its_upstream_learns_that_the_ring_was_deleted() {
    let ns = Namespace::concurrent("deps-deleted");
    let ring = graph_ring(&ns, 4);
    let (_a, mut c) = upstream_and_blocking_downstream(&ring);
    publish_range(&ring, 0..1);
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let outcome = c.wait();
        let _ = tx.send(outcome);
        c
    });
    until_parked(&ring);
    Ring::remove(ns.name(), ring.name()).expect("remove the ring");
    let outcome = rx
        .recv_timeout(WATCHDOG)
        .expect("watchdog: the downstream still waits on a deleted ring");
    assert_eq!(outcome, Err(PollError::Deleted));
    waiter.join().expect("the waiter");
}

#[test]
fn a_downstream_held_by_its_upstream_is_not_stalled_its_upstream_is() {
    let ns = Namespace::concurrent("deps-health");
    let ring = graph_ring(&ns, 4);
    let _a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let _c = ring
        .consumer(ConsumerOptions::durable("c").after(["a"]))
        .unwrap();
    publish_range(&ring, 0..3);
    let h = health_now(&ring);
    let state = |name: &str| h.consumers.iter().find(|c| c.name == name).unwrap().state;
    assert_eq!(state("a"), HealthState::Stalled, "{h:?}");
    assert_eq!(
        state("c"),
        HealthState::Healthy,
        "held by a, nothing to do: {h:?}"
    );
}

#[test]
fn reading_ahead_stops_where_the_upstreams_committed() {
    let ns = Namespace::concurrent("deps-lease");
    let ring = graph_ring(&ns, 4);
    let mut a = ring
        .consumer(ConsumerOptions::durable("a").batch_cap(3))
        .unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::durable("c").after(["a"]))
        .unwrap();
    publish_range(&ring, 0..8);
    let mut seen = Vec::new();
    assert_eq!(
        c.read_ahead(0, 16, |ev| seen.push(ev.sequence())).unwrap(),
        0
    );
    assert_eq!(a.poll_once(|_| {}).unwrap(), 3);
    assert_eq!(
        c.read_ahead(0, 16, |ev| seen.push(ev.sequence())).unwrap(),
        3
    );
    assert_eq!(seen, vec![0, 1, 2]);
}

#[test]
fn a_ring_full_behind_a_detached_upstream_is_blocked_by_it_not_by_its_downstream() {
    let ns = Namespace::concurrent("deps-blocked");
    let ring = graph_ring(&ns, 4);
    // The downstream takes the lower table index, so that a scan meets it first.
    let first = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    drop(first);
    let c = ring
        .consumer(ConsumerOptions::durable("c").after(["a"]))
        .unwrap();
    assert!(c.index() < a.index());
    drop(a);
    let mut p = ring.producer().unwrap();
    while p.try_publish(b"x").is_ok() {}
    let h = ring.health(HealthThresholds::default()).check();
    let blocked = h
        .blocked_by
        .expect("the ring is full behind a detached consumer");
    let name = &h
        .consumers
        .iter()
        .find(|c| c.index == blocked)
        .unwrap()
        .name;
    assert_eq!(name, "a", "{h:?}");
}

#[test]
fn a_declared_upstream_can_be_named_before_its_first_attach() {
    let ns = Namespace::concurrent("deps-declared");
    let config = RingConfig {
        max_consumers: 4,
        declared: vec!["journal".into(), "apply".into()],
        ..small(64)
    };
    let ring = Ring::create(ns.name(), "r", &config).unwrap();
    publish_range(&ring, 0..4);
    // The downstream starts first: it reads behind a consumer no process has attached.
    let mut apply = ring
        .consumer(ConsumerOptions::durable("apply").after(["journal"]))
        .unwrap();
    assert_eq!(apply.next_sequence(), 0);
    assert_eq!(poll_all(&mut apply), Vec::<u64>::new());
    assert!(!apply.has_pending());
    let mut journal = ring.consumer(ConsumerOptions::durable("journal")).unwrap();
    assert_eq!(poll_all(&mut journal), vec![0, 1, 2, 3]);
    assert_eq!(poll_all(&mut apply), vec![0, 1, 2, 3]);
}

/// A downstream parked on an idle ring whose upstream merely detaches (durable: it keeps its
/// name and still holds it back) has no event waiting: the park that the detach outlasts
/// ends without counting a lost wake-up, in either producer mode. (A detach that lands
/// before the downstream's last look ends the park at once and counts nothing either.)
#[test]
fn an_upstreams_detach_is_no_lost_wakeup_of_an_idle_parked_downstream() {
    for (mode, tag) in [(ProducerMode::Single, "sp"), (ProducerMode::Multi, "mp")] {
        let ns = Namespace::concurrent(&format!("deps-idle-detach-{tag}"));
        let config = RingConfig {
            max_consumers: 4,
            producer_mode: mode,
            ..small(64)
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create ring r");
        let a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
        let mut c = ring
            .consumer(ConsumerOptions::durable("c").after(["a"]).wait(
                WaitStrategy::TimeoutBlocking {
                    timeout: Duration::from_millis(400),
                },
            ))
            .unwrap();
        let waiter = std::thread::spawn(move || {
            let outcome = c.wait();
            (outcome, c.stats())
        });
        until_parked(&ring);
        drop(a);
        let (outcome, stats) = waiter.join().unwrap();
        assert_eq!(
            stats.net_wakeups, 0,
            "{tag}: outcome {outcome:?}, {stats:?}"
        );
    }
}

/// A parked downstream, `c` after `a`, with `act` done to `a` once `c` counts itself
/// parked: what `c` delivered and how its poll after the wait ended. The change `act` makes
/// to `a`'s entry must be its only one until `c` is back (what `act` returns is dropped
/// then): `c`'s last look, its wait and its poll may each see any change of the entry.
/// That the change wakes `c`, rather than leaving it to the 50 ms net, is
/// `consumer::tests::a_release_or_an_unsubscribe_wakes_parked_consumers`: from another
/// thread, a wait ended by a wake and one whose last look saw the change look alike.
fn park_then<K>(
    tag: &str,
    published: u64,
    act: impl FnOnce(&Ring, shmring::Consumer) -> K,
) -> (Vec<u64>, Result<usize, PollError>) {
    let ns = Namespace::concurrent(tag);
    let ring = graph_ring(&ns, 4);
    let (a, mut c) = upstream_and_blocking_downstream(&ring);
    publish_range(&ring, 0..published);
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        c.wait().expect("wait");
        let mut got = Vec::new();
        let polled = c.poll_once(|ev| got.push(ev.sequence()));
        tx.send((got, polled)).expect("the test thread waits");
    });
    until_parked(&ring);
    let kept = act(&ring, a);
    let Ok(out) = rx.recv_timeout(WATCHDOG) else {
        if waiter.is_finished() {
            // It panicked: its message, not the watchdog's.
            if let Err(p) = waiter.join() {
                std::panic::resume_unwind(p);
            }
        }
        panic!("watchdog: the downstream never came back");
    };
    waiter.join().expect("the downstream thread");
    drop(kept);
    out
}

#[test]
fn a_parked_downstream_passes_its_upstream_once_it_is_released() {
    let (got, polled) = park_then("deps-park-release", 2, |ring, a| {
        // Released while it is ACTIVE and kept attached until `c` is back: the release is
        // the one change of its entry (a detach first would hold `c`).
        release(ring, "a");
        a
    });
    assert_eq!(polled, Ok(2));
    assert_eq!(got, vec![0, 1]);
}

#[test]
fn a_parked_downstream_hears_its_upstream_unsubscribe() {
    let (got, polled) = park_then("deps-park-unsubscribe", 1, |_, a| a.unsubscribe());
    assert_eq!(got, Vec::<u64>::new());
    assert_eq!(polled, Err(PollError::UpstreamLost { name: "a".into() }));
}
