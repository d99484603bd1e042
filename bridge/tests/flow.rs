//! Flow between the exporter and the importer, reliable mode: what is sent again and when,
//! how large a message is, and what a blocked importer does. Each test runs both bridge
//! processes over loopback (scouting off) between namespaces A and B.

mod common;

use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde_json::Value;
use shmring::{ConsumerOptions, Ring, RingConfig};
use shmring_bridge::Bridged;
use shmring_testkit::{eventually, Child, Namespace};

use common::{check, exporter, importer, importer_with, num, payload, stats_until};

/// The exporter's acknowledgement timeout in these tests (`common::exporter`'s).
const ACK_TIMEOUT: Duration = Duration::from_millis(300);

/// Rings "src" in A and "dst" in B, with `capacity` and `dst_capacity` slots of `slot_size`
/// bytes.
fn rings(
    a: &Namespace,
    b: &Namespace,
    (capacity, dst_capacity): (u64, u64),
    slot_size: u32,
) -> (Ring, Ring) {
    let make = |ns: &Namespace, name: &str, capacity: u64| {
        let config = RingConfig {
            capacity,
            slot_size,
            ..RingConfig::default()
        };
        Ring::create(ns.name(), name, &config)
            .unwrap_or_else(|e| panic!("create ring {name} in {}: {e}", ns.name()))
    };
    (make(a, "src", capacity), make(b, "dst", dst_capacity))
}

/// The exporter of "src" in `a` on `key`, listening on `port`, once its consumer gates.
fn attached_exporter(a: &Namespace, src: &Ring, key: &str, port: u16, extra: &[&str]) -> Child {
    let mut ex = exporter("exporter", a, "src", key, port, extra);
    let name = shmring_bridge::export::default_consumer_name(key);
    common::await_attached(&mut ex, src, &name);
    ex
}

/// Sent after an idle time longer than the acknowledgement timeout, a batch goes once: its
/// acknowledgement is not overdue the moment it leaves. Before, the exporter measured the
/// timeout from the last time its confirmed position moved, so the first batch after an
/// idle second was sent again at once (a replay counted, a duplicate at the importer).
#[test]
fn a_batch_after_an_idle_time_is_sent_once() {
    let a = Namespace::new("bridge_idle");
    let b = a.sibling("b");
    let (src, _dst) = rings(&a, &b, (1024, 1024), 64);
    let key = format!("shmring/idle/{}", a.name());
    let port = common::free_port();
    let mut ex = attached_exporter(&a, &src, &key, port, &[]);
    let mut im = importer("importer", &b, "dst", &key, port);
    // The importer hears the exporter (a batch sent before it subscribed would be asked for
    // again, rightly).
    stats_until(&mut ex, |v| v["link"] == "up");
    let mut p = src.producer().expect("producer on A");
    let mut sent = 0;
    for round in 0..3 {
        if round > 0 {
            // Idle for longer than the timeout: the wait is for time to pass.
            std::thread::sleep(ACK_TIMEOUT * 2);
        }
        for _ in 0..5 {
            p.publish(&payload(sent)).expect("publish");
            sent += 1;
        }
        stats_until(&mut ex, |v| num(v, "committed") == sent);
    }
    let v = stats_until(&mut ex, |_| true);
    if num(&v, "replays") != 0 {
        ex.fail(&format!("sent again: {v}"));
    }
    let v = stats_until(&mut im, |v| num(v, "published") == sent);
    if num(&v, "duplicates") != 0 {
        im.fail(&format!("received twice: {v}"));
    }
}

/// The exporter's replays counted so far, from its first counter line after this call (the
/// lines already printed are passed over).
fn replays(ex: &mut Child) -> (u64, Value) {
    ex.try_lines();
    let v = stats_until(ex, |_| true);
    (num(&v, "replays"), v)
}

/// Events published on A by [`replays_while_blocked`].
const BLOCKED_EVENTS: u64 = 1000;

/// Publish events `0..BLOCKED_EVENTS` on `src`, wait until `dst` (of `room` slots, its reader not
/// reading) is full, then let `timeouts` of the exporter's ack timeouts pass with the
/// importer waiting for room. Returns the exporter's replays before and after, and its last
/// counters.
fn replays_while_blocked(
    ex: &mut Child,
    src: &Ring,
    dst: &Ring,
    room: u64,
    timeouts: u32,
) -> (u64, u64, Value) {
    let mut p = src.producer().expect("producer on A");
    for i in 0..BLOCKED_EVENTS {
        p.publish(&payload(i)).expect("publish");
    }
    shmring_testkit::wait_until("B's ring full", || (dst.info().head >= room).then_some(()));
    let (before, _) = replays(ex);
    // The wait is for time to pass.
    let blocked = Instant::now();
    while blocked.elapsed() < ACK_TIMEOUT * timeouts {
        std::thread::sleep(ACK_TIMEOUT / 4);
    }
    let (after, v) = replays(ex);
    (before, after, v)
}

/// An importer whose ring is full (its consumer does not read) keeps acknowledging what it
/// has, so the exporter does not send its unconfirmed window again every timeout (each copy
/// of it waited in the importer's queue, up to 1024 messages); and it stops on SIGTERM,
/// with nothing lost: the next importer gets the rest. Before, it sent no acknowledgement
/// while it waited for room, and ignored SIGTERM until the ring had room.
#[test]
fn an_importer_blocked_on_a_full_ring_holds_the_exporter_and_stops_on_sigterm() {
    let a = Namespace::new("bridge_full");
    let b = a.sibling("b");
    const N: u64 = BLOCKED_EVENTS;
    // B holds 64 slots: the importer waits to publish the 65th.
    const ROOM: u64 = 64;
    let (src, dst) = rings(&a, &b, (1024, ROOM), 64);
    let mut reader = dst
        .consumer(ConsumerOptions::durable("reader"))
        .expect("the reader on B");
    let key = format!("shmring/full/{}", a.name());
    let port = common::free_port();
    let mut ex = attached_exporter(&a, &src, &key, port, &[]);
    let mut im = importer("importer", &b, "dst", &key, port);
    // Four timeouts with the importer blocked.
    let (before, after, v) = replays_while_blocked(&mut ex, &src, &dst, ROOM, 4);
    assert_eq!(
        after, before,
        "replays while the importer waited for room: {v}"
    );
    assert_eq!(
        dst.info().head,
        ROOM,
        "the importer published into a full ring"
    );

    let status = im.signal_and_wait(Signal::TERM);
    assert!(status.success(), "the importer's exit on SIGTERM: {status}");

    // The next importer gets the rest: every event once, in order.
    im = importer("importer", &b, "dst", &key, port);
    let mut got = Vec::new();
    eventually("B to hold every event", || {
        let _ = reader.poll_once(|ev| {
            let bridged = Bridged::parse(ev.bytes()).expect("a bridged event");
            got.push((bridged.header.seq, check(bridged.payload)));
        });
        got.len() as u64 >= N
    });
    let want: Vec<(u64, Option<u64>)> = (0..N).map(|i| (i, Some(i))).collect();
    assert_eq!(got, want);
    drop(im);
}

/// An importer blocked on its full ring for longer than `--ack-quiet-ms` still acknowledges
/// the sources it heard before the block: the time it waits is not their quiet time. Before,
/// its quiet clock ran on while it waited, its acknowledgements stopped once the period was
/// over, and the exporter sent its window again at every timeout.
#[test]
fn an_importer_blocked_past_its_quiet_period_still_holds_the_exporter() {
    let a = Namespace::new("bridge_quiet");
    let b = a.sibling("b");
    const ROOM: u64 = 64;
    let (src, dst) = rings(&a, &b, (1024, ROOM), 64);
    let _reader = dst
        .consumer(ConsumerOptions::durable("reader"))
        .expect("the reader on B");
    let key = format!("shmring/quiet/{}", a.name());
    let port = common::free_port();
    let mut ex = attached_exporter(&a, &src, &key, port, &[]);
    let _im = importer_with(
        "importer",
        &b,
        "dst",
        &key,
        port,
        &["--ack-quiet-ms", "400"],
    );
    // Six timeouts, past the quiet period.
    let (before, after, v) = replays_while_blocked(&mut ex, &src, &dst, ROOM, 6);
    assert_eq!(
        after, before,
        "replays while the importer waited for room: {v}"
    );
}

/// Large events go in messages the receiving side's Zenoh accepts: a batch is cut by bytes
/// (`--batch-bytes`, 1 MiB by default) as well as by events. Zenoh drops a message larger
/// than its `transport/link/rx/max_message_size` without telling either side. Before, a
/// batch was cut only at 256 events, so a backlog of 8000-byte events went in 2 MB
/// messages: each one dropped, asked for again and sent again the same, for ever, while the
/// source ring's producers waited.
#[test]
fn a_backlog_of_large_events_goes_in_messages_the_receiver_accepts() {
    let a = Namespace::new("bridge_bytes");
    let b = a.sibling("b");
    let (src, dst) = rings(&a, &b, (1024, 1024), 8192);
    let mut reader = dst
        .consumer(ConsumerOptions::anonymous())
        .expect("the reader on B");
    let key = format!("shmring/bytes/{}", a.name());
    let port = common::free_port();
    let mut ex = attached_exporter(&a, &src, &key, port, &[]);
    const N: u64 = 600;
    let mut p = src.producer().expect("producer on A");
    // The backlog, while no importer runs.
    for i in 0..N {
        let mut event = vec![0u8; 8000];
        event[..16].copy_from_slice(&payload(i));
        p.publish(&event).expect("publish");
    }
    let _im = importer_with(
        "importer",
        &b,
        "dst",
        &key,
        port,
        &["--zenoh-set", "transport/link/rx/max_message_size=1572864"],
    );
    let v = stats_until(&mut ex, |v| num(v, "committed") == N);
    assert_eq!(num(&v, "acked"), N, "{v}");
    let mut got = 0u64;
    eventually("B to hold every event", || {
        let _ = reader.poll_once(|ev| {
            let bridged = Bridged::parse(ev.bytes()).expect("a bridged event");
            assert_eq!(bridged.header.seq, got);
            assert_eq!(check(&bridged.payload[..16]), Some(got));
            got += 1;
        });
        got >= N
    });
}
