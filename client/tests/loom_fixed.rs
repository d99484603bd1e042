//! Loom models of a fixed-size ring's event protocol (`shmring::fixed`): payload-only slots
//! under a published cursor, the claim checked by copying readers, tombstones apart from
//! the slots. Each model runs the shipping functions (`line::claim_single_fast`,
//! `fixed::*`) on loom's atomics; a payload is two words, so that a torn copy shows.
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
mod loom_word;

use loom_env::env;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};

use shmring::fixed::{self, Words};
use shmring::line::{self, Fast, Line, Refused, SeenRunning, Word};
use shmring_layout::{lifecycle, RingState};

/// A ring of `CAP` slots of two payload words each.
struct Ring<const CAP: usize> {
    claim: W,
    cursor: W,
    tomb_end: W,
    life: W,
    stop_seq: W,
    tombs: [W; CAP],
    slots: [[W; 2]; CAP],
    /// The required consumer's position (0 when the model has none).
    next: W,
}

impl<const CAP: usize> Words for Ring<CAP> {
    type W = W;
    fn claim(&self) -> &W {
        &self.claim
    }
    fn cursor(&self) -> &W {
        &self.cursor
    }
    fn tomb_end(&self) -> &W {
        &self.tomb_end
    }
    fn tomb(&self, seq: u64) -> &W {
        &self.tombs[seq as usize % CAP]
    }
    fn lifecycle(&self) -> &W {
        &self.life
    }
    fn stop_seq(&self) -> &W {
        &self.stop_seq
    }
    fn capacity(&self) -> u64 {
        CAP as u64
    }
    fn fence(&self, order: Ordering) {
        fence(order)
    }
}

impl<const CAP: usize> Ring<CAP> {
    fn new() -> Self {
        Ring {
            claim: W::new(0),
            cursor: W::new(0),
            tomb_end: W::new(0),
            life: W::new(lifecycle::pack(0, RingState::Running as u32, 0)),
            stop_seq: W::new(0),
            // No sequence is a tombstone of slot k before the first lap (`u64::MAX`).
            tombs: std::array::from_fn(|_| W::new(u64::MAX)),
            slots: std::array::from_fn(|_| [W::new(u64::MAX), W::new(u64::MAX)]),
            next: W::new(0),
        }
    }

    /// The sequence line over the model's words (one-event claims).
    fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.life,
            stop_seq: &self.stop_seq,
            single: true,
            max_claim: 1,
        }
    }

    fn slot(&self, seq: u64) -> &[W; 2] {
        &self.slots[seq as usize % CAP]
    }

    /// The single producer's claim of `seq`, as `Producer::claim_single` (no stopper here:
    /// the light fence stands for the membarrier pair, which the line models cover).
    fn claim_one(&self, seq: u64) {
        let fast = line::claim_single_fast(
            &self.claim,
            &self.life,
            &mut SeenRunning::default(),
            seq,
            1,
            || {},
        );
        assert_eq!(fast, Fast::Accepted);
    }

    /// Wait until the required consumer passed `seq - CAP` (the wrap gate).
    fn wait_for_room(&self, seq: u64) {
        // Acquire: pairs with the consumer's Release commit; its reads of the slot are done.
        while self.next.load(Ordering::Acquire) + (CAP as u64) <= seq {
            thread::yield_now();
        }
    }

    /// Claim, write and publish `seq` (payload words `seq`, `seq`). As `Producer::claim_blocking`
    /// on a fixed-size ring: the wrap gate first, then the claim (a claim says its slot may
    /// be being written).
    fn publish(&self, seq: u64, gated: bool) {
        if gated {
            self.wait_for_room(seq);
        }
        self.claim_one(seq);
        fixed::begin_write(self);
        for w in self.slot(seq) {
            // Relaxed: the payload (plain bytes in the ring), published by the cursor.
            w.store(seq, Ordering::Relaxed);
        }
        fixed::publish(self, seq + 1);
    }

    /// A required consumer: read every published event in place, in order, until `end`;
    /// returns what it read (`None`: a tombstone).
    fn consume_required(&self, end: u64) -> Vec<Option<u64>> {
        let mut got = Vec::new();
        let mut next = 0;
        while next < end {
            let (cursor, tomb_end) = fixed::published(self);
            if cursor == next {
                thread::yield_now();
                continue;
            }
            for s in next..cursor {
                if fixed::is_tombstone(self, s, tomb_end) {
                    got.push(None);
                    continue;
                }
                let [a, b] = self.slot(s);
                // Relaxed: ordered by the Acquire cursor load; the gate keeps the slot.
                let (a, b) = (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
                assert_eq!((a, b), (s, s), "a required read of {s} saw another write");
                got.push(Some(a));
            }
            next = cursor;
            // Release: the commit the producers' wrap gate reads.
            self.next.store(next, Ordering::Release);
        }
        got
    }

    /// An optional consumer's one look: copy every event the cursor shows that the ring may
    /// still hold, and keep the copies `held` says are whole. Returns the kept events.
    fn look_optional(&self, held: impl Fn(&Self, u64) -> bool) -> Vec<(u64, Option<u64>)> {
        let (cursor, tomb_end) = fixed::published(self);
        let mut kept = Vec::new();
        for s in cursor.saturating_sub(CAP as u64)..cursor {
            let tomb = fixed::is_tombstone(self, s, tomb_end);
            let [a, b] = self.slot(s);
            // Relaxed: a racy copy, checked below.
            let (a, b) = (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
            if !held(self, s) {
                continue;
            }
            if tomb {
                kept.push((s, None));
            } else {
                assert_eq!((a, b), (s, s), "an optional copy of {s} kept another write");
                kept.push((s, Some(a)));
            }
        }
        kept
    }
}

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
