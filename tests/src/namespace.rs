//! One namespace per test, removed with everything in it when the test ends (or panics).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use shmring::names::{namespace_dir, root, RING_SUFFIX};

/// Prefix of every test namespace: `t-<pid>-<test>-<n>`.
pub const PREFIX: &str = "t-";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Tests of one test binary run on parallel threads; each multi-process test holds this lock
/// for its whole life, so that a 2-core machine never runs two tests' processes at once.
static SERIAL: Mutex<()> = Mutex::new(());

/// A namespace of its own for one test. `Drop` marks every ring in it deleted (so any child
/// still attached gets an error instead of waiting) and removes the directory, also when the
/// test is unwinding from a panic.
///
/// Declare it first in a test: locals drop in reverse order, so the children and ring
/// handles declared after it are gone before the namespace is removed.
pub struct Namespace {
    name: String,
    dir: PathBuf,
    /// The per-binary test lock; `None` for a [`Namespace::sibling`], which lives inside
    /// the test that holds it.
    _serial: Option<MutexGuard<'static, ()>>,
}

impl Namespace {
    /// A fresh namespace named after `test`, holding the per-binary test lock.
    pub fn new(test: &str) -> Self {
        // A test that panicked while holding the lock poisons it; the lock guards no data.
        let serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        sweep_stale();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag: String = test
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let name = format!("{PREFIX}{pid}-{tag}-{n}");
        let dir = namespace_dir(&name).expect("test namespace names are valid");
        assert!(
            !dir.exists(),
            "{} already exists: a namespace must be fresh",
            dir.display()
        );
        Self {
            name,
            dir,
            _serial: Some(serial),
        }
    }

    /// A second namespace for the same test (`<name>-<tag>`), for tests that connect two
    /// namespaces (a bridge between "hosts"). It does not take the test lock again (this
    /// namespace holds it); declare it after this one, so that it is removed first.
    pub fn sibling(&self, tag: &str) -> Self {
        let tag: String = tag
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(16)
            .collect();
        let name = format!("{}-{tag}", self.name);
        let dir = namespace_dir(&name).expect("test namespace names are valid");
        assert!(
            !dir.exists(),
            "{} already exists: a namespace must be fresh",
            dir.display()
        );
        Self {
            name,
            dir,
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

    /// The segment files currently in the namespace.
    pub fn segments(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(RING_SUFFIX))
            .collect()
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
        for seg in self.segments() {
            let file = seg.file_name().unwrap_or_default().to_string_lossy();
            let ring = file.trim_end_matches(RING_SUFFIX);
            if std::thread::panicking() {
                // The test failed: show the ring's tables as they were left, to diagnose.
                match shmring::Ring::open(&self.name, ring) {
                    Ok(r) => eprintln!("ring {ring} at the failure: {:#?}", r.info()),
                    Err(e) => eprintln!("ring {ring} at the failure: {e}"),
                }
            }
            // Marks the ring deleted for attached processes; a corrupt one is just unlinked.
            let _ = shmring::Ring::remove(&self.name, ring);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("removing {}: {e}", self.dir.display());
            }
        }
    }
}

/// Remove test namespaces left behind by test processes that no longer exist (a test run
/// killed with SIGKILL cannot clean up after itself).
fn sweep_stale() {
    let Ok(rd) = std::fs::read_dir(root()) else {
        return;
    };
    let prefix = format!("shmring.{PREFIX}");
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
