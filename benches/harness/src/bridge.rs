//! Suite `bridge`: what carrying a ring over Zenoh costs, against bare Zenoh in the same run.
//!
//! Each bridge row runs four parties in three processes: a driver (a producer thread on
//! ring A and a consumer of ring B, so one clock stamps both ends), the exporter and the
//! importer (`shmring-bridge`'s own code), linked by Zenoh over TCP on 127.0.0.1. Its floor
//! is bare Zenoh publish-subscribe between two processes with the same payloads, over the
//! same kind of link: the ratio is the bridge's own cost (two ring hops, batching, the
//! header, the acknowledgements, one more process on the path).
//!
//! - latency: paced one message per millisecond, one-way from the intended send time,
//!   8 B and 1 KiB payloads;
//! - throughput: back-to-back for the run's throughput duration, delivered events/s,
//!   8 B and 1 KiB payloads (the bridge in reliable mode: nothing is dropped, so the
//!   producer runs at the pace the far side confirms).
//!
//! Built with the harness's `bridge` feature (it pulls in Zenoh); without it the rows say so.

use std::time::Duration;

use anyhow::Result;

#[cfg(feature = "bridge")]
use shmring::ProducerMode;
#[cfg(feature = "bridge")]
use shmring_peers::kit::Measured;

use crate::row::{Kind, Row};
use crate::run::Ctx;

pub const SUITE: &str = "bridge";
pub const LATENCY: &str = "paced 1 ms, one-way over TCP loopback (from the intended send time)";
pub const THROUGHPUT: &str = "back-to-back, delivered events/s over TCP loopback";

/// Payload sizes.
pub const SIZES: [usize; 2] = [8, 1024];
/// Gap between paced messages: Zenoh's round trip on loopback is tens of µs, so a 100 µs
/// pace would measure queueing, not the hand-off.
#[cfg_attr(not(feature = "bridge"), allow(dead_code))]
pub const PACE: Duration = Duration::from_millis(1);

/// Row names.
pub fn floor_name(size: usize) -> String {
    format!("bare zenoh pub/sub, {size} B")
}
/// Row names.
pub fn bridge_name(size: usize) -> String {
    format!("ring -> export -> zenoh -> import -> ring, {size} B")
}

/// Rows this suite adds.
pub fn rows() -> u64 {
    (SIZES.len() * 4) as u64
}

#[cfg(not(feature = "bridge"))]
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for (group, kind) in [(LATENCY, Kind::Latency), (THROUGHPUT, Kind::Throughput)] {
        for size in SIZES {
            for name in [floor_name(size), bridge_name(size)] {
                let mut r = Row::new(SUITE, group, &name, kind);
                r.error = Some("not built: rebuild the harness with `--features bridge`".into());
                ctx.push(r);
            }
        }
    }
    Ok(())
}

/// Measure.
#[cfg(feature = "bridge")]
pub fn run(ctx: &mut Ctx) -> Result<()> {
    let count = ctx.sizes.paced.min(5_000);
    let warmup = ctx.sizes.warmup.min(1_000);
    for size in SIZES {
        ctx.bar
            .set_message(format!("bridge: floor latency {size} B"));
        let floor = floor(ctx, size, true, count, warmup);
        let floor_row = finish(
            Row::new(SUITE, LATENCY, &floor_name(size), Kind::Latency),
            floor,
        );
        ctx.bar.set_message(format!("bridge: latency {size} B"));
        let m = bridged(ctx, size, true, count, warmup);
        let mut row = finish(
            Row::new(SUITE, LATENCY, &bridge_name(size), Kind::Latency),
            m,
        );
        if floor_row.error.is_none() {
            row.against(&floor_row);
        }
        ctx.push(floor_row);
        ctx.push(row);
    }
    for size in SIZES {
        ctx.bar
            .set_message(format!("bridge: floor throughput {size} B"));
        let floor = floor(ctx, size, false, 0, 0);
        let floor_row = finish(
            Row::new(SUITE, THROUGHPUT, &floor_name(size), Kind::Throughput),
            floor,
        );
        ctx.bar.set_message(format!("bridge: throughput {size} B"));
        let m = bridged(ctx, size, false, 0, 0);
        let mut row = finish(
            Row::new(SUITE, THROUGHPUT, &bridge_name(size), Kind::Throughput),
            m,
        );
        if let (Some(a), Some(b)) = (row.ops_per_sec, floor_row.ops_per_sec) {
            row.floor = Some(floor_row.name.clone());
            row.extra.insert("x_floor_rate".into(), a / b.max(1.0));
        }
        ctx.push(floor_row);
        ctx.push(row);
    }
    Ok(())
}

#[cfg(feature = "bridge")]
fn finish(row: Row, m: Result<Measured>) -> Row {
    match m {
        Ok(m) => row.with(&m),
        Err(e) => row.failed(&e),
    }
}

#[cfg(feature = "bridge")]
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

#[cfg(feature = "bridge")]
fn common(ctx: &Ctx, size: usize, latency: bool, count: u64, warmup: u64) -> Vec<String> {
    let mut a = vec![format!("size={size}")];
    if latency {
        a.extend([
            "mode=latency".to_owned(),
            format!("count={count}"),
            format!("warmup={warmup}"),
            format!("interval_ns={}", PACE.as_nanos()),
        ]);
    } else {
        a.extend([
            "mode=stream".to_owned(),
            format!("duration_ns={}", ctx.sizes.throughput.as_nanos()),
        ]);
    }
    a
}

#[cfg(feature = "bridge")]
fn timeout(ctx: &Ctx, latency: bool, count: u64) -> Duration {
    if latency {
        ctx.timeout(count, PACE) + Duration::from_secs(30)
    } else {
        ctx.sizes.throughput * 20 + Duration::from_secs(60)
    }
}

/// Bare Zenoh between two processes.
#[cfg(feature = "bridge")]
fn floor(ctx: &mut Ctx, size: usize, latency: bool, count: u64, warmup: u64) -> Result<Measured> {
    let port = free_port()?;
    let (mut roles, ctl, path) = ctx.roles("zb")?;
    let mut a = common(ctx, size, latency, count, warmup);
    a.extend([format!("port={port}"), format!("ctl={}", path.display())]);
    let mut pub_args = a.clone();
    pub_args.extend(ctx.cpu(0));
    let mut sub_args = a;
    sub_args.extend(ctx.cpu(1));
    roles.spawn("zb-pub", &pub_args)?;
    roles.spawn("zb-sub", &sub_args)?;
    let limit = timeout(ctx, latency, count);
    ctl.wait_ready(2, limit)?;
    ctl.open_gate();
    let ms = roles.finish(limit)?;
    let (p, s) = (&ms[0], &ms[1]);
    let mut m = Measured {
        hist: s.hist.clone(),
        ..Measured::default()
    };
    if !latency {
        let published = p.need("published")?;
        let delivered = s.need("delivered")?;
        let secs = (s.need("t_end")? - p.need("t_start")?).max(1.0) / 1e9;
        m.set("published", published)
            .set("delivered", delivered)
            .set("ops_per_sec", delivered / secs);
    }
    Ok(m)
}

/// Ring A -> exporter -> Zenoh -> importer -> ring B.
#[cfg(feature = "bridge")]
fn bridged(ctx: &mut Ctx, size: usize, latency: bool, count: u64, warmup: u64) -> Result<Measured> {
    use shmring_bridge::header::HEADER_LEN;
    let port = free_port()?;
    let slot = |payload: usize| (16 + payload).div_ceil(64) as u32 * 64;
    let (ring_a, _a) = ctx.ring(4096, slot(size), ProducerMode::Single)?;
    let (ring_b, _b) = ctx.ring(4096, slot(size + HEADER_LEN), ProducerMode::Single)?;
    let (mut roles, ctl, path) = ctx.roles("br")?;
    let base = [
        format!("ns={}", ctx.namespace),
        format!("port={port}"),
        format!("ctl={}", path.display()),
    ];
    let mut ex = base.to_vec();
    ex.push(format!("ring={ring_a}"));
    let mut im = base.to_vec();
    im.push(format!("ring={ring_b}"));
    let mut drive = base.to_vec();
    drive.extend(common(ctx, size, latency, count, warmup));
    drive.extend([format!("ring_a={ring_a}"), format!("ring_b={ring_b}")]);
    roles.spawn("br-export", &ex)?;
    roles.spawn("br-import", &im)?;
    roles.spawn("br-drive", &drive)?;
    let limit = timeout(ctx, latency, count);
    let result = ctl.wait_ready(3, limit).and_then(|()| {
        ctl.open_gate();
        roles.finish(limit)
    });
    ctx.drop_ring(&ring_a);
    ctx.drop_ring(&ring_b);
    let ms = result?;
    let (e, i, d) = (&ms[0], &ms[1], &ms[2]);
    let mut m = d.clone();
    for (k, v) in [
        ("replays", e.get("replays")),
        ("batches", e.get("batches_sent")),
        ("duplicates", i.get("duplicates")),
    ] {
        if let Some(v) = v {
            m.set(k, v);
        }
    }
    if let (Some(ev), Some(b)) = (e.get("events_sent"), e.get("batches_sent")) {
        m.set("events_per_batch", ev / b.max(1.0));
    }
    Ok(m)
}
