//! The status report: what `broker status --json` prints and what the control socket's
//! `status` request returns. **This is a stable schema** (`schema: 1`): fields are only
//! ever added, never renamed or removed; a change that would break a reader bumps
//! `schema`. See broker/README.md for a field-by-field description.
//!
//! Every consumer's `sequence` and `idle_ms` come from the same sweep.

use serde::{Deserialize, Serialize};

/// Version of this schema.
pub const SCHEMA: u32 = 1;

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Schema version ([`SCHEMA`]).
    pub schema: u32,
    /// The namespace.
    pub namespace: String,
    /// The broker, or `running: false` when it could not be reached.
    pub broker: BrokerReport,
    /// Rings, by name.
    pub rings: Vec<RingReport>,
    /// Segment files that failed validation (left alone).
    pub unreadable: Vec<Unreadable>,
    /// True when no consumer is STALLED, DEAD or FAILED, no ring is BLOCKED or holds a
    /// corrupt word, and every segment is readable.
    pub healthy: bool,
}

/// The broker process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerReport {
    /// Whether a broker answered.
    pub running: bool,
    /// Its pid (when down: the pid recorded in the segments by the last broker, if any).
    pub pid: Option<u32>,
    /// How many brokers have held this namespace (this one included).
    pub epoch: Option<u64>,
    /// Milliseconds since it started.
    pub uptime_ms: Option<u64>,
    /// Milliseconds since its last sweep.
    pub last_sweep_ms: Option<u64>,
    /// Sweep period, microseconds.
    pub sweep_period_us: Option<u64>,
    /// How long the last sweep took, microseconds.
    #[serde(default)]
    pub last_sweep_us: Option<u64>,
    /// Sweeps so far.
    pub sweeps: Option<u64>,
    /// Client processes watched with a pidfd.
    pub watched_processes: Option<u64>,
    /// Why no broker answered (none running, or this user may not use its socket); `None`
    /// when one did.
    #[serde(default)]
    pub unreachable: Option<String>,
}

/// One ring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingReport {
    /// Name.
    pub name: String,
    /// RUNNING, STOPPED, DRAINING, DELETED or CORRUPT.
    pub state: String,
    /// Run counter (1 for the first run, +1 per start).
    pub run: u64,
    /// Broker epoch of the segment (+1 each time a broker adopts it).
    pub epoch: u64,
    /// Slots.
    pub capacity: u64,
    /// Bytes per slot (with its 16-byte header), or a fixed-size ring's event size, or a
    /// ring of sized events' slot (its 8-byte length word and largest event).
    pub slot_size: u32,
    /// A ring of fixed-size events (`event_size`): `slot_size` is every event's size.
    #[serde(default)]
    pub fixed_events: bool,
    /// A ring of sized events (`max_event_size`): events of up to `slot_size - 8` bytes.
    #[serde(default)]
    pub sized_events: bool,
    /// "single" or "multi".
    pub producer_mode: String,
    /// Next sequence to claim.
    pub head: u64,
    /// Slots producers may still claim before waiting for the slowest gating consumer.
    pub free: u64,
    /// Whether claims are refused.
    pub closed: bool,
    /// The gating consumer furthest behind.
    pub slowest: Option<Slowest>,
    /// Set when the ring is BLOCKED: no room is left and the consumer at the wrap gate
    /// (this one) is DETACHED, DEAD or FAILED, so producers wait until it is restarted or
    /// released. A blocked ring makes the report unhealthy.
    #[serde(default)]
    pub blocked_by: Option<Slowest>,
    /// How publishers order against parked consumers: "membarrier", "seqcst-fence" (some
    /// process lacks membarrier, so every publish pays a full fence), "unset", "corrupt".
    #[serde(default)]
    pub fence_mode: String,
    /// Consumers parked on the ring's futexes now (those behind an upstream included).
    #[serde(default)]
    pub consumer_waiters: u32,
    /// Of those, consumers parked behind an upstream consumer that holds them, on its
    /// entry: its commits wake them, publishes do not.
    #[serde(default)]
    pub downstream_waiters: u32,
    /// Producers parked waiting for room now.
    #[serde(default)]
    pub producer_waiters: u32,
    /// Wake-ups issued to parked consumers since the ring was created (each a
    /// `futex_wake` its publisher paid: the producers' wake-up bill; wraps at 2^32).
    #[serde(default)]
    pub consumer_wakes: u32,
    /// Wake-ups issued to consumers parked behind an upstream, summed over the entries
    /// (each a `futex_wake` that upstream's commit or move paid, or a release, a stop, a
    /// repair; never a publish; wraps at 2^32).
    #[serde(default)]
    pub downstream_wakes: u32,
    /// Wake-ups issued to parked producers (wraps at 2^32).
    #[serde(default)]
    pub producer_wakes: u32,
    /// Health settings and counters.
    pub health: RingHealth,
    /// Attached consumers (and durable ones that detached).
    pub consumers: Vec<ConsumerReport>,
    /// Attached producers.
    pub producers: Vec<ProducerReport>,
    /// Words of the segment holding values no ring writes there: another process overwrote
    /// them. Any makes the report unhealthy.
    #[serde(default)]
    pub corrupt: Vec<CorruptReport>,
}

/// A word of a ring's segment another process overwrote (`shmring::CorruptWord`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorruptReport {
    /// Which word: lifecycle, fence_mode, position, cursor, consumer_position or
    /// consumer_state.
    pub word: String,
    /// The value found.
    pub value: u64,
    /// The consumer entry it belongs to, if it is one of an entry's.
    pub consumer: Option<u32>,
    /// What was found, in words.
    pub message: String,
}

impl From<&shmring::CorruptWord> for CorruptReport {
    fn from(w: &shmring::CorruptWord) -> Self {
        Self {
            word: w.word().to_owned(),
            value: w.value(),
            consumer: w.consumer(),
            message: w.to_string(),
        }
    }
}

/// The slowest gating consumer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slowest {
    /// Table index.
    pub index: u32,
    /// Name ("" for anonymous).
    pub name: String,
    /// Its sequence.
    pub sequence: u64,
    /// Events it is behind.
    pub lag: u64,
}

/// Health settings and edge counters of a ring (since this broker started).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RingHealth {
    /// Stall threshold, milliseconds.
    pub stall_threshold_ms: u64,
    /// Unblock timeout for dead producers' claims, milliseconds.
    pub unblock_timeout_ms: u64,
    /// HEALTHY -> STALLED edges.
    pub stalls: u64,
    /// STALLED -> HEALTHY edges.
    pub recoveries: u64,
    /// Consumers seen dying (process gone or handler failed).
    pub deaths: u64,
    /// Dead consumers released from gating by policy.
    pub releases: u64,
    /// Dead anonymous consumers whose entries were freed.
    pub freed: u64,
    /// Times the ring was stopped by a stop-ring policy.
    pub policy_stops: u64,
    /// Claims of dead producers repaired.
    pub repaired_claims: u64,
    /// Sequences tombstoned by those repairs.
    pub tombstoned: u64,
}

/// Consumer states as the broker reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ConsumerState {
    /// Attached, alive, keeping up (or nothing pending).
    Healthy,
    /// Pending events and no progress for the stall threshold.
    Stalled,
    /// Attached but its process is gone.
    Dead,
    /// A durable required consumer that detached: its events wait for it.
    Detached,
    /// Its handler failed; it keeps its position for a restart.
    Failed,
    /// Not gating (released by policy, or an optional consumer that detached).
    Released,
    /// Attaching right now.
    Attaching,
}

impl ConsumerState {
    /// Upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumerState::Healthy => "HEALTHY",
            ConsumerState::Stalled => "STALLED",
            ConsumerState::Dead => "DEAD",
            ConsumerState::Detached => "DETACHED",
            ConsumerState::Failed => "FAILED",
            ConsumerState::Released => "RELEASED",
            ConsumerState::Attaching => "ATTACHING",
        }
    }
    /// Whether this state makes the report unhealthy.
    pub fn is_unhealthy(self) -> bool {
        shmring::HealthState::from(self).is_unhealthy()
    }
}

/// One consumer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerReport {
    /// Table index.
    pub index: u32,
    /// Name ("" for anonymous).
    pub name: String,
    /// Process that attached it last.
    pub pid: u32,
    /// Broker state.
    pub state: ConsumerState,
    /// Gates producers unconditionally (else optional).
    pub required: bool,
    /// Durable (resumes by name).
    pub durable: bool,
    /// Policy applied if it dies: alert, release, stop-ring, or free (anonymous consumers,
    /// whose entry is freed); empty when the broker is down.
    pub policy: String,
    /// Wait strategy.
    pub wait: String,
    /// Parked on the ring's futex (only ever true for a live HEALTHY or STALLED consumer).
    pub parked: bool,
    /// Next sequence it will read (as of the sweep).
    pub sequence: u64,
    /// Published events beyond its position (claimed but unpublished sequences are not
    /// lag; never more than the capacity).
    pub lag: u64,
    /// Milliseconds it had not moved at that sweep (`None`: not tracked, broker down).
    pub idle_ms: Option<u64>,
    /// Events handed to its handler.
    pub delivered: u64,
    /// Tombstones skipped.
    pub skipped: u64,
    /// Events lost to lapping or to a release.
    pub dropped_behind: u64,
    /// Returns from a park.
    pub wakeups: u64,
    /// Of those, by the timed net with an event waiting (lost wake-ups; should be 0).
    pub net_wakeups: u64,
    /// Handler failures.
    pub failures: u64,
    /// Names of the consumers it reads behind (`ConsumerOptions::after`); empty for none
    /// (an entry since freed shows as `#<index>`).
    #[serde(default)]
    pub upstream: Vec<String>,
    /// Events its slowest upstream has committed beyond its position: how far this stage
    /// trails the one before it (`None`: it reads behind no consumer).
    #[serde(default)]
    pub stage_lag: Option<u64>,
    /// Declared in the ring's configuration (`declared_consumers`): it has gated since the
    /// ring was created.
    #[serde(default)]
    pub declared: bool,
    /// Whether any process ever attached to it. A declared consumer that never attached
    /// is DETACHED with pid 0: its events wait for its first attach.
    #[serde(default = "attached_ever_default")]
    pub attached_ever: bool,
    /// Its error policy: what a handler failure does (stop, skip, retry).
    #[serde(default)]
    pub error_policy: String,
    /// The event its handler is failing at, if any.
    #[serde(default)]
    pub poison_sequence: Option<u64>,
    /// Failed attempts at that event so far (across restarts of a durable consumer).
    #[serde(default)]
    pub poison_attempts: u32,
    /// Events its error policy skipped (dead letters).
    #[serde(default)]
    pub dead_lettered: u64,
    /// Failed attempts its error policy answered with another attempt.
    #[serde(default)]
    pub retries: u64,
    /// For a worker group member: the index of its group's entry.
    #[serde(default)]
    pub group: Option<u32>,
    /// Whether this entry is a worker group (its sequence is the group's work sequence).
    #[serde(default)]
    pub is_group: bool,
    /// Events a group member delivered again after the member holding them died.
    #[serde(default)]
    pub redelivered: u64,
}

/// A report without the field (an older broker) describes a consumer some process attached.
fn attached_ever_default() -> bool {
    true
}

impl ConsumerReport {
    /// Whether it is a declared consumer waiting for its first attach.
    pub fn awaits_first_attach(&self) -> bool {
        self.declared && !self.attached_ever
    }

    /// The state as `broker status` prints it: DECLARED for a declared consumer that never
    /// attached (its JSON `state` is DETACHED), else the state's name.
    pub fn state_label(&self) -> &'static str {
        if self.awaits_first_attach() && self.state == ConsumerState::Detached {
            "DECLARED"
        } else {
            self.state.as_str()
        }
    }
}

/// One producer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProducerReport {
    /// Table index.
    pub index: u32,
    /// Its process.
    pub pid: u32,
    /// Whether that process is alive.
    pub alive: bool,
    /// First sequence of the claim it holds.
    pub in_flight: Option<u64>,
    /// Events published.
    pub published: u64,
    /// Publishes refused (full, timed out, stopped, too large).
    pub refused: u64,
    /// Claims it dropped unwritten (tombstones).
    pub tombstoned: u64,
    /// Sequences of its claims the broker repaired after it died.
    pub repaired: u64,
    /// Times it parked waiting for room.
    pub parks: u64,
    /// It has the multi-producer line to itself (lone claims: plain stores, no locked
    /// instruction) until another producer claims.
    #[serde(default)]
    pub lone: bool,
}

/// A segment that could not be opened as a ring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unreadable {
    /// The file.
    pub path: String,
    /// Why.
    pub error: String,
}

impl StatusReport {
    /// Recompute `healthy` from the rings.
    pub fn compute_healthy(&mut self) {
        self.healthy = self.unreadable.is_empty()
            && self
                .rings
                .iter()
                .all(|r| r.blocked_by.is_none() && r.corrupt.is_empty())
            && self
                .rings
                .iter()
                .flat_map(|r| &r.consumers)
                .all(|c| !c.state.is_unhealthy());
    }
}
