//! The repairs a broker (or any process) makes after a process dies: tombstones for the
//! claims a dead producer left, freeing and releasing the entries of dead consumers, and the
//! broker's own bookkeeping words in the header.
//!
//! These are library calls, so that a ring works without a broker.
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

use shmring_layout::{
    consumer_state, producer_state, IN_FLIGHT_CLAIMING, SLOT_FLAG_TOMBSTONE, STAMP_WRITING,
};

use crate::{gating, park, process, Ring};

/// What a repair of dead claims did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repair {
    /// Sequences tombstoned.
    pub tombstoned: u64,
    /// Sequences that could not be repaired yet (their slot still holds an unread event).
    pub waiting: u64,
}

impl Ring {
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
            tracing::info!(
                ring = self.name(),
                consumer = index,
                pid,
                to = consumer_state::name(to),
                "consumer entry of a process that is gone no longer gates producers"
            );
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
        if held == IN_FLIGHT_CLAIMING || self.seg.line().single {
            // A single producer records no claim in its entry (its position is the line's):
            // its hole is every unpublished sequence below the position.
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
        tracing::info!(
            ring = self.name(),
            producer = index,
            pid,
            tombstoned = repair.tombstoned,
            "repaired the claims of a producer that died; its entry is free"
        );
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
        let head = self.seg.line().claimed();
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
