//! The role processes of the shmring rows and of the floor. The harness starts each as
//! `ipc-bench __role <name> k=v ...`; every role waits at the control page's barrier,
//! measures, and writes its result file.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use hdrhistogram::Histogram;
use shmring::{
    AttachError, ConsumerOptions, Event, Producer, Ring, RunExit, WaitOutcome, WaitStrategy,
    WakeSet,
};
use shmring_peers::kit::{self, new_hist, now_ns, Args, Measured, Pacer};

/// Every wait strategy the latency suite measures, by name.
pub const STRATEGIES: [&str; 7] = [
    "busy-spin",
    "yielding",
    "sleeping",
    "phased-backoff",
    "blocking",
    "timeout-blocking",
    "adaptive",
];

/// A strategy by name (`WaitStrategy`'s `FromStr`), with the parameters the tables use.
pub fn strategy(name: &str) -> Result<WaitStrategy> {
    Ok(match name.parse::<WaitStrategy>()? {
        WaitStrategy::PhasedBackoff { fallback, .. } => WaitStrategy::PhasedBackoff {
            spins: 1_000,
            yields: 100,
            fallback,
        },
        WaitStrategy::TimeoutBlocking { .. } => WaitStrategy::TimeoutBlocking {
            timeout: Duration::from_millis(10),
        },
        s => s,
    })
}

/// Whether a strategy's consumer sleeps in the kernel when idle (it is then compared with
/// the futex floor; the others with the spin floor).
pub fn parks(name: &str) -> bool {
    strategy(name).map(|s| s.parks()).unwrap_or(false)
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    b.get(i * 8..i * 8 + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_ne_bytes)
}

pub(crate) fn cpu_share(c0: u64, w0: u64) -> f64 {
    (kit::thread_cpu_ns() - c0) as f64 / (now_ns() - w0).max(1) as f64
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ConsumerMode {
    /// Record send-to-handler latency.
    Latency,
    /// Record, and publish an echo on the echo ring.
    Echo,
    /// Count (throughput).
    Count,
    /// Count, taking a fixed-size ring's events a run at a time (`Consumer::poll_runs`).
    Runs,
    /// Count chunks over the ring and over the floor ring in turn (`turn`).
    Turn,
}

/// A latency consumer's handler work on an event `b` (its number, then its send time):
/// record the one-way latency once past the warm-up, and start the CPU window (thread CPU,
/// wall clock) at the first recorded event. Returns the event's number.
#[inline(always)]
fn record_latency(
    b: &[u8],
    warmup: u64,
    hist: &mut Histogram<u64>,
    window: &mut (u64, u64),
) -> u64 {
    let now = now_ns();
    let seq = u64_at(b, 0);
    if seq >= warmup {
        hist.saturating_record(now.saturating_sub(u64_at(b, 1)));
    }
    if seq == warmup {
        *window = (kit::thread_cpu_ns(), now_ns());
    }
    seq
}

/// The consumer of `shm_consumer`: anonymous, or durable under `name`; reading after the
/// consumer named `after` if given. The upstream is another process of the same case,
/// which may attach later: an attach refused for an upstream not there yet is tried again
/// for up to 10 s.
fn attach_consumer(ring: &Ring, args: &Args, wait: WaitStrategy) -> Result<shmring::Consumer> {
    let opts = match args.str_or("name", "") {
        "" => ConsumerOptions::anonymous(),
        name => ConsumerOptions::durable(name),
    }
    .wait(wait)
    .gather(args.num_or("gather", 0u32));
    let opts = match args.str_or("after", "") {
        "" => opts,
        upstream => opts.after([upstream]),
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match ring.consumer(opts.clone()) {
            Err(AttachError::UnknownUpstream { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            r => return Ok(r?),
        }
    }
}

fn shm_consumer(args: &Args) -> Result<()> {
    args.pin();
    if args.str_or("fence", "default") == "seqcst" {
        forbid_membarrier()?;
    }
    let ctl = args.ctl()?;
    let ns = args.str("ns")?;
    let ring = Ring::open(ns, args.str("ring")?)?;
    let wait = strategy(args.str("wait")?)?;
    let mut c = attach_consumer(&ring, args, wait)?;
    let mode = match args.str("mode")? {
        "latency" => ConsumerMode::Latency,
        "echo" => ConsumerMode::Echo,
        "count" => ConsumerMode::Count,
        "runs" => ConsumerMode::Runs,
        "turn" => ConsumerMode::Turn,
        m => bail!("unknown consumer mode {m}"),
    };
    let mut echo = match mode {
        ConsumerMode::Echo => Some(Ring::open(ns, args.str("echo")?)?.producer()?),
        _ => None,
    };
    let warmup: u64 = args.num_or("warmup", 0);
    // Latency mode: runs of this many events come in turn over the ring, a bare floor line
    // and a bare ring of lines (see `lane`), recorded apart.
    let floor_every: u64 = args.num_or("floor_every", 0);
    let mut hist = new_hist();
    let mut floor_hist = new_hist();
    let mut bare_hist = new_hist();
    let (mut floor_missed, mut bare_missed) = (0u64, 0u64);
    let (mut n, mut sum) = (0u64, 0u64);
    let mut failed = None;
    // Turn mode: the events read over the ring and over the floor ring.
    let mut turn_read = None;
    // CPU over the recorded part only (from the first recorded event; the whole run when
    // counting).
    let mut meter = kit::RateMeter::new();
    // (thread CPU, wall clock) at the start of the measured part.
    let mut window = (kit::thread_cpu_ns(), now_ns());
    ctl.arrive();
    if mode == ConsumerMode::Runs {
        // The floor ring's consumer's work over the slices `poll_runs` hands over: each
        // event added to a sum, the count and the rate meter once per slice, as the floor's
        // reader ticks it once per run. The sum of a slice is a local of its loop (in a
        // register) and goes into the captured total once: a captured count and sum bumped
        // per event made each event's addition wait on the previous one's store, which the
        // floor's reader does not (PERFORMANCE.md, "The readers' rate meters").
        let size = ring.max_payload();
        loop {
            let got = c.poll_runs(|_, events| {
                let run_sum = events
                    .chunks_exact(size)
                    .fold(0u64, |s, e| s.wrapping_add(u64_at(e, 0)));
                n += (events.len() / size) as u64;
                sum = sum.wrapping_add(run_sum);
                meter.tick(n);
            })?;
            if got == 0 && c.wait()? == WaitOutcome::Closed {
                break;
            }
        }
        // The slices' events, as the consumer counted its deliveries.
        checked_count(&c, n)?;
    } else if mode == ConsumerMode::Turn {
        // Chunks in turn, each acknowledged once read (`turn`): the ring per event (twice: by
        // `publish`, then through a `Publisher`), the ring in batches (read the same way, then
        // a run at a time), the ring per event read a run at a time, the floor ring with the
        // claim's accesses (read with `turn::FLOOR_GATHER` spins after each run), the floor
        // ring (read plainly, then with those pauses), and (`crate=1`)
        // asleep while the producer process runs the `disruptor` crate's chunk.
        // The producer's stop after its last pair ends the ring's next chunk.
        let chunk: u64 = args.num("chunk")?;
        ensure!(chunk > 0, "chunk must be positive");
        let krate = args.num_or("crate", 0u8) != 0;
        let mut floor = crate::spsc::BareReceiver::open(std::path::Path::new(args.str("floor")?))?;
        let ack = &ctl.line(crate::turn::ACK_LINE).seq;
        let crate_line = ctl.line(crate::turn::CRATE_LINE);
        let count = std::cell::Cell::new(0u64);
        let (mut chunks, mut crates) = (0u64, 0u64);
        'pairs: loop {
            // The ring per event (published with `publish`, then through a `Publisher`),
            // then in batches (read the same way).
            for _ in 0..3 {
                let end = count.get() + chunk;
                // `Count`'s work per event without its rate meter (the chunks are timed
                // by the producer): the count from the sequence (checked against the
                // consumer's deliveries at the end), the payload word loaded and
                // `black_box`ed, nothing carried from one event to the next in memory, as
                // the floor ring's reader in turn keeps its count and sum in registers. A captured
                // count and sum (`n += 1; sum += payload`) held the batch-100 chunks read
                // this way to the per-event chunks' rate; the per-event chunks ran no faster
                // without it (PERFORMANCE.md, "The claim's accesses in turn").
                let exit = c.run(
                    |ev: Event<'_>| {
                        std::hint::black_box(u64_at(ev.bytes(), 0));
                        count.set(ev.sequence() + 1);
                    },
                    || count.get() >= end,
                )?;
                if exit == RunExit::Closed {
                    break 'pairs;
                }
                chunks += 1;
                // Release: pairs with the producer's Acquire load of the count in its wait;
                // the chunk's reads happen before the next chunk's writes.
                ack.store(chunks, Ordering::Release);
            }
            // The batches again, then the ring per event again, each read a run at a time
            // as the run reads apart (`ConsumerMode::Runs`): a slice's sum in a local, the
            // count once per slice.
            for _ in 0..2 {
                let end = count.get() + chunk;
                let size = ring.max_payload();
                while count.get() < end {
                    let got = c.poll_runs(|_, events| {
                        let run_sum = events
                            .chunks_exact(size)
                            .fold(0u64, |s, e| s.wrapping_add(u64_at(e, 0)));
                        count.set(count.get() + (events.len() / size) as u64);
                        sum = sum.wrapping_add(run_sum);
                    })?;
                    ensure!(
                        got > 0 || c.wait()? != WaitOutcome::Closed,
                        "the ring closed inside a chunk"
                    );
                }
                chunks += 1;
                // Release: as above.
                ack.store(chunks, Ordering::Release);
            }
            // The producer sends a floor chunk whole once it starts it, but it can fail just
            // before (its wait for the previous acknowledgement running out as that arrives,
            // say): it then stops the ring on its way out (`StopOnError`), and that is the
            // only word of it the floor's receiver gets. First the floor with the claim's
            // accesses, read as the floor read with pauses below.
            ensure!(
                floor.recv_gathering(chunk, crate::turn::FLOOR_GATHER, || ring.is_closed()),
                "the ring stopped inside the floor chunk with the claim's accesses"
            );
            chunks += 1;
            // Release: pairs with the same Acquire load, for that chunk.
            ack.store(chunks, Ordering::Release);
            ensure!(
                floor.recv(chunk, || ring.is_closed()),
                "the ring stopped inside a floor chunk"
            );
            chunks += 1;
            // Release: pairs with the same Acquire load, for the floor's chunk.
            ack.store(chunks, Ordering::Release);
            // The floor again, read with a pause after each run as the run reads are.
            ensure!(
                floor.recv_gathering(chunk, crate::turn::FLOOR_GATHER, || ring.is_closed()),
                "the ring stopped inside the second floor chunk (read with pauses)"
            );
            chunks += 1;
            // Release: as above.
            ack.store(chunks, Ordering::Release);
            if krate {
                crates += 1;
                crate_wait(crate_line, crates, || ring.is_closed())?;
                chunks += 1;
                // Release: pairs with the same Acquire load: awake, the next chunk may start.
                ack.store(chunks, Ordering::Release);
            }
        }
        checked_count(&c, count.get())?;
        turn_read = Some((count.get(), floor.received()));
        n = count.get() + floor.received();
    } else if mode == ConsumerMode::Count {
        // In a handler of its own, as a throughput handler would be (the latency handler
        // below, called out of line, cost this row half its rate).
        n = count_events(&mut c, &mut meter)?;
    } else if mode == ConsumerMode::Latency && floor_every > 0 {
        // Runs of `floor_every` events over the ring, the floor line and the bare ring of
        // lines in turn, from the same pinned processes (see `lane`): the ring's latencies
        // in `hist`, the floor's in `floor_hist`, the bare ring's in `bare_hist`.
        let total = warmup + args.num::<u64>("count")?;
        let line = ctl.line(0);
        let mut i = 0u64;
        // Whether the CPU window started: at the first recorded event, whichever lane it
        // goes over.
        let mut started = false;
        let start = |started: &mut bool, window: &mut (u64, u64)| {
            if !*started {
                *window = (kit::thread_cpu_ns(), now_ns());
                *started = true;
            }
        };
        while i < total {
            let end = ((i / floor_every + 1) * floor_every).min(total);
            match lane(floor_every, i) {
                Lane::Floor => {
                    while i < end {
                        let (seen, stamp) = floor_recv(line, i + 1, false);
                        let now = now_ns();
                        if seen > warmup {
                            start(&mut started, &mut window);
                        }
                        if seen > end {
                            // An event of a later floor run: this consumer fell a whole
                            // cycle of runs behind. The rest of this run is missed; that
                            // event is its own run's to record.
                            floor_missed += end - i;
                            i = end;
                            break;
                        }
                        // The line carries the newest event only: one missed is not recorded.
                        if seen > warmup {
                            floor_hist.saturating_record(now.saturating_sub(stamp));
                        }
                        floor_missed += seen - 1 - i;
                        i = seen;
                    }
                    continue;
                }
                Lane::Bare => {
                    while i < end {
                        let line = bare_line(&ctl, floor_every, i);
                        let (seen, stamp) = floor_recv(line, i + 1, false);
                        let now = now_ns();
                        if i >= warmup {
                            start(&mut started, &mut window);
                        }
                        // A later event on the line: this consumer fell a whole ring of
                        // lines behind (descheduled), and this event is not recorded.
                        if seen == i + 1 {
                            if i >= warmup {
                                bare_hist.saturating_record(now.saturating_sub(stamp));
                            }
                        } else {
                            bare_missed += 1;
                        }
                        i += 1;
                    }
                    continue;
                }
                Lane::Ring => {}
            }
            let handled = std::cell::Cell::new(i);
            let exit = c.run(
                |ev: Event<'_>| {
                    let seq = record_latency(ev.bytes(), warmup, &mut hist, &mut window);
                    if seq >= warmup {
                        start(&mut started, &mut window);
                    }
                    n += 1;
                    handled.set(seq + 1);
                },
                || handled.get() >= end,
            )?;
            if exit == RunExit::Closed {
                break;
            }
            i = end;
        }
    } else {
        // Latency and Echo.
        c.run(
            |ev: Event<'_>| {
                let b = ev.bytes();
                n += 1;
                record_latency(b, warmup, &mut hist, &mut window);
                if let Some(p) = echo.as_mut() {
                    if let Err(e) = p.publish(&b[..8]) {
                        failed.get_or_insert(e);
                    }
                }
            },
            || false,
        )?;
    }
    let t_end = now_ns();
    if let Some(e) = failed {
        bail!("echo publish failed: {e}");
    }
    std::hint::black_box(sum);
    let st = c.stats();
    let mut m = Measured::default();
    if !matches!(
        mode,
        ConsumerMode::Count | ConsumerMode::Runs | ConsumerMode::Turn
    ) {
        m.hist = Some(hist);
        if floor_every > 0 {
            m.hist_b = Some(floor_hist);
            m.hist_c = Some(bare_hist);
            m.set("floor_missed", floor_missed as f64)
                .set("bare_missed", bare_missed as f64);
        }
    } else if let Some(r) = meter.best(args.num_or("best_window_ns", 100_000_000)) {
        m.set("best_ops_per_sec", r);
    }
    m.set("cpu_share", cpu_share(window.0, window.1))
        .set("delivered", n as f64)
        .set("t_end", t_end as f64)
        .set("wakeups", st.wakeups as f64)
        .set("net_wakeups", st.net_wakeups as f64)
        .set("dropped_behind", st.dropped_behind as f64)
        .set("batches", st.batches as f64);
    if let Some((ring, floor)) = turn_read {
        m.set("turn_ring_read", ring as f64)
            .set("turn_floor_read", floor as f64);
    }
    kit::report(args, &m)
}

/// `Count`'s reading until the ring closes: the floor ring's consumer's work per event
/// (read the event) in a handler small enough to be inlined into the delivery loop, and
/// its rate meter ticked once per batch, in `run`'s `stop` (called after every batch), as
/// the floor's reader ticks it once per run and the `disruptor` crate's handler at the end
/// of each batch. Nothing goes from one event's call to the next through memory: the count
/// is the event's sequence (the consumer attached before the first publish), the read a
/// `black_box`. A handler that adds to captured counters made each event's load and store
/// wait for the previous event's store: 8-17% of the fixed-size ring's rate on the Intel
/// Xeon host (PERFORMANCE.md, "A handler's counters in memory"); one that ticked the meter
/// per event, its compare and its rare checkpoint call inside the delivery loop, cost it
/// about a quarter more (PERFORMANCE.md, "The readers' rate meters"). Returns the events the
/// handler got.
fn count_events(c: &mut shmring::Consumer, meter: &mut kit::RateMeter) -> Result<u64> {
    let seen = std::cell::Cell::new(0u64);
    c.run(
        |ev: Event<'_>| {
            std::hint::black_box(u64_at(ev.bytes(), 0));
            seen.set(ev.sequence() + 1);
        },
        || {
            meter.tick(seen.get());
            false
        },
    )?;
    checked_count(c, seen.get())
}

/// A count of the events the handler got (`seen`; `Count`'s is one past the last sequence,
/// which is that count only if the consumer started at sequence 0 and skipped none) checked
/// against the library's own count of deliveries.
fn checked_count(c: &shmring::Consumer, seen: u64) -> Result<u64> {
    let delivered = c.stats().delivered;
    ensure!(
        delivered == seen,
        "the handler counted {seen} events but {delivered} were delivered"
    );
    Ok(seen)
}

/// Make `membarrier(2)` fail with ENOSYS in this process (a seccomp filter), so that the
/// client falls back to a `SeqCst` fence on every publish: the fallback measured without
/// touching the client.
fn forbid_membarrier() -> Result<()> {
    use shmring_testkit::seccomp;
    let prog = seccomp::program(
        &[(libc::SYS_membarrier, seccomp::errno(libc::ENOSYS))],
        seccomp::ALLOW,
    );
    seccomp::install(&prog).context("cannot install the seccomp filter")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Publish {
    Normal,
    NoWake,
}

/// What an event of a paced run goes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// shmring's ring.
    Ring,
    /// The spin floor's one line: the send time, then the sequence.
    Floor,
    /// A bare ring of lines ([`bare_line`]), each written as the floor's line.
    Bare,
}

/// The lane of event `i` of a paced run: runs of `every` events in turn over the ring, the
/// floor's line and the bare ring of lines, starting with the ring (all over the ring when
/// `every` is 0).
#[inline(always)]
fn lane(every: u64, i: u64) -> Lane {
    match i.checked_div(every).map(|run| run % 3) {
        None | Some(0) => Lane::Ring,
        Some(1) => Lane::Floor,
        Some(_) => Lane::Bare,
    }
}

/// The bare ring's line for event `i` of a paced run in turn with runs of `every` events:
/// the control file's ring of lines ([`kit::Ctl::ring_line`]: 1024 lines, 64 bytes apart,
/// as the latency rows' ring has 1024 slots of 64 bytes), taken in order by the lane's own
/// events, so that a line comes back after as many bare-ring events as a slot does after
/// ring events. It shows what this guest charges for a new line per event, in a ring of the
/// ring's size, against the floor's one line, with nothing of shmring's in the path.
/// Meaningful for an event of the bare lane (any other gets some line).
#[inline(always)]
fn bare_line(ctl: &kit::Ctl, every: u64, i: u64) -> &kit::Line {
    ctl.ring_line((bare_index(every, i) % kit::CTL_RING_LINES as u64) as usize)
}

/// The number of bare-lane events before event `i` (of the bare lane) in a paced run in
/// turn with runs of `every` events: the bare lane's own count. 0 when `every` is 0.
fn bare_index(every: u64, i: u64) -> u64 {
    let cycle = 3 * every;
    match i.checked_div(cycle) {
        Some(cycles) => cycles * every + (i % cycle).saturating_sub(2 * every),
        None => 0,
    }
}

#[inline(always)]
fn publish(p: &mut Producer, how: Publish, bytes: &[u8]) -> Result<u64> {
    Ok(match how {
        Publish::Normal => p.publish(bytes)?,
        Publish::NoWake => p.publish_without_wake_check(bytes)?,
    })
}

/// The throughput rows' producer loop (see "stream" in `shm_producer`): back-to-back
/// publishes of the event's number until `limit` events or the clock passes `end`. Returns
/// the count published.
///
/// A function of its own, as the floor ring's producer loop is: inside `shm_producer`, with
/// every mode's locals around it, the compiler kept the event counter on the stack and
/// stored it there on every publish, one store per event the floor's loop does not make
/// (fixed-size per-event 455-570 M/s in the loop there, 636-664 here; ARCHITECTURE.md,
/// "Fixed-size rings: the position in a register").
#[inline(never)]
fn stream_plain(
    p: &mut Producer,
    size: usize,
    buf: &mut [u8],
    limit: u64,
    end: u64,
) -> Result<u64> {
    let mut published = 0u64;
    'plain: loop {
        for _ in 0..256 {
            if published >= limit {
                break 'plain;
            }
            if size == 8 {
                // The event's number from a register, as the floor's producer
                // stores its index (no buffer written and read back per event).
                p.publish(&published.to_ne_bytes())?;
            } else {
                // `buf` holds at least 16 bytes, whatever the size.
                buf[..8].copy_from_slice(&published.to_ne_bytes());
                p.publish(&buf[..size])?;
            }
            published += 1;
        }
        if now_ns() >= end {
            break;
        }
    }
    Ok(published)
}

/// [`stream_plain`] of 8-byte events through a `Publisher` (`Producer::publisher`): the
/// producer's position stays in a register instead of being stored to the handle per
/// event.
#[inline(never)]
fn stream_publisher(p: &mut Producer, limit: u64, end: u64) -> Result<u64> {
    p.publisher(|w| {
        let mut published = 0u64;
        'plain: loop {
            for _ in 0..256 {
                if published >= limit {
                    break 'plain;
                }
                w.publish(&published.to_ne_bytes())?;
                published += 1;
            }
            if now_ns() >= end {
                break;
            }
        }
        Ok(published)
    })
}

/// The batch rows' producer loop: `events` published as one batch after another until the
/// clock (read every 256 events, at least once per batch) passes `end`, each event's first 8
/// bytes its sequence, written before its batch as the floor writes each of its slots.
/// Returns the events published, counting on from `published`. A function of its own, as
/// [`stream_plain`] is, for each kind of buffer.
#[inline(never)]
fn stream_batches<B: AsRef<[u8]> + AsMut<[u8]>>(
    p: &mut Producer,
    events: &mut [B],
    mut published: u64,
    end: u64,
) -> Result<u64> {
    let k = events.len();
    loop {
        for _ in 0..(256 / k).max(1) {
            for (e, seq) in events.iter_mut().zip(published..) {
                e.as_mut()[..8].copy_from_slice(&seq.to_ne_bytes());
            }
            p.publish_batch(events)?;
            published += k as u64;
        }
        if now_ns() >= end {
            return Ok(published);
        }
    }
}

fn shm_producer(args: &Args) -> Result<()> {
    args.pin();
    if args.str_or("fence", "default") == "seqcst" {
        forbid_membarrier()?;
    }
    let ctl = args.ctl()?;
    let ns = args.str("ns")?;
    let ring = Ring::open(ns, args.str("ring")?)?;
    // A producer that fails stops the ring on its way out, so that its consumers end at
    // once instead of waiting for the harness's timeout.
    let stop_on_error = StopOnError(Some(&ring));
    let mut p = ring.producer()?;
    let mode = args.str("mode")?;
    let how = match args.str_or("publish", "normal") {
        "normal" => Publish::Normal,
        "nowake" => Publish::NoWake,
        o => bail!("unknown publish form {o}"),
    };
    let time_each = args.num_or("time_each", 0u8) != 0;
    // Publish through a `Publisher` (the throughput rows' stream form of 8-byte events only).
    let publisher = args.num_or("publisher", 0u8) != 0;
    // Stream mode: write the publish time into bytes 8..16 of every event.
    let stamp = args.num_or("stamp", 0u8) != 0;
    let warmup: u64 = args.num_or("warmup", 0);
    let count: u64 = args.num_or("count", 0);
    let total = warmup + count;
    // Paced mode: runs of this many events go in turn over the ring, a bare floor line and
    // a bare ring of lines (`lane`); 0: all over the ring.
    let floor_every: u64 = args.num_or("floor_every", 0);
    let size: usize = args.num_or("size", 16);
    let producers: u32 = args.num_or("producers", 1);
    ensure!(
        !publisher
            || (mode == "stream" && !stamp && !time_each && how == Publish::Normal && size == 8),
        "a Publisher publishes 8-byte events in the plain stream form only"
    );
    let mut echo = match mode {
        "pingpong" => {
            let r = Ring::open(ns, args.str("echo")?)?;
            let wait = strategy(args.str("wait")?)?;
            Some(r.consumer(ConsumerOptions::anonymous().wait(wait))?)
        }
        _ => None,
    };
    ctl.wait_ready(args.num("consumers")?, Duration::from_secs(20))?;
    if args.num_or("gate", 0u8) != 0 {
        ctl.wait_gate(Duration::from_secs(120))?;
    }
    let mut hist = new_hist();
    let mut rtt = new_hist();
    let mut buf = vec![0u8; size.max(16)];
    let mut m = Measured::default();
    let mut published = 0u64;
    let (c0, t_start) = (kit::thread_cpu_ns(), now_ns());
    match mode {
        "paced" => {
            // Warm-up at no more than 100 µs apart (it touches every slot once: first-touch
            // page faults land there), then the recorded messages at the interval.
            let interval = Duration::from_nanos(args.num("interval_ns")?);
            let mut pacer = Pacer::new(interval.min(Duration::from_micros(100)));
            ensure!(
                floor_every == 0 || !time_each,
                "the interleaved floor is measured without per-publish times"
            );
            // The floor's line, the bare ring's line and the lane of each event, known before
            // the pacer's clock read that stamps the event: from there to the store the
            // floor's and the bare ring's sender runs what `floor_side`'s does.
            let floor_line = ctl.line(0);
            for i in 0..total {
                if i == warmup {
                    pacer.restart(interval);
                }
                // `black_box`: computed here, not sunk past the clock read to their use.
                let lane_now = std::hint::black_box(lane(floor_every, i));
                let bare = std::hint::black_box(bare_line(&ctl, floor_every, i));
                let due = pacer.wait(if i < warmup { i } else { i - warmup });
                match lane_now {
                    Lane::Floor => {
                        floor_send(floor_line, i + 1, due);
                        continue;
                    }
                    Lane::Bare => {
                        floor_send(bare, i + 1, due);
                        continue;
                    }
                    Lane::Ring => {}
                }
                buf[..8].copy_from_slice(&i.to_ne_bytes());
                buf[8..16].copy_from_slice(&due.to_ne_bytes());
                if time_each {
                    let t0 = now_ns();
                    publish(&mut p, how, &buf[..size.max(16)])?;
                    let t1 = now_ns();
                    if i >= warmup {
                        hist.saturating_record(t1 - t0);
                    }
                } else {
                    publish(&mut p, how, &buf[..size.max(16)])?;
                }
            }
            published = total;
            m.set("pacer_late_p99_ns", kit::pct(&pacer.late, 0.99) as f64)
                .set("pacer_held_p99_ns", kit::pct(&pacer.held, 0.99) as f64);
        }
        "pingpong" => {
            let Some(ec) = echo.as_mut() else {
                bail!("no echo ring")
            };
            for i in 0..total {
                let t0 = now_ns();
                buf[..8].copy_from_slice(&i.to_ne_bytes());
                buf[8..16].copy_from_slice(&t0.to_ne_bytes());
                publish(&mut p, how, &buf[..16])?;
                while ec.poll_once(|_| {})? == 0 {
                    ec.wait()?;
                }
                if i >= warmup {
                    rtt.saturating_record(now_ns() - t0);
                }
            }
            published = total;
            m.set("rtt_p50_ns", kit::pct(&rtt, 0.5) as f64);
        }
        "stream" if !stamp && !time_each && how == Publish::Normal => {
            // The throughput rows' form: back-to-back publishes of the event's number until
            // `count` (if given) or the duration, with nothing else in the loop (as the
            // floor ring's producer loop), in a function of its own (`stream_plain`, or
            // `stream_publisher` through a `Publisher`), not the loop below with its
            // per-event `publish` helper: that form cost the per-event rows a fifth to a half
            // (stamped 213-223 -> 168-189 M/s, fixed-size 402-413 -> 178-218, alternated runs).
            let end = t_start + args.num_or("duration_ns", u64::MAX / 4);
            let limit = if count > 0 { total } else { u64::MAX };
            published = if publisher {
                stream_publisher(&mut p, limit, end)?
            } else {
                stream_plain(&mut p, size, &mut buf, limit, end)?
            };
        }
        "stream" => {
            // Back-to-back single publishes until `count` (if given) or the duration.
            let end = t_start + args.num_or("duration_ns", u64::MAX / 4);
            let limit = if count > 0 { total } else { u64::MAX };
            'outer: loop {
                for _ in 0..256 {
                    if published >= limit {
                        break 'outer;
                    }
                    buf[..8].copy_from_slice(&published.to_ne_bytes());
                    if stamp {
                        buf[8..16].copy_from_slice(&now_ns().to_ne_bytes());
                    }
                    if time_each {
                        let t0 = now_ns();
                        publish(&mut p, how, &buf[..size])?;
                        let t1 = now_ns();
                        if published >= warmup {
                            hist.saturating_record(t1 - t0);
                        }
                    } else {
                        publish(&mut p, how, &buf[..size])?;
                    }
                    published += 1;
                }
                if now_ns() >= end {
                    break;
                }
            }
        }
        "turn" => {
            // Chunks in turn (`turn`): the ring per event (the fixed-size per-event row's
            // loop, then its `Publisher` form's), the ring in batches (twice: the consumer
            // reads them per event, then a run at a time), the ring per event again (read a
            // run at a time), the floor ring with the single producer's per-event accesses,
            // the floor ring twice (its producer's loop; its consumer reads the second with
            // pauses) and the `disruptor` crate
            // (`crate=1`), until the duration has passed at the end of a pair (and the
            // warm-up pair is not the only one).
            let chunk: u64 = args.num("chunk")?;
            ensure!(
                chunk > 0 && chunk.is_multiple_of(256),
                "chunk must be a positive multiple of 256"
            );
            let krate = args.num_or("crate", 0u8) != 0;
            let crate_pin = args.num_or("crate_pin", 0u8) != 0;
            let mut floor =
                crate::spsc::BareSender::open(std::path::Path::new(args.str("floor")?))?;
            let ack = &ctl.line(crate::turn::ACK_LINE).seq;
            let crate_line = ctl.line(crate::turn::CRATE_LINE);
            // The batch sides' events as a slice of 8-byte arrays (see the `batch` mode).
            let mut bufs = vec![[0u8; 8]; crate::turn::BATCH];
            let end = t_start + args.num::<u64>("duration_ns")?;
            let mut pairs = Vec::new();
            let (mut chunks, mut crates) = (0u64, 0u64);
            loop {
                let mut took = [0u64; crate::turn::SIDES.len()];
                for side in crate::turn::SIDES {
                    let t0 = now_ns();
                    match side {
                        crate::turn::Side::Ring | crate::turn::Side::RingRuns => {
                            stream_plain(&mut p, 8, &mut buf, chunk, u64::MAX)?;
                        }
                        crate::turn::Side::Publisher => {
                            stream_publisher(&mut p, chunk, u64::MAX)?;
                        }
                        crate::turn::Side::Batch | crate::turn::Side::BatchRuns => {
                            let mut left = chunk;
                            while left > 0 {
                                let k = bufs.len().min(left as usize);
                                for (e, n) in bufs[..k].iter_mut().zip(left..) {
                                    *e = n.to_ne_bytes();
                                }
                                p.publish_batch(&bufs[..k])?;
                                left -= k as u64;
                            }
                        }
                        crate::turn::Side::Claimed => {
                            // Nothing closes the floor's lifecycle word: a closed look is a
                            // damaged file.
                            ensure!(
                                floor.send_claimed(chunk),
                                "the floor ring's lifecycle word or fence mode changed"
                            );
                        }
                        crate::turn::Side::Floor | crate::turn::Side::FloorGather => {
                            floor.send(chunk)
                        }
                        crate::turn::Side::Crate if !krate => continue,
                        crate::turn::Side::Crate => {
                            // Timed inside: from its first timed publish to its consumer's
                            // handling of the last event. The consumer process went to sleep
                            // right after its floor acknowledgement, a few hundred
                            // instructions before the futex; building the crate's ring and
                            // starting its thread take far longer.
                            took[side as usize] = crate_chunk(chunk, crate_pin)?;
                            crates += 1;
                            // Release: pairs with the consumer's Acquire load after its
                            // futex wait; the bump makes a wait that raced it return.
                            crate_line.seq.store(crates, Ordering::Release);
                            crate_line.word.fetch_add(1, Ordering::Release);
                            let _ = rustix::thread::futex::wake(
                                &crate_line.word,
                                rustix::thread::futex::Flags::empty(),
                                1,
                            );
                        }
                    }
                    chunks += 1;
                    // Acquire: pairs with the consumer's Release of the chunks it has read
                    // (after the crate's chunk: that it is awake again).
                    let acked = || ack.load(Ordering::Acquire) >= chunks;
                    let deadline = t0 + 60_000_000_000;
                    while !acked() {
                        std::hint::spin_loop();
                        ensure!(now_ns() < deadline, "chunk {chunks} not read within 60 s");
                    }
                    if side != crate::turn::Side::Crate {
                        took[side as usize] = now_ns() - t0;
                    }
                }
                pairs.push(took);
                published += (crate::turn::RING_SIDES + crate::turn::FLOOR_SIDES) * chunk;
                // One pair past the warm-up at least, however long the warm-up took (a
                // loaded machine can spend the whole duration on it).
                if now_ns() >= end && pairs.len() >= 2 {
                    break;
                }
            }
            // The first pair warmed the rings up (`judge` does not judge it); the crate's
            // ring is new in every chunk, warmed by its own untimed event.
            crate::turn::report(&mut m, &pairs, chunk, krate);
        }
        "batch" => {
            let k: usize = args.num("batch")?;
            let end = t_start + args.num::<u64>("duration_ns")?;
            published = if size == 8 {
                // 8-byte events handed over as a slice of arrays, as a caller holding such
                // events would: a batch of separately allocated buffers made the publish
                // follow a pointer per event, which the floor's batches (values from
                // registers) do not (PERFORMANCE.md, "The batch rows' events").
                stream_batches(&mut p, &mut vec![[0u8; 8]; k], published, end)?
            } else {
                stream_batches(&mut p, &mut vec![vec![0u8; size]; k], published, end)?
            };
        }
        "clock" => {
            // The measurement's own overhead: two clock reads around nothing.
            for i in 0..total {
                let t0 = now_ns();
                let t1 = now_ns();
                if i >= warmup {
                    hist.saturating_record(t1 - t0);
                }
            }
        }
        o => bail!("unknown producer mode {o}"),
    }
    let t_end = now_ns();
    m.set("cpu_share", cpu_share(c0, t_start))
        .set("published", published as f64)
        .set("t_start", t_start as f64)
        .set("t_end", t_end as f64)
        .set(
            "fence_mode",
            ring.fence_mode().map_or(-1.0, |f| f as u32 as f64),
        )
        .set("parks", p.stats().parks as f64)
        .set("room_waits", p.stats().room_waits as f64)
        .set("lap_waits", p.stats().lap_waits as f64)
        .set("slot_takes", p.stats().slot_takes as f64);
    if time_each || mode == "clock" {
        m.hist = Some(hist);
    }
    drop(echo);
    stop_on_error.disarm();
    // The last producer to finish closes the line: consumers drain and return.
    if ctl.done().fetch_add(1, Ordering::AcqRel) + 1 == producers {
        ring.stop().map_err(|e| anyhow!("stop: {e}"))?;
    }
    kit::report(args, &m)
}

/// The ADAPTIVE back-off for a thread stepping consumers itself: 128 spins, yields
/// up to 512, 10 µs sleeps up to 2048, then a 100 µs sleep and back to the medium level.
struct Backoff {
    n: u32,
}

impl Backoff {
    fn pause(&mut self) {
        self.n += 1;
        if self.n <= 128 {
            std::hint::spin_loop();
        } else if self.n <= 512 {
            std::thread::yield_now();
        } else if self.n <= 2048 {
            std::thread::sleep(Duration::from_micros(10));
        } else {
            std::thread::sleep(Duration::from_micros(100));
            self.n = 512;
        }
    }
}

fn ws_stepper(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let ns = args.str("ns")?;
    let rings = args
        .str("rings")?
        .split(',')
        .map(|r| Ring::open(ns, r))
        .collect::<Result<Vec<_>, _>>()?;
    let mut consumers = rings
        .iter()
        .map(|r| r.consumer(ConsumerOptions::anonymous()))
        .collect::<Result<Vec<_>, _>>()?;
    let wakeset = args.str("mode")? == "wakeset";
    let mut set = WakeSet::new();
    for c in &consumers {
        set.add(c).context("wake set")?;
    }
    let warmup: u64 = args.num_or("warmup", 0);
    let mut hist = new_hist();
    let mut backoff = Backoff { n: 0 };
    let done = |consumers: &[shmring::Consumer]| {
        rings
            .iter()
            .zip(consumers)
            .all(|(r, c)| r.is_closed() && c.next_sequence() >= r.head())
    };
    ctl.arrive();
    loop {
        let mut any = false;
        for c in consumers.iter_mut() {
            any |= c.poll_once(|ev| {
                let now = now_ns();
                let b = ev.bytes();
                if u64_at(b, 0) >= warmup {
                    hist.saturating_record(now.saturating_sub(u64_at(b, 1)));
                }
            })? > 0;
        }
        if any {
            backoff.n = 0;
            continue;
        }
        if done(&consumers) {
            break;
        }
        if wakeset {
            set.park_unless(|| consumers.iter().any(|c| c.has_pending()) || done(&consumers));
        } else {
            backoff.pause();
        }
    }
    let mut m = Measured {
        hist: Some(hist),
        ..Default::default()
    };
    let st = set.stats();
    m.set("parks", st.parks as f64)
        .set("net_wakeups", st.net_wakeups as f64);
    kit::report(args, &m)
}

fn ws_producer(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let ns = args.str("ns")?;
    let rings = args
        .str("rings")?
        .split(',')
        .map(|r| Ring::open(ns, r))
        .collect::<Result<Vec<_>, _>>()?;
    let mut producers = rings
        .iter()
        .map(|r| r.producer())
        .collect::<Result<Vec<_>, _>>()?;
    ctl.wait_ready(1, Duration::from_secs(20))?;
    ctl.wait_gate(Duration::from_secs(120))?;
    let total = args.num::<u64>("count")? + args.num::<u64>("warmup")?;
    let mut pacer = Pacer::new(Duration::from_nanos(args.num("interval_ns")?));
    let n = producers.len() as u64;
    for i in 0..total {
        let due = pacer.wait(i);
        let mut msg = [0u8; 16];
        msg[..8].copy_from_slice(&i.to_ne_bytes());
        msg[8..].copy_from_slice(&due.to_ne_bytes());
        producers[(i % n) as usize].publish(&msg)?;
    }
    for r in &rings {
        r.stop().map_err(|e| anyhow!("stop: {e}"))?;
    }
    let mut m = Measured::default();
    m.set("pacer_late_p99_ns", kit::pct(&pacer.late, 0.99) as f64)
        .set("pacer_held_p99_ns", kit::pct(&pacer.held, 0.99) as f64);
    kit::report(args, &m)
}

/// Stops its ring when dropped armed: a producer role that returns an error on the way.
struct StopOnError<'a>(Option<&'a Ring>);

impl StopOnError<'_> {
    /// The role ends normally: its own stop (or another producer's) closes the ring.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnError<'_> {
    fn drop(&mut self) {
        if let Some(ring) = self.0 {
            // Best effort: the role's own error is what it reports.
            let _ = ring.stop();
        }
    }
}

/// Sleep on the crate line's futex word until the producer has run `k` crate chunks
/// (`turn`), for at most 60 s; an error at once (within the 1 s net) once `stopped` says the
/// producer gave up.
fn crate_wait(line: &kit::Line, k: u64, stopped: impl Fn() -> bool) -> Result<()> {
    let deadline = now_ns() + 60_000_000_000;
    loop {
        // The word before the count: a bump between the two makes the wait return at once.
        let w = line.word.load(Ordering::Acquire);
        // Acquire: pairs with the producer's Release store of the count.
        if line.seq.load(Ordering::Acquire) >= k {
            return Ok(());
        }
        ensure!(
            !stopped(),
            "the ring stopped before crate chunk {k} was done"
        );
        ensure!(now_ns() < deadline, "crate chunk {k} not done within 60 s");
        let _ = rustix::thread::futex::wait(
            &line.word,
            rustix::thread::futex::Flags::empty(),
            w,
            Some(&rustix::time::Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            }),
        );
    }
}

/// One chunk of the `disruptor` crate in this process (`turn`): its time in nanoseconds.
#[cfg(feature = "peers")]
fn crate_chunk(events: u64, pin: bool) -> Result<u64> {
    shmring_peers::inproc::chunk(events, crate::turn::CAPACITY as usize, pin)
}

/// Without the `peers` feature the crate's side is never asked for (`turn::rows`).
#[cfg(not(feature = "peers"))]
fn crate_chunk(_events: u64, _pin: bool) -> Result<u64> {
    bail!("not built: rebuild the harness with `--features peers`")
}

/// Send `seq` (from 1) with `stamp` on a floor line: the stamp, then the sequence
/// (Release: the stamp is visible with it, Acquire in [`floor_recv`]).
#[inline(always)]
fn floor_send(line: &kit::Line, seq: u64, stamp: u64) {
    line.stamp.store(stamp, Ordering::Relaxed);
    line.seq.store(seq, Ordering::Release);
}

/// Wait until a floor line carries `seq` or a later one (a receiver descheduled for longer
/// than the pacing gap misses messages; it then records the newest), spinning or (`futex`)
/// sleeping on its word. Returns (sequence seen, its stamp).
fn floor_recv(line: &kit::Line, seq: u64, futex: bool) -> (u64, u64) {
    loop {
        let w = line.word.load(Ordering::Acquire);
        let seen = line.seq.load(Ordering::Acquire);
        if seen >= seq {
            return (seen, line.stamp.load(Ordering::Relaxed));
        }
        if futex {
            let _ = rustix::thread::futex::wait(
                &line.word,
                rustix::thread::futex::Flags::empty(),
                w,
                None,
            );
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The floor: one cache line per direction (spin) or a futex word per direction, with the
/// send time in the line. Side A sends; side B records.
fn floor_side(args: &Args, a_side: bool) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let futex = args.str("kind")? == "futex";
    let pingpong = args.str("mode")? == "pingpong";
    let warmup: u64 = args.num("warmup")?;
    let total = args.num::<u64>("count")? + warmup;
    let (to_b, to_a) = (ctl.line(0), ctl.line(1));
    let send = |line: &kit::Line, seq: u64, stamp: u64| {
        floor_send(line, seq, stamp);
        if futex {
            // Release: pairs with the Acquire load of the word before a waiter sleeps.
            line.word.fetch_add(1, Ordering::Release);
            let _ =
                rustix::thread::futex::wake(&line.word, rustix::thread::futex::Flags::empty(), 1);
        }
    };
    let recv = |line: &kit::Line, seq: u64| floor_recv(line, seq, futex);
    let mut hist = new_hist();
    let mut rtt = new_hist();
    let (c0, w0) = (kit::thread_cpu_ns(), now_ns());
    let mut m = Measured::default();
    if a_side {
        ctl.wait_ready(1, Duration::from_secs(20))?;
        let mut pacer = Pacer::new(Duration::from_nanos(args.num("interval_ns")?));
        for i in 1..=total {
            if pingpong {
                let t0 = now_ns();
                send(to_b, i, t0);
                recv(to_a, i);
                if i > warmup {
                    rtt.saturating_record(now_ns() - t0);
                }
            } else {
                let due = pacer.wait(i);
                send(to_b, i, due);
            }
        }
        if pingpong {
            m.set("rtt_half_p50_ns", kit::pct(&rtt, 0.5) as f64 / 2.0);
        } else {
            m.set("pacer_late_p99_ns", kit::pct(&pacer.late, 0.99) as f64)
                .set("pacer_held_p99_ns", kit::pct(&pacer.held, 0.99) as f64);
        }
        m.set("cpu_share", cpu_share(c0, w0));
    } else {
        ctl.arrive();
        let (mut next, mut missed) = (1, 0u64);
        let mut window = None;
        while next <= total {
            let (seen, stamp) = recv(to_b, next);
            let now = now_ns();
            if seen > warmup {
                hist.saturating_record(now.saturating_sub(stamp));
                window.get_or_insert_with(|| (kit::thread_cpu_ns(), now_ns()));
            }
            missed += seen - next;
            if pingpong {
                send(to_a, seen, 0);
            }
            next = seen + 1;
        }
        m.hist = Some(hist);
        m.set("missed", missed as f64);
        let (c, w) = window.unwrap_or((c0, w0));
        m.set("cpu_share", cpu_share(c, w));
    }
    kit::report(args, &m)
}

/// Run a shmring or floor role, if `role` is one.
pub fn run_role(role: &str, args: &Args) -> Option<Result<()>> {
    Some(match role {
        "shm-consumer" => shm_consumer(args),
        "shm-producer" => shm_producer(args),
        "ws-stepper" => ws_stepper(args),
        "ws-producer" => ws_producer(args),
        "floor-a" => floor_side(args, true),
        "floor-b" => floor_side(args, false),
        "spsc-producer" => crate::spsc::producer(args),
        "spsc-consumer" => crate::spsc::consumer(args),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring::RingConfig;
    use shmring_testkit::namespace::Namespace;

    /// A ring of fixed-size 8-byte events with `before` events published, a consumer
    /// attached, then `after` more published and the ring stopped.
    fn counted_ring(
        ns: &Namespace,
        name: &str,
        before: u64,
        after: u64,
    ) -> (Ring, shmring::Consumer) {
        let config = RingConfig {
            capacity: 64,
            producer_mode: shmring::ProducerMode::Single,
            event_size: Some(8),
            ..RingConfig::default()
        };
        let ring = Ring::create(ns.name(), name, &config).expect("ring");
        let mut p = ring.producer().expect("producer");
        for i in 0..before {
            p.publish_value(&i).expect("publish");
        }
        let c = ring
            .consumer(shmring::ConsumerOptions::anonymous())
            .expect("consumer");
        for i in 0..after {
            p.publish_value(&i).expect("publish");
        }
        ring.stop().expect("stop");
        (ring, c)
    }

    /// The count from the sequences is every event the handler got, and the check says so
    /// when it cannot be: a consumer that did not start at sequence 0, or one that skipped a
    /// sequence.
    #[test]
    fn the_counting_handler_counts_by_sequence_and_refuses_a_late_start() {
        let ns = Namespace::new("harness_count_events");
        let (_ring, mut c) = counted_ring(&ns, "from-zero", 0, 50);
        // A meter that takes a checkpoint at every tick that moved: where it ticks shows.
        let mut meter = kit::RateMeter::every(1);
        assert_eq!(count_events(&mut c, &mut meter).expect("counted"), 50);
        // Ticked between batches, never inside one: at most the run's first look (0, before
        // any batch) and the one batch's end (50); a tick per event would have left 1..=50.
        let counts: Vec<u64> = meter.points.iter().map(|&(_, n)| n).collect();
        assert!(counts == [50] || counts == [0, 50], "{counts:?}");
        let mut meter = kit::RateMeter::new();
        let (_late_ring, mut late) = counted_ring(&ns, "late", 5, 20);
        let err = count_events(&mut late, &mut meter).expect_err("a late start");
        assert!(
            err.to_string().contains("counted 25 events but 20"),
            "{err:#}"
        );
        // A sequence skipped in the middle (a claim dropped unwritten: a tombstone).
        let (ring, mut gap) = counted_ring(&ns, "gap", 0, 3);
        ring.start().expect("start again");
        let mut p = ring.producer().expect("producer");
        drop(p.claim().expect("claim"));
        p.publish_value(&7u64).expect("publish");
        ring.stop().expect("stop");
        let err = count_events(&mut gap, &mut meter).expect_err("a skipped sequence");
        assert!(
            err.to_string().contains("counted 5 events but 4"),
            "{err:#}"
        );
    }

    #[test]
    fn a_producer_role_that_fails_stops_its_ring_and_one_that_ends_does_not() {
        let ns = Namespace::new("harness_stop_on_error");
        let failed = Ring::create(ns.name(), "failed", &RingConfig::default()).expect("ring");
        let ended = Ring::create(ns.name(), "ended", &RingConfig::default()).expect("ring");
        drop(StopOnError(Some(&failed)));
        StopOnError(Some(&ended)).disarm();
        assert!(failed.is_closed());
        assert!(!ended.is_closed());
    }

    /// Runs of `every` events go over the ring, the floor's line and the bare ring in that
    /// order, round and round; with `every` 0 all go over the ring.
    #[test]
    fn a_paced_run_in_turn_sends_runs_over_the_ring_the_floor_and_the_bare_ring() {
        let lanes: Vec<Lane> = (0..14).map(|i| lane(2, i)).collect();
        use Lane::{Bare, Floor, Ring as R};
        assert_eq!(
            lanes,
            [R, R, Floor, Floor, Bare, Bare, R, R, Floor, Floor, Bare, Bare, R, R]
        );
        assert!((0..1000).all(|i| lane(0, i) == R));
    }

    /// The bare lane takes the ring of lines in order by its own events: run after run, its
    /// events get consecutive lines, and a line comes back after `CTL_RING_LINES` of them.
    #[test]
    fn the_bare_ring_takes_its_lines_in_order_by_its_own_events() {
        let every = 2;
        // Cycles of 6 events: ring (0, 1), floor (2, 3), bare (4, 5).
        let bare: Vec<u64> = (0..30)
            .filter(|&i| lane(every, i) == Lane::Bare)
            .map(|i| bare_index(every, i))
            .collect();
        assert_eq!(bare, (0..10).collect::<Vec<u64>>());
        assert_eq!(bare_index(0, 7), 0);
        // Its scratch directory, with the control file, goes when it drops, even on a failure.
        let ns = Namespace::concurrent("harness_bare_lines");
        let ctl = kit::Ctl::create(&ns.scratch().join("ctl")).expect("control file");
        let addr = |l: &kit::Line| l as *const kit::Line as usize;
        let n = kit::CTL_RING_LINES as u64;
        // The first n bare events (n / every cycles): each line once, 64 bytes apart.
        let first: Vec<usize> = (0..3 * n)
            .filter(|&i| lane(every, i) == Lane::Bare)
            .map(|i| addr(bare_line(&ctl, every, i)))
            .collect();
        assert_eq!(first.len() as u64, n);
        let mut sorted = first.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len() as u64, n, "every line once");
        assert!(
            first.windows(2).all(|w| w[1] == w[0] + 64),
            "in order, 64 bytes apart"
        );
        // The next bare event takes the first line again.
        let next = (3 * n..)
            .find(|&i| lane(every, i) == Lane::Bare)
            .expect("a bare event");
        assert_eq!(addr(bare_line(&ctl, every, next)), first[0]);
        // No line of the ring is a spare line (the floor's, the in-turn rows').
        let spare: Vec<usize> = (0..kit::CTL_SPARE_LINES)
            .map(|k| addr(ctl.line(k)))
            .collect();
        assert!(first.iter().all(|l| !spare.contains(l)));
    }
}
