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
        for (seq, put) in (0u64..).zip(puts) {
            // The handler was called for the event before this one (a tombstone never is).
            wait_until("the handler to be called for the events before", || {
                (reached.load(Ordering::SeqCst) >= seq
                    || matches!(puts[seq as usize - 1], Put::Tombstone)
                    || finished.load(Ordering::SeqCst))
                .then_some(())
            });
            if finished.load(Ordering::SeqCst) {
                break;
            }
            match *put {
                Put::Event(v) => assert_eq!(p.publish(&v.to_le_bytes()), Ok(seq)),
                Put::Tombstone => drop(p.claim().expect("claim")),
            }
        }
        wait_until("the handler to be called for the last event", || {
            (reached.load(Ordering::SeqCst) > last_call || finished.load(Ordering::SeqCst))
                .then_some(())
        });
        done.store(true, Ordering::SeqCst);
        let (exit, stats, next) = runner.join().expect("the run thread");
        let committed = ring.info().consumers[0].next;
        Outcome {
            committed,
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

#[test]
fn a_stop_policy_fails_the_consumer_at_an_event_that_arrived_while_it_spun() {
    let ns = Namespace::concurrent("spin-stop");
    let ring = Ring::create(ns.name(), "r", &small(16)).expect("create");
    let out = one_at_a_time(
        &ring,
        ConsumerOptions::durable("d").wait(WaitStrategy::BusySpin),
        &events(6),
        3,
        |seq, _| seq == 3,
    );
    assert!(
        matches!(out.exit, Err(PollError::HandlerFailed { sequence: 3, .. })),
        "{:?}",
        out.exit
    );
    let seqs: Vec<u64> = out.calls.iter().map(|c| c.0).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    assert_eq!((out.stats.delivered, out.stats.failures), (3, 1));
    assert_eq!(out.next, 3, "the failed event is not committed");
    assert_eq!(out.committed, 3);
    let info = ring.info();
    assert_eq!(info.consumers[0].state, "FAILED");
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
