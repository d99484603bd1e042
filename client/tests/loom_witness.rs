//! Loom models of the witness (`gating::witness`): a producer of a multi-producer ring that
//! takes the slot of `S` with a plain store, outside its own run of claims, because a
//! required consumer's reads vouch for the slot's previous lap `PREV = S - CAPACITY` (see
//! `Producer::begin_write`). Had `PREV`'s producer not written yet, its late write would
//! land over `S` (ARCHITECTURE.md, "A claim that no consumer gates").
//!
//! Three threads: `PREV`'s producer, late (its Release stamp store); the consumer, whose
//! entry gates as required with `first = 0` and `next = PREV`; the producer of `S`, which
//! runs the shipping `gating::witness` over the entry and, if it vouches for `PREV`, looks
//! at the slot (Relaxed). Property: whenever the witness vouches for `PREV`, the slot holds
//! `PREV`, written; and it does vouch in some interleaving.
//!
//! - **reads**: the consumer looks at the slot (Acquire) and, finding `PREV` published,
//!   commits `next = PREV + 1` (Release), as `Consumer::commit` does. The chain from the
//!   stamp store through the commit to the witness's Acquire load of `next` puts the write
//!   before the look. Control: a Relaxed commit vouches for a slot not yet written.
//! - **jumps**: the consumer moves to the head past `PREV` without reading it, as a lapped
//!   or released consumer does (`graph::jump`: `first`, then `next`). The witness loads
//!   `next` before `first`, so it never pairs the head with the old `first`. Control: the
//!   two stores the other way round vouch for `PREV` unwritten.

mod loom_word;

use std::sync::atomic::AtomicBool;

use loom::sync::atomic::{fence, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};
use shmring::gating::{self, Flags};
use shmring::graph;
use shmring::line::Word;
use shmring_layout::{consumer_flags, consumer_state, owned_word};

const CAPACITY: u64 = 4;
/// The previous lap of the slot the producer of `S` writes.
const PREV: u64 = 2;
/// Where the jumping consumer goes: past `PREV`.
const HEAD: u64 = PREV + CAPACITY;
/// What the slot held before `PREV` was written: the lap before it.
const OLDER: u64 = PREV - CAPACITY / 2;

/// The consumer's flags: required (written before the model starts).
struct Required;

impl Flags for Required {
    fn load(&self, _: Ordering) -> u32 {
        consumer_flags::REQUIRED
    }
}

struct Model {
    /// The slot's stamp.
    stamp: AtomicU64,
    /// The consumer's entry.
    word: W,
    next: W,
    first: W,
}

/// How the consumer moves past `PREV`.
#[derive(Clone, Copy)]
enum Consumer {
    /// Reads it, and commits with this ordering.
    Reads(Ordering),
    /// Jumps past it: the shipping `graph::jump`, or (`false`) `next` stored first.
    Jumps { first_then_next: bool },
}

fn vouches(consumer: Consumer) {
    // Outside loom: whether any interleaving vouched.
    let vouched = std::sync::Arc::new(AtomicBool::new(false));
    let seen = vouched.clone();
    model(move || {
        let m = Arc::new(Model {
            stamp: AtomicU64::new(OLDER),
            word: W::new(owned_word::pack(1, consumer_state::ACTIVE, 1)),
            next: W::new(PREV),
            first: W::new(0),
        });
        let late = {
            let m = m.clone();
            // Release: the producer's stamp store (`Producer::stamp`).
            thread::spawn(move || m.stamp.store(PREV, Ordering::Release))
        };
        let reader = {
            let m = m.clone();
            thread::spawn(move || match consumer {
                Consumer::Reads(commit) => {
                    // Acquire: as the consumer's stamp load.
                    if m.stamp.load(Ordering::Acquire) == PREV {
                        m.next.store(PREV + 1, commit);
                    }
                }
                Consumer::Jumps {
                    first_then_next: true,
                } => graph::jump(&m.first, &m.next, HEAD),
                Consumer::Jumps {
                    first_then_next: false,
                } => {
                    m.next.store(HEAD, Ordering::Release);
                    m.first.store(HEAD, Ordering::Release);
                }
            })
        };
        let flags = Required;
        let entries = [(&m.word, &flags, &m.next, &m.first)];
        if let Some((to, _)) =
            gating::witness(PREV, entries.into_iter(), || fence(Ordering::Acquire))
        {
            assert!(to > PREV);
            seen.store(true, std::sync::atomic::Ordering::Relaxed);
            // Relaxed: a plain look, as the producer's plain WRITING store would follow.
            assert_eq!(
                m.stamp.load(Ordering::Relaxed),
                PREV,
                "vouched for a previous lap not written yet"
            );
        }
        late.join().unwrap();
        reader.join().unwrap();
    });
    if let Consumer::Reads(_) = consumer {
        assert!(
            vouched.load(std::sync::atomic::Ordering::Relaxed),
            "the witness never vouched: the model checks nothing"
        );
    }
}

#[test]
fn a_consumer_that_read_the_previous_lap_vouches_for_it_once_written() {
    vouches(Consumer::Reads(Ordering::Release));
}

#[test]
#[should_panic(expected = "not written yet")]
fn control_a_relaxed_commit_vouches_for_a_lap_not_written() {
    vouches(Consumer::Reads(Ordering::Relaxed));
}

#[test]
fn a_consumer_that_jumped_over_the_previous_lap_never_vouches_for_it() {
    vouches(Consumer::Jumps {
        first_then_next: true,
    });
}

#[test]
#[should_panic(expected = "not written yet")]
fn control_a_jump_that_stores_next_first_vouches_for_a_lap_not_written() {
    vouches(Consumer::Jumps {
        first_then_next: false,
    });
}
