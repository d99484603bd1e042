//! What the broker does about a consumer's health edges: log and count them, and apply the
//! dead-consumer policy (alert, release, stop-ring; anonymous consumers are freed).

use shmring::{ConsumerInfo, FirstSeen};
use shmring_layout::consumer_state;
use tracing::{info, warn};

use super::health::Edge;
use super::registry::Tracked;
use crate::config::Policy;
use crate::report::ConsumerState;

fn who(c: &ConsumerInfo) -> String {
    if c.name.is_empty() {
        format!("anonymous consumer #{} (pid {})", c.index, c.pid)
    } else {
        format!("consumer {:?} #{} (pid {})", c.name, c.index, c.pid)
    }
}

pub fn on_edge(ring: &str, t: &mut Tracked, c: &ConsumerInfo, edge: Edge) {
    let threshold = t.spec.stall_threshold;
    if edge == Edge::Died {
        // A consumer commits, then wakes: one killed between the two leaves the producers
        // parked for the room it freed, and the consumers parked behind it, to their net.
        // Once per death this broker sees (the edge fires once), before any policy.
        t.ring.wake_producers();
        t.ring.wake_consumers();
        t.ring.wake_consumers_behind(c.index);
    }
    if c.is_group && matches!(edge, Edge::Died | Edge::Failed) {
        // A group's own entry has a holder only while its creator makes it (ACTIVE, storing
        // the work sequence, then DETACHED with no holder): a creator that died in between
        // left it to the next member that joins, which finishes or redoes the creation
        // (`find_group`). No dead-consumer policy applies to it, as to a member's entry:
        // releasing it is refused, and stopping the ring would stop it for a creation.
        t.counters.deaths += 1;
        info!(ring, index = c.index, pid = c.pid,
            "worker group {:?}: its creator (pid {}) died while making it; the next member to join finishes it", c.name, c.pid);
        return;
    }
    if c.group.is_some()
        && consumer_state::gates(c.state_code)
        && matches!(edge, Edge::Orphaned | Edge::Died | Edge::Failed)
    {
        // A worker group member's entry holds the claim it had not finished: it keeps
        // gating until a live member of its group adopts it. Freeing or releasing it here
        // would let producers overwrite those events. One left RESUMING by an adopter that
        // is gone goes back to DETACHED, still gating, for the next member to adopt: a
        // member judges an adopter by its pid alone, so a reused pid would hold it.
        if edge == Edge::Orphaned && t.ring.detach_member_entry_seen(c.index, sighting(t, c)) {
            info!(ring, index = c.index, pid = c.pid,
                "gave back the entry of worker group member #{}: the process adopting it (pid {}) is gone; DETACHED, still holding its claim, for another member", c.index, c.pid);
            return;
        }
        // Orphaned comes at every sweep while the entry waits (the give-back above is tried
        // each time): said once per entry word. Died and Failed come once each.
        let news = match edge {
            Edge::Orphaned => t
                .consumers
                .get_mut(&c.index)
                .is_none_or(|r| r.first_report_gone(c.word)),
            _ => {
                t.counters.deaths += 1;
                true
            }
        };
        if news {
            let why = if edge == Edge::Failed {
                "its handler failed"
            } else if c.state_code == consumer_state::FAILED {
                "its handler failed and its process is gone"
            } else {
                "its process is gone"
            };
            warn!(ring, index = c.index, pid = c.pid, sequence = c.next,
                "DEAD: worker group member #{} (pid {}) ({why}); its claim from sequence {} waits for another member of its group", c.index, c.pid, c.next);
        }
        return;
    }
    match edge {
        Edge::Stalled => {
            t.counters.stalls += 1;
            warn!(ring, consumer = ?c.name, index = c.index, pid = c.pid, sequence = c.next,
                "STALLED: {} has pending events and has not moved for {threshold:?}", who(c));
        }
        Edge::Recovered => {
            t.counters.recoveries += 1;
            info!(ring, consumer = ?c.name, index = c.index, pid = c.pid, sequence = c.next,
                "HEALTHY: {} moves again", who(c));
        }
        Edge::Orphaned => {
            if t.ring.free_consumer_seen(c.index, sighting(t, c)) {
                t.counters.freed += 1;
                info!(
                    ring,
                    index = c.index,
                    pid = c.pid,
                    "gave back the entry of {}: the process holding it is gone (an anonymous or half-attached entry is freed; a durable one being taken over keeps its name and position)",
                    who(c)
                );
            }
        }
        Edge::Died | Edge::Failed => {
            t.counters.deaths += 1;
            let why = if edge == Edge::Died {
                "its process is gone"
            } else {
                "its handler failed"
            };
            if !c.durable {
                if edge == Edge::Died && t.ring.free_consumer_seen(c.index, sighting(t, c)) {
                    t.counters.freed += 1;
                }
                warn!(
                    ring,
                    index = c.index,
                    pid = c.pid,
                    "DEAD: {} ({why}); anonymous, so its entry is freed",
                    who(c)
                );
                return;
            }
            // Dead inside its attach, before it had a start: the position it holds was read
            // before it gated, and a restart starts at the head whatever the policy, so
            // holding producers there keeps nothing for anyone. The flag is read again now
            // that the holder is gone (the snapshot may predate its clearing); a group's
            // entry is never released (`release_if_starting` says no), and its policy applies.
            if edge == Edge::Died && c.starting && t.ring.release_if_starting(c.index, c.word) {
                t.counters.releases += 1;
                warn!(ring, consumer = ?c.name, index = c.index, pid = c.pid,
                    "DEAD: {} ({why}) inside its attach, before it had a start: released; a restart starts at the head", who(c));
                return;
            }
            apply_policy(ring, t, c, why);
        }
    }
}

/// The sighting of `c`'s word to judge its holder by: the first sweep's that saw it (kept in
/// its record), else this snapshot's (`FirstSeen`: a half-taken entry whose pid a process
/// started since has is given back too).
fn sighting(t: &Tracked, c: &ConsumerInfo) -> FirstSeen {
    let kept = t.consumers.get(&c.index).and_then(|r| r.first_seen);
    FirstSeen::keep_or_now(kept, c.first_seen())
}

/// A dead or failed durable consumer under `release` that gates again: release it again,
/// so producers are not held by it. The client never puts a released entry back to gating
/// on its own (its drop keeps RELEASED); this covers a segment written by an older client
/// or by hand.
pub fn release_again(ring: &str, t: &mut Tracked, c: &ConsumerInfo, state: ConsumerState) {
    if matches!(state, ConsumerState::Dead | ConsumerState::Failed)
        && c.durable
        && t.spec.policy_for(&c.name) == Policy::Release
        && t.ring.release_consumer(c.index, c.word)
    {
        t.counters.releases += 1;
        info!(ring, consumer = ?c.name, index = c.index, pid = c.pid,
            "released {} again: its entry was gating again", who(c));
    }
}

fn apply_policy(ring: &str, t: &mut Tracked, c: &ConsumerInfo, why: &str) {
    let policy = t.spec.policy_for(&c.name);
    match policy {
        Policy::Alert => {
            warn!(ring, consumer = ?c.name, index = c.index, pid = c.pid, sequence = c.next,
                "DEAD: {} ({why}); policy alert: it keeps gating, its events wait for its restart", who(c));
        }
        Policy::Release => {
            let released = t.ring.release_consumer(c.index, c.word);
            if released {
                t.counters.releases += 1;
            }
            warn!(ring, consumer = ?c.name, index = c.index, pid = c.pid, sequence = c.next, released,
                "DEAD: {} ({why}); policy release: it no longer gates producers and resumes at the head on re-attach", who(c));
        }
        Policy::StopRing => match t.ring.stop() {
            Ok(stop) => {
                t.counters.policy_stops += 1;
                warn!(ring, consumer = ?c.name, index = c.index, pid = c.pid, stop_sequence = stop,
                    "DEAD: {} ({why}); policy stop-ring: ring stopped at sequence {stop}", who(c));
            }
            Err(e) => warn!(
                ring,
                "DEAD: {} ({why}); policy stop-ring failed: {e}",
                who(c)
            ),
        },
    }
}
