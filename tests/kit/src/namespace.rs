//! One namespace per test, removed with everything in it when the test ends (or panics),
//! and the owner of every child process the test spawns.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use shmring::names::{namespace_dir, ring_path, rings_in, root, NAMESPACE_ENV};

use crate::child::{Child, Reaped};
use crate::role;

/// Prefix of every test namespace: `t-<pid>-<test>-<n>`.
pub const PREFIX: &str = "t-";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Tests of one test binary run on parallel threads; each multi-process test holds this lock
/// for its whole life, so that a 2-core machine never runs two tests' processes at once.
static SERIAL: Mutex<()> = Mutex::new(());

/// Take the per-binary test lock (what [`Namespace::new`] holds), for a test that runs
/// processes without a namespace of the kit's.
pub fn serial() -> MutexGuard<'static, ()> {
    // A test that panicked while holding the lock poisons it; the lock guards no data.
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A namespace of its own for one test. `Drop`, also while the test unwinds from a panic:
/// SIGKILLs and reaps every child spawned through it that is still there, marks every ring
/// in it deleted, and removes its directory and its scratch directory.
///
/// Declare it first in a test: locals drop in reverse order, so the children and ring
/// handles declared after it are gone before the namespace is removed.
pub struct Namespace {
    name: String,
    dir: PathBuf,
    /// Every child spawned through [`Namespace::spawn`], shared with its [`Child`] handle.
    children: Mutex<Vec<Arc<Reaped>>>,
    /// The per-binary test lock; `None` for a [`Namespace::concurrent`] one and for a
    /// [`Namespace::sibling`], which lives inside the test that holds it.
    _serial: Option<MutexGuard<'static, ()>>,
}

/// `text` as a part of a namespace name: `[A-Za-z0-9_]`, at most `max` characters.
fn name_part(text: &str, max: usize) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(max)
        .collect()
}

impl Namespace {
    /// A fresh namespace named after `test`, holding the per-binary test lock: for tests
    /// that run processes.
    pub fn new(test: &str) -> Self {
        let serial = serial();
        let mut ns = Self::concurrent(test);
        ns._serial = Some(serial);
        ns
    }

    /// A fresh namespace named after `test`, without the test lock: for tests in one process
    /// (or with a few short-lived children), which may run beside each other.
    pub fn concurrent(test: &str) -> Self {
        sweep_stale();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        Self::fresh(format!("{PREFIX}{pid}-{}-{n}", name_part(test, 40)))
    }

    /// A second namespace for the same test (`<name>-<tag>`), for tests that connect two
    /// namespaces (a bridge between "hosts"). It does not take the test lock again (this
    /// namespace holds it); declare it after this one, so that it is removed first.
    pub fn sibling(&self, tag: &str) -> Self {
        Self::fresh(format!("{}-{}", self.name, name_part(tag, 16)))
    }

    fn fresh(name: String) -> Self {
        let dir = namespace_dir(&name).expect("test namespace names are valid");
        assert!(
            !dir.exists(),
            "{} already exists: a namespace must be fresh",
            dir.display()
        );
        Self {
            name,
            dir,
            children: Mutex::new(Vec::new()),
            _serial: None,
        }
    }

    /// The namespace name to pass to `Ring::create` / `open` and to children.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The segment file of ring `ring` in this namespace.
    pub fn ring_path(&self, ring: &str) -> PathBuf {
        ring_path(&self.name, ring).expect("a valid ring name")
    }

    /// The rings currently in the namespace, by name.
    pub fn rings(&self) -> Vec<String> {
        rings_in(&self.dir).unwrap_or_default()
    }

    /// The segment files currently in the namespace.
    pub fn segments(&self) -> Vec<PathBuf> {
        self.rings().iter().map(|r| self.ring_path(r)).collect()
    }

    /// A directory for this test's own files (configs, ledgers, copies of binaries),
    /// created on first use and removed with the namespace. Not the namespace directory,
    /// which brokers scan.
    pub fn scratch(&self) -> PathBuf {
        let dir = scratch_dir(&self.name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        dir
    }

    /// Spawn `cmd` as a child of this test, labelled `label` in failure messages. Its
    /// stdin, stdout and stderr are piped (see [`Child`]); the child is killed and reaped
    /// when its handle drops, and at the latest when this namespace drops.
    pub fn spawn(&self, label: &str, cmd: Command) -> Child {
        let child = Child::spawn(label, cmd);
        self.children
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(child.reaped());
        child
    }

    /// Run this test binary again as role `name` ([`role::command`]), with this namespace
    /// as its default (`SHMRING_NAMESPACE`) and the extra environment `env`.
    pub fn role(&self, name: &str, env: &[(&str, String)]) -> Child {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = role::command(&exe, name);
        cmd.env(NAMESPACE_ENV, &self.name);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.spawn(name, cmd)
    }
}

impl std::fmt::Display for Namespace {
    /// The name, for command lines: `format!("--ns {ns}")`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // First the children, so that none is still attached to what is removed next.
        let children = std::mem::take(
            self.children
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for child in children {
            child.kill_and_reap();
        }
        for ring in self.rings() {
            if std::thread::panicking() {
                // The test failed: show the ring's tables as they were left, to diagnose.
                match shmring::Ring::open(&self.name, &ring) {
                    Ok(r) => eprintln!("ring {ring} at the failure: {:#?}", r.info()),
                    Err(e) => eprintln!("ring {ring} at the failure: {e}"),
                }
            }
            // Marks the ring deleted for any process still attached; a corrupt one is just
            // unlinked.
            let _ = shmring::Ring::remove(&self.name, &ring);
        }
        for dir in [self.dir.clone(), scratch_dir(&self.name)] {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    eprintln!("removing {}: {e}", dir.display());
                }
            }
        }
    }
}

/// The scratch directory of namespace `name`, under the temporary directory.
fn scratch_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("shmring.{name}.scratch"))
}

/// Remove test namespaces (and their scratch directories) left behind by test processes
/// that no longer exist: a test run killed with SIGKILL cannot clean up after itself.
fn sweep_stale() {
    let prefix = format!("shmring.{PREFIX}");
    for parent in [root(), std::env::temp_dir()] {
        let Ok(rd) = std::fs::read_dir(&parent) else {
            continue;
        };
        for entry in rd.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&prefix) else {
                continue;
            };
            let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_the_namespace_kills_its_children_and_removes_its_rings() {
        let ns = Namespace::concurrent("kit_drop");
        let ring =
            shmring::Ring::create(ns.name(), "r", &shmring::RingConfig::default()).expect("create");
        let mut cmd = Command::new("sleep");
        cmd.arg("600");
        let child = ns.spawn("sleeper", cmd);
        let pid = child.pid();
        // A handle that never drops: the namespace still kills and reaps the process.
        std::mem::forget(child);
        let (dir, scratch) = (ns.dir().to_owned(), ns.scratch());
        drop(ns);
        assert!(
            ring.is_deleted(),
            "an attached handle sees the ring deleted"
        );
        assert!(!dir.exists() && !scratch.exists());
        // Reaped, so no zombie keeps the pid (the kernel may reuse it; then it is not ours).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(!stat.contains("(sleep)"), "sleeper still there: {stat}");
    }
}
