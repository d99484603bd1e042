//! `broker demo` end to end with a short duration, and interrupted: either way every
//! process it started is gone and its namespace is removed.

mod common;

use std::process::Command;
use std::time::Instant;

use common::{Namespace, BIN};
use rustix::process::Signal;

#[test]
fn role() {
    common::roles::run_if_child();
}

/// The namespace named on the demo's first line.
fn namespace_of(first_line: &str) -> String {
    let rest = first_line
        .split("demo namespace ")
        .nth(1)
        .unwrap_or_else(|| panic!("no namespace in {first_line:?}"));
    rest[..rest.find(':').expect("a colon")].to_owned()
}

/// Pids of live processes whose command line mentions `namespace`.
fn processes_of(namespace: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(namespace))
                .unwrap_or(false)
        })
        .collect()
}

fn assert_cleaned_up(namespace: &str) {
    let dir = shmring::names::namespace_dir(namespace).expect("valid");
    assert!(!dir.exists(), "{} is left behind", dir.display());
    common::wait_until("every demo process gone", || {
        processes_of(namespace).is_empty().then_some(())
    });
}

#[test]
fn the_demo_runs_end_to_end_and_cleans_up() {
    let _serial = common::serial();
    let out = shmring_testkit::output("demo", Command::new(BIN).args(["demo", "--duration", "3s"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let namespace = namespace_of(text.lines().next().unwrap_or(""));
    assert!(text.contains("killed \"restarted\""), "{text}");
    assert!(text.contains("started \"restarted\" again"), "{text}");
    assert!(
        text.contains("ring \"demo\""),
        "the live status was shown: {text}"
    );
    let table = &text[text
        .find("what each consumer saw")
        .expect("the final table")..];
    // "N events published in ...; what each consumer saw": the ring is stopped and drained
    // at the end, so every consumer that ran throughout saw every event.
    let published: u64 = text[..text.find(" events published in").expect("the count")]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("the published count");
    assert!(published > 0, "{text}");
    for (name, wait) in [
        ("spin", "busy-spin"),
        ("blocking", "blocking"),
        ("adaptive", "adaptive"),
        ("restarted", "timeout-blocking"),
    ] {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[1], wait, "{row}");
        let events: u64 = cols[2].parse().expect("events");
        assert!(events > 0, "{name} saw nothing: {table}");
        if name == "restarted" {
            // Only what it received after its restart.
            assert!(events <= published, "{table}");
        } else {
            assert_eq!(events, published, "{name} did not drain the ring: {table}");
        }
    }
    assert_cleaned_up(&namespace);
}

#[test]
fn an_interrupted_demo_cleans_up() {
    // The demo makes a namespace of its own; this one owns the demo process.
    let ns = Namespace::new("demo_int");
    let mut cmd = Command::new(BIN);
    cmd.args(["demo", "--duration", "10m"]);
    let mut demo = ns.spawn("demo", cmd);
    let first = demo.expect("demo namespace ");
    let namespace = namespace_of(&format!("demo namespace {first}"));
    demo.expect("ring \"demo\"");
    assert!(!processes_of(&namespace).is_empty());
    let started = Instant::now();
    let status = demo.signal_and_wait(Signal::INT);
    assert_eq!(status.code(), Some(1), "an interrupted demo exits 1");
    assert_cleaned_up(&namespace);
    eprintln!("cleaned up {:?} after SIGINT", started.elapsed());
}

/// `broker demo | head -1`: its stdout closes after the first line. It ends quietly, with
/// the code a finished demo has (0), and cleans up as an interrupted one does.
#[test]
fn a_demo_whose_stdout_closes_ends_quietly_and_cleans_up() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let _serial = common::serial();
    let (reader, writer) = std::io::pipe().expect("pipe");
    let child = Command::new(BIN)
        .args(["demo", "--duration", "10m"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .expect("demo");
    /// Kills the demo if the test ends before it does.
    struct Killed(Option<std::process::Child>);
    impl Drop for Killed {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut demo = Killed(Some(child));
    let mut first = String::new();
    BufReader::new(reader)
        .read_line(&mut first)
        .expect("the demo's first line");
    let namespace = namespace_of(&first);
    // The reader is gone: the first status screen cannot be written.
    let started = Instant::now();
    let out = demo
        .0
        .take()
        .expect("the demo")
        .wait_with_output()
        .expect("the demo ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "it said: {err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(300),
        "it ran on for {:?} with nobody reading",
        started.elapsed()
    );
    assert_cleaned_up(&namespace);
}

/// Tests that need root (a private pid namespace, so the demo's process id, and so its
/// namespace's name, is known before it starts). A plain `cargo test` lists them as
/// ignored; CI runs as root and runs them with `cargo test --workspace -- --ignored
/// as_root::` (`.ci/run`), where they fail if they cannot do what they test.
mod as_root {
    use super::*;

    /// Run the demo as process 1 of a new pid namespace with `root` as `SHMRING_ROOT`, so
    /// that its namespace directory is `root/shmring.demo-1`: its exit code and stderr.
    /// `/proc` is mounted anew in the pid namespace (`--mount-proc`), so that the demo's
    /// processes see their own process ids there as the client's liveness checks expect.
    fn demo_as_pid_1(ns: &Namespace, root: &std::path::Path) -> (Option<i32>, String) {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test makes a pid namespace: run it as root"
        );
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--pid",
            "--fork",
            "--mount-proc",
            BIN,
            "demo",
            "--duration",
            "1s",
        ])
        .env(shmring::names::ROOT_ENV, root);
        let mut demo = ns.spawn("demo", cmd);
        let code = demo.wait_status().code();
        (code, demo.stderr())
    }

    /// A demo whose namespace directory is already there (another demo's, one left by a
    /// killed demo, or a link someone put there) refuses to run, says why, and neither
    /// writes into it nor removes it: the demo's config is written only in a directory
    /// the demo made itself.
    #[test]
    #[ignore = "needs root: run as root with `cargo test -- --ignored as_root::` (CI does)"]
    fn a_demo_never_uses_or_removes_a_namespace_directory_it_did_not_make() {
        let ns = Namespace::new("demo_taken");
        let root = ns.scratch();
        let taken = root.join("shmring.demo-1");
        std::fs::create_dir(&taken).expect("make the directory");
        std::fs::write(taken.join("keep"), b"kept").expect("a file of its own");
        let (code, stderr) = demo_as_pid_1(&ns, &root);
        assert_eq!(code, Some(1), "the demo refuses: {stderr}");
        assert!(stderr.contains("already there"), "{stderr}");
        assert_eq!(
            std::fs::read(taken.join("keep")).ok().as_deref(),
            Some(&b"kept"[..])
        );
        let entries: Vec<_> = std::fs::read_dir(&taken)
            .expect("still there")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(entries, ["keep"], "nothing written into it");

        // A link at the name, to a directory elsewhere: not followed, not written through.
        std::fs::remove_dir_all(&taken).expect("clear");
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("make the link's target");
        std::os::unix::fs::symlink(&elsewhere, &taken).expect("symlink");
        let (code, stderr) = demo_as_pid_1(&ns, &root);
        assert_eq!(code, Some(1), "the demo refuses a link: {stderr}");
        assert!(taken.symlink_metadata().is_ok(), "the link is left alone");
        assert_eq!(
            std::fs::read_dir(&elsewhere).expect("target").count(),
            0,
            "nothing written through the link"
        );

        // The control: with the name free, the same run makes, uses and removes it.
        std::fs::remove_file(&taken).expect("remove the link");
        let (code, stderr) = demo_as_pid_1(&ns, &root);
        assert_eq!(code, Some(0), "the demo runs: {stderr}");
        assert!(
            taken.symlink_metadata().is_err(),
            "the demo removed its namespace"
        );
    }
}
