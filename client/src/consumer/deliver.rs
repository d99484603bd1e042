//! Delivery: the published run from the position, handed over in place (required) or
//! copied and checked (optional), then one commit.

use super::policy::{mark_before, Held};
use super::*;

/// The smallest batch cap at which a fixed-size ring's consumer asks for a run's lines at
/// once when its run reaches the cap (`poll_fixed`): a small cap is reached without being
/// far behind (at a cap of 8, by eight events published between two looks). For events of
/// 8 bytes `Events::prefetch_run`'s own minimum of 1 KiB already asks for 128.
const PREFETCH_MIN_CAP: u64 = 64;

impl Consumer {
    /// Whether an event (or a lap) is waiting for a poll: the last look before parking.
    ///
    /// A dependent consumer (see `ConsumerOptions::after`) has an event waiting only once
    /// its upstreams committed past it; an upstream whose entry changed reads as pending,
    /// so that `poll_once` looks at it. During a `Retry` back-off nothing is waiting: a
    /// poll hands nothing over before the back-off ends, when the failed event waits again
    /// (a `WakeSet` over this consumer sleeps through the back-off and finds it at its
    /// next look, within the 50 ms net).
    pub fn has_pending(&self) -> bool {
        if self.retry_at.is_some_and(|until| Instant::now() < until) {
            return false;
        }
        self.pending(true)
    }

    /// Whether an event is waiting: [`Consumer::has_pending`] without a changed upstream
    /// counting. A park's wake-up count asks this: an upstream's detach, failure, optional
    /// release or position-keeping takeover changes its entry without waking anyone (only a
    /// change that lets the downstream act wakes: `table::consumer::lets_downstreams_act`,
    /// and a takeover that moves the position ahead), so a park it outlasts is no lost
    /// wake-up (the poll after it revalidates the upstream).
    pub(super) fn event_waiting(&self) -> bool {
        self.pending(false)
    }

    /// `has_pending`, with what a changed upstream (`barrier::Stale`) reads as.
    fn pending(&self, stale: bool) -> bool {
        // The upstreams first: an upstream lost while nothing is published still reads as
        // pending.
        let limit = if self.upstream.is_empty() {
            u64::MAX
        } else {
            match self.barrier() {
                Ok(limit) => limit,
                Err(barrier::Stale) => return stale,
            }
        };
        if self.member.is_some() {
            // A member's claims may lie below its own position (adopted ones).
            return self.member_pending(limit);
        }
        if limit <= self.next {
            return false;
        }
        if self.fixed {
            // The cursor, on its own line, which the producer's publishing stores write (see
            // `fixed`).
            return self.seg.events().reached_by_cursor(self.next);
        }
        // A caught-up consumer looks at the next slot's stamp, in either producer mode: one
        // line, the one the producer writes, so the event is seen one line transfer after
        // its stamp (ARCHITECTURE.md, "Where a caught-up consumer looks").
        let stamp = self
            .seg
            .slot(self.next)
            .header
            .stamp
            .load(Ordering::Acquire);
        stamp::reached(stamp, self.next)
    }

    /// Deliver the contiguous published run from this consumer's position, up to the batch
    /// cap, then commit the position once. Returns the number of events handed to the
    /// handler (0: nothing was published; tombstones are skipped and counted, not handed).
    ///
    /// A handler that panics fails its event: the error policy says what happens next
    /// (see [`ConsumerOptions::on_error`]; by default the consumer stops, FAILED).
    ///
    /// A dependent consumer's run also stops where its upstreams have not committed yet.
    pub fn poll_once<F>(&mut self, mut handler: F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>),
    {
        self.poll(|ev| {
            handler(ev);
            Ok::<(), std::convert::Infallible>(())
        })
    }

    /// [`Consumer::poll_once`] with a handler that can fail: an `Err` (or a panic, whose
    /// error text is `handler panicked: <message>`) is a failed attempt at the event, which
    /// the error policy answers: stop (FAILED, `PollError::HandlerFailed` or
    /// `HandlerPanicked`), try again on a later poll (`Ok` with the events delivered
    /// before it), or skip it as a dead letter (`Ok`). The events before the failing one
    /// are committed either way. While a `Retry` back-off runs, a poll returns `Ok(0)` at
    /// once (and `has_pending` says nothing waits until it ends): `run_fallible` and `wait`
    /// sleep it out.
    pub fn poll_once_fallible<F, E>(&mut self, handler: F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        self.poll(handler)
    }

    /// Whether a `Retry` back-off is running, and until when.
    pub(super) fn backing_off(&self) -> Option<Instant> {
        self.retry_at
    }

    fn poll<F, E>(&mut self, mut handler: F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        if self.failed {
            return Err(PollError::Failed);
        }
        // A `Retry` back-off holds a worker group member too (its failed event stays in its
        // claim); `exhausted` is set for a durable consumer or a member (attempts used up
        // by processes that died in the handler).
        if self.exhausted || self.retry_at.is_some() {
            if let Some(r) = self.policy_first() {
                if self.member.is_some() {
                    // A member past its claim (the event skipped): it claims the next.
                    self.claim_if_done();
                }
                return r;
            }
        }
        if self.member.is_some() {
            return self.poll_member(&mut handler);
        }
        // Relaxed: a hint on this consumer's own line; `idle_checks` decides. A required
        // consumer reads in place only while it holds its entry as ACTIVE: released by the
        // broker, it first gates again from the head.
        if self.required && self.entry().hot.word.load(Ordering::Relaxed) != self.word {
            return self.idle_checks(false);
        }
        let start = self.next;
        // One load per upstream (none without): see `barrier`.
        let cap = self
            .batch_cap
            .min(self.upstream_limit()?.saturating_sub(start));
        if self.fixed {
            return self.poll_fixed(start, cap, &mut handler);
        }
        let mut n = 0u64;
        // The stamp that ended the run (none: the run reached the cap).
        let mut ended = None;
        let slots = self.seg.slots();
        while n < cap {
            let seq = start + n;
            // Acquire: SYNC POINT with the producer's Release stamp store; the payload, len
            // and flags of every slot in the run are visible after this.
            let stamp = slots.get(seq).header.stamp.load(Ordering::Acquire);
            if stamp != seq {
                ended = Some(stamp);
                break;
            }
            n += 1;
        }
        if n == 0 {
            // Caught up: the event this consumer waits for goes to the slot of `start`, and
            // the poll that delivers it reads the stamp after it (where its run ends, when
            // its cap allows two events) before calling the handler. That line was last
            // used a lap ago and may have left this core's cache while the consumer waited:
            // asked for now, it does not delay the handler then (ARCHITECTURE.md, "Where the
            // busy-spin latency goes, by timestamps"). A group member's scan of its claim
            // (`poll_member`) is not measured and does not ask.
            if cap > 1 {
                slots.get(start + 1).prefetch();
            }
            // What the position's own slot holds matters only when there is no run to
            // deliver (kept off the path of a run: a caught-up consumer's one event).
            return match ended.map(|stamp| stamp::read(stamp, start)) {
                Some(Stamp::Repaired) => {
                    self.skip_repaired();
                    self.poll(handler)
                }
                Some(Stamp::Lapped) => self.idle_checks(true),
                _ => self.idle_checks(false),
            };
        }
        self.deliver_run::<Stamped, _, _>(start, n, (), &mut handler)
    }

    /// A fixed-size ring's poll from `start`, at most `cap` events: up to the cursor (see
    /// `fixed`).
    fn poll_fixed<F, E>(
        &mut self,
        start: u64,
        cap: u64,
        handler: &mut F,
    ) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        let events = self.seg.events();
        // Nothing while the lifecycle word changes under the look (`fixed::published`): as no
        // event yet.
        let (cursor, tomb_end) = fixed::published(&events).unwrap_or((start, 0));
        if !self.required && events.lapped(start) {
            // The ring no longer holds `start`: skip to the head and count the gap.
            return self.idle_checks(true);
        }
        if cursor.saturating_sub(start) > fixed::Words::capacity(&events) {
            return self.cursor_ahead(cursor);
        }
        let n = cursor.saturating_sub(start).min(cap);
        if n == 0 {
            return self.idle_checks(false);
        }
        if self.required && n == self.batch_cap && n >= PREFETCH_MIN_CAP {
            // A run as long as this consumer's batch cap: it is a batch or more behind the
            // cursor (and its upstreams let it read that far), and its reads would wait for
            // the run's lines one after another, each from another core's cache. Asked for
            // together, they come together (a batch producer's events read one at a time ran
            // about twice as fast). A consumer that keeps up does not ask: faster still, it
            // would catch up with the producer and read lines the producer is still
            // writing. Nor does an optional consumer, which may be reading slots the
            // producer rewrites for a later lap (docs/PERFORMANCE.md, "A run's lines asked
            // for at once").
            events.prefetch_run(start, n);
        }
        if self.sized {
            return self.deliver_run::<SizedEvents, _, _>(start, n, tomb_end, handler);
        }
        self.deliver_run::<Fixed, _, _>(start, n, tomb_end, handler)
    }

    /// Deliver the published run `start..start + n` read from `src`: the last checks, then
    /// in place (required) or copied and checked (optional).
    #[inline(always)]
    pub(super) fn deliver_run<S, F, E>(
        &mut self,
        start: u64,
        mut n: u64,
        args: S::Args,
        handler: &mut F,
    ) -> Result<usize, PollError>
    where
        S: Format,
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        if !self.run_still_allowed() {
            // A released upstream gated again while the run was scanned: look again.
            return Ok(0);
        }
        if self.poison.is_some() {
            // An event in the run whose attempts are used up: the batch ends before it,
            // and the policy acts on it once it is the position.
            if let Some(k) = self.exhausted_in(start, n) {
                if k == start {
                    self.exhausted = true;
                    return self.policy_first().unwrap_or(Ok(0));
                }
                n = k - start;
            }
        }
        if self.required {
            self.deliver_in_place::<S, F, E>(start, n, args, handler)
        } else {
            self.deliver_copied::<S, F, E>(start, n, args, handler)
        }
    }

    /// A fixed-size ring's cursor read more than the capacity past this consumer's position
    /// (after an optional consumer's lap check, which the claim would have failed had a
    /// producer really gone that far). A required consumer released meanwhile was not
    /// gating, so producers may be past it: `idle_checks` takes it to the head. Otherwise
    /// no producer wrote that cursor (see `PollError::CorruptCursor`).
    #[cold]
    pub(super) fn cursor_ahead(&mut self, cursor: u64) -> Result<usize, PollError> {
        // A producer past this consumer because it read the release: the cursor load
        // before (Acquire) makes this read the release (`entry_unchanged`).
        if !self.entry_unchanged() {
            return self.idle_checks(false);
        }
        Err(PollError::CorruptCursor {
            cursor,
            next: self.next,
            capacity: self.seg.geometry().capacity,
        })
    }

    /// Skip the repaired sequences (see `table::tombstone`) from this consumer's position:
    /// they hold no event. Counted as skipped, like a producer's tombstone.
    #[cold]
    fn skip_repaired(&mut self) {
        let mut next = self.next;
        // Acquire: as in `poll_once`.
        while stamp::read(
            self.seg.slot(next).header.stamp.load(Ordering::Acquire),
            next,
        ) == Stamp::Repaired
        {
            next += 1;
        }
        let skipped = next - self.next;
        self.commit(next, 0, skipped, 0);
    }

    /// Nothing to deliver: handle a lap, a release by the broker, a lost entry, a deleted
    /// ring.
    #[cold]
    fn idle_checks(&mut self, lapped: bool) -> Result<usize, PollError> {
        let released = self.released_now()?;
        // A deleted ring first: its position is nothing to report on.
        if is_deleted(&self.seg) {
            return Err(PollError::Deleted);
        }
        if lapped || released {
            self.jump_to_head()?;
        }
        Ok(0)
    }

    /// Whether the broker released this consumer (its entry holds the released form of the
    /// word it holds it with). An entry another holder took is `PollError::EntryLost`, and
    /// the handle fails, as a poll finds it.
    pub(crate) fn released_now(&mut self) -> Result<bool, PollError> {
        // Acquire: pairs with the broker's SeqCst release CAS (or a new holder's).
        let word = self.entry().hot.word.load(Ordering::Acquire);
        if word == self.word {
            return Ok(false);
        }
        if word == table::consumer::released(self.word) {
            return Ok(true);
        }
        self.failed = true;
        Err(PollError::EntryLost)
    }

    /// After a required consumer's handler read `from..to` in place: the error to return
    /// when the broker released it meanwhile and a producer has since written into those
    /// slots (what the handler was handed may be torn; `read_ahead` makes the same look).
    /// Nothing is committed then: the consumer goes to the head, counting the gap from its
    /// position as dropped. A fence and a load of its own word per poll.
    #[inline(always)]
    pub(super) fn torn_while_reading(&mut self, from: u64, to: u64) -> Option<PollError> {
        // Acquire fence: pairs with a producer's Release fence before its payload writes
        // (`begin_write`; a fixed-size ring's after it raises its write horizon). Had the
        // handler read a byte a producer wrote over these slots, that producer wrote it
        // after it found this consumer released, and the load below finds the release.
        fence(Ordering::Acquire);
        // Relaxed: ordered by the fence above.
        if from >= to || self.entry().hot.word.load(Ordering::Relaxed) == self.word {
            return None;
        }
        self.torn_after_release(from, to)
    }

    /// [`Consumer::torn_while_reading`] once the entry's word moved.
    #[cold]
    #[inline(never)]
    fn torn_after_release(&mut self, from: u64, to: u64) -> Option<PollError> {
        if !self.run_written_over(from, to) {
            return None;
        }
        Some(match self.regate_if_released() {
            Ok(()) => PollError::ReleasedWhileReading { from, to },
            Err(e) => e,
        })
    }

    /// A consumer that reads in place outside a poll (`read_ahead`), before it does: released
    /// by the broker, it goes to the head and gates again, as a poll's `idle_checks` takes
    /// it; an entry taken or a ring deleted is the poll's error.
    pub(crate) fn regate_if_released(&mut self) -> Result<(), PollError> {
        if self.entry_unchanged() {
            return Ok(());
        }
        self.idle_checks(false).map(drop)
    }

    /// Lapped (or released): skip to the head and count the gap. A head at or past
    /// `MAX_SEQUENCE` (another process overwrote the claim word or the stop sequence) is no
    /// position to go on from: the consumer stays where it is, and this says so. A released
    /// consumer stays released then: gating again at its old position, it would read in
    /// place slots that producers were not held back from while it was released.
    pub(super) fn jump_to_head(&mut self) -> Result<(), PollError> {
        let released = table::consumer::released(self.word);
        let mut gated_again = None;
        let mut released_again = false;
        // Acquire: pairs with the broker's SeqCst release CAS.
        // A stop in progress on a ring published by a cursor decides where it would gate
        // again (`Segment::start_position`); a poll does not wait for it: the consumer stays
        // released this time, moves up to the bound below the head (what it skips it would
        // skip when it gates again, at the head), and gates again at a later poll, after the
        // stop's wake.
        if self.entry().hot.word.load(Ordering::Acquire) == released
            && self.seg.start_position(Some(Instant::now())).is_ok()
        {
            corrupt(self.seg.position())?;
            // Gate again, by the attach protocol (`graph::gate_again`): SeqCst CAS, fence,
            // then the head, which a stop begun since the look above may leave undecided:
            // released again then (as the broker releases), woken as below.
            let seg = &self.seg;
            match crate::graph::gate_again(
                &self.entry().hot.word,
                &self.entry().hot.flags,
                released,
                || seg.start_position(Some(Instant::now())),
                // SeqCst fence: (2) in `consumer/barrier.rs`, between gating again and
                // reading the head, ordered against the fence of a downstream that let
                // this consumer go.
                || fence(Ordering::SeqCst),
            ) {
                crate::graph::Regated::Gated { word, head } => {
                    self.word = word;
                    gated_again = Some(head);
                }
                crate::graph::Regated::ReleasedAgain { word } => {
                    self.word = word;
                    released_again = true;
                    self.wake_both();
                }
                // Not released any more and not gated again by this process: another
                // process took or freed the entry (a damaged segment, or one written by
                // hand). Nothing of it is this handle's to write now.
                crate::graph::Regated::Moved => {
                    self.released_now()?;
                }
            }
        }
        // Not gated: any bound below the head will do (`Segment::position`: a lapped
        // consumer that jumps less far looks again).
        let head = gated_again.unwrap_or_else(|| self.seg.position());
        let gated_again = gated_again.is_some();
        if let Err(e) = corrupt(head) {
            if gated_again {
                // Overwritten between the look above and this read: released again, as the
                // broker releases (SeqCst CAS), and woken as the broker wakes them: the
                // downstreams that may now pass it, and a producer that found it gating at
                // its old position in between. The next poll finds it released.
                table::consumer::release(&self.entry().hot.word, self.word);
                attach::started(self.entry());
                self.wake_both();
            }
            if gated_again || released_again {
                tracing::warn!(
                    ring = self.seg.name(),
                    consumer = self.seg.index(),
                    "the ring's position is past any sequence; this consumer stays released"
                );
            }
            return Err(e);
        }
        if head > self.next {
            // Before the store, as in `commit`: never between the store and the wake.
            let registered = fence::light_allowed(&mut self.registered);
            self.stats.dropped_behind = self.stats.dropped_behind.wrapping_add(head - self.next);
            self.next = head;
            // Release (in `jump`): pairs with the producers' Acquire scan. The events
            // jumped over were not read: `first` moves with it.
            crate::graph::jump(&self.entry().hot.first, &self.entry().hot.next, head);
            self.moved(head);
            self.store_stats();
            // A producer may be parked on the room the jump makes (gating again, this
            // consumer held producers at its old position until now), and a consumer reading
            // behind this one may be parked waiting for it to move (see `commit`): the jump
            // moves it as a commit does.
            park::notify(
                &self.seg.lines().producer_wake.value,
                self.seg.header(),
                registered,
            );
            park::notify_downstreams(&self.seg, self.entry(), self.group, registered);
        }
        if gated_again {
            // After the head's store: a takeover from here keeps the position (see
            // `graph::gate_again`).
            attach::started(self.entry());
        }
        Ok(())
    }

    /// Wake the producers and both consumer lines, as a change of this consumer's gating
    /// does.
    #[cold]
    fn wake_both(&self) {
        park::notify(
            &self.seg.lines().producer_wake.value,
            self.seg.header(),
            self.registered,
        );
        park::notify_downstreams(&self.seg, self.entry(), self.group, self.registered);
    }

    pub(crate) fn commit(&mut self, next: u64, delivered: u64, skipped: u64, clamped: u64) {
        // The first commit registers this process for membarrier (see `fence`), before the
        // store a parked producer waits for: never between that store and the wake.
        let registered = fence::light_allowed(&mut self.registered);
        self.next = next;
        // Release: SYNC POINT with the Acquire load of `next` in the producers' gate scan;
        // this consumer's reads of every slot below `next` happen-before their reuse.
        self.entry().hot.next.store(next, Ordering::Release);
        // After the position: a crash in between leaves a stale record, never a lost one.
        self.moved(next);
        // A producer may be parked waiting for this room.
        park::notify(
            &self.seg.lines().producer_wake.value,
            self.seg.header(),
            registered,
        );
        // A consumer reading behind this one may be parked waiting for this commit: the
        // store above is the "publish" (1) of the park protocol on the downstream wake line
        // (and on the consumer line, for its other parkers), and the same fence pair
        // orders it against the parker's last look (see `park`). A load of each waiter
        // count when nobody parks.
        park::notify_downstreams(&self.seg, self.entry(), self.group, registered);
        // Wrapping: the counters were loaded from shared memory, which may hold anything.
        let s = &mut self.stats;
        s.delivered = s.delivered.wrapping_add(delivered);
        s.skipped = s.skipped.wrapping_add(skipped);
        s.clamped = s.clamped.wrapping_add(clamped);
        s.batches = s.batches.wrapping_add(u64::from(delivered > 0));
        self.store_stats();
    }

    /// A required consumer's delivery of the one published event at `at` (its position),
    /// in place, when it has nothing else to do per event (no poison record, no timed
    /// flush, no marking window): what `deliver_in_place` does for a run of one, without
    /// its loops. A caught-up spinning consumer's event after a wait goes this way: fewer
    /// instructions between the stamp and the handler (ARCHITECTURE.md, "A caught-up
    /// consumer's spin").
    #[inline(always)]
    pub(super) fn deliver_one<F, E>(&mut self, at: u64, handler: &mut F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        // Relaxed: a check of the caller's contract in debug builds (see the SAFETY below).
        debug_assert_eq!(
            self.seg.slot(at).header.stamp.load(Ordering::Relaxed),
            at,
            "deliver_one at an unpublished sequence"
        );
        let mut clamped = 0;
        let src = Stamped::source(&self.seg, self.max_payload, ());
        // SAFETY: the caller (`deliver_next`, after `spin_for_next`) saw the stamp of `at`
        // equal it (Acquire) and this required consumer's entry still held as it holds it
        // (ACTIVE, not released by the broker), so it gates producers at `at`; it commits
        // past `at` only below, after the handler returns: producers cannot reach the slot
        // before then, unless the broker releases it meanwhile (`torn_while_reading` below
        // says to discard the event then).
        let Some((bytes, len)) = (unsafe { src.in_place(at, &mut clamped) }) else {
            // A producer's tombstone: skipped and counted.
            self.commit(at + 1, 0, 1, clamped);
            return Ok(0);
        };
        let ev = Event {
            seq: at,
            bytes,
            end_of_batch: true,
        };
        let outcome = call(handler, ev);
        if let Some(torn) = self.torn_while_reading(at, at + 1) {
            return Err(torn);
        }
        match outcome {
            Ok(()) => {
                self.commit(at + 1, 1, 0, clamped);
                Ok(1)
            }
            Err(failure) => self.on_failure(at, (0, 0, clamped), failure, Held::InPlace(len)),
        }
    }

    pub(super) fn deliver_in_place<S, F, E>(
        &mut self,
        start: u64,
        n: u64,
        args: S::Args,
        handler: &mut F,
    ) -> Result<usize, PollError>
    where
        S: Format,
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        let seg = &self.seg;
        let src = S::source(seg, self.max_payload, args);
        let end = start + n;
        // The last event of the run that is not a tombstone (u64::MAX: none).
        let last_event = (start..end)
            .rev()
            .find(|&s| !src.is_tombstone(s))
            .unwrap_or(u64::MAX);
        // Borrowed, not copied: the copy and its write-back were 17 of the instructions of a
        // poll that delivers one event.
        let flush = &mut self.flush;
        // Read once: without a timed flush the loop has no flush work per event.
        let timed = flush.is_some();
        let mut careful = self.careful;
        let cold = &seg.entry().cold;
        let (suspect, poison) = (&mut self.suspect, &mut self.poison);
        // No count of delivered events in the loops: `at - start` is delivered plus skipped
        // at every loop head (a handler's failure leaves `at` on the failed event), so it is
        // derived below. A count kept beside `skipped` became one increment through a pointer
        // chosen between the two, a read-modify-write in memory per event.
        let (mut at, mut skipped, mut clamped) = (start, 0u64, 0u64);
        let outcome = (|| {
            // The common case, without a timed flush or a marking window: a loop with
            // nothing else in it (batched rows across processes a fifth faster; see
            // ARCHITECTURE.md, "Measured: where a per-event publish goes").
            while at < end && !timed && careful == 0 {
                // SAFETY: the caller's scan (`poll`, `poll_member`, or `spin_for_next` for
                // a run of one) saw the stamp of every slot in `start..end` equal its
                // sequence (Acquire), or the cursor past them, and this required consumer
                // has not committed past `at`, so producers cannot reach the slot until
                // after the handler returns, unless the broker releases this consumer
                // meanwhile: then another process may write the bytes while the handler
                // reads them (an optional consumer's copy takes that race), and
                // `torn_while_reading` below says to discard them.
                let Some((bytes, len)) = (unsafe { src.in_place(at, &mut clamped) }) else {
                    skipped += 1;
                    at += 1;
                    continue;
                };
                call(
                    handler,
                    Event {
                        seq: at,
                        bytes,
                        end_of_batch: at == last_event,
                    },
                )
                .map_err(|f| (f, len))?;
                at += 1;
            }
            while at < end {
                // SAFETY: as above.
                let Some((bytes, len)) = (unsafe { src.in_place(at, &mut clamped) }) else {
                    skipped += 1;
                    at += 1;
                    continue;
                };
                let last = at == last_event;
                // The timed flush cuts the batch here (no clock read when it is unset).
                let cut = timed && !last && flush.as_mut().is_some_and(Flush::due);
                if careful > 0 {
                    careful -= 1;
                    mark_before(cold, at, suspect, poison);
                }
                call(
                    handler,
                    Event {
                        seq: at,
                        bytes,
                        end_of_batch: last || cut,
                    },
                )
                .map_err(|f| (f, len))?;
                at += 1;
                if timed && (last || cut) {
                    if let Some(f) = flush.as_mut() {
                        f.edge();
                    }
                    if cut {
                        break;
                    }
                }
            }
            Ok(())
        })();
        self.careful = careful;
        // The handler read `start..at`, and the event at `at` too when it failed there.
        let read_to = if outcome.is_err() { at + 1 } else { at };
        if let Some(torn) = self.torn_while_reading(start, read_to) {
            return Err(torn);
        }
        let delivered = at - start - skipped;
        match outcome {
            Ok(()) => {
                self.commit(at, delivered, skipped, clamped);
                Ok(delivered as usize)
            }
            Err((failure, len)) => self.on_failure(
                at,
                (delivered, skipped, clamped),
                failure,
                Held::InPlace(len),
            ),
        }
    }

    fn deliver_copied<S, F, E>(
        &mut self,
        start: u64,
        n: u64,
        args: S::Args,
        handler: &mut F,
    ) -> Result<usize, PollError>
    where
        S: Format,
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        let seg = &self.seg;
        let src = S::source(seg, self.max_payload, args);
        let end = start + n;
        // Borrowed, not copied (as in `deliver_in_place`).
        let flush = &mut self.flush;
        // Read once: without a timed flush the loop has no flush work per event.
        let timed = flush.is_some();
        let mut careful = self.careful;
        let cold = &seg.entry().cold;
        let (suspect, poison) = (&mut self.suspect, &mut self.poison);
        let mut mark = |seq: u64| {
            if careful > 0 {
                careful -= 1;
                mark_before(cold, seq, suspect, poison);
            }
        };
        let [buf_a, buf_b] = &mut self.scratch;
        let mut bufs = [buf_a, buf_b];
        let (mut at, mut delivered, mut skipped, mut clamped) = (start, 0u64, 0u64, 0u64);
        // The validated event not yet delivered: (sequence, scratch index).
        let mut pending: Option<(u64, usize)> = None;
        // Tombstones found past `pending` (skipped, clamped): counted once it is delivered. A
        // failure there commits at `pending`, and the next poll passes them again.
        let mut ahead = (0u64, 0u64);
        let mut cur = 0usize;
        let mut lapped = false;
        let outcome = (|| {
            while at < end {
                let (tombstone, was_clamped) = match src.copy(at, bufs[cur]) {
                    Copied::Lapped => {
                        lapped = true;
                        break;
                    }
                    Copied::Tombstone { clamped } => (true, clamped),
                    Copied::Event { clamped } => (false, clamped),
                };
                if tombstone {
                    if pending.is_some() {
                        ahead.0 += 1;
                        ahead.1 += u64::from(was_clamped);
                    } else {
                        skipped += 1;
                        clamped += u64::from(was_clamped);
                    }
                    at += 1;
                    continue;
                }
                if let Some((seq, b)) = pending {
                    // The timed flush cuts the batch after `seq` (no clock read when unset);
                    // `at`, copied but not handed over, is read again by the next poll.
                    let cut = timed && flush.as_mut().is_some_and(Flush::due);
                    mark(seq);
                    call(
                        handler,
                        Event {
                            seq,
                            bytes: bufs[b].as_slice(),
                            end_of_batch: cut,
                        },
                    )
                    .map_err(|f| (f, b))?;
                    delivered += 1;
                    skipped += ahead.0;
                    clamped += ahead.1;
                    ahead = (0, 0);
                    if cut {
                        pending = None;
                        if let Some(f) = flush.as_mut() {
                            f.edge();
                        }
                        break;
                    }
                }
                clamped += u64::from(was_clamped);
                pending = Some((at, cur));
                cur ^= 1;
                at += 1;
            }
            if let Some((seq, b)) = pending {
                mark(seq);
                call(
                    handler,
                    Event {
                        seq,
                        bytes: bufs[b].as_slice(),
                        end_of_batch: true,
                    },
                )
                .map_err(|f| (f, b))?;
                delivered += 1;
                skipped += ahead.0;
                clamped += ahead.1;
                pending = None;
                if let Some(f) = flush.as_mut() {
                    f.edge();
                }
            }
            Ok(())
        })();
        self.careful = careful;
        match outcome {
            Ok(()) => {
                self.commit(at, delivered, skipped, clamped);
                if lapped {
                    // What was delivered is committed and counted: a corrupt position is
                    // this poll's news only when there was nothing else (the next poll
                    // finds the lap again and reports it).
                    self.jump_to_head().or_else(|e| on_nothing(delivered, e))?;
                }
                Ok(delivered as usize)
            }
            // The failing event is `pending`'s: resume there.
            Err((failure, b)) => {
                let failed_at = pending.map_or(at, |(seq, _)| seq);
                self.on_failure(
                    failed_at,
                    (delivered, skipped, clamped),
                    failure,
                    Held::Copied(b),
                )
            }
        }
    }
}

/// Hand `ev` to `handler`, catching a panic of the handler and of nothing else: a panic
/// in the delivery loop itself (a bug, or bytes it failed to guard against) propagates,
/// so tests see it rather than a `HandlerPanicked` they cannot tell apart.
#[inline(always)]
pub(super) fn call<F, E>(handler: &mut F, ev: Event<'_>) -> Result<(), Failure>
where
    F: FnMut(Event<'_>) -> Result<(), E>,
    E: std::fmt::Display,
{
    match catch_unwind(AssertUnwindSafe(|| handler(ev))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Failure::error(&e)),
        Err(payload) => Err(Failure::panic(&*payload)),
    }
}

/// What a copying reader found at a sequence (see [`Source::copy`]).
pub(super) enum Copied {
    /// The ring no longer holds it (a later lap is there, or being written).
    Lapped,
    /// A tombstone (its length was corrupt and clamped, if `clamped`).
    Tombstone { clamped: bool },
    /// The event, copied whole (its length was corrupt and clamped, if `clamped`).
    Event { clamped: bool },
}

/// A slot format the delivery loops read: stamped slots ([`Stamped`]), a fixed-size
/// ring's events ([`Fixed`]) or a ring of sized events
/// ([`SizedEvents`]). The loops are generic over it, so each format gets its own.
pub(super) trait Format {
    /// What the poll read with the run, beyond the segment (a fixed-size ring's tombstone
    /// bound).
    type Args: Copy;
    /// The run's events, read through a handle's segment.
    type Src<'a>: Source + Copy;
    /// The source of a handle's segment (`max`: its payload bound).
    fn source(seg: &Attached<ConsumerEntry>, max: usize, args: Self::Args) -> Self::Src<'_>;
}

/// Where a published run's events are read from (see [`Format`]).
pub(super) trait Source {
    /// The payload of the published `seq` to read in place, with its length (clamped to
    /// the slot, counted in `clamped`); `None` for a tombstone.
    ///
    /// # Safety
    /// The caller saw `seq` published (its stamp equal to it, Acquire, or the cursor past
    /// it) and gates producers at or before `seq` until it is done with the returned bytes.
    unsafe fn in_place(&self, seq: u64, clamped: &mut u64) -> Option<(&[u8], usize)>;
    /// Whether the published `seq` is a tombstone.
    fn is_tombstone(&self, seq: u64) -> bool;
    /// Copy the published (or lapped) `seq` into `buf` and check the copy (seqlock), for a
    /// reader that does not hold producers off the slot.
    fn copy(&self, seq: u64, buf: &mut Vec<u8>) -> Copied;
}

/// Stamped slots (the format of a ring without `event_size`).
pub(super) enum Stamped {}

impl Format for Stamped {
    type Args = ();
    type Src<'a> = StampedSrc<'a>;
    #[inline(always)]
    fn source(seg: &Attached<ConsumerEntry>, max: usize, (): ()) -> StampedSrc<'_> {
        StampedSrc {
            slots: seg.slots(),
            max,
        }
    }
}

/// A fixed-size ring's events (see `fixed`).
pub(super) enum Fixed {}

impl Format for Fixed {
    type Args = u64;
    type Src<'a> = FixedSrc<'a>;
    #[inline(always)]
    fn source(seg: &Attached<ConsumerEntry>, _max: usize, tomb_end: u64) -> FixedSrc<'_> {
        FixedSrc {
            events: seg.events(),
            tomb_end,
        }
    }
}

/// A ring of sized events: a fixed-size ring's cursor and tombstones, each slot starting
/// with its event's length word (see `Events::write_sized`).
pub(super) enum SizedEvents {}

impl Format for SizedEvents {
    type Args = u64;
    type Src<'a> = SizedSrc<'a>;
    #[inline(always)]
    fn source(seg: &Attached<ConsumerEntry>, max: usize, tomb_end: u64) -> SizedSrc<'_> {
        SizedSrc {
            fixed: FixedSrc {
                events: seg.events(),
                tomb_end,
            },
            max,
        }
    }
}

/// Stamped slots, each carrying an event of up to `max` bytes.
#[derive(Clone, Copy)]
pub(super) struct StampedSrc<'a> {
    slots: Slots<'a>,
    max: usize,
}

impl Source for StampedSrc<'_> {
    #[inline(always)]
    unsafe fn in_place(&self, seq: u64, clamped: &mut u64) -> Option<(&[u8], usize)> {
        let slot = self.slots.get(seq);
        // Relaxed: ordered by the caller's Acquire stamp load.
        if slot.header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE != 0 {
            return None;
        }
        let mut len = slot.header.len.load(Ordering::Relaxed) as usize;
        if len > self.max {
            len = self.max;
            *clamped += 1;
        }
        // SAFETY: the caller's contract: the stamp equalled `seq` and the slot is not
        // reused while the bytes are borrowed.
        Some((unsafe { slot.payload(len) }, len))
    }

    #[inline(always)]
    fn is_tombstone(&self, seq: u64) -> bool {
        // Relaxed: ordered by the caller's Acquire stamp load.
        self.slots.get(seq).header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE != 0
    }

    #[inline(always)]
    fn copy(&self, seq: u64, buf: &mut Vec<u8>) -> Copied {
        let slot = self.slots.get(seq);
        // Relaxed: racy reads of a slot a producer may be rewriting; the stamp check after
        // the Acquire fence below says whether they, and the copy, are this event's.
        let flags = slot.header.flags.load(Ordering::Relaxed);
        let mut len = slot.header.len.load(Ordering::Relaxed) as usize;
        let clamped = len > self.max;
        if clamped {
            len = self.max;
        }
        slot.copy_racy(len, buf);
        // Acquire fence: pairs with the producer's Release fence after its WRITING stamp;
        // if the copy saw any byte of a newer write, the stamp read below sees that write's
        // WRITING stamp (seqlock).
        fence(Ordering::Acquire);
        if slot.header.stamp.load(Ordering::Relaxed) != seq {
            Copied::Lapped
        } else if flags & SLOT_FLAG_TOMBSTONE != 0 {
            Copied::Tombstone { clamped }
        } else {
            Copied::Event { clamped }
        }
    }
}

/// A fixed-size ring's events, up to a cursor read with `tomb_end` (see `fixed`).
#[derive(Clone, Copy)]
pub(super) struct FixedSrc<'a> {
    events: Events<'a>,
    tomb_end: u64,
}

impl Source for FixedSrc<'_> {
    #[inline(always)]
    unsafe fn in_place(&self, seq: u64, _clamped: &mut u64) -> Option<(&[u8], usize)> {
        if fixed::is_tombstone(&self.events, seq, self.tomb_end) {
            return None;
        }
        // SAFETY: the caller's contract: the cursor was past `seq` (Acquire) and the slot is
        // not reused while the bytes are borrowed.
        Some((unsafe { self.events.payload(seq) }, self.events.size()))
    }

    #[inline(always)]
    fn is_tombstone(&self, seq: u64) -> bool {
        fixed::is_tombstone(&self.events, seq, self.tomb_end)
    }

    #[inline(always)]
    fn copy(&self, seq: u64, buf: &mut Vec<u8>) -> Copied {
        self.checked_copy(seq, || {
            self.events.copy_racy(seq, buf);
            false
        })
    }
}

impl FixedSrc<'_> {
    /// `copy` (a copy of `seq`, saying whether a length in it was clamped), then the horizon
    /// check of the copy (see `fixed::copy_held`). A tombstone's slot holds an earlier
    /// event, whose length is not counted, as in place.
    #[inline(always)]
    fn checked_copy(&self, seq: u64, copy: impl FnOnce() -> bool) -> Copied {
        let tombstone = fixed::is_tombstone(&self.events, seq, self.tomb_end);
        let clamped = copy();
        if !fixed::copy_held(&self.events, seq) {
            Copied::Lapped
        } else if tombstone {
            Copied::Tombstone { clamped: false }
        } else {
            Copied::Event { clamped }
        }
    }
}

/// A ring of sized events, up to a cursor read with `tomb_end`: as [`FixedSrc`], each event
/// as long as its length word says.
#[derive(Clone, Copy)]
pub(super) struct SizedSrc<'a> {
    fixed: FixedSrc<'a>,
    /// The largest event (the handle's `max_payload`).
    max: usize,
}

impl Source for SizedSrc<'_> {
    #[inline(always)]
    unsafe fn in_place(&self, seq: u64, clamped: &mut u64) -> Option<(&[u8], usize)> {
        let events = &self.fixed.events;
        if fixed::is_tombstone(events, seq, self.fixed.tomb_end) {
            return None;
        }
        // SAFETY: the caller's contract, as in `FixedSrc::in_place`.
        let (bytes, cut) = unsafe { events.sized_event(seq, self.max) };
        if cut {
            *clamped += 1;
        }
        Some((bytes, bytes.len()))
    }

    #[inline(always)]
    fn is_tombstone(&self, seq: u64) -> bool {
        self.fixed.is_tombstone(seq)
    }

    #[inline(always)]
    fn copy(&self, seq: u64, buf: &mut Vec<u8>) -> Copied {
        self.fixed.checked_copy(seq, || {
            self.fixed.events.copy_sized_racy(seq, self.max, buf)
        })
    }
}

/// After a run that was lapped: a failed jump to the head is the poll's error only when the
/// run delivered nothing, or when the entry is no longer this handle's (`EntryLost`: the
/// handle is failed, and a later call's `Failed` would not say why).
pub(super) fn on_nothing(delivered: u64, e: PollError) -> Result<(), PollError> {
    if delivered == 0 || e == PollError::EntryLost {
        Err(e)
    } else {
        Ok(())
    }
}

/// A position at or past `MAX_SEQUENCE`, which no ring reaches, as the poll's error.
fn corrupt(position: u64) -> Result<(), PollError> {
    if position >= shmring_layout::MAX_SEQUENCE {
        Err(PollError::CorruptPosition { position })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lapped run that delivered events keeps its count when the jump to the head fails,
    /// except when the entry was lost: then the poll says so, once.
    #[test]
    fn a_lost_entry_is_the_polls_error_even_after_events() {
        let corrupt = PollError::CorruptPosition { position: u64::MAX };
        assert_eq!(on_nothing(0, corrupt.clone()), Err(corrupt.clone()));
        assert_eq!(on_nothing(3, corrupt), Ok(()));
        assert_eq!(
            on_nothing(0, PollError::EntryLost),
            Err(PollError::EntryLost)
        );
        assert_eq!(
            on_nothing(3, PollError::EntryLost),
            Err(PollError::EntryLost)
        );
    }
}
