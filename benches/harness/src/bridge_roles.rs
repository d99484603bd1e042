//! The role processes of the `bridge` suite (built with the harness's `bridge` feature).
//!
//! - `zb-pub` / `zb-sub`: the floor, bare Zenoh publish-subscribe between two processes
//!   over TCP on loopback, the payload handed to a subscriber callback.
//! - `br-export` / `br-import`: the bridge's own exporter and importer
//!   (`shmring_bridge::{export, import}::run`), until the driver says it is done.
//! - `br-drive`: a producer thread on ring A and a consumer of ring B in one process, so
//!   that one clock stamps both ends: export -> Zenoh over loopback -> import between them.
//!
//! Every message carries its intended send time (`Pacer`) or its send time in the first 8
//! bytes; the receiving side subtracts it from its own `CLOCK_MONOTONIC` on arrival.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use shmring::{ConsumerOptions, Ring};
use shmring_bridge::export::{self, ExportArgs};
use shmring_bridge::import::{self, ImportArgs};
use shmring_bridge::link::LinkArgs;
use shmring_bridge::{Bridged, Mode};
use shmring_peers::kit::{self, new_hist, now_ns, Args, Measured, Pacer};
use zenoh::qos::CongestionControl;
use zenoh::Wait;

/// The key every role of one measurement uses (ports differ per measurement).
const KEY: &str = "ipcb/bridge";
/// First word of a stream's end marker (floor) and of a driver's probe events.
const MARK: u64 = u64::MAX;
/// How long a role waits for the other side to show up.
const SETUP: Duration = Duration::from_secs(30);

/// Run role `role`, if it is one of this module's.
pub fn run_role(role: &str, args: &Args) -> Option<Result<()>> {
    Some(match role {
        "zb-pub" => zb_pub(args),
        "zb-sub" => zb_sub(args),
        "br-export" => br_export(args),
        "br-import" => br_import(args),
        "br-drive" => br_drive(args),
        _ => return None,
    })
}

fn link(args: &Args, listen: bool) -> Result<LinkArgs> {
    let ep = format!("tcp/127.0.0.1:{}", args.num::<u16>("port")?);
    Ok(if listen {
        LinkArgs {
            listen: vec![ep],
            ..LinkArgs::default()
        }
    } else {
        LinkArgs {
            connect: vec![ep],
            zenoh_set: vec![
                "connect/retry={period_init_ms:20,period_max_ms:100,period_increase_factor:2}"
                    .into(),
            ],
            ..LinkArgs::default()
        }
    })
}

fn stamp(buf: &mut [u8], v: u64) {
    buf[..8].copy_from_slice(&v.to_le_bytes());
}

fn read_stamp(b: &[u8]) -> Option<u64> {
    b.get(..8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
}

/// Floor sender: paced (`mode=latency`) or back-to-back for `duration_ns` (`mode=stream`).
fn zb_pub(args: &Args) -> Result<()> {
    let ctl = args.ctl()?;
    let size: usize = args.num("size")?;
    let session = link(args, true)?.open()?;
    let publisher = session
        .declare_publisher(format!("{KEY}/floor"))
        .congestion_control(CongestionControl::Block)
        .wait()
        .map_err(|e| anyhow!("declare publisher: {e}"))?;
    let matched = kit::wait_for(
        || {
            publisher
                .matching_status()
                .wait()
                .is_ok_and(|s| s.matching())
        },
        SETUP,
    );
    if !matched {
        bail!("no subscriber matched within {SETUP:?}");
    }
    ctl.arrive();
    ctl.wait_gate(SETUP)?;
    args.pin();
    let mut buf = vec![0u8; size.max(8)];
    let mut m = Measured::default();
    if args.str("mode")? == "latency" {
        let total = args.num::<u64>("count")? + args.num::<u64>("warmup")?;
        let mut pacer = Pacer::new(Duration::from_nanos(args.num("interval_ns")?));
        for i in 0..total {
            stamp(&mut buf, pacer.wait(i));
            publisher
                .put(buf.clone())
                .wait()
                .map_err(|e| anyhow!("put: {e}"))?;
        }
        m.set("published", total as f64);
    } else {
        let dur: u64 = args.num("duration_ns")?;
        let t0 = now_ns();
        let mut n = 0u64;
        while now_ns() - t0 < dur {
            stamp(&mut buf, now_ns());
            publisher
                .put(buf.clone())
                .wait()
                .map_err(|e| anyhow!("put: {e}"))?;
            n += 1;
        }
        let mut end = [0u8; 16];
        stamp(&mut end, MARK);
        end[8..].copy_from_slice(&n.to_le_bytes());
        publisher
            .put(end.to_vec())
            .wait()
            .map_err(|e| anyhow!("put: {e}"))?;
        m.set("published", n as f64).set("t_start", t0 as f64);
    }
    // Close only after the subscriber has everything: queued messages die with the session.
    kit::wait_for(|| ctl.done().load(Ordering::Acquire) >= 1, SETUP);
    drop(publisher);
    let _ = session.close().wait();
    kit::report(args, &m)
}

#[derive(Default)]
struct SubState {
    seen: u64,
    hist: Option<hdrhistogram::Histogram<u64>>,
    published: Option<u64>,
    t_end: u64,
}

/// Floor receiver: records each paced message's one-way latency, or counts a stream.
fn zb_sub(args: &Args) -> Result<()> {
    let ctl = args.ctl()?;
    let latency = args.str("mode")? == "latency";
    let warmup: u64 = args.num_or("warmup", 0);
    let total = args.num_or::<u64>("count", 0) + warmup;
    let session = link(args, false)?.open()?;
    let state = Arc::new(Mutex::new(SubState {
        hist: Some(new_hist()),
        ..SubState::default()
    }));
    let done = Arc::new(AtomicBool::new(false));
    let (st, dn) = (state.clone(), done.clone());
    let _sub = session
        .declare_subscriber(format!("{KEY}/floor"))
        .callback(move |sample| {
            let now = now_ns();
            let bytes = sample.payload().to_bytes();
            let mut s = st.lock().unwrap_or_else(|e| e.into_inner());
            let Some(t) = read_stamp(&bytes) else { return };
            if latency {
                if s.seen >= warmup {
                    if let Some(h) = s.hist.as_mut() {
                        let _ = h.record(now.saturating_sub(t).max(1));
                    }
                }
                s.seen += 1;
                if s.seen >= total {
                    dn.store(true, Ordering::Release);
                }
            } else if t == MARK && bytes.len() == 16 {
                s.published = read_stamp(&bytes[8..]);
                s.t_end = now;
                dn.store(true, Ordering::Release);
            } else {
                s.seen += 1;
            }
        })
        .wait()
        .map_err(|e| anyhow!("declare subscriber: {e}"))?;
    ctl.arrive();
    ctl.wait_gate(SETUP)?;
    let limit = SETUP + Duration::from_nanos(args.num_or("duration_ns", 0)) * 4;
    let finished = kit::wait_for(|| done.load(Ordering::Acquire), limit);
    ctl.done().fetch_add(1, Ordering::Release);
    if !finished {
        bail!("the floor's subscriber did not get every message within {limit:?}");
    }
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = Measured::default();
    if latency {
        m.hist = s.hist.take();
    } else {
        m.set("delivered", s.seen as f64)
            .set("t_end", s.t_end as f64);
        if let Some(p) = s.published {
            m.set("published_marker", p as f64);
        }
    }
    drop(s);
    kit::report(args, &m)
}

/// Run a bridge side until the driver is done; `f` gets the stop flag.
fn until_done(args: &Args, f: impl FnOnce(&AtomicBool) -> Result<Measured>) -> Result<()> {
    let ctl = args.ctl()?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = stop.clone();
        let path = std::path::PathBuf::from(args.str("ctl")?);
        std::thread::spawn(move || {
            if let Ok(ctl) = kit::Ctl::open(&path) {
                // Far longer than any measurement: the harness's own watchdog ends first.
                kit::wait_for(
                    || ctl.done().load(Ordering::Acquire) >= 1,
                    Duration::from_secs(3600),
                );
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    ctl.arrive();
    let m = f(&stop)?;
    let _ = watcher.join();
    kit::report(args, &m)
}

fn br_export(args: &Args) -> Result<()> {
    let ea = ExportArgs {
        ring: args.str("ring")?.to_owned(),
        key: KEY.to_owned(),
        namespace: Some(args.str("ns")?.to_owned()),
        mode: Mode::Reliable,
        name: None,
        batch_events: 256,
        batch_bytes: export::DEFAULT_BATCH_BYTES,
        ack_timeout_ms: 1000,
        heartbeat_ms: 100,
        stats_ms: 0,
        link: link(args, true)?,
    };
    until_done(args, |stop| {
        let s = export::run(&ea, stop)?;
        let mut m = Measured::default();
        m.set("events_sent", s.events_sent as f64)
            .set("batches_sent", s.batches_sent as f64)
            .set("replays", s.replays as f64);
        Ok(m)
    })
}

fn br_import(args: &Args) -> Result<()> {
    let ia = ImportArgs {
        key: KEY.to_owned(),
        ring: args.str("ring")?.to_owned(),
        namespace: Some(args.str("ns")?.to_owned()),
        heartbeat_ms: 100,
        resend_ms: 200,
        stats_ms: 0,
        max_sources: 1024,
        ack_quiet_ms: 10_000,
        forget_after_ms: 3_600_000,
        link: link(args, false)?,
    };
    until_done(args, |stop| {
        let s = import::run(&ia, stop)?;
        let mut m = Measured::default();
        m.set("imported", s.published as f64)
            .set("duplicates", s.duplicates as f64)
            .set("batches_received", s.batches_received as f64);
        Ok(m)
    })
}

/// Producer on ring A (a thread) and consumer of ring B (this thread).
fn br_drive(args: &Args) -> Result<()> {
    let ctl = args.ctl()?;
    let ns = args.str("ns")?;
    let a = Ring::open(ns, args.str("ring_a")?).context("open ring A")?;
    let b = Ring::open(ns, args.str("ring_b")?).context("open ring B")?;
    let size: usize = args.num("size")?;
    let latency = args.str("mode")? == "latency";
    let mut producer = a.producer()?;
    let mut consumer = b.consumer(ConsumerOptions::anonymous().batch_cap(256))?;
    ctl.arrive();
    ctl.wait_gate(SETUP)?;

    // Readiness by condition: publish probes until one comes out of B (the exporter may
    // not have attached yet, and a probe published before it attached is not carried).
    let mut buf = vec![0u8; size.max(8)];
    stamp(&mut buf, MARK);
    let setup_end = Instant::now() + SETUP;
    let mut through = false;
    while !through {
        if Instant::now() > setup_end {
            bail!("no probe came through the bridge within {SETUP:?}");
        }
        producer.publish(&buf)?;
        let probe_end = Instant::now() + Duration::from_millis(200);
        while !through && Instant::now() < probe_end {
            if consumer.poll_once(|_| through = true)? == 0 {
                std::thread::yield_now();
            }
        }
    }

    let published = Arc::new(AtomicU64::new(0));
    let producing = Arc::new(AtomicBool::new(true));
    let total = args.num::<u64>("count").unwrap_or(0) + args.num::<u64>("warmup").unwrap_or(0);
    let interval = Duration::from_nanos(args.num_or("interval_ns", 0));
    let dur: u64 = args.num_or("duration_ns", 0);
    let t_start = now_ns();
    let producer_thread = {
        let (published, producing) = (published.clone(), producing.clone());
        std::thread::spawn(move || -> Result<()> {
            let mut buf = vec![0u8; size.max(8)];
            if latency {
                let mut pacer = Pacer::new(interval);
                for i in 0..total {
                    stamp(&mut buf, pacer.wait(i));
                    producer.publish(&buf)?;
                    published.store(i + 1, Ordering::Release);
                }
            } else {
                let mut n = 0;
                while now_ns() - t_start < dur {
                    stamp(&mut buf, now_ns());
                    producer.publish(&buf)?;
                    n += 1;
                    published.store(n, Ordering::Release);
                }
            }
            producing.store(false, Ordering::Release);
            Ok(())
        })
    };

    let warmup: u64 = args.num_or("warmup", 0);
    let mut hist = new_hist();
    let mut seen = 0u64;
    let mut t_end = 0u64;
    let limit = Instant::now() + SETUP + interval * total as u32 + Duration::from_nanos(dur) * 20;
    loop {
        let n = consumer.poll_once(|ev| {
            let now = now_ns();
            let Some(t) = Bridged::parse(ev.bytes()).and_then(|b| read_stamp(b.payload)) else {
                return;
            };
            if t == MARK {
                return; // a late probe
            }
            if latency && seen >= warmup {
                let _ = hist.record(now.saturating_sub(t).max(1));
            }
            seen += 1;
            t_end = now;
        })?;
        // Acquire: pairs with the producer thread's Release stores.
        let done = !producing.load(Ordering::Acquire) && seen >= published.load(Ordering::Acquire);
        if done {
            break;
        }
        if Instant::now() > limit {
            bail!(
                "only {seen} of {} events came through",
                published.load(Ordering::Acquire)
            );
        }
        if n == 0 {
            std::hint::spin_loop();
        }
    }
    ctl.done().fetch_add(1, Ordering::Release);
    producer_thread
        .join()
        .map_err(|_| anyhow!("producer thread panicked"))??;
    let mut m = Measured::default();
    let p = published.load(Ordering::Acquire);
    if latency {
        m.hist = Some(hist);
    } else {
        let secs = (t_end.saturating_sub(t_start)).max(1) as f64 / 1e9;
        m.set("ops_per_sec", seen as f64 / secs);
    }
    m.set("published", p as f64).set("delivered", seen as f64);
    kit::report(args, &m)
}
