//! Suite `throughput`: events *delivered* per second (the time runs from the
//! producer's first publish to the consumer's return after the last event, and every row
//! says how many were published and how many arrived).
//!
//! The floor (a bare SPSC ring) and four slot format probes (that ring with shmring's
//! claim and stamps, in shmring's 64-byte slots and in a dense format; with packed
//! lengths and payloads under a published head, no stamps; and with fixed-size events, a
//! single producer's claim and checks around its own slots and head), then
//! 1P1C per-event and batched (10, 100) for 8, 64, 256 and 1024-byte events, with a
//! busy-spin consumer; 1P1C per-event on a multi-producer ring (the `fetch_add` claim, same
//! consumer); 1P1C on a ring of fixed-size 8-byte events (per event, batch-100, with a
//! handler call per event or run reads; per event also through a `Publisher`); then 2P1C,
//! 3P1C and 1P3C fan-out. On 2 cores the multi-process rows
//! run 3-4 processes on 2 CPUs: their consumers use the default Adaptive strategy (a
//! spinning consumer there would fight the producers for a CPU), and the numbers are what
//! time-sharing gives, not what the ring could do with a core each. Last, the floor ring
//! again: its ratio to the first floor row is how much the same ring moves within the run.

use anyhow::{anyhow, Result};
use shmring::ProducerMode;

use shmring_peers::kit;

use crate::row::{Kind, Row};
use crate::run::Ctx;
use crate::shm::{self, kv, Setup};
use crate::spsc::Format;

pub const SUITE: &str = "throughput";
pub const ONE: &str = "1P1C, busy-spin consumer, delivered events/s";
pub const MULTI: &str = "multi-producer and fan-out (8-byte events, Adaptive consumers)";
pub const FLOOR: &str = "floor: a bare SPSC ring of 8-byte events, cached indices (crate::spsc)";
/// Row name of the 1P1C per-event row on a multi-producer ring.
pub const MP_ONE_ROW: &str = "per-event, 8 B, multi-producer ring";
/// Row name of the 1P1C per-event row on a ring of fixed-size 8-byte events.
pub const FIXED_ONE_ROW: &str = "per-event, 8 B, fixed-size ring";
/// Row name of the 1P1C per-event row on a ring of fixed-size 8-byte events whose producer
/// publishes through a `Publisher` (`Producer::publisher`: its position in a register).
pub const FIXED_PUBLISHER_ROW: &str = "per-event, 8 B, fixed-size ring, Publisher";
/// Row name of the 1P1C batch-100 row on a ring of fixed-size 8-byte events.
pub const FIXED_BATCH_ROW: &str = "batch 100, 8 B, fixed-size ring";
/// Row name of the 1P1C per-event row on a ring of fixed-size 8-byte events whose consumer
/// takes the events a run at a time (`Consumer::poll_runs`), as the floor ring's does.
pub const FIXED_RUNS_ONE_ROW: &str = "per-event, 8 B, fixed-size ring, run reads";
/// Row name of the batch-100 row on that ring, run reads.
pub const FIXED_RUNS_BATCH_ROW: &str = "batch 100, 8 B, fixed-size ring, run reads";
/// Row name of the 1P1C per-event row of 8-byte events on a ring of sized events of up to
/// 8 bytes (`RingConfig::max_event_size`: a length word and the event in each 16-byte slot).
pub const SIZED_ONE_ROW: &str = "per-event, 8 B, ring of sized events";
/// Row name of the batch-100 row on that ring.
pub const SIZED_BATCH_ROW: &str = "batch 100, 8 B, ring of sized events";
/// Row name of the 1P1C per-event row of 64-byte events on a ring of sized events of up to
/// 64 bytes: each event's length word stored apart from it and its bytes copied (the write
/// of any length but 8), beside the stamped row "per-event, 64 B".
pub const SIZED_64_ROW: &str = "per-event, 64 B, ring of sized events";
/// Row name of the floor row.
pub const FLOOR_ROW: &str = "bare SPSC ring, per-event, 8 B";
/// The slot format probes: the floor ring running shmring's claim and stamp protocol and
/// nothing else of shmring (see `crate::spsc`).
pub const PROBE: &str =
    "slot format probes: the floor ring with shmring's claim and stamps, or lengths and no stamps";
/// Row name of the probe with shmring's format, a 64-byte slot per event.
pub const PROBE_SLOT64: &str = "stamped, 64-byte slot per event, per-event, 8 B";
/// Row name of the probe with 16-byte headers apart from packed payloads.
pub const PROBE_DENSE: &str = "stamped, 16-byte headers + packed payloads, per-event, 8 B";
/// Row name of the probe without stamps: packed lengths and payloads under a published head.
pub const PROBE_CURSOR: &str = "no stamps, packed lengths + payloads, published head, 8 B";
/// Row name of the probe of fixed-size events: the floor's slots and published head with a
/// single producer's claim, lifecycle look and wake check around each event.
pub const PROBE_FIXED: &str = "fixed 8 B events: claim + payload + published head, no stamps";
/// Row name of the floor measured again after every other row of the suite: how far the
/// same ring moves within one run (its ratio to the floor row is the run's own noise).
pub const FLOOR_AGAIN_ROW: &str = "bare SPSC ring again, after every other row (the run's noise)";

/// Event sizes.
pub const SIZES: [usize; 4] = [8, 64, 256, 1024];
/// Publish forms: per event, or batches of 10 and 100.
pub const FORMS: [usize; 3] = [1, 10, 100];

/// Row name of a 1P1C row.
pub fn name(batch: usize, size: usize) -> String {
    if batch == 1 {
        format!("per-event, {size} B")
    } else {
        format!("batch {batch}, {size} B")
    }
}

/// Rows this suite adds.
pub fn rows() -> u64 {
    (SIZES.len() * FORMS.len()) as u64 + 18
}

/// Measure.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    for (format, group, name) in [
        (Format::Bare, FLOOR, FLOOR_ROW),
        (Format::Slot64, PROBE, PROBE_SLOT64),
        (Format::Dense, PROBE, PROBE_DENSE),
        (Format::Cursor, PROBE, PROBE_CURSOR),
        (Format::Fixed, PROBE, PROBE_FIXED),
    ] {
        ctx.bar.set_message(format!("throughput: {name}"));
        let row = floor(ctx, format, 0, 1, group, name);
        ctx.push(row);
    }
    for batch in FORMS {
        for size in SIZES {
            let n = name(batch, size);
            ctx.bar.set_message(format!("throughput: {n}"));
            let row = one(ctx, batch, size, 1, 1, &n, ONE);
            ctx.push(row);
        }
    }
    ctx.bar.set_message(format!("throughput: {MP_ONE_ROW}"));
    let row = one_in(ctx, 1, 8, 1, 1, ProducerMode::Multi, MP_ONE_ROW, ONE);
    ctx.push(row);
    for (batch, runs) in [(1, false), (100, false), (1, true), (100, true)] {
        ctx.bar
            .set_message(format!("throughput: {}", fixed_name(batch, runs)));
        let row = fixed_row(ctx, batch, runs, 0, ONE);
        ctx.push(row);
    }
    ctx.bar
        .set_message(format!("throughput: {FIXED_PUBLISHER_ROW}"));
    let row = fixed_publisher_row(ctx, 0, ONE);
    ctx.push(row);
    for batch in [1, 100] {
        let row = sized_row(ctx, batch, 0, ONE);
        ctx.push(row);
    }
    ctx.bar.set_message(format!("throughput: {SIZED_64_ROW}"));
    let row = sized_row_of(ctx, 1, 64, 0, SIZED_64_ROW, ONE);
    ctx.push(row);
    for (p, c, n) in [
        (2, 1, "2P1C per-event"),
        (3, 1, "3P1C per-event"),
        (1, 3, "1P3C fan-out per-event"),
    ] {
        ctx.bar.set_message(format!("throughput: {n}"));
        let row = one(ctx, 1, 8, p, c, n, MULTI);
        ctx.push(row);
    }
    ctx.bar
        .set_message(format!("throughput: {FLOOR_AGAIN_ROW}"));
    let row = floor(ctx, Format::Bare, 0, 1, FLOOR, FLOOR_AGAIN_ROW);
    ctx.push(row);
    Ok(())
}

/// The floor ring's row, for another suite (`paired`).
pub fn floor_row(ctx: &mut Ctx, format: Format, group: &str, name: &str) -> Row {
    floor(ctx, format, 0, 1, group, name)
}

/// The floor ring's row with its reader pausing `turn::FLOOR_GATHER` spins after each run
/// (as the floor chunk of the same name in turn), for another suite (`paired`).
pub fn floor_gather_row(ctx: &mut Ctx, group: &str, name: &str) -> Row {
    floor(ctx, Format::Bare, crate::turn::FLOOR_GATHER, 1, group, name)
}

/// A 1P1C row with 8-byte events and a busy-spin consumer, `batch` events per publish
/// (1: per event), for another suite (`paired`).
pub fn one_row(ctx: &mut Ctx, batch: usize, name: &str, group: &str) -> Row {
    one(ctx, batch, 8, 1, 1, name, group)
}

/// Row name of a 1P1C row on a ring of fixed-size 8-byte events: per event (`batch` 1) or
/// batches of 100, its consumer taking one event per handler call or runs (`runs`).
pub fn fixed_name(batch: usize, runs: bool) -> &'static str {
    match (batch == 1, runs) {
        (true, false) => FIXED_ONE_ROW,
        (false, false) => FIXED_BATCH_ROW,
        (true, true) => FIXED_RUNS_ONE_ROW,
        (false, true) => FIXED_RUNS_BATCH_ROW,
    }
}

/// Row name of row `name` whose consumer is attached with `ConsumerOptions::gather` (as
/// `paired` measures the rows on fixed-size and sized rings): named apart, so that its
/// figures are not read as those of the row without pauses.
pub fn gathering(name: &str) -> String {
    format!("{name}, a reader that gathers")
}

/// The name of row `name` read with `gather` spins ([`gathering`] unless 0).
fn named(name: &str, gather: u32) -> String {
    if gather == 0 {
        name.to_owned()
    } else {
        gathering(name)
    }
}

/// A 1P1C row on a ring of fixed-size 8-byte events with a busy-spin consumer, `batch`
/// events per publish, its consumer reading with `Consumer::poll_runs` if `runs` and
/// attached with `gather(gather)` (also for `paired`).
pub fn fixed_row(ctx: &mut Ctx, batch: usize, runs: bool, gather: u32, group: &str) -> Row {
    let reads = if runs { "runs" } else { "count" };
    one_ring(
        ctx,
        batch,
        8,
        (1, 1),
        (ProducerMode::Single, Some(8), None),
        (reads, false, gather),
        &named(fixed_name(batch, runs), gather),
        group,
    )
}

/// A 1P1C row of 8-byte events on a ring of sized events of up to 8 bytes with a busy-spin
/// consumer attached with `gather(gather)`, `batch` events per publish (also for `paired`).
pub fn sized_row(ctx: &mut Ctx, batch: usize, gather: u32, group: &str) -> Row {
    let name = if batch == 1 {
        SIZED_ONE_ROW
    } else {
        SIZED_BATCH_ROW
    };
    sized_row_of(ctx, batch, 8, gather, &named(name, gather), group)
}

/// A 1P1C row of `size`-byte events on a ring of sized events of up to `size` bytes with a
/// busy-spin consumer, `batch` events per publish.
fn sized_row_of(
    ctx: &mut Ctx,
    batch: usize,
    size: usize,
    gather: u32,
    name: &str,
    group: &str,
) -> Row {
    one_ring(
        ctx,
        batch,
        size,
        (1, 1),
        (ProducerMode::Single, None, Some(size as u32)),
        ("count", false, gather),
        name,
        group,
    )
}

/// The 1P1C per-event row on a ring of fixed-size 8-byte events (busy-spin consumer, one
/// event per handler call, attached with `gather(gather)`), its producer publishing
/// through a `Publisher` (also for `paired`).
pub fn fixed_publisher_row(ctx: &mut Ctx, gather: u32, group: &str) -> Row {
    one_ring(
        ctx,
        1,
        8,
        (1, 1),
        (ProducerMode::Single, Some(8), None),
        ("count", true, gather),
        &named(FIXED_PUBLISHER_ROW, gather),
        group,
    )
}

/// The bare floor ring publishing [`FLOOR_BATCH`] events at a time (their slots, then its
/// head once), its reader pausing `gather` spins after each run (0: none; 16 as the
/// consumers of the batch-100 rows on fixed-size and sized rings, `gather(16)`), for
/// another suite (`paired`, which takes the faster of the two readers): the floor of a
/// batch-100 row. (Its best window ran at 390-407 M events/s read with 64 spins after each
/// run, as the per-event floor with pauses, at 423-444 with 16 and at 385-444 with none:
/// four `paired --quick` runs, 2026-12-06, the five rounds of each.)
pub fn floor_batch_row(ctx: &mut Ctx, gather: u32, group: &str, name: &str) -> Row {
    floor(ctx, Format::Bare, gather, FLOOR_BATCH, group, name)
}

/// The floor ring in the slots of a ring of sized events of up to 8 bytes (a length word
/// and the event in 16 bytes, published by its head per event, `Format::Sized`), its
/// reader pausing `gather` spins after each run (0 or `turn::FLOOR_GATHER`, as the floor
/// ring's two readers), for another suite (`paired`, which takes the faster of the two):
/// the floor of that ring's per-event row, where the floor ring of 8-byte slots puts twice
/// as many events in a line.
pub fn floor_sized_row(ctx: &mut Ctx, gather: u32, group: &str, name: &str) -> Row {
    floor(ctx, Format::Sized, gather, 1, group, name)
}

/// The events the batched floor ring publishes with one store of its head: the batch of
/// shmring's batch-100 rows.
pub const FLOOR_BATCH: u64 = 100;

/// The floor row (the bare SPSC ring) or a slot format probe (the same ring with shmring's
/// stamps), with the same duration and pinning as the 1P1C rows; the bare ring's producer
/// publishes `batch` events per store of its head.
fn floor(ctx: &mut Ctx, format: Format, gather: u32, batch: u64, group: &str, name: &str) -> Row {
    let row = Row::new(SUITE, group, name, Kind::Throughput);
    let dur = ctx.sizes.throughput;
    let measured = (|| -> Result<Row> {
        let (mut roles, _ctl, ctl_path) = ctx.roles("spsc")?;
        let data = ctl_path.with_extension("spsc");
        crate::spsc::create(&data)?;
        let common = |cpu: usize| {
            let mut a = crate::spsc::args(&data, format);
            a.extend([
                kv("ctl", ctl_path.display()),
                kv("duration_ns", dur.as_nanos()),
                kv("best_window_ns", kit::best_window(dur)),
            ]);
            a.extend(ctx.cpu(cpu));
            a
        };
        let mut consumer = common(1);
        consumer.push(kv("gather", gather));
        let mut producer = common(0);
        producer.push(kv("batch", batch));
        roles.spawn("spsc-consumer", &consumer)?;
        roles.spawn("spsc-producer", &producer)?;
        let parts = roles.finish(dur * 20 + std::time::Duration::from_secs(30))?;
        let _ = std::fs::remove_file(&data);
        let _ = std::fs::remove_file(&ctl_path);
        let [consumer, producer] = parts.as_slice() else {
            return Err(anyhow!("expected two parts, got {}", parts.len()));
        };
        let (t_start, t_end) = (producer.need("t_start")?, consumer.need("t_end")?);
        if t_end <= t_start {
            return Err(anyhow!("no delivery window"));
        }
        let secs = (t_end - t_start) / 1e9;
        let delivered = consumer.need("delivered")?;
        let published = producer.need("published")?;
        let mut r = Row::new(SUITE, group, name, Kind::Throughput);
        r.ops_per_sec = Some(delivered / secs);
        r.best_ops_per_sec = consumer.get("best_ops_per_sec");
        r.published = Some(published as u64);
        r.delivered = Some(delivered as u64);
        r.dropped = Some((published - delivered).max(0.0) as u64);
        r.samples = delivered as u64;
        r.consumer_cpu = consumer.get("cpu_share");
        r.producer_cpu = producer.get("cpu_share");
        r.extra.insert("window_s".into(), secs);
        r.extra.insert("event_bytes".into(), 8.0);
        Ok(r)
    })();
    measured.unwrap_or_else(|e| row.failed(&e))
}

/// A row on a ring whose producer mode follows the producer count.
fn one(
    ctx: &mut Ctx,
    batch: usize,
    size: usize,
    producers: usize,
    consumers: usize,
    name: &str,
    group: &str,
) -> Row {
    let mode = if producers > 1 {
        ProducerMode::Multi
    } else {
        ProducerMode::Single
    };
    one_in(ctx, batch, size, producers, consumers, mode, name, group)
}

#[allow(clippy::too_many_arguments)]
fn one_in(
    ctx: &mut Ctx,
    batch: usize,
    size: usize,
    producers: usize,
    consumers: usize,
    mode: ProducerMode,
    name: &str,
    group: &str,
) -> Row {
    one_ring(
        ctx,
        batch,
        size,
        (producers, consumers),
        (mode, None, None),
        ("count", false, 0),
        name,
        group,
    )
}

#[allow(clippy::too_many_arguments)]
/// A row of `producers` and `consumers` processes on a ring of mode `mode` (of fixed-size
/// events if `event_size` is set, of sized events if `max_event_size` is), its consumers in
/// mode `reads` (`count`, or `runs`) and attached with `gather(gather)`, its producers
/// publishing per event through a `Publisher` if `publisher`.
fn one_ring(
    ctx: &mut Ctx,
    batch: usize,
    size: usize,
    (producers, consumers): (usize, usize),
    (mode, event_size, max_event_size): (ProducerMode, Option<u32>, Option<u32>),
    (reads, publisher, gather): (&str, bool, u32),
    name: &str,
    group: &str,
) -> Row {
    let slot = (16 + size).div_ceil(64) as u32 * 64;
    let wait = if producers + consumers > 2 {
        "adaptive"
    } else {
        "busy-spin"
    };
    let dur = ctx.sizes.throughput;
    let producer = |_: usize| {
        let mut a = vec![kv("size", size), kv("duration_ns", dur.as_nanos())];
        if batch == 1 {
            a.push(kv("mode", "stream"));
            if publisher {
                a.push(kv("publisher", 1));
            }
        } else {
            a.extend([kv("mode", "batch"), kv("batch", batch)]);
        }
        a
    };
    let setup = Setup {
        capacity: 4096,
        slot,
        mode,
        event_size,
        max_event_size,
        consumers: (0..consumers)
            .map(|_| {
                vec![
                    kv("wait", wait),
                    kv("mode", reads),
                    kv("gather", gather),
                    kv("best_window_ns", kit::best_window(dur)),
                ]
            })
            .collect(),
        producers: (0..producers).map(producer).collect(),
        echo: false,
        timeout: dur * 20 + std::time::Duration::from_secs(30),
    };
    let row = Row::new(SUITE, group, name, Kind::Throughput);
    match shm::run(ctx, "tput", setup).and_then(|p| {
        let published: f64 = p
            .producers
            .iter()
            .map(|m| m.need("published"))
            .sum::<Result<f64>>()?;
        let t_start = p
            .producers
            .iter()
            .filter_map(|m| m.get("t_start"))
            .fold(f64::MAX, f64::min);
        let t_end = p
            .consumers
            .iter()
            .filter_map(|m| m.get("t_end"))
            .fold(0.0, f64::max);
        // Every consumer gets every event: "delivered" is what the slowest one got.
        let delivered = p
            .consumers
            .iter()
            .map(|m| m.need("delivered"))
            .collect::<Result<Vec<f64>>>()?
            .into_iter()
            .fold(f64::MAX, f64::min);
        let deliveries: f64 = p.consumers.iter().filter_map(|m| m.get("delivered")).sum();
        if t_end <= t_start {
            return Err(anyhow!("no delivery window"));
        }
        let secs = (t_end - t_start) / 1e9;
        let mut r = Row::new(SUITE, group, name, Kind::Throughput);
        r.ops_per_sec = Some(delivered / secs);
        r.best_ops_per_sec = p
            .consumers
            .iter()
            .map(|m| m.get("best_ops_per_sec"))
            .collect::<Option<Vec<f64>>>()
            .map(|v| v.into_iter().fold(f64::MAX, f64::min));
        r.published = Some(published as u64);
        r.delivered = Some(delivered as u64);
        r.dropped = Some((published - delivered).max(0.0) as u64);
        r.samples = delivered as u64;
        r.consumer_cpu = p.consumers[0].get("cpu_share");
        r.producer_cpu = p.producers[0].get("cpu_share");
        r.extra.insert("window_s".into(), secs);
        r.extra
            .insert("deliveries_per_sec".into(), deliveries / secs);
        r.extra.insert(
            "producer_parks".into(),
            p.producers.iter().filter_map(|m| m.get("parks")).sum(),
        );
        // How often the ring was full when a producer claimed (waits, one per waiting
        // publish or batch): a row whose producers wait for room runs at its consumer's pace.
        r.extra.insert(
            "producer_room_waits".into(),
            p.producers.iter().filter_map(|m| m.get("room_waits")).sum(),
        );
        // How often a multi-producer slot still waited for its previous lap (a claim no
        // consumer gated, whose producer had not written it yet).
        r.extra.insert(
            "producer_lap_waits".into(),
            p.producers.iter().filter_map(|m| m.get("lap_waits")).sum(),
        );
        // How many multi-producer publishes took their slot with a CAS: neither the
        // producer's own run of claims nor a required consumer's reads vouched for its
        // previous lap.
        r.extra.insert(
            "producer_slot_takes".into(),
            p.producers.iter().filter_map(|m| m.get("slot_takes")).sum(),
        );
        r.extra.insert("event_bytes".into(), size as f64);
        r.extra.insert("batch".into(), batch as f64);
        // The consumer's mean run: events per poll that delivered any (1 when it keeps up
        // event by event, larger when it falls behind and catches up in runs).
        if let Some(b) = p.consumers[0].get("batches").filter(|&b| b > 0.0) {
            r.extra.insert(
                "events_per_batch".into(),
                p.consumers[0].need("delivered")? / b,
            );
        }
        Ok(r)
    }) {
        Ok(r) => r,
        Err(e) => row.failed(&e),
    }
}
