//! A caught-up consumer in `run` whose wait strategy spins hands over an event that arrives
//! while it spins from its spin loop, not through another poll (ARCHITECTURE.md, "A
//! caught-up consumer's spin"). Each test here publishes one event at a time, each once the
//! handler has been called for the one before, so that the events arrive while the
//! consumer spins: each is handed over once, in order, as a batch of its own; tombstones
//! are skipped; a failing handler is answered by the error policy as in a poll.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use shmring::{
    ConsumerOptions, ConsumerStats, ErrorPolicy, Fallback, PollError, Ring, RunExit, WaitStrategy,
};
use shmring_testkit::{wait_until, Namespace};

mod common;
use common::small;

/// What the producer puts at the next sequence.
#[derive(Clone, Copy)]
enum Put {
    /// An event whose payload is this value.
    Event(u64),
    /// Two events, this value and the next, in one `publish_batch`.
    Pair(u64),
    /// A claim dropped unpublished: a tombstone.
    Tombstone,
}

/// One handler call: the event's sequence, its value, whether it ended its batch.
type Call = (u64, u64, bool);

/// What a consumer in `run_fallible` did with the events of `puts`.
struct Outcome {
    /// Every handler call, failed ones included.
    calls: Vec<Call>,
    exit: Result<RunExit, PollError>,
    stats: ConsumerStats,
    next: u64,
    /// The position the consumer's entry holds after the run (before the handle drops).
    committed: u64,
    /// The entry's state then.
    state: String,
}

/// Attach a consumer with `opts` to `ring`, run it on another thread, and publish `puts`
/// one at a time: each event once the handler has been called for every sequence before it
/// (at most the kit's wait). `fails(sequence, attempt)` says whether a call fails (attempts
/// count from 1). The run stops once the handler has been called for `last_call` (or
/// returns on its own: a `Stop` policy).
fn one_at_a_time(
    ring: &Ring,
    opts: ConsumerOptions,
    puts: &[Put],
    last_call: u64,
    fails: impl Fn(u64, u32) -> bool + Sync,
) -> Outcome {
    let mut c = ring.consumer(opts).expect("attach the consumer");
    let mut p = ring.producer().expect("attach the producer");
    let calls = Mutex::new(Vec::<Call>::new());
    // One past the highest sequence the handler has been called for.
    let reached = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        let runner = s.spawn(|| {
            let mut attempts = std::collections::HashMap::<u64, u32>::new();
            let exit = c.run_fallible(
                |ev| {
                    let seq = ev.sequence();
                    let value = u64::from_le_bytes(ev.bytes().try_into().expect("8 bytes"));
                    calls
                        .lock()
                        .expect("calls")
                        .push((seq, value, ev.is_end_of_batch()));
                    reached.fetch_max(seq + 1, Ordering::SeqCst);
                    let attempt = attempts.entry(seq).or_insert(0);
                    *attempt += 1;
                    if fails(seq, *attempt) {
                        Err(format!("event {seq} fails at attempt {attempt}"))
                    } else {
                        Ok(())
                    }
                },
                || done.load(Ordering::SeqCst),
            );
            finished.store(true, Ordering::SeqCst);
            (exit, c.stats(), c.next_sequence())
        });
        let (mut seq, mut after_tombstone) = (0u64, false);
        for put in puts {
            // The handler was called for the event before this one (a tombstone never is).
            wait_until("the handler to be called for the events before", || {
                (reached.load(Ordering::SeqCst) >= seq
                    || after_tombstone
                    || finished.load(Ordering::SeqCst))
                .then_some(())
            });
            if finished.load(Ordering::SeqCst) {
                break;
            }
            match *put {
                Put::Event(v) => {
                    assert_eq!(p.publish(&v.to_le_bytes()), Ok(seq));
                    seq += 1;
                }
                Put::Pair(v) => {
                    let pair = [v.to_le_bytes(), (v + 1).to_le_bytes()];
                    p.publish_batch(&pair).expect("publish a pair");
                    seq += 2;
                }
                Put::Tombstone => {
                    drop(p.claim().expect("claim"));
                    seq += 1;
                }
            }
            after_tombstone = matches!(put, Put::Tombstone);
        }
        wait_until("the handler to be called for the last event", || {
            (reached.load(Ordering::SeqCst) > last_call || finished.load(Ordering::SeqCst))
                .then_some(())
        });
        done.store(true, Ordering::SeqCst);
        let (exit, stats, next) = runner.join().expect("the run thread");
        let entry = ring.info().consumers[0].clone();
        Outcome {
            committed: entry.next,
            state: entry.state.to_string(),
            calls: std::mem::take(&mut *calls.lock().expect("calls")),
            exit,
            stats,
            next,
        }
    })
}

fn events(n: u64) -> Vec<Put> {
    (0..n).map(|i| Put::Event(i * 7 + 1)).collect()
}

/// Strategies that spin through the kit's millisecond between two events: busy-spin, and
/// the long spin phases of two others (about 3 ms of pauses before they yield or park).
fn spinning() -> [WaitStrategy; 3] {
    [
        WaitStrategy::BusySpin,
        WaitStrategy::Yielding { spins: 100_000 },
        WaitStrategy::PhasedBackoff {
            spins: 100_000,
            yields: 0,
            fallback: Fallback::Park,
        },
    ]
}

#[test]
fn each_event_arriving_while_the_consumer_spins_is_handed_over_once_in_order() {
    const N: u64 = 300;
    for wait in spinning() {
        for optional in [false, true] {
            let ns = Namespace::concurrent("spin-each");
            let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
            let mut opts = ConsumerOptions::anonymous().wait(wait);
            if optional {
                opts = opts.optional();
            }
            let out = one_at_a_time(&ring, opts, &events(N), N - 1, |_, _| false);
            let what = format!("{wait:?}, optional {optional}");
            assert_eq!(out.exit, Ok(RunExit::Stopped), "{what}");
            let want: Vec<Call> = (0..N).map(|i| (i, i * 7 + 1, true)).collect();
            assert_eq!(
                out.calls, want,
                "{what}: every event once, in order, a batch each"
            );
            let s = out.stats;
            assert_eq!(
                (s.delivered, s.batches, s.skipped, s.dropped_behind),
                (N, N, 0, 0),
                "{what}"
            );
            assert_eq!(out.next, N, "{what}");
            // The position is committed: the producers see the room.
            assert_eq!(out.committed, N, "{what}");
        }
    }
}

#[test]
fn a_tombstone_arriving_while_the_consumer_spins_is_skipped() {
    let puts = [
        Put::Event(10),
        Put::Tombstone,
        Put::Event(12),
        Put::Tombstone,
        Put::Tombstone,
        Put::Event(15),
    ];
    for wait in spinning() {
        let ns = Namespace::concurrent("spin-tomb");
        let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
        let out = one_at_a_time(
            &ring,
            ConsumerOptions::anonymous().wait(wait),
            &puts,
            5,
            |_, _| false,
        );
        assert_eq!(out.exit, Ok(RunExit::Stopped), "{wait:?}");
        let seqs: Vec<(u64, u64)> = out.calls.iter().map(|&(s, v, _)| (s, v)).collect();
        assert_eq!(seqs, vec![(0, 10), (2, 12), (5, 15)], "{wait:?}");
        assert_eq!((out.stats.delivered, out.stats.skipped), (3, 3), "{wait:?}");
        assert_eq!((out.next, out.committed), (6, 6), "{wait:?}");
    }
}

/// Two events published at once to a consumer spinning for the first: the spin hands over
/// the first as a batch of its own, and the poll after it the second. A poll would have
/// found both (their stamps are stored nanoseconds apart, a pause here is about 30) and
/// handed them over as one batch, the edge on the second.
#[test]
fn the_first_event_of_a_burst_after_a_wait_is_a_batch_of_its_own() {
    const PAIRS: u64 = 100;
    let ns = Namespace::concurrent("spin-pair");
    let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
    let puts: Vec<Put> = (0..PAIRS).map(|i| Put::Pair(i * 2 * 7 + 1)).collect();
    let out = one_at_a_time(
        &ring,
        ConsumerOptions::anonymous().wait(WaitStrategy::BusySpin),
        &puts,
        2 * PAIRS - 1,
        |_, _| false,
    );
    assert_eq!(out.exit, Ok(RunExit::Stopped));
    let seqs: Vec<(u64, u64)> = out.calls.iter().map(|&(s, v, _)| (s, v)).collect();
    let want: Vec<(u64, u64)> = (0..2 * PAIRS)
        .map(|s| (s, (s / 2) * 2 * 7 + 1 + s % 2))
        .collect();
    assert_eq!(seqs, want, "every event once, in order");
    assert!(
        out.calls.iter().all(|&(s, _, end)| s % 2 == 0 || end),
        "the second of a pair always ends its batch"
    );
    let alone = out
        .calls
        .iter()
        .filter(|&&(s, _, end)| s % 2 == 0 && end)
        .count() as u64;
    // A pair that lands while the consumer is between two spin bursts (its idle checks and
    // a poll, a few percent of its time) is found by the poll, as one batch: 91-98 pairs
    // of 100 came as two batches in five runs here, 0-2 with the spin switched off.
    assert!(
        alone >= PAIRS / 2,
        "only {alone} of {PAIRS} pairs began with a batch of one"
    );
    assert_eq!(out.stats.batches, PAIRS + alone);
}

#[test]
fn a_stop_policy_fails_the_consumer_at_an_event_that_arrived_while_it_spun() {
    // An anonymous consumer (its events through `deliver_one`) and a durable one, whose
    // first events after its attach are marked before they are handed over (through the
    // poll's delivery).
    for (i, opts) in [ConsumerOptions::anonymous(), ConsumerOptions::durable("d")]
        .into_iter()
        .enumerate()
    {
        let ns = Namespace::concurrent("spin-stop");
        let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
        let out = one_at_a_time(
            &ring,
            opts.wait(WaitStrategy::BusySpin),
            &events(6),
            3,
            |seq, _| seq == 3,
        );
        assert!(
            matches!(out.exit, Err(PollError::HandlerFailed { sequence: 3, .. })),
            "consumer {i}: {:?}",
            out.exit
        );
        let seqs: Vec<u64> = out.calls.iter().map(|c| c.0).collect();
        assert_eq!(seqs, vec![0, 1, 2, 3], "consumer {i}");
        assert_eq!(
            (out.stats.delivered, out.stats.failures),
            (3, 1),
            "consumer {i}"
        );
        assert_eq!(
            (out.next, out.committed),
            (3, 3),
            "consumer {i}: the failed event is not committed"
        );
        assert_eq!(out.state, "FAILED", "consumer {i}");
    }
}

/// A handler that panics at an event handed over from the spin is a failure as in a poll:
/// with `Stop` the consumer is FAILED there (`HandlerPanicked`, the event not committed);
/// with `Skip` the event is tried again, then dead-lettered, and the run goes on.
#[test]
fn a_handler_panic_at_an_event_that_arrived_while_the_consumer_spun_is_a_failure() {
    let panics_at_3 = |seq, _| {
        if seq == 3 {
            panic!("the handler panics at 3");
        }
        false
    };
    for (i, opts) in [ConsumerOptions::anonymous(), ConsumerOptions::durable("d")]
        .into_iter()
        .enumerate()
    {
        let ns = Namespace::concurrent("spin-panic");
        let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
        let out = one_at_a_time(
            &ring,
            opts.wait(WaitStrategy::BusySpin),
            &events(6),
            3,
            panics_at_3,
        );
        assert_eq!(
            out.exit,
            Err(PollError::HandlerPanicked { sequence: 3 }),
            "consumer {i}"
        );
        let seqs: Vec<u64> = out.calls.iter().map(|c| c.0).collect();
        assert_eq!(seqs, vec![0, 1, 2, 3], "consumer {i}");
        assert_eq!((out.next, out.committed), (3, 3), "consumer {i}");
        assert_eq!(out.state, "FAILED", "consumer {i}");
    }
    let ns = Namespace::concurrent("spin-panic-skip");
    let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
    let out = one_at_a_time(
        &ring,
        ConsumerOptions::anonymous()
            .wait(WaitStrategy::BusySpin)
            .on_error(ErrorPolicy::Skip { attempts: 2 }),
        &events(6),
        5,
        panics_at_3,
    );
    assert_eq!(out.exit, Ok(RunExit::Stopped));
    let seqs: Vec<u64> = out.calls.iter().map(|c| c.0).collect();
    assert_eq!(
        seqs,
        vec![0, 1, 2, 3, 3, 4, 5],
        "two attempts at 3, then on"
    );
    let s = out.stats;
    assert_eq!((s.delivered, s.failures, s.dead_lettered), (5, 2, 1));
    assert_eq!((out.next, out.committed), (6, 6));
}

#[test]
fn a_skip_policy_dead_letters_an_event_that_arrived_while_the_consumer_spun() {
    let ns = Namespace::concurrent("spin-skip");
    let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
    let out = one_at_a_time(
        &ring,
        ConsumerOptions::anonymous()
            .wait(WaitStrategy::BusySpin)
            .on_error(ErrorPolicy::Skip { attempts: 2 }),
        &events(6),
        5,
        |seq, _| seq == 3,
    );
    assert_eq!(out.exit, Ok(RunExit::Stopped));
    let seqs: Vec<u64> = out.calls.iter().map(|c| c.0).collect();
    assert_eq!(
        seqs,
        vec![0, 1, 2, 3, 3, 4, 5],
        "two attempts at 3, then on"
    );
    let s = out.stats;
    assert_eq!((s.delivered, s.failures, s.dead_lettered), (5, 2, 1));
    assert_eq!((out.next, out.committed), (6, 6));
}

#[test]
fn a_retry_policy_tries_again_an_event_that_arrived_while_the_consumer_spun() {
    let ns = Namespace::concurrent("spin-retry");
    let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
    let out = one_at_a_time(
        &ring,
        ConsumerOptions::anonymous()
            .wait(WaitStrategy::BusySpin)
            .on_error(ErrorPolicy::Retry {
                attempts: 3,
                backoff: Duration::from_millis(1),
            }),
        &events(6),
        5,
        |seq, attempt| seq == 3 && attempt < 3,
    );
    assert_eq!(out.exit, Ok(RunExit::Stopped));
    let seqs: Vec<u64> = out.calls.iter().map(|c| c.0).collect();
    assert_eq!(
        seqs,
        vec![0, 1, 2, 3, 3, 3, 4, 5],
        "3 succeeds at its third attempt"
    );
    let s = out.stats;
    assert_eq!((s.delivered, s.failures, s.retries), (6, 2, 2));
    assert_eq!((out.next, out.committed), (6, 6));
}
