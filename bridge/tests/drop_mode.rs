//! DROP mode: the exporter is an optional consumer and the link drops under congestion, so
//! events may be lost, but never silently: the importer counts every source sequence it did
//! not receive, and delivered + dropped = published. The exporter is stopped (SIGSTOP)
//! mid-stream until the producer has lapped it, so the loss is certain, then resumed.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rustix::process::Signal;
use shmring::{ConsumerOptions, Ring};
use shmring_bridge::Bridged;
use shmring_testkit::{eventually, Namespace};

use common::{check, exporter, importer, num, payload, stats_until};

const N: u64 = 20_000;
const CAPACITY: u64 = 256;

#[test]
fn delivered_plus_dropped_equals_published() {
    let ns_a = Namespace::new("bridge_drop_mode");
    let ns_b = ns_a.sibling("b");
    let (src, dst) = common::src_and_dst(&ns_a, CAPACITY, &ns_b, 4096);
    let key = format!("shmring/drop/{}", ns_a.name());
    let port = common::free_port();

    // The consumer on B: source sequences strictly increase (gaps allowed), payloads intact.
    let delivered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut consumer = dst
        .consumer(ConsumerOptions::anonymous())
        .expect("attach the consumer on B");
    let consumer_thread = {
        let (delivered, stop) = (delivered.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut last: Option<u64> = None;
            let mut bad: Option<String> = None;
            let _ = consumer.run(
                |ev| {
                    let got = Bridged::parse(ev.bytes()).map(|b| (b.header.seq, check(b.payload)));
                    match got {
                        Some((seq, Some(i))) if seq == i && last.is_none_or(|l| seq > l) => {
                            last = Some(seq);
                        }
                        other => {
                            bad.get_or_insert(format!("after {last:?}: {other:?}"));
                        }
                    }
                    delivered.fetch_add(1, Ordering::Relaxed);
                },
                || stop.load(Ordering::Relaxed),
            );
            bad
        })
    };

    let mut ex = exporter("exporter", &ns_a, "src", &key, port, &["--mode", "drop"]);
    let mut im = importer("importer", &ns_b, "dst", &key, port);
    let name = shmring_bridge::export::default_consumer_name(&key);
    common::await_attached(&mut ex, &src, &name);
    // The importer has heard the exporter (a heartbeat), so it counts from sequence 0.
    stats_until(&mut im, |v| num(v, "heartbeats") > 0);

    let published = Arc::new(AtomicU64::new(0));
    let producer_thread = {
        let src = Ring::open(ns_a.name(), "src").expect("open the source ring");
        let published = published.clone();
        std::thread::spawn(move || {
            let mut p = src.producer().expect("attach the producer on A");
            for i in 0..N {
                if p.publish(&payload(i)).is_err() {
                    break;
                }
                published.store(i + 1, Ordering::Relaxed);
            }
        })
    };

    // Freeze the exporter mid-stream until the producer has lapped it by far.
    eventually("the first quarter to be published", || {
        published.load(Ordering::Relaxed) >= N / 4
    });
    ex.signal(Signal::STOP);
    let frozen_at = published.load(Ordering::Relaxed);
    eventually("the producer to lap the stopped exporter", || {
        published.load(Ordering::Relaxed) >= (frozen_at + 4 * CAPACITY).min(N)
    });
    ex.signal(Signal::CONT);
    producer_thread.join().expect("producer thread");
    assert_eq!(published.load(Ordering::Relaxed), N);

    // Every sequence is accounted for at the importer: published into B or counted lost.
    let last = stats_until(&mut im, |v| num(v, "published") + num(v, "dropped") == N);
    let (imported, dropped) = (num(&last, "published"), num(&last, "dropped"));
    assert!(dropped > 0, "the stopped exporter was lapped: {last}");
    assert_eq!(num(&last, "duplicates"), 0, "{last}");
    eventually("B's consumer to see every imported event", || {
        delivered.load(Ordering::Relaxed) >= imported
    });
    // The exporter counted its own share of the loss (its consumer's dropped_behind).
    let exp = src
        .info()
        .consumers
        .into_iter()
        .find(|c| c.name == name)
        .expect("the exporter's consumer is in the source ring's table");
    assert!(!exp.required && exp.durable, "{exp:?}");
    assert!(exp.stats.dropped_behind > 0, "{exp:?}");
    assert!(exp.stats.dropped_behind <= dropped, "{exp:?} vs {last}");
    assert!(num(&last, "dropped_at_exporter") <= dropped, "{last}");

    stop.store(true, Ordering::Relaxed);
    let bad = consumer_thread.join().expect("consumer thread");
    assert_eq!(bad, None);
    assert_eq!(delivered.load(Ordering::Relaxed), imported);
    assert_eq!(dst.head(), imported);
    drop((ex, im));
}
