//! Idling: the run loop, waiting with the consumer's strategy, and parking.

use super::*;

impl Consumer {
    /// Poll until `stop` returns true or the ring is closed and drained, waiting between
    /// empty polls with this consumer's wait strategy. `stop` is checked after every batch
    /// and every idle step (a park lasts at most the 50 ms net, or the `TimeoutBlocking`
    /// timeout).
    pub fn run<F, S>(&mut self, mut handler: F, stop: S) -> Result<RunExit, PollError>
    where
        F: FnMut(Event<'_>),
        S: FnMut() -> bool,
    {
        self.run_fallible(
            |ev| {
                handler(ev);
                Ok::<(), std::convert::Infallible>(())
            },
            stop,
        )
    }

    /// [`Consumer::run`] with a handler that can fail, each failure answered by the error
    /// policy as in [`Consumer::poll_once_fallible`]. A `Retry` back-off is waited out
    /// here (in steps of at most the 50 ms net, checking `stop` between them).
    pub fn run_fallible<F, E, S>(
        &mut self,
        mut handler: F,
        mut stop: S,
    ) -> Result<RunExit, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
        S: FnMut() -> bool,
    {
        loop {
            if stop() {
                return Ok(RunExit::Stopped);
            }
            let before = self.next;
            let n = self.poll_once_fallible(&mut handler)?;
            if self.next != before || n > 0 {
                self.idler.reset();
                self.idle_since = None;
                continue;
            }
            if let Some(until) = self.backing_off() {
                let left = until.saturating_duration_since(Instant::now());
                std::thread::sleep(left.min(PARK_NET));
                continue;
            }
            if self.idle_step()? == Some(WaitOutcome::Closed) {
                return Ok(RunExit::Closed);
            }
        }
    }

    /// Wait, with this consumer's strategy, until an event is waiting, the ring is closed
    /// and drained, or (`TimeoutBlocking` only) the timeout passes.
    pub fn wait(&mut self) -> Result<WaitOutcome, PollError> {
        loop {
            if let Some(outcome) = self.idle_step()? {
                if outcome != WaitOutcome::Ready {
                    return Ok(outcome);
                }
            }
            if self.has_pending() {
                self.idler.reset();
                self.idle_since = None;
                return Ok(WaitOutcome::Ready);
            }
        }
    }

    fn closed_and_drained(&self) -> bool {
        self.seg
            .line()
            .closed_at()
            .is_some_and(|stop| self.next >= stop)
            && !self.holds_adopted()
    }

    /// A member that has delivered its own claims up to the stop first adopts the claims
    /// members left behind (those of a member killed just before the stop, say): they are
    /// the group's events too. Returns whether it found some.
    #[cold]
    fn adopts_before_closing(&mut self) -> bool {
        if self.member.is_none() {
            return false;
        }
        self.adopt_left_claims();
        self.holds_adopted()
    }

    /// One idle step of the wait strategy. `Some` when it can say how waiting ends.
    fn idle_step(&mut self) -> Result<Option<WaitOutcome>, PollError> {
        if self.failed {
            return Err(PollError::Failed);
        }
        if self.has_pending() {
            return Ok(Some(WaitOutcome::Ready));
        }
        if self.closed_and_drained() && !self.adopts_before_closing() {
            if is_deleted(&self.seg) {
                return Err(PollError::Deleted);
            }
            return Ok(Some(WaitOutcome::Closed));
        }
        let timeout = match self.wait {
            WaitStrategy::TimeoutBlocking { timeout } => {
                let since = *self.idle_since.get_or_insert_with(Instant::now);
                let left = timeout.saturating_sub(since.elapsed());
                if left.is_zero() {
                    self.idle_since = None;
                    return Ok(Some(WaitOutcome::TimedOut));
                }
                Some(left)
            }
            _ => None,
        };
        match self.idler.next() {
            Step::Spin => std::hint::spin_loop(),
            Step::Yield => std::thread::yield_now(),
            Step::Sleep(d) => std::thread::sleep(d),
            Step::Park => self.park(timeout.map_or(PARK_NET, |t| t.min(PARK_NET))),
        }
        Ok(None)
    }

    /// Park on the ring's consumer wake line (see `park` for the protocol).
    #[cold]
    fn park(&mut self, net: std::time::Duration) {
        // A member about to sleep first looks for claims that members left behind: they
        // may be what holds the producers.
        self.adopt_left_claims();
        if self.has_pending() {
            return;
        }
        let entry = self.entry();
        // Relaxed: display only.
        entry.cold.parked.store(1, Ordering::Relaxed);
        let parked = park::park(&self.seg.lines().consumer_wake.value, net, || {
            self.has_pending() || self.closed_and_drained()
        });
        self.entry().cold.parked.store(0, Ordering::Relaxed);
        if parked == Parked::Ready {
            return;
        }
        let mut n = WakeCounts::default();
        n.count(parked, || self.event_waiting());
        let s = &mut self.stats;
        s.wakeups = s.wakeups.wrapping_add(n.woken);
        s.late_wakeups = s.late_wakeups.wrapping_add(n.late);
        s.net_wakeups = s.net_wakeups.wrapping_add(n.lost);
        self.store_stats();
    }
}
