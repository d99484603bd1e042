//! Error policies in one process (stop, skip after attempts, retry with back-off, the
//! attempt count across re-attaches) and the timed flush. What a process that dies in its
//! handler does to the count is in `shmring-tests` (`poison_restart`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shmring::{
    ConsumerOptions, ErrorPolicy, PollError, Ring, WaitOutcome, WaitStrategy, WakeReason, WakeSet,
};
use shmring_testkit::Namespace;

mod common;
use common::small;

/// A dead letter as the callback saw it: (sequence, attempts, error, payload).
type Letter = (u64, u32, String, Vec<u8>);

fn value(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte events"))
}

fn publish(ring: &Ring, values: std::ops::Range<u64>) {
    let mut p = ring.producer().expect("producer");
    for i in values {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
}

fn collect_letters(c: &mut shmring::Consumer) -> Arc<Mutex<Vec<Letter>>> {
    let letters = Arc::new(Mutex::new(Vec::new()));
    let l = letters.clone();
    c.on_dead_letter(move |d| {
        l.lock().unwrap().push((
            d.sequence,
            d.attempts,
            d.error.to_owned(),
            d.payload.to_vec(),
        ))
    });
    letters
}

fn info(ring: &Ring, index: u32) -> shmring::ConsumerInfo {
    ring.info()
        .consumers
        .into_iter()
        .find(|c| c.index == index)
        .expect("the consumer's entry")
}

#[test]
fn stop_fails_the_consumer_at_the_event_and_records_the_attempt() {
    let ns = Namespace::concurrent("policy_stop");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    publish(&ring, 0..5);
    let mut seen = Vec::new();
    let r = c.poll_once_fallible(|ev| {
        let v = value(ev.bytes());
        if v == 3 {
            return Err(format!("bad {v}"));
        }
        seen.push(v);
        Ok(())
    });
    assert_eq!(
        r,
        Err(PollError::HandlerFailed {
            sequence: 3,
            attempts: 1
        })
    );
    assert_eq!(seen, [0, 1, 2]);
    assert_eq!(c.poll_once(|_| {}), Err(PollError::Failed));
    let e = info(&ring, c.index());
    assert_eq!((e.state, e.next, e.error_policy), ("FAILED", 3, "stop"));
    assert_eq!(e.poison, Some((3, 1)));
    assert_eq!((e.stats.failures, e.stats.dead_lettered), (1, 0));
}

/// Skip with 3 attempts: the event is tried 3 times, dead-lettered once with its payload
/// and error, and the events after it are delivered in order; for a required consumer
/// (in place) and an optional one (copied), with an error and with a panic.
#[test]
fn skip_tries_three_times_then_dead_letters_once_and_delivers_the_rest_in_order() {
    let ns = Namespace::concurrent("policy_skip");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    for optional in [false, true] {
        for panics in [false, true] {
            let mut opts = ConsumerOptions::anonymous().on_error(ErrorPolicy::Skip { attempts: 3 });
            if optional {
                opts = opts.optional();
            }
            let mut c = ring.consumer(opts).unwrap();
            let letters = collect_letters(&mut c);
            let base = c.next_sequence();
            publish(&ring, 0..6);
            let (mut seen, mut tries) = (Vec::new(), 0);
            for _ in 0..20 {
                c.poll_once_fallible(|ev| {
                    let v = value(ev.bytes());
                    if v == 3 {
                        tries += 1;
                        assert!(!panics, "boom {v}");
                        return Err(format!("bad {v}"));
                    }
                    seen.push(v);
                    Ok(())
                })
                .expect("the policy keeps the consumer going");
            }
            let case = format!("optional {optional}, panics {panics}");
            assert_eq!(tries, 3, "{case}");
            assert_eq!(seen, [0, 1, 2, 4, 5], "{case}");
            let error = if panics {
                "handler panicked: boom 3"
            } else {
                "bad 3"
            };
            assert_eq!(
                *letters.lock().unwrap(),
                [(base + 3, 3, error.to_owned(), 3u64.to_le_bytes().to_vec())],
                "{case}"
            );
            let e = info(&ring, c.index());
            assert_eq!(e.next, base + 6, "{case}");
            assert_eq!(e.poison, None, "{case}");
            assert_eq!(e.error_policy, "skip");
            let s = c.stats();
            assert_eq!(
                (s.failures, s.retries, s.dead_lettered, s.delivered),
                (3, 2, 1, 5),
                "{case}"
            );
            assert_eq!(e.stats.dead_lettered, 1, "{case}");
            c.unsubscribe();
        }
    }
}

#[test]
fn retry_waits_between_attempts_then_stops() {
    let ns = Namespace::concurrent("policy_retry");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let policy = ErrorPolicy::Retry {
        attempts: 3,
        backoff: Duration::from_millis(1),
    };
    let mut c = ring
        .consumer(ConsumerOptions::durable("d").on_error(policy))
        .unwrap();
    publish(&ring, 0..4);
    let (mut seen, mut tries) = (Vec::new(), 0);
    let r = c.run_fallible(
        |ev| {
            let v = value(ev.bytes());
            if v == 2 {
                tries += 1;
                return Err("always");
            }
            seen.push(v);
            Ok(())
        },
        || false,
    );
    assert_eq!(
        r,
        Err(PollError::HandlerFailed {
            sequence: 2,
            attempts: 3
        })
    );
    assert_eq!((tries, seen), (3, vec![0, 1]));
    let e = info(&ring, c.index());
    assert_eq!((e.state, e.next, e.poison), ("FAILED", 2, Some((2, 3))));
    assert_eq!((e.stats.failures, e.stats.retries), (3, 2));
    assert_eq!(e.error_policy, "retry");
}

/// The count lives in the entry: a re-attach continues it (its own attempt is counted
/// once, not again when it fails in the process), and a handle that never handed the
/// event over does not count.
#[test]
fn a_durable_consumer_counts_attempts_across_re_attaches() {
    let ns = Namespace::concurrent("policy_reattach");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let opts = || ConsumerOptions::durable("d").on_error(ErrorPolicy::Skip { attempts: 3 });
    // Attached and dropped twice before anything was published: no attempt.
    for _ in 0..2 {
        drop(ring.consumer(opts()).unwrap());
    }
    publish(&ring, 0..3);
    fn fail_on_1(
        tries: &mut u32,
    ) -> impl FnMut(shmring::Event<'_>) -> Result<(), &'static str> + '_ {
        move |ev| {
            if value(ev.bytes()) == 1 {
                *tries += 1;
                return Err("bad 1");
            }
            Ok(())
        }
    }
    let mut tries = 0;
    let mut c = ring.consumer(opts()).unwrap();
    c.poll_once_fallible(fail_on_1(&mut tries)).unwrap();
    assert_eq!(info(&ring, c.index()).poison, Some((1, 1)));
    drop(c);
    for expected in [2, 3] {
        let mut c = ring.consumer(opts()).unwrap();
        // Marked suspect at attach: one attempt under way, not known to have failed.
        assert_eq!(info(&ring, c.index()).poison, Some((1, expected - 1)));
        let letters = collect_letters(&mut c);
        c.poll_once_fallible(fail_on_1(&mut tries)).unwrap();
        assert_eq!(tries, expected);
        if expected == 3 {
            assert_eq!(letters.lock().unwrap().len(), 1);
            assert_eq!(c.next_sequence(), 2);
            assert_eq!(info(&ring, c.index()).poison, None);
            assert_eq!(c.stats().dead_lettered, 1);
        } else {
            assert_eq!(info(&ring, c.index()).poison, Some((1, expected)));
        }
    }
}

/// A handler that blocks past the flush interval sees the next event as an edge, and
/// the batch commits there; without `flush_within` the same run is one batch (the
/// control). Required (in place) and optional (copied).
#[test]
fn flush_within_cuts_a_long_batch_after_the_interval() {
    let ns = Namespace::concurrent("policy_flush");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    // Long enough that a batch of a few events is not cut by a preemption on a busy machine.
    let within = Duration::from_millis(100);
    for optional in [false, true] {
        for flush in [true, false] {
            let mut opts = ConsumerOptions::anonymous();
            if flush {
                opts = opts.flush_within(within);
            }
            if optional {
                opts = opts.optional();
            }
            let mut c = ring.consumer(opts).unwrap();
            let base = c.next_sequence();
            publish(&ring, 0..10);
            let mut edges = Vec::new();
            let mut first: Option<Instant> = None;
            let n = c
                .poll_once(|ev| {
                    // The interval opened just before the first event was handed over.
                    let opened = *first.get_or_insert_with(Instant::now);
                    if value(ev.bytes()) == 2 {
                        // Hold event 2 until the interval (and a coarse clock tick) has
                        // surely passed.
                        while opened.elapsed() < within + Duration::from_millis(25) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    if ev.is_end_of_batch() {
                        edges.push(value(ev.bytes()));
                    }
                })
                .unwrap();
            let case = format!("optional {optional}, flush {flush}");
            if flush {
                assert_eq!((n, edges.as_slice()), (4, [3].as_slice()), "{case}");
                assert_eq!(info(&ring, c.index()).next, base + 4, "{case}");
                let mut rest = Vec::new();
                c.poll_once(|ev| rest.push((value(ev.bytes()), ev.is_end_of_batch())))
                    .unwrap();
                assert_eq!(rest.first(), Some(&(4, false)), "{case}");
                assert_eq!(rest.last(), Some(&(9, true)), "{case}");
                // Idle for longer than the interval: the next batch is not cut at its first
                // event (the interval opens with the first event after an edge).
                let idle = Instant::now();
                while idle.elapsed() < within + Duration::from_millis(25) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                publish(&ring, 10..15);
                let mut after_idle = Vec::new();
                c.poll_once(|ev| after_idle.push(ev.is_end_of_batch()))
                    .unwrap();
                assert_eq!(after_idle, [false, false, false, false, true], "{case}");
            } else {
                assert_eq!((n, edges.as_slice()), (10, [9].as_slice()), "{case}");
            }
            c.unsubscribe();
        }
    }
}

/// During a `Retry` back-off a poll hands nothing over: the event waits.
#[test]
fn a_poll_during_the_back_off_hands_nothing_over() {
    let ns = Namespace::concurrent("policy_backoff");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let policy = ErrorPolicy::Retry {
        attempts: 5,
        backoff: Duration::from_secs(600),
    };
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().on_error(policy))
        .unwrap();
    publish(&ring, 0..2);
    let mut tries = 0;
    let mut fail_on_0 = |ev: shmring::Event<'_>| {
        tries += 1;
        match value(ev.bytes()) {
            0 => Err("bad 0"),
            _ => Ok(()),
        }
    };
    assert_eq!(c.poll_once_fallible(&mut fail_on_0), Ok(0));
    assert_eq!(c.poll_once_fallible(&mut fail_on_0), Ok(0));
    assert!(
        !c.has_pending(),
        "nothing for a poll before the back-off ends"
    );
    assert_eq!(tries, 1, "no attempt during the back-off");
    assert_eq!(c.stats().retries, 1);
}

/// A handler that fails at its first event and takes every later one.
fn fail_once() -> impl FnMut(shmring::Event<'_>) -> Result<(), &'static str> {
    let mut failed = false;
    move |_| {
        if failed {
            Ok(())
        } else {
            failed = true;
            Err("bad once")
        }
    }
}

/// `wait` during a `Retry` back-off waits the back-off out: the event is pending, but no
/// poll hands it over before the back-off ends, so `Ready` comes then (and a
/// `TimeoutBlocking` timeout shorter than the back-off is a timeout). Before, `wait`
/// answered `Ready` at once and a `wait` + `poll` loop spun on the core for the whole
/// back-off.
#[test]
fn wait_during_the_back_off_waits_it_out() {
    let ns = Namespace::concurrent("policy_backoff_wait");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let backoff = Duration::from_millis(300);
    let mut c = ring
        .consumer(
            ConsumerOptions::anonymous()
                .on_error(ErrorPolicy::Retry {
                    attempts: 5,
                    backoff,
                })
                .wait(WaitStrategy::TimeoutBlocking {
                    timeout: Duration::from_millis(100),
                }),
        )
        .unwrap();
    publish(&ring, 0..1);
    let mut fail_once = fail_once();
    let start = Instant::now();
    assert_eq!(c.poll_once_fallible(&mut fail_once), Ok(0));
    assert_eq!(c.wait(), Ok(WaitOutcome::TimedOut));
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "timed out after {:?}",
        start.elapsed()
    );
    let mut polls = 0;
    loop {
        polls += 1;
        match c.wait() {
            Ok(WaitOutcome::Ready) => break,
            Ok(WaitOutcome::TimedOut) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(
        start.elapsed() >= backoff,
        "ready after {:?}, within the back-off",
        start.elapsed()
    );
    assert!(polls <= 4, "{polls} waits for a back-off of three timeouts");
    assert_eq!(c.poll_once_fallible(&mut fail_once), Ok(1));
}

/// A `WakeSet` whose predicate is `has_pending` sleeps through a `Retry` back-off: the
/// failed event is not pending for a poll until the back-off ends (a poll before then
/// hands nothing over), and the set's net looks again (every 50 ms at most). Before,
/// `has_pending` said the event waited, the park returned at once, and a park + poll loop
/// spun on a core for the whole back-off.
#[test]
fn a_wake_set_sleeps_through_a_back_off() {
    let ns = Namespace::concurrent("policy_backoff_set");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let backoff = Duration::from_millis(300);
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().on_error(ErrorPolicy::Retry {
            attempts: 5,
            backoff,
        }))
        .unwrap();
    publish(&ring, 0..1);
    let mut fail_once = fail_once();
    let start = Instant::now();
    assert_eq!(c.poll_once_fallible(&mut fail_once), Ok(0));
    assert!(!c.has_pending(), "pending during the back-off");
    let mut set = WakeSet::new();
    set.add(&c).unwrap();
    let mut parks = 0;
    loop {
        let woke = set.park_until(start + Duration::from_secs(10), || c.has_pending());
        parks += 1;
        // Found by the net once the back-off ended (`Woken`), or at a park's last look.
        assert_ne!(woke, WakeReason::Deadline, "after {:?}", start.elapsed());
        if c.poll_once_fallible(&mut fail_once) == Ok(1) {
            break;
        }
        assert!(parks < 10, "{parks} parks within {:?}", start.elapsed());
    }
    assert!(
        start.elapsed() >= backoff,
        "delivered after {:?}, within the back-off",
        start.elapsed()
    );
}

/// An optional consumer retrying an event it copied can be lapped meanwhile: it jumps to
/// the head, counts the loss, and the record of the failing event is cleared.
#[test]
fn an_optional_consumer_lapped_while_it_retries_drops_the_record() {
    let ns = Namespace::concurrent("policy_lapped");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut c = ring
        .consumer(
            ConsumerOptions::durable("o")
                .optional()
                .on_error(ErrorPolicy::Skip { attempts: 5 }),
        )
        .unwrap();
    publish(&ring, 0..2);
    let r = c.poll_once_fallible(|ev| match value(ev.bytes()) {
        0 => Err("bad 0"),
        _ => Ok(()),
    });
    assert_eq!(r, Ok(0));
    assert_eq!(info(&ring, c.index()).poison, Some((0, 1)));
    // Far enough ahead to lap it (an optional consumer gates only within the slack).
    let mut p = ring.producer().unwrap();
    for i in 2..40u64 {
        p.try_publish(&i.to_le_bytes())
            .expect("an optional consumer behind the slack does not hold producers");
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        c.poll_once_fallible(|ev| {
            seen.push(value(ev.bytes()));
            Ok::<(), String>(())
        })
        .unwrap();
    }
    let e = info(&ring, c.index());
    assert_eq!(e.poison, None, "{e:?}");
    assert!(e.stats.dropped_behind > 0, "{e:?}");
    assert_eq!((e.next, e.stats.dead_lettered), (40, 0), "{e:?}");
    assert!(
        !seen.contains(&0),
        "the lapped event is never handed over: {seen:?}"
    );
}

/// The log a `tracing` subscriber receives, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A skipped event is logged as a `tracing` warning, once, naming its sequence and the
/// error; the events around it are not logged.
#[test]
fn a_skipped_event_is_logged_once_as_a_warning() {
    let ns = Namespace::concurrent("policy_skip_log");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().on_error(ErrorPolicy::Skip { attempts: 2 }))
        .unwrap();
    publish(&ring, 0..4);
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let mut seen = Vec::new();
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..10 {
            c.poll_once_fallible(|ev| {
                let v = value(ev.bytes());
                if v == 2 {
                    return Err(format!("bad {v}"));
                }
                seen.push(v);
                Ok(())
            })
            .expect("skip keeps the consumer going");
        }
    });
    assert_eq!(seen, [0, 1, 3]);
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    let w = warnings[0];
    assert!(
        w.contains("dead letter") && w.contains("sequence=2") && w.contains("bad 2"),
        "{w}"
    );
}
