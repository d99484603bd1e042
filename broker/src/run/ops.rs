//! Executing control requests against the broker's state. One mutex orders them with the
//! sweeps; lifecycle requests run outside it (a drain is long) but hold their ring's own
//! lifecycle lock from start to end, so requests on one ring run one at a time. A create
//! builds its ring outside it too, and takes it only to track the ring.

use std::sync::Mutex;
use std::time::Duration;

use shmring::Ring;
use tracing::{info, warn};

use super::registry::Broker;
use crate::protocol::{Deadline, Reply, Request};
use crate::report::{BrokerReport, StatusReport, Unreadable, SCHEMA};

/// Default drain timeout.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Lock the shared state; a panic elsewhere does not make it unusable.
pub fn lock(shared: &Mutex<Broker>) -> std::sync::MutexGuard<'_, Broker> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Carry out one request, unless its deadline passed before the broker got to it. A
/// lifecycle request is followed by a sweep, so that the next status shows its effect.
/// `waited_for` says whether the requester still waits for the reply: a drain stops
/// waiting for its consumers once nobody waits for it.
pub fn execute(
    shared: &Mutex<Broker>,
    req: Request,
    deadline: Option<Deadline>,
    waited_for: &dyn Fn() -> bool,
) -> Reply {
    let lifecycle = req.is_lifecycle();
    if lifecycle {
        if let Some(late) = too_late(deadline) {
            return late;
        }
    }
    let reply = dispatch(shared, req, deadline, waited_for);
    if lifecycle {
        super::sweep::sweep(&mut lock(shared));
    }
    reply
}

/// The reply to a request whose deadline passed while another lifecycle request held ring
/// `name`.
/// Logged when a lifecycle request has to wait for another on the same ring.
fn waits_for_a_turn(name: &str) {
    info!(
        ring = name,
        "a lifecycle request waits for another one on the ring to finish (a drain waits for its consumers)"
    );
}

fn held_past(name: &str) -> Reply {
    Reply::error(format!(
        "not carried out: another lifecycle request on ring {name:?} (a drain waits for its consumers) held it past this request's deadline; nothing was changed, try again once it is done"
    ))
}

/// The refusal of a request whose deadline has passed: its sender stopped waiting, so
/// doing it now would surprise whoever sent it.
pub fn too_late(deadline: Option<Deadline>) -> Option<Reply> {
    deadline.filter(|d| d.passed()).map(|_| {
        Reply::error(
            "not carried out: the request's deadline passed before the broker could begin it \
             (the sender had stopped waiting); nothing was changed",
        )
    })
}

fn dispatch(
    shared: &Mutex<Broker>,
    req: Request,
    deadline: Option<Deadline>,
    waited_for: &dyn Fn() -> bool,
) -> Reply {
    match req {
        Request::Ping => {
            let b = lock(shared);
            Reply::Pong {
                pid: b.pid,
                namespace: b.namespace.clone(),
            }
        }
        Request::Status { ring } => status(&mut lock(shared), ring.as_deref()),
        Request::Create {
            ring,
            capacity,
            slot_size,
        } => too_late(deadline).unwrap_or_else(|| create(shared, &ring, capacity, slot_size)),
        Request::Stop { ring } => with_ring(shared, &ring, deadline, |r| {
            r.stop().map(|seq| Reply::Done {
                message: format!("ring {ring:?} stopped at sequence {seq}: publishes are refused, consumers finish what was published"),
                sequence: Some(seq),
                run: None,
            })
        }),
        Request::Start { ring } => with_ring(shared, &ring, deadline, |r| match r.start() {
            Ok(run) => Ok(Reply::Done {
                message: format!(
                    "ring {ring:?} started: run {run}, publishing continues at sequence {}",
                    r.head()
                ),
                sequence: None,
                run: Some(run),
            }),
            // As `stop` on a stopped ring: the state asked for is the state it is in.
            Err(shmring::LifecycleError::AlreadyRunning) => Ok(Reply::Done {
                message: format!("ring {ring:?} is already running (run {})", r.run_number()),
                sequence: None,
                run: Some(r.run_number()),
            }),
            Err(e) => Err(e),
        }),
        Request::Drain { ring, timeout_ms } => {
            let timeout = timeout_ms.map_or(DRAIN_TIMEOUT, Duration::from_millis);
            with_ring(shared, &ring, deadline, |r| {
                match r.drain_while(timeout, waited_for) {
                    Ok(seq) => Ok(Reply::Done {
                        message: format!("ring {ring:?} stopped and drained: every gating consumer reached sequence {seq}"),
                        sequence: Some(seq),
                        run: None,
                    }),
                    Err(e @ shmring::LifecycleError::DrainAbandoned { .. }) => {
                        // Nobody reads the reply: the log is where this is told.
                        warn!(ring = %ring, "drain of ring {ring:?} ended: its requester went away; {e}");
                        Err(e)
                    }
                    Err(e) => Err(e),
                }
            })
        }
        Request::Delete { ring } => delete(shared, &ring, deadline),
        Request::Release { ring, consumer } => {
            super::consumer_ops::release(shared, &ring, &consumer, deadline)
        }
        Request::Unsubscribe { ring, consumer } => {
            super::consumer_ops::unsubscribe(shared, &ring, &consumer, deadline)
        }
    }
}

/// The reply for a request on ring `ring` that the broker does not track: the reason its
/// file was left alone, if there is one (a link, a wrong version, a corrupt segment: a
/// `broker create` would only find the name taken), or that no ring has the name.
pub fn unknown(b: &Broker, ring: &str) -> Reply {
    let left = shmring::names::ring_path(&b.namespace, ring)
        .ok()
        .and_then(|path| Some((b.unreadable.get(&path)?, path)));
    if let Some((why, path)) = left {
        return Reply::error(format!(
            "ring {ring:?} cannot be used: its file {} was left alone: {why}",
            path.display()
        ));
    }
    let known: Vec<&str> = b.rings.keys().map(String::as_str).collect();
    Reply::error(format!(
        "no ring named {ring:?} in namespace {:?} (rings: {}): create it with `{}`",
        b.namespace,
        if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        },
        shmring::names::broker_command(&b.namespace, "create", &[ring], &[])
    ))
}

/// `reply`, unless ring `name`'s file was truncated under the request and the truncation
/// guard turned what it read and wrote into zeros: then what it did or found is not the
/// ring's, and the reply says the file was truncated.
pub fn unless_truncated(ring: &Ring, name: &str, reply: Reply) -> Reply {
    match ring.check_file() {
        Err(e @ shmring::OpenError::TruncatedWhileMapped { .. }) => match reply {
            // The change may have reached the file before the truncation, or not.
            Reply::Done { message, .. } => Reply::error(format!(
                "ring {name:?}: {e} (the file was truncated during or right after the request, so whether this took effect is not known: {message})"
            )),
            _ => Reply::error(format!("ring {name:?}: {e}")),
        },
        _ => reply,
    }
}

/// The error of a ring whose file shrank under the broker, if it did (an `fstat` that
/// fails says nothing: the request goes on, as an attach does).
pub fn truncated(ring: &Ring) -> Option<shmring::OpenError> {
    match ring.check_file() {
        Err(
            e @ (shmring::OpenError::Truncated { .. }
            | shmring::OpenError::TruncatedWhileMapped { .. }),
        ) => Some(e),
        _ => None,
    }
}

/// What `take` takes from ring `name` as the broker tracks it after a rescan, under the
/// broker's lock; the reply for a ring it does not know otherwise.
fn tracked<T>(
    shared: &Mutex<Broker>,
    name: &str,
    take: impl FnOnce(&super::registry::Tracked) -> T,
) -> Result<T, Reply> {
    let mut b = lock(shared);
    b.rescan(true);
    match b.rings.get(name) {
        Some(t) => Ok(take(t)),
        None => Err(unknown(&b, name)),
    }
}

/// Run `op` on a clone of ring `name`, outside the broker's lock and inside the ring's
/// lifecycle lock, unless `deadline` has passed (also while it waited for that lock).
fn with_ring<F>(shared: &Mutex<Broker>, name: &str, deadline: Option<Deadline>, op: F) -> Reply
where
    F: FnOnce(&Ring) -> Result<Reply, shmring::LifecycleError>,
{
    let serial = match tracked(shared, name, |t| t.lifecycle.clone()) {
        Ok(serial) => serial,
        Err(reply) => return reply,
    };
    let Some(_one_at_a_time) = serial.turn(deadline, || waits_for_a_turn(name)) else {
        return held_past(name);
    };
    if let Some(late) = too_late(deadline) {
        return late;
    }
    // The ring under the name once the turn came, which can be after a whole drain: a
    // file removed and created again, or renamed over it, meanwhile is the ring the
    // request names (the turn is the name's, see `registry`), not the file it replaced.
    let ring = match tracked(shared, name, |t| t.ring.clone()) {
        Ok(ring) => ring,
        Err(reply) => return reply,
    };
    // Again after the wait for the turn, which can be as long as a drain.
    if let Some(e) = truncated(&ring) {
        return Reply::error(format!("ring {name:?}: {e}"));
    }
    let reply = op(&ring).unwrap_or_else(|e| Reply::error(format!("ring {name:?}: {e}")));
    let reply = unless_truncated(&ring, name, reply);
    if let Reply::Done { message, .. } = &reply {
        info!(ring = name, "{message}");
    }
    reply
}

/// Create ring `name`. The build (every page of the file allocated and mapped: seconds for
/// a ring of gigabytes) runs outside the broker's lock, so that sweeps, status, metrics and
/// other requests go on meanwhile; a second create of the name is refused by the file
/// system (`AlreadyExists`).
fn create(
    shared: &Mutex<Broker>,
    name: &str,
    capacity: Option<u64>,
    slot_size: Option<u32>,
) -> Reply {
    // The ring's configured settings with the request's shape.
    let spec_in = |b: &Broker| {
        let mut spec = b.spec_for(name);
        spec.capacity = capacity.unwrap_or(spec.capacity);
        spec.slot_size = slot_size.unwrap_or(spec.slot_size);
        spec
    };
    let (namespace, config) = {
        let b = lock(shared);
        match spec_in(&b).ring_config(b.gid) {
            Ok(config) => (b.namespace.clone(), config),
            Err(e) => return Reply::error(e.to_string()),
        }
    };
    match Ring::create(&namespace, name, &config) {
        Ok(ring) => {
            let g = *ring.geometry();
            let mut b = lock(shared);
            // Unless a rescan took the new file up meanwhile: adopted once.
            let taken_up = b
                .rings
                .get(name)
                .is_some_and(|t| matches!(t.ring.is_at_path(), Ok(true)));
            if !taken_up {
                // The settings as they are now: a reload during the build changed them,
                // and found nothing tracked at the name to change.
                let spec = spec_in(&b);
                b.track(name.to_owned(), ring, spec);
            }
            Reply::Done {
                message: format!(
                    "ring {name:?} created: capacity {}, slot size {}",
                    g.capacity, g.slot_size
                ),
                sequence: None,
                run: None,
            }
        }
        Err(e) => Reply::error(e.to_string()),
    }
}

fn delete(shared: &Mutex<Broker>, name: &str, deadline: Option<Deadline>) -> Reply {
    let serial = match tracked(shared, name, |t| t.lifecycle.clone()) {
        Ok(serial) => serial,
        Err(reply) => return reply,
    };
    // After any lifecycle request in progress on the ring (a drain), not during it.
    let Some(_one_at_a_time) = serial.turn(deadline, || waits_for_a_turn(name)) else {
        return held_past(name);
    };
    let namespace = {
        let b = lock(shared);
        if !b.rings.contains_key(name) {
            return unknown(&b, name);
        }
        b.namespace.clone()
    };
    if let Some(late) = too_late(deadline) {
        return late;
    }
    // Outside the broker's lock: a remove waits for a live process's stop or start (up to
    // the lifecycle wait), and sweeps, status and other rings' requests go on meanwhile.
    // The ring's turn keeps this ring's other lifecycle requests out.
    match Ring::remove(&namespace, name) {
        Ok(()) => {
            let mut b = lock(shared);
            // Unless a rescan has dropped it already, or tracks a new ring made under the
            // name since (not marked deleted).
            if b.rings.get(name).is_some_and(|t| t.ring.is_deleted()) {
                b.rings.remove(name);
            }
            info!(
                ring = name,
                "ring deleted: attached clients get a Deleted error"
            );
            Reply::Done {
                message: format!("ring {name:?} deleted: attached producers and consumers get a Deleted error, the segment is unlinked"),
                sequence: None,
                run: None,
            }
        }
        Err(e) => {
            // Refused with the name taken meanwhile: the old ring is left under a hidden
            // name of this broker's, which it does not clear while it runs. Listed, so that
            // status shows it.
            if let Some(aside) = e.left_aside() {
                lock(shared).left_alone(aside.to_owned(), e.to_string());
            }
            Reply::error(e.to_string())
        }
    }
}

/// The report of the last sweep (every consumer's sequence and idle time from one sweep).
pub fn status(b: &mut Broker, only: Option<&str>) -> Reply {
    // Ring `only`'s file, when one ring is asked for: its unreadable entry, if any, is the
    // only one the report carries (another ring's file does not make this one unhealthy).
    let only_path = only.and_then(|name| shmring::names::ring_path(&b.namespace, name).ok());
    if let Some(name) = only {
        let unreadable = only_path
            .as_ref()
            .is_some_and(|p| b.unreadable.contains_key(p));
        if !b.rings.contains_key(name) && !unreadable {
            return unknown(b, name);
        }
    }
    let rings = b
        .rings
        .iter()
        .filter(|(n, _)| only.is_none_or(|o| o == n.as_str()))
        .filter_map(|(_, t)| t.last.clone())
        .collect();
    let mut report = StatusReport {
        schema: SCHEMA,
        namespace: b.namespace.clone(),
        broker: BrokerReport {
            running: true,
            pid: Some(b.pid),
            epoch: Some(b.epoch),
            uptime_ms: Some(b.started.elapsed().as_millis() as u64),
            last_sweep_ms: b.last_sweep.map(|t| t.elapsed().as_millis() as u64),
            sweep_period_us: Some(b.period.as_micros() as u64),
            last_sweep_us: b.last_sweep_took.map(|d| d.as_micros() as u64),
            sweeps: Some(b.sweeps),
            watched_processes: Some(b.watches.live_count() as u64),
            unreachable: None,
        },
        rings,
        unreadable: b
            .unreadable
            .iter()
            .filter(|(p, _)| only.is_none() || only_path.as_ref() == Some(*p))
            .map(|(p, e)| Unreadable {
                path: p.display().to_string(),
                error: e.clone(),
            })
            .collect(),
        healthy: false,
    };
    report.compute_healthy();
    Reply::Status(Box::new(report))
}
