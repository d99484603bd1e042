//! The testkit's roles, one per module, and what they share: the ring arguments, the event
//! size and the wait strategy.

pub mod attach_loop;
pub mod claim_batch;
pub mod consume;
pub mod lifecycle_storm;
pub mod ping_pong;
pub mod produce;
pub mod run_closed;
pub mod wake_set;
pub mod worker;

use std::str::FromStr;

use anyhow::Context;
use shmring::Ring;

/// Which ring to attach to.
#[derive(clap::Args, Debug, Clone)]
pub struct RingArgs {
    /// Namespace of the ring.
    #[arg(long)]
    pub ns: String,
    /// Name of the ring.
    #[arg(long)]
    pub ring: String,
}

impl RingArgs {
    pub fn open(&self) -> anyhow::Result<Ring> {
        Ring::open(&self.ns, &self.ring)
            .with_context(|| format!("opening ring {} in {}", self.ring, self.ns))
    }
}

/// An event size: a number of bytes, or `max` for a full slot.
#[derive(Debug, Clone, Copy)]
pub enum Size {
    Max,
    Bytes(usize),
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "max" {
            return Ok(Size::Max);
        }
        let n: usize = s.parse().map_err(|_| format!("{s:?}: a number or `max`"))?;
        if !shmring_testkit::payload::valid_len(n) {
            return Err(format!("{n}: events are 8 bytes or at least 16"));
        }
        Ok(Size::Bytes(n))
    }
}

impl Size {
    pub fn resolve(self, ring: &Ring) -> usize {
        match self {
            Size::Max => ring.max_payload(),
            Size::Bytes(n) => n,
        }
    }
}

/// A consumer wait strategy, by the kit's short names (`--wait block`).
pub use shmring_testkit::Wait;
