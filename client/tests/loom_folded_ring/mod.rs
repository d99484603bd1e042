//! The model ring of the loom models of a fixed-size ring whose claim is its publish
//! (`loom_folded.rs`, `loom_folded_attach.rs`, `loom_folded_guard.rs`,
//! `loom_folded_repair.rs`; the design is in `loom_folded.rs`'s module comment): the words,
//! the producer's publish (the payload, then the line's single-producer claim on the
//! cursor), claim guards, the consumer's reads of the line, and the models' helpers.

#![allow(dead_code)] // each model file uses a different part

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use shmring::fixed;
use shmring::line::{self, Fast, Line, NoLone, Refused, SeenRunning, Word};
use shmring_layout::{lifecycle, RingState};

use crate::loom_env::env;
use crate::loom_word::W;

/// The words of a model ring of `N` slots. The claim word of `fixed::Words` is a write
/// horizon, which the producer raises before it writes past it (`AHEAD` sequences at a
/// time, in the models that have one), so that a copy that saw a byte of a later lap's
/// write sees the horizon past the copied sequence's lap (the seqlock of `fixed`, on the
/// horizon instead of a per-event claim). The cursor is the line's claim word.
pub struct Ring<const N: usize> {
    /// The cursor, which is also the single producer's claim word.
    pub cursor: W,
    /// The write horizon: no sequence at or past it has been written.
    pub horizon: W,
    /// The first sequence of a claim guard's claim that is not committed yet (its claim is
    /// in the cursor, its slots may be being written), or `NONE`: consumers deliver below
    /// it. Written by the producer, and by the repair of a dead one (which loads it first).
    pub pending: W,
    /// Every tombstone lies below this.
    pub tomb_end: W,
    /// The lifecycle word.
    pub life: W,
    /// The stop sequence.
    pub stop_seq: W,
    /// One tomb word per slot (a dropped claim guard's sequence, in its slot's word).
    pub tombs: [W; N],
    /// A slot's payload: the sequence and a mark (which attempt wrote it, or the sequence
    /// again), two words so that a torn copy shows.
    pub slots: [[W; 2]; N],
}

/// How a publish ended, beside its result: what the witnesses look for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Decided by (p1) or (p4) alone.
    Direct,
    /// Stored, then decided by (p5).
    Decided,
}

/// Sequences the producer's horizon runs ahead of the write that raises it (at most the
/// capacity: a reader a whole ring behind the horizon drops its copy, so in a ring of two
/// slots, where it is the capacity, a reader keeps only the newest event's).
pub const AHEAD: u64 = 2;

/// `Ring::pending` while no claim guard's claim is open.
pub const NONE: u64 = u64::MAX;

/// A tombstone as a consumer delivers it: `(seq, TOMB)`.
pub const TOMB: u64 = u64::MAX - 1;

/// How a claim guard's steps are made: as the design says, or a control with one changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Guard {
    /// Every store of `pending` Release, the fence between the record and the claim, a
    /// refused claim's record taken back.
    Design,
    /// Control: the record a Relaxed store.
    RelaxedRecord,
    /// Control: no fence between the record and the claim's cursor store.
    NoFence,
    /// Control: the commit's (or drop's) end of the claim a Relaxed store.
    RelaxedEnd,
    /// Control (and a producer that dies before it): a refused claim's record left.
    NoReset,
}

impl Guard {
    /// The order of a store of `pending` (`end`: a commit's or drop's).
    fn order(self, end: bool) -> Ordering {
        match (self, end) {
            (Guard::RelaxedRecord, false) | (Guard::RelaxedEnd, true) => Ordering::Relaxed,
            _ => Ordering::Release,
        }
    }
}

/// When the producer raises the horizon.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Raise {
    /// Before the write's Release fence.
    BeforeWrite,
    /// Control: after the write.
    AfterWrite,
}

impl<const N: usize> fixed::Words for Ring<N> {
    type W = W;
    fn horizon(&self) -> &W {
        &self.horizon
    }
    fn cursor(&self) -> &W {
        &self.cursor
    }
    fn pending(&self) -> &W {
        &self.pending
    }
    fn reader_fence(&self) {
        // The client's reader fence (`fixed::published`) stands for a SeqCst fence, the
        // stopper's heavy fence's partner.
        fence(Ordering::SeqCst)
    }
    fn tomb_end(&self) -> &W {
        &self.tomb_end
    }
    fn tomb(&self, seq: u64) -> &W {
        &self.tombs[seq as usize % N]
    }
    fn lifecycle(&self) -> &W {
        &self.life
    }
    fn stop_seq(&self) -> &W {
        &self.stop_seq
    }
    fn capacity(&self) -> u64 {
        N as u64
    }
    fn fence(&self, order: Ordering) {
        fence(order)
    }
}

impl<const N: usize> Ring<N> {
    pub fn new() -> Self {
        Ring {
            cursor: W::new(0),
            horizon: W::new(0),
            pending: W::new(NONE),
            tomb_end: W::new(0),
            life: W::new(lifecycle::pack(0, RingState::Running as u32, 0)),
            stop_seq: W::new(0),
            tombs: std::array::from_fn(|_| W::new(u64::MAX)),
            slots: std::array::from_fn(|_| [W::new(u64::MAX), W::new(u64::MAX)]),
        }
    }

    /// The sequence line, its claim word the cursor.
    pub fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.cursor,
            lifecycle: &self.life,
            stop_seq: &self.stop_seq,
            single: true,
            // A claim guard of `claim_batch` takes up to half the ring, as the client's.
            max_claim: (N as u64 / 2).max(1),
            lone: &NoLone,
        }
    }

    /// The producer (process 1): with a write horizon (`Some`: the producer's own copy of
    /// it, and when it goes up, after the write being the control), raise it if `seq`
    /// reached it; write `seq`'s payload, marked `mark`; then claim it on the cursor
    /// (`Line::claim_single`, in its two halves so that the path shows), which publishes it
    /// if the claim is accepted.
    pub fn publish(
        &self,
        seq: u64,
        mark: u64,
        seen: &mut SeenRunning,
        horizon: Option<(&mut u64, Raise)>,
    ) -> (Result<(), Refused>, Path) {
        let (raised, raise) = match horizon {
            Some((h, raise)) => {
                let raised = (seq >= *h).then(|| {
                    *h = seq + AHEAD;
                    *h
                });
                (raised, Some(raise))
            }
            None => (None, None),
        };
        let store_horizon = |h: Option<u64>| {
            if let Some(h) = h {
                // Relaxed: published to copying readers by `begin_write`'s Release fence.
                self.horizon.store(h, Ordering::Relaxed);
            }
        };
        if raise == Some(Raise::BeforeWrite) {
            store_horizon(raised);
        }
        if raise.is_some() {
            // Release fence: pairs with a copying reader's Acquire fence
            // (`held_by_horizon`): a copy that saw a byte written below sees the horizon
            // stored above. (Only the models with a horizon have copying readers.)
            fence(Ordering::Release);
        }
        let [a, b] = &self.slots[seq as usize % N];
        // Relaxed, both: published by the claim's store below, after the Release fence.
        a.store(seq, Ordering::Relaxed);
        b.store(mark, Ordering::Relaxed);
        if raise == Some(Raise::AfterWrite) {
            store_horizon(raised);
        }
        // Release fence: pairs with a consumer's Acquire load of the cursor that reads the
        // claim's Relaxed store ((p2)), which then sees the payload.
        fence(Ordering::Release);
        self.claim_on_cursor(seq, 1, seen)
    }

    /// The line's single-producer claim of `seq..seq + n` on the cursor (`Line::claim_single`,
    /// in its two halves so that the path shows), after the caller's Release fence.
    fn claim_on_cursor(
        &self,
        seq: u64,
        n: u64,
        seen: &mut SeenRunning,
    ) -> (Result<(), Refused>, Path) {
        // The light fence ((p3)) is a SeqCst fence here, as in the line's models: it pairs
        // with the stopper's heavy fence ((s2)) and the starter's ((t2)).
        let fast = line::claim_single_fast(&self.cursor, &self.life, seen, seq, n, || {
            fence(Ordering::SeqCst)
        });
        let path = if fast == Fast::Decide {
            Path::Decided
        } else {
            Path::Direct
        };
        (
            self.line().finish_claim_single(&env(1, true), fast, seq, n),
            path,
        )
    }

    /// A claim guard's claim of `seq..seq + n` (`Producer::claim` in this design): `seq`
    /// recorded as pending, then the line's claim on the cursor, as a publish makes it, but
    /// before the writes. A refused claim's record is taken back by the producer (not by
    /// `Guard::NoReset`): only consumers (and a dead producer's repair) read it, as a bound
    /// below the cursor, and while the
    /// refusing stop holds, the stop sequence bounds them at `seq` anyway.
    pub fn claim_guard(
        &self,
        seq: u64,
        n: u64,
        seen: &mut SeenRunning,
        how: Guard,
    ) -> (Result<(), Refused>, Path) {
        if how == Guard::Design || how == Guard::NoReset || how == Guard::RelaxedEnd {
            // The client's record (`fixed::record_pending`): a Release store, then a Release
            // fence before the claim's cursor store.
            fixed::record_pending(self, seq);
        } else {
            // A control's record: a Relaxed store, or no fence after it.
            self.pending.store(seq, how.order(false));
            if how != Guard::NoFence {
                fence(Ordering::Release);
            }
        }
        let (result, path) = self.claim_on_cursor(seq, n, seen);
        if result.is_err() && how != Guard::NoReset {
            // The client's refusal (`Producer::claim_single`): the record ended.
            fixed::end_pending(self);
        }
        (result, path)
    }

    /// A claim guard's commit: the payloads of its accepted claim `seq..seq + n`, marked
    /// `mark`, then the claim ended (Release): its events are published.
    pub fn commit_guard(&self, seq: u64, n: u64, mark: u64, how: Guard) {
        for s in seq..seq + n {
            let [a, b] = &self.slots[s as usize % N];
            // Relaxed, both: published by the Release store below.
            a.store(s, Ordering::Relaxed);
            b.store(mark, Ordering::Relaxed);
        }
        if how == Guard::RelaxedEnd {
            // The control: a Relaxed end.
            self.pending.store(NONE, Ordering::Relaxed);
        } else {
            // The client's end (`fixed::end_pending`, Release).
            fixed::end_pending(self);
        }
    }

    /// A claim guard dropped without a commit: its accepted claim `seq..seq + n` published
    /// as tombstones (`fixed::tombstone`'s words, then the claim ended instead of a cursor
    /// store: the cursor holds the claim already).
    pub fn drop_guard(&self, seq: u64, n: u64, how: Guard) {
        if how != Guard::RelaxedEnd {
            // The client's (`fixed::tombstone_pending`).
            fixed::tombstone_pending(self, seq, seq + n);
            return;
        }
        for s in seq..seq + n {
            // Relaxed: published by the Release store below.
            self.tombs[s as usize % N].store(s, Ordering::Relaxed);
        }
        // Relaxed: published by the Release store below.
        self.tomb_end.store(seq + n, Ordering::Relaxed);
        // Release: pairs with a consumer's Acquire load of `pending` in `bound`.
        self.pending.store(NONE, how.order(true));
    }

    /// Wait until the line runs again (the producer, after a refusal: as a caller that
    /// retries on `Closed`).
    pub fn wait_running(&self) {
        // Acquire: pairs with the start's Release CAS to Running ((t4)), so the retry
        // follows the start's take-back.
        while lifecycle::state(self.life.load(Ordering::Acquire)) != RingState::Running as u32 {
            thread::yield_now();
        }
    }
}

/// Which of the consumer's reads a model runs (the controls leave one out).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// The lifecycle word before and after the cursor, a fence before the second.
    Both,
    /// Control: no lifecycle word after the cursor (`l1` alone decides, as `l2` would).
    NoAfter,
    /// Control: no lifecycle word before the cursor.
    NoBefore,
    /// Control: both words, no fence between the cursor and the second.
    NoFence,
    /// Control: both words and the fence, the cursor trusted over an open claim guard
    /// (`Ring::pending` not read).
    NoPending,
    /// Control: `Ring::pending` read before the cursor.
    PendingFirst,
}

/// How far a consumer may deliver now (`None`: look again later), as `loom_folded.rs`'s
/// module comment
/// says.
pub fn bound<const N: usize>(ring: &Ring<N>, reads: Reads) -> Option<u64> {
    if reads == Reads::Both {
        // The design is the client's own read (`fixed::published`).
        return fixed::published(ring).map(|(end, _)| end);
    }
    // Acquire: pairs with the Release CAS that published the word ((s4), (t4)); after a
    // start's Running, the cursor load below follows the start's take-back ((t3)).
    let l1 = (reads != Reads::NoBefore).then(|| ring.life.load(Ordering::Acquire));
    // The control reads `pending` first. Acquire: as below.
    let early = (reads == Reads::PendingFirst).then(|| ring.pending.load(Ordering::Acquire));
    // Acquire: pairs with the producer's Release fence before its claim's store, or with
    // the start's take-back CAS ((t3), SeqCst).
    let c = ring.cursor.load(Ordering::Acquire);
    // After the cursor. Acquire: pairs with the Release stores of `pending` (a record, and
    // the store that ends a claim guard's claim: its commit, its tombstones); a claim's
    // record was stored before the Release fence ahead of its cursor store, so a cursor
    // that includes the claim comes with it (or a later value).
    let c = match reads {
        Reads::NoPending => c,
        Reads::PendingFirst => c.min(early.expect("read")),
        _ => c.min(ring.pending.load(Ordering::Acquire)),
    };
    let l2 = if reads == Reads::NoAfter {
        // The control: `l1` decides alone.
        l1.expect("read")
    } else {
        if reads != Reads::NoFence {
            // SeqCst fence: pairs with the stopper's heavy fence ((s2)): if the word below
            // is still the Running word before a stop's (s1), that stop's (s3) reads `c`
            // or later (`loom_folded.rs`'s module comment), so every event below `c` is
            // accepted. (A
            // start's take-back is ordered before `c` by `l1`'s Acquire.)
            fence(Ordering::SeqCst);
        }
        // Acquire: as `l1`; a settled word comes with its stop sequence.
        ring.life.load(Ordering::Acquire)
    };
    if l1.is_some_and(|l1| l1 != l2) {
        return None;
    }
    match RingState::from_u32(lifecycle::state(l2)) {
        Some(RingState::Running) => Some(c),
        // Closing, or no state of a single-producer line: look again later.
        Some(RingState::Stopping | RingState::Sharing) | None => None,
        // Settled closed (as `line::closed_at`): the stop sequence bounds the cursor.
        // Relaxed: ordered by the Acquire load of the settled word.
        Some(_) => Some(c.min(ring.stop_seq.load(Ordering::Relaxed))),
    }
}

/// Whether a model's interleavings reached a path (set from inside, read after `check`).
pub fn witness() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}

/// Mark a witness reached.
pub fn reached(w: &std::sync::atomic::AtomicBool) {
    w.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// After a model: some interleaving reached `w`, else the model proved nothing about
/// `what`.
pub fn assert_reached(w: &std::sync::atomic::AtomicBool, what: &str) {
    assert!(
        w.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving {what}"
    );
}

/// Another process (2) stops the ring, then starts it again if `start`. The thread returns
/// the stop sequence.
pub fn spawn_lifecycle<const N: usize>(
    ring: &Arc<Ring<N>>,
    start: bool,
) -> thread::JoinHandle<u64> {
    let ring = ring.clone();
    thread::spawn(move || {
        let e = env(2, true);
        let (stop, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
        if start {
            ring.line().reopen(&e).expect("start");
        }
        stop
    })
}

/// A consumer's poll from `next` with tombstones (`fixed::is_tombstone`): an event as its
/// payload `(seq, mark)`, a tombstone as `(seq, TOMB)`.
pub fn poll_tombs<const N: usize>(
    ring: &Ring<N>,
    reads: Reads,
    next: &mut u64,
    got: &mut Vec<(u64, u64)>,
) {
    let Some(end) = bound(ring, reads) else {
        return;
    };
    // Relaxed: ordered by the Acquire loads in `bound` (the cursor's and `pending`'s).
    let tomb_end = ring.tomb_end.load(Ordering::Relaxed);
    while *next < end {
        let s = *next;
        if fixed::is_tombstone(ring, s, tomb_end) {
            got.push((s, TOMB));
        } else {
            let [a, b] = &ring.slots[s as usize % N];
            // Relaxed: ordered by the Acquire loads in `bound`.
            got.push((a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)));
        }
        *next += 1;
    }
}

/// A producer's claim of `seq` cut short: (p1) and (p2) (Running, then the cursor at
/// `seq + 1`, as `line::claim_single_fast`'s), and the process dies before its light fence
/// ((p3)), the claim undecided. Returns whether it stored.
pub fn store_and_die<const N: usize>(ring: &Ring<N>, seq: u64) -> bool {
    // (p1) Acquire: as `line::claim_single_fast`'s.
    let running = ring.life.load(Ordering::Acquire);
    let stored = lifecycle::state(running) == RingState::Running as u32;
    if stored {
        // (p2) Relaxed: as `line::claim_single_fast`'s.
        ring.cursor.store(seq + 1, Ordering::Relaxed);
    }
    stored
}

/// The line's position as an attaching consumer (process 4) takes it: the client's
/// `fixed::start_position` (`Segment::start_position`), which looks again until a stop in
/// progress decided it and finishes a dead stopper's stop.
pub fn position<const N: usize>(ring: &Ring<N>) -> u64 {
    start_position(ring, &env(4, true))
}

/// [`position`] in the surroundings `env` (a model env never gives up waiting).
pub fn start_position<const N: usize>(ring: &Ring<N>, env: &impl line::Env) -> u64 {
    fixed::start_position(ring, env).expect("a model env waits as long as it takes")
}
