//! Suite `latency`: one-way hand-off, publish to handler entry, for every wait strategy:
//! paced 100 µs apart, back-to-back ping-pong over two rings, and the wake-up after 2 ms of
//! quiet, each with the consumer's CPU share.
//!
//! The producer writes the send time into the event: for paced rows the *intended* send
//! time, so coordinated omission is charged (see `shmring_peers::kit::Pacer`).

use std::time::Duration;

use anyhow::Result;

use crate::floor;
use crate::roles::{parks, STRATEGIES};
use crate::row::{Kind, Row};
use crate::run::{Ctx, IDLE_GAP, PACE};
use crate::shm::{self, kv, Setup};

pub const SUITE: &str = "latency";
pub const PACED: &str = "paced 100 µs, one-way (from the intended send time)";
pub const PINGPONG: &str = "back-to-back ping-pong over two rings, one-way";
pub const IDLE: &str = "after 2 ms idle, one-way";
/// Runs of events in turn over the ring, over the spin floor's bare line and over a bare ring
/// of lines, in the same two pinned processes (`paced_interleaved`).
pub const INTERLEAVED_RUN: u64 = 50;

/// Rows this suite adds.
pub fn rows() -> u64 {
    3 * STRATEGIES.len() as u64
}

/// Measure every strategy in every shape.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for group in [PACED, PINGPONG, IDLE] {
        for wait in STRATEGIES {
            let row = one(ctx, group, wait);
            ctx.push(row);
        }
    }
    Ok(())
}

/// Measure `wait` in the shape `group` (one of this suite's groups), compared with the floor
/// row measured earlier in this run if there is one; for this suite and for another one
/// (`paired`, which compares with the floor of its own round instead).
pub fn one(ctx: &mut Ctx, group: &str, wait: &str) -> Row {
    let s = ctx.sizes;
    let row = match group {
        PACED => paced(ctx, PACED, wait, s.paced, s.warmup, PACE),
        // A sleeping consumer sleeps on every hop: fewer round trips keep the row short.
        PINGPONG if wait == "sleeping" => pingpong(ctx, wait, s.pingpong / 10),
        PINGPONG => pingpong(ctx, wait, s.pingpong),
        IDLE => paced(ctx, IDLE, wait, s.idle, s.warmup, IDLE_GAP),
        _ => {
            return Row::new(SUITE, group, wait, Kind::Latency)
                .failed(&anyhow::anyhow!("no latency group is named {group:?}"))
        }
    };
    finish(ctx, row, wait)
}

/// The floor a strategy is compared with: the futex floor if it parks, else the spin one.
pub fn floor_for(wait: &str, group: &str) -> &'static str {
    match (parks(wait), group) {
        (true, PINGPONG) => floor::FUTEX_PINGPONG,
        (true, IDLE) => floor::FUTEX_IDLE,
        (true, _) => floor::FUTEX_PACED,
        (false, PINGPONG) => floor::SPIN_PINGPONG,
        (false, IDLE) => floor::SPIN_IDLE,
        (false, _) => floor::SPIN_PACED,
    }
}

fn finish(ctx: &Ctx, mut row: Row, wait: &str) -> Row {
    if let Some(f) = floor::get(&ctx.rows, floor_for(wait, &row.group)) {
        row.against(f);
    }
    row
}

fn paced(ctx: &mut Ctx, group: &str, wait: &str, count: u64, warmup: u64, gap: Duration) -> Row {
    ctx.bar.set_message(format!("latency: {wait}, {group}"));
    let setup = Setup::one_to_one(
        vec![
            kv("wait", wait),
            kv("mode", "latency"),
            kv("warmup", warmup),
        ],
        vec![
            kv("mode", "paced"),
            kv("count", count),
            kv("warmup", warmup),
            kv("interval_ns", gap.as_nanos()),
        ],
        ctx.timeout(count, gap),
    );
    let row = Row::new(SUITE, group, wait, Kind::Latency);
    match shm::run(ctx, "lat", setup) {
        Ok(p) => paced_row(row, &p),
        Err(e) => row.failed(&e),
    }
}

/// A paced row from what its processes measured: the consumer's latencies and CPU, the
/// producer's CPU and its pacer's lateness.
fn paced_row(row: Row, p: &shm::Parts) -> Row {
    let c = &p.consumers[0];
    let mut r = row.with(c);
    r.consumer_cpu = c.get("cpu_share");
    r.producer_cpu = p.producers[0].get("cpu_share");
    for k in ["pacer_late_p99_ns", "pacer_held_p99_ns"] {
        if let Some(v) = p.producers[0].get(k) {
            r.extra.insert(k.into(), v);
        }
    }
    r
}

fn pingpong(ctx: &mut Ctx, wait: &str, count: u64) -> Row {
    ctx.bar.set_message(format!("latency: {wait}, ping-pong"));
    let warmup = ctx.sizes.warmup;
    let mut setup = Setup::one_to_one(
        vec![kv("wait", wait), kv("mode", "echo"), kv("warmup", warmup)],
        vec![
            kv("mode", "pingpong"),
            kv("wait", wait),
            kv("count", count),
            kv("warmup", warmup),
        ],
        ctx.timeout(count, Duration::from_micros(500)),
    );
    setup.echo = true;
    let row = Row::new(SUITE, PINGPONG, wait, Kind::Latency);
    match shm::run(ctx, "pp", setup) {
        Ok(p) => {
            let c = &p.consumers[0];
            let mut r = row.with(c);
            r.consumer_cpu = c.get("cpu_share");
            r.producer_cpu = p.producers[0].get("cpu_share");
            if let Some(v) = p.producers[0].get("rtt_p50_ns") {
                r.extra.insert("rtt_p50_ns".into(), v);
            }
            r
        }
        Err(e) => row.failed(&e),
    }
}

/// The names of the three rows [`paced_interleaved`] measures.
pub struct InTurn<'a> {
    /// shmring's busy-spin consumer.
    pub ring: &'a str,
    /// The spin floor's one line.
    pub floor: &'a str,
    /// The bare ring of lines.
    pub bare: &'a str,
}

/// The busy-spin consumer paced 100 µs apart, the spin floor and a bare ring of lines in the
/// same two pinned processes, in turn, [`INTERLEAVED_RUN`] events at a time: the producer
/// sends each run over the ring, over a bare line (the spin floor's: the send time, then
/// the sequence), or over a bare ring of 1024 such lines, 64 bytes apart, as the ring's
/// 1024 slots are (a new line per event, a line coming back after 1024 of the lane's
/// events as a slot does, with nothing of shmring's in the path), and the consumer spins
/// on the line for the bare runs. All three see the same placement of the guest's vCPUs, which rows
/// measured seconds apart do not (ARCHITECTURE.md, "Measured inside one run"). Returns the
/// rows named in `names` (ring, floor, bare ring), in `group`, each lane with
/// `ctx.sizes.paced` events after the warm-up (the floor's and the bare ring's, less any the
/// consumer missed).
pub fn paced_interleaved(ctx: &mut Ctx, group: &str, names: &InTurn<'_>) -> (Row, Row, Row) {
    let s = ctx.sizes;
    ctx.bar.set_message(format!(
        "latency: busy-spin, the spin floor and a bare ring, {PACED}, in turn"
    ));
    // Each lane gets the share of the warm-up the ring got when the row had two lanes.
    let (count, warmup) = (3 * s.paced, s.warmup * 3 / 2);
    let setup = Setup::one_to_one(
        vec![
            kv("wait", "busy-spin"),
            kv("mode", "latency"),
            kv("warmup", warmup),
            kv("count", count),
            kv("floor_every", INTERLEAVED_RUN),
        ],
        vec![
            kv("mode", "paced"),
            kv("count", count),
            kv("warmup", warmup),
            kv("interval_ns", PACE.as_nanos()),
            kv("floor_every", INTERLEAVED_RUN),
        ],
        ctx.timeout(count, PACE),
    );
    let row = Row::new(SUITE, group, names.ring, Kind::Latency);
    let floor_row = Row::new(SUITE, group, names.floor, Kind::Latency);
    let bare_row = Row::new(SUITE, group, names.bare, Kind::Latency);
    match shm::run(ctx, "lat", setup) {
        Ok(p) => {
            let c = &p.consumers[0];
            let r = paced_row(row, &p);
            let lane = |mut row: Row, h: &Option<hdrhistogram::Histogram<u64>>, what, missed| {
                match h {
                    Some(h) if !h.is_empty() => row.set_hist(h),
                    _ => {
                        row = row.failed(&anyhow::anyhow!(
                            "the consumer recorded no {what} latencies"
                        ))
                    }
                }
                if let Some(v) = c.get(missed) {
                    row.extra.insert("missed".into(), v);
                }
                row
            };
            let f = lane(floor_row, &c.hist_b, "floor", "floor_missed");
            let b = lane(bare_row, &c.hist_c, "bare ring", "bare_missed");
            (r, f, b)
        }
        Err(e) => (row.failed(&e), floor_row.failed(&e), bare_row.failed(&e)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::shm::Setup;

    /// The bare ring of the paced row in turn has as many lines as the row's ring has
    /// slots, each a slot's size apart: the two lanes move the same working set.
    #[test]
    fn the_bare_ring_is_the_size_of_the_latency_ring() {
        let s = Setup::one_to_one(Vec::new(), Vec::new(), Duration::ZERO);
        assert_eq!(s.capacity, shmring_peers::kit::CTL_RING_LINES as u64);
        assert_eq!(s.slot, 64);
    }
}
