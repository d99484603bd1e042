//! `broker status` without a broker: read the segments directly. Liveness comes from
//! /proc (pid + start time); stalls cannot be told from one look, so none are reported.

use shmring::process::is_alive;
use shmring::Ring;

use crate::report::{BrokerReport, RingReport, StatusReport, Unreadable, SCHEMA};
use crate::summary;

/// A report built from the segment files of `namespace`, optionally of one ring.
pub fn report(namespace: &str, only: Option<&str>) -> StatusReport {
    let mut rings = Vec::new();
    let mut unreadable = Vec::new();
    let mut broker_pid = None;
    let names = shmring::names::namespace_dir(namespace)
        .ok()
        .and_then(|dir| shmring::names::rings_in(&dir).ok())
        .unwrap_or_default();
    for name in names.into_iter().filter(|n| only.is_none_or(|o| o == n)) {
        match Ring::open(namespace, &name) {
            Ok(ring) => {
                if ring.broker_pid() != 0 {
                    broker_pid = Some(ring.broker_pid());
                }
                rings.push(ring_report(&name, &ring));
            }
            Err(e) => unreadable.push(Unreadable {
                path: shmring::names::ring_path(namespace, &name)
                    .map(|p| p.display().to_string())
                    .unwrap_or(name),
                error: e.to_string(),
            }),
        }
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
    report
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
