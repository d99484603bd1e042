//! A worker group after other consumers (`ConsumerOptions::worker(..).after([..])`, the
//! Disruptor's worker pool after its handlers): members hand an event to their handler only
//! once every upstream has finished it, in their own claims and in the claims they take
//! over; the group's upstreams are the same for every member; a cycle through a group is
//! refused; a parked member wakes when an upstream commits; a group may run after a group;
//! a member answering a failure with its error policy stays behind its upstream.

use std::time::{Duration, Instant};

use shmring::{
    AttachError, Consumer, ConsumerOptions, HealthState, Ring, RingConfig, RunExit, WaitStrategy,
};
use shmring_testkit::{Namespace, ParkedConsumer};

mod common;
use common::{health_now, publish_range, small};

/// The bound on every wait of these tests (a watchdog, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);

fn value(ev: &shmring::Event<'_>) -> u64 {
    u64::from_le_bytes(ev.bytes().try_into().expect("8-byte events"))
}

fn ring(ns: &Namespace, capacity: u64) -> Ring {
    let cfg = RingConfig {
        max_consumers: 12,
        ..small(capacity)
    };
    Ring::create(ns.name(), "r", &cfg).expect("create the ring")
}

/// A member of group `w` reading behind `journal`.
fn worker_after_journal() -> ConsumerOptions {
    ConsumerOptions::worker("w").after(["journal"])
}

/// Poll every member `rounds` times; what each delivered, as event values.
fn poll_members(members: &mut [Consumer], rounds: usize, seen: &mut [Vec<u64>]) {
    for _ in 0..rounds {
        for (m, s) in members.iter_mut().zip(seen.iter_mut()) {
            m.poll_once(|ev| s.push(value(&ev)))
                .expect("a member's poll");
        }
    }
}

/// Poll the members until they have delivered `n` events between them.
fn poll_members_until(members: &mut [Consumer], n: usize, seen: &mut [Vec<u64>]) {
    let deadline = Instant::now() + PATIENCE;
    while seen.iter().map(Vec::len).sum::<usize>() < n {
        assert!(
            Instant::now() < deadline,
            "the members stopped at {seen:?}, short of {n}"
        );
        poll_members(members, 1, seen);
    }
}

fn sorted(seen: &[Vec<u64>]) -> Vec<u64> {
    let mut all = seen.concat();
    all.sort_unstable();
    all
}

#[test]
fn members_deliver_only_what_the_upstream_has_finished() {
    let ns = Namespace::concurrent("group_after_bound");
    let ring = ring(&ns, 64);
    let mut journal = ring
        .consumer(ConsumerOptions::durable("journal").batch_cap(10))
        .unwrap();
    let mut members: Vec<Consumer> = (0..2)
        .map(|_| ring.consumer(worker_after_journal().batch_cap(4)).unwrap())
        .collect();
    // A consumer after the group sees every event once a member has finished it.
    let mut audit = ring
        .consumer(ConsumerOptions::durable("audit").after(["w"]))
        .unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..40u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    let mut seen = vec![Vec::new(); 2];
    // Every event is published and claimable, and none is handed over: the journal has
    // finished none of them.
    poll_members(&mut members, 50, &mut seen);
    assert_eq!(sorted(&seen), Vec::<u64>::new());
    assert_eq!(audit.poll_once(|_| {}).unwrap(), 0);

    assert_eq!(journal.poll_once(|_| {}).unwrap(), 10);
    poll_members_until(&mut members, 10, &mut seen);
    poll_members(&mut members, 50, &mut seen);
    assert_eq!(
        sorted(&seen),
        (0..10).collect::<Vec<_>>(),
        "no further than 10"
    );

    while journal.poll_once(|_| {}).unwrap() > 0 {}
    poll_members_until(&mut members, 40, &mut seen);
    assert_eq!(
        sorted(&seen),
        (0..40).collect::<Vec<_>>(),
        "each event exactly once"
    );
    assert!(
        seen.iter().all(|s| !s.is_empty()),
        "both members took a share"
    );

    let mut after = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while after.len() < 40 {
        assert!(Instant::now() < deadline, "audit stopped at {after:?}");
        audit.poll_once(|ev| after.push(value(&ev))).unwrap();
    }
    assert_eq!(after, (0..40).collect::<Vec<_>>(), "in order, each once");

    // The group's entry records its upstream, as a dependent consumer's does.
    let info = ring.info();
    let group = info.consumers.iter().find(|c| c.is_group).unwrap();
    assert_eq!(group.upstream, vec![journal.index()]);
}

/// A member holds a claim of one at the work sequence while it waits (here: for the
/// journal). A member that takes over a claim left by another while running, and one that
/// carries on with it when it joins, both wait for the journal too.
#[test]
fn a_claim_taken_over_waits_for_the_upstream_too() {
    let ns = Namespace::concurrent("group_after_takeover");
    let ring = ring(&ns, 64);
    let mut journal = ring
        .consumer(ConsumerOptions::durable("journal").batch_cap(2))
        .unwrap();
    // `a` joins first and claims sequence 0, `b` then claims 1.
    let a = ring.consumer(worker_after_journal()).unwrap();
    let b = ring.consumer(worker_after_journal()).unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..3u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    // `a` leaves holding its claim of 0: its entry stays open for another member.
    drop(a);
    // Running, `b` takes it over in one of its scans for left claims (every 1024 empty
    // polls): still nothing, the journal has finished nothing.
    let mut members = vec![b];
    let mut seen = vec![Vec::new()];
    poll_members(&mut members, 3000, &mut seen);
    assert_eq!(seen, vec![Vec::<u64>::new()]);
    let info = ring.info();
    let held: Vec<&str> = info
        .consumers
        .iter()
        .filter(|c| c.group.is_some())
        .map(|c| c.state)
        .collect();
    // Taken over: held by `b`'s process (shown as ATTACHING), not open (DETACHED).
    assert!(
        !held.contains(&"DETACHED"),
        "the left claim is taken over: {held:?}"
    );

    // The journal finishes 0 and 1: `b` delivers the claim it took over and its own, and
    // then holds a claim of one at 2, which the journal has not finished.
    assert_eq!(journal.poll_once(|_| {}).unwrap(), 2);
    poll_members_until(&mut members, 2, &mut seen);
    poll_members(&mut members, 50, &mut seen);
    assert_eq!(sorted(&seen), vec![0, 1]);
    assert_eq!(members[0].stats().redelivered, 0, "a claim left, not lost");

    // A member that joins carries on with the claim `b` left, and waits for the journal
    // as well.
    drop(members);
    let c = ring.consumer(worker_after_journal()).unwrap();
    let mut members = vec![c];
    let mut more = vec![Vec::new()];
    p.publish(&3u64.to_le_bytes()).unwrap();
    poll_members(&mut members, 50, &mut more);
    assert_eq!(more, vec![Vec::<u64>::new()]);
    assert_eq!(journal.poll_once(|_| {}).unwrap(), 2);
    poll_members_until(&mut members, 2, &mut more);
    assert_eq!(more, vec![vec![2, 3]]);
}

/// A claim taken over from a member with a larger batch cap is handed over in batches of
/// the adopter's cap, each ending with `end_of_batch` on its last event.
#[test]
fn a_taken_over_claim_ends_each_batch() {
    let ns = Namespace::concurrent("group_after_batches");
    let ring = ring(&ns, 64);
    let mut journal = ring.consumer(ConsumerOptions::durable("journal")).unwrap();
    // `a` claims 0 and `b` 1 as they join (nothing published, nothing finished).
    let mut a = ring.consumer(worker_after_journal().batch_cap(8)).unwrap();
    let mut b = ring.consumer(worker_after_journal().batch_cap(3)).unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..20u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    while journal.poll_once(|_| {}).unwrap() > 0 {}
    // `a` hands over 0, claims 2..10, and leaves with that claim.
    assert_eq!(a.poll_once(|ev| assert_eq!(ev.sequence(), 0)).unwrap(), 1);
    drop(a);
    // `b` delivers its own claims to the end, then, idle, takes over 2..10.
    let mut got: Vec<(u64, bool)> = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < 19 {
        assert!(Instant::now() < deadline, "b stopped at {got:?}");
        b.poll_once(|ev| got.push((ev.sequence(), ev.is_end_of_batch())))
            .unwrap();
    }
    let mut seqs: Vec<u64> = got.iter().map(|g| g.0).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..20).collect::<Vec<_>>(), "each once");
    let ends: Vec<u64> = got
        .iter()
        .filter(|g| (2..10).contains(&g.0) && g.1)
        .map(|g| g.0)
        .collect();
    assert_eq!(ends, vec![4, 7, 9], "{got:?}");
}

#[test]
fn every_member_names_the_groups_upstreams() {
    let ns = Namespace::concurrent("group_after_names");
    let ring = ring(&ns, 16);
    let _journal = ring.consumer(ConsumerOptions::durable("journal")).unwrap();
    let _audit = ring.consumer(ConsumerOptions::durable("audit")).unwrap();
    let _first = ring.consumer(worker_after_journal()).unwrap();
    match ring.consumer(ConsumerOptions::worker("w")) {
        Err(AttachError::GroupUpstreams {
            group,
            recorded,
            asked,
        }) => {
            assert_eq!(group, "w");
            assert_eq!(recorded, vec!["journal".to_owned()]);
            assert!(asked.is_empty());
        }
        other => panic!(
            "a member without the group's upstream: {:?}",
            other.map(|c| c.index())
        ),
    }
    assert!(matches!(
        ring.consumer(ConsumerOptions::worker("w").after(["journal", "audit"])),
        Err(AttachError::GroupUpstreams { .. })
    ));
    assert!(matches!(
        ring.consumer(ConsumerOptions::worker("w").after(["audit"])),
        Err(AttachError::GroupUpstreams { .. })
    ));
    // The same name twice: the same upstreams.
    let _second = ring
        .consumer(ConsumerOptions::worker("w").after(["journal", "journal"]))
        .unwrap();
    // The same names in another order: the same upstreams.
    let _x = ring
        .consumer(ConsumerOptions::worker("x").after(["journal", "audit"]))
        .unwrap();
    let _y = ring
        .consumer(ConsumerOptions::worker("x").after(["audit", "journal"]))
        .unwrap();
    // A group with no upstreams takes no member that names one.
    let _plain = ring.consumer(ConsumerOptions::worker("v")).unwrap();
    assert!(matches!(
        ring.consumer(ConsumerOptions::worker("v").after(["journal"])),
        Err(AttachError::GroupUpstreams { .. })
    ));
    // A group cannot read behind itself, nor name a consumer that does not exist.
    assert!(matches!(
        ring.consumer(ConsumerOptions::worker("u").after(["u"])),
        Err(AttachError::SelfUpstream { .. })
    ));
    assert!(matches!(
        ring.consumer(ConsumerOptions::worker("u").after(["nobody"])),
        Err(AttachError::UnknownUpstream { .. })
    ));
}

/// `audit` read behind group `w` before, and re-attaches after it while `w` reads behind
/// `audit`: a cycle through the group's entry, refused.
#[test]
fn a_cycle_through_a_group_is_refused() {
    let ns = Namespace::concurrent("group_after_cycle");
    let ring = ring(&ns, 16);
    let audit = ring.consumer(ConsumerOptions::durable("audit")).unwrap();
    drop(audit);
    let _member = ring
        .consumer(ConsumerOptions::worker("w").after(["audit"]))
        .unwrap();
    match ring.consumer(ConsumerOptions::durable("audit").after(["w"])) {
        Err(AttachError::Cycle { names }) => {
            assert_eq!(names.first().map(String::as_str), Some("audit"));
            assert!(names.iter().any(|n| n == "w"), "{names:?}");
        }
        other => panic!("a cycle through the group: {:?}", other.map(|c| c.index())),
    }
    // Without `after`, `audit` attaches as before.
    ring.consumer(ConsumerOptions::durable("audit")).unwrap();
}

/// The member that creates a group runs the cycle check of its upstreams: `d` read behind
/// `x`, whose entry was freed; the group takes that entry and names `d` as its upstream, so
/// `d`'s record now points at the group, which reads behind `d`. Refused, and the group's
/// entry is given back.
#[test]
fn a_group_whose_creation_closes_a_cycle_is_not_created() {
    let ns = Namespace::concurrent("group_after_new_cycle");
    let ring = ring(&ns, 16);
    let x = ring.consumer(ConsumerOptions::durable("x")).unwrap();
    let x_index = x.index();
    drop(x);
    let d = ring
        .consumer(ConsumerOptions::durable("d").after(["x"]))
        .unwrap();
    drop(d);
    let word = ring
        .info()
        .consumers
        .iter()
        .find(|c| c.index == x_index)
        .map(|c| c.word)
        .unwrap();
    assert!(ring.free_consumer(x_index, word), "x freed");
    match ring.consumer(ConsumerOptions::worker("w").after(["d"])) {
        Err(AttachError::Cycle { names }) => {
            assert_eq!(names.first().map(String::as_str), Some("w"), "{names:?}");
            assert!(names.iter().any(|n| n == "d"), "{names:?}");
        }
        other => panic!(
            "the group closes a cycle through d: {:?}",
            other.map(|c| c.index())
        ),
    }
    let info = ring.info();
    assert!(
        !info.consumers.iter().any(|c| c.is_group || c.name == "w"),
        "no group left behind: {:?}",
        info.consumers
    );
    // Without the cycle (a group after a consumer that reads behind nothing), it is made.
    ring.consumer(ConsumerOptions::durable("e")).unwrap();
    ring.consumer(ConsumerOptions::worker("w").after(["e"]))
        .unwrap();
}

/// A member whose next event the journal has not finished has nothing to do: not STALLED,
/// the journal is (the member reads behind its group's upstream).
#[test]
fn a_member_held_by_the_groups_upstream_is_not_stalled() {
    let ns = Namespace::concurrent("group_after_health");
    let ring = ring(&ns, 16);
    let journal = ring.consumer(ConsumerOptions::durable("journal")).unwrap();
    let member = ring.consumer(worker_after_journal()).unwrap();
    publish_range(&ring, 0..3);
    let h = health_now(&ring);
    let state = |index: u32| {
        h.consumers
            .iter()
            .find(|c| c.index == index)
            .map(|c| c.state)
    };
    assert_eq!(state(journal.index()), Some(HealthState::Stalled), "{h:?}");
    assert_eq!(
        state(member.index()),
        Some(HealthState::Healthy),
        "held by the journal, nothing to do: {h:?}"
    );
}

/// A member parked because the journal has not finished the next event wakes when the
/// journal commits it: members park on the line every commit notifies.
#[test]
fn a_parked_member_wakes_when_the_upstream_commits() {
    let ns = Namespace::concurrent("group_after_park");
    let ring = ring(&ns, 64);
    let mut journal = ring.consumer(ConsumerOptions::durable("journal")).unwrap();
    let member = ring
        .consumer(worker_after_journal().wait(WaitStrategy::Blocking))
        .unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..5u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    // Its run starts with five events published that the journal has not finished: it
    // parks (a member that took them for waiting events would spin instead).
    let parked = ParkedConsumer::spawn(member);
    parked.wait_parked_at(&ring, 0);
    assert_eq!(journal.poll_once(|_| {}).unwrap(), 5);
    parked.wait_parked_at(&ring, 5);
    let (exit, seen, stats) = parked.finish(&ring);
    assert_eq!(exit, RunExit::Closed);
    assert_eq!(seen, (0..5).map(|i| (i, i)).collect::<Vec<_>>());
    assert_eq!(
        stats.net_wakeups, 0,
        "woken by the commit, not by the timed net"
    );
}

/// Every event that `later` delivered has all of its predecessors, and itself, in
/// `earlier`: `later` never ran ahead of what `earlier` had finished.
fn assert_behind(later: &[Vec<u64>], earlier: &[Vec<u64>]) {
    let finished = sorted(earlier);
    for &x in later.iter().flatten() {
        assert!(
            (0..=x).all(|k| finished.binary_search(&k).is_ok()),
            "{x} delivered after the upstream group, which had finished {finished:?}"
        );
    }
}

/// A group may run after another group: its members hand over an event only once every
/// member of the first group is past it (the first group's members commit one small claim
/// at a time here, so the second group's polls fall between them).
#[test]
fn a_group_after_a_group_waits_for_every_member_of_the_first() {
    let ns = Namespace::concurrent("group_after_group");
    let ring = ring(&ns, 64);
    let mut first: Vec<Consumer> = (0..2)
        .map(|_| {
            ring.consumer(ConsumerOptions::worker("w").batch_cap(3))
                .unwrap()
        })
        .collect();
    let mut second: Vec<Consumer> = (0..2)
        .map(|_| {
            ring.consumer(ConsumerOptions::worker("v").after(["w"]).batch_cap(4))
                .unwrap()
        })
        .collect();
    let mut p = ring.producer().unwrap();
    for i in 0..40u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    let (mut by_w, mut by_v) = (vec![Vec::new(); 2], vec![Vec::new(); 2]);
    poll_members(&mut second, 50, &mut by_v);
    assert_eq!(sorted(&by_v), Vec::<u64>::new(), "w has finished nothing");

    let deadline = Instant::now() + PATIENCE;
    let mut turn = 0;
    while sorted(&by_v).len() < 40 {
        assert!(
            Instant::now() < deadline,
            "v stopped at {by_v:?} ({by_w:?})"
        );
        // One poll of one member of `w`, then every member of `v` a few times.
        let k = turn % 2;
        turn += 1;
        first[k]
            .poll_once(|ev| by_w[k].push(value(&ev)))
            .expect("a member of w");
        poll_members(&mut second, 3, &mut by_v);
        assert_behind(&by_v, &by_w);
    }
    assert_eq!(sorted(&by_w), (0..40).collect::<Vec<_>>(), "w: each once");
    assert_eq!(sorted(&by_v), (0..40).collect::<Vec<_>>(), "v: each once");
    let info = ring.info();
    let v = info
        .consumers
        .iter()
        .find(|c| c.is_group && c.name == "v")
        .unwrap();
    let w = info
        .consumers
        .iter()
        .find(|c| c.is_group && c.name == "w")
        .unwrap();
    assert_eq!(v.upstream, vec![w.index], "v's record names w");
}

/// A member whose handler fails answers with its error policy and still never hands an
/// event to its handler, a failed attempt included, before the journal has finished it.
#[test]
fn a_member_skipping_a_failing_event_stays_behind_the_upstream() {
    let ns = Namespace::concurrent("group_after_skip");
    let ring = ring(&ns, 64);
    let mut journal = ring
        .consumer(ConsumerOptions::durable("journal").batch_cap(5))
        .unwrap();
    let opts = || worker_after_journal().on_error(shmring::ErrorPolicy::Skip { attempts: 2 });
    let mut members: Vec<Consumer> = (0..2).map(|_| ring.consumer(opts()).unwrap()).collect();
    let mut p = ring.producer().unwrap();
    for i in 0..20u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    // Every call of a handler (an attempt that fails included), and what succeeded.
    let (mut calls, mut done) = (Vec::new(), Vec::new());
    let mut finished = 0u64;
    let deadline = Instant::now() + PATIENCE;
    let mut round = 0;
    while done.len() < 19 {
        assert!(Instant::now() < deadline, "stopped at {done:?}");
        // The journal moves every fourth round: the members catch up with it in between.
        if round % 4 == 0 {
            finished += journal.poll_once(|_| {}).unwrap() as u64;
        }
        round += 1;
        for m in members.iter_mut() {
            m.poll_once_fallible(|ev| {
                let v = value(&ev);
                calls.push(v);
                if v == 7 {
                    return Err("event 7 fails");
                }
                done.push(v);
                Ok(())
            })
            .expect("a member's poll");
            assert!(
                calls.iter().all(|&c| c < finished),
                "a handler saw an event the journal has not finished ({finished}): {calls:?}"
            );
        }
    }
    done.sort_unstable();
    assert_eq!(
        done,
        (0..20).filter(|&v| v != 7).collect::<Vec<_>>(),
        "each once, 7 skipped"
    );
    assert_eq!(calls.iter().filter(|&&c| c == 7).count(), 2, "two attempts");
    let dead: u64 = members.iter().map(|m| m.stats().dead_lettered).sum();
    assert_eq!(dead, 1);
}

/// A member that the group's upstream holds parks on the upstream's entry, which another
/// member's leaving does not notify: the leaving wakes it anyway, so that it adopts the
/// claim left behind (published and finished by the upstream) at once, not at its 50 ms
/// net. One try per ring of three (a park the net ends just before the leave finds the
/// claim without a wake).
#[test]
fn a_member_held_by_the_upstream_is_woken_to_adopt_a_claim_left_behind() {
    use shmring_testkit::parked::in_one_try;
    let ns = Namespace::concurrent("group_after_left_claim");
    let attempt = |name: &str| {
        let cfg = RingConfig {
            max_consumers: 12,
            ..small(64)
        };
        let ring = Ring::create(ns.name(), name, &cfg).expect("create the ring");
        let mut journal = ring
            .consumer(ConsumerOptions::durable("journal").batch_cap(1))
            .unwrap();
        // `a` joins first and claims sequence 0, `b` then claims 1.
        let a = ring.consumer(worker_after_journal()).unwrap();
        let b = ring
            .consumer(worker_after_journal().wait(WaitStrategy::Blocking))
            .unwrap();
        let index = b.index();
        let mut p = ring.producer().unwrap();
        for i in 0..3u64 {
            p.publish(&i.to_le_bytes()).unwrap();
        }
        // The journal finishes 0 alone: `b`'s claim of 1 waits for it.
        assert_eq!(journal.poll_once(|_| {}).unwrap(), 1);
        let b = ParkedConsumer::spawn(b);
        b.wait_parked_at(&ring, 0);
        let wakeups = |ring: &Ring| {
            let info = ring.info();
            let e = info.consumers.iter().find(|e| e.index == index);
            e.expect("b's entry").stats.wakeups
        };
        let before = wakeups(&ring);
        // `a` leaves holding its claim of 0, which the journal has finished.
        drop(a);
        b.wait_parked_at(&ring, 1);
        let woken = wakeups(&ring) > before;
        // The journal finishes the rest: `b` delivers it, and drains at the stop.
        while journal.poll_once(|_| {}).unwrap() > 0 {}
        b.wait_parked_at(&ring, 3);
        let (exit, seen, _) = b.finish(&ring);
        assert_eq!(exit, RunExit::Closed);
        assert_eq!(seen, vec![(0, 0), (1, 1), (2, 2)]);
        woken
    };
    in_one_try(
        &["r0", "r1", "r2"],
        "the member was never woken for the claim left behind, only its net",
        attempt,
        |&w| w,
    );
}
