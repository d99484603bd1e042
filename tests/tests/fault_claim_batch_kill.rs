//! Fault injection: a producer process SIGKILLed between `Producer::claim_batch(n)` and
//! `ClaimBatch::commit`, having written some of the batch's slots (none, some, all). The
//! repair a broker runs for a dead producer (`Ring::repair_dead_producer`) turns exactly
//! those `n` sequences into tombstones: the consumer skips exactly `n` (counted as skipped),
//! receives every other event (before the batch, and those another producer published
//! behind it while it was held), never a slot of the uncommitted batch, and the ring keeps
//! flowing for the other producer over several laps.

use shmring::{ConsumerOptions, Repair, Ring, RingConfig};
use shmring_testkit::poll::read_values_to;
use shmring_testkit::report::num;
use shmring_testkit::{testkit, Namespace};

const CAPACITY: u64 = 16;
/// What the killed process writes into the slots it never commits (see the role).
const UNCOMMITTED: u64 = 999_999;
/// Events the live producer publishes while the batch is held (behind the hole).
const BEHIND: u64 = 4;

/// The killed process publishes `before` events, then claims `n` and writes `written` of
/// them.
fn case(ns: &Namespace, ring_name: &str, before: u64, n: u64, written: u64) {
    let what = format!("batch of {n} after {before}, {written} written");
    let ring = Ring::create(
        ns.name(),
        ring_name,
        &RingConfig {
            capacity: CAPACITY,
            slot_size: 64,
            ..RingConfig::default()
        },
    )
    .expect("create ring");
    let mut c = ring
        .consumer(ConsumerOptions::durable("c"))
        .expect("consumer");
    let mut live = ring.producer().expect("live producer");

    let mut victim = testkit!(
        ns,
        format!("claimer ({what})"),
        "claim-batch --ns {ns} --ring {ring_name} --before {before} --first 0 --n {n} \
         --written {written}"
    );
    victim.expect_line("ready");
    // Read what precedes the batch (the batch may wait at the wrap gate for it).
    let mut got = Vec::new();
    read_values_to(&mut c, before, &mut got);
    let claimed = victim.expect_line("claimed");
    let first = num(&claimed, "first");
    assert_eq!(
        (first, num(&claimed, "n")),
        (before, n),
        "{what}: {claimed}"
    );

    // Behind the held batch: published, but not deliverable past the hole.
    for i in 0..BEHIND {
        live.publish(&(1000 + i).to_le_bytes()).expect("publish");
    }
    assert_eq!(
        c.poll_once(|_| {}).expect("poll"),
        0,
        "{what}: the consumer waits at the held batch"
    );
    assert_eq!(
        got,
        (0..before).map(|s| (s, s)).collect::<Vec<_>>(),
        "{what}: before the kill the consumer gets what precedes the batch"
    );

    let pid = victim.pid();
    victim.kill();
    let info = ring.info();
    let dead = info
        .producers
        .iter()
        .find(|p| p.pid == pid)
        .unwrap_or_else(|| panic!("{what}: no entry of the killed producer in {info:#?}"));
    assert_eq!(
        dead.in_flight,
        Some(first),
        "{what}: its entry records the batch"
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

    let head = ring.head();
    assert_eq!(head, before + n + BEHIND, "{what}");
    read_values_to(&mut c, head, &mut got);
    let behind: Vec<(u64, u64)> = (0..BEHIND).map(|i| (first + n + i, 1000 + i)).collect();
    assert_eq!(
        &got[before as usize..],
        &behind[..],
        "{what}: every event behind the batch, none of the batch"
    );
    assert_eq!(c.stats().skipped, n, "{what}: exactly the batch skipped");
    assert!(
        got.iter().all(|&(_, v)| v != UNCOMMITTED),
        "{what}: an uncommitted slot was delivered: {got:?}"
    );

    // The ring keeps flowing: three laps through the slots the batch held.
    let mut more = Vec::new();
    for i in 0..3 * CAPACITY {
        let seq = live.publish(&(2000 + i).to_le_bytes()).expect("publish");
        read_values_to(&mut c, seq + 1, &mut more);
    }
    assert_eq!(
        more,
        (0..3 * CAPACITY)
            .map(|i| (head + i, 2000 + i))
            .collect::<Vec<_>>(),
        "{what}: after the repair"
    );
    assert_eq!(c.stats().skipped, n, "{what}: no more skips");
    // A new producer takes the freed entry and publishes too.
    let mut again = ring.producer().expect("a new producer");
    let seq = again.publish(&7u64.to_le_bytes()).expect("publish");
    let mut last = Vec::new();
    read_values_to(&mut c, seq + 1, &mut last);
    assert_eq!(last, vec![(seq, 7)], "{what}");
}

#[test]
fn a_producer_killed_inside_a_claim_batch_leaves_exactly_n_counted_tombstones() {
    let ns = Namespace::new("fault_claim_batch_kill");
    // (before, n, written): some, all or none of the slots written; the last two batches
    // run across the end of the slot array, and wait at the wrap gate for the consumer.
    let cases = [(3, 6, 2), (3, 8, 8), (3, 1, 0), (13, 6, 3), (15, 8, 0)];
    for (i, (before, n, written)) in cases.into_iter().enumerate() {
        case(&ns, &format!("r{i}"), before, n, written);
    }
}
