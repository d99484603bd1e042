//! `ping-pong`: one side of a park/wake ping-pong over two rings, for the lost-wake-up test.
//!
//! ```text
//! ping process                                 pong process
//! producer on --out ─── event i ─────────────> Blocking consumer on --out
//! Blocking consumer on --back <── echo of i ── producer on --back
//! ```
//!
//! Both consumers are `Blocking`: whenever a ring is empty the waiting side parks on the
//! futex at once, so every hand-off races a publish against a park. Before each hand-off a
//! side waits a random gap (`--max-gap-us`): none at all, a few spin iterations, up to 5 µs,
//! or up to the maximum, busy-waited on the monotonic clock (no scheduler in the gap). Gaps
//! near zero put the publish inside the other side's park sequence, where a missing fence
//! loses the wake-up; the longer ones let the other side reach the futex first.
//!
//! Checks per event: the payload decodes and carries the next sequence (ping: the echo of
//! the event it just sent, exactly one). Prints `ready` once both handles are attached and
//! at the end `done side=.. cycles=N wakeups=W late_wakeups=L net_wakeups=X elapsed_ms=T`,
//! the consumer's counters: `wakeups` are returns from a futex park by a wake,
//! `late_wakeups` returns by a timeout after the other side moved the wake line (a wake that
//! came late or never arrived), `net_wakeups` returns by the 50 ms net while an event was
//! waiting (lost wake-ups).
//!
//! `--no-wake` (ping only) is the control that shows the count can fail: ping waits until
//! pong's consumer shows as parked, then publishes with `publish_without_wake_check`, which
//! skips the waiter check, so pong can only wake by its net.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shmring::{Consumer, ConsumerOptions, Producer, Ring, WaitOutcome, WaitStrategy};
use shmring_testkit::payload::{decode, encode_into, Origin};

/// Which end of the ping-pong.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Publish event i on `--out`, wait for its echo on `--back`, repeat.
    Ping,
    /// Echo every event of `--out` onto `--back`.
    Pong,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Namespace of both rings.
    #[arg(long)]
    ns: String,
    #[arg(long, value_enum)]
    side: Side,
    /// The ring pings travel on (ping publishes, pong consumes).
    #[arg(long)]
    out: String,
    /// The ring echoes travel on (pong publishes, ping consumes).
    #[arg(long)]
    back: String,
    /// Round trips.
    #[arg(long)]
    cycles: u64,
    /// Longest gap before a hand-off, in µs.
    #[arg(long, default_value_t = 50)]
    max_gap_us: u64,
    /// Seed of the gap generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Give up after this many seconds (shorter than the parent's 60 s watchdog).
    #[arg(long, default_value_t = 50)]
    deadline_secs: u64,
    /// Ping only: wait for pong to park, then publish without waking it (a control).
    #[arg(long)]
    no_wake: bool,
}

/// xorshift64: the gaps need to be varied, not good.
struct Gaps {
    state: u64,
    max: Duration,
}

impl Gaps {
    fn new(seed: u64, max_us: u64) -> Self {
        Self {
            state: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            max: Duration::from_micros(max_us),
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    /// Wait one random gap: a quarter none, a quarter 0..64 spins, a quarter up to 5 µs, a
    /// quarter up to the maximum.
    fn wait(&mut self) {
        let r = self.next();
        let upto = match r & 3 {
            0 => return,
            1 => {
                for _ in 0..(r >> 8) % 64 {
                    std::hint::spin_loop();
                }
                return;
            }
            2 => Duration::from_micros(5).min(self.max),
            _ => self.max,
        };
        let ns = upto.as_nanos() as u64;
        if ns == 0 {
            return;
        }
        let gap = Duration::from_nanos((r >> 8) % ns);
        let t = Instant::now();
        while t.elapsed() < gap {
            std::hint::spin_loop();
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let open = |name: &str| {
        Ring::open(&a.ns, name).with_context(|| format!("opening ring {name} in {}", a.ns))
    };
    let (out, back) = (open(&a.out)?, open(&a.back)?);
    let blocking = || ConsumerOptions::anonymous().wait(WaitStrategy::Blocking);
    // Each side attaches its consumer before its producer, and says `ready` after both:
    // the parent starts ping only once pong is ready, so nothing is published before the
    // consumer that must see it is attached.
    let (c, p) = match a.side {
        Side::Ping => (back.consumer(blocking())?, out.producer()?),
        Side::Pong => (out.consumer(blocking())?, back.producer()?),
    };
    println!("ready");
    let deadline = Instant::now() + Duration::from_secs(a.deadline_secs);
    let gaps = Gaps::new(a.seed, a.max_gap_us);
    let start = Instant::now();
    let c = match a.side {
        Side::Ping => ping(&a, &out, c, p, gaps, deadline)?,
        Side::Pong => pong(&a, c, p, gaps, deadline)?,
    };
    let s = c.stats();
    println!(
        "done side={:?} cycles={} wakeups={} late_wakeups={} net_wakeups={} elapsed_ms={}",
        a.side,
        s.delivered,
        s.wakeups,
        s.late_wakeups,
        s.net_wakeups,
        start.elapsed().as_millis()
    );
    Ok(())
}

fn ping(
    a: &Args,
    out: &Ring,
    mut c: Consumer,
    mut p: Producer,
    mut gaps: Gaps,
    deadline: Instant,
) -> anyhow::Result<Consumer> {
    let mut buf = [0u8; 8];
    for i in 0..a.cycles {
        encode_into(
            &mut buf,
            Origin {
                producer: 0,
                seq: i,
            },
        );
        if a.no_wake {
            while !out.info().consumers.iter().any(|c| c.parked) {
                if Instant::now() > deadline {
                    bail!("pong never parked before ping {i}");
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            p.publish_without_wake_check(&buf)
                .context("publishing a ping")?;
        } else {
            gaps.wait();
            p.publish(&buf).context("publishing a ping")?;
        }
        let mut echo = None;
        let mut n = 0;
        while n == 0 {
            if Instant::now() > deadline {
                bail!("no echo of ping {i} by the deadline");
            }
            match c.wait()? {
                WaitOutcome::Ready => {}
                other => bail!("waiting for the echo of {i}: {other:?}"),
            }
            n = c.poll_once(|ev| echo = Some(decode(ev.bytes())))?;
        }
        match echo {
            Some(Ok(o)) if n == 1 && o.seq == i => {}
            other => bail!("ping {i}: {n} events back, the last {other:?}"),
        }
    }
    Ok(c)
}

fn pong(
    a: &Args,
    mut c: Consumer,
    mut p: Producer,
    mut gaps: Gaps,
    deadline: Instant,
) -> anyhow::Result<Consumer> {
    let next = Cell::new(0u64);
    let violation = RefCell::new(None::<String>);
    c.run(
        |ev| {
            if violation.borrow().is_some() {
                return;
            }
            let i = next.get();
            let problem = match decode(ev.bytes()) {
                Ok(o) if o.seq == i => {
                    gaps.wait();
                    p.publish(ev.bytes())
                        .err()
                        .map(|e| format!("echoing {i}: {e}"))
                }
                Ok(o) => Some(format!("expected ping {i}, got {o:?}")),
                Err(e) => Some(format!("ping {i}: {e}")),
            };
            *violation.borrow_mut() = problem;
            next.set(i + 1);
        },
        || next.get() == a.cycles || violation.borrow().is_some() || Instant::now() > deadline,
    )?;
    if let Some(v) = violation.into_inner() {
        bail!("{v}");
    }
    if next.get() != a.cycles {
        bail!("{} of {} pings by the deadline", next.get(), a.cycles);
    }
    Ok(c)
}
