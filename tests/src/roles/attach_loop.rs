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
//! Prints `round i start=S first=F delivered=D dropped=X` per round and `done rounds=R`.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shmring::ConsumerOptions;
use shmring_tests::payload::decode;

use super::{RingArgs, Size};

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
    for round in 0..a.rounds {
        let mut opts = ConsumerOptions::anonymous();
        if a.optional {
            opts = opts.optional();
        }
        let mut c = ring.consumer(opts).context("attaching")?;
        let start = c.next_sequence();
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
                std::thread::yield_now();
            }
        }
        if let Some(v) = violation {
            bail!("round {round} (attached at {start}): {v}");
        }
        let s = c.stats();
        let walked = c.next_sequence() - start;
        if s.delivered + s.skipped + s.dropped_behind != walked {
            bail!(
                "round {round}: delivered {} + skipped {} + dropped {} != {walked} sequences \
                 walked ({start}..{})",
                s.delivered,
                s.skipped,
                s.dropped_behind,
                c.next_sequence()
            );
        }
        if s.delivered != seen {
            bail!(
                "round {round}: stats say {} delivered, handler saw {seen}",
                s.delivered
            );
        }
        println!(
            "round {round} start={start} first={} delivered={} dropped={}",
            first.unwrap_or(start),
            s.delivered,
            s.dropped_behind
        );
    }
    println!("done rounds={}", a.rounds);
    Ok(())
}
