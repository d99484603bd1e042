//! A half-taken table entry (a consumer CLAIMED, RESUMING or REATTACHING, a producer
//! ATTACHING or REPAIRING) names its taker by pid alone: its start time may still be the
//! previous holder's, so the taker counts as gone only once no process has that pid. A
//! caller that keeps a snapshot's sighting of the entry's word (`ConsumerInfo::first_seen`,
//! as the broker does across its sweeps) also tells a reused pid: the word's writer ran
//! before the word was read, so a process under that pid that started after the sighting is
//! not the taker.
//!
//! The clock that compares them is checked without root (`process::started_after` against
//! a child started after a reading); handing a process a given pid takes root
//! (`/proc/sys/kernel/ns_last_pid`): those tests are in `as_root`, ignored by a plain
//! `cargo test` and run by CI.

use shmring::{boottime_ns, process};
use shmring_testkit::fault::{reuse_pid, tick_past, Sleeper};

#[test]
fn a_process_started_after_a_clock_reading_is_told_from_one_started_before_it() {
    let before = Sleeper::spawn();
    let t = boottime_ns();
    assert!(!process::started_after(before.pid(), t), "started before");
    assert!(
        !process::started_after(std::process::id(), t),
        "this process"
    );
    tick_past(t);
    let after = Sleeper::spawn();
    assert!(process::started_after(after.pid(), t), "started after");
    assert!(
        !process::started_after(after.pid(), boottime_ns()),
        "not after a reading taken once it runs"
    );
    // Gone: no process has the pid any more.
    let pid = after.pid();
    after.kill();
    assert!(!process::started_after(pid, t));
    assert!(!process::started_after(0, t));
}

/// A worker group member's entry, which `Ring::free_consumer` leaves alone, goes back from
/// RESUMING to DETACHED with no owner (still gating, for another member to adopt) once the
/// member adopting it is gone; nothing else does.
#[test]
fn a_member_entry_left_resuming_by_a_gone_adopter_goes_back_to_detached() {
    use shmring::{Ring, RingConfig};
    use shmring_layout::{consumer_flags as f, consumer_state as cs, owned_word};
    use shmring_testkit::raw::RawSegment;
    use shmring_testkit::Namespace;

    let ns = Namespace::new("member_resuming");
    let ring = Ring::create(ns.name(), "r", &RingConfig::default()).expect("create");
    let raw = RawSegment::open(&ring);
    let (dead, _) = shmring_testkit::fault::dead_process();
    let me = std::process::id();
    let member = f::MEMBER | f::REQUIRED;
    let entries = [
        (cs::RESUMING, dead, member, "", cs::DETACHED),
        // Not a member's: a group's (no client takes one over), a durable consumer's
        // (`free_consumer`'s to give back).
        (
            cs::RESUMING,
            dead,
            f::GROUP | f::REQUIRED | f::DURABLE,
            "g",
            cs::RESUMING,
        ),
        (
            cs::RESUMING,
            dead,
            f::REQUIRED | f::DURABLE,
            "d",
            cs::RESUMING,
        ),
        // Not being taken over.
        (cs::CLAIMED, dead, member, "", cs::CLAIMED),
        (cs::ACTIVE, dead, member, "", cs::ACTIVE),
        // Its adopter runs.
        (cs::RESUMING, me, member, "", cs::RESUMING),
    ];
    for (i, (state, pid, flags, name, _)) in (0..).zip(entries) {
        raw.fabricate_consumer(i, owned_word::pack(3, state, pid), flags, name, 5);
    }
    let info = ring.info();
    for (i, (_, _, _, _, after)) in (0..).zip(entries) {
        let c = info.consumers.iter().find(|c| c.index == i).expect("taken");
        let changed = ring.detach_member_entry_seen(i, c.first_seen());
        let word = raw.consumer_word(i);
        assert_eq!(owned_word::state(word), after, "entry {i}");
        assert_eq!(changed, after != owned_word::state(c.word), "entry {i}");
    }
    // No owner (what a member reads as its adopter's death), still at its claim.
    assert_eq!(owned_word::owner(raw.consumer_word(0)), 0);
    let info = ring.info();
    let given_back = info.consumers.iter().find(|c| c.index == 0);
    assert_eq!(given_back.map(|c| c.next), Some(5));
}

mod as_root {
    use super::*;
    use shmring::{FirstSeen, Repair, Ring, RingConfig};
    use shmring_layout::{consumer_state, owned_word};
    use shmring_testkit::raw::{HalfTaken, RawSegment};
    use shmring_testkit::Namespace;

    /// Producer entry `index`'s word; `None` once it is free (`RingInfo` lists taken ones).
    fn producer_word(ring: &Ring, index: u32) -> Option<u64> {
        let info = ring.info();
        let p = info.producers.iter().find(|p| p.index == index);
        p.map(|p| p.word)
    }

    fn consumer_seen(ring: &Ring, index: u32) -> FirstSeen {
        let info = ring.info();
        let c = info.consumers.iter().find(|c| c.index == index);
        c.expect("the consumer entry is taken").first_seen()
    }

    fn producer_seen(ring: &Ring, index: u32) -> FirstSeen {
        let info = ring.info();
        let p = info.producers.iter().find(|p| p.index == index);
        p.expect("the producer entry is taken").first_seen()
    }

    #[test]
    #[ignore = "needs root (a process handed a given pid): run by CI with --ignored as_root::"]
    fn a_half_taken_entry_is_given_back_once_its_pid_is_a_process_started_after_its_first_sighting()
    {
        let ns = Namespace::new("reused_pid");
        let config = RingConfig {
            capacity: 64,
            max_producers: 4,
            ..RingConfig::default()
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create");
        let raw = RawSegment::open(&ring);
        let taker = Sleeper::spawn();
        let pid = taker.pid();
        // Entries a process `pid` was taking: a new consumer's, a durable required one's and
        // a released one's it was taking over by name, a producer's, and a producer's it
        // was repairing.
        let HalfTaken {
            claimed,
            resuming,
            attaching,
            repairing,
            ..
        } = raw.half_take(pid);
        let first = [0, 1, 2].map(|i| consumer_seen(&ring, i));
        let first_p = [2, 3].map(|i| producer_seen(&ring, i));

        // The taker runs: held, whether or not the caller saw the word before; the repair
        // says so (`Repair::held`) and changes nothing.
        let held = Repair {
            held: true,
            ..Repair::default()
        };
        for (i, f) in (0..).zip(first) {
            assert!(!ring.free_consumer_seen(i, f), "consumer {i}");
        }
        for (i, f) in [2, 3].into_iter().zip(first_p) {
            assert_eq!(ring.repair_dead_producer_seen(i, f), held);
        }
        assert_eq!(producer_word(&ring, 2), Some(attaching));
        assert_eq!(producer_word(&ring, 3), Some(repairing));

        // The taker dies and, a tick of the start-time clock later (start times count in
        // ticks), an unrelated process gets its pid.
        let reuser = reuse_pid(taker);

        // Without a sighting the pid in use keeps each entry held: what a caller that
        // cannot tell a reused pid must do.
        assert!(!ring.free_consumer(0, claimed));
        assert!(!ring.free_consumer(1, resuming));
        assert_eq!(ring.repair_dead_producer(2, attaching), held);
        // Nor does a sighting after the reuser started tell it from the taker.
        assert!(!ring.free_consumer_seen(0, consumer_seen(&ring, 0)));
        assert!(!ring.free_consumer_seen(2, consumer_seen(&ring, 2)));
        let late = producer_seen(&ring, 3);
        assert_eq!(ring.repair_dead_producer_seen(3, late), held);
        assert_eq!(raw.consumer_word(0), claimed);

        // The first sighting: the process under that pid started after it, so it is not
        // the taker. Each entry is given back as its taker's death would have it.
        assert!(ring.free_consumer_seen(0, first[0]));
        assert_eq!(
            owned_word::state(raw.consumer_word(0)),
            consumer_state::FREE
        );
        assert!(ring.free_consumer_seen(1, first[1]));
        assert_eq!(
            owned_word::state(raw.consumer_word(1)),
            consumer_state::DETACHED,
            "a durable required entry keeps its name and position"
        );
        assert!(ring.free_consumer_seen(2, first[2]));
        assert_eq!(
            owned_word::state(raw.consumer_word(2)),
            consumer_state::RELEASED,
            "one that did not gate keeps its name, not gating"
        );
        ring.repair_dead_producer_seen(2, first_p[0]);
        ring.repair_dead_producer_seen(3, first_p[1]);
        assert_eq!(
            producer_word(&ring, 2),
            None,
            "the producer entries are freed"
        );
        assert_eq!(producer_word(&ring, 3), None);
        assert!(
            reuser.runs(),
            "the reuser still runs: the entries went back while its pid was in use"
        );
    }
}
