//! The performance targets (the bar each round set) and the longer-term goals, each as a
//! ratio of two rows measured in this run.

use std::fmt::Write as _;

use serde::Serialize;

use crate::row::Row;
use crate::{floor, latency, paired, peers, publish_cost, throughput, turn};

/// One target, evaluated.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is compared.
    pub what: String,
    /// The two rows (numerator / denominator).
    pub from: String,
    /// The measured ratio (NaN, `null` in JSON, for a paired target no round of which
    /// counts).
    pub ratio: f64,
    /// `<=` or `>=`.
    pub cmp: &'static str,
    /// The bar this round set.
    pub bar: f64,
    /// Whether the bar is met (false when not `decided`).
    pub met: bool,
    /// Whether the run measured enough to judge: a paired throughput target needs
    /// [`paired::MIN_ROUNDS`] rounds in which both of its rows ran in one placement.
    pub decided: bool,
    /// The longer-term goal, where there is one as a ratio.
    pub goal: Option<f64>,
    /// Whether the goal is met.
    pub goal_met: Option<bool>,
}

fn find<'a>(rows: &'a [Row], suite: &str, group: &str, name: &str) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.suite == suite
            && (group.is_empty() || r.group == group)
            && r.name == name
            && r.error.is_none()
    })
}

fn check(ratio: f64, cmp: &str, bar: f64) -> bool {
    if cmp == "<=" {
        ratio <= bar
    } else {
        ratio >= bar
    }
}

/// Evaluate every target whose rows this run measured.
pub fn evaluate(rows: &[Row]) -> Vec<Target> {
    let mut out = Vec::new();
    let mut push = |what: &str,
                    a: Option<&Row>,
                    b: Option<&Row>,
                    get: &dyn Fn(&Row) -> Option<f64>,
                    cmp: &'static str,
                    bar: f64,
                    goal: Option<f64>| {
        let (Some(a), Some(b)) = (a, b) else { return };
        let (Some(x), Some(y)) = (get(a), get(b)) else {
            return;
        };
        if y <= 0.0 {
            return;
        }
        let ratio = x / y;
        out.push(Target {
            what: what.to_owned(),
            from: format!("{} [{}] / {} [{}]", a.name, a.suite, b.name, b.suite),
            ratio,
            cmp,
            bar,
            met: check(ratio, cmp, bar),
            decided: true,
            goal,
            goal_met: goal.map(|g| check(ratio, cmp, g)),
        });
    };
    let p50 = |r: &Row| r.p50_ns.map(|v| v as f64);
    let p999 = |r: &Row| r.p999_ns.map(|v| v as f64);
    // The best 100 ms of each run: robust to another tenant taking a CPU for a while.
    let ops = |r: &Row| r.best_ops_per_sec.or(r.ops_per_sec);
    let lat = |group: &str, name: &str| find(rows, latency::SUITE, group, name);
    let fl = |name: &str| floor::get(rows, name);

    // Busy-spin against the cache-line floor.
    for (group, floor_name) in [
        (latency::PACED, floor::SPIN_PACED),
        (latency::PINGPONG, floor::SPIN_PINGPONG),
    ] {
        let tag = if group == latency::PACED {
            "paced"
        } else {
            "ping-pong"
        };
        push(
            &format!("busy-spin p50 / spin floor p50 ({tag})"),
            lat(group, "busy-spin"),
            fl(floor_name),
            &p50,
            "<=",
            1.3,
            Some(1.25),
        );
        push(
            &format!("busy-spin p99.9 / spin floor p99.9 ({tag})"),
            lat(group, "busy-spin"),
            fl(floor_name),
            &p999,
            "<=",
            3.0,
            Some(2.0),
        );
    }
    // The producer's tax for parking.
    let cost = |name: &str| find(rows, publish_cost::SUITE, "", name);
    push(
        "publish p50, nobody parked / parking compiled out (paced)",
        cost(publish_cost::PARKED_SPIN),
        cost(publish_cost::PARKED_BASE),
        &p50,
        "<=",
        1.1,
        Some(1.0),
    );
    push(
        "publish p50, nobody parked / parking compiled out (back-to-back)",
        cost(publish_cost::BURST_SPIN),
        cost(publish_cost::BURST_BASE),
        &p50,
        "<=",
        1.1,
        Some(1.0),
    );
    // Parked wake-up against the bare futex.
    for (group, floor_name, tag) in [
        (latency::PACED, floor::FUTEX_PACED, "paced"),
        (latency::PINGPONG, floor::FUTEX_PINGPONG, "ping-pong"),
        (latency::IDLE, floor::FUTEX_IDLE, "after 2 ms idle"),
    ] {
        push(
            &format!("blocking wake-up p50 / futex floor p50 ({tag})"),
            lat(group, "blocking"),
            fl(floor_name),
            &p50,
            "<=",
            1.3,
            Some(1.1),
        );
    }
    // Throughput.
    let tput = |name: &str| find(rows, throughput::SUITE, throughput::ONE, name);
    let per_event = throughput::name(1, 8);
    let peer = |name: &str| find(rows, peers::SUITE, peers::THROUGHPUT, name);
    // On stamped slots and on a fixed-size ring (the per-event format for 8-byte events).
    for (what, row) in [
        (
            "1P1C 8 B per-event throughput (best 100 ms) / iceoryx2",
            per_event.as_str(),
        ),
        (
            "1P1C 8 B per-event, fixed-size ring (best 100 ms) / iceoryx2",
            throughput::FIXED_ONE_ROW,
        ),
    ] {
        push(
            what,
            tput(row),
            peer(peers::IOX),
            &ops,
            ">=",
            20.0,
            Some(40.0),
        );
    }
    // Throughput against the floor ring and the `disruptor` crate, on a ring of stamped
    // slots and on one of fixed-size events (`event_size`; its consumer taking one event per
    // handler call, or a run at a time).
    let floor_row = find(
        rows,
        throughput::SUITE,
        throughput::FLOOR,
        throughput::FLOOR_ROW,
    );
    let crate_row = peer(peers::DISRUPTOR);
    let batch_100 = throughput::name(100, 8);
    for (what, a, b, bar) in [
        (
            "1P1C 8 B per-event throughput (best 100 ms) / disruptor crate (in-process)",
            per_event.as_str(),
            crate_row,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event throughput (best 100 ms) / bare SPSC ring floor",
            per_event.as_str(),
            floor_row,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B batch-100 throughput (best 100 ms) / disruptor crate per-event",
            batch_100.as_str(),
            crate_row,
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100 throughput / per-event (best 100 ms)",
            batch_100.as_str(),
            tput(&per_event),
            5.0,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring (best 100 ms) / bare SPSC ring floor",
            throughput::FIXED_ONE_ROW,
            floor_row,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring (best 100 ms) / disruptor crate (in-process)",
            throughput::FIXED_ONE_ROW,
            crate_row,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, Publisher (best 100 ms) / bare SPSC ring floor",
            throughput::FIXED_PUBLISHER_ROW,
            floor_row,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, Publisher (best 100 ms) / disruptor crate (in-process)",
            throughput::FIXED_PUBLISHER_ROW,
            crate_row,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring (best 100 ms) / disruptor crate per-event",
            throughput::FIXED_BATCH_ROW,
            crate_row,
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, run reads (best 100 ms) / bare SPSC ring floor",
            throughput::FIXED_RUNS_ONE_ROW,
            floor_row,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring, run reads (best 100 ms) / disruptor crate per-event",
            throughput::FIXED_RUNS_BATCH_ROW,
            crate_row,
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, ring of sized events (best 100 ms) / bare SPSC ring floor",
            throughput::SIZED_ONE_ROW,
            floor_row,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, ring of sized events (best 100 ms) / disruptor crate (in-process)",
            throughput::SIZED_ONE_ROW,
            crate_row,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100, ring of sized events (best 100 ms) / disruptor crate per-event",
            throughput::SIZED_BATCH_ROW,
            crate_row,
            BATCH_CRATE_BAR,
        ),
    ] {
        push(what, tput(a), b, &ops, ">=", bar, None);
    }
    // Busy-spin against iceoryx2.
    push(
        "busy-spin p50 / iceoryx2 p50 (paced)",
        lat(latency::PACED, "busy-spin"),
        find(rows, peers::SUITE, peers::PACED, peers::IOX),
        &p50,
        "<=",
        0.5,
        None,
    );
    push(
        "busy-spin p50 / iceoryx2 p50 (ping-pong)",
        lat(latency::PINGPONG, "busy-spin"),
        find(rows, peers::SUITE, peers::PINGPONG, peers::IOX),
        &p50,
        "<=",
        0.5,
        None,
    );
    // The same throughput ratios, the two rows measured seconds apart in each round (suite
    // `paired`): the median of the rounds, their range in the text. The rows on fixed-size
    // and sized rings are read by a consumer that gathers (`paired::GATHER`), those on
    // stamped slots by one that does not (the option does nothing there); the floor is each
    // round's faster of the floor ring read plainly and read with pauses
    // (`paired::FLOOR_EITHER`).
    let per_event = paired::shm_row(1);
    let batch_100 = paired::shm_row(100);
    let g = paired::gathering_row;
    let fixed_one = g(throughput::FIXED_ONE_ROW);
    let fixed_publisher = g(throughput::FIXED_PUBLISHER_ROW);
    let fixed_batch = g(throughput::FIXED_BATCH_ROW);
    let fixed_runs_one = g(throughput::FIXED_RUNS_ONE_ROW);
    let fixed_runs_batch = g(throughput::FIXED_RUNS_BATCH_ROW);
    let sized_one = g(throughput::SIZED_ONE_ROW);
    let sized_batch = g(throughput::SIZED_BATCH_ROW);
    let (floor, crate_pe, iox) = (paired::FLOOR_EITHER, paired::DISRUPTOR_ROW, paired::IOX_ROW);
    for (what, a, b, bar) in [
        (
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers (best 100 ms) / bare SPSC ring floor (plain or with pauses), paired",
            fixed_one.as_str(),
            floor,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers (best 100 ms) / disruptor crate (in-process), paired",
            fixed_one.as_str(),
            crate_pe,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, Publisher, a reader that gathers (best 100 ms) / bare SPSC ring floor (plain or with pauses), paired",
            fixed_publisher.as_str(),
            floor,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, Publisher, a reader that gathers (best 100 ms) / disruptor crate (in-process), paired",
            fixed_publisher.as_str(),
            crate_pe,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring, a reader that gathers (best 100 ms) / disruptor crate per-event, paired",
            fixed_batch.as_str(),
            crate_pe,
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, run reads that gather (best 100 ms) / bare SPSC ring floor (plain or with pauses), paired",
            fixed_runs_one.as_str(),
            floor,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring, run reads that gather (best 100 ms) / disruptor crate per-event, paired",
            fixed_runs_batch.as_str(),
            crate_pe,
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, ring of sized events, a reader that gathers (best 100 ms) / bare SPSC ring floor (plain or with pauses), paired",
            sized_one.as_str(),
            floor,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, ring of sized events, a reader that gathers (best 100 ms) / disruptor crate (in-process), paired",
            sized_one.as_str(),
            crate_pe,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100, ring of sized events, a reader that gathers (best 100 ms) / disruptor crate per-event, paired",
            sized_batch.as_str(),
            crate_pe,
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, ring of sized events, a reader that gathers (best 100 ms) / iceoryx2, paired",
            sized_one.as_str(),
            iox,
            20.0,
        ),
        (
            "1P1C 8 B per-event throughput (best 100 ms) / bare SPSC ring floor (plain or with pauses), paired",
            per_event.as_str(),
            floor,
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event throughput (best 100 ms) / disruptor crate (in-process), paired",
            per_event.as_str(),
            crate_pe,
            CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100 throughput (best 100 ms) / disruptor crate per-event, paired",
            batch_100.as_str(),
            crate_pe,
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100 throughput / per-event (best 100 ms), paired",
            batch_100.as_str(),
            per_event.as_str(),
            5.0,
        ),
        // iceoryx2 measured in the same rounds: the whole-run targets above divide by its
        // row of the `peers` suite, minutes apart, where the guest's placement may have
        // changed for either row (iceoryx2 has two rates too, see `paired::IOX_SLOW`).
        (
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers (best 100 ms) / iceoryx2, paired",
            fixed_one.as_str(),
            iox,
            20.0,
        ),
        (
            "1P1C 8 B per-event throughput (best 100 ms) / iceoryx2, paired",
            per_event.as_str(),
            iox,
            20.0,
        ),
    ] {
        out.extend(paired_target(
            what,
            a,
            b,
            &paired::ratios(rows, a, b),
            paired::MIN_ROUNDS,
            ">=",
            bar,
        ));
    }
    // The fixed-size ring against the floor ring and the `disruptor` crate, measured in
    // turn inside the same two processes (`turn`): each round's median over its pairs in
    // one placement.
    for (what, a, b, prefix, bar) in [
        (
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers / bare SPSC ring floor (plain or with pauses), in turn, paired",
            turn::RING_ROW,
            turn::FLOOR_EITHER,
            "",
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers / disruptor crate per-event, in turn, paired",
            turn::RING_ROW,
            turn::CRATE_ROW,
            "crate_",
            CRATE_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, run reads that gather / bare SPSC ring floor (plain or with pauses), in turn, paired",
            turn::RING_RUNS_ROW,
            turn::FLOOR_EITHER,
            "",
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, Publisher, a reader that gathers / bare SPSC ring floor (plain or with pauses), in turn, paired",
            turn::PUBLISHER_ROW,
            turn::FLOOR_EITHER,
            "",
            FLOOR_BAR,
        ),
        (
            "1P1C 8 B per-event, fixed-size ring, Publisher, a reader that gathers / disruptor crate per-event, in turn, paired",
            turn::PUBLISHER_ROW,
            turn::CRATE_ROW,
            "crate_",
            CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring, a reader that gathers / disruptor crate per-event, in turn, paired",
            turn::BATCH_ROW,
            turn::CRATE_ROW,
            "crate_",
            BATCH_CRATE_BAR,
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring, run reads that gather / disruptor crate per-event, in turn, paired",
            turn::BATCH_RUNS_ROW,
            turn::CRATE_ROW,
            "crate_",
            BATCH_CRATE_BAR,
        ),
    ] {
        out.extend(paired_target(
            what,
            a,
            b,
            &paired::turn_ratios(rows, a, prefix),
            paired::MIN_ROUNDS,
            ">=",
            bar,
        ));
    }
    // Busy-spin p50 and p99.9 against the spin floor of the same round: the median of the
    // rounds' ratios at most the bars of the whole-run targets above (1.3x and 3x), from
    // rows seconds apart. A full run's paced row holds 30,000 events a round (ping-pong
    // 50,000), so its p99.9 is about its 30th worst; with `--quick` (1,500) its second worst.
    for (name, _, spin_floor) in paired::LATENCY {
        for (stat, values, bar) in [
            ("p50", paired::latency_ratios(rows, name, spin_floor), 1.3),
            ("p99.9", paired::tail_ratios(rows, name, spin_floor), 3.0),
        ] {
            out.extend(paired_target(
                &format!("{name} {stat} / {spin_floor} floor {stat}, paired"),
                name,
                spin_floor,
                &paired::Ratios {
                    values,
                    ..Default::default()
                },
                1,
                "<=",
                bar,
            ));
        }
    }
    // The busy-spin row in turn against the bare ring of lines measured in turn with it (as
    // many lines as the ring has slots, 64 bytes apart): the same bar, over a denominator
    // that pays what the guest charges for a new line per event and nothing of shmring's.
    // Where the floor's target misses and this one too, the gap is shmring's path, not the
    // line per event.
    out.extend(paired_target(
        &format!(
            "{} p50 / {} p50, paired",
            paired::BUSY_PACED_INTERLEAVED,
            paired::BARE_PACED_INTERLEAVED
        ),
        paired::BUSY_PACED_INTERLEAVED,
        paired::BARE_PACED_INTERLEAVED,
        &paired::Ratios {
            values: paired::latency_ratios(
                rows,
                paired::BUSY_PACED_INTERLEAVED,
                paired::BARE_PACED_INTERLEAVED,
            ),
            ..Default::default()
        },
        1,
        "<=",
        1.3,
    ));
    out
}

/// Why rounds were left out of a paired ratio `_ / b` (`r`), one phrase per reason that
/// left any out: for the targets and the bounds alike.
fn left_out(r: &paired::Ratios, b: &str) -> Vec<String> {
    let iox = if b == paired::IOX_ROW {
        format!(", iceoryx2 below 1/{}", paired::IOX_SLOW)
    } else {
        String::new()
    };
    [
        (
            r.unsteady,
            format!(
                "with the floor moved beyond {}x within them",
                paired::STEADY
            ),
        ),
        (
            r.beaten,
            format!(
                "with a per-event row above {}x the floor ring (the floor not at its best)",
                paired::BEATEN
            ),
        ),
        (
            r.outran,
            format!("with a row above {}x a floor of this bound", paired::BEATEN),
        ),
        (
            r.slow,
            format!(
                "with a row below 1/{} of its fastest round{iox} (the slow placement)",
                paired::SLOW
            ),
        ),
        (
            r.few,
            format!(
                "with fewer than {} pairs kept in turn (the chunks around the judged one \
                 steady; against the floor, the ring not above {}x of it)",
                turn::MIN_PAIRS,
                paired::BEATEN
            ),
        ),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, reason)| format!("{n} {reason}"))
    .collect()
}

/// A target of suite `paired`: `a / b` in each round that counts (`r`, with the rounds the
/// suite left out and why), judged by the median once `min_rounds` rounds count.
fn paired_target(
    what: &str,
    a: &str,
    b: &str,
    r: &paired::Ratios,
    min_rounds: usize,
    cmp: &'static str,
    bar: f64,
) -> Option<Target> {
    let v = &r.values;
    let why = left_out(r, b);
    // A target with rounds measured but none left counts as undecided, stated with why; one
    // the run did not measure at all is not stated.
    if v.is_empty() && why.is_empty() {
        return None;
    }
    let (median, range) = match paired::spread(v) {
        Some((median, least, greatest)) => (median, format!(", range {least:.2}-{greatest:.2}x")),
        None => (f64::NAN, String::new()),
    };
    let decided = !v.is_empty() && v.len() >= min_rounds;
    let more = if why.is_empty() {
        String::new()
    } else {
        format!(" (more left out: {})", why.join("; "))
    };
    Some(Target {
        what: what.to_owned(),
        from: format!(
            "{a} [{s}] / {b} [{s}], each round: median of {} rounds{more}{range}",
            v.len(),
            s = paired::SUITE
        ),
        ratio: median,
        cmp,
        bar,
        met: decided && check(median, cmp, bar),
        decided,
        goal: None,
        goal_met: None,
    })
}

/// A ratio over the paired rounds that measures a bar rather than meeting one: a floor ring
/// against a peer (how far the floor itself reaches toward the bar set against that peer),
/// or one of shmring's rows against that floor.
#[derive(Debug, Clone, Serialize)]
pub struct Bound {
    /// What is compared.
    pub what: String,
    /// The two rows (numerator / denominator), with the rounds counted and those left out.
    pub from: String,
    /// The median of the rounds' ratios (NaN, `null` in JSON, when no round counts).
    pub ratio: f64,
    /// The least of the rounds' ratios (NaN when none counts).
    pub least: f64,
    /// The greatest of the rounds' ratios (NaN when none counts).
    pub greatest: f64,
    /// The rounds counted.
    pub rounds: usize,
    /// Whether at least [`paired::MIN_ROUNDS`] rounds counted, as a paired target needs.
    pub decided: bool,
    /// The bar of the targets this bound measures, where it is a floor's against a peer.
    pub bar: Option<f64>,
}

/// The bar of the batch-100 targets against the `disruptor` crate's per-event rate.
pub const BATCH_CRATE_BAR: f64 = 2.5;
/// The bar of the per-event targets against the floor ring.
pub const FLOOR_BAR: f64 = 0.8;
/// The bar of the per-event targets against the `disruptor` crate.
pub const CRATE_BAR: f64 = 1.0;

/// The bounds this run measured (see [`Bound`]): the bare ring publishing its head once
/// per 100 events (each round's faster of its two readers, `paired::FLOOR_BATCH_EITHER`)
/// against the `disruptor` crate per event, beside the batch-100 targets' bar against the
/// crate ([`BATCH_CRATE_BAR`]), and shmring's batch-100 rows on fixed-size rings read with
/// `gather` against that floor; the floor ring in the 16-byte slots of a ring of sized
/// events (`paired::SIZED_FLOOR_EITHER`) against the floor ring of 8-byte slots and the
/// crate per event, beside the sized-event targets' bars against those ([`FLOOR_BAR`],
/// [`CRATE_BAR`]), and the sized ring's per-event row against it. The rounds are chosen by
/// `paired::bound_ratios` from the two rows of each bound, as a paired target's from its
/// own two (so a floor's bound and a target against the crate may count different rounds),
/// leaving out too each round in which a row outran a floor of the bound by more than
/// `paired::BEATEN` (`paired::outran`). Rounds measured but none left: the bound is stated
/// undecided; none measured: not stated.
pub fn bounds(rows: &[Row]) -> Vec<Bound> {
    let g = paired::gathering_row;
    let floor = paired::FLOOR_BATCH_EITHER;
    let fixed_batch = g(throughput::FIXED_BATCH_ROW);
    let fixed_runs_batch = g(throughput::FIXED_RUNS_BATCH_ROW);
    let sized_one = g(throughput::SIZED_ONE_ROW);
    let sized_floor = paired::SIZED_FLOOR_EITHER;
    let mut out = Vec::new();
    for (what, a, b, bar) in [
        (
            "1P1C 8 B batch-100, bare SPSC ring (best 100 ms) / disruptor crate per-event, paired: how far the floor reaches toward the batch-100 targets' bar",
            floor,
            paired::DISRUPTOR_ROW,
            Some(BATCH_CRATE_BAR),
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring, a reader that gathers / bare SPSC ring batch-100 (best 100 ms), paired",
            fixed_batch.as_str(),
            floor,
            None,
        ),
        (
            "1P1C 8 B batch-100, fixed-size ring, run reads that gather / bare SPSC ring batch-100 (best 100 ms), paired",
            fixed_runs_batch.as_str(),
            floor,
            None,
        ),
        (
            "1P1C 8 B per-event, bare SPSC ring of 16-byte slots (length + event) / bare SPSC ring floor (plain or with pauses) (best 100 ms), paired: how far a floor in the sized ring's slots reaches toward the sized-event target's bar",
            sized_floor,
            paired::FLOOR_EITHER,
            Some(FLOOR_BAR),
        ),
        (
            "1P1C 8 B per-event, bare SPSC ring of 16-byte slots (length + event) / disruptor crate per-event (best 100 ms), paired: how far a floor in the sized ring's slots reaches toward the sized-event target's bar",
            sized_floor,
            paired::DISRUPTOR_ROW,
            Some(CRATE_BAR),
        ),
        (
            "1P1C 8 B per-event, ring of sized events, a reader that gathers / bare SPSC ring of 16-byte slots (length + event) (best 100 ms), paired",
            sized_one.as_str(),
            sized_floor,
            None,
        ),
    ] {
        let r = paired::bound_ratios(rows, a, b);
        let why = left_out(&r, b);
        if r.values.is_empty() && why.is_empty() {
            continue;
        }
        let (ratio, least, greatest) =
            paired::spread(&r.values).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let more = if why.is_empty() {
            String::new()
        } else {
            format!(", left out: {}", why.join("; "))
        };
        out.push(Bound {
            what: what.to_owned(),
            from: format!(
                "{a} [{s}] / {b} [{s}], {} rounds counted{more}",
                r.values.len(),
                s = paired::SUITE
            ),
            ratio,
            least,
            greatest,
            rounds: r.values.len(),
            decided: r.values.len() >= paired::MIN_ROUNDS,
            bar,
        });
    }
    out
}

/// The bounds as lines of text, after the targets table.
pub fn bounds_text(bounds: &[Bound]) -> String {
    let mut out = String::new();
    for b in bounds {
        let measured = if b.decided {
            let bar = b.bar.map_or(String::new(), |bar| {
                if b.ratio < bar {
                    format!("; the floor falls short of the bar of {bar:.2}x")
                } else {
                    format!("; the floor reaches the bar of {bar:.2}x")
                }
            });
            format!(
                "median {:.2}x of {} rounds, range {:.2}-{:.2}x{bar}",
                b.ratio, b.rounds, b.least, b.greatest
            )
        } else {
            format!(
                "undecided: {} rounds counted (at least {} needed)",
                b.rounds,
                paired::MIN_ROUNDS
            )
        };
        let _ = writeln!(
            out,
            "- bound, not a target: {}: {measured} ({})",
            b.what, b.from
        );
    }
    out
}

/// The longer-term absolute goals, stated beside the ratios.
pub fn absolute_goals(rows: &[Row]) -> String {
    let mut out = String::new();
    let tput = |name: &str| find(rows, throughput::SUITE, throughput::ONE, name);
    let best = |r: &Row| r.best_ops_per_sec.or(r.ops_per_sec);
    if let Some(r) = tput(&throughput::name(100, 8)).and_then(best) {
        let _ = writeln!(
            out,
            "- goal: batched >= 250 M/s; measured batch-100 8 B (best 100 ms): {:.1} M/s ({})",
            r / 1e6,
            if r >= 250e6 { "met" } else { "missed" }
        );
    }
    if let Some(r) = tput(&throughput::name(1, 8)).and_then(best) {
        let _ = writeln!(
            out,
            "- goal: per-event above the Java Disruptor's median (~45 M/s on this \
             machine); measured per-event 8 B (best 100 ms): {:.1} M/s ({})",
            r / 1e6,
            if r >= 45e6 { "met" } else { "missed" }
        );
    }
    if let Some(d) = floor_drift(rows) {
        let _ = writeln!(
            out,
            "- the floor ring measured again after every other throughput row: {d:.2}x the \
             first floor row; a throughput target against the floor decides something only \
             when this is near 1.00x (the guest moved between placements otherwise)"
        );
    }
    if let Some(c) =
        find(rows, latency::SUITE, latency::IDLE, "blocking").and_then(|r| r.consumer_cpu)
    {
        let _ = writeln!(
            out,
            "- goal: a parked consumer 0% CPU; blocking consumer after 2 ms idle: {:.2}% \
             of a core (one wake-up per event included)",
            c * 100.0
        );
    }
    out
}

/// The floor ring's second row of the throughput suite (measured after every other row)
/// divided by its first: how much the same ring moved within the run.
pub fn floor_drift(rows: &[Row]) -> Option<f64> {
    let best = |name: &str| {
        find(rows, throughput::SUITE, throughput::FLOOR, name)
            .and_then(|r| r.best_ops_per_sec.or(r.ops_per_sec))
    };
    let (first, again) = (
        best(throughput::FLOOR_ROW)?,
        best(throughput::FLOOR_AGAIN_ROW)?,
    );
    (first > 0.0).then(|| again / first)
}

/// The targets as a markdown table.
pub fn table(targets: &[Target]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| target | ratio | bar | verdict | goal | verdict | rows |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | --- | ---: | --- | --- |");
    for t in targets {
        let by = |bar: f64| {
            let off = if t.cmp == "<=" {
                t.ratio / bar - 1.0
            } else {
                bar / t.ratio - 1.0
            };
            format!("missed by {:.0}%", off * 100.0)
        };
        let ratio = if t.ratio.is_nan() {
            "-".to_owned()
        } else {
            format!("{:.2}x", t.ratio)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} {:.2}x | {} | {} | {} | {} |",
            t.what,
            ratio,
            t.cmp,
            t.bar,
            if !t.decided {
                format!(
                    "undecided: too few rounds in one placement (at least {} needed)",
                    paired::MIN_ROUNDS
                )
            } else if t.met {
                "met".to_owned()
            } else {
                by(t.bar)
            },
            t.goal
                .map_or(String::new(), |g| format!("{} {g:.2}x", t.cmp)),
            match (t.goal, t.goal_met) {
                (Some(g), Some(false)) => by(g),
                (Some(_), Some(true)) => "met".to_owned(),
                _ => String::new(),
            },
            t.from
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Kind;

    /// The paired per-event / `disruptor` crate target's name.
    const PER_EVENT_CRATE: &str =
        "1P1C 8 B per-event throughput (best 100 ms) / disruptor crate (in-process), paired";

    /// The target named `what` (exactly).
    fn target<'a>(targets: &'a [Target], what: &str) -> &'a Target {
        targets
            .iter()
            .find(|t| t.what == what)
            .unwrap_or_else(|| panic!("no target {what:?} in\n{}", table(targets)))
    }

    /// A throughput row of the paired suite's round `r`.
    fn paired_row(r: usize, name: &str, ops: f64) -> Row {
        let mut row = Row::new(paired::SUITE, &paired::round(r), name, Kind::Throughput);
        row.best_ops_per_sec = Some(ops);
        row
    }

    /// A latency row of round `r` of the paired suite, with its p50.
    fn paired_latency_row(r: usize, name: &str, p50: u64) -> Row {
        let mut row = Row::new(
            paired::SUITE,
            &paired::latency_round(r),
            name,
            Kind::Latency,
        );
        row.p50_ns = Some(p50);
        row
    }

    #[test]
    fn the_batched_floor_bounds_the_batch_targets_against_the_crate_and_is_no_target() {
        let mut rows = Vec::new();
        let fixed_batch = paired::gathering_row(throughput::FIXED_BATCH_ROW);
        // Each round's batched floor is the faster of its two readers (plain, gathering).
        for (r, plain, gathering, disruptor, ring) in [
            (1, 600.0, 500.0, 300.0, 480.0),
            (2, 400.0, 660.0, 300.0, 450.0),
            (3, 570.0, 570.0, 300.0, 456.0),
        ] {
            rows.extend(
                [
                    (paired::FLOOR_BATCH_ROW.to_owned(), plain),
                    (paired::FLOOR_BATCH_GATHER_ROW.to_owned(), gathering),
                    (paired::DISRUPTOR_ROW.to_owned(), disruptor),
                    (fixed_batch.clone(), ring),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        let bound = |rows: &[Row], a: &str| {
            bounds(rows)
                .into_iter()
                .find(|b| b.from.starts_with(a))
                .unwrap_or_else(|| panic!("no bound of {a:?}"))
        };
        // The floor against the crate: 2.0, 2.2, 1.9, median 2.0, below the bar of 2.5.
        let b = bound(&rows, paired::FLOOR_BATCH_EITHER);
        assert_eq!((b.ratio, b.rounds, b.decided), (2.0, 3, true));
        assert_eq!(
            (b.least, b.greatest, b.bar),
            (1.9, 2.2, Some(BATCH_CRATE_BAR))
        );
        // The ring's batches against the batched floor: 0.8, 0.68..., 0.8; median 0.8.
        let b = bound(&rows, &fixed_batch);
        assert_eq!((b.ratio, b.rounds), (0.8, 3));
        let text = bounds_text(&bounds(&rows));
        assert!(
            text.contains("median 2.00x of 3 rounds, range 1.90-2.20x")
                && text.contains("the floor falls short of the bar of 2.50x"),
            "{text}"
        );
        // A bound is no target: the targets table divides by no batched floor.
        assert!(!evaluate(&rows)
            .iter()
            .any(|t| t.from.contains("batch-100, 8 B")));
        // A round where the ring outran its batched floor by more than BEATEN is left out of
        // every bound of that floor (it was not at its best there), the ring's and the
        // floor's against the crate alike: with two rounds left, both undecided.
        let mut outran = rows.clone();
        for r in &mut outran {
            if r.group == paired::round(2) && r.name == fixed_batch {
                r.best_ops_per_sec = Some(660.0 * 1.25);
            }
        }
        for a in [fixed_batch.as_str(), paired::FLOOR_BATCH_EITHER] {
            let b = bound(&outran, a);
            assert_eq!((b.rounds, b.decided), (2, false), "{a}");
            assert!(
                b.from
                    .contains("1 with a row above 1.2x a floor of this bound"),
                "{}",
                b.from
            );
        }
        let text = bounds_text(&bounds(&outran));
        assert!(
            text.contains("undecided: 2 rounds counted (at least 3 needed)"),
            "{text}"
        );
        // A round whose floor moved (the per-event floor with pauses, first row against
        // last) is left out as for a target: rounds 1 and 2 left, 2.0 and 2.2.
        let mut moved = rows.clone();
        moved.extend([
            paired_row(3, paired::FLOOR_GATHER_ROW, 400.0),
            paired_row(3, paired::FLOOR_GATHER_AGAIN_ROW, 200.0),
        ]);
        let b = bound(&moved, paired::FLOOR_BATCH_EITHER);
        assert_eq!(b.rounds, 2);
        assert!((b.ratio - 2.1).abs() < 1e-9, "{}", b.ratio);
        assert!(b.from.contains("1 with the floor moved"), "{}", b.from);
        // A floor at 2.5x the crate or more reaches the bar.
        for r in &mut rows {
            if r.name == paired::FLOOR_BATCH_ROW {
                r.best_ops_per_sec = Some(900.0);
            }
        }
        let text = bounds_text(&bounds(&rows));
        assert!(
            text.contains("the floor reaches the bar of 2.50x"),
            "{text}"
        );
        // Rounds without the batched floor: no bound stated.
        rows.retain(|r| !r.name.starts_with("bare SPSC ring, batch-100"));
        assert!(bounds(&rows).is_empty());
    }

    #[test]
    fn the_floor_of_sized_slots_bounds_the_sized_targets() {
        let mut rows = Vec::new();
        let sized = paired::gathering_row(throughput::SIZED_ONE_ROW);
        for (r, floor, sized_plain, sized_gathering, disruptor, ring) in [
            (1, 400.0, 200.0, 220.0, 300.0, 198.0),
            (2, 420.0, 231.0, 210.0, 300.0, 210.0),
            (3, 440.0, 198.0, 198.0, 300.0, 178.2),
        ] {
            rows.extend(
                [
                    (paired::FLOOR_ROW.to_owned(), floor),
                    (paired::SIZED_FLOOR_ROW.to_owned(), sized_plain),
                    (paired::SIZED_FLOOR_GATHER_ROW.to_owned(), sized_gathering),
                    (paired::DISRUPTOR_ROW.to_owned(), disruptor),
                    (sized.clone(), ring),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        let b = bounds(&rows);
        let find = |a: &str, b_: &str| {
            b.iter()
                .find(|x| {
                    x.from.starts_with(&format!("{a} [")) && x.from.contains(&format!("/ {b_} ["))
                })
                .unwrap_or_else(|| panic!("no bound {a:?} / {b_:?}"))
        };
        // The floor of sized slots (the faster reader: 220, 231, 198) against the floor
        // ring: 0.55, 0.55, 0.45; against the crate: 0.733, 0.77, 0.66.
        let f = find(paired::SIZED_FLOOR_EITHER, paired::FLOOR_EITHER);
        assert_eq!((f.ratio, f.bar, f.rounds), (0.55, Some(FLOOR_BAR), 3));
        let c = find(paired::SIZED_FLOOR_EITHER, paired::DISRUPTOR_ROW);
        assert_eq!((c.ratio, c.bar), (220.0 / 300.0, Some(CRATE_BAR)));
        // The sized ring against it: 0.9, 0.909..., 0.9.
        let s = find(&sized, paired::SIZED_FLOOR_EITHER);
        assert_eq!((s.ratio, s.bar), (0.9, None));
        let text = bounds_text(&b);
        assert!(
            text.contains("the floor falls short of the bar of 0.80x"),
            "{text}"
        );
        assert!(
            text.contains("the floor falls short of the bar of 1.00x"),
            "{text}"
        );
        // The sized ring above 1.2x its floor in round 1: that round leaves every bound of
        // that floor (so the ring's bound never shows more than 1.2x).
        let mut outran = rows.clone();
        for r in &mut outran {
            if r.group == paired::round(1) && r.name == sized {
                r.best_ops_per_sec = Some(220.0 * 1.25);
            }
        }
        let b = bounds(&outran);
        for (a, b_) in [
            (sized.as_str(), paired::SIZED_FLOOR_EITHER),
            (paired::SIZED_FLOOR_EITHER, paired::FLOOR_EITHER),
            (paired::SIZED_FLOOR_EITHER, paired::DISRUPTOR_ROW),
        ] {
            let x = b
                .iter()
                .find(|x| {
                    x.from.starts_with(&format!("{a} [")) && x.from.contains(&format!("/ {b_} ["))
                })
                .unwrap_or_else(|| panic!("no bound {a:?} / {b_:?}"));
            assert_eq!((x.rounds, x.decided), (2, false), "{a} / {b_}");
            assert!(x.greatest <= paired::BEATEN, "{a} / {b_}: {}", x.greatest);
        }
        // Every round's floor moved: rounds measured, none counted, the bound undecided
        // with no ratio (NaN, `null` in the JSON).
        let mut moved = rows.clone();
        for r in 1..=3 {
            moved.extend([
                paired_row(r, paired::FLOOR_GATHER_ROW, 400.0),
                paired_row(r, paired::FLOOR_GATHER_AGAIN_ROW, 200.0),
            ]);
        }
        let b = bounds(&moved);
        assert!(
            !b.is_empty()
                && b.iter()
                    .all(|x| !x.decided && x.rounds == 0 && x.ratio.is_nan())
        );
        let text = bounds_text(&b);
        assert!(
            text.contains("undecided: 0 rounds counted (at least 3 needed)"),
            "{text}"
        );
        assert!(text.contains("left out: 3 with the floor moved"), "{text}");
    }

    #[test]
    fn a_paired_target_is_the_median_of_the_rounds_ratios() {
        let mut rows = Vec::new();
        for (r, shm, disruptor) in [(1, 50.0, 200.0), (2, 65.0, 200.0), (3, 104.0, 80.0)] {
            rows.extend(
                [
                    (paired::shm_row(1), shm),
                    (paired::DISRUPTOR_ROW.to_owned(), disruptor),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        let targets = evaluate(&rows);
        let t = targets
            .iter()
            .find(|t| t.what.contains("disruptor crate (in-process), paired"))
            .expect("the paired per-event / disruptor target");
        // Ratios 0.25, 0.325, 1.3: the median, not the mean (0.625) nor a whole-run ratio.
        assert_eq!(t.ratio, 0.325);
        assert!(!t.met);
        assert!(
            t.from.contains("median of 3 rounds, range 0.25-1.30x"),
            "{}",
            t.from
        );
        // Rows the paired suite did not measure give no paired target.
        assert!(!targets.iter().any(|t| t.what.contains("floor, paired")));
    }

    #[test]
    fn the_paired_iceoryx2_targets_divide_by_iceoryx2_of_the_same_round() {
        let mut rows = Vec::new();
        // Round 4: the fixed-size row alone in the slow placement (below a third of its
        // fastest round), left out of its ratio and not of the stamped row's. Round 5:
        // iceoryx2 alone in its slow rate, above a third of its fastest round but below
        // half of it, left out of both.
        for (r, fixed, stamped, iox) in [
            (1, 150.0, 48.0, 3.0),
            (2, 140.0, 50.0, 2.0),
            (3, 130.0, 46.0, 2.6),
            (4, 34.0, 45.0, 3.0),
            (5, 145.0, 49.0, 1.2),
        ] {
            rows.extend(
                [
                    (paired::gathering_row(throughput::FIXED_ONE_ROW), fixed),
                    (paired::shm_row(1), stamped),
                    (paired::IOX_ROW.to_owned(), iox),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        let targets = evaluate(&rows);
        let fixed = target(
            &targets,
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers (best 100 ms) / iceoryx2, paired",
        );
        // 50, 70, 50: the median of the three rounds that count, each divided by its own
        // round's iceoryx2 (with round 5's 120.8 kept, the median would be 60).
        assert_eq!(fixed.ratio, 50.0);
        assert!(fixed.met && fixed.decided);
        assert!(fixed.from.contains("median of 3 rounds"), "{}", fixed.from);
        assert!(
            fixed
                .from
                .contains("2 with a row below 1/3 of its fastest round, iceoryx2 below 1/2"),
            "{}",
            fixed.from
        );
        let stamped = target(
            &targets,
            "1P1C 8 B per-event throughput (best 100 ms) / iceoryx2, paired",
        );
        // 16, 25, 17.69 (17 + 9/13), 15, round 5 left out: median 16.85, below the bar.
        assert!((stamped.ratio - (16.0 + 17.0 + 9.0 / 13.0) / 2.0).abs() < 1e-9);
        assert!(!stamped.met && stamped.decided);
    }

    #[test]
    fn a_row_alone_in_the_slow_placement_decides_no_paired_throughput_target() {
        let mut rows = Vec::new();
        // Round 2's floor held at both ends, but the shmring row between them ran in the slow
        // placement (a fifth of its other rounds): its ratio (0.2) is left out.
        for (r, shm, disruptor) in [
            (1, 400.0, 200.0),
            (2, 80.0, 400.0),
            (3, 500.0, 250.0),
            (4, 420.0, 210.0),
        ] {
            rows.extend(
                [
                    (paired::shm_row(1), shm),
                    (paired::DISRUPTOR_ROW.to_owned(), disruptor),
                    (paired::FLOOR_ROW.to_owned(), 500.0),
                    (paired::FLOOR_AGAIN_ROW.to_owned(), 520.0),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        let r = paired::ratios(&rows, &paired::shm_row(1), paired::DISRUPTOR_ROW);
        assert_eq!((r.values, r.unsteady, r.slow), (vec![2.0, 2.0, 2.0], 0, 1));
        let targets = evaluate(&rows);
        let t = target(&targets, PER_EVENT_CRATE);
        assert_eq!(t.ratio, 2.0);
        assert!(t.decided && t.met);
        assert!(
            t.from
                .contains("median of 3 rounds (more left out: 1 with a row below 1/3"),
            "{}",
            t.from
        );
        // With round 4 gone too, two rounds are left: too few to decide.
        rows.retain(|row| row.group != paired::round(4));
        let targets = evaluate(&rows);
        let t = target(&targets, PER_EVENT_CRATE);
        assert_eq!(t.ratio, 2.0);
        assert!(!t.decided && !t.met);
        assert!(table(&targets).contains("undecided: too few rounds in one placement"));
    }

    #[test]
    fn the_in_turn_target_is_the_median_of_the_rounds_with_enough_pairs() {
        const IN_TURN: &str =
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers / bare SPSC ring floor (plain or with pauses), in turn, paired";
        let turn_row = |r: usize, kept: usize, ratio: f64| {
            let mut row = paired_row(r, turn::RING_ROW, 700.0);
            row.extra.insert("kept".into(), kept as f64);
            row.extra.insert("ratio".into(), ratio);
            row
        };
        // Rounds 1, 2 and 4 kept enough pairs; round 3 kept too few (its median, 1.5, is
        // not read); round 5 did not measure the pair.
        let mut rows = vec![
            turn_row(1, 40, 0.82),
            turn_row(2, turn::MIN_PAIRS, 0.9),
            turn_row(3, turn::MIN_PAIRS - 1, 1.5),
            turn_row(4, 300, 0.78),
        ];
        let targets = evaluate(&rows);
        let t = target(&targets, IN_TURN);
        assert_eq!(t.ratio, 0.82);
        assert!(t.decided && t.met, "{t:?}");
        assert!(
            t.from.contains(
                "median of 3 rounds (more left out: 1 with fewer than 5 pairs kept in turn \
                 (the chunks around the judged one steady; against the floor, the ring not \
                 above 1.2x of it)), \
                 range 0.78-0.90x"
            ),
            "{}",
            t.from
        );
        // Round 2 gone: two rounds are too few to decide.
        rows.remove(1);
        let t = target(&evaluate(&rows), IN_TURN).clone();
        assert!(!t.decided && !t.met, "{t:?}");
        // Below the bar: decided and missed.
        rows.push(turn_row(5, 50, 0.7));
        rows.push(turn_row(2, 50, 0.75));
        let t = target(&evaluate(&rows), IN_TURN).clone();
        assert_eq!(t.ratio, 0.765);
        assert!(t.decided && !t.met, "{t:?}");
    }

    #[test]
    fn the_crate_targets_in_turn_read_the_crate_ratios_and_only_those() {
        let names = [
            (
                "1P1C 8 B per-event, fixed-size ring, a reader that gathers / disruptor crate per-event, in turn, paired",
                turn::RING_ROW,
            ),
            (
                "1P1C 8 B batch-100, fixed-size ring, a reader that gathers / disruptor crate per-event, in turn, paired",
                turn::BATCH_ROW,
            ),
            (
                "1P1C 8 B batch-100, fixed-size ring, run reads that gather / disruptor crate per-event, in turn, paired",
                turn::BATCH_RUNS_ROW,
            ),
        ];
        // Each row carries the floor's comparison (unprefixed) at 5.0 and the crate's at
        // its own value: a target that read the wrong one would show 5.0.
        let mut rows = Vec::new();
        for r in 1..=3 {
            for (k, (_, name)) in names.iter().enumerate() {
                let mut row = paired_row(r, name, 700.0);
                row.extra.insert("kept".into(), 50.0);
                row.extra.insert("ratio".into(), 5.0);
                row.extra.insert("crate_kept".into(), 50.0);
                row.extra
                    .insert("crate_ratio".into(), 0.5 + k as f64 + r as f64 * 0.1);
                rows.push(row);
            }
        }
        let targets = evaluate(&rows);
        for (k, (what, _)) in names.iter().enumerate() {
            let t = target(&targets, what);
            assert!((t.ratio - (0.7 + k as f64)).abs() < 1e-9, "{what}: {t:?}");
            assert!(t.decided, "{t:?}");
        }
        // A build without the crate's side: no crate extras, no crate target stated.
        for row in &mut rows {
            row.extra.retain(|k, _| !k.starts_with("crate_"));
        }
        let targets = evaluate(&rows);
        for (what, _) in names {
            assert!(targets.iter().all(|t| t.what != what), "{what} stated");
        }
    }

    #[test]
    fn the_run_reads_target_in_turn_reads_its_row_s_floor_ratio() {
        // The run reads' row carries its comparison with the faster floor unprefixed (no
        // crate comparison): the target is the median of the rounds' ratios, named after
        // the floor it was judged against.
        let what = "1P1C 8 B per-event, fixed-size ring, run reads that gather / bare SPSC ring floor (plain or with pauses), in turn, paired";
        let mut rows = Vec::new();
        for (r, ratio) in [(1, 0.7), (2, 1.1), (3, 1.2)] {
            let mut row = paired_row(r, turn::RING_RUNS_ROW, 300.0);
            row.extra.insert("kept".into(), 50.0);
            row.extra.insert("ratio".into(), ratio);
            rows.push(row);
        }
        let targets = evaluate(&rows);
        let t = target(&targets, what);
        assert!((t.ratio - 1.1).abs() < 1e-9, "{t:?}");
        assert!(t.decided && t.met, "{t:?}");
        assert!(t.from.contains(turn::FLOOR_EITHER), "{t:?}");
    }

    #[test]
    fn steady_rounds_all_in_the_slow_placement_decide_no_paired_throughput_target() {
        // A run of 2026-12-01: round 1 ran fast until its last floor row, which fell into
        // the slow placement (unsteady), and rounds 2-5 ran wholly in the slow placement,
        // each steady within itself. Their ratio (about 1.3x the floor, where the fast
        // placement gives about 0.6x) measures the slow placement, not this ring: the rows
        // measured fast in round 1 say so, unsteady as that round is.
        let mut rows = Vec::new();
        for (r, shm, floor, again) in [
            (1, 464.0, 615.0, 99.0),
            (2, 73.0, 55.0, 49.0),
            (3, 71.0, 53.0, 55.0),
            (4, 69.0, 53.0, 64.0),
            (5, 69.0, 51.0, 56.0),
        ] {
            rows.extend(
                [
                    (paired::shm_row(1), shm),
                    (paired::FLOOR_ROW.to_owned(), floor),
                    (paired::FLOOR_AGAIN_ROW.to_owned(), again),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        let r = paired::ratios(&rows, &paired::shm_row(1), paired::FLOOR_ROW);
        // Rounds 2, 3 and 5 are left out as beaten (the per-event row outran the faster of
        // their floor rows by more than 1.2x); round 4 (69 against 53 and 64) is not, and
        // only the rows' fastest round, the unsteady round 1, shows it ran slow.
        assert_eq!((r.values.len(), r.unsteady, r.beaten, r.slow), (0, 1, 3, 1));
        // No round counts: the target is undecided, and says why.
        let targets = evaluate(&rows);
        let t = target(
            &targets,
            "1P1C 8 B per-event throughput (best 100 ms) / bare SPSC ring floor (plain or with pauses), paired",
        );
        assert!(!t.decided && !t.met && t.ratio.is_nan(), "{t:?}");
        assert!(
            t.from.contains(
                "median of 0 rounds (more left out: 1 with the floor moved beyond 1.25x within \
                 them; 3 with a per-event row above 1.2x the floor ring (the floor not at its \
                 best); 1 with a row below 1/3"
            ),
            "{}",
            t.from
        );
        let shown = table(&targets);
        assert!(shown.contains("| - | >= 0.80x | undecided"), "{shown}");
        assert!(
            serde_json::to_string(t).unwrap().contains("\"ratio\":null"),
            "a NaN ratio is null in the JSON"
        );
    }

    #[test]
    fn a_run_wholly_in_the_slow_placement_decides_no_paired_throughput_target() {
        // A run of 2026-12-01 (23:43 UTC) that never left the slow placement: no row ran in
        // the fast one in any round, so the slow-placement rule (each row against its own
        // fastest round) saw nothing, three rounds were steady, and the fixed-size
        // per-event row was printed at 1.74x the floor, "met". There, the per-event rows
        // outran the floor ring itself (81-84 M/s against 39-61): a round in which a
        // per-event row beats the bare ring of the same events measured the guest, not
        // the rings.
        let mut rows = Vec::new();
        for (r, fixed, stamped, floor, again, disruptor) in [
            (1, 82.7, 47.8, 39.0, 46.3, 24.4),
            (2, 83.6, 65.9, 48.0, 59.2, 23.9),
            (3, 82.2, 66.5, 48.0, 42.4, 24.1),
            (4, 84.2, 54.4, 44.3, 55.9, 24.9),
            (5, 80.8, 64.3, 60.9, 48.1, 23.9),
        ] {
            rows.extend(
                [
                    (paired::gathering_row(throughput::FIXED_ONE_ROW), fixed),
                    (paired::shm_row(1), stamped),
                    (paired::FLOOR_ROW.to_owned(), floor),
                    (paired::FLOOR_AGAIN_ROW.to_owned(), again),
                    (paired::DISRUPTOR_ROW.to_owned(), disruptor),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        let fixed = paired::gathering_row(throughput::FIXED_ONE_ROW);
        let r = paired::ratios(&rows, &fixed, paired::FLOOR_EITHER);
        assert_eq!(
            (r.values.len(), r.unsteady, r.beaten, r.slow),
            (0, 2, 3, 0),
            "{r:?}"
        );
        let targets = evaluate(&rows);
        for what in [
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers (best 100 ms) / bare SPSC ring floor (plain or with pauses), paired",
            "1P1C 8 B per-event, fixed-size ring, a reader that gathers (best 100 ms) / disruptor crate (in-process), paired",
            PER_EVENT_CRATE,
        ] {
            let t = target(&targets, what);
            assert!(!t.decided && !t.met, "{t:?}");
            assert!(
                t.from.contains(
                    "3 with a per-event row above 1.2x the floor ring (the floor not at its best)"
                ),
                "{}",
                t.from
            );
        }
    }

    #[test]
    fn a_round_whose_floor_moved_decides_no_paired_throughput_target() {
        let mut rows = Vec::new();
        // Round 2 changed placement between its two floor rows (100 then 500): its ratio
        // (2.5) is left out; rounds 1 and 3 give 1.0 and 2.0.
        for (r, shm, disruptor, floor, again) in [
            (1, 100.0, 100.0, 500.0, 450.0),
            (2, 250.0, 100.0, 100.0, 500.0),
            (3, 200.0, 100.0, 500.0, 600.0),
        ] {
            rows.extend(
                [
                    (paired::shm_row(1), shm),
                    (paired::DISRUPTOR_ROW.to_owned(), disruptor),
                    (paired::FLOOR_ROW.to_owned(), floor),
                    (paired::FLOOR_AGAIN_ROW.to_owned(), again),
                ]
                .map(|(name, ops)| paired_row(r, &name, ops)),
            );
        }
        assert_eq!(
            paired::ratios(&rows, &paired::shm_row(1), paired::DISRUPTOR_ROW).unsteady,
            1
        );
        let targets = evaluate(&rows);
        let t = target(&targets, PER_EVENT_CRATE);
        assert_eq!(t.ratio, 1.5, "the median of 1.0 and 2.0");
        assert!(
            t.from
                .contains("median of 2 rounds (more left out: 1 with the floor moved"),
            "{}",
            t.from
        );
    }

    #[test]
    fn the_floor_drift_divides_the_second_floor_row_by_the_first() {
        let floor_row = |name: &str, ops: f64| {
            let mut row = Row::new(throughput::SUITE, throughput::FLOOR, name, Kind::Throughput);
            row.best_ops_per_sec = Some(ops);
            row
        };
        let mut rows = vec![floor_row(throughput::FLOOR_ROW, 50e6)];
        assert_eq!(floor_drift(&rows), None, "no second row, no drift");
        rows.push(floor_row(throughput::FLOOR_AGAIN_ROW, 600e6));
        assert_eq!(floor_drift(&rows), Some(12.0));
        assert!(absolute_goals(&rows).contains("12.00x the first floor row"));
        // A failed second row says nothing.
        rows[1].error = Some("spawn failed".into());
        assert_eq!(floor_drift(&rows), None);
    }

    #[test]
    fn a_paired_latency_target_divides_by_the_floor_of_its_own_round() {
        let mut rows = Vec::new();
        // Round 2 ran in the guest's slow placement. Paired with any other round's floor
        // (the first one found, or the slow one), the ratios' median moves off 1.3.
        for (r, busy, spin) in [(1, 130, 100), (2, 400, 250), (3, 90, 50)] {
            for (name, p50) in [(paired::BUSY_PINGPONG, busy), (floor::SPIN_PINGPONG, spin)] {
                rows.push(paired_latency_row(r, name, p50));
            }
        }
        // A floor row of the throughput rounds' group is not the latency rounds' floor.
        let mut stray = Row::new(
            paired::SUITE,
            &paired::round(4),
            floor::SPIN_PINGPONG,
            Kind::Latency,
        );
        stray.p50_ns = Some(1);
        rows.push(stray);
        let targets = evaluate(&rows);
        let t = targets
            .iter()
            .find(|t| t.what.starts_with("busy-spin, ping-pong p50"))
            .expect("the paired ping-pong latency target");
        // Ratios 1.3, 1.6, 1.8: the median 1.6 misses the bar (<= 1.3). Against round 1's
        // floor they would be 1.3, 4.0, 0.9 (median 1.3, met); against round 2's, 0.52, 1.6,
        // 0.36 (median 0.52); against round 3's, 2.6, 8.0, 1.8 (median 2.6).
        assert_eq!(t.ratio, 1.6);
        assert_eq!(t.cmp, "<=");
        assert!(!t.met);
        assert!(
            t.from.contains("median of 3 rounds, range 1.30-1.80x"),
            "{}",
            t.from
        );
        // No paced rows were measured: no paced target.
        assert!(!targets.iter().any(|t| t.what.contains("paced 100 µs p50")));
    }

    /// The tail has a target per round too: the busy-spin p99.9 over its round's floor
    /// p99.9, the median of the rounds at most 3x, beside the p50's.
    #[test]
    fn a_paired_tail_target_divides_the_p999_by_the_floor_of_its_own_round() {
        let mut rows = Vec::new();
        // (round, busy-spin p50 and p99.9, floor p50 and p99.9): the p99.9 ratios 2.0, 5.0
        // and 4.0 (median 4.0, missed), the p50 ones 1.1, 1.2, 1.0 (median 1.1, met).
        for (r, busy, spin) in [
            (1, (110, 400), (100, 200)),
            (2, (120, 5000), (100, 1000)),
            (3, (100, 2000), (100, 500)),
        ] {
            for (name, (p50, p999)) in [(paired::BUSY_PACED, busy), (floor::SPIN_PACED, spin)] {
                let mut row = paired_latency_row(r, name, p50);
                row.p999_ns = Some(p999);
                rows.push(row);
            }
        }
        let targets = evaluate(&rows);
        let find = |what: String| {
            targets
                .iter()
                .find(|t| t.what == what)
                .unwrap_or_else(|| panic!("no target {what}"))
        };
        let tail = find(format!(
            "{} p99.9 / {} floor p99.9, paired",
            paired::BUSY_PACED,
            floor::SPIN_PACED
        ));
        assert_eq!(
            (tail.ratio, tail.cmp, tail.bar, tail.met),
            (4.0, "<=", 3.0, false)
        );
        assert!(
            tail.from.contains("median of 3 rounds, range 2.00-5.00x"),
            "{}",
            tail.from
        );
        let p50 = find(format!(
            "{} p50 / {} floor p50, paired",
            paired::BUSY_PACED,
            floor::SPIN_PACED
        ));
        assert_eq!((p50.ratio, p50.met), (1.1, true));
        // No ping-pong rows were measured: no ping-pong tail target.
        assert!(!targets
            .iter()
            .any(|t| t.what.starts_with("busy-spin, ping-pong p99.9")));
    }

    /// The busy-spin row in turn is judged against the bare ring of lines of its own round
    /// too, beside the floor of its own round; a run without the bare ring states no such
    /// target.
    #[test]
    fn the_in_turn_latency_target_against_the_bare_ring_divides_by_its_own_round() {
        let mut rows = Vec::new();
        // (round, busy-spin, floor, bare ring): the bare ring slower than the floor in
        // round 1, faster in round 2, slower than shmring's ring in round 3.
        for (r, busy, spin, bare) in [(1, 150, 100, 125), (2, 300, 250, 200), (3, 90, 50, 100)] {
            for (name, p50) in [
                (paired::BUSY_PACED_INTERLEAVED, busy),
                (paired::SPIN_PACED_INTERLEAVED, spin),
                (paired::BARE_PACED_INTERLEAVED, bare),
            ] {
                rows.push(paired_latency_row(r, name, p50));
            }
        }
        let find = |targets: &[Target], denominator: &str| {
            targets
                .iter()
                .find(|t| {
                    t.what
                        == format!(
                            "{} p50 / {denominator} p50, paired",
                            paired::BUSY_PACED_INTERLEAVED
                        )
                })
                .cloned()
        };
        let targets = evaluate(&rows);
        let bare = find(&targets, paired::BARE_PACED_INTERLEAVED).expect("the bare-ring target");
        // Ratios 1.2, 1.5, 0.9: median 1.2, met. Against the floor: 1.5, 1.2, 1.8, median
        // 1.5, missed.
        assert_eq!(bare.ratio, 1.2);
        assert!(bare.met);
        assert!(
            bare.from.contains("median of 3 rounds, range 0.90-1.50x"),
            "{}",
            bare.from
        );
        let floor = find(
            &targets,
            &format!("{} floor", paired::SPIN_PACED_INTERLEAVED),
        )
        .expect("the floor target");
        assert_eq!(floor.ratio, 1.5);
        assert!(!floor.met);
        // Without the bare ring's rows, no target against it.
        rows.retain(|r| r.name != paired::BARE_PACED_INTERLEAVED);
        assert!(find(&evaluate(&rows), paired::BARE_PACED_INTERLEAVED).is_none());
    }
}
