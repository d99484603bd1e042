//! Loom models of the repair of a fixed-size ring's dead single producer
//! (`fixed::repair_dead`, which `Ring::repair_dead_producer` calls while it holds the dead
//! producer's entry as REPAIRING, so no producer attaches meanwhile): the shipping repair,
//! the shipping line (`line::claim_single_fast`, `Line::close`, `Line::reopen`,
//! `Line::take_position`), the shipping event protocol (`fixed::*`) and the shipping entry
//! transitions (`table::producer`), on the models' words (`loom_word::W`).
//!
//! ```text
//! dead producer (its last claim of s)     repair (fixed::repair_dead)
//!                                         fence(SeqCst)
//! (p1)..(p4) claim = s + 1                life: Running open; Stopped | Draining | Deleted
//! accepted: begin_write, one payload word       closed; Stopping | Starting: try later
//! dies (its thread ends; the repairer     claim, cursor; end = claim, min(claim, stop_seq)
//!   joins it, as a broker that saw it dead)     while closed
//!                                         end > cursor: wrap gate, tombstone(cursor..end)
//!                                         claim > max(end, cursor): CAS claim back (SeqCst)
//! ```
//!
//! What every model checks, in every interleaving it explores:
//!
//! - **published or tombstoned, never both**: the repair leaves the cursor at the line's
//!   position (a stop's record while the ring is closed: none past it, none below it); a
//!   tomb word stands for exactly the sequences the dead producer claimed, had accepted and
//!   never published, and no event it published is one; a claim a stop refused is taken
//!   back, never tombstoned;
//! - **no rewind, no reuse**: the next producer, which attaches once the repair freed the
//!   entry, takes exactly the cursor the repair left as its position, and a start reopens
//!   there;
//! - **copying readers**: an optional reader never keeps a copy of a slot being written (or
//!   a slot whose stale tomb word no longer marks it) as an event, and keeps a copy made
//!   while the ring stayed closed, its refused claim still in the word or taken back.
//!
//! The models: the repair of a refused claim racing the start that takes it back itself
//! ((t3) in `line`) and an optional reader a ring behind; the repair on a running ring
//! racing a stop that the dead producer's last claim met; the repair racing a required
//! consumer (the wrap gate) and an optional reader a ring behind; and a repairer that dies
//! after any of its writes, its REPAIRING word left, whose repair the next producer's
//! attach takes over, racing a stop or a start.
//!
//! Controls, each one step changed (except the tomb-words control, which drops both
//! fences before the tomb words), each required to fail: the claim read before the
//! lifecycle word (a start between them: a refused claim tombstoned while the next producer
//! takes its sequence); the stop sequence ignored while closed (a refused claim tombstoned
//! past the stop); a stop in progress taken for Running (the same, before the stop
//! records); the repair without its first fence, against a producer that died between its
//! claim's store and its own fence (the repair tombstones the claim, the stop refuses it:
//! no store of the dead producer's is ordered before the stopper's fence but through the
//! repair's); tomb words written with no fence before them (a reader a ring behind keeps a
//! stale slot); a takeover that frees a dead repairer's entry without
//! repairing (a hole below the stop). What the repair's CAS of the claim guards cannot fail
//! here: the models' premise (the REPAIRING entry holds every producer off) leaves a start's
//! take-back the only other writer, and it writes the same value, so a plain store in its
//! place passes too. Nor does the repair's wrap gate ever wait here: the dead producer
//! waited at the same gate before it claimed.
//!
//! Preemption bound 2 by default (`LOOM_MAX_PREEMPTIONS` overrides it).

mod loom_env;
mod loom_fixed_ring;
mod loom_word;

use std::cell::Cell;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_env::env;
use loom_fixed_ring::Ring;
use loom_word::{model, W};
use shmring::fixed::{self, Repaired, Words};
use shmring::line::{self, Fast, SeenRunning, Word};
use shmring::table::{self, Holder, Procs};
use shmring_layout::{lifecycle, owned_word, producer_state, RingState};

/// The repair a model runs: the shipping one, or a control with one step changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// `fixed::repair_dead`.
    Shipping,
    /// Control: the claim read before the lifecycle word.
    ClaimFirst,
    /// Control: tombstones up to the raw claim while closed (the stop sequence ignored).
    RawClaimWhileClosed,
    /// Control: a stop in progress (Stopping) taken for Running, instead of trying later.
    StoppingAsRunning,
    /// Control: tomb words written without a fence before them (neither the repair's SeqCst
    /// fence, which is also a Release fence, nor the tombstone's Release fence).
    TombWithoutFence,
    /// Control: no SeqCst fence before the lifecycle word.
    NoFence,
}

/// One repair attempt, `step` choosing the shipping code or a control.
fn repair_once<R: Words>(r: &R, step: Step, gate_passed: impl FnOnce(u64) -> bool) -> Repaired {
    match step {
        Step::Shipping => fixed::repair_dead(r, gate_passed),
        _ => control_repair(r, step, gate_passed),
    }
}

/// Control: `fixed::repair_dead` with the one step `step` names changed.
fn control_repair<R: Words>(r: &R, step: Step, gate_passed: impl FnOnce(u64) -> bool) -> Repaired {
    if step != Step::NoFence && step != Step::TombWithoutFence {
        // SeqCst fence: as the shipping repair's first step.
        r.fence(Ordering::SeqCst);
    }
    // Acquire, as the shipping load, but before the lifecycle word.
    let early = (step == Step::ClaimFirst).then(|| r.claim().load(Ordering::Acquire));
    // Acquire: as `Line::life`.
    let life = r.lifecycle().load(Ordering::Acquire);
    let state = lifecycle::state(life);
    let closed = if state == RingState::Running as u32
        || (step == Step::StoppingAsRunning && state == RingState::Stopping as u32)
    {
        false
    } else if [RingState::Stopped, RingState::Draining, RingState::Deleted]
        .iter()
        .any(|&s| state == s as u32)
    {
        true
    } else {
        return Repaired::Wait { waiting: 1 };
    };
    // Acquire: as the shipping load.
    let claim = early.unwrap_or_else(|| r.claim().load(Ordering::Acquire));
    let (cursor, _) = fixed::published(r);
    let end = if closed && step != Step::RawClaimWhileClosed {
        // Relaxed: as the shipping load.
        claim.min(r.stop_seq().load(Ordering::Relaxed))
    } else {
        claim
    };
    let mut tombstoned = 0;
    if end > cursor {
        if !gate_passed(end.saturating_sub(r.capacity())) {
            return Repaired::Wait {
                waiting: end - cursor,
            };
        }
        if step == Step::TombWithoutFence {
            for s in cursor..end {
                // Relaxed, as `fixed::tombstone`, without its Release fence before.
                r.tomb(s).store(s, Ordering::Relaxed);
            }
            // Relaxed and Release: as `fixed::tombstone`.
            r.tomb_end().store(end, Ordering::Relaxed);
            fixed::publish(r, end);
        } else {
            fixed::tombstone(r, cursor, end);
        }
        tombstoned = end - cursor;
    }
    let to = end.max(cursor);
    if claim > to {
        // SeqCst: as the shipping CAS.
        let _ = r
            .claim()
            .compare_exchange(claim, to, Ordering::SeqCst, Ordering::Relaxed);
    }
    Repaired::Done { tombstoned }
}

/// The broker's repair, tried until it is done (a `Wait` gives the entry back and a later
/// sweep tries again; here at once). Returns the sequences tombstoned.
fn repair_until_done<const CAP: usize>(
    ring: &Ring<CAP>,
    step: Step,
    gate_passed: impl Fn(u64) -> bool,
) -> u64 {
    loop {
        match repair_once(ring, step, &gate_passed) {
            Repaired::Done { tombstoned } => return tombstoned,
            Repaired::Wait { .. } => thread::yield_now(),
        }
    }
}

/// The single producer's last claim, of `seq` (every sequence below it published), racing
/// the model's stop: (p1) to (p4) (`claim_single_fast`, its light fence the membarrier's
/// `SeqCst` fence). Accepted there: `begin_write` and one of the two payload words. Then the
/// process dies (the thread ends; the repair joins it, as a broker that saw it dead). A
/// claim that (p4) found changed dies before (p5) decides: the stop's record is its fate.
fn claim_and_die<const CAP: usize>(ring: &Ring<CAP>, seq: u64) -> Fast {
    let fast = line::claim_single_fast(
        &ring.claim,
        &ring.life,
        &mut SeenRunning::default(),
        seq,
        1,
        || fence(Ordering::SeqCst),
    );
    if fast == Fast::Accepted {
        fixed::begin_write(ring);
        // Relaxed: the one payload word written before the process died.
        ring.slot(seq)[0].store(seq, Ordering::Relaxed);
    }
    fast
}

/// The single producer's last claim, of `seq`, racing the model's stop: (p1) and (p2) alone
/// (Running, then its position stored), and the process dies before its light fence, the
/// claim undecided.
fn store_claim_and_die<const CAP: usize>(ring: &Ring<CAP>, seq: u64) -> Fast {
    // (p1) Acquire: as `line::claim_single_fast`'s.
    let running = ring.life.load(Ordering::Acquire);
    if lifecycle::state(running) == RingState::Running as u32 {
        // (p2) Relaxed: as `line::claim_single_fast`'s.
        ring.claim.store(seq + 1, Ordering::Relaxed);
        return Fast::Decide;
    }
    Fast::NotRunning
}

/// The cursor (Acquire, as `fixed::published`'s load).
fn cursor<const CAP: usize>(ring: &Ring<CAP>) -> u64 {
    ring.cursor.load(Ordering::Acquire)
}

/// Process 3 takes the line's position (`Line::take_position`).
fn take_position<const CAP: usize>(ring: &Ring<CAP>) -> u64 {
    ring.line()
        .take_position(
            &env(3, true),
            |s| s < cursor(ring),
            || fence(Ordering::SeqCst),
        )
        .expect("take the position")
}

/// Process 3 publishes one event at its position `p` (the ring running).
fn publish_at<const CAP: usize>(ring: &Ring<CAP>, p: u64) {
    let claimed =
        ring.line()
            .claim_single(&env(3, true), &mut SeenRunning::default(), p, 1, || {
                fence(Ordering::SeqCst)
            });
    assert_eq!(claimed, Ok(()), "the next producer's claim at {p}");
    fixed::begin_write(ring);
    for w in ring.slot(p) {
        // Relaxed: the payload, published by the cursor.
        w.store(p, Ordering::Relaxed);
    }
    fixed::publish(ring, p + 1);
}

/// Whether `word` is a lifecycle word settled closed (its stop sequence recorded).
fn settled_closed(word: u64) -> bool {
    [RingState::Stopped, RingState::Starting]
        .iter()
        .any(|&s| lifecycle::state(word) == s as u32)
}

// ---------------------------------------------------------------------------------------
// A refused claim, repaired while a start takes it back.

/// A ring of one slot stopped at 1: the dead producer published 0, and a stop refused its
/// claim of 1, leaving its position (2) in the claim word past the stop sequence; it wrote
/// nothing.
fn stopped_with_a_refused_claim() -> Arc<Ring<1>> {
    let ring = Ring::<1>::new();
    ring.publish(0, false);
    ring.claim.store(2, Ordering::SeqCst);
    ring.stop_seq.store(1, Ordering::SeqCst);
    ring.life.store(
        lifecycle::pack(2, RingState::Stopped as u32, 0),
        Ordering::SeqCst,
    );
    Arc::new(ring)
}

/// The repair of the refused claim, then the next producer's take of the position, race a
/// start, which takes the claim back itself ((t3)); the next producer publishes once the
/// ring runs. An optional reader copies 0 a ring behind meanwhile. Nothing is tombstoned,
/// the next producer takes 1, and the reader keeps a copy made while the ring stayed closed
/// (the refused claim wrote nothing) and drops one that saw the next producer's write of 1.
fn a_refused_claim_repaired_racing_a_start(step: Step) {
    model(move || {
        let ring = stopped_with_a_refused_claim();
        let repairer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let tombstoned = repair_until_done(&ring, step, |_| true);
                let repaired_to = cursor(&ring);
                (tombstoned, repaired_to, take_position(&ring))
            })
        };
        let starter = {
            let ring = ring.clone();
            thread::spawn(move || {
                let started = ring.line().reopen(&env(2, true));
                let (tombstoned, repaired_to, p) = repairer.join().unwrap();
                assert_eq!(
                    p, repaired_to,
                    "the next producer rewinds: it took {p}, the repair left the cursor at \
                     {repaired_to}"
                );
                publish_at(&ring, p);
                (started, tombstoned, p)
            })
        };
        // Acquire: as `closed_at`'s load.
        let before = ring.life.load(Ordering::Acquire);
        // Relaxed: a racy copy (one payload word), checked below.
        let copy = ring.slot(0)[0].load(Ordering::Relaxed);
        let kept = fixed::copy_held(&*ring, 0);
        let after = ring.life.load(Ordering::Acquire);
        if kept {
            assert_eq!(copy, 0, "an optional copy of 0 kept another write");
        }
        if before == after && settled_closed(before) {
            assert!(
                kept,
                "a copy made while the ring stayed closed at 1 was dropped"
            );
        }
        let (started, tombstoned, p) = starter.join().unwrap();
        assert_eq!(started, Ok(1), "reopened at the stop sequence");
        assert_eq!(tombstoned, 0, "a refused claim was tombstoned");
        assert_eq!(p, 1, "the next producer takes the stop sequence");
        let (cursor, tomb_end) = fixed::published(&*ring);
        assert_eq!(cursor, 2);
        assert!(
            !fixed::is_tombstone(&*ring, 1, tomb_end),
            "the next producer's event is a tombstone"
        );
    });
}

#[test]
fn a_refused_claim_repaired_racing_the_start_that_takes_it_back() {
    a_refused_claim_repaired_racing_a_start(Step::Shipping);
}

/// The claim read before the lifecycle word: the repair reads the refused claim (2), the
/// start takes it back and publishes Running, the repair reads Running and tombstones 1,
/// which the next producer then takes (the start reopened there).
#[test]
#[should_panic(expected = "the next producer rewinds")]
fn control_a_repair_that_reads_the_claim_first_tombstones_a_claim_a_start_took_back() {
    a_refused_claim_repaired_racing_a_start(Step::ClaimFirst);
}

// ---------------------------------------------------------------------------------------
// The repair on a running ring, racing a stop.

/// A ring of two slots, 0 published. The producer claims 1 while the ring stops and dies as
/// `dies` says: after (p4) (`claim_and_die`: one payload word written if (p4) accepted the
/// claim), or before its light fence (`store_claim_and_die`). The repair runs once it is
/// gone (while the stop may still be closing). The stop records 1 (refused) or 2
/// (accepted); the repair leaves the cursor exactly there, 1 a tombstone iff accepted; a
/// start reopens there and the next producer takes it.
fn a_dead_claim_repaired_racing_a_stop(step: Step, dies: fn(&Ring<2>, u64) -> Fast) {
    model(move || {
        let ring = Arc::new(Ring::<2>::new());
        ring.publish(0, false);
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || dies(&ring, 1))
        };
        let repairer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let fast = producer.join().unwrap();
                let tombstoned = repair_until_done(&ring, step, |_| true);
                (fast, tombstoned, cursor(&ring))
            })
        };
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        let (fast, tombstoned, repaired_to) = repairer.join().unwrap();
        assert!(stop == 1 || stop == 2, "stopped at {stop}");
        if fast == Fast::Accepted {
            assert_eq!(stop, 2, "a claim (p4) accepted is below the stop");
        }
        assert!(
            repaired_to <= stop,
            "the repair published past the stop: cursor {repaired_to}, stop {stop}"
        );
        assert_eq!(
            repaired_to, stop,
            "an accepted claim left unpublished below the stop"
        );
        assert_eq!(tombstoned, stop - 1, "tombstoned {tombstoned}, stop {stop}");
        let (_, tomb_end) = fixed::published(&*ring);
        assert!(
            !fixed::is_tombstone(&*ring, 0, tomb_end),
            "a published event is a tombstone"
        );
        assert_eq!(
            fixed::is_tombstone(&*ring, 1, tomb_end),
            stop == 2,
            "1 is a tombstone iff the stop accepted it"
        );
        assert_eq!(
            ring.line().reopen(&env(2, true)),
            Ok(stop),
            "reopened at the stop"
        );
        let p = take_position(&ring);
        assert_eq!(p, stop, "the next producer takes the stop sequence");
        publish_at(&ring, p);
    });
}

#[test]
fn a_dead_claim_repaired_racing_a_stop_ends_at_the_stop() {
    a_dead_claim_repaired_racing_a_stop(Step::Shipping, claim_and_die);
}

/// The stop sequence ignored while closed: a claim the stop refused is tombstoned past it.
#[test]
#[should_panic(expected = "the repair published past the stop")]
fn control_a_repair_that_ignores_the_stop_sequence_tombstones_a_refused_claim() {
    a_dead_claim_repaired_racing_a_stop(Step::RawClaimWhileClosed, claim_and_die);
}

/// A stop in progress taken for Running: the repair tombstones the claim whose fate the stop
/// is deciding, and the stop refuses it.
#[test]
#[should_panic(expected = "the repair published past the stop")]
fn control_a_repair_during_a_stop_tombstones_a_claim_the_stop_refuses() {
    a_dead_claim_repaired_racing_a_stop(Step::StoppingAsRunning, claim_and_die);
}

/// A producer that dies between its claim's store and its light fence: nothing of its own
/// orders the store before the stopper's fence, so the repair's SeqCst fence (after it saw
/// the death) must: either it comes first in the fences' order, and the stop reads the
/// claim (accepting it, as the repair's tombstone says), or the stop's does, and the repair
/// reads Stopping and waits for the record.
#[test]
fn a_claim_whose_producer_died_before_its_fence_repaired_racing_a_stop() {
    a_dead_claim_repaired_racing_a_stop(Step::Shipping, store_claim_and_die);
}

/// Without the repair's fence: it reads Running and the claim, and tombstones it, while the
/// stop reads the position before the claim and records 1.
#[test]
#[should_panic(expected = "the repair published past the stop")]
fn control_a_repair_without_its_fence_tombstones_a_claim_the_stop_refuses() {
    a_dead_claim_repaired_racing_a_stop(Step::NoFence, store_claim_and_die);
}

// ---------------------------------------------------------------------------------------
// The repair racing readers: a required consumer the wrap gate waits for, an optional one a
// ring behind.

/// A ring of one slot, 0 a tombstone (a claim its producer dropped). The producer waits at
/// the wrap gate for the required consumer to read 0, claims 1 (the slot of 0), writes one
/// payload word of it and dies. The repair (its wrap gate: the required consumer's position)
/// tombstones 1, writing 1 into the tomb word of 0's slot, so 0 no longer reads as a
/// tombstone there. The required consumer reads both as tombstones; the optional reader's
/// look, a ring behind, keeps only whole copies (asserted in `look_optional`), 0 and 1 only
/// as tombstones, never the slot's bytes as an event.
fn a_dead_claim_repaired_racing_readers(step: Step) {
    model(move || {
        let ring = Arc::new(Ring::<1>::new());
        // A claim guard dropped: its holder tombstones it.
        ring.claim_one(0);
        fixed::tombstone(&*ring, 0, 1);
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                ring.wait_for_room(1);
                claim_and_die(&ring, 1)
            })
        };
        let repairer = {
            let ring = ring.clone();
            thread::spawn(move || {
                assert_eq!(producer.join().unwrap(), Fast::Accepted);
                // Acquire: the gate scan's load of a consumer's position (its Release commit).
                repair_until_done(&ring, step, |need| {
                    ring.next.load(Ordering::Acquire) >= need
                })
            })
        };
        let required = {
            let ring = ring.clone();
            thread::spawn(move || ring.consume_required(2))
        };
        for (s, ev) in ring.look_optional(fixed::copy_held) {
            assert_eq!(ev, None, "the optional reader kept {ev:?} for {s}");
        }
        assert_eq!(
            repairer.join().unwrap(),
            1,
            "the dead claim of 1 tombstoned"
        );
        assert_eq!(required.join().unwrap(), vec![None, None]);
    });
}

#[test]
fn a_dead_claim_repaired_racing_a_required_and_an_optional_reader() {
    a_dead_claim_repaired_racing_readers(Step::Shipping);
}

/// Tomb words without a fence before them: a reader a ring behind that reads the repair's
/// tomb word of 1 in 0's slot (so 0, a tombstone, no longer looks like one) may read the
/// claim from before the dead producer's, and keep the slot's stale bytes as event 0. (The
/// repair's first fence, SeqCst, also orders the claim before the tomb words, so this
/// control drops both; no model shows the tombstone's own Release fence needed any more: a
/// dropped claim guard's tomb words follow `fixed::begin_write`'s fence as well. It stays,
/// a second guard for a caller that did not fence.)
#[test]
#[should_panic(expected = "kept another write")]
fn control_tomb_words_without_the_fence_hand_a_reader_a_ring_behind_a_stale_slot() {
    a_dead_claim_repaired_racing_readers(Step::TombWithoutFence);
}

// ---------------------------------------------------------------------------------------
// A repairer that dies mid-repair, and the repair the next producer's attach takes over.

/// A process that has exited (the models' live processes are below 10).
const DEAD_PRODUCER: u32 = 50;
/// The first repairer, which dies mid-repair (it runs as long as its thread does; nobody
/// asks about it before the thread ends).
const DEAD_REPAIRER: u32 = 51;

/// The model's processes: 1 to 9 run, and their start time is their pid.
struct Procs9;

impl Procs for Procs9 {
    fn alive(&self, pid: u32, start_time: u64) -> bool {
        (1..10).contains(&pid) && start_time == u64::from(pid)
    }
    fn exists(&self, pid: u32) -> bool {
        (1..10).contains(&pid)
    }
}

/// A word of a process that dies after `budget` writes: its stores, CASes and fences take
/// effect until then, and none after (a dead process writes nothing more).
struct Dying<'a> {
    word: &'a W,
    budget: &'a Cell<u32>,
}

impl Dying<'_> {
    /// Spend one write: whether the process is still alive to make it.
    fn write(&self) -> bool {
        let left = self.budget.get();
        self.budget.set(left.saturating_sub(1));
        left > 0
    }
}

impl Word for Dying<'_> {
    fn load(&self, order: Ordering) -> u64 {
        self.word.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        if self.write() {
            self.word.store(value, order);
        }
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        if self.write() {
            self.word.compare_exchange(current, new, ok, err)
        } else {
            Err(self.word.load(Ordering::Relaxed))
        }
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        if self.write() {
            self.word.fetch_add(value, order)
        } else {
            self.word.load(Ordering::Relaxed)
        }
    }
}

/// The ring's words as the dying repairer writes them.
struct DyingRing<'a, const CAP: usize> {
    claim: Dying<'a>,
    cursor: Dying<'a>,
    tomb_end: Dying<'a>,
    life: Dying<'a>,
    stop_seq: Dying<'a>,
    tombs: [Dying<'a>; CAP],
    budget: &'a Cell<u32>,
}

impl<'a, const CAP: usize> DyingRing<'a, CAP> {
    fn new(ring: &'a Ring<CAP>, budget: &'a Cell<u32>) -> Self {
        let d = |word| Dying { word, budget };
        DyingRing {
            claim: d(&ring.claim),
            cursor: d(&ring.cursor),
            tomb_end: d(&ring.tomb_end),
            life: d(&ring.life),
            stop_seq: d(&ring.stop_seq),
            tombs: std::array::from_fn(|i| d(&ring.tombs[i])),
            budget,
        }
    }
}

impl<'a, const CAP: usize> Words for DyingRing<'a, CAP> {
    type W = Dying<'a>;
    fn claim(&self) -> &Dying<'a> {
        &self.claim
    }
    fn cursor(&self) -> &Dying<'a> {
        &self.cursor
    }
    fn tomb_end(&self) -> &Dying<'a> {
        &self.tomb_end
    }
    fn tomb(&self, seq: u64) -> &Dying<'a> {
        &self.tombs[seq as usize % CAP]
    }
    fn lifecycle(&self) -> &Dying<'a> {
        &self.life
    }
    fn stop_seq(&self) -> &Dying<'a> {
        &self.stop_seq
    }
    fn capacity(&self) -> u64 {
        CAP as u64
    }
    fn fence(&self, order: Ordering) {
        // A fence orders the writes after it: none once the budget is spent.
        if self.budget.get() > 0 {
            fence(order);
        }
    }
}

/// The dead producer's entry in the producer table (`ProducerEntry::word`, `start_time`).
struct Entry {
    word: W,
    start_time: W,
}

impl Entry {
    /// ACTIVE, held by the dead producer.
    fn of_the_dead_producer() -> Self {
        Entry {
            word: W::new(owned_word::pack(3, producer_state::ACTIVE, DEAD_PRODUCER)),
            start_time: W::new(u64::from(DEAD_PRODUCER)),
        }
    }
}

/// How a repair treats an entry a dead repairer left REPAIRING.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takeover {
    /// As `repair_dead_producer`: repairs again from what the words say now.
    Repairs,
    /// Control: frees it without repairing, as if the dead repairer had finished.
    Frees,
}

/// `Ring::repair_dead_producer` on the model's entry, as process `me`, the repair running on
/// `words` (the ring's own, or a dying repairer's) with `finish` giving the entry back or
/// freeing it (`false`: the process dies first, leaving REPAIRING). `Some(tombstoned)`: the
/// repair is done; `None`: the entry is not open to a repair (its holder may live, or it is
/// free), or the repair must wait.
fn repair_entry<R: Words>(
    entry: &Entry,
    words: &R,
    me: u32,
    finish: bool,
    takeover: Takeover,
) -> Option<u64> {
    // Acquire: the start time below was written before the word.
    let seen = entry.word.load(Ordering::Acquire);
    // Relaxed: as `repair_dead_producer`.
    let start_time = entry.start_time.load(Ordering::Relaxed);
    if table::producer::holder(&Procs9, seen, start_time) != Holder::Open {
        return None;
    }
    let mine = table::producer::begin_repair(&entry.word, seen, me)?;
    // The pid to give the entry back to: a dead repairer's REPAIRING word names that
    // repairer instead of the producer.
    let dead = if owned_word::state(seen) == producer_state::REPAIRING {
        0
    } else {
        owned_word::owner(seen)
    };
    let repaired = if takeover == Takeover::Frees && dead == 0 {
        Repaired::Done { tombstoned: 0 }
    } else {
        repair_once(words, Step::Shipping, |_| true)
    };
    match repaired {
        Repaired::Wait { .. } => {
            if finish {
                let _ = table::producer::abandon_repair(&entry.word, mine, dead);
            }
            None
        }
        Repaired::Done { tombstoned } => {
            if finish {
                assert!(
                    table::producer::end_repair(&entry.word, mine),
                    "nobody takes a live repairer's entry"
                );
            }
            Some(tombstoned)
        }
    }
}

/// The first repairer (`DEAD_REPAIRER`): takes the entry and dies after `writes` of the
/// repair's writes (0: right after its REPAIRING CAS), before it gives the entry back or
/// frees it.
fn repair_and_die<const CAP: usize>(ring: &Ring<CAP>, entry: &Entry, writes: u32) {
    let budget = Cell::new(writes);
    let words = DyingRing::new(ring, &budget);
    let _ = repair_entry(entry, &words, DEAD_REPAIRER, false, Takeover::Repairs);
}

/// The next single producer (process 3), attaching once the first repairer is dead: as
/// `Producer::attach`'s `take_entry`, it repairs what its dead predecessor left (here, the
/// dead repairer's half-done repair) and takes the freed entry, retrying while the repair
/// waits (a stop or start in progress); then takes the line's position. Returns the position
/// and the cursor the repair left.
fn attach_over_a_dead_repairer<const CAP: usize>(
    ring: &Ring<CAP>,
    entry: &Entry,
    takeover: Takeover,
) -> (u64, u64) {
    loop {
        let _ = repair_entry(entry, ring, 3, true, takeover);
        // Acquire: the repair's Release free, and what it wrote before.
        let freed = entry.word.load(Ordering::Acquire);
        if let Some(taken) = table::producer::take_free(&entry.word, freed, 3) {
            table::producer::publish(&entry.word, taken).expect("the entry is ours");
            break;
        }
        thread::yield_now();
    }
    let repaired_to = cursor(ring);
    (take_position(ring), repaired_to)
}

/// A running ring of two slots: the dead producer published 0, claimed 1 (accepted) and
/// wrote one payload word of it. The first repairer dies after `writes` of its writes
/// (tomb word, tomb bound, cursor: 0 to 3) while the ring stops; the next producer's attach
/// takes the repair over. The stop records 2 (the claim was accepted before the producer
/// died), 1 ends a tombstone, and the next producer takes 2.
fn a_dead_repairer_of_an_accepted_claim_racing_a_stop(writes: u32, takeover: Takeover) {
    model(move || {
        let ring = Arc::new(Ring::<2>::new());
        ring.publish(0, false);
        ring.claim_one(1);
        fixed::begin_write(&*ring);
        // Relaxed: the one payload word written before the producer died.
        ring.slot(1)[0].store(1, Ordering::Relaxed);
        let entry = Arc::new(Entry::of_the_dead_producer());
        let attach = {
            let (ring, entry) = (ring.clone(), entry.clone());
            thread::spawn(move || {
                let first = {
                    let (ring, entry) = (ring.clone(), entry.clone());
                    thread::spawn(move || repair_and_die(&ring, &entry, writes))
                };
                // The first repairer seen dead.
                first.join().unwrap();
                attach_over_a_dead_repairer(&ring, &entry, takeover)
            })
        };
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        let (p, repaired_to) = attach.join().unwrap();
        assert_eq!(
            stop, 2,
            "the dead producer's accepted claim is below the stop"
        );
        assert_eq!(
            p, repaired_to,
            "the next producer took {p}, the repair left the cursor at {repaired_to}"
        );
        assert_eq!(repaired_to, stop, "the repair left the cursor at the stop");
        let (_, tomb_end) = fixed::published(&*ring);
        assert!(fixed::is_tombstone(&*ring, 1, tomb_end), "1 is a tombstone");
        assert!(!fixed::is_tombstone(&*ring, 0, tomb_end), "0 is an event");
        assert_eq!(
            ring.line().reopen(&env(2, true)),
            Ok(stop),
            "reopened at the stop"
        );
        publish_at(&ring, p);
        // Acquire: the word the attach published.
        let word = entry.word.load(Ordering::Acquire);
        assert_eq!(
            (owned_word::state(word), owned_word::owner(word)),
            (producer_state::ACTIVE, 3),
            "the next producer holds the entry"
        );
    });
}

#[test]
fn a_dead_repairer_of_an_accepted_claim_is_taken_over_racing_a_stop() {
    for writes in 0..=3 {
        a_dead_repairer_of_an_accepted_claim_racing_a_stop(writes, Takeover::Repairs);
    }
}

/// A takeover that frees a dead repairer's entry without repairing: when it died before its
/// cursor store, 1 stays unpublished below the stop, under the next producer's position.
#[test]
#[should_panic(expected = "the repair left the cursor at")]
fn control_a_takeover_that_trusts_a_dead_repairer_leaves_a_hole_below_the_stop() {
    for writes in 0..=3 {
        a_dead_repairer_of_an_accepted_claim_racing_a_stop(writes, Takeover::Frees);
    }
}

/// The ring of `stopped_with_a_refused_claim`: the first repairer dies before or after its
/// CAS of the claim back to the stop sequence (`writes` 0 or 1) while a start takes the
/// claim back too; the next producer's attach takes the repair over. Nothing is tombstoned,
/// and the next producer takes 1.
fn a_dead_repairer_of_a_refused_claim_racing_a_start(writes: u32, takeover: Takeover) {
    model(move || {
        let ring = stopped_with_a_refused_claim();
        let entry = Arc::new(Entry::of_the_dead_producer());
        let attach = {
            let (ring, entry) = (ring.clone(), entry.clone());
            thread::spawn(move || {
                let first = {
                    let (ring, entry) = (ring.clone(), entry.clone());
                    thread::spawn(move || repair_and_die(&ring, &entry, writes))
                };
                first.join().unwrap();
                attach_over_a_dead_repairer(&ring, &entry, takeover)
            })
        };
        let started = ring.line().reopen(&env(2, true));
        let (p, repaired_to) = attach.join().unwrap();
        assert_eq!(started, Ok(1), "reopened at the stop sequence");
        assert_eq!(
            p, repaired_to,
            "the next producer took {p}, the repair left the cursor at {repaired_to}"
        );
        assert_eq!(p, 1, "the next producer takes the stop sequence");
        let (_, tomb_end) = fixed::published(&*ring);
        assert_eq!(tomb_end, 0, "a refused claim was tombstoned");
        publish_at(&ring, p);
    });
}

#[test]
fn a_dead_repairer_of_a_refused_claim_is_taken_over_racing_a_start() {
    for writes in 0..=1 {
        a_dead_repairer_of_a_refused_claim_racing_a_start(writes, Takeover::Repairs);
    }
}
