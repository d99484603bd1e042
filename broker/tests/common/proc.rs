//! Child processes under a watchdog: lines read on a thread, every wait bounded, and
//! `Drop` SIGKILLs and reaps.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{POLL, WAIT};

/// Env var that selects a role in a re-executed test binary.
pub const ROLE_ENV: &str = "SHMRING_ROLE";

/// A child with piped stdin and stdout; stdout lines arrive on a channel.
pub struct Proc {
    label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    status: Option<ExitStatus>,
}

fn read_lines(r: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Proc {
    /// Spawn `cmd` with stdin and stdout piped.
    pub fn spawn(label: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        // ETXTBSY: a binary just copied (see control_socket.rs) may still be held open for
        // writing by a child another thread forked meanwhile, until that child execs.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 200 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                other => break other.unwrap_or_else(|e| panic!("spawning {label}: {e}")),
            }
        };
        let stdin = child.stdin.take();
        let lines = read_lines(child.stdout.take().expect("stdout piped"));
        Proc {
            label: label.to_owned(),
            child,
            stdin,
            lines,
            seen: Vec::new(),
            status: None,
        }
    }

    /// Re-run this test binary as `role` on namespace `ns`, with extra env vars.
    pub fn role(role: &str, ns: &str, env: &[(&str, String)]) -> Proc {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new(exe);
        cmd.args([
            "--exact",
            "role",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ROLE_ENV, role)
        .env(shmring::names::NAMESPACE_ENV, ns);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc::spawn(role, cmd)
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait for a stdout line starting with `prefix`; returns the rest of it.
    pub fn expect(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    // The test harness may print "test role ... " before the first line.
                    if let Some(at) = line.find(prefix) {
                        return line[at + prefix.len()..].trim().to_owned();
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no line {prefix:?} within {WAIT:?}; saw {:?}",
                    self.label, self.seen
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: exited ({:?}) before printing {prefix:?}; saw {:?}",
                    self.label,
                    self.child.try_wait(),
                    self.seen
                ),
            }
        }
    }

    /// Write a line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}")
            .unwrap_or_else(|e| panic!("{}: writing {line:?}: {e}", self.label));
    }

    /// Close the child's stdin (roles take that as "finish").
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Wait for the child to exit (bounded).
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.status = Some(s);
                return s;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: did not exit within {WAIT:?}; saw {:?}",
                    self.label, self.seen
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// The label given at spawn.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Wait at most `limit` for a stdout line containing `prefix` (lines before it are read
    /// past); returns the rest of it, or `None` if the time ran out or stdout closed.
    pub fn expect_within(&mut self, prefix: &str, limit: std::time::Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(at) = line.find(prefix) {
                        return Some(line[at + prefix.len()..].trim().to_owned());
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Every stdout line read so far, oldest first.
    pub fn seen(&self) -> &[String] {
        &self.seen
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

    /// After the exit (or a kill): the lines not read yet, up to the end of stdout
    /// (bounded by [`WAIT`]).
    pub fn rest(&mut self) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    out.push(line);
                }
                Err(RecvTimeoutError::Disconnected) => return out,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: stdout still open {WAIT:?} after the exit; saw {:?}",
                    self.label, self.seen
                ),
            }
        }
    }

    /// Whether the child has exited (reaping it if so), without waiting.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `broker run`: its stderr (the log) is collected and shown if the test fails.
pub struct BrokerProc {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    reaped: bool,
}

impl BrokerProc {
    /// Start `broker run` and wait for its "broker ready" log line.
    pub fn start(ns: &str, config: Option<&Path>) -> BrokerProc {
        Self::start_with(ns, config, &[])
    }

    /// As [`BrokerProc::start`], with more arguments to `broker run`.
    pub fn start_with(ns: &str, config: Option<&Path>, args: &[&str]) -> BrokerProc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shmring-broker"));
        cmd.args(["run", "--namespace", ns]).args(args);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the broker");
        let rx = read_lines(child.stderr.take().expect("stderr piped"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let b = BrokerProc {
            child,
            log: log.clone(),
            reaped: false,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.contains("broker ready");
                    log.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                    if ready {
                        break;
                    }
                }
                Err(_) => panic!("broker did not get ready; log:\n{}", b.log_text()),
            }
        }
        std::thread::spawn(move || {
            while let Ok(line) = rx.recv() {
                log.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        b
    }

    /// The broker's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it logged so far.
    pub fn log_text(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }

    /// Whether a log line contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|l| l.contains(text))
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.reaped = true;
        }
    }

    /// Wait at most `limit` for the broker to exit on its own; its status, or `None` if it
    /// still runs.
    pub fn exit_within(&mut self, limit: std::time::Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.reaped = true;
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGTERM and wait for the exit (bounded); returns its status.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                self.reaped = true;
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "broker ignored SIGTERM; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- broker log ----\n{}\n----", self.log_text());
        }
    }
}
