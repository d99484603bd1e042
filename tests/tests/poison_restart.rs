//! A poison event that kills its consumer's process: a durable consumer with
//! `ErrorPolicy::Skip { attempts: 3 }` aborts inside its handler on one event, on every
//! restart. After each attach, the consumer counts an attempt in the entry before it hands
//! each of its first `batch_cap` events over, so each death on the poison is counted, and
//! once the attempts are used up a restart skips it without calling the handler: the
//! event is dead-lettered exactly once, and no other event is skipped. With batch cap 1
//! the child commits after each event, so every other event is delivered exactly once;
//! with a larger cap, the events before the poison in its batch are delivered again after
//! each death (at least once), the others exactly once.
//!
//! The child role (`consumer`) prints `ev V` from its handler for each event value `V`,
//! `dead SEQ ATTEMPTS VALUE` from its dead-letter callback, and `done` once it is past the
//! last event; it calls `abort` in the handler on the poison value. With `POISON_MODE=err`
//! its handler first returns an error on the poison and aborts only when it is retried in
//! the same process: the retry was counted before it was made, so the deaths count too.
//! With `POISON_GROUP` set it is a member of the worker group `g` instead: each restart
//! joins by taking over the entry its dead predecessor left with its claim, and counts the
//! same way; with `POISON_UNTIL_STOP` also set it runs until the ring is stopped. With
//! `POISON_NEXT_TOO` set the event after the poison kills it too.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use shmring::{ConsumerOptions, ErrorPolicy, PollError, Ring, RingConfig, WaitOutcome};
use shmring_testkit::report::num;
use shmring_testkit::{role, Namespace};

const TOTAL: u64 = 20;
const POISON: u64 = 7;
/// Incarnations at most: the first attach, then restarts until the skip (the fourth
/// restart, see `restarts_until_the_poison_is_dead_lettered_once`), and some room.
const MAX_INCARNATIONS: usize = 8;

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    match role::current().as_deref() {
        Some("consumer") => consumer(),
        Some("two_claims") => two_claims(),
        Some(other) => println!("@error unknown role {other}"),
        None => return,
    }
    std::process::exit(0);
}

fn value(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte events"))
}

fn consumer() {
    let ns = std::env::var(shmring::names::NAMESPACE_ENV).expect("the namespace");
    let ring = Ring::open(&ns, "r").expect("open the ring");
    let cap = std::env::var("POISON_BATCH_CAP")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    let policy = match std::env::var("POISON_MODE").as_deref() {
        Ok("retry") => ErrorPolicy::Retry {
            attempts: 3,
            backoff: std::time::Duration::from_millis(1),
        },
        _ => ErrorPolicy::Skip { attempts: 3 },
    };
    let opts = if std::env::var_os("POISON_GROUP").is_some() {
        ConsumerOptions::worker("g")
    } else {
        ConsumerOptions::durable("d")
    };
    let opts = opts.batch_cap(cap).on_error(policy);
    let mut c = ring.consumer(opts).expect("attach");
    c.on_dead_letter(|d| {
        println!(
            "dead {} {} {} error={}",
            d.sequence,
            d.attempts,
            value(d.payload),
            d.error.replace(' ', "_")
        )
    });
    println!("ready start={}", c.next_sequence());
    let mut err_first = std::env::var("POISON_MODE").is_ok_and(|m| m == "err");
    let two_poisons = std::env::var_os("POISON_NEXT_TOO").is_some();
    // Until the ring is stopped (and everything adopted delivered), not until its own
    // position passes the last event: a member adopts the claims others left.
    let until_stop = std::env::var_os("POISON_UNTIL_STOP").is_some();
    while until_stop || c.next_sequence() < TOTAL {
        let polled = c.poll_once_fallible(|ev| {
            let v = value(ev.bytes());
            if v == POISON && std::mem::take(&mut err_first) {
                return Err(format!("bad {v}"));
            }
            if v == POISON || (v == POISON + 1 && two_poisons) {
                // The process dies inside the handler: nothing in it can count this.
                std::process::abort();
            }
            println!("ev {v}");
            Ok::<(), String>(())
        });
        match polled {
            Ok(_) => {}
            Err(PollError::HandlerFailed { sequence, attempts }) => {
                println!("failed {sequence} {attempts}");
                return;
            }
            Err(e) => panic!("{e}"),
        }
        if until_stop {
            if c.wait().expect("wait") == WaitOutcome::Closed {
                break;
            }
        } else if c.next_sequence() < TOTAL {
            c.wait().expect("wait");
        }
    }
    let s = c.stats();
    println!(
        "done next={} dead_lettered={} delivered={}",
        c.next_sequence(),
        s.dead_lettered,
        s.delivered
    );
}

#[test]
fn restarts_until_the_poison_is_dead_lettered_once() {
    // The first incarnation reaches the poison (its first event was another one, so its
    // death is not counted); restarts 1 to 3 each count an attempt and die; restart 4
    // finds the attempts used up and skips without calling the handler.
    let dead = run("poison_restart", None, [1, 1], 4, false);
    assert_died(&dead);
}

/// Each incarnation fails the poison once in the process, then dies in the retry: the
/// first counts 1 and dies in attempt 2, the restart counts 2 at attach, and its own
/// failure makes 3: it skips the event with its error.
#[test]
fn a_death_in_a_retry_counts_as_an_attempt() {
    let dead = run("poison_retry_death", Some("err"), [1, 1], 1, false);
    assert_eq!(dead, "error=bad_7");
}

/// With batches of 16 the poison is in the middle of a batch: the first incarnation marks
/// each event of its first batch, so its death counts; restarts 1 and 2 count one each;
/// restart 3 delivers the events before the poison (again), ends the batch there, and
/// skips the poison. The events of the batch before the poison are never blamed.
#[test]
fn a_poison_inside_a_batch_is_counted_and_no_other_event_is_skipped() {
    let dead = run("poison_in_batch", None, [16, 16], 3, false);
    assert_died(&dead);
}

/// The same poison in a worker group whose one member dies on it: each member that joins
/// takes over the dead one's entry, with its claim and its count, and counts its own death
/// the same way: the fourth joiner skips the poison once.
#[test]
fn members_restarting_on_a_poison_count_each_death_and_skip_it_once() {
    let dead = run("poison_group", None, [1, 1], 4, true);
    assert_died(&dead);
    let dead = run("poison_group_err", Some("err"), [1, 1], 1, true);
    assert_eq!(dead, "error=bad_7");
}

/// A member that died in a batch of 16 left a claim of 16 events; the members after it
/// take batches of 1, and still count their deaths: a joiner's window covers the whole
/// claim it takes over, not only its own batch cap. The first member's death counts too
/// (its own window covered its first batches): the third restart skips the poison.
#[test]
fn a_member_taking_over_a_larger_claim_counts_a_death_anywhere_in_it() {
    let dead = run("poison_group_claim", None, [16, 1], 3, true);
    assert_died(&dead);
}

/// Two members run at once and each dies on the poison: the claim a dying member leaves is
/// adopted by the live one (or taken over by a member that joins; the test keeps two
/// running), which counts its attempt before it hands the event over. The first death is
/// not counted (no member marks past its first event); each holder after it counts its
/// own: three counted deaths use the attempts up, and the next holder skips the poison
/// without calling the handler. Every other event is delivered exactly once.
#[test]
fn live_members_adopting_a_poison_count_each_death_and_skip_it_once() {
    let ns = Namespace::new("poison_adopt");
    let config = RingConfig {
        capacity: 64,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let env = [
        ("POISON_GROUP", "1".to_owned()),
        ("POISON_UNTIL_STOP", "1".to_owned()),
    ];
    let spawn = || {
        let mut c = ns.role("consumer", &env);
        c.expect_line("ready");
        c
    };
    let mut alive = vec![spawn(), spawn()];
    let mut p = ring.producer().expect("producer");
    for v in 0..TOTAL {
        p.publish(&v.to_le_bytes()).expect("publish");
    }
    let (mut lines, mut deaths) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for c in &mut alive {
            lines.extend(c.try_lines());
        }
        let mut k = 0;
        while k < alive.len() {
            let Some(status) = alive[k].exited() else {
                k += 1;
                continue;
            };
            let mut c = alive.swap_remove(k);
            lines.extend(c.rest_of_stdout());
            deaths += usize::from(!status.success());
            alive.push(spawn());
        }
        let delivered: BTreeSet<u64> = events(&lines).into_iter().collect();
        let dead = lines.iter().any(|l| l.starts_with("dead "));
        if dead && delivered.len() as u64 == TOTAL - 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{deaths} deaths, not done: {lines:#?}"
        );
        // A poll of the children's state, not a synchronisation: the loop ends on what
        // they print.
        std::thread::sleep(Duration::from_millis(5));
    }
    // The members leave once the ring is stopped and they delivered everything.
    ring.stop().expect("stop the ring");
    for mut c in alive {
        assert!(c.wait_status().success(), "{lines:#?}");
        lines.extend(c.rest_of_stdout());
    }
    assert_eq!(deaths, 4, "{lines:#?}");
    let dead: Vec<&String> = lines.iter().filter(|l| l.starts_with("dead ")).collect();
    assert_eq!(dead.len(), 1, "{lines:#?}");
    let f: Vec<&str> = dead[0].split(' ').collect();
    assert_eq!(f[1..4], [&*POISON.to_string(), "3", &*POISON.to_string()]);
    assert!(
        f[4].starts_with("error=the_consumer's_process_ended"),
        "{}",
        f[4]
    );
    let mut delivered = events(&lines);
    delivered.sort_unstable();
    let expected: Vec<u64> = (0..TOTAL).filter(|&v| v != POISON).collect();
    assert_eq!(delivered, expected, "each other event, exactly once");
    drop(p);
    drop(ring);
    Ring::remove(ns.name(), "r").expect("remove the ring");
}

/// The dead letter's error field says the process ended in the handler.
fn assert_died(error: &str) {
    assert!(
        error.starts_with("error=the_consumer's_process_ended"),
        "{error}"
    );
}

fn events(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ev "))
        .map(|v| v.parse().expect("an event value"))
        .collect()
}

/// The ring of the tests that run incarnations one after another: 64 slots.
fn one_by_one_ring(ns: &Namespace) -> Ring {
    let config = RingConfig {
        capacity: 64,
        ..RingConfig::default()
    };
    Ring::create(ns.name(), "r", &config).expect("create ring")
}

/// One incarnation of the consumer role with `env`, run to its end; the `first` publishes
/// the events once it is attached. Its exit status and what it printed after `ready`.
fn incarnation(
    ns: &Namespace,
    ring: &Ring,
    env: &[(&str, String)],
    first: bool,
) -> (std::process::ExitStatus, Vec<String>) {
    let mut child = ns.role("consumer", env);
    child.expect_line("ready");
    if first {
        let mut p = ring.producer().expect("producer");
        for v in 0..TOTAL {
            p.publish(&v.to_le_bytes()).expect("publish");
        }
    }
    let status = child.wait_status();
    (status, child.rest_of_stdout())
}

/// Two poisons in a row, batch cap 1: the restart that skips the first (its attempts used
/// up) hands the second over as the first event of its window, counted before it is
/// handed, so the second is also skipped after 3 counted deaths: 4 deaths on the first
/// (the first incarnation's is not counted: the poison was not its first event), 3 on the
/// second, and the eighth incarnation finishes.
#[test]
fn a_poison_right_after_a_skipped_one_has_each_death_counted() {
    let ns = Namespace::new("poison_twice");
    let ring = one_by_one_ring(&ns);
    let env = [("POISON_NEXT_TOO", "1".to_owned())];
    let mut lines = Vec::new();
    let mut finished = None;
    for k in 0..12 {
        let (status, said) = incarnation(&ns, &ring, &env, k == 0);
        lines.extend(said);
        if status.success() {
            finished = Some(k);
            break;
        }
    }
    let dead: Vec<&String> = lines.iter().filter(|l| l.starts_with("dead ")).collect();
    assert_eq!(dead.len(), 2, "{lines:#?}");
    for (d, v) in dead.iter().zip([POISON, POISON + 1]) {
        let f: Vec<&str> = d.split(' ').collect();
        assert_eq!(
            f[1..4],
            [&*v.to_string(), "3", &*v.to_string()],
            "{lines:#?}"
        );
    }
    assert_eq!(
        finished,
        Some(7),
        "deaths: 4 on {POISON}, 3 on the next: {lines:#?}"
    );
    let mut delivered = events(&lines);
    delivered.sort_unstable();
    delivered.dedup();
    let expected: Vec<u64> = (0..TOTAL)
        .filter(|&v| v != POISON && v != POISON + 1)
        .collect();
    assert_eq!(delivered, expected);
    drop(ring);
    Ring::remove(ns.name(), "r").expect("remove the ring");
}

/// Under `Retry { attempts: 3 }` the restart that finds the attempts used up stops FAILED
/// at the poison without calling the handler (and a restart after it does the same).
#[test]
fn retry_stops_failed_once_the_deaths_used_up_the_attempts() {
    let ns = Namespace::new("poison_retry_stop");
    let ring = one_by_one_ring(&ns);
    let env = [("POISON_MODE", "retry".to_owned())];
    let mut outcomes = Vec::new();
    for k in 0..6 {
        let (status, lines) = incarnation(&ns, &ring, &env, k == 0);
        let failed = lines.iter().find(|l| l.starts_with("failed ")).cloned();
        outcomes.push((status.success(), failed));
    }
    // Deaths at attaches 0 to 3 (the first counted from the window), then FAILED.
    let expected_fail = Some(format!("failed {POISON} 3"));
    assert_eq!(
        outcomes,
        [
            (false, None),
            (false, None),
            (false, None),
            (false, None),
            (true, expected_fail.clone()),
            (true, expected_fail),
        ]
    );
    let info = ring.info();
    let d = info.consumers.iter().find(|c| c.name == "d").expect("d");
    assert_eq!(
        (d.state, d.next, d.poison),
        ("FAILED", POISON, Some((POISON, 3)))
    );
    drop(ring);
    Ring::remove(ns.name(), "r").expect("remove the ring");
}

/// Run incarnations until one finishes; check it is incarnation `last_expected` (0 the
/// first), that the poison was dead-lettered once after 3 attempts and every other event
/// delivered once, in order. `caps`: the batch cap of the first incarnation and of the
/// restarts. `group`: the consumer is a worker group's one member instead of a durable
/// consumer. Returns the dead letter's error field.
fn run(
    test: &str,
    mode: Option<&str>,
    caps: [usize; 2],
    last_expected: usize,
    group: bool,
) -> String {
    let ns = Namespace::new(test);
    let config = RingConfig {
        capacity: 64,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut lines = Vec::new();
    let mut finished = None;
    let mut env: Vec<(&str, String)> = vec![("POISON_BATCH_CAP", String::new())];
    env.extend(mode.map(|m| ("POISON_MODE", m.to_owned())));
    if group {
        env.push(("POISON_GROUP", "1".to_owned()));
    }
    for k in 0..MAX_INCARNATIONS {
        env[0].1 = caps[usize::from(k > 0)].to_string();
        let mut child = ns.role("consumer", &env);
        let ready = child.expect_line("ready");
        if k == 0 {
            // The durable entry gates from here: publish everything once it exists.
            assert_eq!(num(&ready, "start"), 0);
            let mut p = ring.producer().expect("producer");
            for v in 0..TOTAL {
                p.publish(&v.to_le_bytes()).expect("publish");
            }
        }
        let status = child.wait_status();
        lines.extend(child.rest_of_stdout());
        if status.success() {
            finished = Some(k);
            break;
        }
    }
    let Some(last) = finished else {
        panic!("no incarnation got past the poison in {MAX_INCARNATIONS}: {lines:#?}");
    };
    assert_eq!(last, last_expected, "{lines:#?}");
    let dead: Vec<&String> = lines.iter().filter(|l| l.starts_with("dead ")).collect();
    assert_eq!(dead.len(), 1, "{lines:#?}");
    let f: Vec<&str> = dead[0].split(' ').collect();
    assert_eq!(f[1..4], [&*POISON.to_string(), "3", &*POISON.to_string()]);
    let error = f[4..].join(" ");
    let mut delivered = events(&lines);
    if caps == [1, 1] {
        let in_order = delivered.clone();
        delivered.sort_unstable();
        assert_eq!(delivered, in_order, "delivered out of order");
    } else {
        // Redelivered: the events before the poison in its batch, once per death.
        delivered.sort_unstable();
        delivered.dedup_by(|a, b| a == b && *a < POISON);
    }
    let expected: Vec<u64> = (0..TOTAL).filter(|&v| v != POISON).collect();
    assert_eq!(
        delivered, expected,
        "each other event, once after the poison"
    );
    let done = lines.iter().find(|l| l.starts_with("done")).expect("done");
    assert_eq!(num(done, "next"), TOTAL);
    assert_eq!(num(done, "dead_lettered"), 1);
    let info = ring.info();
    let d = info
        .consumers
        .iter()
        .find(|c| c.name == "d" || (c.group.is_some() && !c.is_group))
        .expect("the durable consumer or the member");
    assert_eq!((d.next, d.poison, d.stats.dead_lettered), (TOTAL, None, 1));
    assert_eq!(d.error_policy, "skip");
    drop(ring);
    Ring::remove(ns.name(), "r").expect("remove the ring");
    error
}

/// The event of `two_claims_a_death_in_one_claim_is_not_counted_in_the_other` whose handler
/// returns an error, and the one whose handler kills the process.
const TRANSIENT: u64 = 100;
const KILLER: u64 = 200;

/// A member of group `w` (`Skip { attempts: 2 }`, batch cap 1) that fails on `TRANSIENT`
/// with an error (once per call) and aborts on `KILLER`.
fn two_claims() {
    let ns = std::env::var(shmring::names::NAMESPACE_ENV).expect("the namespace");
    let ring = Ring::open(&ns, "r").expect("open the ring");
    let opts = ConsumerOptions::worker("w")
        .batch_cap(1)
        .on_error(ErrorPolicy::Skip { attempts: 2 });
    let mut c = ring.consumer(opts).expect("attach");
    println!("ready start={}", c.next_sequence());
    loop {
        let polled = c.poll_once_fallible(|ev| {
            let v = value(ev.bytes());
            if v == TRANSIENT {
                println!("err {}", ev.sequence());
                return Err("not now");
            }
            if v == KILLER {
                std::process::abort();
            }
            println!("ev {v}");
            Ok(())
        });
        if let Err(e) = polled {
            println!("error {e}");
            return;
        }
    }
}

/// A member holds its own claim and an adopted one. The adopted claim's event fails once
/// with an error, which `Skip { attempts: 2 }` answers with another attempt, marked under
/// way in the adopted entry before it is made; the member then dies in its own claim's
/// event. The death belongs to that event only: the next member must try the adopted
/// event again (one failed attempt of two), not dead-letter it as if the process had died
/// in its handler.
#[test]
fn two_claims_a_death_in_one_claim_is_not_counted_in_the_other() {
    let ns = Namespace::new("poison_two_claims");
    let config = RingConfig {
        capacity: 16,
        max_consumers: 4,
        declared_groups: vec!["w".to_owned()],
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let worker = || ConsumerOptions::worker("w").batch_cap(1);
    // a claims sequence 0 (the killer), b sequence 1 (the transient failure); both leave
    // their claims to the others.
    let a = ring.consumer(worker()).expect("a");
    let b = ring.consumer(worker()).expect("b");
    let mut p = ring.producer().expect("producer");
    p.publish(&KILLER.to_le_bytes()).expect("publish");
    p.publish(&TRANSIENT.to_le_bytes()).expect("publish");
    let (a_index, b_index) = (a.index(), b.index());
    drop(a);
    drop(b);
    // The child carries on with a's entry (its own claim: sequence 0) and adopts b's
    // (sequence 1) at its join; its first poll tries the adopted event (an error), then its
    // own (it dies).
    let mut child = ns.role("two_claims", &[]);
    child.expect_line("ready");
    let status = child.wait_status();
    let lines = child.rest_of_stdout();
    assert!(
        !status.success(),
        "the child dies on the killer: {lines:#?}"
    );
    assert!(lines.iter().any(|l| l == "err 1"), "{lines:#?}");
    let info = ring.info();
    let record = |i: u32| {
        info.consumers
            .iter()
            .find(|c| c.index == i)
            .map(|c| c.poison)
    };
    let records = (record(a_index), record(b_index));

    // The next member: its handler takes every event.
    let letters = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let l = std::sync::Arc::clone(&letters);
    let mut d = ring
        .consumer(worker().on_error(ErrorPolicy::Skip { attempts: 2 }).wait(
            shmring::WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_millis(100),
            },
        ))
        .expect("d");
    d.on_dead_letter(move |x| {
        l.lock()
            .expect("letters")
            .push((x.sequence, x.attempts, x.error.to_owned()))
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() + letters.lock().expect("letters").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "d got {seen:?}, letters {:?}, records {records:?}, child {lines:#?}: {:#?}",
            letters.lock().expect("letters"),
            ring.info().consumers
        );
        d.poll_once(|ev| seen.push(value(ev.bytes())))
            .expect("poll");
        let _ = d.wait();
    }
    seen.sort_unstable();
    assert_eq!(
        (seen, letters.lock().expect("letters").clone()),
        (vec![TRANSIENT, KILLER], Vec::new()),
        "each event handed to d, none dead-lettered (records the child left, own and \
         adopted: {records:?}; child: {lines:#?})"
    );
    drop(d);
    drop(p);
    drop(ring);
    Ring::remove(ns.name(), "r").expect("remove the ring");
}
