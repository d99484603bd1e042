//! shmring: LMAX Disruptor rings in shared memory, shared between processes.
//!
//! A ring lives in one segment file under `/dev/shm/shmring.<namespace>/`. Producers and
//! consumers in any process that can open the file attach through this crate and move
//! events with plain loads and stores; no broker is needed on the data path.
//!
//! ```
//! use shmring::{ConsumerOptions, Ring, RingConfig};
//! # let ns = format!("doc-{}", std::process::id());
//! let ring = Ring::create(&ns, "orders", &RingConfig { capacity: 64, ..RingConfig::default() })?;
//! let mut consumer = ring.consumer(ConsumerOptions::durable("audit"))?;
//! let mut producer = ring.producer()?;
//! producer.publish(b"buy 100 @ 42")?;
//! producer.publish_batch(&[b"sell 5".as_slice(), b"sell 7"])?;
//! let mut seen = Vec::new();
//! consumer.poll_once(|ev| seen.push((ev.bytes().to_vec(), ev.is_end_of_batch())))?;
//! assert_eq!(seen.len(), 3);
//! assert!(seen[2].1, "the last event of the batch carries the end-of-batch edge");
//! # drop((consumer, producer));
//! Ring::remove(&ns, "orders")?;
//! # std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules, one concept each: `segment` (the mapped bytes, the only unsafe), `line` (the
//! sequence line's position and lifecycle protocol), `park` with `fence` and `futex` (the
//! park/wake protocol), `lifecycle` (stop, drain, start), `repair`, `unblock` (since when
//! a dead producer's hole waits), `table` (who holds each table entry), `gating` (the wrap
//! gate and the attach protocol), `producer`, `consumer`, `event`, `wait`, `info`, `health`
//! (the states `broker status` shows, without a broker), `file` (the segment file as
//! untrusted input: no symbolic links, regular files only, sizes checked), `remove`
//! (removing a ring all or nothing), `truncation` (the SIGBUS handler of feature
//! `truncation-guard`).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

// The segment is made of 64-bit atomics, its offsets and sequences are 64-bit and become
// pointers and lengths here, and waits park on Linux futexes: refuse any other target with a
// message that says so. On 32-bit Linux, which would otherwise compile (and truncate
// offsets), it is the only error; elsewhere the build fails on Linux-only imports as well.
#[cfg(not(all(
    target_os = "linux",
    target_pointer_width = "64",
    target_has_atomic = "64"
)))]
compile_error!(
    "shmring supports 64-bit Linux only (64-bit atomics and offsets in shared memory, futexes)"
);

mod access;
mod consumer;
mod error;
mod event;
mod fence;
mod file;
#[doc(hidden)]
pub mod fixed;
mod futex;
#[doc(hidden)]
pub mod gating;
#[doc(hidden)]
pub mod graph;
pub mod group;
mod health;
mod info;
mod lease;
mod lifecycle;
#[doc(hidden)]
pub mod line;
pub mod names;
#[doc(hidden)]
pub mod park;
pub mod process;
mod producer;
mod recall;
mod remove;
mod repair;
mod ring;
mod segment;
#[doc(hidden)]
pub mod table;
mod truncation;
mod unblock;
mod wait;
mod wake_set;

#[cfg(test)]
mod test_ns;

pub use consumer::{
    Consumer, ConsumerOptions, ConsumerStats, DeadLetter, ErrorPolicy, RunExit, WaitOutcome,
    DEFAULT_BATCH_CAP, MAX_BACKOFF_FACTOR,
};
pub use error::{AttachError, DeclaredError, OpenError, PollError, PublishError, TryPublishError};
pub use event::Event;
pub use health::{
    blocked_by, has_pending, held_by_upstream, instant_state, is_stalled, lag, upstream_position,
    wrap_gate, ConsumerHealth, Gate, HealthState, HealthThresholds, HealthWatch, RingHealth,
};
pub use info::{ConsumerInfo, CorruptWord, ProducerInfo, RingInfo};
pub use lease::LeaseError;
pub use lifecycle::{LifecycleError, Unmoved, LIFECYCLE_WAIT};
pub use park::PARK_NET;
pub use producer::{Claim, ClaimBatch, Producer, ProducerStats, Publisher};
pub use recall::Recall;
pub use remove::{Cleared, LEFTOVER_GRACE};
pub use repair::Repair;
pub use ring::{Ring, RingConfig};
pub use shmring_layout::FenceMode;
pub use shmring_layout::{LayoutError, ProducerMode, RingState};
pub use table::{FirstSeen, Tombstone};
#[cfg(feature = "truncation-guard")]
pub use truncation::install_truncation_guard;
pub use unblock::boottime_ns;
pub use wait::{Fallback, UnknownWaitStrategy, WaitStrategy, ADAPTIVE_SPINS, ADAPTIVE_YIELDS};
pub use wake_set::{WakeReason, WakeSet, WakeSetFull, WakeSetStats};

/// Register this process now for the asymmetric fence of parking (`membarrier`), which its
/// first publish or commit would otherwise do. Registering waits for an RCU grace period
/// (~10 ms on an idle machine, much longer on a loaded one): a process that must not pay
/// that on its first event calls this at startup. Attaching never registers. Returns
/// whether the process uses the asymmetric fence (`false` where the kernel lacks
/// `membarrier`: publishes then pay a full fence instead).
pub fn register_membarrier() -> bool {
    fence::register()
}

/// Whether this process has registered for expedited membarriers (see the `fence` module):
/// for tests that check when the registration happens.
#[doc(hidden)]
pub fn membarrier_registered() -> bool {
    fence::registered()
}
