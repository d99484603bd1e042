//! Stop, drain and start, in one process. The multi-process races are in `shmring-tests`.

use std::thread;
use std::time::{Duration, Instant};

use shmring::{
    ConsumerOptions, LifecycleError, PublishError, Ring, RingConfig, RingState, RunExit,
    TryPublishError,
};

mod common;
use common::Ns;

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
    let ns = Ns::new("stopstart");
    let ring = Ring::create(&ns.0, "r", &cfg(16)).unwrap();
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
    let ns = Ns::new("drain");
    let ring = Ring::create(&ns.0, "r", &cfg(16)).unwrap();
    let mut p = ring.producer().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("slow")).unwrap();
    for i in 0..6u8 {
        p.publish(&[i]).unwrap();
    }
    match ring.drain(Duration::from_millis(20)) {
        Err(LifecycleError::DrainTimeout { stop_seq, behind }) => {
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
    let ns = Ns::new("race");
    let rings = [
        Ring::create(&ns.0, "r", &cfg(64)).unwrap(),
        Ring::create(&ns.0, "small", &cfg(8)).unwrap(),
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
