//! Consumer dependencies across processes: an upstream consumer process SIGKILLed in the
//! middle of a batch holds its downstream process at what it committed, and once it
//! re-attaches (durable) every event reaches the downstream exactly once.
//!
//! The upstream `up` blocks inside the handler of its 100th event (`--hang-after`), so that
//! batch is handed over but never committed, and is then SIGKILLed. The downstream `down`
//! (`consume --after up`, parked between batches) checks inside its handler, for every
//! event, that `up`'s committed position in the ring's table is already past it, and its
//! order check requires every event exactly once, in order. After the kill the parent waits
//! (bounded) until `down` has caught up with `up`'s commit and checks it is exactly there,
//! then restarts `up` under its name; `down` must then finish with every event.

use shmring::{Ring, RingConfig};
use shmring_testkit::report::{line, num};
use shmring_testkit::{testkit, Namespace};

const TOTAL: u64 = 600;
const BATCH: u64 = 16;
const HANG_AFTER: u64 = 100;

fn position(ring: &Ring, name: &str) -> Option<u64> {
    ring.info()
        .consumers
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.next)
}

#[test]
fn a_killed_upstream_holds_its_downstream_and_after_its_restart_every_event_arrives_once() {
    let ns = Namespace::new("graph_kill");
    let config = RingConfig {
        capacity: 1024,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");

    let mut up = testkit!(
        ns,
        "upstream, first incarnation",
        "consume --ns {ns} --ring r --name up --per-producer {TOTAL} --batch-cap {BATCH} \
         --wait block --hang-after {HANG_AFTER}"
    );
    up.expect_line("ready");
    let mut down = testkit!(
        ns,
        "downstream",
        "consume --ns {ns} --ring r --name down --after up --per-producer {TOTAL} \
         --batch-cap {BATCH} --wait block"
    );
    down.expect_line("ready");
    let producer = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring r --producer-id 0 --count {TOTAL} --size 8 --mode mixed"
    );
    producer.wait_ok();

    let hang = up.expect_line("hang");
    assert_eq!(num(&hang, "delivered"), HANG_AFTER, "{hang}");
    up.kill();
    let committed = position(&ring, "up").expect("up keeps its entry");
    assert!(
        committed < HANG_AFTER,
        "up committed {committed}, past the event it hung in ({hang})"
    );

    // `down` catches up with `up`'s commit and stops there (its handler fails the run on
    // any event beyond it). Bounded by the testkit's watchdog, not a timed assertion.
    let watchdog = std::time::Instant::now();
    while position(&ring, "down") != Some(committed) {
        assert!(
            watchdog.elapsed() < std::time::Duration::from_secs(50),
            "down at {:?}, never reached up's commit {committed}",
            position(&ring, "down")
        );
        assert!(
            down.exited().is_none(),
            "down exited while held: {}",
            down.stderr()
        );
        std::thread::yield_now();
    }

    let up = testkit!(
        ns,
        "upstream, restarted",
        "consume --ns {ns} --ring r --name up --resume --per-producer {TOTAL} \
         --batch-cap {BATCH} --wait block"
    );
    let out = up.wait_ok();
    let done = line(&out, "done");
    assert_eq!(num(done, "start"), committed, "{done}");
    assert_eq!(num(done, "next"), TOTAL, "{done}");

    let out = down.wait_ok();
    let done = line(&out, "done");
    assert_eq!(num(done, "delivered"), TOTAL, "every event once: {done}");
    assert_eq!(num(done, "next"), TOTAL, "{done}");
    assert_eq!(num(done, "net_wakeups"), 0, "no wake-up lost: {done}");
}
