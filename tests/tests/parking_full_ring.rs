//! A producer blocked on a full ring parks, and resumes when the consumer moves.
//!
//! An 8-slot ring; a consumer process attaches and then reads nothing until the parent
//! tells it to (`consume --hold`, blocked on its stdin); a producer process publishes 100
//! events with `publish`. After 8 the ring is full: the producer spins briefly, yields,
//! then parks on the ring's producer wake line. Once the ring's table shows it parked at
//! least once, the parent measures the producer process's CPU time over an idle half
//! second (at most 10 ms: a few 50 ms nets and scheduler noise, where a spinning producer
//! would use most of it), checks nothing moved meanwhile, then lets the consumer go. The
//! consumer's commits wake the producer, which finishes; every event arrives in order. The
//! producer's parks ended by those wakes: none by a timeout after the wake line moved (a
//! wake sent and never delivered) and none by the net with room already there (a wake
//! lost).

use std::time::Duration;

use shmring::{Ring, RingConfig};
use shmring_testkit::procfs::cpu_over;
use shmring_testkit::report::{line, num};
use shmring_testkit::{eventually, testkit, Namespace};

const EVENTS: u64 = 100;
const CAPACITY: u64 = 8;
const WINDOW: Duration = Duration::from_millis(500);
const PARKED_MAX: Duration = Duration::from_millis(10);

#[test]
fn a_producer_on_a_full_ring_parks_and_resumes() {
    let ns = Namespace::new("full_ring");
    let config = RingConfig {
        capacity: CAPACITY,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut consumer = testkit!(
        ns,
        "consumer",
        "consume --ns {ns} --ring r --per-producer {EVENTS} --wait block --hold"
    );
    consumer.expect_line("ready");
    let mut producer = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring r --count {EVENTS} --mode publish"
    );
    producer.expect_line("ready");

    eventually("the producer to park on the full ring", || {
        ring.info()
            .producers
            .first()
            .is_some_and(|p| p.stats.parks > 0)
    });
    let used = cpu_over(producer.pid(), WINDOW);
    eprintln!("parked producer: {used:?} of CPU in {WINDOW:?}");
    let info = ring.info();
    assert!(
        used < PARKED_MAX,
        "a producer waiting on a full ring used {used:?} of CPU in {WINDOW:?}: {info:#?}"
    );
    // Nothing moved: the consumer holds, the producer published a full ring and waits
    // with its next claim taken.
    assert_eq!(info.consumers.len(), 1, "{info:#?}");
    assert_eq!(info.consumers[0].next, 0, "{info:#?}");
    assert_eq!(info.producers.len(), 1, "{info:#?}");
    assert_eq!(info.producers[0].stats.published, CAPACITY, "{info:#?}");
    assert_eq!(info.producers[0].in_flight, Some(CAPACITY), "{info:#?}");
    // Alone on the ring, the producer claims alone, and the position of a lone producer,
    // as of a single one, is before its last claim's unstamped slots (ARCHITECTURE.md,
    // "Lone claims").
    assert!(info.producers[0].lone, "{info:#?}");
    assert_eq!(info.head, CAPACITY, "{info:#?}");

    consumer.send_line("resume");
    let out = producer.wait_ok();
    let done = line(&out, "done");
    assert_eq!(num(done, "published"), EVENTS, "{done}");
    assert!(num(done, "parks") > 0, "{done}");
    assert_eq!(
        num(done, "late_wakeups"),
        0,
        "the consumer's wakes did not reach the parked producer: {done}"
    );
    assert_eq!(num(done, "net_wakeups"), 0, "{done}");
    let out = consumer.wait_ok();
    let done = line(&out, "done");
    // The child checked that the events came in order, intact, and saw the last one.
    assert_eq!(num(done, "delivered"), EVENTS, "{done}");
    assert_eq!(num(done, "next"), EVENTS, "{done}");
    assert_eq!(num(done, "net_wakeups"), 0, "{done}");
    assert_eq!(ring.head(), EVENTS);
}
