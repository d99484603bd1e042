//! What a user would pick instead of shmring, measured by the `ipc-bench` harness in the
//! same run as the shmring rows, and the measurement kit both share.
//!
//! - [`kernel`]: a pipe, a Unix stream socket and an eventfd between two processes (always
//!   built: they need nothing but system calls).
//! - `inproc` (feature `inproc`): the `disruptor` crate and `crossbeam-channel`, with
//!   threads in one process: the in-process reference.
//! - `iox` (feature `iceoryx2`): iceoryx2 publish-subscribe between two processes.
//!
//! Every peer runs in role processes the harness starts by re-executing itself
//! (`ipc-bench __role peer-... k=v ...`); [`run_role`] dispatches them.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

pub mod kernel;
pub mod kit;

#[cfg(feature = "inproc")]
pub mod inproc;
#[cfg(feature = "iceoryx2")]
pub mod iox;

/// How big one measurement is and where its files go.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The run's private directory (control pages, results).
    pub dir: PathBuf,
    /// Recorded messages of a latency measurement.
    pub count: u64,
    /// Messages sent first and not recorded.
    pub warmup: u64,
    /// Gap between paced messages.
    pub interval: Duration,
    /// Length of a throughput measurement.
    pub duration: Duration,
    /// Pin the sending side to CPU 0 and the receiving side to CPU 1.
    pub pin: bool,
    /// Kill the role processes after this long.
    pub timeout: Duration,
    /// A string unique to this run (iceoryx2 names its files with it).
    pub run_id: String,
}

impl Plan {
    /// `cpu=N` when pinning.
    pub fn cpu_arg(&self, cpu: usize) -> Option<String> {
        self.pin.then(|| format!("cpu={cpu}"))
    }
}

/// Which optional peers this build has.
pub fn built_peers() -> Vec<&'static str> {
    let mut v = vec!["pipe", "unix-socket", "eventfd"];
    if cfg!(feature = "inproc") {
        v.extend(["disruptor", "crossbeam-channel"]);
    }
    if cfg!(feature = "iceoryx2") {
        v.push("iceoryx2");
    }
    v
}

/// Run peer role `role`, if it is one of this crate's.
pub fn run_role(role: &str, args: &kit::Args) -> Option<anyhow::Result<()>> {
    if let Some(r) = kernel::run_role(role, args) {
        return Some(r);
    }
    #[cfg(feature = "inproc")]
    if let Some(r) = inproc::run_role(role, args) {
        return Some(r);
    }
    #[cfg(feature = "iceoryx2")]
    if let Some(r) = iox::run_role(role, args) {
        return Some(r);
    }
    None
}
