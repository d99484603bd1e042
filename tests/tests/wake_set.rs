//! A WakeSet over 64 rings, across processes: a publish into any one of them wakes the
//! stepping thread, and while nothing is published it uses no CPU.
//!
//! A child process (the `wake-set` role) attaches one consumer to each of 64 rings, puts
//! them in one `WakeSet`, and steps them from one thread: poll every consumer, and when all
//! came back empty print `parking` and park on the set (`has_pending` on any is the last
//! look). The parent publishes one event at a time into the rings, in a random order, each
//! time only once the child printed `parking` and is asleep in `futex_waitv` (its
//! `/proc/<pid>/task/<pid>/syscall`), and waits for the child's report of that event, from
//! the right ring, before the next publish. So every one of the publishes has to wake the
//! sleeping thread through that ring's wake word.
//!
//! Before the first publish, the child's CPU time over an idle half second must stay small
//! (at most 10 ms: ten 50 ms nets, each re-arming the wait over 64 words, plus scheduler
//! noise). At the end the set's own counters must show no wake-up by the net, and the
//! futex wake as the way the publishes reached the thread.
//!
//! Why not "exactly one wake-up per publish": a publish can land just as the thread's 50 ms
//! net expires on an empty set; the thread then re-arms the wait, and that park's last
//! look finds the event (a `Ready` return, no wake-up, nothing lost). Rare, since every
//! publish but the first follows a fresh park, but possible on a loaded machine.
//!
//! Where `futex_waitv` is refused (a kernel before 5.16, or a seccomp profile without it),
//! the set falls back to a plain futex wait (the `no-waitv` role runs under a filter that
//! answers ENOSYS). There a park with nothing to wake it must still sleep to its deadline,
//! counting no wake-up and using little CPU, and a publish into any ring of the set must
//! still wake it. (Before the fallback, every such park returned at once as woken: the
//! stepping thread spun on a core.)

use std::time::Duration;

use shmring::{Producer, Ring, RingConfig};
use shmring_testkit::payload::{encode, Origin};
use shmring_testkit::procfs::{blocked_in, cpu_over, SYS_FUTEX, SYS_FUTEX_WAITV};
use shmring_testkit::report::{field, line, num};
use shmring_testkit::{eventually, testkit, Child, Namespace};

const RINGS: usize = 64;
const PUBLISHES: usize = 20;
const WINDOW: Duration = Duration::from_millis(500);
const PARKED_MAX: Duration = Duration::from_millis(10);

/// `count` ring indices in a random order: distinct while they last (the first and the last
/// ring are always among them), then repeats.
fn publish_order(seed: u64, count: usize) -> Vec<usize> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut order: Vec<usize> = (0..RINGS).collect();
    for i in (1..RINGS).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    order.truncate(count.min(RINGS) - 2);
    order.retain(|&i| i != 0 && i != RINGS - 1);
    order.push(RINGS - 1);
    order.insert(order.len() / 2, 0);
    while order.len() < count {
        order.push((next() % RINGS as u64) as usize);
    }
    order
}

/// Wait until the stepper's stepping (main) thread is asleep in `futex_waitv`.
fn until_asleep(stepper: &Child) {
    let pid = stepper.pid();
    eventually("the stepping thread to sleep in futex_waitv", || {
        blocked_in(pid, pid) == Some(SYS_FUTEX_WAITV)
    });
}

#[test]
fn a_publish_into_any_of_64_rings_wakes_the_stepping_thread() {
    let ns = Namespace::new("wake_set_64");
    let config = RingConfig {
        capacity: 8,
        slot_size: 64,
        max_consumers: 2,
        max_producers: 2,
        ..RingConfig::default()
    };
    let rings: Vec<Ring> = (0..RINGS)
        .map(|i| Ring::create(ns.name(), &format!("r{i}"), &config).expect("create ring"))
        .collect();
    let mut producers: Vec<Producer> = rings
        .iter()
        .map(|r| r.producer().expect("attach producer"))
        .collect();
    let seed = u64::from(std::process::id());
    let order = publish_order(seed, PUBLISHES);

    let mut stepper = testkit!(
        ns,
        "stepper",
        "wake-set --ns {ns} --rings {RINGS} --events {PUBLISHES}"
    );
    let ready = stepper.expect_line("ready");
    assert_eq!(num(&ready, "rings"), RINGS as u64, "{ready}");

    stepper.expect_line("parking");
    until_asleep(&stepper);
    let used = cpu_over(stepper.pid(), WINDOW);
    eprintln!("stepper over {RINGS} rings: {used:?} of CPU in {WINDOW:?} idle");
    assert!(
        used < PARKED_MAX,
        "the stepping thread parked on {RINGS} rings used {used:?} of CPU in {WINDOW:?}"
    );

    let mut per_ring = vec![0u64; RINGS];
    for (k, &r) in order.iter().enumerate() {
        if k > 0 {
            stepper.expect_line("parking");
        }
        until_asleep(&stepper);
        let ev = encode(
            Origin {
                producer: r as u32,
                seq: per_ring[r],
            },
            8,
        );
        producers[r].publish(&ev).expect("publish");
        let got = stepper.expect_line("ev");
        assert_eq!(
            num(&got, "ring"),
            r as u64,
            "publish {k} (seed {seed}, order {order:?}) went to ring {r}: {got}"
        );
        assert_eq!(num(&got, "seq"), per_ring[r], "{got}");
        assert_eq!(num(&got, "origin"), per_ring[r], "{got}");
        per_ring[r] += 1;
    }

    let out = stepper.wait_ok();
    let done = line(&out, "done");
    eprintln!("{done}");
    assert_eq!(num(done, "events"), PUBLISHES as u64, "{done}");
    assert_eq!(
        num(done, "net_wakeups"),
        0,
        "a wake-up arrived by the net: {done}"
    );
    // Each publish found the thread asleep in futex_waitv and ended one park: by a wake,
    // or (rarely, see the module comment) at the last look of a re-armed park.
    let (woken, ready) = (num(done, "woken"), num(done, "ready"));
    assert!(woken + ready >= PUBLISHES as u64, "{done}");
    // A park that ended by its net after a publish moved a word is a wake that never
    // arrived (or came after the net): the publishes must reach the thread by its futex.
    assert_eq!(
        num(done, "late_wakeups"),
        0,
        "a publish moved a wake word but its wake did not arrive: {done}"
    );
    assert!(
        num(done, "wakeups") >= woken && woken >= PUBLISHES as u64 / 2,
        "the publishes did not reach the thread by its futex: {done}"
    );
    assert!(num(done, "parks") >= PUBLISHES as u64, "{done}");
}

#[test]
fn the_publish_order_covers_the_first_and_the_last_ring() {
    let order = publish_order(12345, PUBLISHES);
    assert_eq!(order.len(), PUBLISHES);
    assert!(
        order.contains(&0) && order.contains(&(RINGS - 1)),
        "{order:?}"
    );
    assert!(order.iter().all(|&i| i < RINGS));
}

/// Most CPU a `no-waitv` child parked on two rings may use in [`WINDOW`]: its fallback
/// wakes every millisecond to look at the second ring (about 500 short futex waits), a
/// thread that spins uses the whole window.
const FALLBACK_PARKED_MAX: Duration = Duration::from_millis(100);

/// Rings `r0` and `r1` in `ns`, and a `no-waitv` child (futex_waitv refused) holding the
/// sets `one` and `two` over them, ready.
fn without_waitv(ns: &Namespace) -> (Vec<Ring>, Child) {
    let rings = ["r0", "r1"]
        .iter()
        .map(|name| Ring::create(ns.name(), name, &RingConfig::default()).expect("create ring"))
        .collect();
    let mut child = testkit!(ns, "sets without futex_waitv", "no-waitv --ns {ns}");
    child.expect_line("ready");
    (rings, child)
}

/// Where futex_waitv is refused, a park on a set of one ring and on a set of two, with
/// nothing to wake it, sleeps until its deadline and counts no wake-up.
#[test]
fn without_futex_waitv_a_park_sleeps_to_its_deadline() {
    let ns = Namespace::new("wake_set_no_waitv_idle");
    let (_rings, mut child) = without_waitv(&ns);
    for set in ["one", "two"] {
        child.send_line(&format!("idle {set} 200"));
        let answer = child.expect_line("idle ");
        eprintln!("{answer}");
        assert_eq!(field(&answer, "reason"), Some("Deadline"), "{answer}");
        assert!(num(&answer, "elapsed_us") >= 190_000, "{answer}");
        assert_eq!(num(&answer, "events"), 0, "{answer}");
        assert!(num(&answer, "parks") >= 1, "{answer}");
        for counter in ["wakeups", "late_wakeups", "net_wakeups"] {
            assert_eq!(
                num(&answer, counter),
                0,
                "no {counter} by a refused call: {answer}"
            );
        }
        assert!(
            num(&answer, "fallback_waits") >= 1,
            "the park slept in the fallback: {answer}"
        );
    }
    child.send_line("exit");
    child.expect_line("done");
    child.wait_ok();
}

/// Where futex_waitv is refused, a set parked on two rings stays idle (its CPU stays low),
/// and a publish into its second ring, then into its first, wakes it, as one into the ring
/// of a set of one does; the event is there when it looks.
#[test]
fn without_futex_waitv_a_publish_into_any_ring_of_the_set_wakes_it() {
    let ns = Namespace::new("wake_set_no_waitv_wake");
    let (rings, mut child) = without_waitv(&ns);
    let mut producers: Vec<Producer> = rings
        .iter()
        .map(|r| r.producer().expect("attach producer"))
        .collect();
    let pid = child.pid();
    for (k, (set, ring)) in [("two", 1), ("two", 0), ("one", 0)].into_iter().enumerate() {
        child.send_line(&format!("wait {set} 20000"));
        child.expect_line("parking");
        eventually("the parked set to sleep in a futex wait", || {
            if let Some(done) = child.try_lines().iter().find(|l| l.starts_with("wait ")) {
                panic!("set {set} ended its park before any publish: {done}");
            }
            blocked_in(pid, pid) == Some(SYS_FUTEX)
        });
        if k == 0 {
            let used = cpu_over(pid, WINDOW);
            eprintln!("set of two without futex_waitv: {used:?} of CPU in {WINDOW:?} parked");
            assert!(
                used < FALLBACK_PARKED_MAX,
                "a set parked on two rings without futex_waitv used {used:?} of CPU in {WINDOW:?}"
            );
        }
        producers[ring].publish(b"wake").expect("publish");
        let answer = child.expect_line("wait ");
        eprintln!("{answer}");
        // Woken; or, if the publish landed just as a net ended, found by the next park's
        // last look (see the module comment).
        let reason = field(&answer, "reason");
        assert!(
            matches!(reason, Some("Woken" | "Ready")),
            "set {set}, publish into r{ring}: {answer}"
        );
        assert_eq!(num(&answer, "events"), 1, "{answer}");
        assert_eq!(field(&answer, "from"), Some(["0", "1"][ring]), "{answer}");
        assert_eq!(num(&answer, "net_wakeups"), 0, "{answer}");
        if reason == Some("Woken") {
            assert!(
                num(&answer, "wakeups") + num(&answer, "late_wakeups") >= 1,
                "{answer}"
            );
        }
    }
    child.send_line("exit");
    child.expect_line("done");
    child.wait_ok();
}
