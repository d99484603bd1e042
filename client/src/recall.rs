//! Reading the ring's own record back: the segment's identity and an event already published.
//!
//! A process that forwards events *into* a ring (a network bridge's importer, a replay tool)
//! needs to know after a crash what it had already published there, or it publishes the same
//! event twice. The ring is the one record that cannot disagree with itself: what is in a
//! slot was published, what is not was not. [`Ring::recall`] reads a sequence back, as long
//! as the ring still holds it (at most one capacity behind the head), with the same seqlock
//! read an optional consumer uses, so it never blocks or disturbs a producer.
//!
//! [`Ring::created_unix_ns`] tells two incarnations of a ring with the same name apart: a ring
//! deleted and created again starts its sequences from zero under a new creation time.

use std::sync::atomic::{fence, Ordering};

use shmring_layout::stamp::{self, Stamp};
use shmring_layout::SLOT_FLAG_TOMBSTONE;

use crate::{fixed, Ring};

/// What [`Ring::recall`] found at a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recall {
    /// The event's payload was copied into the buffer.
    Event,
    /// The sequence was published as a tombstone (a claim that was never filled).
    Tombstone,
    /// The sequence is claimed but its event is not published (yet); on a fixed-size ring
    /// also when a stop or a start changed the ring's lifecycle word during the look (look
    /// again).
    Pending,
    /// The slot already holds a later event, or may: the sequence left the ring, or is
    /// about to. On a fixed-size ring this is decided by the producers' write horizon,
    /// which runs up to a quarter of the ring ahead of the last publish (a write under it
    /// is not announced event by event), so an event in the oldest quarter of what the
    /// ring holds may read as `Gone` while its slot still holds it.
    Gone,
    /// The sequence is at or beyond the head: nobody claimed it (or, while a stop is in
    /// progress on a ring published by a cursor, it is the last claim's, which the stop may
    /// still refuse: see [`Ring::head`]).
    NotClaimed,
}

impl Ring {
    /// The segment's creation time (ns since the Unix epoch), fixed for the life of the file.
    pub fn created_unix_ns(&self) -> u64 {
        // Relaxed: written once before the segment was made visible under its name.
        self.seg.header().created_unix_ns.load(Ordering::Relaxed)
    }

    /// Copy the payload of sequence `seq` into `buf` if the ring still holds it.
    pub fn recall(&self, seq: u64, buf: &mut Vec<u8>) -> Recall {
        buf.clear();
        if seq >= self.seg.position() {
            return Recall::NotClaimed;
        }
        if self.seg.is_fixed() {
            return self.recall_fixed(seq, buf);
        }
        let slot = self.seg.slot(seq);
        // Acquire: SYNC POINT with the producer's Release stamp store; the len, flags and
        // payload of `seq` are visible if the stamp says `seq`.
        let stamp = slot.header.stamp.load(Ordering::Acquire);
        match stamp::read(stamp, seq) {
            Stamp::Published => {}
            Stamp::Repaired => return Recall::Tombstone,
            Stamp::Lapped => return Recall::Gone,
            Stamp::Pending => return Recall::Pending,
        }
        // Relaxed: ordered by the Acquire stamp load; re-validated by the stamp check below.
        let flags = slot.header.flags.load(Ordering::Relaxed);
        let len = (slot.header.len.load(Ordering::Relaxed) as usize).min(self.max_payload());
        slot.copy_racy(len, buf);
        // Acquire fence: pairs with the producer's Release fence after its WRITING stamp; if
        // the copy saw any byte of a newer write, the stamp read below sees that write's
        // WRITING stamp (seqlock), as in the optional consumer's read.
        fence(Ordering::Acquire);
        if slot.header.stamp.load(Ordering::Relaxed) != seq {
            buf.clear();
            return Recall::Gone;
        }
        if flags & SLOT_FLAG_TOMBSTONE != 0 {
            buf.clear();
            return Recall::Tombstone;
        }
        Recall::Event
    }

    /// `recall` on a fixed-size ring: published below the cursor, checked against the claim
    /// after the copy (see `fixed`).
    fn recall_fixed(&self, seq: u64, buf: &mut Vec<u8>) -> Recall {
        let events = self.seg.events();
        // Nothing counts as published while the lifecycle word changes under the look.
        let Some((cursor, tomb_end)) = fixed::published(&events) else {
            return Recall::Pending;
        };
        if seq >= cursor {
            return Recall::Pending;
        }
        let tombstone = fixed::is_tombstone(&events, seq, tomb_end);
        events.copy_event_racy(seq, buf);
        if !fixed::copy_held(&events, seq) {
            buf.clear();
            return Recall::Gone;
        }
        if tombstone {
            buf.clear();
            return Recall::Tombstone;
        }
        Recall::Event
    }
}

#[cfg(test)]
mod tests {
    use crate::{ConsumerOptions, Ring, RingConfig};

    use super::Recall;

    use crate::test_ns::Ns;

    #[test]
    fn recall_reads_what_the_ring_still_holds() {
        let ns = Ns(format!("recall-{}", std::process::id()));
        let ring = Ring::create(
            &ns.0,
            "r",
            &RingConfig {
                capacity: 4,
                ..RingConfig::default()
            },
        )
        .expect("create");
        assert!(ring.created_unix_ns() > 0);
        let mut buf = Vec::new();
        assert_eq!(ring.recall(0, &mut buf), Recall::NotClaimed);
        let mut c = ring
            .consumer(ConsumerOptions::anonymous().optional())
            .expect("attach");
        let mut p = ring.producer().expect("producer");
        for i in 0u8..6 {
            p.publish(&[i, i]).expect("publish");
            let _ = c.poll_once(|_| {});
        }
        assert_eq!(ring.recall(5, &mut buf), Recall::Event);
        assert_eq!(buf, vec![5, 5]);
        assert_eq!(ring.recall(2, &mut buf), Recall::Event);
        assert_eq!(buf, vec![2, 2]);
        assert_eq!(ring.recall(1, &mut buf), Recall::Gone);
        assert!(buf.is_empty());
        drop(p.claim().expect("claim"));
        assert_eq!(ring.recall(6, &mut buf), Recall::Tombstone);
        assert_eq!(ring.recall(7, &mut buf), Recall::NotClaimed);
    }
}
