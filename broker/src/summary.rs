//! Turning a ring's table snapshot into report rows: free capacity, the slowest consumer,
//! whether the ring is blocked, and per-entry lines. Shared by the broker's sweep and by
//! `broker status` reading the segments itself when the broker is down. The predicates
//! themselves are the client library's (`shmring::health`), so an application without a
//! broker judges its rings the same way.

use shmring::{
    ConsumerInfo, FenceMode, HealthState, ProducerInfo, ProducerMode, Ring, RingInfo, RingState,
};

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
        Some(RingState::Sharing) => "SHARING",
        None => "CORRUPT",
    }
}

/// The fence mode as the report spells it.
pub fn fence_mode(mode: Option<FenceMode>) -> &'static str {
    match mode {
        Some(FenceMode::Membarrier) => "membarrier",
        Some(FenceMode::SeqCstFence) => "seqcst-fence",
        Some(FenceMode::Unset) => "unset",
        None => "corrupt",
    }
}

/// A consumer row without the broker's tracking (no idle time, no policy).
pub fn consumer_report(
    ring: &Ring,
    c: &ConsumerInfo,
    state: ConsumerState,
    head: u64,
) -> ConsumerReport {
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
        lag: shmring::lag(ring, head, c.next),
        idle_ms: None,
        delivered: c.stats.delivered,
        skipped: c.stats.skipped,
        dropped_behind: c.stats.dropped_behind,
        wakeups: c.stats.wakeups,
        net_wakeups: c.stats.net_wakeups,
        failures: c.stats.failures,
        declared: c.declared,
        attached_ever: c.attached_ever,
        error_policy: c.error_policy.to_owned(),
        poison_sequence: c.poison.map(|(s, _)| s),
        poison_attempts: c.poison.map_or(0, |(_, a)| a),
        dead_lettered: c.stats.dead_lettered,
        retries: c.stats.retries,
        group: c.group,
        is_group: c.is_group,
        redelivered: c.stats.redelivered,
        upstream: Vec::new(),
        stage_lag: None,
    }
}

/// Fill each row's upstream names and stage lag from the table's recorded dependencies,
/// with the positions of the snapshot the rows were made from (so the lag is consistent).
fn fill_graph(consumers: &mut [ConsumerReport], info: &RingInfo) {
    let rows: Vec<(u32, String)> = consumers
        .iter()
        .map(|c| (c.index, c.name.clone()))
        .collect();
    for c in consumers.iter_mut() {
        let Some(ci) = info.consumers.iter().find(|i| i.index == c.index) else {
            continue;
        };
        c.upstream = ci
            .upstream
            .iter()
            .map(|&u| {
                rows.iter()
                    .find(|r| r.0 == u)
                    .map_or_else(|| format!("#{u}"), |r| r.1.clone())
            })
            .collect();
        // A worker group upstream: where its members have finished, not its work sequence;
        // and a worker group after other consumers trails them from there too.
        let own = shmring::upstream_position(info, ci);
        c.stage_lag = ci
            .upstream
            .iter()
            .filter_map(|&u| info.consumers.iter().find(|o| o.index == u))
            .map(|o| shmring::upstream_position(info, o))
            .min()
            .map(|slowest| slowest.saturating_sub(own));
    }
}

/// A consumer's state from its entry and whether its process lives (no stall tracking).
pub fn instant_state(c: &ConsumerInfo, alive: bool) -> ConsumerState {
    shmring::instant_state(c, alive).into()
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
        lone: p.lone,
    }
}

/// The whole ring's row. `free` and `slowest` follow the wrap gate's rule: required
/// consumers always gate; optional ones only within the ring's slack. The ring is blocked
/// when no room is left and the consumer at the gate cannot move by itself.
pub fn ring_report(
    name: &str,
    ring: &Ring,
    info: &RingInfo,
    mut consumers: Vec<ConsumerReport>,
    producers: Vec<ProducerReport>,
    health: RingHealth,
) -> RingReport {
    fill_graph(&mut consumers, info);
    let geo = ring.geometry();
    let gate = shmring::wrap_gate(info, geo);
    let row = |index: u32| consumers.iter().find(|c| c.index == index);
    let as_slowest = |c: &ConsumerReport| Slowest {
        index: c.index,
        name: c.name.clone(),
        sequence: c.sequence,
        lag: c.lag,
    };
    let slowest = gate.consumer.and_then(row).map(as_slowest);
    let blocked_by = shmring::blocked_by(&gate, |i| row(i).map(|c| c.state.into()))
        .and_then(row)
        .map(as_slowest);
    RingReport {
        name: name.to_owned(),
        state: ring_state(info.state).to_owned(),
        run: info.run,
        epoch: ring.broker_epoch(),
        capacity: geo.capacity,
        slot_size: geo.slot_size,
        fixed_events: geo.fixed && !geo.sized,
        sized_events: geo.sized,
        producer_mode: match geo.producer_mode {
            ProducerMode::Single => "single",
            ProducerMode::Multi => "multi",
        }
        .to_owned(),
        head: info.head,
        free: gate.free,
        closed: info.closed,
        slowest,
        blocked_by,
        fence_mode: fence_mode(info.fence_mode).to_owned(),
        consumer_waiters: info.consumer_waiters,
        downstream_waiters: info.downstream_waiters,
        producer_waiters: info.producer_waiters,
        consumer_wakes: info.consumer_wakes,
        downstream_wakes: info.downstream_wakes,
        producer_wakes: info.producer_wakes,
        health,
        consumers,
        producers,
        corrupt: info.corrupt.iter().map(Into::into).collect(),
    }
}

impl From<HealthState> for ConsumerState {
    fn from(s: HealthState) -> Self {
        match s {
            HealthState::Healthy => ConsumerState::Healthy,
            HealthState::Stalled => ConsumerState::Stalled,
            HealthState::Dead => ConsumerState::Dead,
            HealthState::Failed => ConsumerState::Failed,
            HealthState::Detached => ConsumerState::Detached,
            HealthState::Released => ConsumerState::Released,
            HealthState::Attaching => ConsumerState::Attaching,
        }
    }
}

impl From<ConsumerState> for HealthState {
    fn from(s: ConsumerState) -> Self {
        match s {
            ConsumerState::Healthy => HealthState::Healthy,
            ConsumerState::Stalled => HealthState::Stalled,
            ConsumerState::Dead => HealthState::Dead,
            ConsumerState::Failed => HealthState::Failed,
            ConsumerState::Detached => HealthState::Detached,
            ConsumerState::Released => HealthState::Released,
            ConsumerState::Attaching => HealthState::Attaching,
        }
    }
}
