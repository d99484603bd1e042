//! The processes `broker demo` starts: the broker itself, one paced producer, and
//! consumers with a wait strategy each. They are this same binary run as the hidden
//! `demo-role` command, and each dies with the demo (`PR_SET_PDEATHSIG`), so a demo killed
//! outright leaves no process behind.

use std::io::Write;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shmring::{ConsumerOptions, PublishError, Ring, RunExit, WaitStrategy};

/// What a consumer saw, printed as one JSON line when it finishes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Seen {
    /// Its durable name.
    pub name: String,
    /// Its wait strategy.
    pub wait: String,
    /// Events handed to its handler.
    pub events: u64,
    /// Median one-way latency, publish to handler, nanoseconds.
    pub p50_ns: u64,
    /// 99th percentile of the same.
    pub p99_ns: u64,
    /// CPU time it used, seconds.
    pub cpu_s: f64,
    /// Wall time it ran, seconds.
    pub wall_s: f64,
}

/// Prefix of the result line.
pub const RESULT: &str = "@seen ";

/// The environment variable in which the demo gives its processes its process id.
pub const PARENT_ENV: &str = "SHMRING_DEMO_PARENT";

/// Die with the parent, and not start at all if it is already gone: the parent is the
/// demo that `PARENT_ENV` names (the demo may itself be process 1, in a pid namespace of
/// its own). Run by hand without it, a parent of 1 means the starter is gone.
fn tie_to_parent() -> anyhow::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let starter = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok());
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    let alive = match (starter, parent) {
        (Some(want), Some(have)) => want == have,
        (None, Some(have)) => have != 1,
        (_, None) => false,
    };
    if !alive {
        anyhow::bail!("the demo that started this process is gone");
    }
    Ok(())
}

/// `demo-role broker`: `broker run` tied to the demo.
pub fn broker(
    namespace: &str,
    config: std::path::PathBuf,
    metrics_listen: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    tie_to_parent()?;
    crate::run::run(crate::run::RunOptions {
        config: Some(config),
        namespace: namespace.to_owned(),
        metrics_listen,
    })
}

/// `demo-role producer`: publish `rate` events a second, each carrying its publish
/// instant, until the ring is stopped.
pub fn producer(namespace: &str, ring: &str, rate: u32) -> anyhow::Result<()> {
    tie_to_parent()?;
    let ring = Ring::open(namespace, ring)?;
    let mut producer = ring.producer()?;
    let every = Duration::from_secs(1) / rate.max(1);
    let start = Instant::now();
    let mut n: u32 = 0;
    loop {
        let now = crate::protocol::monotonic_ns();
        match producer.publish(&now.to_le_bytes()) {
            Ok(_) => {}
            Err(PublishError::Closed | PublishError::Deleted) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        n = n.wrapping_add(1);
        // Paced against the start, so a late wake-up does not slow the rate down.
        let due = start + every * n;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

/// `demo-role consumer`: consume as durable consumer `name` with wait strategy `wait`
/// until the ring is stopped and drained, then print what it saw.
pub fn consumer(namespace: &str, ring: &str, name: &str, wait: WaitStrategy) -> anyhow::Result<()> {
    tie_to_parent()?;
    let ring = Ring::open(namespace, ring)?;
    let mut consumer = ring.consumer(ConsumerOptions::durable(name).wait(wait))?;
    // Written, not printed: a demo that is gone (a closed pipe) is an error, not a panic.
    writeln!(std::io::stdout(), "@attached")?;
    let started = Instant::now();
    let mut latencies: Vec<u64> = Vec::with_capacity(1 << 16);
    let exit = consumer.run(
        |ev| {
            let now = crate::protocol::monotonic_ns();
            if let Some(sent) = ev.bytes().get(..8).and_then(|b| b.try_into().ok()) {
                latencies.push(now.saturating_sub(u64::from_le_bytes(sent)));
            }
        },
        || false,
    );
    match exit {
        Ok(RunExit::Closed | RunExit::Stopped) | Err(shmring::PollError::Deleted) => {}
        Err(e) => return Err(e.into()),
    }
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    let seen = Seen {
        name: name.to_owned(),
        wait: wait.to_string(),
        events: latencies.len() as u64,
        p50_ns: at(0.50),
        p99_ns: at(0.99),
        cpu_s: cpu.tv_sec as f64 + cpu.tv_nsec as f64 / 1e9,
        wall_s: started.elapsed().as_secs_f64(),
    };
    writeln!(
        std::io::stdout(),
        "{RESULT}{}",
        serde_json::to_string(&seen)?
    )?;
    Ok(())
}
