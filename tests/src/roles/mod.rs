//! The testkit's roles, one per module, and what they share: the ring arguments, the event
//! size and the wait strategy.

pub mod attach_loop;
pub mod consume;
pub mod produce;

use std::str::FromStr;

use anyhow::Context;
use shmring::{Ring, WaitStrategy};

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
        if !shmring_tests::payload::valid_len(n) {
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

/// A consumer wait strategy, by name.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum Wait {
    /// `BusySpin`.
    Spin,
    /// `Yielding` after 100 spins.
    Yield,
    /// `Sleeping`: 100 spins, 10 yields, then 100 µs sleeps.
    Sleep,
    /// `Blocking`: park on the futex as soon as the ring is empty.
    Block,
    /// `Adaptive` (the client's default): spin, yield, then park.
    Adaptive,
}

impl Wait {
    pub fn strategy(self) -> WaitStrategy {
        match self {
            Wait::Spin => WaitStrategy::BusySpin,
            Wait::Yield => WaitStrategy::Yielding { spins: 100 },
            Wait::Sleep => WaitStrategy::sleeping(),
            Wait::Block => WaitStrategy::Blocking,
            Wait::Adaptive => WaitStrategy::Adaptive,
        }
    }
}
