//! The broker killed with SIGKILL while a producer and a consumer run: no event lost, no
//! stall; a new broker adopts the ring with epoch + 1 and the counters as they were.

mod common;

use common::{consumer, num, ring, Ns, Proc};

#[test]
fn role() {
    common::roles::run_if_child();
}

#[test]
fn broker_killed_mid_traffic_is_replaced_and_adopts_the_ring() {
    let _serial = common::serial();
    let ns = Ns::new("restart");
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
    let mut c = Proc::role(
        "consumer",
        &ns.name,
        &env(&[("ROLE_NAME", "sink"), ("ROLE_EXPECT", "20000")]),
    );
    c.expect("@ready");
    let mut p = Proc::role(
        "producer",
        &ns.name,
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

    p.send("go");
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
    assert!(broker.logged("adopted ring"));
    broker.kill();
}
