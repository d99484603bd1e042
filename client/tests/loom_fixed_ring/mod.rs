//! The model ring of a fixed-size ring's loom models (`loom_fixed.rs`,
//! `loom_repair_fixed.rs`): the claim line, the cursor, tomb words and payload-only slots on
//! the models' words, with the shipping protocol (`shmring::fixed`) behind its `Words`, and
//! the producer and consumers the models run on it.

use loom::sync::atomic::{fence, Ordering};
use loom::thread;

use shmring::fixed::{self, Words};
use shmring::line::{self, Fast, Line, SeenRunning, Word};
use shmring_layout::{lifecycle, RingState};

use crate::loom_word::W;

/// A ring of `CAP` slots of two payload words each.
pub struct Ring<const CAP: usize> {
    /// The single producer's claim (its position).
    pub claim: W,
    /// The published cursor.
    pub cursor: W,
    /// Every tombstone lies below this.
    pub tomb_end: W,
    /// The lifecycle word.
    pub life: W,
    /// The stop sequence.
    pub stop_seq: W,
    /// A tomb word per slot.
    pub tombs: [W; CAP],
    /// A slot's payload: two words, so that a torn copy shows.
    pub slots: [[W; 2]; CAP],
    /// The required consumer's position (0 when the model has none).
    pub next: W,
}

impl<const CAP: usize> Words for Ring<CAP> {
    type W = W;
    fn claim(&self) -> &W {
        &self.claim
    }
    fn cursor(&self) -> &W {
        &self.cursor
    }
    fn tomb_end(&self) -> &W {
        &self.tomb_end
    }
    fn tomb(&self, seq: u64) -> &W {
        &self.tombs[seq as usize % CAP]
    }
    fn lifecycle(&self) -> &W {
        &self.life
    }
    fn stop_seq(&self) -> &W {
        &self.stop_seq
    }
    fn capacity(&self) -> u64 {
        CAP as u64
    }
    fn fence(&self, order: Ordering) {
        fence(order)
    }
}

impl<const CAP: usize> Ring<CAP> {
    pub fn new() -> Self {
        Ring {
            claim: W::new(0),
            cursor: W::new(0),
            tomb_end: W::new(0),
            life: W::new(lifecycle::pack(0, RingState::Running as u32, 0)),
            stop_seq: W::new(0),
            // No sequence is a tombstone of slot k before the first lap (`u64::MAX`).
            tombs: std::array::from_fn(|_| W::new(u64::MAX)),
            slots: std::array::from_fn(|_| [W::new(u64::MAX), W::new(u64::MAX)]),
            next: W::new(0),
        }
    }

    /// The sequence line over the model's words (one-event claims).
    pub fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.life,
            stop_seq: &self.stop_seq,
            single: true,
            max_claim: 1,
            lone: &shmring::line::NoLone,
        }
    }

    pub fn slot(&self, seq: u64) -> &[W; 2] {
        &self.slots[seq as usize % CAP]
    }

    /// The single producer's claim of `seq`, as `Producer::claim_single` (no stopper here:
    /// the light fence stands for the membarrier pair, which the line models cover).
    pub fn claim_one(&self, seq: u64) {
        let fast = line::claim_single_fast(
            &self.claim,
            &self.life,
            &mut SeenRunning::default(),
            seq,
            1,
            || {},
        );
        assert_eq!(fast, Fast::Accepted);
    }

    /// Wait until the required consumer passed `seq - CAP` (the wrap gate).
    pub fn wait_for_room(&self, seq: u64) {
        // Acquire: pairs with the consumer's Release commit; its reads of the slot are done.
        while self.next.load(Ordering::Acquire) + (CAP as u64) <= seq {
            thread::yield_now();
        }
    }

    /// Claim, write and publish `seq` (payload words `seq`, `seq`). As `Producer::claim_blocking`
    /// on a fixed-size ring: the wrap gate first, then the claim (a claim says its slot may
    /// be being written).
    pub fn publish(&self, seq: u64, gated: bool) {
        if gated {
            self.wait_for_room(seq);
        }
        self.claim_one(seq);
        fixed::begin_write(self);
        for w in self.slot(seq) {
            // Relaxed: the payload (plain bytes in the ring), published by the cursor.
            w.store(seq, Ordering::Relaxed);
        }
        fixed::publish(self, seq + 1);
    }

    /// A required consumer: read every published event in place, in order, until `end`;
    /// returns what it read (`None`: a tombstone).
    pub fn consume_required(&self, end: u64) -> Vec<Option<u64>> {
        let mut got = Vec::new();
        let mut next = 0;
        while next < end {
            let (cursor, tomb_end) = fixed::published(self);
            if cursor == next {
                thread::yield_now();
                continue;
            }
            for s in next..cursor {
                if fixed::is_tombstone(self, s, tomb_end) {
                    got.push(None);
                    continue;
                }
                let [a, b] = self.slot(s);
                // Relaxed: ordered by the Acquire cursor load; the gate keeps the slot.
                let (a, b) = (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
                assert_eq!((a, b), (s, s), "a required read of {s} saw another write");
                got.push(Some(a));
            }
            next = cursor;
            // Release: the commit the producers' wrap gate reads.
            self.next.store(next, Ordering::Release);
        }
        got
    }

    /// An optional consumer's one look: copy every event the cursor shows that the ring may
    /// still hold, and keep the copies `held` says are whole. Returns the kept events.
    pub fn look_optional(&self, held: impl Fn(&Self, u64) -> bool) -> Vec<(u64, Option<u64>)> {
        let (cursor, tomb_end) = fixed::published(self);
        let mut kept = Vec::new();
        for s in cursor.saturating_sub(CAP as u64)..cursor {
            let tomb = fixed::is_tombstone(self, s, tomb_end);
            let [a, b] = self.slot(s);
            // Relaxed: a racy copy, checked below.
            let (a, b) = (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
            if !held(self, s) {
                continue;
            }
            if tomb {
                kept.push((s, None));
            } else {
                assert_eq!((a, b), (s, s), "an optional copy of {s} kept another write");
                kept.push((s, Some(a)));
            }
        }
        kept
    }
}
