//! The publishing rules that leave no trace when they refuse: a `publish_timeout` (or
//! `try_publish`) that gives up spends no sequence; `publish_batch` outside
//! `1..=capacity/2` publishes nothing; a claim dropped without commit (or unwound by a
//! panic) becomes a tombstone that consumers skip and count. The last one also across
//! processes.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use shmring::{ConsumerOptions, PublishError, Ring, RingConfig, TryPublishError};
use shmring_testkit::payload::{decode, encode, Origin};
use shmring_testkit::report::{line, num};
use shmring_testkit::{testkit, Namespace};

fn ring(ns: &Namespace, name: &str, capacity: u64) -> Ring {
    let config = RingConfig {
        capacity,
        ..RingConfig::default()
    };
    Ring::create(ns.name(), name, &config).expect("create ring")
}

fn ev(seq: u64) -> Vec<u8> {
    encode(Origin { producer: 0, seq }, 8)
}

/// Drain everything pending: (ring sequence, producer sequence, end-of-batch) per event.
fn drain(c: &mut shmring::Consumer) -> Vec<(u64, u64, bool)> {
    let mut out = Vec::new();
    while c
        .poll_once(|e| {
            let o = decode(e.bytes()).expect("intact event");
            out.push((e.sequence(), o.seq, e.is_end_of_batch()));
        })
        .expect("poll")
        > 0
    {}
    out
}

#[test]
fn a_timed_out_publish_spends_no_sequence() {
    let ns = Namespace::new("timeout_no_sequence");
    let ring = ring(&ns, "r", 8);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let mut other = ring.producer().unwrap();
    for s in 0..8 {
        assert_eq!(p.publish(&ev(s)).unwrap(), s);
    }
    // Full: the consumer has read nothing.
    let e = p.publish_timeout(&ev(8), Duration::from_millis(5));
    assert_eq!(e, Err(TryPublishError::Timeout));
    assert!(!e.unwrap_err().to_string().is_empty());
    assert_eq!(p.try_publish(&ev(8)), Err(TryPublishError::Full));
    assert_eq!(
        other.publish_timeout(&ev(8), Duration::from_millis(5)),
        Err(TryPublishError::Timeout)
    );
    assert_eq!(ring.head(), 8, "a refused publish moved the claim counter");
    assert_eq!(p.stats().refused, 2);
    assert_eq!(p.stats().published, 8);
    assert_eq!(other.stats().refused, 1);

    let got = drain(&mut c);
    assert_eq!(got.len(), 8);
    // The next accepted publish takes the sequence the timed-out one would have had.
    assert_eq!(
        other.publish_timeout(&ev(8), Duration::from_millis(5)),
        Ok(8)
    );
    assert_eq!(p.try_publish(&ev(9)), Ok(9));
    let got = drain(&mut c);
    assert_eq!(got, vec![(8, 8, false), (9, 9, true)]);
    assert_eq!(c.stats().skipped, 0, "a timeout left a hole");
}

#[test]
fn publish_batch_outside_one_to_half_capacity_publishes_nothing() {
    let ns = Namespace::new("batch_bounds");
    let ring = ring(&ns, "r", 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();

    let none: [Vec<u8>; 0] = [];
    let e = p.publish_batch(&none).unwrap_err();
    assert_eq!(e, PublishError::BatchSize { len: 0, max: 8 });
    assert!(e.to_string().contains("nothing was published"), "{e}");
    let nine: Vec<Vec<u8>> = (0..9).map(ev).collect();
    assert_eq!(
        p.publish_batch(&nine),
        Err(PublishError::BatchSize { len: 9, max: 8 })
    );
    // One payload too large refuses the whole batch.
    let mut mixed: Vec<Vec<u8>> = (0..3).map(ev).collect();
    mixed.push(vec![0; ring.max_payload() + 1]);
    assert!(matches!(
        p.publish_batch(&mixed),
        Err(PublishError::TooLarge { .. })
    ));
    assert_eq!(ring.head(), 0, "a refused batch claimed sequences");
    assert!(!c.has_pending());
    assert_eq!(drain(&mut c), vec![]);
    assert_eq!(p.stats().published, 0);

    // capacity/2 is accepted, published as one run with one end-of-batch edge.
    let eight: Vec<Vec<u8>> = (0..8).map(ev).collect();
    assert_eq!(p.publish_batch(&eight), Ok(0));
    let one = vec![ev(8)];
    assert_eq!(p.publish_batch(&one), Ok(8));
    assert_eq!(ring.head(), 9);
    let got = drain(&mut c);
    let want: Vec<(u64, u64, bool)> = (0..9).map(|s| (s, s, s == 8)).collect();
    assert_eq!(got, want);
    assert_eq!(c.stats().batches, 1);
}

#[test]
fn a_dropped_claim_is_a_tombstone_that_consumers_skip_and_count() {
    let ns = Namespace::new("tombstone_in_process");
    let ring = ring(&ns, "r", 16);
    let mut required = ring.consumer(ConsumerOptions::durable("req")).unwrap();
    let mut optional = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let mut p = ring.producer().unwrap();

    assert_eq!(p.publish(&ev(0)).unwrap(), 0);
    {
        let mut c = p.claim().unwrap();
        c.write(b"never committed").unwrap();
    } // dropped: sequence 1 is a tombstone
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        let mut c = p.claim().unwrap();
        assert_eq!(c.sequence(), 2);
        c.payload_mut()[0] = 0xff;
        panic!("producer handler fails mid-write");
    }));
    assert!(unwound.is_err());
    let mut c = p.claim().unwrap();
    c.write(&ev(1)).unwrap();
    assert_eq!(c.commit(), 3);
    drop(p.claim().unwrap()); // a tombstone at the end of the run: 4

    assert_eq!(ring.head(), 5);
    assert_eq!(p.stats().tombstoned, 3);
    assert_eq!(p.stats().published, 2);
    for c in [&mut required, &mut optional] {
        let got = drain(c);
        // The end-of-batch edge goes to the last real event, not to a trailing tombstone.
        assert_eq!(got, vec![(0, 0, false), (3, 1, true)]);
        assert_eq!(c.stats().skipped, 3);
        assert_eq!(c.stats().delivered, 2);
        assert_eq!(c.next_sequence(), 5);
    }
    let info = ring.info();
    let req = info.consumers.iter().find(|c| c.name == "req").unwrap();
    assert_eq!(req.stats.skipped, 3);
    assert_eq!(info.producers[0].stats.tombstoned, 3);
}

/// A producer process drops every 5th claim; two consumer processes (anonymous and durable)
/// must skip exactly those, count them, and still see the producer's sequence unbroken.
#[test]
fn tombstones_from_another_process_are_skipped_and_counted() {
    let ns = Namespace::new("tombstone_cross_process");
    let ring = ring(&ns, "r", 16);
    let count = 1000;
    let consume = |label: &str, name: &str| {
        let mut c = testkit!(
            ns,
            label,
            "consume --ns {ns} --ring r --per-producer {count} {name}"
        );
        c.expect_line("ready");
        c
    };
    let a = consume("anonymous consumer", "");
    let b = consume("durable consumer", "--name durable");
    let p = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring r --count {count} --size max --mode mixed --tombstone-every 5"
    );
    let out = p.wait_ok();
    let done = line(&out, "done");
    let tombstones = num(done, "tombstones");
    assert!(tombstones > 0, "{done}");
    assert_eq!(num(done, "stats_tombstoned"), tombstones, "{done}");
    for c in [a, b] {
        let out = c.wait_ok();
        let done = line(&out, "done");
        assert_eq!(num(done, "delivered"), count, "{done}");
        // The producer's last claim is a real event, so every tombstone lies before it.
        assert_eq!(num(done, "skipped"), tombstones, "{done}");
        assert_eq!(num(done, "next"), count + tombstones, "{done}");
    }
    assert_eq!(ring.head(), count + tombstones);
}
