//! A loom model of two processes closing a dependency cycle at once (`client/src/graph.rs`):
//! `a` re-attaches after `b` while `b` re-attaches after `a`, both durable entries taken
//! over (RESUMING) before the model starts.
//!
//! Each side runs the shipping attach steps on loom's atomics: `graph::record` (its
//! upstream, Relaxed), `table::consumer::set` (the SeqCst CAS to ACTIVE), then
//! `graph::find_cycle` with the SeqCst fence the shipping attach passes.
//!
//! ```text
//! a: record a -> b; word[a] -> ACTIVE; fence; walk b   (word[b] SeqCst, then b's record)
//! b: record b -> a; word[b] -> ACTIVE; fence; walk a
//! ```
//!
//! Property: at least one of the two sees the cycle (store-buffering: the fences are
//! ordered, and the later one's walk reads the earlier one's ACTIVE word and record).
//!
//! Second model: the barrier of a dependent consumer reading its upstream's entry while the
//! upstream unsubscribes and another consumer takes the entry (`client/src/consumer/
//! barrier.rs`). The reader runs the shipping `graph::upstream_next` (its `next`, Acquire,
//! then its word); the new holder the shipping `table::consumer::take_free` and
//! `graph::provisional_position` (Release). Property: a position used with the validated
//! word is the old upstream's. Controls: the word read first, and a Relaxed provisional
//! store, each let the new tenure's position through with the old word.
//!
//! Controls of the first model (`#[should_panic]`): the check made before the record, as a naive attach would
//! (both walks can run before either record exists), and the check without the fence (loom
//! treats SeqCst accesses as Acquire/Release, so without a SeqCst fence it finds the
//! interleaving where both walks miss the other's ACTIVE word: the fence is what the model,
//! and the argument in `graph`, rest on).

mod loom_word;

use loom::sync::atomic::{fence, AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};

use shmring::graph::{self, Graph};
use shmring::line::Word;
use shmring::table;
use shmring_layout::{consumer_state, owned_word, MAX_UPSTREAM};

struct Table {
    words: [W; 2],
    upstream: [[AtomicU32; MAX_UPSTREAM]; 2],
}

impl Table {
    fn new() -> Self {
        let resuming = |pid| W::new(owned_word::pack(1, consumer_state::RESUMING, pid));
        let none = || std::array::from_fn(|_| AtomicU32::new(0));
        Table {
            words: [resuming(1), resuming(2)],
            upstream: [none(), none()],
        }
    }
}

impl Graph for Table {
    fn entries(&self) -> u32 {
        2
    }
    fn word(&self, i: u32, order: Ordering) -> u64 {
        self.words[i as usize].load(order)
    }
    fn upstream(&self, i: u32, k: usize, order: Ordering) -> u32 {
        self.upstream[i as usize][k].load(order)
    }
    fn set_upstream(&self, i: u32, k: usize, value: u32, order: Ordering) {
        self.upstream[i as usize][k].store(value, order)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Shipping,
    CheckFirst,
    NoFence,
}

/// Entry `me` attaches after entry `up`; returns whether it found a cycle.
fn attach(t: &Table, me: u32, up: u32, v: Variant) -> bool {
    let mut record = [0; MAX_UPSTREAM];
    record[0] = up + 1;
    let check = || match v {
        Variant::NoFence => graph::find_cycle(t, me, &record, || {}),
        _ => graph::find_cycle(t, me, &record, || fence(Ordering::SeqCst)),
    };
    let early = (v == Variant::CheckFirst).then(check);
    graph::record(t, me, &record);
    let mine = t.words[me as usize].load(Ordering::Relaxed);
    table::consumer::set(&t.words[me as usize], mine, consumer_state::ACTIVE)
        .expect("only this side changes its entry");
    let found = early.unwrap_or_else(check);
    if let Some(path) = &found {
        assert_eq!(path, &vec![me, up, me], "the cycle, from this entry");
    }
    found.is_some()
}

fn closing_a_cycle_from_both_sides(v: Variant) {
    model(move || {
        let t = Arc::new(Table::new());
        let b = {
            let t = t.clone();
            thread::spawn(move || attach(&t, 1, 0, v))
        };
        let a = attach(&t, 0, 1, v);
        let b = b.join().unwrap();
        assert!(a || b, "both ends of the cycle a -> b -> a attached");
    });
}

#[test]
fn two_attaches_closing_a_cycle_at_once_are_not_both_let_through() {
    closing_a_cycle_from_both_sides(Variant::Shipping);
}

#[test]
#[should_panic(expected = "both ends of the cycle")]
fn control_a_check_before_the_record_lets_both_through() {
    closing_a_cycle_from_both_sides(Variant::CheckFirst);
}

#[test]
#[should_panic(expected = "both ends of the cycle")]
fn control_a_check_without_the_fence_lets_both_through_under_loom() {
    closing_a_cycle_from_both_sides(Variant::NoFence);
}

/// The old upstream's committed position, and the new tenure's provisional one.
const OLD_NEXT: u64 = 5;
const NEW_NEXT: u64 = 100;

#[derive(Clone, Copy, PartialEq)]
enum Reuse {
    Shipping,
    WordFirst,
    RelaxedProvisional,
}

fn a_freed_and_retaken_upstream(v: Reuse) {
    model(move || {
        let validated = owned_word::pack(1, consumer_state::ACTIVE, 1);
        let entry = Arc::new((W::new(validated), W::new(OLD_NEXT)));
        let holder = {
            let entry = entry.clone();
            thread::spawn(move || {
                let (word, next) = (&entry.0, &entry.1);
                let freed = table::consumer::give_up(word, validated, consumer_state::FREE)
                    .expect("the old upstream holds its entry");
                let mine = table::consumer::take_free(word, freed, 2).expect("free");
                if v == Reuse::RelaxedProvisional {
                    next.store(NEW_NEXT, Ordering::Relaxed);
                } else {
                    graph::provisional_position(next, NEW_NEXT);
                }
                table::consumer::set(word, mine, consumer_state::ACTIVE).expect("held");
            })
        };
        let (word, next) = (&entry.0, &entry.1);
        let seen = if v == Reuse::WordFirst {
            let w = word.load(Ordering::Acquire);
            let n = next.load(Ordering::Acquire);
            (w == validated).then_some(n)
        } else {
            graph::upstream_next(next, word, validated)
        };
        if let Some(n) = seen {
            assert_eq!(
                n, OLD_NEXT,
                "the barrier used another tenure's position with the upstream's word"
            );
        }
        holder.join().unwrap();
    });
}

#[test]
fn a_barrier_never_pairs_a_new_tenures_position_with_the_old_word() {
    a_freed_and_retaken_upstream(Reuse::Shipping);
}

#[test]
#[should_panic(expected = "another tenure's position")]
fn control_a_barrier_reading_the_word_first_is_fooled() {
    a_freed_and_retaken_upstream(Reuse::WordFirst);
}

#[test]
#[should_panic(expected = "another tenure's position")]
fn control_a_relaxed_provisional_position_fools_the_barrier() {
    a_freed_and_retaken_upstream(Reuse::RelaxedProvisional);
}
