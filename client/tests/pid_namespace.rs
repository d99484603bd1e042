//! A ring belongs to the pid namespace of its creator. Entries record each process's pid as
//! that process sees it and liveness is judged by pid, so a process of another pid
//! namespace (a container that does not share the broker's) is refused at open with
//! `OpenError::OtherPidNamespace`, before it could be taken for dead or take others for
//! dead. A remove from there is refused the same way: it would take over, or own, a stop
//! whose owner's pid it cannot judge.
//!
//! A pid namespace takes root to make (`unshare --pid`): the tests are in `as_root`,
//! ignored by a plain `cargo test` and run by CI. The child runs this test binary again as
//! a role (the `role` test below), as process 1 of a new pid namespace with `/proc` mounted
//! anew, as a container has it.

use shmring::{OpenError, Ring, RingConfig};
use shmring_testkit::{role, Namespace};

/// Every child line the parent reads starts with this.
const MARK: &str = "@pidns ";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// In a child: run its role, print its result and exit. In the test run itself: nothing.
#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    let Some(role) = role::current() else {
        return;
    };
    let (ns, ring) = (var("PIDNS_NS"), var("PIDNS_RING"));
    match role.as_str() {
        // Open the ring, attach a producer and publish one event.
        "publish" => match Ring::open(&ns, &ring) {
            Ok(r) => match r.producer() {
                Ok(mut p) => match p.try_publish(b"from a pid namespace") {
                    Ok(seq) => println!("{MARK}published {seq}"),
                    Err(e) => println!("{MARK}error publish: {e}"),
                },
                Err(e) => println!("{MARK}error attach: {e}"),
            },
            Err(e @ OpenError::OtherPidNamespace { .. }) => {
                println!("{MARK}refused OtherPidNamespace {e}");
            }
            Err(e) => println!("{MARK}error open: {e}"),
        },
        "create" => match Ring::create(&ns, &ring, &RingConfig::default()) {
            Ok(_) => println!("{MARK}created"),
            Err(e) => println!("{MARK}error create: {e}"),
        },
        other => println!("{MARK}error unknown role {other}"),
    }
    std::process::exit(0);
}

mod as_root {
    use super::*;
    use std::process::Command;

    /// Run this test binary as role `role` on ring `ring` of `ns`, a child of `ns`: in a
    /// new pid namespace if `apart`, else in this one. The text after the mark of its one
    /// result line.
    fn child(ns: &Namespace, role: &str, ring: &str, apart: bool) -> String {
        let exe = std::env::current_exe().expect("current_exe");
        let mut inner = role::command(&exe, role);
        inner
            .env("PIDNS_NS", ns.name())
            .env("PIDNS_RING", ring)
            .env(shmring::names::NAMESPACE_ENV, ns.name());
        let cmd = if apart {
            let mut cmd = Command::new("unshare");
            cmd.args(["--pid", "--fork", "--kill-child", "--mount-proc"])
                .arg(inner.get_program())
                .args(inner.get_args());
            for (k, v) in inner.get_envs() {
                if let Some(v) = v {
                    cmd.env(k, v);
                }
            }
            cmd
        } else {
            inner
        };
        let mut proc = ns.spawn(role, cmd);
        let line = proc.expect(MARK);
        proc.wait_status();
        line
    }

    /// A process of another pid namespace cannot open or remove a ring, whichever side
    /// created it; the creator's pid namespace can.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_ring_opens_only_in_its_creators_pid_namespace() {
        role::need_root();
        let ns = Namespace::new("pidns");
        let ring = Ring::create(ns.name(), "here", &RingConfig::default()).expect("create");

        let apart = child(&ns, "publish", "here", true);
        eprintln!("from another pid namespace: {apart}");
        assert!(apart.starts_with("refused OtherPidNamespace"), "{apart}");
        assert!(
            apart.contains(&ring.path().display().to_string()),
            "{apart}"
        );
        // The control: the same child in this pid namespace publishes.
        assert_eq!(child(&ns, "publish", "here", false), "published 0");
        assert_eq!(ring.info().producers.len(), 0, "the child detached");

        // Created in another pid namespace: this process is the one refused.
        assert_eq!(child(&ns, "create", "there", true), "created");
        match Ring::open(ns.name(), "there") {
            Err(OpenError::OtherPidNamespace { ring, own, .. }) => {
                assert_ne!(ring, own);
                assert_ne!(ring, 0);
            }
            other => panic!("opened a ring of another pid namespace: {other:?}"),
        }
        // Nor remove it: the file stays as it is.
        match Ring::remove(ns.name(), "there") {
            Err(OpenError::OtherPidNamespace { .. }) => {}
            other => panic!("removed a ring of another pid namespace: {other:?}"),
        }
        assert!(ns.ring_path("there").exists());
        let hidden: Vec<_> = std::fs::read_dir(ns.dir())
            .expect("the namespace directory")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(hidden.is_empty(), "nothing set aside: {hidden:?}");
    }
}
