//! Loom models of a fixed-size ring's event protocol (`shmring::fixed`): payload-only slots
//! under a published cursor, the claim checked by copying readers, tombstones apart from
//! the slots. Each model runs the shipping functions (`line::claim_single_fast`,
//! `fixed::*`) on loom's atomics; a payload is two words, so that a torn copy shows. The
//! model ring, its producer and its consumers are in `loom_fixed_ring`, shared with the
//! models of a dead producer's repair (`loom_repair_fixed.rs`).
//!
//! ```text
//! producer                                  required consumer      optional consumer
//! wait for room (required only)             c = cursor (Acquire)   c = cursor (Acquire)
//! claim_single_fast (claim = s + 1)         read s < c in place    copy s, copy_held(s)?
//! begin_write; payload words; publish(s+1)  commit next (Release)  (claim check)
//!
//! repair of a dead producer's claim s: tombstone(s, s + 1) once the producer is gone
//! ```
//!
//! Properties: a required consumer reads every event whole, in order, and skips exactly
//! the tombstones; an optional consumer never hands over a copy holding another lap's
//! bytes or a dead producer's partial write, and takes no event the ring still holds for
//! overwritten because a stop refused a claim. The controls break one step each (the copy
//! checked against the cursor instead of the claim; a repair that moves the cursor
//! without a tomb word; the stop sequence trusted without the lifecycle word) and are
//! expected to fail.

mod loom_env;
mod loom_fixed_ring;
mod loom_word;

use loom_env::env;
use loom_fixed_ring::Ring;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_word::model;

use shmring::fixed;
use shmring::line::{Refused, SeenRunning, Word};
use shmring_layout::{lifecycle, RingState};

/// The cursor check a copying reader must not use: the cursor lags the claim, so a write in
/// progress does not show in it.
fn held_by_cursor<const CAP: usize>(r: &Ring<CAP>, seq: u64) -> bool {
    fence(Ordering::Acquire);
    r.cursor.load(Ordering::Relaxed) <= seq + CAP as u64
}

#[test]
fn a_required_consumer_reads_every_event_whole_across_the_wrap() {
    model(|| {
        let ring = Arc::new(Ring::<2>::new());
        let p = {
            let ring = ring.clone();
            thread::spawn(move || (0..3).for_each(|s| ring.publish(s, true)))
        };
        let got = ring.consume_required(3);
        p.join().unwrap();
        assert_eq!(got, vec![Some(0), Some(1), Some(2)]);
    });
}

fn optional_against_a_lapping_producer(held: fn(&Ring<1>, u64) -> bool) {
    model(move || {
        let ring = Arc::new(Ring::<1>::new());
        let p = {
            let ring = ring.clone();
            thread::spawn(move || (0..3).for_each(|s| ring.publish(s, false)))
        };
        // Each look asserts what it keeps; two looks meet the producer at more points.
        ring.look_optional(held);
        ring.look_optional(held);
        p.join().unwrap();
        assert_eq!(ring.look_optional(held), vec![(2, Some(2))]);
    });
}

#[test]
fn an_optional_copy_checked_against_the_claim_is_never_another_laps() {
    optional_against_a_lapping_producer(fixed::copy_held);
}

#[test]
#[should_panic(expected = "kept another write")]
fn control_an_optional_copy_checked_against_the_cursor_keeps_a_torn_one() {
    optional_against_a_lapping_producer(held_by_cursor);
}

/// A producer publishes 0, claims 1, writes one word of it and dies; a repair tombstones 1
/// once it is gone (as the broker, after the pidfd says so). `tomb_word`: the repair writes
/// the tomb word (false: the control, which moves the cursor alone).
fn a_dead_producers_claim(tomb_word: bool) {
    model(move || {
        let ring = Arc::new(Ring::<2>::new());
        let p = {
            let ring = ring.clone();
            thread::spawn(move || {
                ring.publish(0, true);
                ring.wait_for_room(1);
                ring.claim_one(1);
                fixed::begin_write(&*ring);
                // Relaxed: the one payload word written before the process died.
                ring.slot(1)[0].store(1, Ordering::Relaxed);
            })
        };
        let repair = {
            let ring = ring.clone();
            thread::spawn(move || {
                p.join().unwrap();
                // Acquire: the repair reads the dead producer's claim (what it left).
                let claim = ring.claim.load(Ordering::Acquire);
                let cursor = ring.cursor.load(Ordering::Acquire);
                assert_eq!((cursor, claim), (1, 2));
                if tomb_word {
                    fixed::tombstone(&*ring, cursor, claim);
                } else {
                    fixed::publish(&*ring, claim);
                }
            })
        };
        let optional = ring.look_optional(fixed::copy_held);
        assert!(
            optional.iter().all(|&(s, ev)| ev == Some(s) || s == 1),
            "{optional:?}"
        );
        assert_eq!(ring.consume_required(2), vec![Some(0), None]);
        repair.join().unwrap();
    });
}

#[test]
fn a_dead_producers_partial_write_is_skipped_as_a_tombstone() {
    a_dead_producers_claim(true);
}

#[test]
#[should_panic(expected = "another write")]
fn control_a_repair_without_a_tomb_word_delivers_the_partial_write() {
    a_dead_producers_claim(false);
}

/// The stop sequence trusted without the lifecycle word: a reader that read the claim of
/// the next run's write, past its sequence's slot, but a stop sequence recorded before it.
fn held_by_stop_seq_alone<const CAP: usize>(r: &Ring<CAP>, seq: u64) -> bool {
    fence(Ordering::Acquire);
    let bound = seq + CAP as u64;
    r.claim.load(Ordering::Relaxed) <= bound || r.stop_seq.load(Ordering::Relaxed) <= bound
}

/// Whether `word` is a lifecycle word settled closed (its stop sequence recorded).
fn settled_closed(word: u64) -> bool {
    [RingState::Stopped, RingState::Starting]
        .iter()
        .any(|&s| lifecycle::state(word) == s as u32)
}

/// A ring of two slots, events 0 and 1 published. One thread stops it, starts it and stops
/// it again; the producer claims sequence 2 (into 0's slot) once meanwhile: before the
/// first stop, in the run between, or refused by a stop (the first stop's refused claim, 3,
/// stays in the word until the start takes it back). A reader a whole ring behind copies
/// 0. A copy it keeps is 0's, and a copy made while the ring stayed closed at 2 is kept:
/// the refused claim wrote nothing.
fn a_reader_a_ring_behind_a_refused_claim(held: fn(&Ring<2>, u64) -> bool) {
    model(move || {
        let ring = Arc::new(Ring::<2>::new());
        ring.publish(0, false);
        ring.publish(1, false);
        let lifecycle = {
            let ring = ring.clone();
            thread::spawn(move || {
                let e = env(2, true);
                ring.line().close(&e, RingState::Stopped).expect("stop");
                ring.line().reopen(&e).expect("start");
                ring.line()
                    .close(&e, RingState::Stopped)
                    .expect("stop again");
            })
        };
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let e = env(1, true);
                let claimed =
                    ring.line()
                        .claim_single(&e, &mut SeenRunning::default(), 2, 1, || {
                            fence(Ordering::SeqCst)
                        });
                match claimed {
                    Ok(()) => {
                        fixed::begin_write(&*ring);
                        for w in ring.slot(2) {
                            // Relaxed: the payload, published by the cursor.
                            w.store(2, Ordering::Relaxed);
                        }
                        fixed::publish(&*ring, 3);
                    }
                    // Refused: before the first stop's record, or during either stop.
                    Err(Refused::Closed) => {}
                    Err(Refused::Deleted) => unreachable!("nobody removes the ring"),
                }
            })
        };
        // Acquire: as `closed_at`'s load.
        let before = ring.life.load(Ordering::Acquire);
        let [a, b] = ring.slot(0);
        // Relaxed: a racy copy, checked below.
        let copy = (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
        let kept = held(&ring, 0);
        let after = ring.life.load(Ordering::Acquire);
        if kept {
            assert_eq!(copy, (0, 0), "an optional copy of 0 kept another write");
        }
        // One word (generations make each unique) before and after: closed all along. A
        // stop sequence read after it is that close's or a later one's (they only grow).
        if before == after && settled_closed(before) && ring.stop_seq.load(Ordering::Acquire) <= 2 {
            assert!(
                kept,
                "a copy made while the ring stayed closed at 2 was dropped"
            );
        }
        lifecycle.join().unwrap();
        producer.join().unwrap();
    });
}

#[test]
fn a_claim_refused_by_a_stop_overwrites_nothing_for_a_reader_a_ring_behind() {
    a_reader_a_ring_behind_a_refused_claim(fixed::copy_held);
}

#[test]
#[should_panic(expected = "kept another write")]
fn control_a_stop_sequence_trusted_without_the_lifecycle_keeps_the_next_runs_write() {
    a_reader_a_ring_behind_a_refused_claim(held_by_stop_seq_alone);
}
