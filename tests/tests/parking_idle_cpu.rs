//! A parked consumer uses no CPU while idle.
//!
//! A consumer process attaches to an empty ring and waits with its strategy. Once the ring's
//! table shows it parked, the parent reads the process's CPU time (the sum of its threads'
//! `/proc/<pid>/task/*/schedstat`, in ns) before and after half a second in which nothing
//! is published. A parked consumer may wake for its 50 ms net about ten times in that
//! window, and the scheduler adds noise: allowed up to 10 ms. A consumer that spins would
//! use most of the 500 ms: the busy-spin control shows that the measurement can fail
//! (it must exceed 100 ms, even with other processes competing for the two cores).
//!
//! Afterwards one event is published, and the consumer must receive it by a wake, not by
//! the net. The assertions compare CPU time consumed, never latency.

use std::time::Duration;

use shmring::{Ring, RingConfig};
use shmring_testkit::payload::{encode, Origin};
use shmring_testkit::procfs::cpu_over;
use shmring_testkit::report::{line, num};
use shmring_testkit::{eventually, testkit, Child, Namespace};

/// The idle window.
const WINDOW: Duration = Duration::from_millis(500);
/// Most CPU a parked process may use in [`WINDOW`].
const PARKED_MAX: Duration = Duration::from_millis(10);
/// Least CPU the spinning control must use in [`WINDOW`].
const SPINNING_MIN: Duration = Duration::from_millis(100);

/// Attach a `--wait {wait}` consumer to an empty ring, wait until it parks (if `parks`),
/// measure its CPU over [`WINDOW`], then publish one event and check it arrived. Returns the
/// CPU time measured.
fn idle_cpu(test: &str, wait: &str, parks: bool) -> Duration {
    let ns = Namespace::new(test);
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut c: Child = testkit!(
        ns,
        format!("{wait} consumer"),
        "consume --ns {ns} --ring r --per-producer 1 --wait {wait}"
    );
    c.expect_line("ready");
    if parks {
        eventually("the consumer to park", || {
            ring.info().consumers.iter().any(|c| c.parked)
        });
    }
    let used = cpu_over(c.pid(), WINDOW);
    eprintln!("{wait} consumer: {used:?} of CPU in {WINDOW:?} idle");
    if parks {
        assert!(
            ring.info()
                .consumers
                .iter()
                .all(|c| c.parked && c.next == 0),
            "the consumer left its park with nothing published: {:#?}",
            ring.info()
        );
    }

    let mut p = ring.producer().expect("attach producer");
    p.publish(&encode(
        Origin {
            producer: 0,
            seq: 0,
        },
        8,
    ))
    .expect("publish");
    let out = c.wait_ok();
    let done = line(&out, "done");
    assert_eq!(num(done, "delivered"), 1, "{done}");
    assert_eq!(
        num(done, "net_wakeups"),
        0,
        "the event arrived by the net: {done}"
    );
    if parks {
        assert!(num(done, "wakeups") > 0, "{done}");
    }
    used
}

#[test]
fn a_parked_blocking_consumer_uses_no_cpu() {
    let used = idle_cpu("idle_blocking", "block", true);
    assert!(
        used < PARKED_MAX,
        "a parked Blocking consumer used {used:?} of CPU in {WINDOW:?} idle"
    );
}

#[test]
fn a_parked_adaptive_consumer_uses_no_cpu() {
    // The default strategy: spins and yields first, then parks like Blocking.
    let used = idle_cpu("idle_adaptive", "adaptive", true);
    assert!(
        used < PARKED_MAX,
        "a parked Adaptive consumer used {used:?} of CPU in {WINDOW:?} idle"
    );
}

#[test]
fn the_control_a_busy_spinning_consumer_burns_cpu() {
    let used = idle_cpu("idle_spin_control", "spin", false);
    assert!(
        used > SPINNING_MIN,
        "a BusySpin consumer used only {used:?} of CPU in {WINDOW:?}: the measurement \
         cannot tell spinning from parking"
    );
}
