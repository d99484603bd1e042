//! Loom models of the table entries' ownership and of a repaired slot (`client/src/table.rs`):
//! the shipping transitions, run on loom's atomics through the `Word` trait.
//!
//! - **one holder**: two processes taking over the durable entry of a dead consumer by name
//!   (as `Consumer::attach` does: read the word, ask `holder`, `take_over`, write the start
//!   time, `set` ACTIVE), in every interleaving exactly one attaches and the other is told the
//!   name is in use; a control with the state-only CAS the table replaced must let both in.
//!   The same for a declared consumer's entry as `Ring::create` lays it out
//!   (`table::consumer::declare`), whose takeover gates; a control with the entry held by
//!   its live creator must refuse both.
//! - **a repair never frees a new holder**: a broker repairing a dead producer's entry
//!   (`begin_repair` .. `end_repair`) racing a new producer that reclaims the same entry
//!   (`take_over` of a dead entry without a claim, or `take_free` after the repair): the new
//!   producer, once attached, always holds its entry; a control with the unconditional free
//!   the table replaced must free it under the new producer.
//! - **a repaired slot is one word**: a repair marking a dead producer's sequence `s` racing
//!   the producer of `s + capacity` that reuses the slot: that producer's event stays whole
//!   (never a tombstone); a control with the old tombstone (flags, then the stamp) must
//!   corrupt it.
//! - **a snapshot pairs a word with its holder's fields**: a reader (`info::snapshot`, through
//!   `table::consumer::read_beside`) racing a process that takes a failed entry over, writes
//!   its start time and attach count (as `Consumer::fill_cold`), goes ACTIVE and fails: a
//!   word read alike twice never comes with a later holder's start time, attach count or
//!   failure count; a control without the reader's Acquire fence must pair them.

mod loom_word;

use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};
use shmring::line::Word;
use shmring::table::{self, Holder, Procs, Tombstone};
use shmring_layout::stamp::Lap;
use shmring_layout::{
    consumer_flags, consumer_state, owned_word, producer_state, SLOT_FLAG_TOMBSTONE,
    STAMP_TOMBSTONE, STAMP_WRITING,
};

/// A pid that is not running.
const DEAD: u32 = 99;
/// The dead process's start time.
const DEAD_START: u64 = 5;

/// Processes 1 and 2 run, with start times 1001 and 1002.
struct Model;

impl Procs for Model {
    fn alive(&self, pid: u32, start_time: u64) -> bool {
        matches!(pid, 1 | 2) && start_time == 1000 + u64::from(pid)
    }
    fn exists(&self, pid: u32) -> bool {
        matches!(pid, 1 | 2)
    }
}

struct Entry {
    word: W,
    start_time: W,
    in_flight: W,
}

impl Entry {
    fn new(word: u64) -> Self {
        Entry {
            word: W::new(word),
            start_time: W::new(DEAD_START),
            in_flight: W::new(0),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Attach {
    /// Holds the entry with this word.
    Holds(u64),
    /// Told the name is in use by this pid.
    InUse(u32),
}

/// `Consumer::attach` by name, on one entry: read, judge, take over, publish ACTIVE.
fn resume(e: &Entry, me: u32) -> Attach {
    loop {
        let seen = e.word.load(Ordering::Acquire);
        let start = e.start_time.load(Ordering::Relaxed);
        match table::consumer::holder(&Model, seen, start) {
            Holder::Held(pid) => return Attach::InUse(pid),
            Holder::Free => unreachable!("the entry is never freed in this model"),
            Holder::Open => {}
        }
        // A required consumer at position 0 with the head at 0.
        let gated = table::consumer::gated_required(
            owned_word::state(seen),
            consumer_flags::REQUIRED,
            0,
            0,
        );
        let Some(mine) = table::consumer::take_over(&e.word, seen, me, gated) else {
            thread::yield_now();
            continue;
        };
        e.start_time.store(1000 + u64::from(me), Ordering::Relaxed);
        match table::consumer::set(&e.word, mine, consumer_state::ACTIVE) {
            Ok(word) => return Attach::Holds(word),
            Err(_) => panic!("process {me} lost the entry it took over while it ran"),
        }
    }
}

fn one_holder(initial: u32) {
    one_holder_of(owned_word::pack(7, initial, DEAD));
}

fn one_holder_of(initial: u64) {
    one_holder_at(initial, DEAD_START);
}

/// As [`one_holder_of`], with the entry's start time `start`.
fn one_holder_at(initial: u64, start: u64) {
    model(move || {
        let e = Arc::new(Entry::new(initial));
        e.start_time.store(start, Ordering::Relaxed);
        let t: Vec<_> = [1, 2]
            .into_iter()
            .map(|me| {
                let e = e.clone();
                thread::spawn(move || resume(&e, me))
            })
            .collect();
        let results: Vec<Attach> = t.into_iter().map(|t| t.join().unwrap()).collect();
        let holders: Vec<_> = results
            .iter()
            .filter_map(|r| match r {
                Attach::Holds(w) => Some(*w),
                Attach::InUse(_) => None,
            })
            .collect();
        assert_eq!(holders.len(), 1, "{results:?}");
        let word = e.word.load(Ordering::SeqCst);
        assert_eq!(word, holders[0], "the holder's word is the entry's");
        for r in &results {
            if let Attach::InUse(pid) = r {
                assert_eq!(*pid, owned_word::owner(word), "refused by the real holder");
            }
        }
    });
}

#[test]
fn two_takers_of_a_dead_consumers_entry_one_wins() {
    one_holder(consumer_state::ACTIVE);
}

#[test]
fn two_takers_of_a_detached_entry_one_wins() {
    one_holder(consumer_state::DETACHED);
}

#[test]
fn two_takers_of_an_entry_whose_taker_died_one_wins() {
    one_holder(consumer_state::RESUMING);
    one_holder(consumer_state::REATTACHING);
}

/// Released with no holder: taken over without gating (REATTACHING), one winner still.
#[test]
fn two_takers_of_a_released_entry_one_wins() {
    one_holder_of(owned_word::pack(7, consumer_state::RELEASED, 0));
}

/// The word `Ring::create` gives a declared consumer's entry (`table::consumer::declare`).
fn declared_word() -> u64 {
    let w = std::sync::atomic::AtomicU64::new(0);
    table::consumer::declare(&w);
    w.into_inner()
}

/// A declared consumer's entry as `Ring::create` lays it out (DETACHED, no holder, start
/// time 0): two processes attaching under its name at once, one attaches and the other is
/// told the name is in use. The takeover gates (RESUMING): it keeps the events published
/// since the ring was created.
#[test]
fn two_takers_of_a_declared_entry_one_wins() {
    let word = declared_word();
    assert_eq!(
        (owned_word::state(word), owned_word::owner(word)),
        (consumer_state::DETACHED, 0)
    );
    assert!(table::consumer::gated_required(
        owned_word::state(word),
        consumer_flags::REQUIRED | consumer_flags::DURABLE | consumer_flags::DECLARED,
        0,
        0
    ));
    one_holder_at(word, 0);
}

/// Why a declared entry names no holder: one laid out as held by its creator (ACTIVE,
/// process 1, which runs) refuses every attach under its name for as long as the creator
/// (a broker, say) lives.
#[test]
#[should_panic(expected = "InUse(1)")]
fn control_a_declared_entry_held_by_its_live_creator_refuses_every_attach() {
    one_holder_at(owned_word::pack(1, consumer_state::ACTIVE, 1), 1001);
}

/// The takeover the table replaced: a CAS on the state alone (RESUMING -> RESUMING
/// succeeds), the holder's pid in a word of its own.
#[test]
#[should_panic(expected = "two holders")]
fn control_a_state_only_takeover_lets_two_in() {
    model(|| {
        let state = Arc::new(AtomicU32::new(consumer_state::ACTIVE));
        let pid = Arc::new(AtomicU32::new(DEAD));
        let holders = Arc::new(AtomicU32::new(0));
        let t: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|me| {
                let (state, pid, holders) = (state.clone(), pid.clone(), holders.clone());
                thread::spawn(move || {
                    let s = state.load(Ordering::Acquire);
                    let owner = pid.load(Ordering::Relaxed);
                    let live = matches!(s, consumer_state::ACTIVE | consumer_state::RESUMING)
                        && matches!(owner, 1 | 2);
                    if !live
                        && state
                            .compare_exchange(
                                s,
                                consumer_state::RESUMING,
                                Ordering::SeqCst,
                                Ordering::Relaxed,
                            )
                            .is_ok()
                    {
                        pid.store(me, Ordering::Relaxed);
                        holders.fetch_add(1, Ordering::SeqCst);
                        state.store(consumer_state::ACTIVE, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in t {
            t.join().unwrap();
        }
        assert!(holders.load(Ordering::SeqCst) <= 1, "two holders");
    });
}

/// The broker's repair of a dead producer's entry (`Ring::repair_dead_producer`), with
/// nothing to tombstone.
fn repair(e: &Entry, seen: u64) {
    let start = e.start_time.load(Ordering::Relaxed);
    if table::producer::holder(&Model, seen, start) != Holder::Open {
        return;
    }
    let Some(mine) = table::producer::begin_repair(&e.word, seen, 2) else {
        return;
    };
    e.in_flight.store(0, Ordering::Relaxed);
    assert!(
        table::producer::end_repair(&e.word, mine),
        "nobody takes a REPAIRING entry of a live repairer"
    );
}

/// `Producer::attach` on one entry (`take_entry`, then publish ACTIVE). Returns the word it
/// holds, or `None` when the entry was busy (a live repairer holds it).
fn attach_producer(e: &Entry) -> Option<u64> {
    attach_producer_as(e, 1)
}

fn attach_producer_as(e: &Entry, me: u32) -> Option<u64> {
    let seen = e.word.load(Ordering::Acquire);
    let taken = if let Some(t) = table::producer::take_free(&e.word, seen, me) {
        t
    } else {
        let start = e.start_time.load(Ordering::Relaxed);
        if table::producer::holder(&Model, seen, start) != Holder::Open
            || e.in_flight.load(Ordering::Acquire) != 0
        {
            return None;
        }
        table::producer::take_over(&e.word, seen, me)?
    };
    e.start_time.store(1000 + u64::from(me), Ordering::Relaxed);
    e.in_flight.store(0, Ordering::Relaxed);
    Some(table::producer::publish(&e.word, taken).expect("nobody takes a live producer's entry"))
}

#[test]
fn a_repair_racing_a_reclaim_never_frees_the_new_producer() {
    model(|| {
        let dead = owned_word::pack(3, producer_state::ACTIVE, DEAD);
        let e = Arc::new(Entry::new(dead));
        let broker = {
            let e = e.clone();
            thread::spawn(move || repair(&e, dead))
        };
        let attached = attach_producer(&e);
        broker.join().unwrap();
        let word = e.word.load(Ordering::SeqCst);
        if let Some(mine) = attached {
            assert_eq!(word, mine, "the new producer still holds its entry");
        } else {
            assert_eq!(owned_word::state(word), producer_state::FREE);
        }
    });
}

/// Two producers attaching over one dead producer's entry (no claim held): exactly one
/// holds it, the other finds it busy.
#[test]
fn two_producers_reclaiming_a_dead_entry_one_wins() {
    model(|| {
        let dead = owned_word::pack(3, producer_state::ACTIVE, DEAD);
        let e = Arc::new(Entry::new(dead));
        let other = {
            let e = e.clone();
            thread::spawn(move || attach_producer_as(&e, 2))
        };
        let mine = attach_producer_as(&e, 1);
        let theirs = other.join().unwrap();
        let word = e.word.load(Ordering::SeqCst);
        match (mine, theirs) {
            (Some(w), None) | (None, Some(w)) => assert_eq!(word, w, "the winner holds it"),
            other => panic!("exactly one producer holds the entry: {other:?}"),
        }
    });
}

/// The repair the table replaced: checked, then freed with a plain store.
#[test]
#[should_panic(expected = "freed under")]
fn control_an_unconditional_free_frees_the_new_producer() {
    model(|| {
        let dead = owned_word::pack(3, producer_state::ACTIVE, DEAD);
        let e = Arc::new(Entry::new(dead));
        let broker = {
            let e = e.clone();
            thread::spawn(move || {
                let seen = e.word.load(Ordering::Acquire);
                let start = e.start_time.load(Ordering::Relaxed);
                if table::producer::holder(&Model, seen, start) == Holder::Open {
                    e.in_flight.store(0, Ordering::Release);
                    e.word.store(
                        owned_word::pack(0, producer_state::FREE, 0),
                        Ordering::Release,
                    );
                }
            })
        };
        let attached = attach_producer(&e);
        broker.join().unwrap();
        if attached.is_some() {
            let state = owned_word::state(e.word.load(Ordering::SeqCst));
            assert_eq!(
                state,
                producer_state::ACTIVE,
                "freed under the new producer"
            );
        }
    });
}

/// A slot of a ring of capacity 4: sequence 10's producer died, its slot (which held 6,
/// and 2 before that) is reused by 14.
const S: u64 = 10;
const CAPACITY: u64 = 4;
const NEXT_LAP: u64 = S + CAPACITY;
const PREVIOUS_LAP: u64 = S - CAPACITY;

struct Slot {
    stamp: W,
    flags: AtomicU32,
}

/// The producer of `NEXT_LAP` (`Producer::write_slot`): WRITING, the fields, the stamp.
fn publish_next_lap(slot: &Slot) {
    slot.stamp
        .store(NEXT_LAP | STAMP_WRITING, Ordering::Relaxed);
    loom::sync::atomic::fence(Ordering::Release);
    slot.flags.store(0, Ordering::Relaxed);
    slot.stamp.store(NEXT_LAP, Ordering::Release);
}

fn slot_race(initial: u64, old_repair: bool) {
    model(move || {
        let slot = Arc::new(Slot {
            stamp: W::new(initial),
            flags: AtomicU32::new(0),
        });
        let repairer = {
            let slot = slot.clone();
            thread::spawn(move || {
                if old_repair {
                    let stamp = slot.stamp.load(Ordering::Acquire);
                    if stamp != S && (stamp & !STAMP_WRITING) <= S {
                        slot.flags.store(SLOT_FLAG_TOMBSTONE, Ordering::Relaxed);
                        slot.stamp.store(S, Ordering::Release);
                    }
                    None
                } else {
                    // Nobody waits at S any more: the gate let the next lap in.
                    Some(table::tombstone(&slot.stamp, S, CAPACITY, || true))
                }
            })
        };
        let producer = {
            let slot = slot.clone();
            thread::spawn(move || publish_next_lap(&slot))
        };
        // A consumer waiting for the next lap's event.
        let stamp = slot.stamp.load(Ordering::Acquire);
        if stamp == NEXT_LAP {
            assert_eq!(
                slot.flags.load(Ordering::Relaxed),
                0,
                "the next lap's event is whole"
            );
        }
        repairer.join().unwrap();
        producer.join().unwrap();
        // The stamp itself cannot end below the next lap: the repair's only write is a CAS
        // from a value older than the producer's first store, and a CAS is atomic (it reads
        // the last value before its own write). loom 0.7.3 does not enforce that for a plain
        // store racing a CAS (tokio-rs/loom#254, #389), so the model checks what the slot
        // carries beside the stamp, which an older repair overwrote.
        assert_eq!(
            slot.flags.load(Ordering::SeqCst),
            0,
            "the next lap's event is not a tombstone"
        );
    });
}

#[test]
fn a_repaired_slot_never_touches_the_next_laps_event() {
    slot_race(S | STAMP_WRITING, false);
}

#[test]
fn a_repaired_slot_of_an_unstarted_write_never_touches_the_next_laps_event() {
    slot_race(PREVIOUS_LAP, false);
}

#[test]
#[should_panic(expected = "the next lap's event is")]
fn control_a_tombstone_written_field_by_field_corrupts_the_next_lap() {
    slot_race(S | STAMP_WRITING, true);
}

/// A consumer waiting at the hole sees the repair as one step: the old stamp, or the
/// repaired one.
#[test]
fn a_consumer_at_the_hole_sees_pending_or_repaired() {
    model(|| {
        let stamp = Arc::new(W::new(S | STAMP_WRITING));
        let repairer = {
            let stamp = stamp.clone();
            thread::spawn(move || table::tombstone(&*stamp, S, CAPACITY, || true))
        };
        let seen = stamp.load(Ordering::Acquire);
        assert!(
            seen == S | STAMP_WRITING || seen == S | STAMP_TOMBSTONE,
            "{seen:#x}"
        );
        assert_eq!(repairer.join().unwrap(), Tombstone::Written);
        assert_eq!(
            shmring_layout::stamp::read(stamp.load(Ordering::SeqCst), S),
            shmring_layout::stamp::Stamp::Repaired
        );
    });
}

/// The previous lap's producer claimed `S - capacity` and has not written it yet (the slot
/// still says `S - 2 capacity`) when the repair of `S` runs: the repair must wait, or that
/// late write would land over the tombstone and bring the hole back for good.
fn late_previous_lap(old_rule: bool) {
    model(move || {
        let stamp = Arc::new(W::new(S - 2 * CAPACITY));
        let late = {
            let stamp = stamp.clone();
            thread::spawn(move || {
                stamp.store(PREVIOUS_LAP | STAMP_WRITING, Ordering::Relaxed);
                stamp.store(PREVIOUS_LAP, Ordering::Release);
            })
        };
        let done = if old_rule {
            // Waits only for a WRITING stamp of an older sequence.
            let seen = stamp.load(Ordering::Acquire);
            if seen & STAMP_WRITING == 0
                && stamp
                    .compare_exchange(
                        seen,
                        S | STAMP_TOMBSTONE,
                        Ordering::Release,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                Tombstone::Written
            } else {
                Tombstone::Wait
            }
        } else {
            table::tombstone(&*stamp, S, CAPACITY, || true)
        };
        late.join().unwrap();
        if done == Tombstone::Written {
            assert_eq!(
                stamp.load(Ordering::SeqCst),
                S | STAMP_TOMBSTONE,
                "the repair was undone by the previous lap's late write"
            );
        }
    });
}

#[test]
fn a_repair_waits_for_the_previous_laps_late_write() {
    late_previous_lap(false);
}

#[test]
#[should_panic(expected = "undone")]
fn control_a_repair_that_does_not_wait_for_the_previous_lap_is_undone() {
    late_previous_lap(true);
}

/// A slot of a multi-producer ring: its stamp and an event's one word.
struct LapSlot {
    stamp: W,
    event: AtomicU64,
}

/// A producer of a multi-producer ring writes `value` as `seq` into `slot` past the wrap
/// gate, as `Producer::begin_write` and the slot write do: its WRITING stamp takes the slot
/// from the previous lap (`table::take_slot`), waiting while the slot is held for it, unless
/// `old_rule` (the plain WRITING store the producers made before).
fn write_lap(slot: &LapSlot, seq: u64, value: u64, old_rule: bool) {
    if old_rule {
        slot.stamp.store(seq | STAMP_WRITING, Ordering::Relaxed);
    } else {
        while table::take_slot(&slot.stamp, seq, CAPACITY) == Lap::Held {
            thread::yield_now();
        }
    }
    fence(Ordering::Release);
    slot.event.store(value, Ordering::Relaxed);
    slot.stamp.store(seq, Ordering::Release);
}

/// Producer 1 claimed `PREVIOUS_LAP` and is descheduled before its write; every consumer
/// attached after that claim, so none gates it, and producer 2 passes the wrap gate for
/// `S`, a lap later, in the same slot (which still holds the lap before, `S - 2 capacity`).
/// Whatever the order, the slot ends with `S` and its event: the late write never lands
/// over the later lap (which would leave consumers at `S` waiting at an older stamp for
/// good).
fn late_claim_and_later_lap(old_rule: bool) {
    model(move || {
        let slot = Arc::new(LapSlot {
            stamp: W::new(S - 2 * CAPACITY),
            event: AtomicU64::new(0),
        });
        let late = {
            let slot = slot.clone();
            thread::spawn(move || write_lap(&slot, PREVIOUS_LAP, 1, old_rule))
        };
        write_lap(&slot, S, 2, old_rule);
        late.join().unwrap();
        assert_eq!(
            (
                slot.stamp.load(Ordering::SeqCst),
                slot.event.load(Ordering::SeqCst)
            ),
            (S, 2),
            "the previous lap's late write landed over the later lap"
        );
    });
}

#[test]
fn a_later_lap_waits_for_the_previous_laps_late_write() {
    late_claim_and_later_lap(false);
}

#[test]
#[should_panic(expected = "landed over the later lap")]
fn control_a_later_lap_that_does_not_wait_is_overwritten() {
    late_claim_and_later_lap(true);
}

/// A consumer entry's word and the fields its holder writes beside it.
struct Beside {
    word: W,
    start_time: AtomicU64,
    attaches: AtomicU64,
    failures: AtomicU64,
}

/// The dead holder's entry: FAILED at its first attach with one failure.
fn failed_entry() -> Beside {
    Beside {
        word: W::new(owned_word::pack(7, consumer_state::FAILED, DEAD)),
        start_time: AtomicU64::new(DEAD_START),
        attaches: AtomicU64::new(1),
        failures: AtomicU64::new(1),
    }
}

/// Process 1 takes the failed entry over (as `Consumer::attach` by name), writes its start
/// time and attach count (as `Consumer::fill_cold`), goes ACTIVE, and its handler fails (the
/// failure count stored Release, as `store_stats`, then the FAILED give-up).
fn take_over_and_fail(e: &Beside) {
    let seen = e.word.load(Ordering::Acquire);
    let mine = table::consumer::take_over(&e.word, seen, 1, false).expect("the only taker");
    fence(Ordering::Release);
    e.start_time.store(1001, Ordering::Relaxed);
    e.attaches.fetch_add(1, Ordering::Relaxed);
    let active = table::consumer::set(&e.word, mine, consumer_state::ACTIVE).expect("held");
    e.failures.store(2, Ordering::Release);
    table::consumer::give_up(&e.word, active, consumer_state::FAILED).expect("held");
}

/// A snapshot's read of `e` with `acquire` as its fence, checked against the holder its word
/// names: the dead one's fields, or process 1's once its word is settled.
fn snapshot_pairs(acquire: fn()) {
    model(move || {
        let e = Arc::new(failed_entry());
        let taker = {
            let e = e.clone();
            thread::spawn(move || take_over_and_fail(&e))
        };
        let (word, fields) = table::consumer::read_beside(
            &e.word,
            || {
                (
                    e.start_time.load(Ordering::Relaxed),
                    e.attaches.load(Ordering::Relaxed),
                    e.failures.load(Ordering::Relaxed),
                )
            },
            acquire,
            8,
        );
        let (owner, state) = (owned_word::owner(word), owned_word::state(word));
        match (owner, state) {
            (DEAD, _) => assert_eq!(
                fields,
                (DEAD_START, 1, 1),
                "the dead holder's word paired with a later holder's fields"
            ),
            (1, consumer_state::ACTIVE) => {
                assert_eq!((fields.0, fields.1), (1001, 2), "{fields:?}")
            }
            (1, consumer_state::FAILED) => assert_eq!(fields, (1001, 2, 2)),
            // Taking over: the fields may still be the last holder's.
            _ => {}
        }
        taker.join().unwrap();
    });
}

#[test]
fn a_snapshot_pairs_a_word_with_its_holder_s_fields() {
    snapshot_pairs(|| fence(Ordering::Acquire));
}

/// Without the fence before the second load, the two loads can both see the dead holder's
/// word around a read of the new holder's fields.
#[test]
#[should_panic(expected = "paired with a later holder's fields")]
fn control_a_snapshot_without_its_fence_pairs_a_word_with_a_later_holder_s_fields() {
    snapshot_pairs(|| {});
}
