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
//! event's hand-over and one line transfer more (milliseconds against about a quarter of a
//! microsecond). Every chunk starts from an empty ring and a caught-up consumer, on either
//! side.
//!
//! Each ring chunk is judged against the two floor chunks around it (the one before it,
//! ending the previous pair, and the one after it, ending its own). The guest's placement
//! changes every few seconds at most, and a chunk lasts milliseconds: when those two floor
//! chunks agree within [`paired::STEADY`], the ring chunk between them ran where they did,
//! and its ratio is its rate over their mean; when they do not, the placement changed around
//! it and the pair is left out (`mixed`). A pair whose ring chunk outran that mean by more
//! than [`paired::BEATEN`] is left out too (`beaten`): there the floor ring was not at its
//! best (as with the rows apart, where it runs slower than shmring's rows in the guest's
//! slow placement). That rule drops only ratios above the bar, so it can lower a median,
//! never raise it. The measurement's ratio is the median of the pairs kept. The first pair
//! (page faults, caches) is not judged; its floor chunk is only the one before pair 1's
//! ring chunk.

use anyhow::{ensure, Result};
use shmring::ProducerMode;

use crate::paired;
use crate::row::{Kind, Row};
use crate::run::Ctx;
use crate::shm::{self, kv, Setup};
use crate::throughput::SUITE;

/// Events per chunk: at the 40-550 M events/s either side ran at on the 2-vCPU guest, 2-26
/// ms, so that the chunks around a pair nearly always run in one placement (it changes
/// every few seconds at most) and a round's two seconds hold dozens of pairs or hundreds.
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
    /// Pairs judged (every pair after the first).
    pub pairs: usize,
    /// Each kept pair's ring rate over the mean of the floor chunks around it.
    pub ratios: Vec<f64>,
    /// Pairs left out: the floor chunks around the ring chunk differ by more than
    /// `paired::STEADY`.
    pub mixed: usize,
    /// Pairs left out: the ring chunk above `paired::BEATEN` times the floor around it.
    pub beaten: usize,
    /// Each side's events over its chunks' time, every judged pair (events/s).
    pub ring_rate: f64,
    pub floor_rate: f64,
    /// The median chunk rate of each side over every judged pair (events/s).
    pub ring_median: f64,
    pub floor_median: f64,
    /// The fastest chunk of each side over every judged pair (events/s).
    pub ring_fastest: f64,
    pub floor_fastest: f64,
}

/// Judge the pairs `(ring chunk ns, floor chunk ns)` of `chunk` events each, in the order
/// they ran; the first is the warm-up pair.
pub fn judge(pairs: &[(u64, u64)], chunk: u64) -> Judged {
    let rate = |ns: u64| chunk as f64 * 1e9 / ns.max(1) as f64;
    let mut j = Judged {
        pairs: pairs.len().saturating_sub(1),
        ..Default::default()
    };
    for w in pairs.windows(2) {
        let (before, (ring_ns, floor_ns)) = (rate(w[0].1), w[1]);
        let (ring, after) = (rate(ring_ns), rate(floor_ns));
        let floor = (before + after) / 2.0;
        if !(1.0 / paired::STEADY..=paired::STEADY).contains(&(after / before)) {
            j.mixed += 1;
        } else if ring > floor * paired::BEATEN {
            j.beaten += 1;
        } else {
            j.ratios.push(ring / floor);
        }
    }
    let judged = pairs.get(1..).unwrap_or_default();
    let side = |pick: fn(&(u64, u64)) -> u64| {
        let total: u64 = judged.iter().map(pick).sum();
        let rates: Vec<f64> = judged.iter().map(|p| rate(pick(p))).collect();
        let median = paired::spread(&rates).map_or(0.0, |(m, _, _)| m);
        let fastest = rates.iter().copied().fold(0.0, f64::max);
        let overall = if total == 0 {
            0.0
        } else {
            (chunk * judged.len() as u64) as f64 * 1e9 / total as f64
        };
        (overall, median, fastest)
    };
    (j.ring_rate, j.ring_median, j.ring_fastest) = side(|p| p.0);
    (j.floor_rate, j.floor_median, j.floor_fastest) = side(|p| p.1);
    j
}

/// Measure the pair in turn for `ctx.sizes.throughput` of each side: the ring's row and the
/// floor's, in `group`, each at its events over its chunks' time (`extra`: `median_chunk`,
/// `fastest_chunk`). The ring's row carries the judged ratio (`extra`: `ratio`, `least`,
/// `greatest`, `pairs`, `kept`, `mixed`, `beaten`).
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
            // The run ends at the first pair past twice the duration; the slowest chunks
            // seen took about 26 ms. Far more than that means a process is stuck.
            timeout: dur * 40 + std::time::Duration::from_secs(60),
        };
        let p = shm::run(ctx, "turn", setup)?;
        let (c, pr) = (&p.consumers[0], &p.producers[0]);
        let pairs = pr.need("turn_pairs")? as u64;
        let kept = pr.need("turn_kept")? as usize;
        ensure!(pairs > 0, "no pair measured after the warm-up");
        // Each side published a chunk per pair, the warm-up pair included; the consumer says
        // what it read of each.
        let each = (pairs + 1) * CHUNK;
        let read = [c.need("turn_ring_read")?, c.need("turn_floor_read")?];
        ensure!(
            read.iter().all(|&n| n == each as f64),
            "the consumer read {} ring and {} floor events of {each} each",
            read[0],
            read[1]
        );
        let mut ring = Row::new(SUITE, group, RING_ROW, Kind::Throughput);
        let mut fl = Row::new(SUITE, group, FLOOR_ROW, Kind::Throughput);
        for (r, side) in [(&mut ring, "ring"), (&mut fl, "floor")] {
            r.ops_per_sec = Some(pr.need(&format!("turn_{side}_rate"))?);
            for key in ["median", "fastest"] {
                r.extra.insert(
                    format!("{key}_chunk"),
                    pr.need(&format!("turn_{side}_{key}"))?,
                );
            }
            r.published = Some(each);
            r.delivered = Some(each);
            r.dropped = Some(0);
            r.samples = pairs;
            r.consumer_cpu = c.get("cpu_share");
            r.producer_cpu = pr.get("cpu_share");
            r.extra.insert("event_bytes".into(), 8.0);
            r.extra.insert("chunk".into(), CHUNK as f64);
        }
        for key in ["pairs", "kept", "mixed", "beaten"] {
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
        .set("turn_mixed", j.mixed as f64)
        .set("turn_beaten", j.beaten as f64)
        .set("turn_ring_rate", j.ring_rate)
        .set("turn_floor_rate", j.floor_rate)
        .set("turn_ring_median", j.ring_median)
        .set("turn_floor_median", j.floor_median)
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
    use anyhow::anyhow;

    /// A chunk's time at `m` million events a second.
    fn ns(m: f64) -> u64 {
        (CHUNK as f64 * 1e9 / (m * 1e6)).round() as u64
    }

    fn shown(v: &[f64]) -> Vec<String> {
        v.iter().map(|r| format!("{r:.2}")).collect()
    }

    #[test]
    fn each_ring_chunk_is_judged_against_the_floor_chunks_around_it() {
        let pairs = [
            // Warm-up: its ring chunk is not judged; its floor chunk is the one before pair
            // 1's ring chunk.
            (ns(10.0), ns(800.0)),
            // Kept: 640 over the mean of 800 and 800.
            (ns(640.0), ns(800.0)),
            // Kept: 700 over the mean of 800 and 700 (0.875x apart, within 1.25x).
            (ns(700.0), ns(700.0)),
            // Mixed: the floor went from 700 to 60 around it.
            (ns(80.0), ns(60.0)),
            // Kept, in another placement: 50 over the mean of 60 and 60.
            (ns(50.0), ns(60.0)),
            // Beaten: 80 against 60 and 60.
            (ns(80.0), ns(60.0)),
        ];
        let j = judge(&pairs, CHUNK);
        assert_eq!((j.pairs, j.mixed, j.beaten), (5, 1, 1));
        assert_eq!(shown(&j.ratios), ["0.80", "0.93", "0.83"]);
        // Over the judged pairs only: the warm-up's 10 M/s ring chunk is not among them.
        assert!(
            (j.ring_fastest / 1e6 - 700.0).abs() < 0.01,
            "{}",
            j.ring_fastest
        );
        assert!(
            (j.ring_median / 1e6 - 80.0).abs() < 0.01,
            "{}",
            j.ring_median
        );
        assert!((j.floor_fastest / 1e6 - 800.0).abs() < 0.01);
        assert!((j.floor_median / 1e6 - 60.0).abs() < 0.01);
        // Events over time: five chunks in 1/640 + 1/700 + 1/80 + 1/50 + 1/80 seconds per
        // million events.
        let expected = 5.0 / (1.0 / 640.0 + 1.0 / 700.0 + 1.0 / 80.0 + 1.0 / 50.0 + 1.0 / 80.0);
        assert!(
            (j.ring_rate / 1e6 - expected).abs() < 0.01,
            "{}",
            j.ring_rate
        );
    }

    #[test]
    fn three_speeds_in_a_round_each_keep_their_own_ratio() {
        // A round of 2026-12-02: both sides at about 160 M/s, then the floor alone at about
        // 520 with the ring at 200. Each pair is judged where it ran; only the pair whose
        // floor chunks straddle the change is left out.
        let mut pairs = vec![(ns(160.0), ns(170.0)); 5];
        pairs.extend([(ns(200.0), ns(520.0)); 4]);
        let j = judge(&pairs, CHUNK);
        assert_eq!((j.pairs, j.mixed, j.beaten), (8, 1, 0));
        let r = shown(&j.ratios);
        assert_eq!(r[..4], ["0.94"; 4]);
        assert_eq!(r[4..], ["0.38"; 3]);
    }

    #[test]
    fn the_bounds() {
        // Floor chunks exactly STEADY apart (125 and 100 M/s: exact chunk times) are one
        // placement, a little more apart are not; a ring chunk just under BEATEN times the
        // floor is kept, just over it is not.
        let j = judge(&[(ns(1.0), ns(100.0)), (ns(100.0), ns(125.0))], CHUNK);
        assert_eq!((j.mixed, j.beaten, j.ratios.len()), (0, 0, 1));
        let j = judge(&[(ns(1.0), ns(100.0)), (ns(100.0), ns(126.0))], CHUNK);
        assert_eq!((j.mixed, j.ratios.len()), (1, 0));
        let j = judge(&[(ns(1.0), ns(100.0)), (ns(119.0), ns(100.0))], CHUNK);
        assert_eq!((j.mixed, j.beaten), (0, 0));
        assert_eq!(shown(&j.ratios), ["1.19"]);
        let j = judge(&[(ns(1.0), ns(100.0)), (ns(121.0), ns(100.0))], CHUNK);
        assert_eq!((j.beaten, j.ratios.len()), (1, 0));
    }

    #[test]
    fn a_warm_up_pair_alone_judges_nothing() {
        for pairs in [&[][..], &[(ns(50.0), ns(60.0))][..]] {
            let j = judge(pairs, CHUNK);
            assert_eq!((j.pairs, j.ratios.len(), j.mixed, j.beaten), (0, 0, 0, 0));
            assert_eq!(
                (j.ring_rate, j.floor_median, j.ring_fastest),
                (0.0, 0.0, 0.0)
            );
        }
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
