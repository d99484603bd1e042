//! The testkit's roles, one per module, and what they share: the ring arguments, the event
//! size and the wait strategy.

pub mod attach_loop;
pub mod consume;
pub mod lifecycle_storm;
pub mod ping_pong;
pub mod produce;
pub mod run_closed;
pub mod wake_set;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use shmring::{Fallback, Ring, WaitStrategy};

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

/// A consumer wait strategy, by name: every `WaitStrategy` the client offers.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum Wait {
    /// `BusySpin`.
    Spin,
    /// `Yielding` after 100 spins.
    Yield,
    /// `Sleeping`: 100 spins, 10 yields, then 100 µs sleeps.
    Sleep,
    /// `PhasedBackoff`: 100 spins, 10 yields, then park on the futex.
    PhasedPark,
    /// `PhasedBackoff`: 100 spins, 10 yields, then 50 µs sleeps.
    PhasedSleep,
    /// `Blocking`: park on the futex as soon as the ring is empty.
    Block,
    /// `TimeoutBlocking` with a 5 ms timeout: park, and give control back every 5 ms.
    TimeoutBlock,
    /// `Adaptive` (the client's default): spin, yield, then park.
    Adaptive,
}

impl Wait {
    pub fn strategy(self) -> WaitStrategy {
        match self {
            Wait::Spin => WaitStrategy::BusySpin,
            Wait::Yield => WaitStrategy::Yielding { spins: 100 },
            Wait::Sleep => WaitStrategy::sleeping(),
            Wait::PhasedPark => WaitStrategy::PhasedBackoff {
                spins: 100,
                yields: 10,
                fallback: Fallback::Park,
            },
            Wait::PhasedSleep => WaitStrategy::PhasedBackoff {
                spins: 100,
                yields: 10,
                fallback: Fallback::Sleep(Duration::from_micros(50)),
            },
            Wait::Block => WaitStrategy::Blocking,
            Wait::TimeoutBlock => WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_millis(5),
            },
            Wait::Adaptive => WaitStrategy::Adaptive,
        }
    }
}
