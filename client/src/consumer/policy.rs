//! Error policies: what a consumer does when its handler fails at an event, and the
//! record of failing attempts that survives a crash.
//!
//! # The poison record
//!
//! The entry's `cold.poison_seq` holds the sequence plus one of the event whose handler is
//! failing (0: none) and `cold.poison_attempts` the failed attempts at it so far. Only the
//! entry's holder writes them; the broker reads them for display.
//!
//! - A handler error or panic in the process counts one attempt at once; when the policy
//!   answers with another attempt, that one is marked under way before it is made, as
//!   below.
//! - A process that dies inside the handler (abort, SIGKILL) cannot count anything, so a
//!   durable consumer counts before it tries, in a window: for its first `batch_cap`
//!   events after an attach it marks each one under way (`poison_seq = s + 1` with the
//!   SUSPECT bit, attempts plus one if the record already named `s`, else one) just before
//!   handing it over. A process that died mid-batch left at most `batch_cap` uncommitted
//!   events, so the event it died in is in the next holder's window (with the same cap).
//!   The record keeps one event: one named ahead (where a holder died) is kept until the
//!   window reaches it, so the events before it in its batch are never blamed. One store
//!   per event in the window, none after it; the record is cleared by the first commit
//!   past its event. An event that kills its process every time is counted once per
//!   death; once its attempts are used up, `poll` ends the batch before it and the policy
//!   acts on it without handing it over (`policy_first`).
//!
//! # Skipping exactly once
//!
//! Skip-and-count must add one to `dead_lettered` and move the position past the event
//! once, even when the process dies between any two of its stores. Two words cannot change
//! in one step, so the skip writes down what it is doing first, with a witness of the
//! counter, and whoever finishes it (the process itself, or the next holder at attach)
//! does only the steps that did not happen:
//!
//! ```text
//!  A  poison_attempts = dead_lettered as u32      (the witness: the count before)
//!     poison_seq = (s + 1) | SKIPPING             (Release: the decision)
//!  B  next = s + 1                                (the commit, Release)
//!  C  dead_lettered = witness + 1                 (only if it still equals the witness)
//!  D  poison_seq = 0, poison_attempts = 0
//! ```
//!
//! A crash before A: nothing was decided; the next holder tries `s` again (it is counted as
//! an attempt, so the skip comes again). After A (before or after B or C): the next holder
//! sees SKIPPING at attach and finishes: B if its position is not past `s`, C if the
//! counter still equals the witness, then D. Each step is idempotent, so a crash during
//! that recovery is recovered the same way. The dead-letter report (callback, log line)
//! comes before A: it is at-least-once (repeated only if the process dies before A), the
//! count exactly once. `policy::tests` runs these steps with a crash after each.

use std::fmt;
use std::time::Duration;

use shmring_layout::{error_policy, ConsumerCold};

use super::*;

/// What a consumer does when its handler fails (returns an error or panics) at an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// Stop at the first failure: the consumer is marked FAILED at the event and keeps its
    /// position there (a durable consumer that re-attaches tries it again).
    #[default]
    Stop,
    /// Try the event up to `attempts` times (at least once); then skip it, count it in
    /// `dead_lettered`, log it and hand it to the dead-letter callback.
    Skip {
        /// Failed attempts before the event is skipped.
        attempts: u32,
    },
    /// Try the event up to `attempts` times (at least once), waiting `backoff`, then twice
    /// that, and so on (at most 64 times `backoff`) between attempts; then stop as
    /// [`ErrorPolicy::Stop`] does.
    Retry {
        /// Failed attempts before the consumer stops.
        attempts: u32,
        /// The wait after the first failed attempt.
        backoff: Duration,
    },
}

/// The longest wait between attempts, in multiples of the policy's `backoff`.
pub const MAX_BACKOFF_FACTOR: u32 = 64;

impl ErrorPolicy {
    /// Failed attempts after which the policy acts (`None` for Stop: at once, and a crash
    /// count never stops it).
    pub(crate) fn limit(self) -> Option<u32> {
        match self {
            ErrorPolicy::Stop => None,
            ErrorPolicy::Skip { attempts } | ErrorPolicy::Retry { attempts, .. } => {
                Some(attempts.max(1))
            }
        }
    }

    /// What to do after `attempts` failed attempts at one event.
    pub(crate) fn verdict(self, attempts: u32) -> Verdict {
        match self {
            ErrorPolicy::Stop => Verdict::Stop,
            ErrorPolicy::Skip { attempts: max } if attempts >= max.max(1) => Verdict::Skip,
            ErrorPolicy::Skip { .. } => Verdict::Again(Duration::ZERO),
            ErrorPolicy::Retry { attempts: max, .. } if attempts >= max.max(1) => Verdict::Stop,
            ErrorPolicy::Retry { backoff, .. } => {
                let shift = attempts
                    .saturating_sub(1)
                    .min(MAX_BACKOFF_FACTOR.trailing_zeros());
                Verdict::Again(backoff.saturating_mul(1 << shift))
            }
        }
    }

    /// The code kept in the entry (`shmring_layout::error_policy`).
    pub(crate) fn code(self) -> u32 {
        match self {
            ErrorPolicy::Stop => error_policy::STOP,
            ErrorPolicy::Skip { .. } => error_policy::SKIP,
            ErrorPolicy::Retry { .. } => error_policy::RETRY,
        }
    }
}

/// What the policy says after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Mark the consumer FAILED at the event.
    Stop,
    /// Skip the event and report it.
    Skip,
    /// Try the event again after this wait.
    Again(Duration),
}

/// An event the error policy skipped, as handed to [`Consumer::on_dead_letter`].
#[derive(Debug, Clone, Copy)]
pub struct DeadLetter<'a> {
    /// The event's sequence.
    pub sequence: u64,
    /// Failed attempts at it (across re-attaches of a durable consumer).
    pub attempts: u32,
    /// The last failure: the handler's error, `handler panicked: <message>`, or a note that
    /// the consumer's process ended inside the handler.
    pub error: &'a str,
    /// Its payload.
    pub payload: &'a [u8],
}

/// The dead-letter callback.
pub(crate) type DeadLetterFn = Box<dyn FnMut(DeadLetter<'_>) + Send + 'static>;

/// One failed handler call: its text, and whether it was a panic.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) text: String,
    pub(crate) panicked: bool,
}

impl Failure {
    pub(crate) fn error(e: &dyn fmt::Display) -> Self {
        Failure {
            text: e.to_string(),
            panicked: false,
        }
    }

    pub(crate) fn panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let msg = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        Failure {
            text: match msg {
                Some(m) => format!("handler panicked: {m}"),
                None => "handler panicked".to_owned(),
            },
            panicked: true,
        }
    }
}

/// The text of the failure counted for a process that ended inside the handler.
pub(crate) const DIED_IN_HANDLER: &str =
    "the consumer's process ended while its handler held this event";

/// The bit of `poison_seq` that says a skip was decided and may not be finished.
pub(crate) const SKIPPING: u64 = 1 << 63;
/// The bit of `poison_seq` that says the last attempt counted is an attach's suspect mark:
/// under way, not known to have failed (a live holder clears or rewrites it).
pub(crate) const SUSPECT: u64 = 1 << 62;

/// The poison record as a reader sees it: (sequence, failed attempts), `None` when there
/// is none, no attempt is known to have failed, or a skip of it is being finished.
pub(crate) fn read_poison(cold: &ConsumerCold) -> Option<(u64, u32)> {
    // Relaxed: display values; the holder is their only writer.
    let p = cold.poison_seq.load(Ordering::Relaxed);
    if p == 0 || p & SKIPPING != 0 {
        return None;
    }
    let attempts = cold.poison_attempts.load(Ordering::Relaxed);
    let failed = if p & SUSPECT != 0 {
        attempts.saturating_sub(1)
    } else {
        attempts
    };
    (failed > 0).then(|| ((p & !SUSPECT).wrapping_sub(1), failed))
}

/// Step A of a skip of `seq`: the witness, then the decision.
pub(crate) fn begin_skip(cold: &ConsumerCold, seq: u64) {
    // Relaxed: the holder is the counter's only writer.
    let witness = cold.graph.dead_lettered.load(Ordering::Relaxed) as u32;
    // Relaxed: published by the Release store of the decision below.
    cold.poison_attempts.store(witness, Ordering::Relaxed);
    // Release: pairs with the Acquire load in `unfinished_skip` of the next holder; the
    // witness is visible with the decision.
    cold.poison_seq
        .store(seq.wrapping_add(1) | SKIPPING, Ordering::Release);
}

/// Step C: count the skip unless the counter already moved past the witness.
pub(crate) fn count_skip(cold: &ConsumerCold) {
    // Acquire: pairs with the Release decision of `begin_skip` (this process's own, or the
    // last holder's).
    if cold.poison_seq.load(Ordering::Acquire) & SKIPPING == 0 {
        return;
    }
    // Relaxed: ordered by the Acquire above; the holder is the only writer of both.
    let witness = cold.poison_attempts.load(Ordering::Relaxed);
    let d = cold.graph.dead_lettered.load(Ordering::Relaxed);
    if d as u32 == witness {
        cold.graph
            .dead_lettered
            .store(d.wrapping_add(1), Ordering::Relaxed);
    }
}

/// Step D (and the clearing of any poison record once the position is past it).
pub(crate) fn clear_poison(cold: &ConsumerCold) {
    // Release: pairs with the Acquire load of a later holder; the commit and the count
    // before it are visible with the cleared record.
    cold.poison_seq.store(0, Ordering::Release);
    cold.poison_attempts.store(0, Ordering::Relaxed);
}

/// The sequence of a skip that was decided and may not be finished (its last holder died
/// during it).
pub(crate) fn unfinished_skip(cold: &ConsumerCold) -> Option<u64> {
    // Acquire: pairs with the Release decision of `begin_skip`.
    let p = cold.poison_seq.load(Ordering::Acquire);
    (p & SKIPPING != 0).then(|| (p & !SKIPPING).wrapping_sub(1))
}

/// Finish a skip a holder died in (steps B to D as needed). `next` is the position this
/// handle holds; `commit` moves it (the shipping commit, with its Release store).
pub(crate) fn finish_skip(cold: &ConsumerCold, next: u64, commit: impl FnOnce(u64)) {
    let Some(seq) = unfinished_skip(cold) else {
        return;
    };
    if next <= seq {
        commit(seq.wrapping_add(1));
    }
    count_skip(cold);
    clear_poison(cold);
}

/// At a takeover of an entry (a durable attach, a member that joins or adopts a claim):
/// finish a skip its last holder died in (`commit` moves the position from `next`), count
/// the attempt its last holder marked and died in as failed (the SUSPECT bit), and return
/// the event the record names, unless `next` is past it (then the record is cleared).
pub(crate) fn take_over_record(
    cold: &ConsumerCold,
    next: u64,
    commit: impl FnOnce(u64),
) -> Option<u64> {
    if unfinished_skip(cold).is_some() {
        // Finished, the record is cleared (step D).
        finish_skip(cold, next, commit);
        return None;
    }
    // Acquire: pairs with the Release stores of the record by the last holder.
    let raw = cold.poison_seq.load(Ordering::Acquire);
    let p = raw & !SUSPECT;
    if raw & SUSPECT != 0 {
        // The last holder died in the attempt it marked: that attempt failed.
        // Release: as every store of the record.
        cold.poison_seq.store(p, Ordering::Release);
    }
    let k = p.checked_sub(1)?;
    if k < next {
        clear_poison(cold);
        return None;
    }
    Some(k)
}

/// The failed attempts at `k`, the event the record names, if they are used up under
/// `policy` (`suspect`: this handle's own mark, an attempt yet to be made, not failed).
pub(crate) fn used_up(
    cold: &ConsumerCold,
    k: u64,
    suspect: Option<(u64, u32)>,
    policy: ErrorPolicy,
) -> Option<u32> {
    let limit = policy.limit()?;
    // Relaxed: the holder is the record's only writer.
    let p = cold.poison_seq.load(Ordering::Relaxed);
    let mut attempts = cold.poison_attempts.load(Ordering::Relaxed);
    if suspect.is_some_and(|(s, _)| s == k) {
        attempts = attempts.saturating_sub(1);
    }
    (p & SKIPPING == 0 && (p & !SUSPECT) == k.wrapping_add(1) && attempts >= limit)
        .then_some(attempts)
}

/// Count one failed attempt at `at` in the record. `suspect`: the attempt this handle
/// marked under way, if any (already counted when it is `at`). Returns the attempts so far.
pub(crate) fn count_attempt_in(cold: &ConsumerCold, at: u64, suspect: Option<(u64, u32)>) -> u32 {
    // Relaxed: the holder is the record's only writer.
    let p = cold.poison_seq.load(Ordering::Relaxed) & !SUSPECT;
    let known = cold.poison_attempts.load(Ordering::Relaxed);
    let attempts = match suspect {
        Some((s, _)) if s == at => known,
        _ if p == at.wrapping_add(1) => known.saturating_add(1),
        _ => 1,
    };
    // Relaxed, then Release: pairs with the Acquire load of a later holder
    // (`take_over_record`).
    cold.poison_attempts.store(attempts, Ordering::Relaxed);
    cold.poison_seq.store(at.wrapping_add(1), Ordering::Release);
    attempts
}

/// Count the attempt at `seq` about to be made, `before` failed ones behind it, as under
/// way (SUSPECT): if the process dies in it, the next holder counts it. Returns the mark.
pub(crate) fn mark_attempt_in(cold: &ConsumerCold, seq: u64, before: u32) -> (u64, u32) {
    // Relaxed: published with the Release store of the sequence below.
    cold.poison_attempts
        .store(before.saturating_add(1), Ordering::Relaxed);
    // Release: pairs with the Acquire load of the next holder (`take_over_record`).
    cold.poison_seq
        .store(seq.wrapping_add(1) | SUSPECT, Ordering::Release);
    (seq, before)
}

/// Take back a mark of an attempt that was never made (the handle gives the entry up
/// before its retry).
pub(crate) fn undo_mark(cold: &ConsumerCold, (seq, before): (u64, u32)) {
    if before == 0 {
        clear_poison(cold);
    } else {
        // Relaxed, then Release: as in `count_attempt_in`.
        cold.poison_attempts.store(before, Ordering::Relaxed);
        cold.poison_seq
            .store(seq.wrapping_add(1), Ordering::Release);
    }
}

/// Run the dead-letter callback (if any) after the log line; a panic of the callback is
/// logged and goes no further.
fn report(index: u32, cb: &mut Option<DeadLetterFn>, letter: DeadLetter<'_>) {
    tracing::warn!(
        consumer = index,
        sequence = letter.sequence,
        attempts = letter.attempts,
        error = letter.error,
        "error policy skips an event (dead letter)"
    );
    if let Some(f) = cb {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(letter))).is_err() {
            tracing::warn!(consumer = index, "the dead-letter callback panicked");
        }
    }
}

/// In the window after a durable attach: count the attempt at `seq` about to be made, as
/// under way (SUSPECT), so that a process dying in it leaves it counted. The record keeps
/// one event: one named ahead of `seq` (where a holder died) is kept until it is reached;
/// one named at `seq` gains an attempt, unless this handle already marked it; one behind
/// (passed) or none is replaced. One store per event, in the window only. An event whose
/// attempts are used up never gets here: `poll` ends the batch before it.
pub(super) fn mark_before(
    cold: &ConsumerCold,
    seq: u64,
    suspect: &mut Option<(u64, u32)>,
    poison: &mut Option<u64>,
) {
    if suspect.is_some_and(|(s, _)| s == seq) {
        return;
    }
    let target = seq.wrapping_add(1);
    // Relaxed: this process is the record's only writer; it read the last holder's
    // stores after the Acquire in `mark_suspect`.
    let p = cold.poison_seq.load(Ordering::Relaxed) & !SUSPECT;
    let before = if p == target {
        cold.poison_attempts.load(Ordering::Relaxed)
    } else if p > target {
        return;
    } else {
        0
    };
    *suspect = Some(mark_attempt_in(cold, seq, before));
    *poison = Some(seq);
}

/// Where the payload of a failing event is, for its dead letter.
pub(super) enum Held {
    /// In its slot (a required consumer, not committed past it), this long.
    InPlace(usize),
    /// In this scratch buffer (an optional consumer's copy).
    Copied(usize),
}

impl Consumer {
    /// At the attach of a durable consumer: finish a skip its last holder died in; if the
    /// attempts at its first event are used up, act on it at the first poll; and open the
    /// window in which each event is marked before it is handed over (see the module
    /// header).
    pub(super) fn mark_suspect(&mut self) {
        let seg = Arc::clone(self.seg.arc());
        let Some(e) = seg.consumer(self.seg.index()) else {
            return;
        };
        let cold = &e.cold;
        let next = self.next;
        self.poison = take_over_record(cold, next, |n| self.commit(n, 0, 0, 0));
        // Relaxed: this process is the counter's only writer now (a finished skip counted).
        self.stats.dead_lettered = cold.graph.dead_lettered.load(Ordering::Relaxed);
        // The window opens either way: the events after a used-up first one are this
        // attach's first ones too (a second poison right behind the first dies uncounted
        // otherwise).
        self.careful = self.batch_cap;
        if self.exhausted_in(self.next, 1) == Some(self.next) {
            self.exhausted = true;
        }
    }

    /// The event of the record, if it lies in `start..start + n` and its attempts are used
    /// up: the batch must end before it. Only looked at while the record names an event.
    #[inline]
    pub(super) fn exhausted_in(&self, start: u64, n: u64) -> Option<u64> {
        let k = self.poison?;
        if k < start || k - start >= n {
            return None;
        }
        used_up(&self.entry().cold, k, self.suspect, self.policy).map(|_| k)
    }

    /// Count the attempt at `seq` about to be made, `before` failed ones behind it, as
    /// under way (SUSPECT): if this process dies in it, the next holder counts it.
    fn mark_attempt(&mut self, seq: u64, before: u32) {
        self.suspect = Some(mark_attempt_in(&self.entry().cold, seq, before));
        self.poison = Some(seq);
    }

    /// Dropped before a marked attempt was made (a retry not yet tried): it never happened.
    pub(super) fn undo_suspect(&mut self) {
        if let Some(mark) = self.suspect.take() {
            undo_mark(&self.entry().cold, mark);
        }
    }

    /// The position moved to `next`: clear a poison record it is past.
    #[inline]
    pub(super) fn moved(&mut self, next: u64) {
        if self.poison.is_some_and(|p| next > p) {
            self.passed_poison();
        }
    }

    #[cold]
    fn passed_poison(&mut self) {
        self.poison = None;
        self.suspect = None;
        self.exhausted = false;
        clear_poison(&self.entry().cold);
    }

    /// Count one failed attempt at `at` in the entry. Returns the attempts so far.
    pub(super) fn count_attempt(&mut self, at: u64) -> u32 {
        let suspect = self.suspect.take();
        let attempts = count_attempt_in(&self.entry().cold, at, suspect);
        self.poison = Some(at);
        self.stats.failures = self.stats.failures.wrapping_add(1);
        attempts
    }

    /// The handler failed at `at`, after `delivered` events (and `skipped`, `clamped`)
    /// before it in this batch: commit those, count the attempt, and do what the policy
    /// says. `Ok(delivered)` when the consumer goes on (the event is tried again, or was
    /// skipped).
    #[cold]
    pub(super) fn on_failure(
        &mut self,
        at: u64,
        counts: (u64, u64, u64),
        failure: Failure,
        held: Held,
    ) -> Result<usize, PollError> {
        let (delivered, skipped, clamped) = counts;
        self.commit(at, delivered, skipped, clamped);
        let attempts = self.count_attempt(at);
        match self.policy.verdict(attempts) {
            Verdict::Stop => {
                tracing::warn!(
                    consumer = self.seg.index(),
                    sequence = at,
                    attempts,
                    error = failure.text.as_str(),
                    "handler failed; consumer stops (FAILED)"
                );
                Err(self.fail(at, attempts, failure.panicked))
            }
            Verdict::Again(wait) => {
                self.stats.retries = self.stats.retries.wrapping_add(1);
                self.store_stats();
                self.retry_at = (!wait.is_zero()).then(|| crate::wait::deadline_in(wait));
                // The next attempt is counted before it is made, as at attach: a process
                // that dies in it leaves it counted. A worker member holds other claims and
                // may hand their events over first: its retry is marked by the window of
                // one event right before it is made, so that a death meanwhile (in another
                // claim, or during the back-off) is not counted against this event.
                if self.member.is_some() {
                    self.careful = self.careful.max(1);
                } else {
                    self.mark_attempt(at, attempts);
                }
                Ok(delivered as usize)
            }
            Verdict::Skip => {
                self.dead_letter_held(at, attempts, &failure.text, held);
                Ok(delivered as usize)
            }
        }
    }

    /// Report the event at `at` (its payload where `held` says) and skip it.
    fn dead_letter_held(&mut self, at: u64, attempts: u32, error: &str, held: Held) {
        match held {
            Held::InPlace(len) => self.report_in_place(at, attempts, error, len),
            Held::Copied(b) => {
                let mut cb = self.dead_letter.take();
                let letter = DeadLetter {
                    sequence: at,
                    attempts,
                    error,
                    payload: &self.scratch[b],
                };
                report(self.seg.index(), &mut cb, letter);
                self.dead_letter = cb;
            }
        }
        self.skip_at(at);
    }

    /// Report the event at `at`, `len` bytes read in place. The caller read its stamp equal
    /// to `at` (Acquire) and holds an entry that gates producers at or before `at` until
    /// the skip that follows commits past it.
    fn report_in_place(&mut self, at: u64, attempts: u32, error: &str, len: usize) {
        let seg = Arc::clone(self.seg.arc());
        let mut cb = self.dead_letter.take();
        // SAFETY: the stamp equalled `at` (or the cursor was past it) and an entry this
        // handle holds gates producers at or before `at` (see above), so the slot is not
        // overwritten while it is read.
        let payload = unsafe {
            if seg.is_fixed() {
                seg.events().event(at).0
            } else {
                seg.slot(at).payload(len)
            }
        };
        let letter = DeadLetter {
            sequence: at,
            attempts,
            error,
            payload,
        };
        report(self.seg.index(), &mut cb, letter);
        self.dead_letter = cb;
    }

    /// Report the event at `at` of a claim this member adopted in entry `index` (`len`
    /// bytes in place) and skip it there: the steps of the module header on that entry, so
    /// that whoever takes the entry over after a crash in between finishes the skip.
    pub(super) fn skip_adopted(
        &mut self,
        index: u32,
        at: u64,
        attempts: u32,
        error: &str,
        len: usize,
    ) {
        let seg = Arc::clone(self.seg.arc());
        let Some(e) = seg.consumer(index) else {
            return;
        };
        // The adopted entry gates producers at or before `at` until the commit below.
        self.report_in_place(at, attempts, error, len);
        begin_skip(&e.cold, at);
        // Release: SYNC POINT with the producers' Acquire gate scan, as `commit`.
        e.hot.next.store(at.wrapping_add(1), Ordering::Release);
        count_skip(&e.cold);
        clear_poison(&e.cold);
    }

    /// The stores of a skip of `at`, in the order of the module header (A to D).
    fn skip_at(&mut self, at: u64) {
        // The record is this skip's now: the commit below must not clear it (step D
        // comes after C).
        self.poison = None;
        self.suspect = None;
        self.exhausted = false;
        self.retry_at = None;
        let seg = Arc::clone(self.seg.arc());
        let Some(e) = seg.consumer(self.seg.index()) else {
            return;
        };
        begin_skip(&e.cold, at);
        self.commit(at.wrapping_add(1), 0, 0, 0);
        count_skip(&e.cold);
        clear_poison(&e.cold);
        // Relaxed: this process is the counter's only writer.
        self.stats.dead_lettered = e.cold.graph.dead_lettered.load(Ordering::Relaxed);
    }

    /// Mark the consumer FAILED at `at` (its events before `at` committed).
    pub(super) fn fail(&mut self, at: u64, attempts: u32, panicked: bool) -> PollError {
        self.failed = true;
        // A member's adopted claims go back to the others now, not when the handle drops.
        self.give_back_adopted();
        self.store_stats();
        // The committed position and counters are visible with the state (the CAS is
        // SeqCst). From the word this handle holds: a broker's RELEASED is never overwritten.
        if let Ok(word) =
            table::consumer::set(&self.entry().hot.word, self.word, consumer_state::FAILED)
        {
            self.word = word;
            if self.member.is_some() {
                // Its claim is left for the other members to adopt.
                self.wake_after_left_claim();
            }
        }
        if panicked {
            PollError::HandlerPanicked { sequence: at }
        } else {
            PollError::HandlerFailed {
                sequence: at,
                attempts,
            }
        }
    }

    /// Before a poll: a `Retry` back-off that has not passed (`Some(Ok(0))`), or attempts
    /// at the first event used up by processes that died in the handler, which the policy
    /// answers now that the event is published. `None`: poll as usual.
    #[cold]
    pub(super) fn policy_first(&mut self) -> Option<Result<usize, PollError>> {
        if let Some(at) = self.retry_at {
            if Instant::now() < at {
                return Some(Ok(0));
            }
            self.retry_at = None;
        }
        if !self.exhausted {
            return None;
        }
        // Relaxed: a hint, as in `poll`: a required consumer reads in place only while it
        // holds its entry as ACTIVE; released, the usual poll gates it again first.
        if self.required && self.entry().hot.word.load(Ordering::Relaxed) != self.word {
            return None;
        }
        let at = self.next;
        // The event is this consumer's only once its upstreams committed past it.
        match self.upstream_limit() {
            Ok(limit) if limit <= at => return Some(Ok(0)),
            Ok(_) => {}
            Err(e) => return Some(Err(e)),
        }
        if self.fixed {
            return self.policy_first_fixed(at);
        }
        let seg = Arc::clone(self.seg.arc());
        let slot = seg.slot(at);
        // Acquire: as in `poll_once`, SYNC POINT with the producer's Release stamp store;
        // the flags and length (Relaxed) below are ordered by it, and an optional consumer
        // checks the stamp again after its copy.
        if slot.header.stamp.load(Ordering::Acquire) != at
            || slot.header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE != 0
        {
            // Not published yet, lapped, or a tombstone: the usual poll deals with it.
            return None;
        }
        if !self.run_still_allowed() {
            // A released upstream gated again meanwhile (see `barrier`): look again.
            return Some(Ok(0));
        }
        let len = (slot.header.len.load(Ordering::Relaxed) as usize).min(self.max_payload);
        self.act_on_exhausted(at, len, |c| {
            // A copy checked against the stamp afterwards, as `deliver_copied` does.
            slot.copy_racy(len, &mut c.scratch[0]);
            // Acquire fence: pairs with the producer's Release fence after its WRITING
            // stamp (seqlock, see `deliver_copied`).
            fence(Ordering::Acquire);
            slot.header.stamp.load(Ordering::Relaxed) == at
        })
    }

    /// `policy_first` on a fixed-size ring: the event at `at` is published once the cursor
    /// is past it, and not a tombstone (see `fixed`).
    fn policy_first_fixed(&mut self, at: u64) -> Option<Result<usize, PollError>> {
        let seg = Arc::clone(self.seg.arc());
        let events = seg.events();
        // Nothing while the lifecycle word changes under the look: the usual poll looks
        // again.
        let (cursor, tomb_end) = fixed::published(&events)?;
        if at >= cursor || fixed::is_tombstone(&events, at, tomb_end) || events.lapped(at) {
            // Not published yet, a tombstone, or lapped: the usual poll deals with it.
            return None;
        }
        if !self.run_still_allowed() {
            // A released upstream gated again meanwhile (see `barrier`): look again.
            return Some(Ok(0));
        }
        self.act_on_exhausted(at, events.max(), |c| {
            events.copy_event_racy(at, &mut c.scratch[0]);
            fixed::copy_held(&events, at)
        })
    }

    /// The policy's answer to the published event at `at` (`len` bytes) whose attempts
    /// processes that died in the handler used up. An optional consumer reads it through
    /// `copy` (into `scratch[0]`; false: the ring no longer holds it, the usual poll deals
    /// with it).
    fn act_on_exhausted(
        &mut self,
        at: u64,
        len: usize,
        copy: impl FnOnce(&mut Self) -> bool,
    ) -> Option<Result<usize, PollError>> {
        let cold = &self.entry().cold;
        // Relaxed: this process is the record's only writer.
        let attempts = cold.poison_attempts.load(Ordering::Relaxed);
        match self.policy.verdict(attempts) {
            Verdict::Skip => {
                let held = if self.required {
                    Held::InPlace(len)
                } else {
                    if !copy(self) {
                        return None;
                    }
                    Held::Copied(0)
                };
                self.dead_letter_held(at, attempts, DIED_IN_HANDLER, held);
                Some(Ok(0))
            }
            Verdict::Stop | Verdict::Again(_) => {
                tracing::warn!(
                    consumer = self.seg.index(),
                    sequence = at,
                    attempts,
                    "attempts used up by processes that died in the handler; consumer stops"
                );
                Some(Err(self.fail(at, attempts, false)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring_layout::ConsumerEntry;
    use std::sync::atomic::AtomicU64;

    const SEQ: u64 = 41;
    const BEFORE: u64 = 5;

    fn entry() -> ConsumerEntry {
        let e = ConsumerEntry::default();
        e.hot.next.store(SEQ, Ordering::Relaxed);
        e.cold.graph.dead_lettered.store(BEFORE, Ordering::Relaxed);
        // The record of the failing attempts, as the policy leaves it before it skips.
        e.cold.poison_seq.store(SEQ + 1, Ordering::Relaxed);
        e.cold.poison_attempts.store(3, Ordering::Relaxed);
        e
    }

    fn commit(next: &AtomicU64) -> impl FnOnce(u64) + '_ {
        move |n| next.store(n, Ordering::Release)
    }

    /// The in-process skip, in the shipping order, stopping after `steps` steps (a crash).
    fn skip_until(e: &ConsumerEntry, steps: usize) {
        let all: [&dyn Fn(); 4] = [
            &|| begin_skip(&e.cold, SEQ),
            &|| commit(&e.hot.next)(SEQ + 1),
            &|| count_skip(&e.cold),
            &|| clear_poison(&e.cold),
        ];
        for step in &all[..steps] {
            step();
        }
    }

    #[test]
    fn a_skip_is_counted_and_committed_once_whatever_step_a_crash_stops_it_after() {
        for crash_after in 0..=4 {
            let e = entry();
            skip_until(&e, crash_after);
            // The next holder attaches at the committed position; it may die during the
            // recovery too, so it runs twice.
            for _ in 0..2 {
                let next = e.hot.next.load(Ordering::Acquire);
                finish_skip(&e.cold, next, commit(&e.hot.next));
            }
            let dead = e.cold.graph.dead_lettered.load(Ordering::Relaxed);
            let next = e.hot.next.load(Ordering::Relaxed);
            if crash_after == 0 {
                // Nothing decided: the event is tried again (and its record kept).
                assert_eq!((next, dead), (SEQ, BEFORE));
                assert_eq!(read_poison(&e.cold), Some((SEQ, 3)));
            } else {
                assert_eq!(
                    (next, dead),
                    (SEQ + 1, BEFORE + 1),
                    "crash after {crash_after}"
                );
                assert_eq!(read_poison(&e.cold), None);
                assert_eq!(unfinished_skip(&e.cold), None);
            }
        }
    }

    /// The control: a recovery that counts without the witness counts twice when the
    /// process died after step C, so the test above would catch a missing witness check.
    #[test]
    fn control_a_recovery_without_the_witness_counts_twice() {
        let e = entry();
        skip_until(&e, 3);
        if unfinished_skip(&e.cold).is_some() {
            e.cold.graph.dead_lettered.fetch_add(1, Ordering::Relaxed);
        }
        assert_eq!(
            e.cold.graph.dead_lettered.load(Ordering::Relaxed),
            BEFORE + 2
        );
    }

    #[test]
    fn verdicts() {
        let skip = ErrorPolicy::Skip { attempts: 3 };
        assert_eq!(skip.verdict(1), Verdict::Again(Duration::ZERO));
        assert_eq!(skip.verdict(2), Verdict::Again(Duration::ZERO));
        assert_eq!(skip.verdict(3), Verdict::Skip);
        assert_eq!(ErrorPolicy::Skip { attempts: 0 }.verdict(1), Verdict::Skip);
        let ms = Duration::from_millis(1);
        let retry = ErrorPolicy::Retry {
            attempts: 10,
            backoff: ms,
        };
        assert_eq!(retry.verdict(1), Verdict::Again(ms));
        assert_eq!(retry.verdict(2), Verdict::Again(ms * 2));
        assert_eq!(retry.verdict(7), Verdict::Again(ms * 64));
        assert_eq!(retry.verdict(9), Verdict::Again(ms * 64));
        assert_eq!(retry.verdict(10), Verdict::Stop);
        assert_eq!(ErrorPolicy::Stop.verdict(1), Verdict::Stop);
        assert_eq!(ErrorPolicy::Stop.limit(), None);
    }

    #[test]
    fn panic_text() {
        let p: Box<dyn std::any::Any + Send> = Box::new("boom");
        assert_eq!(Failure::panic(&*p).text, "handler panicked: boom");
        let p: Box<dyn std::any::Any + Send> = Box::new(String::from("bang"));
        assert_eq!(Failure::panic(&*p).text, "handler panicked: bang");
        let p: Box<dyn std::any::Any + Send> = Box::new(7u8);
        assert_eq!(Failure::panic(&*p).text, "handler panicked");
    }
}
