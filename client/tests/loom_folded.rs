//! Loom models of a single-producer fixed-size ring whose claim is its publish: the
//! per-event path without the claim store, modelled here before the client changed
//! (docs/PERFORMANCE.md, "The per-event claim store, measured out") and built in layout 13;
//! the consumer's reads are the client's `fixed::published`, its copy check
//! `fixed::copy_held`, the line the client's `line`.
//!
//! Before layout 13 a fixed-size ring's producer made three stores per event: its claim (its
//! position, before the payload), the payload, and the cursor. In this design the cursor
//! is the claim word of the sequence line: the producer writes the payload first, then
//! makes the line's single-producer claim ((p1) to (p5) of `line`, unchanged) on the
//! cursor, so that the claim's one store both claims and publishes. Stop and start run the
//! line's transitions, unchanged, on the cursor: the stop records the cursor it reads
//! after its heavy fence, and the start takes back a refused event's cursor store ((t3)).
//!
//! What changes is for readers: a refused event's store is in the cursor until the start
//! takes it back, and an event whose (p4) has not decided yet may still be refused by a
//! stop. A consumer therefore reads the lifecycle word before and after the cursor, with
//! a fence between the cursor and the second read:
//!
//! ```text
//! producer, event s                        consumer                  stopper, then starter
//! payload of s            (plain)          l1 = life       (Acquire) (s1) Stopping
//! fence(Release)                           c = cursor      (Acquire) (s2) heavy fence
//! (p1) life Running?                       fence                     (s3) stop_seq = cursor
//! (p2) cursor = s + 1     (Relaxed)        l2 = life       (Acquire) (s4) Stopped
//! (p3) light fence                         l1 != l2: look again      (t1) Starting
//! (p4) life as (p1)? accepted              Running: up to c          (t2) heavy fence
//! (p5) else settled closed: the record     settled closed: up to     (t3) cursor > stop_seq?
//!      decides; Running again: accepted       min(c, stop_seq)            take it back
//!      iff the cursor still holds s + 1    Stopping, other words:    (t4) Running
//!                                            look again
//! ```
//!
//! (The models' consumer; the client's loads `c` and `l2` SeqCst and has no fence: below.)
//!
//! If `l2` is the Running word `l1` was, a stop's (s3) reads `c` or later: with a SeqCst
//! fence on both sides, a stopper whose (s3) read a store earlier in the cursor's
//! modification order than `c` (its values recur) while this consumer
//! read `c` and then the word before (s1) would put each fence before the other in their
//! total order (C++20's rule for SeqCst fences and coherence order). So everything below `c`
//! is accepted. A word that changed between the reads says nothing about `c`. While the
//! line is settled closed, the cursor may hold an event the stop refused: the stop sequence
//! bounds what is delivered. And a consumer whose `l1` is a Running word that followed a
//! start read `c` after the start's take-back.
//!
//! An optional reader copies a slot that a later lap may be writing, and checks its copy
//! against the claim word afterwards (`fixed::copy_held`). A write now comes before its
//! claim, so the claim word becomes a write horizon: the producer raises it, a few
//! sequences ahead (`AHEAD`), before it writes past it, and the copy check reads it. Today's
//! check also trusts a line settled closed at or below the copied sequence's next lap (a
//! refused claim wrote nothing, and a write came after the producer acquired Running); in
//! this design a write comes before both, and the horizon alone decides. The last model
//! runs that against a stop, a start and a stop. What it leaves to design: the horizon's
//! store once every `AHEAD` events, on the line copying readers read (fewer stores against
//! more copies dropped: a reader within `AHEAD` of its lap drops them); a horizon never
//! taken back, so after a stop a reader near the oldest end drops up to `AHEAD - 1` intact
//! events (before layout 13 a copy made while the ring stayed closed was kept); the horizon kept within
//! what the wrap gate passed, since other code reads the claim word as what may be written
//! (a consumer's lap check, the error policy's, an attach's takeover of an entry); an
//! attaching producer that loads it and never lowers it; an optional reader at the head,
//! which reads the cursor and so needs the consumer's lifecycle reads too; and a look at the
//! lifecycle word before the write, so that a publish on a closed ring does not overwrite
//! the slot of the stop sequence.
//!
//! On paper since (not modelled): the horizon raised, when the producer's next sequence
//! `s` reaches it, to `min(s + AHEAD, gate + capacity)` with the producer's cached gate, so
//! it never names a slot the wrap gate has not passed and a gating consumer's lap check
//! reads it as it read the claim before layout 13 (a producer held at the gate raises it once per scan
//! that moves the gate, a free-running one once per `AHEAD` events); an attaching producer
//! raises it from where it finds it; and the look at the lifecycle word before the write is
//! (p1) itself, moved before the payload ((p1), the write, then (p2) to (p5): a refusal at
//! (p1) writes nothing, and the window between (p1) and (p4) only grows, which the
//! handshake does not mind since (p4) compares the whole word with (p1)'s).
//!
//! Chosen since, from a measurement (docs/PERFORMANCE.md, "The folded publish, measured"):
//! no test of the horizon in the per-event path. The producer stores it where it sets its
//! common case's bound (the gate plus the capacity, but at most a quarter ring ahead), to
//! that bound, before any write under it; a test per publish cost the per-event rows a
//! twentieth whatever the distance, and the gate's full limit made an optional reader at a
//! slack of 0 drop intact events. The property the last model checks holds as well (no
//! write at or past the horizon, the horizon stored before the Release fence of the first
//! write under it).
//!
//! The models use a SeqCst fence for the consumer's fence. The client needs none: loading
//! the cursor and the second lifecycle word SeqCst (plain loads on x86-64, `ldar` on
//! AArch64) gives the same guarantee in C++20. Were a stop's (s3) to read a cursor before
//! `c` while the consumer read `c` and then the word before (s1): the consumer's two loads
//! are in the SeqCst order S in program order; its second load is coherence-ordered before
//! (s1), which happens before the stopper's heavy fence (a full barrier on the stopper's
//! CPU, its SeqCst fence), so that load precedes the fence in S ([atomics.order] 4.2); the
//! (s3) load after the fence is coherence-ordered before the consumer's cursor load, so the
//! fence precedes that load in S (4.3): a cycle. loom runs SeqCst loads as Acquire, so the
//! fence stands in for that order here (as it does after an attach's CAS in
//! `loom_folded_attach.rs`, where the same SeqCst cursor load makes that fence needless
//! too). No membarrier registration is needed on the consumer's side. The position an
//! attaching consumer and a gate scan read (the cursor may hold an event a stop in progress
//! will refuse) is modelled in `loom_folded_attach.rs`, claim guards (a claim before the
//! writes, recorded in `pending` beside the cursor) in `loom_folded_guard.rs`. A dead
//! producer's repair is in `loom_folded_repair.rs`. Not modelled (ARCHITECTURE.md, "The
//! store is the publish", lists them): the other attaches and scans (their list is in
//! `loom_folded_attach.rs`); and the write horizon's points above. While the line is
//! stopping, consumers deliver below the last claim (the stop decides only that one: the
//! models check it, since they run the client's read); a parked one is woken by the stop's
//! wake once it settles (on paper, not modelled).
//!
//! The controls of the first two models each drop one step of the consumer's reads; those
//! of the last raise the horizon after the write or use the copy check before layout 13. All are
//! expected to fail. The stop-and-start model runs with a preemption bound of 3 (unless
//! `LOOM_MAX_PREEMPTIONS` says otherwise): loom found the failure of a consumer that reads
//! the lifecycle word only after the cursor with that bound and not with 2 (the consumer
//! reads a refused event's cursor store that the start's take-back follows in the word's
//! order, and the word after the start). A SeqCst fence in loom joins one clock in
//! execution order, stronger than C++20's, so the argument above, not the model alone,
//! carries the consumer's fence. The first two models also check that some interleaving
//! refuses an event after its cursor store, the case the consumer's reads are for; the
//! last, that some interleaving keeps a copy.

mod loom_env;
mod loom_folded_ring;
mod loom_word;

use std::sync::atomic::AtomicBool;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_env::env;
use loom_folded_ring::{bound, spawn_lifecycle, witness, Path, Raise, Reads, Ring};
use loom_word::{model, model_bound};

use shmring::fixed;
use shmring::line::{self, Refused, SeenRunning, Word};
use shmring_layout::{lifecycle, RingState};

/// Slots in the ring of the consumers' models: more than their events, so that no write
/// wraps.
const CAP: usize = 4;

/// A consumer's poll: deliver `next..bound`, each event as its payload `(seq, attempt)`.
fn poll(ring: &Ring<CAP>, reads: Reads, next: &mut u64, got: &mut Vec<(u64, u64)>) {
    let Some(end) = bound(ring, reads) else {
        return;
    };
    while *next < end {
        let [a, b] = &ring.slots[*next as usize % CAP];
        // Relaxed: ordered by the Acquire cursor load.
        got.push((a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)));
        *next += 1;
    }
}

/// Event 0 published by a producer that retries on `Closed`, while another process stops
/// and starts the ring and a consumer polls, then polls again when everyone is done.
/// The consumer delivers exactly the accepted attempt: never one a stop refused, never a
/// sequence twice, nothing lost. Some interleaving refuses attempt 1 after its store, and
/// some accepts it in (p5) after a start, the stop having read the cursor before its
/// store.
fn a_stop_and_start_during_a_publish(reads: Reads) {
    let (refused, after_start) = (witness(), witness());
    let (refused_seen, after_start_seen) = (refused.clone(), after_start.clone());
    model_bound(3, move || {
        let ring = Arc::new(Ring::<CAP>::new());
        let producer = {
            let ring = ring.clone();
            let (refused, after_start) = (refused.clone(), after_start.clone());
            thread::spawn(move || {
                let mut seen = SeenRunning::default();
                let accepted = match ring.publish(0, 1, &mut seen, None) {
                    (Ok(()), path) => (1, path),
                    (Err(Refused::Closed), path) => {
                        if path == Path::Decided {
                            refused.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        ring.wait_running();
                        let (r, path) = ring.publish(0, 2, &mut seen, None);
                        r.expect("the retry, after the start");
                        (2, path)
                    }
                    (Err(Refused::Deleted), _) => unreachable!("nobody removes the ring"),
                };
                // Acquire: the model's own look after its publish, pairing with the start's
                // Release CAS to Running ((t4)), which follows the stop's record ((s4)).
                // Accepted by (p5) where the stop had recorded 0: the stop read the cursor
                // before the claim's store, and (p5) found the line running again with
                // the cursor still holding it.
                let now = ring.life.load(Ordering::Acquire);
                let restarted = lifecycle::generation(now) > 0
                    && lifecycle::state(now) == RingState::Running as u32;
                // Relaxed: ordered by the Acquire load above.
                if accepted.1 == Path::Decided
                    && restarted
                    && ring.stop_seq.load(Ordering::Relaxed) == 0
                {
                    after_start.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                accepted.0
            })
        };
        let lifecycle = spawn_lifecycle(&ring, true);
        let (mut next, mut got) = (0, Vec::new());
        poll(&ring, reads, &mut next, &mut got);
        let accepted = producer.join().unwrap();
        lifecycle.join().unwrap();
        poll(&ring, reads, &mut next, &mut got);
        assert_eq!(
            got,
            vec![(0, accepted)],
            "delivered {got:?}, where attempt {accepted} of event 0 was accepted"
        );
    });
    let seen = |w: &AtomicBool| w.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        seen(&refused_seen),
        "no interleaving refused attempt 1 after its store"
    );
    assert!(
        seen(&after_start_seen),
        "no interleaving accepted attempt 1 in (p5) after a start"
    );
}

#[test]
fn a_consumer_delivers_exactly_the_accepted_attempt_across_a_stop_and_start() {
    a_stop_and_start_during_a_publish(Reads::Both);
}

#[test]
#[should_panic(expected = "was accepted")]
fn control_a_consumer_that_trusts_the_cursor_while_the_word_it_read_first_runs() {
    a_stop_and_start_during_a_publish(Reads::NoAfter);
}

#[test]
#[should_panic(expected = "was accepted")]
fn control_a_consumer_that_reads_the_lifecycle_only_after_the_cursor() {
    a_stop_and_start_during_a_publish(Reads::NoBefore);
}

#[test]
#[should_panic(expected = "was accepted")]
fn control_a_consumer_without_its_fence() {
    a_stop_and_start_during_a_publish(Reads::NoFence);
}

/// Events 0 and 1 by a producer that stops at the first refusal; a stop (and no start)
/// meanwhile. A consumer that polls during the stop delivers only accepted events, and,
/// once the stop is settled, every one of them (the drain's promise: everything below the
/// stop sequence is published). Some interleaving refuses an event after its store.
fn a_stop_during_two_publishes(reads: Reads) {
    let refused = witness();
    let refused_seen = refused.clone();
    model(move || {
        let ring = Arc::new(Ring::<CAP>::new());
        let producer = {
            let ring = ring.clone();
            let refused = refused.clone();
            thread::spawn(move || {
                let mut seen = SeenRunning::default();
                let mut accepted = 0;
                for s in 0..2u64 {
                    match ring.publish(s, 1, &mut seen, None) {
                        (Ok(()), _) => accepted += 1,
                        (Err(_), path) => {
                            if path == Path::Decided {
                                refused.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            break;
                        }
                    }
                }
                accepted
            })
        };
        let stopper = spawn_lifecycle(&ring, false);
        let (mut next, mut got) = (0, Vec::new());
        poll(&ring, reads, &mut next, &mut got);
        let accepted = producer.join().unwrap();
        let stop = stopper.join().unwrap();
        assert_eq!(
            stop, accepted,
            "the stop sequence is the accepted events' end"
        );
        poll(&ring, reads, &mut next, &mut got);
        let want: Vec<(u64, u64)> = (0..accepted).map(|s| (s, 1)).collect();
        assert_eq!(
            got, want,
            "delivered {got:?}, where {accepted} events were accepted"
        );
    });
    assert!(
        refused_seen.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving refused an event after its store"
    );
}

#[test]
fn a_stop_delivers_every_accepted_event_and_no_refused_one() {
    a_stop_during_two_publishes(Reads::Both);
}

#[test]
#[should_panic(expected = "events were accepted")]
fn control_a_stopped_consumer_that_trusts_the_cursor() {
    a_stop_during_two_publishes(Reads::NoAfter);
}

/// The copy check of the protocol before this design (layout 12): the horizon (then the
/// claim) trusted less than a line settled closed at or below the copied sequence's next
/// lap, as if a refused claim wrote nothing. In this design a write a stop refuses comes
/// before the refusal.
fn held_trusting_a_closed_line(r: &Ring<2>, seq: u64) -> bool {
    // Acquire fence: pairs with the producer's Release fence before its write.
    fence(Ordering::Acquire);
    let bound = seq + fixed::Words::capacity(r);
    // Relaxed: ordered by the fence above.
    r.horizon.load(Ordering::Relaxed) <= bound
        || line::closed_at(&r.life, &r.stop_seq).is_some_and(|stop| stop <= bound)
}

/// A ring of two slots, events 0 and 1 published. One thread stops it, starts it and stops
/// it again; the producer publishes sequence 2 (into 0's slot) once meanwhile: its write
/// comes before its claim, so the write is there whether a stop refuses it or not. A
/// reader a whole ring behind copies 0; a copy it keeps is 0's, and some interleaving
/// keeps one.
fn a_reader_a_ring_behind_a_concurrent_write(held: fn(&Ring<2>, u64) -> bool, raise: Raise) {
    let kept = witness();
    let kept_seen = kept.clone();
    model(move || {
        let ring = Arc::new(Ring::<2>::new());
        let (mut horizon, mut seen) = (0, SeenRunning::default());
        for s in 0..2 {
            ring.publish(s, s, &mut seen, Some((&mut horizon, raise)))
                .0
                .expect("publish");
        }
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
                // Refused or accepted, the slot of 0 holds 2's bytes.
                let _ = ring.publish(2, 2, &mut seen, Some((&mut horizon, raise)));
            })
        };
        let [a, b] = &ring.slots[0];
        // Relaxed: a racy copy, checked below.
        let copy = (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
        if held(&ring, 0) {
            assert_eq!(copy, (0, 0), "an optional copy of 0 kept another write");
            kept.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        lifecycle.join().unwrap();
        producer.join().unwrap();
    });
    assert!(
        kept_seen.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving kept a copy of 0"
    );
}

#[test]
fn an_optional_copy_checked_against_the_horizon_is_never_another_laps() {
    a_reader_a_ring_behind_a_concurrent_write(fixed::copy_held, Raise::BeforeWrite);
}

#[test]
#[should_panic(expected = "kept another write")]
fn control_a_horizon_raised_after_the_write() {
    a_reader_a_ring_behind_a_concurrent_write(fixed::copy_held, Raise::AfterWrite);
}

#[test]
#[should_panic(expected = "kept another write")]
fn control_the_layout_12_copy_check_trusts_a_closed_line_over_a_later_write() {
    a_reader_a_ring_behind_a_concurrent_write(held_trusting_a_closed_line, Raise::BeforeWrite);
}
