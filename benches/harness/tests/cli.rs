//! `ipc-bench` as a program: how it ends when nobody reads its tables any more.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `ipc-bench floor --quick | head -1`: the reader of the tables goes away after the first
/// line. The run ends with an error (exit code 2, not a panic), and removes what it made
/// (its namespace directory in the shared-memory root) on the way out.
#[test]
fn a_run_whose_reader_goes_away_ends_with_an_error_and_removes_its_files() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipc-bench"))
        .args(["floor", "--quick"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ipc-bench");
    let dir = shmring::names::namespace_dir(&format!("ipcb-{}", child.id()))
        .expect("the run's namespace directory");
    let mut out = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut first = String::new();
    out.read_line(&mut first).expect("the first line");
    assert_eq!(first.trim(), "## ipc-bench floor");
    drop(out);
    // The floor suite takes about a second here; a minute means it is stuck.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ipc-bench still runs a minute after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err =
        std::io::read_to_string(child.stderr.take().expect("stderr is piped")).expect("stderr");
    let left = dir.exists();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("stdout"),
        "the error does not say what failed: {err}"
    );
    assert!(!left, "{} was left behind", dir.display());
}
