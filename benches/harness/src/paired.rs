//! Suite `paired`: the rows behind the throughput targets (the floor ring, shmring's 1P1C
//! per-event and batch-100 rows with 8-byte events, and the `disruptor` crate), measured
//! one after the other in each of several rounds, in an order rotated from round to round.
//!
//! A ratio of two rows measured a minute apart is only as good as the machine's steadiness
//! over that minute: on a shared 2-vCPU guest the speed of a cross-core line transfer can
//! change several-fold from one second to the next (ARCHITECTURE.md, "What the slot format
//! costs"). Here the two rows of a ratio run seconds apart, round after round; the targets
//! table gives the median of the rounds' ratios and their range. A median of five rounds
//! still moves when three of them are disturbed: read the range beside it.

use anyhow::Result;

use crate::row::{Kind, Row};
use crate::run::Ctx;
use crate::spsc::Format;
use crate::{peers, throughput};

pub const SUITE: &str = "paired";
/// Rounds of the four rows.
pub const ROUNDS: usize = 5;
/// The rows of each round, by their names in `throughput` and `peers`.
pub const FLOOR_ROW: &str = throughput::FLOOR_ROW;
pub const DISRUPTOR_ROW: &str = peers::DISRUPTOR;

/// Row name of a 1P1C row of the round, as `throughput` names it.
pub fn shm_row(batch: usize) -> String {
    throughput::name(batch, 8)
}

/// The group of round `r` (from 1).
pub fn round(r: usize) -> String {
    format!("round {r}")
}

/// Rows this suite adds.
pub fn rows() -> u64 {
    (ROUNDS * 4) as u64
}

/// Measure.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for r in 1..=ROUNDS {
        let group = round(r);
        ctx.bar.set_message(format!("paired: {group}"));
        // Rotated, so that no row always runs first (or always after the same one).
        let mut rows = Vec::with_capacity(4);
        for k in 0..4 {
            rows.push(match (k + r) % 4 {
                0 => throughput::floor_row(ctx, Format::Bare, &group, FLOOR_ROW),
                1 => throughput::one_row(ctx, 1, &shm_row(1), &group),
                2 => throughput::one_row(ctx, 100, &shm_row(100), &group),
                _ => peers::disruptor_throughput(ctx, &group),
            });
        }
        for mut row in rows {
            row.suite = SUITE.to_owned();
            row.group.clone_from(&group);
            debug_assert_eq!(row.kind, Kind::Throughput);
            ctx.push(row);
        }
    }
    Ok(())
}

/// The ratio `a / b` of each round that measured both rows (best 100 ms of each).
pub fn ratios(rows: &[Row], a: &str, b: &str) -> Vec<f64> {
    let ops = |group: &str, name: &str| {
        rows.iter()
            .find(|r| r.suite == SUITE && r.group == group && r.name == name && r.error.is_none())
            .and_then(|r| r.best_ops_per_sec.or(r.ops_per_sec))
    };
    (1..=ROUNDS)
        .filter_map(|r| {
            let g = round(r);
            match (ops(&g, a), ops(&g, b)) {
                (Some(x), Some(y)) if y > 0.0 => Some(x / y),
                _ => None,
            }
        })
        .collect()
}

/// Median, least and greatest of `v` (`None` when empty).
pub fn spread(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    Some((median, s[0], s[n - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(group: &str, name: &str, ops: f64) -> Row {
        let mut r = Row::new(SUITE, group, name, Kind::Throughput);
        r.best_ops_per_sec = Some(ops);
        r
    }

    #[test]
    fn ratios_pair_rows_of_the_same_round_only() {
        let mut failed = row(&round(3), "b", 7.0);
        failed.error = Some("no delivery window".into());
        let mut elsewhere = row(&round(4), "b", 9.0);
        elsewhere.suite = "throughput".into();
        let rows = vec![
            // Round 1 lacks `b`: no ratio, and not a ratio against another round's `b`.
            row(&round(1), "a", 1.0),
            row(&round(2), "a", 10.0),
            row(&round(2), "b", 5.0),
            // Round 3's `b` failed, round 4's is another suite's, round 5's is zero.
            row(&round(3), "a", 4.0),
            failed,
            row(&round(4), "a", 4.0),
            elsewhere,
            row(&round(5), "a", 4.0),
            row(&round(5), "b", 0.0),
            row(&round(6), "a", 30.0),
            row(&round(6), "b", 10.0),
        ];
        // Round 6 is past `ROUNDS`: not read.
        assert_eq!(ROUNDS, 5);
        assert_eq!(ratios(&rows, "a", "b"), vec![2.0]);
        let rows = [
            row(&round(1), "a", 10.0),
            row(&round(1), "b", 5.0),
            row(&round(3), "b", 10.0),
            row(&round(3), "a", 30.0),
        ];
        assert_eq!(ratios(&rows, "a", "b"), vec![2.0, 3.0]);
    }

    #[test]
    fn spread_is_median_least_greatest() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]), Some((2.5, 1.0, 4.0)));
    }
}
