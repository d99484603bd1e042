//! Throughput in turn: shmring's per-event row on a ring of fixed-size 8-byte events and
//! the floor ring, measured alternately inside the same two pinned processes, so that both
//! halves of every ratio see the same placement of the guest's vCPUs.
//!
//! The rows of `paired` run seconds apart, each in processes of its own; on a guest whose
//! cross-core line transfers change speed several-fold from one second to the next, even
//! those seconds decide a ratio (ARCHITECTURE.md, "Measured inside one run"). Here the
//! producer publishes a chunk of [`CHUNK`] events over the shmring ring (`Producer::publish`,
//! the fixed-size per-event row's loop), waits until the consumer says it has read them
//! all, then a chunk over the floor ring (its producer's loop), and so on, alternating; the
//! consumer reads each chunk with its row's loop (`Consumer::run` with the counting
//! handler, the floor consumer's loop) and acknowledges it on a line of the control page.
//! A chunk's time runs from its first publish to the acknowledgement, so it holds every
//! event's hand-over and one line transfer more (a millisecond or more against about a
//! quarter of a microsecond).
//!
//! Each ring chunk and the floor chunk after it make a pair. The first pair (page faults,
//! caches) is not judged. A pair in which one chunk ran below the fastest chunk of its side
//! divided by [`paired::SLOW`] mixed the placements, and one in which the ring outran the
//! floor by more than [`paired::BEATEN`] ran where the floor is not at its best (the slow
//! placement, `paired::BEATEN`): both are left out, and the measurement's ratio is the
//! median of the other pairs' ratios.

use anyhow::{anyhow, Result};
use shmring::ProducerMode;

use crate::paired;
use crate::row::{Kind, Row};
use crate::run::Ctx;
use crate::shm::{self, kv, Setup};
use crate::throughput::SUITE;

/// Events per chunk: 1-2 ms in the guest's fast placement, 10-25 ms in its slow one, so
/// that both chunks of a pair nearly always run in one placement (it changes every few
/// seconds at most) and a round's run holds hundreds of pairs or dozens.
pub const CHUNK: u64 = 1 << 20;
/// The control page's line that carries the consumer's acknowledgement (chunks read).
pub const ACK_LINE: usize = 1;
/// A measurement with fewer pairs left than this decides nothing.
pub const MIN_PAIRS: usize = 5;
/// The ring's row.
pub const RING_ROW: &str = "per-event, 8 B, fixed-size ring, in turn with the floor";
/// The floor's row.
pub const FLOOR_ROW: &str = "bare SPSC ring, per-event, 8 B, in turn with the fixed-size ring";

/// What the pairs of one measurement say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judged {
    /// Pairs measured after the first.
    pub pairs: usize,
    /// Ring / floor rate of each pair kept.
    pub ratios: Vec<f64>,
    /// Pairs left out: one chunk below its side's fastest divided by `paired::SLOW`.
    pub slow: usize,
    /// Pairs left out: the ring above `paired::BEATEN` times the floor.
    pub beaten: usize,
    /// Median chunk rate of each side over every judged pair (events/s).
    pub ring_rate: f64,
    pub floor_rate: f64,
    /// The fastest chunk of each side (events/s).
    pub ring_fastest: f64,
    pub floor_fastest: f64,
}

/// Judge the pairs `(ring chunk ns, floor chunk ns)` of `chunk` events each, the warm-up
/// pair already removed.
pub fn judge(pairs: &[(u64, u64)], chunk: u64) -> Judged {
    let rate = |ns: u64| chunk as f64 * 1e9 / ns.max(1) as f64;
    let rates: Vec<(f64, f64)> = pairs.iter().map(|&(r, f)| (rate(r), rate(f))).collect();
    let fastest = |side: fn(&(f64, f64)) -> f64| rates.iter().map(side).fold(0.0, f64::max);
    let (top_ring, top_floor) = (fastest(|p| p.0), fastest(|p| p.1));
    let mut j = Judged {
        pairs: rates.len(),
        ring_fastest: top_ring,
        floor_fastest: top_floor,
        ..Default::default()
    };
    for &(ring, floor) in &rates {
        if ring * paired::SLOW < top_ring || floor * paired::SLOW < top_floor {
            j.slow += 1;
        } else if ring > floor * paired::BEATEN {
            j.beaten += 1;
        } else {
            j.ratios.push(ring / floor);
        }
    }
    let median = |side: fn(&(f64, f64)) -> f64| {
        let v: Vec<f64> = rates.iter().map(side).collect();
        paired::spread(&v).map_or(0.0, |(m, _, _)| m)
    };
    j.ring_rate = median(|p| p.0);
    j.floor_rate = median(|p| p.1);
    j
}

/// Measure the pair in turn for `ctx.sizes.throughput` of each side: the ring's row and the
/// floor's, in `group`, each at the median of its chunks' rates (`extra`: `fastest_chunk`).
/// The ring's row carries the judged ratio (`extra`: `ratio`, `least`, `greatest`, `pairs`,
/// `kept`, `slow`, `beaten`).
pub fn rows(ctx: &mut Ctx, group: &str) -> (Row, Row) {
    ctx.bar
        .set_message(format!("throughput: {RING_ROW}, {CHUNK} events a chunk"));
    let dur = ctx.sizes.throughput;
    let tag = ctx.tag("turn");
    let floor_path = ctx.dir.join(format!("{tag}.spsc"));
    let measured = (|| -> Result<(Row, Row)> {
        crate::spsc::create(&floor_path)?;
        let floor = kv("floor", floor_path.display());
        let setup = Setup {
            capacity: 4096,
            slot: 64,
            mode: ProducerMode::Single,
            event_size: Some(8),
            consumers: vec![vec![
                kv("wait", "busy-spin"),
                kv("mode", "turn"),
                kv("chunk", CHUNK),
                floor.clone(),
            ]],
            producers: vec![vec![
                kv("mode", "turn"),
                kv("size", 8),
                kv("chunk", CHUNK),
                kv("duration_ns", (2 * dur).as_nanos()),
                floor,
            ]],
            echo: false,
            // A chunk in the slowest placement seen takes about 50 ms.
            timeout: dur * 40 + std::time::Duration::from_secs(60),
        };
        let p = shm::run(ctx, "turn", setup)?;
        let (c, pr) = (&p.consumers[0], &p.producers[0]);
        let pairs = pr.need("turn_pairs")? as usize;
        let kept = pr.need("turn_kept")? as usize;
        if pairs == 0 {
            return Err(anyhow!("no pair measured after the warm-up"));
        }
        let mut ring = Row::new(SUITE, group, RING_ROW, Kind::Throughput);
        let mut fl = Row::new(SUITE, group, FLOOR_ROW, Kind::Throughput);
        ring.ops_per_sec = Some(pr.need("turn_ring_rate")?);
        fl.ops_per_sec = Some(pr.need("turn_floor_rate")?);
        ring.extra
            .insert("fastest_chunk".into(), pr.need("turn_ring_fastest")?);
        fl.extra
            .insert("fastest_chunk".into(), pr.need("turn_floor_fastest")?);
        let events = (pairs + 1) as u64 * CHUNK;
        for r in [&mut ring, &mut fl] {
            r.published = Some(events);
            r.delivered = Some(events);
            r.dropped = Some(0);
            r.samples = pairs as u64;
            r.consumer_cpu = c.get("cpu_share");
            r.producer_cpu = pr.get("cpu_share");
            r.extra.insert("event_bytes".into(), 8.0);
            r.extra.insert("chunk".into(), CHUNK as f64);
        }
        for key in ["pairs", "kept", "slow", "beaten"] {
            ring.extra
                .insert(key.into(), pr.need(&format!("turn_{key}"))?);
        }
        if kept > 0 {
            for key in ["ratio", "least", "greatest"] {
                ring.extra
                    .insert(key.into(), pr.need(&format!("turn_{key}"))?);
            }
        }
        Ok((ring, fl))
    })();
    let _ = std::fs::remove_file(&floor_path);
    measured.unwrap_or_else(|e| {
        (
            Row::new(SUITE, group, RING_ROW, Kind::Throughput).failed(&e),
            Row::new(SUITE, group, FLOOR_ROW, Kind::Throughput).failed(&e),
        )
    })
}

/// Write what `judge` says into a role's results (`turn_*` keys).
pub fn report(m: &mut shmring_peers::kit::Measured, j: &Judged) {
    m.set("turn_pairs", j.pairs as f64)
        .set("turn_kept", j.ratios.len() as f64)
        .set("turn_slow", j.slow as f64)
        .set("turn_beaten", j.beaten as f64)
        .set("turn_ring_rate", j.ring_rate)
        .set("turn_floor_rate", j.floor_rate)
        .set("turn_ring_fastest", j.ring_fastest)
        .set("turn_floor_fastest", j.floor_fastest);
    if let Some((median, least, greatest)) = paired::spread(&j.ratios) {
        m.set("turn_ratio", median)
            .set("turn_least", least)
            .set("turn_greatest", greatest);
    }
}

/// The ratio of round `r`'s measurement in turn, if at least [`MIN_PAIRS`] pairs were
/// kept: `Some(None)` when it measured but too few pairs were left, `None` when the round
/// has no such row.
pub fn round_ratio(rows: &[Row], r: usize) -> Option<Option<f64>> {
    let g = paired::round(r);
    let row = rows.iter().find(|x| {
        x.suite == paired::SUITE && x.group == g && x.name == RING_ROW && x.error.is_none()
    })?;
    let kept = row.extra.get("kept").copied().unwrap_or(0.0) as usize;
    Some(
        row.extra
            .get("ratio")
            .copied()
            .filter(|_| kept >= MIN_PAIRS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(rate_m: f64) -> u64 {
        (CHUNK as f64 * 1e9 / (rate_m * 1e6)) as u64
    }

    #[test]
    fn judge_keeps_pairs_in_one_placement_with_the_floor_ahead() {
        let pairs = [
            // Fast placement: kept, ratios 0.8 and 0.9.
            (ns(640.0), ns(800.0)),
            (ns(720.0), ns(800.0)),
            // The ring chunk fell into the slow placement: left out as slow.
            (ns(80.0), ns(800.0)),
            // Both slow: left out as slow (the fastest chunks are fast ones).
            (ns(80.0), ns(50.0)),
            // The ring ahead of the floor by more than BEATEN: left out.
            (ns(800.0), ns(600.0)),
            // Kept: 1.0.
            (ns(700.0), ns(700.0)),
        ];
        let j = judge(&pairs, CHUNK);
        assert_eq!(j.pairs, 6);
        assert_eq!((j.slow, j.beaten), (2, 1));
        let r: Vec<String> = j.ratios.iter().map(|v| format!("{v:.2}")).collect();
        assert_eq!(r, ["0.80", "0.90", "1.00"]);
        // Medians over every pair, kept or not.
        assert!((j.floor_rate / 1e6 - 750.0).abs() < 1.0, "{}", j.floor_rate);
        assert!((j.ring_rate / 1e6 - 670.0).abs() < 1.0, "{}", j.ring_rate);
        assert!((j.ring_fastest / 1e6 - 800.0).abs() < 1.0);
        assert!((j.floor_fastest / 1e6 - 800.0).abs() < 1.0);
    }

    #[test]
    fn a_run_wholly_in_the_slow_placement_is_left_out_as_beaten() {
        // Where the floor ring runs slower than the fixed-size ring (39-61 against 81-84
        // M/s, 2026-12-01), no pair is slow against its own run and every one is beaten.
        let pairs = [
            (ns(83.0), ns(50.0)),
            (ns(81.0), ns(61.0)),
            (ns(84.0), ns(39.0)),
        ];
        let j = judge(&pairs, CHUNK);
        assert_eq!((j.pairs, j.slow, j.beaten), (3, 0, 3));
        assert!(j.ratios.is_empty());
    }

    #[test]
    fn round_ratio_needs_min_pairs_kept() {
        let row = |kept: usize, ratio: Option<f64>| {
            let mut r = Row::new(paired::SUITE, &paired::round(2), RING_ROW, Kind::Throughput);
            r.extra.insert("kept".into(), kept as f64);
            if let Some(v) = ratio {
                r.extra.insert("ratio".into(), v);
            }
            r
        };
        assert_eq!(
            round_ratio(&[row(MIN_PAIRS, Some(0.9))], 2),
            Some(Some(0.9))
        );
        assert_eq!(round_ratio(&[row(MIN_PAIRS - 1, Some(0.9))], 2), Some(None));
        assert_eq!(round_ratio(&[row(0, None)], 2), Some(None));
        // Another round, or a failed row: nothing.
        assert_eq!(round_ratio(&[row(MIN_PAIRS, Some(0.9))], 3), None);
        let failed = row(MIN_PAIRS, Some(0.9)).failed(&anyhow!("x"));
        assert_eq!(round_ratio(&[failed], 2), None);
    }
}
