//! The health state machine, without processes: stalls, recoveries and deaths as edges.

use std::time::{Duration, Instant};

use shmring::{ConsumerInfo, ConsumerStats};
use shmring_layout::consumer_state;

use super::{ConsumerHealth, Edge, Seen};
use crate::report::ConsumerState;

fn info(next: u64, state_code: u32) -> ConsumerInfo {
    ConsumerInfo {
        index: 0,
        name: "c".into(),
        word: shmring_layout::owned_word::pack(1, state_code, 42),
        seen_ns: 0,
        pid: 42,
        start_time: 7,
        state: "",
        state_code,
        required: true,
        durable: true,
        declared: false,
        starting: false,
        attached_ever: true,
        attaches: 1,
        next,
        lag: 0,
        wait: "blocking",
        parked: false,
        stats: ConsumerStats::default(),
        poison: None,
        error_policy: "stop",
        upstream: Vec::new(),
        group: None,
        is_group: false,
    }
}

const T: Duration = Duration::from_millis(100);

fn seen(now: Instant, pending: bool) -> Seen {
    Seen {
        alive: true,
        pending,
        now,
        threshold: T,
    }
}

#[test]
fn pending_without_progress_stalls_once_and_recovers_on_progress() {
    let t0 = Instant::now();
    let mut h = ConsumerHealth::new(&info(5, consumer_state::ACTIVE), t0);
    let active = |n| info(n, consumer_state::ACTIVE);
    assert_eq!(h.observe(&active(5), seen(t0, true)), None);
    assert_eq!(h.observe(&active(5), seen(t0 + T / 2, true)), None);
    assert_eq!(
        h.observe(&active(5), seen(t0 + T, true)),
        Some(Edge::Stalled)
    );
    assert_eq!(h.state, ConsumerState::Stalled);
    assert_eq!(
        h.observe(&active(5), seen(t0 + 3 * T, true)),
        None,
        "edge-triggered"
    );
    assert_eq!(h.idle_ms(), 300);
    assert_eq!(
        h.observe(&active(9), seen(t0 + 4 * T, true)),
        Some(Edge::Recovered)
    );
    assert_eq!(
        (h.sequence, h.idle_ms()),
        (9, 0),
        "sequence and instant from one sweep"
    );
}

#[test]
fn idle_without_pending_events_is_healthy() {
    let t0 = Instant::now();
    let mut h = ConsumerHealth::new(&info(5, consumer_state::ACTIVE), t0);
    let active = info(5, consumer_state::ACTIVE);
    assert_eq!(h.observe(&active, seen(t0 + 10 * T, false)), None);
    // An event arrives after a long idle spell: the threshold counts from then.
    assert_eq!(h.observe(&active, seen(t0 + 11 * T, true)), None);
    assert_eq!(h.state, ConsumerState::Healthy);
    assert_eq!(
        h.observe(&active, seen(t0 + 12 * T, true)),
        Some(Edge::Stalled)
    );
}

#[test]
fn death_and_failure_are_reported_once() {
    let t0 = Instant::now();
    let mut h = ConsumerHealth::new(&info(5, consumer_state::ACTIVE), t0);
    let dead = Seen {
        alive: false,
        ..seen(t0, true)
    };
    let active = info(5, consumer_state::ACTIVE);
    assert_eq!(h.observe(&active, dead), Some(Edge::Died));
    assert_eq!(h.observe(&active, dead), None);
    assert_eq!(h.state, ConsumerState::Dead);
    let mut f = ConsumerHealth::new(&active, t0);
    let failed = info(5, consumer_state::FAILED);
    assert_eq!(f.observe(&failed, seen(t0, true)), Some(Edge::Failed));
    assert_eq!(f.observe(&failed, seen(t0, true)), None);
    assert_eq!(f.state, ConsumerState::Failed);
}

#[test]
fn half_attached_entries_of_a_gone_process_are_orphaned() {
    let t0 = Instant::now();
    for code in [consumer_state::CLAIMED, consumer_state::RESUMING] {
        let i = info(0, code);
        let mut h = ConsumerHealth::new(&i, t0);
        assert_eq!(h.observe(&i, seen(t0, true)), None);
        assert_eq!(h.state, ConsumerState::Attaching);
        let dead = Seen {
            alive: false,
            ..seen(t0, true)
        };
        assert_eq!(h.observe(&i, dead), Some(Edge::Orphaned));
        assert_eq!(h.state, ConsumerState::Attaching);
    }
}

/// A declared consumer that never attached has no holder process (pid 0, never alive): it
/// is DETACHED with no edge, so no dead-consumer policy (release, stop-ring) ever acts on
/// it, however long events wait for it.
#[test]
fn a_declared_consumer_waiting_for_its_first_attach_is_detached_without_an_edge() {
    let t0 = Instant::now();
    let declared = ConsumerInfo {
        word: shmring_layout::owned_word::pack(1, consumer_state::DETACHED, 0),
        seen_ns: 0,
        pid: 0,
        start_time: 0,
        declared: true,
        starting: false,
        attached_ever: false,
        ..info(0, consumer_state::DETACHED)
    };
    let mut h = ConsumerHealth::new(&declared, t0);
    let gone = |now| Seen {
        alive: false,
        ..seen(now, true)
    };
    for k in 0..5 {
        assert_eq!(h.observe(&declared, gone(t0 + k * T)), None);
        assert_eq!(h.state, ConsumerState::Detached);
    }
}

/// A process whose durable consumer failed and which attaches it again is a new attachment:
/// a later failure or death of it is reported (and its policy applied) again, and its stall
/// timing starts afresh. Before, the record kept "already reported" for the process, so
/// its second failure or its death went unreported and no policy acted.
#[test]
fn a_consumer_attached_again_by_the_same_process_has_its_next_death_reported() {
    let t0 = Instant::now();
    let attach = |state, attaches, failures| {
        let mut i = ConsumerInfo {
            attaches,
            ..info(5, state)
        };
        i.stats.failures = failures;
        i
    };
    let mut h = ConsumerHealth::new(&info(5, consumer_state::ACTIVE), t0);
    let failed = attach(consumer_state::FAILED, 1, 1);
    assert_eq!(h.observe(&failed, seen(t0, true)), Some(Edge::Failed));
    assert_eq!(h.observe(&failed, seen(t0 + T, true)), None, "once");
    // The same process attaches it again, and it reads on.
    let active = attach(consumer_state::ACTIVE, 2, 1);
    assert!(h.same_process(&active));
    assert_eq!(h.observe(&active, seen(t0 + 2 * T, true)), None);
    assert_eq!(h.state, ConsumerState::Healthy);
    assert_eq!(
        h.observe(&active, seen(t0 + 2 * T + T / 2, true)),
        None,
        "its stall timing starts at the new attach"
    );
    assert_eq!(
        h.observe(
            &attach(consumer_state::FAILED, 2, 2),
            seen(t0 + 3 * T, true)
        ),
        Some(Edge::Failed)
    );
    let active = attach(consumer_state::ACTIVE, 3, 2);
    assert_eq!(h.observe(&active, seen(t0 + 4 * T, true)), None);
    let dead = Seen {
        alive: false,
        ..seen(t0 + 5 * T, true)
    };
    assert_eq!(h.observe(&active, dead), Some(Edge::Died));
}

/// A new attachment is told by the entry's attach count (every attach bumps it), and a new
/// failure by its failure count, not by a sweep that happens to see the consumer running: a
/// process that attaches its failed consumer again and dies before any sweep saw it back,
/// or fails again between two sweeps, or a worker group member that fails on the claim it
/// adopted from a failed one, has that death or failure reported. A failed handle that
/// drops changes its FAILED entry's word, not its counts: the same failure, reported once.
#[test]
fn each_failure_and_each_attachment_s_death_is_reported_once() {
    let t0 = Instant::now();
    let entry = |state, generation, attaches, failures| {
        let mut i = ConsumerInfo {
            word: shmring_layout::owned_word::pack(generation, state, 42),
            seen_ns: 0,
            attaches,
            ..info(5, state)
        };
        i.stats.failures = failures;
        i
    };
    let dead = |now| Seen {
        alive: false,
        ..seen(now, true)
    };
    // Died right after attaching again.
    let mut h = ConsumerHealth::new(&info(5, consumer_state::ACTIVE), t0);
    let failed = entry(consumer_state::FAILED, 2, 1, 1);
    assert_eq!(h.observe(&failed, seen(t0, true)), Some(Edge::Failed));
    let dropped = entry(consumer_state::FAILED, 3, 1, 1);
    assert_eq!(
        h.observe(&dropped, seen(t0 + T / 2, true)),
        None,
        "the failed handle dropped: the same failure"
    );
    let back = entry(consumer_state::ACTIVE, 4, 2, 1);
    assert_eq!(h.observe(&back, dead(t0 + T)), Some(Edge::Died));
    assert_eq!(h.observe(&back, dead(t0 + 2 * T)), None, "once");
    // Failed again between two sweeps.
    let mut h = ConsumerHealth::new(&info(5, consumer_state::ACTIVE), t0);
    assert_eq!(h.observe(&failed, seen(t0, true)), Some(Edge::Failed));
    let again = entry(consumer_state::FAILED, 5, 2, 2);
    assert_eq!(h.observe(&again, seen(t0 + T, true)), Some(Edge::Failed));
    assert_eq!(h.observe(&again, seen(t0 + 2 * T, true)), None, "once");
    // A member of the same process adopts the failed claim (the entry's attach count
    // stays), fails on it too, and then its process dies holding it.
    let mut h = ConsumerHealth::new(&info(5, consumer_state::ACTIVE), t0);
    assert_eq!(h.observe(&failed, seen(t0, true)), Some(Edge::Failed));
    let adopted_failed = entry(consumer_state::FAILED, 5, 1, 2);
    assert_eq!(
        h.observe(&adopted_failed, seen(t0 + T, true)),
        Some(Edge::Failed)
    );
    let adopted = entry(consumer_state::ACTIVE, 7, 1, 2);
    assert_eq!(h.observe(&adopted, dead(t0 + 2 * T)), Some(Edge::Died));
}

#[test]
fn a_sighting_of_an_entry_s_word_outlasts_a_new_start_time_and_not_a_new_word() {
    use super::ProducerHealth;
    let t0 = Instant::now();
    let claimed = ConsumerInfo {
        seen_ns: 10,
        ..info(0, consumer_state::CLAIMED)
    };
    let mut h = ConsumerHealth::new(&claimed, t0);
    h.observe(&claimed, seen(t0, false));
    assert_eq!(h.first_seen, Some(claimed.first_seen()));
    // The taker stores its start time: a new pair, the same word, the first sighting kept.
    let started = ConsumerInfo {
        start_time: 77,
        seen_ns: 20,
        ..claimed.clone()
    };
    h.follow(&started, t0 + T);
    h.observe(&started, seen(t0 + T, false));
    assert_eq!(h.first_seen, Some(claimed.first_seen()));
    // A new word: seen anew.
    let active = ConsumerInfo {
        word: shmring_layout::owned_word::next(claimed.word, consumer_state::ACTIVE, 42),
        seen_ns: 30,
        ..started.clone()
    };
    h.observe(&active, seen(t0 + 2 * T, false));
    assert_eq!(h.first_seen, Some(active.first_seen()));

    let mut p = ProducerHealth::new(42, 0);
    p.first_seen = Some(claimed.first_seen());
    p.follow(42, 77);
    assert_eq!(
        p.first_seen,
        Some(claimed.first_seen()),
        "kept across the new pair"
    );
    assert!(p.same_process(42, 77));
}

#[test]
fn a_gone_holder_is_news_once_per_entry_word() {
    let t0 = Instant::now();
    let failed = info(5, consumer_state::FAILED);
    let mut h = ConsumerHealth::new(&failed, t0);
    assert!(h.first_report_gone(failed.word));
    assert!(!h.first_report_gone(failed.word), "the same word again");
    let next = shmring_layout::owned_word::next(failed.word, consumer_state::RESUMING, 43);
    assert!(h.first_report_gone(next), "another word");
    // A new process in the entry: a new record, whose first report is news.
    let other = ConsumerInfo {
        pid: 44,
        ..failed.clone()
    };
    h.follow(&other, t0 + T);
    assert!(h.first_report_gone(failed.word));
}
