//! Loom models of the repair of a dead single producer on a fixed-size ring whose claim is
//! its publish (the design in `loom_folded.rs`'s module comment, claim guards in
//! `loom_folded_guard.rs`; the model ring in `loom_folded_ring`). The repair is the
//! client's `fixed::repair_dead`; the controls are the model's variants of it (`repair`
//! below, each with one step changed).
//!
//! What a dead producer can leave, and what the repair does with it:
//!
//! - a publish that died before its cursor store: a slot written, nothing claimed. Nothing
//!   to repair; the next producer writes that sequence again.
//! - a publish that died after its cursor store, its claim undecided: the store counts as
//!   any store the line reads does. While the line runs the event is published (its
//!   payload was written before the store); a stop that read the cursor before the store
//!   refused it, and the start takes it back ((t3)), or the repair does while the line
//!   stays closed, with the same CAS to the stop sequence.
//! - a claim guard's open claim: `pending` at its first sequence, its claim in the cursor,
//!   its slots perhaps half written. Accepted (the line runs, or its stop read it), the
//!   sequences from `pending` up to the cursor (the stop sequence while closed) become
//!   tombstones, published by the Release store that ends `pending`, as a dropped guard's.
//!   Refused, it wrote nothing that counts: the record is ended with no tombstones (left in
//!   place it would hold consumers below it in the next run: a refused guard's producer ends
//!   it itself, a dead one cannot), and the cursor taken back as above.
//!
//! ```text
//! repair (the caller holds the dead producer's entry, so no producer attaches meanwhile)
//! fence(SeqCst)                  the dead producer's stores before a stop's (s3)
//! life                 (Acquire) Running: open; Stopped | Draining | Deleted: closed;
//!                                Stopping | Starting: try later (the stop or start decides)
//! pend = pending       (Acquire) the dead producer's stores reach the repairer through its
//! c = cursor           (Acquire)   death; a start's take-back through the Running read
//! end = c, or min(c, stop_seq) while closed
//! pend < end: fence(Release); tombs[pend..end]; tomb_end = end
//! pend set: pending = NONE (Release): publishes the tombstones
//! c > end: CAS cursor c -> end (SeqCst, as (t3): a start writes the same value)
//! ```
//!
//! The first fence is the stopper's partner: a producer that died between its cursor store
//! and its own fence ((p3)) ordered nothing of its own before the stop, and only its death,
//! which the repairer saw before the fence, carries the store there (the fixed-size repair
//! before layout 13 had the same gap, and fenced since).
//!
//! The models: a guard's claim racing a stop, its producer dying after half a write (the
//! claim accepted), before it takes a refused record back, or right after its cursor store
//! (undecided: the stop's record is its fate), repaired once it is dead; the
//! repair of a refused guard racing the start that takes its cursor store back; a publish
//! dying after its cursor store while a stop runs. Each then starts the ring (if stopped),
//! has the next producer take the position (`Line::take_position`, no look-back: nothing
//! is claimed without being published here) and publish one event, and checks with a
//! consumer that polls during the repair and after: a sequence is an event or a
//! tombstone, never both and never a half-written slot; the next producer takes where the
//! repair left the line (no sequence reused, none skipped); nothing stalls consumers. A
//! last model has the next producer attach (`Line::take_position` on the cursor) while a
//! start takes a refused store back, with nothing to repair: it takes the stop sequence,
//! and the consumer never gets the refused bytes.
//!
//! Controls, each one step changed: the record left in place (consumers stall below the
//! next producer's event); the stop sequence ignored while closed (a refused guard's
//! claim tombstoned, the next producer reusing its sequence); the cursor read before the
//! lifecycle word (a claim the start took back tombstoned as the next run's); no first
//! fence (a guard dead before its fence tombstoned while the stop refuses it); the next
//! producer taking the raw cursor as its position (it skips the stop sequence, and the
//! consumer gets the refused bytes there).
//!
//! The last models have a first repairer die part-way (after its first tomb word, before it
//! ends the record, after it), and its takeover, racing a stop, repair the claim again: the
//! same range, the same tomb words, `tomb_end` never lowered, the record ended once.
//!
//! Not checked here: the CAS that takes a refused store back (every model starts the ring
//! before the next producer, and the start's (t3) takes it back too, so a repair without
//! the CAS passes them); the wrap gate before tombstones (the models' ring never wraps; a
//! repair's scan reads a bound below the head, which only holds producers back); the write
//! horizon raised over the tombstones for copying readers (the client raises it before the
//! tomb words, no copying reader here); and a record below `end` by more than a claim's
//! largest size (another process wrote it: `fixed::repair_dead` bounds the range).

mod loom_env;
mod loom_folded_ring;
mod loom_word;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_env::env;
use loom_folded_ring::{
    assert_reached, poll_tombs, reached, spawn_lifecycle, store_and_die, witness, Guard, Reads,
    Ring, NONE, TOMB,
};
use loom_word::model;

use shmring::line::{SeenRunning, Word};
use shmring_layout::{lifecycle, RingState};

/// Slots in the models' ring: more than their events, so that no write wraps (the wrap gate
/// is not modelled here: see the module comment).
const CAP: usize = 4;

/// The repair a model runs: the design's, or a control with one step changed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// `repair` as the module comment says.
    Design,
    /// Control: the record of an open guard left in place.
    NoReset,
    /// Control: the raw cursor as the end while closed (the stop sequence ignored).
    RawCursor,
    /// Control: the cursor read before the lifecycle word.
    CursorFirst,
    /// Control: no SeqCst fence before the lifecycle word.
    NoFence,
}

/// One try of the repair. `None`: a stop or a start is in progress, try later. `Some(n)`:
/// done, `n` sequences tombstoned.
fn repair(ring: &Ring<CAP>, step: Step) -> Option<u64> {
    if step == Step::Design {
        // The client's repair (the models' ring never wraps: the gate always passes).
        return match shmring::fixed::repair_dead(ring, |_| true) {
            shmring::fixed::Repaired::Done { tombstoned } => Some(tombstoned),
            shmring::fixed::Repaired::Wait { .. } => None,
        };
    }
    // The controls: the design's steps with one changed (the client's, as the module
    // comment's table says, otherwise).
    if step != Step::NoFence {
        // SeqCst fence: pairs with a stopper's heavy fence ((s2)). The dead producer may have
        // died between its cursor store and its own fence ((p3)); its death happens before
        // this fence, so either this fence comes first and the stop reads that store, or the
        // stop's does and the lifecycle load below reads Stopping (as `fixed::repair_dead`).
        fence(Ordering::SeqCst);
    }
    // The control reads the cursor first. Acquire: as below.
    let early = (step == Step::CursorFirst).then(|| ring.cursor.load(Ordering::Acquire));
    // Acquire (`Line::life`): pairs with the Release CAS that settled the state, so a
    // closed state comes with its stop sequence, a Running that a start published with the
    // start's take-back ((t3)).
    let closed = match ring.line().life().state {
        Some(RingState::Running) => false,
        Some(RingState::Stopped | RingState::Draining | RingState::Deleted) => true,
        _ => return None,
    };
    // Acquire: the dead producer's stores reach the repairer through its death (the join);
    // only it (and this repair) writes `pending`.
    let pend = ring.pending.load(Ordering::Acquire);
    // Acquire: after the lifecycle word, so a take-back the Running word published is seen.
    let c = early.unwrap_or_else(|| ring.cursor.load(Ordering::Acquire));
    let end = if closed && step != Step::RawCursor {
        // Relaxed: ordered by the Acquire load of the settled word.
        c.min(ring.stop_seq.load(Ordering::Relaxed))
    } else {
        c
    };
    let from = pend.min(end);
    if from < end {
        // Release fence, as `fixed::tombstone`'s: for copying readers of the tomb words.
        fence(Ordering::Release);
        for s in from..end {
            // Relaxed: published by the Release store of `pending` below.
            ring.tombs[s as usize % CAP].store(s, Ordering::Relaxed);
        }
        // Relaxed: published by the Release store of `pending` below.
        ring.tomb_end.store(end, Ordering::Relaxed);
    }
    if pend != NONE && step != Step::NoReset {
        // Release: pairs with a consumer's Acquire load of `pending`; ends the guard's
        // claim, its tombstones published.
        ring.pending.store(NONE, Ordering::Release);
    }
    if c > end {
        // A refused store, taken back to the stop sequence (a start's (t3) writes the same
        // value; no producer writes the word meanwhile). SeqCst: as (t3). Relaxed on
        // failure: the value is not used.
        let _ = ring
            .cursor
            .compare_exchange(c, end, Ordering::SeqCst, Ordering::Relaxed);
    }
    Some(end - from)
}

/// The repair, tried until it is done (a broker's later sweep, here at once).
fn repair_until_done(ring: &Ring<CAP>, step: Step) -> u64 {
    loop {
        match repair(ring, step) {
            Some(tombstoned) => return tombstoned,
            None => thread::yield_now(),
        }
    }
}

/// The ring started if it is stopped, the next producer (process 3) takes the position
/// and publishes one event there, marked 9; returns the position.
fn next_producer_publishes(ring: &Ring<CAP>) -> u64 {
    if ring.line().life().state != Some(RingState::Running) {
        ring.line().reopen(&env(2, true)).expect("start");
    }
    let p = ring
        .line()
        .take_position(&env(3, true), |_| true, || fence(Ordering::SeqCst))
        .expect("take the position");
    ring.publish(p, 9, &mut SeenRunning::default(), None)
        .0
        .expect("the next producer's publish");
    p
}

/// A ring with event 0 published (mark 0).
fn one_published() -> Arc<Ring<CAP>> {
    let ring = Ring::<CAP>::new();
    let [a, b] = &ring.slots[0];
    a.store(0, Ordering::Relaxed);
    b.store(0, Ordering::Relaxed);
    ring.cursor.store(1, Ordering::Relaxed);
    Arc::new(ring)
}

/// `ring` (event 0 published) stopped at 1 with a refused store of 2 left in the cursor, as
/// a producer that died after a stop refused its claim of 1 leaves it.
fn stopped_with_a_refused_store(ring: &Ring<CAP>) {
    ring.cursor.store(2, Ordering::Relaxed);
    ring.stop_seq.store(1, Ordering::Relaxed);
    ring.life.store(
        lifecycle::pack(2, RingState::Stopped as u32, 0),
        Ordering::Relaxed,
    );
}

/// Event 0 published. The producer opens a guard of 1 while another process stops the
/// ring; accepted, it writes half of 1's payload and dies; refused, it dies before it takes
/// its record back. The repair runs once it is dead (while the stop may still be closing);
/// a consumer polls meanwhile. Then the ring starts, the next producer publishes at the
/// position, and the consumer polls again: 0, then 1 as a tombstone iff the stop accepted
/// the guard, then the next producer's event at the stop sequence. Some interleaving
/// accepts the guard and some refuses it.
fn a_dead_guard_repaired_racing_a_stop(step: Step, dies: Dies) {
    let (accepted_once, refused_once) = (witness(), witness());
    let (accepted_seen, refused_seen) = (accepted_once.clone(), refused_once.clone());
    model(move || {
        let ring = one_published();
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || match dies {
                Dies::Decided => {
                    // `NoReset`: a refused guard's producer dies before it takes its record
                    // back.
                    let accepted = ring
                        .claim_guard(1, 1, &mut SeenRunning::default(), Guard::NoReset)
                        .0
                        .is_ok();
                    if accepted {
                        // Relaxed: one payload word, never published as an event.
                        ring.slots[1][0].store(1, Ordering::Relaxed);
                    }
                    Some(accepted)
                }
                Dies::AfterStore => {
                    // Release, then the fence: as `Ring::claim_guard`'s record.
                    ring.pending.store(1, Ordering::Release);
                    fence(Ordering::Release);
                    store_and_die(&ring, 1);
                    None
                }
            })
        };
        let stopper = spawn_lifecycle(&ring, false);
        let repairer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let accepted = producer.join().unwrap();
                (accepted, repair_until_done(&ring, step))
            })
        };
        let (mut next, mut got) = (0, Vec::new());
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        let stop = stopper.join().unwrap();
        let (decided, tombstoned) = repairer.join().unwrap();
        // An undecided claim's fate is the stop's record.
        let accepted = decided.unwrap_or(stop == 2);
        assert_eq!(stop, if accepted { 2 } else { 1 }, "the stop's record");
        if accepted {
            &accepted_once
        } else {
            &refused_once
        }
        .store(true, std::sync::atomic::Ordering::Relaxed);
        let p = next_producer_publishes(&ring);
        assert_eq!(
            p, stop,
            "the next producer takes {p}, the stop was at {stop}"
        );
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        let mut want = vec![(0, 0)];
        if accepted {
            want.push((1, TOMB));
        }
        want.push((stop, 9));
        assert_eq!(
            got, want,
            "delivered {got:?} where {want:?} were published ({tombstoned} tombstoned)"
        );
    });
    assert_reached(&accepted_seen, "accepted the guard");
    assert_reached(&refused_seen, "refused the guard");
}

/// Where the guard's producer dies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dies {
    /// Once its claim is decided (accepted: after half a write; refused: before it takes
    /// its record back).
    Decided,
    /// Right after its claim's cursor store, before its light fence: undecided, the stop's
    /// record its fate.
    AfterStore,
}

#[test]
fn a_dead_guard_repaired_racing_a_stop_is_a_tombstone_iff_accepted() {
    a_dead_guard_repaired_racing_a_stop(Step::Design, Dies::Decided);
}

#[test]
fn a_guard_dead_before_its_fence_repaired_racing_a_stop_is_a_tombstone_iff_the_stop_read_it() {
    a_dead_guard_repaired_racing_a_stop(Step::Design, Dies::AfterStore);
}

/// The record left in place: after a refused guard, consumers stall at 1, below the next
/// producer's event.
#[test]
#[should_panic(expected = "were published")]
fn control_a_repair_that_leaves_a_dead_guards_record_stalls_the_consumers() {
    a_dead_guard_repaired_racing_a_stop(Step::NoReset, Dies::Decided);
}

/// The stop sequence ignored: a refused guard's claim is tombstoned, and the next producer
/// publishes at its sequence too.
#[test]
#[should_panic(expected = "were published")]
fn control_a_repair_that_ignores_the_stop_sequence_tombstones_a_refused_guard() {
    a_dead_guard_repaired_racing_a_stop(Step::RawCursor, Dies::Decided);
}

/// Without the repair's fence: it reads Running and the dead guard's cursor store, and
/// tombstones 1, while the stop reads the cursor before the store and records 1; the next
/// producer publishes at 1 too.
#[test]
#[should_panic(expected = "were published")]
fn control_a_repair_without_its_fence_tombstones_a_guard_the_stop_refuses() {
    a_dead_guard_repaired_racing_a_stop(Step::NoFence, Dies::AfterStore);
}

/// A ring of four slots stopped at 1 (0 published) whose dead producer's guard of 1 the
/// stop refused: its record (1) in `pending`, its claim (2) in the cursor. The repair races
/// the start, which takes the cursor store back itself; the next producer publishes once
/// both are done, while a consumer polls. Nothing is tombstoned; the consumer gets 0 and
/// the next producer's event at 1.
fn a_refused_guard_repaired_racing_a_start(step: Step) {
    model(move || {
        let ring = one_published();
        ring.pending.store(1, Ordering::Relaxed);
        stopped_with_a_refused_store(&ring);
        let repairer = {
            let ring = ring.clone();
            thread::spawn(move || repair_until_done(&ring, step))
        };
        let starter = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(2, true)).expect("start"))
        };
        let (mut next, mut got) = (0, Vec::new());
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        let tombstoned = repairer.join().unwrap();
        starter.join().unwrap();
        let p = next_producer_publishes(&ring);
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        assert_eq!(
            got,
            vec![(0, 0), (1, 9)],
            "delivered {got:?} where 0 and the next producer's 1 were published ({tombstoned} \
             tombstoned, the next producer at {p})"
        );
    });
}

#[test]
fn a_refused_guard_repaired_racing_the_start_that_takes_it_back() {
    a_refused_guard_repaired_racing_a_start(Step::Design);
}

/// The cursor read first: the repair reads the refused store (2), the start takes it back
/// and runs, the repair reads Running and tombstones 1, the next run's first sequence.
#[test]
#[should_panic(expected = "were published")]
fn control_a_repair_that_reads_the_cursor_first_tombstones_the_next_runs_first_event() {
    a_refused_guard_repaired_racing_a_start(Step::CursorFirst);
}

/// Event 0 published. The producer publishes 1 (its payload, then its claim on the cursor)
/// while another process stops the ring, and dies right after its cursor store, before
/// (p4) or (p5) decides. The repair runs once it is dead; a consumer polls meanwhile. The
/// event is delivered iff the stop read the store (its record is 2); then the ring starts
/// and the next producer publishes at the stop sequence. Some interleaving has the stop
/// refuse the store (read the cursor before it).
fn a_publish_dying_after_its_store_repaired_racing_a_stop(step: Step) {
    let refused = witness();
    let refused_seen = refused.clone();
    model(move || {
        let ring = one_published();
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let [a, b] = &ring.slots[1];
                // Relaxed, both: published by the claim's store, after the Release fence.
                a.store(1, Ordering::Relaxed);
                b.store(1, Ordering::Relaxed);
                fence(Ordering::Release);
                store_and_die(&ring, 1)
            })
        };
        let stopper = spawn_lifecycle(&ring, false);
        let repairer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let stored = producer.join().unwrap();
                (stored, repair_until_done(&ring, step))
            })
        };
        let (mut next, mut got) = (0, Vec::new());
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        let stop = stopper.join().unwrap();
        let (stored, _) = repairer.join().unwrap();
        if stored && stop == 1 {
            reached(&refused);
        }
        let p = next_producer_publishes(&ring);
        assert_eq!(
            p, stop,
            "the next producer takes {p}, the stop was at {stop}"
        );
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        let mut want = vec![(0, 0)];
        if stop == 2 {
            want.push((1, 1));
        }
        want.push((stop, 9));
        assert_eq!(got, want, "delivered {got:?} where {want:?} were published");
    });
    assert_reached(&refused_seen, "refused the store");
}

#[test]
fn a_publish_dying_after_its_store_is_delivered_iff_the_stop_read_it() {
    a_publish_dying_after_its_store_repaired_racing_a_stop(Step::Design);
}

/// How the next producer takes its position.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Take {
    /// `Line::take_position` on the cursor ((a1) to (a4) in `line`), no look-back.
    Shipping,
    /// Control: the cursor word itself.
    RawCursor,
}

/// A ring of four slots stopped at 1 (0 published) after its dead producer's publish of 1
/// was refused: its bytes `(1, 1)` in the slot, its cursor store (2) in the word, and
/// nothing to repair. Another process starts the ring while the next producer attaches
/// (takes the position) and publishes one event (marked 9, again once the ring runs if
/// refused), and a consumer polls meanwhile and once everyone is done. The next producer
/// takes 1 and the consumer gets 0 and that event: never the refused bytes, no sequence
/// skipped.
fn a_producer_attaching_racing_the_start_after_a_refusal(take: Take) {
    model(move || {
        let ring = one_published();
        let [a, b] = &ring.slots[1];
        a.store(1, Ordering::Relaxed);
        b.store(1, Ordering::Relaxed);
        stopped_with_a_refused_store(&ring);
        let starter = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(2, true)).expect("start"))
        };
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let p = match take {
                    Take::Shipping => ring
                        .line()
                        .take_position(&env(3, true), |_| true, || fence(Ordering::SeqCst))
                        .expect("take the position"),
                    // SeqCst: as `take_position`'s store.
                    Take::RawCursor => ring.cursor.load(Ordering::SeqCst),
                };
                let mut seen = SeenRunning::default();
                while ring.publish(p, 9, &mut seen, None).0.is_err() {
                    ring.wait_running();
                }
                p
            })
        };
        let (mut next, mut got) = (0, Vec::new());
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        starter.join().unwrap();
        let p = producer.join().unwrap();
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        assert_eq!(
            (p, got.as_slice()),
            (1, [(0, 0), (1, 9)].as_slice()),
            "the next producer took {p} and the consumer got {got:?}, where 0 and the next \
             producer's 1 were published"
        );
    });
}

#[test]
fn a_producer_attaching_racing_the_start_after_a_refusal_takes_the_stop_sequence() {
    a_producer_attaching_racing_the_start_after_a_refusal(Take::Shipping);
}

/// The cursor itself: before the start takes the refused store back, the next producer
/// takes 2, and the consumer gets the refused bytes of 1.
#[test]
#[should_panic(expected = "were published")]
fn control_a_producer_taking_the_raw_cursor_skips_the_stop_sequence() {
    a_producer_attaching_racing_the_start_after_a_refusal(Take::RawCursor);
}

/// How far a first repairer got before it died (its takeover then repairs the claim again).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum DiedAt {
    /// After the horizon and the first tomb word.
    FirstTomb,
    /// After every tomb word and `tomb_end`, before it ended the record.
    BeforeTheEnd,
    /// After it ended the record (the repair done, its entry not yet freed).
    AfterTheEnd,
}

/// Event 0 published; a dead producer's guard of 1 and 2 accepted while the ring ran (its
/// record at 1, its claim of 3 in the cursor, half of 1's payload written). A first
/// repairer died part-way (`died`); its takeover (the client's `fixed::repair_dead`, run
/// to the end) races a stop, and a consumer polls meanwhile. Then the ring starts, the next
/// producer publishes at the position, and the consumer polls again: event 0, 1 and 2 as
/// tombstones, then the next producer's event at 3. The takeover computes the same range
/// again: the same tomb words, `tomb_end` never lowered, the record ended once.
fn a_repair_taken_over_after_its_repairer_died(died: DiedAt) {
    model(move || {
        let ring = one_published();
        ring.horizon.store(3, Ordering::Relaxed);
        ring.pending.store(1, Ordering::Relaxed);
        ring.cursor.store(3, Ordering::Relaxed);
        ring.slots[1][0].store(1, Ordering::Relaxed);
        // The first repairer's steps, as `fixed::tombstone_pending` makes them, cut short.
        shmring::fixed::cover(&*ring, 3);
        // Relaxed: as `tombstone_pending`'s, published by the end of the record.
        ring.tombs[1].store(1, Ordering::Relaxed);
        if died != DiedAt::FirstTomb {
            ring.tombs[2].store(2, Ordering::Relaxed);
            ring.tomb_end.store(3, Ordering::Relaxed);
        }
        if died == DiedAt::AfterTheEnd {
            shmring::fixed::end_pending(&*ring);
        }
        let stopper = spawn_lifecycle(&ring, false);
        let takeover = {
            let ring = ring.clone();
            thread::spawn(move || repair_until_done(&ring, Step::Design))
        };
        let (mut next, mut got) = (0, Vec::new());
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        let stop = stopper.join().unwrap();
        let tombstoned = takeover.join().unwrap();
        assert_eq!(stop, 3, "the stop's record: the guard was accepted");
        let p = next_producer_publishes(&ring);
        poll_tombs(&ring, Reads::Both, &mut next, &mut got);
        assert_eq!(
            got,
            vec![(0, 0), (1, TOMB), (2, TOMB), (3, 9)],
            "delivered {got:?} ({tombstoned} tombstoned by the takeover, the next producer at {p})"
        );
    });
}

#[test]
fn a_repair_taken_over_after_its_first_tomb_word_tombstones_the_same_range() {
    a_repair_taken_over_after_its_repairer_died(DiedAt::FirstTomb);
}

#[test]
fn a_repair_taken_over_before_it_ended_the_record_tombstones_the_same_range() {
    a_repair_taken_over_after_its_repairer_died(DiedAt::BeforeTheEnd);
}

#[test]
fn a_repair_taken_over_after_it_ended_the_record_does_nothing_more() {
    a_repair_taken_over_after_its_repairer_died(DiedAt::AfterTheEnd);
}
