//! The importer against senders it does not know. The link is not authenticated, so any
//! process on the bridge's key can name new sources: the importer keeps at most
//! `--max-sources` of them and ignores (and counts) a message from one more while none has
//! been quiet for `--forget-after-ms` (`track`'s unit tests cover the forgetting), and its
//! heartbeat acknowledges only the sources heard from within `--ack-quiet-ms`, so a source
//! that went away costs nothing per heartbeat.
//!
//! The test process is the "exporter" side itself: a Zenoh session listening on 127.0.0.1
//! (scouting off), publishing heartbeats of made-up sources and reading the acks; and, for
//! the exporter, the "importer" side, sending it acks it cannot apply.

mod common;

use std::time::{Duration, Instant};

use serde_json::Value;
use shmring::{ConsumerOptions, Ring, RingConfig};
use shmring_bridge::link::{Keys, LinkArgs};
use shmring_bridge::wire::{Ack, Batch, BatchHeader, BatchWriter};
use shmring_bridge::Mode;
use shmring_testkit::{Child, Namespace};
use zenoh::handlers::{FifoChannel, FifoChannelHandler};
use zenoh::pubsub::Subscriber;
use zenoh::sample::Sample;
use zenoh::Wait;

use common::{importer_with, num};

/// A DROP-mode heartbeat of `source` that says it lost `dropped` events.
fn drop_heartbeat(source: u64, dropped: u64) -> Vec<u8> {
    let mut w = BatchWriter::default();
    w.begin();
    w.finish(&BatchHeader {
        mode: Mode::Drop,
        source,
        run: 1,
        committed: 0,
        start: 0,
        end: 0,
        dropped,
    })
}

/// A reliable heartbeat of `source` at `committed`.
fn heartbeat(source: u64, committed: u64) -> Vec<u8> {
    let mut w = BatchWriter::default();
    w.begin();
    w.finish(&BatchHeader {
        mode: Mode::Reliable,
        source,
        run: 1,
        committed,
        start: committed,
        end: committed,
        dropped: 0,
    })
}

/// The test's side of the link: a Zenoh session listening on 127.0.0.1 (scouting off),
/// publishing on the bridge's data key and reading the importer's acks.
struct Sender {
    key: String,
    port: u16,
    acks: Subscriber<FifoChannelHandler<Sample>>,
    data: zenoh::pubsub::Publisher<'static>,
    _session: zenoh::Session,
}

impl Sender {
    /// On a key of `ns`'s own.
    fn new(ns: &Namespace) -> Self {
        let key = format!("shmring/sources/{}", ns.name());
        let keys = Keys::new(&key).expect("keys");
        let port = common::free_port();
        let session = LinkArgs {
            listen: vec![format!("tcp/127.0.0.1:{port}")],
            ..LinkArgs::default()
        }
        .open()
        .expect("the test's zenoh session");
        let acks = session
            .declare_subscriber(keys.ack.clone())
            .with(FifoChannel::new(1 << 16))
            .wait()
            .expect("subscribe to the acks");
        let data = session
            .declare_publisher(keys.data.clone())
            .wait()
            .expect("declare the data publisher");
        Self {
            key,
            port,
            acks,
            data,
            _session: session,
        }
    }

    fn put(&self, msg: Vec<u8>) {
        self.data.put(msg).wait().expect("publish a message");
    }

    /// The importer into ring "dst" of `ns`, reached through this link, with `extra` flags.
    fn importer(&self, ns: &Namespace, extra: &[&str]) -> Child {
        importer_with("importer", ns, "dst", &self.key, self.port, extra)
    }
}

/// Every ack received so far, as `(source, next)`.
fn drain(acks: &Subscriber<FifoChannelHandler<Sample>>) -> Vec<(u64, u64)> {
    let mut got = Vec::new();
    while let Ok(Some(s)) = acks.try_recv() {
        let ack = Ack::parse(&s.payload().to_bytes()).expect("the importer's ack parses");
        got.push((ack.source, ack.next));
    }
    got
}

/// The importer's next counter line (one every 50 ms: the pace of the loops below), or,
/// past `deadline`, the test fails with the importer's stderr: every loop below is bounded
/// by one deadline.
fn counters(im: &mut Child, deadline: Instant, waiting_for: &str) -> Value {
    if Instant::now() > deadline {
        im.fail(&format!("still waiting for {waiting_for}"));
    }
    common::stats_until(im, |_| true)
}

#[test]
fn the_importer_keeps_at_most_max_sources_and_acks_only_the_ones_it_hears() {
    let ns = Namespace::new("bridge_sources");
    let config = RingConfig {
        capacity: 64,
        ..RingConfig::default()
    };
    let _dst = Ring::create(ns.name(), "dst", &config).expect("create the importer's ring");
    let link = Sender::new(&ns);
    let acks = &link.acks;
    let put = |source: u64, committed: u64| link.put(heartbeat(source, committed));
    let mut im = link.importer(
        &ns,
        &[
            "--max-sources",
            "2",
            "--heartbeat-ms",
            "20",
            "--ack-quiet-ms",
            "200",
        ],
    );

    let deadline = Instant::now() + shmring_testkit::WAIT;
    // Sources 1 and 2 speak, each until it is acknowledged (what is put before the importer
    // has subscribed is lost), so the importer knows them first.
    let mut heard = Vec::new();
    for source in [1, 2] {
        loop {
            put(source, 0);
            counters(&mut im, deadline, &format!("an ack of source {source}"));
            heard.extend(drain(acks));
            if heard.contains(&(source, 0)) {
                break;
            }
        }
    }
    // Four more: refused, the importer knowing two already. A refused source's own count
    // of what it lost is not the importer's to show.
    loop {
        for source in 3..=5 {
            put(source, 0);
        }
        link.put(drop_heartbeat(6, 999));
        let v = counters(&mut im, deadline, "four sources refused");
        if num(&v, "refused_sources") >= 4 {
            assert_eq!(num(&v, "sources"), 2, "{v}");
            assert_eq!(v.get("forgotten_sources"), Some(&Value::from(0)), "{v}");
            assert_eq!(num(&v, "dropped_at_exporter"), 0, "{v}");
            break;
        }
    }
    heard.extend(drain(acks));
    assert!(
        heard.iter().all(|(s, _)| [1, 2].contains(s)),
        "acks went to {heard:?}"
    );

    // Source 1 goes quiet; source 2 goes on, its committed position counting the time
    // since, so that an ack of source 2 dates what the importer had seen when it sent it.
    let quiet_since = Instant::now();
    let stamp = || quiet_since.elapsed().as_millis() as u64;
    // Acked past `ms` (by the test's clock since source 1 went quiet): the importer has
    // taken in source 2's message of that moment.
    let acked_past = |ms: u64, im: &mut Child| -> Vec<(u64, u64)> {
        let mut got = Vec::new();
        loop {
            put(2, stamp());
            counters(im, deadline, &format!("an ack of source 2 past {ms} ms"));
            got.extend(drain(acks));
            if got.iter().any(|&(s, next)| s == 2 && next >= ms) {
                return got;
            }
        }
    };
    // Well past the quiet period (200 ms) and a few heartbeats (20 ms) on the importer's
    // side, then a window of 600 ms more in which source 1 must get nothing.
    acked_past(1_000, &mut im);
    let window = acked_past(1_600, &mut im);
    let to_1 = window.iter().filter(|(s, _)| *s == 1).count();
    let to_2 = window.iter().filter(|(s, _)| *s == 2).count();
    assert_eq!(to_1, 0, "a quiet source still acked: {window:?}");
    assert!(to_2 > 0);

    // Heard again, source 1 is acknowledged again: it was quiet, not forgotten.
    loop {
        put(1, 7);
        counters(&mut im, deadline, "source 1 acknowledged again");
        if drain(acks).contains(&(1, 7)) {
            break;
        }
    }
    let v = counters(&mut im, deadline, "the last counters");
    assert_eq!(num(&v, "sources"), 2, "{v}");
    assert!(num(&v, "refused_sources") >= 3, "{v}");
}

/// Time the importer spends blocked on its full ring is not time its sources were quiet:
/// the source whose events it waits to publish is not forgotten for a new one the moment
/// the ring has room again. Before, quiet time was counted by the wall clock, so an importer
/// blocked for longer than `--forget-after-ms` found every source quiet when it went on,
/// forgot one for the first new source it heard, and took the forgotten one back as new:
/// from its exporter's committed position, publishing again what its last acks covered.
#[test]
fn time_blocked_on_a_full_ring_is_not_quiet_time() {
    let ns = Namespace::new("bridge_blocked");
    let config = RingConfig {
        capacity: 64,
        ..RingConfig::default()
    };
    let dst = Ring::create(ns.name(), "dst", &config).expect("create the importer's ring");
    // A durable required consumer, detached: it gates, so the ring fills.
    drop(
        dst.consumer(ConsumerOptions::durable("held"))
            .expect("the held consumer"),
    );
    let link = Sender::new(&ns);
    let mut im = link.importer(
        &ns,
        &[
            "--max-sources",
            "1",
            "--forget-after-ms",
            "1000",
            "--heartbeat-ms",
            "20",
        ],
    );
    let deadline = Instant::now() + shmring_testkit::WAIT;
    // Source 1 is known (what is put before the importer has subscribed is lost).
    loop {
        link.put(heartbeat(1, 0));
        counters(&mut im, deadline, "an ack of source 1");
        if drain(&link.acks).contains(&(1, 0)) {
            break;
        }
    }
    // A batch of 100 events from source 1: 64 fit, the importer waits to publish the 65th.
    let mut w = BatchWriter::default();
    w.begin();
    for seq in 0..100 {
        w.push(seq, &common::payload(seq));
    }
    link.put(w.finish(&BatchHeader {
        mode: Mode::Reliable,
        source: 1,
        run: 1,
        committed: 0,
        start: 0,
        end: 100,
        dropped: 0,
    }));
    // Full: 64 published, the importer's claim of the 65th counted in the head (the ring
    // has several producers' claim counter).
    shmring_testkit::wait_until("the importer's ring full", || {
        (dst.info().head >= 64).then_some(())
    });
    // Blocked for twice the forget period, then a new source speaks.
    let blocked = Instant::now();
    while blocked.elapsed() < std::time::Duration::from_secs(2) {
        assert!(
            dst.info().head <= 65,
            "the importer went on with its ring full"
        );
        // A pace for the look, not a synchronisation sleep: the wait is for time to pass.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    link.put(heartbeat(2, 0));
    // Room again: the held consumer takes every event.
    let mut held = dst
        .consumer(ConsumerOptions::durable("held"))
        .expect("the held consumer back");
    let mut got = 0;
    shmring_testkit::wait_until("all 100 events delivered", || {
        got += held.poll_once(|_| {}).expect("poll");
        (got >= 100).then_some(())
    });
    // Source 2 is refused, and source 1 kept: it was heard just before the block.
    let v = loop {
        link.put(heartbeat(2, 0));
        let v = counters(&mut im, deadline, "source 2 refused or admitted");
        if num(&v, "refused_sources") + num(&v, "forgotten_sources") > 0 {
            break v;
        }
    };
    assert_eq!(num(&v, "forgotten_sources"), 0, "{v}");
    assert_eq!(num(&v, "sources"), 1, "{v}");
}

/// Anyone who can publish on the bridge's key can send the importer anything: a flood of malformed
/// messages is counted in `malformed` and logged the first time and then at every power of
/// two, not once each. Before, each one was a warning line: a peer could fill the disk.
#[test]
fn a_flood_of_malformed_messages_is_counted_not_logged_each() {
    let ns = Namespace::new("bridge_flood");
    let _dst = Ring::create(ns.name(), "dst", &RingConfig::default()).expect("create the ring");
    let link = Sender::new(&ns);
    let mut im = link.importer(&ns, &["--heartbeat-ms", "20"]);
    let deadline = Instant::now() + shmring_testkit::WAIT;
    // What is put before the importer has subscribed is lost: put until it counted enough.
    loop {
        for _ in 0..200 {
            link.put(b"not a batch".to_vec());
        }
        let v = counters(&mut im, deadline, "1000 malformed messages counted");
        if num(&v, "malformed") >= 1000 {
            break;
        }
    }
    let warned = im
        .stderr_so_far()
        .matches("malformed batch ignored")
        .count();
    assert!(
        (1..=12).contains(&warned),
        "{warned} warnings for 1000 and more malformed messages"
    );
}

/// Acks are as open as batches: a flood of acks for the exporter's source confirming what
/// its ring never published is counted in `refused_acks` and logged the first time and then
/// at every power of two, and moves nothing. Before, each one was a warning line.
#[test]
fn a_flood_of_acks_for_unpublished_sequences_is_counted_not_logged_each() {
    let ns = Namespace::new("bridge_ack_flood");
    let config = RingConfig {
        capacity: 64,
        ..RingConfig::default()
    };
    let src = Ring::create(ns.name(), "src", &config).expect("create the exporter's ring");
    let key = format!("shmring/ackflood/{}", ns.name());
    let keys = Keys::new(&key).expect("keys");
    let port = common::free_port();
    let mut ex = common::exporter(
        "exporter",
        &ns,
        "src",
        &key,
        port,
        &["--heartbeat-ms", "20"],
    );
    let name = shmring_bridge::export::default_consumer_name(&key);
    common::await_attached(&mut ex, &src, &name);
    // The test's side: connected to the exporter, reading its heartbeats for its source.
    let session = LinkArgs {
        connect: vec![format!("tcp/127.0.0.1:{port}")],
        ..LinkArgs::default()
    }
    .open()
    .expect("the test's zenoh session");
    let data = session
        .declare_subscriber(keys.data.clone())
        .with(FifoChannel::new(1 << 10))
        .wait()
        .expect("subscribe to the batches");
    let acks = session
        .declare_publisher(keys.ack.clone())
        .wait()
        .expect("declare the ack publisher");
    let deadline = Instant::now() + shmring_testkit::WAIT;
    let source = loop {
        assert!(Instant::now() < deadline, "no heartbeat from the exporter");
        if let Ok(Some(s)) = data.recv_timeout(Duration::from_millis(100)) {
            let bytes = s.payload().to_bytes();
            break Batch::parse(&bytes)
                .expect("the exporter's batch")
                .header
                .source;
        }
    };
    let forged = Ack {
        source,
        next: 1 << 40,
        resend: false,
    }
    .encode();
    loop {
        for _ in 0..200 {
            acks.put(forged.to_vec()).wait().expect("publish an ack");
        }
        let v = counters(&mut ex, deadline, "1000 refused acks counted");
        assert_eq!(num(&v, "committed"), 0, "nothing moves: {v}");
        if num(&v, "refused_acks") >= 1000 {
            break;
        }
    }
    let warned = ex.stderr_so_far().matches("never published").count();
    assert!(
        (1..=12).contains(&warned),
        "{warned} warnings for 1000 and more refused acks"
    );
}
