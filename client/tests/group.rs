//! Worker groups in one process: each event to exactly one member, members joining and
//! leaving while events flow, a failing member's claim handed on, the group's name kept
//! apart from durable consumers'. The kill of a member process is in the `shmring-tests`
//! package (`group_kill`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shmring::{
    AttachError, Consumer, ConsumerOptions, HealthState, PollError, Ring, RingConfig, WaitStrategy,
};

use shmring_testkit::Namespace;

mod common;
use common::{health_now, publish_range, small};

/// The bound on every wait of these tests (a watchdog, not a timing assertion).
const PATIENCE: Duration = Duration::from_secs(30);

fn value(ev: &shmring::Event<'_>) -> u64 {
    u64::from_le_bytes(ev.bytes().try_into().expect("8-byte events"))
}

/// A member of group `w` whose `wait` returns within the tests' bounded loops.
fn worker() -> ConsumerOptions {
    ConsumerOptions::worker("w").wait(WaitStrategy::TimeoutBlocking {
        timeout: Duration::from_millis(100),
    })
}

fn ring_with(ns: &Namespace, capacity: u64, consumers: u32) -> Ring {
    let cfg = RingConfig {
        max_consumers: consumers,
        ..small(capacity)
    };
    Ring::create(ns.name(), "r", &cfg).expect("create the ring")
}

#[test]
fn each_event_goes_to_exactly_one_member() {
    let ns = Namespace::concurrent("group_one");
    let ring = ring_with(&ns, 16, 6);
    let mut p = ring.producer().unwrap();
    let mut members: Vec<Consumer> = (0..3)
        .map(|_| ring.consumer(worker().batch_cap(2)).unwrap())
        .collect();
    let mut seen: Vec<Vec<u64>> = vec![Vec::new(); 3];
    let n = 300u64;
    let mut sent = 0u64;
    let deadline = Instant::now() + PATIENCE;
    while seen.iter().map(Vec::len).sum::<usize>() < n as usize {
        assert!(Instant::now() < deadline, "events stopped: {seen:?}");
        while sent < n && p.try_publish(&sent.to_le_bytes()).is_ok() {
            sent += 1;
        }
        for (m, s) in members.iter_mut().zip(seen.iter_mut()) {
            m.poll_once(|ev| s.push(value(&ev))).unwrap();
        }
    }
    let mut all: Vec<u64> = seen.concat();
    all.sort_unstable();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "each event exactly once");
    for (i, s) in seen.iter().enumerate() {
        assert!(!s.is_empty(), "member {i} got no share");
    }

    let info = ring.info();
    let group = info.consumers.iter().find(|c| c.is_group).unwrap();
    assert_eq!(group.name, "w");
    assert_eq!(group.state, "DETACHED");
    let shares: Vec<u64> = info
        .consumers
        .iter()
        .filter(|c| c.group == Some(group.index))
        .map(|c| c.stats.delivered)
        .collect();
    assert_eq!(shares.len(), 3);
    assert_eq!(shares.iter().sum::<u64>(), n);
    assert!(info
        .consumers
        .iter()
        .all(|c| c.stats.redelivered == 0 && !(c.is_group && c.group.is_some())));
    drop(members);
    // The members are gone; the group stays, and so do their entries, each holding the
    // claim its member had taken (a member always holds one), DETACHED for the next.
    let info = ring.info();
    assert_eq!(info.consumers.len(), 4, "{:?}", info.consumers);
    assert!(info.consumers.iter().all(|c| c.state == "DETACHED"));
    // A member that joins carries on with one of them: the table does not grow.
    let mut m = ring.consumer(worker()).unwrap();
    assert_eq!(ring.info().consumers.len(), 4);
    p.publish(&n.to_le_bytes()).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.is_empty() {
        assert!(Instant::now() < deadline, "event {n} never delivered");
        m.poll_once(|ev| got.push(value(&ev))).unwrap();
        if got.is_empty() {
            m.wait().unwrap();
        }
    }
    assert_eq!(got, vec![n]);
    assert_eq!(m.stats().redelivered, 0);
}

/// A member takes its events through its group's claims: reading ahead of its position, or
/// committing past it, would hand it events other members claim and deliver too. Both are
/// refused, and nothing moves.
#[test]
fn a_member_cannot_read_ahead_or_commit_past_its_claims() {
    let ns = Namespace::concurrent("group_lease");
    let ring = ring_with(&ns, 16, 6);
    let mut a = ring.consumer(worker().batch_cap(2)).unwrap();
    let mut b = ring.consumer(worker().batch_cap(2)).unwrap();
    publish_range(&ring, 0..8);
    let mut got = Vec::new();
    a.poll_once(|ev| got.push(value(&ev))).unwrap();
    assert!(!got.is_empty());
    let mut read = Vec::new();
    assert_eq!(
        b.read_ahead(b.next_sequence(), 8, |ev| read.push(value(&ev))),
        Err(shmring::LeaseError::GroupMember)
    );
    assert_eq!(b.commit_to(8), Err(shmring::LeaseError::GroupMember));
    assert!(read.is_empty(), "{read:?}");
    let deadline = Instant::now() + PATIENCE;
    while got.len() < 8 {
        assert!(Instant::now() < deadline, "events stopped: {got:?}");
        for m in [&mut a, &mut b] {
            m.poll_once(|ev| got.push(value(&ev))).unwrap();
        }
    }
    got.sort_unstable();
    assert_eq!(got, (0..8).collect::<Vec<_>>(), "each event once");
}

#[test]
fn events_wait_for_the_group_while_no_member_runs() {
    let ns = Namespace::concurrent("group_wait");
    let ring = ring_with(&ns, 8, 4);
    let mut p = ring.producer().unwrap();
    let m = ring.consumer(worker()).unwrap();
    drop(m);
    for i in 0..8u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    assert!(
        p.try_publish(&[0; 8]).is_err(),
        "the group holds its events"
    );
    let mut m = ring.consumer(worker()).unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while seen.len() < 8 {
        assert!(Instant::now() < deadline, "got {seen:?}");
        m.poll_once(|ev| seen.push(value(&ev))).unwrap();
    }
    assert_eq!(seen, (0..8).collect::<Vec<_>>());
    assert_eq!(m.stats().redelivered, 0);
}

#[test]
fn a_member_leaving_hands_its_claim_to_the_others() {
    let ns = Namespace::concurrent("group_leave");
    let ring = ring_with(&ns, 8, 4);
    let mut p = ring.producer().unwrap();
    let a = ring.consumer(worker().batch_cap(4)).unwrap();
    let mut b = ring.consumer(worker().batch_cap(4)).unwrap();
    // a claimed sequence 0 at its attach, b sequence 1: a leaves holding its claim.
    for i in 0..4u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    drop(a);
    let mut seen = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while seen.len() < 4 {
        assert!(Instant::now() < deadline, "got {seen:?}");
        b.poll_once(|ev| seen.push(value(&ev))).unwrap();
        if seen.len() < 4 {
            // An idle member looks for claims left behind before it parks.
            b.wait().unwrap();
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..4).collect::<Vec<_>>());
    assert_eq!(
        b.stats().redelivered,
        0,
        "a claim given back was never handled"
    );
}

#[test]
fn a_failing_member_hands_the_failing_event_to_another_counted_as_redelivered() {
    let ns = Namespace::concurrent("group_fail");
    let ring = ring_with(&ns, 8, 4);
    let mut p = ring.producer().unwrap();
    let mut a = ring.consumer(worker()).unwrap();
    let mut b = ring.consumer(worker()).unwrap();
    p.publish(&7u64.to_le_bytes()).unwrap();
    // a holds sequence 0 (it attached first) and fails on it.
    let r = a.poll_once(|_| panic!("handler fails"));
    assert_eq!(r, Err(PollError::HandlerPanicked { sequence: 0 }));
    drop(a);
    let mut seen = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while seen.is_empty() {
        assert!(Instant::now() < deadline, "event 0 never redelivered");
        b.poll_once(|ev| seen.push((ev.sequence(), value(&ev))))
            .unwrap();
        if seen.is_empty() {
            b.wait().unwrap();
        }
    }
    assert_eq!(seen, vec![(0, 7)]);
    assert_eq!(b.stats().redelivered, 1);
    let info = ring.info();
    let entry = info
        .consumers
        .iter()
        .find(|c| c.index == b.index())
        .unwrap();
    assert_eq!(
        entry.stats.redelivered, 1,
        "the count is in the member's entry"
    );
}

#[test]
fn a_group_name_and_a_durable_name_are_kept_apart() {
    let ns = Namespace::concurrent("group_names");
    let ring = ring_with(&ns, 8, 4);
    let _d = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    match ring.consumer(ConsumerOptions::worker("d")) {
        Err(AttachError::NotAGroup { name }) => assert_eq!(name, "d"),
        other => panic!("worker under a durable name: {:?}", other.err()),
    }
    let _w = ring.consumer(ConsumerOptions::worker("g")).unwrap();
    match ring.consumer(ConsumerOptions::durable("g")) {
        Err(AttachError::IsAGroup { name }) => assert_eq!(name, "g"),
        other => panic!("durable under a group name: {:?}", other.err()),
    }
}

#[test]
fn a_groups_entries_are_neither_released_nor_freed_by_the_ring() {
    let ns = Namespace::concurrent("group_no_release");
    let ring = ring_with(&ns, 8, 4);
    let m = ring.consumer(worker()).unwrap();
    drop(m);
    let info = ring.info();
    let group = info.consumers.iter().find(|c| c.is_group).unwrap();
    let member = info.consumers.iter().find(|c| c.group.is_some()).unwrap();
    assert_eq!(
        member.state, "DETACHED",
        "the member left holding its claim"
    );
    for c in [group, member] {
        assert!(
            !ring.release_consumer(c.index, c.word),
            "released {}",
            c.index
        );
        assert!(!ring.free_consumer(c.index, c.word), "freed {}", c.index);
    }
    let after = ring.info();
    for c in [group, member] {
        let now = after.consumers.iter().find(|e| e.index == c.index).unwrap();
        assert_eq!(now.word, c.word, "entry {} changed", c.index);
    }
}

/// A consumer after two groups waits for the members of both.
#[test]
fn a_consumer_after_two_groups_waits_for_both() {
    let ns = Namespace::concurrent("group_then_two");
    let ring = ring_with(&ns, 16, 6);
    let mut m1 = ring
        .consumer(ConsumerOptions::worker("g1").batch_cap(1))
        .unwrap();
    let mut m2 = ring
        .consumer(ConsumerOptions::worker("g2").batch_cap(1))
        .unwrap();
    let mut d = ring
        .consumer(ConsumerOptions::durable("d").after(["g1", "g2"]))
        .unwrap();
    let mut p = ring.producer().unwrap();
    p.publish(&5u64.to_le_bytes()).unwrap();
    let mut got = Vec::new();
    assert_eq!(m1.poll_once(|_| {}).unwrap(), 1);
    for _ in 0..2 {
        assert_eq!(
            d.poll_once(|ev| got.push(value(&ev))).unwrap(),
            0,
            "g2 has not"
        );
    }
    assert_eq!(m2.poll_once(|_| {}).unwrap(), 1);
    assert_eq!(d.poll_once(|ev| got.push(value(&ev))).unwrap(), 1);
    assert_eq!(got, vec![5]);
}

/// An entry last a member's and left CLAIMED by a process that died taking it (its flags
/// may still be the member's): it holds nothing, and `free_consumer` frees it, as the
/// broker's sweep asks for such an entry. The CLAIMED word is forged onto the entry a member
/// left, whose flags are a member's, as a taker's death would leave them.
#[test]
fn an_entry_left_claimed_with_a_members_flags_is_freed() {
    use shmring_layout::{consumer_state, owned_word};
    /// Above any pid_max: no process has it.
    const GONE: u32 = 0x3fff_fff0;
    let ns = Namespace::concurrent("group_claimed_orphan");
    let ring = ring_with(&ns, 8, 4);
    let m = ring.consumer(worker()).unwrap();
    let index = m.index();
    drop(m);
    let word = entry_u64(&ring, index, entry_field::WORD, None);
    let orphan = owned_word::next(word, consumer_state::CLAIMED, GONE);
    entry_u64(&ring, index, entry_field::WORD, Some(orphan));
    assert!(
        ring.free_consumer(index, orphan),
        "the orphaned entry was not freed"
    );
    let now = entry_u64(&ring, index, entry_field::WORD, None);
    assert_eq!(owned_word::state(now), consumer_state::FREE);
}

/// A second entry of group `g` as a creator leaves it when it dies between its ACTIVE CAS and
/// its duplicate-name check, the other creator having made its own entry DETACHED
/// meanwhile (it saw the first one CLAIMED, not yet gating).
fn forge_dead_creators_entry(ring: &Ring, index: u32) {
    use shmring_layout::{consumer_flags, consumer_state, owned_word};
    /// Above any pid_max: no process has it.
    const GONE: u32 = 0x3fff_fff0;
    let raw = shmring_testkit::raw::RawSegment::open(ring);
    raw.fabricate_consumer(
        index,
        owned_word::pack(3, consumer_state::ACTIVE, GONE),
        consumer_flags::REQUIRED | consumer_flags::DURABLE | consumer_flags::GROUP,
        "w",
        ring.info().head,
    );
}

/// A group whose creator died before it stored the group's start (still flagged STARTING)
/// holds the position read before its ACTIVE CAS, which producers may have run a lap past:
/// a member that attaches frees that entry and makes the group again from the head, so it
/// never claims slots there.
#[test]
fn a_group_whose_creator_died_before_its_start_is_made_again_at_the_head() {
    use shmring_layout::{consumer_flags, consumer_state, owned_word};
    /// Above any pid_max: no process has it.
    const GONE: u32 = 0x3fff_fff0;
    let ns = Namespace::concurrent("group_starting");
    let ring = ring_with(&ns, 16, 4);
    let mut p = ring.producer().unwrap();
    for v in 0..5u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    raw.fabricate_consumer(
        0,
        owned_word::pack(3, consumer_state::ACTIVE, GONE),
        consumer_flags::REQUIRED
            | consumer_flags::DURABLE
            | consumer_flags::GROUP
            | consumer_flags::STARTING,
        "w",
        2,
    );
    let mut m = ring.consumer(worker()).unwrap();
    let group = ring
        .info()
        .consumers
        .into_iter()
        .find(|c| c.is_group)
        .expect("the group");
    // Its work sequence: the head, or past a claim the member has taken there.
    assert!(group.next >= 5, "made again at the head: {group:#?}");
    assert_eq!(
        raw.consumer_flags(group.index) & consumer_flags::STARTING,
        0
    );
    p.publish(&5u64.to_le_bytes()).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.is_empty() {
        assert!(Instant::now() < deadline, "the event did not come");
        m.poll_once(|ev| got.push(value(&ev))).unwrap();
    }
    assert_eq!(got, [5]);
}

/// Group `w` made by member `m1`, with a free entry first in the table (`first`) or after
/// the group's: the ring, `m1`, the group's index and that free entry's.
fn group_and_a_free_entry(ns: &Namespace, first: bool) -> (Ring, Consumer, u32, u32) {
    let ring = ring_with(ns, 16, 8);
    // Index 0 kept free while the group and m1 take theirs.
    let holder = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let m1 = ring.consumer(worker()).unwrap();
    drop(holder);
    let info = ring.info();
    let group = info
        .consumers
        .iter()
        .find(|c| c.is_group)
        .expect("the group")
        .index;
    let free = if first {
        0
    } else {
        (0..8)
            .find(|i| *i > group && info.consumers.iter().all(|c| c.index != *i))
            .expect("a free entry after the group's")
    };
    (ring, m1, group, free)
}

/// The group entry member `m` belongs to.
fn group_of(ring: &Ring, m: &Consumer) -> Option<u32> {
    ring.info()
        .consumers
        .iter()
        .find(|c| c.index == m.index())
        .and_then(|c| c.group)
}

/// A group that a creator's death left with a second entry: a member that attaches joins the
/// group the other creator made and frees the dead creator's entry, which would otherwise
/// split the events (one group taking each) or hold producers for ever, whatever the order
/// of the two entries in the table.
#[test]
fn a_dead_creator_s_duplicate_group_entry_is_freed_not_joined() {
    for dead_first in [true, false] {
        let ns = Namespace::concurrent("group_dup_creator");
        let (ring, m1, group, dead) = group_and_a_free_entry(&ns, dead_first);
        forge_dead_creators_entry(&ring, dead);
        let m2 = ring.consumer(worker()).unwrap();
        let info = ring.info();
        assert_eq!(
            group_of(&ring, &m2),
            Some(group),
            "dead first {dead_first}: {info:#?}"
        );
        // Freed, and maybe taken since by m2's own entry: no group entry but the one.
        let groups: Vec<u32> = info
            .consumers
            .iter()
            .filter(|c| c.is_group)
            .map(|c| c.index)
            .collect();
        assert_eq!(
            groups,
            [group],
            "dead first {dead_first}: the dead creator's entry {dead} is freed: {info:#?}"
        );
        drop((m1, m2));
    }
}

/// A durable consumer of the group's name caught between its ACTIVE CAS and its own
/// duplicate check (it then gives way to the group, which came first): a member attaching
/// meanwhile joins the group, and is not told the name is a durable consumer's.
#[test]
fn a_durable_attach_racing_under_a_group_s_name_does_not_refuse_a_member() {
    use shmring_layout::{consumer_flags, consumer_state, owned_word};
    for durable_first in [false, true] {
        let ns = Namespace::concurrent("group_durable_race");
        let (ring, m1, group, at) = group_and_a_free_entry(&ns, durable_first);
        shmring_testkit::raw::RawSegment::open(&ring).fabricate_consumer(
            at,
            owned_word::pack(3, consumer_state::ACTIVE, std::process::id()),
            consumer_flags::REQUIRED | consumer_flags::DURABLE,
            "w",
            ring.info().head,
        );
        let m2 = ring
            .consumer(worker())
            .unwrap_or_else(|e| panic!("durable first {durable_first}: {e}"));
        assert_eq!(
            group_of(&ring, &m2),
            Some(group),
            "durable first {durable_first}"
        );
        drop((m1, m2));
    }
}

/// A member that joins by taking over a failed member's entry counts as redelivered the
/// events of the taken-over claim its handler took, not the tombstones between them.
#[test]
fn a_taken_over_claim_counts_its_events_not_its_tombstones_as_redelivered() {
    let ns = Namespace::concurrent("group_redeliver_tomb");
    let ring = ring_with(&ns, 16, 4);
    let mut a = ring.consumer(worker().batch_cap(4)).unwrap();
    let mut p = ring.producer().unwrap();
    p.publish(&0u64.to_le_bytes()).unwrap();
    p.publish(&1u64.to_le_bytes()).unwrap();
    drop(p.claim().unwrap());
    p.publish(&3u64.to_le_bytes()).unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "a never reached event 1");
        match a.poll_once(|ev| assert_ne!(value(&ev), 1, "a's handler fails on 1")) {
            Ok(_) => {}
            Err(PollError::HandlerPanicked { sequence: 1 }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let index = a.index();
    drop(a);
    let mut b = ring.consumer(worker().batch_cap(4)).unwrap();
    assert_eq!(b.index(), index, "b joins on a's entry, with its claim");
    let mut got = Vec::new();
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "b got {got:?}");
        b.poll_once(|ev| got.push(value(&ev))).unwrap();
    }
    assert_eq!(got, [1, 3]);
    assert_eq!(
        b.stats().redelivered,
        2,
        "events 1 and 3, not the tombstone at 2"
    );
}

/// A member that died between storing its claim and taking it (the work sequence never
/// moved) left an entry naming events nobody claimed. The member that takes the entry over
/// delivers them as redelivered, then claims from the work sequence, where they are again:
/// each event it is handed twice is counted once, and nothing else.
#[test]
fn a_claim_left_before_it_was_taken_counts_each_event_handed_twice_once() {
    use shmring_layout::{consumer_state, owned_word};
    /// Above any pid_max: no process has it.
    const GONE: u32 = 0x3fff_fff0;
    let ns = Namespace::concurrent("group_unwon_claim");
    let ring = ring_with(&ns, 16, 4);
    let mut a = ring.consumer(worker().batch_cap(4)).unwrap();
    publish_range(&ring, 0..12);
    let mut by_a = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while by_a.len() < 4 {
        assert!(Instant::now() < deadline, "nothing for a: {by_a:?}");
        a.poll_once(|ev| by_a.push(value(&ev))).unwrap();
    }
    let index = a.index();
    let group = ring
        .info()
        .consumers
        .iter()
        .find(|c| c.is_group)
        .expect("the group's entry")
        .index;
    // a holds its next claim (taken at the end of its poll). Its process "dies" as if
    // between storing that claim and taking it: the work sequence goes back to the claim's
    // start, the handle is never dropped, and the entry says a process that is gone holds
    // it.
    std::mem::forget(a);
    let start = entry_u64(&ring, index, entry_field::NEXT, None);
    let end = entry_u64(&ring, index, entry_field::CLAIM_END, None);
    assert!(start < end && end <= 12, "a holds a claim: {start}..{end}");
    entry_u64(&ring, group, entry_field::NEXT, Some(start));
    let word = entry_u64(&ring, index, entry_field::WORD, None);
    let dead = owned_word::next(word, consumer_state::ACTIVE, GONE);
    entry_u64(&ring, index, entry_field::WORD, Some(dead));

    let mut b = ring.consumer(worker().batch_cap(4)).unwrap();
    assert_eq!(b.index(), index, "the joiner takes the dead member's entry");
    let mut got = by_a.clone();
    let deadline = Instant::now() + PATIENCE;
    while got.iter().collect::<std::collections::BTreeSet<_>>().len() < 12 {
        assert!(Instant::now() < deadline, "events stopped: {got:?}");
        b.poll_once(|ev| got.push(value(&ev))).unwrap();
    }
    let twice = got.len() as u64 - 12;
    assert!(twice > 0, "the unclaimed events are handed twice: {got:?}");
    assert_eq!(
        b.stats().redelivered,
        twice,
        "redelivered counts each event handed twice once: {got:?}"
    );
}

/// A claim left by a member and delivered by another, with no claim in between (the work
/// sequence does not move): the consumer after the group sees it once delivered.
#[test]
fn a_consumer_after_a_group_gets_an_adopted_claim_once_it_is_delivered() {
    let ns = Namespace::concurrent("group_then_adopted");
    let ring = ring_with(&ns, 16, 6);
    // `a` claims sequence 0 as it joins, `b` sequence 1; then event 0 is published and `a`
    // leaves without handling it.
    let a = ring.consumer(worker().batch_cap(1)).unwrap();
    let mut b = ring.consumer(worker().batch_cap(1)).unwrap();
    let mut d = ring
        .consumer(ConsumerOptions::durable("d").after(["w"]))
        .unwrap();
    ring.producer()
        .unwrap()
        .publish(&7u64.to_le_bytes())
        .unwrap();
    drop(a);
    let mut got = Vec::new();
    // The first look walks the table, the next ones (the work sequence unmoved) read the
    // members that walk found.
    for _ in 0..3 {
        assert_eq!(d.poll_once(|ev| got.push(value(&ev))).unwrap(), 0);
    }
    // `b` adopts the claim on one of its idle polls and delivers it.
    let mut handled = 0;
    for _ in 0..4096 {
        handled += b.poll_once(|_| {}).unwrap();
        if handled > 0 {
            break;
        }
    }
    assert_eq!(handled, 1, "b adopted and delivered the claim a left");
    assert_eq!(d.poll_once(|ev| got.push(value(&ev))).unwrap(), 1);
    assert_eq!(got, vec![7]);
}

/// Health, as `broker status` shows it: a consumer after the group waiting for an event a
/// member holds is held there, not STALLED; the member is.
#[test]
fn a_consumer_after_a_group_held_by_a_member_is_not_stalled_the_member_is() {
    let ns = Namespace::concurrent("group_then_health");
    let ring = ring_with(&ns, 16, 6);
    // The member claims sequence 0 as it joins; it never polls.
    let _m = ring.consumer(worker().batch_cap(1)).unwrap();
    let _d = ring
        .consumer(ConsumerOptions::durable("d").after(["w"]))
        .unwrap();
    publish_range(&ring, 0..3);
    let h = health_now(&ring);
    let info = ring.info();
    let member = info.consumers.iter().find(|c| c.group.is_some()).unwrap();
    let state = |index: u32| h.consumers.iter().find(|c| c.index == index).unwrap().state;
    assert_eq!(state(member.index), HealthState::Stalled, "{h:?}");
    let d = info.consumers.iter().find(|c| c.name == "d").unwrap();
    assert_eq!(
        state(d.index),
        HealthState::Healthy,
        "held by the member, nothing to do: {h:?}"
    );
}

/// The consumer table, short.
fn table(ring: &Ring) -> Vec<String> {
    let info = ring.info();
    info.consumers
        .iter()
        .map(|c| {
            let what = if c.is_group { "group" } else { "member" };
            format!("{what} {} {} at {}", c.index, c.state, c.next)
        })
        .collect()
}

/// Members in threads join and leave while a producer publishes: every sequence is
/// delivered exactly once overall (a member that leaves gives its claim back; nobody
/// died, so nothing is delivered twice), and a consumer after the group (`after(["w"])`)
/// receives every event, in order, each only once a member's handler has returned from it.
#[test]
fn members_join_and_leave_while_events_flow() {
    let ns = Namespace::concurrent("group_churn");
    let ring = Arc::new(ring_with(&ns, 64, 16));
    let n = 20_000u64;
    let handled: Arc<Vec<AtomicBool>> = Arc::new((0..n).map(|_| AtomicBool::new(false)).collect());
    let seen = Arc::new(Mutex::new(Vec::with_capacity(n as usize)));
    let count = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + PATIENCE;

    let spawn_worker = |stint: u64| {
        let (ring, seen, count, done) = (ring.clone(), seen.clone(), count.clone(), done.clone());
        let handled = handled.clone();
        std::thread::spawn(move || {
            let mut m = ring
                .consumer(worker().batch_cap(8))
                .unwrap_or_else(|e| panic!("{e}: {:#?}", table(&ring)));
            let mut mine = Vec::new();
            let mut polls = 0u64;
            while !done.load(Ordering::Relaxed) && polls < stint && Instant::now() < deadline {
                let k = m
                    .poll_once(|ev| {
                        mine.push(value(&ev));
                        // Relaxed: the member's commit publishes it to the consumer after
                        // the group.
                        handled[value(&ev) as usize].store(true, Ordering::Relaxed);
                    })
                    .unwrap();
                count.fetch_add(k as u64, Ordering::Relaxed);
                polls += 1;
                if k == 0 {
                    std::thread::yield_now();
                }
            }
            let st = m.stats();
            assert_eq!(
                (st.dropped_behind, st.skipped),
                (0, 0),
                "a member found an event overwritten"
            );
            seen.lock().unwrap().extend(mine);
        })
    };

    // The group exists before the first event (a group delivers what is published after
    // its creation); its first member leaves at once, holding its first claim.
    drop(ring.consumer(worker()).unwrap());
    let after = {
        let mut d = ring
            .consumer(ConsumerOptions::durable("d").after(["w"]))
            .unwrap();
        let handled = handled.clone();
        std::thread::spawn(move || {
            let mut got = Vec::with_capacity(n as usize);
            while (got.len() as u64) < n && Instant::now() < deadline {
                let k = d
                    .poll_once(|ev| {
                        let v = value(&ev);
                        assert!(
                            handled[v as usize].load(Ordering::Relaxed),
                            "event {v} reached the consumer after the group before a member \
                             handled it"
                        );
                        got.push(v);
                    })
                    .unwrap();
                if k == 0 {
                    std::thread::yield_now();
                }
            }
            got
        })
    };
    // One member stays for the whole run; others come and go.
    let stayer = spawn_worker(u64::MAX);
    let producer = {
        let ring = ring.clone();
        std::thread::spawn(move || {
            let mut p = ring.producer().unwrap();
            // Bounded: a consumer that stopped (a failed assertion) leaves the ring full.
            for i in 0..n {
                if p.publish_deadline(&i.to_le_bytes(), deadline).is_err() {
                    break;
                }
            }
        })
    };
    let mut waves = 0;
    while count.load(Ordering::Relaxed) < n * 9 / 10 && Instant::now() < deadline {
        let a = spawn_worker(200);
        let b = spawn_worker(500);
        a.join().unwrap();
        b.join().unwrap();
        waves += 1;
    }
    while count.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let table = table(&ring);
    let head = ring.info().head;
    done.store(true, Ordering::Relaxed);
    stayer.join().unwrap();
    producer.join().unwrap();
    let mut all = seen.lock().unwrap().clone();
    all.sort_unstable();
    let dup = all.windows(2).filter(|w| w[0] == w[1]).count();
    all.dedup();
    assert_eq!(dup, 0, "delivered twice");
    let missing: Vec<u64> = (0..n)
        .filter(|s| all.binary_search(s).is_err())
        .take(40)
        .collect();
    assert_eq!(
        all.len() as u64,
        n,
        "lost events ({waves} waves of members); head {head}, table {table:?}, missing {missing:?}"
    );
    assert!(waves > 0);
    let got = after.join().unwrap();
    assert!(
        got == (0..n).collect::<Vec<_>>(),
        "the consumer after the group got {} events, not every one in order",
        got.len()
    );
}

#[test]
fn a_member_under_retry_hands_nothing_over_during_its_back_off() {
    let ns = Namespace::concurrent("group_retry");
    let ring = ring_with(&ns, 16, 4);
    let mut p = ring.producer().unwrap();
    // A back-off no poll loop of this test outlasts by accident: the first polls after the
    // failure must hand nothing over.
    let backoff = Duration::from_secs(3600);
    let mut m = ring
        .consumer(worker().batch_cap(1).on_error(shmring::ErrorPolicy::Retry {
            attempts: 3,
            backoff,
        }))
        .unwrap();
    for v in 0..3u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    let mut seen = Vec::new();
    let mut fail_at_1 = true;
    let step = |m: &mut Consumer, seen: &mut Vec<u64>, fail: &mut bool| {
        m.poll_once_fallible(|ev| {
            let v = value(&ev);
            if v == 1 && *fail {
                *fail = false;
                return Err("not yet");
            }
            seen.push(v);
            Ok(())
        })
    };
    let deadline = Instant::now() + PATIENCE;
    while !seen.contains(&0) {
        assert!(Instant::now() < deadline, "event 0 never came");
        step(&mut m, &mut seen, &mut fail_at_1).unwrap();
    }
    // Event 1 fails once: the member backs off instead of trying again at once.
    while fail_at_1 {
        assert!(Instant::now() < deadline, "event 1 never came");
        step(&mut m, &mut seen, &mut fail_at_1).unwrap();
    }
    for _ in 0..100 {
        assert_eq!(step(&mut m, &mut seen, &mut fail_at_1), Ok(0));
    }
    assert_eq!(seen, vec![0], "nothing handed over during the back-off");
    assert_eq!(m.stats().retries, 1);
    assert_eq!(m.stats().failures, 1);
}

/// The attempts at one event count across the members that try it: a member that leaves
/// (or dies) after a failed attempt does not give the next member a fresh count, or a poison
/// event that kills its handler's process would take every member down in turn.
#[test]
fn attempts_at_an_event_count_across_members() {
    let ns = Namespace::concurrent("group_attempts");
    let ring = ring_with(&ns, 16, 4);
    let mut p = ring.producer().unwrap();
    let policy = shmring::ErrorPolicy::Skip { attempts: 3 };
    let mut a = ring
        .consumer(worker().batch_cap(1).on_error(policy))
        .unwrap();
    p.publish(&0u64.to_le_bytes()).unwrap();
    let deadline = Instant::now() + PATIENCE;
    // A's one failed attempt at event 0 (its second is counted before it is made, and
    // never made); then A leaves, handing its claim on.
    while a.stats().failures == 0 {
        assert!(Instant::now() < deadline, "event 0 never came to a");
        let _ = a.poll_once_fallible(|_| Err::<(), _>("poison"));
    }
    drop(a);
    let mut b = ring
        .consumer(worker().batch_cap(1).on_error(policy))
        .unwrap();
    // B's stats start from the entry it took over (A's): count B's own attempts.
    let mut tried = 0;
    while b.stats().dead_lettered == 0 {
        assert!(Instant::now() < deadline, "event 0 never came to b");
        let _ = b.poll_once_fallible(|_| {
            tried += 1;
            Err::<(), _>("poison")
        });
    }
    // Three failed attempts at event 0 in all, A's one and B's two: B, which joined by taking
    // over the entry A left with its claim, carries on A's count, without the attempt A
    // marked and never made.
    assert_eq!(b.stats().dead_lettered, 1, "stats of b: {:?}", b.stats());
    assert_eq!(tried, 2, "b's attempts at event 0");
}

/// The dead letters a member reported: (sequence, attempts).
type Letters = Arc<Mutex<Vec<(u64, u32)>>>;

/// Two members: `a` stops at its first failure (its claim is left FAILED at the event, one
/// attempt counted); `b`, still running, adopts the claim and answers with its own policy,
/// counting on from `a`'s attempt.
fn adopt_a_failed_claim(
    ns: &str,
    policy: shmring::ErrorPolicy,
) -> (Namespace, Ring, Consumer, Letters) {
    let ns = Namespace::concurrent(ns);
    let ring = ring_with(&ns, 16, 4);
    let mut p = ring.producer().unwrap();
    let mut a = ring.consumer(worker().batch_cap(1)).unwrap();
    let mut b = ring
        .consumer(worker().batch_cap(1).on_error(policy))
        .unwrap();
    let letters = Arc::new(Mutex::new(Vec::new()));
    let l = Arc::clone(&letters);
    b.on_dead_letter(move |d| l.lock().unwrap().push((d.sequence, d.attempts)));
    for v in 0..2u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    // a holds sequence 0 (it attached first) and stops there.
    let r = a.poll_once_fallible(|_| Err::<(), _>("poison"));
    assert_eq!(
        r,
        Err(PollError::HandlerFailed {
            sequence: 0,
            attempts: 1
        })
    );
    drop(a);
    (ns, ring, b, letters)
}

#[test]
fn a_live_member_adopting_a_failed_claim_skips_under_its_policy() {
    let (_ns, ring, mut b, letters) = adopt_a_failed_claim(
        "group_adopt_skip",
        shmring::ErrorPolicy::Skip { attempts: 3 },
    );
    let mut p = ring.producer().unwrap();
    let (mut tried, mut seen) = (0, Vec::new());
    let deadline = Instant::now() + PATIENCE;
    let mut published = false;
    while !seen.contains(&2) {
        assert!(
            Instant::now() < deadline,
            "b got {seen:?}, tried 0 {tried} times"
        );
        if !published && b.stats().dead_lettered == 1 {
            p.publish(&2u64.to_le_bytes()).unwrap();
            published = true;
        }
        b.poll_once_fallible(|ev| {
            if value(&ev) == 0 {
                tried += 1;
                return Err("poison");
            }
            seen.push(value(&ev));
            Ok(())
        })
        .expect("b goes on: its policy skips the event");
    }
    // a's attempt and b's two: the third failure skips it, once.
    assert_eq!(tried, 2);
    assert_eq!(*letters.lock().unwrap(), vec![(0, 3)]);
    assert_eq!(b.stats().dead_lettered, 1, "counted in b: {:?}", b.stats());
    assert_eq!(seen, vec![1, 2]);
    let info = ring.info();
    assert!(
        info.consumers
            .iter()
            .all(|c| c.state != "FAILED" && c.poison.is_none()),
        "no entry left failing: {:#?}",
        info.consumers
    );
}

#[test]
fn a_live_member_adopting_a_failed_claim_stops_when_its_retries_are_used_up() {
    let policy = shmring::ErrorPolicy::Retry {
        attempts: 3,
        backoff: Duration::ZERO,
    };
    let (_ns, _ring, mut b, letters) = adopt_a_failed_claim("group_adopt_retry", policy);
    let mut tried = 0;
    let deadline = Instant::now() + PATIENCE;
    let r = loop {
        assert!(Instant::now() < deadline, "b tried event 0 {tried} times");
        let r = b.poll_once_fallible(|ev| {
            if value(&ev) == 0 {
                tried += 1;
                return Err("poison");
            }
            Ok(())
        });
        if r.is_err() {
            break r;
        }
    };
    assert_eq!(
        r,
        Err(PollError::HandlerFailed {
            sequence: 0,
            attempts: 3
        })
    );
    assert_eq!(tried, 2, "a's attempt and b's two");
    // b's first attempt was its adoption of the claim; after its failure b retried once.
    assert_eq!(b.stats().retries, 1);
    assert!(letters.lock().unwrap().is_empty());
}

/// A member that stops at an adopted claim's event (its `Retry` attempts used up) holds a
/// claim of its own too: once its handle is gone, that claim must reach another member, as
/// the claim of a member that stops at its own event does (left FAILED, open to the others).
#[test]
fn a_member_stopping_at_an_adopted_claim_leaves_its_own_claim_to_the_others() {
    let policy = shmring::ErrorPolicy::Retry {
        attempts: 3,
        backoff: Duration::ZERO,
    };
    let (_ns, ring, mut b, _letters) = adopt_a_failed_claim("group_adopt_own_claim", policy);
    let deadline = Instant::now() + PATIENCE;
    let mut b_saw = Vec::new();
    let r = loop {
        assert!(Instant::now() < deadline, "b never stopped at event 0");
        let r = b.poll_once_fallible(|ev| {
            if value(&ev) == 0 {
                return Err("poison");
            }
            b_saw.push(value(&ev));
            Ok(())
        });
        if r.is_err() {
            break r;
        }
    };
    assert!(
        matches!(r, Err(PollError::HandlerFailed { sequence: 0, .. })),
        "{r:?}"
    );
    // b delivered its own first claim (event 1) and holds its next one, unpublished yet.
    assert_eq!(b_saw, vec![1]);
    let b_index = b.index();
    drop(b);
    let mut p = ring.producer().unwrap();
    for v in 2..4u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    // A new member, whose handler takes every event: everything after event 1 reaches it.
    let mut c = ring.consumer(worker()).unwrap();
    let mut seen = Vec::new();
    while !(seen.contains(&2) && seen.contains(&3)) {
        if Instant::now() >= deadline {
            let info = ring.info();
            let b_entry = info.consumers.iter().find(|e| e.index == b_index);
            panic!("c got {seen:?}; the entry b left: {b_entry:#?}");
        }
        c.poll_once(|ev| seen.push(value(&ev))).unwrap();
        if !(seen.contains(&2) && seen.contains(&3)) {
            c.wait().unwrap();
        }
    }
}

/// The same with the default policy: a member that stops at the first failure of an
/// adopted claim's event leaves its own claim to the others once its handle is gone.
#[test]
fn a_member_stopping_at_an_adopted_claim_under_stop_leaves_its_own_claim_to_the_others() {
    let (_ns, ring, mut b, _letters) =
        adopt_a_failed_claim("group_adopt_own_claim_stop", shmring::ErrorPolicy::Stop);
    let deadline = Instant::now() + PATIENCE;
    let r = loop {
        assert!(Instant::now() < deadline, "b never stopped at event 0");
        let r = b.poll_once_fallible(|ev| {
            if value(&ev) == 0 {
                return Err("poison");
            }
            Ok(())
        });
        if r.is_err() {
            break r;
        }
    };
    assert!(
        matches!(r, Err(PollError::HandlerFailed { sequence: 0, .. })),
        "{r:?}"
    );
    let b_index = b.index();
    drop(b);
    let info = ring.info();
    let b_entry = info.consumers.iter().find(|e| e.index == b_index).unwrap();
    assert_ne!(
        b_entry.state, "ACTIVE",
        "the entry of the dropped handle, with its claim: {b_entry:#?}"
    );
}

/// A member that fails on a claim it adopted from a failed member leaves that claim's entry
/// FAILED again, with one more failure in its count: a reader of the table (the broker,
/// which reports each failure once) tells the second failure from the first by it. Before,
/// the entry came back FAILED with the same counts, and the second failure went unreported.
#[test]
fn a_failure_on_an_adopted_claim_is_counted_in_the_claim_s_entry() {
    let (_ns, ring, mut b, _letters) =
        adopt_a_failed_claim("group_adopt_count", shmring::ErrorPolicy::Stop);
    let failed: Vec<(u32, u64)> = ring
        .info()
        .consumers
        .into_iter()
        .filter(|c| c.state == "FAILED")
        .map(|c| (c.index, c.stats.failures))
        .collect();
    let [(a_index, before)] = failed[..] else {
        panic!("one FAILED entry, a's: {failed:?}");
    };
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "b never failed at event 0");
        let r = b.poll_once_fallible(|ev| {
            if value(&ev) == 0 {
                return Err("poison");
            }
            Ok(())
        });
        if r.is_err() {
            break;
        }
    }
    let a_entry = ring
        .info()
        .consumers
        .into_iter()
        .find(|c| c.index == a_index)
        .expect("a's entry");
    assert_eq!(a_entry.state, "FAILED", "{a_entry:#?}");
    assert_eq!(a_entry.stats.failures, before + 1, "{a_entry:#?}");
}

/// Ring `r` (16 slots, 4 consumer entries) with worker group `w` declared, so that the group
/// starts at the first sequence.
fn declared_group_ring(ns: &Namespace) -> Ring {
    let config = RingConfig {
        max_consumers: 4,
        declared_groups: vec!["w".to_owned()],
        ..small(16)
    };
    Ring::create(ns.name(), "r", &config).unwrap()
}

/// The skips counted over every entry of the table.
fn dead_lettered_in_table(ring: &Ring) -> u64 {
    ring.info()
        .consumers
        .iter()
        .map(|c| c.stats.dead_lettered)
        .sum()
}

/// A member that skips an event of an adopted claim and leaves before the claim's end counts
/// the skip as its own: the claim goes back to the others, the count stays with the member
/// that skipped, and it is counted once in the table.
#[test]
fn a_skip_in_an_adopted_claim_given_back_is_counted_once_by_the_member_that_made_it() {
    let ns = Namespace::concurrent("group_adopt_give_back");
    // b adopts a's claim: event 0 fails again (a's attempt and b's: skipped at the second);
    // event 1 fails once ("not now"), which `Skip` answers with another attempt, never made:
    // b leaves first, giving the rest of the claim back.
    let (ring, b, _) = member_holding_an_adopted_claim_with_a_skip(&ns);
    let b_index = b.index();
    drop(b);
    let info = ring.info();
    let dead = dead_lettered_in_table(&ring);
    let b_entry = info.consumers.iter().find(|c| c.index == b_index).unwrap();
    assert_eq!(
        (b_entry.stats.dead_lettered, dead),
        (1, 1),
        "b's entry counts its skip, and the table counts it once: {:#?}",
        info.consumers
    );
}

/// A member that skips an event of its own claim and leaves holding its next claim leaves
/// the skip counted in its entry; a live member that adopts that claim and frees the entry
/// must not make the count vanish: the table counts the skip once after every entry is let
/// go, as it does when a joining member carries the entry on.
#[test]
fn a_skip_of_a_member_that_left_is_still_counted_once_its_entry_is_adopted_and_freed() {
    let ns = Namespace::concurrent("group_left_skip_freed");
    let ring = declared_group_ring(&ns);
    let mut p = ring.producer().unwrap();
    p.publish(&0u64.to_le_bytes()).unwrap();
    // a claims event 0, b the next (unpublished).
    let mut a = ring
        .consumer(
            worker()
                .batch_cap(1)
                .on_error(shmring::ErrorPolicy::Skip { attempts: 1 }),
        )
        .unwrap();
    let mut b = ring.consumer(worker().batch_cap(1)).unwrap();
    // a skips event 0 at its first failure and claims event 2, not published yet.
    a.poll_once_fallible(|_| Err::<(), _>("poison")).unwrap();
    assert_eq!(a.stats().dead_lettered, 1);
    drop(a);
    assert_eq!(
        dead_lettered_in_table(&ring),
        1,
        "a's entry counts its skip while it waits"
    );
    for v in 1..3u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    // b delivers its own event 1 and adopts a's claim (event 2), freeing a's entry.
    let mut seen = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while !seen.contains(&2) {
        assert!(Instant::now() < deadline, "b got {seen:?}");
        b.poll_once(|ev| seen.push(value(&ev))).unwrap();
        if !seen.contains(&2) {
            b.wait().unwrap();
        }
    }
    drop(b);
    assert_eq!(
        dead_lettered_in_table(&ring),
        1,
        "the skip a made is counted once in the table: {:#?}",
        ring.info().consumers
    );
}

/// Read and write a `u64` of consumer entry `index` at `field` through the segment file.
fn entry_u64(ring: &Ring, index: u32, field: usize, write: Option<u64>) -> u64 {
    use std::os::unix::fs::FileExt;
    let offset = ring.geometry().consumer_offset(index).expect("entry") + field as u64;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ring.path())
        .expect("open segment");
    if let Some(v) = write {
        f.write_all_at(&v.to_ne_bytes(), offset)
            .expect("write entry");
    }
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, offset).expect("read entry");
    u64::from_ne_bytes(b)
}

/// The offsets in a consumer entry that the entry-taken tests rewrite.
mod entry_field {
    use shmring_layout::{
        ConsumerCold, ConsumerCounters, ConsumerEntry, ConsumerHot, GraphCounters,
    };
    use std::mem::offset_of;
    pub const WORD: usize = offset_of!(ConsumerEntry, hot) + offset_of!(ConsumerHot, word);
    pub const NEXT: usize = offset_of!(ConsumerEntry, hot) + offset_of!(ConsumerHot, next);
    pub const CLAIM_END: usize =
        offset_of!(ConsumerEntry, cold) + offset_of!(ConsumerCold, claim_end);
    pub const DELIVERED: usize = offset_of!(ConsumerEntry, cold)
        + offset_of!(ConsumerCold, counters)
        + offset_of!(ConsumerCounters, delivered);
    pub const DEAD: usize = offset_of!(ConsumerEntry, cold)
        + offset_of!(ConsumerCold, graph)
        + offset_of!(GraphCounters, dead_lettered);
}

/// Member `a` fails at event 0 and leaves; member `b` adopts its claim (events 0 and 1),
/// skips event 0 there (a's attempt and b's), fails once at event 1 and still holds the
/// claim. Returns the ring, `b` and the index of a's entry.
fn member_holding_an_adopted_claim_with_a_skip(ns: &Namespace) -> (Ring, Consumer, u32) {
    let ring = declared_group_ring(ns);
    let mut p = ring.producer().unwrap();
    for v in 0..2u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    let mut a = ring.consumer(worker().batch_cap(2)).unwrap();
    let mut b = ring
        .consumer(
            worker()
                .batch_cap(1)
                .on_error(shmring::ErrorPolicy::Skip { attempts: 2 }),
        )
        .unwrap();
    let r = a.poll_once_fallible(|_| Err::<(), _>("poison"));
    assert!(
        matches!(r, Err(PollError::HandlerFailed { sequence: 0, .. })),
        "{r:?}"
    );
    let a_index = a.index();
    drop(a);
    let deadline = Instant::now() + PATIENCE;
    while b.stats().failures < 2 {
        assert!(
            Instant::now() < deadline,
            "b never reached event 1: {:?}",
            b.stats()
        );
        let _ = b.poll_once_fallible(|ev| {
            if value(&ev) == 0 {
                Err("poison")
            } else {
                Err("not now")
            }
        });
    }
    (ring, b, a_index)
}

/// Give entry `index` to another holder (pid 1 stands for it); returns the new word.
fn take_entry(ring: &Ring, index: u32) -> u64 {
    use shmring_layout::{consumer_state, owned_word};
    let word = entry_u64(ring, index, entry_field::WORD, None);
    let taken = owned_word::next(word, consumer_state::ACTIVE, 1);
    entry_u64(ring, index, entry_field::WORD, Some(taken));
    taken
}

/// A member whose own entry was taken from it (another holder's now) writes nothing more
/// into that entry as it leaves, not even the skips it moves over from a claim it adopted:
/// the counters belong to the new holder. The adopted claim goes back to the group with its
/// skip still counted once in the table.
#[test]
fn a_member_whose_entry_was_taken_leaves_the_new_holders_counters_alone() {
    use entry_field::{DEAD, DELIVERED, WORD};
    let ns = Namespace::concurrent("group_entry_taken");
    let (ring, b, a_index) = member_holding_an_adopted_claim_with_a_skip(&ns);
    assert_eq!(
        entry_u64(&ring, a_index, DEAD, None),
        1,
        "the skip is counted in the adopted entry"
    );
    // The new holder of b's entry has counted 7 deliveries and no skip.
    let index = b.index();
    let taken = take_entry(&ring, index);
    entry_u64(&ring, index, DELIVERED, Some(7));
    entry_u64(&ring, index, DEAD, Some(0));
    drop(b);
    assert_eq!(entry_u64(&ring, index, WORD, None), taken);
    assert_eq!(
        (
            entry_u64(&ring, index, DELIVERED, None),
            entry_u64(&ring, index, DEAD, None)
        ),
        (7, 0),
        "the member that lost the entry wrote into it as it left"
    );
    assert_eq!(
        dead_lettered_in_table(&ring),
        1,
        "the skip is counted once, in the claim given back: {:#?}",
        ring.info().consumers
    );
}

/// A member whose adopted entry was taken from it leaves that entry alone as it leaves: its
/// word, and the skips counted in it, are the new holder's.
#[test]
fn a_member_leaves_an_adopted_entry_that_was_taken_alone() {
    use entry_field::{DEAD, WORD};
    let ns = Namespace::concurrent("group_adopted_taken");
    let (ring, b, a_index) = member_holding_an_adopted_claim_with_a_skip(&ns);
    let taken = take_entry(&ring, a_index);
    entry_u64(&ring, a_index, DEAD, Some(5));
    let b_index = b.index();
    drop(b);
    assert_eq!(entry_u64(&ring, a_index, WORD, None), taken);
    assert_eq!(
        (
            entry_u64(&ring, a_index, DEAD, None),
            entry_u64(&ring, b_index, DEAD, None)
        ),
        (5, 0),
        "the member moved the skips of an entry it no longer held"
    );
}

#[test]
fn a_consumer_after_a_group_sees_an_event_only_once_its_member_finished_it() {
    let ns = Namespace::concurrent("group_then");
    let ring = ring_with(&ns, 16, 6);
    let mut p = ring.producer().unwrap();
    let mut m = ring.consumer(worker().batch_cap(1)).unwrap();
    let mut d = ring
        .consumer(ConsumerOptions::durable("d").after(["w"]))
        .unwrap();
    p.publish(&7u64.to_le_bytes()).unwrap();
    p.publish(&8u64.to_le_bytes()).unwrap();
    // Inside the member's handler its claim (event 0) is taken and unfinished: the group's
    // work sequence is past it, the member's position is not.
    let mut seen_inside = Vec::new();
    assert_eq!(
        m.poll_once(|_| {
            d.poll_once(|ev| seen_inside.push(value(&ev))).unwrap();
        })
        .unwrap(),
        1
    );
    assert_eq!(
        seen_inside,
        Vec::<u64>::new(),
        "passed an event the group is handling"
    );
    let mut after = Vec::new();
    d.poll_once(|ev| after.push(value(&ev))).unwrap();
    assert_eq!(
        after,
        vec![7],
        "the finished event, not the one nobody handled yet"
    );
    m.poll_once(|_| {}).unwrap();
    d.poll_once(|ev| after.push(value(&ev))).unwrap();
    assert_eq!(after, vec![7, 8]);
}

/// A member's timed flush (`flush_within`) holds in the claims it takes over as in its
/// own: a handler that blocks past the interval in an adopted claim sees the next event
/// as an edge, and the batch commits there. Without `flush_within` (the control) the
/// adopted claim is one batch.
#[test]
fn a_taken_over_claim_is_cut_by_the_timed_flush() {
    let within = Duration::from_millis(100);
    for flush in [true, false] {
        let ns = Namespace::concurrent(if flush {
            "group_adopt_flush"
        } else {
            "group_adopt_noflush"
        });
        let ring = ring_with(&ns, 64, 4);
        // `a` claims 0 and `b` 1 as they join (nothing is published yet).
        let mut a = ring.consumer(worker().batch_cap(8)).unwrap();
        let mut opts = worker().batch_cap(32);
        if flush {
            opts = opts.flush_within(within);
        }
        let mut b = ring.consumer(opts).unwrap();
        publish_range(&ring, 0..20);
        // `a` hands over 0, claims 2..10, and leaves with that claim.
        assert_eq!(a.poll_once(|ev| assert_eq!(value(&ev), 0)).unwrap(), 1);
        drop(a);
        // `b` delivers its own claims, then takes 2..10 over; it holds event 4 until the
        // interval opened at event 2 (the first after an edge) has surely passed.
        // (event, end of batch, the poll that handed it over)
        let mut got: Vec<(u64, bool, u32)> = Vec::new();
        let mut opened: Option<Instant> = None;
        let deadline = Instant::now() + PATIENCE;
        let mut poll = 0u32;
        while got.len() < 19 {
            assert!(Instant::now() < deadline, "b stopped at {got:?}");
            poll += 1;
            b.poll_once(|ev| {
                let v = value(&ev);
                if v == 2 {
                    opened = Some(Instant::now());
                }
                if let (4, Some(t)) = (v, opened) {
                    while t.elapsed() < within + Duration::from_millis(25) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                got.push((v, ev.is_end_of_batch(), poll));
            })
            .unwrap();
            if got.len() < 19 {
                b.wait().unwrap();
            }
        }
        let edges: Vec<u64> = got
            .iter()
            .filter(|g| (2..10).contains(&g.0) && g.1)
            .map(|g| g.0)
            .collect();
        let expected: &[u64] = if flush { &[5, 9] } else { &[9] };
        assert_eq!(edges, expected, "flush {flush}: {got:?}");
        // The batch commits at the edge: the events after it come in a later poll.
        let poll_of = |v: u64| got.iter().find(|g| g.0 == v).map(|g| g.2);
        let cut_there = poll_of(6) > poll_of(5);
        assert_eq!(cut_there, flush, "flush {flush}: {got:?}");
    }
}

/// A member that takes over a claim whose holder died in the handler of its last event
/// hands the events before that one over as a batch ending with `end_of_batch`, and only
/// then answers the event whose attempts are used up, without handing it over: skipped
/// (`Skip`) or stopped at (`Retry`, whose attempts are used up too).
#[test]
fn a_taken_over_claim_ends_its_batch_before_an_event_whose_attempts_are_used_up() {
    use shmring::ErrorPolicy;
    use shmring_layout::{consumer_state, owned_word};
    let retry = ErrorPolicy::Retry {
        attempts: 1,
        backoff: Duration::from_millis(1),
    };
    for (tag, policy) in [
        ("skip", ErrorPolicy::Skip { attempts: 1 }),
        ("retry", retry),
    ] {
        let ns = Namespace::concurrent(&format!("group_adopt_used_up_{tag}"));
        let ring = ring_with(&ns, 64, 4);
        // `a` claims 0 and `b` 1 as they join.
        let mut a = ring.consumer(worker().batch_cap(3)).unwrap();
        let mut b = ring
            .consumer(worker().batch_cap(16).on_error(policy))
            .unwrap();
        publish_range(&ring, 0..20);
        // `a` hands over 0, claims 2..5, and leaves with that claim.
        assert_eq!(a.poll_once(|ev| assert_eq!(value(&ev), 0)).unwrap(), 1);
        let left = a.index();
        drop(a);
        // As a member that took that claim over and died in the handler of 4 leaves it:
        // held (RESUMING) by a process that is gone, still at 2 (2 and 3 were handed over,
        // not committed), its attempt at 4 marked under way (bit 62 of the record's
        // sequence plus one, `consumer/policy.rs`).
        let raw = shmring_testkit::raw::RawSegment::open(&ring);
        let (dead, _) = shmring_testkit::fault::dead_process();
        let word = raw.consumer_word(left);
        raw.set_consumer_poison(left, 5 | 1 << 62, 1);
        raw.set_consumer_word(
            left,
            owned_word::pack(
                owned_word::generation(word).wrapping_add(1),
                consumer_state::RESUMING,
                dead,
            ),
        );
        // (event, end of batch, the poll that handed it over)
        let mut got: Vec<(u64, bool, u32)> = Vec::new();
        let deadline = Instant::now() + PATIENCE;
        let mut poll = 0u32;
        // Every event but 0 (`a` handed it over) and 4; then 4 dead-lettered, or the poll
        // that stops at it.
        let stopped_at = loop {
            assert!(Instant::now() < deadline, "{tag}: b stopped at {got:?}");
            poll += 1;
            match b.poll_once(|ev| got.push((value(&ev), ev.is_end_of_batch(), poll))) {
                Ok(_) => {}
                Err(PollError::HandlerFailed { sequence, .. }) => break Some((sequence, poll)),
                Err(e) => panic!("{tag}: {e}"),
            }
            if got.len() == 18 && b.stats().dead_lettered == 1 {
                break None;
            }
            b.wait().unwrap();
        };
        let adopted: Vec<(u64, bool)> = got
            .iter()
            .filter(|g| g.0 == 2 || g.0 == 3)
            .map(|g| (g.0, g.1))
            .collect();
        assert_eq!(adopted, vec![(2, false), (3, true)], "{tag}: {got:?}");
        assert!(
            !got.iter().any(|g| g.0 == 4),
            "{tag}: 4 is never handed over: {got:?}"
        );
        let poll_of_3 = got.iter().find(|g| g.0 == 3).map_or(0, |g| g.2);
        match (tag, stopped_at) {
            ("skip", None) => {}
            ("retry", Some((4, at))) => assert!(at > poll_of_3, "{tag}: {got:?}"),
            other => panic!("{tag}: ended with {other:?}: {got:?}"),
        }
    }
}

/// A group nobody declared starts at the head when its first member joins: what was
/// published before that is not the group's.
#[test]
fn an_undeclared_group_starts_at_the_head_when_its_first_member_joins() {
    let ns = Namespace::concurrent("group-head");
    let ring = ring_with(&ns, 16, 4);
    publish_range(&ring, 0..5);
    let mut a = ring.consumer(worker()).expect("the first member");
    publish_range(&ring, 5..8);
    let mut got = Vec::new();
    for _ in 0..8 {
        a.poll_once(|ev| got.push(value(&ev))).expect("poll");
    }
    assert_eq!(got, [5, 6, 7]);
}

/// Poll `c` until it has delivered `n` events (bounded); their values.
fn delivered_by(c: &mut Consumer, n: usize) -> Vec<u64> {
    let mut got = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while got.len() < n {
        assert!(Instant::now() < deadline, "stopped at {got:?}");
        c.poll_once(|ev| got.push(value(&ev))).unwrap();
        if got.len() < n {
            c.wait().unwrap();
        }
    }
    got
}

/// A failed member's claim passed on by a member that took it and left before delivering
/// it: the member after that counts the event it is handed again as redelivered. Before, the
/// leaving member gave the entry back as a member that left does (naming itself), which
/// says no handler saw the claim, and the count was lost.
#[test]
fn a_failed_members_claim_passed_on_by_a_member_that_left_is_counted_as_redelivered() {
    let ns = Namespace::concurrent("group_failed_passed_on");
    let ring = ring_with(&ns, 16, 6);
    let mut a = ring.consumer(worker()).unwrap();
    publish_range(&ring, 0..1);
    assert_eq!(
        a.poll_once(|_| panic!("the handler fails")),
        Err(PollError::HandlerPanicked { sequence: 0 })
    );
    let index = a.index();
    drop(a);
    let b = ring.consumer(worker()).unwrap();
    assert_eq!(b.index(), index, "b carries on a's failed claim");
    drop(b);
    let mut c = ring.consumer(worker()).unwrap();
    assert_eq!(c.index(), index, "c carries on the claim b gave back");
    assert_eq!(delivered_by(&mut c, 1), vec![0]);
    assert_eq!(c.stats().redelivered, 1, "a's handler had event 0");
}

/// Member `a` of a ring of four published events "dies" holding its claim of all four (its
/// handle is never dropped, and its entry names a process that is gone); `b`, which joined
/// before, adopts the claim on its look before parking. Returns the ring, `b` and a's entry.
fn a_dead_members_claim_adopted(ns: &Namespace) -> (Ring, Consumer, u32) {
    use shmring_layout::{consumer_state, owned_word};
    /// Above any pid_max: no process has it.
    const GONE: u32 = 0x3fff_fff0;
    let ring = declared_group_ring(ns);
    publish_range(&ring, 0..4);
    let a = ring.consumer(worker().batch_cap(4)).unwrap();
    let mut b = ring.consumer(worker().batch_cap(4)).unwrap();
    let index = a.index();
    std::mem::forget(a);
    let word = entry_u64(&ring, index, entry_field::WORD, None);
    let dead = owned_word::next(word, consumer_state::ACTIVE, GONE);
    entry_u64(&ring, index, entry_field::WORD, Some(dead));
    let _ = b.wait().unwrap();
    let held = ring
        .info()
        .consumers
        .into_iter()
        .find(|e| e.index == index)
        .expect("a's entry");
    // Status shows an entry taken over (RESUMING) as ATTACHING.
    assert_eq!(
        (held.state, held.pid),
        ("ATTACHING", std::process::id()),
        "b adopted a's claim: {held:?}"
    );
    (ring, b, index)
}

/// Delivered by the member that adopted it, a dead member's claim counts every event as
/// redelivered (the control of the test below).
#[test]
fn a_dead_members_claim_delivered_by_its_adopter_is_counted_as_redelivered() {
    let ns = Namespace::concurrent("group_dead_adopted");
    let (_ring, mut b, _) = a_dead_members_claim_adopted(&ns);
    assert_eq!(delivered_by(&mut b, 4), vec![0, 1, 2, 3]);
    assert_eq!(b.stats().redelivered, 4);
}

/// Given back undelivered by the member that adopted it, a dead member's claim still counts
/// every event as redelivered at the member that delivers it. Before, it was given back as
/// a leaving member's claim (naming the adopter), which says no handler saw it.
#[test]
fn a_dead_members_claim_given_back_by_its_adopter_is_still_counted_as_redelivered() {
    let ns = Namespace::concurrent("group_dead_given_back");
    let (ring, b, index) = a_dead_members_claim_adopted(&ns);
    drop(b);
    let mut c = ring.consumer(worker().batch_cap(4)).unwrap();
    assert_eq!(c.index(), index, "c carries on the claim given back");
    assert_eq!(delivered_by(&mut c, 4), vec![0, 1, 2, 3]);
    assert_eq!(c.stats().redelivered, 4);
}

/// An adopted claim whose slot holds a later lap (written from outside: the claim's entry
/// gates there, so no producer laps it) is passed over as a member's own claim passes such a
/// slot: counted in `dropped_behind`, and the rest of the claim delivered. Before, the
/// adopter stopped at the slot for ever, its `wait` returning at once (a busy loop), and the
/// entry held producers there.
#[test]
fn an_adopted_claim_with_a_lapped_slot_is_passed_over_and_counted() {
    use std::os::unix::fs::FileExt;
    let ns = Namespace::concurrent("group_adopted_lapped");
    let (ring, mut b, index) = a_dead_members_claim_adopted(&ns);
    // The slot of sequence 0 says sequence 16, a lap later (`SlotHeader::stamp` leads it).
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(ring.path())
        .expect("open segment");
    f.write_all_at(&16u64.to_ne_bytes(), ring.geometry().slot_offset(0))
        .expect("write the stamp");
    assert_eq!(delivered_by(&mut b, 3), vec![1, 2, 3]);
    assert_eq!(b.stats().dropped_behind, 1);
    assert!(
        ring.info().consumers.iter().all(|c| c.index != index),
        "the claim's entry is freed once it is delivered: {:?}",
        ring.info().consumers
    );
}

/// A member whose handler failed at the first event of its claim of four, and which leaves
/// with the retry still to make: the member that takes the claim over counts that event,
/// and only that one, as redelivered (a handler had it, and its poison record says so).
/// Before, none was counted.
#[test]
fn a_claim_left_with_a_retry_to_make_counts_the_event_as_redelivered() {
    let ns = Namespace::concurrent("group_retry_left");
    let ring = declared_group_ring(&ns);
    publish_range(&ring, 0..4);
    let mut a = ring
        .consumer(worker().batch_cap(4).on_error(shmring::ErrorPolicy::Retry {
            attempts: 3,
            backoff: Duration::from_secs(3600),
        }))
        .unwrap();
    let index = a.index();
    assert_eq!(a.poll_once_fallible(|_| Err::<(), _>("fails once")), Ok(0));
    drop(a);
    let mut c = ring.consumer(worker()).unwrap();
    assert_eq!(c.index(), index, "c carries on a's claim");
    assert_eq!(delivered_by(&mut c, 4), vec![0, 1, 2, 3]);
    assert_eq!(c.stats().redelivered, 1);
}
