//! A test binary run again as a child process: a "role".
//!
//! A test file that needs a child of its own code (a producer with a ledger, a creator
//! under another umask, a peer of another uid) declares an ignored test named `role`
//! that dispatches on [`current`] and exits; the parent spawns [`command`] (usually
//! through [`crate::Namespace::role`]). The child's stdout carries its report lines; libtest
//! runs quietly (`-q`), so they start at the beginning of a line.
//!
//! ```no_run
//! #[test]
//! #[ignore = "the child-process role: run by the other tests of this file"]
//! fn role() {
//!     match shmring_testkit::role::current().as_deref() {
//!         Some("producer") => { /* ... */ }
//!         Some(other) => println!("@error unknown role {other}"),
//!         None => return, // the test run itself
//!     }
//!     std::process::exit(0);
//! }
//! ```

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The environment variable that names the role in a child.
pub const ROLE_ENV: &str = "SHMRING_ROLE";

/// In a child: the role it was started as. In the test run itself: `None`.
pub fn current() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// A command that runs the test binary `exe` as role `role`: only its `role` test, on one
/// thread, quietly, with its output shown.
pub fn command(exe: &Path, role: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "role",
        "--ignored",
        "--nocapture",
        "--quiet",
        "--test-threads",
        "1",
    ])
    .env(ROLE_ENV, role);
    cmd
}

/// The uid and gid of the "other user" tests: `nobody` / `nogroup`.
pub const NOBODY: u32 = 65534;

/// Fail the test unless it runs as root, which running a child as [`NOBODY`] needs.
pub fn need_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test runs a child as uid {NOBODY}: run it as root"
    );
}

/// Make `cmd` run as uid and gid [`NOBODY`] (which needs root), from `/`, a directory that
/// user can search. The executable must be one that user can run ([`ExeForNobody`]).
pub fn as_nobody(cmd: &mut Command) -> &mut Command {
    cmd.current_dir("/").uid(NOBODY).gid(NOBODY)
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
    pub fn of(original: &Path) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("shmring-exe-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("exe dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let exe = dir.join(original.file_name().unwrap_or("exe".as_ref()));
        std::fs::copy(original, &exe).expect("copy exe");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Self { dir, exe }
    }

    /// Copy this test binary.
    pub fn of_this_test() -> Self {
        Self::of(&std::env::current_exe().expect("current_exe"))
    }
}

impl Drop for ExeForNobody {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
