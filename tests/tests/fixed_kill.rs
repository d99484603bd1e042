//! Fault injection on a ring of fixed-size events (`RingConfig::event_size`): its single
//! producer SIGKILLed between `claim_batch(n)` and `commit`, having written some of the
//! batch's events (none, some, all). The repair (`Ring::repair_dead_producer`) publishes
//! exactly those `n` sequences as tombstones (tomb words apart from the slots, then the
//! cursor): a required consumer skips exactly `n`, receives every other event, never a byte
//! of the uncommitted batch; an optional consumer never either; the next producer continues
//! after the batch (its sequences are never handed out again, since part of them may hold a
//! partial write) over several laps. The same on a ring of sized events
//! (`RingConfig::max_event_size`), whose slots carry a length word before the event.

use shmring::{ConsumerOptions, ProducerMode, Repair, Ring, RingConfig};
use shmring_testkit::poll::{first_u64, read_values_to};
use shmring_testkit::report::num;
use shmring_testkit::{testkit, Namespace};

const CAPACITY: u64 = 16;
/// What the killed process writes into the events it never commits (see the role).
const UNCOMMITTED: u64 = 999_999;

/// `sized`: a ring of sized events of up to 16 bytes (8-byte events in it), else one of
/// fixed-size 8-byte events.
fn case(ns: &Namespace, ring_name: &str, sized: bool, (before, n, written): (u64, u64, u64)) {
    let what = format!("batch of {n} after {before}, {written} written, sized {sized}");
    let ring = Ring::create(
        ns.name(),
        ring_name,
        &RingConfig {
            capacity: CAPACITY,
            producer_mode: ProducerMode::Single,
            event_size: (!sized).then_some(8),
            max_event_size: sized.then_some(16),
            ..RingConfig::default()
        },
    )
    .expect("create ring");
    let mut c = ring
        .consumer(ConsumerOptions::durable("c"))
        .expect("consumer");
    let mut optional = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .expect("optional consumer");
    let mut seen_optional = Vec::new();

    let mut victim = testkit!(
        ns,
        format!("claimer ({what})"),
        "claim-batch --ns {ns} --ring {ring_name} --before {before} --first 0 --n {n} \
         --written {written}"
    );
    victim.expect_line("ready");
    let mut got = Vec::new();
    read_values_to(&mut c, before, &mut got);
    let claimed = victim.expect_line("claimed");
    let first = num(&claimed, "first");
    assert_eq!(
        (first, num(&claimed, "n")),
        (before, n),
        "{what}: {claimed}"
    );
    assert_eq!(
        c.poll_once(|_| {}).expect("poll"),
        0,
        "{what}: the consumer waits at the held batch"
    );
    optional
        .poll_once(|ev| seen_optional.push(first_u64(ev.bytes())))
        .expect("optional poll");

    let pid = victim.pid();
    victim.kill();
    let info = ring.info();
    let dead = info
        .producers
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("{what}: no entry of the killed producer in {info:#?}"));
    assert_eq!(
        dead.stats.published, before,
        "{what}: derived from the cursor"
    );
    let repair = ring.repair_dead_producer(dead.index, dead.word);
    assert_eq!(
        repair,
        Repair {
            tombstoned: n,
            waiting: 0,
            held: false,
        },
        "{what}: the repair tombstones exactly the batch"
    );
    assert!(
        ring.info().producers.iter().all(|p| p.pid != pid),
        "{what}: the dead producer's entry is freed"
    );
    assert_eq!(ring.head(), before + n, "{what}");
    read_values_to(&mut c, before + n, &mut got);
    assert_eq!(
        got,
        (0..before).map(|s| (s, s)).collect::<Vec<_>>(),
        "{what}: every event before the batch, none of it"
    );
    assert_eq!(c.stats().skipped, n, "{what}: exactly the batch skipped");

    // The next producer continues after the batch, three laps through its slots.
    let mut live = ring.producer().expect("a new producer");
    let mut more = Vec::new();
    for i in 0..3 * CAPACITY {
        let seq = live.publish(&(2000 + i).to_le_bytes()).expect("publish");
        assert_eq!(seq, before + n + i, "{what}: no sequence handed out again");
        read_values_to(&mut c, seq + 1, &mut more);
        optional
            .poll_once(|ev| seen_optional.push(first_u64(ev.bytes())))
            .expect("optional poll");
    }
    assert_eq!(
        more,
        (0..3 * CAPACITY)
            .map(|i| (before + n + i, 2000 + i))
            .collect::<Vec<_>>(),
        "{what}: after the repair"
    );
    assert_eq!(c.stats().skipped, n, "{what}: no more skips");
    assert!(
        seen_optional.iter().all(|&v| v != UNCOMMITTED),
        "{what}: the optional consumer was handed an uncommitted event: {seen_optional:?}"
    );
    assert!(
        seen_optional.contains(&(2000 + 3 * CAPACITY - 1)),
        "{what}: the optional consumer reads on: {seen_optional:?}"
    );
}

#[test]
fn a_fixed_size_rings_producer_killed_inside_a_claim_batch_leaves_exactly_n_tombstones() {
    let ns = Namespace::new("fixed_kill");
    // (before, n, written): none, some or all written; the last two run across the end of
    // the event array and wait at the wrap gate for the consumer.
    let cases = [(3, 6, 2), (3, 8, 8), (3, 1, 0), (13, 6, 3), (15, 8, 0)];
    for (i, c) in cases.into_iter().enumerate() {
        case(&ns, &format!("r{i}"), false, c);
    }
}

#[test]
fn a_sized_rings_producer_killed_inside_a_claim_batch_leaves_exactly_n_tombstones() {
    let ns = Namespace::new("sized_kill");
    let cases = [(3, 6, 2), (3, 1, 0), (15, 8, 5)];
    for (i, c) in cases.into_iter().enumerate() {
        case(&ns, &format!("r{i}"), true, c);
    }
}
