//! Wait strategies: what a consumer does when its ring has nothing for it.
//!
//! The strategy belongs to one consumer in one process. It decides only how that consumer
//! spends its own idle time; it is recorded in the consumer's table entry for display and
//! changes nothing a producer or another consumer pays: a producer pays one load of the
//! waiter count per publish, and a `futex_wake` only while somebody is actually parked.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The instant `timeout` from now; one past what the clock holds (`Duration::MAX`, "wait
/// for ever") is about 136 years away instead of an overflow.
pub(crate) fn deadline_in(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)))
}

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

    /// The name of a recorded code ("unknown" for a code no strategy records).
    pub fn kind_name(code: u32) -> &'static str {
        code.checked_sub(1)
            .and_then(|i| KINDS.get(i as usize))
            .map_or("unknown", |(name, _)| name)
    }

    /// The name of this strategy's kind: what [`fmt::Display`] prints, [`FromStr`] reads
    /// and `broker status` shows.
    pub fn name(&self) -> &'static str {
        Self::kind_name(self.kind_code())
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

/// Every kind of strategy by name, at the index of its recorded code minus one, with the
/// parameters [`FromStr`] gives it.
const KINDS: [(&str, WaitStrategy); 7] = [
    ("busy-spin", WaitStrategy::BusySpin),
    ("yielding", WaitStrategy::Yielding { spins: 100 }),
    (
        "sleeping",
        WaitStrategy::Sleeping {
            spins: 100,
            yields: 10,
            sleep: Duration::from_micros(100),
        },
    ),
    (
        "phased-backoff",
        WaitStrategy::PhasedBackoff {
            spins: 100,
            yields: 10,
            fallback: Fallback::Park,
        },
    ),
    ("blocking", WaitStrategy::Blocking),
    (
        "timeout-blocking",
        WaitStrategy::TimeoutBlocking {
            timeout: Duration::from_millis(100),
        },
    ),
    ("adaptive", WaitStrategy::Adaptive),
];

impl fmt::Display for WaitStrategy {
    /// The kind's name ([`WaitStrategy::name`]), without the parameters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A wait strategy name that [`WaitStrategy::from_str`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown wait strategy {0:?}: use busy-spin, yielding, sleeping, phased-backoff, blocking, timeout-blocking or adaptive")]
pub struct UnknownWaitStrategy(pub String);

impl FromStr for WaitStrategy {
    type Err = UnknownWaitStrategy;

    /// The strategy of a kind's name, with its usual parameters: `yielding` after 100
    /// spins; `sleeping` ([`WaitStrategy::sleeping`]); `phased-backoff` with 100 spins and
    /// 10 yields, then park; `timeout-blocking` every 100 ms.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KINDS
            .iter()
            .find(|(name, _)| *name == s)
            .map(|&(_, strategy)| strategy)
            .ok_or_else(|| UnknownWaitStrategy(s.to_owned()))
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

impl Step {
    /// Take this step where it needs no wake line: spin, yield or sleep. `false` for
    /// [`Step::Park`], which the caller takes on its own line.
    pub(crate) fn pause(self) -> bool {
        match self {
            Step::Spin => std::hint::spin_loop(),
            Step::Yield => std::thread::yield_now(),
            Step::Sleep(d) => std::thread::sleep(d),
            Step::Park => return false,
        }
        true
    }
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

    /// Take up to `max` spin steps at once: how many were left in the spin phase (all of
    /// `max` for a strategy that only spins). A waiter that makes progress before it has
    /// used them resets the idler anyway.
    #[inline]
    pub(crate) fn take_spins(&mut self, max: u32) -> u32 {
        let spins = u64::from(self.spins);
        let left = if self.rounds < spins {
            (spins - self.rounds).min(u64::from(max))
        } else if self.last == Step::Spin && self.rounds >= spins + u64::from(self.yields) {
            u64::from(max)
        } else {
            0
        };
        self.rounds += left;
        // `left` <= `max`, a u32.
        left as u32
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `take_spins` hands out the spin phase in bursts and nothing past it: the steps after
    /// it are the ones `next` would have given after as many spins.
    #[test]
    fn take_spins_hands_out_the_spin_phase_and_no_more() {
        let mut busy = Idler::new(WaitStrategy::BusySpin);
        for _ in 0..3 {
            assert_eq!(busy.take_spins(64), 64);
        }
        assert_eq!(busy.next(), Step::Spin);

        let mut yielding = Idler::new(WaitStrategy::Yielding { spins: 100 });
        assert_eq!(yielding.take_spins(64), 64);
        assert_eq!(yielding.take_spins(64), 36);
        assert_eq!(yielding.take_spins(64), 0);
        assert_eq!(yielding.next(), Step::Yield);
        yielding.reset();
        assert_eq!(
            yielding.take_spins(64),
            64,
            "a reset starts the spins again"
        );

        let mut phased = Idler::new(WaitStrategy::PhasedBackoff {
            spins: 10,
            yields: 2,
            fallback: Fallback::Park,
        });
        assert_eq!(phased.take_spins(64), 10);
        assert_eq!(phased.next(), Step::Yield);
        assert_eq!(phased.take_spins(64), 0);
        assert_eq!(phased.next(), Step::Yield);
        assert_eq!(phased.next(), Step::Park);
        assert_eq!(phased.take_spins(64), 0);

        for strategy in [
            WaitStrategy::Blocking,
            WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_millis(1),
            },
        ] {
            assert_eq!(Idler::new(strategy).take_spins(64), 0, "{strategy}");
        }
        let mut adaptive = Idler::new(WaitStrategy::Adaptive);
        let mut spun = 0;
        loop {
            match adaptive.take_spins(64) {
                0 => break,
                n => spun += n,
            }
        }
        assert_eq!(spun, ADAPTIVE_SPINS);
        assert_eq!(adaptive.next(), Step::Yield);
    }

    #[test]
    fn every_kind_is_named_at_its_code_and_its_name_parses_back() {
        for (i, (name, strategy)) in KINDS.iter().enumerate() {
            assert_eq!(strategy.kind_code() as usize, i + 1, "{name}");
            assert_eq!(strategy.to_string(), *name);
            assert_eq!(name.parse::<WaitStrategy>(), Ok(*strategy));
        }
        assert_eq!(WaitStrategy::sleeping(), "sleeping".parse().unwrap());
        assert_eq!(WaitStrategy::kind_name(0), "unknown");
        assert_eq!(WaitStrategy::kind_name(8), "unknown");
        assert!("spin".parse::<WaitStrategy>().is_err());
    }
}
