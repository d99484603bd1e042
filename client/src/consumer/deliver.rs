//! Delivery: the published run from the position, handed over in place (required) or
//! copied and checked (optional), then one commit.

use super::*;

impl Consumer {
    /// Whether an event (or a lap) is waiting: the last look before parking.
    pub fn has_pending(&self) -> bool {
        if self.member.is_some() {
            return self.member_pending();
        }
        if self.nothing_claimed() {
            return false;
        }
        let stamp = self
            .seg
            .slot(self.next)
            .header
            .stamp
            .load(Ordering::Acquire);
        stamp::reached(stamp, self.next)
    }

    /// Whether no producer has even claimed this consumer's next sequence: a look at the
    /// claim line instead of the slot line, so that a consumer that has caught up does not
    /// pull the slot line away from the producer while it writes the slot. Sound for the
    /// last look before parking too: a producer's claim is ordered before its stamp, so a
    /// look that misses the claim also misses the stamp, and the fence pair of the park
    /// protocol covers both.
    #[inline(always)]
    fn nothing_claimed(&self) -> bool {
        // Relaxed: a hint; the Acquire stamp load decides. CLAIM_CLOSED set reads as far
        // ahead, so a closed multi-producer line always looks at the slot.
        self.seg.lines().claim.value.load(Ordering::Relaxed) <= self.next
    }

    /// Deliver the contiguous published run from this consumer's position, up to the batch
    /// cap, then commit the position once. Returns the number of events handed to the
    /// handler (0: nothing was published; tombstones are skipped and counted, not handed).
    pub fn poll_once<F>(&mut self, mut handler: F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>),
    {
        if self.failed {
            return Err(PollError::Failed);
        }
        if self.member.is_some() {
            return self.poll_member(&mut handler);
        }
        if self.nothing_claimed() {
            return self.idle_checks(false);
        }
        // Relaxed: a hint on this consumer's own line; `idle_checks` decides. A required
        // consumer reads in place only while it holds its entry as ACTIVE: released by the
        // broker, it first gates again from the head.
        if self.required && self.entry().hot.word.load(Ordering::Relaxed) != self.word {
            return self.idle_checks(false);
        }
        let start = self.next;
        let mut n = 0u64;
        let mut lapped = false;
        let mut repaired = false;
        while n < self.batch_cap {
            let seq = start + n;
            // Acquire: SYNC POINT with the producer's Release stamp store; the payload, len
            // and flags of every slot in the run are visible after this.
            let stamp = self.seg.slot(seq).header.stamp.load(Ordering::Acquire);
            if stamp == seq {
                n += 1;
            } else {
                match stamp::read(stamp, seq) {
                    Stamp::Lapped => lapped = true,
                    Stamp::Repaired => repaired = n == 0,
                    Stamp::Published | Stamp::Pending => {}
                }
                break;
            }
        }
        if repaired {
            self.skip_repaired();
            return self.poll_once(handler);
        }
        if n == 0 {
            return self.idle_checks(lapped);
        }
        if self.required {
            self.deliver_in_place(start, n, &mut handler)
        } else {
            self.deliver_copied(start, n, &mut handler)
        }
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
        // Acquire: pairs with the broker's SeqCst release CAS.
        let word = self.entry().hot.word.load(Ordering::Acquire);
        if word != self.word && word != table::consumer::released(self.word) {
            self.failed = true;
            return Err(PollError::EntryLost);
        }
        if lapped || word != self.word {
            self.jump_to_head();
        }
        if is_deleted(&self.seg) {
            return Err(PollError::Deleted);
        }
        Ok(0)
    }

    /// Lapped (or released): skip to the head and count the gap.
    fn jump_to_head(&mut self) {
        let released = table::consumer::released(self.word);
        // Acquire: pairs with the broker's SeqCst release CAS.
        if self.entry().hot.word.load(Ordering::Acquire) == released {
            // Gate again, by the attach protocol: SeqCst CAS, then read the head.
            if let Ok(word) =
                table::consumer::set(&self.entry().hot.word, released, consumer_state::ACTIVE)
            {
                self.word = word;
            }
        }
        let head = self.seg.position();
        if head > self.next {
            self.stats.dropped_behind = self.stats.dropped_behind.wrapping_add(head - self.next);
            self.next = head;
            // Release: pairs with the producers' Acquire scan.
            self.entry().hot.next.store(head, Ordering::Release);
            self.store_stats();
        }
    }

    pub(crate) fn commit(&mut self, next: u64, delivered: u64, skipped: u64, clamped: u64) {
        // The first commit registers this process for membarrier (see `fence`), before the
        // store a parked producer waits for: never between that store and the wake.
        let registered = fence::light_allowed(&mut self.registered);
        self.next = next;
        // Release: SYNC POINT with the Acquire load of `next` in the producers' gate scan;
        // this consumer's reads of every slot below `next` happen-before their reuse.
        self.entry().hot.next.store(next, Ordering::Release);
        // A producer may be parked waiting for this room.
        park::notify(
            &self.seg.lines().producer_wake.value,
            self.seg.header(),
            registered,
        );
        // Wrapping: the counters were loaded from shared memory, which may hold anything.
        let s = &mut self.stats;
        s.delivered = s.delivered.wrapping_add(delivered);
        s.skipped = s.skipped.wrapping_add(skipped);
        s.clamped = s.clamped.wrapping_add(clamped);
        s.batches = s.batches.wrapping_add(u64::from(delivered > 0));
        self.store_stats();
    }

    fn fail(&mut self, at: u64, delivered: u64, skipped: u64, clamped: u64) -> PollError {
        self.commit(at, delivered, skipped, clamped);
        self.failed = true;
        self.stats.failures = self.stats.failures.wrapping_add(1);
        self.store_stats();
        // The committed position and counters are visible with the state (the CAS is
        // SeqCst). From the word this handle holds: a broker's RELEASED is never overwritten.
        if let Ok(word) =
            table::consumer::set(&self.entry().hot.word, self.word, consumer_state::FAILED)
        {
            self.word = word;
        }
        PollError::HandlerPanicked { sequence: at }
    }

    pub(super) fn deliver_in_place<F>(
        &mut self,
        start: u64,
        n: u64,
        handler: &mut F,
    ) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>),
    {
        let seg = &*self.seg;
        let max = self.max_payload;
        let end = start + n;
        let last_event = (start..end)
            .rev()
            .find(|&s| seg.slot(s).header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE == 0);
        let (mut at, mut delivered, mut skipped, mut clamped) = (start, 0u64, 0u64, 0u64);
        let outcome = (|| {
            while at < end {
                let slot = seg.slot(at);
                // Relaxed: ordered by the Acquire stamp load in `poll_once`.
                if slot.header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE != 0 {
                    skipped += 1;
                    at += 1;
                    continue;
                }
                let mut len = slot.header.len.load(Ordering::Relaxed) as usize;
                if len > max {
                    len = max;
                    clamped += 1;
                }
                // SAFETY: the stamp equalled `at` (Acquire) and this required consumer has
                // not committed past `at`, so producers cannot reach this slot again until
                // after the handler returns.
                let bytes = unsafe { slot.payload(len) };
                call(
                    handler,
                    Event {
                        seq: at,
                        bytes,
                        end_of_batch: Some(at) == last_event,
                    },
                )?;
                delivered += 1;
                at += 1;
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => {
                self.commit(end, delivered, skipped, clamped);
                Ok(delivered as usize)
            }
            Err(HandlerPanic) => Err(self.fail(at, delivered, skipped, clamped)),
        }
    }

    fn deliver_copied<F>(&mut self, start: u64, n: u64, handler: &mut F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>),
    {
        let seg = &*self.seg;
        let max = self.max_payload;
        let end = start + n;
        let [buf_a, buf_b] = &mut self.scratch;
        let mut bufs = [buf_a, buf_b];
        let (mut at, mut delivered, mut skipped, mut clamped) = (start, 0u64, 0u64, 0u64);
        // The validated event not yet delivered: (sequence, scratch index).
        let mut pending: Option<(u64, usize)> = None;
        let mut cur = 0usize;
        let mut lapped = false;
        let outcome = (|| {
            while at < end {
                let slot = seg.slot(at);
                let flags = slot.header.flags.load(Ordering::Relaxed);
                let mut len = slot.header.len.load(Ordering::Relaxed) as usize;
                let was_clamped = len > max;
                if was_clamped {
                    len = max;
                }
                slot.copy_racy(len, bufs[cur]);
                // Acquire fence: pairs with the producer's Release fence after its WRITING
                // stamp; if the copy saw any byte of a newer write, the stamp read below
                // sees that write's WRITING stamp (seqlock).
                fence(Ordering::Acquire);
                if slot.header.stamp.load(Ordering::Relaxed) != at {
                    lapped = true;
                    break;
                }
                clamped += u64::from(was_clamped);
                if flags & SLOT_FLAG_TOMBSTONE != 0 {
                    skipped += 1;
                    at += 1;
                    continue;
                }
                if let Some((seq, b)) = pending {
                    call(
                        handler,
                        Event {
                            seq,
                            bytes: bufs[b].as_slice(),
                            end_of_batch: false,
                        },
                    )?;
                    delivered += 1;
                }
                pending = Some((at, cur));
                cur ^= 1;
                at += 1;
            }
            if let Some((seq, b)) = pending {
                call(
                    handler,
                    Event {
                        seq,
                        bytes: bufs[b].as_slice(),
                        end_of_batch: true,
                    },
                )?;
                delivered += 1;
                pending = None;
            }
            Ok(())
        })();
        match outcome {
            Ok(()) => {
                self.commit(at, delivered, skipped, clamped);
                if lapped {
                    self.jump_to_head();
                }
                Ok(delivered as usize)
            }
            // The panicking event is `pending`'s: resume there.
            Err(HandlerPanic) => {
                let failed_at = pending.map_or(at, |(seq, _)| seq);
                Err(self.fail(failed_at, delivered, skipped, clamped))
            }
        }
    }
}

/// The handler panicked (see [`call`]).
pub(super) struct HandlerPanic;

/// Hand `ev` to `handler`, catching a panic of the handler and of nothing else: a panic
/// in the delivery loop itself (a bug, or bytes it failed to guard against) propagates,
/// so tests see it rather than a `HandlerPanicked` they cannot tell apart.
#[inline(always)]
pub(super) fn call<F: FnMut(Event<'_>)>(
    handler: &mut F,
    ev: Event<'_>,
) -> Result<(), HandlerPanic> {
    catch_unwind(AssertUnwindSafe(|| handler(ev))).map_err(|_| HandlerPanic)
}
