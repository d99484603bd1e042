//! Turning a ring's table snapshot into report rows: free capacity, the slowest consumer,
//! and per-entry lines. Shared by the broker's sweep and by `broker status` reading the
//! segments itself when the broker is down.

use shmring::{ConsumerInfo, ProducerInfo, ProducerMode, Ring, RingInfo, RingState};
use shmring_layout::consumer_state;

use crate::report::{
    ConsumerReport, ConsumerState, ProducerReport, RingHealth, RingReport, Slowest,
};

/// Upper-case ring state.
pub fn ring_state(state: Option<RingState>) -> &'static str {
    match state {
        Some(RingState::Running) => "RUNNING",
        Some(RingState::Stopped) => "STOPPED",
        Some(RingState::Draining) => "DRAINING",
        Some(RingState::Deleted) => "DELETED",
        Some(RingState::Stopping) => "STOPPING",
        Some(RingState::Starting) => "STARTING",
        None => "CORRUPT",
    }
}

/// A consumer row without the broker's tracking (no idle time, no policy).
pub fn consumer_report(c: &ConsumerInfo, state: ConsumerState, head: u64) -> ConsumerReport {
    ConsumerReport {
        index: c.index,
        name: c.name.clone(),
        pid: c.pid,
        state,
        required: c.required,
        durable: c.durable,
        policy: String::new(),
        wait: c.wait.to_owned(),
        // The flag of a process that died parked stays set: only a live one's means anything.
        parked: c.parked && matches!(state, ConsumerState::Healthy | ConsumerState::Stalled),
        sequence: c.next,
        lag: head.saturating_sub(c.next),
        idle_ms: None,
        delivered: c.stats.delivered,
        skipped: c.stats.skipped,
        dropped_behind: c.stats.dropped_behind,
        wakeups: c.stats.wakeups,
        net_wakeups: c.stats.net_wakeups,
        failures: c.stats.failures,
    }
}

/// A consumer's state from its entry and whether its process lives (no stall tracking).
pub fn instant_state(c: &ConsumerInfo, alive: bool) -> ConsumerState {
    match c.state_code {
        consumer_state::ACTIVE if alive => ConsumerState::Healthy,
        consumer_state::ACTIVE => ConsumerState::Dead,
        consumer_state::DETACHED => ConsumerState::Detached,
        consumer_state::FAILED => ConsumerState::Failed,
        consumer_state::RELEASED => ConsumerState::Released,
        _ => ConsumerState::Attaching,
    }
}

/// A producer row.
pub fn producer_report(p: &ProducerInfo, alive: bool, repaired: u64) -> ProducerReport {
    ProducerReport {
        index: p.index,
        pid: p.pid,
        alive,
        in_flight: p.in_flight,
        published: p.stats.published,
        refused: p.stats.refused,
        tombstoned: p.stats.tombstoned,
        repaired,
        parks: p.stats.parks,
    }
}

/// The whole ring's row. `free` and `slowest` follow the wrap gate's rule: required
/// consumers always gate; optional ones only within the ring's slack.
pub fn ring_report(
    name: &str,
    ring: &Ring,
    info: &RingInfo,
    consumers: Vec<ConsumerReport>,
    producers: Vec<ProducerReport>,
    health: RingHealth,
) -> RingReport {
    let geo = ring.geometry();
    let gating: Vec<&ConsumerInfo> = info
        .consumers
        .iter()
        .filter(|c| consumer_state::gates(c.state_code))
        .collect();
    let required = gating
        .iter()
        .filter(|c| c.required)
        .map(|c| c.next)
        .min()
        .unwrap_or(info.head);
    let slowest = gating
        .iter()
        .filter(|c| c.required || required.saturating_sub(c.next) <= geo.optional_slack)
        .min_by_key(|c| c.next)
        .map(|c| Slowest {
            index: c.index,
            name: c.name.clone(),
            sequence: c.next,
            lag: info.head.saturating_sub(c.next),
        });
    let gate = slowest.as_ref().map_or(info.head, |s| s.sequence);
    RingReport {
        name: name.to_owned(),
        state: ring_state(info.state).to_owned(),
        run: info.run,
        epoch: ring.broker_epoch(),
        capacity: geo.capacity,
        slot_size: geo.slot_size,
        producer_mode: match geo.producer_mode {
            ProducerMode::Single => "single",
            ProducerMode::Multi => "multi",
        }
        .to_owned(),
        head: info.head,
        free: geo.capacity.saturating_sub(info.head.saturating_sub(gate)),
        closed: info.closed,
        slowest,
        health,
        consumers,
        producers,
    }
}
