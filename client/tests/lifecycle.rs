//! Stop, drain and start, in one process. The multi-process races are in `shmring-tests`.

use std::thread;
use std::time::{Duration, Instant};

use shmring::{
    ConsumerOptions, LifecycleError, PollError, ProducerMode, PublishError, Ring, RingConfig,
    RingState, RunExit, TryPublishError, WaitOutcome,
};

use shmring_testkit::raw::RawSegment;
use shmring_testkit::Namespace;

fn cfg(capacity: u64) -> RingConfig {
    RingConfig {
        capacity,
        slot_size: 64,
        max_consumers: 4,
        max_producers: 8,
        ..RingConfig::default()
    }
}

#[test]
fn stop_refuses_new_claims_keeps_published_events_and_start_continues_the_sequence() {
    let ns = Namespace::concurrent("stopstart");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("c")).unwrap();
    for i in 0..5u8 {
        p.publish(&[i]).unwrap();
    }
    assert_eq!(ring.stop(), Ok(5));
    assert_eq!(ring.stop(), Ok(5), "idempotent");
    assert_eq!(ring.state(), Some(RingState::Stopped));
    assert_eq!(p.publish(&[9]), Err(PublishError::Closed));
    assert_eq!(p.try_publish(&[9]), Err(TryPublishError::Closed));
    assert!(matches!(
        p.publish_batch(&[[9u8]]),
        Err(PublishError::Closed)
    ));
    assert_eq!(ring.head(), 5, "refused claims do not move the head");
    let mut got = Vec::new();
    let exit = c.run(|ev| got.push(ev.bytes()[0]), || false).unwrap();
    assert_eq!(
        exit,
        RunExit::Closed,
        "run ends once the stopped ring is drained"
    );
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
    assert_eq!(ring.start(), Ok(2));
    assert_eq!(ring.start(), Err(LifecycleError::AlreadyRunning));
    assert_eq!(
        p.publish(&[5]),
        Ok(5),
        "sequences continue after the stop sequence"
    );
    let mut after = Vec::new();
    c.poll_once(|ev| after.push((ev.sequence(), ev.bytes()[0])))
        .unwrap();
    assert_eq!(after, vec![(5, 5)]);
}

#[test]
fn drain_waits_for_consumers_and_reports_who_is_behind() {
    let ns = Namespace::concurrent("drain");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("slow")).unwrap();
    for i in 0..6u8 {
        p.publish(&[i]).unwrap();
    }
    match ring.drain(Duration::from_millis(20)) {
        Err(LifecycleError::DrainTimeout {
            stop_seq, behind, ..
        }) => {
            assert_eq!(stop_seq, 6);
            assert_eq!(behind, vec![(0, "slow".to_owned(), 0)]);
        }
        other => panic!("expected a drain timeout, got {other:?}"),
    }
    assert_eq!(ring.state(), Some(RingState::Stopped));
    let drainer = {
        let ring = ring.clone();
        thread::spawn(move || ring.drain(Duration::from_secs(20)))
    };
    let mut edges = Vec::new();
    c.run(|ev| edges.push(ev.is_end_of_batch()), || false)
        .unwrap();
    assert_eq!(edges, vec![false, false, false, false, false, true]);
    assert_eq!(drainer.join().unwrap(), Ok(6));
}

/// A start whose starter died is counted by the process that finishes it: status, the
/// metrics and the bridge's event headers read the run number. Before, only
/// `Ring::start`'s own caller counted, after its reopen, so a start finished by a sweep,
/// another start or a producer's claim left the run number where it was. A stop and a
/// start after it count on from there.
#[test]
fn a_dead_starters_start_finished_by_another_process_is_counted() {
    use shmring_layout::lifecycle;

    let ns = Namespace::concurrent("dead_start");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    assert_eq!(ring.run_number(), 1);
    assert_eq!(ring.stop(), Ok(0));
    let raw = RawSegment::open(&ring);
    let (dead, _) = shmring_testkit::fault::dead_process();
    raw.set_lifecycle_word(lifecycle::next(
        raw.lifecycle_word(),
        RingState::Starting as u32,
        dead,
    ));
    assert_eq!(ring.finish_interrupted(), Ok((RingState::Running, true)));
    assert_eq!(ring.run_number(), 2);
    assert_eq!(ring.info().run, 2);
    // A start that meets the finished one: already running, nothing counted.
    assert_eq!(ring.start(), Err(LifecycleError::AlreadyRunning));
    assert_eq!(ring.run_number(), 2);
    assert_eq!(ring.stop(), Ok(0));
    assert_eq!(ring.start(), Ok(3));
    assert_eq!(ring.info().run, 3);
}

/// A drain that times out says which of the consumers it waited for no running process
/// moves (FAILED at an event, DETACHED, attached by a process that is gone) and what lets
/// it end: a restart of each, or `broker release`. A consumer a live process holds is named
/// with its position only. Before, all four read alike ("#i name at next").
#[test]
fn a_drain_timeout_says_which_consumers_no_process_moves() {
    use shmring::Unmoved;
    use shmring_layout::{consumer_flags, consumer_state, owned_word};

    let ns = Namespace::concurrent("drain_why");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let _slow = ring.consumer(ConsumerOptions::durable("slow")).unwrap();
    let mut failed = ring.consumer(ConsumerOptions::durable("failed")).unwrap();
    drop(ring.consumer(ConsumerOptions::durable("gone")).unwrap());
    for i in 0..4u8 {
        p.publish(&[i]).unwrap();
    }
    let r = failed.poll_once_fallible(|ev| {
        if ev.sequence() == 1 {
            Err("bad event")
        } else {
            Ok(())
        }
    });
    assert!(r.is_err(), "{r:?}");
    // Entry 3: attached by a process that died (its pid reaped).
    let (dead, _) = shmring_testkit::fault::dead_process();
    RawSegment::open(&ring).fabricate_consumer(
        3,
        owned_word::pack(1, consumer_state::ACTIVE, dead),
        consumer_flags::REQUIRED | consumer_flags::DURABLE,
        "crashed",
        0,
    );
    let err = ring.drain(Duration::from_millis(20)).unwrap_err();
    match &err {
        LifecycleError::DrainTimeout {
            behind, unmoved, ..
        } => {
            assert_eq!(behind.len(), 4, "{behind:?}");
            assert_eq!(
                unmoved,
                &vec![
                    (1, "failed".to_owned(), Unmoved::Failed),
                    (2, "gone".to_owned(), Unmoved::Detached),
                    (3, "crashed".to_owned(), Unmoved::ProcessGone),
                ]
            );
        }
        other => panic!("expected a drain timeout, got {other:?}"),
    }
    let msg = err.to_string();
    for said in [
        "\"failed\" (FAILED at sequence 1",
        "\"gone\" (DETACHED",
        "\"crashed\" (its process is gone",
        &format!("`broker release --namespace={} r NAME`", ns.name()),
    ] {
        assert!(msg.contains(said), "{said:?} in {msg}");
    }
    assert!(!msg.contains("\"slow\" ("), "a live consumer: {msg}");
}

/// The command a drain timeout suggests for one consumer no process moves works when pasted
/// into a shell, whatever its name holds.
#[test]
fn a_drain_timeout_quotes_the_name_in_the_command_it_suggests() {
    let ns = Namespace::concurrent("drain_quote");
    // A drain of `ring` that times out, after `name` attached and detached between two
    // publishes: the message.
    let timed_out = |ring: &Ring, name: &str| {
        ring.producer().unwrap().publish(&[1]).unwrap();
        drop(ring.consumer(ConsumerOptions::durable(name)).unwrap());
        ring.producer().unwrap().publish(&[2]).unwrap();
        ring.drain(Duration::from_millis(20))
            .unwrap_err()
            .to_string()
    };
    let said = |msg: &str, command: &str| {
        let command = format!("`broker release --namespace={} {command}`", ns.name());
        assert!(msg.contains(&command), "{command} in {msg}");
    };
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let msg = timed_out(&ring, "audit log's");
    assert!(msg.contains("(DETACHED)"), "{msg}");
    said(&msg, r"r 'audit log'\''s'");

    // A name the CLI would take for an option comes after `--`.
    let ring = Ring::create(ns.name(), "s", &cfg(16)).unwrap();
    said(&timed_out(&ring, "-v"), "-- s -v");
    // And where a placeholder stands for such a name.
    ring.start().unwrap();
    said(&timed_out(&ring, "w"), "-- s NAME");
}

/// A drain that times out on one anonymous FAILED consumer says to restart its process,
/// not to `broker release` it (which takes a name), and quotes the names it lists.
#[test]
fn a_drain_timeout_on_an_anonymous_consumer_suggests_no_release() {
    let ns = Namespace::concurrent("drain_anon");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut anonymous = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let _live = ring
        .consumer(ConsumerOptions::durable("a\u{1b}[2J"))
        .unwrap();
    ring.producer().unwrap().publish(&[1]).unwrap();
    assert!(anonymous.poll_once_fallible(|_| Err("bad event")).is_err());
    let msg = ring
        .drain(Duration::from_millis(20))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("#0 <anonymous> (FAILED at sequence 0") && msg.contains("restart its process"),
        "{msg}"
    );
    assert!(!msg.contains("broker release"), "{msg}");
    assert!(msg.contains(r#"#1 "a\u{1b}[2J" at 0"#), "{msg}");
    assert!(!msg.contains('\u{1b}'), "{msg}");
}

/// `drain_while` asks between looks whether to keep waiting: told no, it ends with
/// `DrainAbandoned` (who is behind) long before its timeout and leaves the ring Stopped;
/// a drain whose consumers are already there answers without asking.
#[test]
fn a_drain_nobody_waits_for_ends_early_and_leaves_the_ring_stopped() {
    let ns = Namespace::concurrent("abandon");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("slow")).unwrap();
    for i in 0..3u8 {
        p.publish(&[i]).unwrap();
    }
    let mut asked = 0;
    let began = std::time::Instant::now();
    let out = ring.drain_while(Duration::from_secs(600), || {
        asked += 1;
        asked < 3
    });
    assert_eq!(
        out,
        Err(LifecycleError::DrainAbandoned {
            stop_seq: 3,
            behind: vec![(0, "slow".to_owned(), 0)],
        })
    );
    assert_eq!(asked, 3);
    assert!(began.elapsed() < Duration::from_secs(60));
    assert_eq!(ring.state(), Some(RingState::Stopped));
    c.poll_once(|_| {}).unwrap();
    assert_eq!(
        ring.drain_while(Duration::from_secs(600), || panic!(
            "asked with nobody behind"
        )),
        Ok(3)
    );
}

/// A ring removed while a drain waits for its consumers: a consumer that a live process
/// holds still delivers up to the stop (it is told of the delete once caught up), so the
/// drain waits for it and succeeds; one that nobody holds can never catch up (an attach
/// refuses a deleted ring), so the drain ends at once with `Deleted`, not at its timeout.
#[test]
fn a_drain_ends_when_the_ring_is_removed() {
    for held in [true, false] {
        let ns = Namespace::concurrent("drain_removed");
        let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
        let mut p = ring.producer().unwrap();
        let mut c = Some(ring.consumer(ConsumerOptions::durable("slow")).unwrap());
        p.publish(&[0]).unwrap();
        if !held {
            c = None; // detached: its entry still gates at 0
        }
        let mut looks = 0;
        let out = ring.drain_while(Duration::from_secs(5), || {
            looks += 1;
            if looks == 1 {
                // Another process's remove, between two of the drain's looks.
                Ring::remove(ns.name(), "r").expect("remove");
            } else if let Some(c) = c.as_mut() {
                // The live holder delivers what came before the stop.
                assert_eq!(c.poll_once(|_| {}), Ok(1));
            }
            true
        });
        let expected = if held {
            Ok(1)
        } else {
            Err(LifecycleError::Deleted)
        };
        assert_eq!(out, expected, "held {held}");
        assert_eq!(ring.state(), Some(RingState::Deleted));
    }
}

/// A drain whose ring another request starts while it waits: its consumer reaches the stop
/// sequence, but the ring runs again with new events, so the drain does not answer that it
/// stopped and drained the ring (it did neither): `DrainInterrupted`, naming the state.
#[test]
fn a_drain_whose_ring_is_started_under_it_says_so() {
    let ns = Namespace::concurrent("drain_started");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("slow")).unwrap();
    p.publish(&[0]).unwrap();
    let mut looks = 0;
    let out = ring.drain_while(Duration::from_secs(20), || {
        looks += 1;
        if looks == 1 {
            // Another request's start, between two of the drain's looks, and a new event.
            ring.start().expect("start");
            assert_eq!(p.publish(&[1]), Ok(1));
            // The consumer reaches the stop sequence (and past it).
            while c.poll_once(|_| {}).expect("poll") > 0 {}
        }
        true
    });
    match out {
        Err(e @ LifecycleError::DrainInterrupted { stop_seq: 1, .. }) => {
            assert!(e.to_string().contains("Running"), "{e}");
        }
        other => panic!("expected DrainInterrupted at 1, got {other:?}"),
    }
    assert_eq!(
        ring.state(),
        Some(RingState::Running),
        "left as the start left it"
    );
}

/// Two drains of one ring with a stop between them (library calls; the broker runs one at a
/// time): the second drain makes its own Draining word at the same stop sequence, and the
/// first, which finds that word when its consumer has everything, answers `Ok` as the
/// second does (whichever ends the ring, the ring is drained and left Stopped).
#[test]
fn two_drains_with_a_stop_between_both_answer_ok() {
    let ns = Namespace::concurrent("two_drains");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("slow")).unwrap();
    for i in 0..3u8 {
        p.publish(&[i]).unwrap();
    }
    let first = {
        let ring = ring.clone();
        thread::spawn(move || ring.drain(Duration::from_secs(20)))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while ring.state() != Some(RingState::Draining) {
        assert!(Instant::now() < deadline, "the first drain never began");
        thread::yield_now();
    }
    assert_eq!(ring.stop(), Ok(3), "a stop of the draining ring");
    let mut first = Some(first);
    let mut first_result = None;
    let second = ring.drain_while(Duration::from_secs(20), || {
        // The second drain's word is in place: the consumer catches up, and the first
        // drain ends while the second still waits.
        if let Some(first) = first.take() {
            while c.poll_once(|_| {}).expect("poll") > 0 {}
            first_result = Some(first.join().unwrap());
        }
        true
    });
    assert_eq!(first_result, Some(Ok(3)), "the first drain");
    assert_eq!(second, Ok(3), "the second drain");
    assert_eq!(ring.state(), Some(RingState::Stopped));
}

/// `stop_if_draining` ends a drain with one CAS on the Draining word it reads: a running,
/// stopped or restarted ring is left as it is, and a drain still waiting for its consumer
/// ends as it would have once that consumer has everything.
#[test]
fn stop_if_draining_acts_only_on_a_draining_ring() {
    let ns = Namespace::concurrent("drainend");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("slow")).unwrap();
    assert_eq!(ring.stop_if_draining(), None);
    assert_eq!(ring.state(), Some(RingState::Running));
    for i in 0..4u8 {
        p.publish(&[i]).unwrap();
    }
    let drainer = {
        let ring = ring.clone();
        thread::spawn(move || ring.drain(Duration::from_secs(20)))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while ring.state() != Some(RingState::Draining) {
        assert!(Instant::now() < deadline, "the drain never began");
        thread::yield_now();
    }
    assert_eq!(ring.stop_if_draining(), Some(4));
    assert_eq!(ring.state(), Some(RingState::Stopped));
    assert_eq!(
        ring.stop_if_draining(),
        None,
        "a stopped ring is left as it is"
    );
    let mut got = Vec::new();
    c.run(|ev| got.push(ev.bytes()[0]), || false).unwrap();
    assert_eq!(got, [0, 1, 2, 3]);
    assert_eq!(drainer.join().unwrap(), Ok(4));
    assert_eq!(ring.state(), Some(RingState::Stopped));
    ring.start().unwrap();
    assert_eq!(
        ring.stop_if_draining(),
        None,
        "a started ring is left as it is"
    );
    assert_eq!(ring.state(), Some(RingState::Running));
    assert_eq!(p.publish(&[4]), Ok(4));
}

/// Three producer threads publish their own counters (thread id, 0, 1, 2, ...) as fast as
/// they can while the ring is stopped under them; the consumer checks every event by
/// identity (per thread: the next counter, no gap, no repeat) and, once drained, that each
/// thread's count of accepted publishes is exactly what it received from that thread. Half
/// the rounds run on a ring of 8 slots, where producers are often at the wrap gate when the
/// stop comes. Every wait has a deadline: a hole left by the stop fails the test instead of
/// hanging it.
#[test]
fn stop_racing_publishers_loses_nothing_accepted() {
    const THREADS: u64 = 3;
    let ns = Namespace::concurrent("race");
    let rings = [
        Ring::create(ns.name(), "r", &cfg(64)).unwrap(),
        Ring::create(ns.name(), "small", &cfg(8)).unwrap(),
    ];
    let mut consumers: Vec<_> = rings
        .iter()
        .map(|r| r.consumer(ConsumerOptions::durable("all")).unwrap())
        .collect();
    // Per ring, per thread: the next counter the consumer expects.
    let mut next = [[0u64; THREADS as usize]; 2];
    // Per ring, per thread: the counter each thread publishes next.
    let mut sent = [[0u64; THREADS as usize]; 2];
    for round in 0..20 {
        let k = round % 2;
        let (ring, c) = (&rings[k], &mut consumers[k]);
        let producers: Vec<_> = (0..THREADS)
            .map(|id| {
                let ring = ring.clone();
                let first = sent[k][id as usize];
                thread::spawn(move || {
                    let mut p = ring.producer().unwrap();
                    let mut counter = first;
                    loop {
                        match p.publish(&((id << 32) | counter).to_le_bytes()) {
                            Ok(_) => counter += 1,
                            Err(PublishError::Closed) => return counter,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        let expect = &mut next[k];
        let mut check = |bytes: &[u8]| {
            let v = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            let (id, counter) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert!(id < THREADS as usize, "round {round}: unknown thread {id}");
            assert_eq!(
                counter, expect[id],
                "round {round}: thread {id}: lost or repeated event"
            );
            expect[id] += 1;
        };
        // Consume while they publish, then stop in the middle of it.
        let mut received = 0u64;
        while received < 200 {
            assert!(
                Instant::now() < deadline,
                "round {round}: publishing stalled"
            );
            received += c.poll_once(|ev| check(ev.bytes())).unwrap() as u64;
        }
        ring.stop().unwrap();
        // Drain first: a producer that claimed before the stop may be waiting at the wrap
        // gate for this very consumer, so joining it first would deadlock.
        let exit = c
            .run(|ev| check(ev.bytes()), || Instant::now() > deadline)
            .unwrap();
        assert_eq!(
            exit,
            RunExit::Closed,
            "round {round}: not drained to the stop sequence by the deadline (a hole?)"
        );
        for (id, h) in producers.into_iter().enumerate() {
            let accepted_up_to = h.join().unwrap();
            assert_eq!(
                next[k][id], accepted_up_to,
                "round {round}: thread {id} accepted up to its counter {accepted_up_to}"
            );
            sent[k][id] = accepted_up_to;
        }
        ring.start().unwrap();
    }
}

fn cfg_mode(capacity: u64, mode: ProducerMode) -> RingConfig {
    RingConfig {
        producer_mode: mode,
        ..cfg(capacity)
    }
}

const MODES: [ProducerMode; 2] = [ProducerMode::Multi, ProducerMode::Single];

/// Stop, attach a consumer, start: the ordinary maintenance sequence. Refused publishes
/// while stopped must not move where the new consumer starts.
#[test]
fn a_consumer_attached_while_stopped_gets_the_first_event_of_the_next_run() {
    for mode in MODES {
        let ns = Namespace::concurrent("attachstopped");
        let ring = Ring::create(ns.name(), "r", &cfg_mode(16, mode)).unwrap();
        let mut p = ring.producer().unwrap();
        p.publish(b"a").unwrap();
        assert_eq!(ring.stop(), Ok(1));
        for _ in 0..3 {
            assert_eq!(p.publish(b"x"), Err(PublishError::Closed), "{mode:?}");
        }
        assert_eq!(
            ring.head(),
            1,
            "{mode:?}: refused claims do not move the line"
        );
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        assert_eq!(c.next_sequence(), 1, "{mode:?}");
        ring.start().unwrap();
        assert_eq!(p.publish(b"b"), Ok(1), "{mode:?}");
        let mut got = vec![];
        c.poll_once(|ev| got.push(ev.sequence())).unwrap();
        assert_eq!(got, vec![1], "{mode:?}");
        assert_eq!(c.stats().dropped_behind, 0, "{mode:?}");
    }
}

/// A producer that claimed before a stop scans the gate while the line is closed and
/// refused claims have bumped the claim counter. Its scan must see the stop sequence, not
/// the bumped count, or the shared gate rises past it and a required consumer that attaches
/// at the stop sequence is lapped after the start.
#[test]
fn a_gate_scan_while_stopped_never_lets_a_required_consumer_be_lapped() {
    let ns = Namespace::concurrent("scanstopped");
    let ring = Ring::create(ns.name(), "r", &cfg(4)).unwrap();
    let first = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut waiting = ring.producer().unwrap();
    for i in 0..4u8 {
        waiting.publish(&[i]).unwrap();
    }
    let blocked = thread::spawn(move || waiting.publish(&[4]));
    // Its claim of sequence 4 is in flight once it waits at the wrap gate.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !ring.info().producers.iter().any(|p| p.in_flight == Some(4)) {
        assert!(
            std::time::Instant::now() < deadline,
            "publisher never claimed"
        );
        thread::yield_now();
    }
    assert_eq!(ring.stop(), Ok(5));
    let mut refused = ring.producer().unwrap();
    for _ in 0..10 {
        assert_eq!(refused.publish(b"x"), Err(PublishError::Closed));
    }
    // The gating consumer leaves: the waiting publisher's scan finds nobody but the line.
    drop(first);
    assert_eq!(blocked.join().unwrap(), Ok(4));
    ring.start().unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    assert_eq!(c.next_sequence(), 5);
    let mut accepted = Vec::new();
    for i in 0..10u8 {
        match refused.try_publish(&[i]) {
            Ok(seq) => accepted.push(seq),
            Err(TryPublishError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(accepted, vec![5, 6, 7, 8], "the gate stops at the consumer");
    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(got, accepted);
    assert_eq!(c.stats().dropped_behind, 0);
}

/// Two starts at once: exactly one reopens the line, and it reopens at the stop sequence
/// (never an older one): sequences are never handed out twice.
#[test]
fn concurrent_starts_reopen_once_at_the_stop_sequence() {
    for mode in MODES {
        let ns = Namespace::concurrent("twostarts");
        let ring = Ring::create(ns.name(), "r", &cfg_mode(64, mode)).unwrap();
        let mut p = ring.producer().unwrap();
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut expect = 0u64;
        for round in 0..200u64 {
            let seq = p.publish(&round.to_le_bytes()).unwrap();
            assert_eq!(seq, expect, "{mode:?} round {round}: unique, no rewind");
            expect += 1;
            assert_eq!(ring.stop(), Ok(expect));
            let _ = p.publish(b"refused");
            let starters: Vec<_> = (0..2)
                .map(|_| {
                    let ring = ring.clone();
                    thread::spawn(move || ring.start())
                })
                .collect();
            let results: Vec<_> = starters.into_iter().map(|h| h.join().unwrap()).collect();
            let ok = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(ok, 1, "{mode:?} round {round}: {results:?}");
            assert!(results.contains(&Err(LifecycleError::AlreadyRunning)));
            assert_eq!(ring.state(), Some(RingState::Running));
            assert_eq!(ring.head(), expect, "{mode:?} round {round}");
            while c.poll_once(|_| {}).unwrap() > 0 {}
        }
        assert_eq!(c.next_sequence(), expect);
        assert_eq!(ring.run_number(), 201);
    }
}

/// A start racing a remove never brings a removed ring back.
#[test]
fn a_start_racing_a_remove_never_undoes_it() {
    for round in 0..50 {
        let ns = Namespace::concurrent("startremove");
        let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
        let mut p = ring.producer().unwrap();
        ring.stop().unwrap();
        let starter = {
            let ring = ring.clone();
            thread::spawn(move || ring.start())
        };
        Ring::remove(ns.name(), "r").unwrap();
        let started = starter.join().unwrap();
        assert_eq!(
            ring.state(),
            Some(RingState::Deleted),
            "round {round}: {started:?}"
        );
        assert_eq!(p.publish(b"x"), Err(PublishError::Deleted), "round {round}");
        assert_eq!(ring.start(), Err(LifecycleError::Deleted));
    }
}

/// Single producer: publishers racing stops and starts. Every accepted publish is delivered
/// exactly once, with its own payload; refused ones never are; sequences are contiguous.
#[test]
fn single_producer_publishes_racing_stops_are_refused_or_delivered() {
    let ns = Namespace::concurrent("sprace");
    let ring = Ring::create(ns.name(), "r", &cfg_mode(64, ProducerMode::Single)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("all")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (ring, stop) = (ring.clone(), stop.clone());
        thread::spawn(move || {
            let mut p = ring.producer().unwrap();
            let mut accepted = Vec::new();
            let mut id = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match p.try_publish(&id.to_le_bytes()) {
                    Ok(seq) => accepted.push((seq, id)),
                    Err(TryPublishError::Closed | TryPublishError::Full) => {}
                    Err(e) => panic!("{e}"),
                }
                id += 1;
            }
            accepted
        })
    };
    let mut got = Vec::new();
    for _ in 0..300 {
        for _ in 0..20 {
            c.poll_once(|ev| {
                got.push((
                    ev.sequence(),
                    u64::from_le_bytes(ev.bytes().try_into().unwrap()),
                ))
            })
            .unwrap();
        }
        ring.stop().unwrap();
        c.poll_once(|ev| {
            got.push((
                ev.sequence(),
                u64::from_le_bytes(ev.bytes().try_into().unwrap()),
            ))
        })
        .unwrap();
        ring.start().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let accepted = producer.join().unwrap();
    ring.stop().unwrap();
    c.run(
        |ev| {
            got.push((
                ev.sequence(),
                u64::from_le_bytes(ev.bytes().try_into().unwrap()),
            ))
        },
        || false,
    )
    .unwrap();
    assert_eq!(
        got, accepted,
        "delivered exactly what was accepted, in order"
    );
    for (i, (seq, _)) in got.iter().enumerate() {
        assert_eq!(*seq, i as u64, "contiguous sequences");
    }
}

/// The lifecycle word of `state` owned by `owner` (a generation no ring of these tests
/// reached).
fn life_word(state: RingState, owner: u32) -> u64 {
    shmring_layout::lifecycle::pack(9, state as u32, owner)
}

/// A ring of `mode` in `ns` with an anonymous consumer and a producer: events 0 to 4
/// published, then stopped at 5.
fn stopped_at_five(
    ns: &Namespace,
    mode: ProducerMode,
) -> (Ring, shmring::Consumer, shmring::Producer) {
    let ring = Ring::create(ns.name(), "r", &cfg_mode(16, mode)).unwrap();
    let c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..5u8 {
        p.publish(&[i]).unwrap();
    }
    assert_eq!(ring.stop(), Ok(5));
    (ring, c, p)
}

/// A multi-producer start reopens the claim counter before it publishes Running: from then
/// on claims are taken, so the line is open, whatever the word still says. A consumer
/// that has read everything published then is not "closed and drained": its run goes on
/// (here until its stop predicate ends it), where it used to return `RunExit::Closed`
/// while producers published.
#[test]
fn a_start_that_reopened_the_counter_is_an_open_line_to_consumers() {
    let ns = Namespace::concurrent("half_started");
    let (ring, mut c, mut p) = stopped_at_five(&ns, ProducerMode::Multi);
    // A starter that reopened the counter at the stop (5) and has not published Running
    // yet: preempted, or killed there.
    let (dead, _) = shmring_testkit::fault::dead_process();
    let raw = RawSegment::open(&ring);
    raw.set_claim_word(5);
    raw.set_lifecycle_word(life_word(RingState::Starting, dead));
    assert_eq!(p.publish(&[5]), Ok(5), "the counter takes claims");
    let mut got = Vec::new();
    let mut idle = 0;
    let exit = c
        .run(
            |ev| got.push(ev.sequence()),
            || {
                idle += 1;
                idle > 3
            },
        )
        .unwrap();
    assert_eq!(got, (0..=5).collect::<Vec<_>>());
    assert_eq!(
        exit,
        RunExit::Stopped,
        "an open line is not closed and drained"
    );
}

/// A start whose owner was killed before it published Running, with no broker to finish
/// it: the single producer's next publish finds the line not running and the owner dead,
/// and finishes the start itself (as its claim's decision does when it meets such a
/// word), so that publishing does not stay refused until someone calls `start`. That
/// publish is refused; the ones after it run on from the stop sequence.
#[test]
fn a_dead_starters_start_is_finished_by_the_single_producer() {
    let ns = Namespace::concurrent("dead_starter");
    let (ring, mut c, mut p) = stopped_at_five(&ns, ProducerMode::Single);
    let (dead, _) = shmring_testkit::fault::dead_process();
    RawSegment::open(&ring).set_lifecycle_word(life_word(RingState::Starting, dead));
    assert_eq!(p.publish(&[9]), Err(PublishError::Closed));
    assert_eq!(
        ring.state(),
        Some(RingState::Running),
        "the start was finished"
    );
    assert_eq!(p.publish(&[5]), Ok(5), "on from the stop sequence");
    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(got, (0..=5).collect::<Vec<_>>());
}

/// A remove while another live process is in the middle of a stop (here a process that
/// stays there: stopped, or its pid reused) waits for it with the ring under its name, and
/// gives up with nothing renamed: the name never goes free for a new ring while the old
/// one, with its clients and events, sits under a hidden name.
#[test]
fn a_remove_that_waits_for_a_live_stop_keeps_the_name_meanwhile() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let ns = Namespace::concurrent("remove_busy");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("600");
    let mut owner = ns.spawn("a live owner", sleep);
    RawSegment::open(&ring).set_lifecycle_word(life_word(RingState::Stopping, owner.pid()));

    let done = AtomicBool::new(false);
    let path = ring.path().to_owned();
    let vanished = thread::scope(|s| {
        // Looks at the name until the remove returns (a watch, not a synchronisation).
        let watch = s.spawn(|| {
            let mut vanished = false;
            while !done.load(Ordering::SeqCst) {
                vanished |= path.symlink_metadata().is_err();
                thread::sleep(Duration::from_millis(2));
            }
            vanished
        });
        let removed = Ring::remove(ns.name(), "r");
        done.store(true, Ordering::SeqCst);
        assert!(
            matches!(
                removed,
                Err(shmring::OpenError::Lifecycle(_, LifecycleError::Busy { pid })) if pid == owner.pid()
            ),
            "{removed:?}"
        );
        watch.join().unwrap()
    });
    assert!(!vanished, "the name went while the remove waited");
    assert_eq!(ring.state(), Some(RingState::Stopping), "nothing changed");
    owner.kill();
}

/// Write what a process killed inside a stop or start leaves behind, at each step of its
/// transition, and check that the next lifecycle call finishes it: the line ends at the
/// recorded stop sequence, no sequence is handed out twice or skipped.
#[test]
fn a_lifecycle_change_whose_owner_died_is_finished_at_the_recorded_sequence() {
    use shmring_layout::{lifecycle, CLAIM_CLOSED};
    let (dead, _) = shmring_testkit::fault::dead_process();
    for step in [
        "stopping, before closing",
        "stopping, closed and recorded",
        "starting, closed",
        "starting, reopened",
    ] {
        let ns = Namespace::concurrent("deadowner");
        let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        for i in 0..5u8 {
            p.publish(&[i]).unwrap();
        }
        let raw = RawSegment::open(&ring);
        match step {
            "stopping, before closing" => {
                raw.set_stop_seq(3); // a stale record: must not win
                raw.set_lifecycle_word(lifecycle::pack(7, RingState::Stopping as u32, dead));
                assert_eq!(p.publish(&[5]), Ok(5), "{step}: the line is still open");
            }
            "stopping, closed and recorded" => {
                raw.set_stop_seq(5);
                // Closed at 5; two claims refused since bumped the low bits.
                raw.set_claim_word(7 | CLAIM_CLOSED);
                raw.set_lifecycle_word(lifecycle::pack(7, RingState::Stopping as u32, dead));
                assert_eq!(p.publish(&[9]), Err(PublishError::Closed), "{step}");
                assert_eq!(ring.head(), 5, "{step}: a closed line is at its record");
            }
            "starting, closed" => {
                raw.set_stop_seq(5);
                raw.set_claim_word(6 | CLAIM_CLOSED);
                raw.set_lifecycle_word(lifecycle::pack(7, RingState::Starting as u32, dead));
            }
            _ => {
                raw.set_stop_seq(5);
                raw.set_claim_word(5);
                raw.set_lifecycle_word(lifecycle::pack(7, RingState::Starting as u32, dead));
            }
        }
        let expected_stop = if step == "stopping, before closing" {
            6
        } else {
            5
        };
        if step.starts_with("stopping") {
            assert_eq!(ring.stop(), Ok(expected_stop), "{step}");
            assert_eq!(ring.state(), Some(RingState::Stopped), "{step}");
            assert!(ring.start().is_ok(), "{step}");
        } else {
            assert_eq!(
                ring.start(),
                Err(LifecycleError::AlreadyRunning),
                "{step}: finished"
            );
        }
        assert_eq!(ring.state(), Some(RingState::Running), "{step}");
        assert_eq!(
            p.publish(b"after"),
            Ok(expected_stop),
            "{step}: no rewind, no gap"
        );
        let mut got = Vec::new();
        c.poll_once(|ev| got.push(ev.sequence())).unwrap();
        assert_eq!(got, (0..=expected_stop).collect::<Vec<_>>(), "{step}");
    }
}

/// A consumer parked on a single-producer ring waits for events or for the line to close.
/// A stopper died half-way through its stop; the producer's next publish finds its word,
/// finishes the stop (refused), and wakes the consumers parked on the ring: the consumer's
/// run returns `Closed` on that wake, not at its 50 ms net. One try per ring of three (a
/// net that ends just as the stop is finished sees it without a wake).
#[test]
fn a_stop_finished_by_a_refused_claim_wakes_the_consumers_parked_on_the_ring() {
    use shmring::WaitStrategy;
    use shmring_testkit::parked::in_one_try;
    use shmring_testkit::poll::eventually;
    use shmring_testkit::ParkedConsumer;
    let ns = Namespace::concurrent("dead_stopper_wake");
    let (dead, _) = shmring_testkit::fault::dead_process();
    let attempt = |name: &str| {
        let ring = Ring::create(ns.name(), name, &cfg_mode(16, ProducerMode::Single)).unwrap();
        let opts = ConsumerOptions::anonymous().wait(WaitStrategy::Blocking);
        let c = ring.consumer(opts).unwrap();
        let index = c.index();
        let mut p = ring.producer().unwrap();
        for i in 0..3u8 {
            p.publish(&[i]).unwrap();
        }
        let c = ParkedConsumer::spawn(c);
        c.wait_parked_at(&ring, 3);
        RawSegment::open(&ring).set_lifecycle_word(life_word(RingState::Stopping, dead));
        assert_eq!(p.publish(&[9]), Err(PublishError::Closed));
        assert_eq!(
            ring.state(),
            Some(RingState::Stopped),
            "the stop was finished"
        );
        // Its run ends, and the thread lets the anonymous entry go, before the stop below.
        eventually("the consumer's run to end", || {
            !ring.info().consumers.iter().any(|e| e.index == index)
        });
        let (exit, seen, stats) = c.finish(&ring);
        assert_eq!(exit, RunExit::Closed);
        assert_eq!(seen.len(), 3);
        stats.wakeups > 0
    };
    in_one_try(
        &["r0", "r1", "r2"],
        "the parked consumer was never woken by the finished stop, only its net",
        attempt,
        |&w| w,
    );
}

/// A single-producer ring of 16 fixed-size 8-byte events.
fn fixed_cfg() -> RingConfig {
    RingConfig {
        event_size: Some(8),
        producer_mode: ProducerMode::Single,
        max_producers: 1,
        ..cfg(16)
    }
}

/// `ring` held in a stop by a live process that does not finish it (a `sleep` named as the
/// owner of a Stopping word): the caller kills it to end the stop's wait.
fn held_in_a_stop(ns: &Namespace, ring: &Ring) -> shmring_testkit::Child {
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("600");
    let owner = ns.spawn("a live stopper", sleep);
    RawSegment::open(ring).set_lifecycle_word(life_word(RingState::Stopping, owner.pid()));
    owner
}

/// A ring of fixed-size events held in a stop by a live process that does not finish it (a
/// stopped process, or a reused pid): consumers go on delivering what the stop cannot
/// refuse (everything below its last event), status and the head answer at once, a publish
/// is refused, and an attach gives up as `Busy` after the lifecycle wait instead of hanging.
/// Once the stopper is dead, the next attach finishes its stop and starts at the stop
/// sequence, and the run after it goes on there.
#[test]
fn a_fixed_ring_held_in_a_stop_by_a_live_process_answers_and_an_attach_gives_up() {
    let ns = Namespace::concurrent("fixed_held_stop");
    let ring = Ring::create(ns.name(), "r", &fixed_cfg()).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..5u64 {
        assert_eq!(p.publish(&i.to_ne_bytes()), Ok(i));
    }
    let mut owner = held_in_a_stop(&ns, &ring);

    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(
        got,
        [0, 1, 2, 3],
        "below the event the stop may still refuse"
    );
    let info = ring.info();
    assert!(info.head <= 5, "{info:?}");
    assert!(ring.head() <= 5);
    assert_eq!(p.publish(&9u64.to_ne_bytes()), Err(PublishError::Closed));
    let began = Instant::now();
    match ring.consumer(ConsumerOptions::anonymous()) {
        Err(shmring::AttachError::Busy) => {}
        other => panic!("attach during a held stop: {:?}", other.map(|_| ())),
    }
    assert!(began.elapsed() >= shmring::LIFECYCLE_WAIT, "gave up early");

    owner.kill();
    let mut late = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    assert_eq!(
        ring.state(),
        Some(RingState::Stopped),
        "the dead stop finished"
    );
    assert_eq!(ring.head(), 5);
    assert_eq!(late.next_sequence(), 5);
    ring.start().unwrap();
    assert_eq!(p.publish(&5u64.to_ne_bytes()), Ok(5));
    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(got, [4, 5]);
    got.clear();
    late.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(got, [5]);
}

/// A required consumer the broker released, on a ring of fixed-size events held in a stop by
/// a live process: its polls do not wait for the stop and do not spin on events they cannot
/// take (it stays released, moved up to the bound below the head, and finds nothing
/// pending), `read_ahead` reads nothing in place while it is released; once the stopper is
/// dead, its next poll finishes the stop and gates it again at the stop sequence, every
/// event skipped counted in `dropped_behind`.
#[test]
fn a_released_consumer_of_a_fixed_ring_held_in_a_stop_gates_again_after_it() {
    let ns = Namespace::concurrent("fixed_released_stop");
    let ring = Ring::create(ns.name(), "r", &fixed_cfg()).unwrap();
    let mut c = ring
        .consumer(
            ConsumerOptions::durable("d").wait(shmring::WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_millis(20),
            }),
        )
        .unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..3u64 {
        assert_eq!(p.publish(&i.to_ne_bytes()), Ok(i));
    }
    let mut got = Vec::new();
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(got, [0, 1, 2]);
    let info = ring.info().consumers[0].clone();
    assert!(ring.release_consumer(info.index, info.word));
    for i in 3..5u64 {
        assert_eq!(p.publish(&i.to_ne_bytes()), Ok(i));
    }
    let mut owner = held_in_a_stop(&ns, &ring);

    got.clear();
    let began = Instant::now();
    assert_eq!(c.poll_once(|ev| got.push(ev.sequence())), Ok(0));
    assert_eq!(got, [0u64; 0]);
    assert_eq!(c.next_sequence(), 4, "up to the bound below the head");
    assert_eq!(c.stats().dropped_behind, 1);
    assert_eq!(ring.info().consumers[0].state, "RELEASED");
    // Nothing pending for it: a wait returns at its timeout, it does not spin on a look
    // that says there is something to take.
    assert_eq!(c.wait(), Ok(shmring::WaitOutcome::TimedOut));
    assert_eq!(
        c.read_ahead(4, 8, |_| {}),
        Ok(4),
        "nothing read in place while released"
    );
    assert!(
        began.elapsed() < shmring::LIFECYCLE_WAIT,
        "a poll waited for the stop"
    );

    owner.kill();
    got.clear();
    assert_eq!(c.poll_once(|ev| got.push(ev.sequence())), Ok(0));
    assert_eq!(
        ring.state(),
        Some(RingState::Stopped),
        "the dead stop finished"
    );
    assert_eq!(c.next_sequence(), 5, "gated again at the stop sequence");
    assert_eq!(c.stats().dropped_behind, 2);
    assert_eq!(ring.info().consumers[0].state, "ACTIVE");
    ring.start().unwrap();
    assert_eq!(p.publish(&5u64.to_ne_bytes()), Ok(5));
    c.poll_once(|ev| got.push(ev.sequence())).unwrap();
    assert_eq!(got, [5]);
}

/// Events `read_ahead` handed out are committed by `commit_to` while a stop is in progress
/// on a ring of fixed-size events, the last one included (a look at the ring then counts
/// it undecided, since the stop may refuse a last claim: not one already read as published).
#[test]
fn a_commit_of_events_read_ahead_goes_through_while_a_stop_is_in_progress() {
    let ns = Namespace::concurrent("fixed_commit_stop");
    let ring = Ring::create(ns.name(), "r", &fixed_cfg()).unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..5u64 {
        assert_eq!(p.publish(&i.to_ne_bytes()), Ok(i));
    }
    let mut read = Vec::new();
    assert_eq!(c.read_ahead(0, 8, |ev| read.push(ev.sequence())), Ok(5));
    assert_eq!(read, [0, 1, 2, 3, 4]);
    let mut owner = held_in_a_stop(&ns, &ring);
    assert_eq!(c.commit_to(5), Ok(()));
    assert_eq!(c.next_sequence(), 5);
    owner.kill();
}

/// `NoBarrier` comes from a single-producer ring and from a multi-producer ring whose lone
/// producer did not end its claims in time (`tests/tests/no_membarrier.rs`, where a broker's
/// sweep without membarrier gets it too): its message names both, not only the first.
#[test]
fn the_no_barrier_error_names_both_rings_it_comes_from() {
    let msg = LifecycleError::NoBarrier.to_string();
    assert!(
        msg.contains("single-producer ring")
            && msg.contains("claiming alone on a multi-producer ring"),
        "{msg}"
    );
}

/// A consumer's `wait` on a deleted ring hands over first what a poll still delivers, as
/// `run` does, and says `Deleted` once nothing is left.
#[test]
fn wait_on_a_deleted_ring_is_ready_for_what_is_left_then_deleted() {
    let ns = Namespace::concurrent("wait_deleted");
    let ring = Ring::create(ns.name(), "r", &cfg(16)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    for i in 0..3u8 {
        p.publish(&[i]).unwrap();
    }
    Ring::remove(ns.name(), "r").unwrap();
    assert_eq!(c.wait(), Ok(WaitOutcome::Ready));
    let mut got = Vec::new();
    while got.len() < 3 {
        match c.poll_once(|ev| got.push(ev.bytes()[0])) {
            Ok(_) => {}
            Err(e) => panic!("{e} after {got:?}"),
        }
    }
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(c.wait(), Err(PollError::Deleted));
}
