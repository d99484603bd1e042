//! File permissions are the data plane's access control: a segment is mode 0600 in a 0700
//! namespace directory by default, or exactly 0660 with a configured group in a setgid and
//! sticky 03770 directory, whatever the creating process's umask; a process of another uid is
//! refused with `OpenError::PermissionDenied`; a process of another uid in the ring's
//! group attaches and publishes.
//!
//! The umask is per process, so creations under a given umask run in a child: this test
//! binary re-executed as a role (the `role` test below dispatches on it). The
//! other-uid cases run the child as uid/gid 65534 (`nobody`/`nogroup`), which needs root:
//! they are in `as_root`, ignored by a plain `cargo test` and run by CI (see there).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use rustix::fs::Mode;
use shmring::{ConsumerOptions, OpenError, Ring, RingConfig};

use shmring_testkit::role::{self, ExeForNobody, NOBODY};
use shmring_testkit::Namespace;

/// Every child line the parent reads starts with this.
const MARK: &str = "@perm ";

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Permission bits including setgid (`st_mode & 0o7777`), owner uid and group.
fn stat(path: &Path) -> (u32, u32, u32) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    (m.mode() & 0o7777, m.uid(), m.gid())
}

/// A group other than this process's own, that this process may give files to: any group
/// from /etc/group for root, a supplementary group otherwise (or, lacking one, its own gid,
/// which still checks the mode but not the `fchown`).
fn other_group() -> u32 {
    let egid = rustix::process::getegid().as_raw();
    if is_root() {
        let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
        let listed = groups
            .lines()
            .filter_map(|l| l.split(':').nth(2)?.parse::<u32>().ok())
            .find(|&g| g != egid && g != NOBODY);
        return listed.unwrap_or(100);
    }
    let sup = rustix::process::getgroups().unwrap_or_default();
    match sup.iter().map(|g| g.as_raw()).find(|&g| g != egid) {
        Some(g) => g,
        None => {
            eprintln!("note: no supplementary group; the group test uses the own gid {egid}");
            egid
        }
    }
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn octal(name: &str) -> u32 {
    u32::from_str_radix(&var(name), 8).unwrap_or_else(|_| panic!("{name} is not octal"))
}

/// In a child: run its role, print its result and exit. In the test run itself: nothing.
#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    let Some(role) = role::current() else {
        return;
    };
    let ns = var("PERM_NS");
    let ring = var("PERM_RING");
    match role.as_str() {
        // Create a ring under umask PERM_UMASK with mode PERM_MODE and group PERM_GROUP.
        "create" => {
            rustix::process::umask(Mode::from_raw_mode(octal("PERM_UMASK")));
            let config = RingConfig {
                mode: octal("PERM_MODE"),
                group: var("PERM_GROUP").parse().ok(),
                ..RingConfig::default()
            };
            match Ring::create(&ns, &ring, &config) {
                Ok(_) => println!("{MARK}created"),
                Err(e) => println!("{MARK}error {e}"),
            }
        }
        // Open the ring, attach a producer and publish one event.
        "publish" => match Ring::open(&ns, &ring) {
            Ok(r) => match r.producer() {
                Ok(mut p) => match p.try_publish(b"from another uid") {
                    Ok(seq) => println!("{MARK}published {seq}"),
                    Err(e) => println!("{MARK}error publish: {e}"),
                },
                Err(e) => println!("{MARK}error attach: {e}"),
            },
            Err(e) => {
                let kind = match &e {
                    OpenError::PermissionDenied { .. } => "PermissionDenied",
                    _ => "Other",
                };
                println!("{MARK}refused {kind} {e}");
            }
        },
        other => println!("{MARK}error unknown role {other}"),
    }
    std::process::exit(0);
}

/// Run this test binary as role `role` (as uid/gid 65534 if `foreign`), a child of `ns`,
/// and return the text after `@perm ` of its one result line.
fn child(ns: &Namespace, role: &str, env: &[(&str, String)], foreign: bool) -> String {
    let copy = ExeForNobody::of_this_test();
    let mut cmd = role::command(&copy.exe, role);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    if foreign {
        role::as_nobody(&mut cmd);
    }
    let mut proc = ns.spawn(role, cmd);
    let line = proc.expect(MARK);
    proc.wait_status();
    line
}

fn create_in_child(ns: &Namespace, ring: &str, umask: u32, mode: u32, group: Option<u32>) {
    let out = child(
        ns,
        "create",
        &[
            ("PERM_NS", ns.name().to_owned()),
            ("PERM_RING", ring.to_owned()),
            ("PERM_UMASK", format!("{umask:o}")),
            ("PERM_MODE", format!("{mode:o}")),
            ("PERM_GROUP", group.map_or(String::new(), |g| g.to_string())),
        ],
        false,
    );
    assert_eq!(out, "created", "umask {umask:03o}");
}

fn publish_as_nobody(ns: &Namespace, ring: &str) -> String {
    child(
        ns,
        "publish",
        &[
            ("PERM_NS", ns.name().to_owned()),
            ("PERM_RING", ring.to_owned()),
        ],
        true,
    )
}

#[test]
fn the_default_is_a_0600_segment_in_a_0700_directory() {
    let ns = Namespace::concurrent("default");
    let ring = Ring::create(ns.name(), "r", &RingConfig::default()).expect("create");
    let me = rustix::process::geteuid().as_raw();
    let egid = rustix::process::getegid().as_raw();
    assert_eq!(stat(ring.path()), (0o600, me, egid));
    assert_eq!(stat(ns.dir()), (0o700, me, egid));
}

/// The umask never widens or narrows what was asked for: the file's mode is set with
/// `fchmod` and the directory's with `chmod` after creation.
#[test]
fn modes_are_exact_whatever_the_umask() {
    let group = other_group();
    for umask in [0o000, 0o022, 0o027, 0o077] {
        let ns = Namespace::concurrent("umask_default");
        create_in_child(&ns, "r", umask, 0o600, None);
        let (file_mode, _, _) = stat(&ns.ring_path("r"));
        let (dir_mode, _, _) = stat(ns.dir());
        assert_eq!(
            (file_mode, dir_mode),
            (0o600, 0o700),
            "default modes under umask {umask:03o}"
        );

        let ns = Namespace::concurrent("umask_group");
        create_in_child(&ns, "r", umask, 0o660, Some(group));
        assert_eq!(
            stat(&ns.ring_path("r")).0,
            0o660,
            "group file mode under umask {umask:03o}"
        );
        assert_eq!(stat(&ns.ring_path("r")).2, group, "file group");
        assert_eq!(
            stat(ns.dir()).0,
            0o3770,
            "setgid and sticky group directory under umask {umask:03o}"
        );
        assert_eq!(stat(ns.dir()).2, group, "directory group");
    }
}

/// A ring created without a group in a setgid directory of group `g` belongs to `g`: the
/// kernel's setgid-directory rule, which is what lets every client process create rings
/// its group can open.
#[test]
fn a_segment_in_a_setgid_directory_inherits_its_group() {
    let group = other_group();
    let ns = Namespace::concurrent("setgid");
    let first = RingConfig {
        mode: 0o660,
        group: Some(group),
        ..RingConfig::default()
    };
    Ring::create(ns.name(), "a", &first).expect("create with a group");
    assert_eq!(stat(ns.dir()).0, 0o3770);
    let second = RingConfig {
        mode: 0o660,
        group: None,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "b", &second).expect("create in the setgid directory");
    let (mode, _, gid) = stat(ring.path());
    assert_eq!((mode, gid), (0o660, group));
}

/// Tests that need root. A plain `cargo test` lists them as ignored, so a run without root
/// says they were skipped rather than passing them; CI runs as root and runs them with
/// `cargo test --workspace -- --ignored as_root::` (`.ci/run`), where they fail if they
/// cannot do what they test.
mod as_root {
    use super::*;

    /// Another uid is refused on a default ring: by the 0700 directory, and with the directory
    /// opened up, by the 0600 file; a process in the ring's group is refused write on 0640.
    /// Each refusal is `OpenError::PermissionDenied` naming the segment.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn another_uid_is_refused_with_permission_denied() {
        role::need_root();
        let ns = Namespace::concurrent("foreign");
        let ring = Ring::create(ns.name(), "r", &RingConfig::default()).expect("create");
        let path = ring.path().display().to_string();

        let by_dir = publish_as_nobody(&ns, "r");
        eprintln!("0700 directory, 0600 file: {by_dir}");
        assert!(by_dir.starts_with("refused PermissionDenied"), "{by_dir}");
        assert!(by_dir.contains(&path), "{by_dir}");

        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
        let by_file = publish_as_nobody(&ns, "r");
        eprintln!("0711 directory, 0600 file: {by_file}");
        assert!(by_file.starts_with("refused PermissionDenied"), "{by_file}");
        assert!(by_file.contains(&path), "{by_file}");

        rustix::fs::chown(ring.path(), None, Some(rustix::fs::Gid::from_raw(NOBODY)))
            .expect("chown");
        std::fs::set_permissions(ring.path(), std::fs::Permissions::from_mode(0o640))
            .expect("chmod");
        let read_only = publish_as_nobody(&ns, "r");
        eprintln!("0640 file of group {NOBODY}: {read_only}");
        assert!(
            read_only.starts_with("refused PermissionDenied"),
            "{read_only}"
        );

        // Nothing was published by the refused processes.
        assert_eq!(ring.head(), 0);
        assert!(ring.info().producers.is_empty());
    }

    /// The deployment the group mode is for: a process of another uid in the ring's group
    /// opens the ring, attaches a producer and publishes to a consumer of the creating user.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_process_of_another_uid_in_the_ring_group_publishes() {
        role::need_root();
        let ns = Namespace::concurrent("group_member");
        let config = RingConfig {
            mode: 0o660,
            group: Some(NOBODY),
            ..RingConfig::default()
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create");
        let mut consumer = ring.consumer(ConsumerOptions::anonymous()).expect("attach");
        let out = publish_as_nobody(&ns, "r");
        assert_eq!(out, "published 0");
        let mut got = Vec::new();
        consumer
            .poll_once(|e| got.push(e.bytes().to_vec()))
            .expect("poll");
        assert_eq!(got, vec![b"from another uid".to_vec()]);
    }

    /// A group the creating process is not a member of cannot be given the directory or the
    /// file (only root may): the create says so, names the group, and leaves no directory
    /// half set up (with the creator's own group) for a later create to take as it is.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_group_the_creator_is_not_in_is_refused_and_leaves_nothing() {
        role::need_root();
        let ns = Namespace::concurrent("not_member");
        let out = child(
            &ns,
            "create",
            &[
                ("PERM_NS", ns.name().to_owned()),
                ("PERM_RING", "r".to_owned()),
                ("PERM_UMASK", "022".to_owned()),
                ("PERM_MODE", "660".to_owned()),
                ("PERM_GROUP", "0".to_owned()),
            ],
            true,
        );
        eprintln!("uid {NOBODY} asking for group 0: {out}");
        assert!(out.starts_with("error"), "{out}");
        assert!(
            out.contains("not a member") && out.contains("group 0"),
            "{out}"
        );
        assert!(
            ns.dir().symlink_metadata().is_err(),
            "the namespace directory was left: {out}"
        );
    }

    /// What the refusals should say: which right is missing on which path, for whom. Today
    /// every refusal is the same sentence ("the segment's mode and owner do not give this user
    /// read+write"), which blames the file even when the directory is what refuses, and does not
    /// name the uid, the modes or the owners.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn the_refusal_says_which_permission_is_missing() {
        role::need_root();
        let ns = Namespace::concurrent("which");
        let ring = Ring::create(ns.name(), "r", &RingConfig::default()).expect("create");
        let dir = ns.dir().display().to_string();

        let by_dir = publish_as_nobody(&ns, "r");
        for want in [&*dir, "uid 65534", "0700", "search"] {
            assert!(by_dir.contains(want), "{by_dir:?} does not say {want:?}");
        }

        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
        let by_file = publish_as_nobody(&ns, "r");
        for want in ["uid 65534", "0600", "owner uid 0", "read"] {
            assert!(by_file.contains(want), "{by_file:?} does not say {want:?}");
        }

        rustix::fs::chown(ring.path(), None, Some(rustix::fs::Gid::from_raw(NOBODY)))
            .expect("chown");
        std::fs::set_permissions(ring.path(), std::fs::Permissions::from_mode(0o640))
            .expect("chmod");
        let read_only = publish_as_nobody(&ns, "r");
        for want in ["0640", "group 65534", "write"] {
            assert!(
                read_only.contains(want),
                "{read_only:?} does not say {want:?}"
            );
        }
    }
}
