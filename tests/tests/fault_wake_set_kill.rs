//! Fault injection: a thread parked on a `WakeSet` over several rings, SIGKILLed.
//!
//! A parked `WakeSet` has raised the waiter count of every ring in it and sleeps in
//! `futex_waitv`; killed there, it never lowers them. What that may cost, and no more: the
//! rings stay usable, publishing never hangs, and the first publish into each ring that
//! sees the raised count pays one wake (the wake word goes up by one, with the
//! `futex_wake` behind it) and resets the count, so the publishes after it pay nothing.
//! A new stepping thread on the same rings works as before: every publish reaches it by
//! its futex, none by the 50 ms net, and afterwards no ring counts a waiter.
//!
//! Each round spawns a stepper (the `wake-set` role) over the rings, publishes a random
//! number of events into random rings (it must get each), waits until it is asleep in
//! `futex_waitv` (its `/proc/<pid>/task/<pid>/syscall`) and kills it, sometimes after a
//! random extra delay. Its anonymous consumers are then freed as a broker frees those of a
//! dead process (`Ring::free_consumer`); without that, they would gate the producers
//! forever, which is what the broker is for. The seed is printed.

use std::time::Duration;

use shmring::{Producer, Ring, RingConfig};
use shmring_testkit::fault::Rng;
use shmring_testkit::payload::{encode, Origin};
use shmring_testkit::procfs::{blocked_in, SYS_FUTEX_WAITV};
use shmring_testkit::raw::{Line, RawSegment};
use shmring_testkit::report::{line, num};
use shmring_testkit::{eventually, testkit, Child, Namespace};

const RINGS: usize = 8;
const CAPACITY: u64 = 16;

/// Wait until the stepper's stepping (main) thread is asleep in `futex_waitv`.
fn until_asleep(stepper: &Child) {
    let pid = stepper.pid();
    eventually("the stepping thread to sleep in futex_waitv", || {
        blocked_in(pid, pid) == Some(SYS_FUTEX_WAITV)
    });
}

/// Publish one event into ring `r` (producer id = ring index, as the role expects).
fn publish(producers: &mut [Producer], sent: &mut [u64], r: usize) {
    let ev = encode(
        Origin {
            producer: r as u32,
            seq: sent[r],
        },
        8,
    );
    producers[r].publish(&ev).expect("publish");
    sent[r] += 1;
}

/// Free the consumer entries of processes that are gone, as a broker would.
fn free_dead_consumers(rings: &[Ring]) -> usize {
    let mut freed = 0;
    for ring in rings {
        for c in ring.info().consumers {
            if !shmring::process::is_alive(c.pid, c.start_time)
                && ring.free_consumer(c.index, c.word)
            {
                freed += 1;
            }
        }
    }
    freed
}

#[test]
fn a_stepper_killed_parked_on_a_wake_set_costs_producers_one_wake_and_nothing_more() {
    let mut rng = Rng::for_test("stepper_killed_parked_on_a_wake_set");
    let ns = Namespace::new("fault_wake_set_kill");
    let config = RingConfig {
        capacity: CAPACITY,
        slot_size: 64,
        ..RingConfig::default()
    };
    let rings: Vec<Ring> = (0..RINGS)
        .map(|i| Ring::create(ns.name(), &format!("r{i}"), &config).expect("create ring"))
        .collect();
    let raws: Vec<RawSegment> = rings.iter().map(RawSegment::open).collect();
    let mut producers: Vec<Producer> = rings
        .iter()
        .map(|r| r.producer().expect("producer"))
        .collect();
    let mut sent = vec![0u64; RINGS];

    let kills = rng.range(2..=4);
    for k in 0..kills {
        let events = rng.range(0..=6);
        let mut stepper = testkit!(
            ns,
            format!("stepper {k}"),
            "wake-set --ns {ns} --rings {RINGS} --events 1000000"
        );
        stepper.expect_line("ready");
        for _ in 0..events {
            stepper.expect_line("parking");
            until_asleep(&stepper);
            let r = rng.below(RINGS as u64) as usize;
            publish(&mut producers, &mut sent, r);
            let got = stepper.expect_line("ev");
            assert_eq!(num(&got, "ring"), r as u64, "{got}");
        }
        stepper.expect_line("parking");
        until_asleep(&stepper);
        std::thread::sleep(Duration::from_millis(rng.range(0..=5)));
        stepper.kill();
        // Killed inside the park: every ring's waiter count holds its raise (and those of
        // earlier kills that no publish into that ring has reset yet).
        for (i, raw) in raws.iter().enumerate() {
            let n = raw.waiters(Line::Consumer);
            assert!(
                (1..=k as u32 + 1).contains(&n),
                "ring {i} after kill {k}: {n} waiters"
            );
        }
        assert_eq!(
            free_dead_consumers(&rings),
            RINGS,
            "one dead consumer per ring"
        );
    }

    // With the counts left raised: publishing works, never waits for the dead, and costs
    // one wake per ring, for the first publish. More than the capacity, so a leftover gate
    // would hang.
    let words: Vec<u32> = raws.iter().map(|r| r.wake_word(Line::Consumer)).collect();
    let per_ring = 3 * CAPACITY;
    for r in 0..RINGS {
        for _ in 0..per_ring {
            publish(&mut producers, &mut sent, r);
        }
    }
    for (i, raw) in raws.iter().enumerate() {
        assert_eq!(
            raw.wake_word(Line::Consumer).wrapping_sub(words[i]),
            1,
            "ring {i}: one wake for the dead, then none"
        );
        assert_eq!(raw.waiters(Line::Consumer), 0, "ring {i}");
    }

    // A new stepper on the same rings: every publish reaches it by its futex.
    let publishes = 2 * RINGS as u64;
    let mut stepper = testkit!(
        ns,
        "new stepper",
        "wake-set --ns {ns} --rings {RINGS} --events {publishes}"
    );
    stepper.expect_line("ready");
    for k in 0..publishes {
        stepper.expect_line("parking");
        until_asleep(&stepper);
        let r = if k < RINGS as u64 {
            k as usize
        } else {
            rng.below(RINGS as u64) as usize
        };
        publish(&mut producers, &mut sent, r);
        let got = stepper.expect_line("ev");
        assert_eq!(num(&got, "ring"), r as u64, "{got}");
        assert_eq!(num(&got, "origin"), sent[r] - 1, "{got}");
    }
    let out = stepper.wait_ok();
    let done = line(&out, "done");
    assert_eq!(num(done, "net_wakeups"), 0, "a wake-up by the net: {done}");
    assert!(num(done, "woken") >= publishes / 2, "{done}");
    // The new stepper lowered what it raised (or a publish reset it).
    for (i, raw) in raws.iter().enumerate() {
        assert_eq!(raw.waiters(Line::Consumer), 0, "ring {i}");
    }
    println!(
        "wake-set steppers killed while parked: {kills}; {} publishes afterwards, one wake \
         per ring for the dead; new stepper: {done}",
        per_ring * RINGS as u64 + publishes
    );
}
