//! Suite `pipeline`: the order pipeline at this machine's scale, as a graph on one ring beside
//! the same stages as separate rings, measured in one run.
//!
//! Four producer processes publish 1 KiB events, each stamped with its publish time
//! (`CLOCK_MONOTONIC`, one clock for every process), into:
//!
//! - **diamond, one ring**: `journal` and `risk` read every event in parallel, `matching`
//!   reads an event once both have committed it (`ConsumerOptions::after`). No event is
//!   copied between stages.
//! - **separate rings** (the same-run baseline): `journal` reads ring 1 and republishes each
//!   event into ring 2, `risk` reads ring 2 and republishes into ring 3, `matching` reads ring
//!   3: the pipeline a user builds without dependencies, one copy per stage.
//!
//! Each stage reports its end-to-end latency (producer's publish to the stage's handler) and
//! its delivered events per second (first publish to its last event). On 2 cores the seven
//! processes share two CPUs, so the consumers use the default Adaptive strategy; the numbers
//! are what time-sharing gives, and the comparison is between the two shapes in one run.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use shmring::{AttachError, ConsumerOptions, Event, ProducerMode, Ring, RingConfig};
use shmring_peers::kit::{self, new_hist, now_ns, Args, Measured};

use crate::roles::{cpu_share, strategy};
use crate::row::{Kind, Row};
use crate::run::Ctx;
use crate::shm::kv;

pub const SUITE: &str = "pipeline";
const LATENCY: &str =
    "pipeline: per-stage latency, producer publish -> stage handler (4 producers, 1 KiB events)";
const THROUGHPUT: &str = "per-stage delivered events/s (4 producers, 1 KiB events)";
const PRODUCERS: usize = 4;
const EVENT: usize = 1024;
/// The stages, in graph order.
const STAGES: [&str; 3] = ["journal", "risk", "matching"];

/// Rows this suite adds: latency and throughput per stage, per shape.
pub fn rows() -> u64 {
    2 * 2 * STAGES.len() as u64
}

/// Measure both shapes.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for diamond in [true, false] {
        let shape = if diamond {
            "diamond, one ring"
        } else {
            "separate rings"
        };
        ctx.bar.set_message(format!("pipeline: {shape}"));
        match measure(ctx, diamond) {
            Ok(stages) => {
                let published = stages.published;
                for (stage, m) in STAGES.iter().zip(&stages.stages) {
                    let name = format!("{shape}: {stage}");
                    let mut lat = Row::new(SUITE, LATENCY, &name, Kind::Latency).with(m);
                    lat.consumer_cpu = m.get("cpu_share");
                    ctx.push(lat);
                    let mut tput = Row::new(SUITE, THROUGHPUT, &name, Kind::Throughput);
                    let delivered = m.get("delivered").unwrap_or(0.0);
                    let secs = (m.get("t_end").unwrap_or(0.0) - stages.t_start) / 1e9;
                    if secs > 0.0 {
                        tput.ops_per_sec = Some(delivered / secs);
                    }
                    tput.published = Some(published);
                    tput.delivered = Some(delivered as u64);
                    tput.dropped = Some(published.saturating_sub(delivered as u64));
                    tput.samples = delivered as u64;
                    tput.consumer_cpu = m.get("cpu_share");
                    tput.producer_cpu = stages.producer_cpu;
                    tput.extra.insert("event_bytes".into(), EVENT as f64);
                    tput.extra.insert("producers".into(), PRODUCERS as f64);
                    ctx.push(tput);
                }
            }
            Err(e) => {
                for stage in STAGES {
                    let name = format!("{shape}: {stage}");
                    ctx.push(Row::new(SUITE, LATENCY, &name, Kind::Latency).failed(&e));
                    ctx.push(Row::new(SUITE, THROUGHPUT, &name, Kind::Throughput).failed(&e));
                }
            }
        }
    }
    Ok(())
}

/// What one shape measured.
struct Stages {
    stages: Vec<Measured>,
    published: u64,
    t_start: f64,
    producer_cpu: Option<f64>,
}

fn create(ctx: &mut Ctx, declared: &[&str], mode: ProducerMode) -> Result<String> {
    let name = ctx.tag("ring");
    Ring::create(
        &ctx.namespace,
        &name,
        &RingConfig {
            capacity: 1024,
            // The slot header (16 bytes) and 1 KiB, in whole 64-byte lines.
            slot_size: (16 + EVENT).div_ceil(64) as u32 * 64,
            max_consumers: 8,
            max_producers: PRODUCERS as u32,
            producer_mode: mode,
            declared: declared.iter().map(|s| s.to_string()).collect(),
            ..RingConfig::default()
        },
    )
    .with_context(|| format!("create ring {name}"))?;
    Ok(name)
}

fn measure(ctx: &mut Ctx, diamond: bool) -> Result<Stages> {
    let count: u64 = if ctx.sizes.throughput < Duration::from_millis(500) {
        5_000
    } else {
        100_000
    };
    // Diamond: one ring whose three stages are declared, so each attaches in any order.
    // Separate rings: ring i feeds stage i, and stages 0 and 1 republish into ring i + 1.
    let rings: Vec<String> = if diamond {
        vec![create(ctx, &STAGES, ProducerMode::Multi)?]
    } else {
        vec![
            create(ctx, &STAGES[..1], ProducerMode::Multi)?,
            create(ctx, &STAGES[1..2], ProducerMode::Single)?,
            create(ctx, &STAGES[2..], ProducerMode::Single)?,
        ]
    };
    let result = (|| {
        let (mut roles, _ctl, ctl_path) = ctx.roles("pipe")?;
        let common = |ring: &str| {
            vec![
                kv("ns", &ctx.namespace),
                kv("ring", ring),
                kv("ctl", ctl_path.display()),
                kv("consumers", STAGES.len()),
                kv("producers", PRODUCERS),
            ]
        };
        for (i, stage) in STAGES.iter().enumerate() {
            let mut a = if diamond {
                common(&rings[0])
            } else {
                common(&rings[i])
            };
            a.extend([kv("name", stage), kv("wait", "adaptive")]);
            if diamond && *stage == "matching" {
                a.push(kv("after", "journal+risk"));
            }
            if !diamond && i + 1 < STAGES.len() {
                a.push(kv("relay", &rings[i + 1]));
            }
            roles.spawn("pipe-stage", &a)?;
        }
        for _ in 0..PRODUCERS {
            let mut a = common(&rings[0]);
            a.extend([
                kv("mode", "stream"),
                kv("count", count),
                kv("size", EVENT),
                kv("stamp", 1),
            ]);
            roles.spawn("shm-producer", &a)?;
        }
        let timeout =
            Duration::from_secs(60) + Duration::from_micros(count * PRODUCERS as u64 * 20);
        let mut all = roles.finish(timeout)?;
        let _ = std::fs::remove_file(&ctl_path);
        let producers = all.split_off(STAGES.len());
        let published = producers
            .iter()
            .map(|m| m.need("published"))
            .sum::<Result<f64>>()? as u64;
        let t_start = producers
            .iter()
            .filter_map(|m| m.get("t_start"))
            .fold(f64::MAX, f64::min);
        if published != count * PRODUCERS as u64 {
            bail!("published {published} of {}", count * PRODUCERS as u64);
        }
        for (stage, m) in STAGES.iter().zip(&all) {
            let delivered = m.need("delivered")? as u64;
            if delivered != published {
                bail!("{stage} delivered {delivered} of {published}");
            }
        }
        Ok(Stages {
            stages: all,
            published,
            t_start,
            producer_cpu: producers[0].get("cpu_share"),
        })
    })();
    for r in &rings {
        ctx.drop_ring(r);
    }
    result
}

/// Attach as a durable consumer, with `after` upstreams: retried while an upstream is not
/// there yet (the separate-rings shape declares nothing it depends on), bounded.
fn attach(ring: &Ring, options: ConsumerOptions) -> Result<shmring::Consumer> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match ring.consumer(options.clone()) {
            Err(AttachError::UnknownUpstream { .. }) if std::time::Instant::now() < deadline => {
                std::thread::yield_now()
            }
            other => return other.map_err(|e| anyhow!("attach: {e}")),
        }
    }
}

/// Role `pipe-stage`: one stage. Records each event's publish-to-handler latency; with
/// `relay=RING` republishes the event there, and closes that ring once its own is drained.
fn pipe_stage(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let ns = args.str("ns")?;
    let ring = Ring::open(ns, args.str("ring")?)?;
    let mut options =
        ConsumerOptions::durable(args.str("name")?).wait(strategy(args.str("wait")?)?);
    if let Ok(after) = args.str("after") {
        options = options.after(after.split('+'));
    }
    let mut consumer = attach(&ring, options)?;
    let relay = match args.str("relay") {
        Ok(name) => Some(Ring::open(ns, name)?),
        Err(_) => None,
    };
    let mut out = match &relay {
        Some(r) => Some(r.producer()?),
        None => None,
    };
    let mut hist = new_hist();
    let mut n = 0u64;
    let mut failed = None;
    let (c0, w0) = (kit::thread_cpu_ns(), now_ns());
    ctl.arrive();
    consumer.run(
        |ev: Event<'_>| {
            let b = ev.bytes();
            let sent = b
                .get(8..16)
                .and_then(|s| s.try_into().ok())
                .map_or(0, u64::from_ne_bytes);
            hist.saturating_record(now_ns().saturating_sub(sent).max(1));
            n += 1;
            if let Some(p) = out.as_mut() {
                if let Err(e) = p.publish(b) {
                    failed.get_or_insert(e);
                }
            }
        },
        || false,
    )?;
    let t_end = now_ns();
    if let Some(e) = failed {
        bail!("relay publish failed: {e}");
    }
    if let Some(r) = &relay {
        r.stop().map_err(|e| anyhow!("stop the relay ring: {e}"))?;
    }
    let mut m = Measured {
        hist: Some(hist),
        ..Measured::default()
    };
    m.set("cpu_share", cpu_share(c0, w0))
        .set("delivered", n as f64)
        .set("t_end", t_end as f64);
    kit::report(args, &m)
}

/// Run a pipeline role, if `role` is one.
pub fn run_role(role: &str, args: &Args) -> Option<Result<()>> {
    Some(match role {
        "pipe-stage" => pipe_stage(args),
        _ => return None,
    })
}
