//! Loom models of the sequence line (`client/src/line.rs`): the shipping `Line` code, run on
//! loom's atomics through the `Word` and `Env` traits it is written against.
//!
//! What every model checks, in every interleaving it explores:
//!
//! - **refused or delivered**: once the line settles closed at `stop`, the sequences accepted
//!   are exactly `0..stop` (each stamped by its publisher: no hole), and none at or above it;
//! - **one position**: every position a thread reads during the race (an attach's exact
//!   position, a gate scan's position) is at most the stop sequence, so a consumer that
//!   attaches while the ring stops never starts past the next run's first event;
//! - **no rewind**: after a start, the next claim gets exactly the stop sequence.
//!
//! loom cannot run `membarrier`; what the asymmetric fence guarantees is what a `SeqCst`
//! fence on both sides guarantees (a full barrier between each side's store and its load),
//! so `heavy_fence` and the producer's light fence are `SeqCst` fences here, as in
//! `loom_park.rs`. The last model removes them and requires loom to find the single-producer
//! claim that is accepted past the stop: the model is only worth something if it can fail.
//!
//! The models of a new single producer taking the position (`Line::take_position`, (a1) to
//! (a4) in `line.rs`) come last. Under the attach's preconditions (the predecessor gone, its
//! claims stamped or repaired), whoever else writes the claim word during the step writes
//! the value (a3) writes, so those models hold with or without the step's fence and
//! re-check, and fail on a wrong position. The handshake itself is checked on a running line
//! whose word is past its position (a last claim left unstamped), where the two controls
//! that drop the fence or the re-check must fail.
//!
//! Preemption bound 2 by default (`LOOM_MAX_PREEMPTIONS` overrides it): the store-buffering
//! and takeover bugs each need one preemption to show.

use loom::sync::atomic::{fence, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

mod loom_env;
mod loom_word;

use loom_env::{env, ModelEnv, DEAD};
use loom_word::{model, W};
use shmring::line::{Env, Line, LineError, Refused, SeenRunning, TakeError, Word};
use shmring::RingState;
use shmring_layout::{lifecycle, CLAIM_CLOSED, MAX_SEQUENCE};

/// Slots in the model's ring: more than the claims any interleaving makes.
const SLOTS: usize = 4;
const EMPTY: u64 = u64::MAX;

struct Ring {
    claim: W,
    life: W,
    stop_seq: W,
    single: bool,
    stamps: [AtomicU64; SLOTS],
}

impl Ring {
    fn new(single: bool, life: u64, claim: u64) -> Self {
        Ring {
            claim: W::new(claim),
            life: W::new(life),
            stop_seq: W::new(0),
            single,
            stamps: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
        }
    }

    /// Whether slot `s` holds sequence `s` (the `published` of `Line::position`).
    fn published(&self, s: u64) -> bool {
        // Acquire: pairs with the Release stamp in `publish_from`.
        self.stamps[s as usize].load(Ordering::Acquire) == s
    }

    fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.life,
            stop_seq: &self.stop_seq,
            single: self.single,
            max_claim: (SLOTS / 2) as u64,
            lone: &shmring::line::NoLone,
        }
    }
}

fn running() -> u64 {
    lifecycle::pack(0, RingState::Running as u32, 0)
}

/// The producer side: `count` single publishes (claim, stamp). Returns the accepted ones.
fn publish(ring: &Ring, count: u64, fenced: bool) -> Vec<u64> {
    publish_claims(ring, count, 1, fenced)
}

/// `count` claims of `n` sequences each (a batch publish stamps all `n` in order).
fn publish_claims(ring: &Ring, count: u64, n: u64, fenced: bool) -> Vec<u64> {
    publish_from(ring, 0, count, n, fenced)
}

/// As `publish_claims`, from the sequence `next` (a single producer's position; its first
/// claim starts from the default `SeenRunning`, as a new producer's does).
fn publish_from(ring: &Ring, mut next: u64, count: u64, n: u64, fenced: bool) -> Vec<u64> {
    let e = env(1, fenced);
    let line = ring.line();
    let mut accepted = Vec::new();
    let mut seen = SeenRunning::default();
    for _ in 0..count {
        let claimed = if ring.single {
            line.claim_single(&e, &mut seen, next, n, || {
                if fenced {
                    fence(Ordering::SeqCst)
                }
            })
            .map(|()| next)
        } else {
            line.claim_multi(n)
        };
        match claimed {
            Ok(s) => {
                next = s + n;
                for seq in s..s + n {
                    // Release: the model's stamp, as `Producer::stamp`.
                    ring.stamps[seq as usize].store(seq, Ordering::Release);
                    accepted.push(seq);
                }
            }
            Err(Refused::Closed) => {}
            Err(Refused::Deleted) => {}
        }
    }
    accepted
}

/// A running single-producer ring and a thread publishing `count` events into it
/// (`fenced`: with the producer's fence), which returns the accepted sequences.
fn single_with_publisher(count: u64, fenced: bool) -> (Arc<Ring>, thread::JoinHandle<Vec<u64>>) {
    let ring = Arc::new(Ring::new(true, running(), 0));
    let publisher = {
        let ring = ring.clone();
        thread::spawn(move || publish(&ring, count, fenced))
    };
    (ring, publisher)
}

/// Every stamp below `stop` is its sequence, none at or above it: refused or delivered.
fn check_run(ring: &Ring, accepted: &[u64], stop: u64) {
    check_run_from(ring, accepted, 0, stop);
}

/// As `check_run`, for the sequences from `from` on (`accepted`: exactly `from..stop`).
fn check_run_from(ring: &Ring, accepted: &[u64], from: u64, stop: u64) {
    for (s, stamp) in ring.stamps.iter().enumerate().skip(from as usize) {
        let stamp = stamp.load(Ordering::Acquire);
        if (s as u64) < stop {
            assert_eq!(
                stamp, s as u64,
                "sequence {s} below the stop {stop} was never published"
            );
        } else {
            assert_eq!(
                stamp, EMPTY,
                "sequence {s} at or past the stop {stop} was published"
            );
        }
    }
    assert_eq!(accepted, (from..stop).collect::<Vec<_>>());
}

/// A publisher, a stopper and an attacher race; then the main thread starts the ring again
/// and claims once more.
fn stop_attach_race(single: bool, batch: u64) {
    model(move || {
        let ring = Arc::new(Ring::new(single, running(), 0));
        let publisher = {
            let ring = ring.clone();
            thread::spawn(move || publish_claims(&ring, 2 / batch, batch, true))
        };
        let stopper = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().close(&env(2, true), RingState::Stopped))
        };
        // The attacher: where a consumer attaching now starts, and what a gate scan reads.
        let e = env(3, true);
        let published = |s: u64| ring.stamps[s as usize].load(Ordering::Acquire) == s;
        let attach = ring.line().position(published);
        let scan = ring.line().position(published);
        let accepted = publisher.join().unwrap();
        let (stop, _) = stopper.join().unwrap().expect("stop");
        assert!(
            attach <= stop,
            "an attach at {attach} starts past the stop at {stop}"
        );
        assert!(scan <= stop, "a scan read {scan} past the stop at {stop}");
        check_run(&ring, &accepted, stop);
        // Start: the next claim gets exactly the stop sequence.
        ring.line().reopen(&env(3, true)).expect("start");
        let next = if single {
            ring.line()
                .claim_single(&e, &mut SeenRunning::default(), stop, 1, || {
                    fence(Ordering::SeqCst)
                })
                .map(|()| stop)
        } else {
            ring.line().claim_multi(1)
        };
        assert_eq!(next, Ok(stop), "no rewind, no gap");
    });
}

#[test]
fn multi_producer_stop_racing_publish_and_attach() {
    stop_attach_race(false, 1);
}

#[test]
fn single_producer_stop_racing_publish_and_attach() {
    stop_attach_race(true, 1);
}

#[test]
fn multi_producer_stop_racing_a_batch_and_attach() {
    stop_attach_race(false, 2);
}

#[test]
fn single_producer_stop_racing_a_batch_and_attach() {
    stop_attach_race(true, 2);
}

/// A ring stopped at 1 (sequence 0 published) whose claim word holds `claim`.
fn stopped_at_one(single: bool, claim: u64) -> Arc<Ring> {
    let stopped = lifecycle::pack(3, RingState::Stopped as u32, 0);
    let ring = Arc::new(Ring::new(single, stopped, claim));
    ring.stop_seq.store(1, Ordering::SeqCst);
    ring.stamps[0].store(0, Ordering::SeqCst);
    ring
}

/// Two threads starting `ring` (as processes 10 and 11).
fn two_starters(ring: &Arc<Ring>) -> Vec<thread::JoinHandle<Result<u64, LineError>>> {
    (0..2u32)
        .map(|i| {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(10 + i, true)))
        })
        .collect()
}

/// Two starters and a refused claim race on a stopped line: exactly one start reopens it,
/// at the stop sequence.
fn two_starts(single: bool) {
    model(move || {
        let ring = stopped_at_one(single, if single { 1 } else { 1 | CLAIM_CLOSED });
        let starters = two_starters(&ring);
        // A claim racing the starts (multi-producer: a `fetch_add`, refused or at 1).
        let raced = if single {
            None
        } else {
            Some(ring.line().claim_multi(1))
        };
        let results: Vec<_> = starters.into_iter().map(|h| h.join().unwrap()).collect();
        let ok = results.iter().filter(|r| **r == Ok(1)).count();
        assert_eq!(ok, 1, "{results:?}");
        assert!(
            results.contains(&Err(LineError::AlreadyRunning)),
            "{results:?}"
        );
        assert_eq!(ring.line().life().state, Some(RingState::Running));
        let expect = match raced {
            Some(Ok(s)) => {
                assert_eq!(
                    s, 1,
                    "a claim accepted across the start gets the stop sequence"
                );
                2
            }
            _ => 1,
        };
        assert_eq!(
            ring.line().position(|_| true),
            expect,
            "reopened at the stop sequence"
        );
    });
}

#[test]
fn multi_producer_two_starts() {
    two_starts(false);
}

#[test]
fn single_producer_two_starts() {
    two_starts(true);
}

/// A start and a remove race on a stopped line: the ring ends deleted, closed for good.
#[test]
fn start_racing_remove() {
    for single in [false, true] {
        model(move || {
            let stopped = lifecycle::pack(1, RingState::Stopped as u32, 0);
            let claim = if single { 0 } else { CLAIM_CLOSED };
            let ring = Arc::new(Ring::new(single, stopped, claim));
            let starter = {
                let ring = ring.clone();
                thread::spawn(move || ring.line().reopen(&env(10, true)))
            };
            let removed = ring.line().close(&env(11, true), RingState::Deleted);
            let started = starter.join().unwrap();
            assert!(removed.is_ok(), "{removed:?}");
            assert!(
                matches!(started, Ok(0) | Err(LineError::Deleted)),
                "{started:?}"
            );
            assert_eq!(ring.line().life().state, Some(RingState::Deleted));
            assert!(ring.line().is_closed());
            let e = env(1, true);
            let claim = if single {
                ring.line()
                    .claim_single(&e, &mut SeenRunning::default(), 0, 1, || {
                        fence(Ordering::SeqCst)
                    })
                    .map(|()| 0)
            } else {
                ring.line().claim_multi(1)
            };
            assert_eq!(claim, Err(Refused::Deleted));
        });
    }
}

/// Another process overwrote the lifecycle word of a running ring (a value no state has)
/// while a producer publishes; a remove then closes the line from that exact word
/// (`Line::close_corrupt`). Every accepted claim is published below the recorded stop, the
/// line ends Deleted and closed, and a later claim is refused as deleted. (A claim whose
/// (p4) met the corrupt word is refused; its position may lie below the record, which for
/// a deleted ring no start ever takes back.)
#[test]
fn a_remove_closes_a_corrupt_line_from_its_word() {
    for single in [false, true] {
        model(move || {
            let ring = Arc::new(Ring::new(single, running(), 0));
            let publisher = {
                let ring = ring.clone();
                thread::spawn(move || publish(&ring, 2, true))
            };
            let corrupt = lifecycle::pack(0, 0xee, 0);
            ring.life.store(corrupt, Ordering::SeqCst);
            let closed = ring
                .line()
                .close_corrupt(&env(11, true), corrupt, RingState::Deleted);
            let accepted = publisher.join().unwrap();
            let (stop, _) = closed.expect("closed from the corrupt word");
            for &s in &accepted {
                assert!(s < stop, "sequence {s} accepted past the stop {stop}");
                assert!(
                    ring.published(s),
                    "sequence {s} accepted and never published"
                );
            }
            assert_eq!(ring.line().life().state, Some(RingState::Deleted));
            assert!(ring.line().is_closed());
            let e = env(1, true);
            let claim = if single {
                let next = accepted.last().map_or(0, |s| s + 1);
                ring.line()
                    .claim_single(&e, &mut SeenRunning::default(), next, 1, || {
                        fence(Ordering::SeqCst)
                    })
                    .map(|()| next)
            } else {
                ring.line().claim_multi(1)
            };
            assert_eq!(claim, Err(Refused::Deleted));
        });
    }
}

/// A stopper died owning `Stopping` (before or after it closed the multi-producer line). A
/// stop and a start race to finish it: the line ends closed or open at the one recorded
/// stop sequence, and a claim racing them is refused or delivered.
#[test]
fn a_dead_stoppers_transition_is_finished_once() {
    for closed in [false, true] {
        model(move || {
            let dead = lifecycle::pack(5, RingState::Stopping as u32, DEAD);
            // One event published (sequence 0); a dead owner that closed recorded 1 first.
            let claim = if closed { 1 | CLAIM_CLOSED } else { 1 };
            let ring = Arc::new(Ring::new(false, dead, claim));
            ring.stop_seq
                .store(if closed { 1 } else { 0 }, Ordering::SeqCst);
            ring.stamps[0].store(0, Ordering::SeqCst);
            let stopper = {
                let ring = ring.clone();
                thread::spawn(move || ring.line().close(&env(20, true), RingState::Stopped))
            };
            let starter = {
                let ring = ring.clone();
                thread::spawn(move || ring.line().reopen(&env(21, true)))
            };
            let claim = ring.line().claim_multi(1);
            if let Ok(s) = claim {
                ring.stamps[s as usize].store(s, Ordering::Release);
            }
            let stopped = stopper.join().unwrap().expect("stop");
            let _ = starter.join().unwrap();
            // The stop sequence the stopper saw covers the claim if it came first.
            let life = ring.line().life();
            match life.state {
                Some(RingState::Running) => {
                    let pos = ring.line().position(|_| true);
                    assert!(pos == 1 || pos == 2, "reopened at {pos}");
                    assert_eq!(claim.is_ok(), pos == 2);
                }
                Some(RingState::Stopped) => {
                    let stop = ring.stop_seq.load(Ordering::SeqCst);
                    assert_eq!(stop, stopped.0);
                    let accepted: Vec<u64> = std::iter::once(0).chain(claim.ok()).collect();
                    check_run(&ring, &accepted, stop);
                }
                other => panic!("left {other:?}"),
            }
        });
    }
}

/// A single-producer start whose owner died before it published Running (the claim word
/// still holding a claim the stop refused, or already taken back), with no broker to
/// finish it: the producer's claims that find the line not running finish it themselves,
/// racing a live start by another process. Exactly one finishes it, at the stop
/// sequence, and the producer's accepted claims run on from there with no reuse and no
/// hole.
#[test]
fn a_dead_starters_start_is_finished_once_by_a_claim_or_a_start() {
    for refused in [false, true] {
        model(move || {
            let dead = lifecycle::pack(5, RingState::Starting as u32, DEAD);
            // Sequence 0 published, stopped at 1; a claim of 1 the stop refused left 2.
            let ring = Arc::new(Ring::new(true, dead, if refused { 2 } else { 1 }));
            ring.stop_seq.store(1, Ordering::SeqCst);
            ring.stamps[0].store(0, Ordering::SeqCst);
            let starter = {
                let ring = ring.clone();
                thread::spawn(move || ring.line().reopen(&env(21, true)))
            };
            let accepted = publish_from(&ring, 1, 2, 1, true);
            let started = starter.join().unwrap();
            assert!(
                matches!(started, Ok(1) | Err(LineError::AlreadyRunning)),
                "{started:?}"
            );
            assert_eq!(ring.line().life().state, Some(RingState::Running));
            let end = 1 + accepted.len() as u64;
            assert_eq!(accepted, (1..end).collect::<Vec<_>>(), "no reuse, no hole");
            for &s in &accepted {
                assert!(ring.published(s));
            }
            assert_eq!(ring.line().position(|s| ring.published(s)), end);
        });
    }
}

/// Without the fence pair, loom finds a single-producer claim accepted past the stop (the
/// producer misses Stopping and the stopper misses its position).
#[test]
#[should_panic(expected = "past the stop")]
fn single_producer_without_the_fences_accepts_past_the_stop() {
    model(|| {
        let (ring, publisher) = single_with_publisher(1, false);
        let (stop, _) = ring
            .line()
            .close(&env(2, false), RingState::Stopped)
            .expect("stop");
        let accepted = publisher.join().unwrap();
        if accepted.iter().any(|&s| s >= stop) {
            panic!("sequence accepted past the stop at {stop}");
        }
    });
}

/// A stop and a start race two single-producer claims made with one `SeenRunning`: a claim
/// whose (p4) sees a changed word goes to (p5), which accepts it when it finds the line
/// Running again. Every accepted sequence is the next one (no reuse, no hole), and the line
/// ends Running at the producer's position.
#[test]
fn single_producer_stop_then_start_racing_claims() {
    model(|| {
        let (ring, publisher) = single_with_publisher(2, true);
        let e = env(2, true);
        let (stop, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
        let started = ring.line().reopen(&e).expect("start");
        assert_eq!(started, stop);
        let accepted = publisher.join().unwrap();
        let n = accepted.len() as u64;
        assert_eq!(accepted, (0..n).collect::<Vec<_>>());
        assert!(stop <= n, "stop {stop} past {accepted:?}");
        assert_eq!(ring.line().life().state, Some(RingState::Running));
        assert_eq!(
            ring.claim.load(Ordering::SeqCst),
            n,
            "{accepted:?} stop {stop}"
        );
        for s in 0..accepted.len() {
            assert_eq!(ring.stamps[s].load(Ordering::SeqCst), s as u64);
        }
    });
}

/// A single producer makes `claims` claims while the main thread stops the ring, starts it
/// (with the start's heavy fence or, `start_fenced` false, without) and stops it again;
/// refused-or-delivered is checked at the second stop. Returns the ring and that stop.
fn stop_start_stop(claims: u64, start_fenced: bool) -> (Arc<Ring>, u64) {
    let (ring, publisher) = single_with_publisher(claims, true);
    let e = env(2, true);
    ring.line().close(&e, RingState::Stopped).expect("stop");
    ring.line().reopen(&env(2, start_fenced)).expect("start");
    let (stop, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
    let accepted = publisher.join().unwrap();
    check_run(&ring, &accepted, stop);
    (ring, stop)
}

/// A single-producer claim races a stop, a start and a second stop. The claim's fate
/// follows the last stop's record whatever the order: a claim that a stop refused is never
/// taken back after a later stop read it as accepted (that stop would then say `0..stop`
/// were accepted with one of them never published, and the run after it would reuse the
/// sequence), and the start after the last stop reopens exactly there.
#[test]
fn single_producer_stop_start_stop_racing_a_claim() {
    model(|| {
        let (ring, stop) = stop_start_stop(1, true);
        assert_eq!(
            ring.line().reopen(&env(2, true)),
            Ok(stop),
            "reopened at the stop"
        );
        assert_eq!(
            ring.line().position(|_| true),
            stop,
            "the next claim gets the stop sequence"
        );
    });
}

/// A start races a single-producer claim that a stop refused (its position stored, then
/// the stop seen): the claim is refused or, if the start read the position before the
/// claim's store, accepted as the first of the new run; never both, and the line runs at
/// the producer's next position.
#[test]
fn single_producer_start_racing_a_refused_claim() {
    model(|| {
        let ring = Arc::new(Ring::new(true, running(), 0));
        let e = env(2, true);
        let publisher = {
            let ring = ring.clone();
            thread::spawn(move || publish(&ring, 1, true))
        };
        let (stop, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
        let started = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(3, true)))
        };
        let accepted = publisher.join().unwrap();
        assert_eq!(started.join().unwrap(), Ok(stop));
        let n = accepted.len() as u64;
        assert_eq!(accepted, (0..n).collect::<Vec<_>>());
        assert_eq!(
            ring.line().position(|_| true),
            n,
            "the line runs at the producer's next position (stop {stop})"
        );
        let (stop2, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
        check_run(&ring, &accepted, stop2);
    });
}

/// Without the start's heavy fence (t2), loom finds a claim the first stop refused that the
/// start does not take back (it misses the claim's store): the second stop then records it
/// as accepted, and it is never published.
#[test]
#[should_panic(expected = "never published")]
fn single_producer_start_without_the_fence_keeps_a_refused_claim() {
    model(|| {
        stop_start_stop(1, false);
    });
}

/// As `single_producer_stop_start_stop_racing_a_claim`, with two claims: the second may
/// follow a refusal (at the same sequence) or an acceptance.
#[test]
fn single_producer_stop_start_stop_racing_two_claims() {
    model(|| {
        stop_start_stop(2, true);
    });
}

/// A process CASes the lifecycle word to `state` as its owner and dies before doing
/// anything else: the word names the dead pid.
fn take_and_die(ring: &Ring, state: RingState) {
    let w = ring.life.load(Ordering::SeqCst);
    let dead = lifecycle::next(w, state as u32, DEAD);
    ring.life
        .compare_exchange(w, dead, Ordering::AcqRel, Ordering::Acquire)
        .expect("the dead owner's CAS");
}

/// A single-producer stopper dies right after its CAS to Stopping (before its fence and its
/// read of the position). The producer, whose claim meets that word, and another stopper
/// race to take the stop over (either may: each takeover is a CAS to a new generation):
/// the line settles Stopped once, at a stop sequence that the claim obeys.
#[test]
fn single_producer_claim_racing_the_takeover_of_a_dead_stopper() {
    model(|| {
        let (ring, publisher) = single_with_publisher(1, true);
        // The dead stopper's (s1), and nothing after it.
        take_and_die(&ring, RingState::Stopping);
        let (stop, _) = ring
            .line()
            .close(&env(3, true), RingState::Stopped)
            .expect("stop");
        let accepted = publisher.join().unwrap();
        assert_eq!(ring.line().life().state, Some(RingState::Stopped));
        assert_eq!(ring.stop_seq.load(Ordering::SeqCst), stop);
        check_run(&ring, &accepted, stop);
    });
}

/// A starter died right after its CAS to Starting, with a claim the stop refused possibly
/// still in the word. The producer (in (p5)) and another starter race to take the start
/// over: either takes the claim back, and a second stop finds refused-or-delivered.
#[test]
fn single_producer_claim_racing_the_takeover_of_a_dead_starter() {
    model(|| {
        let (ring, publisher) = single_with_publisher(1, true);
        let e = env(2, true);
        let (stop, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
        // The dead starter's (t1), and nothing after it.
        take_and_die(&ring, RingState::Starting);
        let starter = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(3, true)))
        };
        let accepted = publisher.join().unwrap();
        let started = starter.join().unwrap();
        assert!(
            started == Ok(stop) || started == Err(LineError::AlreadyRunning),
            "{started:?}"
        );
        assert_eq!(ring.line().life().state, Some(RingState::Running));
        let (stop2, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
        check_run(&ring, &accepted, stop2);
    });
}

/// Two starters race on a single-producer line holding a refused claim (position 2, past
/// the stop at 1): exactly one reopens, and the claim is taken back.
#[test]
fn single_producer_two_starts_take_a_refused_claim_back() {
    model(|| {
        // A refused claim's position (2) past the stop.
        let ring = stopped_at_one(true, 2);
        let starters = two_starters(&ring);
        let results: Vec<_> = starters.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            results.iter().filter(|r| **r == Ok(1)).count(),
            1,
            "{results:?}"
        );
        assert_eq!(
            ring.claim.load(Ordering::SeqCst),
            1,
            "the refused claim taken back"
        );
    });
}

// A new single producer takes the line's position (`Line::take_position`, (a1) to (a4) in
// `line.rs`), as `Producer::attach` does once its entry is taken, and claims from it. The
// predecessor published sequence 0 and is gone (its entry repaired and freed), so the line's
// position is 1 whatever the race: the new producer must take exactly 1 (a rewound 0 would
// accept 0 twice, an inflated 2 would leave 1 unpublished below a stop), which `check_run`
// checks once the line settles closed.

/// How the model's new single producer takes the position.
#[derive(Clone, Copy)]
enum Take {
    /// The shipping `Line::take_position`.
    Shipping,
    /// Control: the shipping step with no fence between (a3) and (a4).
    WithoutTheFence,
    /// Control: `take_without_the_recheck`.
    WithoutTheRecheck,
}

/// Control: `Line::take_position` without (a4): the position stored, fenced and returned
/// whatever the lifecycle word says by then.
fn take_without_the_recheck(
    line: &Line<'_, W>,
    env: &ModelEnv,
    published: impl Fn(u64) -> bool,
) -> Result<u64, TakeError> {
    let mut round = 0;
    loop {
        let life = line.life();
        if life.state == Some(RingState::Stopping) {
            if !env.alive(life.owner) {
                line.settle(env).map_err(|_| TakeError::Busy)?;
            } else {
                env.pause(round);
            }
            round += 1;
            continue;
        }
        let p = line.position(&published);
        // SeqCst and the fence, as the shipping step.
        line.claim.store(p, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        return Ok(p);
    }
}

/// The new single producer (process 1): takes the position (`take`), then makes `claims`
/// claims of one sequence from it. Returns the position taken and the sequences accepted.
fn attach_and_publish(ring: &Ring, take: Take, claims: u64) -> (u64, Vec<u64>) {
    let e = env(1, true);
    let line = ring.line();
    let published = |s| ring.published(s);
    let taken = match take {
        Take::Shipping => line.take_position(&e, published, || fence(Ordering::SeqCst)),
        Take::WithoutTheFence => line.take_position(&e, published, || {}),
        Take::WithoutTheRecheck => take_without_the_recheck(&line, &e, published),
    };
    let p = taken.expect("take the position");
    (p, publish_from(ring, p, claims, 1, true))
}

/// The new producer's thread.
fn spawn_attach(ring: &Arc<Ring>, take: Take, claims: u64) -> thread::JoinHandle<(u64, Vec<u64>)> {
    let ring = ring.clone();
    thread::spawn(move || attach_and_publish(&ring, take, claims))
}

/// A running single-producer ring at position 1: its dead predecessor published sequence 0.
fn running_at_one() -> Arc<Ring> {
    let ring = Arc::new(Ring::new(true, running(), 1));
    ring.stamps[0].store(0, Ordering::SeqCst);
    ring
}

/// Sequence 0 (the predecessor's), then the new producer's.
fn with_predecessor(mine: &[u64]) -> Vec<u64> {
    std::iter::once(0).chain(mine.iter().copied()).collect()
}

/// The new producer joined, having taken exactly the position 1; the line stopped at the
/// end (by `stop`, or here): refused or delivered from 0, and a start reopens there.
fn check_taken(ring: &Ring, taker: thread::JoinHandle<(u64, Vec<u64>)>, stop: Option<u64>) {
    let (p, mine) = taker.join().unwrap();
    assert_eq!(p, 1, "the new producer takes the line's position");
    let e = env(2, true);
    let stop = stop.unwrap_or_else(|| ring.line().close(&e, RingState::Stopped).expect("stop").0);
    check_run(ring, &with_predecessor(&mine), stop);
    assert_eq!(ring.line().reopen(&e), Ok(stop), "reopened at the stop");
    assert_eq!(
        ring.line().position(|_| true),
        stop,
        "the next claim gets the stop sequence"
    );
}

/// The new producer takes the position and claims once while the ring stops: (a4) sees the
/// stop and takes again, or the stop's (s3) reads the position (a3) stored.
#[test]
fn take_position_racing_a_stop() {
    model(|| {
        let ring = running_at_one();
        let taker = spawn_attach(&ring, Take::Shipping, 1);
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        check_taken(&ring, taker, Some(stop));
    });
}

/// The predecessor's last claim was refused by a stop, its position (2) left past the stop
/// sequence (1). The new producer takes the position while a start takes that claim back
/// ((t3)): both bring the word down to the stop sequence, whichever writes last, and the new
/// producer's claim is refused before Running, accepted at 1 after it.
#[test]
fn take_position_racing_a_start_that_takes_a_refused_claim_back() {
    model(|| {
        let ring = stopped_at_one(true, 2);
        let taker = spawn_attach(&ring, Take::Shipping, 1);
        assert_eq!(ring.line().reopen(&env(2, true)), Ok(1), "started");
        check_taken(&ring, taker, None);
    });
}

/// A stopper died owning Stopping (before its fence and its read of the position). The new
/// producer (which finishes that stop when it sees it dead) races a live stop that finishes
/// it too and then starts the ring: the line stops once, at 1, and the producer's claim is
/// refused or, after the start, accepted at 1.
#[test]
fn take_position_over_a_dead_stop_racing_a_stop_and_a_start() {
    model(|| {
        let ring = running_at_one();
        take_and_die(&ring, RingState::Stopping);
        let taker = spawn_attach(&ring, Take::Shipping, 1);
        let e = env(2, true);
        let (stop, _) = ring.line().close(&e, RingState::Stopped).expect("stop");
        assert_eq!(stop, 1, "the dead stop closes at the position");
        assert_eq!(ring.line().reopen(&e), Ok(1), "started");
        check_taken(&ring, taker, None);
    });
}

/// As `take_position_over_a_dead_stop_racing_a_stop_and_a_start`, the racer a start (which
/// finishes the dead stop itself, or waits for the new producer to).
#[test]
fn take_position_over_a_dead_stop_racing_a_start() {
    model(|| {
        let ring = running_at_one();
        take_and_die(&ring, RingState::Stopping);
        let taker = spawn_attach(&ring, Take::Shipping, 1);
        assert_eq!(ring.line().reopen(&env(2, true)), Ok(1), "started");
        check_taken(&ring, taker, None);
    });
}

/// A starter died owning Starting, the predecessor's refused claim (2) still past the stop
/// sequence (1). The new producer takes the position (the stop sequence: it does not wait
/// for Starting) while a start finishes the dead one, taking the claim back ((t3)); the
/// producer's claim is refused until Running, accepted at 1 after it.
#[test]
fn take_position_over_a_dead_start_racing_a_start() {
    model(|| {
        let ring = stopped_at_one(true, 2);
        take_and_die(&ring, RingState::Starting);
        let taker = spawn_attach(&ring, Take::Shipping, 1);
        assert_eq!(
            ring.line().reopen(&env(2, true)),
            Err(LineError::AlreadyRunning),
            "the dead start finished, reopened at 1"
        );
        check_taken(&ring, taker, None);
    });
}

/// The ring was stopped and started (its word is no longer the default `SeenRunning`, so the
/// new producer's first (p1) decodes it). The new producer takes the position and makes two
/// claims (`claim_single_fast`, then (p5) if a stop came between (p1) and (p4)) while the
/// ring stops.
#[test]
fn claims_after_take_position_racing_a_stop() {
    model(|| {
        let ring = stopped_at_one(true, 1);
        assert_eq!(ring.line().reopen(&env(2, true)), Ok(1), "restarted");
        let taker = spawn_attach(&ring, Take::Shipping, 2);
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        check_taken(&ring, taker, Some(stop));
    });
}

/// A running line whose claim word (2) is past its position (1): the predecessor's last
/// claim left unstamped (the attach repairs it first, so the shipping attach never meets
/// this line; here it is the one race where (a3) changes a running line's word). The new
/// producer takes the position while the ring stops: the stop records the taken position
/// (or the new producer's claim after it), or (a4) sees the stop and the producer takes its
/// record. Either way it is accepted exactly from its position up to the stop; a stop that
/// read the old word while the producer kept the position below it fails with "never
/// published".
fn take_over_an_unstamped_claim_racing_a_stop(take: Take) {
    model(move || {
        let ring = Arc::new(Ring::new(true, running(), 2));
        ring.stamps[0].store(0, Ordering::SeqCst);
        let taker = spawn_attach(&ring, take, 1);
        let (stop, _) = ring
            .line()
            .close(&env(2, true), RingState::Stopped)
            .expect("stop");
        let (p, mine) = taker.join().unwrap();
        assert!(p <= stop, "taken at {p}, past the stop at {stop}");
        // Slot 1 below `p` is the predecessor's hole, left to the repair.
        check_run_from(&ring, &mine, p, stop);
    });
}

#[test]
fn take_position_over_an_unstamped_claim_racing_a_stop() {
    take_over_an_unstamped_claim_racing_a_stop(Take::Shipping);
}

/// Without the fence between (a3) and (a4), loom finds the store-buffering outcome: (a4)
/// misses Stopping and the stop's (s3) misses (a3), so the stop records 2 while the new
/// producer takes 1; its claim at 1, refused, leaves 1 below the stop unpublished.
#[test]
#[should_panic(expected = "never published")]
fn take_position_without_the_fence_loses_a_sequence_below_the_stop() {
    take_over_an_unstamped_claim_racing_a_stop(Take::WithoutTheFence);
}

/// Without the re-check (a4), a stop that read the word before (a3) goes unseen: loom finds
/// the same lost sequence.
#[test]
#[should_panic(expected = "never published")]
fn take_position_without_the_recheck_loses_a_sequence_below_the_stop() {
    take_over_an_unstamped_claim_racing_a_stop(Take::WithoutTheRecheck);
}

/// A position at or past `MAX_SEQUENCE` is refused (`AttachError::CorruptPosition`).
#[test]
fn take_position_refuses_a_corrupt_position() {
    model(|| {
        let ring = Ring::new(true, running(), MAX_SEQUENCE);
        let taken = ring
            .line()
            .take_position(&env(1, true), |_| true, || fence(Ordering::SeqCst));
        assert_eq!(taken, Err(TakeError::CorruptPosition(MAX_SEQUENCE)));
    });
}
