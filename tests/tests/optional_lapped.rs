//! An optional consumer that is lapped detects it from the slot stamps, jumps ahead, and
//! counts exactly what it skipped: `delivered + skipped + dropped_behind` equals the number
//! of sequences it walked past, always.
//!
//! First in one process, step by step, so the counts are known in advance: with no slack;
//! lapped in the middle of a batch (the handler publishes two rings' worth, so the slots
//! after the one it holds are overwritten under the consumer and the stamp check after the
//! copy finds it); and with a slack that holds the producer while the optional consumer is
//! within it. Then across processes, with a producer process running free and an optional
//! consumer process lapped as often as the scheduler makes it, checking the same identity,
//! that it was lapped, that sequences only move forward, and that no event it is handed is
//! torn.

use shmring::{ConsumerOptions, Ring, RingConfig, TryPublishError};
use shmring_testkit::payload::{decode, encode, Origin};
use shmring_testkit::report::{line, num};
use shmring_testkit::{testkit, Namespace};

fn ev(seq: u64) -> Vec<u8> {
    encode(Origin { producer: 0, seq }, 8)
}

/// One `poll_once`, recording the ring sequence of every event handed out.
fn poll(c: &mut shmring::Consumer, seen: &mut Vec<u64>) -> usize {
    c.poll_once(|e| {
        let o = decode(e.bytes()).expect("intact event");
        assert_eq!(o.seq, e.sequence());
        seen.push(e.sequence());
    })
    .expect("poll")
}

#[test]
fn a_lapped_optional_consumer_counts_exactly_what_it_skipped() {
    let ns = Namespace::new("lapped_exact");
    let config = RingConfig {
        capacity: 16,
        optional_slack: Some(0),
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut c = ring
        .consumer(ConsumerOptions::durable("watcher").optional())
        .unwrap();
    assert!(!c.is_required());
    let mut p = ring.producer().unwrap();
    let mut seen = Vec::new();

    // Phase 1: within reach, everything is delivered.
    for s in 0..10 {
        p.publish(&ev(s)).unwrap();
    }
    assert_eq!(poll(&mut c, &mut seen), 10);
    assert_eq!(c.next_sequence(), 10);

    // Phase 2: no required consumer and no slack: the producer never waits for it and laps
    // it more than six times.
    for s in 10..110 {
        assert_eq!(
            p.try_publish(&ev(s)),
            Ok(s),
            "the optional consumer held the producer"
        );
    }
    assert!(c.has_pending(), "a lap is something to act on");
    assert_eq!(poll(&mut c, &mut seen), 0, "a lapped slot was delivered");
    assert_eq!(c.next_sequence(), 110, "did not jump to the head");
    assert_eq!(c.stats().dropped_behind, 100);

    // Phase 3: caught up again; a tombstone among the events is skipped and counted.
    for s in 110..113 {
        p.publish(&ev(s)).unwrap();
    }
    drop(p.claim().unwrap());
    p.publish(&ev(114)).unwrap();
    assert_eq!(poll(&mut c, &mut seen), 4);

    // Phase 4: lapped by less than one ring's worth past its own position.
    for s in 115..140 {
        p.publish(&ev(s)).unwrap();
    }
    assert_eq!(poll(&mut c, &mut seen), 0);
    assert_eq!(c.next_sequence(), 140);

    let s = c.stats();
    assert_eq!(
        seen,
        [(0..10).collect::<Vec<_>>(), vec![110, 111, 112, 114]].concat()
    );
    assert_eq!(s.delivered, 14);
    assert_eq!(s.skipped, 1);
    assert_eq!(s.dropped_behind, 100 + 25);
    assert_eq!(
        s.delivered + s.skipped + s.dropped_behind,
        c.next_sequence()
    );
    // The table says the same.
    let info = ring.info();
    let w = info.consumers.iter().find(|x| x.name == "watcher").unwrap();
    assert!(!w.required);
    assert_eq!(w.stats, s);
    assert_eq!(w.next, 140);
}

/// Lapped in the middle of a batch: the stamps of eight events said "published" when the
/// batch began, and while the handler holds the first one the producer writes two rings'
/// worth over the rest. The copy of each slot is checked against its stamp afterwards (the
/// seqlock): the event already copied and checked is still handed over, the overwritten ones
/// are not, and the consumer jumps to the head and counts the rest as dropped.
#[test]
fn an_optional_consumer_overwritten_inside_a_batch_drops_the_rest_and_counts_it() {
    let ns = Namespace::new("lapped_batch");
    let config = RingConfig {
        capacity: 16,
        optional_slack: Some(0),
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let mut p = ring.producer().unwrap();
    for s in 0..8 {
        p.publish(&ev(s)).unwrap();
    }
    let mut seen = Vec::new();
    let n = c
        .poll_once(|e| {
            let o = decode(e.bytes()).expect("intact event");
            assert_eq!(o.seq, e.sequence());
            if seen.is_empty() {
                for s in 8..40 {
                    assert_eq!(p.try_publish(&ev(s)), Ok(s), "held by an optional consumer");
                }
            }
            seen.push(e.sequence());
        })
        .expect("poll");
    // Event 0 was being handled and event 1 copied and checked before the overwrite.
    assert_eq!(seen, vec![0, 1]);
    assert_eq!(n, 2);
    let s = c.stats();
    assert_eq!(c.next_sequence(), 40, "did not jump to the head");
    assert_eq!((s.delivered, s.skipped, s.dropped_behind), (2, 0, 38));
}

/// With a slack of 4, an optional consumer at most 4 events behind the slowest required
/// consumer holds the producer like a required one; further behind, it is lapped. (With no
/// slack, the same position would not hold the producer.)
#[test]
fn an_optional_consumer_within_the_slack_holds_the_producer_and_beyond_it_is_lapped() {
    let ns = Namespace::new("lapped_slack");
    let config = RingConfig {
        capacity: 16,
        optional_slack: Some(4),
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut req = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut opt = ring
        .consumer(ConsumerOptions::durable("w").optional().batch_cap(12))
        .unwrap();
    let mut p = ring.producer().unwrap();
    let (mut seen, mut req_seen) = (Vec::new(), Vec::new());
    for s in 0..16 {
        assert_eq!(p.try_publish(&ev(s)), Ok(s));
    }
    assert_eq!(poll(&mut req, &mut req_seen), 16);
    assert_eq!(poll(&mut opt, &mut seen), 12);
    // The required consumer is at 16, the optional one 4 behind it at 12: within the slack,
    // so the producer may not overwrite slot 12 (sequence 28) while the required one alone
    // would let it go on to 31.
    for s in 16..28 {
        assert_eq!(p.try_publish(&ev(s)), Ok(s));
    }
    assert_eq!(
        p.try_publish(&ev(28)),
        Err(TryPublishError::Full),
        "an optional consumer within the slack did not hold the producer"
    );
    assert_eq!(poll(&mut opt, &mut seen), 12);
    assert_eq!(poll(&mut opt, &mut seen), 4);
    assert_eq!(opt.next_sequence(), 28);
    // Now the required consumer reads on and the optional one does not: 16 behind it, out
    // of the slack, and lapped.
    let mut s = 28;
    while s < 60 {
        assert_eq!(
            p.try_publish(&ev(s)),
            Ok(s),
            "held by the optional consumer"
        );
        s += 1;
        poll(&mut req, &mut req_seen);
    }
    assert_eq!(poll(&mut opt, &mut seen), 0, "a lapped slot was delivered");
    assert_eq!(opt.next_sequence(), 60);
    let st = opt.stats();
    assert_eq!(seen, (0..28).collect::<Vec<_>>());
    assert_eq!((st.delivered, st.dropped_behind), (28, 32));
    assert_eq!(
        st.delivered + st.skipped + st.dropped_behind,
        opt.next_sequence()
    );
    assert_eq!(req_seen, (0..60).collect::<Vec<_>>());
}

fn lapped_across_processes(test: &str, slack: u64, size: &str) {
    let ns = Namespace::new(test);
    let config = RingConfig {
        capacity: 16,
        optional_slack: Some(slack),
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let count = 20_000;
    let mut c = testkit!(
        ns,
        "optional consumer",
        "consume --ns {ns} --ring r --optional --per-producer {count} --until-stdin \
         --size {size}"
    );
    assert_eq!(num(&c.expect_line("ready"), "start"), 0);
    let p = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring r --count {count} --size {size} --mode mixed \
         --tombstone-every 97"
    );
    let tombstones = num(line(&p.wait_ok(), "done"), "tombstones");
    // Only now is the end known: every event and every tombstone.
    c.send_line(&format!("until {}", count + tombstones));
    let out = c.wait_ok();
    let done = line(&out, "done");
    let (delivered, skipped, dropped) = (
        num(done, "delivered"),
        num(done, "skipped"),
        num(done, "dropped"),
    );
    let walked = num(done, "next") - num(done, "start");
    assert_eq!(walked, count + tombstones, "{done}");
    assert_eq!(delivered + skipped + dropped, walked, "{done}");
    assert_eq!(num(done, "stats_delivered"), delivered, "{done}");
    assert!(skipped <= tombstones, "{done}");
    assert_eq!(ring.head(), count + tombstones);
    // 20,000 events through 16 slots, the producer never waiting for this consumer, which
    // copies every event out: it was lapped (the identity above also holds when it never
    // is, so this is what shows the lapped path ran).
    assert!(dropped > 0, "never lapped: {done}");
}

#[test]
fn lapped_across_processes_without_slack_8_byte() {
    lapped_across_processes("lapped_procs_slack0_8", 0, "8");
}

#[test]
fn lapped_across_processes_with_slack_full_slot() {
    lapped_across_processes("lapped_procs_slack4_full", 4, "max");
}
