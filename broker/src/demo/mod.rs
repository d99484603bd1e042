//! `broker demo`: everything in one command, on a namespace of its own.
//!
//! ```text
//! start the broker ──> create ring "demo" ──> consumers attach: busy-spin, blocking,
//!                                             adaptive, and "restarted" (timeout-blocking)
//!   ──> the producer publishes, paced ──> the status screen, every second
//!   ──> at 1/3: "restarted" is SIGKILLed (DEAD)  ──> at 1/2: started again, it resumes
//!   ──> at the end: stop the ring; each consumer drains and reports ──> the table
//! ```
//!
//! Whatever happens (the end, an error, Ctrl-C), the guard kills and reaps every child,
//! stops the broker and removes the namespace directory.

pub mod role;

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use comfy_table::{presets, Cell, CellAlignment, Table};
use shmring::Ring;

use crate::exit;
use crate::human::format_duration;
use role::{Seen, RESULT};

/// The demo's ring.
const RING: &str = "demo";
/// Events a second from the producer.
const RATE: u32 = 10_000;
/// Bounded waits for children to start and finish.
const STEP: Duration = Duration::from_secs(20);
/// The consumers: (name, wait strategy by name, as `WaitStrategy` parses it).
const CONSUMERS: [(&str, &str); 4] = [
    ("spin", "busy-spin"),
    ("blocking", "blocking"),
    ("adaptive", "adaptive"),
    ("restarted", "timeout-blocking"),
];
/// The consumer that is killed and started again on the way.
const RESTARTED: &str = "restarted";

/// Options of `broker demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How long the producer publishes.
    pub duration: Duration,
    /// Where the demo's broker serves metrics, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// A child with its stdout lines on a channel.
struct Kid {
    child: Child,
    lines: Receiver<String>,
}

impl Kid {
    fn spawn(args: &[&str]) -> anyhow::Result<Kid> {
        let exe = std::env::current_exe().context("finding this program")?;
        let mut child = Command::new(exe)
            .arg("demo-role")
            .args(args)
            .env(role::PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting a demo process")?;
        let out = child.stdout.take().context("child stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Kid { child, lines })
    }

    /// The rest of the first line starting with `prefix`, waiting at most `limit`.
    fn expect(&self, prefix: &str, limit: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.to_owned());
                    }
                }
                Err(RecvTimeoutError::Timeout) => anyhow::bail!("no {prefix:?} within {limit:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("a demo process exited before {prefix:?}")
                }
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Everything the demo started; `Drop` takes it all down.
struct Demo {
    namespace: String,
    dir: PathBuf,
    config: PathBuf,
    broker: Option<Kid>,
    kids: Vec<(String, Kid)>,
}

impl Drop for Demo {
    fn drop(&mut self) {
        for (_, kid) in &mut self.kids {
            kid.kill();
        }
        if let Some(b) = &mut self.broker {
            if let Ok(pid) = i32::try_from(b.child.id()) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while !matches!(b.child.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            b.kill();
        }
        let _ = Ring::remove(&self.namespace, RING);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run the demo.
pub fn run(opts: DemoOptions) -> anyhow::Result<ExitCode> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone()).context("signal handlers")?;
    }
    let namespace = format!("demo-{}", std::process::id());
    let dir = shmring::names::namespace_dir(&namespace)?;
    // The demo's namespace is its own: made here, 0700, so that its config (a hidden file
    // in it, which the broker's scans skip) is written where no other user can put a link
    // or a file first. One already there is not the demo's to use, or to remove.
    if !shmring::names::make_namespace_dir(&dir, None)
        .with_context(|| format!("making the demo's namespace directory {}", dir.display()))?
    {
        anyhow::bail!(
            "{} is already there: the namespace of another demo, or one left by a demo that was killed; remove it if no demo runs with process id {}",
            dir.display(),
            std::process::id()
        );
    }
    let mut demo = Demo {
        config: dir.join(".demo.toml"),
        namespace: namespace.clone(),
        dir,
        broker: None,
        kids: Vec::new(),
    };
    let say = |text: String| exit::outln(&text).is_ok();
    say(format!(
        "demo namespace {namespace}: a broker, ring {RING:?}, a producer at {RATE} events/s for {}, and consumers {}; Ctrl-C ends it early and cleans up",
        format_duration(opts.duration),
        CONSUMERS.map(|(n, w)| format!("{n} ({w})")).join(", ")
    ));

    // The demo's one ring, created by its broker; a consumer that dies keeps gating
    // (policy alert), so the kill shows.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&demo.config)
        .and_then(|mut f| {
            f.write_all(format!("[rings.{RING}]\ncapacity = 4096\nslot_size = 64\nstall_threshold = \"200ms\"\ndead_policy = \"alert\"\n").as_bytes())
        })
        .with_context(|| format!("writing the demo's config {}", demo.config.display()))?;
    let metrics = opts.metrics_listen.map(|a| a.to_string());
    let config = demo.config.display().to_string();
    let mut broker_args = vec!["broker", "--namespace", &namespace, "--config", &config];
    if let Some(addr) = &metrics {
        broker_args.extend(["--metrics-listen", addr]);
    }
    demo.broker = Some(Kid::spawn(&broker_args)?);
    if let Some(b) = &mut demo.broker {
        wait_for_broker(&namespace, b, &interrupted)?;
    }
    if let Some(addr) = &metrics {
        say(format!(
            "metrics: curl -s http://{addr}/metrics (while the demo runs)"
        ));
    }
    let ring = Ring::open(&namespace, RING)?;
    for (name, wait) in CONSUMERS {
        let kid = Kid::spawn(&["consumer", "--namespace", &namespace, RING, name, wait])?;
        kid.expect("@attached", STEP)?;
        demo.kids.push((name.to_owned(), kid));
    }
    let rate = RATE.to_string();
    demo.kids.push((
        "producer".into(),
        Kid::spawn(&["producer", "--namespace", &namespace, RING, &rate])?,
    ));

    let started = Instant::now();
    let (kill_at, restart_at) = (opts.duration / 3, opts.duration / 2);
    let (mut killed, mut restarted) = (false, false);
    let tty = std::io::stdout().is_terminal();
    let mut next_screen = started;
    // Stdout's reader went away (`broker demo | head -1`): the demo ends there, cleaning up
    // as an interrupted one does, and quietly, with a finished demo's code.
    let mut unread = false;
    while started.elapsed() < opts.duration && !interrupted.load(Ordering::Relaxed) && !unread {
        let t = started.elapsed();
        if !killed && t >= kill_at {
            if let Some((_, kid)) = demo.kids.iter_mut().find(|(n, _)| n == RESTARTED) {
                kid.kill();
            }
            say(format!("[{}] killed {RESTARTED:?} with SIGKILL: the broker sees it DEAD; its events wait for it (policy alert), so once the ring is full the producer waits too (BLOCKED)", format_duration(t)));
            killed = true;
        }
        if killed && !restarted && t >= restart_at {
            let kid = Kid::spawn(&[
                "consumer",
                "--namespace",
                &namespace,
                RING,
                RESTARTED,
                "timeout-blocking",
            ])?;
            kid.expect("@attached", STEP)?;
            if let Some(slot) = demo.kids.iter_mut().find(|(n, _)| n == RESTARTED) {
                slot.1 = kid;
            }
            say(format!(
                "[{}] started {RESTARTED:?} again: it resumes where it last committed",
                format_duration(t)
            ));
            restarted = true;
        }
        if Instant::now() >= next_screen {
            next_screen += Duration::from_secs(1);
            if let Ok((report, _)) = crate::status::fetch(&namespace, None) {
                let width = if tty {
                    crate::render::terminal_width()
                } else {
                    None
                };
                let clear = if tty { "\x1b[2J\x1b[H" } else { "" };
                let screen = crate::render::render(&report, width);
                unread =
                    exit::out(&format!("{clear}[{}]\n{screen}\n", format_duration(t))).is_err();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if interrupted.load(Ordering::Relaxed) {
        exit::err("interrupted: stopping every demo process and removing the namespace");
        return Ok(ExitCode::from(exit::FAILED));
    }
    if unread {
        return Ok(ExitCode::from(exit::OK));
    }

    // The end: stop the ring; every consumer drains what was published and reports.
    let stop_seq = ring.stop()?;
    let mut seen = Vec::new();
    for (name, kid) in &demo.kids {
        if name == "producer" {
            continue;
        }
        let line = kid.expect(RESULT, STEP)?;
        seen.push(serde_json::from_str::<Seen>(&line)?);
    }
    let _ = exit::out(&table(&seen, stop_seq, started.elapsed()));
    Ok(ExitCode::from(exit::OK))
}

fn wait_for_broker(
    namespace: &str,
    broker: &mut Kid,
    interrupted: &AtomicBool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + STEP;
    loop {
        let ping = crate::client::request(
            namespace,
            &crate::protocol::Request::Ping,
            Duration::from_secs(1),
        );
        if let Ok(crate::protocol::Reply::Pong { .. }) = ping {
            return Ok(());
        }
        if let Ok(Some(status)) = broker.child.try_wait() {
            anyhow::bail!(
                "the demo's broker exited ({status}) before it was ready; is the --metrics-listen address in use?"
            );
        }
        if Instant::now() >= deadline || interrupted.load(Ordering::Relaxed) {
            anyhow::bail!("the demo's broker did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn micros(ns: u64) -> String {
    format_duration(Duration::from_nanos(ns))
}

/// The final table: what each consumer saw.
fn table(seen: &[Seen], published: u64, took: Duration) -> String {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_HORIZONTAL_ONLY).set_header(
        [
            "consumer",
            "wait",
            "events",
            "p50 latency",
            "p99 latency",
            "CPU",
        ]
        .map(Cell::new)
        .to_vec(),
    );
    for s in seen {
        let cpu = if s.wall_s > 0.0 {
            100.0 * s.cpu_s / s.wall_s
        } else {
            0.0
        };
        t.add_row(vec![
            s.name.clone(),
            s.wait.clone(),
            s.events.to_string(),
            micros(s.p50_ns),
            micros(s.p99_ns),
            format!("{cpu:.0}%"),
        ]);
    }
    for i in 2..6 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    format!(
        "\n{published} events published in {}; what each consumer saw (one-way latency, publish to handler; CPU of its whole process):\n{t}\n\
         {RESTARTED:?} counts only what it received after its restart (it resumed at its last commit, so the backlog shows in its latency).\n",
        format_duration(took)
    )
}
