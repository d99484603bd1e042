//! A child process under a watchdog: every wait has a deadline, and `Drop` kills and reaps.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;

/// The deadline of every single wait on a child (a line, an exit).
pub const WAIT: Duration = Duration::from_secs(60);

/// How often an exit is polled for (a watchdog poll, not a synchronisation sleep).
pub(crate) const EXIT_POLL: Duration = Duration::from_millis(2);

/// How long a spawn retries while the executable is busy (ETXTBSY): a binary just copied
/// may still be held open for writing by a child another thread forked meanwhile, until
/// that child execs.
const BUSY_RETRY: Duration = Duration::from_millis(200);

/// The process itself, shared by its [`Child`] handle and the [`crate::Namespace`] that
/// spawned it: whichever goes first kills and reaps it. Every signal goes through the std
/// handle, which sends none once the process is reaped, so a reused pid is never hit.
pub(crate) struct Reaped(pub(crate) Mutex<std::process::Child>);

impl Reaped {
    pub(crate) fn lock(&self) -> MutexGuard<'_, std::process::Child> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// SIGKILL (std's kill on unix, a no-op once reaped) and reap.
    pub(crate) fn kill_and_reap(&self) -> Option<ExitStatus> {
        let mut p = self.lock();
        let _ = p.kill();
        p.wait().ok()
    }
}

/// Everything a child wrote on stderr, line by line, as it arrives.
#[derive(Default)]
struct Log {
    /// The lines so far, and whether stderr is closed.
    lines: Mutex<(Vec<String>, bool)>,
    more: Condvar,
}

impl Log {
    fn lock(&self) -> MutexGuard<'_, (Vec<String>, bool)> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait at most `limit` until `done` holds of the lines, or stderr is closed. Returns
    /// the lines (and the closed flag), and whether `done` held.
    fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[String]) -> bool,
    ) -> (MutexGuard<'_, (Vec<String>, bool)>, bool) {
        let deadline = Instant::now() + limit;
        let mut lines = self.lock();
        loop {
            if done(&lines.0) {
                return (lines, true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if lines.1 || left.is_zero() {
                return (lines, false);
            }
            lines = self
                .more
                .wait_timeout(lines, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A spawned process with piped stdin (for [`Child::send_line`]), stdout (read line by line
/// on a thread) and stderr (collected line by line on a thread: [`Child::stderr`], shown when
/// a test fails). `Drop` SIGKILLs it if it still runs, and reaps it.
pub struct Child {
    label: String,
    proc: Arc<Reaped>,
    pid: u32,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every stdout line read so far, oldest first (for failure messages).
    seen: Vec<String>,
    /// Lines read past by the `expect` methods and not handed out yet, oldest first.
    backlog: Vec<String>,
    log: Arc<Log>,
    status: Option<ExitStatus>,
    /// [`Child::fail`] showed the child's output already.
    reported: bool,
}

impl Child {
    /// Spawn `cmd` with stdin, stdout and stderr piped. Through
    /// [`crate::Namespace::spawn`], which owns the child too.
    pub(crate) fn spawn(label: &str, mut cmd: Command) -> Child {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let busy_until = Instant::now() + BUSY_RETRY;
        let mut proc = loop {
            match cmd.spawn() {
                Err(e)
                    if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                        && Instant::now() < busy_until =>
                {
                    thread::sleep(Duration::from_millis(1));
                }
                other => break other.unwrap_or_else(|e| panic!("spawning {label} ({cmd:?}): {e}")),
            }
        };
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
        let log = Arc::new(Log::default());
        let sink = log.clone();
        thread::spawn(move || {
            let mut err = BufReader::new(err);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                let n = err.read_until(b'\n', &mut buf).unwrap_or(0);
                let mut lines = sink.lock();
                if n == 0 {
                    lines.1 = true;
                    sink.more.notify_all();
                    return;
                }
                let text = String::from_utf8_lossy(&buf);
                lines.0.push(text.trim_end_matches('\n').to_owned());
                sink.more.notify_all();
            }
        });
        Child {
            label: label.to_owned(),
            pid: proc.id(),
            proc: Arc::new(Reaped(Mutex::new(proc))),
            stdin,
            lines,
            seen: Vec::new(),
            backlog: Vec::new(),
            log,
            status: None,
            reported: false,
        }
    }

    /// The process, for the namespace that spawned it.
    pub(crate) fn reaped(&self) -> Arc<Reaped> {
        self.proc.clone()
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
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

    /// Close the child's stdin (the children take that as "finish").
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout line, waiting at most `limit`: `Err(true)` if the time ran out,
    /// `Err(false)` once the child closed stdout.
    fn line_within(&mut self, limit: Duration) -> Result<String, bool> {
        match self.lines.recv_timeout(limit) {
            Ok(line) => {
                self.seen.push(line.clone());
                Ok(line)
            }
            Err(RecvTimeoutError::Timeout) => Err(true),
            Err(RecvTimeoutError::Disconnected) => Err(false),
        }
    }

    /// The next stdout line, waiting at most [`WAIT`]. `None` once the child closed stdout.
    /// Fails the test (after killing the child) if the deadline passes.
    pub fn next_line(&mut self) -> Option<String> {
        match self.line_within(WAIT) {
            Ok(line) => Some(line),
            Err(false) => None,
            Err(true) => self.fail(&format!("no stdout line within {WAIT:?}")),
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

    /// As [`Child::expect_line`], returning what follows `prefix` (trimmed).
    pub fn expect(&mut self, prefix: &str) -> String {
        let line = self.expect_line(prefix);
        line[prefix.len()..].trim().to_owned()
    }

    /// Wait at most `limit` in all for a stdout line starting with `prefix` (lines before it
    /// go to the backlog); returns what follows `prefix` (trimmed), or `None` if the time
    /// ran out or stdout closed first.
    pub fn expect_within(&mut self, prefix: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.line_within(left) {
                Ok(line) if line.starts_with(prefix) => {
                    return Some(line[prefix.len()..].trim().to_owned())
                }
                Ok(line) => self.backlog.push(line),
                Err(_) => return None,
            }
        }
    }

    /// Every stdout line that has arrived and not been read yet, without waiting.
    pub fn try_lines(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line.clone());
            out.push(line);
        }
        out
    }

    /// Every stdout line read so far, oldest first.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// The lines the `expect` methods read past, oldest first.
    pub fn take_backlog(&mut self) -> Vec<String> {
        std::mem::take(&mut self.backlog)
    }

    /// Whether the child has exited (reaping it if so), without waiting.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.proc.lock().try_wait().ok().flatten();
        }
        self.status
    }

    /// Wait for the exit, at most [`WAIT`]; on timeout kill the child and fail the test.
    pub fn wait_status(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            let polled = self.proc.lock().try_wait();
            match polled {
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

    /// Wait for a successful exit and return every stdout line not yet handed out (backlog
    /// first). Fails the test, with the child's stderr, on a non-zero exit or a timeout.
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

    /// SIGKILL the child and reap it (bounded). Returns every stdout line not yet handed out.
    pub fn kill(&mut self) -> Vec<String> {
        self.status = self.proc.kill_and_reap();
        self.rest_of_stdout()
    }

    /// Send SIGKILL and return at once, without reaping: until [`Child::kill`],
    /// [`Child::wait_status`] or `Drop` reaps it, the dead child stays a zombie.
    pub fn sigkill_no_reap(&mut self) {
        let _ = self.proc.lock().kill();
    }

    /// Send `signal` (SIGSTOP, SIGCONT, SIGINT, SIGTERM, ...) to the child. Fails the test if
    /// the child has already been reaped.
    pub fn signal(&mut self, signal: Signal) {
        let sent = {
            let mut p = self.proc.lock();
            match p.try_wait() {
                // Not reaped: the pid is still this child's, even if it has exited.
                Ok(None) => rustix::process::Pid::from_raw(p.id() as i32)
                    .ok_or(rustix::io::Errno::SRCH)
                    .and_then(|pid| rustix::process::kill_process(pid, signal))
                    .map_err(|e| e.to_string()),
                Ok(Some(s)) => Err(format!("it already exited ({s})")),
                Err(e) => Err(e.to_string()),
            }
        };
        if let Err(e) = sent {
            self.fail(&format!("sending {signal:?}: {e}"));
        }
    }

    /// Send `signal` and wait (bounded) for the exit; returns its status.
    pub fn signal_and_wait(&mut self, signal: Signal) -> ExitStatus {
        self.signal(signal);
        self.wait_status()
    }

    /// After the exit (or a kill): the backlog and the rest of stdout, up to EOF (bounded).
    pub fn rest_of_stdout(&mut self) -> Vec<String> {
        let mut lines = self.take_backlog();
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.line_within(left) {
                Ok(line) => lines.push(line),
                Err(false) => return lines,
                Err(true) => self.fail("stdout not closed after the exit (a grandchild holds it?)"),
            }
        }
    }

    /// The child's stderr so far, as text.
    pub fn stderr_so_far(&self) -> String {
        self.log.lock().0.join("\n")
    }

    /// Whether a line the child wrote on stderr so far contains `text`.
    pub fn stderr_has(&self, text: &str) -> bool {
        self.log.lock().0.iter().any(|l| l.contains(text))
    }

    /// Wait at most `limit` for a stderr line containing `text`; false if the time ran out
    /// or stderr closed first.
    pub fn expect_stderr_within(&self, text: &str, limit: Duration) -> bool {
        self.log
            .wait_for(limit, |lines| lines.iter().any(|l| l.contains(text)))
            .1
    }

    /// The child's whole stderr, once it closed it (bounded: what there is after 5 s).
    pub fn stderr(&mut self) -> String {
        let (mut lines, _) = self.log.wait_for(Duration::from_secs(5), |_| false);
        if !lines.1 {
            lines.0.push("<stderr not closed>".to_owned());
        }
        lines.0.join("\n")
    }

    /// Kill the child and fail the test with `why`, its stdout so far and its stderr.
    pub fn fail(&mut self, why: &str) -> ! {
        self.status = self.proc.kill_and_reap();
        self.reported = true;
        let stderr = self.stderr();
        panic!(
            "child {} (pid {}): {why}\n--- its stdout so far ---\n{}\n--- its stderr ---\n{stderr}",
            self.label,
            self.pid,
            self.seen.join("\n")
        );
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // SIGKILL and reap, so no process outlives its test.
        self.proc.kill_and_reap();
        if std::thread::panicking() && !self.reported {
            eprintln!(
                "---- stderr of child {} (pid {}) ----\n{}\n----",
                self.label,
                self.pid,
                self.stderr_so_far()
            );
        }
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}
