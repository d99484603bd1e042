//! A worker group's claims interleaved with the readers of its positions at the one point
//! that matters: a member attaching and claiming right after a reader looked at its entry,
//! and another member claiming past it, before the reader reads the group's work sequence.
//! The readers are the shipping functions: the producers' wrap gate (`gating::gate`) and
//! the barrier of a consumer after the group (`group::finished`). Neither may pass the
//! new member's unfinished claim. (The loom model `loom_group_then.rs` checks the
//! barrier's orderings across threads.)

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use shmring::gating::{self, Flags};
use shmring::group;
use shmring::line::Word;
use shmring_layout::{consumer_flags, consumer_state, owned_word};

/// Events published before the reader looks.
const HEAD: u64 = 2;

thread_local! {
    /// What the other members do, run at the reader's first load of B's word.
    static BETWEEN: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
}

/// A word of the table; B's word runs `BETWEEN` the first time it is loaded.
struct Probed {
    v: AtomicU64,
    trigger: bool,
}

impl Probed {
    fn new(v: u64) -> Self {
        Probed {
            v: AtomicU64::new(v),
            trigger: false,
        }
    }
}

impl Word for Probed {
    fn load(&self, order: Ordering) -> u64 {
        let v = self.v.load(order);
        if self.trigger {
            if let Some(between) = BETWEEN.with(|b| b.borrow_mut().take()) {
                between();
            }
        }
        v
    }
    fn store(&self, value: u64, order: Ordering) {
        self.v.store(value, order)
    }
    fn compare_exchange(&self, c: u64, n: u64, ok: Ordering, err: Ordering) -> Result<u64, u64> {
        self.v.compare_exchange(c, n, ok, err)
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        self.v.fetch_add(value, order)
    }
}

struct Fixed(AtomicU32);

impl Flags for Fixed {
    fn load(&self, order: Ordering) -> u32 {
        self.0.load(order)
    }
}

/// The table, in its order: member B's entry (free: a lower index taken again), the
/// group's entry, member A's entry (attached, at the work sequence).
struct Table {
    b: [Probed; 3],
    group: [Probed; 2],
    a: [Probed; 3],
    member: Fixed,
    group_flags: Fixed,
}

impl Table {
    fn new() -> &'static Self {
        let mut b = [
            Probed::new(owned_word::pack(1, consumer_state::FREE, 0)),
            Probed::new(0),
            Probed::new(0),
        ];
        b[0].trigger = true;
        Box::leak(Box::new(Table {
            b,
            group: [
                Probed::new(owned_word::pack(1, consumer_state::DETACHED, 0)),
                Probed::new(0),
            ],
            a: [
                Probed::new(owned_word::pack(1, consumer_state::ACTIVE, 1)),
                Probed::new(0),
                Probed::new(0),
            ],
            member: Fixed(AtomicU32::new(
                consumer_flags::REQUIRED | consumer_flags::MEMBER,
            )),
            group_flags: Fixed(AtomicU32::new(
                consumer_flags::REQUIRED | consumer_flags::DURABLE | consumer_flags::GROUP,
            )),
        }))
    }

    /// Arm the interleaving: B attaches (its entry ACTIVE at the work sequence) and claims
    /// sequence 0, which it has not handled; A claims 1, handles it and claims again.
    fn arm(&'static self) {
        let between = move || {
            let [bw, bn, be] = &self.b;
            let [_, an, ae] = &self.a;
            let work = &self.group[1];
            bw.store(
                owned_word::pack(2, consumer_state::ACTIVE, 2),
                Ordering::SeqCst,
            );
            bn.store(work.load(Ordering::Acquire), Ordering::Release);
            group::claim(work, bn, be, 1, |_| 1);
            let (_, end) = group::claim(work, an, ae, 1, |_| 1);
            an.store(end, Ordering::Release);
            group::claim(work, an, ae, 1, |_| 1);
        };
        BETWEEN.with(|b| *b.borrow_mut() = Some(Box::new(between)));
    }

    /// B's unfinished claim starts here.
    fn b_claim(&self) -> u64 {
        self.b[1].v.load(Ordering::Relaxed)
    }
}

#[test]
fn the_producers_gate_holds_the_claim_of_a_member_attaching_below_its_group() {
    let t = Table::new();
    t.arm();
    let entries = || {
        [
            (&t.b[0], &t.member, &t.b[1]),
            (&t.group[0], &t.group_flags, &t.group[1]),
            (&t.a[0], &t.member, &t.a[1]),
        ]
        .into_iter()
    };
    let gate = gating::gate(HEAD, entries, 0);
    assert!(
        BETWEEN.with(|b| b.borrow().is_none()),
        "the interleaving ran"
    );
    assert_eq!(t.b_claim(), 0);
    assert!(
        gate <= t.b_claim(),
        "the gate {gate} passes member B's unfinished claim at {}",
        t.b_claim()
    );
}

#[test]
fn a_consumer_after_the_group_holds_the_claim_of_a_member_attaching_below_its_group() {
    let t = Table::new();
    t.arm();
    // As the barrier: the group's `next` (its work sequence) first, then its members.
    let work = t.group[1].load(Ordering::Acquire);
    let floor = group::finished(work, [(&t.b[0], &t.b[1]), (&t.a[0], &t.a[1])]);
    assert!(
        BETWEEN.with(|b| b.borrow().is_none()),
        "the interleaving ran"
    );
    assert!(
        floor <= t.b_claim(),
        "the barrier {floor} passes member B's unfinished claim at {}",
        t.b_claim()
    );
}
