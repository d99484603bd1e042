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

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Instant;

use shmring_layout::stamp::{self, Stamp};
use shmring_layout::{
    consumer_flags, consumer_state, owned_word, ConsumerEntry, NAME_LEN, NEXT_UNSET,
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
    required: bool,
    batch_cap: usize,
    wait: WaitStrategy,
}

impl ConsumerOptions {
    /// An anonymous required consumer: starts at the head, its entry is freed on drop.
    pub fn anonymous() -> Self {
        Self {
            name: None,
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

    /// Make it optional: it gates producers only within the ring's slack, and may be lapped
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
    _not_sync: PhantomData<Cell<()>>,
}

fn pack_name(name: &str) -> Result<[u64; NAME_LEN / 8], AttachError> {
    if name.is_empty() || name.len() > NAME_LEN || name.contains('\0') {
        return Err(AttachError::BadName(name.to_owned()));
    }
    let mut bytes = [0u8; NAME_LEN];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    let mut words = [0u64; NAME_LEN / 8];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_ne_bytes(b);
    }
    Ok(words)
}

/// The name stored in an entry (lossy for corrupt bytes).
pub(crate) fn entry_name(e: &ConsumerEntry) -> String {
    let mut bytes = Vec::with_capacity(NAME_LEN);
    for w in &e.cold.name {
        bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn name_is(e: &ConsumerEntry, words: &[u64; NAME_LEN / 8]) -> bool {
    e.cold
        .name
        .iter()
        .zip(words)
        .all(|(a, b)| a.load(Ordering::Relaxed) == *b)
}

impl Ring {
    /// Attach a consumer.
    pub fn consumer(&self, options: ConsumerOptions) -> Result<Consumer, AttachError> {
        Consumer::attach(self.seg.clone(), options)
    }
}

enum Found {
    /// Attached to entry `index`, starting at `next`, holding it with `word`.
    Attached { index: u32, next: u64, word: u64 },
    /// Lost a race; scan again.
    Retry,
}

impl Consumer {
    fn attach(seg: Arc<Segment>, opts: ConsumerOptions) -> Result<Self, AttachError> {
        crate::lifecycle::attachable(&seg)?;
        let words = opts.name.as_deref().map(pack_name).transpose()?;
        let flags = if opts.required {
            consumer_flags::REQUIRED
        } else {
            0
        } | if words.is_some() {
            consumer_flags::DURABLE
        } else {
            0
        };
        let mut dropped = 0;
        let (entry, next, word) = loop {
            let found = match &words {
                Some(w) => match Self::resume(&seg, w, flags, &opts)? {
                    Some((f, lost)) => {
                        dropped = lost;
                        f
                    }
                    None => Self::fresh(&seg, Some(w), flags, &opts)?,
                },
                None => Self::fresh(&seg, None, flags, &opts)?,
            };
            match found {
                Found::Attached { index, next, word } => break (index, next, word),
                Found::Retry => std::thread::yield_now(),
            }
        };
        let geo = seg.geometry();
        let mode = fence::mode();
        // Relaxed: a display value; the max keeps the weaker mode once any process uses it.
        seg.header()
            .fence_mode
            .fetch_max(mode as u32, Ordering::Relaxed);
        let mut c = Consumer {
            wait: opts.wait,
            idle_since: None,
            registered: fence::registered(),
            entry,
            word,
            next,
            required: opts.required,
            durable: words.is_some(),
            batch_cap: (opts.batch_cap as u64).clamp(1, geo.capacity),
            max_payload: geo.max_payload(),
            idler: Idler::new(opts.wait),
            failed: false,
            scratch: [Vec::new(), Vec::new()],
            stats: ConsumerStats::default(),
            seg,
            _not_sync: PhantomData,
        };
        c.load_stats();
        if dropped > 0 {
            c.stats.dropped_behind = c.stats.dropped_behind.wrapping_add(dropped);
            c.store_stats();
        }
        Ok(c)
    }

    /// The holder's details, written after the CAS that made this process the holder and
    /// published by its next CAS.
    fn fill_cold(e: &ConsumerEntry, opts: &ConsumerOptions) {
        let me = process::current();
        e.cold.start_time.store(me.start_time, Ordering::Relaxed);
        e.cold
            .wait_kind
            .store(opts.wait.kind_code(), Ordering::Relaxed);
        e.cold
            .wait_param
            .store(opts.wait.param_ns(), Ordering::Relaxed);
        e.cold.parked.store(0, Ordering::Relaxed);
        e.cold.attaches.fetch_add(1, Ordering::Relaxed);
    }

    /// Take over the durable entry named `words`, if there is one. Returns the outcome and
    /// the events lost while it did not gate as a required consumer.
    fn resume(
        seg: &Segment,
        words: &[u64; NAME_LEN / 8],
        flags: u32,
        opts: &ConsumerOptions,
    ) -> Result<Option<(Found, u64)>, AttachError> {
        let name = opts.name.as_deref();
        let geo = seg.geometry();
        let me = process::current().pid;
        for i in 0..geo.max_consumers {
            let Some(e) = seg.consumer(i) else { break };
            // Acquire: the name, flags and start time were written before the word was
            // published.
            let seen = e.hot.word.load(Ordering::Acquire);
            let state = owned_word::state(seen);
            if matches!(state, consumer_state::FREE | consumer_state::CLAIMED)
                || e.hot.flags.load(Ordering::Relaxed) & consumer_flags::DURABLE == 0
                || !name_is(e, words)
            {
                continue;
            }
            let start_time = e.cold.start_time.load(Ordering::Relaxed);
            match table::consumer::holder(&table::Os, seen, start_time) {
                Holder::Open => {}
                Holder::Free => continue,
                Holder::Held(pid) => {
                    return Err(AttachError::NameInUse {
                        name: name.unwrap_or_default().to_owned(),
                        pid,
                    })
                }
            }
            // Its holder is gone or gave it up, so nobody writes these until the CAS below
            // (which fails if the word moved).
            let old_flags = e.hot.flags.load(Ordering::Relaxed);
            // Acquire: pairs with the last holder's Release commit.
            let old_next = e.hot.next.load(Ordering::Acquire);
            let head = seg.position();
            let gated = table::consumer::gated_required(state, old_flags, old_next, head);
            let Some(mine) = table::consumer::take_over(&e.hot.word, seen, me, gated) else {
                return Ok(Some((Found::Retry, 0)));
            };
            // A required consumer keeps its position only if it gated there as one: what was
            // published meanwhile is otherwise not protected, so it starts at the head (read
            // after its ACTIVE CAS, as a fresh attach does) and counts the gap. An optional
            // one keeps any sane position: it checks every slot's stamp.
            let required = flags & consumer_flags::REQUIRED != 0;
            let keep = if required { gated } else { old_next <= head };
            if !keep {
                // Relaxed: published by the CAS to ACTIVE. Never a stale position under an
                // ACTIVE word, even if this process dies before it stores the head.
                e.hot.next.store(NEXT_UNSET, Ordering::Relaxed);
            }
            Self::fill_cold(e, opts);
            // Relaxed: published by the SeqCst CAS to ACTIVE below.
            e.hot.flags.store(flags, Ordering::Relaxed);
            let Ok(word) = table::consumer::set(&e.hot.word, mine, consumer_state::ACTIVE) else {
                // Freed under this process, which cannot happen while it runs: look again.
                return Ok(Some((Found::Retry, 0)));
            };
            if keep {
                let found = Found::Attached {
                    index: i,
                    next: old_next,
                    word,
                };
                return Ok(Some((found, 0)));
            }
            // Read after the SeqCst ACTIVE CAS: the attach protocol (see `gating`).
            let head = seg.position();
            let lost = head.saturating_sub(old_next);
            // Release: pairs with the producers' Acquire scan.
            e.hot.next.store(head, Ordering::Release);
            let found = Found::Attached {
                index: i,
                next: head,
                word,
            };
            return Ok(Some((found, lost)));
        }
        Ok(None)
    }

    /// Attach to a free entry, starting at the head.
    fn fresh(
        seg: &Segment,
        words: Option<&[u64; NAME_LEN / 8]>,
        flags: u32,
        opts: &ConsumerOptions,
    ) -> Result<Found, AttachError> {
        let geo = seg.geometry();
        let me = process::current().pid;
        let mut taken = None;
        for i in 0..geo.max_consumers {
            let Some(e) = seg.consumer(i) else { break };
            // Relaxed: only picks a candidate; the CAS decides.
            let seen = e.hot.word.load(Ordering::Relaxed);
            if let Some(mine) = table::consumer::take_free(&e.hot.word, seen, me) {
                taken = Some((i, e, mine));
                break;
            }
        }
        let Some((i, e, mine)) = taken else {
            return Err(AttachError::TableFull {
                what: "consumer",
                max: geo.max_consumers,
            });
        };
        let zero = [0u64; NAME_LEN / 8];
        for (w, v) in e.cold.name.iter().zip(words.unwrap_or(&zero)) {
            w.store(*v, Ordering::Relaxed);
        }
        Self::fill_cold(e, opts);
        let c = &e.cold.counters;
        for ctr in [
            &c.delivered,
            &c.batches,
            &c.skipped,
            &c.dropped_behind,
            &c.clamped,
            &c.wakeups,
            &c.net_wakeups,
            &c.failures,
        ] {
            ctr.store(0, Ordering::Relaxed);
        }
        e.hot.flags.store(flags, Ordering::Relaxed);
        // No position yet: an entry whose process dies before it stores its start never
        // holds producers at a stale one.
        e.hot.next.store(NEXT_UNSET, Ordering::Relaxed);
        // SeqCst CAS, then SeqCst load of the line's position: the attach protocol (see
        // `gating`). Every field above is published by this CAS.
        let Ok(word) = table::consumer::set(&e.hot.word, mine, consumer_state::ACTIVE) else {
            // Freed under this process, which cannot happen while it runs: look again.
            return Ok(Found::Retry);
        };
        let start = seg.position();
        // Release: pairs with the producers' Acquire scan; moving forward only loosens the gate.
        e.hot.next.store(start, Ordering::Release);

        if let Some(w) = words {
            // Two processes creating the same new durable name at once: the later of the two
            // ACTIVE CASes always sees the earlier one here, so at most one keeps its entry.
            let dup = (0..geo.max_consumers).any(|j| {
                j != i
                    && seg.consumer(j).is_some_and(|o| {
                        let st = o.hot.state(Ordering::SeqCst);
                        // The same test `resume` uses to find a durable entry, so that a
                        // retry always finds what made this attach give way.
                        consumer_state::gates(st)
                            && o.hot.flags.load(Ordering::Relaxed) & consumer_flags::DURABLE != 0
                            && name_is(o, w)
                    })
            });
            if dup {
                // From this word, or the broker's release of it.
                if !table::consumer::free(&e.hot.word, word, consumer_state::FREE) {
                    let released = table::consumer::released(word);
                    let _ = table::consumer::free(&e.hot.word, released, consumer_state::FREE);
                }
                return Ok(Found::Retry);
            }
        }
        Ok(Found::Attached {
            index: i,
            next: start,
            word,
        })
    }

    fn entry(&self) -> &ConsumerEntry {
        self.seg
            .consumer(self.entry)
            .unwrap_or_else(|| unreachable!("consumer entry index checked at attach"))
    }

    fn load_stats(&mut self) {
        let c = &self.entry().cold.counters;
        self.stats = ConsumerStats {
            delivered: c.delivered.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            dropped_behind: c.dropped_behind.load(Ordering::Relaxed),
            clamped: c.clamped.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            wakeups: c.wakeups.load(Ordering::Relaxed),
            late_wakeups: 0,
            net_wakeups: c.net_wakeups.load(Ordering::Relaxed),
        };
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

    /// Whether an event (or a lap) is waiting: the last look before parking.
    pub fn has_pending(&self) -> bool {
        if self.nothing_claimed() {
            return false;
        }
        let stamp = self
            .seg
            .slot(self.next)
            .header
            .stamp
            .load(Ordering::Acquire);
        stamp::reached(stamp, self.next)
    }

    /// Whether no producer has even claimed this consumer's next sequence: a look at the
    /// claim line instead of the slot line, so that a consumer that has caught up does not
    /// pull the slot line away from the producer while it writes the slot. Sound for the
    /// last look before parking too: a producer's claim is ordered before its stamp, so a
    /// look that misses the claim also misses the stamp, and the fence pair of the park
    /// protocol covers both.
    #[inline(always)]
    fn nothing_claimed(&self) -> bool {
        // Relaxed: a hint; the Acquire stamp load decides. CLAIM_CLOSED set reads as far
        // ahead, so a closed multi-producer line always looks at the slot.
        self.seg.lines().claim.value.load(Ordering::Relaxed) <= self.next
    }

    /// Deliver the contiguous published run from this consumer's position, up to the batch
    /// cap, then commit the position once. Returns the number of events handed to the
    /// handler (0: nothing was published; tombstones are skipped and counted, not handed).
    pub fn poll_once<F>(&mut self, mut handler: F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>),
    {
        if self.failed {
            return Err(PollError::Failed);
        }
        if self.nothing_claimed() {
            return self.idle_checks(false);
        }
        // Relaxed: a hint on this consumer's own line; `idle_checks` decides. A required
        // consumer reads in place only while it holds its entry as ACTIVE: released by the
        // broker, it first gates again from the head.
        if self.required && self.entry().hot.word.load(Ordering::Relaxed) != self.word {
            return self.idle_checks(false);
        }
        let start = self.next;
        let mut n = 0u64;
        let mut lapped = false;
        let mut repaired = false;
        while n < self.batch_cap {
            let seq = start + n;
            // Acquire: SYNC POINT with the producer's Release stamp store; the payload, len
            // and flags of every slot in the run are visible after this.
            let stamp = self.seg.slot(seq).header.stamp.load(Ordering::Acquire);
            if stamp == seq {
                n += 1;
            } else {
                match stamp::read(stamp, seq) {
                    Stamp::Lapped => lapped = true,
                    Stamp::Repaired => repaired = n == 0,
                    Stamp::Published | Stamp::Pending => {}
                }
                break;
            }
        }
        if repaired {
            self.skip_repaired();
            return self.poll_once(handler);
        }
        if n == 0 {
            return self.idle_checks(lapped);
        }
        if self.required {
            self.deliver_in_place(start, n, &mut handler)
        } else {
            self.deliver_copied(start, n, &mut handler)
        }
    }

    /// Skip the repaired sequences (see `table::tombstone`) from this consumer's position:
    /// they hold no event. Counted as skipped, like a producer's tombstone.
    #[cold]
    fn skip_repaired(&mut self) {
        let mut next = self.next;
        // Acquire: as in `poll_once`.
        while stamp::read(
            self.seg.slot(next).header.stamp.load(Ordering::Acquire),
            next,
        ) == Stamp::Repaired
        {
            next += 1;
        }
        let skipped = next - self.next;
        self.commit(next, 0, skipped, 0);
    }

    /// Nothing to deliver: handle a lap, a release by the broker, a lost entry, a deleted
    /// ring.
    #[cold]
    fn idle_checks(&mut self, lapped: bool) -> Result<usize, PollError> {
        // Acquire: pairs with the broker's SeqCst release CAS.
        let word = self.entry().hot.word.load(Ordering::Acquire);
        if word != self.word && word != table::consumer::released(self.word) {
            self.failed = true;
            return Err(PollError::EntryLost);
        }
        if lapped || word != self.word {
            self.jump_to_head();
        }
        if is_deleted(&self.seg) {
            return Err(PollError::Deleted);
        }
        Ok(0)
    }

    /// Lapped (or released): skip to the head and count the gap.
    fn jump_to_head(&mut self) {
        let released = table::consumer::released(self.word);
        // Acquire: pairs with the broker's SeqCst release CAS.
        if self.entry().hot.word.load(Ordering::Acquire) == released {
            // Gate again, by the attach protocol: SeqCst CAS, then read the head.
            if let Ok(word) =
                table::consumer::set(&self.entry().hot.word, released, consumer_state::ACTIVE)
            {
                self.word = word;
            }
        }
        let head = self.seg.position();
        if head > self.next {
            self.stats.dropped_behind = self.stats.dropped_behind.wrapping_add(head - self.next);
            self.next = head;
            // Release: pairs with the producers' Acquire scan.
            self.entry().hot.next.store(head, Ordering::Release);
            self.store_stats();
        }
    }

    pub(crate) fn commit(&mut self, next: u64, delivered: u64, skipped: u64, clamped: u64) {
        // The first commit registers this process for membarrier (see `fence`), before the
        // store a parked producer waits for: never between that store and the wake.
        let registered = fence::light_allowed(&mut self.registered);
        self.next = next;
        // Release: SYNC POINT with the Acquire load of `next` in the producers' gate scan;
        // this consumer's reads of every slot below `next` happen-before their reuse.
        self.entry().hot.next.store(next, Ordering::Release);
        // A producer may be parked waiting for this room.
        park::notify(
            &self.seg.lines().producer_wake.value,
            self.seg.header(),
            registered,
        );
        // Wrapping: the counters were loaded from shared memory, which may hold anything.
        let s = &mut self.stats;
        s.delivered = s.delivered.wrapping_add(delivered);
        s.skipped = s.skipped.wrapping_add(skipped);
        s.clamped = s.clamped.wrapping_add(clamped);
        s.batches = s.batches.wrapping_add(u64::from(delivered > 0));
        self.store_stats();
    }

    fn fail(&mut self, at: u64, delivered: u64, skipped: u64, clamped: u64) -> PollError {
        self.commit(at, delivered, skipped, clamped);
        self.failed = true;
        self.stats.failures = self.stats.failures.wrapping_add(1);
        self.store_stats();
        // The committed position and counters are visible with the state (the CAS is
        // SeqCst). From the word this handle holds: a broker's RELEASED is never overwritten.
        if let Ok(word) =
            table::consumer::set(&self.entry().hot.word, self.word, consumer_state::FAILED)
        {
            self.word = word;
        }
        PollError::HandlerPanicked { sequence: at }
    }

    fn deliver_in_place<F>(
        &mut self,
        start: u64,
        n: u64,
        handler: &mut F,
    ) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>),
    {
        let seg = &*self.seg;
        let max = self.max_payload;
        let end = start + n;
        let last_event = (start..end)
            .rev()
            .find(|&s| seg.slot(s).header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE == 0);
        let (mut at, mut delivered, mut skipped, mut clamped) = (start, 0u64, 0u64, 0u64);
        let outcome = (|| {
            while at < end {
                let slot = seg.slot(at);
                // Relaxed: ordered by the Acquire stamp load in `poll_once`.
                if slot.header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE != 0 {
                    skipped += 1;
                    at += 1;
                    continue;
                }
                let mut len = slot.header.len.load(Ordering::Relaxed) as usize;
                if len > max {
                    len = max;
                    clamped += 1;
                }
                // SAFETY: the stamp equalled `at` (Acquire) and this required consumer has
                // not committed past `at`, so producers cannot reach this slot again until
                // after the handler returns.
                let bytes = unsafe { slot.payload(len) };
                call(
                    handler,
                    Event {
                        seq: at,
                        bytes,
                        end_of_batch: Some(at) == last_event,
                    },
                )?;
                delivered += 1;
                at += 1;
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => {
                self.commit(end, delivered, skipped, clamped);
                Ok(delivered as usize)
            }
            Err(HandlerPanic) => Err(self.fail(at, delivered, skipped, clamped)),
        }
    }

    fn deliver_copied<F>(&mut self, start: u64, n: u64, handler: &mut F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>),
    {
        let seg = &*self.seg;
        let max = self.max_payload;
        let end = start + n;
        let [buf_a, buf_b] = &mut self.scratch;
        let mut bufs = [buf_a, buf_b];
        let (mut at, mut delivered, mut skipped, mut clamped) = (start, 0u64, 0u64, 0u64);
        // The validated event not yet delivered: (sequence, scratch index).
        let mut pending: Option<(u64, usize)> = None;
        let mut cur = 0usize;
        let mut lapped = false;
        let outcome = (|| {
            while at < end {
                let slot = seg.slot(at);
                let flags = slot.header.flags.load(Ordering::Relaxed);
                let mut len = slot.header.len.load(Ordering::Relaxed) as usize;
                let was_clamped = len > max;
                if was_clamped {
                    len = max;
                }
                slot.copy_racy(len, bufs[cur]);
                // Acquire fence: pairs with the producer's Release fence after its WRITING
                // stamp; if the copy saw any byte of a newer write, the stamp read below
                // sees that write's WRITING stamp (seqlock).
                fence(Ordering::Acquire);
                if slot.header.stamp.load(Ordering::Relaxed) != at {
                    lapped = true;
                    break;
                }
                clamped += u64::from(was_clamped);
                if flags & SLOT_FLAG_TOMBSTONE != 0 {
                    skipped += 1;
                    at += 1;
                    continue;
                }
                if let Some((seq, b)) = pending {
                    call(
                        handler,
                        Event {
                            seq,
                            bytes: bufs[b].as_slice(),
                            end_of_batch: false,
                        },
                    )?;
                    delivered += 1;
                }
                pending = Some((at, cur));
                cur ^= 1;
                at += 1;
            }
            if let Some((seq, b)) = pending {
                call(
                    handler,
                    Event {
                        seq,
                        bytes: bufs[b].as_slice(),
                        end_of_batch: true,
                    },
                )?;
                delivered += 1;
                pending = None;
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => {
                self.commit(at, delivered, skipped, clamped);
                if lapped {
                    self.jump_to_head();
                }
                Ok(delivered as usize)
            }
            // The panicking event is `pending`'s: resume there.
            Err(HandlerPanic) => {
                let failed_at = pending.map_or(at, |(seq, _)| seq);
                Err(self.fail(failed_at, delivered, skipped, clamped))
            }
        }
    }

    /// Poll until `stop` returns true or the ring is closed and drained, waiting between
    /// empty polls with this consumer's wait strategy. `stop` is checked after every batch
    /// and every idle step (a park lasts at most the 50 ms net, or the `TimeoutBlocking`
    /// timeout).
    pub fn run<F, S>(&mut self, mut handler: F, mut stop: S) -> Result<RunExit, PollError>
    where
        F: FnMut(Event<'_>),
        S: FnMut() -> bool,
    {
        loop {
            if stop() {
                return Ok(RunExit::Stopped);
            }
            let before = self.next;
            self.poll_once(&mut handler)?;
            if self.next != before {
                self.idler.reset();
                self.idle_since = None;
                continue;
            }
            if self.idle_step()? == Some(WaitOutcome::Closed) {
                return Ok(RunExit::Closed);
            }
        }
    }

    /// Wait, with this consumer's strategy, until an event is waiting, the ring is closed
    /// and drained, or (`TimeoutBlocking` only) the timeout passes.
    pub fn wait(&mut self) -> Result<WaitOutcome, PollError> {
        loop {
            if let Some(outcome) = self.idle_step()? {
                if outcome != WaitOutcome::Ready {
                    return Ok(outcome);
                }
            }
            if self.has_pending() {
                self.idler.reset();
                self.idle_since = None;
                return Ok(WaitOutcome::Ready);
            }
        }
    }

    fn closed_and_drained(&self) -> bool {
        self.seg
            .line()
            .closed_at()
            .is_some_and(|stop| self.next >= stop)
    }

    /// One idle step of the wait strategy. `Some` when it can say how waiting ends.
    fn idle_step(&mut self) -> Result<Option<WaitOutcome>, PollError> {
        if self.failed {
            return Err(PollError::Failed);
        }
        if self.has_pending() {
            return Ok(Some(WaitOutcome::Ready));
        }
        if self.closed_and_drained() {
            if is_deleted(&self.seg) {
                return Err(PollError::Deleted);
            }
            return Ok(Some(WaitOutcome::Closed));
        }
        let timeout = match self.wait {
            WaitStrategy::TimeoutBlocking { timeout } => {
                let since = *self.idle_since.get_or_insert_with(Instant::now);
                let left = timeout.saturating_sub(since.elapsed());
                if left.is_zero() {
                    self.idle_since = None;
                    return Ok(Some(WaitOutcome::TimedOut));
                }
                Some(left)
            }
            _ => None,
        };
        match self.idler.next() {
            Step::Spin => std::hint::spin_loop(),
            Step::Yield => std::thread::yield_now(),
            Step::Sleep(d) => std::thread::sleep(d),
            Step::Park => self.park(timeout.map_or(PARK_NET, |t| t.min(PARK_NET))),
        }
        Ok(None)
    }

    /// Park on the ring's consumer wake line (see `park` for the protocol).
    #[cold]
    fn park(&mut self, net: std::time::Duration) {
        let entry = self.entry();
        // Relaxed: display only.
        entry.cold.parked.store(1, Ordering::Relaxed);
        let parked = park::park(&self.seg.lines().consumer_wake.value, net, || {
            self.has_pending() || self.closed_and_drained()
        });
        self.entry().cold.parked.store(0, Ordering::Relaxed);
        if parked == Parked::Ready {
            return;
        }
        let mut n = WakeCounts::default();
        n.count(parked, || self.has_pending());
        let s = &mut self.stats;
        s.wakeups = s.wakeups.wrapping_add(n.woken);
        s.late_wakeups = s.late_wakeups.wrapping_add(n.late);
        s.net_wakeups = s.net_wakeups.wrapping_add(n.lost);
        self.store_stats();
    }

    /// Detach and free the entry, even a durable one: the name is forgotten and the
    /// consumer no longer gates anything.
    pub fn unsubscribe(mut self) {
        self.durable = false;
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
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

/// The handler panicked (see [`call`]).
struct HandlerPanic;

/// Hand `ev` to `handler`, catching a panic of the handler and of nothing else: a panic
/// in the delivery loop itself (a bug, or bytes it failed to guard against) propagates,
/// so tests see it rather than a `HandlerPanicked` they cannot tell apart.
#[inline(always)]
fn call<F: FnMut(Event<'_>)>(handler: &mut F, ev: Event<'_>) -> Result<(), HandlerPanic> {
    catch_unwind(AssertUnwindSafe(|| handler(ev))).map_err(|_| HandlerPanic)
}
