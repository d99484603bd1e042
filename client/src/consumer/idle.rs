//! Idling: the run loop, waiting with the consumer's strategy, and parking.

use super::*;

/// The most spin steps [`Consumer::spin_for_next`] takes before the run loop's other idle
/// checks (a closed ring, the broker's release, a `stop` predicate) run again: about 2 µs of
/// pauses on the development machine (29 ns each).
const SPIN_BURST: u32 = 64;

impl Consumer {
    /// Poll until `stop` returns true or the ring is closed and drained, waiting between
    /// empty polls with this consumer's wait strategy. `stop` is checked after every batch
    /// and every idle step (a park lasts at most the 50 ms net, or the `TimeoutBlocking`
    /// timeout; spinning, about 64 pauses).
    ///
    /// A release by the broker that lands while the handler reads a batch in place, with a
    /// producer writing into it since (`PollError::ReleasedWhileReading` from `poll_once`),
    /// does not end the run: it is logged (a `tracing` warning naming the events the
    /// handler may have had torn), the batch is counted in `dropped_behind`, and the run
    /// goes on from the head, as after any release.
    ///
    /// A small handler is inlined into the delivery loop, where at hundreds of millions of
    /// events a second what it carries from one event to the next counts: one that adds
    /// each event to variables it captures (`|ev| { n += 1; total += f(ev) }`) may have them
    /// kept in memory, each event's addition then waiting for the previous event's store.
    /// In the project's benchmarks such a counting handler cost a fixed-size ring 8-17% of
    /// its rate, against one that derived its count from [`Event::sequence`] (valid where
    /// the consumer's first sequence is known and none is skipped).
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
        // Idle time counts from this call: an earlier call that ended idle (stopped,
        // closed, or with an error) leaves none behind.
        self.idle_since = None;
        loop {
            if stop() {
                return Ok(RunExit::Stopped);
            }
            // A poll right after one that handed over events waits first
            // (`ConsumerOptions::gather`).
            for _ in 0..self.gather.before_look() {
                std::hint::spin_loop();
            }
            let before = self.next;
            let polled = self.poll_once_fallible(&mut handler);
            let n = self.carry_on(polled)?;
            self.gather
                .after(n as u64, self.next.saturating_sub(before), self.batch_cap);
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
            if self.spin_for_next() {
                // The event at the position arrived while spinning: handed over from here,
                // not through another poll (ARCHITECTURE.md, "A caught-up consumer's
                // spin").
                let delivered = self.deliver_next(&mut handler);
                self.carry_on(delivered)?;
                self.idler.reset();
                self.idle_since = None;
                continue;
            }
            if self.idle_step()? == Some(WaitOutcome::Closed) {
                return Ok(RunExit::Closed);
            }
        }
    }

    /// A poll's outcome for the run loop: a batch the handler may have had torn by a release
    /// is logged, and the run goes on from the head (see [`Consumer::run`]).
    fn carry_on(&self, polled: Result<usize, PollError>) -> Result<usize, PollError> {
        match polled {
            Err(PollError::ReleasedWhileReading { from, to }) => {
                tracing::warn!(
                    consumer = self.seg.index(),
                    from,
                    to,
                    "released by the broker while the handler read events in place, and a producer wrote into them since: what the handler got may be torn; going on from the head"
                );
                Ok(0)
            }
            other => other,
        }
    }

    /// The wait strategy's spin steps, at most [`SPIN_BURST`] of them, on a consumer that
    /// waits on the next slot's stamp (a stamped ring, no upstreams, not a group member):
    /// each a look at that stamp and a pause, with nothing else in the loop. Returns
    /// whether the position was published (the stamp equals it, Acquire: an event, or a
    /// producer's tombstone, which the delivery skips); `false` when the steps ran out,
    /// the strategy is past its spins, the consumer waits elsewhere, or the stamp says
    /// something else to act on (a repair, a lap: the spin ends there and the poll deals
    /// with it). A closed, deleted or released ring is seen by the idle checks after the
    /// burst.
    #[inline]
    fn spin_for_next(&mut self) -> bool {
        if self.failed || self.fixed || self.member.is_some() || !self.upstream.is_empty() {
            return false;
        }
        let at = self.next;
        let slot = &self.seg.slot(at).header.stamp;
        for _ in 0..self.idler.take_spins(SPIN_BURST) {
            // Acquire: SYNC POINT with the producer's Release stamp store, as the poll's
            // scan: the slot's payload, length and flags are visible after it.
            let seen = slot.load(Ordering::Acquire);
            if seen == at {
                return true;
            }
            if stamp::reached(seen, at) {
                return false;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Hand over the event at the position, which `spin_for_next` saw published: a run of
    /// one event, without the poll's scan. A consumer the poll would not deliver from as it
    /// stands (failed, its attempts at the event used up, backing off, or released by the
    /// broker) polls instead; one with nothing else to do per event (required, no poison
    /// record, no timed flush, no marking window) takes `deliver_one`, the others the
    /// poll's delivery.
    #[inline]
    fn deliver_next<F, E>(&mut self, handler: &mut F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        // Relaxed: as the poll's look at the word (a hint on this consumer's own line).
        if self.failed
            || self.exhausted
            || self.retry_at.is_some()
            || (self.required && self.entry().hot.word.load(Ordering::Relaxed) != self.word)
        {
            return self.poll_once_fallible(handler);
        }
        let at = self.next;
        if self.required && self.poison.is_none() && self.flush.is_none() && self.careful == 0 {
            return self.deliver_one(at, handler);
        }
        self.deliver_run::<deliver::Stamped, _, _>(at, 1, (), handler)
    }

    /// Wait, with this consumer's strategy, until an event is waiting, the ring is closed
    /// and drained, or (`TimeoutBlocking` only) the timeout passes, counted from this call.
    /// An event a `Retry` back-off holds back is waiting once the back-off ends (the wait
    /// sleeps it out, in steps of at most the 50 ms net). A deleted ring is an error,
    /// `PollError::Deleted`, once nothing is left that a poll would hand over, whatever
    /// else the consumer waits for.
    pub fn wait(&mut self) -> Result<WaitOutcome, PollError> {
        // A `TimeoutBlocking` timeout counts from this call (see `run_fallible`).
        self.idle_since = None;
        loop {
            // The idle step's looks first: a waiting event, a closed and drained ring or a
            // failure is answered at once, before a spin burst.
            match self.idle_step()? {
                Some(WaitOutcome::Ready) => break,
                Some(outcome) => return Ok(outcome),
                None => {}
            }
            // During a `Retry` back-off the failed event is pending, but no poll hands it
            // over: the idle step waits the back-off out.
            if self.backing_off().is_none() && (self.spin_for_next() || self.has_pending()) {
                break;
            }
        }
        self.idler.reset();
        self.idle_since = None;
        Ok(WaitOutcome::Ready)
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
        let backing_off = self.backing_off();
        if backing_off.is_some_and(|until| until <= Instant::now()) {
            return Ok(Some(WaitOutcome::Ready));
        }
        if backing_off.is_none() {
            if self.has_pending() {
                return Ok(Some(WaitOutcome::Ready));
            }
            // Nothing a poll would hand over: a deleted ring ends the wait, whatever else it
            // waits for (a downstream held by an upstream that does not move sees neither an
            // event nor a closed ring, and would wait on a deleted one for ever). A worker
            // group member first adopts the claims members left, as at a close.
            if is_deleted(&self.seg) && !self.adopts_before_closing() {
                return Err(PollError::Deleted);
            }
        }
        if self.closed_and_drained() && !self.adopts_before_closing() {
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
        if let Some(until) = backing_off {
            // The failed event is handed over at `until` and not before: slept out, not
            // spun, in steps of at most the net and of the timeout left, each followed by
            // the looks above. A deletion meanwhile does not end the wait: the event is
            // still handed over after the back-off, as `run` hands it over.
            let left = until.saturating_duration_since(Instant::now());
            std::thread::sleep(left.min(timeout.unwrap_or(PARK_NET)).min(PARK_NET));
            return Ok(None);
        }
        if !self.idler.next().pause() {
            self.park(timeout.map_or(PARK_NET, |t| t.min(PARK_NET)));
        }
        Ok(None)
    }

    /// Park on one of the ring's consumer wake lines (see `park` for the protocol).
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
        // Held by an upstream: on that upstream's entry line, which publishes do not wake
        // (see `park`, "A downstream's line").
        let held = self.held_by(None);
        let holds = || held.is_some_and(|i| self.held_by(Some(i)).is_some());
        let parked = park::park_consumer_on(
            &self.seg,
            net,
            held.map(|i| (i, &holds as &dyn Fn() -> bool)),
            || self.has_pending() || self.closed_and_drained(),
        );
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
