//! Loom models of claim guards on a fixed-size ring whose claim is its publish (the design
//! in `loom_folded.rs`'s module comment; the model ring in `loom_folded_ring`).
//!
//! A claim guard (`Producer::claim`, `claim_batch`) hands out its sequences before the
//! user writes them, and its commit cannot be refused: a stop after the claim includes it,
//! and the stop's drain waits for the commit. So a guard's claim stays a claim, made before
//! the writes. It is made on the cursor, the line's claim word, as a publish makes it
//! ((p1) to (p5), the stop reading it, the start taking a refused one back), which would
//! publish unwritten slots, were it not for one more word, `pending`, on the cursor's line,
//! written only by the producer (and, once it is dead, by the repair of its claim):
//!
//! ```text
//! guard, claim s..s+n                          consumer
//! pending = s             (Relaxed)            l1 = life            (Acquire)
//! fence(Release)                               c = cursor           (Acquire)
//! (p1)-(p5) on the cursor: cursor = s + n      c = min(c, pending)  (Acquire)
//! refused: pending = NONE (Relaxed), Closed    fence; l2 = life     (Acquire)
//! accepted: the user writes s..s+n             as before: Running up to c, settled
//! commit: pending = NONE  (Release)              closed up to min(c, stop_seq)
//! drop: tombs[s..s+n], tomb_end, then          tomb_end             (Relaxed, after)
//!       pending = NONE    (Release)
//! ```
//!
//! A consumer whose cursor load reads the claim's store sees `pending` at `s` or the
//! Release store that ended the claim (the Release fence before the claim's store), so it
//! delivers nothing of the claim before its commit, and all of it after (a commit's
//! payloads, a drop's tomb words, both before that Release store). The cursor keeps the
//! line's meaning, so the stop, the start and the position need nothing new; consumers pay
//! one load of a word on the line they read the cursor from. A publish of values known in
//! advance (`publish`, `publish_batch`) writes first and claims last, and never touches
//! `pending`.
//!
//! A refused guard's record is taken back by the producer itself, unlike a refused claim's
//! cursor store: only consumers read `pending`, as a bound, and no sequence is accepted by
//! what it holds. While the line stays closed the stop sequence bounds consumers at `s`
//! whatever `pending` says; a later event's Release fence (or a later guard's record)
//! comes after the take-back in the producer's order.
//!
//! The controls: a consumer that does not read `pending` delivers a slot before the
//! guard's commit wrote it; a producer that leaves a refused guard's record in place stalls
//! consumers below its next publish, which does not touch `pending`. Witnesses: some
//! interleaving refuses a guard's claim after its cursor store.

mod loom_env;
mod loom_folded_ring;
mod loom_word;

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;

use loom_env::env;
use loom_folded_ring::{bound, witness, Path, Reads, Ring, TOMB};
use loom_word::model;

use shmring::fixed;
use shmring::line::{Refused, SeenRunning, Word};
use shmring_layout::RingState;

/// Slots in the models' ring: more than their events, so that no write wraps.
const CAP: usize = 4;

/// A consumer's poll: deliver `next..bound`, a tombstone as `(seq, TOMB)`, an event as its
/// payload `(seq, mark)`.
fn poll(ring: &Ring<CAP>, reads: Reads, next: &mut u64, got: &mut Vec<(u64, u64)>) {
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
            let [a, b] = &ring.slots[s as usize % CAP];
            // Relaxed: ordered by the Acquire loads in `bound`.
            got.push((a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)));
        }
        *next += 1;
    }
}

/// A claim guard of event 0 by a producer that claims again on `Closed` once the ring
/// runs, then commits the attempt accepted, while another process stops and starts the
/// ring and a consumer polls, then polls again when everyone is done. The consumer
/// delivers exactly the committed attempt: never a slot before its commit, nothing lost.
fn a_guard_across_a_stop_and_start(reads: Reads) {
    let refused = witness();
    let refused_seen = refused.clone();
    model(move || {
        let ring = Arc::new(Ring::<CAP>::new());
        let producer = {
            let ring = ring.clone();
            let refused = refused.clone();
            thread::spawn(move || {
                let mut seen = SeenRunning::default();
                let mut attempt = 1;
                loop {
                    match ring.claim_guard(0, 1, &mut seen, true) {
                        (Ok(()), _) => {
                            ring.commit_guard(0, 1, attempt);
                            return attempt;
                        }
                        (Err(Refused::Closed), path) => {
                            if path == Path::Decided {
                                refused.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            ring.wait_running();
                            attempt += 1;
                        }
                        (Err(Refused::Deleted), _) => unreachable!("nobody removes the ring"),
                    }
                }
            })
        };
        let lifecycle = {
            let ring = ring.clone();
            thread::spawn(move || {
                let e = env(2, true);
                ring.line().close(&e, RingState::Stopped).expect("stop");
                ring.line().reopen(&e).expect("start");
            })
        };
        let (mut next, mut got) = (0, Vec::new());
        poll(&ring, reads, &mut next, &mut got);
        let committed = producer.join().unwrap();
        lifecycle.join().unwrap();
        poll(&ring, reads, &mut next, &mut got);
        assert_eq!(
            got,
            vec![(0, committed)],
            "delivered {got:?}, where attempt {committed} of event 0 was committed"
        );
    });
    assert!(
        refused_seen.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving refused a guard's claim after its store"
    );
}

#[test]
fn a_consumer_delivers_a_guards_event_only_once_committed_across_a_stop_and_start() {
    a_guard_across_a_stop_and_start(Reads::Both);
}

#[test]
#[should_panic(expected = "was committed")]
fn control_a_consumer_that_does_not_read_pending_delivers_an_unwritten_slot() {
    a_guard_across_a_stop_and_start(Reads::NoPending);
}

/// A claim guard of event 0, dropped if its claim is accepted (a tombstone) and given up if
/// refused, while another process stops the ring and a consumer polls; then the ring starts
/// again and the producer publishes its next sequence with `publish` (which does not touch
/// `pending`), and the consumer polls again. It delivers the tombstone and the event, or
/// the event alone at 0. `reset`: whether the producer takes a refused guard's record back.
fn a_dropped_guard_then_a_publish_across_a_stop(reset: bool) {
    let refused = witness();
    let refused_seen = refused.clone();
    model(move || {
        let ring = Arc::new(Ring::<CAP>::new());
        let producer = {
            let ring = ring.clone();
            let refused = refused.clone();
            thread::spawn(move || {
                let mut seen = SeenRunning::default();
                let next = match ring.claim_guard(0, 1, &mut seen, reset) {
                    (Ok(()), _) => {
                        ring.drop_guard(0, 1);
                        1
                    }
                    (Err(_), path) => {
                        if path == Path::Decided {
                            refused.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        0
                    }
                };
                (next, seen)
            })
        };
        let stopper = {
            let ring = ring.clone();
            thread::spawn(move || {
                ring.line()
                    .close(&env(2, true), RingState::Stopped)
                    .expect("stop")
                    .0
            })
        };
        let (mut at, mut got) = (0, Vec::new());
        poll(&ring, Reads::Both, &mut at, &mut got);
        let (next, mut seen) = producer.join().unwrap();
        let stop = stopper.join().unwrap();
        assert_eq!(stop, next, "the stop sequence is the accepted claims' end");
        assert_eq!(ring.line().reopen(&env(2, true)), Ok(stop), "started");
        ring.publish(next, 1, &mut seen, None)
            .0
            .expect("the ring runs again");
        poll(&ring, Reads::Both, &mut at, &mut got);
        let want = if next == 1 {
            vec![(0, TOMB), (1, 1)]
        } else {
            vec![(0, 1)]
        };
        assert_eq!(
            got, want,
            "delivered {got:?}, where {want:?} were published"
        );
    });
    assert!(
        refused_seen.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving refused a guard's claim after its store"
    );
}

#[test]
fn a_dropped_guard_is_a_tombstone_and_a_refused_one_leaves_nothing_behind() {
    a_dropped_guard_then_a_publish_across_a_stop(true);
}

#[test]
#[should_panic(expected = "were published")]
fn control_a_refused_guards_record_left_in_place_stalls_the_consumers() {
    a_dropped_guard_then_a_publish_across_a_stop(false);
}
