//! Reliable mode across crashes: a producer in namespace A, a consumer in namespace B, an
//! exporter and an importer between them over Zenoh on loopback. Both bridge processes are
//! SIGKILLed and restarted several times mid-stream; every event must land in B exactly
//! once, in order, with its source sequence readable from the bridge header. The producer
//! also leaves a tombstone (a claim dropped unfilled) now and then: the bridge carries the
//! events around it and nothing for it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::process::Signal;
use shmring::{Consumer, ConsumerOptions, Producer, Ring};
use shmring_bridge::Bridged;
use shmring_testkit::{eventually, Child, Namespace};

use common::{check, exporter, importer, payload};

const N: u64 = 30_000;
const KILLS: u64 = 6;
/// Every this many events, one claim is dropped unfilled.
const TOMBSTONE_EVERY: u64 = 997;

#[test]
fn every_event_lands_once_in_order_across_bridge_crashes() {
    let ns_a = Namespace::new("bridge_exactly_once");
    let ns_b = ns_a.sibling("b");
    let (src, dst) = common::src_and_dst(&ns_a, 1024, &ns_b, 1024);
    let key = format!("shmring/test/{}", ns_a.name());
    let port = common::free_port();

    // The consumer on B: every event must be the next source sequence, carrying its payload.
    let seen = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let violation: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let mut consumer = dst
        .consumer(ConsumerOptions::anonymous())
        .expect("attach the consumer on B");
    let consumer_thread = {
        let (seen, stop, violation) = (seen.clone(), stop.clone(), violation.clone());
        std::thread::spawn(move || {
            let mut next = 0u64;
            let mut last_seq: Option<u64> = None;
            let bad: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
            let _ = consumer.run(
                |ev| {
                    // The payload index counts events; the source sequence also counts
                    // the tombstones, so it only has to increase.
                    let ok = Bridged::parse(ev.bytes()).is_some_and(|b| {
                        let fresh = last_seq.is_none_or(|l| b.header.seq > l);
                        last_seq = Some(b.header.seq);
                        fresh && check(b.payload) == Some(next)
                    });
                    if !ok && bad.borrow().is_none() {
                        *bad.borrow_mut() = Some(format!(
                            "event {} of B: expected payload {next} after source sequence {last_seq:?}, got {:?}",
                            ev.sequence(),
                            Bridged::parse(ev.bytes()).map(|b| (b.header.seq, check(b.payload)))
                        ));
                    }
                    next += 1;
                    seen.store(next, Ordering::Relaxed);
                },
                || stop.load(Ordering::Relaxed) || bad.borrow().is_some(),
            );
            if let Some(b) = bad.into_inner() {
                *violation.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
            }
            consumer.stats()
        })
    };

    let mut ex = exporter("exporter", &ns_a, "src", &key, port, &[]);
    let mut im = importer("importer", &ns_b, "dst", &key, port);
    // Publishing starts once the exporter's durable consumer gates the ring (a fresh one
    // starts at the head: what was published before it attached is not its to carry).
    let name = shmring_bridge::export::default_consumer_name(&key);
    common::await_attached(&mut ex, &src, &name);

    let producer_thread = {
        let src = Ring::open(ns_a.name(), "src").expect("open the source ring");
        std::thread::spawn(move || {
            let mut p = src.producer().expect("attach the producer on A");
            for i in 0..N {
                if i % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1 {
                    match p.claim() {
                        Ok(claim) => drop(claim),
                        Err(_) => return i,
                    }
                }
                if p.publish(&payload(i)).is_err() {
                    return i;
                }
            }
            N
        })
    };

    let bad = || violation.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let progressed = |at: u64| seen.load(Ordering::Relaxed) >= at || consumer_thread.is_finished();
    // Every incarnation's stderr, for the failure message.
    let mut logs: Vec<String> = Vec::new();
    let kill = |c: &mut shmring_testkit::Child, logs: &mut Vec<String>| {
        c.kill();
        let err = c.stderr();
        logs.push(format!("--- {} (pid {}) ---\n{err}", c.label(), c.pid()));
    };
    for k in 0..KILLS {
        let target = (k + 1) * N / (KILLS + 2);
        eventually(&format!("B to receive {target} events"), || {
            progressed(target)
        });
        match k % 3 {
            0 => {
                kill(&mut ex, &mut logs);
                ex = exporter("exporter", &ns_a, "src", &key, port, &[]);
            }
            1 => {
                kill(&mut im, &mut logs);
                im = importer("importer", &ns_b, "dst", &key, port);
            }
            _ => {
                kill(&mut ex, &mut logs);
                kill(&mut im, &mut logs);
                im = importer("importer", &ns_b, "dst", &key, port);
                ex = exporter("exporter", &ns_a, "src", &key, port, &[]);
            }
        }
    }
    eventually("B to receive every event", || progressed(N));
    if let Some(b) = bad() {
        kill(&mut ex, &mut logs);
        kill(&mut im, &mut logs);
        panic!("{b}\n{}", logs.join("\n"));
    }
    assert_eq!(producer_thread.join().expect("producer thread"), N);

    // The exporter commits what the importer confirmed: all of it, in the end.
    eventually("the exporter to commit everything", || {
        src.info()
            .consumers
            .iter()
            .any(|c| c.name == name && c.next == N + N / TOMBSTONE_EVERY)
    });
    let info = src.info();
    let exp = info
        .consumers
        .iter()
        .find(|c| c.name == name)
        .expect("the exporter's consumer is in the source ring's table");
    assert!(exp.durable && exp.required, "{exp:?}");

    stop.store(true, Ordering::Relaxed);
    let stats = consumer_thread.join().expect("consumer thread");
    assert_eq!(bad(), None);
    assert_eq!(seen.load(Ordering::Relaxed), N);
    assert_eq!(stats.delivered, N, "{stats:?}");
    // Nothing else in B: only tombstones of claims a killed importer left unfilled.
    assert_eq!(dst.head(), N + stats.skipped, "{stats:?}");
    drop((ex, im));
}

/// A bridge from ring "src" (`capacity` slots) in namespace A to ring "dst" in namespace B:
/// a consumer on B, the exporter and the importer running, a producer on A.
struct Pair {
    p: Producer,
    im: Child,
    ex: Child,
    consumer: Consumer,
    src: Ring,
    dst: Ring,
    key: String,
    name: String,
    port: u16,
    ns_b: Namespace,
    /// Held for the test's length: dropped last, it kills what is left and cleans up.
    _ns_a: Namespace,
}

impl Pair {
    fn new(label: &str, capacity: u64) -> Self {
        let ns_a = Namespace::new(label);
        let ns_b = ns_a.sibling("b");
        let (src, dst) = common::src_and_dst(&ns_a, capacity, &ns_b, 1024);
        let key = format!("shmring/{label}/{}", ns_a.name());
        let name = shmring_bridge::export::default_consumer_name(&key);
        let port = common::free_port();
        let consumer = dst
            .consumer(ConsumerOptions::anonymous())
            .expect("attach the consumer on B");
        let mut ex = exporter("exporter", &ns_a, "src", &key, port, &[]);
        let im = importer("importer", &ns_b, "dst", &key, port);
        common::await_attached(&mut ex, &src, &name);
        let p = src.producer().expect("attach the producer on A");
        Self {
            p,
            im,
            ex,
            consumer,
            src,
            dst,
            key,
            name,
            port,
            ns_b,
            _ns_a: ns_a,
        }
    }

    /// Publish the events of `seqs` on A.
    fn publish(&mut self, seqs: std::ops::Range<u64>) {
        for i in seqs {
            self.p.publish(&payload(i)).expect("publish");
        }
    }

    /// A new importer in place of the killed one.
    fn restart_importer(&mut self) {
        self.im = importer("importer", &self.ns_b, "dst", &self.key, self.port);
    }

    /// What B holds once it holds `n` events: each one's source sequence and checked payload.
    fn received(&mut self, n: u64) -> Vec<(u64, Option<u64>)> {
        let mut got = Vec::new();
        eventually("B to hold every event sent", || {
            let _ = self.consumer.poll_once(|ev| {
                let b = Bridged::parse(ev.bytes()).expect("a bridged event");
                got.push((b.header.seq, check(b.payload)));
            });
            got.len() as u64 >= n
        });
        got
    }
}

/// With the importer down, the exporter's batches go nowhere: it must go back to the
/// confirmed position (a replay, counted) and carry them again once an importer is back.
#[test]
fn the_exporter_replays_what_an_absent_importer_never_confirmed() {
    let mut b = Pair::new("bridge_replay", 1024);
    const FIRST: u64 = 500;
    const MORE: u64 = 300;
    b.publish(0..FIRST);
    // Once the exporter counts everything confirmed, nothing is outstanding: the replays
    // it has counted by then are the baseline.
    let before = common::stats_until(&mut b.ex, |v| common::num(v, "acked") == FIRST);
    let replays = common::num(&before, "replays");

    b.im.kill();
    b.publish(FIRST..FIRST + MORE);
    common::stats_until(&mut b.ex, |v| common::num(v, "replays") > replays);
    // Nothing was confirmed meanwhile: the ring still holds it all for the exporter.
    assert_eq!(
        b.src
            .info()
            .consumers
            .iter()
            .find(|c| c.name == b.name)
            .map(|c| c.next),
        Some(FIRST)
    );

    b.restart_importer();
    common::stats_until(&mut b.ex, |v| common::num(v, "acked") == FIRST + MORE);
    let want: Vec<(u64, Option<u64>)> = (0..FIRST + MORE).map(|i| (i, Some(i))).collect();
    assert_eq!(b.received(FIRST + MORE), want);
    assert_eq!(b.dst.head(), FIRST + MORE, "nothing doubled");
}

/// A ring stopped on either side holds the bridge, and started again lets it go on:
/// nothing lost or doubled, and neither process exits. Before, the importer exited at the
/// first event its stopped ring refused, and stayed down (restarted while the ring was still
/// stopped, it exited again).
#[test]
fn a_stopped_ring_on_either_side_holds_the_bridge_until_it_starts() {
    let mut b = Pair::new("bridge_stopped", 1024);
    b.publish(0..100);
    common::stats_until(&mut b.ex, |v| common::num(v, "committed") == 100);

    // B's ring stopped: the importer waits for it to start, and says so once.
    b.dst.stop().expect("stop B's ring");
    b.publish(100..200);
    assert!(
        b.im.expect_stderr_within("is stopped: waiting for it to start", shmring_testkit::WAIT),
        "the importer waits: {}",
        b.im.stderr_so_far()
    );
    // It waits without publishing: one refusal, not one per look at the ring (watched for
    // a while: each look used to be a refused publish, 100 a second).
    let refused =
        |dst: &Ring| -> u64 { dst.info().producers.iter().map(|p| p.stats.refused).sum() };
    let watched = std::time::Instant::now();
    while watched.elapsed() < std::time::Duration::from_millis(300) {
        assert_eq!(refused(&b.dst), 1, "the importer's refused publishes");
        std::thread::yield_now();
    }
    b.dst.start().expect("start B's ring");
    common::stats_until(&mut b.ex, |v| common::num(v, "committed") == 200);
    assert_eq!(refused(&b.dst), 1, "the importer's refused publishes");

    // A's ring stopped: its producer is refused, the exporter waits for more.
    b.src.stop().expect("stop A's ring");
    assert_eq!(
        b.p.publish(&payload(200)),
        Err(shmring::PublishError::Closed)
    );
    b.src.start().expect("start A's ring");
    b.publish(200..300);
    common::stats_until(&mut b.ex, |v| common::num(v, "committed") == 300);

    let want: Vec<(u64, Option<u64>)> = (0..300).map(|i| (i, Some(i))).collect();
    assert_eq!(b.received(300), want);
    assert_eq!(b.dst.head(), 300, "nothing doubled");
    assert!(b.im.exited().is_none(), "the importer runs on");
    assert!(b.ex.exited().is_none(), "the exporter runs on");
}

/// The exporter released by the source ring's broker (`broker release`, to let the
/// producers go on while the importer is away) goes on from the head: it gates again there,
/// tells the importer its committed position moved (so the importer does not ask, for ever,
/// for what the ring no longer holds), and counts the events it let go in `dropped`. Before,
/// its reads ahead returned nothing at its old position, for ever, and producers were never
/// held for it again.
#[test]
fn a_released_exporter_goes_on_from_the_head() {
    let mut b = Pair::new("bridge_released", 64);
    const FIRST: u64 = 50;
    b.publish(0..FIRST);
    // `committed`, not `acked`: the callback raises `acked` before it commits.
    common::stats_until(&mut b.ex, |v| common::num(v, "committed") == FIRST);
    b.im.kill();
    // Unconfirmed with the importer away, the exporter's position stays: release it, as
    // `broker release` does, and publish two laps past it (nothing gates the producer). The
    // exporter is frozen meanwhile, so that its next read comes after the laps: the release
    // wakes it, and it would gate again wherever the head was then, holding the producer.
    b.publish(FIRST..FIRST + 10);
    b.ex.signal(Signal::STOP);
    let pid = b.ex.pid();
    eventually("every thread of the exporter stopped", || all_stopped(pid));
    let entry = b
        .src
        .info()
        .consumers
        .into_iter()
        .find(|c| c.name == b.name)
        .expect("the exporter's entry");
    assert_eq!(entry.next, FIRST);
    assert!(b.src.release_consumer(entry.index, entry.word));
    let lapped = FIRST + 10 + 2 * 64;
    b.publish(FIRST + 10..lapped);
    b.ex.signal(Signal::CONT);
    // Its next read takes it to the head and counts what it let go.
    let v = common::stats_until(&mut b.ex, |v| common::num(v, "dropped") > 0);
    assert_eq!(common::num(&v, "dropped"), lapped - FIRST, "{v}");
    b.restart_importer();
    const LAST: u64 = 20;
    b.publish(lapped..lapped + LAST);
    common::stats_until(&mut b.ex, |v| common::num(v, "acked") == lapped + LAST);
    let want: Vec<(u64, Option<u64>)> = (0..FIRST)
        .chain(lapped..lapped + LAST)
        .map(|i| (i, Some(i)))
        .collect();
    assert_eq!(b.received(FIRST + LAST), want);
}

/// Whether every thread of process `pid` is stopped (`T` in `/proc/PID/task/*/stat`).
fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            stat.rfind(')')
                .and_then(|at| stat[at + 1..].split_whitespace().next())
                .is_some_and(|state| state == "T" || state == "t")
        })
    })
}
