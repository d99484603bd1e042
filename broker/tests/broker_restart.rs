//! The broker killed with SIGKILL while a producer and a consumer run: no event lost, no
//! stall; a new broker adopts the ring with epoch + 1 and the counters as they were.

mod common;

use common::{consumer, num, ring, BrokerNs, Namespace};

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

#[test]
fn broker_killed_mid_traffic_is_replaced_and_adopts_the_ring() {
    let ns = Namespace::new("restart");
    let config = "[rings.r]\ncapacity = 256\nstall_threshold = \"1s\"\n";
    let mut broker = ns.broker(Some(config));
    let (v, _) = ns.status();
    let epoch = num(ring(&v, "r").expect("r"), "epoch");
    assert_eq!(num(&v["broker"], "epoch"), 1);

    let env = |pairs: &[(&'static str, &str)]| {
        let mut e = vec![("ROLE_RING", "r".to_owned())];
        e.extend(pairs.iter().map(|(k, v)| (*k, (*v).to_owned())));
        e
    };
    let mut c = ns.role(
        "consumer",
        &env(&[("ROLE_NAME", "sink"), ("ROLE_EXPECT", "20000")]),
    );
    c.expect("@ready");
    let mut p = ns.role(
        "producer",
        &env(&[
            ("ROLE_COUNT", "20000"),
            ("ROLE_PACE_US", "20"),
            ("ROLE_PROGRESS", "1000"),
            ("ROLE_PHASE", "10000"),
        ]),
    );
    p.expect("@ready");
    assert_eq!(p.expect("@progress"), "1000");
    broker.kill();

    // Traffic goes on without a broker.
    assert_eq!(p.expect("@phase"), "10000");
    let mut broker = ns.broker(Some(config));
    let v = ns.wait_status("the consumer to catch up under the new broker", |v, _| {
        let s = consumer(v, "r", "sink")?;
        (num(s, "delivered") == 10_000).then(|| v.clone())
    });
    let r = ring(&v, "r").expect("r");
    assert_eq!(num(r, "epoch"), epoch + 1, "adopted: epoch + 1");
    assert_eq!(num(&v["broker"], "epoch"), 2);
    assert_eq!(num(r, "head"), 10_000, "the same counters");
    assert_eq!(num(&r["producers"][0], "published"), 10_000);
    let s = consumer(&v, "r", "sink").expect("sink");
    assert_eq!(s["state"], "HEALTHY");
    assert_eq!((num(s, "skipped"), num(s, "dropped_behind")), (0, 0));

    p.send_line("go");
    assert_eq!(p.expect("@published"), "20000");
    assert_eq!(
        c.expect("@done"),
        "count=20000 first=0 last=19999 skipped=0 dropped=0"
    );
    let (v, code) = ns.status();
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        num(&ring(&v, "r").expect("r")["health"], "stalls"),
        0,
        "no stall"
    );
    assert!(broker.stderr_has("adopted ring"));
    broker.kill();
}

fn sweeps_after(ns: &Namespace, n: u64) -> serde_json::Value {
    let before = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    ns.wait_status("more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= before + n).then(|| v.clone())
    })
}

/// A creator killed between building a segment and renaming it into place leaves it under
/// its temporary name, `.NAME.PID.SERIAL.TIME.tmp`. It is never opened as the ring, never
/// adopted by a broker (this one or the next) and never listed as unreadable. While a
/// process has its pid it stays (it may be at work); once that pid is free, a broker's
/// rescan unlinks it, so that it does not hold its memory for good.
#[test]
fn a_creators_tmp_leftover_is_never_opened_or_adopted_and_is_removed_once_its_creator_is_gone() {
    let ns = Namespace::new("tmpleft");
    let config = "[rings.r]\ncapacity = 64\nstall_threshold = \"100ms\"\n";
    let mut broker = ns.broker(Some(config));
    // Whole, valid segments under temporary names: one of this (live) process, one of a
    // dead one.
    let cfg = shmring::RingConfig {
        capacity: 16,
        ..shmring::RingConfig::default()
    };
    let (dead, _) = shmring_testkit::fault::dead_process();
    let live = ns.dir().join(format!(".x.{}.0.17.tmp", std::process::id()));
    let gone = ns.dir().join(format!(".x.{dead}.0.17.tmp"));
    for tmp in [&live, &gone] {
        drop(shmring::Ring::create(ns.name(), "x", &cfg).expect("create x"));
        std::fs::rename(ns.dir().join("x.ring"), tmp).expect("rename to the temporary name");
    }
    let check = |v: &serde_json::Value, who: &str| {
        assert!(ring(v, "x").is_none(), "{who} adopted a leftover: {v:#}");
        assert_eq!(v["unreadable"].as_array().map(Vec::len), Some(0), "{v:#}");
        assert!(matches!(
            shmring::Ring::open(ns.name(), "x"),
            Err(shmring::OpenError::NotFound { .. })
        ));
        assert!(live.exists(), "{who} removed a live creator's file");
    };
    // The running broker's sweeps look at the directory: a few of them.
    check(&sweeps_after(&ns, 3), "the running broker");
    ns.wait_status("the dead creator's file to be removed", |_, _| {
        (!gone.exists()).then_some(())
    });
    assert!(broker.stderr_has("finished the build of a dead process"));
    broker.kill();
    let _broker = ns.broker(Some(config));
    check(&sweeps_after(&ns, 2), "a new broker");
}

/// A remover killed after it set the ring aside under `.NAME.PID.SERIAL.TIME.removing`
/// leaves the ring's clients running on a ring nobody can open, and its memory held. Once
/// the remover's pid is free, the broker finishes the remove: the clients get `Deleted`
/// and the file is unlinked. It never adopts the ring meanwhile.
#[test]
fn a_dead_removers_ring_is_marked_deleted_and_unlinked_by_the_broker() {
    let ns = Namespace::new("rmleft");
    let cfg = shmring::RingConfig {
        capacity: 16,
        ..shmring::RingConfig::default()
    };
    let handle = shmring::Ring::create(ns.name(), "x", &cfg).expect("create x");
    let mut p = handle.producer().expect("producer");
    assert_eq!(p.publish(b"kept"), Ok(0));
    let (dead, _) = shmring_testkit::fault::dead_process();
    let aside = ns.dir().join(format!(".x.{dead}.0.17.removing"));
    std::fs::rename(ns.dir().join("x.ring"), &aside).expect("set aside, as a remover does");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    ns.wait_status("the removal to be finished", |v, _| {
        assert!(
            ring(v, "x").is_none(),
            "the broker adopted the ring set aside: {v:#}"
        );
        (!aside.exists()).then_some(())
    });
    assert!(handle.is_deleted(), "unlinked without being marked deleted");
    assert_eq!(p.publish(b"late"), Err(shmring::PublishError::Deleted));
}

/// A removal's hidden name that the broker cannot clear is listed under `unreadable` with
/// the reason, and left: here a second name (a hard link) for a ring in use, which stays
/// running under its own name.
#[test]
fn a_leftover_the_broker_cannot_clear_is_listed_unreadable_and_left() {
    let ns = Namespace::new("rmlink");
    let _broker = ns.broker(Some("[rings.r]\ncapacity = 64\n"));
    let handle = shmring::Ring::open(ns.name(), "r").expect("open r");
    let (dead, _) = shmring_testkit::fault::dead_process();
    let link = ns.dir().join(format!(".r.{dead}.0.17.removing"));
    std::fs::hard_link(ns.dir().join("r.ring"), &link).expect("hard link");
    let v = ns.wait_status("the leftover to be listed", |v, _| {
        let listed = v["unreadable"].as_array()?.iter().any(|u| {
            u["path"].as_str() == link.to_str()
                && u["error"].as_str().is_some_and(|e| e.contains("2 names"))
        });
        listed.then(|| v.clone())
    });
    assert!(
        !handle.is_deleted(),
        "the ring in use was marked deleted: {v:#}"
    );
    assert_eq!(ring(&v, "r").expect("r")["state"], "RUNNING", "{v:#}");
    assert!(link.exists());
    std::fs::remove_file(&link).expect("remove the link");
    ns.wait_status("the listing to go with the file", |v, _| {
        (v["unreadable"].as_array()?.is_empty()).then_some(())
    });
}

/// The ring file unlinked under live clients: the broker stops watching it (the ring leaves
/// the status), a new `open` gets `NotFound`, and the attached producer and consumer carry
/// on with the unlinked segment.
#[test]
fn a_ring_file_that_disappears_leaves_the_status_and_attached_clients_carry_on() {
    let ns = Namespace::new("gone");
    let _broker = ns.broker(Some(
        "[rings.r]\ncapacity = 64\nstall_threshold = \"100ms\"\n",
    ));
    let handle = shmring::Ring::open(ns.name(), "r").expect("open");
    let mut c = handle
        .consumer(shmring::ConsumerOptions::durable("c"))
        .expect("consumer");
    let mut p = handle.producer().expect("producer");
    for i in 0..3u64 {
        p.publish(&i.to_le_bytes()).expect("publish");
    }
    std::fs::remove_file(ns.dir().join("r.ring")).expect("unlink the ring file");
    ns.wait_status("the ring to leave the status", |v, _| {
        ring(v, "r").is_none().then_some(())
    });
    assert!(matches!(
        shmring::Ring::open(ns.name(), "r"),
        Err(shmring::OpenError::NotFound { .. })
    ));
    for i in 3..6u64 {
        assert_eq!(p.publish(&i.to_le_bytes()), Ok(i));
    }
    let mut got = Vec::new();
    while c
        .poll_once(|ev| got.push(u64::from_le_bytes(ev.bytes().try_into().expect("8 bytes"))))
        .expect("poll")
        > 0
    {}
    assert_eq!(got, (0..6).collect::<Vec<_>>());
}
