//! Suite `floor`: what the machine itself costs, with no ring at all. A cache line per
//! direction written by one process and spun on by the other, and the same with a futex
//! word that the receiver sleeps on. Every ratio in the other suites divides by these,
//! taken with the same pacing.

use std::time::Duration;

use anyhow::Result;
use shmring_peers::kit::Measured;

use crate::row::{Kind, Row};
use crate::run::{Ctx, IDLE_GAP, PACE};
use crate::shm::kv;

pub const SUITE: &str = "floor";
pub const GROUP: &str = "bare cross-process hand-off, one-way (send time in the line)";

/// Floor row names.
pub const SPIN_PINGPONG: &str = "spin ping-pong";
pub const SPIN_PACED: &str = "spin, paced 100 µs";
pub const SPIN_IDLE: &str = "spin, after 2 ms idle";
pub const FUTEX_PINGPONG: &str = "futex ping-pong";
pub const FUTEX_PACED: &str = "futex, paced 100 µs";
pub const FUTEX_IDLE: &str = "futex, after 2 ms idle";

/// Rows this suite adds.
pub fn rows() -> u64 {
    6
}

/// Measure the floor.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for name in [
        SPIN_PINGPONG,
        SPIN_PACED,
        SPIN_IDLE,
        FUTEX_PINGPONG,
        FUTEX_PACED,
        FUTEX_IDLE,
    ] {
        let row = one(ctx, name, GROUP);
        ctx.push(row);
    }
    Ok(())
}

/// Measure the floor row `name` (one of this suite's names) into a row of `group`, for
/// this suite and for another one (`paired`).
pub fn one(ctx: &mut Ctx, name: &str, group: &str) -> Row {
    let s = ctx.sizes;
    let (kind, mode, count, gap) = match name {
        SPIN_PINGPONG => ("spin", "pingpong", s.pingpong, Duration::ZERO),
        SPIN_PACED => ("spin", "paced", s.paced, PACE),
        SPIN_IDLE => ("spin", "paced", s.idle, IDLE_GAP),
        FUTEX_PINGPONG => ("futex", "pingpong", s.pingpong, Duration::ZERO),
        FUTEX_PACED => ("futex", "paced", s.paced, PACE),
        FUTEX_IDLE => ("futex", "paced", s.idle, IDLE_GAP),
        _ => {
            return Row::new(SUITE, group, name, Kind::Latency)
                .failed(&anyhow::anyhow!("no floor row is named {name:?}"))
        }
    };
    ctx.bar.set_message(format!("floor: {name}"));
    let warmup = if gap == IDLE_GAP { 20 } else { s.warmup };
    let row = Row::new(SUITE, group, name, Kind::Latency);
    match measure(ctx, kind, mode, count, warmup, gap) {
        Ok(m) => {
            let mut r = row.with(&m);
            r.consumer_cpu = m.get("cpu_share");
            r
        }
        Err(e) => row.failed(&e),
    }
}

fn measure(
    ctx: &mut Ctx,
    kind: &str,
    mode: &str,
    count: u64,
    warmup: u64,
    gap: Duration,
) -> Result<Measured> {
    let (mut roles, _ctl, ctl_path) = ctx.roles("floor")?;
    let common = vec![
        kv("ctl", ctl_path.display()),
        kv("kind", kind),
        kv("mode", mode),
        kv("count", count),
        kv("warmup", warmup),
        kv("interval_ns", gap.as_nanos()),
    ];
    let mut b = common.clone();
    b.extend(ctx.cpu(1));
    roles.spawn("floor-b", &b)?;
    let mut a = common;
    a.extend(ctx.cpu(0));
    roles.spawn("floor-a", &a)?;
    let mut parts = roles.finish(ctx.timeout(count, gap.max(Duration::from_micros(100))))?;
    let _ = std::fs::remove_file(&ctl_path);
    let a = parts.pop().unwrap_or_default();
    let mut b = parts.pop().unwrap_or_default();
    for (k, v) in a.values {
        if k != "cpu_share" {
            b.values.insert(k, v);
        } else {
            b.values.insert("producer_cpu".into(), v);
        }
    }
    Ok(b)
}

/// The floor row `name`, if measured.
pub fn get<'a>(rows: &'a [Row], name: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.suite == SUITE && r.name == name && r.error.is_none())
}
