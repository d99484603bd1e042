//! The namespace directory is shared with every member of the ring group, so the broker
//! takes what it finds there as input: a ring file truncated under its mapping, names that
//! are symbolic links (to another namespace's ring, or to a file such as /etc/passwd), a
//! removed or replaced lock file, a ring left marked deleted. Each is refused, reported or
//! repaired without the broker dying, following a link, or giving up its lock. The tests
//! in `as_root` run a child as a non-root member of the group.

mod common;

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{num, ring, BrokerNs, Child, Namespace, WAIT};
use serde_json::Value;
use shmring::{Ring, RingConfig, RingState};
use shmring_testkit::role;

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    match role::current().as_deref() {
        Some("unlink") => unlink_role(),
        Some("remove") => remove_role(),
        _ => common::roles::run_if_child(),
    }
}

/// Remove each name of `ROLE_PATHS` (`:`-separated) and say how it went:
/// `@unlink NAME ok` or `@unlink NAME refused <error>`.
fn unlink_role() {
    let paths = std::env::var("ROLE_PATHS").unwrap_or_default();
    for p in paths.split(':').filter(|p| !p.is_empty()) {
        let name = Path::new(p)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match std::fs::remove_file(p) {
            Ok(()) => println!("@unlink {name} ok"),
            Err(e) => println!("@unlink {name} refused {e}"),
        }
    }
    std::process::exit(0);
}

/// `Ring::remove` of `ROLE_RING`: `@removed` or `@refused <error>`.
fn remove_role() {
    let ns = shmring::names::default_namespace();
    match Ring::remove(&ns, &std::env::var("ROLE_RING").unwrap_or_default()) {
        Ok(()) => println!("@removed"),
        Err(e) => println!("@refused {e}"),
    }
    std::process::exit(0);
}

const SMALL: &str = "[rings.r]\ncapacity = 64\nstall_threshold = \"100ms\"\n";

fn small() -> RingConfig {
    RingConfig {
        capacity: 64,
        ..RingConfig::default()
    }
}

fn path_text(p: &Path) -> String {
    p.display().to_string()
}

/// The `unreadable` entry of `path` in a report.
fn unreadable<'a>(v: &'a Value, path: &Path) -> Option<&'a str> {
    v["unreadable"]
        .as_array()?
        .iter()
        .find(|u| u["path"] == path_text(path))?["error"]
        .as_str()
}

/// Wait for `n` more sweeps, and return the last report.
fn sweeps_after(ns: &Namespace, n: u64) -> Value {
    let before = ns.wait_status("a sweep", |v, _| Some(num(&v["broker"], "sweeps")));
    ns.wait_status("more sweeps", |v, _| {
        (num(&v["broker"], "sweeps") >= before + n).then(|| v.clone())
    })
}

/// `truncate -s 4096` on a live ring file: the broker no longer touches that mapping (a
/// read past the end would kill it with SIGBUS at its next sweep): it logs the ring as
/// CORRUPT, lists it as unreadable (exit 1), keeps sweeping the other rings, and leaves the
/// file as it found it. Its clients are not so lucky: a producer at work on the ring is
/// killed by SIGBUS at its next publish, which touches its table entry and a slot, both now
/// past the end.
#[test]
fn a_truncated_ring_is_reported_corrupt_and_the_broker_lives_on() {
    use std::os::unix::process::ExitStatusExt;
    let ns = Namespace::new("trunc");
    let broker = ns.broker(Some(&format!("{SMALL}[rings.other]\ncapacity = 64\n")));
    let path = ns.dir().join("r.ring");
    let mut p = ns.role(
        "producer",
        &[
            ("ROLE_RING", "r".to_owned()),
            ("ROLE_PACE_US", "1000".to_owned()),
            ("ROLE_PROGRESS", "10".to_owned()),
        ],
    );
    p.expect("@progress");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open for truncation")
        .set_len(4096)
        .expect("truncate");
    let v = ns.wait_status("the ring reported CORRUPT", |v, _| {
        assert_eq!(
            v["broker"]["running"],
            true,
            "the broker died; its log:\n{}",
            broker.stderr_so_far()
        );
        unreadable(v, &path)?.contains("CORRUPT").then(|| v.clone())
    });
    assert!(ring(&v, "r").is_none(), "{v:#}");
    let status = p.wait_status();
    assert_eq!(
        status.signal(),
        Some(7),
        "the producer was not killed by SIGBUS: {status}"
    );
    let why = unreadable(&v, &path).expect("listed");
    assert!(why.contains("4096") && why.contains("SIGBUS"), "{why}");
    assert!(broker.stderr_has("CORRUPT"), "{}", broker.stderr_so_far());

    let v = sweeps_after(&ns, 3);
    assert_eq!(v["broker"]["running"], true, "{}", broker.stderr_so_far());
    assert_eq!(num(&v["broker"], "pid"), u64::from(broker.pid()));
    assert!(ring(&v, "other").is_some(), "the other ring is still swept");
    let (_, code) = ns.status();
    assert_eq!(code, 1, "a corrupt ring makes the status unhealthy");
    assert_eq!(
        std::fs::metadata(&path).expect("still there").len(),
        4096,
        "nothing was written past the end of the file"
    );
}

/// A drain in progress when the ring file is truncated to nothing: the drain watches the
/// segment for up to its timeout, so its next look touches pages that are gone. The
/// broker's truncation guard turns that SIGBUS into zeros: the drain's requester gets an
/// error that says the file was truncated (not the success the zeros would show), the ring
/// is logged and listed CORRUPT, and the broker (same pid) goes on sweeping the other ring.
#[test]
fn a_ring_truncated_during_a_drain_is_reported_and_the_broker_lives_on() {
    let ns = Namespace::new("truncdrain");
    let broker = ns.broker(Some(&format!(
        "{SMALL}declared_consumers = [\"audit\"]\n[rings.other]\ncapacity = 64\n"
    )));
    ns.wait_status("the ring created", |v, _| ring(v, "r").map(|_| ()));
    {
        let r = Ring::open(ns.name(), "r").expect("open");
        let mut p = r.producer().expect("producer");
        for i in 0u64..3 {
            p.publish(&i.to_ne_bytes()).expect("publish");
        }
        // This process unmaps the ring here: it must not touch it after the truncation.
    }
    let path = ns.dir().join("r.ring");
    let cli = common::fault::cli_spawn(&ns, &["drain", "r", "--timeout", "60s"]);
    ns.wait_status("the drain waiting for audit", |v, _| {
        (ring(v, "r")?["state"] == "DRAINING").then_some(())
    });
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open for truncation")
        .set_len(0)
        .expect("truncate");
    let (ok, said) = common::fault::cli_finish(cli);
    assert!(!ok, "the drain reported success: {said}");
    assert!(
        said.contains("ring \"r\"") && said.contains("was truncated"),
        "{said}\nbroker log:\n{}",
        broker.stderr_so_far()
    );
    let v = ns.wait_status("the ring reported CORRUPT", |v, _| {
        unreadable(v, &path)?.contains("CORRUPT").then(|| v.clone())
    });
    assert!(ring(&v, "r").is_none(), "{v:#}");
    assert_eq!(num(&v["broker"], "pid"), u64::from(broker.pid()));
    assert!(broker.stderr_has("CORRUPT"), "{}", broker.stderr_so_far());
    let v = sweeps_after(&ns, 3);
    assert_eq!(v["broker"]["running"], true, "{}", broker.stderr_so_far());
    assert!(ring(&v, "other").is_some(), "the other ring is still swept");
}

/// `alias.ring`, a symbolic link to another namespace's ring, and `passwd.ring`, one to a
/// file that is not a ring: neither is opened or adopted (the other ring's epoch stays 0),
/// both are listed as symbolic links (the file's bytes are never read as a magic), and a
/// `delete alias` finds no such ring, so the other namespace's ring stays running.
#[test]
fn symbolic_links_in_the_namespace_are_never_followed() {
    let ns = Namespace::new("links");
    let other = ns.sibling("target");
    let _broker = ns.broker(Some(SMALL));
    let target = Ring::create(other.name(), "default", &small()).expect("the other ring");
    let secret = ns.scratch().join("passwd");
    let text = "root:x:0:0:root:/root:/bin/bash\n".repeat(16);
    std::fs::write(&secret, &text).expect("write the stand-in for /etc/passwd");
    let alias = ns.dir().join("alias.ring");
    let passwd = ns.dir().join("passwd.ring");
    symlink(target.path(), &alias).expect("symlink alias");
    symlink(&secret, &passwd).expect("symlink passwd");

    let v = ns.wait_status("both links listed as unreadable", |v, _| {
        (unreadable(v, &alias).is_some() && unreadable(v, &passwd).is_some()).then(|| v.clone())
    });
    assert!(
        ring(&v, "alias").is_none() && ring(&v, "passwd").is_none(),
        "{v:#}"
    );
    for p in [&alias, &passwd] {
        let why = unreadable(&v, p).expect("listed");
        assert!(
            why.contains("symbolic link") && !why.contains("magic"),
            "{why}"
        );
    }
    assert_eq!(target.broker_epoch(), 0, "the other ring was never adopted");

    // One ring's status speaks of that ring's file alone: r is healthy (exit 0) whatever
    // else lies in the directory, and alias is reported as what it is, not as unknown.
    let out = ns.cli(&["status", "--json", "r"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    assert_eq!(v["unreadable"].as_array().map(Vec::len), Some(0), "{v:#}");
    let out = ns.cli(&["status", "--json", "alias"]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert!(unreadable(&v, &alias).is_some(), "{v:#}");
    assert!(unreadable(&v, &passwd).is_none(), "{v:#}");

    // A request on it says what the file is, not that no ring has the name (a `broker
    // create` would only find the name taken).
    for verb in ["delete", "stop", "start", "drain"] {
        let out = ns.cli(&[verb, "alias"]);
        assert_eq!(out.status.code(), Some(1), "{verb}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("symbolic link") && !err.contains("create it"),
            "{verb}: {err}"
        );
    }
    assert_eq!(target.state(), Some(RingState::Running));
    assert!(target.path().exists());
    assert_eq!(std::fs::read_to_string(&secret).expect("read"), text);
}

/// The namespace directory of a broker with a group is 03770: setgid, and sticky so that a
/// group member can remove only its own files. One that exists without the sticky bit gets
/// it, and the broker says so.
#[test]
fn the_namespace_directory_is_sticky() {
    let gid = rustix::process::getegid().as_raw();
    let config = format!("[broker]\ngroup = {gid}\n{SMALL}");
    let mode = |ns: &Namespace| std::fs::metadata(ns.dir()).expect("stat").mode() & 0o7777;

    let ns = Namespace::new("sticky");
    let mut broker = ns.broker(Some(&config));
    assert_eq!(mode(&ns), 0o3770);
    broker.kill();

    let existing = ns.sibling("existing");
    std::fs::create_dir(existing.dir()).expect("mkdir");
    std::fs::set_permissions(existing.dir(), std::fs::Permissions::from_mode(0o2770))
        .expect("chmod");
    let broker = existing.broker(Some(&config));
    assert_eq!(mode(&existing), 0o3770);
    assert!(broker.stderr_has("sticky"), "{}", broker.stderr_so_far());
}

/// Start a second `broker run` on `ns` and wait (bounded) for it to exit; its exit status
/// and its log. One that keeps running is killed and reported as `None`.
fn second_broker(ns: &Namespace) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shmring-broker"));
    cmd.args(["run", "--namespace", ns.name(), "--config"])
        .arg(ns.config(SMALL));
    let mut p = ns.spawn("second broker", cmd);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = p.exited() {
            break Some(s.code().unwrap_or(-1));
        }
        if std::time::Instant::now() >= deadline {
            p.kill();
            break None;
        }
        // A watchdog poll on a child's exit, not a synchronisation sleep.
        std::thread::sleep(Duration::from_millis(1));
    };
    (status, p.stderr())
}

/// A symbolic link at the namespace directory's name (to a directory others may write,
/// without the sticky bit), or a regular file there: the broker refuses to start, says what
/// it found, and changes nothing where the link points (no mode change, no lock file).
#[test]
fn a_link_or_a_file_at_the_namespace_directory_is_refused_and_left_alone() {
    let ns = Namespace::new("dirlink");
    let target = ns.scratch().join("elsewhere");
    std::fs::create_dir(&target).expect("a directory to point at");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let _ = std::fs::remove_dir_all(ns.dir());
    symlink(&target, ns.dir()).expect("a link at the namespace directory");
    let (code, log) = second_broker(&ns);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {log}");
    assert!(log.contains("is not a directory"), "{log}");
    let mode = std::fs::metadata(&target)
        .expect("target")
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o777, "the link's target was changed");
    assert_eq!(
        std::fs::read_dir(&target).expect("target").count(),
        0,
        "something was made in the link's target"
    );
    std::fs::remove_file(ns.dir()).expect("remove the link");
    std::fs::write(ns.dir(), "").expect("a file at the namespace directory");
    let (code, log) = second_broker(&ns);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {log}");
    assert!(log.contains("is not a directory"), "{log}");
    std::fs::remove_file(ns.dir()).expect("remove the file");
}

/// A lock file whose epoch is the largest number (left by hand, or a corrupt file of the
/// broker's own user): the next broker starts and keeps that number, where it must not
/// overflow counting past it.
#[test]
fn a_lock_file_at_the_largest_epoch_still_starts_a_broker() {
    let ns = Namespace::new("lockepoch");
    std::fs::create_dir(ns.dir()).expect("the namespace directory");
    std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let lock = ns.dir().join("broker.lock");
    std::fs::write(&lock, format!("pid=1 epoch={}\n", u64::MAX)).expect("write broker.lock");
    let _broker = ns.broker(Some(SMALL));
    let (report, _) = ns.status();
    assert_eq!(num(&report["broker"], "epoch"), u64::MAX, "{report}");
}

/// `rm broker.lock` beside a live broker: at its next sweep the broker takes the lock again
/// under the name, so a second broker is still refused.
#[test]
fn a_removed_lock_file_is_taken_again() {
    let ns = Namespace::new("lockrm");
    let broker = ns.broker(Some(SMALL));
    let lock = ns.dir().join("broker.lock");
    std::fs::remove_file(&lock).expect("rm broker.lock");
    common::wait_until("the broker to take the lock again", || {
        broker.stderr_has("took the lock again").then_some(())
    });
    assert!(lock.exists());
    let (code, log) = second_broker(&ns);
    assert_eq!(code, Some(1), "a second broker ran beside the first: {log}");
    assert!(log.contains("another broker already runs"), "{log}");
}

/// `broker.lock` replaced by a file that another process holds locked: the broker cannot
/// take its lock back, so it exits with an error rather than sweep beside another broker.
#[test]
fn a_lock_file_replaced_and_held_by_another_process_makes_the_broker_exit() {
    let ns = Namespace::new("lockswap");
    let mut broker = ns.broker(Some(SMALL));
    let other = ns.dir().join(".other.lock");
    let held = std::fs::File::create(&other).expect("create");
    rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive).expect("flock");
    std::fs::rename(&other, ns.dir().join("broker.lock")).expect("replace broker.lock");
    let status = {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(s) = broker.exited() {
                break Some(s);
            }
            if std::time::Instant::now() >= deadline {
                break None;
            }
            // A watchdog poll on a child's exit, not a synchronisation sleep.
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "the broker kept running (or died otherwise): {status:?}\n{}",
        broker.stderr_so_far()
    );
    assert!(
        broker.stderr_has("lock was taken away"),
        "{}",
        broker.stderr_so_far()
    );
}

/// `broker.lock` replaced by a symbolic link: nobody can lock that name (the lock file is
/// opened with `O_NOFOLLOW`), so the broker keeps the lock it holds, says so once and goes
/// on sweeping, and a second broker is refused.
#[test]
fn a_lock_name_turned_into_a_link_keeps_the_broker_and_refuses_a_second() {
    let ns = Namespace::new("locklink");
    let broker = ns.broker(Some(SMALL));
    let lock = ns.dir().join("broker.lock");
    let elsewhere = ns.scratch().join("lock");
    std::fs::write(&elsewhere, "").expect("a file to point at");
    let tmp = ns.dir().join(".link.tmp");
    symlink(&elsewhere, &tmp).expect("symlink");
    std::fs::rename(&tmp, &lock).expect("replace broker.lock with a link");
    common::wait_until("the broker to say it cannot lock the name", || {
        broker
            .stderr_has("locking the name again failed")
            .then_some(())
    });
    let v = sweeps_after(&ns, 3);
    assert_eq!(num(&v["broker"], "pid"), u64::from(broker.pid()));
    let (code, log) = second_broker(&ns);
    assert_eq!(code, Some(1), "a second broker ran beside the first: {log}");
    assert!(log.contains("symbolic link"), "{log}");
    let said = broker
        .stderr_so_far()
        .matches("locking the name again failed")
        .count();
    assert_eq!(said, 1, "said once: {}", broker.stderr_so_far());
}

/// A ring file found marked deleted (a remover that died, or could not unlink it) is not
/// adopted, so its epoch is not bumped at every rescan: the broker removes it.
#[test]
fn a_ring_left_marked_deleted_is_removed_not_adopted() {
    let ns = Namespace::new("leftdel");
    let left = Ring::create(ns.name(), "left", &small()).expect("create");
    let raw = shmring_testkit::raw::RawSegment::open(&left);
    raw.set_lifecycle_word(shmring_layout::lifecycle::pack(
        1,
        RingState::Deleted as u32,
        0,
    ));
    let broker = ns.broker(Some(SMALL));
    common::wait_until("the broker to remove the deleted ring's file", || {
        (!left.path().exists()).then_some(())
    });
    assert_eq!(left.broker_epoch(), 0, "it was never adopted");
    assert!(
        broker.stderr_has("marked deleted"),
        "{}",
        broker.stderr_so_far()
    );
    let v = sweeps_after(&ns, 3);
    assert!(ring(&v, "left").is_none(), "{v:#}");
    assert_eq!(v["unreadable"].as_array().map(Vec::len), Some(0), "{v:#}");
}

/// Without a broker, `status` reads the directory itself and reports what a broker does: a
/// symbolic link and a FIFO at a ring's name, and a file whose name is no ring's, are
/// listed as unreadable, with the broker's own reasons, and the report is unhealthy (exit
/// 2: no broker). `status alias` reports the link; `status` of a name with nothing at it
/// says the ring does not exist and exits 1, as it does with a broker.
#[test]
fn status_without_a_broker_lists_what_is_not_a_ring_as_the_broker_does() {
    let ns = Namespace::new("offlinelinks");
    let r = Ring::create(ns.name(), "r", &small()).expect("create");
    let alias = ns.dir().join("alias.ring");
    symlink(r.path(), &alias).expect("symlink");
    let fifo = ns.dir().join("pipe.ring");
    common::mkfifo(&fifo);
    let misnamed = ns.dir().join("no good.ring");
    std::fs::write(&misnamed, b"").expect("write");

    let (offline, code) = ns.status();
    assert_eq!(code, 2, "{offline:#}");
    assert_eq!(offline["broker"]["running"], false);
    assert_eq!(offline["healthy"], false, "{offline:#}");
    assert!(ring(&offline, "r").is_some(), "{offline:#}");
    for (path, says) in [
        (&alias, "is a symbolic link"),
        (&fifo, "is a FIFO"),
        (&misnamed, "invalid ring name"),
    ] {
        let why = unreadable(&offline, path).unwrap_or_else(|| panic!("{offline:#}"));
        assert!(why.contains(says), "{why}");
    }

    let out = ns.cli(&["status", "--json", "alias"]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(2), "{v:#}");
    assert_eq!(v["healthy"], false, "{v:#}");
    assert!(unreadable(&v, &alias).is_some(), "{v:#}");
    assert_eq!(v["unreadable"].as_array().map(Vec::len), Some(1), "{v:#}");

    let out = ns.cli(&["status", "nothing"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("\"nothing\" does not exist") && out.stdout.is_empty(),
        "{err}"
    );

    // A broker lists the same entries with the same reasons.
    let _broker = ns.broker(Some(SMALL));
    let listed = |v: &Value| {
        let mut all: Vec<String> = v["unreadable"]
            .as_array()
            .expect("unreadable")
            .iter()
            .map(Value::to_string)
            .collect();
        all.sort();
        all
    };
    let online = ns.wait_status("the broker's unreadable entries", |v, _| {
        (v["unreadable"].as_array()?.len() == 3).then(|| v.clone())
    });
    assert_eq!(listed(&online), listed(&offline));
}

/// File names in the namespace directory are chosen by anyone who may write it: one holding
/// a line break followed by a made-up log line, or a terminal escape, whether a regular
/// file (not a valid ring name) or a symbolic link, is listed as unreadable and logged with
/// those characters escaped. No line of the broker's log is one the name wrote, and no
/// escape reaches the log raw.
#[test]
fn names_in_the_namespace_cannot_forge_or_colour_the_brokers_log() {
    const FORGED: &str = "2026-12-08T00:00:00.000000Z  INFO shmring_broker::run: broker ready";
    let ns = Namespace::new("forgedlog");
    let broker = ns.broker(Some(SMALL));
    let target = ns.scratch().join("target");
    std::fs::write(&target, b"").expect("write the link target");
    let planted = [
        (format!("x\n{FORGED} namespace=file.ring"), false),
        (format!("y\n{FORGED} namespace=link.ring"), true),
        ("esc\u{1b}[2Jfile.ring".to_owned(), false),
        ("esc\u{1b}[2Jlink.ring".to_owned(), true),
    ];
    let paths: Vec<_> = planted
        .iter()
        .map(|(name, link)| {
            let path = ns.dir().join(name);
            if *link {
                symlink(&target, &path).expect("symlink");
            } else {
                std::fs::write(&path, b"").expect("write");
            }
            path
        })
        .collect();
    ns.wait_status("every planted name listed as unreadable", |v, _| {
        paths
            .iter()
            .all(|p| unreadable(v, p).is_some())
            .then_some(())
    });
    // Each name's tail ends the last line its log entry wrote, escaped or not.
    common::wait_until("each planted name logged", || {
        let log = broker.stderr_so_far();
        let ending = |tail| log.lines().filter(|l| l.ends_with(tail)).count();
        (ending("file.ring") >= 2 && ending("link.ring") >= 2).then_some(())
    });
    let log = broker.stderr_so_far();
    assert!(
        !log.lines().any(|l| l.starts_with(FORGED)),
        "a name forged a log line:\n{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "an escape reached the log: {log:?}"
    );
    assert!(log.contains(r"\u{1b}[2J"), "{log}");
}

/// Tests that need root: a child runs as uid 65534 in the broker's group. A plain
/// `cargo test` lists them as ignored, so a run without root says they were skipped rather
/// than passing them; CI runs as root and runs them with
/// `cargo test --workspace -- --ignored as_root::` (`.ci/run`), where they fail if they
/// cannot do what they test.
mod as_root {
    use super::*;

    const NOBODY: u32 = 65534;

    fn need_root() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test runs a child as uid 65534: run it as root"
        );
    }

    /// A broker in a pid namespace of its own (a container that shares `/dev/shm` and not
    /// the pid namespace): a ring created outside it is left alone, listed with the reason,
    /// and never adopted (its sweeps would take every live process of the ring for dead);
    /// the rings it creates itself it serves.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_broker_leaves_alone_a_ring_of_another_pid_namespace() {
        need_root();
        let ns = Namespace::new("pidns");
        let outside = Ring::create(ns.name(), "outside", &small()).expect("create");
        let _broker = common::broker_in_a_pid_namespace(&ns);
        let v = ns.wait_status("the ring listed as left alone", |v, _| {
            unreadable(v, outside.path()).map(|_| v.clone())
        });
        let why = unreadable(&v, outside.path()).expect("listed");
        eprintln!("left alone: {why}");
        assert!(why.contains("pid namespace"), "{why}");
        assert!(ring(&v, "outside").is_none(), "{v:#}");
        assert_eq!(
            ring(&v, "default").expect("its own ring")["state"],
            "RUNNING"
        );
        assert_eq!(outside.broker_epoch(), 0, "never adopted");
    }

    /// `broker status RING` without a broker, by a user who may not list the namespace
    /// directory (nor go through it): the directory and the ring are listed as unreadable
    /// with the reason, exit 2 (no broker), not "the ring does not exist". Before, the
    /// failed listing read as an empty directory.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn status_of_a_ring_in_a_directory_this_user_may_not_list_says_why() {
        need_root();
        let ns = Namespace::new("nolist");
        let _ring = Ring::create(ns.name(), "r", &small()).expect("create");
        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let copy = role::ExeForNobody::of(Path::new(common::BIN));
        let out = shmring_testkit::output(
            "status as nobody",
            role::as_nobody(Command::new(&copy.exe).args([
                "--namespace",
                ns.name(),
                "status",
                "--json",
                "r",
            ])),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(!err.contains("does not exist"), "{err}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
        let listed = v["unreadable"].to_string();
        assert!(listed.contains("ermission denied"), "{v:#}");
        assert!(listed.contains("r.ring"), "{v:#}");
    }

    /// This test binary, re-run as role `role` by uid 65534 whose primary group is 65534,
    /// the broker's group in these tests.
    fn member(role: &str, ns: &Namespace, env: &[(&str, String)]) -> Child {
        let copy = role::ExeForNobody::of_this_test();
        let mut cmd = role::command(&copy.exe, role);
        cmd.env(shmring::names::NAMESPACE_ENV, ns.name())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .current_dir("/");
        common::run_as(&mut cmd, NOBODY, NOBODY, &[]);
        // The copy may go once the child has exec'd it: the kernel holds the open file.
        let p = ns.spawn(role, cmd);
        drop(copy);
        p
    }

    /// A broker of another user runs in a namespace directory root owns (where a broker may
    /// run as any user): its lock file is that user's, and held. A broker started as root
    /// there is refused like any second broker, and leaves that lock file as it is. Before,
    /// it removed a lock file of another user without looking whether it was held, took the
    /// namespace, and the two brokers swept the same rings.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_held_lock_file_of_another_user_refuses_a_root_broker() {
        need_root();
        let ns = Namespace::new("lockother");
        std::fs::create_dir(ns.dir()).expect("the namespace directory");
        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let lock = ns.dir().join("broker.lock");
        std::fs::write(&lock, "pid=1 epoch=7\n").expect("write broker.lock");
        std::os::unix::fs::chown(&lock, Some(NOBODY), Some(NOBODY)).expect("chown");
        // The other user's broker, as far as the lock goes: this process holds it.
        let held = std::fs::File::open(&lock).expect("open broker.lock");
        rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .expect("flock");
        let inode = std::fs::metadata(&lock).expect("stat").ino();
        let (code, log) = second_broker(&ns);
        assert_eq!(code, Some(1), "a root broker ran beside the other: {log}");
        assert!(log.contains("another broker already runs"), "{log}");
        let now = std::fs::metadata(&lock).expect("the lock file is still there");
        assert_eq!((now.ino(), now.uid()), (inode, NOBODY), "{log}");
        assert_eq!(
            std::fs::read_to_string(&lock).expect("read"),
            "pid=1 epoch=7\n"
        );
        drop(held);
    }

    /// A broker of uid 65534 in a namespace directory root owns: root removes its lock file
    /// and puts a file of its own there, held. The broker cannot open that file, and some
    /// process holds it: another broker runs, so this one exits. Before, it could not lock
    /// the name, said so and carried on, and two brokers swept the same rings.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_held_lock_file_this_broker_cannot_open_makes_it_exit() {
        need_root();
        let ns = Namespace::new("lockroot");
        std::fs::create_dir(ns.dir()).expect("the namespace directory");
        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let exe = role::ExeForNobody::of(Path::new(common::BIN));
        let mut cmd = Command::new(&exe.exe);
        cmd.args(["run", "--namespace", ns.name()]).current_dir("/");
        common::run_as(&mut cmd, NOBODY, NOBODY, &[]);
        let mut broker = ns.spawn("broker of uid 65534", cmd);
        assert!(
            broker.expect_stderr_within("broker ready", WAIT),
            "{}",
            broker.stderr_so_far()
        );
        let lock = ns.dir().join("broker.lock");
        assert_eq!(std::fs::metadata(&lock).expect("its lock").uid(), NOBODY);
        std::fs::remove_file(&lock).expect("rm broker.lock");
        let held = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
            .expect("root's broker.lock");
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .expect("flock");
        let status = broker.wait_status();
        assert_eq!(status.code(), Some(1), "{}", broker.stderr_so_far());
        assert!(
            broker.stderr_has("lock was taken away"),
            "{}",
            broker.stderr_so_far()
        );
        drop(held);
    }

    fn group_broker(ns: &Namespace) -> Child {
        ns.broker(Some(&format!("[broker]\ngroup = {NOBODY}\n{SMALL}")))
    }

    /// With the sticky bit, a group member (who may write the directory) cannot remove the
    /// broker's lock, socket or rings, so it cannot start a second broker beside the first
    /// or take a ring away from its clients; a `Ring::remove` it tries says why and changes
    /// nothing.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_group_member_cannot_remove_the_brokers_files() {
        need_root();
        let ns = Namespace::new("member_rm");
        let _broker = group_broker(&ns);
        let names = ["broker.lock", "broker.sock", "r.ring"];
        let paths: Vec<String> = names.iter().map(|n| path_text(&ns.dir().join(n))).collect();
        let mut child = member("unlink", &ns, &[("ROLE_PATHS", paths.join(":"))]);
        for name in names {
            let said = child.expect(&format!("@unlink {name}"));
            assert!(said.starts_with("refused"), "{name}: {said}");
        }
        for p in &paths {
            assert!(Path::new(p).exists(), "{p} is gone");
        }
        let (code, log) = second_broker(&ns);
        assert_eq!(code, Some(1), "a second broker ran beside the first: {log}");

        let mut child = member("remove", &ns, &[("ROLE_RING", "r".to_owned())]);
        let said = child.expect("@refused");
        assert!(said.contains("sticky"), "{said}");
        let v = sweeps_after(&ns, 3);
        assert_eq!(ring(&v, "r").expect("r")["state"], "RUNNING", "{v:#}");
    }

    /// A group member that may open the ring read+write but not write the directory: its
    /// `Ring::remove` is refused before anything happens. The error names the missing right
    /// on the directory; the ring is not marked deleted, its clients are not cut off, and the
    /// broker keeps it with the same epoch sweep after sweep.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_remove_the_directory_refuses_changes_nothing() {
        need_root();
        let ns = Namespace::new("member_rm_dir");
        let _broker = group_broker(&ns);
        let (v, _) = ns.status();
        let epoch = num(ring(&v, "r").expect("r"), "epoch");
        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o2750)).expect("chmod");

        let mut child = member("remove", &ns, &[("ROLE_RING", "r".to_owned())]);
        let said = child.expect("@");
        eprintln!("the member's remove: {said}");
        assert!(said.starts_with("refused"), "{said}");
        assert!(
            said.contains("write (w) permission on directory") && !said.contains("lacks no"),
            "{said}"
        );
        // Several rescans (one every 500 ms; a sweep every 50 ms).
        let v = sweeps_after(&ns, 30);
        let r = ring(&v, "r").expect("r");
        assert_eq!(r["state"], "RUNNING", "{v:#}");
        assert_eq!(num(r, "epoch"), epoch, "not adopted again: {v:#}");
        let handle = Ring::open(ns.name(), "r").expect("open");
        assert_eq!(handle.state(), Some(RingState::Running));
        handle
            .producer()
            .expect("producers attach as before")
            .try_publish(b"still here")
            .expect("publish");
    }
}
