//! Suite `paired`: the rows behind the throughput targets and the bounds (the floor ring,
//! shmring's 1P1C per-event and batch-100 rows with 8-byte events, on a ring of stamped
//! slots and on one of fixed-size events (its consumer taking one event per handler call,
//! or a run at a time; per event, its producer also through a `Publisher`), the
//! `disruptor` crate and iceoryx2; for the bounds only, `targets::bounds`, the floor ring
//! publishing its head once per 100 events, the floor of the batch-100 rows on fixed-size
//! rings, [`FLOOR_BATCH_EITHER`], and the floor ring in the 16-byte slots of a ring of sized
//! events, [`SIZED_FLOOR_EITHER`]) and behind the busy-spin latency targets (the spin floor
//! and shmring's busy-spin consumer, ping-pong and paced 100 µs), measured one after the
//! other in each of several rounds, in an order rotated from round to round.
//!
//! A ratio of two rows measured a minute apart is only as good as the machine's steadiness
//! over that minute: on a shared 2-vCPU guest the speed of a cross-core line transfer can
//! change several-fold from one second to the next (ARCHITECTURE.md, "What the slot format
//! costs"). Here the two rows of a ratio run seconds apart, round after round; the targets
//! table gives the median of the rounds' ratios and their range. A median of five rounds
//! still moves when three of them are disturbed: read the range beside it.
//!
//! The floor ring is measured read with pauses after each run ([`FLOOR_GATHER_ROW`]) as
//! each round's first row, read plainly in its rotation, and both ways again as its last
//! rows. A caught-up reader that looks at every event or few holds back the producer it
//! watches: on the Intel Xeon guest the plain floor ring swung between 37 and 364 M
//! events/s from row to row while the one read with pauses ran at 265-429 (three full
//! runs, 2026-12-06).
//! So the floor a row is divided by is the round's faster of the two ([`FLOOR_EITHER`];
//! the pauses can only raise it), and the rows on fixed-size and sized rings are read by a
//! consumer that gathers ([`GATHER`]), as in turn. A round whose floor read with pauses
//! moved by more than [`STEADY`] from its first row to its last ran in two placements of
//! the guest and decides no throughput target. Nor does
//! a round in which one row of a ratio ran below its fastest round (in any round, steady or
//! not) divided by [`SLOW`]: that row alone fell into the slow placement, between floor rows
//! that did not, or the whole round ran there. Nor does a round in which one of shmring's
//! per-event rows outran the floor ring by more than [`BEATEN`]: the floor was not at its
//! best there (a run that never left the slow placement, which the rows' fastest rounds
//! cannot show). The targets table says how many rounds each ratio left out, and why.

use anyhow::Result;

use crate::row::{Kind, Row};
use crate::run::Ctx;
use crate::spsc::Format;
use crate::{floor, latency, peers, throughput, turn};

pub const SUITE: &str = "paired";
/// Rounds of the rows (the throughput rows, the rows measured in turn (`turn`), the floor
/// ring again, plainly and with pauses, and a busy-spin row and its floor per latency
/// shape).
pub const ROUNDS: usize = 5;
/// The rows of each round, by their names in `throughput` and `peers`.
pub const FLOOR_ROW: &str = throughput::FLOOR_ROW;
/// The floor ring again, the last row of each round but one.
pub const FLOOR_AGAIN_ROW: &str = "bare SPSC ring, end of the round";
/// The floor ring, its reader pausing `turn::FLOOR_GATHER` spins after each run (as the
/// floor chunk of the same kind in turn): a caught-up reader that looks at every event or
/// few holds back the producer it watches, so the plain floor ring swings with how often
/// its reader looks (PERFORMANCE.md, "Run reads that gather").
pub const FLOOR_GATHER_ROW: &str = "bare SPSC ring, per-event, 8 B, read with pauses";
/// [`FLOOR_GATHER_ROW`] again, the last row of each round.
pub const FLOOR_GATHER_AGAIN_ROW: &str = "bare SPSC ring read with pauses, end of the round";
/// The floor ring publishing its head once per `throughput::FLOOR_BATCH` events, read
/// plainly.
pub const FLOOR_BATCH_ROW: &str = "bare SPSC ring, batch-100, 8 B";
/// [`FLOOR_BATCH_ROW`] read by a reader that gathers as the batch-100 rows on fixed-size and
/// sized rings do ([`GATHER`] spins after each run).
pub const FLOOR_BATCH_GATHER_ROW: &str = "bare SPSC ring, batch-100, 8 B, a reader that gathers";
/// The floor of the batch-100 rows: in each round the faster of [`FLOOR_BATCH_ROW`] and
/// [`FLOOR_BATCH_GATHER_ROW`] (a name for [`ratios`], no row of its own), as
/// [`FLOOR_EITHER`] is of the per-event rows; and what a floor reaches of the bar the
/// batch-100 targets set against the `disruptor` crate (`targets::bounds`).
pub const FLOOR_BATCH_EITHER: &str =
    "bare SPSC ring, batch-100, 8 B, read plainly or with gather (the faster)";
/// The floor ring with the slots of a ring of sized events of up to 8 bytes (a length word
/// and the event in 16 bytes, `spsc::Format::Sized`), per event, read plainly.
pub const SIZED_FLOOR_ROW: &str = "bare SPSC ring of 16-byte slots (length + 8 B), per-event";
/// [`SIZED_FLOOR_ROW`] read with `turn::FLOOR_GATHER` spins after each run, as the floor
/// ring of 8-byte slots read with pauses ([`FLOOR_GATHER_ROW`]): the two floors compared in
/// the format's bound read the same two ways.
pub const SIZED_FLOOR_GATHER_ROW: &str =
    "bare SPSC ring of 16-byte slots (length + 8 B), per-event, read with pauses";
/// The floor of the per-event row on a ring of sized events: each round's faster of
/// [`SIZED_FLOOR_ROW`] and [`SIZED_FLOOR_GATHER_ROW`] (a name for [`ratios`]); and what a
/// floor in that format reaches of the bars the sized-event targets set against the floor
/// ring of 8-byte slots and the `disruptor` crate (`targets::bounds`).
pub const SIZED_FLOOR_EITHER: &str =
    "bare SPSC ring of 16-byte slots (length + 8 B), per-event, read plainly or with pauses (the faster)";
/// The floor the throughput rows are divided by: in each round the faster of
/// [`FLOOR_ROW`] and [`FLOOR_GATHER_ROW`] (a name for [`ratios`] and the targets' text, no
/// row of its own). The pauses can only raise the floor, never lower the bar.
pub const FLOOR_EITHER: &str =
    "bare SPSC ring, per-event, 8 B, read plainly or with pauses (the faster)";
/// How far a round's floor may move (either way) from its first row to its last for its
/// throughput ratios to count (see [`steady`]).
pub const STEADY: f64 = 1.25;
pub const DISRUPTOR_ROW: &str = peers::DISRUPTOR;
/// iceoryx2's per-event row (busy-poll subscriber).
pub const IOX_ROW: &str = peers::IOX;

/// The latency pairs of a round: (shmring's row name here, the `latency` group it is
/// measured in, the spin floor row it is divided by).
pub const LATENCY: [(&str, &str, &str); 3] = [
    (BUSY_PINGPONG, latency::PINGPONG, floor::SPIN_PINGPONG),
    (BUSY_PACED, latency::PACED, floor::SPIN_PACED),
    (BUSY_PACED_INTERLEAVED, INTERLEAVED, SPIN_PACED_INTERLEAVED),
];
/// The shape of the interleaved pair: both rows from one measurement
/// (`latency::paced_interleaved`).
pub const INTERLEAVED: &str = "interleaved";
/// shmring's busy-spin consumer, paced 100 µs, one-way, in turn with the spin floor in the
/// same processes.
pub const BUSY_PACED_INTERLEAVED: &str = "busy-spin, paced 100 µs, in turn with the floor";
/// The spin floor measured in turn with [`BUSY_PACED_INTERLEAVED`].
pub const SPIN_PACED_INTERLEAVED: &str = "spin, paced 100 µs, in turn with busy-spin";
/// A bare ring of lines measured in turn with [`BUSY_PACED_INTERLEAVED`] and its floor
/// (`latency::paced_interleaved`): what the guest charges for a new line per event, with
/// nothing of shmring's in the path; compared with the spin floor of its own round.
pub const BARE_PACED_INTERLEAVED: &str =
    "bare ring of 1024 lines, paced 100 µs, in turn with busy-spin";
/// shmring's busy-spin consumer, back-to-back ping-pong over two rings, one-way.
pub const BUSY_PINGPONG: &str = "busy-spin, ping-pong";
/// shmring's busy-spin consumer, paced 100 µs, one-way.
pub const BUSY_PACED: &str = "busy-spin, paced 100 µs";

/// Row name of a 1P1C row of the round on stamped slots, as `throughput` names it.
pub fn shm_row(batch: usize) -> String {
    throughput::name(batch, 8)
}

/// The spins the consumers of the rows on fixed-size and sized rings pause after each
/// batch or run (`ConsumerOptions::gather`), as in turn (`turn::GATHER`); a ring of stamped
/// slots takes none.
pub const GATHER: u32 = turn::GATHER;

/// Row name of the round's row on a fixed-size or sized ring named `name` in `throughput`:
/// its consumer gathers ([`GATHER`]).
pub fn gathering_row(name: &str) -> String {
    throughput::gathering(name)
}

/// The group of round `r` (from 1).
pub fn round(r: usize) -> String {
    format!("round {r}")
}

/// The latency rows' group in round `r` (from 1): a table holds one kind of row.
pub fn latency_round(r: usize) -> String {
    format!("round {r}, latency")
}

/// Rows of a round: the floor read with pauses first, the throughput units but the one in
/// turn (a row each, the batched floor and the floor of sized slots two each) and the
/// sides in turn, a latency pair's two rows each (the pair in turn three, with the bare
/// ring), and the two floor rows at the end.
fn round_rows() -> usize {
    1 + (THROUGHPUT_UNITS - 1) + 2 + turn::sides().len() + 2 * LATENCY.len() + 1 + 2
}

/// Rows this suite adds.
pub fn rows() -> u64 {
    (ROUNDS * round_rows()) as u64
}

/// The throughput units of a round, rotated: twelve rows, the batched floor's two, the
/// floor of sized slots' two and the sides in turn.
const THROUGHPUT_UNITS: usize = 15;

/// Measure.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    // The throughput units (fourteen and the sides in turn; the two floors read both ways
    // are two of the fourteen), then one unit per latency pair (its floor and busy-spin
    // row).
    const UNITS: usize = THROUGHPUT_UNITS + LATENCY.len();
    for r in 1..=ROUNDS {
        let group = round(r);
        let lat_group = latency_round(r);
        ctx.bar.set_message(format!("paired: {group}"));
        let mut rows = Vec::with_capacity(round_rows());
        // First, whatever the rotation: the floor read with pauses, against which the same
        // row at the end tells whether the round stayed in one placement (see `steady`).
        rows.push(throughput::floor_gather_row(ctx, &group, FLOOR_GATHER_ROW));
        // The units rotated, so that the first row changes from round to round (a unit still
        // follows the same one unless it runs first); a latency pair runs its two rows back
        // to back, floor first in odd rounds and busy-spin first in even ones.
        for k in 0..UNITS {
            match (k + r) % UNITS {
                0 => rows.push(throughput::floor_row(ctx, Format::Bare, &group, FLOOR_ROW)),
                1 => rows.push(throughput::one_row(ctx, 1, &shm_row(1), &group)),
                2 => rows.push(throughput::one_row(ctx, 100, &shm_row(100), &group)),
                3 => rows.push(peers::disruptor_throughput(ctx, &group)),
                4 => rows.push(throughput::fixed_row(ctx, 1, false, GATHER, &group)),
                5 => rows.push(throughput::fixed_row(ctx, 100, false, GATHER, &group)),
                6 => rows.push(throughput::fixed_row(ctx, 1, true, GATHER, &group)),
                7 => rows.push(throughput::fixed_row(ctx, 100, true, GATHER, &group)),
                8 => rows.push(throughput::fixed_publisher_row(ctx, GATHER, &group)),
                9 => rows.extend(turn::rows(ctx, &group)),
                10 => rows.push(peers::iox_throughput_row(ctx, &group)),
                11 => rows.push(throughput::sized_row(ctx, 1, GATHER, &group)),
                12 => rows.push(throughput::sized_row(ctx, 100, GATHER, &group)),
                u @ (13 | 14) => {
                    // A floor of the bounds, its two readers back to back, the plain one
                    // first in odd rounds.
                    type FloorRow = fn(&mut Ctx, u32, &str, &str) -> Row;
                    let (row, pause, plain, paused): (FloorRow, u32, &str, &str) = if u == 13 {
                        let batch: FloorRow = throughput::floor_batch_row;
                        (batch, GATHER, FLOOR_BATCH_ROW, FLOOR_BATCH_GATHER_ROW)
                    } else {
                        let sized: FloorRow = throughput::floor_sized_row;
                        let (plain, paused) = (SIZED_FLOOR_ROW, SIZED_FLOOR_GATHER_ROW);
                        (sized, turn::FLOOR_GATHER, plain, paused)
                    };
                    for with_pause in [r % 2 == 0, r % 2 == 1] {
                        rows.push(if with_pause {
                            row(ctx, pause, &group, paused)
                        } else {
                            row(ctx, 0, &group, plain)
                        });
                    }
                }
                u if LATENCY[u - THROUGHPUT_UNITS].1 == INTERLEAVED => {
                    let (name, _, spin_floor) = LATENCY[u - THROUGHPUT_UNITS];
                    let names = latency::InTurn {
                        ring: name,
                        floor: spin_floor,
                        bare: BARE_PACED_INTERLEAVED,
                    };
                    let (busy, spin, bare) = latency::paced_interleaved(ctx, &lat_group, &names);
                    rows.extend([spin, busy, bare]);
                }
                u => {
                    let (name, shape, spin_floor) = LATENCY[u - THROUGHPUT_UNITS];
                    for floor_now in [r % 2 == 1, r % 2 == 0] {
                        rows.push(if floor_now {
                            floor::one(ctx, spin_floor, &lat_group)
                        } else {
                            let mut row = latency::one(ctx, shape, "busy-spin");
                            row.name = name.to_owned();
                            row
                        });
                    }
                }
            }
        }
        // Last, whatever the rotation: the floor again, both ways (see `steady`).
        rows.push(throughput::floor_row(
            ctx,
            Format::Bare,
            &group,
            FLOOR_AGAIN_ROW,
        ));
        rows.push(throughput::floor_gather_row(
            ctx,
            &group,
            FLOOR_GATHER_AGAIN_ROW,
        ));
        for row in finish_round(rows, r) {
            ctx.push(row);
        }
    }
    Ok(())
}

/// The rows of round `r` as this suite records them: its suite and groups (throughput rows
/// in `round(r)`, latency rows in `latency_round(r)`), each busy-spin row (and the bare ring
/// in turn) compared with the spin floor of this round only (and with none if that floor
/// failed).
fn finish_round(mut rows: Vec<Row>, r: usize) -> Vec<Row> {
    let bare = (BARE_PACED_INTERLEAVED, "", SPIN_PACED_INTERLEAVED);
    for (name, _, spin_floor) in LATENCY.into_iter().chain([bare]) {
        let f = rows
            .iter()
            .find(|x| x.name == spin_floor && x.error.is_none())
            .cloned();
        if let Some(row) = rows.iter_mut().find(|x| x.name == name) {
            row.floor = None;
            row.x_floor_p50 = None;
            row.x_floor_p999 = None;
            if let Some(f) = f {
                row.against(&f);
            }
        }
    }
    for row in &mut rows {
        row.suite = SUITE.to_owned();
        row.group = if row.kind == Kind::Latency {
            latency_round(r)
        } else {
            round(r)
        };
    }
    rows
}

/// The ratios of two throughput rows over the rounds, and the rounds left out of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ratios {
    /// `a / b` of each round that counts (best 100 ms of each row).
    pub values: Vec<f64>,
    /// Rounds that measured both rows but whose floor moved beyond [`STEADY`].
    pub unsteady: usize,
    /// Steady rounds in which a per-event row ran faster than [`BEATEN`] times the floor
    /// ring: the floor was not at its best there.
    pub beaten: usize,
    /// Steady rounds, not beaten, in which one of the two rows ran below its fastest round
    /// divided by [`slow_factor`]: that row (or the whole round) ran in the slow placement.
    pub slow: usize,
    /// Rounds whose measurement in turn kept fewer than [`turn::MIN_PAIRS`] pairs.
    pub few: usize,
    /// Steady rounds, not beaten, in which a row ran faster than [`BEATEN`] times a floor
    /// among the two rows that bounds it ([`outran`]; [`bound_ratios`] only).
    pub outran: usize,
}

/// A throughput row below its fastest round divided by this ran in the guest's slow
/// placement. The two placements differ 5-10x for every row of this suite; within the
/// fast one a row moved at most 2.5x between rounds (the `disruptor` crate, two threads of
/// one process) in the runs of 2026-12-01. A round's floor rows at both ends do not catch a
/// row that alone fell into the slow placement and back.
pub const SLOW: f64 = 3.0;

/// [`SLOW`] for iceoryx2's row: its two rates differ less than shmring's rows' do (2.6-4.2
/// M/s in most rounds and 0.99-1.07 in the others, in the runs of 2026-12-03), so a third
/// of its fastest round would keep a slow round, and a slow iceoryx2 inflates every ratio
/// divided by it. Half its fastest keeps every round of its usual rate.
pub const IOX_SLOW: f64 = 2.0;

/// How far below its fastest round row `name` may run and still count as in the fast
/// placement: [`SLOW`], or [`IOX_SLOW`] for iceoryx2.
pub fn slow_factor(name: &str) -> f64 {
    if name == IOX_ROW {
        IOX_SLOW
    } else {
        SLOW
    }
}

/// A round in which one of shmring's 1P1C per-event rows of 8-byte events
/// ([`per_event_rows`]) ran faster than this times the floor ring is left out of every
/// throughput ratio. The floor ring is the least a cross-process ring of those events can
/// do per event, and each of these rows does more; in the fast placement the closest of
/// them runs at about 0.8-1.0x of it. Wholly in the slow placement, the floor ring slows
/// more than the rows do (it ran at 39-61 M/s where the fixed-size per-event row ran at
/// 81-84, 2026-12-01): a round there measures the guest, and the rows' own fastest rounds
/// ([`SLOW`]) do not catch a run that never left it. A limit: a round wholly in the slow
/// placement whose floor ring stays within this of the rows is not caught either (the
/// fixed-size row needs the floor below about 70 M/s there, the stamped rows never outrun
/// it by this much).
pub const BEATEN: f64 = 1.2;

/// shmring's 1P1C per-event rows of 8-byte events, which a round's floor ring bounds (see
/// [`BEATEN`]).
pub fn per_event_rows() -> [String; 5] {
    [
        shm_row(1),
        gathering_row(throughput::FIXED_ONE_ROW),
        gathering_row(throughput::FIXED_RUNS_ONE_ROW),
        gathering_row(throughput::FIXED_PUBLISHER_ROW),
        gathering_row(throughput::SIZED_ONE_ROW),
    ]
}

/// Rounds a throughput ratio needs to decide its target. A row measured in no round of the
/// fast placement, steady or not, passes the [`SLOW`] check in every round (its fastest
/// round is a slow one): with one or two rounds left, a ratio may still mix the placements.
pub const MIN_ROUNDS: usize = 3;

/// The ratio `a / b` of each steady round that measured both rows, no per-event row above
/// [`BEATEN`] times its floor ring, each of the two rows within [`slow_factor`] of its
/// fastest round. The fastest round of a row is sought among all rounds,
/// steady or not: a row measured in the fast placement only in a round whose floor moved
/// afterwards still shows what the fast placement gives, and so tells steady rounds that
/// ran wholly in the slow placement from the others.
pub fn ratios(rows: &[Row], a: &str, b: &str) -> Ratios {
    ratios_skipping(rows, a, b, |_| false)
}

/// As [`ratios`], for a bound (`targets::bounds`) of `a / b` where either may be a floor
/// that bounds other rows ([`FLOOR_BATCH_EITHER`], [`SIZED_FLOOR_EITHER`]): a round in which
/// a row it bounds outran it ([`outran`]) is left out too, whichever side of the ratio the
/// floor is on. So a row's bound against its own floor never exceeds [`BEATEN`]: a round
/// above it says the floor was not at its best, not that the row beat it.
pub fn bound_ratios(rows: &[Row], a: &str, b: &str) -> Ratios {
    ratios_skipping(rows, a, b, |r| outran(rows, r, a) || outran(rows, r, b))
}

/// [`ratios`], leaving out the rounds (steady, not beaten) that `skip` names, counted as
/// `outran`.
fn ratios_skipping(rows: &[Row], a: &str, b: &str, skip: impl Fn(usize) -> bool) -> Ratios {
    let best = |r: &Row| r.best_ops_per_sec.or(r.ops_per_sec);
    let steady: Vec<bool> = (1..=ROUNDS).map(|r| steady(rows, r)).collect();
    let pairs = values_by(rows, round, a, b, best);
    let peak = |pick: fn(&(usize, f64, f64)) -> f64| pairs.iter().map(pick).fold(0.0, f64::max);
    let (peak_a, peak_b) = (peak(|p| p.1), peak(|p| p.2));
    let (kept, unsteady): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|p| steady[p.0 - 1]);
    let (kept, beaten): (Vec<_>, Vec<_>) = kept.into_iter().partition(|p| !beaten(rows, p.0));
    let (kept, outran): (Vec<_>, Vec<_>) = kept.into_iter().partition(|p| !skip(p.0));
    let (slow_a, slow_b) = (slow_factor(a), slow_factor(b));
    let (fast, slow): (Vec<_>, Vec<_>) = kept
        .iter()
        .partition(|&&(_, x, y)| x * slow_a >= peak_a && y * slow_b >= peak_b);
    Ratios {
        values: fast.into_iter().map(|&(_, x, y)| x / y).collect(),
        unsteady: unsteady.len(),
        beaten: beaten.len(),
        slow: slow.len(),
        few: 0,
        outran: outran.len(),
    }
}

/// The rows of shmring a floor that no target divides by bounds: the batch-100 rows on
/// fixed-size rings, read with `gather`, by [`FLOOR_BATCH_EITHER`] (the sized ring's batches
/// are in twice as many lines, the stamped ones in a format of their own), and the sized
/// ring's per-event row by [`SIZED_FLOOR_EITHER`]. Any other name bounds none.
pub fn bounded_by(floor: &str) -> Vec<String> {
    match floor {
        FLOOR_BATCH_EITHER => vec![
            gathering_row(throughput::FIXED_BATCH_ROW),
            gathering_row(throughput::FIXED_RUNS_BATCH_ROW),
        ],
        SIZED_FLOOR_EITHER => vec![gathering_row(throughput::SIZED_ONE_ROW)],
        _ => Vec::new(),
    }
}

/// Whether in round `r` a row that `floor` bounds ([`bounded_by`]) ran faster than
/// [`BEATEN`] times it: that floor was not at its best there, as a round's floor ring
/// outrun by a per-event row ([`beaten`]).
pub fn outran(rows: &[Row], r: usize, floor: &str) -> bool {
    let best = |x: &Row| x.best_ops_per_sec.or(x.ops_per_sec);
    let g = round(r);
    let Some(f) = value_of(rows, &g, floor, &best).filter(|f| *f > 0.0) else {
        return false;
    };
    bounded_by(floor)
        .iter()
        .filter_map(|name| value_of(rows, &g, name, &best))
        .any(|v| v > f * BEATEN)
}

/// A ratio measured in turn (`turn`): row `row`'s comparison under `prefix`
/// (`turn::COMPARED`) over the rounds, each round's median of its kept pairs, the rounds
/// with too few left out.
pub fn turn_ratios(rows: &[Row], row: &str, prefix: &str) -> Ratios {
    let mut r = Ratios::default();
    for round in 1..=ROUNDS {
        match turn::round_ratio(rows, round, row, prefix) {
            Some(Some(v)) => r.values.push(v),
            Some(None) => r.few += 1,
            None => {}
        }
    }
    r
}

/// Whether a per-event row of round `r` ran faster than [`BEATEN`] times the round's floor
/// ring (the fastest of its floor rows, plain or read with pauses, at either end of the
/// round, which a steady round lets differ by up to [`STEADY`]).
fn beaten(rows: &[Row], r: usize) -> bool {
    let Some(floor) = [floor_at(rows, r, false), floor_at(rows, r, true)]
        .into_iter()
        .flatten()
        .reduce(f64::max)
        .filter(|f| *f > 0.0)
    else {
        return false;
    };
    per_event_rows()
        .iter()
        .filter_map(|name| best_in(rows, r, name))
        .any(|v| v > floor * BEATEN)
}

/// Whether round `r` stayed in one placement of the guest: its floor ring read with pauses
/// at its first row and at its last agree within [`STEADY`]. The reader with pauses holds
/// the ring near its best where the plain one swings with its own looks (on the Intel Xeon
/// guest the plain ring moved several-fold from row to row within a placement), so only a
/// change of placement moves it. A round measured without those rows (an older run's) is
/// judged by its two plain floor rows (its rotation's and its last); a round without both
/// rows of either pair, as one that failed to measure one, counts as steady: there is
/// nothing to tell.
fn steady(rows: &[Row], r: usize) -> bool {
    let best = |name: &str| best_in(rows, r, name).filter(|v| *v > 0.0);
    let within = |a: f64, b: f64| (1.0 / STEADY..=STEADY).contains(&(b / a));
    match (
        (best(FLOOR_GATHER_ROW), best(FLOOR_GATHER_AGAIN_ROW)),
        (best(FLOOR_ROW), best(FLOOR_AGAIN_ROW)),
    ) {
        ((Some(a), Some(b)), _) | (_, (Some(a), Some(b))) => within(a, b),
        _ => true,
    }
}

/// Round `r`'s floor in its rotation or at its `end`: the faster of the floor ring read
/// plainly and read with pauses, whichever were measured (for [`beaten`]).
fn floor_at(rows: &[Row], r: usize, end: bool) -> Option<f64> {
    let (plain, paused) = if end {
        (FLOOR_AGAIN_ROW, FLOOR_GATHER_AGAIN_ROW)
    } else {
        (FLOOR_ROW, FLOOR_GATHER_ROW)
    };
    [best_in(rows, r, plain), best_in(rows, r, paused)]
        .into_iter()
        .flatten()
        .reduce(f64::max)
}

/// The best 100 ms (or the whole run's rate) of throughput row `name` in round `r`, if it
/// was measured.
fn best_in(rows: &[Row], r: usize, name: &str) -> Option<f64> {
    let g = round(r);
    rows.iter()
        .find(|x| x.suite == SUITE && x.group == g && x.name == name && x.error.is_none())
        .and_then(|x| x.best_ops_per_sec.or(x.ops_per_sec))
}

/// The ratio `a / b` of the p50s of each round's latency rows that measured both.
pub fn latency_ratios(rows: &[Row], a: &str, b: &str) -> Vec<f64> {
    round_ratios(rows, a, b, |r| r.p50_ns)
}

/// As [`latency_ratios`], of the p99.9: the tail of each round against its own floor's.
pub fn tail_ratios(rows: &[Row], a: &str, b: &str) -> Vec<f64> {
    round_ratios(rows, a, b, |r| r.p999_ns)
}

/// `a / b` of one percentile (`at`) in each latency round that measured both rows.
fn round_ratios(rows: &[Row], a: &str, b: &str, at: fn(&Row) -> Option<u64>) -> Vec<f64> {
    values_by(rows, latency_round, a, b, |r| at(r).map(|v| v as f64))
        .into_iter()
        .map(|(_, x, y)| x / y)
        .collect()
}

/// `value` of row `name` in `group`, or of the faster of its two rows for a floor measured
/// both ways ([`FLOOR_EITHER`], [`FLOOR_BATCH_EITHER`], [`SIZED_FLOOR_EITHER`]).
fn value_of(
    rows: &[Row],
    group: &str,
    name: &str,
    value: &impl Fn(&Row) -> Option<f64>,
) -> Option<f64> {
    let one = |name: &str| {
        rows.iter()
            .find(|r| r.suite == SUITE && r.group == group && r.name == name && r.error.is_none())
            .and_then(value)
    };
    let either = |plain: &str, paused: &str| {
        [one(plain), one(paused)]
            .into_iter()
            .flatten()
            .reduce(f64::max)
    };
    match name {
        FLOOR_EITHER => either(FLOOR_ROW, FLOOR_GATHER_ROW),
        FLOOR_BATCH_EITHER => either(FLOOR_BATCH_ROW, FLOOR_BATCH_GATHER_ROW),
        SIZED_FLOOR_EITHER => either(SIZED_FLOOR_ROW, SIZED_FLOOR_GATHER_ROW),
        _ => one(name),
    }
}

/// `(round, a, b)` of each round that measured both rows, `b` above zero; [`FLOOR_EITHER`]
/// is the round's faster of [`FLOOR_ROW`] and [`FLOOR_GATHER_ROW`], [`FLOOR_BATCH_EITHER`]
/// of [`FLOOR_BATCH_ROW`] and [`FLOOR_BATCH_GATHER_ROW`], [`SIZED_FLOOR_EITHER`] of
/// [`SIZED_FLOOR_ROW`] and [`SIZED_FLOOR_GATHER_ROW`].
fn values_by(
    rows: &[Row],
    group: fn(usize) -> String,
    a: &str,
    b: &str,
    value: impl Fn(&Row) -> Option<f64>,
) -> Vec<(usize, f64, f64)> {
    let get = |group: &str, name: &str| value_of(rows, group, name, &value);
    (1..=ROUNDS)
        .filter_map(|r| {
            let g = group(r);
            match (get(&g, a), get(&g, b)) {
                (Some(x), Some(y)) if y > 0.0 => Some((r, x, y)),
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
        assert_eq!(ratios(&rows, "a", "b").values, vec![2.0]);
        let rows = [
            row(&round(1), "a", 10.0),
            row(&round(1), "b", 5.0),
            row(&round(3), "b", 10.0),
            row(&round(3), "a", 30.0),
        ];
        assert_eq!(ratios(&rows, "a", "b").values, vec![2.0, 3.0]);
    }

    /// Round `r`'s floor rows: (plain in the rotation, paused first, plain last, paused
    /// last), a zero leaving that row out.
    fn floors(r: usize, [plain, paused, again, paused_again]: [f64; 4]) -> Vec<Row> {
        [
            (FLOOR_ROW, plain),
            (FLOOR_GATHER_ROW, paused),
            (FLOOR_AGAIN_ROW, again),
            (FLOOR_GATHER_AGAIN_ROW, paused_again),
        ]
        .into_iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(name, v)| row(&round(r), name, v))
        .collect()
    }

    #[test]
    fn the_floor_read_with_pauses_keeps_a_round_steady_and_raises_its_floor() {
        // (round, shmring's row, [plain, paused, plain last, paused last]) in M/s.
        // Round 1: the plain floor swings (50 then 300) while the floor read with pauses
        // holds (260, 250): steady, and the row is divided by the faster floor, 260.
        // Round 2: the paused floor fell from first row to last (the placement changed):
        // left out. Round 3: only plain floors (a run before the paused rows): judged by
        // them alone. Round 4: the row outran the plain floor by far (a caught-up plain
        // reader's swing) but not the paused one: not beaten, it counts. Round 5: the plain
        // floor spiked at the end only (100 then 500), the paused one held: steady, divided
        // by 300.
        let a = gathering_row(crate::throughput::FIXED_ONE_ROW);
        let mut rows = Vec::new();
        for (r, ring, f) in [
            (1, 208.0, [50.0, 260.0, 300.0, 250.0]),
            (2, 200.0, [260.0, 250.0, 90.0, 80.0]),
            (3, 180.0, [200.0, 0.0, 210.0, 0.0]),
            (4, 240.0, [60.0, 300.0, 70.0, 290.0]),
            (5, 240.0, [100.0, 300.0, 500.0, 290.0]),
        ] {
            rows.push(row(&round(r), &a, ring));
            rows.extend(floors(r, f));
        }
        let r = ratios(&rows, &a, FLOOR_EITHER);
        assert_eq!(
            (r.values, r.unsteady, r.beaten),
            (vec![0.8, 0.9, 0.8, 0.8], 1, 0)
        );
        // Without the paused rows, rounds 1 and 5 are the plain ring's swings (unsteady) and
        // round 4's row is beaten (240 > 1.2 x 70).
        let plain: Vec<Row> = rows
            .iter()
            .filter(|x| x.name != FLOOR_GATHER_ROW && x.name != FLOOR_GATHER_AGAIN_ROW)
            .cloned()
            .collect();
        assert!(!steady(&plain, 1) && !steady(&plain, 5));
        assert!(beaten(&plain, 4));
        // The paused floor alone decides: moved 1.3x with the plain floor at 500 at both
        // ends, the round is unsteady.
        let moved = floors(1, [500.0, 300.0, 500.0, 390.0]);
        assert!(!steady(&moved, 1));
        assert!(steady(&floors(1, [500.0, 300.0, 500.0, 360.0]), 1));
    }

    #[test]
    fn spread_is_median_least_greatest() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]), Some((2.5, 1.0, 4.0)));
    }

    #[test]
    fn a_round_compares_each_busy_spin_row_with_its_own_floor_and_groups_by_kind() {
        let lat = |name: &str, p50: u64| {
            let mut r = Row::new(latency::SUITE, latency::PINGPONG, name, Kind::Latency);
            r.p50_ns = Some(p50);
            r.p999_ns = Some(p50 * 10);
            r
        };
        // The busy-spin rows arrive compared with whole-run floors (`latency::one`).
        let mut busy_pp = lat(BUSY_PINGPONG, 130);
        busy_pp.floor = Some("a whole-run floor".into());
        busy_pp.x_floor_p50 = Some(9.0);
        let mut busy_paced = lat(BUSY_PACED, 300);
        busy_paced.x_floor_p999 = Some(9.0);
        let mut failed_floor = lat(floor::SPIN_PACED, 1);
        failed_floor.error = Some("timed out".into());
        let rows = vec![
            row(&round(9), FLOOR_ROW, 1000.0),
            busy_pp,
            lat(floor::SPIN_PINGPONG, 100),
            busy_paced,
            failed_floor,
        ];
        let out = finish_round(rows, 3);
        let get = |name: &str| out.iter().find(|r| r.name == name).expect(name);
        let pp = get(BUSY_PINGPONG);
        assert_eq!(pp.floor.as_deref(), Some(floor::SPIN_PINGPONG));
        assert_eq!(pp.x_floor_p50, Some(1.3));
        assert_eq!(pp.x_floor_p999, Some(1.3));
        // Its floor failed this round: no ratio, not the stale one it came with.
        let paced = get(BUSY_PACED);
        assert_eq!(
            (
                paced.floor.as_deref(),
                paced.x_floor_p50,
                paced.x_floor_p999
            ),
            (None, None, None)
        );
        for r in &out {
            assert_eq!(r.suite, SUITE);
            let want = if r.kind == Kind::Latency {
                latency_round(3)
            } else {
                round(3)
            };
            assert_eq!(r.group, want, "{}", r.name);
        }
        // What the targets read back: the ping-pong ratio of round 3.
        assert_eq!(
            latency_ratios(&out, BUSY_PINGPONG, floor::SPIN_PINGPONG),
            vec![1.3]
        );
        assert!(latency_ratios(&out, BUSY_PACED, floor::SPIN_PACED).is_empty());
    }
}
