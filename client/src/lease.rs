//! Reading ahead of the committed position, and committing only what was confirmed.
//!
//! `poll_once` reads a batch and commits it in one step, which suits a consumer whose work
//! is done when its handler returns. A consumer that forwards events somewhere else (a
//! network bridge, a replicating store) is done only when the other side confirms, and must
//! be able to read the same events again if the confirmation never comes. For that:
//!
//! - [`Consumer::read_ahead`] delivers the published run from any sequence between the
//!   committed position and the head, without committing anything;
//! - [`Consumer::commit_to`] moves the committed position forward to a sequence the
//!   caller chose (the confirmed one), counting what it passes.
//!
//! Only a **required** consumer may read ahead: its committed position gates the producers,
//! so every slot from that position to the head keeps its event until the position moves,
//! and the events are handed out in place, zero-copy, as `poll_once` does. The ring itself
//! is then the replay buffer: a durable consumer that crashes after reading ahead resumes at
//! its committed position and reads the unconfirmed events again. The producers feel a slow
//! confirmation as back-pressure, exactly as they feel a slow local consumer.
//!
//! ```
//! use shmring::{ConsumerOptions, Ring, RingConfig};
//! # let ns = format!("doc-lease-{}", std::process::id());
//! let ring = Ring::create(&ns, "orders", &RingConfig { capacity: 64, ..RingConfig::default() })?;
//! let mut fwd = ring.consumer(ConsumerOptions::durable("forwarder"))?;
//! let mut producer = ring.producer()?;
//! producer.publish_batch(&[b"a".as_slice(), b"b", b"c"])?;
//!
//! let mut sent = Vec::new();
//! let end = fwd.read_ahead(fwd.next_sequence(), 16, |ev| sent.push(ev.sequence()))?;
//! assert_eq!((sent, end), (vec![0, 1, 2], 3));
//! assert_eq!(fwd.next_sequence(), 0, "nothing is committed by reading ahead");
//!
//! fwd.commit_to(2)?; // the other side confirmed 0 and 1
//! assert_eq!(fwd.next_sequence(), 2);
//! # drop((fwd, producer));
//! # Ring::remove(&ns, "orders")?;
//! # std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use shmring_layout::stamp::{self, Stamp};
use shmring_layout::SLOT_FLAG_TOMBSTONE;

use crate::fixed;
use crate::park::{self, PARK_NET};
use crate::{Consumer, Event, PollError, Ring};

/// `Consumer::read_ahead` and `Consumer::commit_to`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The consumer is optional: it does not hold the producers off unread slots, so it
    /// cannot read ahead of its position safely. Attach it required.
    #[error("an optional consumer cannot read ahead of its position: attach it required")]
    NotRequired,
    /// The consumer is a worker-group member: it takes its events through its group's
    /// claims (`poll_once`), and reading ahead of its position or committing past it would
    /// take events other members claim and deliver too.
    #[error("a worker-group member takes its events through its group's claims: it cannot read ahead or commit past them")]
    GroupMember,
    /// The requested sequence is below the committed position: those slots may already
    /// hold newer events.
    #[error("sequence {seq} is below the committed position {next}: it cannot be read again")]
    BeforePosition {
        /// The requested sequence.
        seq: u64,
        /// The committed position.
        next: u64,
    },
    /// `commit_to` a sequence that was not published yet (or not contiguously).
    #[error("cannot commit to {seq}: sequence {unpublished} is not published")]
    NotPublished {
        /// The requested position.
        seq: u64,
        /// The first unpublished sequence below it.
        unpublished: u64,
    },
    /// An earlier handler failure made this consumer FAILED, or an earlier call found its
    /// entry taken (`EntryLost`).
    #[error("consumer is FAILED after a handler failure or the loss of its entry (the error an earlier call returned); re-attach to resume")]
    Failed,
    /// An upstream consumer this one reads behind (`ConsumerOptions::after`) was
    /// unsubscribed or its entry reused (`poll_once` names it in
    /// `PollError::UpstreamLost`): re-attach with the current dependencies.
    #[error("an upstream consumer was unsubscribed or its entry reused: re-attach with the current dependencies")]
    UpstreamLost,
    /// As `PollError::CorruptCursor`: a fixed-size ring's cursor reads more than the
    /// capacity past the committed position, which no producer publishes; nothing was
    /// delivered.
    #[error("the ring's cursor {cursor:#x} is more than its {capacity} slots past this consumer's position {next}: the segment is corrupt; stop every process attached to it, remove the ring and create it again")]
    CorruptCursor {
        /// The cursor found.
        cursor: u64,
        /// The committed position.
        next: u64,
        /// The ring's capacity.
        capacity: u64,
    },
    /// Its entry changed under it, and going to the head as a released consumer does
    /// failed as a poll would: `PollError::EntryLost`, `Deleted` or `CorruptPosition`.
    #[error(transparent)]
    Entry(PollError),
}

impl Consumer {
    /// Deliver the contiguous published run starting at `from` (at most `max` sequences,
    /// tombstones included and skipped), without committing. Returns the sequence after the
    /// last one examined: pass it as the next `from` to continue, or to `commit_to` once it
    /// is confirmed. The last event delivered carries the end-of-batch edge.
    ///
    /// `from` may be anywhere from the committed position (`next_sequence`) up to the head;
    /// the same sequence can be read any number of times until it is committed. A handler
    /// that panics unwinds out of this call with nothing committed.
    ///
    /// An error returned after the handler ran means that the broker released this consumer
    /// while the handler read and a producer has since written into the run (what the
    /// handler was handed may be torn): discard it. The consumer has gone to the head, and
    /// `BeforePosition` says where that is. A release that left the run's slots alone
    /// returns the run as read, and the next call goes to the head.
    pub fn read_ahead<F>(
        &mut self,
        from: u64,
        max: usize,
        mut handler: F,
    ) -> Result<u64, LeaseError>
    where
        F: FnMut(Event<'_>),
    {
        if self.failed {
            return Err(LeaseError::Failed);
        }
        if !self.required {
            return Err(LeaseError::NotRequired);
        }
        if self.member.is_some() {
            return Err(LeaseError::GroupMember);
        }
        // Released by the broker (`broker release`, to let producers go on while it waits
        // for confirmations), it no longer holds producers off the slots past its position:
        // it goes to the head and gates again first, as a poll does, and what it asked for
        // may then lie below its position.
        self.regate_if_released().map_err(LeaseError::Entry)?;
        if !self.entry_unchanged() {
            // Still released (a stop in progress decides where it gates again): nothing to
            // read in place this time.
            return Ok(from);
        }
        if from < self.next {
            return Err(LeaseError::BeforePosition {
                seq: from,
                next: self.next,
            });
        }
        // Never beyond one ring's worth from the committed position: a slot further ahead
        // is not protected by this consumer's gate. Nor beyond what its upstreams committed.
        let upstream = self
            .upstream_limit()
            .map_err(|_| LeaseError::UpstreamLost)?;
        let capacity = self.seg.geometry().capacity;
        let mut limit = (max as u64)
            .min((self.next + capacity).saturating_sub(from))
            .min(upstream.saturating_sub(from));
        if self.seg.is_fixed() {
            // Acquire: as `is_done` below.
            // Nothing while the lifecycle word changes under the look: no run this time.
            let cursor = fixed::published(&self.seg.events()).map_or(from, |(c, _)| c);
            // As in `poll_once` (`cursor_ahead`): no producer publishes more than a ring past
            // a gating consumer, so such a cursor was written by another process, unless
            // this one was released meanwhile.
            if cursor.saturating_sub(self.next) > capacity && self.entry_unchanged() {
                return Err(LeaseError::CorruptCursor {
                    cursor,
                    next: self.next,
                    capacity,
                });
            }
            limit = limit.min(cursor.saturating_sub(from));
        }
        let mut n = 0u64;
        while n < limit {
            // Acquire: SYNC POINT with the producer's Release stamp store (or cursor store),
            // as in `poll_once`; the payload, len and flags of every slot in the run are
            // visible after this.
            if !self.seg.is_done(from + n) {
                break;
            }
            n += 1;
        }
        if n > 0 && !self.run_still_allowed() {
            // A released upstream gated again while the run was scanned: nothing this time.
            return Ok(from);
        }
        let end = from + n;
        let last_event = (from..end).rev().find(|&s| !self.holds_no_event(s));
        for seq in from..end {
            if self.holds_no_event(seq) {
                continue;
            }
            // SAFETY: the stamp equalled `seq` (or the cursor was past it; Acquire) and `seq`
            // lies within one capacity of this required consumer's committed position, which
            // does not move during this call, so producers cannot reach this slot again until
            // after the handler returns, unless the broker releases this consumer meanwhile:
            // then this guarantee is gone, another process may write the bytes while the
            // handler reads them (the race an optional consumer's copy takes, with its check
            // after), and the looks below say whether to discard them.
            let bytes = unsafe { self.held_payload(seq) };
            handler(Event {
                seq,
                bytes,
                end_of_batch: Some(seq) == last_event,
            });
        }
        if n > 0 {
            // Acquire fence: pairs with a producer's Release fence before its payload writes
            // (`begin_write`; a fixed-size ring's after it raises its write horizon). Had the
            // handler read a byte a producer wrote over these slots, that producer wrote it
            // after it found this consumer released, and the look below finds the release.
            fence(Ordering::Acquire);
            if !self.entry_unchanged() && self.run_written_over(from, end) {
                // Released while the handler read, and a producer wrote into the run since:
                // what the handler was handed may be torn. It goes to the head, and the
                // caller is told to discard what it read. (Released with the run intact, it
                // returns the run as read; the next call takes the release, as if it came
                // just after this one.)
                self.regate_if_released().map_err(LeaseError::Entry)?;
                return Err(LeaseError::BeforePosition {
                    seq: from,
                    next: self.next,
                });
            }
        }
        self.read_to = self.read_to.max(end);
        Ok(end)
    }

    /// Whether a producer may have written into a slot of the run `from..end` (read in
    /// place, every sequence seen published) since the run was read: called after the
    /// Acquire fence that follows the handler, once the consumer was found released (its
    /// gate no longer holds producers off the run). As an optional consumer's check after
    /// its copy (seqlock): a later lap's write into a slot announces itself before the
    /// producer's Release fence that precedes its payload bytes (a stamped slot's WRITING
    /// stamp, a fixed-size ring's write horizon), so a handler that read one of those bytes
    /// makes the announcement visible here.
    pub(crate) fn run_written_over(&self, from: u64, end: u64) -> bool {
        if self.seg.is_fixed() {
            // One producer claims in order: the run's first slot is the first a later lap
            // reaches. (`copy_held` makes its own Acquire fence; this one's is above.)
            return !fixed::copy_held(&self.seg.events(), from);
        }
        let slots = self.seg.slots();
        (from..end).any(|seq| {
            // Relaxed: ordered by the caller's Acquire fence (above). The run's sequences
            // were each seen published or repaired; any other stamp is a later lap's.
            !stamp::is_done(slots.get(seq).header.stamp.load(Ordering::Relaxed), seq)
        })
    }

    /// Whether sequence `seq`, whose stamp this consumer saw say it is there (Acquire) and
    /// which it still holds behind its gate, is a tombstone: its producer's (the flags) or a
    /// repair's (the stamp).
    fn holds_no_event(&self, seq: u64) -> bool {
        if self.seg.is_fixed() {
            let events = self.seg.events();
            // The tombstone bound as published with the cursor (the caller saw `seq`
            // published, so the lifecycle word says nothing more here).
            return fixed::is_tombstone(&events, seq, events.tomb_end_now());
        }
        let header = &self.seg.slot(seq).header;
        // Relaxed: ordered by the caller's Acquire stamp load; the slot does not change
        // while this consumer holds it.
        header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE != 0
            || stamp::read(header.stamp.load(Ordering::Relaxed), seq) == Stamp::Repaired
    }

    /// The payload of the published `seq`, which this consumer holds behind its gate.
    ///
    /// # Safety
    /// `seq` is published (seen Acquire) and within one capacity of this required consumer's
    /// committed position, which does not move while the bytes are borrowed.
    unsafe fn held_payload(&self, seq: u64) -> &[u8] {
        if self.seg.is_fixed() {
            // SAFETY: the caller's contract.
            return unsafe { self.seg.events().event(seq) }.0;
        }
        let slot = self.seg.slot(seq);
        // Relaxed: ordered by the caller's Acquire load.
        let len = (slot.header.len.load(Ordering::Relaxed) as usize).min(self.max_payload);
        // SAFETY: the caller's contract.
        unsafe { slot.payload(len) }
    }

    /// Commit the position forward to `seq`: every sequence below it is consumed and its
    /// slot may be reused. Counts the events and tombstones passed in this consumer's
    /// counters, as `poll_once` does. A `seq` at or below the committed position is a no-op
    /// (confirmations may arrive late or twice); one beyond a sequence not yet published is
    /// refused and nothing moves.
    ///
    /// Released by the broker, a consumer's slots may hold later laps: what it read before
    /// (a ring's worth from its position at most, below the head) is committed as delivered,
    /// and the next `read_ahead` gates again from the head.
    pub fn commit_to(&mut self, seq: u64) -> Result<(), LeaseError> {
        if self.failed {
            return Err(LeaseError::Failed);
        }
        if self.member.is_some() {
            return Err(LeaseError::GroupMember);
        }
        if seq <= self.next {
            return Ok(());
        }
        let head = self.seg.position();
        if !self.released_now().map_err(LeaseError::Entry)? {
            match self.commit_published(seq, head) {
                // Released between the look above and a lapped slot: as released.
                Err(LeaseError::NotPublished { .. })
                    if self.released_now().map_err(LeaseError::Entry)? => {}
                r => return r,
            }
        }
        self.commit_released(seq, head)
    }

    /// `commit_to` while this consumer gates: every sequence up to `seq` published.
    fn commit_published(&mut self, seq: u64, head: u64) -> Result<(), LeaseError> {
        let (mut delivered, mut skipped) = (0u64, 0u64);
        for s in self.next..seq {
            // Acquire: pairs with the producer's Release stamp (or cursor) store, so the flags
            // read next belong to this sequence's event. A stamp other than `s` (below the
            // head or not) means the run is not published up to `seq`. Below `read_to` it
            // was seen published when it was read (this consumer gates: it is still there).
            if s >= self.read_to && (s >= head || !self.seg.is_done(s)) {
                return Err(LeaseError::NotPublished {
                    seq,
                    unpublished: s,
                });
            }
            if self.holds_no_event(s) {
                skipped += 1;
            } else {
                delivered += 1;
            }
        }
        self.commit(seq, delivered, skipped, 0);
        Ok(())
    }

    /// `commit_to` once the broker released this consumer: producers were let past it, so
    /// its slots from its position on may hold later laps and say nothing of what it read
    /// before. What it can have read (`read_ahead` goes no further than a ring's worth from
    /// its position, nor past the head) and the caller confirms was delivered: the position
    /// moves there and the entry stays released. Past that, nothing moves.
    fn commit_released(&mut self, seq: u64, head: u64) -> Result<(), LeaseError> {
        let bound = head.min(self.next.saturating_add(self.seg.geometry().capacity));
        if seq > bound {
            return Err(LeaseError::NotPublished {
                seq,
                unpublished: bound,
            });
        }
        let skipped = (self.next..seq)
            .filter(|&s| self.seg.is_done(s) && self.holds_no_event(s))
            .count() as u64;
        // These slots were not read as published: what this entry reads slot by slot
        // starts at `seq` (`ConsumerHot::first`), stored before the position (as
        // `graph::jump` does), so that once it gates again it vouches for none of them.
        // Release: pairs with the witness's Acquire load of `next` (`gating::witness`).
        self.entry().hot.first.store(seq, Ordering::Release);
        self.commit(seq, seq - self.next - skipped, skipped, 0);
        Ok(())
    }
}

impl Ring {
    /// Park on the ring's consumer wake line until sequence `seq` is published, the ring is
    /// deleted, or `timeout` passes (at most the 50 ms net per call). Returns whether `seq`
    /// is published. A stopped ring publishes nothing until it starts again, so a wait on
    /// one sleeps as on a running ring with nothing new (the publish after the start wakes
    /// it).
    ///
    /// For a reader that holds its consumer elsewhere (behind a lock shared with the thread
    /// that commits confirmations): it waits on the ring without holding the consumer. The
    /// park is the consumers' protocol (see `park`), so a producer's publish wakes it.
    pub fn wait_published(&self, seq: u64, timeout: Duration) -> bool {
        if self.is_published(seq) {
            return true;
        }
        park::raise_fence_mode(self.seg.header());
        park::park(
            &self.seg.lines().consumer_wake.value,
            timeout.min(PARK_NET),
            || self.is_published(seq) || self.is_deleted(),
        );
        self.is_published(seq)
    }
}

#[cfg(test)]
mod tests {
    use crate::{ConsumerOptions, Ring, RingConfig};

    use super::LeaseError;

    use crate::test_ns::Ns;
    fn ns(test: &str) -> Ns {
        Ns(format!("lease-{}-{test}", std::process::id()))
    }

    fn ring(ns: &Ns, capacity: u64) -> Ring {
        Ring::create(
            &ns.0,
            "r",
            &RingConfig {
                capacity,
                ..RingConfig::default()
            },
        )
        .expect("create ring")
    }

    #[test]
    fn read_ahead_repeats_until_committed() {
        let ns = ns("repeat");
        let ring = ring(&ns, 16);
        let mut c = ring
            .consumer(ConsumerOptions::durable("fwd"))
            .expect("attach");
        let mut p = ring.producer().expect("producer");
        for i in 0u8..5 {
            p.publish(&[i]).expect("publish");
        }
        let read = |c: &mut crate::Consumer, from, max| {
            let mut got = Vec::new();
            let end = c
                .read_ahead(from, max, |ev| {
                    got.push((ev.sequence(), ev.bytes()[0], ev.is_end_of_batch()))
                })
                .expect("read ahead");
            (got, end)
        };
        let (got, end) = read(&mut c, 0, 3);
        assert_eq!(got, vec![(0, 0, false), (1, 1, false), (2, 2, true)]);
        assert_eq!(end, 3);
        let (got, end) = read(&mut c, 3, 10);
        assert_eq!(got, vec![(3, 3, false), (4, 4, true)]);
        assert_eq!(end, 5);
        // Unconfirmed: the same events again.
        let (again, _) = read(&mut c, 0, 10);
        assert_eq!(again.len(), 5);
        c.commit_to(2).expect("commit");
        assert_eq!(c.next_sequence(), 2);
        assert_eq!(c.stats().delivered, 2);
        assert_eq!(
            c.read_ahead(1, 1, |_| {}),
            Err(LeaseError::BeforePosition { seq: 1, next: 2 })
        );
        // Late or repeated confirmations are no-ops.
        c.commit_to(1).expect("late commit");
        assert_eq!(c.next_sequence(), 2);
        assert_eq!(
            c.commit_to(6),
            Err(LeaseError::NotPublished {
                seq: 6,
                unpublished: 5
            })
        );
        assert_eq!(c.next_sequence(), 2);
        c.commit_to(5).expect("commit all");
        assert_eq!(c.stats().delivered, 5);
    }

    #[test]
    fn the_position_gates_producers_while_reading_ahead() {
        let ns = ns("gate");
        let ring = ring(&ns, 8);
        let mut c = ring
            .consumer(ConsumerOptions::durable("fwd"))
            .expect("attach");
        let mut p = ring.producer().expect("producer");
        for i in 0u8..8 {
            p.publish(&[i]).expect("publish");
        }
        assert_eq!(c.read_ahead(0, 100, |_| {}), Ok(8));
        // Read but not committed: the ring is full for the producer.
        assert!(p.try_publish(&[8]).is_err());
        c.commit_to(3).expect("commit");
        for i in 8u8..11 {
            p.try_publish(&[i]).expect("room after the commit");
        }
        let mut got = Vec::new();
        let end = c
            .read_ahead(8, 100, |ev| got.push(ev.bytes()[0]))
            .expect("read");
        assert_eq!((got, end), (vec![8, 9, 10], 11));
    }

    #[test]
    fn a_durable_consumer_reads_unconfirmed_events_again_after_reattach() {
        let ns = ns("replay");
        let ring = ring(&ns, 16);
        let mut p = ring.producer().expect("producer");
        {
            let mut c = ring
                .consumer(ConsumerOptions::durable("fwd"))
                .expect("attach");
            for i in 0u8..4 {
                p.publish(&[i]).expect("publish");
            }
            assert_eq!(c.read_ahead(0, 100, |_| {}), Ok(4));
            c.commit_to(1).expect("commit");
        }
        let mut c = ring
            .consumer(ConsumerOptions::durable("fwd"))
            .expect("re-attach");
        assert_eq!(c.next_sequence(), 1);
        let mut got = Vec::new();
        c.read_ahead(1, 100, |ev| got.push(ev.bytes()[0]))
            .expect("read");
        assert_eq!(got, vec![1, 2, 3]);
    }

    #[test]
    fn wait_published_returns_when_the_sequence_lands() {
        let ns = ns("wait");
        let ring = ring(&ns, 8);
        let mut p = ring.producer().expect("producer");
        assert!(!ring.wait_published(0, std::time::Duration::from_millis(1)));
        let t = std::thread::spawn(move || {
            p.publish(&[1]).expect("publish");
        });
        // Bounded: each call parks at most 50 ms; the publish wakes it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ring.wait_published(0, std::time::Duration::from_secs(1)) {
            assert!(std::time::Instant::now() < deadline, "publish never seen");
        }
        t.join().expect("producer thread");
    }

    /// A stopped ring publishes nothing until it starts again: a wait for the next
    /// sequence sleeps (up to its timeout, or the net) instead of returning at once. Before,
    /// a closed ring made every call return at once, and the bridge exporter, waiting on a
    /// stopped source ring, spun a core (and a host-wide membarrier per turn) for as long as
    /// the ring stayed stopped.
    #[test]
    fn wait_published_sleeps_while_the_ring_is_stopped() {
        let ns = ns("wait-stopped");
        let ring = ring(&ns, 8);
        ring.stop().expect("stop");
        let began = std::time::Instant::now();
        let mut returns = 0u32;
        while began.elapsed() < std::time::Duration::from_millis(300) {
            assert!(!ring.wait_published(0, std::time::Duration::from_secs(1)));
            returns += 1;
        }
        // Each call sleeps up to the 50 ms net: about 6 returns in 300 ms; a spin makes
        // thousands.
        assert!(returns < 60, "{returns} returns in 300 ms");
    }

    #[test]
    fn optional_consumers_cannot_read_ahead() {
        let ns = ns("optional");
        let ring = ring(&ns, 8);
        let mut c = ring
            .consumer(ConsumerOptions::anonymous().optional())
            .expect("attach");
        assert_eq!(c.read_ahead(0, 1, |_| {}), Err(LeaseError::NotRequired));
    }
}
