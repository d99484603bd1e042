//! Stop, drain and start, in one process. The multi-process races are in `shmring-tests`.

use std::thread;
use std::time::Duration;

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

#[test]
fn stop_racing_publishers_loses_nothing_accepted() {
    let ns = Ns::new("race");
    let ring = Ring::create(&ns.0, "r", &cfg(64)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("all")).unwrap();
    for round in 0..20 {
        let producers: Vec<_> = (0..3)
            .map(|_| {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut p = ring.producer().unwrap();
                    let mut accepted = 0u64;
                    loop {
                        match p.publish(&[1]) {
                            Ok(_) => accepted += 1,
                            Err(PublishError::Closed) => return accepted,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        let mut received = 0u64;
        // Consume while they publish, then stop in the middle of it.
        while received < 200 {
            received += c.poll_once(|_| {}).unwrap() as u64;
        }
        ring.stop().unwrap();
        // Drain first: a producer that claimed before the stop may be waiting at the wrap
        // gate for this very consumer, so joining it first would deadlock.
        c.run(|_| received += 1, || false).unwrap();
        let accepted: u64 = producers.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(received, accepted, "round {round}");
        ring.start().unwrap();
    }
}
