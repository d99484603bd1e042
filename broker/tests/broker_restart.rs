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
/// adopted by a broker (this one or the next), never listed as unreadable, and never
/// removed.
#[test]
fn a_creators_tmp_leftover_is_never_opened_adopted_or_removed() {
    let ns = Namespace::new("tmpleft");
    let config = "[rings.r]\ncapacity = 64\nstall_threshold = \"100ms\"\n";
    let mut broker = ns.broker(Some(config));
    // A whole, valid segment under a creator's temporary name.
    let cfg = shmring::RingConfig {
        capacity: 16,
        ..shmring::RingConfig::default()
    };
    drop(shmring::Ring::create(ns.name(), "x", &cfg).expect("create x"));
    let tmp = ns.dir().join(".x.4242.0.17.tmp");
    std::fs::rename(ns.dir().join("x.ring"), &tmp).expect("rename to the temporary name");
    let check = |v: &serde_json::Value, who: &str| {
        assert!(ring(v, "x").is_none(), "{who} adopted the leftover: {v:#}");
        assert_eq!(v["unreadable"].as_array().map(Vec::len), Some(0), "{v:#}");
        assert!(matches!(
            shmring::Ring::open(ns.name(), "x"),
            Err(shmring::OpenError::NotFound { .. })
        ));
        assert!(tmp.exists(), "{who} removed the leftover");
    };
    // The running broker's sweeps look at the directory: a few of them.
    check(&sweeps_after(&ns, 3), "the running broker");
    broker.kill();
    let _broker = ns.broker(Some(config));
    check(&sweeps_after(&ns, 2), "a new broker");
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
