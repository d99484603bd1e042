//! The in-process reference: the `disruptor` crate (BusySpin) and `crossbeam-channel`
//! (bounded, blocking `recv`), a producer thread and a consumer thread in one role process.
//!
//! These are what shmring is measured *against* across processes: if a cross-process ring
//! keeps up with the in-process Disruptor, the process boundary costs nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Result};
use disruptor::{build_single_producer, BusySpin, Producer};
use hdrhistogram::Histogram;

use crate::kit::{self, new_hist, now_ns, Args, Measured, Pacer, Roles};
use crate::Plan;

/// Which in-process peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `disruptor` crate, single producer, BusySpin.
    Disruptor,
    /// `crossbeam-channel` bounded(1024), blocking `recv`.
    Crossbeam,
}

impl Kind {
    /// Name in rows and role arguments.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Disruptor => "disruptor",
            Kind::Crossbeam => "crossbeam-channel",
        }
    }
}

/// Ring / channel size (the shmring rows use the same).
const CAPACITY: usize = 1024;

#[derive(Clone, Copy, Default)]
struct Ev {
    seq: u64,
    stamp: u64,
}

/// Paced hand-off latency (`plan.interval`), producer thread to consumer-thread handler.
pub fn latency(kind: Kind, plan: &Plan, tag: &str) -> Result<Measured> {
    run(kind, plan, tag, "latency")
}

/// 1P1C per-event throughput of 16-byte events for `plan.duration`.
pub fn throughput(kind: Kind, plan: &Plan, tag: &str) -> Result<Measured> {
    run(kind, plan, tag, "throughput")
}

fn run(kind: Kind, plan: &Plan, tag: &str, mode: &str) -> Result<Measured> {
    let mut roles = Roles::new(&plan.dir, tag);
    let mut a = vec![
        format!("which={}", kind.name()),
        format!("mode={mode}"),
        format!("count={}", plan.count),
        format!("warmup={}", plan.warmup),
        format!("interval_ns={}", plan.interval.as_nanos()),
        format!("duration_ns={}", plan.duration.as_nanos()),
    ];
    a.push(format!("pin={}", u8::from(plan.pin)));
    roles.spawn("peer-inproc", &a)?;
    let mut parts = roles.finish(plan.timeout)?;
    parts.pop().ok_or_else(|| anyhow::anyhow!("no result"))
}

fn role(args: &Args) -> Result<()> {
    let pin = args.num::<u8>("pin")? != 0;
    if pin {
        kit::pin_to(0);
    }
    let which = args.str("which")?;
    let mode = args.str("mode")?;
    let total = args.num::<u64>("count")? + args.num::<u64>("warmup")?;
    let warmup: u64 = args.num("warmup")?;
    let interval = Duration::from_nanos(args.num("interval_ns")?);
    let duration: u64 = args.num("duration_ns")?;
    let hist = Arc::new(Mutex::new(new_hist()));
    let count = Arc::new(AtomicU64::new(0));
    let points = Arc::new(Mutex::new(kit::RateMeter::new()));
    let pinned_consumer = move || {
        if pin {
            kit::pin_to(1);
        }
    };
    let latency = mode == "latency";
    let record = {
        let hist = hist.clone();
        move |e: &Ev, now: u64| {
            if e.seq >= warmup {
                hist.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .saturating_record(now.saturating_sub(e.stamp));
            }
        }
    };
    let (p0, c0, w0) = (kit::process_cpu_ns(), kit::thread_cpu_ns(), now_ns());
    let mut published = 0u64;
    let t_start;
    let mut pacer = Pacer::new(interval);
    match which {
        "disruptor" => {
            let counter = count.clone();
            let meter = points.clone();
            let mut next_tick = 0u64;
            let mut first = true;
            let mut producer = build_single_producer(CAPACITY, Ev::default, BusySpin)
                .handle_events_with(move |e: &Ev, seq: i64, eob| {
                    if first {
                        first = false;
                        pinned_consumer();
                    }
                    if latency {
                        record(e, now_ns());
                    }
                    // As shmring's counting handler (the harness's `Count`): the event
                    // read, the count taken from its sequence (from 0), nothing carried
                    // from one event to the next; the rate meter looked at once per batch
                    // (its last event), as shmring's reader ticks its meter after each
                    // batch and the floor's after each run.
                    std::hint::black_box(e.seq);
                    if eob {
                        let local = seq as u64 + 1;
                        if local >= next_tick {
                            next_tick = local + kit::RATE_EVERY;
                            meter
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .tick(local);
                        }
                        counter.store(local, Ordering::Relaxed);
                    }
                })
                .build();
            t_start = now_ns();
            if latency {
                for i in 0..total {
                    let due = pacer.wait(i);
                    producer.publish(|e| {
                        e.seq = i;
                        e.stamp = due;
                    });
                }
                published = total;
            } else {
                let end = t_start + duration;
                while now_ns() < end {
                    for _ in 0..1024 {
                        producer.publish(|e| {
                            e.seq = published;
                        });
                        published += 1;
                    }
                }
            }
            // Dropping the last producer drains the ring and joins the consumer thread.
            drop(producer);
        }
        "crossbeam-channel" => {
            let (tx, rx) = crossbeam_channel::bounded::<Ev>(CAPACITY);
            let counter = count.clone();
            let meter = points.clone();
            let consumer = std::thread::spawn(move || {
                pinned_consumer();
                let mut n = 0u64;
                let mut local = kit::RateMeter::new();
                while let Ok(e) = rx.recv() {
                    if latency {
                        record(&e, now_ns());
                    }
                    n += 1;
                    local.tick(n);
                }
                counter.store(n, Ordering::Relaxed);
                *meter.lock().unwrap_or_else(PoisonError::into_inner) = local;
            });
            t_start = now_ns();
            if latency {
                for i in 0..total {
                    let due = pacer.wait(i);
                    if tx.send(Ev { seq: i, stamp: due }).is_err() {
                        bail!("crossbeam consumer gone");
                    }
                }
                published = total;
            } else {
                let end = t_start + duration;
                while now_ns() < end {
                    for _ in 0..1024 {
                        if tx
                            .send(Ev {
                                seq: published,
                                stamp: 0,
                            })
                            .is_err()
                        {
                            bail!("crossbeam consumer gone");
                        }
                        published += 1;
                    }
                }
            }
            drop(tx);
            if consumer.join().is_err() {
                bail!("crossbeam consumer panicked");
            }
        }
        other => bail!("unknown in-process peer {other}"),
    }
    let (p1, c1, w1) = (kit::process_cpu_ns(), kit::thread_cpu_ns(), now_ns());
    let window = (w1 - w0).max(1) as f64;
    let producer_cpu = (c1 - c0) as f64;
    let mut m = Measured::default();
    let delivered = count.load(Ordering::Relaxed);
    m.set("delivered", delivered as f64)
        .set("published", published as f64)
        .set("producer_cpu", producer_cpu / window)
        .set(
            "consumer_cpu",
            (p1 - p0).saturating_sub(c1 - c0) as f64 / window,
        );
    if latency {
        let h: Histogram<u64> = hist.lock().unwrap_or_else(PoisonError::into_inner).clone();
        m.hist = Some(h);
        m.set("pacer_late_p99_ns", kit::pct(&pacer.late, 0.99) as f64)
            .set("pacer_held_p99_ns", kit::pct(&pacer.held, 0.99) as f64);
    } else {
        m.set(
            "ops_per_sec",
            delivered as f64 / ((w1 - t_start).max(1) as f64 / 1e9),
        );
        let best = points
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .best(kit::best_window(Duration::from_nanos(duration)));
        if let Some(r) = best {
            m.set("best_ops_per_sec", r);
        }
    }
    kit::report(args, &m)
}

/// One chunk of `events` 8-byte events through a fresh `disruptor` crate ring of
/// `capacity` (single producer, BusySpin), for a measurement in turn with shmring's rings
/// inside the calling process: the calling thread publishes, the crate's consumer thread
/// (pinned to CPU 1 with `pin`, before any timed event) reads each event as shmring's
/// reader in turn does (the event's word loaded and `black_box`ed, nothing carried from one
/// event to the next) and checks the last. Returns the nanoseconds from the first timed
/// publish to the consumer's handling of the last.
///
/// The crate's BusySpin consumer spins for as long as its ring lives, so a ring lives only
/// for its chunk: built, warmed by one untimed event (which also waits for the consumer
/// thread to run where it is pinned), `events` timed, dropped (which joins the thread).
pub fn chunk(events: u64, capacity: usize, pin: bool) -> Result<u64> {
    // Set by the consumer: 1 once it has handled the warm-up event; the clock when it
    // handled the last one; the last event's word.
    let ready = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicU64::new(0));
    let (r, d, l) = (ready.clone(), done.clone(), last.clone());
    let mut producer = build_single_producer(capacity, || 0u64, BusySpin)
        .handle_events_with(move |e: &u64, seq: i64, _eob: bool| {
            if seq == 0 {
                if pin {
                    kit::pin_to(1);
                }
                // Release: pairs with the producer's Acquire load before its clock read.
                r.store(1, Ordering::Release);
                return;
            }
            // The counting handler's work per event, as shmring's consumer in turn: the
            // event's word read, its count the sequence (nothing carried in memory from one
            // event to the next, as a sum kept in this closure's field was).
            std::hint::black_box(*e);
            if seq as u64 == events {
                let now = now_ns();
                l.store(*e, Ordering::Relaxed);
                // Release: pairs with the producer's Acquire load; the last word with it.
                d.store(now, Ordering::Release);
            }
        })
        .build();
    let deadline = now_ns() + 60_000_000_000;
    let late = |what: &str| -> Result<()> {
        if now_ns() > deadline {
            bail!("the disruptor crate's consumer did not {what} within 60 s");
        }
        Ok(())
    };
    // `yield_now`: until it pins itself, the consumer thread shares this thread's CPU.
    let wait = |word: &AtomicU64, what: &str, yielding: bool| -> Result<u64> {
        loop {
            let v = word.load(Ordering::Acquire);
            if v != 0 {
                return Ok(v);
            }
            late(what)?;
            if yielding {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    };
    producer.publish(|e| *e = 0);
    wait(&ready, "start", true)?;
    let t0 = now_ns();
    for i in 1..=events {
        // `publish`'s own loop (it retries at once, no pause, while the ring is full) with a
        // count of the tries: a consumer thread gone would leave `publish` spinning for
        // ever; this reads the clock every 2^20 tries of a full ring.
        let mut tries = 0u32;
        while producer.try_publish(|e| *e = i).is_err() {
            tries = tries.wrapping_add(1);
            if tries.is_multiple_of(1 << 20) {
                late("read a full ring")?;
            }
        }
    }
    let end = wait(&done, "read the chunk", false)?;
    // Dropping the producer drains the ring and joins the consumer thread.
    drop(producer);
    // Event `i` carries `i` at sequence `i` (the warm-up is sequence 0): the last event read
    // carries the last number published, or the chunk was not read to its end. (Only the
    // last is checked, as shmring's reader in turn checks only its count: a check per event
    // would be work the readers compared with it do not do.)
    let got = last.load(Ordering::Relaxed);
    if got != events {
        bail!("the disruptor crate's consumer read {got} last, expected {events}");
    }
    Ok(end.saturating_sub(t0))
}

/// Run an in-process peer role, if `role` is one.
pub fn run_role(role_name: &str, args: &Args) -> Option<Result<()>> {
    (role_name == "peer-inproc").then(|| role(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_reads_to_its_last_event_and_times_it() {
        // A ring smaller than the chunk: the producer waits for room on every lap.
        let ns = chunk(10_000, 64, false).expect("a chunk");
        assert!(ns > 0);
    }
}
