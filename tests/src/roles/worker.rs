//! `worker`: attach a member of a worker group and print every event it is handed.
//!
//! Prints `ready index=I` after attaching, `ev <ring seq>` per event from inside the
//! handler (so a parent that SIGKILLs this process knows what it was handed), and at the
//! end `done delivered=.. redelivered=..`. Ends when the ring is stopped and this member
//! has delivered everything it holds.
//!
//! `--hang-after N` blocks forever inside the handler of the N-th event, after printing
//! its `ev` line and `hang ring_seq=R`: the member's claim is never finished.
//!
//! `--after NAME` (repeatable) makes the group read behind the durable consumer NAME
//! (`ConsumerOptions::worker(..).after`), and checks inside the handler of every event,
//! before its `ev` line, that each such upstream's committed position, read from the
//! ring's table, is already past it: a member handed an event too early prints
//! `violation ...` and fails.

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
    /// The group reads behind this durable consumer (repeatable), checked per event.
    #[arg(long)]
    after: Vec<String>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ring = a.ring.open()?;
    let mut c = ring
        .consumer(
            ConsumerOptions::worker(a.group.as_str())
                .batch_cap(a.batch_cap)
                .wait(a.wait.strategy())
                .after(a.after.iter().cloned()),
        )
        .context("attaching the worker")?;
    println!("ready index={}", c.index());
    let mut handed = 0u64;
    let violation = std::cell::RefCell::new(None);
    let exit = c.run(
        |ev| {
            if violation.borrow().is_some() {
                return;
            }
            if let Some(v) = ahead_of_upstream(&ring, &a.after, ev.sequence()) {
                println!("violation {v}");
                *violation.borrow_mut() = Some(v);
                return;
            }
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
        || violation.borrow().is_some(),
    );
    if let Some(v) = violation.into_inner() {
        anyhow::bail!("{v}");
    }
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

/// Why `seq` may not be handed over yet: an upstream in `after` that has not committed past
/// it (its position in the ring's table), or is not in the table at all.
fn ahead_of_upstream(ring: &shmring::Ring, after: &[String], seq: u64) -> Option<String> {
    if after.is_empty() {
        return None;
    }
    let info = ring.info();
    after.iter().find_map(|n| {
        let next = info.consumers.iter().find(|c| &c.name == n).map(|c| c.next);
        next.is_none_or(|next| next <= seq).then(|| {
            format!(
                "ring sequence {seq} handed over before upstream {n:?} committed past it \
                 (its position: {next:?})"
            )
        })
    })
}
