//! `produce`: publish `--count` self-checking events as producer `--producer-id`.
//!
//! Events carry the producer's own sequence 0, 1, 2, ... (see `shmring_testkit::payload`).
//! `--mode` picks the publishing form; `mixed` cycles through all of them, so one stream
//! exercises `publish`, `publish_batch`, the claim guard, `publish_timeout`, `try_publish`
//! and a loop through a `Publisher` in turn. Every form that waits for room backs off inside the client (a
//! few spins and yields, then a park on the futex), so a gated producer does not keep a
//! core busy.
//!
//! `--tombstone-every K` drops every K-th claim without committing it (a tombstone); the
//! producer sequence is not advanced for it, so consumers still see 0, 1, 2, ...
//!
//! `--count 0` publishes until the ring is stopped or removed, then exits 0.
//!
//! `--idle-every K` lets consumers go idle every K events: the producer waits (bounded)
//! until every consumer in the ring has caught up with the head and at least
//! `--await-parked N` of them show as parked in the consumer table, then pauses
//! `--pause-us` (pacing, so that spinning, yielding and sleeping consumers also reach their
//! last phase); the next publish then has to wake whoever parked.
//!
//! `--retry-closed` retries a publish refused by a stopped ring until the ring starts again.
//! Each refusal retried checks the handle's counters first: `ProducerStats::published` must
//! be the events accepted so far (a refusal spends no position). `--report-refusals` also
//! prints `refused` at the first refusal after an accepted publish.
//!
//! Prints `ready` after attaching, `started` after the first publish, and at the end
//! `done published=N tombstones=T refused=R stats_published=N stats_tombstoned=T parks=P
//! late_wakeups=L net_wakeups=X idles=I retries=Z` (`parks`: times it parked waiting for
//! room; `late_wakeups`: parks ended by a timeout after a consumer moved the wake line;
//! `net_wakeups`: parks ended by the net with room there and the line unmoved; `retries`:
//! refusals by a stopped ring, retried).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shmring::{Producer, PublishError, TryPublishError};
use shmring_testkit::payload::{encode, encode_into, Origin};

use super::{RingArgs, Size};

/// How to publish.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `publish`, one event at a time.
    Publish,
    /// `publish_batch` with batch sizes in 1..=capacity/2.
    Batch,
    /// `claim`, write in place, `commit`.
    Claim,
    /// `publish_timeout` with a 1 ms timeout, retried.
    Timeout,
    /// `try_publish`, falling back to `publish` when full.
    Try,
    /// Up to 64 events through one `Producer::publisher`, each its own publish; the loop
    /// ends at the first refusal.
    Publisher,
    /// All of the above in turn.
    Mixed,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
    /// This producer's id (carried in every event).
    #[arg(long, default_value_t = 0)]
    producer_id: u32,
    /// Events to publish; 0 = until the ring is stopped or removed.
    #[arg(long)]
    count: u64,
    /// Event size in bytes (8, or 16 and more), or `max` for a full slot.
    #[arg(long, default_value = "8")]
    size: Size,
    #[arg(long, value_enum, default_value_t = Mode::Mixed)]
    mode: Mode,
    /// Drop every K-th claim without commit (0: never).
    #[arg(long, default_value_t = 0)]
    tombstone_every: u64,
    /// Every K events, wait for the consumers to catch up (and park): 0 = never.
    #[arg(long, default_value_t = 0)]
    idle_every: u64,
    /// At each idle point, also wait until this many consumers show as parked.
    #[arg(long, default_value_t = 0)]
    await_parked: usize,
    /// At each idle point, then pause this long (µs).
    #[arg(long, default_value_t = 0)]
    pause_us: u64,
    /// A publish refused because the ring is stopped is retried (the same event, after a
    /// yield) until the ring starts again; only a deleted ring ends the run early.
    #[arg(long)]
    retry_closed: bool,
    /// Print `refused` at the first refusal after an accepted publish.
    #[arg(long)]
    report_refusals: bool,
}

/// A refusal about to be retried: the handle's count of published events must be the
/// events accepted so far (`published`), and (`report`) the first refusal of a closed
/// period is reported.
fn check_refusal(
    p: &Producer,
    published: u64,
    report: bool,
    reported: &mut bool,
) -> anyhow::Result<()> {
    let counted = p.stats().published;
    if counted != published {
        bail!("after a refusal the producer counts {counted} events published, not {published}");
    }
    if report && !*reported {
        *reported = true;
        println!("refused at={published}");
    }
    Ok(())
}

/// Wait until every consumer of `ring` caught up with the head and at least `parked` of them
/// are parked, looking every 50 µs, for at most 50 s (shorter than the parent's 60 s
/// watchdog, so the parent sees this error rather than a kill).
fn await_idle(ring: &shmring::Ring, parked: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(50);
    loop {
        let info = ring.info();
        let caught_up = info.consumers.iter().all(|c| c.next >= info.head);
        let parked_now = info.consumers.iter().filter(|c| c.parked).count();
        if caught_up && parked_now >= parked {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("consumers never went idle ({parked_now} of {parked} parked): {info:#?}");
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// A refused publish: `Ok(0)` (nothing published, stop) if the ring was stopped or removed,
/// the normal end of `--count 0`; any other refusal is an error.
fn closed(e: PublishError) -> anyhow::Result<u64> {
    match e {
        PublishError::Closed | PublishError::Deleted => Ok(0),
        e => Err(e.into()),
    }
}

/// As [`closed`], for the bounded forms.
fn try_closed(e: TryPublishError) -> anyhow::Result<u64> {
    match e {
        TryPublishError::Closed | TryPublishError::Deleted => Ok(0),
        e => Err(e.into()),
    }
}

/// A small deterministic generator for batch sizes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ring = a.ring.open()?;
    let mut p = ring.producer().context("attaching the producer")?;
    let len = a.size.resolve(&ring);
    let half = ring.capacity() / 2;
    println!("ready pid={}", std::process::id());
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d ^ u64::from(a.producer_id + 1));
    let mut buf = vec![0u8; len];
    let (mut seq, mut claims, mut tombstones) = (0u64, 0u64, 0u64);
    let mut started = false;
    let forever = a.count == 0;
    let (mut next_idle, mut idles) = (a.idle_every, 0u64);
    let mut retries = 0u64;
    let mut reported = false;
    while forever || seq < a.count {
        claims += 1;
        let tombstone_turn = a.tombstone_every > 0 && claims % a.tombstone_every == 0;
        let outcome = if tombstone_turn {
            match p.claim() {
                Ok(mut c) => {
                    // Half-written, never committed: dropped, it must publish a tombstone.
                    c.payload_mut()[..4].copy_from_slice(b"junk");
                    drop(c);
                    tombstones += 1;
                    continue;
                }
                Err(e) => closed(e)?,
            }
        } else {
            let mode = match a.mode {
                Mode::Mixed => [
                    Mode::Publish,
                    Mode::Batch,
                    Mode::Claim,
                    Mode::Timeout,
                    Mode::Try,
                    Mode::Publisher,
                ][(claims % 6) as usize],
                m => m,
            };
            let origin = Origin {
                producer: a.producer_id,
                seq,
            };
            match mode {
                Mode::Batch => {
                    let mut k = 1 + rng.next() % half;
                    if !forever {
                        k = k.min(a.count - seq);
                    }
                    let events: Vec<Vec<u8>> = (0..k)
                        .map(|i| {
                            encode(
                                Origin {
                                    producer: a.producer_id,
                                    seq: seq + i,
                                },
                                len,
                            )
                        })
                        .collect();
                    p.publish_batch(&events).map(|_| k).or_else(closed)
                }
                Mode::Claim => match p.claim() {
                    Ok(mut c) => {
                        encode_into(&mut c.payload_mut()[..len], origin);
                        c.set_len(len)?;
                        c.commit();
                        Ok(1)
                    }
                    Err(e) => closed(e),
                },
                Mode::Timeout => {
                    encode_into(&mut buf, origin);
                    publish_timeout(&mut p, &buf)
                }
                Mode::Try => {
                    encode_into(&mut buf, origin);
                    match p.try_publish(&buf) {
                        Ok(_) => Ok(1),
                        Err(TryPublishError::Full) => p.publish(&buf).map(|_| 1).or_else(closed),
                        Err(e) => try_closed(e),
                    }
                }
                Mode::Publisher => {
                    let k = if forever { 64 } else { 64.min(a.count - seq) };
                    let mut n = 0u64;
                    let r = p.publisher(|w| {
                        for i in 0..k {
                            let origin = Origin {
                                producer: a.producer_id,
                                seq: seq + i,
                            };
                            encode_into(&mut buf, origin);
                            w.publish(&buf)?;
                            n += 1;
                        }
                        Ok(())
                    });
                    match r {
                        Ok(()) => Ok(n),
                        // The events before the refusal were accepted; a refusal of the first
                        // is the ring's closing, as for the other forms.
                        Err(e) => closed(e).map(|_| n),
                    }
                }
                Mode::Publish | Mode::Mixed => {
                    encode_into(&mut buf, origin);
                    p.publish(&buf).map(|_| 1).or_else(closed)
                }
            }?
        };
        if outcome == 0 {
            if a.retry_closed && !ring.is_deleted() {
                check_refusal(&p, seq, a.report_refusals, &mut reported)?;
                retries += 1;
                std::thread::yield_now();
                continue;
            }
            break;
        }
        seq += outcome;
        reported = false;
        if !started {
            started = true;
            println!("started");
        }
        if a.idle_every > 0 && seq >= next_idle && (forever || seq < a.count) {
            await_idle(&ring, a.await_parked)?;
            if a.pause_us > 0 {
                std::thread::sleep(Duration::from_micros(a.pause_us));
            }
            idles += 1;
            while next_idle <= seq {
                next_idle += a.idle_every;
            }
        }
    }
    if !forever && seq != a.count {
        bail!("ring closed after {seq} of {} events", a.count);
    }
    let s = p.stats();
    println!(
        "done published={seq} tombstones={tombstones} refused={} stats_published={} \
         stats_tombstoned={} parks={} late_wakeups={} net_wakeups={} idles={idles} \
         retries={retries}",
        s.refused, s.published, s.tombstoned, s.parks, s.late_wakeups, s.net_wakeups
    );
    Ok(())
}

/// `publish_timeout` until it publishes: 1 if published, 0 if the ring closed.
fn publish_timeout(p: &mut Producer, bytes: &[u8]) -> anyhow::Result<u64> {
    loop {
        match p.publish_timeout(bytes, Duration::from_millis(1)) {
            Ok(_) => return Ok(1),
            Err(TryPublishError::Timeout | TryPublishError::Full) => continue,
            Err(e) => return try_closed(e),
        }
    }
}
