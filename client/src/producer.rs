//! Producers: claim a sequence, pass the wrap gate, write the slot, stamp it.
//!
//! Three forms, as in crossbeam's channels:
//!
//! - [`Producer::publish`] takes its sequence first (`fetch_add` on the claim counter), then
//!   waits at the wrap gate. It never gives its sequence back.
//! - [`Producer::try_publish`] and [`Producer::publish_timeout`] wait for room first and take
//!   their sequence last with a CAS, so a refusal or a timeout spends no sequence.
//! - [`Producer::claim`] returns a [`Claim`] guard for zero-copy writes; a guard dropped or
//!   unwound without `commit` publishes a tombstone, so no claimed sequence is a hole.
//!
//! ## Publishing a slot (the SYNC POINT with `Consumer::poll_once`)
//!
//! ```text
//! producer                                   consumer waiting for s
//! stamp = s | WRITING   (Relaxed)
//! fence(Release)        (seqlock: WRITING before payload, for optional readers)
//! payload, len, flags   (plain / Relaxed)
//! stamp = s             (Release) ---------> stamp == s (Acquire), then read payload
//! ```

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring_layout::{
    owned_word, FenceMode, ProducerEntry, ProducerMode, CLAIM_CLOSED, IN_FLIGHT_CLAIMING,
    SLOT_FLAG_TOMBSTONE, STAMP_WRITING,
};

use crate::lifecycle::{is_deleted, SegEnv};
use crate::line::Refused;
use crate::park::{self, Parked, WakeCounts, PARK_NET};
use crate::segment::{Segment, Slot};
use crate::table::{self, Holder};
use crate::wait::{producer_backoff, Step};
use crate::{fence, gating, process};
use crate::{AttachError, PublishError, Ring, TryPublishError};

/// A producer attached to one ring. `Send` (move it to another thread) but not `Sync`:
/// one thread publishes through it at a time.
pub struct Producer {
    seg: Arc<Segment>,
    entry: u32,
    /// A lower bound of the wrap gate (lowest `next` of the gating consumers).
    cached_gate: u64,
    capacity: u64,
    max_payload: usize,
    published: u64,
    refused: u64,
    tombstoned: u64,
    parks: u64,
    /// How its parks for room ended.
    wakes: WakeCounts,
    /// Whether this process has registered for membarrier, as far as this handle knows: its
    /// first publish registers it (see `fence`).
    registered: bool,
    /// A single-producer ring: the claim is a plain store of `next` (see `line`).
    single: bool,
    /// Single producer: the next sequence this producer claims (its position).
    next: u64,
    /// This process's pid, cached (named as the owner if it finishes a dead stopper's stop).
    pid: u32,
    /// The entry's word as this producer holds it (see `table`).
    word: u64,
    /// The sequence of a [`Claim`] that was neither committed nor dropped (leaked with
    /// `mem::forget`): tombstoned before the next claim or at detach, so it is no hole.
    open_claim: Option<u64>,
    _not_sync: PhantomData<Cell<()>>,
}

/// A producer's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProducerStats {
    /// Events published (tombstones excluded).
    pub published: u64,
    /// Publishes refused: full (try), timed out, closed, too large, bad batch.
    pub refused: u64,
    /// Claims dropped without commit, published as tombstones.
    pub tombstoned: u64,
    /// Times it parked waiting for room.
    pub parks: u64,
    /// Parks for room ended by a timeout although a consumer had moved the wake line (its
    /// wake came too late or never arrived), or by a `publish_timeout` deadline shorter
    /// than the net with room already there. Counted by this handle only (0 in
    /// `Ring::info`).
    pub late_wakeups: u64,
    /// Parks for room ended by the timed net with room already there and the wake line
    /// unmoved: a wake-up the protocol lost. Counted by this handle only (0 in
    /// `Ring::info`).
    pub net_wakeups: u64,
}

impl Ring {
    /// Attach a producer. On a single-producer ring a second live producer is refused.
    pub fn producer(&self) -> Result<Producer, AttachError> {
        Producer::attach(self.seg.clone())
    }
}

impl Producer {
    fn attach(seg: Arc<Segment>) -> Result<Self, AttachError> {
        crate::lifecycle::attachable(&seg)?;
        let geo = *seg.geometry();
        let me = process::current();
        let (entry, taken) = Self::take_entry(&seg, me.pid)?;
        let Some(e) = seg.producer(entry) else {
            unreachable!("producer entry index checked by take_entry")
        };
        // Relaxed: published by the Release CAS to ACTIVE below.
        e.start_time.store(me.start_time, Ordering::Relaxed);
        e.in_flight.store(0, Ordering::Relaxed);
        e.in_flight_len.store(0, Ordering::Relaxed);
        for c in [
            &e.published,
            &e.refused,
            &e.tombstoned,
            &e.repaired,
            &e.parks,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        let word = match table::producer::publish(&e.word, taken) {
            Ok(word) => word,
            // Freed under this process, which cannot happen while it runs.
            Err(_) => return Err(AttachError::Busy),
        };
        let mode = fence::mode();
        // Relaxed: the max keeps the weaker mode once any process uses it; producers read it
        // on every publish.
        seg.header()
            .fence_mode
            .fetch_max(mode as u32, Ordering::Relaxed);
        let single = geo.producer_mode == ProducerMode::Single;
        let next = if single {
            match Self::take_position(&seg) {
                Ok(p) => p,
                Err(err) => {
                    let _ = table::producer::free(&e.word, word);
                    return Err(err);
                }
            }
        } else {
            0
        };
        Ok(Producer {
            pid: me.pid,
            word,
            open_claim: None,
            single,
            next,
            registered: fence::registered(),
            parks: 0,
            wakes: WakeCounts::default(),
            cached_gate: gating::refresh(&seg, 0),
            capacity: geo.capacity,
            max_payload: geo.max_payload(),
            seg,
            entry,
            published: 0,
            refused: 0,
            tombstoned: 0,
            _not_sync: PhantomData,
        })
    }

    /// Take a producer entry: a free one, else one whose process died holding no claim (a
    /// held claim is the broker's to repair). A single producer's claim is the line's
    /// position, not in its entry: repair what a dead one left first (tombstones for its
    /// unstamped claims, which also frees the entry), then take the freed entry. Returns the
    /// index and the word taken (ATTACHING by `me`).
    fn take_entry(seg: &Arc<Segment>, me: u32) -> Result<(u32, u64), AttachError> {
        let geo = *seg.geometry();
        for i in 0..geo.max_producers {
            let Some(e) = seg.producer(i) else { break };
            // Relaxed: only picks a candidate; the CAS decides.
            let seen = e.word.load(Ordering::Relaxed);
            if let Some(taken) = table::producer::take_free(&e.word, seen, me) {
                return Ok((i, taken));
            }
        }
        for i in 0..geo.max_producers {
            let Some(e) = seg.producer(i) else { break };
            // Acquire: the start time and claim below were written before the word.
            let seen = e.word.load(Ordering::Acquire);
            let start_time = e.start_time.load(Ordering::Relaxed);
            if table::producer::holder(&table::Os, seen, start_time) != Holder::Open {
                continue;
            }
            let dead = owned_word::owner(seen);
            if geo.producer_mode == ProducerMode::Single {
                let ring = Ring { seg: seg.clone() };
                if ring.repair_dead_producer(i, seen).waiting > 0 {
                    return Err(AttachError::PredecessorClaim { pid: dead });
                }
                // Acquire: as above.
                let freed = e.word.load(Ordering::Acquire);
                if let Some(taken) = table::producer::take_free(&e.word, freed, me) {
                    return Ok((i, taken));
                }
                continue;
            }
            // Acquire: pairs with the dead producer's Release record of its claim.
            if e.in_flight.load(Ordering::Acquire) == 0 {
                if let Some(taken) = table::producer::take_over(&e.word, seen, me) {
                    return Ok((i, taken));
                }
            }
        }
        Err(match (geo.producer_mode, seg.producer(0)) {
            (ProducerMode::Single, Some(e)) => AttachError::SingleProducerTaken {
                pid: owned_word::owner(e.word.load(Ordering::Relaxed)),
            },
            _ => AttachError::TableFull {
                what: "producer",
                max: geo.max_producers,
            },
        })
    }

    /// Single producer: start at the line's position and make it the claim word (a dead
    /// predecessor may have left a refused or unfinished claim's position there; an
    /// unfinished claim's sequence is simply claimed again). Done while no stop or start is
    /// in progress, and again if one began meanwhile.
    fn take_position(seg: &Segment) -> Result<u64, AttachError> {
        let line = seg.line();
        let env = SegEnv::lifecycle(seg);
        let mut round = 0;
        loop {
            let life = line.life();
            if life.state == Some(shmring_layout::RingState::Stopping) {
                // The stop reads the position: let it finish (or finish a dead stopper's).
                if !crate::line::Env::alive(&env, life.owner) {
                    line.settle(&env).map_err(|_| AttachError::Busy)?;
                } else if !crate::line::Env::pause(&env, round) {
                    return Err(AttachError::Busy);
                }
                round += 1;
                continue;
            }
            // Stopped or Starting: the stop sequence, which also takes back a refused claim a
            // dead predecessor left (a starter waits for exactly that).
            let p = seg.position();
            // SeqCst, then a SeqCst fence before the re-check: a stop that begins after the
            // re-check reads this position (its own load follows its fence).
            line.claim.store(p, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if line.life().word == life.word {
                return Ok(p);
            }
        }
    }

    #[inline(always)]
    fn entry(&self) -> &ProducerEntry {
        // The index was bounds-checked at attach; the table cannot shrink.
        self.seg
            .producer(self.entry)
            .unwrap_or_else(|| unreachable!("producer entry index checked at attach"))
    }

    /// Largest payload of one event.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// This producer's counters.
    pub fn stats(&self) -> ProducerStats {
        ProducerStats {
            published: self.published,
            refused: self.refused,
            tombstoned: self.tombstoned,
            parks: self.parks,
            late_wakeups: self.wakes.late,
            net_wakeups: self.wakes.lost,
        }
    }

    fn refuse(&mut self) {
        self.refused += 1;
        // Relaxed: a counter only this producer writes.
        self.entry().refused.store(self.refused, Ordering::Relaxed);
    }

    fn deleted(&self) -> bool {
        is_deleted(&self.seg)
    }

    /// The producer's half of the fence pairs (park/wake, and the single-producer close):
    /// compiler-only once this process registered for membarrier and while every process of
    /// the ring uses it.
    #[inline(always)]
    fn light_fence(registered: bool, seg: &Segment) {
        // Relaxed: the mode only rises, at attach or before a close, ahead of the barrier it
        // stands for.
        let light = registered
            && seg.header().fence_mode.load(Ordering::Relaxed) == FenceMode::Membarrier as u32;
        fence::light(light);
    }

    /// Before a claim: the first one registers this process for membarrier (see `fence`),
    /// ahead of every store the fence pairs order, so that no parker or stopper ever waits
    /// for a waker that is inside the registration.
    #[inline(always)]
    fn before_claim(&mut self) {
        fence::light_allowed(&mut self.registered);
        if self.open_claim.is_some() {
            self.close_forgotten_claim();
        }
    }

    /// Single producer: claim `n` sequences at `self.next` (see `line`).
    #[inline(always)]
    fn claim_single(&mut self, n: u64) -> Result<u64, Refused> {
        let seq = self.next;
        let registered = self.registered;
        let seg = &*self.seg;
        seg.line()
            .claim_single(&SegEnv::producer(seg, self.pid), seq, n, || {
                Self::light_fence(registered, seg)
            })?;
        self.next = seq + n;
        Ok(seq)
    }

    /// Whether `last` (the last sequence of a claim) may be written now, refreshing the
    /// cached gate if needed.
    #[inline]
    fn has_room(&mut self, last: u64) -> bool {
        let need = (last + 1).saturating_sub(self.capacity);
        if self.cached_gate >= need {
            return true;
        }
        self.cached_gate = self.cached_gate.max(gating::refresh(&self.seg, need));
        self.cached_gate >= need
    }

    /// Take `n` sequences (`fetch_add`) and wait at the wrap gate for the last of them.
    #[inline(always)]
    fn claim_blocking(&mut self, n: u64) -> Result<u64, PublishError> {
        self.before_claim();
        if self.single {
            let c = match self.claim_single(n) {
                Ok(c) => c,
                Err(r) => {
                    self.refuse();
                    return Err(match r {
                        Refused::Closed => PublishError::Closed,
                        Refused::Deleted => PublishError::Deleted,
                    });
                }
            };
            let last = c + n - 1;
            if !self.has_room(last) && !self.wait_for_room(last, None) {
                return Err(PublishError::Deleted);
            }
            return Ok(c);
        }
        // Announce the claim before taking it: a producer that dies between the two leaves
        // a hole the broker can then find (see `Ring::repair_dead_producer`).
        // Relaxed: the locked RMW below orders it on x86_64, and the broker reads it only
        // after this process is dead.
        self.entry()
            .in_flight
            .store(IN_FLIGHT_CLAIMING, Ordering::Relaxed);
        let c = match self.seg.line().claim_multi(n) {
            Ok(c) => c,
            Err(r) => {
                self.clear_in_flight();
                // The close recorded the claim count before it set CLOSED; this increment of
                // the low bits is discarded when the ring starts again (see `line`).
                self.refuse();
                return Err(match r {
                    Refused::Closed => PublishError::Closed,
                    Refused::Deleted => PublishError::Deleted,
                });
            }
        };
        self.mark_in_flight(c, n);
        let last = c + n - 1;
        if !self.has_room(last) && !self.wait_for_room(last, None) {
            return Err(PublishError::Deleted);
        }
        Ok(c)
    }

    /// Wait until `last` may be written: spin, yield, then park on the producer wake line
    /// until a consumer commits. Returns false if the ring was deleted, or if `deadline`
    /// passed first.
    #[cold]
    fn wait_for_room(&mut self, last: u64, deadline: Option<Instant>) -> bool {
        let mut idle = producer_backoff();
        let need = (last + 1).saturating_sub(self.capacity);
        while !self.has_room(last) {
            if self.deleted() || deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            match idle.next() {
                Step::Spin => std::hint::spin_loop(),
                Step::Yield => std::thread::yield_now(),
                Step::Sleep(d) => std::thread::sleep(d),
                Step::Park => {
                    let net = deadline.map_or(PARK_NET, |d| {
                        d.saturating_duration_since(Instant::now()).min(PARK_NET)
                    });
                    let seg = &*self.seg;
                    let parked = park::park(&seg.lines().producer_wake.value, net, || {
                        gating::refresh(seg, need) >= need || self.deleted()
                    });
                    self.wakes
                        .count(parked, || gating::refresh(seg, need) >= need);
                    if parked != Parked::Ready {
                        self.parks += 1;
                        // Relaxed: a counter only this producer writes.
                        self.entry().parks.store(self.parks, Ordering::Relaxed);
                    }
                }
            }
        }
        true
    }

    /// Take `n` sequences with a CAS once there is room: a refusal spends no sequence.
    fn claim_if_room(&mut self, n: u64) -> Result<u64, TryPublishError> {
        self.before_claim();
        if self.single {
            if !self.has_room(self.next + n - 1) {
                return Err(if self.seg.line().is_closed() {
                    self.closed_error()
                } else {
                    TryPublishError::Full
                });
            }
            return self.claim_single(n).map_err(|r| match r {
                Refused::Closed => TryPublishError::Closed,
                Refused::Deleted => TryPublishError::Deleted,
            });
        }
        loop {
            // Acquire: pairs with other claims' RMWs (only the number is used).
            let c = self.seg.lines().claim.value.load(Ordering::Acquire);
            if c & CLAIM_CLOSED != 0 {
                return Err(self.closed_error());
            }
            if !self.has_room(c + n - 1) {
                return Err(TryPublishError::Full);
            }
            // SeqCst: as in `claim_blocking`.
            self.entry()
                .in_flight
                .store(IN_FLIGHT_CLAIMING, Ordering::Relaxed);
            if self
                .seg
                .lines()
                .claim
                .value
                .compare_exchange_weak(c, c + n, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                self.mark_in_flight(c, n);
                return Ok(c);
            }
            self.clear_in_flight();
            std::hint::spin_loop();
        }
    }

    #[cold]
    fn closed_error(&self) -> TryPublishError {
        if self.deleted() {
            TryPublishError::Deleted
        } else {
            TryPublishError::Closed
        }
    }

    #[inline]
    fn mark_in_flight(&self, first: u64, n: u64) {
        let e = self.entry();
        // Relaxed, then Release on `in_flight`: a repair that reads this claim (Acquire) also
        // reads its length, never the previous claim's (free on x86_64). Read only to
        // attribute a hole; the claim counter already says the sequences are taken.
        e.in_flight_len.store(n, Ordering::Relaxed);
        e.in_flight.store(first + 1, Ordering::Release);
    }

    #[inline]
    fn clear_in_flight(&self) {
        if self.single {
            // A single producer's claim is the line's position, not recorded in its entry.
            return;
        }
        // Release: a broker that reads 0 here (Acquire, in `Ring::repair_dead_producer`)
        // also sees this claim's stamps, so it never takes a published claim for a hole.
        self.entry().in_flight.store(0, Ordering::Release);
    }

    /// Mark `slot` as being written with `seq` (seqlock for optional readers).
    #[inline(always)]
    fn begin_write(slot: &Slot<'_>, seq: u64) {
        slot.header
            .stamp
            .store(seq | STAMP_WRITING, Ordering::Relaxed);
        // Release fence: an optional consumer that reads any payload byte written after this
        // point and then issues its Acquire fence also sees the WRITING stamp, and discards
        // its copy (`Consumer::poll_once`, optional path).
        fence(Ordering::Release);
    }

    #[inline(always)]
    fn fill(slot: &Slot<'_>, bytes: &[u8], flags: u32) {
        // SAFETY: this producer claimed the slot's sequence and passed the wrap gate for it,
        // so it owns the slot until it stamps it; the length was checked against the slot.
        unsafe { slot.write(bytes) };
        // Relaxed: published by the Release stamp store in `stamp`.
        slot.header.len.store(bytes.len() as u32, Ordering::Relaxed);
        slot.header.flags.store(flags, Ordering::Relaxed);
    }

    #[inline(always)]
    fn stamp(slot: &Slot<'_>, seq: u64) {
        // Release: SYNC POINT with the Acquire stamp load in `Consumer::poll_once`; the
        // payload, len and flags above happen-before the consumer's read of them.
        slot.header.stamp.store(seq, Ordering::Release);
    }

    /// Write and publish one whole event into the slot of `seq` (one slot lookup).
    #[inline(always)]
    fn write_slot(&self, seq: u64, bytes: &[u8], flags: u32) {
        let slot = self.seg.slot(seq);
        Self::begin_write(&slot, seq);
        Self::fill(&slot, bytes, flags);
        Self::stamp(&slot, seq);
    }

    /// Wake parked consumers, if any: one load when nobody parks.
    #[inline(always)]
    fn notify(&self) {
        park::notify(
            &self.seg.lines().consumer_wake.value,
            self.seg.header(),
            self.registered,
        );
    }

    #[inline]
    fn count_published(&mut self, n: u64) {
        self.published += n;
        // Relaxed: a counter only this producer writes.
        self.entry()
            .published
            .store(self.published, Ordering::Relaxed);
    }

    #[inline(always)]
    fn check_len(&mut self, len: usize) -> Result<(), (usize, usize)> {
        if len > self.max_payload {
            return Err(self.too_large(len));
        }
        Ok(())
    }

    #[cold]
    fn too_large(&mut self, len: usize) -> (usize, usize) {
        self.refuse();
        (len, self.max_payload)
    }

    /// Publish one event, waiting for room. Returns its sequence.
    #[inline]
    pub fn publish(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        self.publish_with::<true>(bytes)
    }

    /// `publish` without the parked-consumer check: the baseline the benchmarks compare the
    /// real publish against ("parking compiled out"). A consumer parked on this ring is
    /// not woken by it; never use it outside a benchmark.
    #[cfg(feature = "bench-internals")]
    #[inline]
    pub fn publish_without_wake_check(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        self.publish_with::<false>(bytes)
    }

    #[inline(always)]
    fn publish_with<const WAKE: bool>(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        self.check_len(bytes.len())
            .map_err(|(len, max)| PublishError::TooLarge { len, max })?;
        let seq = self.claim_blocking(1)?;
        self.write_slot(seq, bytes, 0);
        if WAKE {
            self.notify();
        }
        self.clear_in_flight();
        self.count_published(1);
        Ok(seq)
    }

    /// Publish one event if there is room now; never waits. A refusal spends no sequence.
    pub fn try_publish(&mut self, bytes: &[u8]) -> Result<u64, TryPublishError> {
        self.check_len(bytes.len())
            .map_err(|(len, max)| TryPublishError::TooLarge { len, max })?;
        match self.claim_if_room(1) {
            Ok(seq) => {
                self.write_slot(seq, bytes, 0);
                self.notify();
                self.clear_in_flight();
                self.count_published(1);
                Ok(seq)
            }
            Err(e) => {
                self.refuse();
                Err(e)
            }
        }
    }

    /// Publish one event, waiting for room at most `timeout`. A timeout spends no
    /// sequence: the next accepted publish takes the sequence this one would have had.
    pub fn publish_timeout(
        &mut self,
        bytes: &[u8],
        timeout: Duration,
    ) -> Result<u64, TryPublishError> {
        self.publish_deadline(bytes, Instant::now() + timeout)
    }

    /// As [`Producer::publish_timeout`], with a deadline on the monotonic clock.
    pub fn publish_deadline(
        &mut self,
        bytes: &[u8],
        deadline: Instant,
    ) -> Result<u64, TryPublishError> {
        self.check_len(bytes.len())
            .map_err(|(len, max)| TryPublishError::TooLarge { len, max })?;
        loop {
            match self.claim_if_room(1) {
                Ok(seq) => {
                    self.write_slot(seq, bytes, 0);
                    self.notify();
                    self.clear_in_flight();
                    self.count_published(1);
                    return Ok(seq);
                }
                Err(TryPublishError::Full) if Instant::now() < deadline => {
                    // Wait for room for the sequence a claim would take now; the claim is
                    // taken (by CAS) only once there is room, so no sequence is spent.
                    let next = if self.single {
                        self.next
                    } else {
                        self.seg.position()
                    };
                    self.wait_for_room(next, Some(deadline));
                }
                Err(TryPublishError::Full) => {
                    self.refuse();
                    return Err(TryPublishError::Timeout);
                }
                Err(e) => {
                    self.refuse();
                    return Err(e);
                }
            }
        }
    }

    /// Publish `events` in one claim of `events.len()` consecutive sequences, waiting for
    /// room. The count must be in `1..=capacity/2`; outside it, or if any event is too
    /// large, nothing is published. Every payload is written before any is stamped.
    /// Returns the first sequence.
    pub fn publish_batch<B: AsRef<[u8]>>(&mut self, events: &[B]) -> Result<u64, PublishError> {
        let max = (self.capacity / 2) as usize;
        if events.is_empty() || events.len() > max {
            self.refuse();
            return Err(PublishError::BatchSize {
                len: events.len(),
                max,
            });
        }
        for e in events {
            self.check_len(e.as_ref().len())
                .map_err(|(len, max)| PublishError::TooLarge { len, max })?;
        }
        let n = events.len() as u64;
        let first = self.claim_blocking(n)?;
        for (i, e) in events.iter().enumerate() {
            let seq = first + i as u64;
            let slot = self.seg.slot(seq);
            Self::begin_write(&slot, seq);
            Self::fill(&slot, e.as_ref(), 0);
        }
        for i in 0..n {
            Self::stamp(&self.seg.slot(first + i), first + i);
        }
        self.notify();
        self.clear_in_flight();
        self.count_published(n);
        Ok(first)
    }

    /// Publish a plain-old-data value as the event's bytes.
    pub fn publish_value<T: bytemuck::NoUninit>(&mut self, value: &T) -> Result<u64, PublishError> {
        self.publish(bytemuck::bytes_of(value))
    }

    /// Stamp the claimed sequence `seq` as an event of `len` bytes (`flags` 0) or a
    /// tombstone, and count it.
    fn finish_claim(&mut self, seq: u64, len: usize, flags: u32) {
        self.open_claim = None;
        let slot = self.seg.slot(seq);
        // Relaxed: published by the Release stamp store below.
        slot.header.len.store(len as u32, Ordering::Relaxed);
        slot.header.flags.store(flags, Ordering::Relaxed);
        Self::stamp(&slot, seq);
        self.notify();
        self.clear_in_flight();
        if flags == 0 {
            self.count_published(1);
        } else {
            self.tombstoned += 1;
            // Relaxed: a counter only this producer writes.
            self.entry()
                .tombstoned
                .store(self.tombstoned, Ordering::Relaxed);
        }
    }

    /// A [`Claim`] leaked without commit or drop still holds its sequence: publish it as a
    /// tombstone (this producer still owns the slot), so consumers do not wait at it.
    #[cold]
    fn close_forgotten_claim(&mut self) {
        if let Some(seq) = self.open_claim {
            tracing::warn!(
                ring = self.seg.name(),
                sequence = seq,
                "a claim was leaked without commit or drop; publishing it as a tombstone"
            );
            self.finish_claim(seq, 0, SLOT_FLAG_TOMBSTONE);
        }
    }

    /// Claim the next sequence for a zero-copy write, waiting for room. Write into
    /// [`Claim::payload_mut`] (or [`Claim::write`]), then [`Claim::commit`]. Dropped without
    /// commit (or unwound by a panic), the claim publishes a tombstone that consumers skip
    /// and count.
    pub fn claim(&mut self) -> Result<Claim<'_>, PublishError> {
        let seq = self.claim_blocking(1)?;
        Self::begin_write(&self.seg.slot(seq), seq);
        self.open_claim = Some(seq);
        Ok(Claim {
            producer: self,
            seq,
            len: 0,
            done: false,
        })
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.close_forgotten_claim();
        // From the word this producer holds: an entry that is no longer its own is left.
        let _ = table::producer::free(&self.entry().word, self.word);
    }
}

/// A claimed slot being written in place. Commit it, or drop it to publish a tombstone.
pub struct Claim<'p> {
    producer: &'p mut Producer,
    seq: u64,
    len: usize,
    done: bool,
}

impl Claim<'_> {
    /// The claimed sequence.
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// The whole payload area of the slot (its length is the ring's max payload). Set the
    /// event's length with [`Claim::set_len`].
    pub fn payload_mut(&mut self) -> &mut [u8] {
        // SAFETY: this claim owns the slot (claimed and past the wrap gate) until it is
        // stamped in `commit` or `drop`, and the borrow is tied to `&mut self`.
        unsafe { self.producer.seg.slot(self.seq).payload_mut() }
    }

    /// Set the event's length (bytes of the payload area that are the event).
    pub fn set_len(&mut self, len: usize) -> Result<(), PublishError> {
        let max = self.producer.max_payload;
        if len > max {
            return Err(PublishError::TooLarge { len, max });
        }
        self.len = len;
        Ok(())
    }

    /// Copy `bytes` in and set the length.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), PublishError> {
        self.set_len(bytes.len())?;
        self.payload_mut()[..bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    /// Write a plain-old-data value and set the length.
    pub fn write_value<T: bytemuck::NoUninit>(&mut self, value: &T) -> Result<(), PublishError> {
        self.write(bytemuck::bytes_of(value))
    }

    /// Publish the event. Returns its sequence.
    pub fn commit(mut self) -> u64 {
        self.finish(0);
        self.seq
    }

    fn finish(&mut self, flags: u32) {
        self.done = true;
        let len = if flags == 0 { self.len } else { 0 };
        self.producer.finish_claim(self.seq, len, flags);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.finish(SLOT_FLAG_TOMBSTONE);
        }
    }
}
