//! `worker`: attach a member of a worker group and print every event it is handed.
//!
//! Prints `ready index=I` after attaching, `ev <ring seq>` per event from inside the
//! handler (so a parent that SIGKILLs this process knows what it was handed), and at the
//! end `done delivered=.. redelivered=..`. Ends when the ring is stopped and this member
//! has delivered everything it holds.
//!
//! `--hang-after N` blocks forever inside the handler of the N-th event, after printing
//! its `ev` line and `hang ring_seq=R`: the member's claim is never finished.

use anyhow::Context;
use shmring::{ConsumerOptions, PollError, RunExit};

use super::{RingArgs, Wait};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
    /// The group's name.
    #[arg(long)]
    group: String,
    #[arg(long, default_value_t = 1)]
    batch_cap: usize,
    #[arg(long, default_value_t = Wait::Block)]
    wait: Wait,
    /// Block forever inside the handler of the N-th event.
    #[arg(long)]
    hang_after: Option<u64>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ring = a.ring.open()?;
    let mut c = ring
        .consumer(
            ConsumerOptions::worker(a.group.as_str())
                .batch_cap(a.batch_cap)
                .wait(a.wait.strategy()),
        )
        .context("attaching the worker")?;
    println!("ready index={}", c.index());
    let mut handed = 0u64;
    let exit = c.run(
        |ev| {
            handed += 1;
            println!("ev {}", ev.sequence());
            if Some(handed) == a.hang_after {
                println!("hang ring_seq={}", ev.sequence());
                loop {
                    // Until SIGKILL (or the watchdog): this claim is never finished.
                    std::thread::park();
                }
            }
        },
        || false,
    );
    match exit {
        Ok(RunExit::Closed) => {}
        Ok(RunExit::Stopped) => anyhow::bail!("stopped without a stop predicate"),
        Err(e @ PollError::HandlerPanicked { .. }) => return Err(e).context("handler"),
        Err(e) => return Err(e).context("run"),
    }
    let s = c.stats();
    println!(
        "done delivered={} redelivered={}",
        s.delivered, s.redelivered
    );
    Ok(())
}
