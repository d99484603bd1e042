//! The event protocol of a fixed-size ring (`RingConfig::event_size`): payload-only slots
//! under a published cursor, for single-producer rings of events of one size (or of sized
//! events, `RingConfig::max_event_size`).
//!
//! A stamped ring's slot carries a header (stamp, length, flags) that the producer writes
//! twice per event on the line the consumer reads, and every event takes at least one
//! 64-byte line. A fixed-size ring packs the payloads (eight 8-byte events to a line) and
//! says what is published with one word, the cursor, on a line of its own, as the LMAX
//! single-producer sequencer publishes its cursor. Since layout 13 the cursor is also the
//! sequence line's claim word (`line`): in the common case the producer writes its event
//! first, then makes the line's single-producer claim ((p1) to (p5)) on the cursor, so the
//! claim's one store both claims and publishes (ARCHITECTURE.md, "The store is the
//! publish"; `client/tests/loom_folded*.rs` model it and run this code).
//!
//! A hostile write is read as it is: a cursor moved by another process counts as
//! published (as on every ring); the producer refuses to go on from a cursor outside what
//! it can have published once it looks (`Producer::sound_position`).
//!
//! The words:
//!
//! - **the cursor** (`CursorLine::cursor`): the single producer's position. Stop and start
//!   run the line's transitions on it unchanged: a stop records the cursor it reads after
//!   its heavy fence; a start takes a refused claim's store back ((t3)). So a reader trusts
//!   it only as far as the lifecycle word read around it says ([`published`]).
//! - **pending** (`CursorLine::pending`): a claim whose events are written after it is
//!   claimed (a claim guard, a batch, any claim but the common case's) records its first
//!   sequence here before its claim, and ends it ([`PENDING_NONE`], Release) once its
//!   events are written ([`end_pending`]) or tombstoned ([`tombstone_pending`]). Readers
//!   deliver below it.
//! - **the write horizon** (`ClaimLine::value`, [`Words::horizon`]): no sequence at or past
//!   it has been written, and the cursor never lies past it. The producer raises it before
//!   it writes or claims past it: where it sets its common case's bound (to that bound, at
//!   most a quarter ring ahead and never past what the wrap gate passed), and before any
//!   other claim, once the wrap gate passed it. A copying (optional)
//!   reader checks it after its copy (seqlock: the producer's Release fence between the
//!   horizon and the payload, the reader's Acquire fence between its copy and the check):
//!   a write into the slot of `s` is a write of `s + k * capacity` (k >= 1), so a horizon
//!   at or below `s + capacity` says the copy is `s`'s. It is never taken back: an optional
//!   reader more than three quarters of a ring behind the producer may drop intact events.
//! - **tombstones** (`tombs`, one word per slot, and `CursorLine::tomb_end`): a sequence
//!   claimed and never filled (a claim guard dropped, a producer that died mid-claim) is
//!   marked `tombs[s % capacity] = s`, then `tomb_end` raised past it, then `pending`
//!   ended: a consumer checks the tomb word only below `tomb_end`.
//!
//! ```text
//! producer, common case (event s)          consumer ([`published`])
//! (p1) life Running? else general path     l1 = life                (Acquire)
//! payload of s              (plain)        c = cursor               (SeqCst)
//! fence(Release)                           p = pending              (SeqCst)
//! (p2) cursor = s + 1       (Relaxed)      l2 = life                (SeqCst)
//! (p3) light fence
//! (p4) life as (p1)? accepted; else (p5)   l1 != l2: nothing yet
//!                                          Running: up to min(c, p)
//! producer, any other claim s..e           settled closed: up to min(c, p, stop_seq)
//! pending = s; fence(Release)              Stopping: up to min(c - 1, p)
//! horizon >= e; fence(Release)
//! (p1)..(p5) on the cursor (cursor = e)
//! refused: pending = NONE (Release)
//! accepted: payloads; pending = NONE (Release)
//! ```
//!
//! If `l2` is the Running word `l1` was, a stop's (s3) reads `c` or later (the stopper's
//! heavy fence against the reader's two SeqCst loads, see [`published`]), so everything
//! below `c` is accepted. While the line is settled closed the cursor may hold an event the stop
//! refused, so the stop sequence bounds what is delivered. While a stop is in progress it
//! decides only the last claim (a later claim's (p1) refuses it with nothing stored), so
//! everything below that claim's first sequence is accepted: `pending`, or the cursor's
//! last step (a common case's one event; one already decided is merely counted later). A
//! consumer whose `l1` is a Running word that followed a start reads `c` after the start's
//! take-back.
//!
//! A dead producer's claim is repaired by [`repair_dead`] (behind
//! `Ring::repair_dead_producer`): its open `pending` claim becomes tombstones where the
//! line accepted it, and a refused store is taken back to the stop sequence.
//!
//! The code is generic over its words ([`Words`]) so that the loom models in
//! `client/tests/loom_folded*.rs` run this very code.

use std::sync::atomic::Ordering;

use shmring_layout::{lifecycle, RingState, PENDING_NONE};

use crate::line::{Env, Life, Line, NoWait, Word};

/// The words of a fixed-size ring the protocol reads and writes.
pub trait Words {
    /// The word type.
    type W: Word;
    /// The write horizon (the claim line's word on these rings).
    fn horizon(&self) -> &Self::W;
    /// The cursor: the single producer's claim word, and what it publishes.
    fn cursor(&self) -> &Self::W;
    /// The first sequence of a claim still being written, or [`PENDING_NONE`].
    fn pending(&self) -> &Self::W;
    /// Every tombstone lies below this.
    fn tomb_end(&self) -> &Self::W;
    /// The tomb word of `seq`'s slot.
    fn tomb(&self, seq: u64) -> &Self::W;
    /// The lifecycle word (`line`).
    fn lifecycle(&self) -> &Self::W;
    /// The stop sequence (`line`).
    fn stop_seq(&self) -> &Self::W;
    /// Slots in the ring.
    fn capacity(&self) -> u64;
    /// An atomic fence (`std`'s, or loom's in the model).
    fn fence(&self, order: Ordering);
    /// Between a reader's SeqCst cursor load and its SeqCst second look at the lifecycle
    /// word ([`published`]): nothing in the client (the two loads are in the SeqCst order in
    /// program order, which is all the argument there asks); a SeqCst fence in the loom
    /// models, which run SeqCst loads as Acquire.
    fn reader_fence(&self);
    /// The line these words make, its claim word the cursor.
    fn line(&self) -> Line<'_, Self::W> {
        Line {
            claim: self.cursor(),
            lifecycle: self.lifecycle(),
            stop_seq: self.stop_seq(),
            single: true,
            max_claim: (self.capacity() / 2).max(1),
            lone: &crate::line::NoLone,
        }
    }
}

/// The common case, after its event's payload and before its claim's store ((p2)).
#[inline(always)]
pub fn before_claim<R: Words>(r: &R) {
    // Release fence: a consumer whose Acquire cursor load reads the claim's Relaxed store
    // ((p2)) sees the payload written before.
    r.fence(Ordering::Release);
}

/// Any claim but the common case's, before the claim: record its first sequence `seq`.
#[inline]
pub fn record_pending<R: Words>(r: &R, seq: u64) {
    // Release: a consumer whose Acquire load of `pending` reads this sees what came
    // before it, the previous claim's writes and the store that ended it included.
    r.pending().store(seq, Ordering::Release);
    // Release fence: a consumer whose Acquire cursor load reads the claim's store sees
    // `pending` at `seq` (or the Release store that ends the claim).
    r.fence(Ordering::Release);
}

/// Raise the write horizon to `end` if it is below, before any write under it; then the
/// Release fence of the seqlock (see the module comment).
#[inline]
pub fn cover<R: Words>(r: &R, end: u64) {
    // Relaxed: only the producer (or the repair of a dead one) writes it; published to
    // copying readers by the fence below.
    if r.horizon().load(Ordering::Relaxed) < end {
        r.horizon().store(end, Ordering::Relaxed);
    }
    // Release fence: pairs with a copying reader's Acquire fence in `copy_held`.
    r.fence(Ordering::Release);
}

/// End the recorded claim: its events (written before this) are published, or a refused
/// claim's record is taken back.
#[inline]
pub fn end_pending<R: Words>(r: &R) {
    // Release: pairs with a consumer's Acquire load of `pending` in `published`.
    r.pending().store(PENDING_NONE, Ordering::Release);
}

/// Publish the recorded claim `seq..end` as tombstones: sequences claimed (and passed by
/// the wrap gate) that will not be filled. The holder is the producer (a claim guard
/// dropped) or the repair of a dead producer's claim.
pub fn tombstone_pending<R: Words>(r: &R, seq: u64, end: u64) {
    cover(r, end);
    for s in seq..end {
        // Relaxed: published by the Release store of `end_pending`.
        r.tomb(s).store(s, Ordering::Relaxed);
    }
    // Relaxed: published by the Release store of `end_pending`. Holes lie at the end of
    // what is published, so this only rises.
    if r.tomb_end().load(Ordering::Relaxed) < end {
        r.tomb_end().store(end, Ordering::Relaxed);
    }
    end_pending(r);
}

/// A consumer: how far it may deliver now, and the tombstone bound read with it; `None`
/// when the lifecycle word changed between the two looks, or holds no state (look again
/// later). See the module comment.
#[inline(always)]
pub fn published<R: Words>(r: &R) -> Option<(u64, u64)> {
    // Acquire: pairs with the Release CAS that published the word ((s4), (t4)); after a
    // start's Running, the cursor load below follows the start's take-back ((t3)).
    let l1 = r.lifecycle().load(Ordering::Acquire);
    // SeqCst (Acquire for what it reads: pairs with the producer's Release fence before its
    // claim's store, or with a start's take-back CAS (t3)), see `l2`.
    let c = r.cursor().load(Ordering::SeqCst);
    // SeqCst, after the cursor (Acquire for what it reads: pairs with the Release stores of
    // `pending`; a claim's record was stored before the Release fence ahead of its cursor
    // store, so a cursor that includes the claim comes with the record or the store that
    // ended it); SeqCst so that every word of the position is in the attach protocol's
    // order (`client/tests/loom_folded_guard.rs`).
    let end = c.min(r.pending().load(Ordering::SeqCst));
    // Relaxed: stored before the Release store of `pending` read above.
    let tomb_end = r.tomb_end().load(Ordering::Relaxed);
    r.reader_fence();
    // SeqCst: with the cursor's SeqCst load, in the SeqCst order in program order. Were a
    // stop's (s3) to read a cursor before `c` while this load read the word before the
    // stop's (s1): this load is coherence-ordered before (s1), which happens before the
    // stopper's heavy fence, so it precedes that fence in the SeqCst order; (s3), after the
    // fence, is coherence-ordered before the cursor load, so the fence precedes that load:
    // a cycle (`client/tests/loom_folded.rs`'s module comment). So a Running word read here
    // as `l1` was means the stop reads `c` or later.
    let l2 = r.lifecycle().load(Ordering::SeqCst);
    if l1 != l2 {
        return None;
    }
    // The common case in one compare of the state's bits (a consumer that keeps up polls
    // once per event); the other states out of line.
    if lifecycle::state(l2) == RingState::Running as u32 {
        return Some((end, tomb_end));
    }
    published_not_running(r, l2, c, end).map(|end| (end, tomb_end))
}

/// [`published`] under a lifecycle word `life` that is not Running (read twice alike), the
/// cursor `c` and its bound below `pending`, `end`.
#[cold]
#[inline(never)]
fn published_not_running<R: Words>(r: &R, life: u64, c: u64, end: u64) -> Option<u64> {
    match Life::of(life).state {
        // Closing: the stop decides only the last claim, which a refusal would take back
        // whole: everything below its first sequence (`pending`, or the cursor's last
        // step, a common case's one event) is accepted. A claim refused by this very stop
        // ends its record only after the stop settled, which the second look would see.
        Some(RingState::Stopping) => Some(c.saturating_sub(1).min(end)),
        // Settled closed: the stop sequence bounds what a refused store left in the cursor.
        Some(
            RingState::Stopped | RingState::Draining | RingState::Deleted | RingState::Starting,
        ) => settled_bound(r, life, end),
        // Running is the caller's; no state a single-producer line has: nothing counts.
        _ => None,
    }
}

/// The line's position on these rings ([`position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Decided: the position.
    Decided(u64),
    /// A stop (of `owner`) decides whether the last claim is accepted: the position is not
    /// below `below`, the cursor before that claim.
    Closing {
        /// A bound the position is not below.
        below: u64,
        /// The stopper's pid.
        owner: u32,
    },
}

/// The line's position on these rings, read as a consumer reads the cursor ([`published`],
/// the cursor SeqCst for the attach protocol, see `gating`): where the next claim goes,
/// which a consumer that attaches now starts at. Running: the cursor, claims still being
/// written (`pending`) included (accepted: a stop reads the cursor or later). Settled
/// closed: the stop sequence. Stopping: undecided, the stop's record decides whether the
/// last claim counts; [`Position::Closing`] gives a bound below it. Never waits.
pub fn position<R: Words>(r: &R) -> Position {
    let life = r.lifecycle();
    for _ in 0..3 {
        // Acquire: pairs with the Release CAS that published the word.
        let l1 = life.load(Ordering::Acquire);
        // SeqCst: the attach protocol's load of the head (see `gating`), and as in
        // `published`.
        let c = r.cursor().load(Ordering::SeqCst);
        // SeqCst: as in `published`.
        let p = r.pending().load(Ordering::SeqCst);
        r.reader_fence();
        // SeqCst: after the cursor, as the attach protocol's loads.
        if life.load(Ordering::SeqCst) != l1 {
            continue;
        }
        let life = Life::of(l1);
        match life.state {
            Some(RingState::Running) => return Position::Decided(c),
            Some(RingState::Stopping) => {
                return Position::Closing {
                    below: c.saturating_sub(1).min(p),
                    owner: life.owner,
                }
            }
            // Settled closed (or a word no ring writes, the line's "any other state"): the
            // stop sequence recorded before the word, unless the word moved meanwhile.
            _ => {
                if let Some(stop) = settled_bound(r, l1, u64::MAX) {
                    return Position::Decided(stop);
                }
            }
        }
    }
    // The word keeps changing: a bound no position since lies below, from a look after
    // those changes (a stop sequence only grows from one stop to the next). SeqCst,
    // Acquire: as above; Relaxed: a bound either way.
    let c = r.cursor().load(Ordering::SeqCst);
    let p = r.pending().load(Ordering::SeqCst);
    let stop = r.stop_seq().load(Ordering::Relaxed);
    Position::Closing {
        below: c.saturating_sub(1).min(p).min(stop),
        owner: Life::of(life.load(Ordering::Acquire)).owner,
    }
}

/// Where a consumer that attaches (or gates again) starts on these rings: [`position`],
/// looked at again while a stop is in progress. A dead stopper's stop is finished here (the
/// line's takeover, `Line::settle`, which never waits itself); a live one (or a dead one's
/// that cannot be finished from here: no barrier) is waited for as `env.pause` allows.
/// `Err(pid)`: the stop of `pid` still decides the position when `env.pause` gave up.
/// `Segment::start_position` runs it, and the loom models in `client/tests/loom_folded*.rs`.
pub fn start_position<R: Words, E: Env>(r: &R, env: &E) -> Result<u64, u32> {
    let mut round = 0u32;
    loop {
        match position(r) {
            Position::Decided(p) => return Ok(p),
            Position::Closing { owner, .. } => {
                // The next look decides once the stop is finished.
                let finished = !env.alive(owner) && r.line().settle(&NoWait(env)).is_ok();
                if !finished && !env.pause(round) {
                    return Err(owner);
                }
                round = round.saturating_add(1);
            }
        }
    }
}

/// The settled-closed part of [`published`]: `end` bounded by the stop sequence recorded
/// before `life` was published, read as a seqlock (a later stop rewrites it only after
/// changing the word).
#[inline]
fn settled_bound<R: Words>(r: &R, life: u64, end: u64) -> Option<u64> {
    // Relaxed: ordered after the Acquire load of the settled word.
    let stop = r.stop_seq().load(Ordering::Relaxed);
    // Acquire fence: a stop sequence a later stop recorded comes after that stop's heavy
    // fence, which follows its Stopping word: the look below then sees that word.
    r.fence(Ordering::Acquire);
    // Relaxed: ordered by the fence.
    (r.lifecycle().load(Ordering::Relaxed) == life).then_some(end.min(stop))
}

/// Whether the published `seq` is a tombstone (`tomb_end` from [`published`]).
#[inline(always)]
pub fn is_tombstone<R: Words>(r: &R, seq: u64, tomb_end: u64) -> bool {
    // Relaxed: ordered by the Acquire loads that published `seq`.
    seq < tomb_end && r.tomb(seq).load(Ordering::Relaxed) == seq
}

/// A copying reader, after it read `seq`'s tomb word and copied its payload: whether what it
/// read is `seq`'s, not a later lap's.
#[inline(always)]
pub fn copy_held<R: Words>(r: &R, seq: u64) -> bool {
    // Acquire fence: pairs with the producer's Release fence in `cover` (and in the
    // common case's arming): if the copy saw a byte of a later write, the horizon below
    // includes it.
    r.fence(Ordering::Acquire);
    // Relaxed: ordered by the fence above.
    !overwritten(r, seq, r.horizon().load(Ordering::Relaxed))
}

/// Whether `seq`'s slot holds, or is being written with, a later lap's event: a look at the
/// write horizon (`Segment::lapped` on these rings; an attach or a resume asks whether an
/// old position still has its slot, and gating holds producers from then on). While an
/// entry gates at `seq`, the producer's horizon stays at or below `seq + capacity`: it is
/// raised only to what the wrap gate passed (`Producer::arm_fixed`, and before any other
/// claim once the gate passed it).
#[inline]
pub fn lapped<R: Words>(r: &R, seq: u64) -> bool {
    // Acquire, with no store to pair with: the horizon is stored Relaxed, its Release fence
    // after the store (`cover`), for `copy_held`'s Acquire fence.
    overwritten(r, seq, r.horizon().load(Ordering::Acquire))
}

/// Whether a later lap's write may have reached `seq`'s slot, given a horizon read before
/// this call: the horizon is past `seq + capacity`.
#[inline]
pub fn overwritten<R: Words>(r: &R, seq: u64, horizon: u64) -> bool {
    horizon > seq.saturating_add(r.capacity())
}

/// What [`repair_dead`] did with a dead producer's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repaired {
    /// The claim is repaired: `tombstoned` sequences (perhaps none) published as
    /// tombstones, and a refused store taken back to the stop sequence.
    Done {
        /// Sequences published as tombstones.
        tombstoned: u64,
    },
    /// Nothing was written: try again later. `waiting` sequences wait for the wrap gate,
    /// or 1 while a stop or a start decides the last claim's fate.
    Wait {
        /// Sequences (or the one lifecycle change) waited for.
        waiting: u64,
    },
}

/// Repair what a dead single producer left (`Ring::repair_dead_producer`; the caller holds
/// its entry, REPAIRING, so no producer attaches meanwhile):
///
/// - a common-case publish that died before its cursor store wrote a slot and claimed
///   nothing: nothing to do. One that died after it left a claim the line decides as any
///   other (the stop's record, or accepted while the line runs): its event was written
///   before the store.
/// - a claim with `pending` recorded: accepted (the line runs, or its stop read it), the
///   sequences from `pending` up to the cursor (the stop sequence while closed) become
///   tombstones, published by the Release store that ends `pending`; refused, the record
///   is ended with none.
/// - a refused store left in the cursor is taken back to the stop sequence (as a start's
///   (t3), with the same value).
///
/// ```text
/// fence(SeqCst)                  the dead producer's stores before a stop's (s3)
/// life                 (Acquire) Running: open; Stopped | Draining | Deleted: closed;
///                                Stopping | Starting: try later (the stop or start decides)
/// pend = pending       (Acquire)
/// c = cursor           (Acquire) after life: a start's take-back comes with its Running
/// end = c, or min(c, stop_seq) while closed
/// pend < end: wrap gate for end - 1; horizon >= end; tombs[pend..end]; tomb_end = end
/// pend set: pending = NONE (Release): publishes the tombstones
/// c > end: CAS cursor c -> end (SeqCst, as (t3))
/// ```
///
/// `gate_passed(need)`: whether every gating consumer is at or past `need`. The caller
/// wakes the consumers once something was published. `client/tests/loom_folded_repair.rs`
/// runs it.
pub fn repair_dead<R: Words>(r: &R, gate_passed: impl FnOnce(u64) -> bool) -> Repaired {
    // SeqCst fence: pairs with a stopper's heavy fence ((s2)). The dead producer may have
    // died between its cursor store ((p2)) and its own fence ((p3)); its death happens
    // before this fence (the caller saw it), so either this fence comes first and a
    // concurrent stop reads that store (and accepts it), or the stop's does and the
    // lifecycle load below reads Stopping (or later) and waits for the record.
    r.fence(Ordering::SeqCst);
    let line = r.line();
    // Acquire (`life`): pairs with the Release CAS that settled the state, so a closed
    // state comes with its stop sequence, and a Running that a start left with the start's
    // take-back of a refused store ((t3)).
    let closed = match line.life().state {
        Some(RingState::Running) => false,
        Some(RingState::Stopped | RingState::Draining | RingState::Deleted) => true,
        _ => return Repaired::Wait { waiting: 1 },
    };
    // Acquire: pairs with the Release stores of `pending` (the dead producer's own reach
    // this process through its death, which the caller saw; an earlier repair's through
    // this load).
    let pend = r.pending().load(Ordering::Acquire);
    // Acquire, after the lifecycle word: a take-back published with a Running read above
    // is seen (a repair that read the cursor first would tombstone the next run's first
    // sequence: `loom_folded_repair`'s control).
    let c = r.cursor().load(Ordering::Acquire);
    let end = if closed {
        // Relaxed: recorded before the settled state read above (Acquire).
        c.min(r.stop_seq().load(Ordering::Relaxed))
    } else {
        c
    };
    // A claim takes at most `max_claim` sequences: a record further below `end` was
    // written by another process, and what lies past the bound was never claimed.
    let from = pend.min(end).max(end.saturating_sub(line.max_claim));
    let mut tombstoned = 0;
    if from < end {
        // The wrap gate for the last sequence: every gating consumer past its previous
        // lap, so no reader entitled to those slots' tomb words still reads them.
        if !gate_passed(end.saturating_sub(r.capacity())) {
            return Repaired::Wait {
                waiting: end - from,
            };
        }
        tombstone_pending(r, from, end);
        tombstoned = end - from;
    } else if pend != PENDING_NONE {
        end_pending(r);
    }
    if c > end {
        // A refused store, never a publish: the next run starts at the stop sequence. One
        // CAS from the value read above: only a start (which takes it back to the same
        // value, (t3)) or a new producer (held off by the caller's REPAIRING entry) writes
        // the word meanwhile. SeqCst: as (t3). Relaxed on failure: the value is not used.
        let _ = r
            .cursor()
            .compare_exchange(c, end, Ordering::SeqCst, Ordering::Relaxed);
    }
    Repaired::Done { tombstoned }
}
