//! The event protocol of a fixed-size ring (`RingConfig::event_size`): payload-only slots
//! under a published cursor, for single-producer rings of events of one size.
//!
//! A stamped ring's slot carries a header (stamp, length, flags) that the producer writes
//! twice per event on the line the consumer reads, and every event takes at least one
//! 64-byte line. A fixed-size ring packs the payloads (eight 8-byte events to a line) and
//! says what is published with one word, the cursor, stored on a line of its own after the
//! payloads, as the LMAX single-producer sequencer publishes its cursor. What the stamp did
//! there is done here by:
//!
//! - **the cursor** (`CursorLine::cursor`, on a line of its own): every sequence below it
//!   is published or a tombstone. Stored Release by the single producer after its payloads
//!   (or by a repair); loaded Acquire by consumers.
//! - **the claim** (`ClaimLine::value`): the producer's position, stored before the payloads
//!   (the single-producer claim of `line`, whose stop handshake is unchanged) and only once
//!   the wrap gate passed it: on this ring a claim says its slots may be being written, so a
//!   producer waiting for room has not claimed yet. A copying (optional) reader checks it
//!   after its copy: a write into the slot of `s` is a write of `s + k * capacity` (k >= 1),
//!   whose claim, `>= s + capacity + 1`, was stored before it (seqlock: the producer's
//!   Release fence between the claim and the payload, the reader's Acquire fence between the
//!   copy and the check). A refused claim writes no payload and is taken back (`claim = s`)
//!   by the next start, so the claim never drops below a write. Until then it stays in the
//!   word, past the stop sequence: while the line is settled closed, nothing at or past
//!   `stop_seq` has been written, so the check bounds the claim by `stop_seq`, both read
//!   after the copy's Acquire fence (`overwritten`). A copy that saw a byte of the next
//!   run's write came after that run's start (the producer acquired its Running, in (p1)
//!   or in (p5)'s look at the settled word, before its Release fence), so the lifecycle
//!   word it reads is that Running or a later stop, whose `stop_seq` lies past the write.
//!   A gating reader never looks at the claim.
//! - **tombstones** (`tombs`, one word per slot, apart from the payloads; and
//!   `CursorLine::tomb_end`): a sequence claimed and never filled (a claim guard dropped, a
//!   producer that died mid-publish) is marked `tombs[s % capacity] = s`, then `tomb_end`
//!   raised past it, then the cursor: a consumer checks the tomb word only below `tomb_end`,
//!   so a ring without tombstones pays one compare per run. Only the holder of the
//!   sequences writes their tomb words, after the wrap gate passed them (every gating
//!   consumer is past `s - capacity`), so a reader that is entitled to `s - capacity`'s word
//!   has read it; a copying reader's claim check covers the rest.
//!
//! ```text
//! producer (gate passed, then claim s..e accepted) consumer
//! fence(Release)            (seqlock)             c = cursor        (Acquire) ---+
//! payloads of s..e          (plain)               t = tomb_end      (Relaxed)    |
//! cursor = e                (Release) --SYNC----> events s < c: a tombstone if   |
//!                                                  s < t and tombs[s] == s        |
//! repair / dropped claim of s..e:                 required: read in place         |
//! fence(Release)                                  optional: copy, then            |
//! tombs[s..e] = s..e        (Relaxed)               fence(Acquire)                |
//! tomb_end = e              (Relaxed)               claim <= s + capacity? held   |
//! cursor = e                (Release) --SYNC--------------------------------------+
//! ```
//!
//! A dead producer's claim is never claimed again ([`repair_dead`], behind
//! `Ring::repair_dead_producer`): it may have written part of it, and a copying reader's
//! check needs the claim never to drop below a write. The repair publishes `cursor..claim`
//! as tombstones, once the wrap gate passed the last of them. While the line is settled
//! closed only the part below the stop sequence was accepted; the rest was refused before any
//! write and is taken back to the stop sequence with one CAS, which races the start that
//! takes a refused claim back itself ((t3) in `line`): both write the same value, and
//! nobody else writes the word meanwhile (the repairer holds the dead producer's entry, so no
//! producer attaches).
//!
//! ```text
//! repair of a dead producer's claim (the caller holds its entry, REPAIRING)
//! fence(SeqCst)                    orders the dead producer's claim store before a stop
//! life = lifecycle       (Acquire) Running: open; Stopped | Draining | Deleted: closed;
//!                                  Stopping | Starting: try later (the stop or start decides)
//! claim                  (Acquire) after life: a Running set by a start comes after (t3)
//! cursor                 (Acquire)
//! end = claim, or min(claim, stop_seq) while closed (stop_seq Relaxed, after life)
//! end > cursor: wrap gate for end - 1? else try later; tombstone(cursor..end)
//! claim > max(end, cursor): CAS claim -> max(end, cursor) (SeqCst, as (t3))
//! ```
//!
//! The code is generic over its words ([`Words`]) so that the loom models in
//! `client/tests/loom_fixed.rs` and `client/tests/loom_repair_fixed.rs` run this very code.

use std::sync::atomic::Ordering;

use shmring_layout::RingState;

use crate::line::{self, Line, Word};

/// The words of a fixed-size ring the protocol reads and writes.
pub trait Words {
    /// The word type.
    type W: Word;
    /// The producer's claim (its position, stored before its payloads).
    fn claim(&self) -> &Self::W;
    /// The published cursor.
    fn cursor(&self) -> &Self::W;
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
}

/// The producer, after its claim was accepted and the wrap gate passed it: before the first
/// payload byte of the claim.
#[inline(always)]
pub fn begin_write<R: Words>(r: &R) {
    // Release fence: a copying reader that sees any payload byte written after this point
    // and then issues its Acquire fence (`copy_held`) also sees the claim stored before it.
    r.fence(Ordering::Release);
}

/// The producer, after the payloads of every sequence below `end`: publish them.
#[inline(always)]
pub fn publish<R: Words>(r: &R, end: u64) {
    // Release: SYNC POINT with the consumers' Acquire load in `published`; the payloads
    // (and tomb words) below `end` happen-before their reads.
    r.cursor().store(end, Ordering::Release);
}

/// Publish `seq..end` as tombstones: sequences their holder claimed (and passed the wrap
/// gate for) and will not fill. The holder is the producer (a claim guard dropped) or a
/// repair of a dead producer's claim. Every sequence below `seq` is published already.
pub fn tombstone<R: Words>(r: &R, seq: u64, end: u64) {
    // Release fence: a copying reader that sees a tomb word written below has its claim
    // check see the claim of these sequences (see `copy_held`).
    r.fence(Ordering::Release);
    for s in seq..end {
        // Relaxed: published by the Release cursor store below.
        r.tomb(s).store(s, Ordering::Relaxed);
    }
    // Relaxed: published by the Release cursor store below. Holes lie at the cursor, so
    // this only rises.
    r.tomb_end().store(end, Ordering::Relaxed);
    publish(r, end);
}

/// A consumer: the cursor (every sequence below it is published or a tombstone) and the
/// tombstone bound read with it.
#[inline(always)]
pub fn published<R: Words>(r: &R) -> (u64, u64) {
    // Acquire: SYNC POINT with the Release store in `publish`.
    let cursor = r.cursor().load(Ordering::Acquire);
    // Relaxed: stored before the cursor it was published with.
    let tomb_end = r.tomb_end().load(Ordering::Relaxed);
    (cursor, tomb_end)
}

/// Whether the published `seq` is a tombstone (`tomb_end` from [`published`]).
#[inline(always)]
pub fn is_tombstone<R: Words>(r: &R, seq: u64, tomb_end: u64) -> bool {
    // Relaxed: ordered by the Acquire cursor load that published `seq`.
    seq < tomb_end && r.tomb(seq).load(Ordering::Relaxed) == seq
}

/// A copying reader, after it read `seq`'s tomb word and copied its payload: whether what it
/// read is `seq`'s, not a later lap's.
#[inline(always)]
pub fn copy_held<R: Words>(r: &R, seq: u64) -> bool {
    // Acquire fence: pairs with the producer's Release fence in `begin_write` (and a
    // tombstone's): if the copy saw a byte of a later write, the claim below includes it,
    // and the lifecycle word `overwritten` reads is that write's run's or later.
    r.fence(Ordering::Acquire);
    // Relaxed: ordered by the fence above.
    !overwritten(r, seq, r.claim().load(Ordering::Relaxed))
}

/// Whether a later lap's write may have reached `seq`'s slot, given a claim read before
/// this call: the claim is past `seq + capacity`, and the line is not settled closed at or
/// below `seq + capacity` (a claim refused by a stop stays in the word until the next
/// start, and wrote nothing: see the module comment). Only a copying reader's check may
/// lean on the bound ([`copy_held`], or a look before a copy that it checks): without the
/// copy's fence pair, the claim read may be the next run's while the lifecycle word read
/// here is still the stop's.
#[inline]
pub fn overwritten<R: Words>(r: &R, seq: u64, claim: u64) -> bool {
    let bound = seq.saturating_add(r.capacity());
    // Only when the claim says so: the common case reads one word.
    claim > bound && line::closed_at(r.lifecycle(), r.stop_seq()).is_none_or(|stop| stop > bound)
}

/// What [`repair_dead`] did with a dead producer's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repaired {
    /// The claim is repaired: `tombstoned` sequences (perhaps none) published as
    /// tombstones, and a refused claim's position taken back to the stop sequence.
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

/// Repair the claim a dead single producer left (`Ring::repair_dead_producer`, see the
/// module comment): tombstone what it claimed and did not publish, `cursor..claim`, never
/// claimed again, since it may have written part of it. While the line is settled closed,
/// only the part below the stop sequence was accepted: the rest was refused before any write,
/// and the claim is taken back to the stop sequence instead. The caller holds the dead
/// producer's entry (REPAIRING), so no producer attaches (and writes the claim) meanwhile.
/// `gate_passed(need)`: whether every gating consumer is at or past `need`
/// (`gating::scan`). The caller wakes the consumers once tombstones were published.
pub fn repair_dead<R: Words>(r: &R, gate_passed: impl FnOnce(u64) -> bool) -> Repaired {
    let line = Line {
        claim: r.claim(),
        lifecycle: r.lifecycle(),
        stop_seq: r.stop_seq(),
        single: true,
        max_claim: r.capacity() / 2,
        lone: &crate::line::NoLone,
    };
    // SeqCst fence: pairs with a stopper's heavy fence ((s2) in `line`). The dead producer
    // may have died between its claim's store ((p2)) and its own fence ((p3)), so nothing of
    // its own orders that store before a concurrent stop's read of the position ((s3)). Its
    // death happens before this fence (the caller saw it); so either this fence comes first
    // in the fences' order and the stop reads the claim (and accepts it), or the stop's does
    // and the lifecycle load below reads Stopping (or later) and waits for the record. The
    // claim read below while Running is then one every later stop reads too. The same holds
    // against a start's take-back ((t2), (t3)): one that missed the store (its fence first)
    // is seen here as Starting or later, so the CAS below never takes back a claim a later
    // stop has read. (`loom_repair_fixed`'s producer that dies before its fence needs it
    // against a stop; against a start it is not modelled.)
    r.fence(Ordering::SeqCst);
    // Acquire (`life`): pairs with the Release CAS that settled the state, so a closed state
    // comes with its stop sequence, and a Running that a start left with the start's
    // take-back of a refused claim ((t3) in `line`).
    let closed = match line.life().state {
        Some(RingState::Running) => false,
        Some(RingState::Stopped | RingState::Draining | RingState::Deleted) => true,
        // A stop or start decides the last claim's fate (see `line`): try again later.
        _ => return Repaired::Wait { waiting: 1 },
    };
    // Read after the lifecycle word: a Running that a start published (read above) comes
    // with the start's take-back of a refused claim, so this never reads a refused claim as
    // a running line's (`loom_repair_fixed`'s control that reads the claim first tombstones
    // one). Acquire: pairs with the SeqCst CAS of a take-back (a start's, or an earlier
    // repair's) when it reads that; the dead producer's own store reaches this process
    // through its death, which the caller saw.
    let claim = r.claim().load(Ordering::Acquire);
    // Acquire (`published`): pairs with the Release cursor store of the producer's last
    // publish or an earlier repair's.
    let (cursor, _) = published(r);
    let end = if closed {
        // Relaxed: recorded before the settled state read above (Acquire).
        claim.min(r.stop_seq().load(Ordering::Relaxed))
    } else {
        claim
    };
    // A single producer claims at most `max_claim` past its cursor (one event on the
    // models' ring of one slot), and publishes before it claims again: a word that says
    // more is damaged. What lies past that bound was never written, so the repair
    // tombstones up to it and takes the word back there (below), in bounded steps.
    let end = end.min(cursor.saturating_add(line.max_claim.max(1)));
    let mut tombstoned = 0;
    if end > cursor {
        // The wrap gate for the last sequence: every gating consumer past its previous
        // lap, so no reader entitled to those slots' tomb words still reads them.
        if !gate_passed(end.saturating_sub(r.capacity())) {
            return Repaired::Wait {
                waiting: end - cursor,
            };
        }
        tombstone(r, cursor, end);
        tombstoned = end - cursor;
    }
    let to = end.max(cursor);
    if claim > to {
        // Refused, never written: the next run starts at the stop sequence. One CAS from
        // the claim read above: only a start (which takes a dead producer's refused claim
        // back to the stop sequence itself, (t3) in `line`) or a new producer (held off by
        // the caller's REPAIRING entry) writes it, so while it still holds that value the
        // line was not reopened and the stop sequence read with it stands. SeqCst: as the
        // start's CAS on the same word (t3); Relaxed on failure, the value is not used.
        let _ = r
            .claim()
            .compare_exchange(claim, to, Ordering::SeqCst, Ordering::Relaxed);
    }
    Repaired::Done { tombstoned }
}
