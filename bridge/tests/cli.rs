//! The bridge's command line as a program: how it ends when it cannot run.

use std::process::{Command, Stdio};

use shmring_testkit::Namespace;

/// A bridge that fails (here: its source ring does not exist) with a stderr whose reader is
/// gone ends with the failure code, 1, as with a stderr someone reads: the message it cannot
/// write is dropped, not a panic (code 101).
#[test]
fn a_failure_with_a_closed_stderr_ends_with_the_failure_code() {
    let ns = Namespace::new("bridge-cli");
    let run = |stderr: Stdio| {
        Command::new(env!("CARGO_BIN_EXE_shmring-bridge"))
            .args(["export", "--namespace", ns.name(), "--ring", "missing"])
            .args(["--key", "shmring-test/cli", "--listen", "tcp/127.0.0.1:9"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .output()
            .expect("run shmring-bridge")
    };
    let read = run(Stdio::piped());
    let said = String::from_utf8_lossy(&read.stderr);
    assert_eq!(read.status.code(), Some(1), "{said}");
    assert!(said.contains("opening source ring \"missing\""), "{said}");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let closed = run(Stdio::from(writer));
    assert_eq!(closed.status.code(), Some(1), "with a closed stderr");
}
