//! Lifecycle through the broker under load: stop racing four publishing processes loses
//! nothing (every accepted publish is delivered, every refused one was never accepted) and
//! start lets publishing continue; delete while attached gives every client a clear error.
//! The racers publish on a ring of 16 slots, paced in half the rounds and flat out (often
//! at the wrap gate when the stop lands) in the other half.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{wait_until, BrokerNs, Child, Namespace};
use shmring::{ConsumerOptions, PollError, Ring, WaitOutcome, WaitStrategy};

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

const RACERS: u64 = 4;
const ROUNDS: u64 = 20;

#[test]
fn stop_racing_four_publishers_loses_nothing_and_start_continues() {
    let ns = Namespace::new("race");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 16\n"));
    let ring = Ring::open(ns.name(), "r").expect("open");
    let mut sink = ring
        .consumer(
            ConsumerOptions::durable("sink").wait(WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_millis(10),
            }),
        )
        .expect("consumer");
    let done = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let (d, r) = (done.clone(), received.clone());
    // The consumer: every racer's counter must arrive in order, with no gap and no repeat.
    let checker = std::thread::spawn(move || {
        let mut next = [0u64; RACERS as usize];
        let deadline = std::time::Instant::now() + Duration::from_secs(240);
        while !d.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the consumer ran past its deadline at {next:?}"
            );
            let polled = sink.poll_once(|ev| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&ev.bytes()[..8]);
                let v = u64::from_le_bytes(b);
                let (id, counter) = ((v >> 32) as usize, v & 0xffff_ffff);
                if id == u32::MAX as usize {
                    return; // the test's own event after the last start
                }
                assert!(id < next.len(), "unknown racer {id}");
                assert_eq!(counter, next[id], "racer {id}: lost or repeated event");
                next[id] += 1;
                r.fetch_add(1, Ordering::SeqCst);
            });
            match polled {
                Ok(0) => {
                    if let Ok(WaitOutcome::Closed) = sink.wait() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                Ok(_) => {}
                Err(PollError::Deleted) => break,
                Err(e) => panic!("consumer: {e}"),
            }
        }
        next
    });

    let mut racers: Vec<Child> = (0..RACERS)
        .map(|id| {
            ns.role(
                "racer",
                &[
                    ("ROLE_RING", "r".to_owned()),
                    ("ROLE_ID", id.to_string()),
                    ("ROLE_PACE_US", "100".to_owned()),
                ],
            )
        })
        .collect();
    for r in &mut racers {
        r.expect("@ready");
    }
    let mut per_racer = [0u64; RACERS as usize];
    let mut total = 0u64;
    for round in 1..=ROUNDS {
        let pace = if round % 2 == 0 { 0 } else { 100 };
        for r in &mut racers {
            r.send_line(&format!("go {pace}"));
        }
        wait_until("publishing to get going", || {
            (ring.head() >= total + 400).then_some(())
        });
        let out = ns.cli(&["stop", "r"]);
        assert!(
            out.status.success(),
            "stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (i, r) in racers.iter_mut().enumerate() {
            let n: u64 = r.expect("@accepted").parse().expect("a count");
            per_racer[i] += n;
            total += n;
        }
        assert_eq!(
            ring.head(),
            total,
            "round {round}: the stop sequence is the accepted count"
        );
        wait_until("the consumer to get every accepted event", || {
            (received.load(Ordering::SeqCst) >= total).then_some(())
        });
        assert_eq!(
            received.load(Ordering::SeqCst),
            total,
            "round {round}: delivered == accepted"
        );
        let out = ns.cli(&["start", "r"]);
        assert!(
            out.status.success(),
            "start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("run {}", round + 1)));
    }
    // Started again: publishing continues where it stopped.
    let mut p = ring.producer().expect("producer");
    let seq = p.publish(&(u64::from(u32::MAX) << 32).to_le_bytes());
    assert_eq!(seq, Ok(total), "publishing continues at the stop sequence");
    for r in &mut racers {
        r.close_stdin();
        assert!(r.wait_status().success());
    }
    done.store(true, Ordering::SeqCst);
    let next = checker.join().expect("the consumer found no loss");
    assert_eq!(next, per_racer, "per racer: delivered == accepted");
}

#[test]
fn delete_while_attached_gives_clients_a_clear_error() {
    let ns = Namespace::new("delete");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    let env = |pairs: &[(&'static str, &str)]| {
        let mut e = vec![("ROLE_RING", "r".to_owned())];
        e.extend(pairs.iter().map(|(k, v)| (*k, (*v).to_owned())));
        e
    };
    let mut c = ns.role("consumer", &env(&[("ROLE_NAME", "c")]));
    c.expect("@ready");
    // A second consumer that never polls: the producer ends up parked at the wrap gate.
    let mut stuck = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "stuck"), ("ROLE_PAUSED", "1")]),
    );
    stuck.expect("@ready");
    let mut p = ns.role(
        "producer",
        &env(&[("ROLE_PACE_US", "100"), ("ROLE_PROGRESS", "64")]),
    );
    p.expect("@ready");
    p.expect("@progress");
    ns.wait_status("the producer to be held at the wrap gate", |v, _| {
        let r = common::ring(v, "r")?;
        (common::num(r, "free") == 0).then_some(())
    });

    let out = ns.cli(&["delete", "r"]);
    assert!(
        out.status.success(),
        "delete: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(p.expect("@deleted").starts_with("published="));
    assert!(c.expect("@deleted").starts_with("count="));
    // The paused one learns on its next poll.
    stuck.send_line("resume");
    assert!(stuck.expect("@deleted").starts_with("count="));
    for proc in [&mut p, &mut c, &mut stuck] {
        assert_eq!(
            proc.wait_status().code(),
            Some(3),
            "exited with the Deleted error"
        );
    }
    assert!(!ns.dir().join("r.ring").exists());
    let (v, code) = ns.status();
    assert!(common::ring(&v, "r").is_none(), "{v:#}");
    assert_eq!(code, 0);
    // Opening it again says it is gone.
    let err = Ring::open(ns.name(), "r").expect_err("deleted");
    assert!(err.to_string().contains("does not exist"), "{err}");
}

/// A broker with ring "r" holding one event for durable consumer `name`, which is not
/// attached and reads nothing: a drain waits for it.
fn held_ring(ns: &Namespace, name: &str) -> (Child, Ring) {
    let broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    let r = Ring::open(ns.name(), "r").expect("open");
    drop(
        r.consumer(ConsumerOptions::durable(name))
            .expect("consumer"),
    );
    r.producer()
        .expect("producer")
        .publish(b"pending")
        .expect("publish");
    (broker, r)
}

/// A live process (a `sleep`) made the owner of a stop of `r` that it never finishes.
fn a_live_stopper(ns: &Namespace, r: &Ring) -> Child {
    let owner = ns.spawn("stop owner", {
        let mut c = std::process::Command::new("sleep");
        c.arg("600");
        c
    });
    shmring_testkit::raw::RawSegment::open(r).set_lifecycle_word(shmring_layout::lifecycle::pack(
        9,
        shmring::RingState::Stopping as u32,
        owner.pid(),
    ));
    owner
}

/// `broker drain r --timeout TIMEOUT`, once the ring is draining.
fn draining(ns: &Namespace, timeout: &str) -> Child {
    let drain = common::fault::cli_spawn(ns, &["drain", "r", "--timeout", timeout]);
    ns.wait_status("the ring draining", |v, _| {
        (common::ring(v, "r")?["state"] == "DRAINING").then_some(())
    });
    drain
}

/// One lifecycle request on a ring at a time (a drain holds the ring for its whole wait),
/// but a request queued behind a long one gets its answer by its own deadline: a clear
/// refusal that names what holds the ring, nothing changed. Before, it waited for the
/// drain to end and then said only that its deadline had passed; the CLI, waiting 15 s,
/// got no reply at all.
#[test]
fn a_request_queued_behind_a_long_drain_is_refused_by_its_deadline() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;

    let ns = Namespace::new("queued");
    let (_broker, r) = held_ring(&ns, "away");
    let drain = draining(&ns, "60s");

    // A stop with a deadline 3 s away (long enough for the broker to take it in on a busy
    // machine; the drain waits 60 s).
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let deadline = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64 + 3_000_000_000;
    let mut s = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
    s.set_read_timeout(Some(common::WAIT)).expect("timeout");
    writeln!(
        s,
        "{{\"op\":\"stop\",\"ring\":\"r\",\"deadline_ns\":{deadline}}}"
    )
    .expect("request");
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).expect("a reply");
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["reply"], "error", "{v}");
    let message = v["message"].as_str().expect("a message");
    assert!(message.contains("another lifecycle request"), "{message}");
    // Answered while the drain still waits: the ring is still draining.
    assert_eq!(r.state(), Some(shmring::RingState::Draining));
    drop(drain);
}

/// A drain waits only while someone waits for its answer. Its requester gone (the CLI
/// interrupted), the broker stops waiting: the ring stays stopped, its lifecycle turn is
/// free at once for the next request, and the log says why. Before, the broker waited out
/// the drain's whole timeout for nobody, and every stop, start or delete of the ring in
/// that time was refused.
#[test]
fn a_drain_whose_requester_went_away_frees_the_ring_at_once() {
    let ns = Namespace::new("abandon");
    let (broker, _r) = held_ring(&ns, "away");
    draining(&ns, "600s").kill();

    ns.wait_status("the abandoned drain to leave the ring stopped", |v, _| {
        (common::ring(v, "r")?["state"] == "STOPPED").then_some(())
    });
    assert!(
        broker.expect_stderr_within("drain of ring", common::WAIT)
            && broker.stderr_has("went away"),
        "the log says the drain was abandoned:\n{}",
        broker.stderr_so_far()
    );
    let out = ns.cli(&["delete", "r"]);
    assert!(
        out.status.success(),
        "the ring's turn is free: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A requester that shuts down only its writing half after its request (as `nc -N` or a
/// script closing stdin does) still waits for the reply: its drain goes on and answers.
#[test]
fn a_drain_requested_over_a_half_closed_connection_still_answers() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;

    let ns = Namespace::new("halfclose");
    let (_broker, r) = held_ring(&ns, "late");
    let mut s = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
    s.set_read_timeout(Some(common::WAIT)).expect("timeout");
    writeln!(
        s,
        "{{\"op\":\"drain\",\"ring\":\"r\",\"timeout_ms\":60000}}"
    )
    .expect("request");
    s.shutdown(std::net::Shutdown::Write).expect("half close");
    ns.wait_status("the ring draining", |v, _| {
        (common::ring(v, "r")?["state"] == "DRAINING").then_some(())
    });
    // The consumer comes back and reads what the drain waits for.
    let mut late = r
        .consumer(ConsumerOptions::durable("late"))
        .expect("consumer");
    wait_until("the consumer to catch up", || {
        late.poll_once(|_| {}).expect("poll");
        (late.next_sequence() == 1).then_some(())
    });
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).expect("a reply");
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["reply"], "done", "{v}");
    assert_eq!(v["sequence"], 1, "{v}");
}

/// A delete that waits for a live process's stop of the ring (a remove waits for it, up to
/// the lifecycle wait) leaves the broker answering meanwhile: status is served while the
/// delete is still waiting, and the delete goes through once that process is gone. Before,
/// the delete held the broker's lock for its whole wait, and status, sweeps and every
/// other ring's requests waited behind it.
#[test]
fn a_delete_waiting_for_a_live_stop_leaves_the_broker_answering() {
    use std::process::Command;

    let ns = Namespace::new("delwait");
    // The control thread's debug line says when the broker has the request.
    let mut cmd = Command::new(common::BIN);
    cmd.args(["run", "--namespace", ns.name(), "--config"])
        .arg(ns.config("[rings.r]\ncapacity = 64\n"))
        .env("RUST_LOG", "info,shmring_broker::run::control=debug");
    let broker = ns.spawn("broker", cmd);
    assert!(broker.expect_stderr_within("broker ready", common::WAIT));
    let r = Ring::open(ns.name(), "r").expect("open");
    let mut owner = a_live_stopper(&ns, &r);

    let mut delete = common::fault::cli_spawn(&ns, &["delete", "r"]);
    assert!(
        broker.expect_stderr_within("Delete {", common::WAIT),
        "the broker never got the delete:\n{}",
        broker.stderr_so_far()
    );
    let (v, _) = ns.status();
    assert!(
        delete.exited().is_none(),
        "status was answered only after the delete ended"
    );
    // From the running broker, not the offline report the CLI falls back to when the
    // broker does not answer in time.
    assert_eq!(v["broker"]["running"], true, "{v:#}");
    assert!(v["broker"]["unreachable"].is_null(), "{v:#}");
    assert!(common::ring(&v, "r").is_some(), "{v:#}");

    // The stop's owner gone, the delete finishes its stop and goes through.
    owner.kill();
    let (ok, text) = common::fault::cli_finish(delete);
    assert!(ok, "delete: {text}");
    assert!(r.is_deleted());
    assert!(!ns.dir().join("r.ring").exists());
}

/// A request queued behind a drain acts, once its turn comes, on the ring that holds the
/// name then: here another ring's file renamed over the ring's meanwhile (as a remove and
/// a create would leave the name), which the queued stop stops. Before, it stopped the
/// file it had looked up when it arrived, no longer the ring "r", and said it had
/// stopped "r" while the ring under the name kept running.
#[test]
fn a_request_queued_behind_a_drain_acts_on_the_ring_under_the_name_once_its_turn_comes() {
    let ns = Namespace::new("queued_renamed");
    let (broker, old) = held_ring(&ns, "away");
    let mut drain = draining(&ns, "600s");
    let stop = common::fault::cli_spawn(&ns, &["stop", "r"]);
    assert!(
        broker.expect_stderr_within("waits for another one on the ring", common::WAIT),
        "the stop waits for the drain:\n{}",
        broker.stderr_so_far()
    );
    // Another ring of the namespace, its file then renamed over "r"'s.
    let new = Ring::create(
        ns.name(),
        "other",
        &shmring::RingConfig {
            capacity: 64,
            ..shmring::RingConfig::default()
        },
    )
    .expect("create");
    std::fs::rename(new.path(), old.path()).expect("rename over the ring's file");
    // The drain's requester goes away: the broker ends the drain, and the stop's turn comes.
    drain.kill();
    let (ok, out) = common::fault::cli_finish(stop);
    assert!(ok, "{out}");
    assert_eq!(
        new.state(),
        Some(shmring::RingState::Stopped),
        "the ring under the name is stopped: {out}"
    );
}

/// A request that waits for its turn and then for a live process's stop of the ring gets
/// the broker's answer: the CLI waits as long as the broker may take (the turn, then the
/// lifecycle wait, then the work). Before, the CLI gave up 15 s after sending while the
/// broker could take 10 s for the turn and 10 s more for the live stopper, and the user
/// read "no reply" where the broker said which process held the ring.
#[test]
fn a_request_that_waits_for_its_turn_and_a_live_stopper_gets_the_brokers_answer() {
    let ns = Namespace::new("outwait");
    let (broker, r) = held_ring(&ns, "away");
    // The drain holds the ring's turn for 7 s.
    let drain = draining(&ns, "7s");
    let stop = common::fault::cli_spawn(&ns, &["stop", "r"]);
    assert!(
        broker.expect_stderr_within("waits for another one on the ring", common::WAIT),
        "the stop waits for the drain:\n{}",
        broker.stderr_so_far()
    );
    // Once its turn comes, the queued stop waits the lifecycle wait for this one.
    let mut owner = a_live_stopper(&ns, &r);
    let (drained, text) = common::fault::cli_finish(drain);
    assert!(!drained, "the drain times out: {text}");
    let (ok, out) = common::fault::cli_finish(stop);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "process {} is changing the ring's lifecycle",
            owner.pid()
        )),
        "the broker's answer names the stopper: {out}"
    );
    owner.kill();
}
