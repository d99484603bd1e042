//! Health without a broker: the states `broker status` shows, computed by the library, so
//! that an application that embeds rings and never runs the broker can watch them too.
//!
//! The predicates live here once and the broker uses them: the wrap gate (which consumer
//! holds producers back and how much room is left), a consumer's state from its entry, a
//! stall (events pending at its position and no progress for the threshold; a hole a dead
//! producer left is not pending, see [`has_pending`]), a ring
//! BLOCKED (no room left, and the consumer at the gate cannot move: detached, dead or
//! failed), the lag (published events beyond a consumer, never more than the capacity),
//! and the words of the segment another process overwrote ([`crate::CorruptWord`]).
//!
//! ```
//! use shmring::{HealthThresholds, Ring, RingConfig};
//! # let ns = format!("doc-health-{}", std::process::id());
//! let ring = Ring::create(&ns, "orders", &RingConfig { capacity: 64, ..RingConfig::default() })?;
//! let mut health = ring.health(HealthThresholds::default());
//! let report = health.check(); // call again later: stalls need two looks
//! assert!(report.is_healthy());
//! # Ring::remove(&ns, "orders")?;
//! # std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shmring_layout::{consumer_state, Geometry};

use crate::process::is_alive;
use crate::{ConsumerInfo, CorruptWord, Ring, RingInfo};

/// A consumer's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HealthState {
    /// Attached, alive, keeping up (or nothing pending).
    Healthy,
    /// Events pending at its position and no progress for the stall threshold.
    Stalled,
    /// Attached, but its process is gone.
    Dead,
    /// Its handler failed; it keeps its position for a restart.
    Failed,
    /// A durable required consumer that detached: its events wait for it.
    Detached,
    /// Not gating (released, or an optional consumer that detached).
    Released,
    /// A process is attaching or taking over the entry right now.
    Attaching,
}

impl HealthState {
    /// Every state, in the order `broker status` documents them.
    pub const ALL: [HealthState; 7] = [
        HealthState::Healthy,
        HealthState::Stalled,
        HealthState::Dead,
        HealthState::Failed,
        HealthState::Detached,
        HealthState::Released,
        HealthState::Attaching,
    ];

    /// Upper-case name, as `broker status` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "HEALTHY",
            HealthState::Stalled => "STALLED",
            HealthState::Dead => "DEAD",
            HealthState::Failed => "FAILED",
            HealthState::Detached => "DETACHED",
            HealthState::Released => "RELEASED",
            HealthState::Attaching => "ATTACHING",
        }
    }

    /// Whether this state alone makes a ring unhealthy.
    pub fn is_unhealthy(self) -> bool {
        matches!(
            self,
            HealthState::Stalled | HealthState::Dead | HealthState::Failed
        )
    }

    /// Whether a consumer in this state, at the wrap gate, cannot move by itself: nobody
    /// is there to consume, so producers wait until it is restarted or released.
    pub fn cannot_move(self) -> bool {
        matches!(
            self,
            HealthState::Detached | HealthState::Dead | HealthState::Failed
        )
    }
}

/// How long a consumer may sit on pending events before it counts as stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthThresholds {
    /// Pending and unmoved this long: STALLED.
    pub stall: Duration,
}

impl Default for HealthThresholds {
    /// The broker's default: 500 ms.
    fn default() -> Self {
        Self {
            stall: Duration::from_millis(500),
        }
    }
}

/// The wrap gate: the gating consumer furthest behind and the room it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Table index of the consumer at the gate (`None`: nobody gates).
    pub consumer: Option<u32>,
    /// Its next sequence (the head when nobody gates).
    pub sequence: u64,
    /// Slots producers may still claim before they wait for it.
    pub free: u64,
}

/// The wrap gate of a snapshot: required consumers always gate; optional ones only within
/// the ring's slack of the slowest required consumer (or of the head when there is none).
/// Of consumers at the same position, one that is not held there by an upstream is named.
pub fn wrap_gate(info: &RingInfo, geo: &Geometry) -> Gate {
    let gating = || {
        info.consumers
            .iter()
            .filter(|c| consumer_state::gates(c.state_code))
    };
    let required = gating()
        .filter(|c| c.required)
        .map(|c| c.next)
        .min()
        .unwrap_or(info.head);
    // At a tie, a consumer held there by an upstream it reads behind is not the one at the
    // gate: the upstream holding it is.
    let slowest = gating()
        .filter(|c| c.required || required.saturating_sub(c.next) <= geo.optional_slack)
        .min_by_key(|c| (c.next, held_by_upstream(info, c, c.next)));
    let sequence = slowest.map_or(info.head, |c| c.next);
    Gate {
        consumer: slowest.map(|c| c.index),
        sequence,
        free: geo
            .capacity
            .saturating_sub(info.head.saturating_sub(sequence)),
    }
}

/// A consumer's state from its entry and whether its process lives, in one look (a stall
/// needs two: see [`HealthWatch`]).
pub fn instant_state(c: &ConsumerInfo, alive: bool) -> HealthState {
    match c.state_code {
        consumer_state::ACTIVE if alive => HealthState::Healthy,
        consumer_state::ACTIVE => HealthState::Dead,
        consumer_state::DETACHED => HealthState::Detached,
        consumer_state::FAILED => HealthState::Failed,
        consumer_state::RELEASED => HealthState::Released,
        _ => HealthState::Attaching,
    }
}

/// Whether events wait at `next`: its slot holds `next`, published, or a later sequence
/// (the consumer has been lapped). A hole at `next` (a claim a producer died holding: the
/// slot still holds the previous lap, or `next` half written) is not pending work, however
/// far the claims run past it: the consumer cannot move until the hole is repaired, and
/// the dead producer's row shows it. So a consumer waiting at a hole is never STALLED.
pub fn has_pending(ring: &Ring, head: u64, next: u64) -> bool {
    next < head && ring.seg.reached(next)
}

/// Whether consumer `c` of the snapshot `info`, at position `next`, is held by an upstream
/// consumer it reads behind (`ConsumerOptions::after`; for a worker group member, its
/// group's): one that holds it
/// (`graph::upstream_holds`) and has not committed past `next` (a worker group: whose
/// members have not all finished `next`, [`upstream_position`]). Such a consumer has no
/// work it can do, so it is never STALLED: the upstream holding it is the one to look at.
pub fn held_by_upstream(info: &RingInfo, c: &ConsumerInfo, next: u64) -> bool {
    // A worker group member reads behind its group's upstreams, which the group's entry
    // records (its own records none).
    let upstream = c
        .group
        .and_then(|g| info.consumers.iter().find(|o| o.index == g))
        .map_or(&c.upstream, |g| &g.upstream);
    upstream.iter().any(|&u| {
        info.consumers
            .iter()
            .find(|o| o.index == u)
            .is_some_and(|o| {
                crate::graph::upstream_holds(o.state_code, o.required)
                    && !matches!(o.state_code, consumer_state::FREE | consumer_state::CLAIMED)
                    && upstream_position(info, o) <= next
            })
    })
}

/// Where upstream `o` of the snapshot `info` holds the consumers after it: its `next`, or
/// for a worker group the lowest of its work sequence (what no member has claimed) and its
/// gating members' positions, as their barrier reads it (`group::finished`).
pub fn upstream_position(info: &RingInfo, o: &ConsumerInfo) -> u64 {
    if !o.is_group {
        return o.next;
    }
    info.consumers
        .iter()
        .filter(|m| m.group == Some(o.index) && consumer_state::gates(m.state_code))
        .map(|m| m.next)
        .fold(o.next, u64::min)
}

/// Whether a consumer with events pending since `pending_since` that last moved at
/// `last_moved` is stalled at `now`.
pub fn is_stalled(
    pending_since: Option<Instant>,
    last_moved: Instant,
    now: Instant,
    threshold: Duration,
) -> bool {
    pending_since.is_some_and(|since| now.duration_since(since.max(last_moved)) >= threshold)
}

/// Published events beyond `next`: sequences claimed but not yet published at the top of
/// the ring are not lag, and no consumer is ever more than a ring behind what it can read.
pub fn lag(ring: &Ring, head: u64, next: u64) -> u64 {
    let capacity = ring.capacity();
    let mut top = head.min(next.saturating_add(capacity));
    if ring.seg.is_fixed() {
        // One look at how far a consumer may read (`fixed::published`; nothing counted
        // while the lifecycle word changes under the look), not one per sequence.
        let events = ring.seg.events();
        let end = crate::fixed::published(&events).map_or(next, |(end, _)| end);
        return top.min(end).saturating_sub(next);
    }
    // Claimed at the top and not published yet: at most a few in-flight claims.
    while top > next && !ring.is_published(top - 1) {
        top -= 1;
    }
    top.saturating_sub(next)
}

/// The consumer that blocks the ring, if any: no room is left and the consumer at the
/// gate cannot move by itself. `state` gives each consumer's state by table index.
pub fn blocked_by(gate: &Gate, state: impl Fn(u32) -> Option<HealthState>) -> Option<u32> {
    let at_gate = gate.consumer?;
    (gate.free == 0 && state(at_gate).is_some_and(HealthState::cannot_move)).then_some(at_gate)
}

/// One consumer in a [`RingHealth`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerHealth {
    /// Table index.
    pub index: u32,
    /// Name (empty for anonymous consumers).
    pub name: String,
    /// Process that attached it last.
    pub pid: u32,
    /// Its state.
    pub state: HealthState,
    /// Published events beyond its position (see [`lag`]).
    pub lag: u64,
}

/// A ring's health at one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingHealth {
    /// Every consumer entry in use.
    pub consumers: Vec<ConsumerHealth>,
    /// The wrap gate.
    pub gate: Gate,
    /// The consumer that blocks producers (see [`blocked_by`]).
    pub blocked_by: Option<u32>,
    /// Words of the segment another process overwrote (see [`RingInfo::corrupt`]).
    pub corrupt: Vec<CorruptWord>,
}

impl RingHealth {
    /// No consumer STALLED, DEAD or FAILED, the ring not blocked, and no corrupt word.
    pub fn is_healthy(&self) -> bool {
        self.blocked_by.is_none()
            && self.corrupt.is_empty()
            && self.consumers.iter().all(|c| !c.state.is_unhealthy())
    }
}

/// What a watch remembers of one consumer entry between checks.
#[derive(Debug, Clone, Copy)]
struct Track {
    pid: u32,
    start_time: u64,
    next: u64,
    last_moved: Instant,
    pending_since: Option<Instant>,
}

/// Checks a ring's health again and again, remembering when each consumer last moved (a
/// stall needs two looks). Made by [`Ring::health`].
#[derive(Debug)]
pub struct HealthWatch {
    ring: Ring,
    thresholds: HealthThresholds,
    tracks: HashMap<u32, Track>,
}

impl Ring {
    /// Watch this ring's health as `broker status` judges it, without a broker: call
    /// [`HealthWatch::check`] now and then (stalls show from the second check on).
    pub fn health(&self, thresholds: HealthThresholds) -> HealthWatch {
        HealthWatch {
            ring: self.clone(),
            thresholds,
            tracks: HashMap::new(),
        }
    }
}

impl HealthWatch {
    /// Look at the ring now.
    pub fn check(&mut self) -> RingHealth {
        let now = Instant::now();
        let info = self.ring.info();
        self.tracks
            .retain(|i, _| info.consumers.iter().any(|c| c.index == *i));
        let mut consumers = Vec::with_capacity(info.consumers.len());
        for c in &info.consumers {
            let track = self
                .tracks
                .entry(c.index)
                .and_modify(|t| {
                    if (t.pid, t.start_time) != (c.pid, c.start_time) {
                        *t = Track::new(c, now);
                    }
                })
                .or_insert_with(|| Track::new(c, now));
            if track.next != c.next {
                (track.next, track.last_moved, track.pending_since) = (c.next, now, None);
            }
            let mut state = instant_state(c, is_alive(c.pid, c.start_time));
            if state == HealthState::Healthy {
                if !has_pending(&self.ring, info.head, c.next) || held_by_upstream(&info, c, c.next)
                {
                    track.pending_since = None;
                } else if track.pending_since.is_none() {
                    track.pending_since = Some(now);
                }
                if is_stalled(
                    track.pending_since,
                    track.last_moved,
                    now,
                    self.thresholds.stall,
                ) {
                    state = HealthState::Stalled;
                }
            }
            consumers.push(ConsumerHealth {
                index: c.index,
                name: c.name.clone(),
                pid: c.pid,
                state,
                lag: lag(&self.ring, info.head, c.next),
            });
        }
        let gate = wrap_gate(&info, self.ring.geometry());
        let blocked = blocked_by(&gate, |i| {
            consumers.iter().find(|c| c.index == i).map(|c| c.state)
        });
        RingHealth {
            consumers,
            gate,
            blocked_by: blocked,
            corrupt: info.corrupt,
        }
    }
}

impl Track {
    fn new(c: &ConsumerInfo, now: Instant) -> Self {
        Self {
            pid: c.pid,
            start_time: c.start_time,
            next: c.next,
            last_moved: now,
            pending_since: None,
        }
    }
}
