//! An example whose standard output (or error) is closed early, as `example | head -1`
//! closes it, ends with an error and exit code 1: never a panic (exit code 101).

use std::process::{Command, Stdio};

use shmring_testkit::Namespace;

mod common;
use common::example;

/// Run example `name` with `args`, its stdout (`out`) or stderr closed before it starts
/// (each example ends at once here: a bad argument, `--help`, or a write that fails):
/// (exit code, stderr when stdout was the closed one).
fn run_closed(ns: &Namespace, name: &str, args: &[&str], out: bool) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut cmd = Command::new(example(name));
    cmd.args(args)
        .env(shmring::names::NAMESPACE_ENV, ns.name())
        .stdin(Stdio::null());
    if out {
        cmd.stdout(Stdio::from(writer)).stderr(Stdio::piped());
    } else {
        cmd.stdout(Stdio::null()).stderr(Stdio::from(writer));
    }
    let done = cmd
        .output()
        .unwrap_or_else(|e| panic!("running the {name} example: {e}"));
    (
        done.status.code(),
        String::from_utf8_lossy(&done.stderr).into_owned(),
    )
}

#[test]
fn an_example_with_a_closed_stdout_ends_with_an_error_not_a_panic() {
    let ns = Namespace::new("ex_closed");
    for (name, args) in [
        ("producer", &["--help"][..]),
        ("consumer", &["--help"][..]),
        ("fanout", &["--help"][..]),
        ("async_logger", &["--help"][..]),
        ("order_pipeline", &["--help"][..]),
        // A producer that publishes: its first line is said before it publishes anything.
        ("producer", &["10"][..]),
    ] {
        let (code, err) = run_closed(&ns, name, args, true);
        assert_eq!(code, Some(1), "{name} {args:?}: {err}");
        assert!(!err.contains("panicked"), "{name} {args:?}: {err}");
        assert!(
            err.contains("error:"),
            "{name} {args:?} said no error: {err}"
        );
    }
}

#[test]
fn an_example_with_a_closed_stderr_still_ends_with_its_own_code() {
    let ns = Namespace::new("ex_closed_err");
    // A bad argument: the error goes to the closed stderr, and the exit code still says it.
    for name in [
        "producer",
        "consumer",
        "fanout",
        "async_logger",
        "order_pipeline",
    ] {
        let (code, _) = run_closed(&ns, name, &["not-a-number", "x", "y"], false);
        assert_eq!(code, Some(1), "{name}");
    }
}

/// The examples that make a ring of their own and start child processes say what they
/// made once it exists: with a closed stdout they end there, and remove the ring (and the
/// namespace directory they made) as a finished run does.
#[test]
fn an_example_that_cannot_say_what_it_made_removes_it() {
    let ns = Namespace::new("ex_closed_rm");
    for (name, args) in [
        ("fanout", &["10"][..]),
        ("order_pipeline", &["10"][..]),
        ("async_logger", &["block", "10"][..]),
    ] {
        let (code, err) = run_closed(&ns, name, args, true);
        assert_eq!(code, Some(1), "{name} {args:?}: {err}");
        assert!(!err.contains("panicked"), "{name} {args:?}: {err}");
        let left = shmring::names::rings_in(ns.dir()).unwrap_or_default();
        assert_eq!(left, Vec::<String>::new(), "{name} left rings behind");
        assert!(!ns.dir().exists(), "{name} left {}", ns.dir().display());
    }
}

/// `async_logger | head -1`: its stdout closes after the first line, while its processes
/// run. It ends with an error and exit code 1, and removes its ring, its namespace
/// directory and its log file as a finished run does.
#[test]
fn async_logger_whose_stdout_closes_after_its_first_line_cleans_up() {
    use std::io::{BufRead, BufReader};
    let ns = Namespace::new("ex_head_1");
    let (reader, writer) = std::io::pipe().expect("pipe");
    let mut cmd = Command::new(example("async_logger"));
    cmd.args(["block", "10"])
        .env(shmring::names::NAMESPACE_ENV, ns.name())
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("async_logger");
    let pid = child.id();
    let mut first = String::new();
    BufReader::new(reader)
        .read_line(&mut first)
        .expect("its first line");
    assert!(first.starts_with("ring "), "{first}");
    // The reader dropped here: `head -1` exits.
    let done = child.wait_with_output().expect("async_logger ends");
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let left = shmring::names::rings_in(ns.dir()).unwrap_or_default();
    assert_eq!(left, Vec::<String>::new(), "rings left behind");
    assert!(!ns.dir().exists(), "left {}", ns.dir().display());
    let log = std::env::temp_dir().join(format!("async-logger-{pid}.log"));
    assert!(!log.exists(), "left {}", log.display());
}
