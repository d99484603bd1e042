//! A producer killed between claim and commit: after the unblock timeout the broker
//! tombstones its hole, consumers skip it (and count it), and nothing else is lost.

mod common;

use common::{num, ring, BrokerNs, Namespace};
use shmring::{Consumer, ConsumerOptions, Producer, Ring};

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

/// Ring `r` of the broker's namespace, its durable consumer "reader", and a producer that
/// published the events `0..published` (little-endian u64s).
fn reader_and_producer(ns: &Namespace, published: u64) -> (Ring, Consumer, Producer) {
    let handle = Ring::open(ns.name(), "r").expect("open");
    let consumer = handle
        .consumer(ConsumerOptions::durable("reader"))
        .expect("consumer");
    let mut producer = handle.producer().expect("producer");
    for v in 0..published {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    (handle, consumer, producer)
}

#[test]
fn a_producer_killed_holding_a_claim_is_repaired_after_the_timeout() {
    let ns = Namespace::new("claim");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"2s\"\nunblock_timeout = \"200ms\"\n",
    ));
    let (_ring, mut consumer, mut producer) = reader_and_producer(&ns, 5);
    let mut claimer = ns.role("claimer", &[("ROLE_RING", "r".to_owned())]);
    assert_eq!(claimer.expect("@claimed"), "5");
    for v in 5..10u64 {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    claimer.kill();

    // The consumer gets 0..5, then waits at the hole until the broker repairs it.
    let mut got = Vec::new();
    common::wait_until("the consumer to get 10 events past the hole", || {
        consumer
            .poll_once(|ev| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&ev.bytes()[..8]);
                got.push(u64::from_le_bytes(b));
            })
            .expect("poll");
        (got.len() >= 10).then_some(())
    });
    assert_eq!(
        got,
        (0..10).collect::<Vec<u64>>(),
        "nothing lost, nothing extra"
    );
    assert_eq!(
        consumer.stats().skipped,
        1,
        "the hole is skipped and counted"
    );
    assert_eq!(consumer.next_sequence(), 11);

    // The sweep that repaired read the consumer before the repair: wait for a later one.
    let v = ns.wait_status("the repair in the status", |v, _| {
        let h = &ring(v, "r")?["health"];
        let reader = common::consumer(v, "r", "reader")?;
        (num(h, "repaired_claims") == 1 && num(reader, "delivered") == 10).then(|| v.clone())
    });
    let r = ring(&v, "r").expect("r");
    assert_eq!(num(&r["health"], "tombstoned"), 1);
    let reader = common::consumer(&v, "r", "reader").expect("reader");
    assert_eq!((num(reader, "skipped"), num(reader, "delivered")), (1, 10));
    assert_eq!(
        r["producers"].as_array().map(Vec::len),
        Some(1),
        "the dead producer's entry is freed: {v:#}"
    );
}

/// Until the repair, `broker status` shows the dead producer's row with `alive` false and
/// `in_flight` at its hole, and the consumer waits at the hole; then the row goes.
#[test]
fn a_dead_producer_shows_not_alive_with_its_claim_in_flight_until_the_repair() {
    let ns = Namespace::new("alive");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"100ms\"\nunblock_timeout = \"1s\"\n",
    ));
    let (_ring, mut consumer, _producer) = reader_and_producer(&ns, 3);
    let mut claimer = ns.role("claimer", &[("ROLE_RING", "r".to_owned())]);
    assert_eq!(claimer.expect("@claimed"), "3");
    let pid = u64::from(claimer.pid());
    claimer.kill();
    let row = |v: &serde_json::Value| -> Option<serde_json::Value> {
        ring(v, "r")?["producers"]
            .as_array()?
            .iter()
            .find(|p| p["pid"].as_u64() == Some(pid))
            .cloned()
    };
    let dead = ns.wait_status("the dead producer's row", |v, _| {
        row(v).filter(|p| p["alive"] == false)
    });
    assert_eq!(dead["in_flight"].as_u64(), Some(3), "{dead:#}");
    while consumer.poll_once(|_| {}).expect("poll") > 0 {}
    assert_eq!(
        consumer.next_sequence(),
        3,
        "the consumer waits at the hole"
    );
    ns.wait_status("the repair to free the row", |v, _| {
        let h = &ring(v, "r")?["health"];
        (num(h, "repaired_claims") == 1 && row(v).is_none()).then_some(())
    });
}

/// A producer that died between announcing a claim and learning its sequence leaves a hole
/// nobody can name. The broker must wait the unblock timeout before it tombstones such a
/// hole, as for a named one: until then a live producer may still be about to record its
/// claim there. With an unblock timeout of an hour (3600 s), several sweeps after the death is seen
/// the hole is still there.
#[test]
fn an_unattributed_hole_waits_for_the_unblock_timeout() {
    let ns = Namespace::new("unattr");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"20ms\"\nunblock_timeout = \"3600s\"\n",
    ));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = shmring_testkit::raw::RawSegment::open(&handle);
    let mut producer = handle.producer().expect("producer");
    for v in 0..3u64 {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    let before = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    // Sequence 3 taken by a process that died before it knew it.
    let (pid, start) = shmring_testkit::fault::dead_process();
    raw.set_claim_word(4);
    raw.fabricate_dead_producer(1, pid, start, shmring_layout::IN_FLIGHT_CLAIMING, 0);
    let v = ns.wait_status("six more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= before + 6).then(|| v.clone())
    });
    let dead = ring(&v, "r").expect("r")["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
        .cloned();
    assert!(
        dead.is_some_and(|p| p["alive"] == false),
        "the dead producer's row is gone before the unblock timeout: {v:#}"
    );
    let h = &ring(&v, "r").expect("r")["health"];
    assert_eq!(
        (num(h, "repaired_claims"), num(h, "tombstoned")),
        (0, 0),
        "repaired before the unblock timeout: {v:#}"
    );
}

/// A publish stamps its event, then wakes parked consumers: a producer killed between the
/// two leaves an event that consumers parked at that moment would only find at their 50 ms
/// net. The broker wakes the consumer line once when it first sees a producer dead, and not
/// again on later sweeps: the line's word moves once, and a consumer parked on it wakes (a
/// futex wake, not its net: a word moved without one would count as a late wake-up). The
/// dead producer here holds no claim, so its entry is freed at that sweep; one that holds
/// a claim is woken for just the same, before its repair waits out the unblock timeout
/// (`a_dead_producer_holding_a_claim_is_woken_for_before_its_repair`).
#[test]
fn a_producer_seen_dead_wakes_the_consumer_line_once() {
    use shmring::{RingInfo, WaitStrategy};
    use shmring_testkit::raw::{Line, RawSegment};
    let ns = Namespace::new("deadwake");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"20ms\"\n",
    ));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = RawSegment::open(&handle);
    let mut producer = handle.producer().expect("producer");
    for v in 0..3u64 {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    let mut parked = handle
        .consumer(ConsumerOptions::anonymous().wait(WaitStrategy::Blocking))
        .expect("consumer");
    // Anonymous: it starts at the head (3), with nothing to read.
    assert_eq!(parked.next_sequence(), 3);
    let index = parked.index();
    // Parks until an event comes (a wake with nothing to read parks it again).
    let waiter = std::thread::spawn(move || parked.wait().map(|_| parked.stats()));
    common::wait_until("the consumer to park", || {
        (raw.waiters(Line::Consumer) == 1).then_some(())
    });
    let stats = |info: &RingInfo| {
        info.consumers
            .iter()
            .find(|c| c.index == index)
            .map(|c| c.stats)
            .expect("the parked consumer's row")
    };
    let before = stats(&handle.info());
    let sweeps = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    // Nothing else wakes this line meanwhile: nobody publishes.
    let word = raw.wake_word(Line::Consumer);
    let (pid, start) = shmring_testkit::fault::dead_process();
    raw.fabricate_dead_producer(1, pid, start, 0, 0);
    let v = ns.wait_status("five more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= sweeps + 5).then(|| v.clone())
    });
    assert_eq!(
        ring(&v, "r").expect("r")["producers"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "the dead producer's entry is freed: {v:#}"
    );
    assert_eq!(
        raw.wake_word(Line::Consumer).wrapping_sub(word),
        1,
        "one wake of the consumer line for one producer seen dead"
    );
    common::wait_until("the parked consumer to count its wake-up", || {
        (stats(&handle.info()).wakeups > before.wakeups).then_some(())
    });
    assert_eq!(
        stats(&handle.info()).wakeups - before.wakeups,
        1,
        "one wake-up"
    );
    // An event ends the wait; the handle's own counters say how each park ended (the
    // ring's rows do not carry late wake-ups).
    producer.publish(&3u64.to_le_bytes()).expect("publish");
    let after = waiter.join().expect("the waiter").expect("wait");
    assert_eq!(
        after.late_wakeups, 0,
        "woken by the futex wake, not by its net after the word moved: {after:?}"
    );
}

/// A dead producer holding a claim is woken for at the sweep that first sees it, long
/// before its repair (the unblock timeout is an hour here).
#[test]
fn a_dead_producer_holding_a_claim_is_woken_for_before_its_repair() {
    use shmring_testkit::raw::{Line, RawSegment};
    let ns = Namespace::new("deadwakeheld");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"20ms\"\nunblock_timeout = \"3600s\"\n",
    ));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = RawSegment::open(&handle);
    let mut producer = handle.producer().expect("producer");
    for v in 0..3u64 {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    let sweeps = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    let word = raw.wake_word(Line::Consumer);
    // Sequence 3 held by a producer that died inside its claim.
    let (pid, start) = shmring_testkit::fault::dead_process();
    raw.set_claim_word(4);
    raw.fabricate_dead_producer(1, pid, start, 3 + 1, 1);
    let v = ns.wait_status("five more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= sweeps + 5).then(|| v.clone())
    });
    let dead = ring(&v, "r").expect("r")["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .any(|p| p["pid"].as_u64() == Some(u64::from(pid)) && p["alive"] == false);
    assert!(dead, "the dead producer is seen, not repaired yet: {v:#}");
    assert_eq!(
        raw.wake_word(Line::Consumer).wrapping_sub(word),
        1,
        "one wake of the consumer line, before the repair"
    );
}

/// The mirror of a producer's death: a consumer commits its position, then wakes the
/// producers parked for room and the consumers parked behind it. One killed between the two
/// leaves them parked on room or a position they cannot see. The broker wakes both ring
/// lines once at the sweep that first sees a gating consumer dead (here a durable one under
/// the default policy, which keeps gating), and not again on later sweeps; and the dead
/// consumer's own entry line, where the consumers behind it park, unconditionally: one
/// killed inside that line's wake left nobody counted there.
#[test]
fn a_consumer_seen_dead_wakes_both_lines_once() {
    use shmring_layout::{consumer_flags, consumer_state, owned_word};
    use shmring_testkit::raw::{Line, RawSegment};
    let ns = Namespace::new("deadconswake");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"20ms\"\n",
    ));
    let handle = Ring::open(ns.name(), "r").expect("open");
    let raw = RawSegment::open(&handle);
    let sweeps = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    let words = || {
        (
            raw.wake_word(Line::Consumer),
            raw.wake_word(Line::Producer),
            raw.consumer_wake_word(0),
        )
    };
    let before = words();
    let (dead, _) = shmring_testkit::fault::dead_process();
    raw.fabricate_consumer(
        0,
        owned_word::pack(1, consumer_state::ACTIVE, dead),
        consumer_flags::REQUIRED | consumer_flags::DURABLE,
        "audit",
        0,
    );
    let v = ns.wait_status("five more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= sweeps + 5).then(|| v.clone())
    });
    let audit = common::consumer(&v, "r", "audit").expect("audit");
    assert_eq!(audit["state"], "DEAD", "{v:#}");
    let after = words();
    assert_eq!(
        (
            after.0.wrapping_sub(before.0),
            after.1.wrapping_sub(before.1),
            after.2.wrapping_sub(before.2)
        ),
        (1, 1, 1),
        "one wake of each line for one consumer seen dead"
    );
}

/// What that wake is for: a producer parked for room that a consumer freed just before it
/// died (it committed, and died before its wake) publishes on the broker's wake, not at its
/// park's 50 ms net. The consumer's entry is laid down as this process's, at 0 behind a full
/// ring; the producer parks for room; the entry's position moves on by one (the commit) and
/// its owner becomes a dead process, with no wake. Without the broker's wake the park ends
/// at the net with the wake line unmoved (`ProducerStats::net_wakeups`), every time. A sweep
/// later than the net would end it there too, or count its wake late (a loaded machine), so
/// each of three rings gets one try, and one park ended by a wake in time is enough.
#[test]
fn a_producer_parked_for_room_a_dead_consumer_freed_is_woken_by_the_broker() {
    use shmring_testkit::parked::{in_one_try, woken, ParkedProducer};
    let ns = Namespace::new("deadconsroom");
    let rings = ["r0", "r1", "r2"];
    let config: String = rings
        .iter()
        .map(|r| format!("[rings.{r}]\ncapacity = 64\nstall_threshold = \"20ms\"\n"))
        .collect();
    let _broker = ns.broker(Some(&config));
    let (dead, _) = shmring_testkit::fault::dead_process();
    // A wake after the net (a sweep late on a loaded machine) counts as late, and a park
    // that found the room before it slept counts no park: try again.
    in_one_try(
        &rings,
        "no park for room ended by a wake",
        |r| {
            let handle = Ring::open(ns.name(), r).expect("open");
            let raw = shmring_testkit::raw::RawSegment::open(&handle);
            let producer = ParkedProducer::behind_a_live_consumer(&handle, &raw, "audit");
            let v = ns.wait_status("a sweep with the consumer alive", |v, _| {
                common::consumer(v, r, "audit").map(|_| v.clone())
            });
            let audit = common::consumer(&v, r, "audit").expect("audit");
            assert_ne!(audit["state"], "DEAD", "{v:#}");
            ParkedProducer::commit_one_and_die(&raw, dead);
            producer.join()
        },
        woken,
    );
}

/// A consumer waiting at a hole has nothing to do: it stays HEALTHY however long the hole
/// lasts and however full the ring gets behind it (here the claims run a whole ring past
/// it, the last one held by a producer that died waiting for room). The hole shows on the
/// dead producers' rows, and the broker repairs it after the unblock timeout (an hour here).
#[test]
fn a_consumer_waiting_at_a_hole_stays_healthy_while_the_ring_fills_behind_it() {
    let ns = Namespace::new("holehealthy");
    let capacity = 16u64;
    let _broker = ns.broker(Some(&format!(
        "[rings.r]\ncapacity = {capacity}\nstall_threshold = \"20ms\"\nunblock_timeout = \"3600s\"\n"
    )));
    let (handle, mut consumer, mut producer) = reader_and_producer(&ns, 3);
    let raw = shmring_testkit::raw::RawSegment::open(&handle);
    assert_eq!(consumer.poll_once(|_| {}).expect("poll"), 3);
    // A stop and a start end the producer's lone claims (ARCHITECTURE.md, "Lone claims"):
    // its claims read the counter from here, as the fabricated claim words below need.
    handle.stop().expect("stop");
    handle.start().expect("start");
    // Sequence 3 held by a producer that died inside its claim; the live producer fills
    // the rest of the ring (4..=18, the last the wrap gate allows); sequence 19 held by a
    // producer that died waiting for room.
    let (pid, start) = shmring_testkit::fault::dead_process();
    raw.set_claim_word(4);
    raw.fabricate_dead_producer(1, pid, start, 3 + 1, 1);
    for v in 4..3 + capacity {
        producer.publish(&v.to_le_bytes()).expect("publish");
    }
    raw.set_claim_word(3 + capacity + 1);
    raw.fabricate_dead_producer(2, pid, start, 3 + capacity + 1, 1);
    assert_eq!(consumer.poll_once(|_| {}).expect("poll"), 0, "at the hole");

    // Many sweeps, each 10 ms apart at least: well past the 20 ms stall threshold.
    let before = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    let v = ns.wait_status("ten more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= before + 10).then(|| v.clone())
    });
    let reader = common::consumer(&v, "r", "reader").expect("reader");
    assert_eq!(
        reader["state"], "HEALTHY",
        "a consumer at a hole is not stalled: {v:#}"
    );
    assert_eq!(num(reader, "sequence"), 3, "{v:#}");
    let dead: Vec<u64> = ring(&v, "r").expect("r")["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .filter(|p| p["alive"] == false)
        .filter_map(|p| p["in_flight"].as_u64())
        .collect();
    assert_eq!(
        dead,
        vec![3, 3 + capacity],
        "the holes, on the dead producers' rows: {v:#}"
    );
}

/// The unblock clock lives in the segment: brokers restarted more often than the unblock
/// timeout still repair a hole once the timeout has passed since the first of them saw it
/// (none of them alone lives that long).
#[test]
fn brokers_restarted_faster_than_the_unblock_timeout_still_repair_the_hole() {
    let ns = Namespace::new("restarts");
    let unblock = std::time::Duration::from_secs(3);
    let config = "[rings.r]\ncapacity = 64\nstall_threshold = \"20ms\"\nunblock_timeout = \"3s\"\n";
    let mut broker = ns.broker(Some(config));
    let (handle, mut consumer, mut producer) = reader_and_producer(&ns, 3);
    let mut claimer = ns.role("claimer", &[("ROLE_RING", "r".to_owned())]);
    assert_eq!(claimer.expect("@claimed"), "3");
    // No broker can see the hole before this instant.
    let made = std::time::Instant::now();
    claimer.kill();
    producer.publish(&4u64.to_le_bytes()).expect("publish");

    let mut restarts = 0u32;
    let mut longest = std::time::Duration::ZERO;
    // The first sighting in the segment, once a broker has seen the hole.
    let mut first_seen = 0;
    let lived = loop {
        let born = std::time::Instant::now();
        // This broker sweeps a few times (it sees the hole), then it is killed.
        let first = ns.wait_status("a sweep of this broker", |v, _| {
            Some(num(&v["broker"], "sweeps"))
        });
        ns.wait_status("three more sweeps", |v, _| {
            (num(&v["broker"], "sweeps") >= first + 3).then_some(())
        });
        while consumer.poll_once(|_| {}).expect("poll") > 0 {}
        if consumer.stats().skipped > 0 {
            break born.elapsed();
        }
        let now_seen = handle.hole_seen_ns();
        assert_ne!(
            now_seen, 0,
            "a broker swept past the hole without noting it"
        );
        assert!(
            first_seen == 0 || now_seen == first_seen,
            "the first sighting moved from {first_seen} to {now_seen} across a restart"
        );
        first_seen = now_seen;
        longest = longest.max(born.elapsed());
        assert!(
            made.elapsed() < 10 * unblock,
            "the hole is not repaired {:?} after it was made, over {restarts} broker restarts \
             (each broker lived at most {longest:?})",
            made.elapsed()
        );
        broker.kill();
        broker = ns.broker(Some(config));
        restarts += 1;
    };
    assert!(
        made.elapsed() >= unblock,
        "repaired {:?} after the hole was made, before the unblock timeout",
        made.elapsed()
    );
    assert!(
        restarts >= 2 && lived.max(longest) < unblock,
        "the brokers must restart faster than the unblock timeout for this test to mean \
         anything: {restarts} restarts, the longest life {:?}",
        lived.max(longest)
    );
    assert_eq!(consumer.stats().skipped, 1, "the hole, tombstoned");
    assert_eq!(consumer.next_sequence(), 5);
    common::wait_until("the unblock clock cleared once no hole is left", || {
        (handle.hole_seen_ns() == 0).then_some(())
    });
    println!(
        "hole repaired {:?} after it was made, by the broker of restart {restarts} ({lived:?} \
         old); the longest-lived broker before it: {longest:?}",
        made.elapsed()
    );
}

/// A live process repairing a dead producer's claim (the entry REPAIRING by it, as a
/// producer attaching over its dead predecessor, or the bridge, leaves it while it works)
/// holds the hole. A sweep past the unblock timeout that cannot repair it must keep the
/// clock at its first sighting: cleared, the next sweep would start it again, and once the
/// repairer gave up or died the hole would wait one more timeout.
#[test]
fn a_hole_under_a_live_processs_repair_keeps_the_unblock_clock() {
    use shmring_layout::{owned_word, producer_state};
    use shmring_testkit::fault::{dead_process, Sleeper};
    use shmring_testkit::raw::RawSegment;

    let ns = Namespace::new("live_repair");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"20ms\"\nunblock_timeout = \"1s\"\n",
    ));
    let timeout_ns = 1_000_000_000;
    let (handle, mut consumer, producer) = reader_and_producer(&ns, 3);
    let raw = RawSegment::open(&handle);
    drop(producer);
    // Sequence 3, claimed by a producer that died; its entry taken for repair by a live
    // process (whose start time the entry does not hold yet).
    let repairer = Sleeper::spawn();
    let (pid, start) = dead_process();
    raw.set_claim_word(4);
    let dead = raw.fabricate_dead_producer(1, pid, start, 3 + 1, 1);
    raw.set_producer_word(
        1,
        owned_word::next(dead, producer_state::REPAIRING, repairer.pid()),
    );
    let first = common::wait_until("the broker to note the hole", || {
        let seen = handle.hole_seen_ns();
        (seen != 0).then_some(seen)
    });
    common::wait_until("twice the unblock timeout since the hole was seen", || {
        (shmring::boottime_ns() > first + 2 * timeout_ns).then_some(())
    });
    let now = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    ns.wait_status("three more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= now + 3).then_some(())
    });
    assert_eq!(
        handle.hole_seen_ns(),
        first,
        "the unblock clock was cleared or restarted while a live process held the hole"
    );
    while consumer.poll_once(|_| {}).expect("poll") > 0 {}
    assert_eq!(
        (consumer.next_sequence(), consumer.stats().skipped),
        (3, 0),
        "the hole is repaired only by its repairer while it lives"
    );

    // The repairer dies without finishing: the broker repairs the hole.
    drop(repairer);
    common::wait_until("the consumer past the hole", || {
        while consumer.poll_once(|_| {}).expect("poll") > 0 {}
        (consumer.next_sequence() == 4).then_some(())
    });
    assert_eq!(consumer.stats().skipped, 1, "the hole, tombstoned");
}
