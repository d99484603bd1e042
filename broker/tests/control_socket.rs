//! The control socket refuses what it should, with clear errors, and stays up: a
//! malformed request, an oversized one, an unknown ring, and a peer of another uid.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;

use common::{ring, BrokerNs, Namespace};
use serde_json::Value;
use shmring_testkit::role::{self, ExeForNobody};

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

fn exchange(ns: &Namespace, bytes: &[u8]) -> Value {
    let mut s = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
    s.set_read_timeout(Some(common::WAIT)).expect("timeout");
    // The broker may refuse (and close) before an oversized request is all written.
    if let Err(e) = s.write_all(bytes) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "send: {e}");
    }
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).expect("reply");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?} is not JSON: {e}"))
}

fn error_of(v: &Value) -> &str {
    assert_eq!(v["reply"], "error", "{v}");
    v["message"].as_str().expect("message")
}

#[test]
fn malformed_oversized_and_unknown_requests_are_refused_and_the_broker_stays_up() {
    let ns = Namespace::new("ctl");
    let broker = ns.broker(None);

    let v = exchange(&ns, b"this is not json\n");
    assert!(error_of(&v).contains("malformed request"), "{v}");
    let v = exchange(&ns, b"{\"op\":\"launch\",\"ring\":\"default\"}\n");
    assert!(error_of(&v).contains("malformed request"), "{v}");
    let v = exchange(&ns, b"{\"op\":\"stop\"}\n");
    assert!(error_of(&v).contains("missing field `ring`"), "{v}");
    let v = exchange(&ns, &[0xff, 0xfe, b'\n']);
    assert!(error_of(&v).contains("not UTF-8"), "{v}");
    let mut huge = vec![b' '; 100 * 1024];
    huge.push(b'\n');
    let v = exchange(&ns, &huge);
    assert!(error_of(&v).contains("longer than"), "{v}");
    // A peer that connects and says nothing, and one that hangs up mid-line.
    drop(UnixStream::connect(ns.dir().join("broker.sock")).expect("connect"));
    {
        let mut s = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
        s.write_all(b"{\"op\":").expect("half a request");
    }

    let v = exchange(&ns, b"{\"op\":\"stop\",\"ring\":\"nosuch\"}\n");
    let msg = error_of(&v);
    assert!(
        msg.contains("no ring named \"nosuch\"") && msg.contains("default"),
        "{msg}"
    );
    let out = ns.cli(&["drain", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no ring named \"nosuch\""));
    let out = ns.cli(&["status", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));

    // Still up, still serving, nothing changed.
    let v = exchange(&ns, b"{\"op\":\"ping\"}\n");
    assert_eq!(v["reply"], "pong");
    assert_eq!(v["pid"], broker.pid());
    let (v, code) = ns.status();
    assert_eq!(code, 0);
    assert_eq!(ring(&v, "default").expect("default")["state"], "RUNNING");
}

/// Peers that trickle their requests a byte at a time, well inside any per-read timeout,
/// as many as the broker serves at once, hold up no other request for long: each request
/// line has one deadline in all (5 s), not one per read, so the broker cuts them off and
/// answers the next peer. Before, each read had its own 5 s, so the trickling peers held
/// every connection slot and every other request got "broker busy" for as long as they
/// trickled.
#[test]
fn peers_that_trickle_their_requests_hold_up_no_other_request() {
    use std::io::Read;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    let ns = Namespace::new("ctl_trickle");
    let _broker = ns.broker(None);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // As many as the broker serves at once (`MAX_CONNECTIONS`).
    let slow: Vec<UnixStream> = (0..16)
        .map(|_| {
            let mut s = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
            s.write_all(b"{").expect("the first byte");
            s
        })
        .collect();
    let tricklers: Vec<_> = slow
        .iter()
        .map(|s| {
            let mut s = s.try_clone().expect("clone the socket");
            let stop = stop.clone();
            // One space every 200 ms until the broker closes the connection or the test
            // says stop (bounded: never past the kit's deadline).
            std::thread::spawn(move || {
                let until = Instant::now() + common::WAIT;
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    // A pace for the trickle, not a synchronisation sleep.
                    std::thread::sleep(Duration::from_millis(200));
                    if s.write_all(b" ").is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    // Answered within 20 s, while the trickles go on for the kit's whole deadline (60 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let v = exchange(&ns, b"{\"op\":\"ping\"}\n");
        if v["reply"] == "pong" {
            break true;
        }
        assert!(error_of(&v).contains("busy"), "{v}");
        if Instant::now() >= deadline {
            break false;
        }
        // A pace for the retries, not a synchronisation sleep.
        std::thread::sleep(Duration::from_millis(100));
    };
    // Every trickling connection was cut off: it reads as closed (an end of file, or a
    // reset if the broker closed it with bytes unread).
    let mut open = 0;
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        let mut reply = Vec::new();
        let closed = s.read_to_end(&mut reply);
        if !(closed.is_ok()
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset))
        {
            open += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tricklers {
        t.join().expect("a trickler");
    }
    assert!(
        answered,
        "the trickling peers held every connection for 20 s"
    );
    assert_eq!(open, 0, "trickling connections left open");
}

/// Tests that need root. A plain `cargo test` lists them as ignored, so a run without root
/// says they were skipped rather than passing them; CI runs as root and runs them with
/// `cargo test --workspace -- --ignored as_root::` (`.ci/run`), where they fail if they
/// cannot do what they test.
mod as_root {
    use super::*;

    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_peer_of_another_uid_is_refused() {
        role::need_root();
        let ns = Namespace::new("uid");
        let _broker = ns.broker(None);
        // Open the file permissions wide, so that only the broker's SO_PEERCRED check stands
        // between uid 65534 and the broker.
        let sock = ns.dir().join("broker.sock");
        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod dir");
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666))
            .expect("chmod socket");

        let copy = ExeForNobody::of_this_test();
        let mut cmd = role::command(&copy.exe, "foreign");
        cmd.env(shmring::names::NAMESPACE_ENV, ns.name())
            .env("ROLE_REQUEST", "{\"op\":\"stop\",\"ring\":\"default\"}");
        role::as_nobody(&mut cmd);
        let mut child = ns.spawn("foreign", cmd);
        let reply = child.expect("@reply");
        eprintln!("reply to uid 65534: {reply}");
        assert!(
            reply.contains("permission denied") && reply.contains("uid 65534"),
            "{reply}"
        );
        let (v, _) = ns.status();
        assert_eq!(
            ring(&v, "default").expect("default")["state"],
            "RUNNING",
            "the request had no effect"
        );
    }

    /// Start the `impostor` role as uid 65534 in `ns` (with the variables named in `env`
    /// set), listening on the broker's socket path; then `broker stop` is refused as sent to
    /// no broker (exit 2, naming uid 65534). The impostor, kept running until dropped.
    fn stop_asked_of_an_impostor(ns: &Namespace, env: &[&str], case: &str) -> common::Child {
        let copy = ExeForNobody::of_this_test();
        let mut cmd = role::command(&copy.exe, "impostor");
        cmd.env(shmring::names::NAMESPACE_ENV, ns.name());
        for var in env {
            cmd.env(var, "1");
        }
        role::as_nobody(&mut cmd);
        let mut impostor = ns.spawn("impostor", cmd);
        impostor.expect("@listening");
        let out = ns.cli(&["stop", "default"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case}: {err}");
        assert!(err.contains("uid 65534"), "{case}: {err}");
        impostor
    }

    /// Once the broker stopped (its socket removed), another user who may write the
    /// namespace directory listens on the socket's path: the CLI does not take that process
    /// for the broker (it would report a stop it never made, or a healthy namespace with no
    /// broker), it says who listens and that no broker of the namespace answers (exit 2).
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_socket_served_by_another_user_is_not_taken_for_the_broker() {
        role::need_root();
        // Then with a lock file of its own, made once the broker's is gone (removed by root,
        // or after a reboot empties /dev/shm): its owner is not the broker either. And in a
        // directory another user owns (here uid 4242, whose broker stopped), not even a
        // lock it holds makes it the broker.
        for (own_lock, owner) in [(false, 0), (true, 0), (true, 4242)] {
            let ns = Namespace::new("impostor");
            let mut broker = ns.broker(None);
            broker.signal_and_wait(rustix::process::Signal::TERM);
            assert!(
                !ns.dir().join("broker.sock").exists(),
                "the socket went with the broker"
            );
            std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o777))
                .expect("chmod dir");
            if own_lock {
                std::fs::remove_file(ns.dir().join("broker.lock")).expect("remove the lock");
            }
            if owner != 0 {
                std::os::unix::fs::chown(ns.dir(), Some(owner), None).expect("chown dir");
            }

            let mut env = Vec::new();
            if own_lock {
                env.push("IMPOSTOR_LOCK");
            }
            if owner != 0 {
                env.push("IMPOSTOR_FLOCK");
            }
            let _impostor = stop_asked_of_an_impostor(
                &ns,
                &env,
                &format!("own lock {own_lock}, owner {owner}"),
            );
            let v: Value =
                serde_json::from_slice(&ns.cli(&["status", "--json"]).stdout).expect("status JSON");
            let why = v["broker"]["unreachable"].as_str().unwrap_or_default();
            assert!(why.contains("uid 65534"), "{v:#}");
        }
    }

    /// A symbolic link planted at the namespace's path (in the world-writable `/dev/shm`,
    /// before any broker made the directory) leads to a directory of the link's user, who
    /// listens there: the CLI does not take that user for the namespace's owner (the broker
    /// refuses such a path, so no broker runs behind it).
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_namespace_path_that_is_a_link_is_not_served_by_its_owner() {
        use std::os::unix::fs::{chown, lchown, symlink};
        role::need_root();
        let ns = Namespace::new("linkdir");
        let elsewhere = ns.scratch().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("the link's target");
        chown(&elsewhere, Some(65534), Some(65534)).expect("chown target");
        std::fs::set_permissions(ns.scratch(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod scratch");
        symlink(&elsewhere, ns.dir()).expect("a link at the namespace's path");
        lchown(ns.dir(), Some(65534), Some(65534)).expect("lchown link");

        let _impostor = stop_asked_of_an_impostor(&ns, &[], "a link");
    }

    /// A broker of another user than the namespace directory's owner (root owns it, as
    /// `sudo install -d` leaves it; the broker accepts that) is the broker: in such a
    /// directory the CLI's look at who listens goes by who holds the namespace's lock.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_broker_in_a_directory_root_owns_is_answered() {
        role::need_root();
        let ns = Namespace::new("rootdir");
        std::fs::create_dir(ns.dir()).expect("the namespace directory, root's");
        std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o1777))
            .expect("chmod dir");
        let copy = ExeForNobody::of(std::path::Path::new(common::BIN));
        let mut cmd = std::process::Command::new(&copy.exe);
        cmd.args(["run", "--namespace", ns.name()])
            .env("RUST_LOG", "info");
        role::as_nobody(&mut cmd);
        let mut broker = ns.spawn("broker as nobody", cmd);
        if !broker.expect_stderr_within("broker ready", common::WAIT) {
            broker.fail("did not get ready");
        }
        // From a pid namespace of its own the CLI cannot see the broker's pid (the kernel
        // gives 0), so it cannot tell the lock's holder: as where `/proc/locks` cannot be
        // read, it believes the listener.
        stop_here_and_start_from_a_pid_namespace(&ns);
    }

    /// `broker stop` from this process, then `broker start` from a CLI in a pid namespace
    /// of its own: each answered, as the status shows.
    fn stop_here_and_start_from_a_pid_namespace(ns: &Namespace) {
        common::assert_exit_0(&ns.cli(&["stop", "default"]));
        let (v, code) = ns.status();
        assert_eq!(code, 0, "{v:#}");
        assert_eq!(ring(&v, "default").expect("default")["state"], "STOPPED");
        common::assert_exit_0(&common::cli_in_a_pid_namespace(ns, &["start", "default"]));
        let (v, _) = ns.status();
        assert_eq!(ring(&v, "default").expect("default")["state"], "RUNNING");
    }

    /// A control peer in a pid namespace the other side cannot see (the CLI on the host
    /// asking a broker in a container, or the CLI in a container asking the host's broker)
    /// has, to the other side, pid 0. Each side still answers: the pid identifies nobody
    /// there, and the uid checks stand as they are.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_peer_in_another_pid_namespace_is_answered() {
        role::need_root();
        let ns = Namespace::new("pidns");
        let _broker = common::broker_in_a_pid_namespace(&ns);
        // This process is in the parent pid namespace: to the broker, its pid is 0. To a
        // CLI in a pid namespace of its own, the broker's pid is 0.
        stop_here_and_start_from_a_pid_namespace(&ns);
    }

    /// A member of the broker group through a supplementary group only (its primary group is
    /// another one, as after `usermod -aG`): the socket's `SO_PEERGROUPS` shows the group,
    /// and the request is carried out.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_member_by_a_supplementary_group_may_control_the_broker() {
        role::need_root();
        let ns = Namespace::new("supp");
        // A gid of no other use on this machine: the broker takes numeric groups as they are.
        let group = 4242;
        let _broker = ns.broker(Some(&format!(
            "[broker]\ngroup = {group}\n[rings.default]\ncapacity = 64\n"
        )));
        let copy = ExeForNobody::of_this_test();
        let mut cmd = role::command(&copy.exe, "foreign");
        cmd.env(shmring::names::NAMESPACE_ENV, ns.name())
            .env("ROLE_REQUEST", "{\"op\":\"stop\",\"ring\":\"default\"}")
            .current_dir("/");
        common::run_as(&mut cmd, 65534, 65534, &[group]);
        let mut child = ns.spawn("supplementary", cmd);
        let reply = child.expect("@reply");
        eprintln!("reply to uid 65534 with supplementary group {group}: {reply}");
        assert!(reply.contains("\"reply\":\"done\""), "{reply}");
        let (v, _) = ns.status();
        assert_eq!(ring(&v, "default").expect("default")["state"], "STOPPED");
    }
}

/// A `create` builds its ring (every page of the file allocated and mapped) outside the
/// broker's state lock: a request on another connection while a large ring is being built
/// is answered before the build ends. Before, the build held the lock, so `status`, `ping`,
/// the sweeps and the metrics waited for it (seconds for a ring of gigabytes, past the
/// CLI's status timeout).
#[test]
fn a_ping_during_a_large_create_is_answered_before_the_create() {
    let ns = Namespace::new("bigcreate");
    let broker = ns.broker(None);
    let create = large_create(&ns, &broker);
    let pong = exchange(&ns, b"{\"op\":\"ping\"}\n");
    assert_eq!(pong["reply"], "pong", "{pong}");
    // The build ends by linking the file in at the ring's name.
    assert!(
        !ns.dir().join("big.ring").exists(),
        "the ping was answered only once the build was over"
    );
    let mut line = String::new();
    BufReader::new(&create)
        .read_line(&mut line)
        .expect("the create's reply");
    let v: Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(v["reply"], "done", "{v}");
    let (status, _) = ns.status();
    assert!(ring(&status, "big").is_some(), "{status:#}");
}

/// The files without a name in the namespace directory that the broker holds open. A ring
/// is built in such a file (`O_TMPFILE`), held from the build's start, then linked in at
/// its name. (Each ring's file shows so once linked in too: a build shows as one more.)
fn unnamed_files(ns: &Namespace, broker: &common::Child) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", broker.pid()))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| {
            target.starts_with(ns.dir()) && target.to_string_lossy().ends_with("(deleted)")
        })
        .count()
}

/// Ask for ring `big` of 512 MiB (4 Mi slots of 128 bytes) on a connection of its own,
/// and wait until the broker has begun to build it; the connection, for the reply.
fn large_create(ns: &Namespace, broker: &common::Child) -> UnixStream {
    let before = unnamed_files(ns, broker);
    let mut create = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
    create
        .set_read_timeout(Some(common::WAIT))
        .expect("timeout");
    create
        .write_all(b"{\"op\":\"create\",\"ring\":\"big\",\"capacity\":4194304,\"slot_size\":128}\n")
        .expect("send the create");
    shmring_testkit::eventually("the build of the ring to begin", || {
        unnamed_files(ns, broker) > before
    });
    create
}

/// A SIGHUP that adds a large ring to the config builds it outside the broker's state
/// lock, as a create does: requests are answered and sweeps go on during the build. Before,
/// the reload built the ring holding the lock (and in the sweep loop), so `status`, `ping`
/// and the metrics waited for it, past the CLI's status timeout for a ring of gigabytes.
#[test]
fn a_ping_during_a_reload_that_builds_a_large_ring_is_answered_before_the_build() {
    let ns = Namespace::new("bigreload");
    let config = ns.config("[rings.small]\ncapacity = 64\n");
    let mut broker = ns.broker_with(Some(&config), &[]);
    let before = unnamed_files(&ns, &broker);
    // 4 Mi slots of 128 bytes: 512 MiB to allocate and map.
    std::fs::write(
        &config,
        "[rings.small]\ncapacity = 64\n[rings.big]\ncapacity = 4194304\nslot_size = 128\n",
    )
    .expect("rewrite the config");
    broker.signal(rustix::process::Signal::HUP);
    shmring_testkit::eventually("the build of the ring to begin", || {
        unnamed_files(&ns, &broker) > before
    });
    let pong = exchange(&ns, b"{\"op\":\"ping\"}\n");
    assert_eq!(pong["reply"], "pong", "{pong}");
    assert!(
        !ns.dir().join("big.ring").exists(),
        "the ping was answered only once the build was over"
    );
    let big = ns.wait_status("the reloaded ring tracked", |v, _| {
        ring(v, "big").map(|r| r["capacity"].clone())
    });
    assert_eq!(big, 4194304, "{big}");
    assert!(broker.stderr_has("SIGHUP: config reloaded"));
}

/// A SIGHUP that configures a ring while a create request builds it: the ring runs on the
/// reloaded settings, whichever of the two tracks it. Before, the create tracked it with
/// the settings it read before its build, and the reload, finding it tracked, left them.
#[test]
fn a_ring_created_across_a_reload_takes_the_reloaded_settings() {
    let ns = Namespace::new("createhup");
    let config = ns.config("");
    let mut broker = ns.broker_with(Some(&config), &[]);
    let create = large_create(&ns, &broker);
    std::fs::write(
        &config,
        "[rings.big]\ncapacity = 4194304\nslot_size = 128\nstall_threshold = \"80ms\"\n",
    )
    .expect("rewrite the config");
    broker.signal(rustix::process::Signal::HUP);
    let mut line = String::new();
    BufReader::new(&create)
        .read_line(&mut line)
        .expect("the create's reply");
    let v: Value = serde_json::from_str(&line).expect("JSON");
    // The reload builds the ring too, and the first build to be linked in at the name wins:
    // the create is refused if it was the reload's.
    assert!(
        v["reply"] == "done"
            || v["message"]
                .as_str()
                .is_some_and(|m| m.contains("already exists")),
        "{v}"
    );
    common::wait_until("the reload over", || {
        broker.stderr_has("SIGHUP: config reloaded").then_some(())
    });
    let (status, _) = ns.status();
    let big = ring(&status, "big").expect("the ring");
    assert_eq!(big["health"]["stall_threshold_ms"], 80, "{big:#}");
}

/// `broker status` while the broker serves as many control connections as it may: the
/// report is read from the segments and the exit status is 2, not reachable, as for a
/// broker that is down. Before, the refusal was an error, exit status 1, which scripts
/// read as "something is unhealthy".
#[test]
fn status_while_the_broker_is_busy_reads_the_segments_and_says_unreachable() {
    let ns = Namespace::new("ctl_busy");
    let _broker = ns.broker(None);
    // Every one of the broker's slots (`MAX_CONNECTIONS`, 16) held by a connection of
    // this test with half a request, until the broker's read deadline (5 s) cuts it off:
    // taken afresh before each request below. The broker accepts connections in order and
    // answers one it has no slot for at once, so once a probe made after them is refused,
    // each earlier one has its slot or its refusal to read.
    let connect = || {
        let mut s = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
        let _ = s.write_all(b"{");
        s
    };
    let mut held: Vec<UnixStream> = Vec::new();
    let fill = |held: &mut Vec<UnixStream>| {
        use std::io::Read;
        held.clear();
        let deadline = std::time::Instant::now() + common::WAIT;
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "could not take every slot"
            );
            while held.len() < 16 {
                held.push(connect());
            }
            let probe = connect();
            probe
                .set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .expect("timeout");
            let mut line = String::new();
            let refused = BufReader::new(&probe)
                .read_line(&mut line)
                .is_ok_and(|n| n > 0);
            if !refused {
                // A slot was free (one dropped above not let go yet when the others came).
                held.push(probe);
            }
            // A refused connection has the broker's reply (or its end) to read at once.
            held.retain(|s| {
                s.set_nonblocking(true).expect("nonblocking");
                let mut byte = [0u8; 1];
                matches!((&*s).read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            if refused && held.len() >= 16 {
                return;
            }
        }
    };
    fill(&mut held);
    let out = ns.cli(&["status", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(out.status.code(), Some(2), "{report:#}");
    let why = report["broker"]["unreachable"].as_str().expect("why");
    assert!(why.contains("busy"), "{why}");
    assert!(ring(&report, "default").is_some(), "{report:#}");
    fill(&mut held);
    let out = ns.cli(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("BROKER BUSY"), "{text}");
    // A lifecycle request refused for the same reason: nothing done, exit status 2.
    fill(&mut held);
    let out = ns.cli(&["stop", "default"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(held);
    assert_eq!(
        shmring::Ring::open(ns.name(), "default")
            .expect("open")
            .state(),
        Some(shmring::RingState::Running),
        "the refused stop stopped the ring"
    );
}
