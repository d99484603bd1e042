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
//! sequence line's position and lifecycle protocol), `lifecycle` (stop, drain, start),
//! `repair`, `gating` (the wrap gate and the attach protocol), `producer`, `consumer`,
//! `event`, `wait`, `info`, `health` (the states `broker status` shows, without a broker).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod access;
mod consumer;
mod error;
mod event;
mod fence;
mod futex;
mod gating;
mod health;
mod info;
mod lease;
mod lifecycle;
#[doc(hidden)]
pub mod line;
pub mod names;
mod park;
pub mod process;
mod producer;
mod recall;
mod repair;
mod ring;
mod segment;
mod wait;
mod wake_set;

pub use consumer::{
    Consumer, ConsumerOptions, ConsumerStats, RunExit, WaitOutcome, DEFAULT_BATCH_CAP,
};
pub use error::{AttachError, OpenError, PollError, PublishError, TryPublishError};
pub use event::Event;
pub use health::{
    blocked_by, has_pending, instant_state, is_stalled, lag, wrap_gate, ConsumerHealth, Gate,
    HealthState, HealthThresholds, HealthWatch, RingHealth,
};
pub use info::{ConsumerInfo, ProducerInfo, RingInfo};
pub use lease::LeaseError;
pub use lifecycle::{LifecycleError, LIFECYCLE_WAIT};
pub use park::PARK_NET;
pub use producer::{Claim, Producer, ProducerStats};
pub use recall::Recall;
pub use repair::Repair;
pub use ring::{Ring, RingConfig};
pub use shmring_layout::FenceMode;
pub use shmring_layout::{LayoutError, ProducerMode, RingState};
pub use wait::{Fallback, UnknownWaitStrategy, WaitStrategy, ADAPTIVE_SPINS, ADAPTIVE_YIELDS};
pub use wake_set::{WakeReason, WakeSet, WakeSetFull, WakeSetStats};
