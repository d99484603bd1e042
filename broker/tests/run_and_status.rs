//! `broker run` with the embedded default and with a config file; `broker status` with the
//! broker up and down; SIGTERM leaves the rings in place.

mod common;

use common::{num, ring, BrokerNs, Namespace};

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

#[test]
fn default_config_shows_the_default_ring() {
    let ns = Namespace::new("default");
    let _broker = ns.broker(None);
    let (v, code) = ns.status();
    assert_eq!(code, 0, "healthy status exits 0: {v:#}");
    assert_eq!(v["schema"], 1);
    assert_eq!(v["broker"]["running"], true);
    assert_eq!(v["broker"]["epoch"], 1);
    let r = ring(&v, "default").expect("ring default listed");
    assert_eq!(r["state"], "RUNNING");
    assert_eq!(num(r, "capacity"), 1024);
    assert_eq!(num(r, "slot_size"), 128);
    assert_eq!(num(r, "free"), 1024);
    assert_eq!(num(r, "epoch"), 1);
    assert!(ns.dir().join("default.ring").exists());

    let text = ns.cli(&["status"]);
    let screen = String::from_utf8_lossy(&text.stdout);
    assert!(
        screen.contains("ring \"default\"") && screen.contains("all healthy"),
        "{screen}"
    );
}

#[test]
fn config_with_two_rings_shows_both() {
    let ns = Namespace::new("two");
    let _broker = ns.broker(Some(
        "[rings.orders]\ncapacity = 64\nslot_size = 256\n\n[rings.quotes]\ncapacity = 4096\nproducer_mode = \"single\"\nstall_threshold = \"40ms\"\n",
    ));
    let (v, code) = ns.status();
    assert_eq!(code, 0, "{v:#}");
    let names: Vec<&str> = v["rings"]
        .as_array()
        .expect("rings")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["orders", "quotes"]);
    let orders = ring(&v, "orders").expect("orders");
    assert_eq!(
        (num(orders, "capacity"), num(orders, "slot_size")),
        (64, 256)
    );
    let quotes = ring(&v, "quotes").expect("quotes");
    assert_eq!(num(quotes, "capacity"), 4096);
    assert_eq!(quotes["producer_mode"], "single");
    assert_eq!(num(&quotes["health"], "stall_threshold_ms"), 40);
    // The sweep runs at half the shortest stall threshold.
    assert_eq!(num(&v["broker"], "sweep_period_us"), 20_000);
}

#[test]
fn status_without_a_broker_reads_the_segments_and_exits_2() {
    let ns = Namespace::new("down");
    let mut broker = ns.broker(None);
    let status = broker.signal_and_wait(rustix::process::Signal::TERM);
    assert!(status.success(), "SIGTERM exits cleanly: {status:?}");
    assert!(
        ns.dir().join("default.ring").exists(),
        "rings stay after the broker exits"
    );
    assert!(
        !ns.dir().join("broker.sock").exists(),
        "the socket is removed on exit"
    );
    let (v, code) = ns.status();
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(v["broker"]["running"], false);
    assert!(ring(&v, "default").is_some(), "{v:#}");
    let out = ns.cli(&["stop", "default"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no broker is running"));
}

#[test]
fn one_broker_per_namespace() {
    let ns = Namespace::new("lock");
    let _broker = ns.broker(None);
    let out = shmring_testkit::output(
        "second broker",
        std::process::Command::new(common::BIN).args(["run", "--namespace", ns.name()]),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another broker already runs"), "{err}");
}

#[test]
fn create_stop_start_drain_delete_through_the_broker() {
    let ns = Namespace::new("cli");
    let _broker = ns.broker(None);
    let ok = |args: &[&str]| {
        let out = ns.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ok(&["create", "extra", "--capacity", "128"]);
    let (v, _) = ns.status();
    assert_eq!(num(ring(&v, "extra").expect("created"), "capacity"), 128);
    let again = ns.cli(&["create", "extra"]);
    assert_eq!(again.status.code(), Some(1), "creating twice is refused");
    assert!(ok(&["stop", "extra"]).contains("stopped at sequence 0"));
    assert_eq!(
        ring(&ns.status().0, "extra").expect("extra")["state"],
        "STOPPED"
    );
    assert!(ok(&["start", "extra"]).contains("run 2"));
    // The state, not only what the CLI says: running again as run 2, with the line open.
    let handle = shmring::Ring::open(ns.name(), "extra").expect("open extra");
    assert_eq!(
        (handle.state(), handle.run_number(), handle.is_closed()),
        (Some(shmring::RingState::Running), 2, false)
    );
    let mut p = handle.producer().expect("producer");
    for i in 0..3u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    drop(p);
    assert!(ok(&["drain", "extra", "--timeout", "5s"]).contains("drained"));
    // Drained: stopped, closed, at the 3 events published (no consumer to wait for).
    assert_eq!(
        (handle.state(), handle.is_closed(), handle.head()),
        (Some(shmring::RingState::Stopped), true, 3)
    );
    ok(&["start", "extra"]);
    assert_eq!(handle.state(), Some(shmring::RingState::Running));
    ok(&["delete", "extra"]);
    assert!(ring(&ns.status().0, "extra").is_none());
    assert!(!ns.dir().join("extra.ring").exists());
}

#[test]
fn a_segment_that_fails_validation_is_reported_and_left_alone() {
    let ns = Namespace::new("bad");
    std::fs::create_dir_all(ns.dir()).expect("dir");
    let bad = ns.dir().join("junk.ring");
    let junk = vec![0x5a_u8; 4096];
    std::fs::write(&bad, &junk).expect("write junk");
    let _broker = ns.broker(None);
    let (v, code) = ns.status();
    assert_eq!(code, 1, "an unreadable segment is unhealthy: {v:#}");
    let unreadable = v["unreadable"].as_array().expect("unreadable");
    assert_eq!(unreadable.len(), 1, "{v:#}");
    assert!(unreadable[0]["path"]
        .as_str()
        .is_some_and(|p| p.ends_with("junk.ring")));
    assert!(
        ring(&v, "default").is_some(),
        "the good ring is still served"
    );
    assert_eq!(
        std::fs::read(&bad).expect("still there"),
        junk,
        "left alone, byte for byte"
    );
}

#[test]
fn the_printed_default_config_is_valid() {
    let ns = Namespace::concurrent("cfg");
    let out = ns.cli(&["config", "--print-default"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("[rings.default]") && text.contains("dead_policy"),
        "{text}"
    );
    let path = ns.config(&text);
    let check = ns.cli(&["config", "--check", path.to_str().expect("utf-8 path")]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(String::from_utf8_lossy(&check.stdout).contains("ring default: capacity 1024"));
    let bad = ns.config("[rings.x]\ncapacity = 3\n");
    let check = ns.cli(&["config", "--check", bad.to_str().expect("utf-8 path")]);
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stderr).contains("ring \"x\""));
}

/// A ring created after the broker started, by a client and not in the config, is found
/// by the broker's rescan and watched like its own: listed with its consumers, and a
/// consumer of it that dies is seen DEAD.
#[test]
fn a_ring_created_after_the_broker_started_is_adopted_and_watched() {
    let ns = Namespace::new("late");
    let _broker = ns.broker(None);
    let late = shmring::Ring::create(
        ns.name(),
        "late",
        &shmring::RingConfig {
            capacity: 64,
            ..shmring::RingConfig::default()
        },
    )
    .expect("create late");
    let mut reader = ns.role(
        "consumer",
        &[
            ("ROLE_RING", "late".to_owned()),
            ("ROLE_NAME", "reader".to_owned()),
        ],
    );
    reader.expect("@ready");
    let mut p = late.producer().expect("producer");
    for i in 0..5u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    ns.wait_status("the late ring listed with its reader", |v, _| {
        let r = ring(v, "late")?;
        let c = common::consumer(v, "late", "reader")?;
        (num(r, "head") == 5 && num(r, "epoch") >= 1 && c["state"] == "HEALTHY").then_some(())
    });
    reader.kill();
    ns.wait_status("the late ring's reader DEAD", |v, _| {
        (common::consumer(v, "late", "reader")?["state"] == "DEAD").then_some(())
    });
}

/// A broker whose only ring asks for the longest stall threshold sweeps every 12 hours; a
/// ring a client creates meanwhile is still taken up within a rescan (half a second), and
/// its shorter threshold shortens the sweeps at once: its idle consumer is STALLED on time.
/// Before, the broker's wait for the next sweep was the period it began with: the new ring
/// went unseen, unchecked and unrepaired for the rest of those 12 hours.
#[test]
fn a_ring_created_during_a_long_sweep_period_is_taken_up_at_once() {
    use shmring::{ConsumerOptions, Ring, RingConfig};

    let ns = Namespace::new("late_ring");
    let _broker = ns.broker(Some("[rings.slow]\nstall_threshold = \"24h\"\n"));
    ns.wait_status("the configured ring", |v, _| ring(v, "slow").map(|_| ()));
    let made = Ring::create(ns.name(), "made", &RingConfig::default()).expect("create");
    let _idle = made
        .consumer(ConsumerOptions::durable("idle"))
        .expect("consumer");
    made.producer()
        .expect("producer")
        .publish(b"waiting")
        .expect("publish");
    ns.wait_status(
        "the client's ring adopted and its idle consumer STALLED",
        |v, _| (common::consumer(v, "made", "idle")?["state"] == "STALLED").then_some(()),
    );
}

/// A ring's file removed and created again, or another file renamed over it, between two
/// looks of the broker: the name now opens the new file, so the broker watches that one
/// (its status, policies and repairs are about the ring its clients open). Before, it kept
/// the old mapping for as long as it ran, and the new file was never adopted.
#[test]
fn a_ring_file_replaced_under_the_broker_is_followed() {
    use shmring::{Ring, RingConfig};

    let ns = Namespace::new("replaced");
    let elsewhere = ns.sibling("elsewhere");
    // A day's threshold (a sweep every 12 hours): only the replacement itself can bring one
    // soon.
    let _broker = ns.broker(Some(
        "[rings.x]\ncapacity = 64\nstall_threshold = \"24h\"\n",
    ));
    ns.wait_status("the configured ring", |v, _| ring(v, "x").map(|_| ()));
    let other = Ring::create(elsewhere.name(), "x", &RingConfig::default()).expect("create");
    let mut p = other.producer().expect("producer");
    for i in 0..3u8 {
        p.publish(&[i]).expect("publish");
    }
    drop(p);
    std::fs::rename(other.path(), ns.dir().join("x.ring")).expect("rename over x");
    ns.wait_status("x to be the renamed file", |v, _| {
        (num(ring(v, "x")?, "head") == 3).then_some(())
    });
}
