//! Every wait strategy delivers everything across processes, alone and mixed on one ring.
//!
//! One producer process publishes 3,000 self-checking events (every publishing form in
//! turn) into a 16-slot ring; every 100 events it lets the consumers go idle: it waits until
//! each consumer caught up and every consumer whose strategy parks shows as parked in the
//! ring's table, then pauses 300 µs so the spinning, yielding and sleeping ones reach their
//! last phase too. The next publish must wake whoever parked. Each consumer is its own
//! process checking order and integrity (the `consume` role) and reports its counters.
//!
//! - Everything arrives, exactly once, in order, at every consumer.
//! - A strategy that parks was woken by a wake (`wakeups > 0`), never by the 50 ms net
//!   (`net_wakeups == 0`), and, unless its own 5 ms timeout is shorter than the net, never by
//!   a timeout after a producer had moved the wake line (`late_wakeups == 0`: a wake that
//!   was sent and never arrived, such as one with the wrong futex key); one that never
//!   parks has no wake-ups at all.
//! - The strategy is recorded in the consumer's table entry (what `broker status` shows).
//! - Mixed on one ring: a busy-spin, a blocking and a sleeping consumer process, each with
//!   the same guarantees (what one chooses changes nothing for the others).
//!
//! At most one process spins at a time (the busy-spin consumer; the producer is paced), so
//! two cores are enough.

use shmring::{Ring, RingConfig};
use shmring_testkit::report::{line, num};
use shmring_testkit::{eventually, testkit, Child, Namespace};

const EVENTS: u64 = 3_000;
const IDLE_EVERY: u64 = 100;

/// A consumer's `--wait` name, the name its table entry shows, and whether it parks.
struct Strategy {
    arg: &'static str,
    recorded: &'static str,
    parks: bool,
}

const SPIN: Strategy = Strategy {
    arg: "spin",
    recorded: "busy-spin",
    parks: false,
};
const YIELD: Strategy = Strategy {
    arg: "yield",
    recorded: "yielding",
    parks: false,
};
const SLEEP: Strategy = Strategy {
    arg: "sleep",
    recorded: "sleeping",
    parks: false,
};
const PHASED_PARK: Strategy = Strategy {
    arg: "phased-park",
    recorded: "phased-backoff",
    parks: true,
};
const PHASED_SLEEP: Strategy = Strategy {
    arg: "phased-sleep",
    recorded: "phased-backoff",
    parks: false,
};
const BLOCK: Strategy = Strategy {
    arg: "block",
    recorded: "blocking",
    parks: true,
};
const TIMEOUT_BLOCK: Strategy = Strategy {
    arg: "timeout-block",
    recorded: "timeout-blocking",
    parks: true,
};
const ADAPTIVE: Strategy = Strategy {
    arg: "adaptive",
    recorded: "adaptive",
    parks: true,
};

/// Run one producer against one consumer process per strategy, all on one ring.
fn deliver(test: &str, strategies: &[Strategy]) {
    let ns = Namespace::new(test);
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");

    let mut consumers: Vec<Child> = strategies
        .iter()
        .map(|s| {
            let mut c = testkit!(
                ns,
                format!("{} consumer", s.arg),
                "consume --ns {ns} --ring r --per-producer {EVENTS} --wait {}",
                s.arg
            );
            let ready = c.expect_line("ready");
            assert_eq!(num(&ready, "start"), 0, "{ready}");
            c
        })
        .collect();
    // The table records each consumer's strategy.
    let info = ring.info();
    let mut recorded: Vec<_> = info.consumers.iter().map(|c| c.wait).collect();
    let mut expected: Vec<_> = strategies.iter().map(|s| s.recorded).collect();
    recorded.sort_unstable();
    expected.sort_unstable();
    assert_eq!(recorded, expected, "{info:#?}");
    // Before the first event, the parking consumers park.
    let parkers = strategies.iter().filter(|s| s.parks).count();
    eventually("the parking consumers to park", || {
        ring.info().consumers.iter().filter(|c| c.parked).count() >= parkers
    });

    let producer = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring r --count {EVENTS} --mode mixed --idle-every {IDLE_EVERY} \
         --await-parked {parkers} --pause-us 300"
    );
    let out = producer.wait_ok();
    let done = line(&out, "done");
    assert_eq!(num(done, "published"), EVENTS, "{done}");
    assert_eq!(num(done, "idles"), EVENTS / IDLE_EVERY - 1, "{done}");

    for (s, c) in strategies.iter().zip(consumers.drain(..)) {
        let out = c.wait_ok();
        let done = line(&out, "done");
        let who = s.arg;
        eprintln!("{who}: {done}");
        // The child checked order and integrity of every event and saw the last one.
        assert_eq!(num(done, "delivered"), EVENTS, "{who}: {done}");
        assert_eq!(num(done, "stats_delivered"), EVENTS, "{who}: {done}");
        assert_eq!(num(done, "next"), EVENTS, "{who}: {done}");
        assert_eq!(num(done, "skipped"), 0, "{who}: {done}");
        assert_eq!(
            num(done, "net_wakeups"),
            0,
            "{who}: a wake-up arrived by the net: {done}"
        );
        if s.parks {
            assert!(
                num(done, "wakeups") > 0,
                "{who} was never woken from a park: {done}"
            );
        } else {
            assert_eq!(num(done, "wakeups"), 0, "{who} parked: {done}");
        }
        // A 5 ms timeout can pass while a producer is preempted between its stamp and its
        // wake: late, not lost. Every other strategy's only timeout is the 50 ms net.
        if s.arg != "timeout-block" {
            assert_eq!(
                num(done, "late_wakeups"),
                0,
                "{who}: a wake was sent and did not arrive: {done}"
            );
        }
    }
    assert_eq!(ring.head(), EVENTS);
}

#[test]
fn busy_spin_delivers_everything() {
    deliver("busy_spin", &[SPIN]);
}

#[test]
fn yielding_delivers_everything() {
    deliver("yielding", &[YIELD]);
}

#[test]
fn sleeping_delivers_everything() {
    deliver("sleeping", &[SLEEP]);
}

#[test]
fn phased_backoff_to_park_delivers_everything() {
    deliver("phased_park", &[PHASED_PARK]);
}

#[test]
fn phased_backoff_to_sleep_delivers_everything() {
    deliver("phased_sleep", &[PHASED_SLEEP]);
}

#[test]
fn blocking_delivers_everything() {
    deliver("blocking", &[BLOCK]);
}

#[test]
fn timeout_blocking_delivers_everything() {
    deliver("timeout_blocking", &[TIMEOUT_BLOCK]);
}

#[test]
fn adaptive_delivers_everything() {
    deliver("adaptive", &[ADAPTIVE]);
}

#[test]
fn busy_spin_blocking_and_sleeping_mixed_on_one_ring() {
    deliver("mixed", &[SPIN, BLOCK, SLEEP]);
}
