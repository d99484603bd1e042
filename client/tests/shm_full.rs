//! A shared-memory file system too small for the ring (a container's 64 MiB `/dev/shm`, say)
//! must make `Ring::create` fail with an error, not kill the process.
//!
//! Each case runs this test binary again as a role (the `role` test) inside a
//! private mount namespace (`unshare --mount`) with a 256 KiB tmpfs as `SHMRING_ROOT`: the
//! mount disappears with the child. Needs root and util-linux `unshare`: the tests are in
//! `as_root`, ignored by a plain `cargo test` and run by CI (see there).

use std::process::Command;

use shmring::{Ring, RingConfig};
use shmring_testkit::{role, Namespace};

const MARK: &str = "@full ";
/// Size of the tmpfs the child creates its ring in.
const TMPFS: &str = "256k";

/// In a child: create a ring of `FULL_CAPACITY` 128-byte slots and print the outcome and
/// how many temporary files the create left behind.
#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    if role::current().is_none() {
        return;
    }
    let capacity = std::env::var("FULL_CAPACITY")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    let config = RingConfig {
        capacity,
        slot_size: 128,
        ..RingConfig::default()
    };
    let outcome = match Ring::create("full", "r", &config) {
        Ok(r) => format!("created {}", r.geometry().total_size),
        Err(e) => format!("error {e}"),
    };
    // Files of the create's own left in the namespace directory (hidden names).
    let tmp_left = shmring::names::namespace_dir("full")
        .ok()
        .and_then(|d| std::fs::read_dir(d).ok())
        .map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
                .count()
        });
    // Whether the space a failed create reserved went back: a small ring fits after it.
    let small = RingConfig {
        capacity: 16,
        ..config.clone()
    };
    let after = match Ring::create("full", "s", &small) {
        Ok(_) => "fits".to_owned(),
        Err(e) => format!("refused ({e})"),
    };
    // The same create again, and an open-or-create, where the ring is there: there is no
    // room for a second one, but the answer is that the ring exists, and the open opens it.
    let again = match Ring::create("full", "r", &config) {
        Ok(_) => "created".to_owned(),
        Err(shmring::OpenError::AlreadyExists { .. }) => "exists".to_owned(),
        Err(e) => format!("refused ({e})"),
    };
    let either = match Ring::open_or_create("full", "r", &config) {
        Ok(_) => "opened".to_owned(),
        Err(e) => format!("refused ({e})"),
    };
    println!("{MARK}{outcome} tmp_left={tmp_left} small_after={after} again={again} open_or_create={either}");
    std::process::exit(0);
}

/// What happened to the child: its result line (None if it printed none) and its exit code
/// (None if a signal ended it). `Err` says why the case cannot run here.
fn create_in_small_tmpfs(capacity: u64) -> Result<(Option<String>, Option<i32>), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("needs root to mount a tmpfs".into());
    }
    // The namespace owns the child and the mount point (its scratch directory, removed
    // whatever happens); the ring goes into the child's own tmpfs mounted there.
    let ns = Namespace::concurrent("shm_full");
    let dir = ns.scratch();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let role = role::command(&exe, "create");
    let script = format!(
        "mount -t tmpfs -o size={TMPFS} tmpfs \"$1\" || {{ echo '{MARK}nomount'; exit 0; }}; \
         shift; exec \"$@\""
    );
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ])
    .arg(&dir)
    .arg(role.get_program())
    .args(role.get_args())
    .envs(role.get_envs().filter_map(|(k, v)| Some((k, v?))))
    .env("FULL_CAPACITY", capacity.to_string())
    .env(shmring::names::ROOT_ENV, &dir);
    if let Err(e) = Command::new("unshare").arg("--version").output() {
        return Err(format!("cannot run unshare: {e}"));
    }
    let mut child = ns.spawn("create", cmd);
    let status = child.wait_status();
    let line = child
        .rest_of_stdout()
        .iter()
        .find_map(|l| l.strip_prefix(MARK).map(|rest| rest.trim().to_owned()));
    if line.as_deref() == Some("nomount") {
        return Err("mount -t tmpfs is not permitted here".into());
    }
    Ok((line, status.code()))
}

/// Tests that need root. A plain `cargo test` lists them as ignored, so a run without root
/// says they were skipped rather than passing them; CI runs as root and runs them with
/// `cargo test --workspace -- --ignored as_root::` (`.ci/run`), where they fail if they
/// cannot do what they test (no `unshare`, or a mount refused).
mod as_root {
    use super::*;

    /// Run the child, or fail saying why it cannot run here.
    fn run(capacity: u64) -> (Option<String>, Option<i32>) {
        create_in_small_tmpfs(capacity).unwrap_or_else(|why| panic!("cannot run: {why}"))
    }

    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_ring_that_fits_a_small_shm_is_created() {
        let (line, code) = run(64);
        let line = line.unwrap_or_else(|| panic!("no result (exit {code:?})"));
        assert!(line.starts_with("created"), "{line}");
        assert_eq!(code, Some(0));
        assert!(
            line.contains("tmp_left=0"),
            "a temporary file was left: {line}"
        );
    }

    /// A ring that takes more than half the file system is there: a second create of it
    /// finds no room for another, and says the ring exists (not that space ran out); an
    /// open-or-create opens it.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_create_of_a_ring_that_exists_says_so_when_there_is_no_room_for_another() {
        // 1024 slots of 128 bytes: about 140 KB of the 256 KB.
        let (line, code) = run(1024);
        let line = line.unwrap_or_else(|| panic!("no result (exit {code:?})"));
        assert!(line.starts_with("created"), "{line}");
        assert!(line.contains("again=exists"), "{line}");
        assert!(line.contains("open_or_create=opened"), "{line}");
    }

    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_ring_larger_than_the_shm_file_system_is_an_error() {
        // 4096 slots of 128 bytes: about 530 KB, twice the tmpfs.
        let (line, code) = run(4096);
        assert_eq!(
            code,
            Some(0),
            "the creating process was killed (a signal: SIGBUS is 135 from a shell); \
             printed {line:?}"
        );
        let line = line.expect("a result line");
        assert!(line.starts_with("error"), "{line}");
        assert!(
            line.contains("space"),
            "{line} does not say it is out of space"
        );
        // The failed create left no file, and nothing holds the space it reserved.
        assert!(
            line.contains("tmp_left=0"),
            "a temporary file was left: {line}"
        );
        assert!(
            line.contains("small_after=fits"),
            "the failed create's space was not given back: {line}"
        );
    }
}
