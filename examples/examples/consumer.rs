//! Quickstart, terminal 1: receive the events of the ring "quickstart".
//!
//! ```text
//! cargo run --release -p shmring-examples --example consumer            # terminal 1, first
//! cargo run --release -p shmring-examples --example producer            # terminal 2
//! cargo run --release -p shmring-examples --example consumer -- 5000000 # expect 5 M events
//! ```
//!
//! Argument: `[EXPECTED]` (default 1,000,000, or `$QUICKSTART_COUNT`). The consumer stops
//! once it has received that many events, or the producer's last event (it carries a flag),
//! or the ring is stopped or removed.
//!
//! It attaches as the durable consumer "quickstart-reader": required (producers wait for it
//! rather than overwrite what it has not read) and named (run it again and it resumes from
//! the last batch it committed, even after a crash or a Ctrl-C). Its entry stays in the ring
//! after it exits: a producer that runs while it is away fills the ring and then waits for it.
//! `cargo run --release -p shmring-examples --example producer -- --remove` deletes the ring.

use std::cell::Cell;
use std::error::Error;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shmring::{names, ConsumerOptions, PollError, Ring, RunExit};
use shmring_examples::{
    finish, note, ring_config, say, stop_on_ctrl_c, Tick, DEFAULT_COUNT, FLAG_LAST, READER, RING,
};

/// Idle this long at a claimed but unpublished sequence before saying so.
const STUCK_HINT: Duration = Duration::from_secs(2);
const USAGE: &str = "usage: consumer [EXPECTED]";

fn main() -> ExitCode {
    finish(run())
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        say!("{USAGE}");
        return Ok(());
    }
    let env_count = std::env::var("QUICKSTART_COUNT").ok();
    let expected = match args.first().or(env_count.as_ref()) {
        Some(s) => s
            .replace('_', "")
            .parse::<u64>()
            .map_err(|_| format!("EXPECTED must be a whole number, got {s:?}\n{USAGE}"))?,
        None => DEFAULT_COUNT,
    };

    let interrupted = stop_on_ctrl_c()?;
    let namespace = names::default_namespace();
    let ring = Ring::open_or_create(&namespace, RING, &ring_config())?;
    let mut consumer = ring.consumer(ConsumerOptions::durable(READER))?;
    let backlog = ring.head().saturating_sub(consumer.next_sequence());
    say!(
        "consumer {READER:?} attached to {} at sequence {} ({backlog} waiting); expecting {expected} events",
        ring.path().display(),
        consumer.next_sequence(),
    );

    // The handler and the stop predicate share these (both run on this thread).
    let received = Cell::new(0u64);
    let end_of_batch = Cell::new(0u64);
    let out_of_order = Cell::new(0u64);
    let malformed = Cell::new(0u64);
    let last_id = Cell::new(None::<u64>);
    let saw_last = Cell::new(false);
    let first_at = Cell::new(None::<Instant>);
    let last_at = Cell::new(None::<Instant>);

    let handler = |ev: shmring::Event<'_>| {
        if first_at.get().is_none() {
            first_at.set(Some(Instant::now()));
        }
        received.set(received.get() + 1);
        // Zero-copy: `view` borrows the payload in place (the slot cannot be overwritten
        // while this required consumer has not committed past it).
        match ev.view::<Tick>() {
            Some(tick) => {
                // Ids count up from 0 per producer run; a 0 starts a new run.
                if tick.id != 0 && last_id.get().is_some_and(|prev| tick.id != prev + 1) {
                    out_of_order.set(out_of_order.get() + 1);
                }
                last_id.set(Some(tick.id));
                if tick.flags & FLAG_LAST != 0 {
                    saw_last.set(true);
                }
            }
            None => malformed.set(malformed.get() + 1),
        }
        if ev.is_end_of_batch() {
            // The end-of-batch edge: where a real consumer would flush what it buffered.
            end_of_batch.set(end_of_batch.get() + 1);
            last_at.set(Some(Instant::now()));
        }
    };
    // `run` calls this after every batch and every idle step. Besides stopping, it notices
    // a consumer stuck at a sequence that was claimed but never published (the clock is
    // read only while idle, where it costs nothing).
    let (mut idle_since, mut last_count, mut hinted) = (None::<Instant>, 0u64, false);
    let stop = || {
        let n = received.get();
        if n >= expected || saw_last.get() || interrupted.load(Ordering::Relaxed) {
            return true;
        }
        if n != last_count {
            (last_count, idle_since) = (n, None);
        } else if !hinted && idle_since.get_or_insert_with(Instant::now).elapsed() > STUCK_HINT {
            hinted = hint_if_stuck(&ring);
        }
        false
    };

    let why = match consumer.run(handler, stop) {
        Ok(RunExit::Stopped) if saw_last.get() => "the producer's last event arrived",
        Ok(RunExit::Stopped) if interrupted.load(Ordering::Relaxed) => {
            "interrupted (Ctrl-C): detaching, the next run resumes here"
        }
        Ok(RunExit::Stopped) => "the expected count arrived",
        Ok(RunExit::Closed) => "the ring was stopped and is drained",
        Err(PollError::Deleted) => "the ring was removed",
        Err(e) => return Err(e.into()),
    };

    let n = received.get();
    let secs = match (first_at.get(), last_at.get()) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    say!("stopped: {why}");
    say!(
        "received {n} events in {secs:.3} s: {:.1} M events/s",
        if secs > 0.0 {
            n as f64 / secs / 1e6
        } else {
            0.0
        },
    );
    say!(
        "end-of-batch edges: {} (average batch {:.1} events)",
        end_of_batch.get(),
        n as f64 / end_of_batch.get().max(1) as f64,
    );
    let stats = consumer.stats();
    say!(
        "out of order: {}, not a Tick: {}, tombstones skipped: {}, committed up to sequence {}",
        out_of_order.get(),
        malformed.get(),
        stats.skipped,
        consumer.next_sequence(),
    );
    // Dropping the consumer detaches it; being durable, its entry keeps its position.
    drop(consumer);
    Ok(())
}

/// If this consumer waits at a sequence that a producer claimed but never published, say
/// why and what repairs it. Returns whether it said so.
fn hint_if_stuck(ring: &Ring) -> bool {
    let head = ring.head();
    let info = ring.info();
    let Some(me) = info.consumers.iter().find(|c| c.name == READER) else {
        return false;
    };
    if me.next >= head {
        return false; // nothing claimed beyond us: just no producer right now
    }
    let dead = info
        .producers
        .iter()
        .filter(|p| !shmring::process::is_alive(p.pid, p.start_time))
        .count();
    note!(
        "waiting at sequence {}: it was claimed (the head is at {head}) but has not been \
         published for {} s. Its producer probably died mid-publish ({dead} dead producer \
         entries). The broker repairs such holes: run `cargo run --release -p shmring-broker \
         -- run` and this consumer skips the hole (counted as tombstones skipped).",
        me.next,
        STUCK_HINT.as_secs(),
    );
    true
}
