//! Per-consumer health, tracked across sweeps: HEALTHY, STALLED, DEAD, ...
//!
//! A consumer is STALLED when it has pending events and its sequence has not moved for the
//! stall threshold, and HEALTHY again as soon as it moves. The sequence and the instant it
//! last moved are updated together, in the same sweep, so a report never pairs a sequence
//! from one sweep with an instant from another. Deaths and handler failures are edges too:
//! a failure is reported (and its policy applied) once per failure, a death once per
//! attachment: a process that attaches its failed consumer again starts a new one.

use std::time::{Duration, Instant};

use shmring::{ConsumerInfo, FirstSeen};
use shmring_layout::consumer_state;

use crate::report::ConsumerState;

/// What one sweep saw of a consumer, beyond its table entry.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// Its process is alive.
    pub alive: bool,
    /// An event (or a lap) waits at its position.
    pub pending: bool,
    /// The sweep's instant.
    pub now: Instant,
    /// The ring's stall threshold.
    pub threshold: Duration,
}

/// A change a sweep found, to log, count and act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// HEALTHY -> STALLED.
    Stalled,
    /// STALLED -> HEALTHY.
    Recovered,
    /// Its process is gone while it was attached.
    Died,
    /// Its handler failed.
    Failed,
    /// An anonymous consumer whose process is gone: free the entry.
    Orphaned,
}

/// The broker's record of one consumer entry, for one attached process.
#[derive(Debug, Clone)]
pub struct ConsumerHealth {
    pid: u32,
    start_time: u64,
    /// The sequence at the sweep that last saw it move, and that instant.
    pub sequence: u64,
    /// When `sequence` was first seen.
    pub last_moved: Instant,
    /// Since when it has had pending events at `sequence`.
    pending_since: Option<Instant>,
    /// The instant of the last sweep that looked at it.
    pub swept: Instant,
    /// Current state.
    pub state: ConsumerState,
    /// The attach count and failure count of the entry's last reported failure: one
    /// report per failure (a member failing on the claim it adopted from a failed one is
    /// another, with the same attach count). Not the entry word: a failed handle that drops
    /// changes its FAILED entry's word, and that is the same failure.
    reported_failure: Option<(u64, u64)>,
    /// The attach count of the entry's last reported death: one per attachment.
    reported_death: Option<u64>,
    /// The entry word of the last report that its holder is gone, for an entry the broker
    /// keeps looking at every sweep (a worker group member's, which only a member frees):
    /// one report per word.
    reported_gone: Option<u64>,
    /// The entry's word and the sweep that first saw it: a half-taken entry whose pid a
    /// process started after then has is a reused pid (`Ring::free_consumer_seen`).
    pub first_seen: Option<FirstSeen>,
}

impl ConsumerHealth {
    /// A record for `info`, first seen at `now`.
    pub fn new(info: &ConsumerInfo, now: Instant) -> Self {
        Self {
            pid: info.pid,
            start_time: info.start_time,
            sequence: info.next,
            last_moved: now,
            pending_since: None,
            swept: now,
            state: ConsumerState::Healthy,
            reported_failure: None,
            reported_death: None,
            reported_gone: None,
            first_seen: None,
        }
    }

    /// Whether the gone holder of the entry, at `word`, is news: true once per word.
    pub fn first_report_gone(&mut self, word: u64) -> bool {
        let first = self.reported_gone != Some(word);
        self.reported_gone = Some(word);
        first
    }

    /// Whether this record is about the process now in `info`'s entry.
    pub fn same_process(&self, info: &ConsumerInfo) -> bool {
        self.pid == info.pid && self.start_time == info.start_time
    }

    /// A new record if another process is in `info`'s entry now (first seen at `now`). The
    /// sighting of the entry's word stays, while the word does: a taker that stores its
    /// start time after its CAS changes the pair, not the word.
    pub fn follow(&mut self, info: &ConsumerInfo, now: Instant) {
        if !self.same_process(info) {
            let first_seen = self.first_seen;
            *self = ConsumerHealth::new(info, now);
            self.first_seen = first_seen;
        }
    }

    /// Milliseconds it had not moved at the last sweep.
    pub fn idle_ms(&self) -> u64 {
        self.swept.duration_since(self.last_moved).as_millis() as u64
    }

    /// Fold in one sweep's view of the entry, read before this call; returns the edge
    /// crossed, if any.
    pub fn observe(&mut self, info: &ConsumerInfo, seen: Seen) -> Option<Edge> {
        self.swept = seen.now;
        self.first_seen = Some(FirstSeen::keep_or_now(self.first_seen, info.first_seen()));
        if info.next != self.sequence {
            self.sequence = info.next;
            self.last_moved = seen.now;
            self.pending_since = None;
        }
        let reported = self
            .reported_death
            .or(self.reported_failure.map(|(attaches, _)| attaches));
        if info.state_code == consumer_state::ACTIVE
            && seen.alive
            && reported.is_some_and(|a| a != info.attaches)
        {
            // Its process attached it again after a failure that was reported: a new
            // attachment, whose stall timing starts now.
            (self.reported_failure, self.reported_death) = (None, None);
            self.pending_since = None;
            self.last_moved = seen.now;
        }
        let (state, edge) = match info.state_code {
            consumer_state::ACTIVE if !seen.alive => {
                let first = self.reported_death != Some(info.attaches);
                self.reported_death = Some(info.attaches);
                (ConsumerState::Dead, first.then_some(Edge::Died))
            }
            // Half-attached (CLAIMED) or being taken over (RESUMING): the pid is the
            // attaching process's own (it changes with the state), but its start time may
            // still be the previous holder's, so the free checks that no process has the
            // pid, or that the one that has it started after this record's first sighting
            // of the word (`Ring::free_consumer_seen`), and leaves a live one alone.
            consumer_state::CLAIMED | consumer_state::RESUMING | consumer_state::REATTACHING => (
                ConsumerState::Attaching,
                (!seen.alive).then_some(Edge::Orphaned),
            ),
            consumer_state::FAILED if !info.durable && !seen.alive => {
                (ConsumerState::Failed, Some(Edge::Orphaned))
            }
            consumer_state::FAILED => {
                let failure = Some((info.attaches, info.stats.failures));
                let first = self.reported_failure != failure;
                self.reported_failure = failure;
                (ConsumerState::Failed, first.then_some(Edge::Failed))
            }
            consumer_state::DETACHED => (ConsumerState::Detached, None),
            consumer_state::RELEASED if !info.durable && !seen.alive => {
                (ConsumerState::Released, Some(Edge::Orphaned))
            }
            consumer_state::RELEASED => (ConsumerState::Released, None),
            _ => self.stall_check(seen),
        };
        self.state = state;
        edge
    }

    fn stall_check(&mut self, seen: Seen) -> (ConsumerState, Option<Edge>) {
        if !seen.pending {
            self.pending_since = None;
        } else if self.pending_since.is_none() {
            self.pending_since = Some(seen.now);
        }
        let stalled = shmring::is_stalled(
            self.pending_since,
            self.last_moved,
            seen.now,
            seen.threshold,
        );
        match (self.state == ConsumerState::Stalled, stalled) {
            (false, true) => (ConsumerState::Stalled, Some(Edge::Stalled)),
            (true, false) => (ConsumerState::Healthy, Some(Edge::Recovered)),
            (true, true) => (ConsumerState::Stalled, None),
            (false, false) => (ConsumerState::Healthy, None),
        }
    }
}

/// The broker's record of one producer entry, for one attached process.
#[derive(Debug, Clone)]
pub struct ProducerHealth {
    pid: u32,
    start_time: u64,
    /// Sequences of its claims repaired so far.
    pub repaired: u64,
    /// A stuck repair was already logged.
    pub warned: bool,
    /// The consumer line was woken for this death (`Ring::wake_consumers`).
    pub woken: bool,
    /// The entry's word and the sweep that first saw it (see [`ConsumerHealth`]'s).
    pub first_seen: Option<FirstSeen>,
}

impl ProducerHealth {
    /// A record for process `(pid, start_time)`.
    pub fn new(pid: u32, start_time: u64) -> Self {
        Self {
            pid,
            start_time,
            repaired: 0,
            warned: false,
            woken: false,
            first_seen: None,
        }
    }

    /// Whether this record is about process `(pid, start_time)`.
    pub fn same_process(&self, pid: u32, start_time: u64) -> bool {
        self.pid == pid && self.start_time == start_time
    }

    /// A new record if another process `(pid, start_time)` is in the entry now, keeping the
    /// sighting of the entry's word (see [`ConsumerHealth::follow`]).
    pub fn follow(&mut self, pid: u32, start_time: u64) {
        if !self.same_process(pid, start_time) {
            let first_seen = self.first_seen;
            *self = ProducerHealth::new(pid, start_time);
            self.first_seen = first_seen;
        }
    }
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
