//! A loom model of the repair of an unattributed hole (`Ring::repair_unattributed` in
//! `client/src/admin.rs`) racing a live producer's claim, on heap atomics.
//!
//! A producer that died between announcing a claim (`in_flight = IN_FLIGHT_CLAIMING`) and
//! recording its sequence left a hole nobody can name. The broker repairs it by
//! tombstoning every unpublished sequence below the head that no live producer holds. A live
//! producer claims like this (`Producer::claim_blocking`):
//!
//! ```text
//! live producer                          broker (repair_unattributed)
//! in_flight = CLAIMING   (Relaxed)       today:  held = in_flight of every live producer
//! c = claim.fetch_add(1) (SeqCst)                head = claim.load()
//! in_flight = c + 1      (Relaxed)       fixed:  head = claim.load() first, then held
//! stamp[c] = c | WRITING; payload        for s in ..head not held and not stamped:
//! stamp[c] = c           (Release)           tombstone(s)
//! in_flight = 0
//! ```
//!
//! Reading the producers first and the head second lets a claim land in between: its
//! sequence is below the head the broker reads, yet the producer was not holding anything
//! when the broker looked. The broker tombstones a sequence whose producer is about to
//! publish it. The event is accepted (`publish` returns `Ok`) and lost: consumers skip it
//! as a tombstone. Reading the head first closes the window. A claim taken after that read
//! lies at or above the head, and a claim taken before it announced itself (the
//! `CLAIMING` store precedes the claim's RMW, which the broker's Acquire load of the head
//! reads from), so the scan that follows sees it.
//!
//! The first test models the old order (with the clear fixed, so the order alone is to
//! blame) and requires loom to find the lost event. The second shows that reading the head
//! first is not enough on its own: the producer's clear of `in_flight` must be a Release
//! store. The third models both fixes, for a claim of one sequence.
//!
//! A claim has a length (`in_flight_len`, `publish_batch` takes several sequences in one
//! claim), and the repair leaves the whole range alone. The batch tests claim two
//! sequences: a repair that ignores the length tombstones the second one; and a length
//! stored Relaxed before a Relaxed `in_flight` may be read stale by a broker that reads the
//! new `in_flight` (nothing orders the two for it), which leaves the tail of a live batch
//! unheld. Recording `in_flight` with a Release store (paired with the repair's Acquire
//! load) makes the length visible with it.

use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

const CLAIMING: u64 = u64::MAX;
const WRITING: u64 = 1 << 63;
const EMPTY: u64 = u64::MAX;
const TOMBSTONE: u32 = 1;
const SLOTS: usize = 4;

/// How the model's repair and producer order their accesses.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Variant {
    /// The broker reads the head before the producer table (the fix); else after (today).
    head_first: bool,
    /// The producer clears `in_flight` with a Release store after its Release stamp (the
    /// fix); else Relaxed (today). With Relaxed, a broker that reads the cleared `in_flight`
    /// is not guaranteed to see the stamp that preceded it, and tombstones a published
    /// sequence. x86's total store order hides this; the language's memory model does not.
    release_clear: bool,
    /// The producer records `in_flight` with a Release store after storing the claim's
    /// length; else Relaxed.
    release_mark: bool,
    /// The repair leaves the claim's whole length alone; else only its first sequence.
    use_len: bool,
}

/// The fixed order, for a claim of any length.
const FIXED: Variant = Variant {
    head_first: true,
    release_clear: true,
    release_mark: true,
    use_len: true,
};

struct Ring {
    claim: AtomicU64,
    stamps: [AtomicU64; SLOTS],
    flags: [AtomicU32; SLOTS],
    /// Producer entries: 0 is the dead producer, 1 the live one.
    in_flight: [AtomicU64; 2],
    in_flight_len: [AtomicU64; 2],
}

impl Ring {
    /// The dead producer took sequence 0 and died before recording it: a hole.
    fn with_unattributed_hole() -> Self {
        Ring {
            claim: AtomicU64::new(1),
            stamps: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            flags: std::array::from_fn(|_| AtomicU32::new(0)),
            in_flight: [AtomicU64::new(CLAIMING), AtomicU64::new(0)],
            in_flight_len: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// `Producer::publish` (n = 1) or `publish_batch` of the live producer (entry 1).
    /// Returns its first sequence.
    fn publish(&self, v: Variant, n: u64) -> u64 {
        let me = &self.in_flight[1];
        me.store(CLAIMING, Ordering::Relaxed);
        let c = self.claim.fetch_add(n, Ordering::SeqCst);
        // `mark_in_flight`: the length, then the first sequence.
        self.in_flight_len[1].store(n, Ordering::Relaxed);
        let mark = if v.release_mark {
            Ordering::Release
        } else {
            Ordering::Relaxed
        };
        me.store(c + 1, mark);
        // Every payload is written before any is stamped.
        for s in c..c + n {
            let i = s as usize;
            self.stamps[i].store(s | WRITING, Ordering::Relaxed);
            self.flags[i].store(0, Ordering::Relaxed);
        }
        for s in c..c + n {
            self.stamps[s as usize].store(s, Ordering::Release);
        }
        let clear = if v.release_clear {
            Ordering::Release
        } else {
            Ordering::Relaxed
        };
        me.store(0, clear);
        c
    }

    /// `Ring::tombstone` (the slot is free: the model's consumers are far ahead).
    fn tombstone(&self, seq: u64) -> bool {
        let i = seq as usize;
        let stamp = self.stamps[i].load(Ordering::Acquire);
        if stamp == seq || (stamp != EMPTY && (stamp & !WRITING) > seq) {
            return false;
        }
        self.flags[i].store(TOMBSTONE, Ordering::Relaxed);
        self.stamps[i].store(seq, Ordering::Release);
        true
    }

    /// `Ring::repair_unattributed` for the dead entry 0. Returns the sequences tombstoned.
    fn repair(&self, v: Variant) -> Vec<u64> {
        let head_now = || self.claim.load(Ordering::Acquire);
        let mut head = 0;
        if v.head_first {
            head = head_now();
        }
        let mut held: Vec<(u64, u64)> = Vec::new();
        match self.in_flight[1].load(Ordering::Acquire) {
            0 => {}
            CLAIMING => return Vec::new(), // a live producer between announce and record
            first => {
                let len = if v.use_len {
                    self.in_flight_len[1].load(Ordering::Relaxed)
                } else {
                    1
                };
                held.push((first - 1, len));
            }
        }
        if !v.head_first {
            head = head_now();
        }
        (0..head)
            .filter(|&s| !held.iter().any(|&(f, n)| s >= f && s < f + n))
            .filter(|&s| self.tombstone(s))
            .collect()
    }
}

/// The repair racing a live claim of `n` sequences.
fn repair_against_a_live_claim(v: Variant, n: u64) {
    loom::model(move || {
        let ring = Arc::new(Ring::with_unattributed_hole());
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || ring.publish(v, n))
        };
        let tombstoned = ring.repair(v);
        let first = producer.join().unwrap();
        for accepted in first..first + n {
            let i = accepted as usize;
            assert!(
                ring.stamps[i].load(Ordering::Acquire) == accepted
                    && ring.flags[i].load(Ordering::Relaxed) == 0,
                "live claim lost: sequence {accepted} was accepted and ends as a tombstone \
                 (repair tombstoned {tombstoned:?})"
            );
            assert!(
                !tombstoned.contains(&accepted),
                "live claim lost: the repair tombstoned sequence {accepted} while its \
                 producer published it (consumers may skip it)"
            );
        }
    });
}

#[test]
#[should_panic(expected = "live claim lost")]
fn reading_the_producers_before_the_head_tombstones_a_live_claim() {
    // Release clear: the order alone loses the claim.
    repair_against_a_live_claim(
        Variant {
            head_first: false,
            ..FIXED
        },
        1,
    );
}

#[test]
#[should_panic(expected = "live claim lost")]
fn a_relaxed_clear_of_in_flight_hides_the_stamp_from_the_repair() {
    repair_against_a_live_claim(
        Variant {
            release_clear: false,
            ..FIXED
        },
        1,
    );
}

#[test]
fn head_first_and_a_release_clear_leave_live_claims_alone() {
    repair_against_a_live_claim(FIXED, 1);
}

#[test]
#[should_panic(expected = "live claim lost")]
fn a_repair_that_ignores_the_claim_length_tombstones_the_rest_of_a_batch() {
    repair_against_a_live_claim(
        Variant {
            use_len: false,
            ..FIXED
        },
        2,
    );
}

#[test]
#[should_panic(expected = "live claim lost")]
fn a_relaxed_record_of_a_batch_claim_can_hide_its_length_from_the_repair() {
    repair_against_a_live_claim(
        Variant {
            release_mark: false,
            ..FIXED
        },
        2,
    );
}

#[test]
fn a_release_record_of_a_batch_claim_keeps_the_whole_batch() {
    repair_against_a_live_claim(FIXED, 2);
}
