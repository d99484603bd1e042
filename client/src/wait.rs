//! Wait strategies: what a consumer does when its ring has nothing for it.
//!
//! The strategy belongs to one consumer in one process. It decides only how that consumer
//! spends its own idle time; it is recorded in the consumer's table entry for display and
//! changes nothing a producer or another consumer pays.

use std::time::Duration;

/// How a consumer waits for events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitStrategy {
    /// Spin on the ring with the CPU's spin-loop hint. Lowest latency; burns its core.
    BusySpin,
    /// Spin `spins` times, then `sched_yield` between looks.
    Yielding {
        /// Spins before the first yield.
        spins: u32,
    },
    /// Spin, then yield, then sleep `sleep` between looks.
    Sleeping {
        /// Spins before yielding.
        spins: u32,
        /// Yields before sleeping.
        yields: u32,
        /// Sleep between looks once idle.
        sleep: Duration,
    },
}

impl Default for WaitStrategy {
    /// Yielding after 100 spins: low latency without monopolising a core on a busy machine.
    fn default() -> Self {
        WaitStrategy::Yielding { spins: 100 }
    }
}

impl WaitStrategy {
    /// Sleeping with 100 spins, 10 yields and 100 µs sleeps.
    pub fn sleeping() -> Self {
        WaitStrategy::Sleeping {
            spins: 100,
            yields: 10,
            sleep: Duration::from_micros(100),
        }
    }

    /// The code recorded in the consumer table (for `broker status`).
    pub fn kind_code(&self) -> u32 {
        match self {
            WaitStrategy::BusySpin => 1,
            WaitStrategy::Yielding { .. } => 2,
            WaitStrategy::Sleeping { .. } => 3,
        }
    }

    /// The parameter recorded beside the code (nanoseconds of sleep, or 0).
    pub fn param_ns(&self) -> u64 {
        match self {
            WaitStrategy::Sleeping { sleep, .. } => sleep.as_nanos() as u64,
            _ => 0,
        }
    }

    /// The name of a recorded code.
    pub fn kind_name(code: u32) -> &'static str {
        match code {
            1 => "busy-spin",
            2 => "yielding",
            3 => "sleeping",
            _ => "unknown",
        }
    }
}

/// The back-off state of one waiter: call [`Idler::idle`] after every empty look and
/// [`Idler::reset`] after progress.
#[derive(Debug, Clone)]
pub(crate) struct Idler {
    strategy: WaitStrategy,
    rounds: u32,
}

impl Idler {
    pub(crate) fn new(strategy: WaitStrategy) -> Self {
        Self {
            strategy,
            rounds: 0,
        }
    }

    #[inline]
    pub(crate) fn reset(&mut self) {
        self.rounds = 0;
    }

    /// Spend one idle step.
    #[inline]
    pub(crate) fn idle(&mut self) {
        self.rounds = self.rounds.saturating_add(1);
        match self.strategy {
            WaitStrategy::BusySpin => std::hint::spin_loop(),
            WaitStrategy::Yielding { spins } => {
                if self.rounds <= spins {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            WaitStrategy::Sleeping {
                spins,
                yields,
                sleep,
            } => {
                if self.rounds <= spins {
                    std::hint::spin_loop();
                } else if self.rounds <= spins.saturating_add(yields) {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(sleep);
                }
            }
        }
    }
}

/// The back-off a producer uses while it waits for room: a short spin, then yields, then
/// sleeps of 50 µs, so a full ring does not keep a core at 100%.
pub(crate) fn producer_backoff() -> Idler {
    Idler::new(WaitStrategy::Sleeping {
        spins: 64,
        yields: 64,
        sleep: Duration::from_micros(50),
    })
}
