//! What the broker's tests add to the workspace's test kit (`shmring-testkit`): the broker
//! and its CLI run on a test's namespace ([`BrokerNs`]), and the status report read as
//! JSON. The kit's [`Namespace`] owns every process: each wait has a deadline, every child
//! is killed and reaped and the namespace directory goes away even when a test fails.

#![allow(dead_code)]

pub mod fault;
pub mod roles;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
#[allow(unused_imports)]
pub use shmring_testkit::{serial, wait_until, Child, Namespace, WAIT};

/// The broker binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_shmring-broker");

/// How often the status is polled (a watchdog poll, not a synchronisation sleep).
const STATUS_POLL: Duration = Duration::from_millis(5);

/// Make a FIFO (mode 0600) at `path`.
pub fn mkfifo(path: &std::path::Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
}

/// The broker on a test's namespace: `ns.broker(None)`, `ns.cli(&["stop", "r"])`.
pub trait BrokerNs {
    /// Write a config file for this namespace (in its scratch directory) and return its path.
    fn config(&self, text: &str) -> PathBuf;
    /// Start `broker run` on this namespace (with `config` text, or the embedded default)
    /// and wait for its "broker ready" log line.
    fn broker(&self, config: Option<&str>) -> Child;
    /// As [`BrokerNs::broker`], with the config file at `config` and more arguments to
    /// `broker run`.
    fn broker_with(&self, config: Option<&std::path::Path>, args: &[&str]) -> Child;
    /// The broker CLI on this namespace, with `args`, not started yet.
    fn cli_command(&self, args: &[&str]) -> Command;
    /// Run a broker CLI command to completion (bounded by [`WAIT`]).
    fn cli(&self, args: &[&str]) -> Output;
    /// `broker status --json`: the report and the exit code.
    fn status(&self) -> (Value, i32);
    /// Poll the status until `f` says yes; panics after [`WAIT`] with the last report.
    fn wait_status<T>(&self, what: &str, f: impl FnMut(&Value, i32) -> Option<T>) -> T {
        self.wait_status_for(what, WAIT, f)
    }
    /// As [`BrokerNs::wait_status`] with a deadline of `limit`.
    fn wait_status_for<T>(
        &self,
        what: &str,
        limit: Duration,
        f: impl FnMut(&Value, i32) -> Option<T>,
    ) -> T;
}

impl BrokerNs for Namespace {
    fn config(&self, text: &str) -> PathBuf {
        let path = self.scratch().join("broker.toml");
        std::fs::write(&path, text).expect("writing the config");
        path
    }

    fn broker(&self, config: Option<&str>) -> Child {
        let path = config.map(|c| self.config(c));
        self.broker_with(path.as_deref(), &[])
    }

    fn broker_with(&self, config: Option<&std::path::Path>, args: &[&str]) -> Child {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--namespace", self.name()]).args(args);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        cmd.env("RUST_LOG", "info");
        let mut broker = self.spawn("broker", cmd);
        if !broker.expect_stderr_within("broker ready", WAIT) {
            broker.fail("did not get ready");
        }
        broker
    }

    fn cli_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("--namespace").arg(self.name()).args(args);
        cmd
    }

    fn cli(&self, args: &[&str]) -> Output {
        shmring_testkit::output("the broker CLI", &mut self.cli_command(args))
    }

    fn status(&self) -> (Value, i32) {
        let out = self.cli(&["status", "--json"]);
        let code = out.status.code().unwrap_or(-1);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "status --json printed no JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (v, code)
    }

    fn wait_status_for<T>(
        &self,
        what: &str,
        limit: Duration,
        mut f: impl FnMut(&Value, i32) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + limit;
        loop {
            let (v, code) = self.status();
            if let Some(t) = f(&v, code) {
                return t;
            }
            if Instant::now() >= deadline {
                panic!("timed out after {limit:?} waiting for {what}; last status (exit {code}):\n{v:#}");
            }
            std::thread::sleep(STATUS_POLL);
        }
    }
}

/// `unshare` running `BIN` as process 1 of a new pid namespace, with `/proc` mounted anew
/// as a container has it (root only), killed with `unshare` itself: add `BIN`'s arguments.
fn in_a_pid_namespace() -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--kill-child", "--mount-proc", BIN]);
    cmd
}

/// Start `broker run` on `ns` in a pid namespace of its own ([`in_a_pid_namespace`]) and
/// wait for its "broker ready" log line.
pub fn broker_in_a_pid_namespace(ns: &Namespace) -> Child {
    let mut cmd = in_a_pid_namespace();
    cmd.args(["run", "--namespace", ns.name()])
        .env("RUST_LOG", "info");
    let mut broker = ns.spawn("broker in a pid namespace", cmd);
    if !broker.expect_stderr_within("broker ready", WAIT) {
        broker.fail("did not get ready");
    }
    broker
}

/// The broker CLI on `ns` with `args`, in a pid namespace of its own
/// ([`in_a_pid_namespace`]): to completion.
pub fn cli_in_a_pid_namespace(ns: &Namespace, args: &[&str]) -> Output {
    let mut cmd = in_a_pid_namespace();
    cmd.arg("--namespace").arg(ns.name()).args(args);
    shmring_testkit::output("the broker CLI in a pid namespace", &mut cmd)
}

/// Assert that a CLI run exited 0; its stderr says why not.
pub fn assert_exit_0(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ring `name` in a report.
pub fn ring<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v["rings"].as_array()?.iter().find(|r| r["name"] == name)
}

/// Consumer `name` of ring `ring` in a report.
pub fn consumer<'a>(v: &'a Value, ring_name: &str, name: &str) -> Option<&'a Value> {
    ring(v, ring_name)?["consumers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

/// A number field.
pub fn num(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no number {field:?} in {v:#}"))
}

/// Make `cmd` run as `uid`, with primary group `gid` and exactly the supplementary `groups`
/// (the test runs as root): a member of a ring's group, by its primary group or by a
/// supplementary one.
pub fn run_as(cmd: &mut Command, uid: u32, gid: u32, groups: &[u32]) {
    use std::os::unix::process::CommandExt;
    let groups: Vec<rustix::fs::Gid> = groups
        .iter()
        .map(|g| rustix::fs::Gid::from_raw(*g))
        .collect();
    let (uid, gid) = (
        rustix::fs::Uid::from_raw(uid),
        rustix::fs::Gid::from_raw(gid),
    );
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // work is allowed: three system calls (rustix's, without allocation or locks) on values
    // made before the fork. The child has one thread, so the per-thread calls are the
    // process's: groups first, then the gid, then the uid that drops root.
    unsafe {
        cmd.pre_exec(move || {
            rustix::thread::set_thread_groups(&groups)?;
            rustix::thread::set_thread_gid(gid)?;
            rustix::thread::set_thread_uid(uid)?;
            Ok(())
        });
    }
}

/// The address the broker logged for its metrics.
pub fn metrics_address(broker: &Child) -> String {
    let log = broker.stderr_so_far();
    let at = log
        .find("metrics at http://")
        .expect("metrics address logged");
    let rest = &log[at + "metrics at http://".len()..];
    rest[..rest.find('/').expect("a path")].to_owned()
}

/// `GET path`: the status line and the body.
pub fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut response = String::new();
    s.read_to_string(&mut response).expect("response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// As root: with `broker` stopped (every thread), kill `taker` and hand its pid to a new
/// process a tick of the start-time clock later (`shmring_testkit::fault::reuse_pid`), then
/// let the broker go on: no sweep sees the pid free in between, so only a sweep that can
/// tell a reused pid gives back what `taker` held. `meanwhile` runs first, while the broker
/// is stopped and `taker` still runs.
pub fn reuse_pid_behind_the_broker(
    broker: &mut Child,
    taker: shmring_testkit::fault::Sleeper,
    meanwhile: impl FnOnce(),
) -> shmring_testkit::fault::Sleeper {
    use rustix::process::Signal;
    broker.signal(Signal::STOP);
    let pid = broker.pid();
    shmring_testkit::eventually("the broker stopped", || {
        shmring_testkit::procfs::all_stopped(pid)
    });
    meanwhile();
    let reuser = shmring_testkit::fault::reuse_pid(taker);
    broker.signal(Signal::CONT);
    reuser
}

/// Wait for two more sweeps of the broker over `ring` (a sweep marks its end): one that
/// began after the caller's last change to the ring has seen it.
pub fn two_sweeps(ring: &shmring::Ring) {
    for what in ["a sweep", "the next sweep"] {
        let mark = ring.last_sweep_ns();
        shmring_testkit::eventually(what, || ring.last_sweep_ns() != mark);
    }
}
