//! Consumers: each with its own sequence, delivering published runs in batches.
//!
//! `poll_once` is the step (the Disruptor's `pollOnce`): it finds the contiguous run of
//! published slots from the consumer's `next` (up to the batch cap), hands each to the
//! handler with the end-of-batch edge on the last, and commits `next` once for the batch.
//!
//! - A **required** consumer gates producers, so the slots it reads cannot be overwritten
//!   until it commits: the handler gets the payload in place, zero-copy.
//! - An **optional** consumer may be lapped, so it copies each payload out and re-checks the
//!   stamp afterwards (a seqlock read). It delivers one event behind, so the last event it
//!   could validate still carries the end-of-batch edge. A lap is seen from a stamp beyond
//!   the awaited sequence; the consumer jumps to the head and counts what it lost.
//!
//! A handler that panics: events before the panicking one are committed; the consumer is
//! marked FAILED in the table, keeps its position at the failing event (a durable consumer
//! that re-attaches resumes there), and this handle returns errors from then on. The ring is
//! untouched: the producers and every other consumer carry on.
//!
//! The parts: this file (options, counters, the handle and its detach), `attach` (a free
//! entry or a durable name taken over), `deliver` (`poll_once`: the run, in place or
//! copied, and its commit), `idle` (`run`, `wait`, parking).

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Instant;

use shmring_layout::stamp::{self, Stamp};
use shmring_layout::{
    consumer_flags, consumer_state, owned_word, ConsumerCounters, ConsumerEntry, NAME_LEN,
    SLOT_FLAG_TOMBSTONE,
};

use crate::lifecycle::is_deleted;
use crate::park::{self, Parked, WakeCounts, PARK_NET};
use crate::segment::Segment;
use crate::table::{self, Holder};
use crate::wait::{Idler, Step};
use crate::{fence, process, AttachError, Event, PollError, Ring, WaitStrategy};

/// Default number of events one `poll_once` delivers at most.
pub const DEFAULT_BATCH_CAP: usize = 1024;

/// How to attach a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerOptions {
    name: Option<String>,
    group: Option<String>,
    required: bool,
    batch_cap: usize,
    wait: WaitStrategy,
}

impl ConsumerOptions {
    /// An anonymous required consumer: starts at the head, its entry is freed on drop.
    pub fn anonymous() -> Self {
        Self {
            name: None,
            group: None,
            required: true,
            batch_cap: DEFAULT_BATCH_CAP,
            wait: WaitStrategy::default(),
        }
    }

    /// A durable required consumer: the first attach starts at the head; a later attach
    /// under the same name (after a detach, a crash or a handler failure) resumes from the
    /// last committed sequence.
    pub fn durable(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::anonymous()
        }
    }

    /// A worker of the named group: the group's members share its events, each event
    /// delivered to one of them. The first worker creates the group, which then holds its
    /// events for its members like a durable consumer (they wait for it while no member
    /// runs). The member itself is anonymous and required; its entry is freed on drop, and
    /// a claim it has not finished is handed to another member, as is the claim of a
    /// member whose process died (at-least-once: counted in
    /// [`ConsumerStats::redelivered`]). See the `group` module of ARCHITECTURE.md.
    ///
    /// ```no_run
    /// # use shmring::{ConsumerOptions, Ring};
    /// # fn run(ring: &Ring) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut worker = ring.consumer(ConsumerOptions::worker("resizers"))?;
    /// worker.run(|ev| println!("{} bytes at {}", ev.bytes().len(), ev.sequence()), || false)?;
    /// # Ok(()) }
    /// ```
    pub fn worker(group: impl Into<String>) -> Self {
        Self {
            group: Some(group.into()),
            ..Self::anonymous()
        }
    }

    /// Make it optional (ignored for a [`worker`](Self::worker): members are required): it gates producers only within the ring's slack, and may be lapped
    /// (it then counts what it lost in `dropped_behind`).
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// Events per `poll_once` at most (clamped to `1..=capacity`).
    pub fn batch_cap(mut self, cap: usize) -> Self {
        self.batch_cap = cap;
        self
    }

    /// The wait strategy of `run` (and of `wait` in later releases).
    pub fn wait(mut self, wait: WaitStrategy) -> Self {
        self.wait = wait;
        self
    }
}

/// A consumer's counters (from its table entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsumerStats {
    /// Events handed to the handler.
    pub delivered: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Tombstones skipped.
    pub skipped: u64,
    /// Events lost to lapping (optional consumers) or to a release from gating.
    pub dropped_behind: u64,
    /// Corrupt lengths clamped to the slot.
    pub clamped: u64,
    /// Handler failures.
    pub failures: u64,
    /// Returns from a futex park by a wake (or a wake line that moved before the sleep).
    pub wakeups: u64,
    /// Returns from a park by a timeout after a producer had moved the wake line (its wake
    /// came too late or never arrived), or by a `TimeoutBlocking` timeout shorter than the
    /// net with an event already waiting. Counted by this handle only: not kept in the
    /// segment, so 0 in a `Ring::info` snapshot and after a re-attach.
    pub late_wakeups: u64,
    /// Returns from a park by the timed net while an event was already waiting and the
    /// wake line never moved: a wake-up the protocol lost. Zero unless something is wrong.
    pub net_wakeups: u64,
    /// Worker group members: events delivered again because the member that claimed them
    /// died (or failed) before finishing its claim. Each may be a duplicate; events of a
    /// claim a member gave back when it left are not counted.
    pub redelivered: u64,
}

impl ConsumerStats {
    /// The counters an entry keeps (`late_wakeups` is this handle's alone: 0).
    pub(crate) fn read(c: &ConsumerCounters) -> Self {
        // Relaxed: counters written by their consumer alone; readers want a recent number.
        ConsumerStats {
            delivered: c.delivered.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            dropped_behind: c.dropped_behind.load(Ordering::Relaxed),
            clamped: c.clamped.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            wakeups: c.wakeups.load(Ordering::Relaxed),
            late_wakeups: 0,
            net_wakeups: c.net_wakeups.load(Ordering::Relaxed),
            redelivered: 0,
        }
    }

    /// The counters of an entry, with the group counters beside them.
    pub(crate) fn read_entry(e: &ConsumerEntry) -> Self {
        ConsumerStats {
            // Relaxed: as above.
            redelivered: e.cold.graph.redelivered.load(Ordering::Relaxed),
            ..Self::read(&e.cold.counters)
        }
    }
}

/// How `Consumer::wait` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// An event (or a lap to recover from) is waiting: call `poll_once`.
    Ready,
    /// A `TimeoutBlocking` consumer waited its timeout without an event.
    TimedOut,
    /// The ring is closed and this consumer has consumed everything published.
    Closed,
}

/// Why `run` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunExit {
    /// The stop predicate said so.
    Stopped,
    /// The ring is closed and everything published was consumed.
    Closed,
}

/// A consumer attached to one ring. `Send` but not `Sync`: one thread steps it at a time.
pub struct Consumer {
    pub(crate) seg: Arc<Segment>,
    entry: u32,
    /// The entry's word as this handle holds it (see `table`).
    word: u64,
    pub(crate) next: u64,
    pub(crate) required: bool,
    durable: bool,
    batch_cap: u64,
    pub(crate) max_payload: usize,
    idler: Idler,
    wait: WaitStrategy,
    /// Since when `wait` has found nothing (for `TimeoutBlocking`).
    idle_since: Option<Instant>,
    /// Whether this process has registered for membarrier, as far as this handle knows: its
    /// first commit registers it (see `fence`).
    registered: bool,
    pub(crate) failed: bool,
    scratch: [Vec<u8>; 2],
    stats: ConsumerStats,
    /// For a worker group member: its group and claims (see `member`).
    member: Option<member::Member>,
    _not_sync: PhantomData<Cell<()>>,
}

mod attach;
mod deliver;
mod idle;
mod member;

pub(crate) use attach::entry_name;

impl Consumer {
    fn entry(&self) -> &ConsumerEntry {
        self.seg
            .consumer(self.entry)
            .unwrap_or_else(|| unreachable!("consumer entry index checked at attach"))
    }

    fn load_stats(&mut self) {
        self.stats = ConsumerStats::read_entry(self.entry());
    }

    fn store_stats(&self) {
        let c = &self.entry().cold.counters;
        let s = &self.stats;
        // Relaxed: counters only this consumer writes; readers want a recent number.
        c.delivered.store(s.delivered, Ordering::Relaxed);
        c.batches.store(s.batches, Ordering::Relaxed);
        c.skipped.store(s.skipped, Ordering::Relaxed);
        c.dropped_behind.store(s.dropped_behind, Ordering::Relaxed);
        c.clamped.store(s.clamped, Ordering::Relaxed);
        c.failures.store(s.failures, Ordering::Relaxed);
        c.wakeups.store(s.wakeups, Ordering::Relaxed);
        c.net_wakeups.store(s.net_wakeups, Ordering::Relaxed);
        if self.member.is_some() {
            let g = &self.entry().cold.graph;
            g.redelivered.store(s.redelivered, Ordering::Relaxed);
        }
    }

    pub(crate) fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// The next sequence this consumer will read.
    pub fn next_sequence(&self) -> u64 {
        self.next
    }

    /// Whether it gates producers unconditionally.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// Its counters.
    pub fn stats(&self) -> ConsumerStats {
        self.stats
    }

    /// Its index in the consumer table.
    pub fn index(&self) -> u32 {
        self.entry
    }

    /// Detach and free the entry, even a durable one: the name is forgotten and the
    /// consumer no longer gates anything.
    pub fn unsubscribe(mut self) {
        self.durable = false;
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if self.member.is_some() {
            self.leave_group();
            return;
        }
        let e = self.entry();
        // Twice at most: a broker's release may land between the load and the CAS.
        for _ in 0..2 {
            // Acquire: pairs with the broker's SeqCst release CAS.
            let word = e.hot.word.load(Ordering::Acquire);
            let released = word == table::consumer::released(self.word);
            if word != self.word && !released {
                // The entry is no longer this handle's: nothing of it to give back.
                return;
            }
            let to = if !self.durable {
                consumer_state::FREE
            } else if released {
                // The broker released it: it stays released (not gating), whatever this
                // handle last knew, and resumes at the head on re-attach.
                consumer_state::RELEASED
            } else if self.failed {
                consumer_state::FAILED
            } else if self.required {
                consumer_state::DETACHED
            } else {
                consumer_state::RELEASED
            };
            // A CAS from the word read, so a release that lands in between is not undone.
            if table::consumer::give_up(&e.hot.word, word, to).is_ok() {
                return;
            }
        }
    }
}
