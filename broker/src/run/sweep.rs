//! One health sweep over every ring: who is alive, who moved, who is stuck; the policies
//! for dead consumers and the repair of dead producers' claims; and the report.

use std::time::Instant;

use shmring::{ConsumerInfo, CorruptWord, RingState};
use tracing::{error, info};

use super::health::{ConsumerHealth, Seen};
use super::ops::truncated;
use super::policy::{on_edge, release_again};
use super::registry::{Broker, Tracked};
use super::repair::repair_producers;
use super::watch::Watches;
use crate::report::{ConsumerReport, ConsumerState};

/// Sweep every ring once.
pub fn sweep(broker: &mut Broker) {
    broker.rescan(false);
    let now = Instant::now();
    broker.watches.begin_sweep();
    let mut deleted = Vec::new();
    for (name, tracked) in broker.rings.iter_mut() {
        if tracked.ring.is_deleted() {
            deleted.push(name.clone());
            continue;
        }
        // A stop or start whose owner died is finished here, not only at adoption.
        if tracked.ring.state().is_some_and(RingState::is_transitional) {
            super::registry::finish_half_done(name, &tracked.ring);
        }
        sweep_ring(name, tracked, &mut broker.watches, now);
        tracked.ring.mark_sweep(monotonic_ns());
    }
    broker.watches.end_sweep();
    for name in deleted {
        info!(ring = %name, "ring was deleted; no longer watching it");
        broker.rings.remove(&name);
    }
    broker.sweeps += 1;
    broker.last_sweep = Some(now);
    broker.last_sweep_took = Some(now.elapsed());
}

/// CLOCK_MONOTONIC in nanoseconds (what `Ring::mark_sweep` records).
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

fn sweep_ring(name: &str, t: &mut Tracked, watches: &mut Watches, now: Instant) {
    let acted = |h: &crate::report::RingHealth| (h.releases, h.freed, h.policy_stops);
    let before = acted(&t.counters);
    look_at_ring(name, t, watches, now);
    if acted(&t.counters) != before {
        // A policy released or freed an entry, or stopped the ring: the report is what it
        // made of the table, not the table it acted on. The second look raises no edge the
        // first did not (each is reported once), so it acts only on what the first left.
        look_at_ring(name, t, watches, now);
    }
}

/// One look at ring `name`: its consumers' health and edges (and their policies), its
/// producers' repairs, and the report built from what was read.
fn look_at_ring(name: &str, t: &mut Tracked, watches: &mut Watches, now: Instant) {
    let info = t.ring.info();
    if truncated(&t.ring).is_some() {
        // The file shrank: what was read may be the truncation guard's zeros, not the
        // ring. Nothing is logged, acted on or reported from it (the last report goes too);
        // the check before the next sweep drops the ring.
        t.last = None;
        return;
    }
    log_corrupt(name, &mut t.corrupt, &info.corrupt);
    let threshold = t.spec.stall_threshold;
    t.consumers
        .retain(|i, _| info.consumers.iter().any(|c| c.index == *i));
    let mut consumers = Vec::with_capacity(info.consumers.len());
    for c in &info.consumers {
        let alive = watches.alive(c.pid, c.start_time);
        // Pending: the slot at its position is published, or it has been lapped; and no
        // upstream consumer it reads behind holds it there.
        let pending = shmring::has_pending(&t.ring, info.head, c.next)
            && !shmring::held_by_upstream(&info, c, c.next);
        let seen = Seen {
            alive,
            pending,
            now,
            threshold,
        };
        let rec = t
            .consumers
            .entry(c.index)
            .and_modify(|r| r.follow(c, now))
            .or_insert_with(|| ConsumerHealth::new(c, now));
        let edge = rec.observe(c, seen);
        let (state, idle_ms) = (rec.state, rec.idle_ms());
        let sequence = rec.sequence;
        match edge {
            Some(edge) => on_edge(name, t, c, edge),
            None => release_again(name, t, c, state),
        }
        consumers.push(consumer_report(t, c, state, sequence, idle_ms, info.head));
    }
    repair_producers(name, t, &info, watches);
    let producers = info
        .producers
        .iter()
        .map(|p| {
            let repaired = t.producers.get(&p.index).map_or(0, |r| r.repaired);
            crate::summary::producer_report(p, watches.alive(p.pid, p.start_time), repaired)
        })
        .collect();
    if truncated(&t.ring).is_some() {
        // As above, for a truncation during the look: what the policies wrote went to the
        // zeros, and the report is not made of them.
        t.last = None;
        return;
    }
    t.last = Some(crate::summary::ring_report(
        name,
        &t.ring,
        &info,
        consumers,
        producers,
        t.counters.clone(),
    ));
}

/// Log each corrupt word the first sweep that finds it, and once more when it reads sound
/// again; `seen` is what the last sweep found. A word is the same one while its kind and
/// entry are (its value may change between sweeps).
fn log_corrupt(name: &str, seen: &mut Vec<CorruptWord>, now: &[CorruptWord]) {
    let key = |w: &CorruptWord| (w.word(), w.consumer());
    for w in now
        .iter()
        .filter(|w| !seen.iter().any(|s| key(s) == key(w)))
    {
        error!(ring = %name, word = w.word(), value = w.value(),
            "{w}: stop every process attached to it, delete the ring and create it again");
    }
    for w in seen
        .iter()
        .filter(|s| !now.iter().any(|w| key(s) == key(w)))
    {
        info!(ring = %name, word = w.word(), "the {} word reads sound again", w.word());
    }
    seen.clear();
    seen.extend_from_slice(now);
}

fn consumer_report(
    t: &Tracked,
    c: &ConsumerInfo,
    state: ConsumerState,
    sequence: u64,
    idle_ms: u64,
    head: u64,
) -> ConsumerReport {
    let mut r = crate::summary::consumer_report(&t.ring, c, state, head);
    r.sequence = sequence;
    r.lag = shmring::lag(&t.ring, head, sequence);
    r.idle_ms = Some(idle_ms);
    r.policy = if c.is_group || c.group.is_some() {
        // A group's entries are the group's own: its members adopt a dead member's claim.
        "group".to_owned()
    } else if c.durable {
        t.spec.policy_for(&c.name).as_str().to_owned()
    } else {
        "free".to_owned()
    };
    r
}
