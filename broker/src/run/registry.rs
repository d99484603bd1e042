//! The rings this broker looks after: the configured ones (opened or created at start),
//! and every other segment found in the namespace directory (adopted as it is).
//!
//! A segment is never unlinked and recreated here: a live ring is opened and adopted
//! (`Ring::adopt` bumps its broker epoch), and one that fails validation is reported and
//! left alone.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use shmring::names::{shown, LeftoverKind};
use shmring::{Cleared, OpenError, Ring, RingState};
use tracing::{error, info, warn};

use super::health::{ConsumerHealth, ProducerHealth};
use super::watch::Watches;
use crate::config::{Config, RingSpec};
use crate::report::{RingHealth, RingReport};

/// How often the directory is rescanned for segments created by others.
pub const RESCAN_EVERY: Duration = Duration::from_millis(500);

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
    /// broker runs them one at a time per ring: the name's (`Broker::turns`), kept when the
    /// ring's file is replaced, so that a request queued on the old file waits for one
    /// running on the new.
    pub lifecycle: std::sync::Arc<super::serial::Serial>,
    /// The corrupt words the last sweep found (logged once each, and again when sound).
    pub corrupt: Vec<shmring::CorruptWord>,
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
    /// Each ring name's lifecycle turn, kept while its ring is tracked or a request holds or
    /// waits on it: a ring deleted, or replaced by another file, and created again under
    /// its name meanwhile has the same turn.
    pub turns: HashMap<String, std::sync::Arc<super::serial::Serial>>,
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
            turns: HashMap::new(),
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
    /// is; a file left marked deleted is removed and the ring created anew.
    pub fn open_configured(&mut self) {
        for (name, spec) in self.configured_untracked() {
            // Twice at most: the second time after removing a file left marked deleted.
            for _ in 0..2 {
                let opened = open_or_create(&self.namespace, self.gid, &name, &spec);
                if !self.take_up_configured(&name, &spec, opened) {
                    break;
                }
            }
        }
    }

    /// The configured rings not tracked yet, with their settings.
    pub fn configured_untracked(&self) -> Vec<(String, RingSpec)> {
        self.config
            .rings
            .iter()
            .filter(|(n, _)| !self.rings.contains_key(*n))
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect()
    }

    /// Track configured ring `name` as [`open_or_create`] opened or built it, or list why it
    /// could not be. Returns whether to open it again: it was a file left marked deleted,
    /// now removed.
    pub fn take_up_configured(
        &mut self,
        name: &str,
        spec: &RingSpec,
        opened: Result<Ring, String>,
    ) -> bool {
        match opened {
            Ok(ring) if ring.state() == Some(RingState::Deleted) => self.clear_deleted(&ring),
            Ok(ring) => {
                warn_undeclared(name, &ring, spec);
                self.track(name.to_owned(), ring, spec.clone());
                false
            }
            Err(e) => {
                warn!(ring = %name, "configured ring left alone: {e}");
                if let Ok(path) = shmring::names::ring_path(&self.namespace, name) {
                    self.unreadable.insert(path, e);
                }
                false
            }
        }
    }

    /// A ring file found marked deleted (its remover died, or could mark it and not unlink
    /// it) is never adopted: adopting it would bump its epoch at every rescan for nothing.
    /// It is unlinked if this broker may; otherwise it is listed as unreadable and logged
    /// once. Returns whether nothing is left behind: unlinked, or no longer at its name.
    fn clear_deleted(&mut self, ring: &Ring) -> bool {
        let path = ring.path().to_owned();
        match ring.unlink_deleted() {
            Ok(_) => {
                info!(path = %shown_path(&path), "removed a ring file that was marked deleted but left behind");
                self.unreadable.remove(&path);
                true
            }
            // Not at the name any more: its remover (a delete of this broker's, which runs
            // beside the rescans) unlinked it since the look, or a new ring took the name.
            // Nothing is left behind.
            Err(OpenError::NotFound { .. } | OpenError::Replaced { .. }) => {
                self.unreadable.remove(&path);
                true
            }
            Err(e) => {
                let why = format!("marked deleted and left behind, so not adopted; it cannot be removed by the broker ({e}): remove it by hand");
                if !self.unreadable.contains_key(&path) {
                    warn!(path = %shown_path(&path), "{}", shown(&why));
                }
                self.unreadable.insert(path, why);
                false
            }
        }
    }

    /// Stop touching every tracked ring whose file shrank below its segment (someone with
    /// write access truncated it): the next read of a page past the end would kill the
    /// broker with SIGBUS. The ring is logged, listed as unreadable with a CORRUPT reason,
    /// and its mapping dropped; nothing is written to it. Checked with `fstat` on the open
    /// file before every sweep, adoption and request on the ring. A truncation that lands
    /// after the check is caught by the truncation guard the broker installs: the touched
    /// mapping becomes zeros instead of a SIGBUS, and this drops it at the next check.
    pub fn drop_truncated(&mut self) {
        let shrunk: Vec<(String, String)> = self
            .rings
            .iter()
            .filter_map(|(n, t)| match t.ring.check_file() {
                Err(e @ (OpenError::Truncated { .. } | OpenError::TruncatedWhileMapped { .. })) => {
                    Some((n.clone(), e.to_string()))
                }
                _ => None,
            })
            .collect();
        for (name, why) in shrunk {
            if let Some(t) = self.rings.remove(&name) {
                self.corrupt(&name, t.ring.path().to_owned(), &why);
            }
        }
    }

    fn corrupt(&mut self, name: &str, path: PathBuf, why: &str) {
        error!(ring = %name, "ring is CORRUPT, the broker dropped its mapping and no longer touches it: {why}");
        self.unreadable.insert(path, format!("CORRUPT: {why}"));
    }

    /// Adopt `ring` and watch it, unless its file shrank (CORRUPT) or it is marked
    /// deleted (see [`Broker::clear_deleted`]).
    pub fn track(&mut self, name: String, ring: Ring, spec: RingSpec) {
        if let Err(e @ (OpenError::Truncated { .. } | OpenError::TruncatedWhileMapped { .. })) =
            ring.check_file()
        {
            self.corrupt(&name, ring.path().to_owned(), &e.to_string());
            return;
        }
        if ring.state() == Some(RingState::Deleted) {
            self.clear_deleted(&ring);
            return;
        }
        let epoch = ring.adopt(self.pid);
        finish_adopted(&name, &ring);
        let period = spec.sweep_period();
        if period < self.period {
            self.period = period;
        }
        info!(ring = %name, epoch, run = ring.run_number(), head = ring.head(), "adopted ring");
        if let Ok(path) = shmring::names::ring_path(&self.namespace, &name) {
            self.unreadable.remove(&path);
        }
        let lifecycle = self.turns.entry(name.clone()).or_default().clone();
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
                lifecycle,
                corrupt: Vec::new(),
            },
        );
    }

    /// The settings for ring `name`: configured, or the defaults.
    pub fn spec_for(&self, name: &str) -> RingSpec {
        self.config.rings.get(name).cloned().unwrap_or_default()
    }

    /// Drop the rings whose file shrank ([`Broker::drop_truncated`], at every call); then
    /// look for segments in the namespace directory that are not tracked yet (at most every
    /// `RESCAN_EVERY` unless `force`), and forget tracked ones whose file is gone. A name
    /// that is not a regular file (a symbolic link, a FIFO, ...) is never opened: it is
    /// listed as unreadable and logged once.
    pub fn rescan(&mut self, force: bool) {
        self.drop_truncated();
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
        let Ok(entries) = shmring::names::ring_entries_in(&dir) else {
            return;
        };
        let mut on_disk = Vec::new();
        for (name, kind) in entries {
            if kind.is_file() {
                on_disk.push(name);
                continue;
            }
            // The entry's own type (lstat), never what a link points to.
            let path = dir.join(format!("{name}{}", shmring::names::RING_SUFFIX));
            let why = crate::file_kind::not_regular(path.clone(), kind).to_string();
            self.left_alone(path, why);
        }
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
        // A turn is held by its tracked ring and by each request that holds or waits on it
        // (each a clone taken under the broker's mutex, which this runs under): one that
        // nothing else holds belongs to a ring no longer tracked and to no request, and a
        // ring tracked again under its name starts from a free turn anyway.
        self.turns
            .retain(|_, turn| std::sync::Arc::strong_count(turn) > 1);
        self.unreadable.retain(|p, _| p.symlink_metadata().is_ok());
        self.clear_leftovers(&dir);
        for name in on_disk {
            if let Some(t) = self.rings.get(&name) {
                if !matches!(t.ring.is_at_path(), Ok(false)) {
                    continue;
                }
                // Removed and created again, or another file renamed over it, between two
                // looks: new opens map that file, so that is the ring to watch. Whoever
                // still maps the old one carries on with it unwatched.
                warn!(ring = %name, "the segment file is another file now (removed and created again, or renamed over): watching the new one");
                self.rings.remove(&name);
            }
            match Ring::open(&self.namespace, &name) {
                Ok(ring) => {
                    let spec = self.spec_for(&name);
                    self.track(name, ring, spec);
                }
                Err(e) => {
                    let path = dir.join(format!("{name}{}", shmring::names::RING_SUFFIX));
                    self.left_alone(path, e.to_string());
                }
            }
        }
    }

    /// Finish what dead creators and removers left in the directory
    /// ([`Ring::clear_leftover`]): their hidden files would otherwise hold their memory for
    /// good. One that cannot be cleared is listed as unreadable, with the reason, until it
    /// is gone; files of live processes and recent ones are left for a later rescan.
    fn clear_leftovers(&mut self, dir: &std::path::Path) {
        let Ok(found) = shmring::names::leftovers_in(dir) else {
            return;
        };
        for leftover in found {
            match Ring::clear_leftover(&self.namespace, &leftover, shmring::LEFTOVER_GRACE) {
                Ok(Cleared::Removed) => {
                    let what = match leftover.kind {
                        LeftoverKind::Building => "the build",
                        LeftoverKind::Removing => "the removal (marked deleted)",
                    };
                    info!(
                        ring = %leftover.ring,
                        path = %shown_path(&leftover.path),
                        pid = leftover.pid,
                        "finished {what} of a dead process: unlinked its file"
                    );
                    self.unreadable.remove(&leftover.path);
                }
                // This broker's own: a delete's, in progress, or refused and listed by it.
                Ok(Cleared::OwnerAlive) if leftover.pid == self.pid => {}
                // Another live maker's, a recent one or busy: looked at again at the next
                // rescan, with no reason listed meanwhile.
                Ok(_) => {
                    self.unreadable.remove(&leftover.path);
                }
                Err(e) => {
                    let why = format!(
                        "left behind by process {} (no process has that pid in this pid namespace); the broker cannot clear it ({e}): remove it by hand",
                        leftover.pid
                    );
                    self.left_alone(leftover.path, why);
                }
            }
        }
    }

    /// List `path` as unreadable, logging it the first time; a reason already given (a
    /// CORRUPT ring's) is kept. The path and the reason carry a name from the directory,
    /// which anyone who may write it chose: the log escapes their control characters, so
    /// a line break cannot start a log line of its own nor an escape reach a terminal.
    pub(super) fn left_alone(&mut self, path: PathBuf, why: String) {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.unreadable.entry(path) {
            warn!(path = %shown_path(slot.key()), "segment left alone: {}", shown(&why));
            slot.insert(why);
        }
    }
}

/// `path` for the log, its [`hidden`](shmring::names::hidden) characters escaped.
fn shown_path(path: &std::path::Path) -> String {
    shown(&path.display().to_string())
}

/// A ring whose last lifecycle operation did not finish: a stop or start whose owner died
/// half-way is finished (a stop ends STOPPED at its recorded sequence, every accepted event
/// stays for the consumers; a start ends RUNNING). `broker start` reopens a stopped ring.
/// Sweeps call this when they see a transitional state.
pub fn finish_half_done(name: &str, ring: &Ring) {
    match ring.finish_interrupted() {
        Ok((_, true)) => warn!(ring = %name, state = ?ring.state(), head = ring.head(),
            "finished a stop or start left by a process that died"),
        Ok(_) => {}
        Err(e) => warn!(ring = %name, "could not finish a half-done lifecycle change: {e}"),
    }
}

/// At adoption, besides [`finish_half_done`]: a DRAINING ring was left by a drain that this
/// broker did not start, whose process may be gone (the Draining word names no owner), and
/// is left STOPPED. One CAS on the Draining word read (`Ring::stop_if_draining`): a start
/// or stop since wins. A drain still running in another process ends as it would have.
/// Sweeps never do this: a drain running now (the broker's own request, or a library
/// call) is Draining while it waits, and ends itself.
fn finish_adopted(name: &str, ring: &Ring) {
    finish_half_done(name, ring);
    if let Some(stop) = ring.stop_if_draining() {
        warn!(ring = %name, stop,
            "found the ring DRAINING with no drain of this broker behind it: left STOPPED at sequence {stop}; `{}` reopens it",
            shmring::names::broker_command(ring.namespace(), "start", &[name], &[]));
    }
}

/// Declarations apply when a ring is created: a configured declared consumer that an
/// existing ring (adopted, or created by someone else) has no entry for is logged, never
/// added to the live table. It gates from its first attach like any durable consumer.
/// Open configured ring `name` in `namespace`, or create it from `spec`. Needs nothing of
/// the broker's state: a reload runs it outside the broker's lock (building a ring
/// allocates and maps every page of its file: seconds for one of gigabytes).
pub fn open_or_create(
    namespace: &str,
    gid: Option<u32>,
    name: &str,
    spec: &RingSpec,
) -> Result<Ring, String> {
    let rc = spec.ring_config(gid).map_err(|e| e.to_string())?;
    Ring::open_or_create(namespace, name, &rc).or_else(|e| match e {
        OpenError::ConfigMismatch { .. } => {
            warn!(ring = %name, "{e}; adopting the ring as it is");
            Ring::open(namespace, name).map_err(|e| e.to_string())
        }
        e => Err(e.to_string()),
    })
}

fn warn_undeclared(name: &str, ring: &Ring, spec: &RingSpec) {
    if spec.declared_consumers.is_empty() {
        return;
    }
    let info = ring.info();
    for c in &spec.declared_consumers {
        if !info.consumers.iter().any(|e| e.durable && e.name == *c) {
            warn!(ring = %name, consumer = ?c,
                "declared consumer {c:?} is not in the existing ring: declarations apply when a ring is created, so it gates only from its first attach; to have it gate from the start, recreate the ring");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shmring::RingConfig;
    use shmring_testkit::namespace::Namespace;

    use super::*;

    fn broker(ns: &Namespace) -> Broker {
        let epoll = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .expect("epoll");
        let config = Config::embedded().expect("the embedded config");
        Broker::new(
            ns.name().to_owned(),
            config,
            None,
            1,
            Watches::new(Arc::new(epoll)),
        )
    }

    /// A broker that outlives many rings created and removed under names of their own keeps
    /// a lifecycle turn only for the rings it tracks and for the ones a request still holds
    /// or waits on: the map of turns does not grow with every name ever seen.
    #[test]
    fn a_ring_s_lifecycle_turn_is_forgotten_with_the_ring_unless_a_request_holds_it() {
        let ns = Namespace::concurrent("turns_pruned");
        let mut b = broker(&ns);
        for i in 0..3 {
            Ring::create(ns.name(), &format!("r{i}"), &RingConfig::default()).expect("create");
        }
        b.rescan(true);
        assert_eq!(b.turns.len(), 3, "one turn per tracked ring");
        let held = b.turns["r1"].clone();

        for i in 0..3 {
            Ring::remove(ns.name(), &format!("r{i}")).expect("remove");
        }
        b.rescan(true);
        assert!(b.rings.is_empty(), "every file is gone");
        let left: Vec<&String> = b.turns.keys().collect();
        assert_eq!(left, ["r1"], "only the turn a request holds stays");

        Ring::create(ns.name(), "r1", &RingConfig::default()).expect("create again");
        b.rescan(true);
        assert!(
            Arc::ptr_eq(&b.rings["r1"].lifecycle, &held),
            "a ring created again under the held name shares the request's turn"
        );
        drop(held);
        Ring::remove(ns.name(), "r1").expect("remove");
        b.rescan(true);
        assert!(b.turns.is_empty(), "nothing holds a turn: none kept");
    }
}
