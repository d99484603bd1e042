//! `claim-batch`: publish `--before` events, then take a `claim_batch(--n)`, write the first
//! `--written` of its slots and never commit: the process waits (reading stdin) to be
//! killed between `claim_batch` and `commit`.
//!
//! Every event is a little-endian u64: `--first`, `--first + 1`, ... for the published ones,
//! [`UNCOMMITTED`] in the written slots of the batch (a consumer that ever sees it was handed
//! a slot that was never committed). Prints `ready`, then
//! `claimed first=S n=N written=K published=P` once the batch is held.

use std::io::{Read, Write};

use anyhow::{bail, Context};

use super::RingArgs;

/// The value written into the batch's slots that are never committed.
pub const UNCOMMITTED: u64 = 999_999;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
    /// Events published before the batch is claimed.
    #[arg(long, default_value_t = 0)]
    before: u64,
    /// Value of the first published event.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Sequences in the batch.
    #[arg(long)]
    n: usize,
    /// Slots of the batch written before the process blocks.
    #[arg(long, default_value_t = 0)]
    written: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.written > a.n {
        bail!("--written {} is more than the batch of {}", a.written, a.n);
    }
    let ring = a.ring.open()?;
    let mut p = ring.producer().context("attaching the producer")?;
    println!("ready");
    for i in 0..a.before {
        p.publish(&(a.first + i).to_le_bytes())
            .context("publishing before the batch")?;
    }
    let mut batch = p.claim_batch(a.n).context("claiming the batch")?;
    for i in 0..a.written {
        batch
            .write(i, &UNCOMMITTED.to_le_bytes())
            .context("writing a slot of the batch")?;
    }
    println!(
        "claimed first={} n={} written={} published={}",
        batch.first_sequence(),
        a.n,
        a.written,
        a.before
    );
    std::io::stdout().flush()?;
    // Hold the batch until killed. Stdin closed without a kill: leave the claim in flight,
    // as a crash would (no tombstones from the guard's drop).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::mem::forget(batch);
    std::process::exit(0);
}
