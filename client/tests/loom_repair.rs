//! Loom models of the repair of an unattributed hole (`Ring::repair_unattributed` in
//! `client/src/repair.rs`) racing a live producer's claim: the shipping decision
//! (`table::producer::unattributed_hole`), the shipping claim records
//! (`table::producer::{announce_claim, record_claim, clear_claim}`), the shipping claim
//! (`line::Line::claim_multi`) and the shipping per-sequence step (`table::tombstone`), on
//! loom's atomics through the `Word` trait.
//!
//! A producer that died between announcing a claim (`in_flight = IN_FLIGHT_CLAIMING`) and
//! recording its sequence left a hole nobody can name. The repair marks every unpublished
//! sequence below the head that no live producer holds. A live producer claims like this
//! (`Producer::claim_blocking`):
//!
//! ```text
//! live producer                                  repair (unattributed_hole)
//! in_flight = CLAIMING          (Relaxed)        head = claimed()           (SeqCst)
//! c = claim.fetch_add(n)        (SeqCst)         held = every live in_flight (Acquire)
//! in_flight_len = n             (Relaxed)               and in_flight_len   (Relaxed)
//! in_flight = c + 1             (Release)        for s in ..head not held:
//! stamp[s] = s | WRITING; payload                    tombstone(s)  (one CAS of the stamp)
//! stamp[s] = s                  (Release)
//! in_flight = 0                 (Release)
//! ```
//!
//! Property: every sequence the live producer publishes ends published, and the repair
//! never reports it repaired (consumers could skip it).
//!
//! Passing cases: the shipping code, for a claim of one sequence and of two (a batch), and
//! the single-producer model below.
//!
//! Controls, each a small local variant of one step, each required to lose the claim:
//! - `control_repair_producers_first`: the repair reads the producer table before the
//!   head. A claim lands in between: its sequence is below the head, yet the producer held
//!   nothing when the repair looked.
//! - `control_repair_ignoring_len`: the repair leaves only a claim's first sequence alone;
//!   the rest of a batch is marked.
//! - `control_record_relaxed`: the producer records `in_flight` Relaxed; a repair that reads
//!   the new `in_flight` may read the previous (zero) length, leaving the batch unheld.
//! - `control_clear_relaxed`: the producer clears `in_flight` Relaxed, paired with the
//!   two-store tombstone the stamp CAS replaced (`control_tombstone_two_stores`: load the
//!   stamp, then store the flag and the stamp). A repair that reads the clear is not
//!   guaranteed to see the stamp before it and overwrites a published event. With the
//!   shipping CAS the stale stamp makes the CAS fail instead, so the Release clear is what
//!   keeps a repair that reads stamps with plain loads correct; the model shows both.
//!
//! A second model, of a single-producer ring: the producer dies between its claim's store
//! and its light fence ((p2) and (p3) in `line`) while a stop runs, and the repair
//! (`table::producer::single_hole_decided`, then `unattributed_hole`) marks the claim a
//! hole exactly when the stop's record accepts it. Its control, without the SeqCst fence
//! `single_hole_decided` issues first, marks a claim the stop refused (the repair read
//! Running and the dead producer's position; the stop read the position before it).

mod loom_env;
mod loom_word;

use loom::sync::atomic::{fence, AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_env::env;
use loom_word::{model, W};
use shmring::line::{Line, Word};
use shmring::table::{self, Tombstone};
use shmring_layout::{
    lifecycle, RingState, IN_FLIGHT_CLAIMING, STAMP_EMPTY, STAMP_TOMBSTONE, STAMP_WRITING,
};

const SLOTS: usize = 4;
const CAPACITY: u64 = SLOTS as u64;

/// Which steps run a control variant instead of the shipping code.
#[derive(Clone, Copy, Default)]
struct Controls {
    repair_producers_first: bool,
    repair_ignoring_len: bool,
    record_relaxed: bool,
    clear_relaxed: bool,
}

struct Ring {
    claim: W,
    lifecycle: W,
    stop_seq: W,
    stamps: [W; SLOTS],
    /// Only the two-store control tombstone writes these.
    flags: [AtomicU32; SLOTS],
    /// Producer entries: 0 is the dead producer, 1 the live one.
    in_flight: [W; 2],
    in_flight_len: [W; 2],
}

impl Ring {
    /// The dead producer took sequence 0 and died before recording it: a hole.
    fn with_unattributed_hole() -> Self {
        Ring {
            claim: W::new(1),
            lifecycle: W::new(lifecycle::pack(0, RingState::Running as u32, 0)),
            stop_seq: W::new(0),
            stamps: std::array::from_fn(|_| W::new(STAMP_EMPTY)),
            flags: std::array::from_fn(|_| AtomicU32::new(0)),
            in_flight: [W::new(IN_FLIGHT_CLAIMING), W::new(0)],
            in_flight_len: [W::new(0), W::new(0)],
        }
    }

    fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.lifecycle,
            stop_seq: &self.stop_seq,
            single: false,
            max_claim: CAPACITY / 2,
            lone: &shmring::line::NoLone,
        }
    }

    /// The same words as a single-producer line.
    fn single_line(&self) -> Line<'_, W> {
        Line {
            single: true,
            ..self.line()
        }
    }

    /// `Producer::publish` (n = 1) or `publish_batch` of the live producer (entry 1).
    /// Returns its first sequence.
    fn publish(&self, ctl: Controls, n: u64) -> u64 {
        let (me, len) = (&self.in_flight[1], &self.in_flight_len[1]);
        table::producer::announce_claim(me);
        let c = self.line().claim_multi(n).expect("the line is open");
        if ctl.record_relaxed {
            control_record_relaxed(me, len, c, n);
        } else {
            table::producer::record_claim(me, len, c, n);
        }
        // Every payload is written before any is stamped.
        for s in c..c + n {
            self.stamps[s as usize].store(s | STAMP_WRITING, Ordering::Relaxed);
        }
        for s in c..c + n {
            // Release: pairs with the tombstone's Acquire stamp load.
            self.stamps[s as usize].store(s, Ordering::Release);
        }
        if ctl.clear_relaxed {
            control_clear_relaxed(me);
        } else {
            table::producer::clear_claim(me);
        }
        c
    }

    /// `Ring::repair_unattributed` for the dead entry 0. Returns the sequences marked.
    fn repair(&self, ctl: Controls) -> Vec<u64> {
        let live = [(&self.in_flight[1], &self.in_flight_len[1])];
        let mut marked = Vec::new();
        let mut mark = |seq: u64| {
            let done = if ctl.clear_relaxed {
                control_tombstone_two_stores(
                    &self.stamps[seq as usize],
                    &self.flags[seq as usize],
                    seq,
                )
            } else {
                // The model's consumers are far ahead: the gate always allows.
                table::tombstone(&self.stamps[seq as usize], seq, CAPACITY, || true)
            };
            if done == Tombstone::Written {
                marked.push(seq);
            }
        };
        let scanned = if ctl.repair_producers_first || ctl.repair_ignoring_len {
            control_repair(&self.line(), live, ctl, &mut mark)
        } else {
            table::producer::unattributed_hole(&self.line(), live, |_| 0, &mut mark)
        };
        if !scanned {
            assert!(marked.is_empty());
        }
        marked
    }
}

/// Control: `record_claim` with a Relaxed store of `in_flight`.
fn control_record_relaxed(in_flight: &W, in_flight_len: &W, first: u64, n: u64) {
    in_flight_len.store(n, Ordering::Relaxed);
    in_flight.store(first + 1, Ordering::Relaxed);
}

/// Control: `clear_claim` with a Relaxed store.
fn control_clear_relaxed(in_flight: &W) {
    in_flight.store(0, Ordering::Relaxed);
}

/// Control: the tombstone the stamp CAS replaced: load the stamp, then store the flag and
/// the stamp with plain stores.
fn control_tombstone_two_stores(stamp: &W, flag: &AtomicU32, seq: u64) -> Tombstone {
    let seen = stamp.load(Ordering::Acquire);
    if seen == seq || (seen != STAMP_EMPTY && (seen & !STAMP_WRITING) > seq) {
        return Tombstone::NotNeeded;
    }
    flag.store(1, Ordering::Relaxed);
    stamp.store(seq | STAMP_TOMBSTONE, Ordering::Release);
    Tombstone::Written
}

/// Control: `unattributed_hole` with the producer table read before the head
/// (`repair_producers_first`) or each claim's length ignored (`repair_ignoring_len`).
fn control_repair(
    line: &Line<'_, W>,
    live: [(&W, &W); 1],
    ctl: Controls,
    mark: &mut impl FnMut(u64),
) -> bool {
    let mut head = 0;
    if !ctl.repair_producers_first {
        head = line.claimed();
    }
    let mut held = Vec::new();
    for (in_flight, in_flight_len) in live {
        match in_flight.load(Ordering::Acquire) {
            0 => {}
            IN_FLIGHT_CLAIMING => return false,
            first => {
                let len = if ctl.repair_ignoring_len {
                    1
                } else {
                    in_flight_len.load(Ordering::Relaxed)
                };
                held.push((first - 1, len));
            }
        }
    }
    if ctl.repair_producers_first {
        head = line.claimed();
    }
    for seq in 0..head {
        if !held.iter().any(|&(f, n)| seq >= f && seq < f + n) {
            mark(seq);
        }
    }
    true
}

/// The repair racing a live claim of `n` sequences.
fn repair_against_a_live_claim(ctl: Controls, n: u64) {
    model(move || {
        let ring = Arc::new(Ring::with_unattributed_hole());
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || ring.publish(ctl, n))
        };
        let marked = ring.repair(ctl);
        let first = producer.join().unwrap();
        for accepted in first..first + n {
            let i = accepted as usize;
            assert!(
                ring.stamps[i].load(Ordering::Acquire) == accepted
                    && ring.flags[i].load(Ordering::Relaxed) == 0,
                "live claim lost: sequence {accepted} was accepted and ends as a tombstone \
                 (repair marked {marked:?})"
            );
            assert!(
                !marked.contains(&accepted),
                "live claim lost: the repair marked sequence {accepted} while its producer \
                 published it (consumers may skip it)"
            );
        }
    });
}

#[test]
fn the_shipping_repair_leaves_a_live_claim_alone() {
    repair_against_a_live_claim(Controls::default(), 1);
}

#[test]
fn the_shipping_repair_leaves_a_live_batch_alone() {
    repair_against_a_live_claim(Controls::default(), 2);
}

#[test]
#[should_panic(expected = "live claim lost")]
fn control_reading_the_producers_before_the_head_marks_a_live_claim() {
    repair_against_a_live_claim(
        Controls {
            repair_producers_first: true,
            ..Controls::default()
        },
        1,
    );
}

#[test]
#[should_panic(expected = "live claim lost")]
fn control_a_relaxed_clear_hides_the_stamp_from_a_two_store_tombstone() {
    repair_against_a_live_claim(
        Controls {
            clear_relaxed: true,
            ..Controls::default()
        },
        1,
    );
}

#[test]
#[should_panic(expected = "live claim lost")]
fn control_a_repair_that_ignores_the_claim_length_marks_the_rest_of_a_batch() {
    repair_against_a_live_claim(
        Controls {
            repair_ignoring_len: true,
            ..Controls::default()
        },
        2,
    );
}

#[test]
#[should_panic(expected = "live claim lost")]
fn control_a_relaxed_record_of_a_batch_can_hide_its_length_from_the_repair() {
    repair_against_a_live_claim(
        Controls {
            record_relaxed: true,
            ..Controls::default()
        },
        2,
    );
}

// ---------------------------------------------------------------------------------------
// A single producer's hole, repaired racing a stop.

/// A single-producer ring of stamped slots, 0 published. The producer claims 1 ((p1) and
/// (p2): Running, then its position 2 stored) and dies before its light fence ((p3)), the
/// claim undecided, while another process stops the ring. The repair (`repair_unattributed`
/// on a single-producer line: `single_hole_decided`, then `unattributed_hole` over no other
/// producer) runs once it is dead. The stop records 1 (the claim refused: the next run
/// hands 1 out again, so it must not be marked) or 2 (accepted: 1 is a hole, marked).
/// `fenced`: the shipping SeqCst fence in `single_hole_decided` (the control has none).
fn a_single_producers_hole_repaired_racing_a_stop(fenced: bool) {
    model(move || {
        let ring = Arc::new(Ring {
            claim: W::new(1),
            lifecycle: W::new(lifecycle::pack(0, RingState::Running as u32, 0)),
            stop_seq: W::new(0),
            stamps: std::array::from_fn(|_| W::new(STAMP_EMPTY)),
            flags: std::array::from_fn(|_| AtomicU32::new(0)),
            in_flight: [W::new(0), W::new(0)],
            in_flight_len: [W::new(0), W::new(0)],
        });
        ring.stamps[0].store(0, Ordering::Relaxed);
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                // (p1) Acquire and (p2) Relaxed, as `line::claim_single_fast`'s; the process
                // dies before (p3).
                let running = ring.lifecycle.load(Ordering::Acquire);
                if lifecycle::state(running) == RingState::Running as u32 {
                    ring.claim.store(2, Ordering::Relaxed);
                }
            })
        };
        let repairer = {
            let ring = ring.clone();
            thread::spawn(move || {
                producer.join().unwrap();
                let line = ring.single_line();
                while !table::producer::single_hole_decided(&line, || {
                    if fenced {
                        fence(Ordering::SeqCst);
                    }
                }) {
                    thread::yield_now();
                }
                let mut marked = Vec::new();
                let none: [(&W, &W); 0] = [];
                assert!(table::producer::unattributed_hole(
                    &line,
                    none,
                    |_| 0,
                    |seq| {
                        // The model's consumers are far ahead: the gate always allows.
                        if table::tombstone(&ring.stamps[seq as usize], seq, CAPACITY, || true)
                            == Tombstone::Written
                        {
                            marked.push(seq);
                        }
                    }
                ));
                marked
            })
        };
        let (stop, _) = ring
            .single_line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        let marked = repairer.join().unwrap();
        let want: Vec<u64> = (1..stop).collect();
        assert_eq!(
            marked, want,
            "the repair marked {marked:?} where the stop at {stop} leaves {want:?} a hole"
        );
    });
}

#[test]
fn a_single_producers_hole_repaired_racing_a_stop_is_marked_iff_the_stop_accepted_it() {
    a_single_producers_hole_repaired_racing_a_stop(true);
}

/// Without the fence: the repair reads Running and the dead producer's position, and marks
/// 1, while the stop reads the position before the store and refuses the claim.
#[test]
#[should_panic(expected = "leaves")]
fn control_a_single_producers_repair_without_its_fence_marks_a_refused_claim() {
    a_single_producers_hole_repaired_racing_a_stop(false);
}
