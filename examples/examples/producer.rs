//! Quickstart, terminal 2: publish events into the ring "quickstart".
//!
//! ```text
//! cargo run --release -p shmring-examples --example consumer                  # terminal 1, first
//! cargo run --release -p shmring-examples --example producer                  # terminal 2
//! cargo run --release -p shmring-examples --example producer -- 5000000 100   # 5 M events, batches of 100
//! cargo run --release -p shmring-examples --example producer -- --remove      # delete the ring
//! ```
//!
//! Arguments: `[COUNT] [BATCH]` (default 1,000,000 events, one publish each), or `--remove`.
//! The count can also come from `$QUICKSTART_COUNT`.
//!
//! A full ring makes the producer wait: the consumer's entry is durable and required, so
//! its events are kept for it even while it is not running. One event at a time, the
//! producer waits with `publish_deadline`, which takes no sequence until there is room, so
//! stopping it then (Ctrl-C) leaves nothing behind. `publish_batch` takes its sequences
//! first: stopped while it waits, it leaves a hole that consumers cannot pass until it is
//! repaired (`cargo run --release -p shmring-broker -- run` does that). The ring lives in the default namespace
//! (`$SHMRING_NAMESPACE`, else `default`): `/dev/shm/shmring.<namespace>/quickstart.ring`.
//! Producer and consumer both `open_or_create` it with the same configuration, so either
//! may start first; start the consumer first, or it misses what was published before it.

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use shmring::{names, Ring, TryPublishError};
use shmring_examples::{finish, note, ring_config, say, Tick, DEFAULT_COUNT, FLAG_LAST, RING};

/// How long a publish waits on a full ring before the producer says why it is waiting.
const FULL_NOTICE: Duration = Duration::from_secs(1);
const USAGE: &str = "usage: producer [COUNT] [BATCH]   or   producer --remove";

fn main() -> ExitCode {
    finish(run())
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let namespace = names::default_namespace();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        say!("{USAGE}");
        return Ok(());
    }
    if args.iter().any(|a| a == "--remove") {
        Ring::remove(&namespace, RING)?;
        say!("removed ring {RING:?} from namespace {namespace:?}");
        return Ok(());
    }
    let env_count = std::env::var("QUICKSTART_COUNT").ok();
    let count = match args.first().or(env_count.as_ref()) {
        Some(s) => parse_number(s, "COUNT")?,
        None => DEFAULT_COUNT,
    };
    let batch = match args.get(1) {
        Some(s) => parse_number(s, "BATCH")?.max(1),
        None => 1,
    };

    let ring = Ring::open_or_create(&namespace, RING, &ring_config())?;
    if batch > ring.capacity() / 2 {
        return Err(format!(
            "BATCH {batch} is above the ring's limit of {}",
            ring.capacity() / 2
        )
        .into());
    }
    let mut producer = ring.producer()?;
    explain_consumers(&ring)?;
    say!(
        "publishing {count} events of {} bytes into {} (batch {batch})",
        std::mem::size_of::<Tick>(),
        ring.path().display(),
    );

    let start = Instant::now();
    let mut buf: Vec<Tick> = Vec::with_capacity(batch as usize);
    let mut id = 0u64;
    // A clock read costs about as much as a publish: read it once every 1024 events, for
    // the timestamp and for the deadline of the bounded publish below.
    let (mut timestamp_ns, mut deadline, mut next_clock_read) = (0u64, start, 0u64);
    let mut told_full = false;
    while id < count {
        let n = batch.min(count - id);
        if id >= next_clock_read {
            let now = Instant::now();
            timestamp_ns = (now - start).as_nanos() as u64;
            deadline = now + FULL_NOTICE;
            next_clock_read = id + 1024;
        }
        buf.clear();
        buf.extend((id..id + n).map(|i| Tick {
            id: i,
            timestamp_ns,
            price: 100.0 + (i % 1000) as f64 * 0.01,
            qty: (i % 100) as u32 + 1,
            flags: if i + 1 == count { FLAG_LAST } else { 0 },
        }));
        if n == 1 {
            // A bounded publish waits for room *before* it takes a sequence, so a producer
            // stopped while the ring is full (Ctrl-C) leaves nothing half-published.
            let bytes = bytemuck::bytes_of(&buf[0]);
            loop {
                match producer.publish_deadline(bytes, deadline) {
                    Ok(_) => break,
                    Err(TryPublishError::Timeout) => {
                        if !told_full {
                            note!(
                                "the ring is full: waiting for its required consumers \
                                 (start the consumer example if it is not running)"
                            );
                            told_full = true;
                        }
                        deadline = Instant::now() + FULL_NOTICE;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        } else {
            // `publish_batch` takes byte slices: view the Ticks as [u8; 32] arrays. It takes
            // its sequences first and then waits for room: stopped while it waits, it leaves
            // a hole that consumers cannot pass until it is repaired (`broker run` does).
            let bytes: &[[u8; std::mem::size_of::<Tick>()]] = bytemuck::cast_slice(&buf);
            producer.publish_batch(bytes)?;
        }
        id += n;
    }
    let elapsed = start.elapsed();

    let stats = producer.stats();
    say!(
        "published {} events in {:.3} s: {:.1} M events/s",
        stats.published,
        elapsed.as_secs_f64(),
        stats.published as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6,
    );
    Ok(())
}

/// Tell the user what will happen to the events, from who is attached.
fn explain_consumers(ring: &Ring) -> std::io::Result<()> {
    let info = ring.info();
    if info.consumers.is_empty() {
        say!(
            "note: no consumer is attached, so nobody receives these events; start \
             `cargo run --release -p shmring-examples --example consumer` first"
        );
    }
    for c in info.consumers.iter().filter(|c| c.state != "ACTIVE") {
        say!(
            "note: consumer {:?} is {} with {} events waiting for it{}",
            c.name,
            c.state,
            c.lag,
            if c.required {
                ": it is required, so once the ring is full this producer waits until it \
                 re-attaches (start the consumer example)"
            } else {
                ""
            },
        );
    }
    Ok(())
}

fn parse_number(s: &str, what: &str) -> Result<u64, String> {
    s.replace('_', "")
        .parse()
        .map_err(|_| format!("{what} must be a whole number, got {s:?}\n{USAGE}"))
}
