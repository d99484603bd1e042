//! Runs: a fixed-size ring's published events handed over as contiguous slices.
//!
//! On a ring of fixed-size events (`RingConfig::event_size`) the events of a published run
//! lie side by side in the slot array, so a handler can take them as one slice instead of
//! one call each: what a consumer that sums, copies or forwards events in bulk wants, and
//! the per-event handler call is what bounds a batched stream's delivery (ARCHITECTURE.md,
//! "Fixed-size rings: what the format buys"). A run is cut where the slot array wraps and
//! around tombstones.

use super::*;

impl Consumer {
    /// On a ring of fixed-size events: deliver the published run from this consumer's
    /// position (up to the batch cap, and its upstreams) as contiguous slices, then commit
    /// once. `handler(first, events)` gets `events.len() / event_size` events, the first of
    /// them sequence `first`; a run is cut where the ring's slot array wraps and around
    /// tombstones (skipped and counted, as `poll_once` does). Returns the number of events
    /// handed over.
    ///
    /// The slices are the ring's own slots for a required consumer (zero-copy, borrowed for
    /// the call), a checked copy for an optional one. A handler that panics fails the
    /// consumer at the first event of its slice (the events before it are committed),
    /// whatever the error policy: per-event policies need `poll_once`. While a policy or a
    /// durable attach's marking window is at work, or a timed flush is set, the events are
    /// handed over one per slice through `poll_once`'s path.
    ///
    /// On a ring of stamped slots or of sized events (whose events are not one contiguous
    /// run of bytes): `PollError::NotFixedSize`.
    ///
    /// With [`ConsumerOptions::gather`], a call right after one that handed over events
    /// first pauses.
    pub fn poll_runs<F>(&mut self, handler: F) -> Result<usize, PollError>
    where
        F: FnMut(u64, &[u8]),
    {
        for _ in 0..self.gather.before_look() {
            std::hint::spin_loop();
        }
        let before = self.next;
        let got = self.runs(handler);
        let handed = *got.as_ref().unwrap_or(&0) as u64;
        self.gather
            .after(handed, self.next.saturating_sub(before), self.batch_cap);
        got
    }

    fn runs<F>(&mut self, mut handler: F) -> Result<usize, PollError>
    where
        F: FnMut(u64, &[u8]),
    {
        if !self.fixed || self.sized {
            return Err(PollError::NotFixedSize);
        }
        if self.failed {
            return Err(PollError::Failed);
        }
        if self.exhausted
            || self.retry_at.is_some()
            || self.poison.is_some()
            || self.careful > 0
            || self.flush.is_some()
        {
            return self.poll_once(|ev| handler(ev.sequence(), ev.bytes()));
        }
        // Relaxed: a hint on this consumer's own line, as in `poll`.
        if self.required && self.entry().hot.word.load(Ordering::Relaxed) != self.word {
            return self.poll_once(|ev| handler(ev.sequence(), ev.bytes()));
        }
        let start = self.next;
        let cap = self
            .batch_cap
            .min(self.upstream_limit()?.saturating_sub(start));
        let events = self.seg.events();
        // Nothing while the lifecycle word changes under the look (`fixed::published`): as no
        // event yet.
        let (cursor, tomb_end) = fixed::published(&events).unwrap_or((start, 0));
        if !self.required && events.lapped(start) {
            return self.poll_once(|ev| handler(ev.sequence(), ev.bytes()));
        }
        if cursor.saturating_sub(start) > fixed::Words::capacity(&events) {
            return self.cursor_ahead(cursor);
        }
        let n = cursor.saturating_sub(start).min(cap);
        if n == 0 {
            return self.poll_once(|ev| handler(ev.sequence(), ev.bytes()));
        }
        if !self.run_still_allowed() {
            return Ok(0);
        }
        let end = start + n;
        let capacity = fixed::Words::capacity(&events);
        let (mut at, mut delivered, mut skipped) = (start, 0u64, 0u64);
        let mut lapped = false;
        let mut panicked = None;
        while at < end {
            if fixed::is_tombstone(&events, at, tomb_end) {
                skipped += 1;
                at += 1;
                continue;
            }
            // The slice: up to the next tombstone, the end of the run, or the end of the
            // slot array.
            let to_wrap = capacity - (at % capacity);
            let mut stop = end.min(at + to_wrap);
            if tomb_end > at {
                let tomb = (at + 1..stop).find(|&s| fixed::is_tombstone(&events, s, tomb_end));
                if let Some(t) = tomb {
                    stop = t;
                }
            }
            let count = (stop - at) as usize;
            let outcome = if self.required {
                // SAFETY: the cursor was past `at..stop` (Acquire) and this required
                // consumer has not committed past `at`, so the producer cannot reach these
                // slots until after the handler returns, unless the broker releases this
                // consumer meanwhile: then the producer may write them while the handler
                // reads (an optional consumer's copy takes that race), and
                // `torn_while_reading` below says to discard them.
                let bytes = unsafe { events.run(at, count) };
                catch_unwind(AssertUnwindSafe(|| handler(at, bytes)))
            } else {
                let buf = &mut self.scratch[0];
                events.copy_run_racy(at, count, buf);
                if !fixed::copy_held(&events, at) {
                    lapped = true;
                    break;
                }
                catch_unwind(AssertUnwindSafe(|| handler(at, buf)))
            };
            if let Err(payload) = outcome {
                panicked = Some(Failure::panic(&*payload));
                break;
            }
            delivered += count as u64;
            at = stop;
        }
        // A required consumer's handler read the run in place (up to `end`, or a panic's
        // slice): released meanwhile and written over since, it is not committed.
        if self.required {
            if let Some(torn) = self.torn_while_reading(start, end) {
                return Err(torn);
            }
        }
        self.commit(at, delivered, skipped, 0);
        if let Some(failure) = panicked {
            // The attempt is recorded against the slice's first event, as `on_failure`
            // records one (the poison record a durable re-attach's policy reads).
            let attempts = self.count_attempt(at);
            tracing::warn!(
                consumer = self.seg.index(),
                sequence = at,
                attempts,
                error = failure.text.as_str(),
                "run handler panicked; consumer stops (FAILED)"
            );
            return Err(self.fail(at, attempts, true));
        }
        if lapped {
            // As `deliver_run`'s: reported here only when nothing was delivered.
            self.jump_to_head()
                .or_else(|e| super::deliver::on_nothing(delivered, e))?;
        }
        Ok(delivered as usize)
    }
}

/// The pause of [`Consumer::poll_runs`] after a call that handed over events
/// ([`ConsumerOptions::gather`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Gather {
    spins: u32,
    /// The last call handed over events: the next pauses.
    armed: bool,
}

impl Gather {
    pub(super) fn new(spins: u32) -> Self {
        Self {
            spins,
            armed: false,
        }
    }

    /// The spins to spend before this call's look at the ring.
    #[inline]
    pub(super) fn before_look(&mut self) -> u32 {
        if std::mem::take(&mut self.armed) {
            self.spins
        } else {
            0
        }
    }

    /// After the call: it handed over `handed` events and moved the position `moved`
    /// sequences (tombstones skipped, or a jump to the head, included), against a batch cap
    /// of `cap`. A call that moved its whole cap or more may have left published events
    /// behind: the next takes them without a pause, so that a backlog drains at full speed.
    #[inline]
    pub(super) fn after(&mut self, handed: u64, moved: u64, cap: u64) {
        self.armed = self.spins > 0 && handed > 0 && moved < cap;
    }
}

#[cfg(test)]
mod tests {
    use super::Gather;
    use crate::test_ns::Ns;
    use crate::{Consumer, ConsumerOptions, ProducerMode, Ring, RingConfig};

    /// A ring of 8 fixed-size 8-byte events.
    fn fixed() -> RingConfig {
        RingConfig {
            capacity: 8,
            producer_mode: ProducerMode::Single,
            event_size: Some(8),
            ..RingConfig::default()
        }
    }

    /// Ring "r" with `config` in a namespace of the test's own.
    fn ring(test: &str, config: &RingConfig) -> (Ns, Ring) {
        let ns = Ns(format!("{test}-{}", std::process::id()));
        let ring = Ring::create(&ns.0, "r", config).expect("create");
        (ns, ring)
    }

    /// `run` until `n` events were handed over.
    fn run_for(c: &mut Consumer, n: usize) {
        let got = std::cell::Cell::new(0);
        let exit = c
            .run(|_| got.set(got.get() + 1), || got.get() == n)
            .expect("run");
        assert_eq!((exit, got.get()), (crate::RunExit::Stopped, n));
    }

    /// The option reaches the consumer, and `poll_runs` arms the pause after a call that
    /// handed over events, and only then.
    #[test]
    fn poll_runs_pauses_after_a_run_with_the_option_only() {
        let (_ns, ring) = ring("gather", &fixed());
        let mut gathering = ring
            .consumer(ConsumerOptions::anonymous().gather(16))
            .expect("attach");
        let mut plain = ring.consumer(ConsumerOptions::anonymous()).expect("attach");
        let mut p = ring.producer().expect("producer");
        for v in 0u64..2 {
            p.publish_value(&v).expect("publish");
        }
        assert_eq!(gathering.poll_runs(|_, _| {}), Ok(2));
        assert_eq!(plain.poll_runs(|_, _| {}), Ok(2));
        assert_eq!(gathering.gather.before_look(), 16, "armed after the run");
        assert_eq!(plain.gather.before_look(), 0, "no option, no pause");
        gathering.gather.after(1, 1, 1024);
        assert_eq!(gathering.poll_runs(|_, _| {}), Ok(0));
        assert_eq!(gathering.gather.before_look(), 0, "not after an empty call");
        // `poll_once` and `wait` neither take an armed pause nor arm one.
        p.publish_value(&2u64).expect("publish");
        assert_eq!(gathering.poll_once(|_| {}), Ok(1));
        assert_eq!(gathering.gather.before_look(), 0, "poll_once arms nothing");
        gathering.gather.after(1, 1, 1024);
        p.publish_value(&3u64).expect("publish");
        assert_eq!(gathering.wait(), Ok(crate::WaitOutcome::Ready));
        assert_eq!(gathering.poll_once(|_| {}), Ok(1));
        assert_eq!(gathering.gather.before_look(), 16, "still armed");
    }

    /// The run loop's polls pause as `poll_runs` calls do: a poll right after one that
    /// handed over events waits first.
    #[test]
    fn the_run_loop_pauses_after_a_batch() {
        let (_ns, ring) = ring("gather-run", &fixed());
        let mut c = ring
            .consumer(ConsumerOptions::anonymous().gather(16))
            .expect("attach");
        let mut p = ring.producer().expect("producer");
        for v in 0u64..2 {
            p.publish_value(&v).expect("publish");
        }
        run_for(&mut c, 2);
        assert_eq!(c.gather.before_look(), 16, "armed by the batch");
        // A batch that fills the cap arms nothing.
        let mut capped = ring
            .consumer(ConsumerOptions::anonymous().gather(16).batch_cap(2))
            .expect("attach");
        for v in 2u64..5 {
            p.publish_value(&v).expect("publish");
        }
        run_for(&mut capped, 2);
        assert_eq!(capped.gather.before_look(), 0, "cut at the cap");
    }

    /// On a ring of stamped slots the option does nothing: its consumer watches the next
    /// slot's stamp, not a cursor.
    #[test]
    fn a_stamped_ring_s_consumer_never_pauses() {
        let stamped = RingConfig {
            capacity: 8,
            ..RingConfig::default()
        };
        // A ring of sized events reads up to a cursor: there it pauses.
        let sized = RingConfig {
            max_event_size: Some(8),
            event_size: None,
            ..fixed()
        };
        for (config, spins) in [(stamped, 0), (sized, 16)] {
            let (_ns, ring) = ring("gather-formats", &config);
            let mut c = ring
                .consumer(ConsumerOptions::anonymous().gather(16))
                .expect("attach");
            ring.producer()
                .expect("producer")
                .publish(b"a")
                .expect("publish");
            run_for(&mut c, 1);
            assert_eq!(c.gather.before_look(), spins, "{config:?}");
        }
    }

    /// A run cut at the batch cap arms no pause: the events it left behind come at once.
    #[test]
    fn a_run_that_fills_the_batch_cap_arms_no_pause() {
        let (_ns, ring) = ring("gather-cap", &fixed());
        let mut c = ring
            .consumer(ConsumerOptions::anonymous().gather(16).batch_cap(2))
            .expect("attach");
        let mut p = ring.producer().expect("producer");
        for v in 0u64..3 {
            p.publish_value(&v).expect("publish");
        }
        assert_eq!(c.poll_runs(|_, _| {}), Ok(2));
        assert_eq!(c.gather.before_look(), 0, "cut at the cap");
        assert_eq!(c.poll_runs(|_, _| {}), Ok(1));
        assert_eq!(c.gather.before_look(), 16, "up to the cursor");
    }

    #[test]
    fn only_a_call_after_one_that_handed_over_events_pauses() {
        let mut g = Gather::new(16);
        assert_eq!(g.before_look(), 0, "the first call");
        g.after(3, 3, 1024);
        assert_eq!(g.before_look(), 16, "after a run");
        g.after(0, 0, 1024);
        assert_eq!(g.before_look(), 0, "after an empty call (or an error)");
        g.after(0, 5, 1024);
        assert_eq!(
            g.before_look(),
            0,
            "after a call that only skipped tombstones"
        );
        g.after(1000, 1024, 1024);
        assert_eq!(g.before_look(), 0, "a full batch, tombstones skipped");
        g.after(2, 5000, 1024);
        assert_eq!(g.before_look(), 0, "a jump to the head");
        g.after(1, 1, 1024);
        g.after(1023, 1023, 1024);
        assert_eq!(g.before_look(), 16);
        assert_eq!(g.before_look(), 0, "one pause per run");
        g.after(1024, 1024, 1024);
        assert_eq!(
            g.before_look(),
            0,
            "a full batch may have left events behind"
        );
    }

    #[test]
    fn no_gather_never_pauses() {
        let mut g = Gather::new(0);
        g.after(3, 3, 1024);
        assert_eq!(g.before_look(), 0);
    }
}
