//! In-process behaviour of one ring: lifecycle of entries, failures, edges. The
//! cross-process guarantees are in the `shmring-tests` package.

use std::time::Duration;

use shmring::{
    AttachError, ConsumerOptions, LeaseError, OpenError, PollError, ProducerMode, PublishError,
    Ring, RingConfig, RingState, TryPublishError, WaitStrategy,
};

use shmring_testkit::Namespace;

mod common;
use common::small;

fn drain(c: &mut shmring::Consumer) -> Vec<u64> {
    let mut seen = Vec::new();
    while c
        .poll_once(|ev| seen.push(u64::from_le_bytes(ev.bytes().try_into().unwrap())))
        .unwrap()
        > 0
    {}
    seen
}

#[test]
fn handler_panic_fails_the_consumer_and_a_durable_restart_resumes_at_the_failing_event() {
    let ns = Namespace::concurrent("panic");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    for i in 0..5u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    let mut seen = Vec::new();
    let r = c.poll_once(|ev| {
        let v = u64::from_le_bytes(ev.bytes().try_into().unwrap());
        assert!(v != 3, "handler fails on 3");
        seen.push(v);
    });
    assert_eq!(r, Err(PollError::HandlerPanicked { sequence: 3 }));
    assert_eq!(seen, vec![0, 1, 2]);
    assert_eq!(c.poll_once(|_| {}), Err(PollError::Failed));
    let info = ring.info();
    assert_eq!(info.consumers[0].state, "FAILED");
    assert_eq!(info.consumers[0].stats.failures, 1);
    assert_eq!(info.consumers[0].next, 3);
    // A FAILED required consumer still gates: the producers cannot lap event 3.
    drop(c);
    for i in 5..19u64 {
        p.try_publish(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(p.try_publish(&[0; 8]), Err(TryPublishError::Full));
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    assert_eq!(c.next_sequence(), 3);
    assert_eq!(drain(&mut c), (3..19).collect::<Vec<_>>());
}

/// A failed anonymous consumer keeps gating at the failing event while its handle lives
/// (nobody can attach again to resume it) and frees its entry when the handle drops: the
/// producers go on without it.
#[test]
fn a_failed_anonymous_consumer_frees_its_entry_when_its_handle_drops() {
    let ns = Namespace::concurrent("anon-failed");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    for i in 0..3u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    let r = c.poll_once(|ev| assert!(ev.sequence() != 1, "handler fails on 1"));
    assert_eq!(r, Err(PollError::HandlerPanicked { sequence: 1 }));
    assert_eq!(ring.info().consumers[0].state, "FAILED");
    // Sequences up to 8 fit behind the failing event 1.
    for i in 3..9u64 {
        assert_eq!(p.try_publish(&i.to_le_bytes()), Ok(i));
    }
    assert_eq!(p.try_publish(&[0; 8]), Err(TryPublishError::Full));
    drop(c);
    assert!(ring.info().consumers.is_empty(), "{:?}", ring.info());
    assert_eq!(p.try_publish(&9u64.to_le_bytes()), Ok(9));
}

/// The same for an optional consumer, which copies each event out before its handler runs
/// and hands it over one slot late: the error names the event the handler failed on, and a
/// durable restart resumes there (not one past it).
#[test]
fn handler_panic_in_an_optional_consumer_names_the_failing_event() {
    let ns = Namespace::concurrent("panicopt");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::durable("o").optional())
        .unwrap();
    for i in 0..5u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    for fail_on in [3u64, 4] {
        let from = c.next_sequence();
        let mut seen = Vec::new();
        let r = c.poll_once(|ev| {
            let v = u64::from_le_bytes(ev.bytes().try_into().unwrap());
            assert!(v != fail_on, "handler fails on {fail_on}");
            seen.push(v);
        });
        assert_eq!(r, Err(PollError::HandlerPanicked { sequence: fail_on }));
        assert_eq!(seen, (from..fail_on).collect::<Vec<_>>());
        assert_eq!(ring.info().consumers[0].next, fail_on);
        drop(c);
        c = ring
            .consumer(ConsumerOptions::durable("o").optional())
            .unwrap();
        assert_eq!(c.next_sequence(), fail_on, "resumes at the failing event");
    }
    assert_eq!(drain(&mut c), vec![4]);
}

#[test]
fn durable_required_consumer_holds_its_events_while_detached() {
    let ns = Namespace::concurrent("detach");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    let c = ring.consumer(ConsumerOptions::durable("keep")).unwrap();
    drop(c);
    assert_eq!(ring.info().consumers[0].state, "DETACHED");
    for i in 0..8u64 {
        p.try_publish(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(p.try_publish(&[0; 8]), Err(TryPublishError::Full));
    let mut c = ring.consumer(ConsumerOptions::durable("keep")).unwrap();
    assert_eq!(drain(&mut c), (0..8).collect::<Vec<_>>());
    // unsubscribe forgets the name: the next attach starts at the head.
    c.unsubscribe();
    assert!(ring.info().consumers.is_empty());
    p.publish(&8u64.to_le_bytes()).unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("keep")).unwrap();
    assert_eq!(c.next_sequence(), 9);
    assert!(drain(&mut c).is_empty());
}

#[test]
fn one_live_process_per_durable_name() {
    let ns = Namespace::concurrent("inuse");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let _c = ring.consumer(ConsumerOptions::durable("x")).unwrap();
    match ring.consumer(ConsumerOptions::durable("x")) {
        Err(AttachError::NameInUse { pid, .. }) => assert_eq!(pid, std::process::id()),
        other => panic!("expected NameInUse, got {:?}", other.map(|c| c.index())),
    }
    assert!(matches!(
        ring.consumer(ConsumerOptions::durable("")),
        Err(AttachError::BadName(_))
    ));
    assert!(matches!(
        ring.consumer(ConsumerOptions::durable("n".repeat(49))),
        Err(AttachError::BadName(_))
    ));
}

#[test]
fn single_producer_ring_refuses_a_second_producer() {
    let ns = Namespace::concurrent("sp");
    let cfg = RingConfig {
        producer_mode: ProducerMode::Single,
        ..small(8)
    };
    let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
    let p = ring.producer().unwrap();
    let err = ring.producer().err().unwrap();
    assert_eq!(
        err,
        AttachError::SingleProducerTaken {
            pid: std::process::id()
        }
    );
    assert!(err.to_string().contains("single-producer"));
    drop(p);
    ring.producer().unwrap();
}

#[test]
fn table_full_says_so() {
    let ns = Namespace::concurrent("full");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let held: Vec<_> = (0..4)
        .map(|_| ring.consumer(ConsumerOptions::anonymous()).unwrap())
        .collect();
    let err = ring.consumer(ConsumerOptions::anonymous()).err().unwrap();
    assert_eq!(
        err,
        AttachError::TableFull {
            what: "consumer",
            max: 4
        }
    );
    drop(held);
    ring.consumer(ConsumerOptions::anonymous()).unwrap();
}

#[test]
fn create_open_and_open_or_create() {
    let ns = Namespace::concurrent("open");
    assert!(matches!(
        Ring::open(ns.name(), "nope"),
        Err(OpenError::NotFound { .. })
    ));
    let a = Ring::open_or_create(ns.name(), "r", &small(8)).unwrap();
    let b = Ring::open_or_create(ns.name(), "r", &small(8)).unwrap();
    assert_eq!(a.geometry(), b.geometry());
    assert!(matches!(
        Ring::create(ns.name(), "r", &small(8)),
        Err(OpenError::AlreadyExists { .. })
    ));
    let err = Ring::open_or_create(ns.name(), "r", &small(16)).unwrap_err();
    assert!(matches!(err, OpenError::ConfigMismatch { .. }));
    assert!(err.to_string().contains("capacity 8"), "{err}");
    assert!(matches!(
        Ring::create(ns.name(), "../escape", &small(8)),
        Err(OpenError::InvalidName { .. })
    ));
    assert!(matches!(
        Ring::create(ns.name(), "r2", &small(12)),
        Err(OpenError::Config(_))
    ));
    // Mode is exact whatever the umask.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn remove_gives_attached_clients_a_clear_error() {
    let ns = Namespace::concurrent("remove");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    Ring::remove(ns.name(), "r").unwrap();
    assert_eq!(ring.state(), Some(RingState::Deleted));
    assert_eq!(p.publish(&[1]), Err(PublishError::Deleted));
    assert_eq!(p.try_publish(&[1]), Err(TryPublishError::Deleted));
    assert_eq!(c.poll_once(|_| {}), Err(PollError::Deleted));
    assert!(matches!(
        Ring::open(ns.name(), "r"),
        Err(OpenError::NotFound { .. })
    ));
    assert!(matches!(
        Ring::remove(ns.name(), "r"),
        Err(OpenError::NotFound { .. })
    ));
}

#[test]
fn end_of_batch_lands_on_the_last_event_when_a_tombstone_ends_the_run() {
    let ns = Namespace::concurrent("eob");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    p.publish(&[1]).unwrap();
    p.publish(&[2]).unwrap();
    let claim = p.claim().unwrap();
    drop(claim);
    let mut edges = Vec::new();
    c.poll_once(|ev| edges.push((ev.bytes()[0], ev.is_end_of_batch())))
        .unwrap();
    assert_eq!(edges, vec![(1, false), (2, true)]);
    assert_eq!(c.stats().skipped, 1);
    assert_eq!(p.stats().tombstoned, 1);
}

#[test]
fn tombstones_at_the_start_and_inside_a_run_leave_the_edge_on_its_last_event() {
    let ns = Namespace::concurrent("eob-inside");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut p = ring.producer().unwrap();
    // An anonymous consumer and a durable one, whose first batch runs inside its marking
    // window: the two loops of in-place delivery.
    let mut consumers = [
        ring.consumer(ConsumerOptions::anonymous()).unwrap(),
        ring.consumer(ConsumerOptions::durable("d")).unwrap(),
    ];
    drop(p.claim().unwrap());
    p.publish(&[1]).unwrap();
    drop(p.claim().unwrap());
    drop(p.claim().unwrap());
    p.publish(&[2]).unwrap();
    for c in &mut consumers {
        let mut edges = Vec::new();
        let n = c
            .poll_once(|ev| edges.push((ev.sequence(), ev.bytes()[0], ev.is_end_of_batch())))
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(edges, vec![(1, 1, false), (4, 2, true)]);
        assert_eq!(c.stats().skipped, 3);
        assert_eq!(c.stats().batches, 1);
        assert_eq!(c.next_sequence(), 5);
    }
}

#[test]
fn a_handler_failing_after_a_tombstone_commits_what_came_before_it() {
    let ns = Namespace::concurrent("fail-after-tomb");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut consumers = [
        ring.consumer(ConsumerOptions::anonymous()).unwrap(),
        ring.consumer(ConsumerOptions::durable("d")).unwrap(),
    ];
    p.publish(&[1]).unwrap();
    drop(p.claim().unwrap());
    p.publish(&[2]).unwrap();
    p.publish(&[3]).unwrap();
    for c in &mut consumers {
        let r = c.poll_once_fallible(|ev| match ev.bytes()[0] {
            2 => Err("two"),
            _ => Ok(()),
        });
        assert!(
            matches!(r, Err(PollError::HandlerFailed { sequence: 2, .. })),
            "{r:?}"
        );
        let s = c.stats();
        assert_eq!((s.delivered, s.skipped, s.failures), (1, 1, 1));
        assert_eq!(c.next_sequence(), 2);
    }
}

#[test]
fn batch_cap_bounds_a_poll() {
    let ns = Namespace::concurrent("cap");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().batch_cap(3))
        .unwrap();
    for i in 0..7u8 {
        p.publish(&[i]).unwrap();
    }
    let mut sizes = Vec::new();
    loop {
        let mut edges = 0;
        let n = c
            .poll_once(|ev| edges += usize::from(ev.is_end_of_batch()))
            .unwrap();
        if n == 0 {
            break;
        }
        assert_eq!(edges, 1, "one end-of-batch edge per batch");
        sizes.push(n);
    }
    assert_eq!(sizes, vec![3, 3, 1]);
    assert_eq!(c.stats().batches, 3);
}

#[test]
fn typed_events_round_trip() {
    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    struct Trade {
        id: u64,
        price: f64,
        qty: u32,
        side: u32,
    }
    let ns = Namespace::concurrent("typed");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let t = Trade {
        id: 7,
        price: 42.5,
        qty: 100,
        side: 1,
    };
    p.publish_value(&t).unwrap();
    let mut claim = p.claim().unwrap();
    claim.write_value(&Trade { id: 8, ..t }).unwrap();
    claim.commit();
    let mut got = Vec::new();
    c.poll_once(|ev| {
        assert_eq!(ev.view::<Trade>().copied(), ev.read::<Trade>());
        assert!(ev.read::<u64>().is_none(), "length must match");
        got.push(ev.read::<Trade>().unwrap());
    })
    .unwrap();
    assert_eq!(got, vec![t, Trade { id: 8, ..t }]);
}

#[test]
fn publish_timeout_waits_then_gives_up_without_spending_a_sequence() {
    let ns = Namespace::concurrent("timeout");
    let ring = Ring::create(ns.name(), "r", &small(4)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    for i in 0..4u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(
        p.stats().room_waits,
        0,
        "four publishes into four free slots"
    );
    assert_eq!(
        p.publish_timeout(&[9; 8], Duration::from_millis(50)),
        Err(TryPublishError::Timeout)
    );
    assert_eq!(p.stats().room_waits, 1, "the full ring was waited on once");
    assert_eq!(ring.head(), 4);
    assert_eq!(drain(&mut c), vec![0, 1, 2, 3]);
    assert_eq!(
        p.publish_timeout(&4u64.to_le_bytes(), Duration::from_millis(5)),
        Ok(4)
    );
    assert_eq!(p.stats().refused, 1);
    assert_eq!(
        p.stats().room_waits,
        1,
        "a publish that found room did not wait"
    );
    assert_eq!(
        ring.info().producers[0].stats.room_waits,
        0,
        "counted by the handle only"
    );
}

/// A blocking publish into a full ring waits for the consumer and counts the wait once,
/// however many times it parks: the consumer drains only once the producer's entry shows a
/// park that slept (`Ring::info`), so the fifth publish is known to have waited.
#[test]
fn a_blocking_publish_into_a_full_ring_counts_one_room_wait() {
    let ns = Namespace::concurrent("room-waits");
    let ring = Ring::create(ns.name(), "r", &small(4)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    for i in 0..4u64 {
        p.publish(&i.to_le_bytes()).unwrap();
    }
    let watcher = ring.clone();
    let drainer = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while watcher
            .info()
            .producers
            .first()
            .map_or(0, |p| p.stats.parks)
            == 0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the producer never parked"
            );
            std::thread::yield_now();
        }
        let mut got = Vec::new();
        while got.len() < 5 && std::time::Instant::now() < deadline {
            c.poll_once(|ev| got.push(ev.sequence())).unwrap();
            std::thread::yield_now();
        }
        got
    });
    assert_eq!(p.publish(&4u64.to_le_bytes()), Ok(4));
    assert_eq!(drainer.join().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(p.stats().room_waits, 1);
    assert!(p.stats().parks >= 1);
}

/// `publish_batch` takes its sequences in one claim, so a batch lands contiguous in the ring
/// even while other producers publish batches at the same time: three threads publish
/// batches of 1 to 8 events tagged (thread, batch, index), and the consumer finds every
/// batch's events at consecutive sequences, in order, with every batch of every thread
/// present once.
#[test]
fn batches_of_concurrent_producers_land_contiguous() {
    const THREADS: u64 = 3;
    const BATCHES: u64 = 300;
    let ns = Namespace::concurrent("batches");
    let ring = Ring::create(ns.name(), "r", &small(16)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("c")).unwrap();
    let tag = |t: u64, b: u64, i: u64, n: u64| (t << 48 | b << 16 | i << 8 | n).to_le_bytes();
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            let ring = ring.clone();
            std::thread::spawn(move || {
                let mut p = ring.producer().unwrap();
                for b in 0..BATCHES {
                    let n = 1 + (b * 7 + t * 3) % 8;
                    let events: Vec<_> = (0..n).map(|i| tag(t, b, i, n)).collect();
                    p.publish_batch(&events).unwrap();
                }
            })
        })
        .collect();
    // Per thread: the next batch expected, and the batch being read (index, size).
    let mut next_batch = [0u64; THREADS as usize];
    let mut open: Option<(u64, u64, u64, u64)> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while next_batch.iter().any(|&b| b < BATCHES) || open.is_some() {
        assert!(std::time::Instant::now() < deadline, "at {next_batch:?}");
        c.poll_once(|ev| {
            let v = u64::from_le_bytes(ev.bytes().try_into().unwrap());
            let (t, b, i, n) = (v >> 48, (v >> 16) & 0xffff_ffff, (v >> 8) & 0xff, v & 0xff);
            match open.take() {
                // Inside a batch: the very next sequence holds its next event.
                Some((ot, ob, oi, on)) => {
                    assert_eq!(
                        (t, b, i, n),
                        (ot, ob, oi + 1, on),
                        "sequence {}: batch {ob} of thread {ot} interrupted",
                        ev.sequence()
                    );
                }
                None => {
                    assert_eq!(i, 0, "sequence {}: a batch starts mid-way", ev.sequence());
                    assert_eq!(
                        b, next_batch[t as usize],
                        "thread {t}: batch lost or repeated"
                    );
                    next_batch[t as usize] += 1;
                }
            }
            if i + 1 < n {
                open = Some((t, b, i, n));
            }
        })
        .unwrap();
    }
    for h in producers {
        h.join().unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Ownership of entries and claims.

/// A `Claim` leaked with `mem::forget` still holds its sequence. Its producer publishes it
/// as a tombstone before its next claim, so consumers are not held at it for good.
#[test]
fn a_leaked_claim_is_tombstoned_at_the_next_publish_and_at_detach() {
    for mode in [ProducerMode::Single, ProducerMode::Multi] {
        let ns = Namespace::concurrent("leaked_claim");
        let cfg = RingConfig {
            producer_mode: mode,
            ..small(16)
        };
        let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish(&0u64.to_le_bytes()).unwrap();
        let mut claim = p.claim().unwrap();
        claim.write(&99u64.to_le_bytes()).unwrap();
        std::mem::forget(claim);
        p.publish(&2u64.to_le_bytes()).unwrap();
        assert_eq!(drain(&mut c), vec![0, 2], "{mode:?}");
        assert_eq!(c.stats().skipped, 1, "{mode:?}");
        assert_eq!(p.stats().tombstoned, 1, "{mode:?}");

        std::mem::forget(p.claim().unwrap());
        drop(p);
        assert_eq!(drain(&mut c), Vec::<u64>::new(), "{mode:?}");
        assert_eq!(c.stats().skipped, 2, "the detach tombstoned it ({mode:?})");
        assert_eq!(c.next_sequence(), 4, "{mode:?}");
    }
}

/// A batch whose event type's `AsRef` panics while the batch is written, after its claim:
/// the claim is published as tombstones as the panic unwinds, so consumers skip it and are
/// not held at it while the producer lives on; the next publish takes the next sequence.
#[test]
fn a_batch_whose_bytes_panic_is_tombstoned_as_it_unwinds() {
    use std::cell::Cell;
    /// Panics at its second `as_ref` (the batch's write; the first is its check).
    struct Brittle {
        calls: Cell<u32>,
        value: [u8; 8],
        brittle: bool,
    }
    impl AsRef<[u8]> for Brittle {
        fn as_ref(&self) -> &[u8] {
            let n = self.calls.get();
            self.calls.set(n + 1);
            assert!(!(self.brittle && n > 0), "a brittle event");
            &self.value
        }
    }
    let brittle = |v: u64, brittle: bool| Brittle {
        calls: Cell::new(0),
        value: v.to_le_bytes(),
        brittle,
    };
    // Fixed-size rings have a single producer.
    for (mode, event_size) in [
        (ProducerMode::Single, None),
        (ProducerMode::Multi, None),
        (ProducerMode::Single, Some(8)),
    ] {
        let case = format!("{mode:?}, event size {event_size:?}");
        let ns = Namespace::concurrent("brittle_batch");
        let cfg = RingConfig {
            producer_mode: mode,
            event_size,
            ..small(16)
        };
        let ring = Ring::create(ns.name(), "r", &cfg).unwrap();
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish(&0u64.to_le_bytes()).unwrap();
        let batch = [brittle(1, false), brittle(2, true), brittle(3, false)];
        let unwound =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.publish_batch(&batch)));
        assert!(unwound.is_err(), "{case}: the batch's write panicked");
        // The producer is alive and publishes nothing more yet: the consumer already
        // sees the batch's slots as skipped, not as a claim still being written.
        assert_eq!(drain(&mut c), vec![0], "{case}");
        assert_eq!(c.next_sequence(), 4, "{case}: past the batch");
        assert_eq!(c.stats().skipped, 3, "{case}");
        assert_eq!(p.stats().tombstoned, 3, "{case}");
        assert_eq!(p.publish(&4u64.to_le_bytes()), Ok(4), "{case}");
        assert_eq!(drain(&mut c), vec![4], "{case}");
        assert_eq!(p.stats().published, 2, "{case}");
    }
}

/// A durable consumer that was optional (it gated only within the slack) and comes back
/// required: what was published meanwhile may have been overwritten, so it starts at the
/// head and counts the gap, as after a release; it never reads slots producers reused.
#[test]
fn a_durable_consumer_that_was_optional_comes_back_required_at_the_head() {
    let ns = Namespace::concurrent("opt_to_req");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::durable("d").optional())
        .unwrap();
    p.publish(&0u64.to_le_bytes()).unwrap();
    // Its handler fails on the first event: FAILED at sequence 0, still an optional entry.
    let r = c.poll_once(|_| panic!("handler fails"));
    assert_eq!(r, Err(PollError::HandlerPanicked { sequence: 0 }));
    drop(c);
    // Producers run past it (it is optional, beyond the slack).
    for v in 1..30u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    assert_eq!(c.next_sequence(), 30, "starts at the head");
    assert_eq!(c.stats().dropped_behind, 30, "and counts the gap");
    p.publish(&30u64.to_le_bytes()).unwrap();
    assert_eq!(drain(&mut c), vec![30]);
}

/// A consumer the broker released from gating while it runs still holds its entry: its name
/// is in use until it detaches; it gates again by itself; after it detaches the name is
/// free (released, resuming at the head).
#[test]
fn a_released_live_consumer_keeps_its_name_until_it_detaches() {
    let ns = Namespace::concurrent("released_live");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    let info = ring.info().consumers[0].clone();
    assert!(ring.release_consumer(info.index, info.word));
    assert!(
        !ring.release_consumer(info.index, info.word),
        "a release names the word it saw: a second one with the same word does nothing"
    );
    match ring.consumer(ConsumerOptions::durable("d")) {
        Err(AttachError::NameInUse { pid, .. }) => assert_eq!(pid, std::process::id()),
        other => panic!("expected NameInUse, got {:?}", other.map(|c| c.index())),
    }
    for v in 0..20u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    // Nothing gated the producer: the consumer was lapped, jumps to the head and gates again.
    assert_eq!(drain(&mut c), Vec::<u64>::new());
    assert_eq!(c.next_sequence(), 20);
    assert_eq!(ring.info().consumers[0].state, "ACTIVE");
    for v in 20..28u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    assert_eq!(
        p.try_publish(&[0; 8]),
        Err(TryPublishError::Full),
        "it gates again"
    );
    assert_eq!(drain(&mut c), (20..28).collect::<Vec<_>>());
    drop(c);
    let c = ring
        .consumer(ConsumerOptions::durable("d"))
        .expect("detached: the name is free");
    assert_eq!(c.next_sequence(), 28);
}

/// A single-producer ring of 8 slots (`event_size` as given) in a namespace of its own, its
/// producer, and a durable consumer "d" that reads ahead; events 0 to 3 published.
fn leased(
    label: &str,
    event_size: Option<u32>,
) -> (Namespace, Ring, shmring::Producer, shmring::Consumer) {
    leased_as(label, event_size, ConsumerOptions::durable("d"))
}

/// As [`leased`], the consumer attached with `opts`.
fn leased_as(
    label: &str,
    event_size: Option<u32>,
    opts: ConsumerOptions,
) -> (Namespace, Ring, shmring::Producer, shmring::Consumer) {
    let ns = Namespace::concurrent(label);
    let config = RingConfig {
        event_size,
        producer_mode: ProducerMode::Single,
        ..small(8)
    };
    let ring = Ring::create(ns.name(), "r", &config).unwrap();
    let mut p = ring.producer().unwrap();
    let c = ring.consumer(opts).unwrap();
    for v in 0..4u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    (ns, ring, p, c)
}

/// What a broker release of `info` does to a handler that reads sequences 0 to 3 in place,
/// landing at sequence 3: the consumer released, then the producer publishes `upto` (after
/// 0 to 3): to 11, it overwrites the slots of 0 to 2 (not 3's, whose bytes the handler
/// still borrows); to 8, it writes only the other half of the ring.
fn release_then_publish(
    ring: &Ring,
    info: &shmring::ConsumerInfo,
    p: &mut shmring::Producer,
    upto: u64,
) {
    assert!(ring.release_consumer(info.index, info.word));
    for v in 4..upto {
        p.publish(&v.to_le_bytes()).unwrap();
    }
}

/// A consumer that reads ahead (the bridge exporter's way: `read_ahead`, then `commit_to`
/// what the other side confirmed) and is released by the broker (`broker release`, to let
/// producers go on while it waits for confirmations) goes to the head and gates again, as
/// a poll does: its next `read_ahead` says the sequence asked for is below its position
/// now, and the gap is counted in `dropped_behind`. What it read before the release and
/// the other side confirms is committed as delivered. Before, it stayed released at its old
/// position: every `read_ahead` returned nothing (the slots hold later laps), producers
/// were never held for it again, and `commit_to` refused what it had read as unpublished.
#[test]
fn a_released_consumer_reading_ahead_goes_to_the_head_and_gates_again() {
    for event_size in [None, Some(8)] {
        let (_ns, ring, mut p, mut c) = leased("released_lease", event_size);
        let mut seen = Vec::new();
        assert_eq!(c.read_ahead(0, 16, |ev| seen.push(ev.sequence())), Ok(4));
        assert_eq!(seen, [0, 1, 2, 3]);
        let info = ring.info().consumers[0].clone();
        assert!(ring.release_consumer(info.index, info.word));
        for v in 4..24u64 {
            p.publish(&v.to_le_bytes()).unwrap();
        }
        // A confirmation past what it can have read (a ring's worth from its position) moves
        // nothing.
        assert_eq!(
            c.commit_to(u64::MAX),
            Err(LeaseError::NotPublished {
                seq: u64::MAX,
                unpublished: 8
            })
        );
        assert_eq!(c.next_sequence(), 0);
        // The other side confirms what it read before the release, whose slots hold later
        // laps now: committed all the same, as delivered.
        assert_eq!(c.commit_to(4), Ok(()), "{event_size:?}");
        assert_eq!(c.next_sequence(), 4);
        assert_eq!(c.stats().delivered, 4);
        let mut late = Vec::new();
        assert_eq!(
            c.read_ahead(4, 16, |ev| late.push(ev.sequence())),
            Err(LeaseError::BeforePosition { seq: 4, next: 24 }),
            "{event_size:?}"
        );
        assert_eq!(late, [0u64; 0]);
        assert_eq!(c.next_sequence(), 24);
        assert_eq!(
            c.stats().dropped_behind,
            20,
            "the gap from its committed position"
        );
        assert_eq!(ring.info().consumers[0].state, "ACTIVE", "it gates again");
        for v in 24..32u64 {
            p.publish(&v.to_le_bytes()).unwrap();
        }
        assert_eq!(
            p.try_publish(&[0; 8]),
            Err(TryPublishError::Full),
            "{event_size:?}"
        );
        let mut again = Vec::new();
        assert_eq!(c.read_ahead(24, 16, |ev| again.push(ev.sequence())), Ok(32));
        assert_eq!(again, (24..32).collect::<Vec<_>>());
        c.commit_to(32).expect("commit what was read");
    }
}

/// A release landing while `read_ahead`'s handler reads: producers may write the slots it
/// is reading, so the call says to discard what the handler got (`BeforePosition`, from the
/// head it went to) instead of returning the run as read. Before, it returned `Ok`, and the
/// bridge exporter sent what it had copied, torn or not.
#[test]
fn a_release_while_reading_ahead_says_to_discard_the_run() {
    for event_size in [None, Some(8)] {
        let (_ns, ring, mut p, mut c) = leased("release_mid_lease", event_size);
        let info = ring.info().consumers[0].clone();
        let mut seen = Vec::new();
        let read = c.read_ahead(0, 16, |ev| {
            seen.push(ev.sequence());
            if ev.sequence() == 3 {
                release_then_publish(&ring, &info, &mut p, 11);
            }
        });
        assert_eq!(
            read,
            Err(LeaseError::BeforePosition { seq: 0, next: 11 }),
            "{event_size:?}"
        );
        assert_eq!(seen, [0, 1, 2, 3]);
        assert_eq!(ring.info().consumers[0].state, "ACTIVE", "it gates again");
    }
}

/// A release landing while `poll_once`'s handler reads in place (or `poll_runs`', on a
/// fixed-size ring): producers may write the slots it is reading, so the poll says which
/// events the handler may have got torn (`ReleasedWhileReading`), counts them dropped, not
/// delivered, and the consumer goes on from the head. Before, the poll returned the batch as
/// delivered and committed it.
#[test]
fn a_release_while_polling_in_place_says_what_may_be_torn() {
    for (event_size, runs) in [(None, false), (Some(8), false), (Some(8), true)] {
        // Anonymous for runs: a durable consumer's first polls mark each event (its marking
        // window), which `poll_runs` leaves to `poll_once`.
        let opts = if runs {
            ConsumerOptions::anonymous()
        } else {
            ConsumerOptions::durable("d")
        };
        let (_ns, ring, mut p, mut c) = leased_as("release_mid_poll", event_size, opts);
        let info = ring.info().consumers[0].clone();
        let mut seen = Vec::new();
        let mut on_event = |seq: u64| {
            seen.push(seq);
            if seq == 3 {
                release_then_publish(&ring, &info, &mut p, 11);
            }
        };
        let polled = if runs {
            c.poll_runs(|first, bytes| on_event(first + bytes.len() as u64 / 8 - 1))
        } else {
            c.poll_once(|ev| on_event(ev.sequence()))
        };
        assert_eq!(
            polled,
            Err(PollError::ReleasedWhileReading { from: 0, to: 4 }),
            "{event_size:?} runs {runs}"
        );
        let s = c.stats();
        assert_eq!(
            (s.delivered, s.dropped_behind, c.next_sequence()),
            (0, 11, 11),
            "{event_size:?} runs {runs}: {seen:?}"
        );
        assert_eq!(ring.info().consumers[0].state, "ACTIVE", "it gates again");
    }
}

/// `run` goes on after such a release: the batch is counted dropped, and the consumer
/// carries on from the head, gating again.
#[test]
fn a_release_while_running_in_place_goes_on_from_the_head() {
    for event_size in [None, Some(8)] {
        let opts = ConsumerOptions::durable("d").wait(WaitStrategy::TimeoutBlocking {
            timeout: std::time::Duration::from_millis(5),
        });
        let (_ns, ring, mut p, mut c) = leased_as("release_mid_run", event_size, opts);
        let info = ring.info().consumers[0].clone();
        let mut seen = Vec::new();
        let mut idle = 0;
        let exit = c.run(
            |ev| {
                seen.push(ev.sequence());
                if ev.sequence() == 3 {
                    release_then_publish(&ring, &info, &mut p, 11);
                }
            },
            || {
                idle += 1;
                idle > 3
            },
        );
        assert_eq!(exit, Ok(shmring::RunExit::Stopped), "{event_size:?}");
        let s = c.stats();
        assert_eq!(
            (s.delivered, s.dropped_behind, c.next_sequence()),
            (0, 11, 11),
            "{event_size:?}: {seen:?}"
        );
        assert_eq!(ring.info().consumers[0].state, "ACTIVE", "it gates again");
    }
}

/// The same with the producer writing elsewhere (the other half of the ring): what the
/// handler got is intact, so the poll returns it as delivered, and the release is taken at
/// the next poll, as if it had come just after this one.
#[test]
fn a_release_while_polling_in_place_keeps_a_batch_nobody_wrote_over() {
    for event_size in [None, Some(8)] {
        let (_ns, ring, mut p, mut c) = leased("release_mid_poll_kept", event_size);
        let info = ring.info().consumers[0].clone();
        let polled = c.poll_once(|ev| {
            if ev.sequence() == 3 {
                release_then_publish(&ring, &info, &mut p, 8);
            }
        });
        assert_eq!(polled, Ok(4), "{event_size:?}");
        assert_eq!(c.stats().delivered, 4, "{event_size:?}");
        assert_eq!(c.poll_once(|_| {}), Ok(0), "{event_size:?}");
        assert_eq!(
            (c.stats().dropped_behind, c.next_sequence()),
            (4, 8),
            "{event_size:?}: the release taken at the next poll"
        );
    }
}

/// A release landing while `read_ahead`'s handler reads, with no producer writing into the
/// slots it read (here they publish into the other half of the ring): what the handler got
/// is intact, so the call returns it, and the release is taken at the next call, as if it
/// had come just after this one. Before, any release during the read discarded the whole
/// run and counted it as dropped.
#[test]
fn a_release_while_reading_ahead_keeps_a_run_nobody_wrote_over() {
    for event_size in [None, Some(8)] {
        let (_ns, ring, mut p, mut c) = leased("release_no_lap", event_size);
        let info = ring.info().consumers[0].clone();
        let mut seen = Vec::new();
        let read = c.read_ahead(0, 16, |ev| {
            seen.push((ev.sequence(), ev.bytes().to_vec()));
            if ev.sequence() == 3 {
                release_then_publish(&ring, &info, &mut p, 8);
            }
        });
        assert_eq!(read, Ok(4), "{event_size:?}");
        let want: Vec<(u64, Vec<u8>)> = (0..4u64).map(|v| (v, v.to_le_bytes().to_vec())).collect();
        assert_eq!(seen, want);
        // The other side confirms the run; then the release: to the head, gating again.
        assert_eq!(c.commit_to(4), Ok(()), "{event_size:?}");
        assert_eq!(c.stats().delivered, 4);
        assert_eq!(
            c.read_ahead(4, 16, |_| {}),
            Err(LeaseError::BeforePosition { seq: 4, next: 8 }),
            "{event_size:?}"
        );
        assert_eq!(c.stats().dropped_behind, 4, "{event_size:?}");
        assert_eq!(ring.info().consumers[0].state, "ACTIVE", "it gates again");
    }
}

/// A sequence repaired after its producer died is one word in the slot (its stamp): a
/// consumer skips it and counts it, a recall says it holds no event.
#[test]
fn a_repaired_sequence_is_skipped_and_counted() {
    for required in [true, false] {
        let ns = Namespace::concurrent("repaired_seq");
        let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
        let opts = if required {
            ConsumerOptions::durable("d")
        } else {
            ConsumerOptions::durable("d").optional()
        };
        let mut c = ring.consumer(opts).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish(&0u64.to_le_bytes()).unwrap();
        // Sequence 1 claimed and never published (its producer, as far as the ring can
        // tell, gone), then repaired.
        std::mem::forget(p.claim().unwrap());
        assert_eq!(ring.tombstone(1), shmring::Tombstone::Written);
        assert_eq!(ring.tombstone(1), shmring::Tombstone::NotNeeded);
        let mut buf = Vec::new();
        assert_eq!(ring.recall(1, &mut buf), shmring::Recall::Tombstone);
        assert_eq!(drain(&mut c), vec![0], "required {required}");
        assert_eq!(c.stats().skipped, 1, "required {required}");
        assert_eq!(c.next_sequence(), 2, "required {required}");
    }
}

/// A durable required entry left by a process that died right after publishing it ACTIVE,
/// before storing its start: its position is the provisional one, which producers may have
/// lapped before the entry was visible. A process taking the name over sees the first slot
/// already holds a later sequence, so it starts at the head (counting the gap) instead of
/// reading reused slots in place.
#[test]
fn a_durable_entry_whose_first_slot_was_reused_is_taken_over_at_the_head() {
    let ns = Namespace::concurrent("reused_first_slot");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    for v in 0..20u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    let (dead, _) = shmring_testkit::fault::dead_process();
    raw.fabricate_consumer(
        0,
        shmring_layout::owned_word::pack(2, shmring_layout::consumer_state::ACTIVE, dead),
        shmring_layout::consumer_flags::REQUIRED | shmring_layout::consumer_flags::DURABLE,
        "d",
        0,
    );
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    assert_eq!(c.next_sequence(), 20, "starts at the head");
    assert_eq!(c.stats().dropped_behind, 20, "and counts the gap");
    p.publish(&20u64.to_le_bytes()).unwrap();
    assert_eq!(drain(&mut c), vec![20]);
}

/// An attacher that died between making its entry ACTIVE and storing its start left the
/// position it read before that CAS, flagged STARTING. Producers may have run past it while
/// the entry did not gate yet (a scan before the CAS, a gate cached from it), so a slot
/// there may be mid-overwrite although it still holds its own sequence: the name is taken
/// over at the head, and the gap counted, not resumed there.
#[test]
fn a_durable_entry_whose_holder_died_before_its_start_is_taken_over_at_the_head() {
    use shmring_layout::consumer_flags::{DURABLE, REQUIRED, STARTING};
    let ns = Namespace::concurrent("died_starting");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    for v in 0..5u64 {
        p.publish(&v.to_le_bytes()).unwrap();
    }
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    let (dead, _) = shmring_testkit::fault::dead_process();
    // Its first slot still holds sequence 2: the check for a reused first slot passes.
    raw.fabricate_consumer(
        0,
        shmring_layout::owned_word::pack(2, shmring_layout::consumer_state::ACTIVE, dead),
        REQUIRED | DURABLE | STARTING,
        "d",
        2,
    );
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    assert_eq!(c.next_sequence(), 5, "starts at the head");
    assert_eq!(c.stats().dropped_behind, 3, "and counts the gap");
    assert_eq!(
        raw.consumer_flags(0) & STARTING,
        0,
        "the new holder stored its start"
    );
    p.publish(&5u64.to_le_bytes()).unwrap();
    assert_eq!(drain(&mut c), vec![5]);
    // A holder that stored its start is taken over where it stopped.
    drop(c);
    raw.set_consumer_word(
        0,
        shmring_layout::owned_word::pack(9, shmring_layout::consumer_state::ACTIVE, dead),
    );
    p.publish(&6u64.to_le_bytes()).unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    assert_eq!(c.next_sequence(), 6);
    assert_eq!(drain(&mut c), vec![6]);
}

/// `Ring::release_if_starting` releases only an entry whose dead holder had not stored
/// its start: one that cleared STARTING keeps its policy's treatment, whatever a snapshot
/// taken earlier said, and one whose word moved is left alone.
#[test]
fn only_an_entry_still_starting_is_released_as_one() {
    use shmring_layout::consumer_flags::{DURABLE, REQUIRED, STARTING};
    use shmring_layout::{consumer_state, owned_word};
    let ns = Namespace::concurrent("release_starting");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    let (dead, _) = shmring_testkit::fault::dead_process();
    let word = owned_word::pack(2, consumer_state::ACTIVE, dead);
    raw.fabricate_consumer(0, word, REQUIRED | DURABLE, "started", 0);
    raw.fabricate_consumer(1, word, REQUIRED | DURABLE | STARTING, "starting", 0);
    assert!(!ring.release_if_starting(0, word), "it had started");
    assert!(
        !ring.release_if_starting(1, owned_word::pack(1, consumer_state::ACTIVE, dead)),
        "another word"
    );
    assert!(ring.release_if_starting(1, word));
    let states: Vec<&str> = ring.info().consumers.iter().map(|c| c.state).collect();
    assert_eq!(states, ["ACTIVE", "RELEASED"]);
}

/// A timeout of `Duration::MAX` ("wait for ever") is a wait with no end, not an overflow of
/// the clock: the publishes with a timeout and a drain take it.
#[test]
fn a_timeout_of_duration_max_waits_without_end() {
    let ns = Namespace::concurrent("timeout_max");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut p = ring.producer().unwrap();
    assert_eq!(p.publish_timeout(&[1], std::time::Duration::MAX), Ok(0));
    assert_eq!(
        p.publish_batch_timeout(&[[2u8], [3]], std::time::Duration::MAX),
        Ok(1)
    );
    assert_eq!(ring.drain(std::time::Duration::MAX), Ok(3));
}

/// Two producers of a multi-producer ring killed together while each took a sequence (both
/// between announcing a claim and recording it): neither hole has a name. The repair of
/// either waits only for live producers about to record a claim; a dead one never will, so
/// both holes are tombstoned and the consumers go on. Before, each repair waited for the
/// other dead producer's announcement, and the holes stayed for good.
#[test]
fn two_producers_dead_while_claiming_do_not_hold_each_other_s_repair() {
    use shmring_layout::IN_FLIGHT_CLAIMING;
    let ns = Namespace::concurrent("two_dead_claiming");
    let ring = Ring::create(ns.name(), "r", &small(64)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    {
        let mut p = ring.producer().unwrap();
        for v in 0..3u64 {
            p.publish(&v.to_le_bytes()).unwrap();
        }
    }
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    // Sequences 3 and 4, each taken by a process that died before it knew which.
    raw.set_claim_word(5);
    let words: Vec<u64> = (1..3)
        .map(|i| {
            let (pid, start) = shmring_testkit::fault::dead_process();
            raw.fabricate_dead_producer(i, pid, start, IN_FLIGHT_CLAIMING, 0)
        })
        .collect();
    let repair = ring.repair_dead_producer(1, words[0]);
    assert_eq!(
        (repair.tombstoned, repair.waiting),
        (2, 0),
        "the repair of the first tombstones both holes"
    );
    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!((got, c.next_sequence()), (vec![0, 1, 2], 5));
}

/// `Ring::tombstone` of a sequence no producer has claimed yet marks nothing: the producer
/// that claims it next publishes its event, and consumers get it. Before, the mark went in
/// and the event published there was passed over.
#[test]
fn a_tombstone_of_an_unclaimed_sequence_marks_nothing() {
    let ns = Namespace::concurrent("tomb_unclaimed");
    let ring = Ring::create(ns.name(), "r", &small(8)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    p.publish(&0u64.to_le_bytes()).unwrap();
    assert_eq!(ring.tombstone(1), shmring::Tombstone::Wait);
    assert_eq!(p.publish(&1u64.to_le_bytes()), Ok(1));
    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(got, [0, 1]);
}
