//! Throughput in turn: shmring's per-event and batch-100 rows on a ring of fixed-size 8-byte
//! events (each read per event and a run at a time), the floor ring and the in-process
//! `disruptor` crate, measured alternately inside the same two pinned processes, so that
//! every ratio's two halves see the same placement of the guest's vCPUs.
//!
//! The rows of `paired` run seconds apart, each in processes of its own; on a guest whose
//! cross-core line transfers change speed several-fold from one second to the next, even
//! those seconds decide a ratio (ARCHITECTURE.md, "Measured inside one run"). Here a pair is
//! nine chunks of [`CHUNK`] events, one per [`Side`], in this order:
//!
//! - the ring, per event: the producer publishes with `Producer::publish` (the fixed-size
//!   per-event row's loop), the consumer reads with `Consumer::run` and the counting
//!   handler; the consumer is attached with `gather(`[`GATHER`]`)`, so it pauses after each
//!   batch here and after each run below (`ConsumerOptions::gather`);
//! - the ring, per event through a `Publisher` (`Producer::publisher`, each event its own
//!   publish with the position held in a register), read the same way;
//! - the ring, [`BATCH`] events per `publish_batch`, read the same way;
//! - the same again, read a run at a time (`Consumer::poll_runs`, the counting work over
//!   each slice, in captured counters as the run reads apart);
//! - the ring per event again (`Producer::publish`), read a run at a time as the batches
//!   are;
//! - the floor ring with the per-event memory accesses of the fixed-size ring's single
//!   producer through a `Publisher` (`spsc::BareSender::send_claimed`: its claim on a line
//!   of its own, its lifecycle, fence-mode and waiter-count looks), read with
//!   [`FLOOR_GATHER`] spins after each run as the floor's last chunk below: what the claim
//!   protocol costs the producer in memory accesses, with none of shmring's code (the
//!   ring's per-event chunks read through `run` are compared with it too, as `claimed_`:
//!   the rest of their gap, shmring's code on both sides, its reader's per-commit accesses
//!   and its shorter pause, [`GATHER`]);
//! - the floor ring: its producer's loop and its consumer's;
//! - the floor ring again, its consumer pausing [`FLOOR_GATHER`] spins after each run as
//!   the run reads pause (a caught-up reader that looks at every event or few holds back
//!   the producer it watches, the bare ring's as much as shmring's; PERFORMANCE.md, "Run
//!   reads that gather"): the ring's per-event chunks are judged against the faster of the
//!   two floor chunks of each pair;
//! - the `disruptor` crate (a build with the `peers` feature): a fresh crate ring of
//!   [`CAPACITY`] 8-byte events in the producer process, its producer on the producer's
//!   thread (CPU 0) and its BusySpin consumer thread on CPU 1, while the consumer process
//!   sleeps on a futex ([`CRATE_LINE`]), so that nothing else runs on either CPU.
//!
//! After each chunk the producer waits until the consumer says on a line of the control page
//! that it has read it (after the crate's: that it is awake again). A shmring or floor chunk's
//! time runs from its first publish to that acknowledgement, so it holds every event's
//! hand-over and one line transfer more (milliseconds against about a quarter of a
//! microsecond); the crate's from its first timed publish to its consumer's handling of the
//! last event, both clocks read in the one process. Every chunk starts from an empty ring and
//! a caught-up consumer.
//!
//! A side is judged against another ([`COMPARED`]; or against the faster of two in each
//! pair, against the floor) chunk by chunk: pair `i`'s chunk of the judged side ran between
//! pair `i - 1`'s and pair `i`'s chunks of the other. The guest's
//! placement changes every few seconds at most, and a pair lasts tens of milliseconds: when
//! those two chunks agree within [`paired::STEADY`], the chunk between them ran where they
//! did, and its ratio is its rate over their mean; when they do not, the placement changed
//! around it and the pair is left out (`mixed`). Against the floor, a ring chunk that outran
//! that mean by more than [`paired::BEATEN`] is left out too (`beaten`): there the floor ring
//! was not at its best (as with the rows apart, where it runs slower than shmring's rows in
//! the guest's slow placement). That rule drops only ratios above the bar, so it can lower a
//! median, never raise it; against the crate no chunk is left out for being fast. A
//! comparison's ratio is the median of its pairs kept. The first pair (page faults, caches)
//! is not judged; its chunks are only the ones before pair 1's.

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
/// Events the shmring ring holds, and the `disruptor` crate's ring in its chunks.
pub const CAPACITY: u64 = 4096;
/// Events per `publish_batch` in the batch chunk.
pub const BATCH: usize = 100;
/// The spins the ring's consumer pauses after each batch or run (`ConsumerOptions::gather`).
pub const GATHER: u32 = 16;
/// The spins the gathering floor's reader pauses after each run. In turn on the Intel Xeon
/// guest, 16 and 32 held the bare ring at 78-280 M events/s and 64 and 128 ran it at
/// 231-321 and 270-310 (64 in two runs of five rounds, 128 in one; alternated again later,
/// three runs each, 64 at 250-346 in 13 of 15 rounds, 128 at 120-320): its loop is far shorter than `poll_runs`,
/// so a run needs a longer pause to gather there, and beyond 64 it gained nothing
/// measurable.
pub const FLOOR_GATHER: u32 = 64;
/// The control page's line that carries the consumer's acknowledgement (chunks read).
pub const ACK_LINE: usize = 1;
/// The control page's line on which the consumer sleeps (futex) while the `disruptor`
/// crate's chunk runs: `seq` is the count of crate chunks done.
pub const CRATE_LINE: usize = 2;
/// A measurement with fewer pairs left than this decides nothing.
pub const MIN_PAIRS: usize = 5;
/// The ring's per-event row (read by a consumer with `gather`, as every ring chunk in turn).
pub const RING_ROW: &str =
    "per-event, 8 B, fixed-size ring, a reader that gathers, in turn with the floor";
/// The ring's per-event row through a `Publisher`.
pub const PUBLISHER_ROW: &str =
    "per-event, 8 B, fixed-size ring, Publisher, a reader that gathers, in turn with the floor";
/// The floor's row.
pub const FLOOR_ROW: &str = "bare SPSC ring, per-event, 8 B, in turn with the fixed-size ring";
/// The floor with the single producer's per-event accesses, read with pauses.
pub const CLAIMED_ROW: &str =
    "bare SPSC ring with the single-producer claim's accesses, per-event, 8 B, a pause after each run, in turn with the fixed-size ring";
/// The floor's row read with a pause after each run, as the run reads are.
pub const FLOOR_GATHER_ROW: &str =
    "bare SPSC ring, per-event, 8 B, a pause after each run, in turn with the fixed-size ring";
/// The ring's batch-100 row, read an event per handler call.
pub const BATCH_ROW: &str =
    "batch 100, 8 B, fixed-size ring, a reader that gathers, in turn with the disruptor crate";
/// The ring's per-event row, read a run at a time with a pause after each run.
pub const RING_RUNS_ROW: &str =
    "per-event, 8 B, fixed-size ring, run reads that gather, in turn with the floor";
/// The ring's batch-100 row, read a run at a time with a pause after each run.
pub const BATCH_RUNS_ROW: &str =
    "batch 100, 8 B, fixed-size ring, run reads that gather, in turn with the disruptor crate";
/// The floor the per-event rows are judged against, each pair's faster of [`FLOOR_ROW`] and
/// [`FLOOR_GATHER_ROW`] (a name for the targets' text: no row of its own).
pub const FLOOR_EITHER: &str =
    "bare SPSC ring, per-event, 8 B, in turn, read plainly or with pauses (the faster)";
/// The `disruptor` crate's row.
pub const CRATE_ROW: &str =
    "disruptor crate (threads, BusySpin), per-event, 8 B, in turn with the fixed-size ring";

/// The sides of a pair, in the order they run (the crate's only where it is built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// shmring's fixed-size ring, per event (`Producer::publish`).
    Ring = 0,
    /// shmring's fixed-size ring, per event through a `Publisher`, read as `Ring`.
    Publisher = 1,
    /// shmring's fixed-size ring, [`BATCH`] events per `publish_batch`, read as `Ring`.
    Batch = 2,
    /// The same, read a run at a time (`Consumer::poll_runs`).
    BatchRuns = 3,
    /// shmring's fixed-size ring per event (`Producer::publish`), read as `BatchRuns`.
    RingRuns = 4,
    /// The floor ring, each event published with the fixed-size ring's single producer's
    /// per-event accesses (`spsc::BareSender::send_claimed`), read as `FloorGather`.
    Claimed = 5,
    /// The floor ring.
    Floor = 6,
    /// The floor ring, its reader pausing [`FLOOR_GATHER`] spins after each run.
    FloorGather = 7,
    /// The `disruptor` crate, per event.
    Crate = 8,
}

/// Every side, in order.
pub const SIDES: [Side; 9] = [
    Side::Ring,
    Side::Publisher,
    Side::Batch,
    Side::BatchRuns,
    Side::RingRuns,
    Side::Claimed,
    Side::Floor,
    Side::FloorGather,
    Side::Crate,
];

/// The sides over the floor ring (its file: the claimed side's too).
pub const FLOOR_SIDES: u64 = 3;

/// The sides over shmring's ring: every side but the floor's and the crate's.
pub const RING_SIDES: u64 = SIDES.len() as u64 - FLOOR_SIDES - 1;

/// The sides this build measures: the crate's only with the `peers` feature.
pub fn sides() -> Vec<Side> {
    SIDES
        .into_iter()
        .filter(|&s| cfg!(feature = "peers") || s != Side::Crate)
        .collect()
}

impl Side {
    /// Its name in the role's result keys.
    pub fn key(self) -> &'static str {
        match self {
            Side::Ring => "ring",
            Side::Publisher => "publisher",
            Side::Batch => "batch",
            Side::BatchRuns => "batch_runs",
            Side::RingRuns => "ring_runs",
            Side::Claimed => "claimed",
            Side::Floor => "floor",
            Side::FloorGather => "floor_gather",
            Side::Crate => "crate",
        }
    }
}

/// The comparisons judged: (the side judged, the sides around it, the prefix of their keys
/// and row extras, whether a judged chunk above [`paired::BEATEN`] times the sides around
/// it is left out). With two sides around it, each pair's faster chunk of the two counts:
/// the ring's per-event chunks are judged against the floor ring read plainly or with
/// pauses, whichever ran faster in that pair, so that the pauses can only raise the floor.
/// The floor with the claim's accesses is judged against the same floors (what those
/// accesses cost the producer), and the ring's per-event chunks read through `run` against
/// it (`claimed_`: the rest of their gap, see the module comment).
pub const COMPARED: [(Side, &[Side], &str, bool); 10] = [
    (Side::Ring, &[Side::Floor, Side::FloorGather], "", true),
    (Side::RingRuns, &[Side::Floor, Side::FloorGather], "", true),
    (Side::Ring, &[Side::Crate], "crate_", false),
    (Side::Ring, &[Side::Claimed], "claimed_", false),
    (Side::Publisher, &[Side::Floor, Side::FloorGather], "", true),
    (Side::Publisher, &[Side::Crate], "crate_", false),
    (Side::Publisher, &[Side::Claimed], "claimed_", false),
    (Side::Batch, &[Side::Crate], "crate_", false),
    (Side::BatchRuns, &[Side::Crate], "crate_", false),
    (Side::Claimed, &[Side::Floor, Side::FloorGather], "", true),
];

/// What one comparison's pairs say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judged {
    /// Pairs judged (every pair after the first).
    pub pairs: usize,
    /// Each kept pair's judged chunk rate over the mean of the two chunks around it.
    pub ratios: Vec<f64>,
    /// Pairs left out: the chunks around the judged one differ by more than
    /// `paired::STEADY`.
    pub mixed: usize,
    /// Pairs left out: the judged chunk above `paired::BEATEN` times the chunks around it
    /// (only where the comparison asks for it).
    pub beaten: usize,
}

/// Judge `judged` against `around`, the chunk times (ns, `chunk` events each) of two sides
/// (or of one side and, pair by pair, the faster of two) in the order their pairs ran: pair
/// `i`'s judged chunk ran after pair `i - 1`'s chunk of the side around it and before pair
/// `i`'s. The first pair is the warm-up (not judged).
/// With `beaten`, a judged chunk above [`paired::BEATEN`] times the mean around it is left
/// out.
pub fn judge(judged: &[u64], around: &[u64], chunk: u64, beaten: bool) -> Judged {
    let rate = |ns: u64| chunk as f64 * 1e9 / ns.max(1) as f64;
    let n = judged.len().min(around.len());
    let mut j = Judged {
        pairs: n.saturating_sub(1),
        ..Default::default()
    };
    for i in 1..n {
        let (before, after) = (rate(around[i - 1]), rate(around[i]));
        let (x, mean) = (rate(judged[i]), (before + after) / 2.0);
        if !(1.0 / paired::STEADY..=paired::STEADY).contains(&(after / before)) {
            j.mixed += 1;
        } else if beaten && x > mean * paired::BEATEN {
            j.beaten += 1;
        } else {
            j.ratios.push(x / mean);
        }
    }
    j
}

/// One side's chunk times over the judged pairs (the first, the warm-up, left out): its
/// events over their time, its median chunk rate and its fastest (events/s).
pub fn side_rates(times: &[u64], chunk: u64) -> (f64, f64, f64) {
    let judged = times.get(1..).unwrap_or_default();
    let rates: Vec<f64> = judged
        .iter()
        .map(|&ns| chunk as f64 * 1e9 / ns.max(1) as f64)
        .collect();
    let median = paired::spread(&rates).map_or(0.0, |(m, _, _)| m);
    let fastest = rates.iter().copied().fold(0.0, f64::max);
    let total: u64 = judged.iter().sum();
    let overall = if total == 0 {
        0.0
    } else {
        (chunk * judged.len() as u64) as f64 * 1e9 / total as f64
    };
    (overall, median, fastest)
}

/// The result key of a comparison: `turn_{judged}_vs_{around}_{what}`, the sides around
/// it joined by `_or_`.
fn compared_key(judged: Side, around: &[Side], what: &str) -> String {
    let around: Vec<&str> = around.iter().map(|s| s.key()).collect();
    format!("turn_{}_vs_{}_{what}", judged.key(), around.join("_or_"))
}

/// Write what the chunk times of every pair say into a role's results: each side's rates
/// (`turn_{side}_rate`, `_median`, `_fastest`) and each comparison of [`COMPARED`] whose
/// sides both ran (`crate` false: the crate's did not).
pub fn report(
    m: &mut shmring_peers::kit::Measured,
    pairs: &[[u64; SIDES.len()]],
    chunk: u64,
    krate: bool,
) {
    let times = |s: Side| -> Vec<u64> { pairs.iter().map(|p| p[s as usize]).collect() };
    // Each pair's fastest chunk of `sides`.
    let faster_of = |sides: &[Side]| -> Vec<u64> {
        pairs
            .iter()
            .map(|p| sides.iter().map(|&s| p[s as usize]).min().unwrap_or(0))
            .collect()
    };
    m.set("turn_pairs", pairs.len().saturating_sub(1) as f64);
    for side in SIDES {
        if side == Side::Crate && !krate {
            continue;
        }
        let (overall, median, fastest) = side_rates(&times(side), chunk);
        m.set(&format!("turn_{}_rate", side.key()), overall)
            .set(&format!("turn_{}_median", side.key()), median)
            .set(&format!("turn_{}_fastest", side.key()), fastest);
    }
    for (a, b, _, beaten) in COMPARED {
        if b.contains(&Side::Crate) && !krate {
            continue;
        }
        let j = judge(&times(a), &faster_of(b), chunk, beaten);
        m.set(&compared_key(a, b, "kept"), j.ratios.len() as f64)
            .set(&compared_key(a, b, "mixed"), j.mixed as f64)
            .set(&compared_key(a, b, "beaten"), j.beaten as f64);
        if let Some((median, least, greatest)) = paired::spread(&j.ratios) {
            m.set(&compared_key(a, b, "ratio"), median)
                .set(&compared_key(a, b, "least"), least)
                .set(&compared_key(a, b, "greatest"), greatest);
        }
    }
}

/// The row of a side.
fn row_name(side: Side) -> &'static str {
    match side {
        Side::Ring => RING_ROW,
        Side::Publisher => PUBLISHER_ROW,
        Side::Batch => BATCH_ROW,
        Side::BatchRuns => BATCH_RUNS_ROW,
        Side::RingRuns => RING_RUNS_ROW,
        Side::Claimed => CLAIMED_ROW,
        Side::Floor => FLOOR_ROW,
        Side::FloorGather => FLOOR_GATHER_ROW,
        Side::Crate => CRATE_ROW,
    }
}

/// Measure the sides in turn for about twice `ctx.sizes.throughput`: a row per side (the
/// crate's only in a build with the `peers` feature), in `group`, each at its events over
/// its chunks' time (`extra`: `median_chunk`, `fastest_chunk`). A judged side's row carries
/// each comparison's ratio under the comparison's prefix ([`COMPARED`]; `extra`: `ratio`,
/// `least`, `greatest`, `pairs`, `kept`, `mixed`, `beaten`).
pub fn rows(ctx: &mut Ctx, group: &str) -> Vec<Row> {
    let sides = sides();
    let krate = sides.contains(&Side::Crate);
    ctx.bar
        .set_message(format!("throughput: {RING_ROW}, {CHUNK} events a chunk"));
    let dur = ctx.sizes.throughput;
    let tag = ctx.tag("turn");
    let floor_path = ctx.dir.join(format!("{tag}.spsc"));
    let measured = (|| -> Result<Vec<Row>> {
        crate::spsc::create(&floor_path)?;
        let floor = kv("floor", floor_path.display());
        let setup = Setup {
            capacity: CAPACITY,
            slot: 64,
            mode: ProducerMode::Single,
            event_size: Some(8),
            max_event_size: None,
            consumers: vec![vec![
                kv("wait", "busy-spin"),
                kv("mode", "turn"),
                kv("chunk", CHUNK),
                kv("crate", u8::from(krate)),
                kv("gather", GATHER),
                floor.clone(),
            ]],
            producers: vec![vec![
                kv("mode", "turn"),
                kv("size", 8),
                kv("chunk", CHUNK),
                kv("duration_ns", (2 * dur).as_nanos()),
                kv("crate", u8::from(krate)),
                kv("crate_pin", u8::from(ctx.pin)),
                floor,
            ]],
            echo: false,
            // The run ends at the first pair past twice the duration (the second pair at the
            // earliest); the slowest chunks seen took about 26 ms. Far more than that means a
            // process is stuck.
            timeout: dur * 40 + std::time::Duration::from_secs(60),
        };
        let p = shm::run(ctx, "turn", setup)?;
        let (c, pr) = (&p.consumers[0], &p.producers[0]);
        let pairs = pr.need("turn_pairs")? as u64;
        ensure!(pairs > 0, "no pair measured after the warm-up");
        // Each side published a chunk per pair, the warm-up pair included; the consumer says
        // what it read of shmring's ring (its `RING_SIDES` sides) and of the floor's (its
        // `FLOOR_SIDES`).
        let each = (pairs + 1) * CHUNK;
        let read = [c.need("turn_ring_read")?, c.need("turn_floor_read")?];
        ensure!(
            read == [(RING_SIDES * each) as f64, (FLOOR_SIDES * each) as f64],
            "the consumer read {} ring and {} floor events, of {} and {}",
            read[0],
            read[1],
            RING_SIDES * each,
            FLOOR_SIDES * each
        );
        let mut rows = Vec::new();
        for &side in &sides {
            let k = side.key();
            let mut r = Row::new(SUITE, group, row_name(side), Kind::Throughput);
            r.ops_per_sec = Some(pr.need(&format!("turn_{k}_rate"))?);
            for key in ["median", "fastest"] {
                r.extra
                    .insert(format!("{key}_chunk"), pr.need(&format!("turn_{k}_{key}"))?);
            }
            r.published = Some(each);
            r.delivered = Some(each);
            r.dropped = Some(0);
            r.samples = pairs;
            if side != Side::Crate {
                // The consumer process's share over the whole measurement: with the crate's
                // side, it counts the crate's chunks it slept through (the crate's chunk is
                // one of nine, and among the longest). The crate's threads ran in the
                // producer's process.
                r.consumer_cpu = c.get("cpu_share");
            }
            r.producer_cpu = pr.get("cpu_share");
            r.extra.insert("event_bytes".into(), 8.0);
            r.extra.insert("chunk".into(), CHUNK as f64);
            for (a, b, prefix, _) in COMPARED {
                if a != side || !b.iter().all(|s| sides.contains(s)) {
                    continue;
                }
                r.extra.insert(format!("{prefix}pairs"), pairs as f64);
                for key in ["kept", "mixed", "beaten"] {
                    r.extra
                        .insert(format!("{prefix}{key}"), pr.need(&compared_key(a, b, key))?);
                }
                for key in ["ratio", "least", "greatest"] {
                    if let Some(v) = pr.get(&compared_key(a, b, key)) {
                        r.extra.insert(format!("{prefix}{key}"), v);
                    }
                }
            }
            rows.push(r);
        }
        Ok(rows)
    })();
    let _ = std::fs::remove_file(&floor_path);
    measured.unwrap_or_else(|e| {
        sides
            .iter()
            .map(|&s| Row::new(SUITE, group, row_name(s), Kind::Throughput).failed(&e))
            .collect()
    })
}

/// The ratio of round `r`'s comparison in turn on row `row` under `prefix` ([`COMPARED`]),
/// if at least [`MIN_PAIRS`] pairs were kept: `Some(None)` when it measured but too few
/// pairs were left, `None` when the round has no such row or comparison.
pub fn round_ratio(rows: &[Row], r: usize, row: &str, prefix: &str) -> Option<Option<f64>> {
    let g = paired::round(r);
    let found = rows
        .iter()
        .find(|x| x.suite == paired::SUITE && x.group == g && x.name == row && x.error.is_none())?;
    let kept = *found.extra.get(&format!("{prefix}kept"))? as usize;
    Some(
        found
            .extra
            .get(&format!("{prefix}ratio"))
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

    /// `judge` of (judged, around) chunk rates in M/s, pair by pair.
    fn judged(pairs: &[(f64, f64)], beaten: bool) -> Judged {
        let a: Vec<u64> = pairs.iter().map(|p| ns(p.0)).collect();
        let b: Vec<u64> = pairs.iter().map(|p| ns(p.1)).collect();
        judge(&a, &b, CHUNK, beaten)
    }

    #[test]
    fn each_ring_chunk_is_judged_against_the_floor_chunks_around_it() {
        let pairs = [
            // Warm-up: its ring chunk is not judged; its floor chunk is the one before pair
            // 1's ring chunk.
            (10.0, 800.0),
            // Kept: 640 over the mean of 800 and 800.
            (640.0, 800.0),
            // Kept: 700 over the mean of 800 and 700 (0.875x apart, within 1.25x).
            (700.0, 700.0),
            // Mixed: the floor went from 700 to 60 around it.
            (80.0, 60.0),
            // Kept, in another placement: 50 over the mean of 60 and 60.
            (50.0, 60.0),
            // Beaten: 80 against 60 and 60.
            (80.0, 60.0),
        ];
        let j = judged(&pairs, true);
        assert_eq!((j.pairs, j.mixed, j.beaten), (5, 1, 1));
        assert_eq!(shown(&j.ratios), ["0.80", "0.93", "0.83"]);
        // Without the beaten rule (against the crate) the fast chunk is kept.
        let j = judged(&pairs, false);
        assert_eq!((j.pairs, j.mixed, j.beaten), (5, 1, 0));
        assert_eq!(shown(&j.ratios), ["0.80", "0.93", "0.83", "1.33"]);
    }

    #[test]
    fn a_side_s_rates_leave_the_warm_up_out() {
        let times: Vec<u64> = [10.0, 640.0, 700.0, 80.0, 50.0, 80.0]
            .iter()
            .map(|&m| ns(m))
            .collect();
        let (overall, median, fastest) = side_rates(&times, CHUNK);
        // Over the judged pairs only: the warm-up's 10 M/s chunk is not among them.
        assert!((fastest / 1e6 - 700.0).abs() < 0.01, "{fastest}");
        assert!((median / 1e6 - 80.0).abs() < 0.01, "{median}");
        // Events over time: five chunks in 1/640 + 1/700 + 1/80 + 1/50 + 1/80 seconds per
        // million events.
        let expected = 5.0 / (1.0 / 640.0 + 1.0 / 700.0 + 1.0 / 80.0 + 1.0 / 50.0 + 1.0 / 80.0);
        assert!((overall / 1e6 - expected).abs() < 0.01, "{overall}");
    }

    #[test]
    fn three_speeds_in_a_round_each_keep_their_own_ratio() {
        // A round of 2026-12-02: both sides at about 160 M/s, then the floor alone at about
        // 520 with the ring at 200. Each pair is judged where it ran; only the pair whose
        // floor chunks straddle the change is left out.
        let mut pairs = vec![(160.0, 170.0); 5];
        pairs.extend([(200.0, 520.0); 4]);
        let j = judged(&pairs, true);
        assert_eq!((j.pairs, j.mixed, j.beaten), (8, 1, 0));
        let r = shown(&j.ratios);
        assert_eq!(r[..4], ["0.94"; 4]);
        assert_eq!(r[4..], ["0.38"; 3]);
    }

    #[test]
    fn the_bounds() {
        // Chunks around exactly STEADY apart (125 and 100 M/s: exact chunk times) are one
        // placement, a little more apart are not; a ring chunk just under BEATEN times the
        // floor is kept, just over it is not.
        let j = judged(&[(1.0, 100.0), (100.0, 125.0)], true);
        assert_eq!((j.mixed, j.beaten, j.ratios.len()), (0, 0, 1));
        let j = judged(&[(1.0, 100.0), (100.0, 126.0)], true);
        assert_eq!((j.mixed, j.ratios.len()), (1, 0));
        let j = judged(&[(1.0, 100.0), (119.0, 100.0)], true);
        assert_eq!((j.mixed, j.beaten), (0, 0));
        assert_eq!(shown(&j.ratios), ["1.19"]);
        let j = judged(&[(1.0, 100.0), (121.0, 100.0)], true);
        assert_eq!((j.beaten, j.ratios.len()), (1, 0));
    }

    #[test]
    fn a_warm_up_pair_alone_judges_nothing() {
        for pairs in [&[][..], &[(50.0, 60.0)][..]] {
            let j = judged(pairs, true);
            assert_eq!((j.pairs, j.ratios.len(), j.mixed, j.beaten), (0, 0, 0, 0));
            let times: Vec<u64> = pairs.iter().map(|p| ns(p.0)).collect();
            assert_eq!(side_rates(&times, CHUNK), (0.0, 0.0, 0.0));
        }
    }

    #[test]
    fn the_report_judges_each_comparison_between_its_own_sides() {
        // Ring, publisher, batch, batch with run reads, ring with run reads, floor with the
        // claim's accesses, floor, floor read with pauses, crate in M/s per pair: both
        // floors steady (the plain one the faster), the crate changing speed in pair 2, so
        // only the crate comparisons lose a pair.
        let rates = [
            [10.0, 10.0, 10.0, 10.0, 10.0, 80.0, 100.0, 50.0, 50.0],
            [80.0, 110.0, 250.0, 400.0, 70.0, 70.0, 100.0, 50.0, 50.0],
            [80.0, 110.0, 250.0, 400.0, 100.0, 60.0, 100.0, 50.0, 100.0],
            [90.0, 115.0, 300.0, 500.0, 90.0, 70.0, 100.0, 50.0, 100.0],
        ];
        let pairs: Vec<[u64; SIDES.len()]> = rates.iter().map(|p| p.map(ns)).collect();
        let mut m = shmring_peers::kit::Measured::default();
        report(&mut m, &pairs, CHUNK, true);
        let got = |k: &str| m.get(k).map(|v| format!("{v:.2}"));
        assert_eq!(got("turn_pairs").as_deref(), Some("3.00"));
        // Ring over the faster floor of each pair (here the plain one): 0.80, 0.80, 0.90.
        let floor =
            |side: &str, what: &str| got(&format!("turn_{side}_vs_floor_or_floor_gather_{what}"));
        assert_eq!(floor("ring", "kept").as_deref(), Some("3.00"));
        assert_eq!(floor("ring", "ratio").as_deref(), Some("0.80"));
        assert!(m.get("turn_ring_vs_floor_kept").is_none());
        // Ring with run reads over the same: 0.70, 1.00, 0.90.
        let runs = |what: &str| got(&format!("turn_ring_runs_vs_floor_or_floor_gather_{what}"));
        assert_eq!(runs("kept").as_deref(), Some("3.00"));
        assert_eq!(runs("ratio").as_deref(), Some("0.90"));
        assert_eq!(runs("least").as_deref(), Some("0.70"));
        assert!(m.get("turn_ring_runs_vs_floor_kept").is_none());
        assert!(m.get("turn_ring_runs_vs_crate_kept").is_none());
        assert_eq!(
            got("turn_floor_gather_median").as_deref(),
            Some("50000000.00")
        );
        // Ring over crate: 1.60, (mixed), 0.90; batch over crate: 5.00, (mixed), 3.00.
        assert_eq!(got("turn_ring_vs_crate_mixed").as_deref(), Some("1.00"));
        assert_eq!(got("turn_ring_vs_crate_least").as_deref(), Some("0.90"));
        assert_eq!(got("turn_ring_vs_crate_greatest").as_deref(), Some("1.60"));
        assert_eq!(got("turn_batch_vs_crate_least").as_deref(), Some("3.00"));
        assert_eq!(got("turn_batch_vs_crate_greatest").as_deref(), Some("5.00"));
        // Batch with run reads over crate: 8.00, (mixed), 5.00.
        assert_eq!(
            got("turn_batch_runs_vs_crate_kept").as_deref(),
            Some("2.00")
        );
        assert_eq!(
            got("turn_batch_runs_vs_crate_least").as_deref(),
            Some("5.00")
        );
        assert_eq!(
            got("turn_batch_runs_vs_crate_greatest").as_deref(),
            Some("8.00")
        );
        // Publisher over floor: 1.10, 1.10, 1.15 (none above BEATEN); over crate: 2.20,
        // (mixed), 1.15.
        assert_eq!(floor("publisher", "ratio").as_deref(), Some("1.10"));
        assert_eq!(floor("publisher", "beaten").as_deref(), Some("0.00"));
        assert_eq!(
            got("turn_publisher_vs_crate_least").as_deref(),
            Some("1.15")
        );
        assert_eq!(
            got("turn_publisher_vs_crate_greatest").as_deref(),
            Some("2.20")
        );
        assert_eq!(got("turn_crate_fastest").as_deref(), Some("100000000.00"));
        // The floor with the claim's accesses over the faster floor: 0.70, 0.60, 0.70; the
        // ring over it: 80 / 75 (the mean of 80 and 70), 80 / 65, 90 / 65; the publisher:
        // 110 / 75, 110 / 65, 115 / 65.
        assert_eq!(floor("claimed", "ratio").as_deref(), Some("0.70"));
        assert_eq!(floor("claimed", "least").as_deref(), Some("0.60"));
        let claimed = |side: &str, what: &str| got(&format!("turn_{side}_vs_claimed_{what}"));
        assert_eq!(claimed("ring", "kept").as_deref(), Some("3.00"));
        assert_eq!(claimed("ring", "least").as_deref(), Some("1.07"));
        assert_eq!(claimed("ring", "ratio").as_deref(), Some("1.23"));
        assert_eq!(claimed("ring", "greatest").as_deref(), Some("1.38"));
        assert_eq!(claimed("publisher", "least").as_deref(), Some("1.47"));
        assert_eq!(claimed("publisher", "greatest").as_deref(), Some("1.77"));
        assert!(m.get("turn_ring_runs_vs_claimed_kept").is_none());
        // Without the crate's side: no crate keys at all.
        let mut m = shmring_peers::kit::Measured::default();
        report(&mut m, &pairs, CHUNK, false);
        assert!(m.get("turn_crate_rate").is_none());
        assert!(m.get("turn_ring_vs_crate_kept").is_none());
        assert!(m.get("turn_ring_vs_floor_or_floor_gather_kept").is_some());
    }

    #[test]
    fn the_run_reads_are_judged_against_the_faster_floor_of_each_pair() {
        // Floor read plainly, then with pauses, in M/s per pair: the faster one changes
        // from pair to pair, and the faster is steady at 200.
        let floors = [(200.0, 100.0), (100.0, 200.0), (200.0, 50.0), (60.0, 200.0)];
        let pairs: Vec<[u64; SIDES.len()]> = floors
            .iter()
            .map(|&(plain, gathering)| {
                let mut p = [ns(100.0); SIDES.len()];
                p[Side::RingRuns as usize] = ns(180.0);
                p[Side::Floor as usize] = ns(plain);
                p[Side::FloorGather as usize] = ns(gathering);
                p
            })
            .collect();
        let mut m = shmring_peers::kit::Measured::default();
        report(&mut m, &pairs, CHUNK, true);
        let got = |k: &str| m.get(k).map(|v| format!("{v:.2}"));
        let runs = |what: &str| got(&format!("turn_ring_runs_vs_floor_or_floor_gather_{what}"));
        // 180 over 200 in each of the 3 judged pairs: none mixed, none beaten.
        assert_eq!(runs("kept").as_deref(), Some("3.00"));
        assert_eq!(runs("mixed").as_deref(), Some("0.00"));
        assert_eq!(runs("ratio").as_deref(), Some("0.90"));
        assert_eq!(runs("greatest").as_deref(), Some("0.90"));
    }

    #[test]
    fn every_judged_side_runs_before_the_side_it_is_compared_with() {
        // `judge` takes pair i's judged chunk to lie between pair i - 1's and pair i's
        // chunks of the other side: true only if it runs first within a pair.
        for (a, around, _, _) in COMPARED {
            let at = |x: Side| SIDES.iter().position(|&s| s == x);
            for &b in around {
                assert!(at(a) < at(b), "{a:?} must run before {b:?}");
                assert_eq!(at(b), Some(b as usize));
            }
            assert_eq!(at(a), Some(a as usize));
        }
    }

    #[test]
    fn no_two_comparisons_of_a_side_share_a_prefix() {
        // A row carries each of its comparisons under its prefix (`ratio`, `claimed_ratio`,
        // ...): two under one prefix would overwrite each other, and the targets read the
        // one that came last.
        for (i, (a, _, prefix, _)) in COMPARED.iter().enumerate() {
            for (b, _, other, _) in &COMPARED[i + 1..] {
                assert!(
                    a != b || prefix != other,
                    "{a:?} compared twice under {prefix:?}"
                );
            }
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
        let ratio = |rows: &[Row], r: usize| round_ratio(rows, r, RING_ROW, "");
        assert_eq!(ratio(&[row(MIN_PAIRS, Some(0.9))], 2), Some(Some(0.9)));
        assert_eq!(ratio(&[row(MIN_PAIRS - 1, Some(0.9))], 2), Some(None));
        assert_eq!(ratio(&[row(0, None)], 2), Some(None));
        // Another round, another comparison, another row, or a failed row: nothing.
        assert_eq!(ratio(&[row(MIN_PAIRS, Some(0.9))], 3), None);
        assert_eq!(
            round_ratio(&[row(MIN_PAIRS, Some(0.9))], 2, RING_ROW, "crate_"),
            None
        );
        assert_eq!(
            round_ratio(&[row(MIN_PAIRS, Some(0.9))], 2, BATCH_ROW, ""),
            None
        );
        let failed = row(MIN_PAIRS, Some(0.9)).failed(&anyhow!("x"));
        assert_eq!(ratio(&[failed], 2), None);
        // A comparison under its prefix, beside the floor's on the same row.
        let mut both = row(MIN_PAIRS, Some(0.9));
        both.extra.insert("crate_kept".into(), MIN_PAIRS as f64);
        both.extra.insert("crate_ratio".into(), 0.7);
        assert_eq!(
            round_ratio(std::slice::from_ref(&both), 2, RING_ROW, "crate_"),
            Some(Some(0.7))
        );
        assert_eq!(ratio(&[both], 2), Some(Some(0.9)));
    }
}
