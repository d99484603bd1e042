//! One run of the harness: its private namespace (removed at exit, on error and on Ctrl-C),
//! the sizes of its measurements, the progress bar, and the rows measured so far.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use shmring::{ProducerMode, Ring, RingConfig};
use shmring_peers::kit::{Ctl, Roles};
use shmring_peers::Plan;

use crate::row::Row;

/// How big each kind of measurement is.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Recorded messages of a paced (100 µs) latency row.
    pub paced: u64,
    /// Recorded round trips of a back-to-back ping-pong row.
    pub pingpong: u64,
    /// Recorded messages of an "after 2 ms idle" row.
    pub idle: u64,
    /// Messages sent before recording.
    pub warmup: u64,
    /// Publishes timed back-to-back in publish-cost.
    pub burst: u64,
    /// Length of a throughput row.
    pub throughput: Duration,
    /// Idle window of a wakeset row.
    pub idle_window: Duration,
}

impl Sizes {
    /// The default run (the one the README quotes): a few minutes on 2 cores.
    pub const FULL: Sizes = Sizes {
        paced: 30_000,
        pingpong: 50_000,
        idle: 1_000,
        warmup: 2_000,
        burst: 1_000_000,
        throughput: Duration::from_millis(1_000),
        idle_window: Duration::from_millis(1_000),
    };
    /// `--quick`: every suite in well under a minute (the CI smoke test).
    pub const QUICK: Sizes = Sizes {
        paced: 1_500,
        pingpong: 5_000,
        idle: 60,
        warmup: 1_100,
        burst: 100_000,
        throughput: Duration::from_millis(150),
        idle_window: Duration::from_millis(150),
    };
}

/// Paced gap between messages.
pub const PACE: Duration = Duration::from_micros(100);
/// The "after 2 ms idle" gap.
pub const IDLE_GAP: Duration = Duration::from_millis(2);

/// Names, for the cleanup that runs from the signal handler too.
struct Names {
    namespace: String,
    dir: PathBuf,
    run_id: String,
}

static NAMES: OnceLock<Names> = OnceLock::new();

/// The run's state.
pub struct Ctx {
    /// The shmring namespace of this run (`ipcb-<pid>`).
    pub namespace: String,
    /// Its directory (rings, control pages, results).
    pub dir: PathBuf,
    /// Unique to the run (the pid).
    pub run_id: String,
    /// Sizes of the measurements.
    pub sizes: Sizes,
    /// `--pin`.
    pub pin: bool,
    /// Every row measured so far.
    pub rows: Vec<Row>,
    /// Progress (hidden when stderr is not a terminal).
    pub bar: ProgressBar,
    counter: u64,
}

impl Ctx {
    /// Set up the run's namespace and the cleanup that removes it.
    pub fn new(quick: bool, pin: bool) -> Result<Self> {
        let pid = std::process::id();
        sweep_stale();
        let namespace = format!("ipcb-{pid}");
        let dir = shmring::names::namespace_dir(&namespace)?;
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let run_id = pid.to_string();
        let _ = NAMES.set(Names {
            namespace: namespace.clone(),
            dir: dir.clone(),
            run_id: run_id.clone(),
        });
        install_signal_cleanup();
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Ok(Self {
            namespace,
            dir,
            run_id,
            sizes: if quick { Sizes::QUICK } else { Sizes::FULL },
            pin,
            rows: Vec::new(),
            bar,
            counter: 0,
        })
    }

    /// A fresh tag for one measurement's files.
    pub fn tag(&mut self, what: &str) -> String {
        self.counter += 1;
        format!("m{}-{what}", self.counter)
    }

    /// `cpu=N` when pinning.
    pub fn cpu(&self, cpu: usize) -> Vec<String> {
        if self.pin {
            vec![format!("cpu={cpu}")]
        } else {
            Vec::new()
        }
    }

    /// A peers plan with this run's sizes.
    pub fn plan(&self, count: u64, interval: Duration) -> Plan {
        Plan {
            dir: self.dir.clone(),
            count,
            warmup: self.sizes.warmup,
            interval,
            duration: self.sizes.throughput,
            pin: self.pin,
            timeout: self.timeout(count, interval),
            run_id: self.run_id.clone(),
        }
    }

    /// Watchdog for a measurement of `count` messages `interval` apart.
    pub fn timeout(&self, count: u64, interval: Duration) -> Duration {
        let expected = interval * (count + self.sizes.warmup) as u32 + self.sizes.throughput;
        expected * 4 + Duration::from_secs(30)
    }

    /// Create ring `name` (1024 slots unless `capacity`), returning its name.
    pub fn ring(
        &mut self,
        capacity: u64,
        slot_size: u32,
        mode: ProducerMode,
    ) -> Result<(String, Ring)> {
        self.ring_of(capacity, slot_size, mode, (None, None))
    }

    /// [`Ctx::ring`], or a ring of fixed-size events of `event_size` bytes, or one of sized
    /// events of up to `max_event_size` bytes.
    pub fn ring_of(
        &mut self,
        capacity: u64,
        slot_size: u32,
        mode: ProducerMode,
        (event_size, max_event_size): (Option<u32>, Option<u32>),
    ) -> Result<(String, Ring)> {
        let name = self.tag("ring");
        let ring = Ring::create(
            &self.namespace,
            &name,
            &RingConfig {
                capacity,
                slot_size,
                max_consumers: 8,
                max_producers: 8,
                producer_mode: mode,
                event_size,
                max_event_size,
                ..RingConfig::default()
            },
        )
        .with_context(|| format!("create ring {name}"))?;
        Ok((name, ring))
    }

    /// Remove a ring made by [`Ctx::ring`].
    pub fn drop_ring(&self, name: &str) {
        let _ = Ring::remove(&self.namespace, name);
    }

    /// A control page and the role set for one measurement.
    pub fn roles(&mut self, what: &str) -> Result<(Roles, Ctl, PathBuf)> {
        let tag = self.tag(what);
        let path = self.dir.join(format!("{tag}.ctl"));
        let ctl = Ctl::create(&path)?;
        Ok((Roles::new(&self.dir, &tag), ctl, path))
    }

    /// Record a row and advance the bar.
    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
        self.bar.inc(1);
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        cleanup();
    }
}

/// Remove everything this run put in /dev/shm and /tmp.
pub fn cleanup() {
    shmring_peers::kit::kill_all_children();
    let Some(n) = NAMES.get() else { return };
    for ring in shmring::names::rings_in(&n.dir).unwrap_or_default() {
        let _ = Ring::remove(&n.namespace, &ring);
    }
    let _ = std::fs::remove_dir_all(&n.dir);
    remove_iceoryx2_files(&n.run_id);
}

fn remove_iceoryx2_files(run_id: &str) {
    let _ = std::fs::remove_dir_all(format!("/tmp/shmring-ipcb-{run_id}-iox2"));
    let prefix = format!("iox2ipcb{run_id}_");
    if let Ok(entries) = std::fs::read_dir("/dev/shm") {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Remove what earlier runs that died without cleaning up (SIGKILL) left behind.
fn sweep_stale() {
    let root = shmring::names::root();
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("shmring.ipcb-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
            remove_iceoryx2_files(&pid.to_string());
        }
    }
}

/// On SIGINT, SIGTERM or SIGHUP: kill the role processes, remove the run's files, exit.
fn install_signal_cleanup() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            cleanup();
            tell!("\nipc-bench: interrupted (signal {sig}); removed this run's files");
            std::process::exit(128 + sig);
        }
    });
}
