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

/// The end of `main`: an error is printed with its message (not its debug form) and the
/// exit code is 1.
pub fn finish(result: Result<(), Box<dyn std::error::Error>>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
