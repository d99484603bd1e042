//! Publishing: claim, the wrap gate, the slot write, the stamp, the wake.

use super::*;

/// How long a producer waiting for a slot's previous lap sleeps between looks, once it has
/// spun and yielded (see [`Producer::begin_write`]): that write usually comes within a
/// scheduling quantum, and nothing wakes the producer for it.
const LAP_SLEEP: Duration = Duration::from_micros(100);

/// Claims through the counter between two looks of a producer at whether it is alone and
/// may take the line to itself (see [`Producer::try_lone`]): each look reads the producer
/// table.
const LONE_RETRY: u32 = 4096;

/// Why a claim that met a lone producer could not go on ([`Producer::meet_lone`]).
enum MetLone {
    /// The ring was deleted.
    Deleted,
    /// The line could not be settled (its lifecycle word is corrupt): refused as closed.
    Closed,
    /// The counter names an entry past the table: this word.
    Corrupt(u64),
    /// This process cannot end the lone claims, and they did not end before the deadline.
    Late,
}

impl Producer {
    pub(super) fn refuse(&mut self) {
        self.refused += 1;
        // Relaxed: a counter only this producer writes.
        self.entry().refused.store(self.refused, Ordering::Relaxed);
    }

    fn deleted(&self) -> bool {
        is_deleted(&self.seg)
    }

    /// The producer's half of the fence pairs (park/wake, and the single-producer close):
    /// compiler-only once this process registered for membarrier and while every process of
    /// the ring uses it.
    #[inline(always)]
    fn light_fence(registered: bool, seg: &Segment) {
        // Relaxed: the mode only rises, at attach or before a close, ahead of the barrier it
        // stands for.
        let light = registered
            && seg.header().fence_mode.load(Ordering::Relaxed) == FenceMode::Membarrier as u32;
        fence::light(light);
    }

    /// Before a claim: the first one registers this process for membarrier (see `fence`),
    /// ahead of every store the fence pairs order, so that no parker or stopper ever waits
    /// for a waker that is inside the registration.
    #[inline(always)]
    fn before_claim(&mut self) {
        self.hold_position();
        fence::light_allowed(&mut self.registered);
        if self.open_claim.is_some() {
            self.close_forgotten_claim();
        }
    }

    /// Single producer: claim `n` sequences at `self.next` (see `line`). The fast path
    /// reads and writes the two words only; the `Line` and its environment are built on the
    /// cold path, so that a publish does not store them on its stack every time.
    ///
    /// On a fixed-size ring the claim word is the cursor, and the claim's events are written
    /// after it: the claim records its first sequence as pending first (consumers deliver
    /// below it until the caller's `end_pending`), and once accepted raises the write
    /// horizon over it (see `fixed`).
    #[inline(always)]
    fn claim_single(&mut self, n: u64) -> Result<u64, Refused> {
        let seq = self.next;
        let registered = self.registered;
        let seg = &*self.seg;
        let lines = seg.lines();
        let word = if self.fixed {
            let events = seg.events();
            fixed::record_pending(&events, seq);
            // Before the claim's store, whatever the claim comes to: the wrap gate passed
            // it, and the cursor then never lies past the horizon, a refused store included
            // (`Ring::info` reads a cursor past it as corrupt).
            fixed::cover(&events, seq + n);
            &lines.cursor.cursor
        } else {
            &lines.claim.value
        };
        let fast = line::claim_single_fast(
            word,
            &lines.lifecycle.value.lifecycle,
            &mut self.seen,
            seq,
            n,
            || Self::light_fence(registered, seg),
        );
        if fast != Fast::Accepted {
            if let Err(r) = self.finish_claim_single(fast, seq, n) {
                if self.fixed {
                    // Refused: nothing of it is written, and nothing is pending.
                    fixed::end_pending(&self.seg.events());
                }
                return Err(r);
            }
        }
        self.next = seq + n;
        Ok(seq)
    }

    /// A single-producer claim the fast path did not accept: refused, or (p5) decides.
    #[cold]
    #[inline(never)]
    fn finish_claim_single(&self, fast: Fast, seq: u64, n: u64) -> Result<(), Refused> {
        let seg = &*self.seg;
        seg.line()
            .finish_claim_single(&SegEnv::producer(seg, self.pid), fast, seq, n)
    }

    /// Whether `last` (the last sequence of a claim) may be written now, refreshing the
    /// cached gate if needed.
    #[inline]
    fn has_room(&mut self, last: u64) -> bool {
        let need = (last + 1).saturating_sub(self.capacity);
        if self.cached_gate >= need {
            return true;
        }
        self.cached_gate = self.cached_gate.max(gating::refresh(&self.seg, need));
        self.cached_gate >= need
    }

    /// Take `n` sequences (`fetch_add`) and wait at the wrap gate for the last of them.
    #[inline(always)]
    pub(super) fn claim_blocking(&mut self, n: u64) -> Result<u64, PublishError> {
        self.before_claim();
        if self.single {
            if self.next >= MAX_SEQUENCE {
                // A cursor another process moved (`sound_position`): nothing claimed.
                return Err(self.corrupt_claim(self.next));
            }
            // The claim's sequences are `next..next + n`.
            let last = self.next + n - 1;
            // A fixed-size ring's claim raises the write horizon, which copying readers check
            // their copies against (see `fixed`): it says a slot may be being overwritten, so
            // the claim is made only once the wrap gate passed it, never while the producer
            // waits for room. A stamped ring's producer claims first and waits after.
            if self.fixed && !self.has_room(last) {
                self.room_before_claim(last)?;
            }
            let c = self.claim_single(n).map_err(|r| self.refused_claim(r))?;
            if !self.fixed && !self.has_room(last) && !self.wait_for_room(last, None, false) {
                return Err(PublishError::Deleted);
            }
            return Ok(c);
        }
        if !self.lone && self.lone_retry == 0 {
            self.try_lone();
        }
        // Announce the claim before taking it: a producer that dies between the two leaves
        // a hole the broker can then find (see `Ring::repair_dead_producer`).
        table::producer::announce_claim(&self.entry().in_flight);
        if self.lone {
            if let Some(c) = self.claim_lone(n) {
                return self.claimed(c, n);
            }
        }
        let c = match self.seg.line().claim_multi(n) {
            Ok(c) => c,
            Err(r) => return Err(self.refused_by_the_counter(r)),
        };
        if c >= MAX_SEQUENCE {
            return self.claim_after_lone(c, n);
        }
        self.claimed_through_counter(c, n)
    }

    /// A claim through the counter refused (the line closed): nothing in flight, counted.
    /// The close recorded the claim count before it set CLOSED; this increment of the low
    /// bits is discarded when the ring starts again (see `line`). It takes no sequence, so
    /// the run stays as it was: the next claim follows its end only if nobody else claimed
    /// in between.
    #[cold]
    fn refused_by_the_counter(&mut self, r: Refused) -> PublishError {
        self.clear_in_flight();
        self.refuse();
        match r {
            Refused::Closed => PublishError::Closed,
            Refused::Deleted => PublishError::Deleted,
        }
    }

    /// A multi-producer claim of `c..c + n` taken (through the counter or lone): record it,
    /// extend the run, and wait at the wrap gate for its last sequence.
    #[inline(always)]
    fn claimed(&mut self, c: u64, n: u64) -> Result<u64, PublishError> {
        self.mark_in_flight(c, n);
        self.extend_run(c, n);
        let last = c + n - 1;
        if !self.has_room(last) && !self.wait_for_room(last, None, false) {
            return Err(PublishError::Deleted);
        }
        Ok(c)
    }

    /// [`Producer::claimed`] for a claim through the counter, which also counts down to the
    /// next look at taking the line alone (a lone claim has nothing to count).
    #[inline(always)]
    fn claimed_through_counter(&mut self, c: u64, n: u64) -> Result<u64, PublishError> {
        self.lone_retry = self.lone_retry.saturating_sub(1);
        self.claimed(c, n)
    }

    /// A claim through the counter read `c`, at or past `MAX_SEQUENCE`: a lone producer's
    /// counter (end its claims, then claim again; see `line`, "Lone claims"), or one another
    /// process overwrote. The announcement is cleared while this waits (no sequence is
    /// held), and made again before each claim.
    #[cold]
    #[inline(never)]
    fn claim_after_lone(&mut self, mut c: u64, n: u64) -> Result<u64, PublishError> {
        loop {
            let Some(index) = shmring_layout::claim_lone_index(c) else {
                return Err(self.corrupt_claim(c));
            };
            // The claim met the lone counter and took no sequence: nothing is in flight
            // while this waits (a repair meanwhile would wait for it), announced again
            // before the next claim.
            self.clear_in_flight();
            if let Err(e) = self.meet_lone(index, None) {
                self.refuse();
                return Err(match e {
                    MetLone::Corrupt(position) => PublishError::CorruptPosition { position },
                    MetLone::Closed => PublishError::Closed,
                    // `Late` needs a deadline, which a blocking claim has not.
                    MetLone::Deleted | MetLone::Late => PublishError::Deleted,
                });
            }
            table::producer::announce_claim(&self.entry().in_flight);
            c = match self.seg.line().claim_multi(n) {
                Ok(c) if c >= MAX_SEQUENCE => c,
                Ok(c) => return self.claimed_through_counter(c, n),
                Err(r) => return Err(self.refused_by_the_counter(r)),
            };
        }
    }

    /// A claim met lone producer `index`: end its claims (`Line::share`). A process without
    /// the fence waits instead until the counter no longer names it (the lone producer ends
    /// its claims at its next claim, when it sees this process's fence mode), until
    /// `deadline` if given (then `Late`). Never bumps the counter while it waits.
    fn meet_lone(&self, index: u32, deadline: Option<Instant>) -> Result<(), MetLone> {
        let seg = &*self.seg;
        let shared = match deadline {
            // A bounded claim waits for another owner of the lifecycle only until then.
            Some(d) => seg.line().share(
                &SegEnv::lifecycle_within(seg, d.saturating_duration_since(Instant::now())),
                index,
            ),
            None => seg.line().share(&SegEnv::producer(seg, self.pid), index),
        };
        match shared {
            Ok(()) => Ok(()),
            Err(line::LineError::NoBarrier) => {
                let mut idle = producer_backoff();
                loop {
                    // Acquire: the install's record, as a claim through the counter reads it.
                    let c = seg.lines().claim.value.load(Ordering::Acquire);
                    if shmring_layout::claim_lone_index(c) != Some(index) {
                        return Ok(());
                    }
                    if line::LoneWords::gone(seg, index) {
                        // It died: its position is final, and this process ends its claims
                        // without the fence.
                        return self.meet_lone(index, deadline);
                    }
                    if self.gives_up(deadline, false) {
                        return Err(if self.deleted() {
                            MetLone::Deleted
                        } else {
                            MetLone::Late
                        });
                    }
                    if !idle.next().pause() {
                        std::thread::sleep(LAP_SLEEP);
                    }
                }
            }
            Err(line::LineError::CorruptCounter(word)) => Err(MetLone::Corrupt(word)),
            // Another live owner of the lifecycle did not finish before the deadline.
            Err(line::LineError::Busy(_)) if deadline.is_some() => Err(MetLone::Late),
            Err(_) if self.deleted() => Err(MetLone::Deleted),
            // The lifecycle word is corrupt: no claim now.
            Err(_) => Err(MetLone::Closed),
        }
    }

    /// A lone producer's claim of `n` sequences at `self.next` (see `line`, "Lone claims"):
    /// `Some(first)`, or `None` once its lone claims ended (claim through the counter). The
    /// fast path reads and writes two words, as a single producer's; a process whose ring
    /// lost the asymmetric fence (a process without membarrier attached) ends its lone
    /// claims first, since that process cannot end them itself.
    #[inline(always)]
    fn claim_lone(&mut self, n: u64) -> Option<u64> {
        let seq = self.next;
        let seg = &*self.seg;
        if !park::light(seg.header(), self.registered) {
            self.end_lone();
            return None;
        }
        let entry = self.seg.entry();
        let fast = line::claim_lone_fast(
            &entry.lone,
            &entry.lone_end,
            &seg.lines().lifecycle.value.lifecycle,
            self.seen,
            seq,
            n,
            || fence::light(true),
        );
        if fast != Fast::Accepted && !self.decide_lone(fast, seq, n) {
            return None;
        }
        self.next = seq + n;
        Some(seq)
    }

    /// A lone claim the fast path did not accept: the record of the end of the lone claims
    /// decides it (`Line::decide_lone`). False: the lone claims ended before it.
    #[cold]
    #[inline(never)]
    fn decide_lone(&mut self, fast: Fast, seq: u64, n: u64) -> bool {
        let seg = &*self.seg;
        let env = SegEnv::producer(seg, self.pid);
        let index = self.seg.index();
        let outcome = seg
            .line()
            .decide_lone(&env, index, seq, n, fast == Fast::Decide);
        if outcome == line::LoneClaim::Accepted {
            return true;
        }
        self.lone = false;
        self.lone_retry = LONE_RETRY;
        false
    }

    /// End this lone producer's claims at its position (a detach, or a ring that lost the
    /// asymmetric fence): the next claim through the counter follows its last one.
    #[cold]
    pub(super) fn end_lone(&mut self) {
        let seg = &*self.seg;
        let env = SegEnv::producer(seg, self.pid);
        // A record or counter no ring writes is left as it is: the next claim through the
        // counter reports it.
        let _ = seg.line().end_own_lone(&env, self.seg.index(), self.next);
        self.lone = false;
        self.lone_retry = LONE_RETRY;
    }

    /// Take the line to itself if this producer is alone on a running multi-producer ring of
    /// stamped slots (see `line`, "Lone claims"): no other producer entry in use, this
    /// process and every process of the ring able to use the asymmetric fence, no claim
    /// guard open. Otherwise looks again after `LONE_RETRY` claims through the counter.
    #[cold]
    #[inline(never)]
    pub(super) fn try_lone(&mut self) {
        self.lone_retry = LONE_RETRY;
        if self.single || self.fixed || self.lone || self.open_claim.is_some() {
            return;
        }
        let seg = &*self.seg;
        if !fence::supported()
            // Relaxed: a mode word that only rises; `take_lone` checks the line itself.
            || seg.header().fence_mode.load(Ordering::Relaxed) != FenceMode::Membarrier as u32
        {
            return;
        }
        let me = self.seg.index();
        let alone = (0..seg.geometry().max_producers)
            .filter(|&i| i != me)
            .map_while(|i| seg.producer(i))
            // Relaxed: a hint; two producers that each miss the other are sorted out by
            // the counter (the second one's claim ends the first one's lone claims).
            .all(|p| p.state(Ordering::Relaxed) == shmring_layout::producer_state::FREE);
        if !alone {
            return;
        }
        let env = SegEnv::producer(seg, self.pid);
        if let Some((next, seen)) = seg.line().take_lone(&env, me, |s| seg.reached(s)) {
            self.lone = true;
            self.next = next;
            self.seen = seen;
        }
    }

    /// A multi-producer claim at `position`, at or past `MAX_SEQUENCE`: another process
    /// overwrote the claim word. Nothing is recorded in flight (no slot is written, so
    /// there is no hole to repair); the refusal is counted.
    #[cold]
    fn corrupt_claim(&mut self, position: u64) -> PublishError {
        self.clear_in_flight();
        self.refuse();
        PublishError::CorruptPosition { position }
    }

    /// A fixed-size ring's wait for room before its claim: a stop meanwhile refuses the
    /// publish (nothing was claimed), as a claim would.
    #[cold]
    fn room_before_claim(&mut self, last: u64) -> Result<(), PublishError> {
        if self.wait_for_room(last, None, true) {
            return Ok(());
        }
        self.refuse();
        if self.deleted() {
            return Err(PublishError::Deleted);
        }
        Err(PublishError::Closed)
    }

    /// Whether a wait for room or for a lap ends unmet: the ring was deleted, `deadline`
    /// passed, or (`until_closed`: the caller holds no claim yet) the ring closed.
    fn gives_up(&self, deadline: Option<Instant>, until_closed: bool) -> bool {
        self.deleted()
            || deadline.is_some_and(|d| Instant::now() >= d)
            || (until_closed && self.seg.line().is_closed())
    }

    /// Wait until `last` may be written: spin, yield, then park on the producer wake line
    /// until a consumer commits. Returns false if the ring was deleted, if `deadline`
    /// passed first, or (`until_closed`: the caller holds no claim yet) if the ring closed.
    #[cold]
    fn wait_for_room(&mut self, last: u64, deadline: Option<Instant>, until_closed: bool) -> bool {
        self.room_waits += 1;
        let mut idle = producer_backoff();
        let need = (last + 1).saturating_sub(self.capacity);
        while !self.has_room(last) {
            if self.gives_up(deadline, until_closed) {
                return false;
            }
            if idle.next().pause() {
                continue;
            }
            let net = deadline.map_or(PARK_NET, |d| {
                d.saturating_duration_since(Instant::now()).min(PARK_NET)
            });
            let seg = &*self.seg;
            // A stop wakes this line: a caller that may give up on it looks too.
            let closed = || until_closed && seg.line().is_closed();
            let parked = park::park(&seg.lines().producer_wake.value, net, || {
                gating::refresh(seg, need) >= need || self.deleted() || closed()
            });
            self.wakes
                .count(parked, || gating::refresh(seg, need) >= need || closed());
            if parked != Parked::Ready {
                self.parks += 1;
                // Relaxed: a counter only this producer writes.
                self.entry().parks.store(self.parks, Ordering::Relaxed);
            }
        }
        true
    }

    /// Take `n` sequences with a CAS once there is room: a refusal spends no sequence. A
    /// lone producer met on the way is waited for until `deadline` at most (see
    /// [`Producer::meet_lone`]).
    fn claim_if_room(&mut self, n: u64, deadline: Instant) -> Result<u64, TryPublishError> {
        self.before_claim();
        if !self.single && !self.lone && self.lone_retry == 0 {
            self.try_lone();
        }
        if self.single {
            if self.next >= MAX_SEQUENCE {
                // A cursor another process moved (`sound_position`): nothing claimed.
                let position = self.next;
                self.refuse();
                return Err(TryPublishError::CorruptPosition { position });
            }
            if !self.has_room(self.next + n - 1) {
                return Err(if self.seg.line().is_closed() {
                    self.closed_error()
                } else {
                    TryPublishError::Full
                });
            }
            return self.claim_single(n).map_err(|r| match r {
                Refused::Closed => TryPublishError::Closed,
                Refused::Deleted => TryPublishError::Deleted,
            });
        }
        if self.lone {
            if !self.has_room(self.next + n - 1) || !self.laps_free(self.next, n) {
                return Err(if self.seg.line().is_closed() {
                    self.closed_error()
                } else {
                    TryPublishError::Full
                });
            }
            table::producer::announce_claim(&self.entry().in_flight);
            if let Some(c) = self.claim_lone(n) {
                self.mark_in_flight(c, n);
                self.extend_run(c, n);
                self.laps_checked.set((c, c + n));
                return Ok(c);
            }
            self.clear_in_flight();
        }
        loop {
            // Acquire: pairs with other claims' RMWs (only the number is used).
            let c = self.seg.lines().claim.value.load(Ordering::Acquire);
            if c & CLAIM_CLOSED != 0 {
                return Err(self.closed_error());
            }
            if let Some(index) = shmring_layout::claim_lone_index(c) {
                match self.meet_lone(index, Some(deadline)) {
                    Ok(()) => continue,
                    Err(MetLone::Late) => return Err(TryPublishError::Full),
                    Err(MetLone::Deleted) => return Err(TryPublishError::Deleted),
                    Err(MetLone::Closed) => return Err(TryPublishError::Closed),
                    Err(MetLone::Corrupt(position)) => {
                        return Err(TryPublishError::CorruptPosition { position })
                    }
                }
            }
            if c >= MAX_SEQUENCE {
                // Another process overwrote the claim word: no wait for room ends that.
                return Err(TryPublishError::CorruptPosition { position: c });
            }
            if !self.has_room(c + n - 1) || !self.laps_free(c, n) {
                return Err(TryPublishError::Full);
            }
            table::producer::announce_claim(&self.entry().in_flight);
            // SeqCst: as in `claim_blocking`.
            if self
                .seg
                .lines()
                .claim
                .value
                .compare_exchange_weak(c, c + n, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                self.mark_in_flight(c, n);
                self.extend_run(c, n);
                self.laps_checked.set((c, c + n));
                self.lone_retry = self.lone_retry.saturating_sub(1);
                return Ok(c);
            }
            self.clear_in_flight();
            std::hint::spin_loop();
        }
    }

    #[cold]
    fn closed_error(&self) -> TryPublishError {
        if self.deleted() {
            TryPublishError::Deleted
        } else {
            TryPublishError::Closed
        }
    }

    /// A multi-producer claim of `first..first + n` taken: it extends this producer's run if
    /// it follows the run's last claim, or starts a new one.
    #[inline(always)]
    fn extend_run(&mut self, first: u64, n: u64) {
        if first != self.run.end {
            self.run.start = first;
        }
        self.run.end = first + n;
    }

    #[inline]
    fn mark_in_flight(&self, first: u64, n: u64) {
        let e = self.entry();
        // Read only to attribute a hole; the claim counter already says the sequences are
        // taken. The Release store is free on x86_64.
        table::producer::record_claim(&e.in_flight, &e.in_flight_len, first, n);
    }

    #[inline]
    pub(super) fn clear_in_flight(&self) {
        if self.single {
            // A single producer's claim is the line's position, not recorded in its entry.
            return;
        }
        table::producer::clear_claim(&self.entry().in_flight);
    }

    /// Mark `slot` as being written with `seq` (seqlock for optional readers). On a
    /// multi-producer ring the WRITING stamp takes the slot from its previous lap
    /// (`table::take_slot`), waiting while the slot is still held for it: the wrap gate
    /// passed `seq`, but a consumer that attached after the previous lap was claimed does
    /// not gate that claim, whose producer may not have written it yet. A slot already
    /// taken by `seq` or a later sequence (this producer's own WRITING stamp, or a repair
    /// that judged it dead) is written as it is.
    ///
    /// A previous lap in this producer's own run (`run`) was written by this producer
    /// before its current claim, and only the producer of `seq` changes the slot after it:
    /// the slot is free, and the WRITING stamp is a plain store, as on a single-producer
    /// ring. (A caught-up consumer spins on that slot's line: taking it with a locked
    /// instruction there cost a publish by one producer on a multi-producer ring a fifth of
    /// its rate.)
    ///
    /// So is a previous lap that a required consumer has read (`vouched`, from
    /// `gating::witness`): it saw the event published or repaired, and nothing else writes
    /// the slot before the producer of `seq`. Producers taking turns break their runs at
    /// every turn; a consumer that reads every event vouches for their slots from its
    /// second lap on.
    #[inline(always)]
    pub(super) fn begin_write(&self, slot: &Slot<'_>, seq: u64) {
        if self.single || seq.wrapping_sub(self.capacity) >= self.run.start && seq >= self.capacity
        {
            Self::mark_writing(slot, seq);
        } else {
            self.take_slot(slot, seq);
            // As in `mark_writing`.
            fence(Ordering::Release);
        }
    }

    /// [`Producer::begin_write`] where the slot is known free of its previous lap (a single
    /// producer's, or one in this producer's run): the plain WRITING store.
    #[inline(always)]
    fn mark_writing(slot: &Slot<'_>, seq: u64) {
        // Relaxed: the Release fence below orders it before the payload (seqlock).
        slot.header
            .stamp
            .store(seq | STAMP_WRITING, Ordering::Relaxed);
        // Release fence: an optional consumer that reads any payload byte written after this
        // point and then issues its Acquire fence also sees the WRITING stamp, and discards
        // its copy (`Consumer::poll_once`, optional path).
        fence(Ordering::Release);
    }

    /// Multi-producer ring: whether sequence `prev`, the previous lap of a sequence of a
    /// claim at `first`, is known written without a look at its slot, as
    /// [`Producer::begin_write`] will know it once the claim is taken: it lies in this
    /// producer's run as the claim leaves it (`extend_run`: the run goes on if the claim
    /// follows it, else starts at the claim), or in what a required consumer has read
    /// (`vouched`). An older run of this producer's counts no more: `begin_write` takes such
    /// a slot by its stamp, which another process may have overwritten.
    #[inline(always)]
    fn known_written(&self, prev: u64, first: u64) -> bool {
        let run_start = if first == self.run.end {
            self.run.start
        } else {
            first
        };
        prev >= run_start || self.vouched_covers(prev)
    }

    /// Whether `prev` lies in the range a required consumer's reads last vouched for.
    #[inline(always)]
    fn vouched_covers(&self, prev: u64) -> bool {
        let (from, to) = self.vouched.get();
        prev >= from && prev < to
    }

    /// [`Producer::begin_write`] on a multi-producer ring whose previous lap lies outside
    /// this producer's run: a required consumer's reads may vouch for it (`vouched`, or
    /// `gating::witness`, looked for again once what was vouched for is used up, or a
    /// sixteenth of a ring after a look that found nothing or little), else the slot is
    /// taken with a CAS (`table::take_slot`). Out of line, so that a single producer's
    /// common case is the one compare it was.
    #[cold]
    #[inline(never)]
    fn take_slot(&self, slot: &Slot<'_>, seq: u64) {
        // The run was looked at by `begin_write`: only what was vouched for is left.
        if seq >= self.capacity
            && (self.vouched_covers(seq - self.capacity)
                || self.vouched_for(seq - self.capacity, seq))
        {
            // Relaxed: the caller's Release fence orders it before the payload (seqlock).
            slot.header
                .stamp
                .store(seq | STAMP_WRITING, Ordering::Relaxed);
            return;
        }
        self.slot_takes.set(self.slot_takes.get() + 1);
        let lap = table::take_slot(&slot.header.stamp, seq, self.capacity);
        if lap != Lap::Free {
            self.take_slot_slow(slot, seq, lap);
        }
    }

    /// Look for a required consumer whose reads vouch for `prev` (`gating::witness`), unless
    /// the last look found none or little and `seq` is not yet past its retry point;
    /// remember what it vouches for.
    fn vouched_for(&self, prev: u64, seq: u64) -> bool {
        if seq < self.witness_retry.get() {
            return false;
        }
        let step = (self.capacity / 16).max(1);
        // One look at the head (a SeqCst load of the shared claim line).
        let head = self.seg.position();
        match gating::witness_scan(&self.seg, prev, self.witness_hint.get(), step) {
            // Never past the head: an entry whose `next` another process overwrote with a
            // larger value vouches no further than what has been claimed. A head that
            // another process moved back below `prev` leaves nothing vouched for: said so,
            // as when no witness is found (else the try forms' look at the room would count
            // the slot free and the write then wait for it).
            Some((to, index)) if to.min(head) > prev => {
                let to = to.min(head);
                // A range that goes on from the one held (a batch's look at its slots one
                // after the other) extends it: both are reads some required consumer made,
                // and a sequence once written stays written for its lap. So what a look
                // counted on for an earlier slot stays covered when the write comes.
                let (held_from, held_to) = self.vouched.get();
                if prev <= held_to && to >= held_from {
                    // Overlapping or adjacent: the union.
                    self.vouched.set((prev.min(held_from), to.max(held_to)));
                } else if prev > held_to {
                    self.vouched.set((prev, to));
                }
                // Else (a look at an earlier slot, its range wholly below the one held)
                // this look vouches for `prev`, and the range held stays for the later
                // slots a look at the room may have counted on.
                self.witness_hint.set(index);
                // A witness only just past `prev` (a full ring, its consumer one step ahead)
                // would be looked for again at nearly every publish, each look pulling the
                // line the consumer commits to: look again only a sixteenth of a ring on,
                // taking the slots in between with a CAS, as after a look that found none.
                self.witness_retry.set(if to.saturating_sub(prev) < step {
                    seq.saturating_add(step)
                } else {
                    0
                });
                true
            }
            _ => {
                self.witness_retry.set(seq.saturating_add(step));
                false
            }
        }
    }

    /// [`Producer::begin_write`] on a multi-producer ring whose slot was not free: wait while
    /// it is held for the previous lap, then take it; a slot taken by `seq` or a later
    /// sequence, or a ring deleted meanwhile, gets the WRITING stamp as a plain store, as
    /// every slot did before slots were taken. `seq` or a later sequence is there only if
    /// this producer's claim was repaired while it lived (a repair judges only dead
    /// producers; `Ring::tombstone` says not to call it on a live claim): then the write
    /// goes over it, as it did before.
    #[cold]
    #[inline(never)]
    fn take_slot_slow(&self, slot: &Slot<'_>, seq: u64, mut lap: Lap) {
        // A bounded form's claim whose slots were all found free before it was taken: a
        // slot held now was written over by another process, and is written over again.
        let (from, to) = self.laps_checked.get();
        let checked = seq >= from && seq < to;
        while lap == Lap::Held && !checked {
            if !self.wait_for_lap(slot, seq, None, false) {
                break;
            }
            lap = table::take_slot(&slot.header.stamp, seq, self.capacity);
        }
        if lap != Lap::Free {
            // Relaxed: the caller's Release fence orders it before the payload (seqlock).
            slot.header
                .stamp
                .store(seq | STAMP_WRITING, Ordering::Relaxed);
        }
    }

    /// Wait until `slot` is no longer held for the lap before `seq` (multi-producer, see
    /// [`Producer::begin_write`]): spin, yield, then sleep between looks (the late write
    /// wakes no producer). Returns false if the ring was deleted, `deadline` passed or (a
    /// caller that holds no claim yet: `until_closed`) the ring closed first. A previous lap
    /// whose producer died is repaired by the broker (a tombstone, after the ring's unblock
    /// timeout), as a consumer waiting at it would be.
    #[cold]
    #[inline(never)]
    fn wait_for_lap(
        &self,
        slot: &Slot<'_>,
        seq: u64,
        deadline: Option<Instant>,
        until_closed: bool,
    ) -> bool {
        self.lap_waits.set(self.lap_waits.get() + 1);
        let mut idle = crate::wait::Idler::new(crate::WaitStrategy::PhasedBackoff {
            spins: 64,
            yields: 16,
            fallback: crate::Fallback::Sleep(LAP_SLEEP),
        });
        while table::slot_lap(&slot.header.stamp, seq, self.capacity) == Lap::Held {
            if self.gives_up(deadline, until_closed) {
                return false;
            }
            if !idle.next().pause() {
                // Not given by a back-off that falls back to sleeping.
                std::thread::sleep(LAP_SLEEP);
            }
        }
        true
    }

    /// Whether no slot of `first..first + n` is held for its previous lap (always, on a
    /// single-producer ring): the try forms' room includes it, so that they never take a
    /// claim they would have to wait to write. What it counts free without a look at the
    /// slot is what `begin_write` will write without one (`known_written`); a look at a
    /// slot another process overwrote (a stamp of an older lap) finds it held, and the try
    /// forms say full.
    fn laps_free(&self, first: u64, n: u64) -> bool {
        self.single
            || (first..first + n).all(|seq| {
                seq >= self.capacity
                    && (self.known_written(seq - self.capacity, first)
                        || self.vouched_for(seq - self.capacity, seq))
                    || table::slot_lap(&self.seg.slot(seq).header.stamp, seq, self.capacity)
                        != Lap::Held
            })
    }

    /// The bounded forms' wait after a refusal for want of room at `first..first + n`: for
    /// the wrap gate, or, with the gate passed, for the slots' previous laps.
    fn wait_for_room_or_laps(&mut self, first: u64, n: u64, deadline: Instant) {
        let last = first + n - 1;
        if !self.has_room(last) {
            // No claim is held here (the CAS takes it once there is room): a stop ends the
            // wait, and the claim then refuses.
            self.wait_for_room(last, Some(deadline), true);
            return;
        }
        for seq in first..=last {
            if !self.wait_for_lap(&self.seg.slot(seq), seq, Some(deadline), true) {
                return;
            }
        }
    }

    #[inline(always)]
    fn fill(slot: &Slot<'_>, bytes: &[u8], flags: u32) {
        // SAFETY: this producer claimed the slot's sequence and passed the wrap gate for it,
        // so it owns the slot until it stamps it; the length was checked against the slot.
        unsafe { slot.write(bytes) };
        // Relaxed: published by the Release stamp store in `stamp`.
        slot.header.len.store(bytes.len() as u32, Ordering::Relaxed);
        slot.header.flags.store(flags, Ordering::Relaxed);
    }

    #[inline(always)]
    pub(super) fn stamp(slot: &Slot<'_>, seq: u64) {
        // Release: SYNC POINT with the Acquire stamp load in `Consumer::poll_once`; the
        // payload, len and flags above happen-before the consumer's read of them.
        slot.header.stamp.store(seq, Ordering::Release);
    }

    /// Write and publish one whole event into the slot of `seq` (one slot lookup).
    #[inline(always)]
    fn write_slot(&self, seq: u64, bytes: &[u8], flags: u32) {
        if self.single {
            // A path of its own, with the single producer's branch of `begin_write` and its
            // own slot lookup: through `begin_write`, whose multi-producer branch calls out of
            // line, a per-event publish ran at half to two thirds of the rate
            // (docs/PERFORMANCE.md, "Stamped slots, batch publish").
            let slot = self.seg.slot(seq);
            Self::mark_writing(&slot, seq);
            Self::fill(&slot, bytes, flags);
            Self::stamp(&slot, seq);
            return;
        }
        let slot = self.seg.slot(seq);
        self.begin_write(&slot, seq);
        Self::fill(&slot, bytes, flags);
        Self::stamp(&slot, seq);
    }

    /// A fixed-size ring: write the event of `seq` (the claim's only sequence), claimed by
    /// any claim but the common case's, and publish it by ending the claim's pending record
    /// (see `fixed`).
    #[inline(always)]
    fn write_fixed(&self, seq: u64, bytes: &[u8]) {
        let events = self.seg.events();
        self.write_fixed_event(&events, seq, bytes);
        fixed::end_pending(&events);
    }

    /// The bytes of a fixed-size ring's event of `seq`, which this producer claimed or (the
    /// common case) is about to claim under its horizon.
    #[inline(always)]
    fn write_fixed_event(&self, events: &crate::segment::Events<'_>, seq: u64, bytes: &[u8]) {
        // A test per event rather than a second copy of the path for sized rings: with two
        // copies inlined, `ipc-bench`'s publish loops kept their values on the stack, and a
        // `Publisher` on a fixed-size ring fell from 1.12x to 0.84x the floor ring in turn
        // (one copy: 1.06x against 1.07x for the build before sized rings, 8 alternated
        // `paired --quick` runs each).
        if self.sized {
            // SAFETY: as below; the length was checked against the largest event.
            unsafe { events.write_sized(seq, bytes) };
        } else {
            // SAFETY: this producer is the ring's single producer and `seq` its next
            // sequence: it holds `seq`'s claim, or (the common case) claims it right after
            // this write, and the wrap gate passed `seq` either way (a claim waits for room;
            // the common case runs below `fast_end`, within the cached gate); the length was
            // checked against the event size.
            unsafe { events.write(seq, bytes) };
        }
    }

    /// Write and publish one whole event of `seq`, in the ring's format, and count it.
    #[inline]
    fn write_event(&mut self, seq: u64, bytes: &[u8]) {
        if self.fixed {
            self.write_fixed(seq, bytes);
            self.notify();
        } else {
            self.write_slot(seq, bytes, 0);
            self.notify();
            self.clear_in_flight();
            self.count_published(1);
        }
    }

    /// Wake parked consumers, if any: one load when nobody parks.
    #[inline(always)]
    pub(super) fn notify(&self) {
        park::notify(
            &self.seg.lines().consumer_wake.value,
            self.seg.header(),
            self.registered,
        );
    }

    #[inline]
    pub(super) fn count_published(&mut self, n: u64) {
        self.published += n;
        // Relaxed: a counter only this producer writes.
        self.entry()
            .published
            .store(self.published, Ordering::Relaxed);
    }

    #[inline(always)]
    fn check_len(&mut self, len: usize) -> Result<(), LenRefused> {
        if len > self.max_payload || (self.fixed && !self.sized && len != self.max_payload) {
            return Err(self.bad_len(len));
        }
        Ok(())
    }

    #[cold]
    fn bad_len(&mut self, len: usize) -> LenRefused {
        self.refuse();
        if self.fixed && !self.sized {
            LenRefused::WrongSize {
                len,
                size: self.max_payload,
            }
        } else {
            LenRefused::TooLarge {
                len,
                max: self.max_payload,
            }
        }
    }

    /// A fixed-size ring's publish: the wrap gate, the event, the claim on the cursor that
    /// publishes it, the wake check; no per-event counter (see `fixed` and ARCHITECTURE.md,
    /// "The store is the publish").
    ///
    /// The common case (room under the cached gate, this process registered for
    /// membarrier, no leaked claim guard: `fast_end`; and the ring's fence mode membarrier,
    /// read once for both fences) writes the event between (p1) and (p2) of `line`'s claim,
    /// with compiler-only fences, each shared word read once; anything else claims the
    /// general way (a pending record, the claim, the event, the record ended). Each way writes the
    /// event itself: no out-of-line call receives `bytes`, so a caller's event built in a
    /// register (`&x.to_ne_bytes()`) stays there instead of being stored on the stack for
    /// such a call and read back.
    #[inline(always)]
    fn publish_fixed<const WAKE: bool>(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        // A fixed-size ring's event passes the first test; a sized ring's event the second.
        if bytes.len() != self.max_payload && !(self.sized && bytes.len() < self.max_payload) {
            return Err(self.bad_len(bytes.len()).into());
        }
        // The cursor is the position while the common case is armed: the claim below
        // stores the next position there, and the handle keeps none (see `position`).
        // Read whether or not it is armed: disarmed, `fast_end` is 0 and no value passes
        // the bound, and the general path takes the handle's.
        // Relaxed: this producer's own last store to the word, while it is armed.
        let seq = self.seg.lines().cursor.cursor.load(Ordering::Relaxed);
        if self.fixed_common_case(seq, bytes.len()) && self.publish_fixed_at::<WAKE>(seq, bytes)? {
            return Ok(seq);
        }
        self.publish_fixed_general::<WAKE>(bytes)
    }

    /// Whether a fixed-size publish of `len` bytes at `seq` takes the common case: room under
    /// the cached gate, this process registered, no claim guard open (`fast_end`, 0 on every
    /// ring but one published by the cursor), the event's size (on a ring of sized events:
    /// at most its bound), and the ring's fence mode membarrier
    /// (read once here for both of the claim's fences). The one test of it, for
    /// `publish_fixed` and for a [`Publisher`] (whose `seq` is its own position).
    #[inline(always)]
    pub(super) fn fixed_common_case(&self, seq: u64, len: usize) -> bool {
        seq < self.fast_end
            && (len == self.max_payload || (self.sized && len < self.max_payload))
            && park::light(self.seg.header(), true)
    }

    /// The common case of [`Producer::publish_fixed`] at `seq`, the position (below
    /// `fast_end`, the ring's fence mode membarrier, `bytes` of the event size): (p1), the
    /// event, then the rest of the claim on the cursor, whose store publishes it, and the
    /// wake check (see `fixed`). `Ok(true)`: published. `Ok(false)`: (p1) found the line
    /// not running, nothing written or stored; the common case is disarmed and the caller
    /// takes the general path (which refuses, or finishes a dead owner's transition).
    /// Accepted at once, the cursor is the handle's position after it (the common case
    /// stays armed, see `position`), and a [`Publisher`] advances its own copy; otherwise
    /// this disarms the common case and leaves the handle's `next` at `seq` (refused) or
    /// `seq + 1` (accepted).
    ///
    /// `self.next` is not read here: a publisher's position runs ahead of it.
    #[inline(always)]
    pub(super) fn publish_fixed_at<const WAKE: bool>(
        &mut self,
        seq: u64,
        bytes: &[u8],
    ) -> Result<bool, PublishError> {
        debug_assert!(self.fixed && seq < self.fast_end && bytes.len() <= self.max_payload);
        debug_assert!(self.sized || bytes.len() == self.max_payload);
        let lines = self.seg.lines();
        let life = &lines.lifecycle.value.lifecycle;
        // (p1) before the write: a publish on a closed line writes nothing (its slot may be
        // the stop sequence's, which the next run writes).
        let Some(running) = line::look_running(life, &mut self.seen) else {
            self.next = seq;
            self.fast_end = 0;
            return Ok(false);
        };
        let events = self.seg.events();
        self.write_fixed_event(&events, seq, bytes);
        fixed::before_claim(&events);
        let fast = line::claim_after_look(&lines.cursor.cursor, life, running, seq, 1, || {
            fence::light(true)
        });
        if fast != Fast::Accepted {
            // Disarm the common case before the claim is decided: a refused claim leaves the
            // cursor past the position until a start takes it back ((t3)), so the handle
            // holds the position from here, also if what follows unwinds. The general path
            // arms the case again at the next publish.
            self.next = seq;
            self.fast_end = 0;
            self.finish_claim_single(fast, seq, 1)
                .map_err(|r| self.refused_claim(r))?;
            self.next = seq + 1;
            // (p5) read the lifecycle word (Acquire) a stopper may have published with a
            // raised fence mode: the wake check reads the mode after that, as it would have
            // without the first reading.
            if WAKE {
                let light = park::light(self.seg.header(), true);
                park::notify_light(&self.seg.lines().consumer_wake.value, light);
            }
            return Ok(true);
        }
        // The fence mode as read by the caller, a constant here: the wake check's fence is
        // compiler-only with no test of the mode.
        if WAKE {
            park::notify_light(&lines.consumer_wake.value, true);
        }
        Ok(true)
    }

    /// A fixed-size publish outside its common case: the general claim (out of line), then
    /// the event and the wake check inline.
    #[inline(always)]
    fn publish_fixed_general<const WAKE: bool>(
        &mut self,
        bytes: &[u8],
    ) -> Result<u64, PublishError> {
        let (seq, light) = self.claim_fixed_general()?;
        Ok(self.write_fixed_and_wake::<WAKE>(seq, bytes, light))
    }

    /// A fixed-size publish after its general claim: the event, the claim's pending record
    /// ended (which publishes it) and (`WAKE`) the parked-consumer check with the fence mode
    /// `light` read for the claim.
    #[inline(always)]
    fn write_fixed_and_wake<const WAKE: bool>(&self, seq: u64, bytes: &[u8], light: bool) -> u64 {
        self.write_fixed(seq, bytes);
        if WAKE {
            park::notify_light(&self.seg.lines().consumer_wake.value, light);
        }
        seq
    }

    /// [`Producer::publish_fixed`]'s claim when the common case does not hold (a wait for
    /// room, a first publish that registers the process, a leaked claim guard, a fence mode
    /// raised by a process without membarrier: then every publish comes here): the sequence
    /// and the fence mode for the wake check.
    #[cold]
    #[inline(never)]
    fn claim_fixed_general(&mut self) -> Result<(u64, bool), PublishError> {
        let seq = self.claim_blocking(1)?;
        self.arm_fixed(seq + 1);
        Ok((seq, park::light(self.seg.header(), self.registered)))
    }

    /// Arm the fixed-size common case from `next` (this producer's position after an
    /// accepted claim of the general path), if it may: up to the cached gate's limit, but at
    /// most a quarter ring ahead, and the write horizon raised to that bound before any
    /// write under it (see `fixed`: the horizon is what a copying reader checks, and a
    /// reader more than a ring behind it drops its copy, so the quarter ring is what an
    /// optional reader may fall behind by before it drops intact events).
    #[inline]
    fn arm_fixed(&mut self, next: u64) {
        if !self.registered || self.open_claim.is_some() {
            self.fast_end = 0;
            return;
        }
        let end = self
            .cached_gate
            .saturating_add(self.capacity)
            .min(next.saturating_add((self.capacity / 4).max(1)));
        if end <= next {
            self.fast_end = 0;
            return;
        }
        fixed::cover(&self.seg.events(), end);
        self.fast_end = end;
    }

    /// A single-producer claim refused: counted, and the error.
    #[cold]
    fn refused_claim(&mut self, r: Refused) -> PublishError {
        self.refuse();
        match r {
            Refused::Closed => PublishError::Closed,
            Refused::Deleted => PublishError::Deleted,
        }
    }

    /// Publish one event, waiting for room. Returns its sequence.
    #[inline]
    pub fn publish(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        self.publish_with::<true>(bytes)
    }

    /// `publish` without the parked-consumer check: the baseline the benchmarks compare the
    /// real publish against ("parking compiled out"). A consumer parked on this ring is
    /// not woken by it; never use it outside a benchmark.
    #[cfg(feature = "bench-internals")]
    #[inline]
    pub fn publish_without_wake_check(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        self.publish_with::<false>(bytes)
    }

    #[inline(always)]
    fn publish_with<const WAKE: bool>(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        if self.fixed {
            return self.publish_fixed::<WAKE>(bytes);
        }
        self.check_len(bytes.len())?;
        let seq = self.claim_blocking(1)?;
        self.write_slot(seq, bytes, 0);
        if WAKE {
            self.notify();
        }
        self.clear_in_flight();
        self.count_published(1);
        Ok(seq)
    }

    /// Publish one event if there is room now; never waits for room. A refusal spends no
    /// sequence. (A claim a stop in progress must decide, its store already made, is
    /// waited for as long as the stopper lives, as every publish waits: only the stop's
    /// record says whether the event is delivered.)
    pub fn try_publish(&mut self, bytes: &[u8]) -> Result<u64, TryPublishError> {
        self.check_len(bytes.len())?;
        match self.claim_if_room(1, Instant::now()) {
            Ok(seq) => {
                self.write_event(seq, bytes);
                Ok(seq)
            }
            Err(e) => {
                self.refuse();
                Err(e)
            }
        }
    }

    /// Publish one event, waiting for room at most `timeout`. A timeout spends no
    /// sequence: the next accepted publish takes the sequence this one would have had.
    pub fn publish_timeout(
        &mut self,
        bytes: &[u8],
        timeout: Duration,
    ) -> Result<u64, TryPublishError> {
        self.publish_deadline(bytes, crate::wait::deadline_in(timeout))
    }

    /// As [`Producer::publish_timeout`], with a deadline on the monotonic clock.
    pub fn publish_deadline(
        &mut self,
        bytes: &[u8],
        deadline: Instant,
    ) -> Result<u64, TryPublishError> {
        self.check_len(bytes.len())?;
        loop {
            match self.claim_if_room(1, deadline) {
                Ok(seq) => {
                    self.write_event(seq, bytes);
                    return Ok(seq);
                }
                Err(TryPublishError::Full) if Instant::now() < deadline => {
                    // Wait for room for the sequence a claim would take now; the claim is
                    // taken (by CAS) only once there is room, so no sequence is spent.
                    let next = if self.single {
                        self.position()
                    } else {
                        self.seg.position()
                    };
                    self.wait_for_room_or_laps(next, 1, deadline);
                }
                Err(TryPublishError::Full) => {
                    self.refuse();
                    return Err(TryPublishError::Timeout);
                }
                Err(e) => {
                    self.refuse();
                    return Err(e);
                }
            }
        }
    }

    /// Check a batch of `n` events before any claim: the count in `1..=capacity/2`, every
    /// payload within a slot. A refusal is counted.
    fn check_batch<'e>(
        &mut self,
        events: impl Iterator<Item = &'e [u8]>,
        n: usize,
    ) -> Result<u64, BatchRefused> {
        let max = (self.capacity / 2) as usize;
        if n == 0 || n > max {
            self.refuse();
            return Err(BatchRefused::Size { len: n, max });
        }
        for e in events {
            self.check_len(e.len()).map_err(BatchRefused::Len)?;
        }
        Ok(n as u64)
    }

    /// Write and publish a checked batch of `n` events into its claim at `first`: every
    /// payload written before any stamp, the stamps in sequence order, one wake. The events'
    /// bytes come from the caller's `AsRef`, which may panic: the claim is then published
    /// as tombstones while the panic unwinds ([`BatchGuard`]), so consumers never wait at
    /// it while this producer lives on.
    #[inline]
    fn write_batch<'e>(
        &mut self,
        first: u64,
        n: u64,
        events: impl Iterator<Item = &'e [u8]> + Clone,
    ) {
        self.open_claim = Some((first, n));
        let guard = BatchGuard(self);
        guard.0.write_claimed_batch(first, events);
        std::mem::forget(guard);
    }

    #[inline(always)]
    fn write_claimed_batch<'e>(
        &mut self,
        first: u64,
        events: impl Iterator<Item = &'e [u8]> + Clone,
    ) {
        if self.fixed {
            let ring = self.seg.events();
            for (seq, e) in (first..).zip(events) {
                if self.sized {
                    // SAFETY: this producer holds the batch's claim and passed the wrap gate
                    // for its last sequence; a length past the largest event (the caller's
                    // `AsRef` answering twice, differently) is cut at the slot's end.
                    unsafe { ring.write_sized(seq, e) };
                } else if e.len() == self.max_payload {
                    // SAFETY: this producer holds the batch's claim and passed the wrap gate
                    // for its last sequence; the length is the event size.
                    unsafe { ring.write(seq, e) };
                } else {
                    Self::write_resized(&ring, seq, e, self.max_payload);
                }
            }
            fixed::end_pending(&ring);
            self.open_claim = None;
            self.notify();
            return;
        }
        let mut n = 0;
        let slots = self.seg.slots();
        if self.single {
            // A loop of its own, with the single producer's branch of `begin_write` (its
            // slots hold its own earlier laps): through `begin_write`, whose multi-producer
            // branch calls out of line, this loop ran at under a third of the rate
            // (docs/PERFORMANCE.md, "Stamped slots, batch publish").
            for (i, e) in events.clone().enumerate() {
                let seq = first + i as u64;
                let slot = slots.get(seq);
                Self::mark_writing(&slot, seq);
                Self::fill(&slot, e, 0);
                n += 1;
            }
        } else {
            for (i, e) in events.clone().enumerate() {
                let seq = first + i as u64;
                let slot = slots.get(seq);
                self.begin_write(&slot, seq);
                Self::fill(&slot, e, 0);
                n += 1;
            }
        }
        self.open_claim = None;
        for i in 0..n {
            Self::stamp(&slots.get(first + i), first + i);
        }
        self.notify();
        self.clear_in_flight();
        self.count_published(n);
    }

    /// A fixed-size batch event whose bytes came back another length than the check saw
    /// (the caller's `AsRef` answered twice, differently): written as the event size, cut or
    /// padded with zeros, never at another sequence's place (`Events::write` takes its
    /// length for the event size).
    #[cold]
    #[inline(never)]
    fn write_resized(ring: &crate::segment::Events<'_>, seq: u64, bytes: &[u8], size: usize) {
        let mut event = vec![0u8; size];
        let n = bytes.len().min(size);
        event[..n].copy_from_slice(&bytes[..n]);
        // SAFETY: as the caller's write: this producer holds `seq`'s claim past the wrap
        // gate, and `event` is the event size.
        unsafe { ring.write(seq, &event) };
    }

    fn publish_batch_iter<'e>(
        &mut self,
        events: impl ExactSizeIterator<Item = &'e [u8]> + Clone,
    ) -> Result<u64, PublishError> {
        let n = self.check_batch(events.clone(), events.len())?;
        let first = self.claim_blocking(n)?;
        self.write_batch(first, n, events);
        Ok(first)
    }

    /// Publish `events` in one claim of `events.len()` consecutive sequences, waiting for
    /// room. The count must be in `1..=capacity/2`; outside it, or if any event is too
    /// large, nothing is published. Every payload is written before any is stamped.
    /// Returns the first sequence. An event whose `AsRef` panics while the batch is written
    /// unwinds out of the call with the batch's sequences published as tombstones, which
    /// consumers skip and count.
    pub fn publish_batch<B: AsRef<[u8]>>(&mut self, events: &[B]) -> Result<u64, PublishError> {
        self.publish_batch_iter(events.iter().map(AsRef::as_ref))
    }

    /// [`Producer::publish_batch`] of plain-old-data values, each value's bytes one event.
    pub fn publish_batch_values<T: bytemuck::NoUninit>(
        &mut self,
        values: &[T],
    ) -> Result<u64, PublishError> {
        self.publish_batch_iter(values.iter().map(bytemuck::bytes_of))
    }

    /// [`Producer::publish_batch`] if there is room for the whole batch now; never waits.
    /// All or nothing: a refusal (full, bad count, too large, closed) publishes nothing and
    /// spends no sequence. Returns the first sequence.
    pub fn try_publish_batch<B: AsRef<[u8]>>(
        &mut self,
        events: &[B],
    ) -> Result<u64, TryPublishError> {
        let n = self.check_batch(events.iter().map(AsRef::as_ref), events.len())?;
        match self.claim_if_room(n, Instant::now()) {
            Ok(first) => {
                self.write_batch(first, n, events.iter().map(AsRef::as_ref));
                Ok(first)
            }
            Err(e) => {
                self.refuse();
                Err(e)
            }
        }
    }

    /// [`Producer::publish_batch`], waiting for room for the whole batch at most `timeout`.
    /// All or nothing: a timeout or refusal publishes nothing and spends no sequence.
    pub fn publish_batch_timeout<B: AsRef<[u8]>>(
        &mut self,
        events: &[B],
        timeout: Duration,
    ) -> Result<u64, TryPublishError> {
        self.publish_batch_deadline(events, crate::wait::deadline_in(timeout))
    }

    /// As [`Producer::publish_batch_timeout`], with a deadline on the monotonic clock.
    pub fn publish_batch_deadline<B: AsRef<[u8]>>(
        &mut self,
        events: &[B],
        deadline: Instant,
    ) -> Result<u64, TryPublishError> {
        let n = self.check_batch(events.iter().map(AsRef::as_ref), events.len())?;
        loop {
            match self.claim_if_room(n, deadline) {
                Ok(first) => {
                    self.write_batch(first, n, events.iter().map(AsRef::as_ref));
                    return Ok(first);
                }
                Err(TryPublishError::Full) if Instant::now() < deadline => {
                    // As in `publish_deadline`: wait for room for the last sequence a claim
                    // would take now; the CAS takes the batch only once there is room.
                    let next = if self.single {
                        self.position()
                    } else {
                        self.seg.position()
                    };
                    self.wait_for_room_or_laps(next, n, deadline);
                }
                Err(TryPublishError::Full) => {
                    self.refuse();
                    return Err(TryPublishError::Timeout);
                }
                Err(e) => {
                    self.refuse();
                    return Err(e);
                }
            }
        }
    }

    /// How many sequences a claim could take now without waiting: the capacity minus what
    /// the slowest gating consumer has not consumed, from a fresh scan of the consumers; 0
    /// once the ring is stopped. A multi-producer slot still waiting for its previous lap
    /// (see [`ProducerStats::lap_waits`]) is not taken out of it. A snapshot: consumers and other producers move on, so a
    /// publish that follows may still find the ring full (multi-producer) or find more room.
    pub fn remaining_capacity(&mut self) -> u64 {
        if self.seg.line().is_closed() {
            return 0;
        }
        let head = if self.single {
            self.position()
        } else {
            self.seg.position()
        };
        // `need` past any gate forces a scan rather than the shared cache.
        let gate = gating::refresh(&self.seg, u64::MAX);
        self.cached_gate = self.cached_gate.max(gate);
        self.capacity
            .saturating_sub(head.saturating_sub(self.cached_gate))
    }

    /// Publish a plain-old-data value as the event's bytes.
    pub fn publish_value<T: bytemuck::NoUninit>(&mut self, value: &T) -> Result<u64, PublishError> {
        self.publish(bytemuck::bytes_of(value))
    }
}

/// A batch being written, with its claim recorded in `open_claim`. Dropped only when the
/// write unwinds (`write_batch` forgets it after the write): the claim, written in part or
/// not at all, is published as tombstones.
struct BatchGuard<'p>(&'p mut Producer);

impl Drop for BatchGuard<'_> {
    #[cold]
    fn drop(&mut self) {
        if let Some((first, n)) = self.0.open_claim {
            tracing::warn!(
                ring = self.0.seg.name(),
                sequence = first,
                count = n,
                "a batch's event panicked while the batch was written; publishing its claim as tombstones"
            );
            if !self.0.fixed {
                // The WRITING stamps the write had not reached yet, as every tombstone has
                // them before its flags: an optional consumer still copying a slot's last
                // lap must see its copy spoilt, not take that event for a tombstone.
                for seq in first..first + n {
                    self.0.begin_write(&self.0.seg.slot(seq), seq);
                }
            }
            self.0.finish_range(first, n, SLOT_FLAG_TOMBSTONE);
        }
    }
}

/// Why a payload's length was refused.
#[derive(Clone, Copy)]
pub(super) enum LenRefused {
    TooLarge { len: usize, max: usize },
    WrongSize { len: usize, size: usize },
}

impl From<LenRefused> for PublishError {
    fn from(r: LenRefused) -> Self {
        match r {
            LenRefused::TooLarge { len, max } => PublishError::TooLarge { len, max },
            LenRefused::WrongSize { len, size } => PublishError::WrongSize { len, size },
        }
    }
}

impl From<LenRefused> for TryPublishError {
    fn from(r: LenRefused) -> Self {
        match r {
            LenRefused::TooLarge { len, max } => TryPublishError::TooLarge { len, max },
            LenRefused::WrongSize { len, size } => TryPublishError::WrongSize { len, size },
        }
    }
}

/// Why a batch was refused before its claim.
enum BatchRefused {
    Size { len: usize, max: usize },
    Len(LenRefused),
}

impl From<BatchRefused> for PublishError {
    fn from(r: BatchRefused) -> Self {
        match r {
            BatchRefused::Size { len, max } => PublishError::BatchSize { len, max },
            BatchRefused::Len(l) => l.into(),
        }
    }
}

impl From<BatchRefused> for TryPublishError {
    fn from(r: BatchRefused) -> Self {
        match r {
            BatchRefused::Size { len, max } => TryPublishError::BatchSize { len, max },
            BatchRefused::Len(l) => l.into(),
        }
    }
}
