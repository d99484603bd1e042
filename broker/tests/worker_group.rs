//! A worker group under the broker: a killed member's entry is left to its group (not
//! freed or released, whatever the dead-consumer policy), the events it held wait for the
//! next member, and `broker status --json` shows the group, its members and their shares.

mod common;

use serde_json::Value;

use common::{num, ring, BrokerNs, Namespace};

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

/// Every consumer would be released if it died: a member must not be.
const CONFIG: &str =
    "[rings.r]\ncapacity = 64\nstall_threshold = \"2s\"\ndead_policy = \"release\"\n";

fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = vec![("ROLE_RING", "r".to_owned())];
    v.extend(pairs.iter().map(|(k, val)| (*k, (*val).to_owned())));
    v
}

fn consumers(v: &Value) -> Vec<Value> {
    ring(v, "r")
        .and_then(|r| r["consumers"].as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn a_killed_member_is_left_to_its_group_and_status_shows_the_shares() {
    let ns = Namespace::new("worker_group");
    let _broker = ns.broker(Some(CONFIG));
    // A member that holds its first claim (sequence 0) and reads nothing.
    let mut victim = ns.role(
        "consumer",
        &env(&[("ROLE_GROUP", "g"), ("ROLE_PAUSED", "1")]),
    );
    victim.expect("@ready");
    let mut producer = ns.role("producer", &env(&[("ROLE_COUNT", "200")]));
    producer.expect("@ready");
    ns.wait_status("the ring to fill up behind the member", |v, _| {
        let r = ring(v, "r")?;
        (num(r["producers"].as_array()?.first()?, "published") == 64).then_some(())
    });
    victim.kill();
    let dead = ns.wait_status("the member to be DEAD", |v, _| {
        consumers(v)
            .into_iter()
            .find(|c| c["group"].is_u64() && c["state"] == "DEAD")
    });
    assert_eq!(dead["policy"], "group", "{dead:#}");
    assert_eq!(dead["sequence"], 0, "it still holds its claim: {dead:#}");
    // Not released: the producer is still held at the ring's capacity.
    let (v, _) = ns.status();
    let r = ring(&v, "r").expect("r");
    assert_eq!(num(&r["health"], "releases"), 0, "{v:#}");
    assert_eq!(
        num(
            r["producers"]
                .as_array()
                .expect("producers")
                .first()
                .expect("p"),
            "published"
        ),
        64,
        "{v:#}"
    );

    let text = ns.cli(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("producers wait for worker group \"g\": start a member"),
        "{text}"
    );

    // The next member carries on with the dead member's entry and gets everything.
    let mut next = ns.role(
        "consumer",
        &env(&[("ROLE_GROUP", "g"), ("ROLE_EXPECT", "200")]),
    );
    next.expect("@ready");
    assert_eq!(
        next.expect("@done"),
        "count=200 first=0 last=199 skipped=0 dropped=0"
    );
    assert_eq!(producer.expect("@published"), "200");
    let v = ns.wait_status("the sweep to see every event delivered", |v, _| {
        let cs = consumers(v);
        cs.iter()
            .any(|c| c["group"].is_u64() && num(c, "delivered") == 200)
            .then(|| v.clone())
    });
    let cs = consumers(&v);
    let group = cs
        .iter()
        .find(|c| c["is_group"] == true)
        .expect("the group");
    assert_eq!(group["name"], "g");
    assert_eq!(group["state"], "DETACHED", "{group:#}");
    let members: Vec<&Value> = cs.iter().filter(|c| c["group"] == group["index"]).collect();
    assert_eq!(
        members.len(),
        1,
        "the new member took the dead one's entry: {v:#}"
    );
    assert_eq!(num(members[0], "redelivered"), 1, "{v:#}");
    let text = ns.cli(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("group \"g\""), "{text}");
    assert!(
        text.contains("delivered 200 (100.0%), redelivered 1"),
        "{text}"
    );

    // The group's entry is its members' work sequence: a request never releases or frees
    // it under them.
    for request in ["release", "unsubscribe"] {
        let out = ns.cli(&[request, "r", "g"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{request}: {err}");
        assert!(err.contains("is a worker group"), "{request}: {err}");
    }
    let (v, _) = ns.status();
    let group = consumers(&v)
        .into_iter()
        .find(|c| c["is_group"] == true)
        .expect("the group is still there");
    assert_eq!(group["state"], "DETACHED", "{group:#}");
}

/// Handing a process a given pid takes root (`/proc/sys/kernel/ns_last_pid`): ignored by a
/// plain `cargo test`, run by CI.
mod as_root {
    use super::*;
    use rustix::process::Signal;
    use shmring::{boottime_ns, process, Ring};
    use shmring_layout::{consumer_state, owned_word};
    use shmring_testkit::eventually;
    use shmring_testkit::fault::Sleeper;

    /// Whether every thread of `pid` is stopped (`T` in `/proc/PID/task/*/stat`).
    fn stopped(pid: u32) -> bool {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
                let rest = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
                rest.split_whitespace().next() == Some("T")
            })
        })
    }

    /// A member's entry taken over (RESUMING) by an adopter that died, whose pid an
    /// unrelated process got after a sweep saw the entry: a member judges the adopter by its
    /// pid alone and would leave the claim, and the producers behind it, held until that
    /// process exits. The broker puts the entry back to DETACHED, still gating, and the next
    /// member adopts it and delivers everything.
    #[test]
    #[ignore = "needs root (a process handed a given pid): run by CI with --ignored as_root::"]
    fn a_member_entry_whose_adopter_died_and_whose_pid_was_reused_is_adopted_by_the_next_member() {
        let ns = Namespace::new("worker_group_reused");
        let mut broker = ns.broker(Some(
            "[rings.r]\ncapacity = 64\nstall_threshold = \"20ms\"\ndead_policy = \"release\"\n",
        ));
        let mut victim = ns.role(
            "consumer",
            &env(&[("ROLE_GROUP", "g"), ("ROLE_PAUSED", "1")]),
        );
        victim.expect("@ready");
        let mut producer = ns.role("producer", &env(&[("ROLE_COUNT", "200")]));
        producer.expect("@ready");
        ns.wait_status("the ring to fill up behind the member", |v, _| {
            let r = ring(v, "r")?;
            (num(r["producers"].as_array()?.first()?, "published") == 64).then_some(())
        });
        victim.kill();
        let dead = ns.wait_status("the member to be DEAD", |v, _| {
            consumers(v)
                .into_iter()
                .find(|c| c["group"].is_u64() && c["state"] == "DEAD")
        });
        let index = u32::try_from(num(&dead, "index")).expect("an entry index");

        // An adopter takes the member's entry over (RESUMING, as `group::adopt` leaves it)
        // and is about to deliver its claim.
        let handle = Ring::open(ns.name(), "r").expect("open");
        let raw = shmring_testkit::raw::RawSegment::open(&handle);
        let adopter = Sleeper::spawn();
        let pid = adopter.pid();
        let dead_word = raw.consumer_word(index);
        let resuming = owned_word::next(dead_word, consumer_state::RESUMING, pid);
        raw.set_consumer_word(index, resuming);
        let mark = handle.last_sweep_ns();
        eventually("a sweep", || handle.last_sweep_ns() != mark);
        let mark = handle.last_sweep_ns();
        eventually("the next sweep", || handle.last_sweep_ns() != mark);
        assert_eq!(raw.consumer_word(index), resuming, "held: its adopter runs");

        // The adopter dies and, with the broker stopped, a process started a tick of the
        // start-time clock later gets its pid.
        broker.signal(Signal::STOP);
        eventually("the broker stopped", || stopped(broker.pid()));
        adopter.kill();
        let at = process::boot_ticks(boottime_ns()).expect("the start-time tick rate");
        eventually("a tick of the start-time clock", || {
            process::boot_ticks(boottime_ns()) > Some(at)
        });
        let reuser = Sleeper::with_pid(pid);
        broker.signal(Signal::CONT);

        // The next member adopts the claim and gets everything.
        let mut next = ns.role(
            "consumer",
            &env(&[("ROLE_GROUP", "g"), ("ROLE_EXPECT", "200")]),
        );
        next.expect("@ready");
        assert_eq!(
            next.expect("@done"),
            "count=200 first=0 last=199 skipped=0 dropped=0"
        );
        assert_eq!(producer.expect("@published"), "200");
        let start = process::start_time(reuser.pid());
        assert!(
            start.is_some_and(|s| process::is_alive(pid, s)),
            "the pid's new process still runs"
        );
    }
}
