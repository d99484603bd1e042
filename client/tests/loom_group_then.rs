//! A loom model of a consumer that runs after a worker group (`ConsumerOptions::after`
//! naming the group): its barrier is `group::finished`, the lower of the group's work
//! sequence and its gating members' positions, with the work sequence read first.
//!
//! ```text
//! member A (attached)          member B (attaches now)         downstream
//! claim (cap 1): group::claim  word FREE -> CLAIMED (AcqRel)    w = work (Acquire)
//! handle the event             next = work (Release)           floor = group::finished(w,
//! commit next (Release)        CLAIMED -> ACTIVE (SeqCst)        [A, B])
//! claim again ...              claim, handle, commit ...       every s < floor handled?
//! ```
//!
//! Two events are published before the model starts; the members claim one at a time
//! until a claim lies past them (which each then holds, as an idle member does). Property:
//! every sequence below the floor the downstream computes was handled by the member that
//! claimed it; once both members are idle the floor is 2. The control reads the members'
//! entries before the work sequence and passes an event a member is still handling.

mod loom_word;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};

use shmring::group;
use shmring::line::Word;
use shmring_layout::{consumer_state, owned_word};

const EVENTS: u64 = 2;

struct Member {
    word: W,
    next: W,
    claim_end: W,
}

struct Group {
    work: W,
    a: Member,
    b: Member,
    /// Per sequence: 1 once a member's handler has run for it.
    handled: [AtomicU64; EVENTS as usize],
}

impl Group {
    fn new() -> Self {
        let member = |state, pid| Member {
            word: W::new(owned_word::pack(1, state, pid)),
            next: W::new(0),
            claim_end: W::new(0),
        };
        Group {
            work: W::new(0),
            a: member(consumer_state::ACTIVE, 1),
            b: member(consumer_state::FREE, 0),
            handled: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// A member's loop: claim one event, handle it, commit past it (as `Consumer::commit`)
    /// and claim again at once (as `claim_if_done`), until its claim is past the published
    /// events: it then holds that claim, as an idle member does.
    fn claim_and_handle(&self, m: &Member) {
        loop {
            let run = |w| u64::from(w < EVENTS);
            let (start, end) = group::claim(&self.work, &m.next, &m.claim_end, 1, run);
            if start >= EVENTS {
                return;
            }
            for s in start..end {
                // Relaxed: published by the Release commit below.
                self.handled[s as usize].store(1, Ordering::Relaxed);
            }
            // Release: as the member's commit.
            m.next.store(end, Ordering::Release);
        }
    }

    /// Member B's fresh attach (`Consumer::fresh` for a member): the entry taken, its
    /// provisional position the work sequence, ACTIVE, then its claims.
    fn attach_b(&self) {
        let free = self.b.word.load(Ordering::Acquire);
        let claimed = owned_word::next(free, consumer_state::CLAIMED, 2);
        // AcqRel: as `table::consumer::take_free`.
        self.b
            .word
            .compare_exchange(free, claimed, Ordering::AcqRel, Ordering::Relaxed)
            .expect("nobody else takes B's entry");
        // Acquire / Release: the provisional position, as `graph::provisional_position`.
        let w = self.work.load(Ordering::Acquire);
        self.b.next.store(w, Ordering::Release);
        // SeqCst: the ACTIVE CAS of an attach.
        self.b
            .word
            .compare_exchange(
                claimed,
                owned_word::next(claimed, consumer_state::ACTIVE, 2),
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .expect("nobody else takes B's entry");
        self.claim_and_handle(&self.b);
    }

    /// The member entries in table order: B's first (a freed entry at a lower index taken
    /// again), so that a reading of the entries can pass B's before B attaches and A's
    /// after A moved on.
    fn members(&self) -> [(&W, &W); 2] {
        [(&self.b.word, &self.b.next), (&self.a.word, &self.a.next)]
    }

    /// The downstream's barrier, as shipped: the work sequence first.
    fn floor(&self) -> u64 {
        // Acquire: as `upstream_next` loads the group's `next`.
        let w = self.work.load(Ordering::Acquire);
        group::finished(w, self.members())
    }

    /// The control: the members first, then the work sequence.
    fn floor_members_first(&self) -> u64 {
        let mut floor = u64::MAX;
        for (word, next) in self.members() {
            if consumer_state::gates(owned_word::state(word.load(Ordering::Acquire))) {
                floor = floor.min(next.load(Ordering::Acquire));
            }
        }
        floor.min(self.work.load(Ordering::Acquire))
    }

    fn check(&self, floor: u64) {
        for s in 0..floor.min(EVENTS) {
            assert_eq!(
                self.handled[s as usize].load(Ordering::Relaxed),
                1,
                "passed an unfinished event: sequence {s} below the floor {floor}"
            );
        }
    }
}

fn downstream_after_group(floor: fn(&Group) -> u64) {
    model(move || {
        let g = Arc::new(Group::new());
        let a = {
            let g = g.clone();
            thread::spawn(move || g.claim_and_handle(&g.a))
        };
        let b = {
            let g = g.clone();
            thread::spawn(move || g.attach_b())
        };
        g.check(floor(&g));
        a.join().unwrap();
        b.join().unwrap();
        let f = floor(&g);
        g.check(f);
        assert_eq!(f, EVENTS, "both members idle: the floor passes both events");
    });
}

#[test]
fn a_consumer_after_a_group_passes_only_events_their_member_finished() {
    downstream_after_group(Group::floor);
}

#[test]
#[should_panic(expected = "passed an unfinished event")]
fn control_reading_the_members_before_the_work_sequence_passes_an_unfinished_event() {
    downstream_after_group(Group::floor_members_first);
}
