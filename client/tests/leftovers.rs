//! Hidden files a dead process left in a namespace directory: a create killed before it
//! renamed its build into place (`.NAME.PID.SERIAL.NANOS.tmp`), a remove killed between
//! setting the ring aside and unlinking it (`.NAME.PID.SERIAL.NANOS.removing`). On
//! `/dev/shm` each holds its memory until unlinked. `Ring::clear_leftover` finishes the dead
//! process's work, and leaves alone what a live process, or a recent one, may still be doing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shmring::names::{leftovers_in, Leftover, LeftoverKind};
use shmring::{
    Cleared, ConsumerOptions, PublishError, Ring, RingConfig, RingState, LEFTOVER_GRACE,
};

mod common;
use shmring_testkit::fault::dead_process;
use shmring_testkit::raw::RawSegment;
use shmring_testkit::Namespace;

fn cfg() -> RingConfig {
    RingConfig {
        capacity: 64,
        ..RingConfig::default()
    }
}

/// `Ring::clear_leftover`, which must not fail here.
fn clear(ns: &Namespace, leftover: &Leftover, grace: Duration) -> Cleared {
    Ring::clear_leftover(ns.name(), leftover, grace)
        .unwrap_or_else(|e| panic!("clearing {leftover:?}: {e}"))
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos() as u64
}

/// The hidden names in directory `dir`.
fn hidden_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read the namespace directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Only the names a create or a remove makes are listed, parsed from the right (a ring's
/// name may hold dots), and only regular files; a dead builder's old file is unlinked, a
/// file whose pid a process has or whose time is recent is left.
#[test]
fn a_dead_builders_file_is_unlinked_and_a_live_or_recent_one_is_kept() {
    let ns = Namespace::concurrent("left-build");
    drop(Ring::create(ns.name(), "base", &cfg()).expect("create the directory's first ring"));
    let dir = ns.dir();
    let (dead, _) = dead_process();
    let me = std::process::id();
    let recent = now_nanos();
    let old_dead = format!(".a.b.{dead}.0.17.tmp");
    let alive = format!(".x.{me}.3.17.tmp");
    let young = format!(".x.{dead}.4.{recent}.tmp");
    for f in [
        &old_dead,
        &alive,
        &young,
        ".x.ring.tmp",
        ".notes",
        ".x.0.1.17.tmp",
    ] {
        std::fs::write(dir.join(f), b"half a segment").expect("write a hidden file");
    }
    std::os::unix::fs::symlink(
        dir.join("base.ring"),
        dir.join(format!(".l.{dead}.0.17.tmp")),
    )
    .expect("symlink");

    let found = leftovers_in(dir).expect("list");
    assert_eq!(
        found,
        vec![
            Leftover {
                path: dir.join(&old_dead),
                ring: "a.b".into(),
                pid: dead,
                nanos: 17,
                kind: LeftoverKind::Building,
            },
            Leftover {
                path: dir.join(&alive),
                ring: "x".into(),
                pid: me,
                nanos: 17,
                kind: LeftoverKind::Building,
            },
            Leftover {
                path: dir.join(&young),
                ring: "x".into(),
                pid: dead,
                nanos: recent,
                kind: LeftoverKind::Building,
            },
        ],
        "the names a create makes, regular files only, pid 0 refused"
    );
    let fates: Vec<Cleared> = found
        .iter()
        .map(|l| clear(&ns, l, LEFTOVER_GRACE))
        .collect();
    assert_eq!(
        fates,
        [Cleared::Removed, Cleared::OwnerAlive, Cleared::TooRecent]
    );
    let mut left = vec![
        alive.clone(),
        young.clone(),
        ".x.ring.tmp".to_owned(),
        ".notes".to_owned(),
        ".x.0.1.17.tmp".to_owned(),
        format!(".l.{dead}.0.17.tmp"),
    ];
    left.sort();
    assert_eq!(hidden_in(dir), left);
    assert_eq!(
        clear(&ns, &found[0], LEFTOVER_GRACE),
        Cleared::Gone,
        "cleared twice"
    );
    // With no grace, the recent one goes too; the live process's stays.
    assert_eq!(clear(&ns, &found[2], Duration::ZERO), Cleared::Removed);
    assert_eq!(clear(&ns, &found[1], Duration::ZERO), Cleared::OwnerAlive);
    assert!(dir.join("base.ring").exists(), "the link's target is left");
}

/// A remover killed after it set the ring aside: the ring's clients carry on, unaware that
/// the name is gone, and the file holds its memory. Clearing it marks the ring deleted, as
/// the remove would have (the attached producer and consumer get `Deleted`), and unlinks
/// it; until the remover's pid is free and the grace has passed, nothing changes.
#[test]
fn a_dead_removers_ring_is_marked_deleted_and_unlinked() {
    let ns = Namespace::concurrent("left-remove");
    let ring = Ring::create(ns.name(), "r", &cfg()).expect("create r");
    let mut p = ring.producer().expect("producer");
    let mut c = ring
        .consumer(ConsumerOptions::durable("c"))
        .expect("consumer");
    assert_eq!(p.publish(b"before"), Ok(0));
    let raw = RawSegment::open(&ring);
    let dir = ns.dir();
    let (dead, _) = dead_process();
    let aside = format!(".r.{dead}.0.17.removing");
    std::fs::rename(dir.join("r.ring"), dir.join(&aside)).expect("set aside, as a remover does");
    // Garbage under a removal's name is unlinked as the remove unlinks an unmappable name.
    let garbage = format!(".g.{dead}.0.17.removing");
    std::fs::write(dir.join(&garbage), b"not a ring").expect("write");
    let found = leftovers_in(dir).expect("list");
    assert_eq!(found.len(), 2, "{found:?}");
    let leftover = found
        .iter()
        .find(|l| l.ring == "r")
        .expect("the ring set aside");
    assert_eq!(leftover.kind, LeftoverKind::Removing);

    // Its maker's pid in use, or too recent: left, and the ring runs on.
    let alive = Leftover {
        pid: std::process::id(),
        ..leftover.clone()
    };
    assert_eq!(clear(&ns, &alive, Duration::ZERO), Cleared::OwnerAlive);
    assert_eq!(
        clear(&ns, leftover, Duration::from_secs(u64::MAX / 2)),
        Cleared::TooRecent
    );
    assert_eq!(p.publish(b"still"), Ok(1));
    assert!(!ring.is_deleted());
    // A live process in the middle of a stop or start of the ring set aside: left for a
    // later look rather than waited for (the broker calls this under its lock).
    let running = raw.lifecycle_word();
    raw.set_lifecycle_word(shmring_layout::lifecycle::pack(
        9,
        RingState::Stopping as u32,
        std::process::id(),
    ));
    assert_eq!(clear(&ns, leftover, LEFTOVER_GRACE), Cleared::Busy);
    assert!(leftover.path.exists());
    raw.set_lifecycle_word(running);

    for l in &found {
        assert_eq!(clear(&ns, l, LEFTOVER_GRACE), Cleared::Removed, "{l:?}");
    }
    assert!(ring.is_deleted(), "the ring was not marked deleted");
    assert_eq!(p.publish(b"after"), Err(PublishError::Deleted));
    let mut got = Vec::new();
    let _ = c.poll_once(|ev| got.push(ev.sequence()));
    assert_eq!(got, [0, 1], "what was published before is still read");
    assert!(
        hidden_in(dir).is_empty(),
        "left behind: {:?}",
        hidden_in(dir)
    );
    assert!(matches!(
        Ring::open(ns.name(), "r"),
        Err(shmring::OpenError::NotFound { .. })
    ));
}

/// A second name for a ring under a removal's hidden name (a hard link: a remove only ever
/// renames, so this is another process's doing) is refused with an error that says so: the
/// ring in use under its own name is never marked deleted through it.
#[test]
fn a_removal_name_that_is_a_second_link_to_a_ring_is_refused() {
    let ns = Namespace::concurrent("left-link");
    let ring = Ring::create(ns.name(), "r", &cfg()).expect("create r");
    let mut p = ring.producer().expect("producer");
    let (dead, _) = dead_process();
    let link = ns.dir().join(format!(".r.{dead}.0.17.removing"));
    std::fs::hard_link(ns.dir().join("r.ring"), &link).expect("hard link");
    let found = leftovers_in(ns.dir()).expect("list");
    assert_eq!(found.len(), 1, "{found:?}");
    let e = Ring::clear_leftover(ns.name(), &found[0], LEFTOVER_GRACE)
        .expect_err("a second link is not cleared");
    assert!(e.to_string().contains("2 names"), "{e}");
    assert!(!ring.is_deleted(), "the ring in use was marked deleted");
    assert_eq!(p.publish(b"on"), Ok(0));
    assert!(link.exists() && ns.dir().join("r.ring").exists());
    std::fs::remove_file(&link).expect("remove the link");
}
