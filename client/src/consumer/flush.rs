//! The timed flush (`ConsumerOptions::flush_within`): an end-of-batch edge at least every
//! `d` while events are delivered.
//!
//! The delivery loop asks [`Flush::due`] before it hands each event over; the event handed
//! over once `d` has passed since the last edge carries `end_of_batch` and the batch
//! commits there. A handler that flushes on the edge therefore holds data at most about
//! `d` plus one event.
//!
//! The clock is read once per event, only when a flush interval is set. For intervals of
//! at least [`COARSE_FACTOR`] times its resolution that read is `CLOCK_MONOTONIC_COARSE`:
//! a load from the vDSO data page, no time-stamp counter read (a few ns), whose tick (1 to
//! 10 ms) delays an edge by at most one tick, small against such an interval. Shorter
//! intervals read `CLOCK_MONOTONIC` (a vDSO counter read, ~20 ns): an edge that needs
//! sub-tick precision costs that per event. Reading it only every few events instead would
//! let one slow handler call push the edge several events late.

use std::time::Duration;

use rustix::time::{clock_getres, clock_gettime, ClockId};

/// The coarse clock is used for intervals of at least this many of its ticks.
pub const COARSE_FACTOR: u32 = 4;

/// The state of a consumer's timed flush.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flush {
    within_ns: u64,
    clock: ClockId,
    last_edge_ns: u64,
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
    /// A flush every `within`, starting now.
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
            last_edge_ns: now(clock),
        }
    }

    /// Whether the event about to be handed over must carry the edge (the interval has
    /// passed since the last one). Reads the clock.
    #[inline]
    pub(crate) fn due(&self) -> bool {
        now(self.clock).saturating_sub(self.last_edge_ns) >= self.within_ns
    }

    /// An edge was handed over now.
    #[inline]
    pub(crate) fn edge(&mut self) {
        self.last_edge_ns = now(self.clock);
    }
}
