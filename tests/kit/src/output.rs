//! A short command run to its end, as `Command::output` runs it, but under the kit's
//! deadline: a command that hangs fails its test instead of hanging it.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::thread;
use std::time::Instant;

use crate::child::{Reaped, EXIT_POLL};
use crate::WAIT;

/// Run `cmd` to its end and return what it printed, as [`Command::output`] does (stdin
/// closed, stdout and stderr captured byte for byte), but bounded: a command still running
/// after [`WAIT`] is killed and reaped, and the test fails. `label` names it in that failure.
pub fn output(label: &str, cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let proc = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {label} ({cmd:?}): {e}"));
    // Killed and reaped however this function ends.
    let proc = Reaped(Mutex::new(proc));
    let (stdout, stderr) = {
        let mut p = proc.lock();
        let out = p.stdout.take().expect("stdout is piped");
        let err = p.stderr.take().expect("stderr is piped");
        (read_all(out), read_all(err))
    };
    let deadline = Instant::now() + WAIT;
    let status = loop {
        let polled = proc.lock().try_wait();
        match polled {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(EXIT_POLL),
            Ok(None) => panic!("{label} ({cmd:?}) still running after {WAIT:?}: killed"),
            Err(e) => panic!("waiting for {label}: {e}"),
        }
    };
    let left = || deadline.saturating_duration_since(Instant::now());
    let collect = |rx: Receiver<Vec<u8>>, what: &str| {
        rx.recv_timeout(left()).unwrap_or_else(|_| {
            panic!("{label}: {what} not closed after the exit (a grandchild holds it?)")
        })
    };
    Output {
        status,
        stdout: collect(stdout, "stdout"),
        stderr: collect(stderr, "stderr"),
    }
}

/// Read `r` to its end on a thread; the bytes arrive on the returned channel.
fn read_all(mut r: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = r.read_to_end(&mut bytes);
        let _ = tx.send(bytes);
    });
    rx
}
