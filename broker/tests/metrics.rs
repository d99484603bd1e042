//! `broker run --metrics-listen`: scraped over HTTP on 127.0.0.1 and parsed as the
//! Prometheus text format, with values checked against what the rings hold.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{get, metrics_address, ring, BrokerNs, Namespace};
use prometheus_parse::{Scrape, Value};
use shmring::{ConsumerOptions, Ring};

#[test]
fn role() {
    common::roles::run_if_child();
}

fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let s = scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no sample {metric} {labels:?}"));
    match s.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
        _ => panic!("{metric} is not a plain number"),
    }
}

#[test]
fn metrics_are_scraped_over_http_and_parse_with_the_right_values() {
    let ns = Namespace::new("metrics");
    let path = ns.config("[rings.m]\ncapacity = 64\n");
    let broker = ns.broker_with(Some(&path), &["--metrics-listen", "127.0.0.1:0"]);
    let addr = metrics_address(&broker);

    let r = Ring::open(ns.name(), "m").expect("open");
    let mut reader = r
        .consumer(ConsumerOptions::durable("reader"))
        .expect("consumer");
    // Reads behind "reader": its stage lag is exported.
    let mut behind = r
        .consumer(
            ConsumerOptions::durable("behind")
                .optional()
                .after(["reader"]),
        )
        .expect("a consumer after reader");
    let mut producer = r.producer().expect("producer");
    for i in 0..10u64 {
        producer.publish(&i.to_le_bytes()).expect("publish");
    }
    let mut got = 0;
    while got < 4 {
        got += reader.poll_once(|_| {}).expect("poll");
        if got >= 4 {
            break;
        }
    }
    // It reads all "reader" let through (up to where reader is).
    while behind.next_sequence() < got as u64 {
        behind.poll_once(|_| {}).expect("poll behind");
    }
    // Wait for a sweep that saw all of it (the metrics are the last sweep's report).
    ns.wait_status("the sweep to see the publishes", |v, _| {
        let m = ring(v, "m")?;
        let c = common::consumer(v, "m", "reader")?;
        (common::num(m, "head") == 10 && common::num(c, "delivered") == got as u64).then_some(())
    });

    let (status, body) = get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    let scrape = Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).expect("parses");
    let ring_l = [("ring", "m")];
    let reader_l = [("ring", "m"), ("consumer", "reader")];
    assert_eq!(value(&scrape, "shmring_ring_head", &ring_l), 10.0);
    assert_eq!(value(&scrape, "shmring_ring_capacity_slots", &ring_l), 64.0);
    assert_eq!(
        value(&scrape, "shmring_ring_free_slots", &ring_l),
        64.0 - 10.0 + got as f64
    );
    assert_eq!(
        value(&scrape, "shmring_consumer_delivered_total", &reader_l),
        got as f64
    );
    assert_eq!(
        value(&scrape, "shmring_consumer_lag_events", &reader_l),
        10.0 - got as f64
    );
    assert_eq!(
        value(
            &scrape,
            "shmring_consumer_stage_lag_events",
            &[("ring", "m"), ("consumer", "behind")]
        ),
        0.0
    );
    for (metric, v) in [
        ("shmring_consumer_dead_lettered_total", 0.0),
        ("shmring_consumer_retries_total", 0.0),
        ("shmring_consumer_poison_attempts", 0.0),
    ] {
        assert_eq!(value(&scrape, metric, &reader_l), v, "{metric}");
    }
    assert_eq!(
        value(
            &scrape,
            "shmring_consumer_state",
            &[("consumer", "reader"), ("state", "HEALTHY")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &scrape,
            "shmring_consumer_state",
            &[("consumer", "reader"), ("state", "DEAD")]
        ),
        0.0
    );
    assert_eq!(
        value(&scrape, "shmring_producer_published_total", &ring_l),
        10.0
    );
    assert_eq!(
        value(
            &scrape,
            "shmring_ring_state",
            &[("ring", "m"), ("state", "RUNNING")]
        ),
        1.0
    );
    assert_eq!(value(&scrape, "shmring_broker_epoch", &[]), 1.0);
    assert_eq!(value(&scrape, "shmring_healthy", &[]), 1.0);
    assert!(value(&scrape, "shmring_broker_sweeps_total", &[]) >= 1.0);
    assert!(value(&scrape, "shmring_broker_last_sweep_duration_seconds", &[]) > 0.0);
    // Conventions: counters end in _total, and every sample has a HELP text.
    for s in &scrape.samples {
        let base = s.metric.trim_end_matches("_total");
        assert!(s.metric.starts_with("shmring_"), "{}", s.metric);
        assert!(
            scrape.docs.contains_key(base) || scrape.docs.contains_key(&s.metric),
            "{} has no HELP",
            s.metric
        );
    }
    assert!(
        body.contains("# TYPE shmring_consumer_delivered counter"),
        "{body}"
    );

    // Every metric the shipped dashboard and docs query exists.
    for doc in ["grafana-dashboard.json", "METRICS.md"] {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/").to_owned() + doc;
        let text = std::fs::read_to_string(&path).expect("docs");
        for name in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if name.starts_with("shmring_") && !name.ends_with('_') {
                assert!(
                    body.contains(name),
                    "{doc} uses {name}, which is not exported"
                );
            }
        }
    }

    // The README's sample: each metric is exported, with every label the sample shows.
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let sample = readme
        .split_once("A sample:")
        .and_then(|(_, rest)| rest.split_once("```text"))
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(sample, _)| sample)
        .expect("the README's metrics sample");
    let mut checked = 0;
    for line in sample.lines().filter(|l| !l.trim().is_empty()) {
        let series = line.split(' ').next().unwrap_or(line);
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let keys: Vec<&str> = labels
            .trim_end_matches('}')
            .split(',')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
            .collect();
        let exported = body.lines().any(|l| {
            let (n, rest) = l.split_once(['{', ' ']).unwrap_or((l, ""));
            n == name && keys.iter().all(|k| rest.contains(&format!("{k}=\"")))
        });
        assert!(
            exported,
            "README's sample shows {series}, not exported with those labels:\n{body}"
        );
        checked += 1;
    }
    assert!(
        checked >= 5,
        "the README's sample was not found whole: {sample}"
    );

    let (status, _) = get(&addr, "/other");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    drop((reader, producer));
}

/// A client that sends its request a byte at a time and never finishes it (a stuck or
/// hostile scraper) neither holds up another scrape nor keeps its connection open: the
/// request head has one deadline in all, not one per read.
#[test]
fn a_client_that_trickles_its_request_holds_up_no_scrape() {
    let ns = Namespace::new("metrics_trickle");
    let path = ns.config("[rings.m]\ncapacity = 64\n");
    let broker = ns.broker_with(Some(&path), &["--metrics-listen", "127.0.0.1:0"]);
    let addr = metrics_address(&broker);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut slow = TcpStream::connect(&addr).expect("connect the slow client");
    slow.write_all(b"G").expect("the first byte");
    let trickler = {
        let stop = stop.clone();
        let mut slow = slow.try_clone().expect("clone the socket");
        // One byte every 100 ms, well inside any per-read timeout, until the broker closes
        // the connection or the test says stop (bounded: never past the kit's deadline).
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + common::WAIT;
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && std::time::Instant::now() < until
            {
                // A watchdog pace for the trickle, not a synchronisation sleep.
                std::thread::sleep(std::time::Duration::from_millis(100));
                if slow.write_all(b"E").is_err() {
                    return;
                }
            }
        })
    };
    // Answered while the slow client is still sending (the read times out after the kit's
    // deadline otherwise, and `get` fails).
    let (status, _) = get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    // And the slow client is cut off: its connection reads as closed (an end of file, or a
    // reset if the broker closed it with bytes unread), 2 s after it connected, where it
    // would time out: the trickle goes on for the kit's whole deadline (60 s), far past
    // this read's 20 s.
    slow.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    let closed = slow.read_to_end(&mut Vec::new());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    trickler.join().expect("the trickler");
    assert!(
        closed.is_ok()
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the trickling connection stayed open: {closed:?}"
    );
}

/// A metrics address already in use ends `broker run` at once with exit code 1 and the
/// address named, and leaves no control socket behind for the next start or `status` to
/// find.
#[test]
fn a_metrics_address_in_use_ends_the_start_and_leaves_no_socket() {
    let ns = Namespace::new("metrics_in_use");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address").to_string();
    let out = shmring_testkit::output(
        "broker run",
        std::process::Command::new(common::BIN).args([
            "run",
            "--namespace",
            ns.name(),
            "--metrics-listen",
            &addr,
        ]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(
        !ns.dir().join("broker.sock").exists(),
        "the control socket is left: {stderr}"
    );
    let (_, code) = ns.status();
    assert_eq!(code, 2, "no broker runs, and status says so");
}
