//! A loom model of a worker group (`client/src/group.rs`): two members claiming from the
//! group's work sequence while a producer publishes into a ring of one slot; member B
//! "dies" holding a claim and member A, the survivor, adopts B's entry and delivers it.
//!
//! Shipping code: the claim is `group::claim`, the adoption `group::adopt` (over
//! `table::consumer::holder` and `take_over`) with `group::claim_range`, the release of
//! the adopted entry `table::consumer::free`, and the producer's wrap gate `gating::gate`
//! over the three entries (the group's, A's, B's), all on loom's atomics.
//!
//! ```text
//! producer                         member A                        member B (dies)
//! (event 0 published before)      loop: claim (cap 1)             claim (cap 1), dying
//! s = 1: wait s < gate + 1           wait for its run,             at one point of it
//!   check slot's old event was         adopting B once B is gone
//!     delivered                      deliver, commit next
//!   stamp = s (Release)            then adopt B until B is freed
//! ```
//!
//! Properties: every sequence is delivered (nothing lost); a sequence delivered twice lies
//! in the claim B's entry named, and A counted it as redelivered; the producer never
//! overwrites a slot whose event has not been delivered; a member never reads a slot that
//! holds a later sequence. B dies before its CAS (its entry names a claim it never won:
//! the one case of duplicates), after it (A delivers B's claim), or between the CAS and
//! the stores in the control, which claims with the CAS first: there B's entry names no
//! claim at all, and the event B took is never delivered and is overwritten.

mod loom_word;

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};

use shmring::gating::{self, Flags};
use shmring::group;
use shmring::line::Word;
use shmring::table::{self, Procs};
use shmring_layout::{consumer_flags, consumer_state, owned_word};

const CAPACITY: u64 = 1;
/// Sequences the producer publishes.
const EVENTS: u64 = 2;
const PID_A: u32 = 1;
const PID_B: u32 = 2;

/// Every entry of the model is required.
struct Required;

impl Flags for Required {
    fn load(&self, _: Ordering) -> u32 {
        consumer_flags::REQUIRED
    }
}

/// Where B dies.
#[derive(Clone, Copy, Debug)]
enum Death {
    /// After storing its claim, before the CAS that would take it (shipping order).
    BeforeCas,
    /// After the CAS (shipping order): it won the claim and delivers none of it.
    AfterCas,
    /// The control: a claim that CASes first and stores after, dying between the two.
    ControlBetweenCasAndStores,
}

struct Entry {
    word: W,
    next: W,
    claim_end: W,
}

impl Entry {
    fn new(state: u32, pid: u32, next: u64) -> Self {
        Entry {
            word: W::new(owned_word::pack(1, state, pid)),
            next: W::new(next),
            claim_end: W::new(next),
        }
    }
}

struct Ring {
    stamps: [W; CAPACITY as usize],
    /// Deliveries per sequence.
    delivered: [W; EVENTS as usize],
    /// The group's entry: its `next` is the work sequence.
    group: Entry,
    a: Entry,
    b: Entry,
    /// 1 once B's process is gone.
    b_dead: W,
}

/// The processes of the model: B is gone once it set `b_dead`, A always runs.
struct Processes<'a>(&'a W);

impl Procs for Processes<'_> {
    fn alive(&self, pid: u32, _: u64) -> bool {
        // Acquire: pairs with B's Release store at its death (a process's exit is a full
        // barrier for whoever sees it gone).
        pid != PID_B || Word::load(self.0, Ordering::Acquire) == 0
    }
    fn exists(&self, pid: u32) -> bool {
        self.alive(pid, 0)
    }
}

/// The work sequence as the dying member sees it: its CAS is where it dies.
struct Dying<'a> {
    work: &'a W,
    dead: &'a W,
    death: Death,
}

impl Word for Dying<'_> {
    fn load(&self, order: Ordering) -> u64 {
        self.work.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.work.store(value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        match self.death {
            Death::BeforeCas => {
                // Gone before the CAS: it never happens (the claim returns, unused).
                self.dead.store(1, Ordering::Release);
                Ok(current)
            }
            _ => {
                let r = self.work.compare_exchange(current, new, ok, err);
                if r.is_ok() {
                    self.dead.store(1, Ordering::Release);
                }
                r
            }
        }
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        self.work.fetch_add(value, order)
    }
}

/// The control's claim: the CAS first, the member's entry after (B dies in between).
fn control_claim(work: &W, dead: &W) {
    loop {
        let w = work.load(Ordering::Acquire);
        if work
            .compare_exchange(w, w + 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            dead.store(1, Ordering::Release);
            return;
        }
    }
}

/// Member A's state between its steps.
struct MemberA {
    cap: u64,
    /// Its claim: the next sequence to deliver and the end.
    claim: Option<(u64, u64)>,
    /// Its last claim lies past the events.
    past_the_end: bool,
    adopted: Option<Adopted>,
    done_with_b: bool,
    redelivered: u64,
}

impl MemberA {
    fn done(&self) -> bool {
        self.past_the_end && self.done_with_b
    }
}

/// Yields a thread of the model makes while it cannot move before it leaves the rest of its
/// work to the end of the model (where it runs without other threads: see `member_dies`).
const PATIENCE: u32 = 1;

/// What member A holds of B: the adopted entry's word and the rest of its claim.
struct Adopted {
    word: u64,
    at: u64,
    end: u64,
}

impl Ring {
    fn new() -> Self {
        Ring {
            // Event 0 is published before the threads start; the producer publishes 1.
            stamps: [W::new(0)],
            delivered: [W::new(0), W::new(0)],
            group: Entry::new(consumer_state::DETACHED, 0, 0),
            a: Entry::new(consumer_state::ACTIVE, PID_A, 0),
            b: Entry::new(consumer_state::ACTIVE, PID_B, 0),
            b_dead: W::new(0),
        }
    }

    /// The stamp of the slot of `seq`.
    fn slot(&self, seq: u64) -> &W {
        &self.stamps[(seq & (CAPACITY - 1)) as usize]
    }

    fn dump(&self) -> String {
        let l = |w: &W| w.load(Ordering::SeqCst);
        format!(
            "work {} a {}..{} b {}..{} b word state {} dead {} stamps {:?} delivered {:?}",
            l(&self.group.next),
            l(&self.a.next),
            l(&self.a.claim_end),
            l(&self.b.next),
            l(&self.b.claim_end),
            owned_word::state(l(&self.b.word)),
            l(&self.b_dead),
            self.stamps.iter().map(l).collect::<Vec<_>>(),
            self.delivered.iter().map(l).collect::<Vec<_>>(),
        )
    }

    fn published(&self, seq: u64) -> bool {
        // Acquire: pairs with the producer's Release stamp store.
        seq < EVENTS && self.slot(seq).load(Ordering::Acquire) == seq
    }

    /// Published events from `w`.
    fn run(&self, w: u64) -> u64 {
        (w..).take_while(|&s| self.published(s)).count() as u64
    }

    /// A member reads `seq` in place and records it.
    fn deliver(&self, seq: u64) {
        // Acquire: as in `published`.
        let stamp = self.slot(seq).load(Ordering::Acquire);
        assert_eq!(
            stamp, seq,
            "event lost: sequence {seq} overwritten while claimed"
        );
        self.delivered[seq as usize].fetch_add(1, Ordering::AcqRel);
    }

    /// Publish sequence `s` if the gate allows it. Returns whether it did.
    fn publish(&self, s: u64) -> bool {
        let entries = || {
            [&self.group, &self.a, &self.b]
                .into_iter()
                .map(|e| (&e.word, &Required, &e.next))
        };
        if s >= gating::gate(s, entries, 0) + CAPACITY {
            return false;
        }
        if let Some(old) = s.checked_sub(CAPACITY) {
            // Acquire: pairs with the member's AcqRel count, made before its commit.
            assert!(
                self.delivered[old as usize].load(Ordering::Acquire) > 0,
                "event lost: sequence {old} overwritten by {s} before any member delivered it"
            );
        }
        // Release: the publish.
        self.slot(s).store(s, Ordering::Release);
        true
    }

    /// One step of A's recovery: adopt B's entry once B is gone, deliver what is published
    /// of its claim, free it when done. Returns whether B's entry is done with. Counts the
    /// events delivered from it in `redelivered`.
    fn recover(&self, adopted: &mut Option<Adopted>, redelivered: &mut u64) -> bool {
        if adopted.is_none() {
            // Acquire: as every table scan.
            let seen = self.b.word.load(Ordering::Acquire);
            if owned_word::state(seen) == consumer_state::FREE {
                return true;
            }
            let procs = Processes(&self.b_dead);
            let Some(word) = group::adopt(&procs, &self.b.word, seen, 0, PID_A) else {
                return false;
            };
            let (at, end) = group::claim_range(&self.b.next, &self.b.claim_end);
            *adopted = Some(Adopted { word, at, end });
        }
        let Some(a) = adopted.as_mut() else {
            return false;
        };
        // Sequences at or past EVENTS are never published: the model's ring stops there.
        while a.at < a.end.min(EVENTS) && self.published(a.at) {
            self.deliver(a.at);
            *redelivered += 1;
            a.at += 1;
            // Release: the adopted entry's commit.
            self.b.next.store(a.at, Ordering::Release);
        }
        if a.at < a.end.min(EVENTS) {
            return false;
        }
        assert!(table::consumer::free(
            &self.b.word,
            a.word,
            consumer_state::FREE
        ));
        true
    }

    /// One step of member A: claim, deliver what is published of its claim, commit; and
    /// adopt B's entry once B is gone, deliver it, free it. Returns whether it moved.
    fn a_step(&self, a: &mut MemberA) -> bool {
        let mut moved = false;
        if a.claim.is_none() && !a.past_the_end {
            let (start, end) = group::claim(
                &self.group.next,
                &self.a.next,
                &self.a.claim_end,
                a.cap,
                |w| self.run(w),
            );
            a.past_the_end = start >= EVENTS;
            a.claim = (!a.past_the_end).then_some((start, end));
            moved = true;
        }
        if let Some((at, end)) = a.claim.as_mut() {
            while *at < *end && self.published(*at) {
                self.deliver(*at);
                *at += 1;
                moved = true;
            }
            if *at == *end {
                // Release: the commit, as `Consumer::commit`.
                self.a.next.store(*end, Ordering::Release);
                a.claim = None;
            }
        }
        if !a.done_with_b {
            let before = a.redelivered;
            a.done_with_b = self.recover(&mut a.adopted, &mut a.redelivered);
            moved |= a.done_with_b || a.redelivered != before;
        }
        moved
    }

    /// Member B: claims once and dies. Returns the claim its entry named when it died
    /// (read after its death, the entry would show an adopter's progress through it).
    fn member_b(&self, death: Death) -> (u64, u64) {
        match death {
            Death::ControlBetweenCasAndStores => {
                // Relaxed: B's own entry, as it stays (the control never stores it).
                let named = (
                    self.b.next.load(Ordering::Relaxed),
                    self.b.claim_end.load(Ordering::Relaxed),
                );
                control_claim(&self.group.next, &self.b_dead);
                named
            }
            _ => {
                let work = Dying {
                    work: &self.group.next,
                    dead: &self.b_dead,
                    death,
                };
                // The claim stored in the entry before the CAS it died at.
                group::claim(&work, &self.b.next, &self.b.claim_end, 1, |w| self.run(w))
            }
        }
    }
}

fn member_dies(death: Death, cap_a: u64) {
    model(move || {
        let ring = Arc::new(Ring::new());
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let (mut s, mut waits) = (1, 0);
                while s < EVENTS && waits < PATIENCE {
                    if ring.publish(s) {
                        s += 1;
                    } else {
                        waits += 1;
                        thread::yield_now();
                    }
                }
                s
            })
        };
        let b = {
            let ring = ring.clone();
            thread::spawn(move || ring.member_b(death))
        };
        let mut a = MemberA {
            cap: cap_a,
            claim: None,
            past_the_end: false,
            adopted: None,
            done_with_b: false,
            redelivered: 0,
        };
        let mut waits = 0;
        while !a.done() && waits < PATIENCE {
            if !ring.a_step(&mut a) {
                waits += 1;
                thread::yield_now();
            }
        }
        let mut s = producer.join().unwrap();
        let (b_start, b_end) = b.join().unwrap();
        // What is left, alone: a step that moves nothing here is stuck for good.
        while s < EVENTS || !a.done() {
            let published = s < EVENTS && ring.publish(s);
            s += u64::from(published);
            let moved = ring.a_step(&mut a);
            assert!(published || moved, "stuck: {}", ring.dump());
        }
        let redelivered = a.redelivered;
        let mut duplicates = 0;
        for seq in 0..EVENTS {
            let n = ring.delivered[seq as usize].load(Ordering::Acquire);
            assert!(
                n > 0,
                "event lost: sequence {seq} never delivered ({death:?})"
            );
            if n > 1 {
                assert!(
                    n == 2 && (b_start..b_end).contains(&seq),
                    "sequence {seq} delivered {n} times outside the dead member's claim"
                );
                duplicates += 1;
            }
        }
        assert!(
            duplicates <= redelivered,
            "{duplicates} duplicates, {redelivered} counted as redelivered"
        );
    });
}

#[test]
fn a_member_dying_before_its_cas_causes_counted_duplicates_only() {
    member_dies(Death::BeforeCas, 1);
}

#[test]
fn a_member_dying_after_its_cas_has_its_claim_delivered_by_another() {
    member_dies(Death::AfterCas, 1);
}

#[test]
#[should_panic(expected = "event lost")]
fn control_claiming_with_the_cas_before_the_stores_loses_an_event() {
    member_dies(Death::ControlBetweenCasAndStores, 1);
}
