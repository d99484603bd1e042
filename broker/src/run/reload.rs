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
    /// One reload at a time, and one more after it for any SIGHUP during it.
    runs: OneAtATime,
}

impl Reloads {
    /// Reloads from `path`.
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            runs: OneAtATime::default(),
        }
    }

    /// Reload on a thread of its own, so that the sweep loop goes on sweeping meanwhile
    /// (on this one if a thread cannot be started). A SIGHUP during a reload is carried
    /// out once after it, however many arrive meanwhile: that reload reads the file as it
    /// is then.
    pub fn start(&self, shared: &Arc<Mutex<Broker>>) {
        let (shared, path) = (shared.clone(), self.path.clone());
        if !self.runs.request("reload", move || {
            notify_around(|| reload(&shared, path.as_deref()))
        }) {
            info!("SIGHUP during a reload: the config is read again once it ends");
        }
    }
}

/// A job run on a thread of its own, one run at a time: a request during a run is
/// carried out by one more run after it, however many requests come meanwhile, so that a
/// burst of requests costs two runs, not one thread each.
#[derive(Default, Clone)]
pub struct OneAtATime {
    state: Arc<Mutex<Runs>>,
}

#[derive(Default)]
struct Runs {
    /// A run is under way (or about to start).
    running: bool,
    /// A request came during the run: one more run follows it.
    again: bool,
}

impl OneAtATime {
    /// Run `job` on a thread named `name` (on this thread if none can be started), or, if
    /// a run is under way, once more after it. Returns whether this request started a run.
    pub fn request<F>(&self, name: &str, job: F) -> bool
    where
        F: Fn() + Clone + Send + 'static,
    {
        {
            let mut runs = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if runs.running {
                runs.again = true;
                return false;
            }
            runs.running = true;
        }
        let state = self.state.clone();
        let run = move || {
            // A job that panics ends the runs: the next request starts afresh.
            let mut done = Done {
                state: state.clone(),
                ended: false,
            };
            loop {
                job();
                let mut runs = state.lock().unwrap_or_else(|e| e.into_inner());
                if !std::mem::take(&mut runs.again) {
                    runs.running = false;
                    break;
                }
            }
            done.ended = true;
        };
        let spare = run.clone();
        if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(run) {
            warn!("no thread for the {name} ({e}); running it on this one");
            spare();
        }
        true
    }

    /// Whether no run is under way.
    #[cfg(test)]
    fn idle(&self) -> bool {
        !self.state.lock().unwrap_or_else(|e| e.into_inner()).running
    }
}

/// Ends the runs of a job that panicked: dropped while unwinding, before `ended` is set.
struct Done {
    state: Arc<Mutex<Runs>>,
    ended: bool,
}

impl Drop for Done {
    fn drop(&mut self) {
        if !self.ended {
            let mut runs = self.state.lock().unwrap_or_else(|e| e.into_inner());
            runs.running = false;
            runs.again = false;
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    const WAIT: Duration = Duration::from_secs(30);

    /// Requests during a run are carried out by one run after it, on the same thread:
    /// five SIGHUPs during a reload cost two reloads and one thread, not six of each.
    #[test]
    fn requests_during_a_run_are_carried_out_once_after_it() {
        let runs = OneAtATime::default();
        let count = Arc::new(AtomicUsize::new(0));
        let (started, starts) = mpsc::channel::<()>();
        let (go, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let job = {
            let count = count.clone();
            move || {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = started.send(());
                let _ = gate.lock().unwrap().recv_timeout(WAIT);
            }
        };
        assert!(runs.request("job", job.clone()));
        starts.recv_timeout(WAIT).expect("the first run");
        for _ in 0..5 {
            assert!(!runs.request("job", job.clone()), "a second run at once");
        }
        go.send(()).unwrap();
        starts.recv_timeout(WAIT).expect("the run after it");
        go.send(()).unwrap();
        let deadline = Instant::now() + WAIT;
        while !runs.idle() {
            assert!(Instant::now() < deadline, "the runs never ended");
            std::thread::yield_now();
        }
        assert_eq!(count.load(Ordering::SeqCst), 2);
        // Idle again: the next request starts a run.
        assert!(runs.request("job", job));
        starts
            .recv_timeout(WAIT)
            .expect("a run after the idle time");
        go.send(()).unwrap();
    }

    /// A job that panics does not leave the runs taken for good.
    #[test]
    fn a_run_that_panics_lets_the_next_request_start_one() {
        let runs = OneAtATime::default();
        let (ended, ends) = mpsc::channel::<()>();
        assert!(runs.request("job", || panic!("the job failed")));
        let deadline = Instant::now() + WAIT;
        while !runs.idle() {
            assert!(Instant::now() < deadline, "the runs stay taken");
            std::thread::yield_now();
        }
        assert!(runs.request("job", move || {
            let _ = ended.send(());
        }));
        ends.recv_timeout(WAIT).expect("a run after the panic");
    }
}
