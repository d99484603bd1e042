//! Loom models of lone claims (`client/src/line.rs`, "Lone claims"): a multi-producer line
//! whose one producer claims through its own position word with plain stores, until a
//! second producer, a stop, or its own detach ends that, and the counter takes over where
//! the lone claims ended. The shipping `Line` code runs on loom's atomics.
//!
//! What every model checks, in every interleaving it explores:
//!
//! - **one owner per sequence**: the sequences accepted by all producers are distinct and,
//!   once the race is over, exactly `0..end` where `end` is the line's position (no hole,
//!   no sequence handed out twice);
//! - **refused or delivered**: with a stop in the race, exactly `0..stop` is accepted;
//! - **one position**: positions read during the race never go down and never pass the
//!   final one.
//!
//! As in `loom_line.rs`, `membarrier` and the producer's compiler-only fence are `SeqCst`
//! fences here. The control model removes them and requires loom to find a sequence handed
//! out twice.
//!
//! One more model checks a repair's decision on a lone line (`Ring::tombstone`:
//! `table::producer::decided_claimed`): a lone producer that died
//! between its claim's store and its light fence, while a stop ends the lone claims, has
//! its claim marked a hole exactly when the stop accepted it. Its control decides every
//! multi-producer line at once, as the client did before, and marks a claim the stop
//! refused.
//!
//! Preemption bound 2 by default (`LOOM_MAX_PREEMPTIONS` overrides it).

use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

mod loom_env;
mod loom_word;

use loom_env::{env, ModelEnv};
use loom_word::{model, W};
use shmring::line::{
    claim_lone_fast, Fast, Line, LineError, LoneClaim, LoneSlot, LoneWords, Refused, SeenRunning,
    Word,
};
use shmring::table::{self, Tombstone};
use shmring::RingState;
use shmring_layout::{
    claim_lone, claim_lone_index, lifecycle, LONE_OPEN, MAX_SEQUENCE, STAMP_EMPTY,
};

/// Slots in the model's ring: more than the claims any interleaving makes.
const SLOTS: usize = 8;
const EMPTY: u64 = u64::MAX;

/// The lone producer's entry index.
const LONE: u32 = 0;

struct Entry {
    position: W,
    end: W,
    gone: AtomicBool,
}

struct Ring {
    claim: W,
    life: W,
    stop_seq: W,
    entries: [Entry; 2],
    stamps: [AtomicU64; SLOTS],
}

impl LoneWords<W> for Ring {
    fn lone(&self, index: u32) -> Option<LoneSlot<'_, W>> {
        let e = self.entries.get(index as usize)?;
        Some(LoneSlot {
            position: &e.position,
            end: &e.end,
        })
    }
    fn gone(&self, index: u32) -> bool {
        self.entries
            .get(index as usize)
            .is_none_or(|e| e.gone.load(Ordering::SeqCst))
    }
}

impl Ring {
    /// A running multi-producer ring at 0 whose entry `LONE` took the line to itself.
    fn lone() -> Arc<Ring> {
        let entry = |position: u64, end: u64| Entry {
            position: W::new(position),
            end: W::new(end),
            gone: AtomicBool::new(false),
        };
        Arc::new(Ring {
            claim: W::new(claim_lone(LONE)),
            life: W::new(running()),
            stop_seq: W::new(0),
            entries: [entry(0, LONE_OPEN), entry(0, 0)],
            stamps: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
        })
    }

    /// A running multi-producer ring at 0 with no lone producer.
    fn shared() -> Arc<Ring> {
        let ring = Ring::lone();
        ring.claim.store(0, Ordering::Relaxed);
        ring
    }

    fn published(&self, s: u64) -> bool {
        // Acquire: pairs with the Release stamp in `stamp`.
        self.stamps[s as usize].load(Ordering::Acquire) == s
    }

    fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.life,
            stop_seq: &self.stop_seq,
            single: false,
            max_claim: (SLOTS / 2) as u64,
            lone: self,
        }
    }

    fn stamp(&self, s: u64) {
        // Release: the model's stamp, as `Producer::stamp`.
        self.stamps[s as usize].store(s, Ordering::Release);
    }
}

fn running() -> u64 {
    lifecycle::pack(0, RingState::Running as u32, 0)
}

/// A producer of the model, as `Producer` claims: lone while it holds the line to itself,
/// from the counter otherwise.
struct Claimer {
    index: u32,
    lone: bool,
    seen: SeenRunning,
    next: u64,
    env: ModelEnv,
    fenced: bool,
}

impl Claimer {
    fn new(index: u32, lone: bool, me: u32, fenced: bool) -> Self {
        Claimer {
            index,
            lone,
            seen: SeenRunning::default(),
            next: 0,
            env: env(me, fenced),
            fenced,
        }
    }

    /// One claim of one sequence, stamped once accepted: `Some(seq)`, or `None` (refused).
    fn claim(&mut self, ring: &Ring) -> Option<u64> {
        let line = ring.line();
        if self.lone {
            let slot = ring.lone(self.index).expect("entry");
            let fenced = self.fenced;
            let fast = claim_lone_fast(
                slot.position,
                slot.end,
                &ring.life,
                self.seen,
                self.next,
                1,
                || {
                    if fenced {
                        fence(Ordering::SeqCst)
                    }
                },
            );
            let outcome = match fast {
                Fast::Accepted => LoneClaim::Accepted,
                fast => line.decide_lone(&self.env, self.index, self.next, 1, fast == Fast::Decide),
            };
            if outcome == LoneClaim::Accepted {
                let s = self.next;
                self.next += 1;
                ring.stamp(s);
                return Some(s);
            }
            self.lone = false;
        }
        loop {
            match line.claim_multi(1) {
                Ok(c) if c >= MAX_SEQUENCE => {
                    let index = claim_lone_index(c).expect("a lone counter");
                    if index == self.index {
                        line.end_own_lone(&self.env, index, self.next);
                    } else {
                        match line.share(&self.env, index) {
                            Ok(()) => {}
                            Err(LineError::NoBarrier) => thread::yield_now(),
                            Err(e) => panic!("share: {e:?}"),
                        }
                    }
                }
                Ok(c) => {
                    ring.stamp(c);
                    return Some(c);
                }
                Err(Refused::Closed | Refused::Deleted) => return None,
            }
        }
    }

    /// Detach: a lone producer ends its claims at its position.
    fn detach(&mut self, ring: &Ring) {
        if self.lone {
            ring.line().end_own_lone(&self.env, self.index, self.next);
            self.lone = false;
        }
    }
}

/// `count` claims by `claimer`; the accepted sequences.
fn claims(ring: &Ring, claimer: &mut Claimer, count: usize) -> Vec<u64> {
    (0..count).filter_map(|_| claimer.claim(ring)).collect()
}

/// Entry `LONE`'s producer, not lone yet, takes the line if it can and claims once.
fn take_then_claim(ring: &Ring) -> Vec<u64> {
    let mut claimer = Claimer::new(LONE, false, 1, true);
    if let Some((next, seen)) = ring
        .line()
        .take_lone(&claimer.env, LONE, |s| ring.published(s))
    {
        claimer.lone = true;
        claimer.next = next;
        claimer.seen = seen;
    }
    claims(ring, &mut claimer, 1)
}

/// Every sequence in `accepted` is distinct, they are exactly `0..end`, each stamped.
fn check_unique(ring: &Ring, accepted: &[u64], end: u64) {
    let mut sorted = accepted.to_vec();
    sorted.sort_unstable();
    let before = sorted.len();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        before,
        "a sequence was handed out twice: {accepted:?}"
    );
    assert_eq!(
        sorted,
        (0..end).collect::<Vec<_>>(),
        "the accepted sequences are not the line's run up to {end}"
    );
    for s in 0..end {
        assert!(ring.published(s), "sequence {s} was never stamped");
    }
}

/// The lone producer makes two claims while a second producer claims once through the
/// counter (ending the lone claims with a sharing); a reader takes the position twice.
fn lone_racing_a_second_producer(fenced: bool) {
    model(move || {
        let ring = Ring::lone();
        let lone = {
            let ring = ring.clone();
            thread::spawn(move || claims(&ring, &mut Claimer::new(LONE, true, 1, fenced), 2))
        };
        let second = {
            let ring = ring.clone();
            thread::spawn(move || claims(&ring, &mut Claimer::new(1, false, 2, fenced), 1))
        };
        let published = |s: u64| ring.published(s);
        let first = ring.line().position(published);
        let then = ring.line().position(published);
        let mut accepted = lone.join().unwrap();
        accepted.extend(second.join().unwrap());
        assert_eq!(accepted.len(), 3, "a running line refused a claim");
        let end = ring.line().position(published);
        assert!(
            claim_lone_index(ring.claim.load(Ordering::SeqCst)).is_none(),
            "the second producer claimed while the line was still lone"
        );
        check_unique(&ring, &accepted, end);
        assert!(
            first <= then && then <= end,
            "the position went {first}, {then}, {end}"
        );
        assert_eq!(
            lifecycle::state(ring.life.load(Ordering::SeqCst)),
            RingState::Running as u32,
            "the sharing left the line in another state"
        );
    });
}

#[test]
fn lone_claims_racing_a_second_producer() {
    lone_racing_a_second_producer(true);
}

/// Without the fence pair, loom finds a lone claim the sharing did not see, handed out
/// again from the counter.
#[test]
#[should_panic(expected = "twice")]
fn lone_claims_without_the_fences_hand_a_sequence_out_twice() {
    lone_racing_a_second_producer(false);
}

/// A stop meets the lone producer's two claims: it ends them, then closes the counter;
/// every claim is refused or delivered, and a start reopens at the stop.
#[test]
fn lone_claims_racing_a_stop() {
    model(|| {
        let ring = Ring::lone();
        let lone = {
            let ring = ring.clone();
            thread::spawn(move || claims(&ring, &mut Claimer::new(LONE, true, 1, true), 2))
        };
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        let accepted = lone.join().unwrap();
        check_unique(&ring, &accepted, stop);
        ring.line().reopen(&env(2, true)).expect("start");
        assert_eq!(ring.line().claim_multi(1), Ok(stop), "no rewind, no gap");
    });
}

/// A producer takes the line to itself and claims while a stop runs: either the take
/// fails, or the stop ends the lone claims; refused or delivered either way.
#[test]
fn a_take_racing_a_stop() {
    model(|| {
        let ring = Ring::shared();
        let taker = {
            let ring = ring.clone();
            thread::spawn(move || take_then_claim(&ring))
        };
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        let accepted = taker.join().unwrap();
        check_unique(&ring, &accepted, stop);
        assert!(
            claim_lone_index(ring.claim.load(Ordering::SeqCst)).is_none(),
            "the stopped line is still lone"
        );
    });
}

/// A producer takes the line to itself while another claims through the counter: the
/// take fails on a moved counter, or the other producer's claim ends the lone claims.
#[test]
fn a_take_racing_a_claim_through_the_counter() {
    model(|| {
        let ring = Ring::shared();
        let taker = {
            let ring = ring.clone();
            thread::spawn(move || take_then_claim(&ring))
        };
        let mut other = Claimer::new(1, false, 2, true);
        let mut accepted = claims(&ring, &mut other, 1);
        accepted.extend(taker.join().unwrap());
        let end = ring.line().position(|s| ring.published(s));
        check_unique(&ring, &accepted, end);
        assert_eq!(accepted.len(), 2);
    });
}

/// The lone producer claims and detaches (ending its own claims) while a second producer's
/// claim meets the lone counter and shares.
#[test]
fn a_detach_racing_a_sharing() {
    model(|| {
        let ring = Ring::lone();
        let lone = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut claimer = Claimer::new(LONE, true, 1, true);
                let accepted = claims(&ring, &mut claimer, 1);
                claimer.detach(&ring);
                accepted
            })
        };
        let mut accepted = claims(&ring, &mut Claimer::new(1, false, 2, true), 1);
        accepted.extend(lone.join().unwrap());
        let end = ring.line().position(|s| ring.published(s));
        check_unique(&ring, &accepted, end);
        assert_eq!(accepted.len(), 2);
    });
}

/// A lone producer died with its second claim stored but not stamped: a second producer's
/// claim ends the lone claims at its final position (as the owner of `Sharing`, without the
/// fence), and a stop racing it records the same; the dead claim is a hole below the counter (for the
/// repair), never handed out again.
#[test]
fn a_dead_lone_producers_claims_end_where_it_left_them() {
    model(|| {
        let ring = Ring::lone();
        // Sequence 0 published, sequence 1 claimed (position 2), then the producer died.
        ring.stamp(0);
        ring.entries[0].position.store(2, Ordering::SeqCst);
        ring.entries[0].gone.store(true, Ordering::SeqCst);
        let second = {
            let ring = ring.clone();
            thread::spawn(move || claims(&ring, &mut Claimer::new(1, false, 2, true), 1))
        };
        let (stop, _) = ring
            .line()
            .close(&env(3, true), RingState::Stopped)
            .expect("stop");
        let accepted = second.join().unwrap();
        assert!(
            stop >= 2,
            "the stop at {stop} hands out the dead claim again"
        );
        for s in &accepted {
            assert!(
                *s >= 2,
                "sequence {s} of the dead producer was handed out again"
            );
        }
        assert_eq!(stop, 2 + accepted.len() as u64);
    });
}

/// Two producers meet the lone counter at once: one sharing ends it, the other waits for
/// it (or ends it, if it came first); one owner per sequence.
#[test]
fn two_producers_share_at_once() {
    model(|| {
        let ring = Ring::lone();
        ring.stamp(0);
        ring.entries[0].position.store(1, Ordering::SeqCst);
        let other = {
            let ring = ring.clone();
            thread::spawn(move || claims(&ring, &mut Claimer::new(1, false, 2, true), 1))
        };
        let mut accepted = claims(&ring, &mut Claimer::new(1, false, 3, true), 1);
        accepted.extend(other.join().unwrap());
        accepted.push(0);
        let end = ring.line().position(|s| ring.published(s));
        check_unique(&ring, &accepted, end);
    });
}

/// A dead lone producer's claims are ended by two producers at once (each a claim through
/// the counter that met the lone counter; one of them then takes the dead producer's entry
/// over and the line to itself, as an attach does): one owner of `Sharing` at a time, so
/// the one that ends them second acts on nothing, never on the new run of lone claims.
#[test]
fn two_enders_of_a_dead_lone_producer_and_a_new_take() {
    model(|| {
        let ring = Ring::lone();
        ring.stamp(0);
        ring.entries[0].position.store(1, Ordering::SeqCst);
        ring.entries[0].gone.store(true, Ordering::SeqCst);
        let late = {
            let ring = ring.clone();
            thread::spawn(move || claims(&ring, &mut Claimer::new(1, false, 2, true), 1))
        };
        // This thread ends the dead producer's claims, takes its entry over, and the line.
        let env = env(3, true);
        ring.line().share(&env, LONE).expect("share");
        ring.entries[0].gone.store(false, Ordering::SeqCst);
        let mut mine = Claimer::new(LONE, false, 3, true);
        if let Some((next, seen)) = ring.line().take_lone(&env, LONE, |s| ring.published(s)) {
            mine.lone = true;
            mine.next = next;
            mine.seen = seen;
        }
        let mut accepted = claims(&ring, &mut mine, 1);
        accepted.extend(late.join().unwrap());
        accepted.push(0);
        let end = ring.line().position(|s| ring.published(s));
        check_unique(&ring, &accepted, end);
    });
}

/// The owner of `Sharing` died while ending the lone claims (its word is left); the lone
/// producer claims, and a second producer's claim takes the word over and ends them, or the
/// lone producer ends them itself first: one owner per sequence whoever records.
#[test]
fn a_dead_sharers_transition_is_finished_by_a_claim() {
    dead_sharer(None);
}

/// As above, the dead owner having recorded the position (0) before it died.
#[test]
fn a_dead_sharers_record_is_installed_by_a_claim() {
    dead_sharer(Some(0));
}

/// A lone line whose `Sharing` owner died, having recorded `recorded` (if any).
fn dead_sharer(recorded: Option<u64>) {
    model(move || {
        let ring = Ring::lone();
        ring.life.store(
            lifecycle::pack(1, RingState::Sharing as u32, loom_env::DEAD),
            Ordering::SeqCst,
        );
        if let Some(p) = recorded {
            ring.entries[0].end.store(p, Ordering::SeqCst);
        }
        let lone = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut claimer = Claimer::new(LONE, true, 1, true);
                claims(&ring, &mut claimer, 2)
            })
        };
        let mut accepted = claims(&ring, &mut Claimer::new(1, false, 2, true), 1);
        accepted.extend(lone.join().unwrap());
        let end = ring.line().position(|s| ring.published(s));
        check_unique(&ring, &accepted, end);
        assert_eq!(accepted.len(), 3);
        // The word is Running, or still the dead sharer's if the lone producer ended its
        // claims itself before any claim met the lone counter: the next lifecycle call
        // (or the broker's sweep) finishes it, as a dead stopper's.
        let settled = ring.line().settle(&env(3, true)).expect("settle");
        assert_eq!(settled.state, Some(RingState::Running));
    });
}

/// `Ring::tombstone`'s decision on a lone line: the lone producer claims 0 ((p1) and (p2) of
/// `claim_lone_fast`: its position 1 stored) and dies before its light fence ((p3)), the
/// claim undecided, while another process stops the ring, which ends the lone claims where
/// it reads the position after its heavy fence. Once the producer is dead, a repairer runs
/// `table::producer::decided_claimed` (again while it says no), then marks 0 if it is
/// below what that says is claimed (`table::tombstone`). The stop records 1 (the claim accepted: 0 is a
/// hole, marked) or 0 (refused: the next run hands 0 out again, so it must not be marked).
/// `shipping`: the client's decision (the control: `Line::claimed` at once, as
/// `Ring::tombstone` read it before lone lines were decided).
fn a_lone_producers_hole_marked_racing_a_stop(shipping: bool) {
    model(move || {
        let ring = Ring::lone();
        let stamp = Arc::new(W::new(STAMP_EMPTY));
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let slot = ring.lone(LONE).expect("entry");
                // (p1) Acquire and the end Relaxed, (p2) Relaxed, as `claim_lone_fast`'s;
                // the process dies before (p3).
                if ring.life.load(Ordering::Acquire) == running()
                    && slot.end.load(Ordering::Relaxed) == LONE_OPEN
                {
                    slot.position.store(1, Ordering::Relaxed);
                }
                ring.entries[LONE as usize]
                    .gone
                    .store(true, Ordering::SeqCst);
            })
        };
        let repairer = {
            let ring = ring.clone();
            let stamp = stamp.clone();
            thread::spawn(move || {
                producer.join().unwrap();
                let line = ring.line();
                let claimed = loop {
                    if !shipping {
                        break line.claimed();
                    }
                    match table::producer::decided_claimed(&line, || fence(Ordering::SeqCst)) {
                        Some(claimed) => break claimed,
                        None => thread::yield_now(),
                    }
                };
                // The model's consumers are far ahead: the gate always allows.
                0 < claimed
                    && table::tombstone(&*stamp, 0, SLOTS as u64, || true) == Tombstone::Written
            })
        };
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        let marked = repairer.join().unwrap();
        assert_eq!(
            marked,
            stop == 1,
            "the repair marked 0: {marked}, where the stop is at {stop}"
        );
    });
}

#[test]
fn a_lone_producers_hole_repaired_racing_a_stop_is_marked_iff_the_stop_accepted_it() {
    a_lone_producers_hole_marked_racing_a_stop(true);
}

/// `Line::claimed` at once (as before lone lines were decided like a single producer's):
/// the repairer reads the dead producer's lone position and marks 0,
/// while the stop read the position before the store and refused the claim.
#[test]
#[should_panic(expected = "where the stop is at 0")]
fn control_a_lone_producers_repair_deciding_at_once_marks_a_refused_claim() {
    a_lone_producers_hole_marked_racing_a_stop(false);
}
