//! Wait strategies: what a consumer does when its ring has nothing for it.
//!
//! The strategy belongs to one consumer in one process. It decides only how that consumer
//! spends its own idle time; it is recorded in the consumer's table entry for display and
//! changes nothing a producer or another consumer pays: a producer pays one load of the
//! waiter count per publish, and a `futex_wake` only while somebody is actually parked.

use std::time::Duration;

/// What a strategy does once its spin and yield budgets are spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Park on the ring's futex until a producer wakes it.
    Park,
    /// Sleep this long between looks (no producer involvement at all).
    Sleep(Duration),
}

/// How a consumer waits for events. The default is [`WaitStrategy::Adaptive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    /// Spin `spins` times, yield `yields` times, then fall back to parking or sleeping.
    PhasedBackoff {
        /// Spins before yielding.
        spins: u32,
        /// Yields before the fallback.
        yields: u32,
        /// Park or sleep once both budgets are spent.
        fallback: Fallback,
    },
    /// Park on the ring's futex as soon as the ring is empty (after one last look).
    Blocking,
    /// As `Blocking`, but give control back to the caller after `timeout` without events
    /// (`Consumer::wait` returns `WaitOutcome::TimedOut`; `run` checks its stop predicate).
    TimeoutBlocking {
        /// Longest wait before returning control.
        timeout: Duration,
    },
    /// The default: 128 spins (~a few µs, catches bursts), 16 yields, then park.
    #[default]
    Adaptive,
}

/// Spins of [`WaitStrategy::Adaptive`].
pub const ADAPTIVE_SPINS: u32 = 128;
/// Yields of [`WaitStrategy::Adaptive`].
pub const ADAPTIVE_YIELDS: u32 = 16;

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
            WaitStrategy::PhasedBackoff { .. } => 4,
            WaitStrategy::Blocking => 5,
            WaitStrategy::TimeoutBlocking { .. } => 6,
            WaitStrategy::Adaptive => 7,
        }
    }

    /// The parameter recorded beside the code (nanoseconds of sleep or timeout, or 0).
    pub fn param_ns(&self) -> u64 {
        match self {
            WaitStrategy::Sleeping { sleep, .. }
            | WaitStrategy::PhasedBackoff {
                fallback: Fallback::Sleep(sleep),
                ..
            } => sleep.as_nanos() as u64,
            WaitStrategy::TimeoutBlocking { timeout } => timeout.as_nanos() as u64,
            _ => 0,
        }
    }

    /// The name of a recorded code.
    pub fn kind_name(code: u32) -> &'static str {
        match code {
            1 => "busy-spin",
            2 => "yielding",
            3 => "sleeping",
            4 => "phased-backoff",
            5 => "blocking",
            6 => "timeout-blocking",
            7 => "adaptive",
            _ => "unknown",
        }
    }

    /// Whether this strategy ever parks on the futex.
    pub fn parks(&self) -> bool {
        matches!(
            self,
            WaitStrategy::Blocking
                | WaitStrategy::TimeoutBlocking { .. }
                | WaitStrategy::Adaptive
                | WaitStrategy::PhasedBackoff {
                    fallback: Fallback::Park,
                    ..
                }
        )
    }

    fn phases(&self) -> (u32, u32, Step) {
        match *self {
            WaitStrategy::BusySpin => (u32::MAX, 0, Step::Spin),
            WaitStrategy::Yielding { spins } => (spins, u32::MAX, Step::Yield),
            WaitStrategy::Sleeping {
                spins,
                yields,
                sleep,
            } => (spins, yields, Step::Sleep(sleep)),
            WaitStrategy::PhasedBackoff {
                spins,
                yields,
                fallback,
            } => (
                spins,
                yields,
                match fallback {
                    Fallback::Park => Step::Park,
                    Fallback::Sleep(d) => Step::Sleep(d),
                },
            ),
            WaitStrategy::Blocking | WaitStrategy::TimeoutBlocking { .. } => (0, 0, Step::Park),
            WaitStrategy::Adaptive => (ADAPTIVE_SPINS, ADAPTIVE_YIELDS, Step::Park),
        }
    }
}

/// One idle step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Spin,
    Yield,
    Sleep(Duration),
    Park,
}

/// The back-off state of one waiter: ask [`Idler::next`] after every empty look and
/// [`Idler::reset`] after progress.
#[derive(Debug, Clone)]
pub(crate) struct Idler {
    spins: u32,
    yields: u32,
    last: Step,
    rounds: u64,
}

impl Idler {
    pub(crate) fn new(strategy: WaitStrategy) -> Self {
        let (spins, yields, last) = strategy.phases();
        Self {
            spins,
            yields,
            last,
            rounds: 0,
        }
    }

    #[inline]
    pub(crate) fn reset(&mut self) {
        self.rounds = 0;
    }

    /// The next step to take.
    #[inline]
    pub(crate) fn next(&mut self) -> Step {
        self.rounds += 1;
        if self.rounds <= u64::from(self.spins) {
            Step::Spin
        } else if self.rounds <= u64::from(self.spins) + u64::from(self.yields) {
            Step::Yield
        } else {
            self.last
        }
    }
}

/// The back-off of a producer waiting for room: 64 spins, 16 yields, then park until a
/// consumer moves, so a full ring does not keep a core at 100%.
pub(crate) fn producer_backoff() -> Idler {
    Idler::new(WaitStrategy::PhasedBackoff {
        spins: 64,
        yields: 16,
        fallback: Fallback::Park,
    })
}
