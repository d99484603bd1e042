//! Producers that died: the consumer line is woken once, at the sweep that first sees the
//! death (a producer killed between its stamp and its wake leaves parked consumers an event
//! they would otherwise find only at their 50 ms net); an entry without a claim is freed at
//! once; a claim left in flight is tombstoned once the ring has had a hole for its unblock
//! timeout, so consumers skip the hole (and count it). A repair that finds the slot still
//! unread is retried every sweep.
//!
//! The timeout runs on the ring's unblock clock, in the segment (`Ring::note_hole`, the
//! client's `unblock` module): the first sweep of any broker that sees a hole starts it, a
//! sweep that finds no hole left clears it, and a broker that restarts keeps counting.

use shmring::{FirstSeen, RingInfo};
use shmring_layout::producer_state;
use tracing::{info, warn};

use super::health::ProducerHealth;
use super::registry::Tracked;
use super::watch::Watches;

pub fn repair_producers(ring: &str, t: &mut Tracked, info: &RingInfo, watches: &mut Watches) {
    t.producers
        .retain(|i, _| info.producers.iter().any(|p| p.index == *i));
    let timeout = u64::try_from(t.spec.unblock_timeout.as_nanos()).unwrap_or(u64::MAX);
    let boot_now = shmring::boottime_ns();
    // The clock's value as this sweep knows it, and whether a hole is left after it.
    let mut seen = t.ring.hole_seen_ns();
    let mut holes_left = false;
    for p in &info.producers {
        let rec = t
            .producers
            .entry(p.index)
            .and_modify(|r| r.follow(p.pid, p.start_time))
            .or_insert_with(|| ProducerHealth::new(p.pid, p.start_time));
        // The sweep that first saw this word: a half-taken entry whose pid a process
        // started since has is repaired too (a reused pid).
        let first = FirstSeen::keep_or_now(rec.first_seen, p.first_seen());
        rec.first_seen = Some(first);
        if watches.alive(p.pid, p.start_time) {
            continue;
        }
        // Once per death this broker sees, before the repair: the producer may have died
        // between its stamp and its wake, with consumers parked on an event they cannot
        // see. Not for an entry caught mid-attach (ATTACHING): its process never published
        // through it. A REPAIRING entry left by a dead repairer stands for a producer death
        // whose wake may be missing too.
        if !rec.woken && p.state_code != producer_state::ATTACHING {
            rec.woken = true;
            t.ring.wake_consumers();
        }
        // A claim whose sequence is not recorded yet (`claiming`) waits out the timeout
        // too: its repair searches for the hole, which is only safe once every live
        // producer has long since recorded its own claim. The clock is the ring's, from
        // its first hole: a hole found while an earlier one is left (unread, or held by a
        // process at work on it) waits out only what is left of the timeout.
        let holds = p.in_flight.is_some() || p.claiming;
        if holds {
            seen = t.ring.note_hole(boot_now);
            if boot_now.saturating_sub(seen) < timeout {
                holes_left = true;
                continue;
            }
        }
        let r = t.ring.repair_dead_producer_seen(p.index, first);
        // Not repaired yet: a slot still unread, a live process repairing the entry (or
        // attaching to it), or a zombie (alive until it is reaped).
        if holds && (r.waiting > 0 || r.held || shmring::process::is_alive(p.pid, p.start_time)) {
            holes_left = true;
        }
        rec.repaired += r.tombstoned;
        t.counters.tombstoned += r.tombstoned;
        if r.waiting == 0 && rec.repaired > 0 {
            // The claim is whole again (the entry is freed now, so this counts it once,
            // however many sweeps its slots took).
            t.counters.repaired_claims += 1;
        }
        if r.tombstoned > 0 {
            warn!(ring, index = p.index, pid = p.pid, first = p.in_flight, tombstoned = r.tombstoned,
                "repaired the claim of dead producer pid {}: {} sequence(s) tombstoned, consumers skip them",
                p.pid, r.tombstoned);
        }
        if holds && r.tombstoned == 0 && !rec.warned {
            rec.warned = true;
            if r.waiting > 0 {
                info!(ring, index = p.index, pid = p.pid,
                    "claim of dead producer pid {} waits for a consumer to free its slot; retrying every sweep", p.pid);
            } else if r.held {
                info!(ring, index = p.index, pid = p.pid,
                    "claim of a dead producer is held by pid {} (attaching, repairing, or not reaped yet); it is repaired once that process gives it back or is gone", p.pid);
            } else if shmring::process::is_alive(p.pid, p.start_time) {
                warn!(ring, index = p.index, pid = p.pid,
                    "producer pid {} has exited but is not reaped yet (a zombie): its claim is repaired once its parent reaps it", p.pid);
            }
        }
    }
    if !holes_left && t.ring.clear_hole(seen) {
        info!(
            ring,
            "no hole left by a dead producer: the unblock clock is cleared"
        );
    }
}
