//! Declared consumers (`RingConfig::declared`), in one process: they gate from the ring's
//! creation, the first attach under the name reads from the first sequence, and a drain
//! that waits for one that never attached says so. The multi-process form, with the
//! broker, is in `shmring-tests` (`declared_consumers`).

use std::time::Duration;

use shmring::{
    ConsumerOptions, DeclaredError, LifecycleError, OpenError, Ring, RingConfig, TryPublishError,
};
use shmring_testkit::Namespace;

fn cfg(declared: &[&str]) -> RingConfig {
    RingConfig {
        capacity: 8,
        slot_size: 64,
        max_consumers: 4,
        max_producers: 4,
        declared: declared.iter().map(|s| (*s).to_owned()).collect(),
        ..RingConfig::default()
    }
}

#[test]
fn events_published_before_the_first_attach_wait_for_a_declared_consumer() {
    let ns = Namespace::concurrent("declared-first");
    let ring = Ring::create(ns.name(), "r", &cfg(&["writer"])).unwrap();
    let info = ring.info();
    assert_eq!(info.consumers.len(), 1);
    let w = &info.consumers[0];
    assert_eq!(
        (w.name.as_str(), w.state, w.pid, w.next),
        ("writer", "DETACHED", 0, 0)
    );
    assert!(w.required && w.durable && w.declared && !w.attached_ever);

    let mut p = ring.producer().unwrap();
    for i in 0..8u8 {
        p.publish(&[i]).unwrap();
    }
    // The declared consumer gates: the ring is full until it reads.
    assert_eq!(p.try_publish(&[8]), Err(TryPublishError::Full));

    let mut c = ring.consumer(ConsumerOptions::durable("writer")).unwrap();
    assert_eq!(c.next_sequence(), 0, "resumes at the ring's first sequence");
    let mut got = Vec::new();
    c.poll_once(|ev| got.push((ev.sequence(), ev.bytes()[0])))
        .unwrap();
    assert_eq!(got, (0..8u8).map(|i| (u64::from(i), i)).collect::<Vec<_>>());
    assert_eq!(c.stats().dropped_behind, 0);
    p.try_publish(&[8]).unwrap();

    let info = ring.info();
    let w = &info.consumers[0];
    assert_eq!(w.state, "ACTIVE");
    assert!(w.declared && w.attached_ever, "{w:?}");
}

#[test]
fn a_declared_consumer_that_detaches_and_comes_back_keeps_its_position() {
    let ns = Namespace::concurrent("declared-again");
    let ring = Ring::create(ns.name(), "r", &cfg(&["a", "b"])).unwrap();
    let mut p = ring.producer().unwrap();
    p.publish(&[1]).unwrap();
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    let mut n = 0;
    a.poll_once(|_| n += 1).unwrap();
    assert_eq!(n, 1);
    drop(a);
    p.publish(&[2]).unwrap();
    let mut a = ring.consumer(ConsumerOptions::durable("a")).unwrap();
    assert_eq!(a.next_sequence(), 1);
    // "b" never attached: it still holds both events.
    let info = ring.info();
    let b = info.consumers.iter().find(|c| c.name == "b").unwrap();
    assert_eq!((b.next, b.declared, b.attached_ever), (0, true, false));
    let mut b = ring.consumer(ConsumerOptions::durable("b")).unwrap();
    let mut seqs = Vec::new();
    b.poll_once(|ev| seqs.push(ev.sequence())).unwrap();
    assert_eq!(seqs, vec![0, 1]);
    a.poll_once(|_| {}).unwrap();
}

#[test]
fn drain_names_a_declared_consumer_that_never_attached() {
    let ns = Namespace::concurrent("declared-drain");
    let ring = Ring::create(ns.name(), "r", &cfg(&["writer"])).unwrap();
    ring.producer().unwrap().publish(&[1]).unwrap();
    let err = ring.drain(Duration::from_millis(20)).unwrap_err();
    match &err {
        LifecycleError::DrainTimeout {
            stop_seq, unmoved, ..
        } => {
            assert_eq!(*stop_seq, 1);
            assert_eq!(
                unmoved,
                &vec![(0, "writer".to_owned(), shmring::Unmoved::NeverAttached)]
            );
        }
        other => panic!("expected a drain timeout, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("\"writer\" never attached")
            && msg.contains(&format!(
                "broker unsubscribe --namespace={} r writer",
                ns.name()
            )),
        "{msg}"
    );

    // Once it attached, the same drain finishes.
    ring.start().unwrap();
    let mut c = ring.consumer(ConsumerOptions::durable("writer")).unwrap();
    c.poll_once(|_| {}).unwrap();
    assert_eq!(ring.drain(Duration::from_secs(5)), Ok(1));
}

#[test]
fn declared_names_are_checked_before_anything_is_created() {
    let ns = Namespace::concurrent("declared-bad");
    let bad = |declared: &[&str]| match Ring::create(ns.name(), "r", &cfg(declared)) {
        Err(OpenError::Declared(e)) => e,
        other => panic!("{declared:?}: expected a declared-consumer error, got {other:?}"),
    };
    assert_eq!(bad(&["a", "b", "a"]), DeclaredError::Duplicate("a".into()));
    assert_eq!(bad(&[""]), DeclaredError::BadName(String::new()));
    let long = "x".repeat(49);
    assert_eq!(bad(&[&long]), DeclaredError::BadName(long.clone()));
    assert_eq!(bad(&["a\0b"]), DeclaredError::BadName("a\0b".into()));
    assert_eq!(
        bad(&["a", "b", "c", "d", "e"]),
        DeclaredError::TooMany {
            declared: 5,
            max_consumers: 4
        }
    );
    assert!(
        matches!(Ring::open(ns.name(), "r"), Err(OpenError::NotFound { .. })),
        "a refused configuration creates nothing"
    );
    // 48 bytes and a full table are fine.
    let ok = "y".repeat(48);
    Ring::create(ns.name(), "r", &cfg(&[&ok, "b", "c", "d"])).unwrap();
}

/// A worker group declared in the configuration exists from the ring's creation: what is
/// published before its first member joins waits for the group, and its members share it
/// from the ring's first sequence.
#[test]
fn a_declared_group_keeps_what_is_published_before_its_first_member() {
    let ns = Namespace::concurrent("declared-group");
    let config = RingConfig {
        declared_groups: vec!["g".to_owned()],
        ..cfg(&["writer"])
    };
    let ring = Ring::create(ns.name(), "r", &config).unwrap();
    let info = ring.info();
    let g = info
        .consumers
        .iter()
        .find(|c| c.name == "g")
        .expect("the declared group's entry");
    assert!(g.is_group && g.required && g.durable, "{g:?}");
    assert_eq!((g.state, g.pid, g.next), ("DETACHED", 0, 0));

    let mut p = ring.producer().unwrap();
    for i in 0..8u8 {
        p.publish(&[i]).unwrap();
    }
    assert_eq!(
        p.try_publish(&[8]),
        Err(TryPublishError::Full),
        "the group gates before any member joined"
    );
    let mut w = ring.consumer(ConsumerOptions::durable("writer")).unwrap();
    w.poll_once(|_| {}).unwrap();
    let mut a = ring.consumer(ConsumerOptions::worker("g")).unwrap();
    let mut b = ring.consumer(ConsumerOptions::worker("g")).unwrap();
    let mut got = Vec::new();
    for _ in 0..64 {
        a.poll_once(|ev| got.push(ev.bytes()[0])).unwrap();
        b.poll_once(|ev| got.push(ev.bytes()[0])).unwrap();
    }
    got.sort_unstable();
    assert_eq!(
        got,
        (0..8u8).collect::<Vec<_>>(),
        "each event once, from the first"
    );
    p.try_publish(&[8]).unwrap();
    assert!(matches!(
        ring.consumer(ConsumerOptions::durable("g")),
        Err(shmring::AttachError::IsAGroup { .. })
    ));
}

/// A declared group runs after nothing: its entry exists before any member could name
/// upstreams, so a member that names some is refused, with the group's empty record.
#[test]
fn a_member_of_a_declared_group_cannot_name_upstreams() {
    let ns = Namespace::concurrent("declared-after");
    let config = RingConfig {
        declared_groups: vec!["g".to_owned()],
        ..cfg(&["writer"])
    };
    let ring = Ring::create(ns.name(), "r", &config).unwrap();
    match ring.consumer(ConsumerOptions::worker("g").after(["writer"])) {
        Err(shmring::AttachError::GroupUpstreams {
            group,
            recorded,
            asked,
        }) => {
            assert_eq!(group, "g");
            assert!(
                recorded.is_empty(),
                "a declared group recorded {recorded:?}"
            );
            assert_eq!(asked, ["writer"]);
        }
        Err(e) => panic!("a member naming upstreams of a declared group: {e}"),
        Ok(_) => panic!("a member naming upstreams of a declared group joined"),
    }
    // Without upstreams it joins.
    ring.consumer(ConsumerOptions::worker("g")).unwrap();
}

#[test]
fn a_name_declared_as_a_consumer_and_as_a_group_is_refused() {
    let ns = Namespace::concurrent("declared-both");
    let config = RingConfig {
        declared_groups: vec!["a".to_owned()],
        ..cfg(&["a"])
    };
    assert!(matches!(
        Ring::create(ns.name(), "r", &config),
        Err(OpenError::Declared(DeclaredError::Duplicate(n))) if n == "a"
    ));
    let config = RingConfig {
        declared_groups: vec!["g".to_owned(), "h".to_owned()],
        ..cfg(&["a", "b", "c"])
    };
    assert!(matches!(
        Ring::create(ns.name(), "r", &config),
        Err(OpenError::Declared(DeclaredError::TooMany {
            declared: 5,
            max_consumers: 4
        }))
    ));
}
