//! A child process under a watchdog: every wait has a deadline, and `Drop` kills and reaps.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// The deadline of every single wait on a child (a line, an exit).
pub const WAIT: Duration = Duration::from_secs(60);

/// How often an exit is polled for (a watchdog poll, not a synchronisation sleep).
const EXIT_POLL: Duration = Duration::from_millis(2);

/// A spawned process with piped stdin (for [`Child::send_line`]), stdout (read line by line
/// on a thread) and stderr (collected for failure messages). `Drop` SIGKILLs it if it still runs, and reaps it.
pub struct Child {
    label: String,
    proc: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Lines read past by [`Child::expect_line`], oldest first.
    backlog: Vec<String>,
    stderr: Receiver<String>,
    stderr_text: Option<String>,
    status: Option<ExitStatus>,
}

impl Child {
    /// Spawn `exe` with `args`. `label` names the child in failure messages.
    pub fn spawn<S: AsRef<OsStr>>(exe: &str, label: &str, args: &[S]) -> Child {
        let mut proc = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {label} ({exe}): {e}"));
        let stdin = proc.stdin.take();
        let out = proc.stdout.take().expect("stdout is piped");
        let err = proc.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, stderr) = mpsc::channel();
        thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(err).read_to_string(&mut text);
            let _ = etx.send(text);
        });
        Child {
            label: label.to_owned(),
            proc,
            stdin,
            lines,
            backlog: Vec::new(),
            stderr,
            stderr_text: None,
            status: None,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.proc.id()
    }

    /// The child's label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Write `line` and a newline to the child's stdin.
    pub fn send_line(&mut self, line: &str) {
        let sent = match self.stdin.as_mut() {
            Some(w) => writeln!(w, "{line}").and_then(|()| w.flush()),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        if let Err(e) = sent {
            self.fail(&format!("writing {line:?} to its stdin: {e}"));
        }
    }

    /// The next stdout line, waiting at most [`WAIT`]. `None` once the child closed stdout.
    /// Fails the test (after killing the child) if the deadline passes.
    pub fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(WAIT) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => self.fail(&format!("no stdout line within {WAIT:?}")),
        }
    }

    /// Wait (at most [`WAIT`] per line) for a stdout line starting with `prefix` and return
    /// it. Lines before it are kept in the backlog ([`Child::take_backlog`]). Fails the test
    /// if the child exits first.
    pub fn expect_line(&mut self, prefix: &str) -> String {
        loop {
            match self.next_line() {
                Some(line) if line.starts_with(prefix) => return line,
                Some(line) => self.backlog.push(line),
                None => {
                    let _ = self.wait_status();
                    self.fail(&format!(
                        "exited before printing a line starting {prefix:?}"
                    ))
                }
            }
        }
    }

    /// The lines [`Child::expect_line`] read past, oldest first.
    pub fn take_backlog(&mut self) -> Vec<String> {
        std::mem::take(&mut self.backlog)
    }

    /// Wait for the exit, at most [`WAIT`]; on timeout kill the child and fail the test.
    pub fn wait_status(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            match self.proc.try_wait() {
                Ok(Some(s)) => {
                    self.status = Some(s);
                    return s;
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(EXIT_POLL),
                Ok(None) => self.fail(&format!("still running after {WAIT:?}")),
                Err(e) => self.fail(&format!("waiting: {e}")),
            }
        }
    }

    /// Wait for a successful exit and return every stdout line not yet read (backlog first).
    /// Fails the test, with the child's stderr, on a non-zero exit or a timeout.
    pub fn wait_ok(mut self) -> Vec<String> {
        let status = self.wait_status();
        let lines = self.rest_of_stdout();
        if !status.success() {
            self.fail(&format!(
                "exited with {status}; stdout:\n{}",
                lines.join("\n")
            ));
        }
        lines
    }

    /// SIGKILL the child and reap it (bounded). Returns every stdout line not yet read.
    pub fn kill(&mut self) -> Vec<String> {
        let _ = self.proc.kill();
        let _ = self.wait_status();
        self.rest_of_stdout()
    }

    /// Send SIGKILL and return at once, without reaping: until [`Child::kill`],
    /// [`Child::wait_status`] or `Drop` reaps it, the dead child stays a zombie.
    pub fn sigkill_no_reap(&mut self) {
        let _ = self.proc.kill();
    }

    /// After the exit: the backlog and the rest of stdout, up to EOF (bounded).
    fn rest_of_stdout(&mut self) -> Vec<String> {
        let mut lines = self.take_backlog();
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(RecvTimeoutError::Disconnected) => return lines,
                Err(RecvTimeoutError::Timeout) => {
                    self.fail("stdout not closed after the exit (a grandchild holds it?)")
                }
            }
        }
    }

    /// The child's stderr (after it exited; bounded).
    pub fn stderr(&mut self) -> String {
        if self.stderr_text.is_none() {
            self.stderr_text = Some(
                self.stderr
                    .recv_timeout(Duration::from_secs(5))
                    .unwrap_or_else(|_| "<stderr not closed>".to_owned()),
            );
        }
        self.stderr_text.clone().unwrap_or_default()
    }

    /// Kill the child and fail the test with `why` and the child's stderr.
    pub fn fail(&mut self, why: &str) -> ! {
        let _ = self.proc.kill();
        let _ = self.proc.wait();
        let stderr = self.stderr();
        panic!(
            "child {} (pid {}): {why}\n--- its stderr ---\n{stderr}",
            self.label,
            self.proc.id()
        );
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_none() {
            // SIGKILL (std's kill on unix) and reap, so no process outlives its test.
            let _ = self.proc.kill();
            let _ = self.proc.wait();
        }
    }
}
