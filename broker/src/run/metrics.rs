//! `broker run --metrics-listen ADDR:PORT`: the status report as Prometheus metrics, at
//! `GET /metrics` (OpenMetrics text, which Prometheus scrapes natively).
//!
//! Every scrape encodes the last sweep's report (the one `broker status` shows) with
//! `prometheus-client`: a registry built for that scrape, so counters carry the values the
//! rings' tables hold. Names follow the Prometheus conventions: a `shmring_` prefix,
//! `_total` on counters, base units (`_seconds`, `_bytes`), and one gauge per state with a
//! `state` label (1 for the current state, 0 for the others).
//!
//! The HTTP side is a `std::net::TcpListener` serving that one path: a scraper sends one
//! small request every few seconds, so an HTTP stack and an async runtime would be most of
//! the broker's dependencies for nothing. Each connection has a thread of its own (at most
//! `MAX_CONNECTIONS` at once; one more is answered 503), its request head bounded to 8 KiB
//! and 2 s in all and its response to 10 s in all (not per read or write: a client
//! trickling its request or reading its response a byte at a time is cut off like one
//! that sends nothing), `Connection: close`; the report is copied under the broker's lock
//! and encoded outside it, so a slow scraper never delays a sweep, nor another scrape
//! unless `MAX_CONNECTIONS` slow ones are connected at once.
//!
//! A scrape waits at most `STATE_WAIT` for the broker's lock. A broker whose lock is held
//! longer (a sweep or a reload stuck, or slow: a configured ring of gigabytes being built)
//! is answered from the last report a scrape made, its sweep age counted on to now, so
//! that `shmring_broker_last_sweep_age_seconds` keeps growing and the stuck-broker alert
//! fires inside Prometheus's scrape timeout; with no report made yet, 503.

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use shmring::HealthState;
use tracing::{debug, warn};

use super::ops;
use super::registry::Broker;
use super::until::Until;
use crate::protocol::Reply;
use crate::report::{ConsumerReport, ProducerReport, RingReport, StatusReport};

/// Longest request head read.
const MAX_HEAD: u64 = 8 * 1024;
/// How long a scraper may take to send its request head, in all.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a scraper may take to read its response, in all.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the "too many connections" reply may take (written on the accept thread).
const BUSY_WRITE_TIMEOUT: Duration = Duration::from_millis(100);
/// Connections served at once.
const MAX_CONNECTIONS: usize = 8;
/// How long a scrape waits for the broker's lock before it answers from the last report.
const STATE_WAIT: Duration = Duration::from_secs(2);
/// Content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A metric's name, help text, and how to read it from a report row.
type Metric<R, V> = (&'static str, &'static str, fn(&R) -> V);
type Labels = Vec<(Cow<'static, str>, String)>;
type Counters = Family<Labels, Counter<u64>>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// Metric families of one scrape, registered under their names.
struct Scrape {
    registry: Registry,
}

impl Scrape {
    fn counter(&mut self, name: &str, help: &str) -> Counters {
        let f = Counters::default();
        self.registry.register(name, help, f.clone());
        f
    }

    /// A gauge without labels, set to `v`.
    fn one(&mut self, name: &str, help: &str, v: f64) {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(v);
        self.registry.register(name, help, g);
    }

    fn gauge(&mut self, name: &str, help: &str) -> Gauges {
        let f = Gauges::default();
        self.registry.register(name, help, f.clone());
        f
    }
}

/// A label, its value escaped as the exposition format asks (`\\`, `\"`, `\n`):
/// `prometheus-client` writes label values as they are, and ring and consumer names are
/// chosen by whoever created or attached them.
fn label(key: &'static str, value: impl Into<String>) -> (Cow<'static, str>, String) {
    let value: String = value.into();
    if !value.contains(['\\', '"', '\n']) {
        return (Cow::Borrowed(key), value);
    }
    let mut escaped = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    (Cow::Borrowed(key), escaped)
}

fn set(f: &Gauges, labels: &Labels, v: f64) {
    f.get_or_create(labels).set(v);
}

fn count(f: &Counters, labels: &Labels, v: u64) {
    f.get_or_create(labels).inc_by(v);
}

/// The report in the OpenMetrics text format.
pub fn encode(report: &StatusReport) -> String {
    let mut s = Scrape {
        registry: Registry::default(),
    };
    broker_metrics(&mut s, report);
    ring_metrics(&mut s, &report.rings);
    consumer_metrics(&mut s, &report.rings);
    producer_metrics(&mut s, &report.rings);
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &s.registry) {
        warn!("encoding metrics failed: {e}");
    }
    out
}

fn secs_ms(ms: Option<u64>) -> f64 {
    ms.unwrap_or(0) as f64 / 1e3
}

fn broker_metrics(s: &mut Scrape, r: &StatusReport) {
    let b = &r.broker;
    s.one(
        "shmring_broker_epoch",
        "Brokers that have held this namespace, this one included",
        b.epoch.unwrap_or(0) as f64,
    );
    s.one(
        "shmring_broker_uptime_seconds",
        "Seconds since this broker started",
        secs_ms(b.uptime_ms),
    );
    let sweeps = Counter::<u64>::default();
    sweeps.inc_by(b.sweeps.unwrap_or(0));
    s.registry.register(
        "shmring_broker_sweeps",
        "Health sweeps since this broker started",
        sweeps,
    );
    s.one(
        "shmring_broker_last_sweep_age_seconds",
        "Seconds since the last sweep",
        secs_ms(b.last_sweep_ms),
    );
    s.one(
        "shmring_broker_last_sweep_duration_seconds",
        "How long the last sweep took",
        b.last_sweep_us.unwrap_or(0) as f64 / 1e6,
    );
    s.one(
        "shmring_broker_sweep_period_seconds",
        "Sweep period",
        b.sweep_period_us.unwrap_or(0) as f64 / 1e6,
    );
    s.one(
        "shmring_broker_watched_processes",
        "Client processes watched with a pidfd",
        b.watched_processes.unwrap_or(0) as f64,
    );
    s.one(
        "shmring_unreadable_segments",
        "Segment files that failed validation",
        r.unreadable.len() as f64,
    );
    s.one(
        "shmring_healthy",
        "1 when no consumer is STALLED, DEAD or FAILED, no ring BLOCKED or corrupt and every segment readable",
        f64::from(u8::from(r.healthy)),
    );
}

const RING_STATES: [&str; 8] = [
    "RUNNING", "STOPPED", "DRAINING", "STOPPING", "STARTING", "SHARING", "DELETED", "CORRUPT",
];
const FENCE_MODES: [&str; 3] = ["membarrier", "seqcst-fence", "unset"];

fn ring_metrics(s: &mut Scrape, rings: &[RingReport]) {
    let gauges: [Metric<RingReport, f64>; 13] = [
        ("shmring_ring_head", "Next sequence to claim", |r| {
            r.head as f64
        }),
        (
            "shmring_ring_free_slots",
            "Slots producers may claim before waiting for the slowest gating consumer",
            |r| r.free as f64,
        ),
        ("shmring_ring_capacity_slots", "Slots in the ring", |r| {
            r.capacity as f64
        }),
        (
            "shmring_ring_slot_size_bytes",
            "Bytes per slot: with its 16-byte header (stamped slots), the event (fixed-size events), or the length word and the largest event (sized events)",
            |r| f64::from(r.slot_size),
        ),
        ("shmring_ring_run", "Run counter (+1 per start)", |r| {
            r.run as f64
        }),
        (
            "shmring_ring_epoch",
            "Broker epoch of the segment (+1 per adoption)",
            |r| r.epoch as f64,
        ),
        (
            "shmring_ring_blocked",
            "1 when producers have no room and the consumer at the wrap gate cannot move",
            |r| f64::from(u8::from(r.blocked_by.is_some())),
        ),
        (
            "shmring_ring_corrupt_words",
            "Words of the segment another process overwrote with values no ring writes",
            |r| r.corrupt.len() as f64,
        ),
        (
            "shmring_ring_consumer_waiters",
            "Consumers parked now, on the ring's consumer line or behind an upstream on its entry",
            |r| f64::from(r.consumer_waiters),
        ),
        (
            "shmring_ring_downstream_waiters",
            "Of the parked consumers, those parked behind an upstream consumer (woken by its commits, not by publishes)",
            |r| f64::from(r.downstream_waiters),
        ),
        (
            "shmring_ring_producer_waiters",
            "Producers parked waiting for room now",
            |r| f64::from(r.producer_waiters),
        ),
        (
            "shmring_ring_slowest_lag_events",
            "Lag of the gating consumer furthest behind",
            |r| r.slowest.as_ref().map_or(0.0, |s| s.lag as f64),
        ),
        (
            "shmring_ring_closed",
            "1 when claims are refused (stopped, draining, deleted)",
            |r| f64::from(u8::from(r.closed)),
        ),
    ];
    let counters: [Metric<RingReport, u64>; 11] = [
        ("shmring_ring_consumer_wakes", "Wake-ups issued to parked consumers, each a futex_wake its publisher paid (wraps at 2^32)", |r| u64::from(r.consumer_wakes)),
        ("shmring_ring_downstream_wakes", "Wake-ups issued to consumers parked behind an upstream, summed over the entries: each a futex_wake that upstream paid (or a release, free, stop, repair or death), never a publish (wraps at 2^32)", |r| u64::from(r.downstream_wakes)),
        ("shmring_ring_producer_wakes", "Wake-ups issued to parked producers (wraps at 2^32)", |r| u64::from(r.producer_wakes)),
        ("shmring_ring_stalls", "HEALTHY to STALLED edges since this broker started", |r| r.health.stalls),
        ("shmring_ring_recoveries", "STALLED to HEALTHY edges since this broker started", |r| r.health.recoveries),
        ("shmring_ring_deaths", "Consumers seen dying or failing since this broker started", |r| r.health.deaths),
        ("shmring_ring_releases", "Dead consumers released from gating by policy", |r| r.health.releases),
        ("shmring_ring_freed", "Dead anonymous consumers whose entries were freed", |r| r.health.freed),
        ("shmring_ring_policy_stops", "Times the ring was stopped by a stop-ring policy", |r| r.health.policy_stops),
        ("shmring_ring_repaired_claims", "Claims of dead producers repaired", |r| r.health.repaired_claims),
        ("shmring_ring_tombstoned", "Sequences tombstoned by those repairs", |r| r.health.tombstoned),
    ];
    for (name, help, value) in gauges {
        let f = s.gauge(name, help);
        for r in rings {
            set(&f, &vec![label("ring", &r.name)], value(r));
        }
    }
    for (name, help, value) in counters {
        let f = s.counter(name, help);
        for r in rings {
            count(&f, &vec![label("ring", &r.name)], value(r));
        }
    }
    let state = s.gauge("shmring_ring_state", "1 for the ring's lifecycle state");
    let fence = s.gauge("shmring_ring_fence_mode", "1 for how publishers order against parked consumers (seqcst-fence: every publish pays a full fence)");
    for r in rings {
        for st in RING_STATES {
            let on = st == r.state;
            set(
                &state,
                &vec![label("ring", &r.name), label("state", st)],
                f64::from(u8::from(on)),
            );
        }
        for m in FENCE_MODES {
            let on = m == r.fence_mode;
            set(
                &fence,
                &vec![label("ring", &r.name), label("mode", m)],
                f64::from(u8::from(on)),
            );
        }
    }
}

/// `ring`, `consumer` and `index`. `consumer` is the durable name, or for a worker group
/// member `GROUP#INDEX` (its group's name and its entry), or `#INDEX` for an anonymous
/// consumer.
fn consumer_labels(r: &RingReport, c: &ConsumerReport) -> Labels {
    let group = c.group.and_then(|g| {
        r.consumers
            .iter()
            .find(|x| x.index == g && x.is_group)
            .map(|x| x.name.as_str())
    });
    let consumer = match (c.name.is_empty(), group) {
        (false, _) => c.name.clone(),
        (true, Some(g)) => format!("{g}#{}", c.index),
        (true, None) => format!("#{}", c.index),
    };
    vec![
        label("ring", &r.name),
        label("consumer", consumer),
        label("index", c.index.to_string()),
    ]
}

fn consumer_metrics(s: &mut Scrape, rings: &[RingReport]) {
    let gauges: [Metric<ConsumerReport, f64>; 5] = [
        (
            "shmring_consumer_sequence",
            "Next sequence the consumer will read",
            |c| c.sequence as f64,
        ),
        (
            "shmring_consumer_lag_events",
            "Published events beyond its position (at most the capacity)",
            |c| c.lag as f64,
        ),
        (
            "shmring_consumer_idle_seconds",
            "Seconds it had not moved at the last sweep",
            |c| secs_ms(c.idle_ms),
        ),
        (
            "shmring_consumer_parked",
            "1 when it is parked on the ring's futex",
            |c| f64::from(u8::from(c.parked)),
        ),
        (
            "shmring_consumer_poison_attempts",
            "Failed attempts at the event its handler is failing at (0: none)",
            |c| f64::from(c.poison_attempts),
        ),
    ];
    let counters: [Metric<ConsumerReport, u64>; 9] = [
        (
            "shmring_consumer_delivered",
            "Events handed to its handler",
            |c| c.delivered,
        ),
        ("shmring_consumer_skipped", "Tombstones skipped", |c| {
            c.skipped
        }),
        (
            "shmring_consumer_dropped",
            "Events lost to lapping or to a release",
            |c| c.dropped_behind,
        ),
        ("shmring_consumer_wakeups", "Returns from a park", |c| {
            c.wakeups
        }),
        (
            "shmring_consumer_net_wakeups",
            "Wake-ups by the timed net with an event waiting (lost wake-ups; should stay 0)",
            |c| c.net_wakeups,
        ),
        ("shmring_consumer_failures", "Handler failures", |c| {
            c.failures
        }),
        (
            "shmring_consumer_dead_lettered",
            "Events its error policy skipped (dead letters)",
            |c| c.dead_lettered,
        ),
        (
            "shmring_consumer_retries",
            "Failed attempts its error policy answered with another attempt",
            |c| c.retries,
        ),
        (
            "shmring_consumer_redelivered",
            "Events a worker group member delivered again after the member holding them died or failed (possible duplicates)",
            |c| c.redelivered,
        ),
    ];
    for (name, help, value) in gauges {
        let f = s.gauge(name, help);
        for r in rings {
            for c in &r.consumers {
                set(&f, &consumer_labels(r, c), value(c));
            }
        }
    }
    let stage = s.gauge(
        "shmring_consumer_stage_lag_events",
        "Events its slowest upstream consumer committed beyond its position (only consumers that read behind others)",
    );
    for r in rings {
        for c in &r.consumers {
            if let Some(lag) = c.stage_lag {
                set(&stage, &consumer_labels(r, c), lag as f64);
            }
        }
    }
    for (name, help, value) in counters {
        let f = s.counter(name, help);
        for r in rings {
            for c in &r.consumers {
                count(&f, &consumer_labels(r, c), value(c));
            }
        }
    }
    let state = s.gauge("shmring_consumer_state", "1 for the consumer's health state (HEALTHY, STALLED, DEAD, FAILED, DETACHED, RELEASED, ATTACHING)");
    for r in rings {
        for c in &r.consumers {
            let now = HealthState::from(c.state);
            for st in HealthState::ALL {
                let mut l = consumer_labels(r, c);
                l.push(label("state", st.as_str()));
                set(&state, &l, f64::from(u8::from(st == now)));
            }
        }
    }
}

fn producer_metrics(s: &mut Scrape, rings: &[RingReport]) {
    let labels = |r: &RingReport, p: &ProducerReport| -> Labels {
        vec![
            label("ring", &r.name),
            label("index", p.index.to_string()),
            label("pid", p.pid.to_string()),
        ]
    };
    let counters: [Metric<ProducerReport, u64>; 5] = [
        ("shmring_producer_published", "Events published", |p| {
            p.published
        }),
        (
            "shmring_producer_refused",
            "Publishes refused (full, timed out, stopped, too large)",
            |p| p.refused,
        ),
        (
            "shmring_producer_tombstoned",
            "Claims dropped unwritten (tombstones)",
            |p| p.tombstoned,
        ),
        (
            "shmring_producer_repaired",
            "Sequences of its claims the broker repaired after it died",
            |p| p.repaired,
        ),
        (
            "shmring_producer_parks",
            "Times it parked waiting for room",
            |p| p.parks,
        ),
    ];
    for (name, help, value) in counters {
        let f = s.counter(name, help);
        for r in rings {
            for p in &r.producers {
                count(&f, &labels(r, p), value(p));
            }
        }
    }
    let alive = s.gauge(
        "shmring_producer_alive",
        "1 while the producer's process is alive",
    );
    for r in rings {
        for p in &r.producers {
            set(&alive, &labels(r, p), f64::from(u8::from(p.alive)));
        }
    }
}

/// Serve `GET /metrics` until the process exits.
pub fn serve(listener: TcpListener, shared: Arc<Mutex<Broker>>) {
    let active = Arc::new(AtomicUsize::new(0));
    let last: Arc<LastReport> = Arc::default();
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                warn!("metrics accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        // AcqRel (both): a count shared with the connection threads' decrements; it orders
        // nothing else.
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            // A short reply into a fresh socket's send buffer, on the accept thread: it does
            // not wait, and the deadline is short in case it would.
            let _ = respond(
                &stream,
                BUSY_WRITE_TIMEOUT,
                "503 Service Unavailable",
                "text/plain",
                "too many metrics connections at once\n",
            );
            continue;
        }
        let shared = shared.clone();
        let last = last.clone();
        // Its slot is given back when the thread ends, by returning or by unwinding, or
        // when the thread cannot be started (the closure is dropped unrun).
        let slot = Slot(active.clone());
        let spawned = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                let _slot = slot;
                if let Err(e) = answer(stream, &shared, &last) {
                    debug!("metrics connection: {e}");
                }
            });
        if let Err(e) = spawned {
            warn!("cannot start a metrics thread: {e}");
        }
    }
}

/// A connection's place among the `MAX_CONNECTIONS`, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        // AcqRel: the count's other side (see `serve`).
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The last report a scrape made, and when.
type LastReport = Mutex<Option<(StatusReport, Instant)>>;

/// The report to encode: made by `make` under the lock of `shared` if it is free within
/// `wait` (and kept in `last`), else the last one made, aged to now (its sweep age and
/// uptime counted on); `None` if neither.
fn report_within<T>(
    shared: &Mutex<T>,
    wait: Duration,
    last: &LastReport,
    make: impl FnOnce(&mut T) -> Option<StatusReport>,
) -> Option<StatusReport> {
    let deadline = Instant::now() + wait;
    let mut state = loop {
        match shared.try_lock() {
            Ok(state) => break state,
            // A panic elsewhere does not make the state unusable (as `ops::lock`).
            Err(TryLockError::Poisoned(e)) => break e.into_inner(),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                // A poll of a lock held elsewhere, for at most `wait`.
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => {
                let kept = last.lock().unwrap_or_else(|e| e.into_inner()).clone();
                return kept.map(|(mut report, at)| {
                    let aged = at.elapsed().as_millis() as u64;
                    let b = &mut report.broker;
                    b.last_sweep_ms = b.last_sweep_ms.map(|ms| ms.saturating_add(aged));
                    b.uptime_ms = b.uptime_ms.map(|ms| ms.saturating_add(aged));
                    report
                });
            }
        }
    };
    let report = make(&mut state)?;
    // Under the broker's lock: reports made by two scrapes are ordered as their times are,
    // and only a newer one replaces the kept one (else a counter could be served lower
    // than it was, which Prometheus reads as a reset).
    let made = Instant::now();
    drop(state);
    let mut kept = last.lock().unwrap_or_else(|e| e.into_inner());
    if kept.as_ref().is_none_or(|(_, at)| *at <= made) {
        *kept = Some((report.clone(), made));
    }
    Some(report)
}

fn answer(stream: TcpStream, shared: &Mutex<Broker>, last: &LastReport) -> std::io::Result<()> {
    let until = Until::within(&stream, READ_TIMEOUT);
    let mut reader = BufReader::new(until.take(MAX_HEAD));
    let mut first = String::new();
    reader.read_line(&mut first)?;
    // The rest of the head, up to the empty line (bounded by MAX_HEAD).
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 && !line.trim_end().is_empty() {
        line.clear();
    }
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            let made = report_within(shared, STATE_WAIT, last, |b| match ops::status(b, None) {
                Reply::Status(r) => Some(*r),
                _ => None,
            });
            match made {
                Some(report) => ("200 OK", CONTENT_TYPE, encode(&report)),
                None => (
                    "503 Service Unavailable",
                    "text/plain",
                    format!(
                        "the broker's state has been busy for {STATE_WAIT:?} and no report was made before\n"
                    ),
                ),
            }
        }
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "shmring-broker serves GET /metrics only\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics only\n".to_owned(),
        ),
    };
    respond(&stream, WRITE_TIMEOUT, status, content_type, &body)
}

/// Write the response, all of it `within`.
fn respond(
    stream: &TcpStream,
    within: Duration,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut out = Until::within(stream, within);
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod stage_lag_tests {
    use super::*;

    fn consumer(
        index: u32,
        name: &str,
        upstream: &[&str],
        stage_lag: Option<u64>,
    ) -> serde_json::Value {
        serde_json::json!({
            "index": index, "name": name, "pid": 4242, "state": "HEALTHY",
            "required": true, "durable": true, "policy": "alert", "wait": "blocking",
            "parked": false, "sequence": 10, "lag": 4, "idle_ms": 0, "delivered": 10,
            "skipped": 0, "dropped_behind": 0, "wakeups": 0, "net_wakeups": 0, "failures": 0,
            "upstream": upstream, "stage_lag": stage_lag
        })
    }

    /// A status report of one ring `r` with these consumers.
    fn report(consumers: Vec<serde_json::Value>) -> StatusReport {
        serde_json::from_value(serde_json::json!({
            "schema": 1, "namespace": "n", "healthy": true, "unreadable": [],
            "broker": {"running": true, "pid": 1, "epoch": 1, "uptime_ms": 10,
                "last_sweep_ms": 1, "sweep_period_us": 250000, "sweeps": 3,
                "watched_processes": 1},
            "rings": [{"name": "r", "state": "RUNNING", "run": 1, "epoch": 1, "capacity": 64,
                "slot_size": 128, "producer_mode": "multi", "head": 14, "free": 50,
                "closed": false, "slowest": null, "blocked_by": null,
                "fence_mode": "membarrier", "consumer_waiters": 0, "producer_waiters": 0,
                "consumer_wakes": 0, "producer_wakes": 0,
                "health": {"stall_threshold_ms": 500, "unblock_timeout_ms": 1000, "stalls": 0,
                    "recoveries": 0, "deaths": 0, "releases": 0, "freed": 0,
                    "policy_stops": 0, "repaired_claims": 0, "tombstoned": 0},
                "consumers": consumers,
                "producers": []}]
        }))
        .expect("a report")
    }

    /// A scrape while the broker's state is held (a sweep stuck) answers within its wait,
    /// from the last report made, its sweep age counted on; with none made yet, nothing.
    #[test]
    fn a_scrape_while_the_state_is_held_answers_from_the_last_report_aged() {
        let state = Mutex::new(());
        let wait = Duration::from_millis(20);
        let last = LastReport::default();
        let made = report_within(&state, wait, &last, |_| Some(report(vec![])));
        assert_eq!(made.expect("made").broker.last_sweep_ms, Some(1));
        let held = state.lock().expect("the state");
        let aged = report_within(&state, wait, &last, |_| panic!("made while held"))
            .expect("the last report");
        // It waited `wait` for the lock, after the report was made.
        assert!(aged.broker.last_sweep_ms >= Some(21), "{:?}", aged.broker);
        assert!(aged.broker.uptime_ms >= Some(30), "{:?}", aged.broker);
        assert_eq!(aged.rings, report(vec![]).rings);
        let none_yet = LastReport::default();
        assert_eq!(
            report_within(&state, wait, &none_yet, |_| panic!("made while held")),
            None
        );
        drop(held);
    }

    #[test]
    fn the_stage_lag_gauge_is_set_for_dependent_consumers_only() {
        let report = report(vec![
            consumer(0, "journal", &[], None),
            consumer(1, "apply", &["journal"], Some(3)),
        ]);
        let text = encode(&report);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("shmring_consumer_stage_lag_events{"))
            .collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert!(lines[0].contains("consumer=\"apply\""), "{text}");
        assert!(lines[0].ends_with(" 3.0"), "{text}");
    }

    /// A consumer's name is whatever its process chose (up to 48 bytes, any but NUL): a
    /// quote, a backslash or a line break in it is escaped in the label, so the scrape
    /// stays one valid exposition. Before, `bill"v2` made the whole scrape unparseable and
    /// Prometheus dropped the target, every alert on it with it.
    #[test]
    fn a_consumer_name_with_quotes_and_line_breaks_leaves_the_scrape_valid() {
        let name = "bill\"v2\\x\nshmring_forged 1";
        let report = report(vec![consumer(0, name, &[], None)]);
        let text = encode(&report);
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let scrape = prometheus_parse::Scrape::parse(lines.into_iter().map(Ok))
            .unwrap_or_else(|e| panic!("{e}: {text}"));
        let lag: Vec<_> = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "shmring_consumer_lag_events")
            .collect();
        assert_eq!(lag.len(), 1, "{text}");
        assert!(
            text.contains(r#"consumer="bill\"v2\\x\nshmring_forged 1""#),
            "{text}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("shmring_forged")),
            "no line forged by the name: {text}"
        );
    }

    /// Every state a ring reports has its gauge: a ring caught mid stop or start (or whose
    /// stop or start a dead process left half done) reads 1 for STOPPING or STARTING, not 0
    /// for every state.
    #[test]
    fn a_ring_mid_stop_or_start_has_its_state_gauge_set() {
        for state in ["STOPPING", "STARTING"] {
            let mut report = report(vec![]);
            report.rings[0].state = state.to_owned();
            let text = encode(&report);
            let on: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("shmring_ring_state{") && l.ends_with(" 1.0"))
                .collect();
            assert_eq!(on.len(), 1, "{text}");
            assert!(on[0].contains(&format!("state=\"{state}\"")), "{text}");
        }
    }

    /// A worker group member is named after its group and counts what it redelivered.
    #[test]
    fn a_member_is_labelled_with_its_group_and_counts_redeliveries() {
        let mut group = consumer(0, "notify", &[], None);
        group["is_group"] = true.into();
        let mut member = consumer(1, "", &[], None);
        member["group"] = 0.into();
        member["redelivered"] = 2.into();
        let report = report(vec![group, member]);
        let text = encode(&report);
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("shmring_consumer_redelivered_total{") && l.contains("index=\"1\"")
            })
            .unwrap_or_else(|| panic!("no redelivered counter for the member: {text}"));
        assert!(line.contains("consumer=\"notify#1\""), "{line}");
        assert!(line.ends_with(" 2"), "{line}");
    }
}
