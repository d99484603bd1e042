//! Producers that died: an entry without a claim is freed at once; a claim left in flight
//! is tombstoned after the ring's unblock timeout, so consumers skip the hole (and count
//! it). A repair that finds the slot still unread is retried every sweep.

use std::time::Instant;

use shmring::RingInfo;
use tracing::{info, warn};

use super::health::ProducerHealth;
use super::registry::Tracked;
use super::watch::Watches;

pub fn repair_producers(
    ring: &str,
    t: &mut Tracked,
    info: &RingInfo,
    watches: &mut Watches,
    now: Instant,
) {
    t.producers
        .retain(|i, _| info.producers.iter().any(|p| p.index == *i));
    for p in &info.producers {
        let rec = t
            .producers
            .entry(p.index)
            .and_modify(|r| {
                if !r.same_process(p.pid, p.start_time) {
                    *r = ProducerHealth::new(p.pid, p.start_time);
                }
            })
            .or_insert_with(|| ProducerHealth::new(p.pid, p.start_time));
        if watches.alive(p.pid, p.start_time) {
            continue;
        }
        let dead_since = *rec.dead_since.get_or_insert(now);
        // A claim whose sequence is not recorded yet (`claiming`) waits out the timeout
        // too: its repair searches for the hole, which is only safe once every live
        // producer has long since recorded its own claim.
        let holds = p.in_flight.is_some() || p.claiming;
        if holds && now.duration_since(dead_since) < t.spec.unblock_timeout {
            continue;
        }
        let r = t.ring.repair_dead_producer(p.index, p.word);
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
            } else if shmring::process::is_alive(p.pid, p.start_time) {
                warn!(ring, index = p.index, pid = p.pid,
                    "producer pid {} has exited but is not reaped yet (a zombie): its claim is repaired once its parent reaps it", p.pid);
            }
        }
    }
}
