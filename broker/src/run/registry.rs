//! The rings this broker looks after: the configured ones (opened or created at start),
//! and every other segment found in the namespace directory (adopted as it is).
//!
//! A segment is never unlinked and recreated here: a live ring is opened and adopted
//! (`Ring::adopt` bumps its broker epoch), and one that fails validation is reported and
//! left alone.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use shmring::{OpenError, Ring, RingState};
use tracing::{info, warn};

use super::health::{ConsumerHealth, ProducerHealth};
use super::watch::Watches;
use crate::config::{Config, RingSpec};
use crate::report::{RingHealth, RingReport};

/// How often the directory is rescanned for segments created by others.
const RESCAN_EVERY: Duration = Duration::from_millis(500);

/// One ring under watch.
pub struct Tracked {
    /// The mapped segment.
    pub ring: Ring,
    /// Its settings (configured, or the defaults for a ring found on disk).
    pub spec: RingSpec,
    /// Edge counters since this broker started.
    pub counters: RingHealth,
    /// Per consumer entry index.
    pub consumers: HashMap<u32, ConsumerHealth>,
    /// Per producer entry index.
    pub producers: HashMap<u32, ProducerHealth>,
    /// The report of the last sweep.
    pub last: Option<RingReport>,
    /// Held for the whole of a lifecycle request on this ring (a drain included), so the
    /// broker runs them one at a time per ring.
    pub lifecycle: std::sync::Arc<std::sync::Mutex<()>>,
}

/// Everything the sweep loop and the control socket share (behind one mutex: one sweeper
/// at a time).
pub struct Broker {
    /// The namespace.
    pub namespace: String,
    /// This process.
    pub pid: u32,
    /// The configuration.
    pub config: Config,
    /// The broker group, resolved.
    pub gid: Option<u32>,
    /// Rings by name.
    pub rings: BTreeMap<String, Tracked>,
    /// Segments that failed to open, with the reason.
    pub unreadable: BTreeMap<PathBuf, String>,
    /// Client processes watched.
    pub watches: Watches,
    /// When this broker started.
    pub started: Instant,
    /// Namespace broker epoch (from the lock file).
    pub epoch: u64,
    /// Sweeps so far.
    pub sweeps: u64,
    /// The last sweep's instant.
    pub last_sweep: Option<Instant>,
    /// How long the last sweep took.
    pub last_sweep_took: Option<Duration>,
    /// Sweep period.
    pub period: Duration,
    last_scan: Option<Instant>,
}

impl Broker {
    /// A broker with nothing tracked yet.
    pub fn new(
        namespace: String,
        config: Config,
        gid: Option<u32>,
        epoch: u64,
        watches: Watches,
    ) -> Self {
        let period = config.sweep_period();
        Self {
            namespace,
            pid: std::process::id(),
            config,
            gid,
            rings: BTreeMap::new(),
            unreadable: BTreeMap::new(),
            watches,
            started: Instant::now(),
            epoch,
            sweeps: 0,
            last_sweep: None,
            last_sweep_took: None,
            period,
            last_scan: None,
        }
    }

    /// Open or create every configured ring not tracked yet. A ring that cannot be opened
    /// is reported and skipped; a ring whose shape differs from the config is adopted as it
    /// is.
    pub fn open_configured(&mut self) {
        let specs: Vec<(String, RingSpec)> = self
            .config
            .rings
            .iter()
            .filter(|(n, _)| !self.rings.contains_key(*n))
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        for (name, spec) in specs {
            let opened = spec
                .ring_config(self.gid)
                .map_err(|e| e.to_string())
                .and_then(|rc| {
                    Ring::open_or_create(&self.namespace, &name, &rc).or_else(|e| match e {
                        OpenError::ConfigMismatch { .. } => {
                            warn!(ring = %name, "{e}; adopting the ring as it is");
                            Ring::open(&self.namespace, &name).map_err(|e| e.to_string())
                        }
                        e => Err(e.to_string()),
                    })
                });
            match opened {
                Ok(ring) => self.track(name, ring, spec),
                Err(e) => {
                    warn!(ring = %name, "configured ring left alone: {e}");
                    if let Ok(path) = shmring::names::ring_path(&self.namespace, &name) {
                        self.unreadable.insert(path, e);
                    }
                }
            }
        }
    }

    /// Adopt `ring` and watch it.
    pub fn track(&mut self, name: String, ring: Ring, spec: RingSpec) {
        let epoch = ring.adopt(self.pid);
        finish_half_done(&name, &ring);
        let period = spec.sweep_period();
        if period < self.period {
            self.period = period;
        }
        info!(ring = %name, epoch, run = ring.run_number(), head = ring.head(), "adopted ring");
        if let Ok(path) = shmring::names::ring_path(&self.namespace, &name) {
            self.unreadable.remove(&path);
        }
        self.rings.insert(
            name,
            Tracked {
                ring,
                counters: RingHealth {
                    stall_threshold_ms: spec.stall_threshold.as_millis() as u64,
                    unblock_timeout_ms: spec.unblock_timeout.as_millis() as u64,
                    ..RingHealth::default()
                },
                spec,
                consumers: HashMap::new(),
                producers: HashMap::new(),
                last: None,
                lifecycle: Default::default(),
            },
        );
    }

    /// The settings for ring `name`: configured, or the defaults.
    pub fn spec_for(&self, name: &str) -> RingSpec {
        self.config.rings.get(name).cloned().unwrap_or_default()
    }

    /// Look for segments in the namespace directory that are not tracked yet (at most
    /// every `RESCAN_EVERY` unless `force`), and forget tracked ones whose file is gone.
    pub fn rescan(&mut self, force: bool) {
        let now = Instant::now();
        if !force
            && self
                .last_scan
                .is_some_and(|t| now.duration_since(t) < RESCAN_EVERY)
        {
            return;
        }
        self.last_scan = Some(now);
        let Ok(dir) = shmring::names::namespace_dir(&self.namespace) else {
            return;
        };
        let Ok(on_disk) = shmring::names::rings_in(&dir) else {
            return;
        };
        let gone: Vec<String> = self
            .rings
            .keys()
            .filter(|n| !on_disk.contains(n))
            .cloned()
            .collect();
        for name in gone {
            info!(ring = %name, "segment file is gone; no longer watching the ring");
            self.rings.remove(&name);
        }
        self.unreadable.retain(|p, _| p.exists());
        for name in on_disk {
            if self.rings.contains_key(&name) {
                continue;
            }
            match Ring::open(&self.namespace, &name) {
                Ok(ring) => {
                    let spec = self.spec_for(&name);
                    self.track(name, ring, spec);
                }
                Err(e) => {
                    let path = dir.join(format!("{name}{}", shmring::names::RING_SUFFIX));
                    if !self.unreadable.contains_key(&path) {
                        warn!(path = %path.display(), "segment left alone: {e}");
                    }
                    self.unreadable.insert(path, e.to_string());
                }
            }
        }
    }
}

/// A ring whose last lifecycle operation did not finish: a stop or start whose owner died
/// half-way is finished (a stop ends STOPPED at its recorded sequence, every accepted event
/// stays for the consumers; a start ends RUNNING); a DRAINING ring has nobody waiting for its
/// drain any more and is left STOPPED. `broker start` reopens a stopped ring.
pub fn finish_half_done(name: &str, ring: &Ring) {
    match ring.finish_interrupted() {
        Ok((_, true)) => warn!(ring = %name, state = ?ring.state(), head = ring.head(),
            "finished a stop or start left by a process that died"),
        Ok(_) => {}
        Err(e) => warn!(ring = %name, "could not finish a half-done lifecycle change: {e}"),
    }
    if ring.state() != Some(RingState::Draining) {
        return;
    }
    match ring.stop() {
        Ok(stop) => warn!(ring = %name, stop,
            "finished a drain left by a process that died: ring STOPPED at sequence {stop}; `broker start {name}` reopens it"),
        Err(e) => warn!(ring = %name, "could not finish a half-done drain: {e}"),
    }
}
