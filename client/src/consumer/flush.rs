//! The timed flush (`ConsumerOptions::flush_within`): an end-of-batch edge at least every
//! `d` while events are delivered.
//!
//! The delivery loop asks [`Flush::due`] before it hands each event over; the event handed
//! over once `d` has passed since the last edge carries `end_of_batch` and the batch
//! commits there. The interval is counted from the first event handed over after the last
//! edge (what the handler has held longest), not from the edge itself, so a consumer that
//! was idle does not cut its next batch after one event. A handler that flushes on the edge
//! therefore holds data at most about `d` plus one event.
//!
//! The clock is read once per event, only when a flush interval is set. For intervals of
//! at least [`COARSE_FACTOR`] times its resolution that read is `CLOCK_MONOTONIC_COARSE`:
//! a vDSO read without a time-stamp counter read, whose tick (4 ms here; 1 to 10 ms
//! elsewhere) delays an edge by at most one tick, small against such an interval. Shorter
//! intervals read `CLOCK_MONOTONIC`. Measured on the 2-core machine while it was busy:
//! ~27 ns for the coarse read, ~67 ns for the fine one (a loop of `clock_gettime`). That
//! is the price per event of the flush; reading only every few events instead would let
//! one slow handler call push the edge several events late, which is what the flush is
//! there to prevent.

use std::time::Duration;

use rustix::time::{clock_getres, clock_gettime, ClockId};

/// The coarse clock is used for intervals of at least this many of its ticks.
pub const COARSE_FACTOR: u32 = 4;

/// The state of a consumer's timed flush.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flush {
    within_ns: u64,
    clock: ClockId,
    /// When the first event after the last edge was handed over (`None`: none yet).
    open_since_ns: Option<u64>,
}

fn now(clock: ClockId) -> u64 {
    let t = clock_gettime(clock);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Flush {
    /// A flush every `within`.
    pub(crate) fn new(within: Duration) -> Self {
        let res = clock_getres(ClockId::MonotonicCoarse);
        let tick = Duration::new(res.tv_sec as u64, res.tv_nsec as u32);
        let clock = if !tick.is_zero() && within >= tick * COARSE_FACTOR {
            ClockId::MonotonicCoarse
        } else {
            ClockId::Monotonic
        };
        Flush {
            within_ns: nanos(within),
            clock,
            open_since_ns: None,
        }
    }

    /// Whether the event about to be handed over must carry the edge (the interval has
    /// passed since the first event after the last edge). Reads the clock.
    #[inline]
    pub(crate) fn due(&mut self) -> bool {
        let t = now(self.clock);
        match self.open_since_ns {
            Some(since) => t.saturating_sub(since) >= self.within_ns,
            None => {
                self.open_since_ns = Some(t);
                false
            }
        }
    }

    /// An edge was handed over: the next event opens a new interval.
    #[inline]
    pub(crate) fn edge(&mut self) {
        self.open_since_ns = None;
    }
}
