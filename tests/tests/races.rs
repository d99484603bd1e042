//! Races across processes: attach/detach storms while a producer publishes, optional
//! consumers lapped again and again, and a ring stopped and started while its consumers
//! are parked. (Stop racing many publishers is `broker/tests/lifecycle.rs`.) Every choice
//! (strategies, counts, delays) comes from a printed seed; `SHMRING_FAULT_SEED` replays it.

use std::time::Duration;

use shmring::{Producer, Ring, RingConfig};
use shmring_testkit::fault::Rng;
use shmring_testkit::payload::{encode, Origin};
use shmring_testkit::report::{line, num, per_producer};
use shmring_testkit::{eventually, testkit, Child, Namespace};

/// Storm: six processes attach and detach consumers over and over while one producer
/// process publishes without pause: two anonymous required, one durable required (which
/// must resume exactly where it detached), two anonymous optional (lapped as often as the
/// scheduler makes it) and one durable optional. Each round checks its own run of events:
/// contiguous from the attach position for a required consumer, increasing and intact for
/// an optional one, and the counters account for every sequence walked past (the
/// `attach-loop` role). Afterwards no entry is left behind in the consumer table.
#[test]
fn attach_detach_storm_of_six_processes_while_publishing() {
    let mut rng = Rng::for_test("attach_detach_storm");
    let ns = Namespace::new("race_storm");
    let capacity = *rng.pick(&[16u64, 64]);
    let size = *rng.pick(&["8", "max"]);
    let config = RingConfig {
        capacity,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "live", &config).expect("create ring");
    let mut producer = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring live --count 0 --size {size} --mode mixed"
    );
    producer.expect_line("started");
    // Waits that park or yield (no busy spin: two cores, seven processes).
    let waits = ["yield", "phased-park", "block", "timeout-block", "adaptive"];
    let kinds = [
        ("required", ""),
        ("required", ""),
        ("required durable", "--name storm-req"),
        ("optional", "--optional"),
        ("optional", "--optional"),
        ("optional durable", "--optional --name storm-opt"),
    ];
    let mut rounds_total = 0;
    let mut storm: Vec<(String, u64, Child)> = kinds
        .iter()
        .enumerate()
        .map(|(i, (kind, flags))| {
            let rounds = rng.range(10..=30);
            let events = rng.range(5..=200);
            let wait = match rng.below(3) {
                0 => String::new(),
                _ => format!("--wait {}", rng.pick(&waits)),
            };
            rounds_total += rounds;
            let label = format!("{kind} #{i} ({rounds} rounds of {events} {wait})");
            let child = testkit!(
                ns,
                label.clone(),
                "attach-loop --ns {ns} --ring live --rounds {rounds} --events {events} \
                 --size {size} {flags} {wait}"
            );
            (label, rounds, child)
        })
        .collect();
    for (_, _, c) in &mut storm {
        c.expect_line("ready");
    }
    let mut dropped = 0;
    for (label, rounds, c) in storm {
        let out = c.wait_ok();
        assert_eq!(num(line(&out, "done"), "rounds"), rounds, "{label}");
        dropped += out
            .iter()
            .filter(|l| l.starts_with("round "))
            .map(|l| num(l, "dropped"))
            .sum::<u64>();
    }
    let left = ring.info().consumers;
    assert!(left.is_empty(), "entries left behind: {left:#?}");
    let head = ring.head();
    Ring::remove(ns.name(), "live").expect("remove");
    producer.wait_ok();
    println!(
        "attach/detach storm: 6 processes, {rounds_total} attaches, {head} events published \
         (capacity {capacity}, size {size}), {dropped} dropped by lapped optional consumers"
    );
}

/// Publish `n` events as producer 0, continuing its sequence.
fn publish(p: &mut Producer, sent: &mut u64, n: u64) {
    for _ in 0..n {
        p.publish(&encode(
            Origin {
                producer: 0,
                seq: *sent,
            },
            8,
        ))
        .expect("publish");
        *sent += 1;
    }
}

/// A ring stopped and started again and again while consumers in other processes are
/// parked on it (or busy, at random). On each stop every consumer's `run` returns
/// `RunExit::Closed` once it consumed everything before the stop sequence; after the start
/// each re-enters `run` (told on stdin, or seeing the run counter move by itself) and sees
/// the new run: the run counter went up by one and the first event it gets is exactly at
/// the stop sequence. Nothing is lost or repeated across the restarts, and no wake-up is
/// left to the net.
#[test]
fn a_ring_restarted_while_consumers_are_parked_wakes_them_into_the_new_run() {
    let mut rng = Rng::for_test("ring_restarted_while_consumers_parked");
    let ns = Namespace::new("race_restart");
    let config = RingConfig {
        capacity: 64,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let parking = ["block", "adaptive", "timeout-block", "phased-park"];
    let mut consumers: Vec<(String, &str, Child)> = (0..3)
        .map(|i| {
            let wait = *rng.pick(&parking);
            let on_closed = *rng.pick(&["stdin", "poll"]);
            let name = if i == 0 { "--name restart" } else { "" };
            let label = format!("consumer {i} ({wait}, {on_closed})");
            let mut c = testkit!(
                ns,
                label.clone(),
                "run-closed --ns {ns} --ring r --wait {wait} --on-closed {on_closed} \
                 --batch-cap {} {name}",
                rng.range(1..=64)
            );
            c.expect_line("ready");
            (on_closed.to_owned(), wait, c)
        })
        .collect();
    let mut p = ring.producer().expect("producer");
    let mut sent = 0u64;
    let rounds = rng.range(4..=8);
    let mut parked_stops = 0;
    for round in 0..rounds {
        publish(&mut p, &mut sent, rng.range(1..=200));
        let all_parked = rng.chance(2, 3);
        if all_parked {
            eventually("every consumer caught up and parked", || {
                let info = ring.info();
                info.consumers.len() == 3
                    && info
                        .consumers
                        .iter()
                        .all(|c| c.next == info.head && c.parked)
            });
            parked_stops += 1;
        } else {
            std::thread::sleep(Duration::from_micros(rng.range(0..=2000)));
        }
        let stop = ring.stop().expect("stop");
        assert_eq!(
            stop, sent,
            "round {round}: the stop sequence is what was published"
        );
        for (_, _, c) in &mut consumers {
            let closed = c.expect_line("closed");
            assert_eq!(num(&closed, "next"), stop, "round {round}: {closed}");
            assert_eq!(num(&closed, "run"), round + 1, "{closed}");
        }
        let run = ring.start().expect("start");
        assert_eq!(run, round + 2);
        for (on_closed, _, c) in &mut consumers {
            if on_closed == "stdin" {
                c.send_line("again");
            }
            let reopened = c.expect_line("reopened");
            assert_eq!(num(&reopened, "run"), run, "{reopened}");
            assert_eq!(num(&reopened, "next"), stop, "{reopened}");
        }
    }
    publish(&mut p, &mut sent, rng.range(1..=200));
    let stop = ring.stop().expect("last stop");
    for (_, _, c) in &mut consumers {
        assert_eq!(num(&c.expect_line("closed"), "next"), stop);
        c.send_line("exit");
    }
    for (on_closed, wait, c) in consumers {
        let out = c.wait_ok();
        let done = line(&out, "done");
        let label = format!("{wait} consumer ({on_closed})");
        assert_eq!(num(done, "delivered"), sent, "{label}: {done}");
        assert_eq!(per_producer(done, "lasts").get(&0), Some(&(sent - 1)));
        assert_eq!(num(done, "closes"), rounds + 1, "{done}");
        assert_eq!(num(done, "net_wakeups"), 0, "{label}: {done}");
        // Publishes and stops wake parked consumers by their futex: a park that ended by
        // the 50 ms net after the wake line moved is a wake that never arrived.
        if wait != "timeout-block" {
            assert_eq!(num(done, "late_wakeups"), 0, "{label}: {done}");
        }
        if wait == "block" && parked_stops > 0 {
            assert!(num(done, "wakeups") > 0, "{label} was never woken: {done}");
        }
    }
    println!(
        "ring restarts: {rounds} ({parked_stops} with every consumer parked), 3 consumer \
         processes, {sent} events"
    );
}
