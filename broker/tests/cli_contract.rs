//! The command line's contract: exit codes (64 for usage, never 2, which is "broker
//! down"), a closed stdout ends a command quietly, `--watch` on a pipe, errors printed
//! once, idempotent `start`, the namespace from the environment, a mistyped namespace, a
//! socket this user may not use, `release` and `unsubscribe`, deadlines, and SIGHUP.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Command, Output, Stdio};

use common::{consumer, num, ring, BrokerNs, Child, Namespace, BIN};
use serde_json::Value;
use shmring::{ConsumerOptions, Ring};
use shmring_testkit::{output, role};

#[test]
fn role() {
    common::roles::run_if_child();
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn usage_errors_exit_64_and_help_exits_0() {
    let ns = Namespace::concurrent("usage");
    let long_ring = "r".repeat(65);
    let long_consumer = "c".repeat(49);
    // Names no ring or consumer can have are bad values too, refused before any broker is
    // asked: a ring name of 1 to 64 characters of [A-Za-z0-9_.-] not starting with '.', a
    // consumer name of 1 to 48 bytes without NUL.
    let bad_names: [&[&str]; 12] = [
        &["create", "a/../b"],
        &["create", &long_ring],
        &["create", ".hidden"],
        &["status", "a/b"],
        &["stop", ""],
        &["release", "a/../b", "x"],
        &["release", "r", ""],
        &["release", "r", &long_consumer],
        &["unsubscribe", "r", ""],
        &["demo-role", "producer", "a/b", "10"],
        &["demo-role", "consumer", "r", "", "blocking"],
        &["demo-role", "consumer", &long_ring, "c", "blocking"],
    ];
    for args in bad_names {
        let out = ns.cli(args);
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("name"), "{args:?}: {}", stderr(&out));
    }
    for args in [
        &["bogus"][..],
        &["status", "--bogus"],
        &["status", "--watch", "nan"],
        &["status", "--watch", "inf"],
        &["status", "--watch", "-1"],
        &["drain", "x", "--timeout", "5parsecs"],
        &["release", "x"],
        &["config"],
    ] {
        let out = ns.cli(args);
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // `--watch` takes an optional interval, so a ring after it is read as one: the error
    // says how to watch the ring.
    let out = ns.cli(&["status", "--watch", "orders"]);
    assert_eq!(code(&out), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("status orders --watch"),
        "{}",
        stderr(&out)
    );
    let bad_ns = output(
        "cli",
        Command::new(BIN).args(["--namespace", "no/such", "status"]),
    );
    assert_eq!(code(&bad_ns), 64, "{}", stderr(&bad_ns));
    for args in [&["--help"][..], &["--version"], &["status", "--help"]] {
        let out = ns.cli(args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
    }
    let help = stdout(&ns.cli(&["--help"]));
    assert!(help.contains("SHMRING_NAMESPACE"), "{help}");
    assert!(
        help.contains("64 usage error") && help.contains("SIGHUP"),
        "{help}"
    );
}

/// A config path naming a FIFO (which would block a read until a writer comes), a device,
/// or a file larger than any config is refused at once, with exit 1 and an error that names
/// the path and says what it is: by `config --check` and by `broker run --config`.
#[test]
fn a_config_that_is_not_a_small_regular_file_is_refused_promptly() {
    let ns = Namespace::concurrent("configfifo");
    let fifo = ns.scratch().join("broker.fifo");
    common::mkfifo(&fifo);
    let huge = ns.scratch().join("huge.toml");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(64 << 20))
        .expect("a sparse 64 MiB file");
    let null = std::path::PathBuf::from("/dev/null");
    for (path, says) in [
        (&fifo, "not a regular file"),
        (&null, "not a regular file"),
        (&huge, "larger than"),
    ] {
        let path_text = path.to_str().expect("UTF-8 path");
        for args in [
            &["config", "--check", path_text][..],
            &["run", "--config", path_text],
        ] {
            let out = ns.cli(args);
            let err = stderr(&out);
            assert_eq!(code(&out), 1, "{args:?}: {err}");
            assert!(
                err.contains(path_text) && err.contains(says),
                "{args:?}: {err}"
            );
        }
    }
}

/// Run the CLI with a stdout whose reader is already gone.
fn with_closed_stdout(ns: &Namespace, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Command::new(BIN)
        .arg("--namespace")
        .arg(ns.name())
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("cli")
}

#[test]
fn a_closed_stdout_ends_quietly_with_the_commands_code() {
    let ns = Namespace::new("pipe");
    let _broker = ns.broker(None);
    for (args, want) in [
        (&["status"][..], 0),
        (&["status", "--json"], 0),
        (&["status", "--watch", "0.1"], 0),
        (&["status", "--watch", "--json"], 0),
        (&["config", "--print-default"], 0),
        (&["stop", "default"], 0),
    ] {
        let out = with_closed_stdout(&ns, args);
        assert_eq!(code(&out), want, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{args:?} said: {}", stderr(&out));
    }
}

/// `status --watch` on a pipe: the first `n` lines, then it is killed.
fn watch_lines(ns: &Namespace, args: &[&str], n: usize) -> Vec<String> {
    let mut cmd = Command::new(BIN);
    cmd.arg("--namespace").arg(ns.name()).args(args);
    let mut p = ns.spawn("watch", cmd);
    let mut lines = Vec::new();
    while lines.len() < n {
        let line = p.expect("");
        lines.push(line);
    }
    lines
}

#[test]
fn watch_on_a_pipe_writes_no_screen_codes_and_json_one_document_per_line() {
    let ns = Namespace::new("watch");
    let _broker = ns.broker(None);
    let text = watch_lines(&ns, &["status", "--watch", "0.1"], 30);
    assert!(text.iter().all(|l| !l.contains('\x1b')), "{text:#?}");
    let headers = text.iter().filter(|l| l.starts_with("namespace ")).count();
    assert!(headers >= 2, "two reports one after the other: {text:#?}");
    // Piped tables: plain columns, no box drawing.
    assert!(text.iter().all(|l| !l.contains('─')), "{text:#?}");

    for line in watch_lines(&ns, &["status", "--watch", "0.1", "--json"], 3) {
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["schema"], 1);
        assert!(ring(&v, "default").is_some());
    }
}

#[test]
fn errors_are_printed_once() {
    let ns = Namespace::concurrent("once");
    let out = ns.cli(&["config", "--check", "/nonexistent/shmring.toml"]);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_mistyped_namespace_is_named_not_reported_healthy() {
    let ns = Namespace::concurrent("typo");
    for args in [&["status"][..], &["status", "--json"], &["stop", "default"]] {
        let out = ns.cli(args);
        assert_eq!(code(&out), 2, "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains("does not exist") && err.contains(ns.name()),
            "{err}"
        );
        assert!(!stdout(&out).contains("healthy"), "{}", stdout(&out));
    }
}

#[test]
fn the_namespace_comes_from_the_environment() {
    let ns = Namespace::new("env");
    let _broker = ns.broker(None);
    let out = output(
        "cli",
        Command::new(BIN)
            .args(["status", "--json"])
            .env(shmring::names::NAMESPACE_ENV, ns.name()),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["namespace"], ns.name());
}

#[test]
fn start_on_a_running_ring_is_done_like_stop_on_a_stopped_one() {
    let ns = Namespace::new("idem");
    let _broker = ns.broker(None);
    let out = ns.cli(&["start", "default"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("already running"), "{}", stdout(&out));
    for _ in 0..2 {
        assert_eq!(code(&ns.cli(&["stop", "default"])), 0);
    }
    assert_eq!(code(&ns.cli(&["start", "default"])), 0);
    let (v, _) = ns.status();
    assert_eq!(ring(&v, "default").expect("default")["state"], "RUNNING");
    assert_eq!(num(ring(&v, "default").expect("default"), "run"), 2);
}

#[test]
fn release_and_unsubscribe_a_durable_consumer_by_name() {
    let ns = Namespace::new("byname");
    let _broker = ns.broker(None);
    let ring_handle = Ring::open(ns.name(), "default").expect("open");
    let live = ring_handle
        .consumer(ConsumerOptions::durable("live"))
        .expect("live");
    drop(
        ring_handle
            .consumer(ConsumerOptions::durable("gone"))
            .expect("gone"),
    );
    // The report is the last sweep's: wait for it to show the state.
    let state_is = |name: &str, want: Option<&str>| {
        ns.wait_status(&format!("{name} in state {want:?}"), |v, _| {
            let got = consumer(v, "default", name).and_then(|c| c["state"].as_str());
            (got == want).then_some(())
        })
    };
    state_is("gone", Some("DETACHED"));

    let out = ns.cli(&["unsubscribe", "default", "live"]);
    assert_eq!(code(&out), 1, "a live consumer is not unsubscribed");
    assert!(stderr(&out).contains("live process"), "{}", stderr(&out));
    let out = ns.cli(&["release", "default", "nobody"]);
    assert_eq!(code(&out), 1);
    // The durable consumers there, each quoted (names other processes chose).
    assert!(
        stderr(&out).contains("no durable consumer named") && stderr(&out).contains("\"gone\""),
        "{}",
        stderr(&out)
    );

    let out = ns.cli(&["release", "default", "gone"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    state_is("gone", Some("RELEASED"));
    let out = ns.cli(&["release", "default", "gone"]);
    assert_eq!(code(&out), 0, "releasing twice is done: {}", stderr(&out));
    let out = ns.cli(&["unsubscribe", "default", "gone"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    state_is("gone", None);

    let out = ns.cli(&["release", "default", "live"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    state_is("live", Some("RELEASED"));
    drop(live);
}

fn exchange(ns: &Namespace, line: &str) -> Value {
    let mut s = UnixStream::connect(ns.dir().join("broker.sock")).expect("connect");
    s.set_read_timeout(Some(common::WAIT)).expect("timeout");
    s.write_all(line.as_bytes()).expect("send");
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).expect("reply");
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply {reply:?}: {e}"))
}

#[test]
fn a_request_past_its_deadline_is_not_carried_out() {
    let ns = Namespace::new("deadline");
    let _broker = ns.broker(None);
    let v = exchange(
        &ns,
        "{\"op\":\"stop\",\"ring\":\"default\",\"deadline_ns\":1}\n",
    );
    assert_eq!(v["reply"], "error", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("not carried out"),
        "{v}"
    );
    let (report, _) = ns.status();
    assert_eq!(
        ring(&report, "default").expect("default")["state"],
        "RUNNING"
    );
    // A deadline in the future is honoured too: the request is done.
    let v = exchange(
        &ns,
        &format!(
            "{{\"op\":\"stop\",\"ring\":\"default\",\"deadline_ns\":{}}}\n",
            u64::MAX
        ),
    );
    assert_eq!(v["reply"], "done", "{v}");
}

#[test]
fn sighup_reloads_the_config_and_keeps_the_broker() {
    let ns = Namespace::new("hup");
    let path = ns.config("[rings.a]\ncapacity = 64\n");
    let mut broker = ns.broker_with(Some(&path), &[]);
    let hup = |b: &mut Child| b.signal(rustix::process::Signal::HUP);
    std::fs::write(
        &path,
        "[rings.a]\ncapacity = 64\n[rings.b]\nstall_threshold = \"80ms\"\n",
    )
    .expect("rewrite config");
    hup(&mut broker);
    ns.wait_status("ring b after SIGHUP", |v, _| {
        let b = ring(v, "b")?;
        (num(&b["health"], "stall_threshold_ms") == 80).then_some(())
    });
    std::fs::write(&path, "this is not toml").expect("break config");
    hup(&mut broker);
    common::wait_until("the reload failure logged", || {
        broker.stderr_has("config not reloaded").then_some(())
    });
    let (v, code) = ns.status();
    assert_eq!(code, 0, "{v:#}");
    assert!(ring(&v, "a").is_some() && ring(&v, "b").is_some());
    assert!(broker
        .signal_and_wait(rustix::process::Signal::TERM)
        .success());
}

#[test]
fn a_socket_this_user_may_not_use_is_not_called_a_dead_broker() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to run the CLI as another uid");
        return;
    }
    let ns = Namespace::new("eacces");
    let _broker = ns.broker(None);
    std::fs::set_permissions(ns.dir(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let copy = role::ExeForNobody::of(std::path::Path::new(BIN));
    let out = output(
        "cli as nobody",
        role::as_nobody(Command::new(&copy.exe).args(["--namespace", ns.name(), "status"])),
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(text.contains("BROKER NOT REACHABLE"), "{text}");
    assert!(!text.contains("BROKER DOWN"), "{text}");
    assert!(
        err.contains("permission denied") && err.contains("may be running"),
        "{err}"
    );
}

#[test]
fn shell_completions_are_generated() {
    let ns = Namespace::concurrent("compl");
    for shell in ["bash", "zsh", "fish"] {
        let out = ns.cli(&["completions", shell]);
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains("shmring-broker") && text.contains("unsubscribe"),
            "{shell}"
        );
    }
    assert_eq!(code(&ns.cli(&["completions", "cmd.exe"])), 64);
}

/// A `broker run` whose stderr's reader is gone (`broker run 2>&1 | grep -m1 'broker
/// ready'` in a script) goes on: a log line it cannot write is dropped, never a panic that
/// kills the broker or the thread answering a request.
#[test]
fn a_broker_whose_stderr_reader_went_away_keeps_running_and_answering() {
    let ns = Namespace::new("stderr_gone");
    let (reader, writer) = std::io::pipe().expect("pipe");
    let child = Command::new(BIN)
        .args(["run", "--namespace", ns.name()])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(writer))
        .spawn()
        .expect("broker run");
    /// Kills the broker however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut broker = Killed(child);
    let (ready, seen) = std::sync::mpsc::channel();
    // Reads up to the ready line, then closes the pipe's only reader.
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if line.contains("broker ready") {
                let _ = ready.send(());
                break;
            }
        }
    });
    seen.recv_timeout(common::WAIT)
        .expect("the broker got ready");

    for _ in 0..2 {
        for verb in ["stop", "start"] {
            let out = ns.cli(&[verb, "default"]);
            assert_eq!(code(&out), 0, "{verb}: {}", stderr(&out));
        }
    }
    let (_, status) = ns.status();
    assert_eq!(status, 0, "the broker still answers");
    assert!(
        broker.0.try_wait().expect("try_wait").is_none(),
        "the broker still runs"
    );
}
