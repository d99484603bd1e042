//! Suite `wakeset`: one thread stepping consumers on 1, 3, 16 and 64 rings. Between events
//! it either backs off (an ADAPTIVE back-off: spin, yield,
//! 10 µs sleeps, 100 µs sleeps) or parks on a `WakeSet` holding every ring.
//!
//! Idle CPU: read by the harness from `/proc/<stepper>/schedstat` over a window in which
//! nothing is published. Wake-up: then one event every 2 ms, round-robin over the rings,
//! publish to handler entry.

use std::time::Duration;

use anyhow::{bail, Result};
use shmring::ProducerMode;
use shmring_peers::kit;

use crate::floor;
use crate::row::{Kind, Row};
use crate::run::{Ctx, IDLE_GAP};
use crate::shm::kv;

pub const SUITE: &str = "wakeset";
pub const GROUP: &str = "one thread stepping N rings: idle CPU, wake-up after 2 ms idle";

/// Ring counts.
pub const RINGS: [usize; 4] = [1, 3, 16, 64];

/// Row name.
pub fn name(mode: &str, n: usize) -> String {
    let what = if mode == "wakeset" {
        "wake set"
    } else {
        "backoff"
    };
    format!("{what}, {n} ring{}", if n == 1 { "" } else { "s" })
}

/// Rows this suite adds.
pub fn rows() -> u64 {
    2 * RINGS.len() as u64
}

/// Measure.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for mode in ["backoff", "wakeset"] {
        for n in RINGS {
            let nm = name(mode, n);
            ctx.bar.set_message(format!("wakeset: {nm}"));
            let row = Row::new(SUITE, GROUP, &nm, Kind::Idle);
            let mut row = match one(ctx, mode, n) {
                Ok(r) => r,
                Err(e) => row.failed(&e),
            };
            let floor_name = if mode == "wakeset" {
                floor::FUTEX_IDLE
            } else {
                floor::SPIN_IDLE
            };
            if let Some(f) = floor::get(&ctx.rows, floor_name) {
                let f = f.clone();
                row.against(&f);
            }
            ctx.push(row);
        }
    }
    Ok(())
}

fn one(ctx: &mut Ctx, mode: &str, n: usize) -> Result<Row> {
    let mut rings = Vec::new();
    for _ in 0..n {
        rings.push(ctx.ring(64, 64, ProducerMode::Single)?.0);
    }
    let result = (|| {
        let (mut roles, ctl, ctl_path) = ctx.roles("ws")?;
        let count = ctx.sizes.idle.max(4 * n as u64);
        let warmup = 2 * n as u64;
        let common = vec![
            kv("ns", &ctx.namespace),
            kv("rings", rings.join(",")),
            kv("ctl", ctl_path.display()),
            kv("count", count),
            kv("warmup", warmup),
            kv("interval_ns", IDLE_GAP.as_nanos()),
        ];
        let mut a = common.clone();
        a.push(kv("mode", mode));
        a.extend(ctx.cpu(1));
        let stepper = roles.spawn("ws-stepper", &a)?;
        let mut a = common;
        a.extend(ctx.cpu(0));
        roles.spawn("ws-producer", &a)?;
        if ctl.wait_ready(1, Duration::from_secs(20)).is_err() {
            bail!("the stepper did not get ready");
        }
        // Let it settle into its idle state, then read its CPU time over the window.
        std::thread::sleep(Duration::from_millis(50));
        let pid = roles.get(stepper).pid();
        let (c0, w0) = (kit::pid_cpu_ns(pid), kit::now_ns());
        std::thread::sleep(ctx.sizes.idle_window);
        let (c1, w1) = (kit::pid_cpu_ns(pid), kit::now_ns());
        let idle = match (c0, c1) {
            (Some(a), Some(b)) => Some((b - a) as f64 / (w1 - w0) as f64),
            _ => None,
        };
        ctl.open_gate();
        let timeout = ctx.timeout(count + warmup, IDLE_GAP);
        let parts = roles.finish(timeout)?;
        let _ = std::fs::remove_file(&ctl_path);
        let mut row = Row::new(SUITE, GROUP, &name(mode, n), Kind::Idle).with(&parts[0]);
        if let Some(i) = idle {
            row.extra.insert("idle_cpu".into(), i);
            row.consumer_cpu = Some(i);
        }
        row.extra.insert("rings".into(), n as f64);
        Ok(row)
    })();
    for r in &rings {
        ctx.drop_ring(r);
    }
    result
}
