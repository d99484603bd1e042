//! `broker status` without a broker: read the segments directly. Liveness comes from
//! /proc (pid + start time); stalls cannot be told from one look, so none are reported.

use shmring::process::is_alive;
use shmring::{OpenError, Ring};

use crate::report::{BrokerReport, RingReport, StatusReport, Unreadable, SCHEMA};
use crate::summary;

/// A report built from the segment files of `namespace`, optionally of ring `only` alone.
/// Every `NAME.ring` entry of the directory is in it, as the broker lists them: a regular
/// file with a ring's name is opened, and one that fails to open (its name no ring's, a
/// wrong version, ...) is listed as unreadable with the reason; any other entry (a symbolic
/// link, never followed; a FIFO; ...) is listed as unreadable without being opened. Ring
/// `only` with nothing at its name is [`OpenError::NotFound`]. A directory this user may
/// not list (outside its group) is listed as unreadable with the reason, and ring `only`
/// is then opened by its name, which says why it cannot be (or that it does not exist).
pub fn report(namespace: &str, only: Option<&str>) -> Result<StatusReport, OpenError> {
    let mut rings = Vec::new();
    let mut unreadable = Vec::new();
    let mut broker_pid = None;
    let dir = shmring::names::namespace_dir(namespace)?;
    let path_of = |name: &str| dir.join(format!("{name}{}", shmring::names::RING_SUFFIX));
    let looked: Vec<(String, Result<Ring, OpenError>)> = match shmring::names::ring_entries_in(&dir)
    {
        Ok(entries) => entries
            .into_iter()
            .filter(|(n, _)| only.is_none_or(|o| o == n))
            .map(|(name, kind)| {
                let opened = if kind.is_file() {
                    Ring::open(namespace, &name)
                } else {
                    Err(crate::file_kind::not_regular(path_of(&name), kind))
                };
                (name, opened)
            })
            .collect(),
        // No namespace directory: no rings.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            unreadable.push(Unreadable {
                path: dir.display().to_string(),
                error: format!("cannot list the namespace directory: {e}"),
            });
            only.map(|name| (name.to_owned(), Ring::open(namespace, name)))
                .into_iter()
                .collect()
        }
    };
    for (name, opened) in looked {
        let path = path_of(&name);
        match opened {
            Err(e @ OpenError::NotFound { .. }) if only.is_some() => return Err(e),
            Ok(ring) => {
                if ring.broker_pid() != 0 {
                    broker_pid = Some(ring.broker_pid());
                }
                rings.push(ring_report(&name, &ring));
            }
            Err(e) => unreadable.push(Unreadable {
                path: path.display().to_string(),
                error: e.to_string(),
            }),
        }
    }
    if let Some(name) = only.filter(|_| rings.is_empty() && unreadable.is_empty()) {
        return Err(OpenError::NotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            path: dir.join(format!("{name}{}", shmring::names::RING_SUFFIX)),
        });
    }
    let mut report = StatusReport {
        schema: SCHEMA,
        namespace: namespace.to_owned(),
        broker: BrokerReport {
            running: false,
            pid: broker_pid,
            epoch: None,
            uptime_ms: None,
            last_sweep_ms: None,
            sweep_period_us: None,
            last_sweep_us: None,
            sweeps: None,
            watched_processes: None,
            unreachable: None,
        },
        rings,
        unreadable,
        healthy: false,
    };
    report.compute_healthy();
    Ok(report)
}

fn ring_report(name: &str, ring: &Ring) -> RingReport {
    let info = ring.info();
    let consumers = info
        .consumers
        .iter()
        .map(|c| {
            let state = summary::instant_state(c, is_alive(c.pid, c.start_time));
            summary::consumer_report(ring, c, state, info.head)
        })
        .collect();
    let producers = info
        .producers
        .iter()
        .map(|p| summary::producer_report(p, is_alive(p.pid, p.start_time), 0))
        .collect();
    summary::ring_report(name, ring, &info, consumers, producers, Default::default())
}
