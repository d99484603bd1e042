//! The repairs a broker (or any process) makes after a process dies: tombstones for the
//! claims a dead producer left, freeing and releasing the entries of dead consumers, and the
//! broker's own bookkeeping words in the header.
//!
//! These are library calls, so that a ring works without a broker.
//!
//! ## Orderings in this module
//!
//! - Ring state: stored Release after what it publishes (the stop sequence, a run) and
//!   loaded Acquire by every reader that then uses those; a second Relaxed load of the
//!   same word only feeds an error message.
//! - Display and bookkeeping words (`run`, `broker_pid`, `last_sweep_ns`, the `repaired`
//!   counter, a producer entry's pid/start time compared against a dead process's): Relaxed,
//!   no other memory is read on their account.
//! - Entry states loaded Acquire before reading the fields their writer stored first;
//!   gating changes (release, free) are SeqCst CASes, as in the attach protocol (`gating`).
//! - A tombstone is a publish: len/flags Relaxed, then the stamp Release, pairing with the
//!   consumers' Acquire stamp load.

use std::sync::atomic::Ordering;

use shmring_layout::IN_FLIGHT_CLAIMING;
use shmring_layout::{consumer_flags, consumer_state, owned_word, producer_state};

use crate::table::{self, FirstSeen, Holder, Tombstone};
use crate::{fence, fixed, gating, park, Ring};

/// What a repair of dead claims did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repair {
    /// Sequences marked repaired.
    pub tombstoned: u64,
    /// Sequences that could not be repaired yet (their slot still holds an unread event), or
    /// 1 while a stop or start decides a single producer's last claim: try again later.
    pub waiting: u64,
    /// The entry is held by a process that is not gone (attaching to it, repairing it, or
    /// its producer, not reaped yet): nothing was repaired, and what it holds is that
    /// process's to publish, repair or give back.
    pub held: bool,
}

impl Repair {
    fn count(&mut self, done: Tombstone) {
        match done {
            Tombstone::Written => self.tombstoned += 1,
            Tombstone::NotNeeded => {}
            Tombstone::Wait => self.waiting += 1,
        }
    }
}

impl Ring {
    /// The broker epoch (bumped by every broker that adopts the ring).
    pub fn broker_epoch(&self) -> u64 {
        self.seg.header().broker_epoch.load(Ordering::Acquire)
    }

    /// Record that broker `pid` adopted this ring; returns the new epoch.
    pub fn adopt(&self, pid: u32) -> u64 {
        let h = self.seg.header();
        h.broker_pid.store(pid, Ordering::Relaxed);
        h.broker_epoch
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1)
    }

    /// Pid of the broker that last adopted the ring (0: none).
    pub fn broker_pid(&self) -> u32 {
        self.seg.header().broker_pid.load(Ordering::Relaxed)
    }

    /// Record the instant (monotonic ns) of a broker sweep.
    pub fn mark_sweep(&self, monotonic_ns: u64) {
        self.seg
            .header()
            .last_sweep_ns
            .store(monotonic_ns, Ordering::Relaxed);
    }

    /// Whether sequence `seq`'s slot holds it: an event, or a tombstone of either kind.
    pub fn is_published(&self, seq: u64) -> bool {
        self.seg.is_done(seq)
    }

    /// Release consumer `index`, read as `seen`, if its holder is gone and died inside its
    /// attach, before it stored its start (`ConsumerInfo::starting`): its position was read
    /// before it gated and a takeover starts at the head, so it holds producers for nothing.
    /// The caller has found the holder gone; the flag is read again here, after that (a
    /// snapshot taken while the holder lived may show it before the holder cleared it), and
    /// nobody changes it any more but a taker, whose CAS moves the word. False for an entry
    /// that started, moved on, or is a worker group's (see [`Ring::release_consumer`]).
    pub fn release_if_starting(&self, index: u32, seen: u64) -> bool {
        let Some(e) = self.seg.consumer(index) else {
            return false;
        };
        // Acquire: the word, then the flags its holder published with it, and cleared of
        // STARTING with a Release store (`attach::started`).
        if e.hot.word.load(Ordering::Acquire) != seen
            || e.hot.flags.load(Ordering::Acquire) & consumer_flags::STARTING == 0
        {
            return false;
        }
        self.release_consumer(index, seen)
    }

    /// Stop consumer `index` from gating producers (it may be lapped; a required consumer
    /// that re-attaches resumes at the head and counts the gap). `seen` is the entry's word
    /// as the caller read it (`ConsumerInfo::word`): only an ACTIVE, FAILED or DETACHED
    /// entry that still holds exactly that word is released, so an entry attached or taken
    /// over meanwhile is never touched. Its holder keeps it. A worker group's entry and its
    /// members' are never released (their group recovers a member's claim; a consumer
    /// after the group would pass events members still handle): false. Returns whether it
    /// was released.
    pub fn release_consumer(&self, index: u32, seen: u64) -> bool {
        let Some(e) = self.seg.consumer(index) else {
            return false;
        };
        // Relaxed: a group's or a member's flags are published with its first word; `seen`
        // is checked by the CAS.
        let group = consumer_flags::GROUP | consumer_flags::MEMBER;
        if e.hot.flags.load(Ordering::Relaxed) & group != 0 {
            return false;
        }
        let done = table::consumer::release(&e.hot.word, seen);
        if done {
            // Registration read after the CAS (see `fence`: until registered, the light
            // side fences fully).
            park::entry_changed(&self.seg, e, consumer_state::RELEASED, fence::registered());
            self.entry_changed(index, seen, consumer_state::RELEASED);
        }
        done
    }

    /// Free consumer `index` if it still holds `seen` (`ConsumerInfo::word`) and its holder
    /// is gone or gave it up: an anonymous consumer whose process died, a durable one to
    /// forget (unsubscribe), an entry left CLAIMED by a process that died attaching. A
    /// durable entry left half taken over by a process that died keeps its name and
    /// position instead: DETACHED if it gated as a required consumer (RESUMING), else
    /// RELEASED. A worker group's entry (its members claim from it, and one may attach at
    /// any moment) and a gating member's (it holds a claim its group recovers) are never
    /// freed here: false. Returns whether it changed.
    ///
    /// An entry half taken (CLAIMED, RESUMING, REATTACHING) counts as its holder's only
    /// while some process has the pid in its word; see [`Ring::free_consumer_seen`] for a
    /// caller that can tell a reused pid.
    pub fn free_consumer(&self, index: u32, seen: u64) -> bool {
        self.free_consumer_if(index, seen, None)
    }

    /// [`Ring::free_consumer`] of the word `first` saw, for a caller that remembers when
    /// it first saw it (the broker, across its sweeps): a half-taken entry whose pid is now
    /// a process that started after that sighting is open too (a reused pid: the word's
    /// writer ran before the word was read).
    pub fn free_consumer_seen(&self, index: u32, first: FirstSeen) -> bool {
        self.free_consumer_if(index, first.word(), Some(first))
    }

    /// A worker group member's entry, which [`Ring::free_consumer`] leaves alone, left
    /// RESUMING by a member adopting its claim that is gone, told as
    /// [`Ring::free_consumer_seen`] tells it, a reused pid included: DETACHED with no owner,
    /// still gating at its position, so that another member adopts the claim (a member
    /// reads DETACHED without an owner as a death, and counts the claim as redelivered).
    /// Any other entry, or one whose holder may run: false. Returns whether it changed.
    pub fn detach_member_entry_seen(&self, index: u32, first: FirstSeen) -> bool {
        let Some(e) = self.seg.consumer(index) else {
            return false;
        };
        let seen = first.word();
        // Relaxed: written by the entry's holders before the CAS that made it gate, which
        // the Acquire load of `seen` followed; a later tenure changes the word, and the CAS
        // below fails.
        if owned_word::state(seen) != consumer_state::RESUMING
            || e.hot.flags.load(Ordering::Relaxed) & consumer_flags::MEMBER == 0
        {
            return false;
        }
        let start_time = e.cold.start_time.load(Ordering::Relaxed);
        if table::consumer::holder_seen(&table::Os, seen, start_time, Some(first)) != Holder::Open {
            return false;
        }
        let done = table::consumer::free(&e.hot.word, seen, consumer_state::DETACHED);
        if done {
            // The group's members look for claims to adopt when they wake: every line, as a
            // member's own leaving does (a member may park on an upstream's line).
            park::wake_consumers(&self.seg);
        }
        done
    }

    fn free_consumer_if(&self, index: u32, seen: u64, first: Option<FirstSeen>) -> bool {
        let Some(e) = self.seg.consumer(index) else {
            return false;
        };
        // Relaxed: as in `release_consumer`. Only an entry that gates: one left CLAIMED by
        // a process that died attaching holds nothing, and its flags may be a previous
        // tenure's.
        let group = consumer_flags::GROUP | consumer_flags::MEMBER;
        if consumer_state::gates(owned_word::state(seen))
            && e.hot.flags.load(Ordering::Relaxed) & group != 0
        {
            return false;
        }
        let start_time = e.cold.start_time.load(Ordering::Relaxed);
        if table::consumer::holder_seen(&table::Os, seen, start_time, first) != Holder::Open {
            return false;
        }
        let to = match owned_word::state(seen) {
            // It gated as a required consumer: it keeps holding its events.
            consumer_state::RESUMING
                if e.hot.flags.load(Ordering::Relaxed) & consumer_flags::REQUIRED != 0 =>
            {
                consumer_state::DETACHED
            }
            consumer_state::RESUMING | consumer_state::REATTACHING => consumer_state::RELEASED,
            _ => consumer_state::FREE,
        };
        let done = table::consumer::free(&e.hot.word, seen, to);
        if done {
            park::entry_changed(&self.seg, e, to, fence::registered());
            self.entry_changed(index, seen, to);
        }
        done
    }

    fn entry_changed(&self, index: u32, seen: u64, to: u32) {
        tracing::info!(
            ring = self.name(),
            consumer = index,
            pid = owned_word::owner(seen),
            from = consumer_state::name(owned_word::state(seen)),
            to = consumer_state::name(to),
            "consumer entry no longer gates producers"
        );
        self.wake_producers();
    }

    /// Monotonic nanoseconds of the broker's last sweep over this ring (0: never).
    pub fn last_sweep_ns(&self) -> u64 {
        self.seg.header().last_sweep_ns.load(Ordering::Relaxed)
    }

    /// Wake every consumer parked on this ring. A publish stamps its event, then wakes
    /// parked consumers: a producer that died between the two left an event that the
    /// consumers parked at that moment find only at their 50 ms net. Whoever sees a
    /// producer dead calls this: the broker, at the sweep that first sees the death (again
    /// after a restart: a spare wake costs a futex call), before any repair (a held claim
    /// waits for the unblock timeout, the stamped event does not); and a single producer
    /// that takes over a dead one's entry, which may see the death before any broker.
    pub fn wake_consumers(&self) {
        park::wake_consumers(&self.seg);
    }

    /// Wake the consumers parked behind consumer entry `index` (reading after it, or after
    /// the worker group it is a member of), unconditionally. With
    /// [`Ring::wake_consumers`], what the broker does at the sweep that first sees a
    /// consumer dead: one killed inside its own commit's wake left them asleep with nobody
    /// counted on the line. An index out of range does nothing.
    pub fn wake_consumers_behind(&self, index: u32) {
        if let Some(e) = self.seg.consumer(index) {
            park::wake_behind(&self.seg, e);
        }
    }

    /// Wake every producer parked on this ring for room. A consumer commits its position,
    /// then wakes: one that died between the two left producers parked for the room it
    /// freed until their 50 ms net. The broker calls this (with [`Ring::wake_consumers`],
    /// for the consumers parked behind it) at the sweep that first sees a gating consumer
    /// dead.
    pub fn wake_producers(&self) {
        park::wake(&self.seg.lines().producer_wake.value);
    }

    /// Repair the claim left by the dead producer of entry `index`, whose word the caller
    /// read as `seen` (`ProducerInfo::word`): the repair holds the entry (REPAIRING) while
    /// it marks the claim's unpublished sequences as repaired, then frees it. A slot whose
    /// previous event is still unread is left for a later call (counted in `waiting`; the
    /// entry goes back to the dead producer meanwhile). Nothing happens if the entry no
    /// longer holds `seen` or its holder may be alive.
    ///
    /// A producer that died between announcing a claim and learning its sequence (see
    /// `IN_FLIGHT_CLAIMING`) left a hole nobody can name: every unpublished sequence below
    /// the head that no live producer holds is then repaired.
    ///
    /// An entry half taken (ATTACHING, REPAIRING) counts as its holder's only while some
    /// process has the pid in its word; see [`Ring::repair_dead_producer_seen`] for a caller
    /// that can tell a reused pid.
    pub fn repair_dead_producer(&self, index: u32, seen: u64) -> Repair {
        self.repair_dead_producer_if(index, seen, None)
    }

    /// [`Ring::repair_dead_producer`] of the word `first` saw, for a caller that remembers
    /// when it first saw it (the broker, across its sweeps): a half-taken entry whose pid is
    /// now a process that started after that sighting is open too (see
    /// [`Ring::free_consumer_seen`]).
    pub fn repair_dead_producer_seen(&self, index: u32, first: FirstSeen) -> Repair {
        self.repair_dead_producer_if(index, first.word(), Some(first))
    }

    fn repair_dead_producer_if(&self, index: u32, seen: u64, first: Option<FirstSeen>) -> Repair {
        let mut repair = Repair::default();
        let Some(e) = self.seg.producer(index) else {
            return repair;
        };
        let start_time = e.start_time.load(Ordering::Relaxed);
        match table::producer::holder_seen(&table::Os, seen, start_time, first) {
            Holder::Open => {}
            Holder::Held(_) => {
                // A word in no state the code writes is damage, not a holder at work.
                repair.held = matches!(
                    owned_word::state(seen),
                    producer_state::ATTACHING | producer_state::REPAIRING | producer_state::ACTIVE
                );
                return repair;
            }
            Holder::Free => return repair,
        }
        let me = crate::process::current().pid;
        let Some(mine) = table::producer::begin_repair(&e.word, seen, me) else {
            return repair;
        };
        // The dead producer's pid, to give the entry back to if the repair must wait (a
        // REPAIRING word left by a repairer that died names that repairer instead).
        let dead = if owned_word::state(seen) == producer_state::REPAIRING {
            0
        } else {
            owned_word::owner(seen)
        };
        // A dead lone producer's claims end where it left them (see `line`, "Lone
        // claims"): the counter takes over from its final position, and what it claimed and
        // did not stamp lies below the counter like any claim, repaired below. While a stop
        // or a sharing that reads the position runs, try again later.
        if !self.seg.line().single && self.end_lone_now(Some(index)).is_err() {
            let _ = table::producer::abandon_repair(&e.word, mine, dead);
            repair.waiting += 1;
            return repair;
        }
        // Acquire: pairs with the dead producer's Release record of its claim.
        let held = e.in_flight.load(Ordering::Acquire);
        if self.seg.is_fixed() {
            repair = self.repair_fixed();
        } else if held == IN_FLIGHT_CLAIMING || self.seg.line().single {
            // A single producer records no claim in its entry (its position is the line's):
            // its hole is every unpublished sequence below the position.
            repair = self.repair_unattributed(index);
        } else if held != 0 {
            let first = held - 1;
            // A claim is at most capacity/2 sequences; a larger length is corruption.
            let len = e
                .in_flight_len
                .load(Ordering::Relaxed)
                .clamp(1, self.capacity() / 2);
            for seq in first..first.saturating_add(len) {
                repair.count(self.tombstone(seq));
            }
        }
        if repair.waiting > 0 {
            let _ = table::producer::abandon_repair(&e.word, mine, dead);
            return repair;
        }
        // Relaxed: a counter. The Release CAS below publishes the cleared claim and the
        // tombstones to whoever takes the entry.
        e.repaired.fetch_add(repair.tombstoned, Ordering::Relaxed);
        e.in_flight.store(0, Ordering::Relaxed);
        let _ = table::producer::end_repair(&e.word, mine);
        tracing::info!(
            ring = self.name(),
            producer = index,
            pid = owned_word::owner(seen),
            tombstoned = repair.tombstoned,
            "repaired the claims of a producer that died; its entry is free"
        );
        repair
    }

    /// If the counter names a lone producer (`only`: only if it is entry `only`, a gone
    /// producer whose entry the caller holds for a repair), end its claims (`Line::share`).
    /// Never waits for a live owner of the lifecycle: `Err` if one is changing it now.
    fn end_lone_now(&self, only: Option<u32>) -> Result<(), crate::line::LineError> {
        // SeqCst: as in `Line::position`.
        let c = self.seg.lines().claim.value.load(Ordering::SeqCst);
        let Some(index) = shmring_layout::claim_lone_index(c) else {
            return Ok(());
        };
        if only.is_some_and(|only| only != index) {
            return Ok(());
        }
        let env = crate::lifecycle::SegEnv::lifecycle_within(&self.seg, std::time::Duration::ZERO);
        self.seg.line().share(&env, index)
    }

    /// A fixed-size ring whose single producer died: tombstone what it claimed and did not
    /// publish, or take a claim a stop refused back to the stop sequence
    /// (`fixed::repair_dead`, whose loom models are `client/tests/loom_folded_repair.rs`),
    /// then wake the consumers if tombstones were published. The caller holds the dead
    /// producer's entry (REPAIRING), so no producer attaches meanwhile.
    fn repair_fixed(&self) -> Repair {
        let done = fixed::repair_dead(&self.seg.events(), |need| gating::scan(&self.seg) >= need);
        match done {
            fixed::Repaired::Done { tombstoned } => {
                if tombstoned > 0 {
                    self.wake_consumers();
                }
                Repair {
                    tombstoned,
                    ..Repair::default()
                }
            }
            fixed::Repaired::Wait { waiting } => Repair {
                waiting,
                ..Repair::default()
            },
        }
    }

    /// Tombstone every unpublished sequence from the slowest consumer (on a multi-producer
    /// ring, from `max_producers * capacity` below the head: see `from` below) to the head
    /// that no other attached producer holds (`skip` is the dead producer's entry). If another
    /// producer is itself between announcing and recording a claim, nothing is done now.
    fn repair_unattributed(&self, skip: u32) -> Repair {
        let mut repair = Repair::default();
        let geo = self.seg.geometry();
        let line = self.seg.line();
        // A stop or start in progress decides whether the single producer's last claim is
        // accepted or taken back (see `line`): a claim it takes back must not be marked
        // repaired, since its sequences are handed out again. Try again later. The SeqCst
        // fence first pairs with a stopper's heavy fence (see `single_hole_decided`).
        if !table::producer::single_hole_decided(&line, || {
            std::sync::atomic::fence(Ordering::SeqCst)
        }) {
            repair.waiting += 1;
            return repair;
        }
        // A lone producer's claims end first (see `line`, "Lone claims"): the head is read
        // from the counter, which a claim refused later never counts.
        if !line.single && self.end_lone_now(None).is_err() {
            repair.waiting += 1;
            return repair;
        }
        // The head first, then every other attached producer's claim (see
        // `table::producer::unattributed_hole`). A producer whose process is gone is not
        // waited for: one that died announcing a claim never records it (two producers
        // killed together in that window held each other's repair for good), and what it
        // claimed is a hole like the others.
        let live = (0..geo.max_producers)
            .filter(|&i| i != skip)
            .map_while(|i| self.seg.producer(i))
            .filter(|p| {
                // Acquire: pairs with the producer's Release `publish` of ACTIVE (its entry's
                // fields come with it).
                let word = p.word.load(Ordering::Acquire);
                // Relaxed: written before the word was published ACTIVE.
                let start_time = p.start_time.load(Ordering::Relaxed);
                owned_word::state(word) == producer_state::ACTIVE
                    && table::producer::holder(&table::Os, word, start_time) != Holder::Open
            })
            .map(|p| (&p.in_flight, &p.in_flight_len));
        // On a single-producer ring holes lie at or after the slowest gating consumer. On a
        // multi-producer ring a hole may lie below it, gated by no consumer (every one
        // attached after it was claimed): the next lap's producer waits for its slot
        // (`table::take_slot`), and so does every claim past it, each producer holding at
        // most one claim of capacity/2, so the hole is at most max_producers * capacity
        // below the head. Tombstones there are safe: `tombstone` marks only a slot done
        // with its previous lap.
        let bound = |head: u64| head.saturating_sub(u64::from(geo.max_producers) * geo.capacity);
        let from = |head: u64| {
            if line.single {
                gating::scan(&self.seg).max(bound(head))
            } else {
                bound(head)
            }
        };
        // `single_hole_decided` above decided the last claim: each mark needs no fence or
        // lifecycle look of its own.
        let scanned = table::producer::unattributed_hole(&line, live, from, |seq| {
            repair.count(self.mark_claimed(seq))
        });
        if !scanned {
            repair.waiting += 1;
        }
        repair
    }

    /// Mark sequence `seq` repaired if it is claimed but unpublished and its slot's previous
    /// event has been read (see `table::tombstone`). On a ring of fixed-size events a single
    /// sequence is never marked out of order (its tombstones are published with the cursor,
    /// by `repair_dead_producer`): `NotNeeded` once `seq` is published, `Wait` before.
    ///
    /// For a sequence whose producer is gone, as the repairs call it: a live producer's
    /// claim marked this way loses its event (consumers pass it before the producer stamps
    /// it). A sequence nobody has claimed yet is never marked (`Wait`): its producer is
    /// still to come. On a single-producer ring, `Wait` too while a stop or start decides
    /// the last claim's fate, and on a multi-producer ring whose counter names a lone
    /// producer while a stop, a start or a sharing decides that producer's last claim.
    /// `seq` must be a claim of a producer that is gone (or not claimed at all): a live
    /// producer may claim `seq` while this looks, and its claim be marked.
    pub fn tombstone(&self, seq: u64) -> Tombstone {
        if self.seg.is_fixed() {
            return if self.seg.reached(seq) {
                Tombstone::NotNeeded
            } else {
                Tombstone::Wait
            };
        }
        // A single or lone producer's last claim is decided only once no stop, start or
        // sharing is deciding it, and its store is read only after the SeqCst fence that
        // pairs with a stopper's (see `decided_claimed`): a claim a stop refuses is never
        // marked.
        match table::producer::decided_claimed(&self.seg.line(), || {
            std::sync::atomic::fence(Ordering::SeqCst)
        }) {
            Some(claimed) if seq < claimed => self.mark(seq),
            _ => Tombstone::Wait,
        }
    }

    /// [`Ring::tombstone`] on a ring of stamped slots whose last claim is decided (the
    /// caller ran `single_hole_decided` and ended any lone claims): `Wait` for a sequence
    /// not claimed yet.
    fn mark_claimed(&self, seq: u64) -> Tombstone {
        if seq >= self.seg.line().claimed() {
            return Tombstone::Wait;
        }
        self.mark(seq)
    }

    /// Mark the claimed `seq` repaired once its slot's previous event was read
    /// (`table::tombstone`), and wake the consumers if it was.
    fn mark(&self, seq: u64) -> Tombstone {
        let slot = self.seg.slot(seq);
        let need = (seq + 1).saturating_sub(self.capacity());
        let done = table::tombstone(&slot.header.stamp, seq, self.capacity(), || {
            gating::scan(&self.seg) >= need
        });
        if done == Tombstone::Written {
            self.wake_consumers();
        }
        done
    }
}
