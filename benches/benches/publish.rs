//! Criterion micro-benchmarks of publish and poll, in one process over one segment.
//!
//! ```text
//! cargo bench -p shmring-benches --bench publish -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Every bench reports nanoseconds per event:
//!
//! - `overhead/*`: the measuring loop itself (an empty iteration; a `black_box` copy of the
//!   8-byte event). Subtract it in your head from the numbers below.
//! - `publish_8B/*`: one `publish` of an 8-byte event while another thread drains the ring
//!   with a busy-polling required consumer. In the steady state the producer waits at the
//!   wrap gate whenever it gets a ring ahead, so this is the per-event cost of the
//!   producer/consumer pair, cache-line transfers included. `no_consumer` publishes into a
//!   ring nobody gates: the producer's own cost. `no_consumer_without_wake_check` is the
//!   same minus the parked-consumer check (`bench-internals`): the tax parking puts on a
//!   publish when nobody is parked.
//! - `publish_batch_8B/*`: `publish_batch` of 10 or 100 events, time divided by the batch
//!   size (the reported time is per event), with the same draining thread.
//! - `poll_once_8B/*`: the consumer's cost per event, on the thread that published them
//!   (no cross-core traffic): `batch_512` delivers 512 events per call, `batch_1` one.
//!
//! The drained benches use one producer thread and one consumer thread: on a 2-vCPU
//! machine that is the limit, and a third spinning thread would measure the scheduler.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use shmring::{ConsumerOptions, ProducerMode};
use shmring_benches::{drain_exactly, BenchRing, Drainer};

/// Slots of the drained rings (64-byte slots: 1 MiB of slots).
const CAPACITY: u64 = 1 << 14;

fn overhead(c: &mut Criterion) {
    let mut g = c.benchmark_group("overhead");
    g.bench_function("empty_loop", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for i in 0..iters {
                black_box(i);
            }
            start.elapsed()
        })
    });
    g.bench_function("black_box_copy_8B", |b| {
        let src = 42u64.to_le_bytes();
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let copy: [u8; 8] = *black_box(&src);
                black_box(copy);
            }
            start.elapsed()
        })
    });
    g.finish();
}

fn publish(c: &mut Criterion) {
    let mut g = c.benchmark_group("publish_8B");
    for (label, mode) in [
        ("single_producer", ProducerMode::Single),
        ("multi_producer", ProducerMode::Multi),
    ] {
        let r = BenchRing::new(&format!("publish-{label}"), CAPACITY, mode);
        let drainer = Drainer::start(&r.ring);
        let mut producer = r.ring.producer().expect("attach producer");
        g.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for i in 0..iters {
                    producer
                        .publish(black_box(&i.to_le_bytes()))
                        .expect("publish");
                }
                start.elapsed()
            })
        });
        drop(producer);
        drop(drainer);
    }
    {
        let r = BenchRing::new("publish-none", CAPACITY, ProducerMode::Single);
        let mut producer = r.ring.producer().expect("attach producer");
        g.bench_function("no_consumer", |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for i in 0..iters {
                    producer
                        .publish(black_box(&i.to_le_bytes()))
                        .expect("publish");
                }
                start.elapsed()
            })
        });
        // The same publish minus the parked-consumer check (one load of the waiter count):
        // the difference to `no_consumer` is what parking costs a producer when nobody parks.
        g.bench_function("no_consumer_without_wake_check", |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for i in 0..iters {
                    producer
                        .publish_without_wake_check(black_box(&i.to_le_bytes()))
                        .expect("publish");
                }
                start.elapsed()
            })
        });
    }
    g.finish();
}

fn publish_batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("publish_batch_8B");
    for (label, mode) in [
        ("single_producer", ProducerMode::Single),
        ("multi_producer", ProducerMode::Multi),
    ] {
        let r = BenchRing::new(&format!("batch-{label}"), CAPACITY, mode);
        let drainer = Drainer::start(&r.ring);
        let mut producer = r.ring.producer().expect("attach producer");
        for n in [10u32, 100] {
            let events: Vec<[u8; 8]> = (0..u64::from(n)).map(u64::to_le_bytes).collect();
            g.bench_function(format!("{label}/batch_{n}/per_event"), |b| {
                // One criterion iteration is one event: publish `iters` batches and divide
                // the time by the batch size.
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        producer
                            .publish_batch(black_box(&events))
                            .expect("publish_batch");
                    }
                    start.elapsed() / n
                })
            });
        }
        drop(producer);
        drop(drainer);
    }
    g.finish();
}

fn poll_once(c: &mut Criterion) {
    let mut g = c.benchmark_group("poll_once_8B");
    const CHUNK: u64 = 512;
    for (label, cap) in [("batch_512", CHUNK as usize), ("batch_1", 1)] {
        let r = BenchRing::new(&format!("poll-{label}"), 2 * CHUNK, ProducerMode::Single);
        let mut consumer = r
            .ring
            .consumer(ConsumerOptions::anonymous().batch_cap(cap))
            .expect("attach consumer");
        let mut producer = r.ring.producer().expect("attach producer");
        let events: Vec<[u8; 8]> = (0..CHUNK).map(u64::to_le_bytes).collect();
        g.bench_function(label, |b| {
            // One iteration is one event. Publishing is not timed: publish a chunk, then
            // time draining it.
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(CHUNK);
                    producer
                        .publish_batch(&events[..n as usize])
                        .expect("publish_batch");
                    let start = Instant::now();
                    let end = drain_exactly(&mut consumer, n);
                    timed += end - start;
                    left -= n;
                }
                timed
            })
        });
    }
    g.finish();
}

criterion_group!(benches, overhead, publish, publish_batch, poll_once);
criterion_main!(benches);
