//! `lifecycle-storm`: stop, start and drain one ring `--rounds` times, in an order drawn
//! from `--seed`, racing whoever else does the same from other processes.
//!
//! Each operation's outcome must be one the ring's lifecycle allows: a stop returns the stop
//! sequence (never below one returned before: the line only moves forward), a start returns
//! a run number or says the ring is already running, a drain stops and either drains,
//! times out naming the consumers behind, or says another request changed the ring under
//! it. Anything else (a corrupt state, a deleted ring, a
//! busy owner that never finishes) is a violation. Leaves the ring running at the end, and
//! prints `done stops=.. starts=.. drains=.. already_running=.. drain_timeouts=..
//! drains_interrupted=.. max_stop=..`.

use anyhow::bail;
use shmring::LifecycleError;

use super::RingArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
    /// Operations to run.
    #[arg(long)]
    rounds: u64,
    /// Seed of the order of operations and the pauses between them.
    #[arg(long)]
    seed: u64,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ring = a.ring.open()?;
    println!("ready pid={}", std::process::id());
    let mut rng = a.seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut stops, mut starts, mut drains, mut already, mut timeouts, mut interrupted) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut max_stop = 0u64;
    for round in 0..a.rounds {
        let stopped_at = match next() % 3 {
            0 => {
                stops += 1;
                Some(ring.stop())
            }
            1 => {
                match ring.start() {
                    Ok(_) => starts += 1,
                    Err(LifecycleError::AlreadyRunning) => already += 1,
                    Err(e) => bail!("round {round}: start: {e}"),
                }
                None
            }
            _ => {
                drains += 1;
                match ring.drain(std::time::Duration::from_millis(5)) {
                    Err(LifecycleError::DrainTimeout { stop_seq, .. }) => {
                        timeouts += 1;
                        Some(Ok(stop_seq))
                    }
                    // The other process started (or stopped) the ring while this drain
                    // waited: its stop sequence still counts.
                    Err(LifecycleError::DrainInterrupted { stop_seq, .. }) => {
                        interrupted += 1;
                        Some(Ok(stop_seq))
                    }
                    other => Some(other),
                }
            }
        };
        if let Some(result) = stopped_at {
            match result {
                Ok(stop) if stop >= max_stop => max_stop = stop,
                Ok(stop) => {
                    bail!("round {round}: stopped at {stop}, below an earlier stop at {max_stop}")
                }
                Err(e) => bail!("round {round}: {e}"),
            }
        }
        // Pacing (not synchronisation): a pause of nothing to 200 µs between operations,
        // so the publishers run between them.
        match next() % 4 {
            0 => {}
            1 => std::thread::yield_now(),
            _ => std::thread::sleep(std::time::Duration::from_micros(next() % 200)),
        }
    }
    match ring.start() {
        Ok(_) | Err(LifecycleError::AlreadyRunning) => {}
        Err(e) => bail!("final start: {e}"),
    }
    println!(
        "done stops={stops} starts={starts} drains={drains} already_running={already} \
         drain_timeouts={timeouts} drains_interrupted={interrupted} max_stop={max_stop}"
    );
    Ok(())
}
