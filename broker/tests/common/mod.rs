//! Test support: a namespace per test, the broker and child processes under watchdogs,
//! and the status report read as JSON. Every wait has a deadline; every guard kills and
//! reaps its process and the namespace directory goes away even when a test fails.

#![allow(dead_code)]

pub mod fault;
pub mod proc;
pub mod roles;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use proc::{BrokerProc, Proc};
use serde_json::Value;

/// The deadline of every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(30);
/// How often a condition is polled (a watchdog poll, not a synchronisation sleep).
pub const POLL: Duration = Duration::from_millis(5);

static SERIAL: Mutex<()> = Mutex::new(());

/// Run one test of this binary at a time: each starts a broker and clients, and this
/// machine has two cores.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A namespace of its own; its directory is removed on drop.
pub struct Ns {
    /// The namespace name.
    pub name: String,
}

impl Ns {
    /// A fresh namespace for test `tag`.
    pub fn new(tag: &str) -> Ns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "bt-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Ns { name };
        let _ = std::fs::remove_dir_all(ns.dir());
        ns
    }

    /// Its directory.
    pub fn dir(&self) -> PathBuf {
        shmring::names::namespace_dir(&self.name).expect("valid namespace")
    }

    /// A scratch directory for this test's own files (created on first use, removed with
    /// the namespace): not the namespace directory, which the broker scans.
    pub fn scratch(&self) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{}.scratch", self.name));
        std::fs::create_dir_all(&dir).expect("creating the scratch directory");
        dir
    }

    /// Write a config file for this namespace and return its path.
    pub fn config(&self, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("{}.toml", self.name));
        std::fs::write(&path, text).expect("writing the config");
        path
    }

    /// Start a broker on this namespace (with `config` text, or the embedded default).
    pub fn broker(&self, config: Option<&str>) -> BrokerProc {
        let path = config.map(|c| self.config(c));
        BrokerProc::start(&self.name, path.as_deref())
    }

    /// Run a broker CLI command to completion.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_shmring-broker"))
            .arg("--namespace")
            .arg(&self.name)
            .args(args)
            .output()
            .expect("running the broker CLI")
    }

    /// `broker status --json`: the report and the exit code.
    pub fn status(&self) -> (Value, i32) {
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

    /// Poll the status until `f` says yes; panics after [`WAIT`] with the last report.
    pub fn wait_status<T>(&self, what: &str, f: impl FnMut(&Value, i32) -> Option<T>) -> T {
        self.wait_status_for(what, WAIT, f)
    }

    /// As [`Ns::wait_status`] with a deadline of `limit`.
    pub fn wait_status_for<T>(
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
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir());
        let _ = std::fs::remove_file(std::env::temp_dir().join(format!("{}.toml", self.name)));
        let _ =
            std::fs::remove_dir_all(std::env::temp_dir().join(format!("{}.scratch", self.name)));
    }
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

/// Wait until `f` says yes, polling; panics after [`WAIT`].
pub fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = f() {
            return t;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {WAIT:?} waiting for {what}");
        }
        std::thread::sleep(POLL);
    }
}

/// A copy of an executable that uid 65534 can run: the checkout (and so the binary) may
/// sit under a directory other users cannot search, such as `/root`. The copy lives in its
/// own 0755 directory under the temp dir and is removed when the guard drops.
pub struct ExeForNobody {
    dir: PathBuf,
    /// The copy.
    pub exe: PathBuf,
}

impl ExeForNobody {
    /// Copy `original`.
    pub fn of(original: &std::path::Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("shmring-exe-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("exe dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let exe = dir.join("exe");
        std::fs::copy(original, &exe).expect("copy exe");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Self { dir, exe }
    }
}

impl Drop for ExeForNobody {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
