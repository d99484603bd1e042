//! Rings of sized events (`RingConfig::max_event_size`): a fixed-size ring's cursor and
//! tombstones, each slot starting with its event's length word. Every publish form, the
//! claim guards, required and optional consumers, recall, read-ahead and dead letters carry
//! each event's own length; and what such a ring refuses.

mod common;

use std::sync::{Arc, Mutex};

use shmring::{
    ConsumerOptions, ErrorPolicy, LayoutError, OpenError, PollError, ProducerMode, PublishError,
    Recall, Ring, RingConfig, TryPublishError,
};

use shmring_testkit::Namespace;

/// The largest event of the rings here.
const MAX: usize = 24;

fn config(capacity: u64) -> RingConfig {
    RingConfig {
        capacity,
        producer_mode: ProducerMode::Single,
        max_event_size: Some(MAX as u32),
        max_consumers: 4,
        ..RingConfig::default()
    }
}

fn ring(ns: &Namespace, capacity: u64) -> Ring {
    Ring::create(ns.name(), "r", &config(capacity)).expect("create a ring of sized events")
}

/// Event `k`: `len` bytes, each its index plus `k`, so that a byte of another event, or a
/// length of another event, shows.
fn event(k: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k as u8).wrapping_add(i as u8)).collect()
}

/// The lengths published in turn: empty, short, a word, between words, the largest.
const LENGTHS: [usize; 7] = [0, 1, 7, 8, 9, 23, MAX];

/// Every event published so far, as (sequence, bytes), in `poll_once` steps.
fn drain(c: &mut shmring::Consumer) -> Vec<(u64, Vec<u8>)> {
    let mut seen = Vec::new();
    while c
        .poll_once(|ev| seen.push((ev.sequence(), ev.bytes().to_vec())))
        .expect("poll")
        > 0
    {}
    seen
}

#[test]
fn events_of_any_length_up_to_the_bound_arrive_whole_over_many_laps() {
    let ns = Namespace::concurrent("sized-basic");
    let ring = ring(&ns, 8);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut optional = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let mut p = ring.producer().unwrap();
    assert_eq!(p.max_payload(), MAX);
    assert_eq!(
        p.publish(&[1u8; MAX + 1]),
        Err(PublishError::TooLarge {
            len: MAX + 1,
            max: MAX
        })
    );
    let mut want = Vec::new();
    let mut seen = Vec::new();
    let mut seen_optional = Vec::new();
    // Five laps of the ring, each publish form in turn, the consumers reading every 4 events
    // so that the producer waits for the required one and a slot of every lap carries a
    // length other than the lap before.
    for k in 0..40u64 {
        let ev = event(k, LENGTHS[k as usize % LENGTHS.len()]);
        let seq = match k % 4 {
            0 => p.publish(&ev).unwrap(),
            1 => p.try_publish(&ev).unwrap(),
            2 => p
                .publish_timeout(&ev, std::time::Duration::from_secs(60))
                .unwrap(),
            _ => p.publisher(|w| w.publish(&ev)).unwrap(),
        };
        assert_eq!(seq, k);
        want.push((k, ev));
        if k % 4 == 3 {
            seen.extend(drain(&mut c));
            seen_optional.extend(drain(&mut optional));
        }
    }
    assert_eq!(seen, want, "the required consumer, in place");
    assert_eq!(seen_optional, want, "the optional consumer, copied");
    assert_eq!(c.stats().delivered, 40);
    assert_eq!(p.stats().published, 40);
    // The ring is full of the last lap: a try refuses without spending a sequence.
    for k in 40..48u64 {
        p.publish(&event(k, 3)).unwrap();
    }
    assert_eq!(
        p.try_publish(&event(48, 3)),
        Err(TryPublishError::Full),
        "the required consumer holds the ring"
    );
    assert_eq!(drain(&mut c).len(), 8);
    assert_eq!(p.try_publish(&event(48, 3)), Ok(48));
}

#[test]
fn a_batch_carries_each_event_s_length() {
    let ns = Namespace::concurrent("sized-batch");
    let ring = ring(&ns, 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let events: Vec<Vec<u8>> = LENGTHS
        .iter()
        .enumerate()
        .map(|(k, &len)| event(k as u64, len))
        .collect();
    assert_eq!(p.publish_batch(&events), Ok(0));
    let too_long = vec![event(0, 1), event(1, MAX + 1)];
    assert_eq!(
        p.publish_batch(&too_long),
        Err(PublishError::TooLarge {
            len: MAX + 1,
            max: MAX
        }),
        "nothing of the batch is published"
    );
    assert_eq!(p.publish_batch_values(&[7u64, 8]), Ok(7));
    let mut want: Vec<(u64, Vec<u8>)> = events
        .into_iter()
        .enumerate()
        .map(|(k, e)| (k as u64, e))
        .collect();
    want.push((7, 7u64.to_ne_bytes().to_vec()));
    want.push((8, 8u64.to_ne_bytes().to_vec()));
    assert_eq!(drain(&mut c), want);
}

#[test]
fn claims_set_their_length_and_a_dropped_one_is_a_counted_tombstone() {
    let ns = Namespace::concurrent("sized-claims");
    let ring = ring(&ns, 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    // A lap of full-length events first: every claim below reuses a slot whose length word
    // says 24, so an event whose length was not set would show it.
    for _ in 0..16 {
        p.publish(&[0xaa; MAX]).unwrap();
    }
    assert_eq!(drain(&mut c).len(), 16);
    let mut claim = p.claim().unwrap();
    assert_eq!(claim.payload_mut().len(), MAX, "the slot's payload area");
    claim.payload_mut()[..5].copy_from_slice(b"hello");
    claim.set_len(5).unwrap();
    assert_eq!(
        claim.set_len(MAX + 1),
        Err(PublishError::TooLarge {
            len: MAX + 1,
            max: MAX
        })
    );
    assert_eq!(claim.commit(), 16);
    // Committed without a write: an empty event.
    assert_eq!(p.claim().unwrap().commit(), 17);
    let mut dropped = p.claim().unwrap();
    dropped.write(b"never").unwrap();
    drop(dropped);
    let mut batch = p.claim_batch(3).unwrap();
    batch.write(0, b"a").unwrap();
    batch.write(2, &[3u8; MAX]).unwrap();
    assert_eq!(batch.commit(), 19, "slot 1 left empty");
    let mut batch = p.claim_batch(2).unwrap();
    batch.write(0, b"never").unwrap();
    drop(batch);
    std::mem::forget(p.claim().unwrap());
    assert_eq!(
        p.publish(b"last"),
        Ok(25),
        "the leaked claim became a tombstone"
    );
    assert_eq!(
        drain(&mut c),
        vec![
            (16, b"hello".to_vec()),
            (17, vec![]),
            (19, b"a".to_vec()),
            (20, vec![]),
            (21, vec![3u8; MAX]),
            (25, b"last".to_vec()),
        ],
        "never a dropped claim's bytes, never an earlier event's length"
    );
    assert_eq!(c.stats().skipped, 4);
    let mut buf = Vec::new();
    assert_eq!(ring.recall(18, &mut buf), Recall::Tombstone);
    assert_eq!(ring.recall(16, &mut buf), Recall::Event);
    assert_eq!(buf, b"hello");
    assert_eq!(ring.recall(17, &mut buf), Recall::Event);
    assert!(buf.is_empty());
}

#[test]
fn an_optional_consumer_that_is_lapped_counts_the_gap_and_recall_says_gone() {
    let ns = Namespace::concurrent("sized-optional");
    let ring = Ring::create(
        ns.name(),
        "r",
        &RingConfig {
            optional_slack: Some(0),
            ..config(4)
        },
    )
    .unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let mut p = ring.producer().unwrap();
    for k in 0..10u64 {
        p.publish(&event(k, k as usize)).unwrap();
    }
    assert_eq!(c.poll_once(|_| {}).unwrap(), 0);
    assert_eq!(c.next_sequence(), 10);
    assert_eq!(c.stats().dropped_behind, 10);
    let mut buf = Vec::new();
    assert_eq!(ring.recall(2, &mut buf), Recall::Gone);
    assert!(buf.is_empty());
    assert_eq!(ring.recall(9, &mut buf), Recall::Event);
    assert_eq!(buf, event(9, 9));
    for k in 10..13u64 {
        p.publish(&event(k, 20)).unwrap();
    }
    assert_eq!(
        drain(&mut c),
        (10..13).map(|k| (k, event(k, 20))).collect::<Vec<_>>()
    );
}

#[test]
fn read_ahead_and_dead_letters_carry_the_event_s_length() {
    let ns = Namespace::concurrent("sized-lease");
    let r = ring(&ns, 8);
    let mut c = r.consumer(ConsumerOptions::durable("fwd")).unwrap();
    let mut p = r.producer().unwrap();
    p.publish_batch(&[&b"one"[..], b"", b"three33"]).unwrap();
    let mut sent = Vec::new();
    let end = c
        .read_ahead(0, 16, |ev| sent.push(ev.bytes().to_vec()))
        .unwrap();
    assert_eq!(end, 3);
    assert_eq!(sent, vec![b"one".to_vec(), vec![], b"three33".to_vec()]);
    c.commit_to(end).unwrap();

    for required in [true, false] {
        let ns = Namespace::concurrent("sized-policy");
        let ring = ring(&ns, 8);
        let mut opts = ConsumerOptions::anonymous().on_error(ErrorPolicy::Skip { attempts: 2 });
        if !required {
            opts = opts.optional();
        }
        let mut c = ring.consumer(opts).unwrap();
        let letters = Arc::new(Mutex::new(Vec::new()));
        let l = letters.clone();
        c.on_dead_letter(move |d| l.lock().unwrap().push((d.sequence, d.payload.to_vec())));
        let mut p = ring.producer().unwrap();
        p.publish_batch(&[&b"ok"[..], b"unlucky13", b"fine"])
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..4 {
            c.poll_once_fallible(|ev| {
                if ev.bytes() == b"unlucky13" {
                    return Err("unlucky");
                }
                got.push(ev.bytes().to_vec());
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(
            got,
            vec![b"ok".to_vec(), b"fine".to_vec()],
            "required {required}"
        );
        assert_eq!(
            *letters.lock().unwrap(),
            vec![(1, b"unlucky13".to_vec())],
            "required {required}"
        );
    }
}

#[test]
fn what_a_ring_of_sized_events_refuses() {
    let ns = Namespace::concurrent("sized-refuse");
    let both = RingConfig {
        event_size: Some(8),
        ..config(8)
    };
    assert!(matches!(
        Ring::create(ns.name(), "b", &both),
        Err(OpenError::TwoEventSizes {
            event_size: 8,
            max_event_size: 24
        })
    ));
    for bad in [0, 4, 12, u32::MAX, shmring_layout::MAX_SLOT_SIZE] {
        let odd = RingConfig {
            max_event_size: Some(bad),
            ..config(8)
        };
        assert!(
            matches!(
                Ring::create(ns.name(), "o", &odd),
                Err(OpenError::Config(LayoutError::BadMaxEventSize(n))) if n == bad
            ),
            "max event size {bad}"
        );
    }
    common::cursor_ring_refusals(ns.name(), &config(8));
    let ring = Ring::create(ns.name(), "r", &config(8)).unwrap();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    assert_eq!(c.poll_runs(|_, _| {}), Err(PollError::NotFixedSize));
}

/// The maintenance sequence of the claim line's issue on a ring of sized events: a consumer
/// attached while the ring is stopped gets the first event of the next run.
#[test]
fn a_consumer_attached_while_stopped_gets_the_first_event_of_the_next_run() {
    let ns = Namespace::concurrent("sized-stop");
    let ring = ring(&ns, 8);
    let mut p = ring.producer().unwrap();
    p.publish(b"a").unwrap();
    assert_eq!(ring.stop(), Ok(1));
    assert_eq!(p.publish(b"x"), Err(PublishError::Closed));
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    ring.start().unwrap();
    assert_eq!(p.publish(b"bb"), Ok(1));
    assert_eq!(drain(&mut c), vec![(1, b"bb".to_vec())]);
}

/// An optional consumer copying while the producer laps it: every event it delivers is the
/// one of its sequence, at that event's own length (the length word and the payload are
/// checked with the copy), however the two threads interleave.
#[test]
fn an_optional_reader_racing_the_producer_never_delivers_a_torn_event() {
    const EVENTS: u64 = 2_000_000;
    let ns = Namespace::concurrent("sized-race");
    let ring = Ring::create(
        ns.name(),
        "r",
        &RingConfig {
            optional_slack: Some(0),
            ..config(8)
        },
    )
    .unwrap();
    let mut c = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let mut p = ring.producer().unwrap();
    let len_of = |k: u64| (k.wrapping_mul(7) % (MAX as u64 + 1)) as usize;
    // The reader's polls so far: every 4096 events the producer waits for one more, so
    // that the reader copies while the producer laps it however the threads are scheduled.
    let polls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen_polls = polls.clone();
    let producer = std::thread::spawn(move || {
        let mut waited_for = 0;
        for k in 0..EVENTS {
            p.publish(&event(k, len_of(k))).unwrap();
            if k % 4096 == 0 {
                let deadline = std::time::Instant::now() + shmring_testkit::WAIT;
                // Relaxed: a progress count only; the ring's own words order the events.
                while seen_polls.load(std::sync::atomic::Ordering::Relaxed) == waited_for {
                    assert!(std::time::Instant::now() < deadline, "the reader stopped");
                    std::thread::yield_now();
                }
                waited_for = seen_polls.load(std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    let (mut delivered, mut torn) = (0u64, Vec::new());
    let mut last = None;
    loop {
        let finished = producer.is_finished();
        c.poll_once(|ev| {
            delivered += 1;
            let k = ev.sequence();
            if ev.bytes() != event(k, len_of(k)).as_slice() && torn.len() < 5 {
                torn.push((k, ev.bytes().to_vec()));
            }
            last = Some(k);
        })
        .unwrap();
        polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if finished && c.next_sequence() == EVENTS {
            break;
        }
    }
    producer.join().unwrap();
    assert_eq!(
        torn,
        vec![],
        "events delivered with another event's bytes or length"
    );
    assert!(last.is_some(), "nothing delivered");
    let stats = c.stats();
    assert_eq!(
        delivered + stats.dropped_behind,
        EVENTS,
        "every sequence delivered or counted"
    );
    assert!(
        stats.dropped_behind > 0,
        "the producer never lapped the reader"
    );
    println!(
        "{delivered} delivered, {} dropped behind",
        stats.dropped_behind
    );
}

/// A length word written past the bound by another process (shared memory is anyone's to
/// write) is clamped to the slot and counted, in place and copied: never a read past the
/// slot, and the next events arrive as published.
#[test]
fn a_corrupt_length_word_is_clamped_to_the_slot_and_counted() {
    let ns = Namespace::concurrent("sized-corrupt-len");
    let ring = ring(&ns, 8);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut copier = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let mut p = ring.producer().unwrap();
    p.publish(b"short").unwrap();
    p.publish(b"next").unwrap();
    let raw = shmring_testkit::raw::RawSegment::open(&ring);
    let slot = raw.geometry().slot_offset(0);
    for corrupt in [MAX as u64 + 1, u64::from(u32::MAX), u64::MAX] {
        raw.write_u64(slot, corrupt);
        let mut buf = Vec::new();
        assert_eq!(ring.recall(0, &mut buf), Recall::Event, "length {corrupt}");
        assert_eq!(
            buf.len(),
            MAX,
            "length {corrupt}: recall clamps to the slot"
        );
    }
    for (c, how) in [(&mut c, "in place"), (&mut copier, "copied")] {
        let seen = drain(c);
        assert_eq!(seen.len(), 2, "{how}");
        assert_eq!(seen[0].1.len(), MAX, "{how}: the whole slot, no more");
        assert_eq!(&seen[0].1[..5], b"short", "{how}");
        assert_eq!(seen[1], (1, b"next".to_vec()), "{how}");
        assert_eq!(c.stats().clamped, 1, "{how}");
    }
}

/// A batch event whose `AsRef` gives one length to the batch's check and a longer one to
/// its write (a type that answers differently each call): the event is cut at its slot's
/// end, written at its own sequence, and no other event is touched.
#[test]
fn a_batch_event_whose_bytes_grow_is_cut_at_its_own_slot() {
    use shmring_testkit::payload::Fickle;
    let ns = Namespace::concurrent("sized-fickle");
    let ring = ring(&ns, 16);
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let events = [
        Fickle::new(&[7; 4], &[7; 40]),
        Fickle::new(&[9; 4], &[9; 40]),
    ];
    assert_eq!(p.publish_batch(&events), Ok(0));
    p.publish(b"after").unwrap();
    assert_eq!(
        drain(&mut c),
        vec![(0, vec![7; MAX]), (1, vec![9; MAX]), (2, b"after".to_vec())]
    );
    // Cut when written, not clamped when read: each length word says the slot's payload.
    assert_eq!(c.stats().clamped, 0);
}

/// Dependencies and parking on a ring of sized events: a consumer after another reads only
/// what that one finished, at each event's length; a blocking consumer parked on the ring is
/// woken by the next publish.
#[test]
fn a_consumer_after_another_and_a_parked_one_get_each_event_at_its_length() {
    let ns = Namespace::concurrent("sized-after");
    let ring = ring(&ns, 8);
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let mut b = ring
        .consumer(ConsumerOptions::durable("b").after(["a"]))
        .unwrap();
    let parked = shmring_testkit::ParkedConsumer::spawn(
        ring.consumer(ConsumerOptions::anonymous().wait(shmring::WaitStrategy::Blocking))
            .unwrap(),
    );
    let mut p = ring.producer().unwrap();
    p.publish_batch(&[&b"one"[..], b"twenty-four bytes, whole"])
        .unwrap();
    assert_eq!(drain(&mut b), vec![], "a has read nothing");
    assert_eq!(a.poll_once(|_| {}).unwrap(), 2);
    assert_eq!(
        drain(&mut b),
        vec![
            (0, b"one".to_vec()),
            (1, b"twenty-four bytes, whole".to_vec())
        ]
    );
    parked.wait_parked_at(&ring, 2);
    p.publish(&7u64.to_le_bytes()).unwrap();
    parked.wait_parked_at(&ring, 3);
    let (_, seen, _) = parked.finish(&ring);
    let first = shmring_testkit::poll::first_u64;
    assert_eq!(
        seen,
        vec![
            (0, first(b"one")),
            (1, first(b"twenty-four bytes, whole")),
            (2, 7)
        ]
    );
}

/// A sized ring's slot (its length word and the largest event) is rounded up to a power of
/// two below a cache line and to whole lines above, so that no two slots share a line; its
/// events get the whole slot.
#[test]
fn slots_are_rounded_to_a_power_of_two_or_whole_lines() {
    // Whole lines, not a power of two, above a line; the largest slot the layout takes.
    for (asked, slot) in [
        (264, 320),
        (312, 320),
        (
            shmring_layout::MAX_SLOT_SIZE - 8,
            shmring_layout::MAX_SLOT_SIZE,
        ),
    ] {
        let config = RingConfig {
            max_event_size: Some(asked),
            ..config(8)
        };
        assert_eq!(config.geometry().unwrap().slot_size, slot, "bound {asked}");
    }
    let ns = Namespace::concurrent("sized-round");
    for (asked, slot) in [
        (8, 16),
        (16, 32),
        (24, 32),
        (40, 64),
        (56, 64),
        (64, 128),
        (120, 128),
        (200, 256),
    ] {
        let config = RingConfig {
            max_event_size: Some(asked),
            ..config(8)
        };
        let geo = config.geometry().unwrap();
        assert_eq!(geo.slot_size, slot, "bound {asked}");
        let ring = Ring::create(ns.name(), &format!("r{asked}"), &config).unwrap();
        let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
        let mut p = ring.producer().unwrap();
        let max = slot as usize - 8;
        assert_eq!(p.max_payload(), max, "bound {asked}");
        p.publish(&event(1, max)).unwrap();
        assert_eq!(
            p.publish(&event(2, max + 1)),
            Err(PublishError::TooLarge { len: max + 1, max })
        );
        assert_eq!(drain(&mut c), vec![(0, event(1, max))], "bound {asked}");
    }
}
