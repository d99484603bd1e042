//! Loom models of claim guards on a fixed-size ring whose claim is its publish (the design
//! in `loom_folded.rs`'s module comment; the model ring in `loom_folded_ring`).
//!
//! A claim guard (`Producer::claim`, `claim_batch`) hands out its sequences before the
//! user writes them, and its commit cannot be refused: a stop after the claim includes it,
//! and the stop's drain waits for the commit. So a guard's claim stays a claim, made before
//! the writes. It is made on the cursor, the line's claim word, as a publish makes it
//! ((p1) to (p5), the stop reading it, the start taking a refused one back), which would
//! publish unwritten slots, were it not for one more word, `pending`, beside the cursor,
//! written by the producer (and, once it is dead, by the repair of its claim:
//! `loom_folded_repair.rs`):
//!
//! ```text
//! guard, claim s..s+n                          consumer
//! pending = s             (Release)            l1 = life            (Acquire)
//! fence(Release)                               c = cursor           (Acquire)
//! (p1)-(p5) on the cursor: cursor = s + n      c = min(c, pending)  (Acquire)
//! refused: pending = NONE (Release), Closed    fence; l2 = life     (Acquire)
//! accepted: the user writes s..s+n             as before: Running up to c, settled
//! commit: pending = NONE  (Release)              closed up to min(c, stop_seq)
//! drop: tombs[s..s+n], tomb_end, then          tomb_end             (Relaxed, after)
//!       pending = NONE    (Release)
//! ```
//!
//! (The models' consumer; the client's loads the cursor, `pending` and `l2` SeqCst, with no
//! fence: `loom_folded.rs`.)
//!
//! A consumer whose cursor load reads the claim's store sees `pending` at `s` or the
//! Release store that ended the claim (the Release fence before the claim's store), so it
//! delivers nothing of the claim before its commit, and all of it after (a commit's
//! payloads, a drop's tomb words, both before that Release store). Every store of `pending`
//! is Release: a consumer that reads the next guard's record beside an earlier guard's
//! cursor store must see that guard's writes, and a Relaxed store after a Release one
//! carries nothing (C++20 release sequences hold read-modify-writes only); a refused
//! guard's take-back, after the record's Release fence, would carry them Relaxed too, and
//! is Release for uniformity. In the client, a consumer's load of `pending` is SeqCst as
//! well (a plain load on x86-64): an attach's argument without a fence after its CAS
//! (`loom_folded_attach.rs`) needs every word of the position in the SeqCst order. The
//! stop, the start and a new producer's attach read the cursor as before; a consumer's
//! position (its polls) is the lesser of it and `pending`. Consumers pay one more load, of a
//! word on the cursor's line (layout 13 put it there); a guard pays three stores and a fence
//! (the record, the claim, the end), where before it paid two (the claim, the cursor). A
//! publish in its common case writes first and claims last, and never touches `pending`;
//! the client's other claims (the try and timeout forms, batches) take a guard's steps.
//!
//! A refused guard's record is taken back by the producer itself, unlike a refused claim's
//! cursor store: only consumers (and a dead producer's repair) read `pending`, as a bound,
//! and no sequence is accepted by what it holds. While the line stays closed the stop
//! sequence bounds consumers at `s` whatever `pending` says; a later event's Release fence
//! (or a later guard's record) comes after the take-back in the producer's order.
//!
//! The models: a guard (of one sequence, and of two) across a stop and a start, retried on
//! `Closed`, beside a consumer;
//! a guard dropped (or refused, and then an event published with `publish` instead) across
//! a stop and a start; two guards in a row, the first committed or dropped. The controls,
//! each one step changed, all fail: a consumer that does not read `pending`, or reads it
//! before the cursor; no fence after the record; a commit that ends the claim Relaxed
//! (each delivers an unwritten slot); a refused record left in place (consumers stall
//! below the next publish, which does not touch `pending`); a Relaxed record (the
//! consumer reads the first guard's slot before its commit). Witnesses: some interleaving
//! refuses a guard's claim after its cursor store.
//!
//! A guard of two sequences (`claim_batch`) runs across a stop and a start too. Not
//! modelled: copying (optional) readers, for which the guard raises the write horizon to
//! at least `s + n` before its fence, and an optional reader at the head reads `pending`
//! as a consumer does; a drain waiting for an open guard's commit; a guard leaked with
//! `mem::forget` (the producer's next call drops it as tombstones, ending `pending` too).

mod loom_env;
mod loom_folded_ring;
mod loom_word;

use loom::sync::Arc;
use loom::thread;

use loom_folded_ring::{
    assert_reached, poll_tombs, reached, spawn_lifecycle, witness, Guard, Path, Reads, Ring, TOMB,
};
use loom_word::model;

use shmring::line::{Refused, SeenRunning};

/// Slots in the models' ring: more than their events, so that no write wraps.
const CAP: usize = 4;

/// A claim guard of event 0 by a producer that claims again on `Closed` once the ring
/// runs, then commits the attempt accepted, while another process stops and starts the
/// ring and a consumer polls, then polls again when everyone is done. The consumer
/// delivers exactly the committed attempt: never a slot before its commit, nothing lost.
/// `n`: the guard's sequences (2: `claim_batch`'s, its events 0 and 1).
fn a_guard_across_a_stop_and_start(reads: Reads, how: Guard, n: u64) {
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
                    match ring.claim_guard(0, n, &mut seen, how) {
                        (Ok(()), _) => {
                            ring.commit_guard(0, n, attempt, how);
                            return attempt;
                        }
                        (Err(Refused::Closed), path) => {
                            if path == Path::Decided {
                                reached(&refused);
                            }
                            ring.wait_running();
                            attempt += 1;
                        }
                        (Err(Refused::Deleted), _) => unreachable!("nobody removes the ring"),
                    }
                }
            })
        };
        let lifecycle = spawn_lifecycle(&ring, true);
        let (mut next, mut got) = (0, Vec::new());
        poll_tombs(&ring, reads, &mut next, &mut got);
        let committed = producer.join().unwrap();
        lifecycle.join().unwrap();
        poll_tombs(&ring, reads, &mut next, &mut got);
        let want: Vec<(u64, u64)> = (0..n).map(|s| (s, committed)).collect();
        assert_eq!(
            got, want,
            "delivered {got:?}, where attempt {committed} of {want:?} was committed"
        );
    });
    assert_reached(&refused_seen, "refused a guard's claim after its store");
}

#[test]
fn a_consumer_delivers_a_guards_event_only_once_committed_across_a_stop_and_start() {
    a_guard_across_a_stop_and_start(Reads::Both, Guard::Design, 1);
}

#[test]
fn a_consumer_delivers_a_batch_guards_events_only_once_committed_across_a_stop_and_start() {
    a_guard_across_a_stop_and_start(Reads::Both, Guard::Design, 2);
}

#[test]
#[should_panic(expected = "was committed")]
fn control_a_consumer_that_does_not_read_pending_delivers_an_unwritten_slot() {
    a_guard_across_a_stop_and_start(Reads::NoPending, Guard::Design, 1);
}

/// `pending` read before the cursor: the record not yet, the claim's cursor store already.
#[test]
#[should_panic(expected = "was committed")]
fn control_a_consumer_that_reads_pending_before_the_cursor_delivers_an_unwritten_slot() {
    a_guard_across_a_stop_and_start(Reads::PendingFirst, Guard::Design, 1);
}

/// No fence between the record and the claim: the cursor store seen, the record not.
#[test]
#[should_panic(expected = "was committed")]
fn control_a_guard_without_the_fence_after_its_record() {
    a_guard_across_a_stop_and_start(Reads::Both, Guard::NoFence, 1);
}

/// The commit's end of the claim Relaxed: seen before the payload.
#[test]
#[should_panic(expected = "was committed")]
fn control_a_commit_that_ends_the_claim_with_a_relaxed_store() {
    a_guard_across_a_stop_and_start(Reads::Both, Guard::RelaxedEnd, 1);
}

/// A claim guard of event 0, dropped if its claim is accepted (a tombstone), while another
/// process stops and starts the ring; on `Closed` the producer waits for the ring to run
/// and publishes 0 with `publish` instead (which does not touch `pending`), else it
/// publishes 1 so (either again once the ring runs, if the stop refuses it). A consumer
/// polls meanwhile and once everyone is done: it delivers the tombstone and 1, or 0 alone.
/// The refused guard's record is taken back while the consumer may be polling.
fn a_dropped_or_refused_guard_then_a_publish(how: Guard) {
    let refused = witness();
    let refused_seen = refused.clone();
    model(move || {
        let ring = Arc::new(Ring::<CAP>::new());
        let producer = {
            let ring = ring.clone();
            let refused = refused.clone();
            thread::spawn(move || {
                let mut seen = SeenRunning::default();
                let next = match ring.claim_guard(0, 1, &mut seen, how) {
                    (Ok(()), _) => {
                        ring.drop_guard(0, 1, how);
                        1
                    }
                    (Err(_), path) => {
                        if path == Path::Decided {
                            reached(&refused);
                        }
                        ring.wait_running();
                        0
                    }
                };
                while ring.publish(next, 1, &mut seen, None).0.is_err() {
                    ring.wait_running();
                }
                next
            })
        };
        let lifecycle = spawn_lifecycle(&ring, true);
        let (mut at, mut got) = (0, Vec::new());
        poll_tombs(&ring, Reads::Both, &mut at, &mut got);
        let next = producer.join().unwrap();
        lifecycle.join().unwrap();
        poll_tombs(&ring, Reads::Both, &mut at, &mut got);
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
    assert_reached(&refused_seen, "refused a guard's claim after its store");
}

#[test]
fn a_dropped_guard_is_a_tombstone_and_a_refused_one_leaves_nothing_behind() {
    a_dropped_or_refused_guard_then_a_publish(Guard::Design);
}

#[test]
#[should_panic(expected = "were published")]
fn control_a_refused_guards_record_left_in_place_stalls_the_consumers() {
    a_dropped_or_refused_guard_then_a_publish(Guard::NoReset);
}

/// Two guards in a row on a running ring, the first committed (or dropped, `drop_first`),
/// the second committed, while a consumer polls, then polls again once the producer is
/// done. The second guard's record must carry the first's end of claim to a consumer that
/// reads the first's cursor store and the second's record.
fn two_guards_in_a_row(drop_first: bool, how: Guard) {
    model(move || {
        let ring = Arc::new(Ring::<CAP>::new());
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut seen = SeenRunning::default();
                ring.claim_guard(0, 1, &mut seen, how)
                    .0
                    .expect("the ring runs");
                if drop_first {
                    ring.drop_guard(0, 1, how);
                } else {
                    ring.commit_guard(0, 1, 1, how);
                }
                ring.claim_guard(1, 1, &mut seen, how)
                    .0
                    .expect("the ring runs");
                ring.commit_guard(1, 1, 1, how);
            })
        };
        let (mut at, mut got) = (0, Vec::new());
        poll_tombs(&ring, Reads::Both, &mut at, &mut got);
        producer.join().unwrap();
        poll_tombs(&ring, Reads::Both, &mut at, &mut got);
        let first = if drop_first { (0, TOMB) } else { (0, 1) };
        assert_eq!(
            got,
            vec![first, (1, 1)],
            "delivered {got:?}, where {first:?} and (1, 1) were published"
        );
    });
}

#[test]
fn a_guard_after_a_committed_one_carries_its_commit() {
    two_guards_in_a_row(false, Guard::Design);
}

#[test]
fn a_guard_after_a_dropped_one_carries_its_tombstone() {
    two_guards_in_a_row(true, Guard::Design);
}

/// The second record Relaxed: a consumer reads the first claim's cursor store and the
/// second record, and the first event's payload from before its commit.
#[test]
#[should_panic(expected = "were published")]
fn control_a_relaxed_record_does_not_carry_the_previous_commit() {
    two_guards_in_a_row(false, Guard::RelaxedRecord);
}
