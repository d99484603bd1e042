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
//! A handler that fails (panics, or returns an error through `poll_once_fallible`): events
//! before the failing one are committed, the attempt is counted in the entry, and the
//! error policy decides. Under the default, Stop, the consumer is marked FAILED in the
//! table, keeps its position at the failing event (a durable consumer that re-attaches
//! resumes there), and this handle returns errors from then on; Skip and Retry try the
//! event again on a later poll, then skip it (a dead letter) or stop. The ring is
//! untouched: the producers and every other consumer carry on.
//!
//! The parts: this file (options, counters, the handle and its detach), `attach` (a free
//! entry or a durable name taken over), `deliver` (`poll_once`: the run, in place or
//! copied, and its commit), `policy` (error policies, the poison record, dead letters),
//! `flush` (the timed end-of-batch edge), `idle` (`run`, `wait`, parking).

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring_layout::stamp::{self, Stamp};
use shmring_layout::{
    consumer_flags, consumer_state, owned_word, ConsumerCounters, ConsumerEntry, GraphCounters,
    NAME_LEN, SLOT_FLAG_TOMBSTONE,
};

use crate::lifecycle::is_deleted;
use crate::park::{self, Parked, WakeCounts, PARK_NET};
use crate::segment::{Attached, Events, Segment, Slots};
use crate::table::{self, Holder};
use crate::wait::Idler;
use crate::{fence, fixed, process, AttachError, Event, PollError, Ring, WaitStrategy};

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
    on_error: ErrorPolicy,
    flush_within: Option<Duration>,
    upstream: Vec<String>,
    gather: u32,
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
            on_error: ErrorPolicy::Stop,
            flush_within: None,
            upstream: Vec::new(),
            gather: 0,
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

    /// What the consumer does when its handler fails at an event (default
    /// [`ErrorPolicy::Stop`]). A durable consumer counts the attempts in its entry, so a
    /// process that dies inside the handler counts too (see [`ErrorPolicy`]).
    pub fn on_error(mut self, policy: ErrorPolicy) -> Self {
        self.on_error = policy;
        self
    }

    /// While events are delivered, give an end-of-batch edge at least every `d`: the event
    /// handed over once `d` has passed since the last edge (counted from the first event
    /// after it) carries the edge and the batch commits there, so a handler that flushes
    /// on the edge holds data at most about `d` plus one event. Unset (the default),
    /// delivery reads no clock; set, it reads a clock once per event (see `flush`).
    pub fn flush_within(mut self, d: Duration) -> Self {
        self.flush_within = Some(d);
        self
    }

    /// On a ring of fixed-size (or sized) events: the [`Consumer::poll_runs`] call, or the
    /// poll of a [`Consumer::run`] loop, that follows one that handed over events first
    /// spends `spins` spin-loop hints (the CPU's pause instruction) before it looks at the
    /// ring; not after a call that filled its batch cap (events may be left behind: a
    /// backlog drains without pauses; so with `batch_cap(1)` it never pauses). Default 0: no
    /// pause. On a ring of stamped slots it does nothing. A consumer that reads behind
    /// upstreams (`after`) pauses after each batch they let through, so each gathering stage
    /// of a chain adds up to one pause.
    ///
    /// A consumer that keeps up with a producer publishing one event at a time finds a few
    /// events at each look, and each look takes the producer's cursor line and the line it
    /// is writing away from the producer's core: both sides then run at the speed of those
    /// transfers. A pause after each batch lets the producer write a run's worth of events
    /// on lines it holds, and the consumer take them in one look. It is a throughput
    /// setting: whatever was published since the last look waits up to the pause longer
    /// (16 spins are about 0.2 µs on the Intel Xeon development guest; a pause instruction
    /// takes from a few cycles to about 140 depending on the CPU). Measured on a busy-spin
    /// consumer with `gather(16)`, events paced or in ping-pong: p50 within about the runs'
    /// spread of the same consumer without it (PERFORMANCE.md, "A fixed-size ring's
    /// busy-spin latency"). `poll_once` and `wait` never pause (ARCHITECTURE.md and
    /// PERFORMANCE.md, "Run reads that gather").
    ///
    /// ```
    /// use shmring::{ConsumerOptions, ProducerMode, Ring, RingConfig};
    /// # let ns = format!("doc-gather-{}", std::process::id());
    /// let config = RingConfig {
    ///     capacity: 64,
    ///     producer_mode: ProducerMode::Single,
    ///     event_size: Some(8),
    ///     ..RingConfig::default()
    /// };
    /// let ring = Ring::create(&ns, "ticks", &config)?;
    /// let mut c = ring.consumer(ConsumerOptions::anonymous().gather(16))?;
    /// let mut p = ring.producer()?;
    /// for i in 0u64..3 {
    ///     p.publish(&i.to_le_bytes())?;
    /// }
    /// let mut sum = 0;
    /// let got = c.poll_runs(|_, events| {
    ///     sum += events.chunks_exact(8).map(|e| e[0] as u64).sum::<u64>();
    /// })?;
    /// assert_eq!((got, sum), (3, 3));
    /// # drop((c, p));
    /// Ring::remove(&ns, "ticks")?;
    /// # std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gather(mut self, spins: u32) -> Self {
        self.gather = spins;
        self
    }

    /// Read behind the durable consumers `upstream` of the same ring (the Disruptor's
    /// `handleEventsWith(a, b).then(c)`): this consumer is handed an event only once every
    /// one of them has committed past it. Each name must be a durable consumer of the ring
    /// when this one attaches (attached, detached, failed or declared); at most
    /// [`shmring_layout::MAX_UPSTREAM`] names, not its own, and no cycle. An upstream that
    /// dies, fails or detaches (an optional one included) holds this consumer until it comes
    /// back, unless the broker's policy releases a required one from gating; an upstream
    /// whose entry is freed ends this consumer with
    /// [`PollError::UpstreamLost`]. Producers still gate on every consumer. Calling it
    /// again adds names. A worker group's name may be named too: an event then reaches this
    /// consumer once the member that claimed it has returned from its handler (the
    /// Disruptor's handlers after a `WorkerPool`).
    ///
    /// A worker group may itself run after other consumers (`ConsumerOptions::worker("w")
    /// .after([...])`, the Disruptor's `WorkerPool` after its handlers): its members hand
    /// an event to their handler only once every upstream has finished it. The member that
    /// creates the group records its upstreams in the group's entry, and every member must
    /// name the same ones ([`AttachError::GroupUpstreams`]; a declared group has none). The
    /// group's entry is never freed: an upstream of a group freed while the ring lives
    /// leaves the group with its events and no member that can join.
    ///
    /// ```
    /// use shmring::{ConsumerOptions, Ring, RingConfig};
    /// # let ns = format!("doc-after-{}", std::process::id());
    /// let ring = Ring::create(&ns, "orders", &RingConfig { capacity: 64, ..RingConfig::default() })?;
    /// let mut journal = ring.consumer(ConsumerOptions::durable("journal"))?;
    /// let mut risk = ring.consumer(ConsumerOptions::durable("risk"))?;
    /// let mut apply = ring.consumer(ConsumerOptions::durable("apply").after(["journal", "risk"]))?;
    /// ring.producer()?.publish(b"buy 100 @ 42")?;
    /// assert_eq!(apply.poll_once(|_| {})?, 0, "neither upstream has committed it");
    /// journal.poll_once(|_| {})?;
    /// risk.poll_once(|_| {})?;
    /// assert_eq!(apply.poll_once(|_| {})?, 1);
    /// # drop((journal, risk, apply));
    /// Ring::remove(&ns, "orders")?;
    /// # std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn after<I>(mut self, upstream: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.upstream.extend(upstream.into_iter().map(Into::into));
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
    /// Handler failures (each failed attempt, however the policy answered it).
    pub failures: u64,
    /// Events the error policy skipped (see [`ErrorPolicy::Skip`]).
    pub dead_lettered: u64,
    /// Failed attempts that the error policy answered with another attempt.
    pub retries: u64,
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
    pub(crate) fn read(c: &ConsumerCounters, g: &GraphCounters) -> Self {
        // Relaxed: counters written by their consumer alone; readers want a recent number.
        ConsumerStats {
            dead_lettered: g.dead_lettered.load(Ordering::Relaxed),
            retries: g.retries.load(Ordering::Relaxed),
            redelivered: g.redelivered.load(Ordering::Relaxed),
            delivered: c.delivered.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            dropped_behind: c.dropped_behind.load(Ordering::Relaxed),
            clamped: c.clamped.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            wakeups: c.wakeups.load(Ordering::Relaxed),
            late_wakeups: 0,
            net_wakeups: c.net_wakeups.load(Ordering::Relaxed),
        }
    }

    /// The counters of an entry.
    pub(crate) fn read_entry(e: &ConsumerEntry) -> Self {
        Self::read(&e.cold.counters, &e.cold.graph)
    }
}

/// How `Consumer::wait` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// An event (or a lap to recover from) is waiting: call `poll_once`. For a dependent
    /// consumer, also an upstream whose entry changed (detached, released, taken over,
    /// gone): `poll_once` looks at it, and returns `UpstreamLost` if it is gone.
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
    /// The segment, with the slot geometry and this consumer's entry resolved at attach.
    pub(crate) seg: Attached<ConsumerEntry>,
    /// The entry's word as this handle holds it (see `table`).
    word: u64,
    pub(crate) next: u64,
    /// `read_ahead` handed out every sequence below this, each seen published: a commit
    /// up to it needs no second look (on a ring published by a cursor, a stop in progress
    /// leaves the last claim undecided for a look, not for an event already read).
    pub(crate) read_to: u64,
    pub(crate) required: bool,
    /// A fixed-size ring (see `fixed`): events read up to the cursor.
    fixed: bool,
    /// A ring of sized events (`fixed` too): each slot starts with a length word.
    sized: bool,
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
    /// What a handler failure does.
    policy: ErrorPolicy,
    /// The event whose poison record (`policy`) this handle wrote and clears once past it.
    poison: Option<u64>,
    /// This handle's mark of an attempt under way (`policy`): the event it counted an
    /// attempt at before making it, and the attempts before that mark (restored on drop
    /// if the attempt is never made).
    suspect: Option<(u64, u32)>,
    /// The attempts at the event at the position were used up (by processes that died in
    /// the handler): the policy acts on it without handing it over once it is published.
    exhausted: bool,
    /// Events left in the window after a durable attach in which each is marked before it
    /// is handed over (`policy::mark_before`).
    careful: u64,
    /// No attempt before this instant (a `Retry` back-off).
    retry_at: Option<Instant>,
    dead_letter: Option<DeadLetterFn>,
    flush: Option<Flush>,
    scratch: [Vec<u8>; 2],
    stats: ConsumerStats,
    /// The upstream consumers this one reads behind (see `barrier`).
    upstream: barrier::Upstreams,
    /// For a worker group member: its group and claims (see `member`).
    pub(crate) member: Option<member::Member>,
    /// For a worker group member: its group's entry index, kept while `member` is taken
    /// out of the handle. Its changes wake the group's line (`park::notify_downstreams`),
    /// not one read from an entry that may already be another consumer's.
    group: Option<u32>,
    /// For each upstream that is a worker group: what the last walk of its members found.
    group_scan: [Cell<barrier::GroupScan>; shmring_layout::MAX_UPSTREAM],
    /// The pause of `poll_runs` after a run (`ConsumerOptions::gather`).
    gather: runs::Gather,
    _not_sync: PhantomData<Cell<()>>,
}

mod attach;
mod barrier;
mod deliver;
mod flush;
mod idle;
mod member;
mod policy;
mod runs;

use flush::Flush;
pub(crate) use policy::read_poison;
pub use policy::{DeadLetter, ErrorPolicy, MAX_BACKOFF_FACTOR};
use policy::{DeadLetterFn, Failure};

pub(crate) use attach::{entry_name, pack_name};

impl Consumer {
    pub(crate) fn entry(&self) -> &ConsumerEntry {
        self.seg.entry()
    }

    /// Whether its entry still holds the word this handle holds it with: not released by
    /// the broker, not taken. A producer (or repair) that published past this consumer did
    /// so because it read the release; a cursor or stamp of that publish read before this
    /// (Acquire) makes the release happen before this load, which by coherence reads it or
    /// a later word.
    pub(crate) fn entry_unchanged(&self) -> bool {
        // Acquire: what the releaser or a new holder wrote before the word comes with it.
        self.entry().hot.word.load(Ordering::Acquire) == self.word
    }

    fn load_stats(&mut self) {
        let cold = &self.entry().cold;
        self.stats = ConsumerStats::read(&cold.counters, &cold.graph);
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
        // Release: as the attach count (see `fill_cold`), for a snapshot that ties the
        // failure count to the entry word it read.
        c.failures.store(s.failures, Ordering::Release);
        c.wakeups.store(s.wakeups, Ordering::Relaxed);
        c.net_wakeups.store(s.net_wakeups, Ordering::Relaxed);
        // `redelivered` is the worker group's counter: not written here.
        let g = &self.entry().cold.graph;
        g.dead_lettered.store(s.dead_lettered, Ordering::Relaxed);
        g.retries.store(s.retries, Ordering::Relaxed);
        if self.member.is_some() {
            let g = &self.entry().cold.graph;
            g.redelivered.store(s.redelivered, Ordering::Relaxed);
        }
    }

    pub(crate) fn segment(&self) -> &Arc<Segment> {
        self.seg.arc()
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
        self.seg.index()
    }

    /// Call `f` with each event the error policy skips ([`ErrorPolicy::Skip`]), after the
    /// `tracing` warning and before the position moves past it (so a process that dies in
    /// between reports it again on restart; it is counted once). Replaces an earlier one.
    pub fn on_dead_letter(&mut self, f: impl FnMut(DeadLetter<'_>) + Send + 'static) {
        self.dead_letter = Some(Box::new(f));
    }

    /// Its error policy.
    pub fn error_policy(&self) -> ErrorPolicy {
        self.policy
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
        // Acquire: pairs with the broker's SeqCst release CAS.
        let word = self.entry().hot.word.load(Ordering::Acquire);
        if word == self.word || word == table::consumer::released(self.word) {
            // Still this handle's entry: a suspect mark it never handed over is undone.
            self.undo_suspect();
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
                // This handle's own flag: a drop never registers the process.
                park::entry_changed(&self.seg, e, to, self.registered);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConsumerOptions, RingConfig};

    /// A ring of 16 slots and 4 consumer entries in `ns`.
    fn small_ring(ns: &shmring_testkit::Namespace) -> Ring {
        let config = RingConfig {
            capacity: 16,
            max_consumers: 4,
            ..RingConfig::default()
        };
        Ring::create(ns.name(), "r", &config).expect("create ring r")
    }

    /// The word of consumer entry `index`, as `Ring::info` reads it.
    fn word_of(ring: &Ring, index: u32) -> u64 {
        ring.info()
            .consumers
            .into_iter()
            .find(|c| c.index == index)
            .expect("the consumer's entry")
            .word
    }

    /// Whether `act` moved the word of `ring`'s consumer wake line, with its waiter count
    /// raised around it as a parker raises it.
    fn watch_wake<R>(ring: &Ring, act: impl FnOnce() -> R) -> (R, bool) {
        let line = &ring.seg.lines().consumer_wake.value;
        let before = line.word.load(Ordering::Relaxed);
        let raised = park::on(line).raise();
        let r = act();
        let woke = line.word.load(Ordering::Relaxed) != before;
        park::on(line).lower(raised);
        (r, woke)
    }

    /// A change of a consumer entry that lets a downstream act (a required consumer
    /// released: passed; a durable one freed, by its unsubscribe or by `Ring::free_consumer`:
    /// lost) wakes the consumers parked on the ring;
    /// so does a takeover that moves the entry ahead to the head; a detach, which still holds
    /// its downstreams (RELEASED for an optional one), does not, nor does an anonymous
    /// consumer's. Each step raises the waiter count as a parker does and checks whether the
    /// wake word moved.
    #[test]
    fn a_release_or_an_unsubscribe_wakes_parked_consumers() {
        let ns = shmring_testkit::Namespace::concurrent("consumer-downstream-wake");
        let ring = small_ring(&ns);
        let wakes = |act: &mut dyn FnMut()| watch_wake(&ring, act).1;
        let a = ring
            .consumer(ConsumerOptions::durable("a"))
            .expect("attach a");
        let index = a.index();
        let mut a = Some(a);
        assert!(
            !wakes(&mut || drop(a.take())),
            "a durable consumer's detach (it still holds its downstreams) wakes nobody"
        );
        let word = word_of(&ring, index);
        assert!(wakes(&mut || assert!(ring.release_consumer(index, word))));
        let b = ring
            .consumer(ConsumerOptions::durable("b"))
            .expect("attach b");
        let mut b = Some(b);
        assert!(wakes(&mut || b.take().expect("b").unsubscribe()));
        let o = ring
            .consumer(ConsumerOptions::durable("o").optional())
            .expect("attach o");
        let mut o = Some(o);
        assert!(
            !wakes(&mut || drop(o.take())),
            "an optional durable consumer's detach (RELEASED, still holding) wakes nobody"
        );
        // Taken over by a required consumer, an entry that did not gate as one starts at the
        // head: its downstreams may deliver what it held them at, as after a commit.
        let mut p = ring.producer().expect("producer");
        for i in 0..3u64 {
            p.publish(&i.to_le_bytes()).expect("publish");
        }
        let mut taken = None;
        assert!(wakes(&mut || {
            taken = Some(
                ring.consumer(ConsumerOptions::durable("o"))
                    .expect("take o over as required"),
            );
        }));
        assert_eq!(taken.as_ref().map(|t| t.next), Some(3));
        assert_eq!(taken.as_ref().map(|t| t.stats().dropped_behind), Some(3));
        // Detached as required (it holds its downstreams), then taken over as optional: the
        // position kept, nothing for a downstream to do, nobody woken.
        assert!(!wakes(&mut || drop(taken.take())));
        p.publish(b"3").expect("publish");
        let mut kept = None;
        assert!(!wakes(&mut || {
            kept = Some(
                ring.consumer(ConsumerOptions::durable("o").optional())
                    .expect("take o over as optional"),
            );
        }));
        assert_eq!(kept.as_ref().map(|t| t.next), Some(3));
        // A detached durable consumer freed as the broker frees one (`Ring::free_consumer`):
        // its downstreams find it lost.
        let f = ring
            .consumer(ConsumerOptions::durable("f"))
            .expect("attach f");
        let f_index = f.index();
        drop(f);
        let word = word_of(&ring, f_index);
        assert!(wakes(&mut || assert!(ring.free_consumer(f_index, word))));
        let c = ring
            .consumer(ConsumerOptions::anonymous())
            .expect("attach an anonymous consumer");
        let mut c = Some(c);
        assert!(
            !wakes(&mut || drop(c.take())),
            "an anonymous consumer, which no consumer can run after, wakes nobody as it goes"
        );
    }

    /// Two processes creating one durable name at once: the later ACTIVE CAS sees the
    /// earlier entry and frees its own. A consumer after that name may have resolved the
    /// entry being freed in between; parked, it is woken to find it lost (as after any
    /// durable entry's free), not left to its 50 ms net. The race is set up by hand: an
    /// entry holding the name already, and the fresh attach's duplicate check after it.
    #[test]
    fn a_durable_attach_giving_way_to_a_duplicate_name_wakes_parked_consumers() {
        let ns = shmring_testkit::Namespace::concurrent("consumer-duplicate-wake");
        let ring = small_ring(&ns);
        let _x = ring
            .consumer(ConsumerOptions::durable("x"))
            .expect("attach x");
        let words = attach::pack_name("x").expect("a valid name");
        let flags = consumer_flags::REQUIRED | consumer_flags::DURABLE;
        let (found, woke) = watch_wake(&ring, || {
            Consumer::fresh(
                &ring.seg,
                Some(&words),
                flags,
                &ConsumerOptions::durable("x"),
                &[0; shmring_layout::MAX_UPSTREAM],
                None,
                std::time::Instant::now() + crate::lifecycle::LIFECYCLE_WAIT,
            )
        });
        assert!(
            matches!(found, Ok(attach::Found::Retry)),
            "the second entry of the name gives way"
        );
        assert_eq!(
            ring.info().consumers.len(),
            1,
            "the entry that gave way is free again"
        );
        assert!(woke, "freeing it woke nobody");
    }

    /// A member delivering part of a claim it adopted commits the adopted entry's `next`,
    /// which a consumer after the group reads (`group::finished`): that commit wakes parked
    /// consumers, as the member's commit of its own claim does. Here the claim is neither
    /// finished nor given back in that poll (a batch cap of 1 leaves its second event for
    /// the next poll), so the commit is the only change.
    #[test]
    fn a_member_delivering_an_adopted_claim_wakes_parked_consumers() {
        let ns = shmring_testkit::Namespace::concurrent("consumer-adopted-wake");
        let ring = small_ring(&ns);
        // `a` claims sequence 0 as it joins (and creates the group); with four events
        // published it handles 0 and claims 1 and 2; `b` joins and claims 3; `a` leaves,
        // its entry holding 1 and 2 for a live member to adopt.
        let mut a = ring
            .consumer(ConsumerOptions::worker("w").batch_cap(2))
            .expect("a joins");
        let mut p = ring.producer().expect("producer");
        for i in 0..4u64 {
            p.publish(&i.to_le_bytes()).expect("publish");
        }
        assert_eq!(a.poll_once(|_| {}).expect("a polls"), 1);
        let mut b = ring
            .consumer(ConsumerOptions::worker("w").batch_cap(1))
            .expect("b joins");
        drop(a);
        // `b` delivers its own event, then adopts the left claim on one of its idle polls
        // (once per 1024) and delivers its first event.
        let mut got = Vec::new();
        let mut woke = false;
        for _ in 0..4096 {
            let (n, moved) = watch_wake(&ring, || {
                b.poll_once(|ev| got.push(ev.sequence())).expect("poll b")
            });
            woke = moved;
            if n > 0 && got.contains(&1) {
                break;
            }
        }
        assert_eq!(
            got,
            vec![3, 1],
            "b delivered its own event, then the claim a left"
        );
        assert!(woke, "the adopted claim's commit woke nobody");
    }
}
