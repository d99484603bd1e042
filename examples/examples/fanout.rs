//! Multi-producer fan-out across processes: 2 producer processes publish into one
//! multi-producer ring, 2 consumer processes each receive every event.
//!
//! ```text
//! cargo run --release -p shmring-examples --example fanout              # 1,000,000 events per producer
//! cargo run --release -p shmring-examples --example fanout -- 5000000   # 5 M per producer
//! ```
//!
//! The parent creates a ring of its own (`fanout-<pid>` in the default namespace), starts
//! this same program twice as a consumer and waits until both are attached (a consumer
//! starts at the head: it sees what is published after it attached), then starts it twice
//! as a producer. Each consumer checks that every producer's events arrive complete and in
//! that producer's order, and prints its totals; the parent prints them and removes the
//! ring. Children are found with `std::env::current_exe()` and a role argument.

use std::error::Error;
use std::time::{Duration, Instant};

use shmring::{names, ConsumerOptions, ProducerMode, Ring, RingConfig, WaitOutcome};
use shmring_examples::{say, Children};

const PRODUCERS: u32 = 2;
const CONSUMERS: u32 = 2;
const DEFAULT_PER_PRODUCER: u64 = 1_000_000;
/// The parent gives up (and kills the children) after this long.
const WATCHDOG: Duration = Duration::from_secs(120);
const USAGE: &str = "usage: fanout [EVENTS_PER_PRODUCER]";

/// One event: which producer, its own counter, and a value the consumers sum as a checksum.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Event {
    producer: u32,
    _pad: u32,
    seq: u64,
    value: u64,
}

fn value_of(producer: u32, seq: u64) -> u64 {
    seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(producer)
}

fn main() -> std::process::ExitCode {
    shmring_examples::finish(run())
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        // Child roles: fanout <role> <namespace> <ring> <index> <events per producer>.
        Some("producer") => producer(&args[1..]),
        Some("consumer") => consumer(&args[1..]),
        Some("-h" | "--help") => {
            say!("{USAGE}");
            Ok(())
        }
        Some(n) => parent(parse(n, "EVENTS_PER_PRODUCER")?),
        None => parent(DEFAULT_PER_PRODUCER),
    }
}

fn parse(s: &str, what: &str) -> Result<u64, String> {
    s.replace('_', "")
        .parse()
        .map_err(|_| format!("{what} must be a whole number, got {s:?}\n{USAGE}"))
}

/// The arguments every child gets.
struct ChildArgs {
    namespace: String,
    ring: String,
    index: u32,
    per_producer: u64,
}

fn child_args(args: &[String]) -> Result<ChildArgs, Box<dyn Error>> {
    let [namespace, ring, index, per_producer] = args else {
        return Err("child roles take: <namespace> <ring> <index> <events per producer>".into());
    };
    Ok(ChildArgs {
        namespace: namespace.clone(),
        ring: ring.clone(),
        index: parse(index, "index")? as u32,
        per_producer: parse(per_producer, "events per producer")?,
    })
}

// ---------------------------------------------------------------------------------------
// Parent

fn parent(per_producer: u64) -> Result<(), Box<dyn Error>> {
    let namespace = names::default_namespace();
    let ring_name = format!("fanout-{}", std::process::id());
    let dir = names::namespace_dir(&namespace)?;
    let dir_existed = dir.exists();
    let config = RingConfig {
        capacity: 4096,
        slot_size: 64,
        max_consumers: CONSUMERS,
        max_producers: PRODUCERS,
        producer_mode: ProducerMode::Multi,
        ..RingConfig::default()
    };
    // Before the ring exists: from here a Ctrl-C ends the waits, not the process, and the
    // ring is removed.
    let mut children = Children::interruptible()?;
    let ring = Ring::create(&namespace, &ring_name, &config)?;
    // Said once the ring exists, and never before its cleanup below: a stdout that cannot
    // be written ends the run there, and the ring is still removed.
    let said = (|| -> Result<(), Box<dyn Error>> {
        say!(
            "ring {} ({} slots): {PRODUCERS} producer processes x {per_producer} events, \
             {CONSUMERS} consumer processes",
            ring.path().display(),
            config.capacity,
        );
        Ok(())
    })();

    let result = said
        .and_then(|()| run_children(&ring, &mut children, &namespace, &ring_name, per_producer));

    // Clean up whatever happened: the children, the ring, and the namespace directory if we
    // made it.
    children.kill_all();
    drop(ring);
    Ring::remove(&namespace, &ring_name)?;
    if !dir_existed {
        // Fails (harmlessly) if someone else put a ring there meanwhile.
        let _ = std::fs::remove_dir(&dir);
    }
    say!("removed ring {ring_name:?}");
    result
}

fn run_children(
    ring: &Ring,
    children: &mut Children,
    namespace: &str,
    ring_name: &str,
    per_producer: u64,
) -> Result<(), Box<dyn Error>> {
    let args = |role: &str, index: u32| {
        [
            role.to_owned(),
            namespace.to_owned(),
            ring_name.to_owned(),
            index.to_string(),
            per_producer.to_string(),
        ]
    };
    let deadline = Instant::now() + WATCHDOG;

    // Consumers first, and wait until both are attached: a consumer starts at the head.
    for i in 0..CONSUMERS {
        children.spawn(format!("consumer {i}"), &args("consumer", i))?;
    }
    while ring.info().consumers.len() < CONSUMERS as usize {
        children.check_interrupt()?;
        if Instant::now() > deadline || children.any_exited() {
            return Err("the consumer processes did not attach".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let start = Instant::now();
    for i in 0..PRODUCERS {
        children.spawn(format!("producer {i}"), &args("producer", i))?;
    }

    // Wait for every child (with a watchdog), then collect what each printed.
    let mut reports = Vec::new();
    for name in (0..CONSUMERS)
        .map(|i| format!("consumer {i}"))
        .chain((0..PRODUCERS).map(|i| format!("producer {i}")))
    {
        let report = children.finish(&name, deadline)?;
        reports.push((name, report.trim().to_owned()));
    }
    let elapsed = start.elapsed();

    for (name, report) in &reports {
        say!("{name}: {report}");
    }
    let total = per_producer * u64::from(PRODUCERS);
    say!(
        "every consumer received {total} events; {:.1} M events/s per consumer over {:.3} s \
         (process start-up included)",
        total as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6,
        elapsed.as_secs_f64(),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Children

fn producer(args: &[String]) -> Result<(), Box<dyn Error>> {
    let a = child_args(args)?;
    let ring = Ring::open(&a.namespace, &a.ring)?;
    let mut producer = ring.producer()?;
    let start = Instant::now();
    for seq in 0..a.per_producer {
        producer.publish_value(&Event {
            producer: a.index,
            _pad: 0,
            seq,
            value: value_of(a.index, seq),
        })?;
    }
    let secs = start.elapsed().as_secs_f64();
    say!(
        "published {} events in {secs:.3} s ({:.1} M events/s)",
        producer.stats().published,
        producer.stats().published as f64 / secs.max(1e-9) / 1e6,
    );
    Ok(())
}

fn consumer(args: &[String]) -> Result<(), Box<dyn Error>> {
    let a = child_args(args)?;
    let ring = Ring::open(&a.namespace, &a.ring)?;
    // Anonymous and required: it gates the producers, so it never loses an event.
    let mut consumer = ring.consumer(ConsumerOptions::anonymous())?;
    let expected = a.per_producer * u64::from(PRODUCERS);
    let mut next_seq = vec![0u64; PRODUCERS as usize];
    let mut checksum = 0u64;
    let (mut received, mut out_of_order, mut foreign) = (0u64, 0u64, 0u64);
    while received < expected {
        let n = consumer.poll_once(|ev| match ev.read::<Event>() {
            Some(e) if e.producer < PRODUCERS => {
                let next = &mut next_seq[e.producer as usize];
                if e.seq != *next || e.value != value_of(e.producer, e.seq) {
                    out_of_order += 1;
                }
                *next = e.seq + 1;
                checksum = checksum.wrapping_add(e.value);
            }
            _ => foreign += 1,
        })?;
        received += n as u64;
        // Nothing waiting: spin a little, yield, then park until a producer publishes (the
        // default wait strategy). Four processes may share two cores.
        if n == 0 && consumer.wait()? == WaitOutcome::Closed {
            return Err(format!("consumer {}: the ring was stopped early", a.index).into());
        }
    }
    let want: u64 = (0..PRODUCERS)
        .flat_map(|p| (0..a.per_producer).map(move |s| value_of(p, s)))
        .fold(0u64, u64::wrapping_add);
    let per_producer: Vec<String> = next_seq.iter().map(u64::to_string).collect();
    say!(
        "received {received} (per producer {}), out of order {out_of_order}, foreign {foreign}, \
         checksum {}, batches {}",
        per_producer.join(" + "),
        if checksum == want { "ok" } else { "MISMATCH" },
        consumer.stats().batches,
    );
    if out_of_order != 0 || foreign != 0 || checksum != want {
        return Err(format!("consumer {} saw a broken stream", a.index).into());
    }
    Ok(())
}
