//! A producer's position across every publish form, refusals and lifecycle changes: random
//! sequences of operations on one producer, checked after each step against a model of what
//! the ring must do (the sequence each accepted publish gets, what a refusal spends, what
//! the consumer is handed, the counters, the room). On a fixed-size ring the common-case
//! publish keeps the position in the claim word rather than the handle; every other form,
//! and a refused common case, must take it up from there, which is what these sequences mix.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use shmring::{
    Consumer, ConsumerOptions, FenceMode, Producer, ProducerMode, PublishError, Ring, RingConfig,
};
use shmring_testkit::Namespace;

const CAPACITY: u64 = 16;

#[derive(Debug, Clone)]
enum Op {
    Publish,
    Publisher(u8),
    Batch(u8),
    TryPublish,
    Timeout,
    TryBatch(u8),
    ClaimCommit,
    ClaimDrop,
    ClaimBatchCommit(u8),
    ClaimBatchDrop(u8),
    Room,
    Stop,
    Start,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Publish),
        3 => (1u8..12).prop_map(Op::Publisher),
        2 => (1u8..=8).prop_map(Op::Batch),
        1 => Just(Op::TryPublish),
        1 => Just(Op::Timeout),
        1 => (1u8..=8).prop_map(Op::TryBatch),
        1 => Just(Op::ClaimCommit),
        1 => Just(Op::ClaimDrop),
        1 => (1u8..=8).prop_map(Op::ClaimBatchCommit),
        1 => (1u8..=8).prop_map(Op::ClaimBatchDrop),
        1 => Just(Op::Room),
        2 => Just(Op::Stop),
        2 => Just(Op::Start),
    ]
}

/// What the ring must have done so far.
#[derive(Default)]
struct Model {
    next: u64,
    running: bool,
    /// The run number (`Ring::start` returns the new one).
    run: u64,
    published: u64,
    refused: u64,
    tombstoned: u64,
    /// Values handed out, one per event, unique.
    value: u64,
    /// (sequence, value) the consumer has not been handed yet.
    due: Vec<(u64, u64)>,
}

impl Model {
    fn value(&mut self) -> u64 {
        self.value += 1;
        self.value
    }

    /// `n` events accepted at `first`.
    fn accept(&mut self, values: &[u64]) -> u64 {
        let first = self.next;
        for (i, v) in values.iter().enumerate() {
            self.due.push((first + i as u64, *v));
        }
        self.next += values.len() as u64;
        self.published += values.len() as u64;
        first
    }

    /// `n` sequences claimed and dropped: tombstones the consumer skips.
    fn tombstone(&mut self, n: u64) -> u64 {
        let first = self.next;
        self.next += n;
        self.tombstoned += n;
        first
    }
}

fn config(kind: &str) -> RingConfig {
    RingConfig {
        capacity: CAPACITY,
        slot_size: 64,
        producer_mode: if kind == "multi" {
            ProducerMode::Multi
        } else {
            ProducerMode::Single
        },
        event_size: (kind == "fixed").then_some(8),
        ..RingConfig::default()
    }
}

fn drain(c: &mut Consumer) -> Vec<(u64, u64)> {
    let mut seen = Vec::new();
    while c
        .poll_once(|ev| {
            let v = ev.read::<u64>().unwrap_or(u64::MAX);
            seen.push((ev.sequence(), v));
        })
        .expect("poll")
        > 0
    {}
    seen
}

/// Apply `op` to the producer and the model; the step's outcome is checked here, the
/// ring's state after it by the caller.
fn step(ring: &Ring, p: &mut Producer, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let closed = !m.running;
    match *op {
        Op::Publish | Op::TryPublish | Op::Timeout => {
            let v = m.value();
            let bytes = v.to_le_bytes();
            let got = match op {
                Op::Publish => p.publish(&bytes).map_err(|e| format!("{e:?}")),
                Op::TryPublish => p.try_publish(&bytes).map_err(|e| format!("{e:?}")),
                _ => p
                    .publish_timeout(&bytes, Duration::from_millis(50))
                    .map_err(|e| format!("{e:?}")),
            };
            if closed {
                prop_assert_eq!(got, Err("Closed".to_string()), "{:?}", op);
                m.refused += 1;
            } else {
                let seq = m.accept(&[v]);
                prop_assert_eq!(got, Ok(seq), "{:?}", op);
            }
        }
        Op::Publisher(k) => {
            let values: Vec<u64> = (0..k).map(|_| m.value()).collect();
            let got: Vec<Result<u64, PublishError>> =
                p.publisher(|w| values.iter().map(|v| w.publish(&v.to_le_bytes())).collect());
            for (v, got) in values.iter().zip(got) {
                if closed {
                    prop_assert_eq!(got, Err(PublishError::Closed));
                    m.refused += 1;
                } else {
                    let seq = m.accept(&[*v]);
                    prop_assert_eq!(got, Ok(seq));
                }
            }
        }
        Op::Batch(k) | Op::TryBatch(k) => {
            let values: Vec<u64> = (0..k).map(|_| m.value()).collect();
            let events: Vec<[u8; 8]> = values.iter().map(|v| v.to_le_bytes()).collect();
            let got = match op {
                Op::Batch(_) => p.publish_batch(&events).map_err(|e| format!("{e:?}")),
                _ => p.try_publish_batch(&events).map_err(|e| format!("{e:?}")),
            };
            if closed {
                prop_assert_eq!(got, Err("Closed".to_string()), "{:?}", op);
                m.refused += 1;
            } else {
                let seq = m.accept(&values);
                prop_assert_eq!(got, Ok(seq), "{:?}", op);
            }
        }
        Op::ClaimCommit | Op::ClaimDrop => match p.claim() {
            Ok(mut claim) => {
                prop_assert!(!closed, "a claim while stopped");
                if matches!(op, Op::ClaimCommit) {
                    let v = m.value();
                    claim.write_value(&v).expect("an 8-byte event");
                    let seq = m.accept(&[v]);
                    prop_assert_eq!(claim.commit(), seq);
                } else {
                    let seq = m.tombstone(1);
                    prop_assert_eq!(claim.sequence(), seq);
                }
            }
            Err(e) => {
                prop_assert!(closed, "claim refused while running: {:?}", e);
                prop_assert_eq!(e, PublishError::Closed);
                m.refused += 1;
            }
        },
        Op::ClaimBatchCommit(k) | Op::ClaimBatchDrop(k) => match p.claim_batch(k as usize) {
            Ok(mut batch) => {
                prop_assert!(!closed, "a claim batch while stopped");
                if matches!(op, Op::ClaimBatchCommit(_)) {
                    let values: Vec<u64> = (0..k).map(|_| m.value()).collect();
                    for (i, v) in values.iter().enumerate() {
                        batch.write_value(i, v).expect("an 8-byte event");
                    }
                    let seq = m.accept(&values);
                    prop_assert_eq!(batch.commit(), seq);
                } else {
                    let seq = m.tombstone(k as u64);
                    prop_assert_eq!(batch.first_sequence(), seq);
                }
            }
            Err(e) => {
                prop_assert!(closed, "claim batch refused while running: {:?}", e);
                prop_assert_eq!(e, PublishError::Closed);
                m.refused += 1;
            }
        },
        Op::Room => {
            // The consumer is drained after every step; three more events first, so that
            // the room depends on the producer's position: the ring less those three while
            // it runs, none of it once stopped.
            let room = if closed {
                0
            } else {
                for _ in 0..3 {
                    let v = m.value();
                    let seq = m.accept(&[v]);
                    prop_assert_eq!(p.publish(&v.to_le_bytes()), Ok(seq));
                }
                CAPACITY - 3
            };
            prop_assert_eq!(p.remaining_capacity(), room);
        }
        Op::Stop => {
            prop_assert_eq!(ring.stop(), Ok(m.next));
            m.running = false;
        }
        Op::Start => {
            if closed {
                m.run += 1;
                prop_assert_eq!(ring.start(), Ok(m.run));
                m.running = true;
            }
        }
    }
    Ok(())
}

fn run(kind: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let ns = Namespace::concurrent("position");
    let ring = Ring::create(ns.name(), "r", &config(kind)).expect("create the ring");
    let mut c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("attach a consumer");
    let mut p = ring.producer().expect("attach a producer");
    if kind == "fixed" {
        // The common case, which keeps the position in the claim word, needs membarrier:
        // without it these steps would never reach it.
        prop_assert_eq!(ring.fence_mode(), Some(FenceMode::Membarrier), "{}", kind);
    }
    let mut m = Model {
        running: true,
        run: ring.run_number(),
        ..Model::default()
    };
    for (i, op) in ops.iter().enumerate() {
        step(&ring, &mut p, &mut m, op)?;
        let due = std::mem::take(&mut m.due);
        prop_assert_eq!(drain(&mut c), due, "{}: step {} ({:?})", kind, i, op);
        let stats = p.stats();
        prop_assert_eq!(
            (stats.published, stats.refused, stats.tombstoned),
            (m.published, m.refused, m.tombstoned),
            "{}: counters after step {} ({:?})",
            kind,
            i,
            op
        );
        prop_assert_eq!(ring.head(), m.next, "{}: head after step {}", kind, i);
    }
    if kind == "fixed" && m.published + m.refused + m.tombstoned > 0 {
        // And the publishing process registered for it at its first publish.
        prop_assert!(
            shmring::membarrier_registered(),
            "membarrier not registered"
        );
    }
    // The handle's position survives it: a new producer continues after a detach.
    drop(p);
    if !m.running {
        prop_assert_eq!(ring.start(), Ok(m.run + 1));
    }
    let mut p = ring.producer().expect("attach again");
    prop_assert_eq!(
        p.publish_value(&0u64),
        Ok(m.next),
        "{}: after a detach",
        kind
    );
    drop((c, p));
    Ok(())
}

#[test]
fn every_publish_form_continues_the_position_through_stops_and_starts() {
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 96,
        ..ProptestConfig::default()
    });
    for kind in ["fixed", "single", "multi"] {
        let ops = proptest::collection::vec(op(), 1..48);
        let result = runner.run(&ops, |ops| run(kind, &ops));
        if let Err(e) = result {
            panic!("{kind}: {e}");
        }
    }
}
