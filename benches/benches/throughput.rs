//! 1P1C stream throughput, in one process with two threads: events per second per-event
//! (`publish`) and batched (`publish_batch`), and the ratio batched / per-event.
//!
//! ```text
//! cargo bench -p shmring-benches --bench throughput
//! cargo bench -p shmring-benches --bench throughput -- --events 50000000 --runs 9
//! ```
//!
//! Each run attaches a fresh consumer on a second thread, starts the clock, publishes
//! `--events` 8-byte events from this thread, and stops the clock when the consumer has
//! been handed the last one (delivered, not just published). The median of `--runs` runs is
//! reported with the slowest and fastest. Not a criterion bench: a stream is one long
//! measurement, not many small ones. Unknown arguments (criterion's) are ignored.

use std::sync::Barrier;
use std::time::Instant;

use shmring::{ConsumerOptions, ProducerMode, Ring};
use shmring_benches::{drain_exactly, BenchRing};

/// Slots of the ring (64-byte slots: 1 MiB).
const CAPACITY: u64 = 1 << 14;
const BATCH: usize = 100;

fn main() {
    let mut events = 20_000_000u64;
    let mut runs = 5usize;
    let args: Vec<String> = std::env::args().collect();
    for w in args.windows(2) {
        match w[0].as_str() {
            "--events" => events = w[1].parse().unwrap_or(events),
            "--runs" => runs = w[1].parse().unwrap_or(runs).max(1),
            _ => {}
        }
    }
    println!(
        "1P1C throughput, in-process (2 threads), 8-byte events, {CAPACITY} slots, \
         {events} events x {runs} runs"
    );
    let mut medians = Vec::new();
    for (label, mode, batch) in [
        (
            "per-event publish, single-producer ring",
            ProducerMode::Single,
            1,
        ),
        (
            "per-event publish, multi-producer ring ",
            ProducerMode::Multi,
            1,
        ),
        (
            "publish_batch(100), single-producer ring",
            ProducerMode::Single,
            BATCH,
        ),
        (
            "publish_batch(100), multi-producer ring ",
            ProducerMode::Multi,
            BATCH,
        ),
    ] {
        let r = BenchRing::new(&format!("stream-{}", medians.len()), CAPACITY, mode);
        let mut rates: Vec<f64> = (0..runs).map(|_| stream(&r.ring, events, batch)).collect();
        rates.sort_by(f64::total_cmp);
        let median = rates[rates.len() / 2];
        println!(
            "{label}: {:8.1} M events/s median (min {:.1}, max {:.1})",
            median / 1e6,
            rates[0] / 1e6,
            rates[rates.len() - 1] / 1e6,
        );
        medians.push(median);
    }
    println!(
        "ratio batched / per-event: {:.1}x (single-producer), {:.1}x (multi-producer)",
        medians[2] / medians[0],
        medians[3] / medians[1],
    );
}

/// One run: returns events per second, from the first publish to the last delivery.
fn stream(ring: &Ring, events: u64, batch: usize) -> f64 {
    let mut consumer = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("attach consumer");
    let mut producer = ring.producer().expect("attach producer");
    let payload: Vec<[u8; 8]> = (0..batch as u64).map(u64::to_le_bytes).collect();
    let go = Barrier::new(2);
    let (start, end) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            go.wait();
            drain_exactly(&mut consumer, events)
        });
        go.wait();
        let start = Instant::now();
        let mut left = events;
        while left > 0 {
            if batch == 1 || left < batch as u64 {
                producer.publish(&left.to_le_bytes()).expect("publish");
                left -= 1;
            } else {
                producer.publish_batch(&payload).expect("publish_batch");
                left -= batch as u64;
            }
        }
        (start, reader.join().expect("consumer thread"))
    });
    events as f64 / (end - start).as_secs_f64()
}
