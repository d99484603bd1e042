//! Ring lifecycle (stop, drain, start) and the repairs a broker makes after a process dies.
//!
//! These are library calls so that a ring works without a broker; with a broker running,
//! lifecycle requests go through it, so that one process orders them.
//!
//! ## Stop
//!
//! Stopping closes the sequence line in one atomic step: `fetch_or(CLAIM_CLOSED)` on the
//! claim counter. Every claim after it reads the bit and is refused; every claim before it
//! holds a sequence below the returned count, the *stop sequence*, and is honoured: its
//! event is written and stays in the ring for the consumers. A publish racing a stop is
//! therefore refused or delivered, never accepted and lost, and the publish path pays
//! nothing for it (the bit is in the word it already increments). Sequence numbers stay
//! unique for the life of the segment; `start` reopens the line at the stop sequence and
//! bumps the run counter.
//!
//! ## Drain
//!
//! Draining stops the line and waits until every gating consumer has consumed up to the
//! stop sequence. Consumers see the end of the run as the end of a batch, so a handler
//! that commits on the end-of-batch edge commits everything it was handed.

//!
//! ## Orderings in this module
//!
//! - Ring state: stored Release after what it publishes (the stop sequence, a run) and
//!   loaded Acquire by every reader that then uses those; a second Relaxed load of the
//!   same word only feeds an error message.
//! - Display and bookkeeping words (`run`, `broker_pid`, `last_sweep_ns`, the `repaired`
//!   counter, a producer entry's pid/start time compared against a dead process's): Relaxed,
//!   no other memory is read on their account.
//! - Entry states loaded Acquire before reading the fields their writer stored first;
//!   gating changes (release, free) are SeqCst CASes, as in the attach protocol (`gating`).
//! - A tombstone is a publish: len/flags Relaxed, then the stamp Release, pairing with the
//!   consumers' Acquire stamp load.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shmring_layout::{
    consumer_state, producer_state, RingState, CLAIM_CLOSED, IN_FLIGHT_CLAIMING,
    SLOT_FLAG_TOMBSTONE, STAMP_WRITING,
};

use crate::{gating, park, process, Ring};

/// A lifecycle request the ring's state does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    /// The ring was deleted.
    #[error("ring was deleted")]
    Deleted,
    /// `start` on a running ring.
    #[error("ring is already running")]
    AlreadyRunning,
    /// The ring's state word is not a known state.
    #[error("ring state word {0} is corrupt")]
    CorruptState(u32),
    /// Drain did not finish in time.
    #[error("drain timed out: {} consumer(s) short of sequence {stop_seq}: {}", .behind.len(), describe_behind(.behind))]
    DrainTimeout {
        /// The stop sequence.
        stop_seq: u64,
        /// (consumer index, name, next) of every consumer still short of it.
        behind: Vec<(u32, String, u64)>,
    },
}

fn describe_behind(behind: &[(u32, String, u64)]) -> String {
    behind
        .iter()
        .map(|(i, name, next)| {
            let name = if name.is_empty() { "<anonymous>" } else { name };
            format!("#{i} {name} at {next}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a repair of dead claims did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repair {
    /// Sequences tombstoned.
    pub tombstoned: u64,
    /// Sequences that could not be repaired yet (their slot still holds an unread event).
    pub waiting: u64,
}

impl Ring {
    /// Close the sequence line: claims from now on are refused; claims already taken are
    /// published as usual. Returns the stop sequence. Idempotent.
    pub fn stop(&self) -> Result<u64, LifecycleError> {
        self.stop_as(RingState::Stopped)
    }

    fn stop_as(&self, state: RingState) -> Result<u64, LifecycleError> {
        let h = self.seg.header();
        match RingState::from_u32(h.state.load(Ordering::Acquire)) {
            Some(RingState::Deleted) => return Err(LifecycleError::Deleted),
            Some(RingState::Running) => {}
            Some(_) => {
                // Already closed: only the state changes (Stopped <-> Draining).
                h.state.store(state as u32, Ordering::Release);
                return Ok(h.stop_seq.load(Ordering::Relaxed));
            }
            None => {
                return Err(LifecycleError::CorruptState(
                    h.state.load(Ordering::Relaxed),
                ))
            }
        }
        let stop = self.close_line();
        // Release: pairs with the Acquire in `gating::stop_seq`; the stop sequence stored
        // by `close_line` is visible with the state.
        h.state.store(state as u32, Ordering::Release);
        // Parked consumers look again: a drained consumer returns from `run`.
        park::wake(&self.seg.lines().consumer_wake.value);
        Ok(stop)
    }

    /// Record the stop sequence, then set the CLOSED bit (the state is the caller's).
    ///
    /// Recording first makes a stopper that dies half-way harmless: the header already
    /// holds the count the line closed at, so a later `stop` (the broker finishes a
    /// half-done one) and `start` use the right sequence. The CAS closes the line only at
    /// the count just recorded; if a claim moved it meanwhile, record again and retry.
    /// `fetch_max` is right because open claim counts only grow over a segment's life.
    pub(crate) fn close_line(&self) -> u64 {
        let h = self.seg.header();
        let claim = &self.seg.lines().claim.value;
        // SeqCst: the close is one point in the order of every claim; claims before it are
        // below the returned sequence.
        let mut c = claim.load(Ordering::SeqCst);
        loop {
            if c & CLAIM_CLOSED != 0 {
                // Closed before (perhaps by a stopper that died): its record stands.
                return h.stop_seq.load(Ordering::SeqCst);
            }
            // SeqCst: ordered before the CAS that closes the line.
            h.stop_seq.fetch_max(c, Ordering::SeqCst);
            match claim.compare_exchange(c, c | CLAIM_CLOSED, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return c,
                Err(now) => c = now,
            }
        }
    }

    /// Stop (if running) and wait until every gating consumer has consumed everything
    /// published before the stop, at most `timeout`. The ring is left Stopped either way.
    pub fn drain(&self, timeout: Duration) -> Result<u64, LifecycleError> {
        let stop = self.stop_as(RingState::Draining)?;
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(50);
        let result = loop {
            let behind = self.behind(stop);
            if behind.is_empty() {
                break Ok(stop);
            }
            if Instant::now() >= deadline {
                break Err(LifecycleError::DrainTimeout {
                    stop_seq: stop,
                    behind,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        };
        if self.state() == Some(RingState::Draining) {
            // Release: as every state store (module comment).
            self.seg
                .header()
                .state
                .store(RingState::Stopped as u32, Ordering::Release);
        }
        result
    }

    /// Gating consumers whose position is below `stop`.
    fn behind(&self, stop: u64) -> Vec<(u32, String, u64)> {
        let geo = self.seg.geometry();
        (0..geo.max_consumers)
            .filter_map(|i| {
                let e = self.seg.consumer(i)?;
                let state = e.hot.state.load(Ordering::Acquire);
                let next = e.hot.next.load(Ordering::Acquire);
                (consumer_state::gates(state) && next < stop)
                    .then(|| (i, crate::consumer::entry_name(e), next))
            })
            .collect()
    }

    /// Reopen a stopped ring: the run counter goes up by one and publishing continues at
    /// the stop sequence. Returns the new run number.
    pub fn start(&self) -> Result<u64, LifecycleError> {
        let h = self.seg.header();
        match RingState::from_u32(h.state.load(Ordering::Acquire)) {
            Some(RingState::Deleted) => return Err(LifecycleError::Deleted),
            Some(RingState::Running) => return Err(LifecycleError::AlreadyRunning),
            Some(_) => {}
            None => {
                return Err(LifecycleError::CorruptState(
                    h.state.load(Ordering::Relaxed),
                ))
            }
        }
        // Relaxed: ordered by the Acquire state load above (the stopper stored it first).
        let stop = h.stop_seq.load(Ordering::Relaxed);
        let run = h.run.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        // Running first, then reopen the line: a claim that succeeds sees Running.
        h.state.store(RingState::Running as u32, Ordering::Release);
        // SeqCst: reopens at the stop sequence, discarding the low-bit bumps of claims
        // refused while closed (each of those saw CLOSED and wrote nothing).
        self.seg.lines().claim.value.store(stop, Ordering::SeqCst);
        park::wake(&self.seg.lines().producer_wake.value);
        Ok(run)
    }

    /// The run counter (1 for the first run, +1 per start).
    pub fn run_number(&self) -> u64 {
        self.seg.header().run.load(Ordering::Relaxed)
    }

    /// The broker epoch (bumped by every broker that adopts the ring).
    pub fn broker_epoch(&self) -> u64 {
        self.seg.header().broker_epoch.load(Ordering::Acquire)
    }

    /// Record that broker `pid` adopted this ring; returns the new epoch.
    pub fn adopt(&self, pid: u32) -> u64 {
        let h = self.seg.header();
        h.broker_pid.store(pid, Ordering::Relaxed);
        h.broker_epoch
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1)
    }

    /// Pid of the broker that last adopted the ring (0: none).
    pub fn broker_pid(&self) -> u32 {
        self.seg.header().broker_pid.load(Ordering::Relaxed)
    }

    /// Record the instant (monotonic ns) of a broker sweep.
    pub fn mark_sweep(&self, monotonic_ns: u64) {
        self.seg
            .header()
            .last_sweep_ns
            .store(monotonic_ns, Ordering::Relaxed);
    }

    /// Whether the stamp of sequence `seq`'s slot says it is published.
    pub fn is_published(&self, seq: u64) -> bool {
        self.seg.slot(seq).header.stamp.load(Ordering::Acquire) == seq
    }

    /// Stop consumer `index` from gating producers (it may be lapped; a required consumer
    /// that re-attaches resumes at the head and counts the gap). Only an ACTIVE, FAILED or
    /// DETACHED entry that still belongs to process `(pid, start_time)`: an entry being
    /// attached or taken over is never touched. Returns whether it was released.
    pub fn release_consumer(&self, index: u32, pid: u32, start_time: u64) -> bool {
        self.consumer_cas(
            index,
            pid,
            start_time,
            &[
                consumer_state::ACTIVE,
                consumer_state::FAILED,
                consumer_state::DETACHED,
            ],
            consumer_state::RELEASED,
        )
    }

    /// Free consumer `index` (an anonymous consumer whose process died), if it still
    /// belongs to process `(pid, start_time)`. Also frees an entry left CLAIMED by a process
    /// that died while attaching: the caller must have seen it CLAIMED by that dead process
    /// for longer than an attach takes (the pid of a fresh CLAIMED entry may still be the
    /// previous owner's for a moment).
    pub fn free_consumer(&self, index: u32, pid: u32, start_time: u64) -> bool {
        self.consumer_cas(
            index,
            pid,
            start_time,
            &[
                consumer_state::ACTIVE,
                consumer_state::FAILED,
                consumer_state::DETACHED,
                consumer_state::RELEASED,
                consumer_state::CLAIMED,
            ],
            consumer_state::FREE,
        )
    }

    fn consumer_cas(&self, index: u32, pid: u32, start_time: u64, from: &[u32], to: u32) -> bool {
        let Some(e) = self.seg.consumer(index) else {
            return false;
        };
        let state = e.hot.state.load(Ordering::Acquire);
        if !from.contains(&state)
            || e.cold.pid.load(Ordering::Relaxed) != pid
            || e.cold.start_time.load(Ordering::Relaxed) != start_time
        {
            return false;
        }
        // SeqCst: a gating change, in the total order of the attach protocol (`gating`).
        let done = e
            .hot
            .state
            .compare_exchange(state, to, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok();
        if done {
            park::wake(&self.seg.lines().producer_wake.value);
        }
        done
    }

    /// Monotonic nanoseconds of the broker's last sweep over this ring (0: never).
    pub fn last_sweep_ns(&self) -> u64 {
        self.seg.header().last_sweep_ns.load(Ordering::Relaxed)
    }

    /// Publish tombstones for the claim held by producer `index`, whose process
    /// `(pid, start_time)` must be dead. A slot whose previous event is still unread is left
    /// for a later call (counted in `waiting`). Frees the entry once the claim is repaired.
    ///
    /// A producer that died between announcing a claim and learning its sequence (see
    /// `IN_FLIGHT_CLAIMING`) left a hole nobody can name: every unpublished sequence below
    /// the head that no live producer holds is then tombstoned. Call this only after the
    /// unblock timeout, so that a live producer has long since recorded its claim.
    pub fn repair_dead_producer(&self, index: u32, pid: u32, start_time: u64) -> Repair {
        let mut repair = Repair::default();
        let Some(e) = self.seg.producer(index) else {
            return repair;
        };
        if e.pid.load(Ordering::Relaxed) != pid
            || e.start_time.load(Ordering::Relaxed) != start_time
            || process::is_alive(pid, start_time)
        {
            return repair;
        }
        let held = e.in_flight.load(Ordering::Acquire);
        if held == IN_FLIGHT_CLAIMING {
            repair = self.repair_unattributed(index);
        } else if held != 0 {
            let first = held - 1;
            // A claim is at most capacity/2 sequences; a larger length is corruption.
            let len = e
                .in_flight_len
                .load(Ordering::Relaxed)
                .clamp(1, self.capacity() / 2);
            for seq in first..first.saturating_add(len) {
                match self.tombstone(seq) {
                    Some(true) => repair.tombstoned += 1,
                    Some(false) => {}
                    None => repair.waiting += 1,
                }
            }
        }
        if repair.waiting > 0 {
            return repair;
        }
        // Relaxed: a counter. Release on in_flight and state: the tombstones above are
        // visible to whoever sees the claim cleared or the entry free.
        e.repaired.fetch_add(repair.tombstoned, Ordering::Relaxed);
        e.in_flight.store(0, Ordering::Release);
        e.pid.store(0, Ordering::Relaxed);
        e.state.store(producer_state::FREE, Ordering::Release);
        repair
    }

    /// Tombstone every unpublished sequence from the slowest consumer to the head that no
    /// other attached producer holds (`skip` is the dead producer's entry). If another
    /// producer is itself between announcing and recording a claim, nothing is done now.
    fn repair_unattributed(&self, skip: u32) -> Repair {
        let mut repair = Repair::default();
        let geo = self.seg.geometry();
        // The head first, then the producer table: a live producer that claims after this
        // load holds a sequence at or above `head`, outside the range repaired below; one
        // that claimed before it has announced its claim (or recorded it, with a Release
        // clear only after publishing), which the scan sees.
        let head = gating::head(&self.seg);
        let mut held: Vec<(u64, u64)> = Vec::new();
        for i in (0..geo.max_producers).filter(|&i| i != skip) {
            let Some(p) = self.seg.producer(i) else { break };
            if p.state.load(Ordering::Acquire) != producer_state::ACTIVE {
                continue;
            }
            // Acquire: pairs with the producer's Release clear after publishing, so a
            // claim read as cleared has its stamps visible to the scan below.
            match p.in_flight.load(Ordering::Acquire) {
                0 => {}
                IN_FLIGHT_CLAIMING => {
                    repair.waiting += 1;
                    return repair;
                }
                first => held.push((first - 1, p.in_flight_len.load(Ordering::Relaxed))),
            }
        }
        // Holes lie at or after the slowest gating consumer; a live producer's claim can be
        // at most max_producers claims of capacity/2 ahead of it, so this range is bounded.
        let from = gating::scan(&self.seg)
            .max(head.saturating_sub(u64::from(geo.max_producers) * geo.capacity));
        for seq in from..head {
            if held
                .iter()
                .any(|&(f, n)| seq >= f && seq < f.saturating_add(n))
            {
                continue;
            }
            match self.tombstone(seq) {
                Some(true) => repair.tombstoned += 1,
                Some(false) => {}
                None => repair.waiting += 1,
            }
        }
        repair
    }

    /// Tombstone sequence `seq` if it is claimed but unpublished and its slot is free.
    /// `Some(true)`: tombstoned; `Some(false)`: already published; `None`: the slot still
    /// holds an event a gating consumer has not read (try again later).
    pub fn tombstone(&self, seq: u64) -> Option<bool> {
        let slot = self.seg.slot(seq);
        let stamp = slot.header.stamp.load(Ordering::Acquire);
        if stamp == seq || ((stamp & !STAMP_WRITING) > seq && stamp != shmring_layout::STAMP_EMPTY)
        {
            return Some(false);
        }
        let need = (seq + 1).saturating_sub(self.capacity());
        if gating::scan(&self.seg) < need {
            return None;
        }
        // Relaxed: published by the Release stamp store below.
        slot.header.len.store(0, Ordering::Relaxed);
        slot.header
            .flags
            .store(SLOT_FLAG_TOMBSTONE, Ordering::Relaxed);
        // Release: SYNC POINT with the consumers' Acquire stamp load, as in a publish.
        slot.header.stamp.store(seq, Ordering::Release);
        park::wake(&self.seg.lines().consumer_wake.value);
        Some(true)
    }
}
