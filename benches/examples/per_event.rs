//! The per-event path, in one thread, for an instruction profile: publish `N` 8-byte events
//! into a single- or multi-producer ring (or a fixed-size ring: `per_event fixed`; or a ring of
//! sized events: `per_event sized`; or a multi-producer ring with a second producer attached
//! and idle, so that every claim goes through the claim counter instead of claiming alone:
//! `per_event shared`) and deliver them with `poll_once`, 256 at a time
//! (`per_event single N 1`: one at a time, as a consumer that keeps up sees them;
//! `per_event single N 256 publisher`: each burst published through a `Publisher`).
//!
//! ```sh
//! cargo build --release -p shmring-benches --example per_event
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     --toggle-collect='*Producer::publish*' target/release/examples/per_event single
//! callgrind_annotate /tmp/cg.out | head   # instructions in publish; divide by N
//! ```
//!
//! `--toggle-collect='*Consumer::poll_once*'` counts delivery (divide by N for instructions
//! per delivered event). `publish` is inlined into the loop: its count is the whole run's
//! less a run with `N = 0` (`per_event single 0`) and less the delivery, divided by N.

use shmring::{ConsumerOptions, ProducerMode, Ring, RingConfig};

/// Events published and delivered (the second argument overrides it).
const N: u64 = 1_000_000;
/// Events published between two polls (the third argument overrides it: 1 profiles a
/// consumer that keeps up, one event per poll).
const BURST: u64 = 256;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let form = std::env::args().nth(1);
    let mode = match form.as_deref() {
        Some("multi" | "shared") => ProducerMode::Multi,
        _ => ProducerMode::Single,
    };
    // `fixed`: a single producer on a fixed-size ring of 8-byte events; `sized`: on a ring
    // of sized events of up to 8 bytes.
    let event_size = (form.as_deref() == Some("fixed")).then_some(8);
    let max_event_size = (form.as_deref() == Some("sized")).then_some(8);
    let n: u64 = match std::env::args().nth(2) {
        Some(a) => a.parse()?,
        None => N,
    };
    let burst: u64 = match std::env::args().nth(3) {
        Some(a) => a.parse::<u64>()?.clamp(1, 2048),
        None => BURST,
    };
    let ns = format!("per-event-{}", std::process::id());
    let config = RingConfig {
        capacity: 4096,
        slot_size: 64,
        producer_mode: mode,
        event_size,
        max_event_size,
        ..RingConfig::default()
    };
    let ring = Ring::create(&ns, "r", &config)?;
    let mut c = ring.consumer(ConsumerOptions::anonymous().batch_cap(256))?;
    // `shared`: the idle second producer, attached first, keeps the other from claiming alone
    // (it takes the line alone itself at its attach, and the other's first claim ends that).
    let idle = (form.as_deref() == Some("shared"))
        .then(|| ring.producer())
        .transpose()?;
    let mut p = ring.producer()?;
    let mut sum = 0u64;
    let mut sent = 0u64;
    // `publisher` as the fourth argument: each burst through a `Publisher`.
    let through_publisher = std::env::args().nth(4).as_deref() == Some("publisher");
    while sent < n {
        if through_publisher {
            // The count in a local of the closure, as `sent` is in the other loop (a
            // captured `sent` would be stored to memory per event).
            sent = p.publisher(|w| {
                let mut s = sent;
                for _ in 0..burst {
                    w.publish(&s.to_le_bytes())?;
                    s += 1;
                }
                Ok::<_, shmring::PublishError>(s)
            })?;
        } else {
            for _ in 0..burst {
                p.publish(&sent.to_le_bytes())?;
                sent += 1;
            }
        }
        while c.poll_once(|ev| sum = sum.wrapping_add(ev.sequence()))? > 0 {}
    }
    std::hint::black_box(sum);
    drop((c, p, idle));
    Ring::remove(&ns, "r")?;
    std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
    println!("{mode:?} (event size {event_size:?}): {n} events published and delivered");
    Ok(())
}
