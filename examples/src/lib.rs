//! What the quickstart examples share: the event type, the ring's shape, and the edges of a
//! command-line program (errors printed with their message, Ctrl-C as a request to stop).
//!
//! ```text
//! cargo run --release -p shmring-examples --example consumer   # terminal 1, first
//! cargo run --release -p shmring-examples --example producer   # terminal 2
//! cargo run --release -p shmring-examples --example fanout     # 2 producers, 2 consumers
//! cargo run --release -p shmring-examples --example async_logger     # apps -> one writer process
//! cargo run --release -p shmring-examples --example order_pipeline   # the Disruptor's diamond and a worker group
//! ```

#![warn(missing_docs)]

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use shmring::{ProducerMode, RingConfig};

/// The quickstart event: plain old data, copied into the slot as its bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Tick {
    /// 0, 1, 2, ... in publish order.
    pub id: u64,
    /// Nanoseconds since the producer started (refreshed every 1024 events).
    pub timestamp_ns: u64,
    /// A price.
    pub price: f64,
    /// A quantity.
    pub qty: u32,
    /// [`FLAG_LAST`] on the last event of a run.
    pub flags: u32,
}

/// `Tick::flags` of a run's last event.
pub const FLAG_LAST: u32 = 1;
/// The quickstart ring's name.
pub const RING: &str = "quickstart";
/// The consumer example's durable name.
pub const READER: &str = "quickstart-reader";
/// Events per quickstart run unless told otherwise.
pub const DEFAULT_COUNT: u64 = 1_000_000;

/// The quickstart ring's shape: producer and consumer both `open_or_create` with it, so
/// either may start first.
pub fn ring_config() -> RingConfig {
    RingConfig {
        capacity: 1 << 16,
        slot_size: 64,
        producer_mode: ProducerMode::Multi,
        ..RingConfig::default()
    }
}

/// A flag that turns true on the first SIGINT or SIGTERM; a second one ends the process
/// at once (the signal's default action), so a stuck program can still be stopped.
pub fn stop_on_ctrl_c() -> std::io::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_default(sig, flag.clone())?;
        signal_hook::flag::register(sig, flag.clone())?;
    }
    Ok(flag)
}

/// `println!` for a function that returns a `Result` with room for an `io::Error`: a
/// standard output that cannot be written (its reader gone, as `example | head -1` leaves
/// it) is returned as an error, where `println!` would panic.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        ::std::io::Write::write_fmt(
            &mut ::std::io::stdout().lock(),
            format_args!("{}\n", format_args!($($arg)*)),
        )?
    };
}

/// `eprintln!` that drops what a closed standard error cannot take, where `eprintln!`
/// would panic: what an example says there is advice, and its exit code still tells.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(
            &mut ::std::io::stderr().lock(),
            format_args!("{}\n", format_args!($($arg)*)),
        );
    }};
}

/// The end of `main`: an error is printed with its message (not its debug form) and the
/// exit code is 1.
pub fn finish(result: Result<(), Box<dyn std::error::Error>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            note!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The child processes of a multi-process example (it runs its own executable in each
/// role), each under a name. Those still running are killed and reaped on every way out,
/// `drop` included. Made with [`Children::interruptible`], a Ctrl-C (SIGINT or SIGTERM) ends
/// the waits with an error instead of the process, so that the example's cleanup (its
/// rings, its files) still runs.
#[derive(Default)]
pub struct Children {
    running: Vec<(String, std::process::Child)>,
    interrupted: Option<Arc<AtomicBool>>,
}

impl Children {
    /// No children yet; the first SIGINT or SIGTERM ends every wait with an error (see
    /// [`stop_on_ctrl_c`]).
    pub fn interruptible() -> std::io::Result<Self> {
        Ok(Children {
            running: Vec::new(),
            interrupted: Some(stop_on_ctrl_c()?),
        })
    }

    /// An error once Ctrl-C was pressed (or SIGTERM came).
    pub fn check_interrupt(&self) -> Result<(), Box<dyn std::error::Error>> {
        match &self.interrupted {
            Some(flag) if flag.load(std::sync::atomic::Ordering::Relaxed) => {
                Err("interrupted (Ctrl-C): stopping the child processes and cleaning up".into())
            }
            _ => Ok(()),
        }
    }

    /// Whether a child has exited.
    pub fn any_exited(&mut self) -> bool {
        self.running
            .iter_mut()
            .any(|(_, c)| !matches!(c.try_wait(), Ok(None)))
    }

    /// Start this executable again with `args`, its stdout captured, as `who`.
    pub fn spawn(
        &mut self,
        who: String,
        args: &[String],
    ) -> Result<(), Box<dyn std::error::Error>> {
        let child = std::process::Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        self.running.push((who, child));
        Ok(())
    }

    /// Wait until `deadline` for the child `who` to exit 0 and return what it printed.
    pub fn finish(
        &mut self,
        who: &str,
        deadline: std::time::Instant,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let i = self
            .running
            .iter()
            .position(|(w, _)| w == who)
            .ok_or_else(|| format!("no child {who}"))?;
        loop {
            self.check_interrupt()?;
            let (_, child) = &mut self.running[i];
            if let Some(status) = child.try_wait()? {
                let mut out = String::new();
                if let Some(mut stdout) = child.stdout.take() {
                    std::io::Read::read_to_string(&mut stdout, &mut out)?;
                }
                self.running.remove(i);
                if !status.success() {
                    return Err(format!("{who} failed ({status}): {out}").into());
                }
                return Ok(out);
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!("{who} did not finish by the example's deadline").into());
            }
            // A poll of the child's exit, bounded by the deadline.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Kill and reap every child still running.
    pub fn kill_all(&mut self) {
        for (_, child) in &mut self.running {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.running.clear();
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// The number after `key=` in a child's report line.
pub fn field(report: &str, key: &str) -> Result<u64, Box<dyn std::error::Error>> {
    report
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .ok_or_else(|| format!("no {key}= in {report:?}"))?
        .parse()
        .map_err(|e| format!("{key} in {report:?}: {e}").into())
}
