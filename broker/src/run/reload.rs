//! SIGHUP: read the config file again and apply what can change while running: new rings
//! are opened or created, and every tracked ring takes its new thresholds and policies (a
//! ring no longer in the file keeps running on the defaults, as any ring found on disk).
//! The broker group is bound into the control socket and `metrics_listen` into the
//! metrics listener, so a change to either is logged and waits for a restart. A file that
//! does not parse or check leaves the running config as it is.
//!
//! A reload runs on its own thread, one at a time ([`Reloads`]), and builds new rings
//! outside the broker's lock, as a create request does: sweeps, status, metrics and other
//! requests go on while a ring of gigabytes is allocated and mapped.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use super::ops::lock;
use super::registry::{self, Broker};
use crate::config::Config;

/// What the sweep loop starts reloads with.
pub struct Reloads {
    /// The config file (`None`: running on the embedded default, nothing to reload).
    pub path: Option<PathBuf>,
    /// Held for the whole of a reload: a SIGHUP during one is carried out after it, and
    /// reads the file as it is then.
    one_at_a_time: Arc<Mutex<()>>,
}

impl Reloads {
    /// Reloads from `path`.
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            one_at_a_time: Arc::default(),
        }
    }

    /// Reload on a thread of its own, so that the sweep loop goes on sweeping meanwhile
    /// (on this one if a thread cannot be started).
    pub fn start(&self, shared: &Arc<Mutex<Broker>>) {
        let (shared, path, turn) = (
            shared.clone(),
            self.path.clone(),
            self.one_at_a_time.clone(),
        );
        let run = move || {
            let _one_at_a_time = turn.lock().unwrap_or_else(|e| e.into_inner());
            notify_around(|| reload(&shared, path.as_deref()));
        };
        let spare = run.clone();
        if let Err(e) = std::thread::Builder::new().name("reload".into()).spawn(run) {
            warn!("SIGHUP: no thread for the reload ({e}); reloading on the sweep loop's");
            spare();
        }
    }
}

/// Tell systemd that a reload is under way, then that it is over.
fn notify_around(reload: impl FnOnce()) {
    let mut reloading = vec![sd_notify::NotifyState::Reloading];
    if let Ok(now) = sd_notify::NotifyState::monotonic_usec_now() {
        reloading.push(now);
    }
    super::notify(&reloading);
    reload();
    super::notify(&[sd_notify::NotifyState::Ready]);
}

/// Reload from `path` (`None`: running on the embedded default, nothing to reload).
pub fn reload(shared: &Mutex<Broker>, path: Option<&Path>) {
    let Some(path) = path else {
        info!("SIGHUP: running on the embedded default config, nothing to reload");
        return;
    };
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            warn!("SIGHUP: config not reloaded, the running one stays: {e}");
            return;
        }
    };
    let (namespace, gid, new) = {
        let mut broker = lock(shared);
        match config.broker_gid() {
            Ok(gid) if gid != broker.gid => warn!(
                "SIGHUP: the broker group changed; the control socket, the namespace directory and the rings created from now on keep the old one until a restart"
            ),
            _ => {}
        }
        if config.broker.metrics_listen != broker.config.broker.metrics_listen {
            warn!("SIGHUP: metrics_listen changed; the metrics listener keeps its address until a restart");
        }
        broker.config = config;
        let names: Vec<String> = broker.rings.keys().cloned().collect();
        for name in names {
            let spec = broker.spec_for(&name);
            if let Some(t) = broker.rings.get_mut(&name) {
                t.counters.stall_threshold_ms = spec.stall_threshold.as_millis() as u64;
                t.counters.unblock_timeout_ms = spec.unblock_timeout.as_millis() as u64;
                t.spec = spec;
            }
        }
        (
            broker.namespace.clone(),
            broker.gid,
            broker.configured_untracked(),
        )
    };
    for (name, spec) in new {
        // Twice at most: the second time after removing a file left marked deleted.
        for _ in 0..2 {
            let opened = registry::open_or_create(&namespace, gid, &name, &spec);
            let mut broker = lock(shared);
            // Unless a rescan or a create request took a ring at the name up meanwhile:
            // adopted once.
            let taken_up = broker
                .rings
                .get(&name)
                .is_some_and(|t| matches!(t.ring.is_at_path(), Ok(true)));
            if taken_up || !broker.take_up_configured(&name, &spec, opened) {
                break;
            }
        }
    }
    let mut broker = lock(shared);
    broker.period = broker
        .rings
        .values()
        .map(|t| t.spec.sweep_period())
        .chain([broker.config.sweep_period()])
        .min()
        .unwrap_or(broker.period);
    info!(
        path = %path.display(),
        rings = broker.rings.len(),
        period = ?broker.period,
        "SIGHUP: config reloaded"
    );
}
