//! Suite `peers`: what a user would pick instead, measured the same way in the same run:
//! a pipe, a Unix socket and an eventfd between two processes; the `disruptor` crate and
//! `crossbeam-channel` between two threads (the in-process reference); iceoryx2
//! publish-subscribe between two processes. The heavy ones are built only with the
//! harness's `peers` feature; without it their rows say so.

use anyhow::Result;
use shmring_peers::kernel::{self, Kind as KernelKind};
use shmring_peers::kit::Measured;

use crate::floor;
use crate::row::{Kind, Row};
use crate::run::{Ctx, PACE};

pub const SUITE: &str = "peers";
pub const PACED: &str = "paced 100 µs, one-way (from the intended send time)";
pub const PINGPONG: &str = "back-to-back ping-pong, one-way";
pub const THROUGHPUT: &str = "1P1C per-event throughput, delivered events/s";

pub const IOX: &str = "iceoryx2 (busy-poll subscriber)";
pub const DISRUPTOR: &str = "disruptor crate (threads, BusySpin)";
pub const CROSSBEAM: &str = "crossbeam-channel (threads, blocking recv)";

const KERNEL: [KernelKind; 3] = [KernelKind::Pipe, KernelKind::Uds, KernelKind::Eventfd];

/// Rows this suite adds.
pub fn rows() -> u64 {
    6 + 4 + 6
}

fn finish(ctx: &Ctx, row: Row, m: Result<Measured>, floor_name: &str) -> Row {
    let mut row = match m {
        Ok(m) => row.with(&m),
        Err(e) => row.failed(&e),
    };
    if row.kind == Kind::Latency {
        if let Some(f) = floor::get(&ctx.rows, floor_name) {
            row.against(f);
        }
    }
    row
}

/// A row of a peer the harness was built without (no `peers` feature), saying so.
#[cfg_attr(feature = "peers", allow(dead_code))]
fn not_built_row(group: &str, name: &str, kind: Kind) -> Row {
    let mut r = Row::new(SUITE, group, name, kind);
    r.error = Some("not built: rebuild the harness with `--features peers`".into());
    r
}

#[cfg_attr(feature = "peers", allow(dead_code))]
fn not_built(ctx: &mut Ctx, group: &str, name: &str, kind: Kind) {
    ctx.push(not_built_row(group, name, kind));
}

/// Measure every peer.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    let s = ctx.sizes;
    // Paced latency.
    for k in KERNEL {
        ctx.bar.set_message(format!("peers: {} paced", k.name()));
        let tag = ctx.tag("kp");
        let m = kernel::latency(k, &ctx.plan(s.paced, PACE), false, &tag);
        let row = finish(
            ctx,
            Row::new(SUITE, PACED, k.name(), Kind::Latency),
            m,
            floor::FUTEX_PACED,
        );
        ctx.push(row);
    }
    inproc_latency(ctx)?;
    iox_latency(ctx, false)?;
    // Ping-pong.
    for k in KERNEL {
        ctx.bar
            .set_message(format!("peers: {} ping-pong", k.name()));
        let tag = ctx.tag("kpp");
        let m = kernel::latency(
            k,
            &ctx.plan(s.pingpong / 2, std::time::Duration::from_micros(50)),
            true,
            &tag,
        );
        let row = finish(
            ctx,
            Row::new(SUITE, PINGPONG, k.name(), Kind::Latency),
            m,
            floor::FUTEX_PINGPONG,
        );
        ctx.push(row);
    }
    iox_latency(ctx, true)?;
    // Throughput.
    for k in KERNEL {
        ctx.bar
            .set_message(format!("peers: {} throughput", k.name()));
        let tag = ctx.tag("kt");
        let m = kernel::throughput(k, &ctx.plan(0, PACE), &tag);
        let row = finish(
            ctx,
            Row::new(SUITE, THROUGHPUT, k.name(), Kind::Throughput),
            m,
            "",
        );
        ctx.push(row);
    }
    inproc_throughput(ctx)?;
    iox_throughput(ctx)?;
    Ok(())
}

#[cfg(feature = "peers")]
fn inproc_latency(ctx: &mut Ctx) -> Result<()> {
    use shmring_peers::inproc;
    for (k, name, fl) in [
        (inproc::Kind::Disruptor, DISRUPTOR, floor::SPIN_PACED),
        (inproc::Kind::Crossbeam, CROSSBEAM, floor::FUTEX_PACED),
    ] {
        ctx.bar.set_message(format!("peers: {name} paced"));
        let tag = ctx.tag("ip");
        let m = inproc::latency(k, &ctx.plan(ctx.sizes.paced, PACE), &tag);
        let row = finish(ctx, Row::new(SUITE, PACED, name, Kind::Latency), m, fl);
        ctx.push(row);
    }
    Ok(())
}

#[cfg(not(feature = "peers"))]
fn inproc_latency(ctx: &mut Ctx) -> Result<()> {
    not_built(ctx, PACED, DISRUPTOR, Kind::Latency);
    not_built(ctx, PACED, CROSSBEAM, Kind::Latency);
    Ok(())
}

#[cfg(feature = "peers")]
fn inproc_throughput(ctx: &mut Ctx) -> Result<()> {
    use shmring_peers::inproc;
    for (k, name) in [
        (inproc::Kind::Disruptor, DISRUPTOR),
        (inproc::Kind::Crossbeam, CROSSBEAM),
    ] {
        ctx.bar.set_message(format!("peers: {name} throughput"));
        let tag = ctx.tag("it");
        let m = inproc::throughput(k, &ctx.plan(0, PACE), &tag);
        let row = finish(
            ctx,
            Row::new(SUITE, THROUGHPUT, name, Kind::Throughput),
            m,
            "",
        );
        ctx.push(row);
    }
    Ok(())
}

/// The `disruptor` crate's per-event throughput row, for another suite (`paired`).
#[cfg(feature = "peers")]
pub fn disruptor_throughput(ctx: &mut Ctx, group: &str) -> Row {
    use shmring_peers::inproc;
    let tag = ctx.tag("it");
    let m = inproc::throughput(inproc::Kind::Disruptor, &ctx.plan(0, PACE), &tag);
    finish(
        ctx,
        Row::new(SUITE, group, DISRUPTOR, Kind::Throughput),
        m,
        "",
    )
}

/// Without the `peers` feature: a row that says so.
#[cfg(not(feature = "peers"))]
pub fn disruptor_throughput(_ctx: &mut Ctx, group: &str) -> Row {
    not_built_row(group, DISRUPTOR, Kind::Throughput)
}

#[cfg(not(feature = "peers"))]
fn inproc_throughput(ctx: &mut Ctx) -> Result<()> {
    not_built(ctx, THROUGHPUT, DISRUPTOR, Kind::Throughput);
    not_built(ctx, THROUGHPUT, CROSSBEAM, Kind::Throughput);
    Ok(())
}

#[cfg(feature = "peers")]
fn iox_latency(ctx: &mut Ctx, pingpong: bool) -> Result<()> {
    let (group, fl, count) = if pingpong {
        (PINGPONG, floor::SPIN_PINGPONG, ctx.sizes.pingpong)
    } else {
        (PACED, floor::SPIN_PACED, ctx.sizes.paced)
    };
    ctx.bar.set_message(format!("peers: {IOX} {group}"));
    let tag = ctx.tag("iox");
    let m = shmring_peers::iox::latency(&ctx.plan(count, PACE), pingpong, &tag);
    let row = finish(ctx, Row::new(SUITE, group, IOX, Kind::Latency), m, fl);
    ctx.push(row);
    Ok(())
}

#[cfg(not(feature = "peers"))]
fn iox_latency(ctx: &mut Ctx, pingpong: bool) -> Result<()> {
    not_built(
        ctx,
        if pingpong { PINGPONG } else { PACED },
        IOX,
        Kind::Latency,
    );
    Ok(())
}

fn iox_throughput(ctx: &mut Ctx) -> Result<()> {
    ctx.bar.set_message(format!("peers: {IOX} throughput"));
    let row = iox_throughput_row(ctx, THROUGHPUT);
    ctx.push(row);
    Ok(())
}

/// iceoryx2's per-event throughput row (busy-poll subscriber), for this suite and for
/// another (`paired`).
#[cfg(feature = "peers")]
pub fn iox_throughput_row(ctx: &mut Ctx, group: &str) -> Row {
    let tag = ctx.tag("iot");
    let m = shmring_peers::iox::throughput(&ctx.plan(0, PACE), &tag);
    finish(ctx, Row::new(SUITE, group, IOX, Kind::Throughput), m, "")
}

/// Without the `peers` feature: a row that says so.
#[cfg(not(feature = "peers"))]
pub fn iox_throughput_row(_ctx: &mut Ctx, group: &str) -> Row {
    not_built_row(group, IOX, Kind::Throughput)
}
