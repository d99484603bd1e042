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
//!   [`Producer::claim_batch`] does the same for `n` consecutive slots ([`ClaimBatch`]).
//!
//! [`Producer::publisher`] lends a loop of publishes a [`Publisher`] that holds the
//! producer's position by value, so that on a fixed-size ring it stays in a register
//! instead of being loaded from the claim word per event (where `publish` keeps it in its
//! common case, see [`Producer::position`]); each of its publishes is a `publish`.
//!
//! Batches (`publish_batch`, `try_publish_batch`, `publish_batch_timeout`, a committed
//! `ClaimBatch`) take one claim of consecutive sequences, write every payload before any
//! stamp, stamp in sequence order and wake consumers once. The try and timeout forms are
//! all or nothing: a refusal spends no sequence. [`Producer::remaining_capacity`] is a
//! snapshot of the room a claim would find now.
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
//!
//! The parts: this file (the handle, its counters and its detach), `attach` (taking an
//! entry and, on a single-producer ring, the position), `publish` (claims, the wrap gate,
//! the slot write and every `publish` form), `claim` (the in-place claim guards,
//! one slot or a batch), `publisher` (the position lent to a loop).

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring_layout::stamp::Lap;
use shmring_layout::{
    owned_word, FenceMode, ProducerEntry, ProducerMode, CLAIM_CLOSED, MAX_SEQUENCE,
    SLOT_FLAG_TOMBSTONE, STAMP_WRITING,
};

use crate::lifecycle::{is_deleted, SegEnv};
use crate::line::{self, Fast, Refused};
use crate::park::{self, Parked, WakeCounts, PARK_NET};
use crate::segment::{Attached, Segment, Slot};
use crate::table::{self, Holder};
use crate::wait::producer_backoff;
use crate::{fence, fixed, gating, process};
use crate::{AttachError, PublishError, Ring, TryPublishError};

/// A producer attached to one ring. `Send` (move it to another thread) but not `Sync`:
/// one thread publishes through it at a time.
pub struct Producer {
    /// The segment, with the slot geometry and this producer's entry resolved at attach.
    seg: Attached<ProducerEntry>,
    /// A lower bound of the wrap gate (lowest `next` of the gating consumers).
    cached_gate: u64,
    capacity: u64,
    max_payload: usize,
    published: u64,
    refused: u64,
    tombstoned: u64,
    parks: u64,
    /// Waits for room (see [`ProducerStats::room_waits`]).
    room_waits: u64,
    /// Waits for a slot's previous lap (see [`ProducerStats::lap_waits`]); counted where the
    /// handle is borrowed shared, as the slot write is.
    lap_waits: Cell<u64>,
    /// How its parks for room ended.
    wakes: WakeCounts,
    /// Whether this process has registered for membarrier, as far as this handle knows: its
    /// first publish registers it (see `fence`).
    registered: bool,
    /// A single-producer ring: the claim is a plain store of `next` (see `line`).
    single: bool,
    /// Multi-producer ring: this producer has the line to itself (a lone producer, see
    /// `line`, "Lone claims"): its claims are plain stores of `next` to its entry's `lone`,
    /// compared against `seen`, until a lifecycle change ends them.
    lone: bool,
    /// Multi-producer ring: claims through the counter before this producer looks again
    /// whether it is alone and may take the line to itself (see `Producer::try_lone`).
    lone_retry: u32,
    /// Single or lone producer: the next sequence this producer claims (its position), unless the
    /// fixed-size common case is armed (`fast_end` set): the claim word holds it then, and
    /// this is stale (see [`Producer::position`]). Stale too while a [`Publisher`] holds it
    /// (see `publisher`): only that publisher and the publishes it hands to the handle use
    /// the handle then, and it writes its position back first.
    next: u64,
    /// A ring published by the cursor (see `fixed`): fixed-size events, or sized ones
    /// (`sized`).
    fixed: bool,
    /// A ring of sized events: a fixed-size ring's protocol over slots that start with a
    /// length word, events of any length up to `max_payload` (see `Events::write_sized`).
    sized: bool,
    /// A fixed-size ring: the position this producer attached at. Its events are
    /// `position() - base - tombstoned`; it stores no per-event counter (see
    /// `ProducerEntry::base`).
    base: u64,
    /// This process's pid, cached (named as the owner if it finishes a dead stopper's stop).
    pid: u32,
    /// The entry's word as this producer holds it (see `table`).
    word: u64,
    /// The lifecycle word this producer's last claim found Running (see `line`); a lone
    /// producer's, the word its lone claims began with.
    seen: line::SeenRunning,
    /// A fixed-size ring: `publish` takes its common case (see `publish_fixed`) for a
    /// sequence below this, which says there is room under the cached gate, the process is
    /// registered for membarrier and no claim guard is open (the common case also reads the
    /// ring's fence mode, which must be membarrier). 0 (never) until the general path sets
    /// it, and again from any other claim (see [`Producer::hold_position`]) or a common
    /// case that was not accepted at once. While it is set, the claim word is the position.
    fast_end: u64,
    /// Multi-producer ring: this producer's own run of claims, the sequences from its first
    /// claim after another producer's to the end of its last one. Each of
    /// them was written before the next claim was taken (a claim guard is committed,
    /// dropped or, leaked, tombstoned first), so a sequence whose previous lap lies in the
    /// run takes its slot without looking at it (see [`Producer::begin_write`]).
    run: std::ops::Range<u64>,
    /// Multi-producer ring: `(from, to)`, sequences whose events a required consumer's
    /// reads vouch for (`gating::witness`; the looks that go on from or overlap the range
    /// held extend it): a sequence of the range is written, and a claim whose previous lap
    /// lies there takes its slot without looking at it, as one in `run` does (see
    /// [`Producer::begin_write`]).
    vouched: Cell<(u64, u64)>,
    /// Multi-producer ring: `(from, to)`, the claim a bounded form (`try_publish`,
    /// `publish_timeout` and their batch forms) took after finding every slot of it free of
    /// its previous lap (`laps_free`). A slot of it that reads held at its write was written
    /// over by another process (a free slot's stamp only moves on): the write goes over it
    /// rather than wait, for ever, for a late write that never comes.
    laps_checked: Cell<(u64, u64)>,
    /// Multi-producer ring: the sequence from which a claim outside `run` and `vouched`
    /// looks for a witness again (after a look that found none, or one that vouched for
    /// less than a sixteenth of the ring past its lap: not for a sixteenth of the ring).
    witness_retry: Cell<u64>,
    /// Multi-producer ring: the consumer entry that vouched last, looked at first.
    witness_hint: Cell<u32>,
    /// Slots taken by compare-and-swap (see [`ProducerStats::slot_takes`]).
    slot_takes: Cell<u64>,
    /// The sequences `(first, count)` of a [`Claim`] or [`ClaimBatch`] that was neither
    /// committed nor dropped (leaked with `mem::forget`): tombstoned before the next claim
    /// or at detach, so they are no hole.
    open_claim: Option<(u64, u64)>,
    _not_sync: PhantomData<Cell<()>>,
}

/// A producer's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProducerStats {
    /// Events published (tombstones excluded).
    pub published: u64,
    /// Publishes refused: full (try), timed out, closed, too large, bad batch.
    pub refused: u64,
    /// Claimed slots dropped without commit, published as tombstones.
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
    /// Waits for room: times a publish, batch or claim found the ring full (the slowest
    /// gating consumer a whole ring behind) and waited, however the wait ended. A batch
    /// waits once for all its events; a `publish_timeout` (or batch timeout) on a
    /// multi-producer ring whose freed room another producer took waits, and counts, again.
    /// Counted by this handle only (0 in `Ring::info`).
    pub room_waits: u64,
    /// Waits for a slot's previous lap (multi-producer rings): times a publish, batch or
    /// claim found the slot of a sequence it holds (or a bounded publish one it would take)
    /// still waiting for the lap before it, a claim no consumer gated, and waited, however
    /// the wait ended. Counted by this handle only (0 in `Ring::info`).
    pub lap_waits: u64,
    /// Slots taken with a compare-and-swap (multi-producer rings): publishes whose slot's
    /// previous lap lay outside this producer's own run of claims and outside what a
    /// required consumer had read, so the slot was checked and taken with a locked
    /// instruction (the first lap's slots, and claims taken before any consumer read that
    /// far). Counted by this handle only (0 in `Ring::info`).
    pub slot_takes: u64,
}

mod attach;
mod claim;
mod publish;
mod publisher;

pub use claim::{Claim, ClaimBatch};
pub use publisher::Publisher;

impl Producer {
    #[inline(always)]
    fn entry(&self) -> &ProducerEntry {
        self.seg.entry()
    }

    /// Largest payload of one event (on a fixed-size ring: the size of every event).
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// A single producer's position: the next sequence it claims.
    ///
    /// A fixed-size ring's common-case publish (`publish_fixed`) does not store it to the
    /// handle: its claim store (`line`'s (p2)) already wrote it to the cursor, and a loop
    /// of publishes would otherwise pay a second store per event. While that case is armed
    /// (`fast_end` set, only right after an accepted claim, when the cursor is `next`),
    /// every accepted claim keeps the two equal, and nobody else writes the cursor: a start
    /// takes back only a refused claim ((t3)), and a refusal or an undecided claim disarms
    /// the case first (`publish_fixed_at`); an attach or a repair writes it only for a
    /// producer that is gone.
    #[inline(always)]
    fn position(&self) -> u64 {
        if self.fast_end != 0 {
            // Relaxed: this producer's own last store to the word (see above).
            self.seg.lines().cursor.cursor.load(Ordering::Relaxed)
        } else {
            self.next
        }
    }

    /// Disarm the fixed-size common case: the handle holds the position again. Every claim
    /// but the common case's starts here (`before_claim`), so `next` is current in all of
    /// them; the general path arms the case again after its claim.
    #[inline(always)]
    fn hold_position(&mut self) {
        if self.fast_end != 0 {
            self.next = self.sound_position();
            self.fast_end = 0;
        }
    }

    /// [`Producer::position`], checked while the common case is armed: the cursor then lies
    /// between where the case was armed (`next`) and its bound (`fast_end`), since only
    /// this producer's accepted publishes move it. Anything else was written by another
    /// process: the producer keeps `MAX_SEQUENCE` as its position, and every later claim is
    /// refused as `CorruptPosition` (the segment is beyond repair: no sequence it would
    /// publish at is known to be unused).
    fn sound_position(&self) -> u64 {
        let p = self.position();
        if self.fast_end == 0 || (self.next..=self.fast_end).contains(&p) {
            p
        } else {
            self.moved_cursor(p)
        }
    }

    /// The cursor, which holds this producer's position while the common case is armed,
    /// says `word`, outside what this producer can have published: another process wrote
    /// it (see `sound_position`).
    #[cold]
    fn moved_cursor(&self, word: u64) -> u64 {
        tracing::warn!(
            ring = self.seg.name(),
            cursor = word,
            armed_at = self.next,
            "the ring's cursor was moved by another process; this producer refuses to publish"
        );
        MAX_SEQUENCE
    }

    /// Events published by this handle (tombstones excluded).
    fn published(&self) -> u64 {
        if self.fixed {
            // An open claim guard's sequences are not published yet.
            let open = self.open_claim.map_or(0, |(_, n)| n);
            let position = self.sound_position();
            if position >= MAX_SEQUENCE {
                // The cursor was moved by another process (`sound_position`): no count.
                return 0;
            }
            position
                .saturating_sub(self.base)
                .saturating_sub(self.tombstoned)
                .saturating_sub(open)
        } else {
            self.published
        }
    }

    /// This producer's counters.
    pub fn stats(&self) -> ProducerStats {
        ProducerStats {
            published: self.published(),
            refused: self.refused,
            tombstoned: self.tombstoned,
            parks: self.parks,
            late_wakeups: self.wakes.late,
            net_wakeups: self.wakes.lost,
            room_waits: self.room_waits,
            lap_waits: self.lap_waits.get(),
            slot_takes: self.slot_takes.get(),
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.close_forgotten_claim();
        if self.lone {
            // The next claim through the counter follows this producer's last one.
            self.end_lone();
        }
        if self.fixed {
            // Relaxed: a counter only this producer writes; the entry's state change
            // below publishes it. Its readers use it once the entry is no longer ACTIVE.
            self.entry()
                .published
                .store(self.published(), Ordering::Relaxed);
        }
        // From the word this producer holds: an entry that is no longer its own is left.
        let _ = table::producer::free(&self.entry().word, self.word);
    }
}
