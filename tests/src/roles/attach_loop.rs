//! `attach-loop`: attach an anonymous consumer while a single producer (id 0, the only one
//! the ring ever had, so its sequence equals the ring sequence) keeps publishing; take
//! `--events` events; detach; repeat `--rounds` times.
//!
//! A required consumer must see the contiguous run of ring sequences starting exactly at
//! the position `attach` returned (nothing published after the attach is missed), each
//! payload intact (no slot overwritten under it). An optional consumer may be lapped: its
//! sequences must increase, its payloads must be intact (the seqlock copy), and its
//! counters must account for every sequence it walked past:
//! `delivered + skipped + dropped_behind == next - start`.
//!
//! `--name` attaches a durable consumer under that name each round instead: a required one
//! must resume exactly where the previous round detached, an optional one at or after it
//! (its gap counted as dropped); the last round unsubscribes. `--wait` waits with that
//! strategy between empty polls instead of yielding.
//!
//! Prints `round i start=S first=F delivered=D dropped=X` per round and `done rounds=R`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shmring::ConsumerOptions;
use shmring_testkit::payload::decode;

use super::{RingArgs, Size, Wait};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
    /// Attach/detach rounds.
    #[arg(long)]
    rounds: u32,
    /// Events to take per round.
    #[arg(long)]
    events: u64,
    /// Attach optional consumers.
    #[arg(long)]
    optional: bool,
    /// Attach a durable consumer under this name each round (the last round unsubscribes,
    /// freeing the entry). A required one must resume exactly where the previous round
    /// detached; an optional one resumes at the head and counts the gap as dropped.
    #[arg(long)]
    name: Option<String>,
    /// Wait with this strategy between empty polls (`Consumer::wait`); without it, yield.
    #[arg(long)]
    wait: Option<Wait>,
    /// Expected event size (bytes or `max`).
    #[arg(long)]
    size: Size,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ring = a.ring.open()?;
    let len = a.size.resolve(&ring);
    println!("ready");
    // Shorter than the parent's 60 s watchdog, so the parent sees this error, not a kill.
    let deadline = Instant::now() + Duration::from_secs(50);
    // Where the previous round's durable consumer detached.
    let mut detached_at: Option<u64> = None;
    for round in 0..a.rounds {
        let mut opts = match &a.name {
            Some(n) => ConsumerOptions::durable(n.clone()),
            None => ConsumerOptions::anonymous(),
        };
        if a.optional {
            opts = opts.optional();
        }
        if let Some(w) = a.wait {
            opts = opts.wait(w.strategy());
        }
        let mut c = ring.consumer(opts).context("attaching")?;
        let start = c.next_sequence();
        // A durable consumer's counters carry over from its earlier rounds.
        let s0 = c.stats();
        if let Some(prev) = detached_at {
            if !a.optional && start != prev {
                bail!("round {round}: durable required consumer resumed at {start}, detached at {prev}");
            }
            if a.optional && (start < prev || s0.dropped_behind < start - prev) {
                bail!(
                    "round {round}: durable optional consumer detached at {prev}, resumed at \
                     {start} with {} dropped in all",
                    s0.dropped_behind
                );
            }
        }
        let mut expect = start;
        let mut first = None;
        let mut seen = 0u64;
        let mut violation = None;
        while seen < a.events && violation.is_none() {
            if Instant::now() > deadline {
                bail!(
                    "round {round}: {seen} of {} events at the deadline",
                    a.events
                );
            }
            let n = c.poll_once(|ev| {
                if violation.is_some() {
                    return;
                }
                let r = ev.sequence();
                first.get_or_insert(r);
                seen += 1;
                let problem = if r < expect || (r > expect && !a.optional) {
                    Some(format!("ring sequence {r}, expected {expect}"))
                } else if ev.bytes().len() != len {
                    Some(format!("ring sequence {r}: {} bytes", ev.bytes().len()))
                } else {
                    match decode(ev.bytes()) {
                        Err(e) => Some(format!("ring sequence {r}: {e}")),
                        Ok(o) if o.producer != 0 || o.seq != r => {
                            Some(format!("ring sequence {r} carries {o:?}"))
                        }
                        Ok(_) => None,
                    }
                };
                violation = problem;
                expect = r + 1;
            })?;
            if n == 0 {
                match a.wait {
                    Some(_) => {
                        c.wait()?;
                    }
                    None => std::thread::yield_now(),
                }
            }
        }
        if let Some(v) = violation {
            bail!("round {round} (attached at {start}): {v}");
        }
        let s1 = c.stats();
        let (delivered, skipped, dropped) = (
            s1.delivered - s0.delivered,
            s1.skipped - s0.skipped,
            s1.dropped_behind - s0.dropped_behind,
        );
        let walked = c.next_sequence() - start;
        if delivered + skipped + dropped != walked {
            bail!(
                "round {round}: delivered {delivered} + skipped {skipped} + dropped {dropped} \
                 != {walked} sequences walked ({start}..{})",
                c.next_sequence()
            );
        }
        if delivered != seen {
            bail!("round {round}: stats say {delivered} delivered, handler saw {seen}");
        }
        println!(
            "round {round} start={start} first={} delivered={delivered} dropped={dropped}",
            first.unwrap_or(start),
        );
        if a.name.is_some() {
            detached_at = Some(c.next_sequence());
        }
        if round + 1 == a.rounds {
            // The last round forgets a durable name: nothing is left gating.
            c.unsubscribe();
        }
    }
    println!("done rounds={}", a.rounds);
    Ok(())
}
