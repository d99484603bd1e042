//! Suite `latency`: one-way hand-off, publish to handler entry, for every wait strategy:
//! paced 100 µs apart, back-to-back ping-pong over two rings, and the wake-up after 2 ms of
//! quiet, each with the consumer's CPU share. Then the busy-spin consumer on a fixed-size
//! ring of 16-byte events, paced and ping-pong, without pauses and attached with
//! `gather(`[`GATHER`]`)` (group [`FIXED`]): what the option costs an event's hand-off.
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

/// The group of the rows on a fixed-size ring, without pauses and with `gather`.
pub const FIXED: &str =
    "busy-spin on a fixed-size ring of 16-byte events, without pauses and with gather(16)";
/// The spins of the gathering rows of [`FIXED`] (as the throughput rows' consumers pause,
/// `turn::GATHER`).
pub const GATHER: u32 = crate::turn::GATHER;
/// The rows of [`FIXED`]: (name, shape, spins after each batch), each shape's two rows
/// measured back to back.
pub const FIXED_ROWS: [(&str, &str, u32); 4] = [
    ("paced 100 µs, no pause", PACED, 0),
    ("paced 100 µs, gather(16)", PACED, GATHER),
    ("ping-pong, no pause", PINGPONG, 0),
    ("ping-pong, gather(16)", PINGPONG, GATHER),
];

/// Rows this suite adds.
pub fn rows() -> u64 {
    (3 * STRATEGIES.len() + FIXED_ROWS.len()) as u64
}

/// Measure every strategy in every shape, then the rows on a fixed-size ring.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for group in [PACED, PINGPONG, IDLE] {
        for wait in STRATEGIES {
            let row = one(ctx, group, wait);
            ctx.push(row);
        }
    }
    for (name, shape, gather) in FIXED_ROWS {
        let row = fixed_one(ctx, name, shape, gather);
        ctx.push(row);
    }
    Ok(())
}

/// The ring a latency row runs on: stamped slots ([`On::STAMPED`]), or a fixed-size ring of
/// 16-byte events (the producer's send time in the second 8 bytes) whose busy-spin
/// consumer pauses `gather` spins after each batch (`ConsumerOptions::gather`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct On {
    /// `RingConfig::event_size`, or stamped slots.
    pub event_size: Option<u32>,
    /// The consumer's `gather` spins.
    pub gather: u32,
}

impl On {
    /// Stamped slots of 64 bytes, no pauses: every row but [`FIXED`]'s.
    pub const STAMPED: On = On {
        event_size: None,
        gather: 0,
    };

    fn setup(self, mut setup: Setup) -> Setup {
        setup.event_size = self.event_size;
        for c in &mut setup.consumers {
            c.push(kv("gather", self.gather));
        }
        setup
    }
}

/// Row `name` of [`FIXED`]: the busy-spin consumer in `shape` ([`PACED`] or [`PINGPONG`]) on
/// a fixed-size ring of 16-byte events, pausing `gather` spins after each batch, compared
/// with the spin floor of the same shape measured earlier in this run.
fn fixed_one(ctx: &mut Ctx, name: &str, shape: &str, gather: u32) -> Row {
    let s = ctx.sizes;
    let on = On {
        event_size: Some(16),
        gather,
    };
    let mut row = if shape == PACED {
        paced(ctx, (FIXED, on), "busy-spin", s.paced, s.warmup, PACE)
    } else {
        pingpong(ctx, (FIXED, on), "busy-spin", s.pingpong)
    };
    row.name = name.to_owned();
    if let Some(f) = floor::get(&ctx.rows, floor_for("busy-spin", shape)) {
        row.against(f);
    }
    row
}

/// Measure `wait` in the shape `group` (one of this suite's groups), compared with the floor
/// row measured earlier in this run if there is one; for this suite and for another one
/// (`paired`, which compares with the floor of its own round instead).
pub fn one(ctx: &mut Ctx, group: &str, wait: &str) -> Row {
    let s = ctx.sizes;
    let row = match group {
        PACED => paced(ctx, (PACED, On::STAMPED), wait, s.paced, s.warmup, PACE),
        // A sleeping consumer sleeps on every hop: fewer round trips keep the row short.
        PINGPONG if wait == "sleeping" => {
            pingpong(ctx, (PINGPONG, On::STAMPED), wait, s.pingpong / 10)
        }
        PINGPONG => pingpong(ctx, (PINGPONG, On::STAMPED), wait, s.pingpong),
        IDLE => paced(ctx, (IDLE, On::STAMPED), wait, s.idle, s.warmup, IDLE_GAP),
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

/// A paced row in `group` of `wait`'s consumer on the ring `on`.
fn paced(
    ctx: &mut Ctx,
    (group, on): (&str, On),
    wait: &str,
    count: u64,
    warmup: u64,
    gap: Duration,
) -> Row {
    ctx.bar.set_message(format!("latency: {wait}, {group}"));
    let setup = on.setup(Setup::one_to_one(
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
    ));
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

/// A ping-pong row in `group` of `wait`'s consumer on the ring `on` (the echo ring is
/// always of stamped slots).
fn pingpong(ctx: &mut Ctx, (group, on): (&str, On), wait: &str, count: u64) -> Row {
    ctx.bar.set_message(format!("latency: {wait}, ping-pong"));
    let warmup = ctx.sizes.warmup;
    let mut setup = on.setup(Setup::one_to_one(
        vec![kv("wait", wait), kv("mode", "echo"), kv("warmup", warmup)],
        vec![
            kv("mode", "pingpong"),
            kv("wait", wait),
            kv("count", count),
            kv("warmup", warmup),
        ],
        ctx.timeout(count, Duration::from_micros(500)),
    ));
    setup.echo = true;
    let row = Row::new(SUITE, group, wait, Kind::Latency);
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

    use super::*;
    use crate::shm::Setup;

    /// A row on a fixed-size ring makes that ring and attaches its consumer with its
    /// pauses; every other row keeps stamped slots and no pauses.
    #[test]
    fn a_row_runs_on_the_ring_it_names() {
        let base = || Setup::one_to_one(vec![kv("wait", "busy-spin")], Vec::new(), Duration::ZERO);
        let fixed = On {
            event_size: Some(16),
            gather: GATHER,
        }
        .setup(base());
        assert_eq!(fixed.event_size, Some(16));
        assert!(fixed.consumers[0].contains(&kv("gather", GATHER)));
        let stamped = On::STAMPED.setup(base());
        assert_eq!(stamped.event_size, None);
        assert!(stamped.consumers[0].contains(&kv("gather", 0)));
        // Each shape's rows back to back, without pauses first, then with them.
        for pair in FIXED_ROWS.chunks(2) {
            assert_eq!(pair[0].1, pair[1].1);
            assert_eq!((pair[0].2, pair[1].2), (0, GATHER), "{pair:?}");
        }
        assert_eq!(GATHER, 16, "the rows are named after 16 spins");
    }

    /// The bare ring of the paced row in turn has as many lines as the row's ring has
    /// slots, each a slot's size apart: the two lanes move the same working set.
    #[test]
    fn the_bare_ring_is_the_size_of_the_latency_ring() {
        let s = Setup::one_to_one(Vec::new(), Vec::new(), Duration::ZERO);
        assert_eq!(s.capacity, shmring_peers::kit::CTL_RING_LINES as u64);
        assert_eq!(s.slot, 64);
    }
}
