//! The wrap gate: how far producers may run ahead of consumers.
//!
//! A producer may write sequence `s` once `s < gate + capacity`, where `gate` is the
//! lowest `next` of every gating consumer. Computing `gate` scans the consumer table, so it
//! is cached twice: in the producer (`Producer::cached_gate`) and in the segment's shared
//! gating line, which any producer raises with `fetch_max` after a scan. Both caches are
//! lower bounds: consumers only move forward, and a consumer that attaches starts at or
//! after every gate computed without it (see below).
//!
//! ## Attaching while producers run
//!
//! A new consumer publishes its entry as ACTIVE (SeqCst), then reads the line's position
//! (`line::Line::position`, a SeqCst load) and starts there. A scan reads the position first
//! (SeqCst, after a SeqCst fence that orders a single or lone producer's plain position
//! stores), then the entries (SeqCst). In the single total order of SeqCst operations,
//! either the scan's load of the entry follows the consumer's ACTIVE store (the scan sees
//! the consumer), or it precedes it, and then the scan's earlier claim-counter load precedes the consumer's, so
//! the gate it computes is at most the consumer's start. Either way no producer can lap the
//! new consumer's first slot: it never reads a slot being overwritten.
//!
//! ## Worker groups
//!
//! A group's entry gates at its work sequence (what no member has claimed) and each member
//! at the claim it has not finished (see `group`). A member that attaches starts at the
//! work sequence, not at the line's position, so the argument above does not cover it: a
//! scan that reads the member's entry before its ACTIVE CAS and the work sequence after its
//! first claim would gate past that claim. So a scan reads every group's work sequence
//! first (Acquire), then the entries: a claim taken after that read starts at or after the
//! value read, and one taken before it is seen in its member's entry (`group::finished`
//! gives the argument; `client/tests/group_interleavings.rs` runs that interleaving).
//!
//! ## Optional consumers
//!
//! An optional consumer gates only while it is at most `optional_slack` events behind the
//! slowest required consumer (or the head, when there is none). Beyond that producers stop
//! waiting for it; if lapped it notices from the slot stamps, jumps ahead and counts the
//! events it lost (`dropped_behind`).

use std::sync::atomic::{fence, AtomicU32, Ordering};

use shmring_layout::{consumer_flags, consumer_state, owned_word};

use crate::line::Word;

use crate::segment::Segment;

/// Scan the consumer table for the current gate (see the module comment).
pub(crate) fn scan(seg: &Segment) -> u64 {
    // SeqCst fence: a single producer, and a lone producer of a multi-producer ring, store
    // their position with a plain store; this fence puts every such store before the entry
    // loads below in the total order, where the attach protocol needs the claim (module
    // comment). On every ring: whether a multi-producer ring's counter names a lone producer
    // is known only from the load the fence must come before.
    fence(Ordering::SeqCst);
    // The position (a SeqCst load) is read before the entries, in the single total order
    // the attach protocol relies on (module comment).
    let head = seg.position();
    let geo = seg.geometry();
    let entries = || {
        (0..geo.max_consumers)
            .map_while(|i| seg.consumer(i))
            .map(|c| (&c.hot.word, &c.hot.flags, &c.hot.next))
    };
    gate(head, entries, geo.optional_slack)
}

/// A consumer entry's flags word as the gate reads it. Implemented for the segment's
/// `AtomicU32`; the loom models implement it for loom's.
pub trait Flags {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u32;
}

impl Flags for AtomicU32 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
}

/// The gate from the line's position `head`, read before the entries (see the module
/// comment), and the consumer entries `(word, flags, next)`: the lowest position of the
/// gating required consumers (or `head`), lowered by each gating optional consumer at most
/// `slack` behind that. `entries` is walked three times: worker groups' entries first (see
/// the module comment), then the required entries, then the optional ones.
pub fn gate<'e, W, F, I>(head: u64, entries: impl Fn() -> I, slack: u64) -> u64
where
    W: Word + 'e,
    F: Flags + 'e,
    I: Iterator<Item = (&'e W, &'e F, &'e W)>,
{
    let gating = |word: &W, flags: &F, required: bool| {
        // SeqCst: pairs with the SeqCst ACTIVE CAS of an attaching consumer.
        let state = owned_word::state(word.load(Ordering::SeqCst));
        // Relaxed: published with the state (the CAS that set it), read after it.
        consumer_state::gates(state)
            && (flags.load(Ordering::Relaxed) & consumer_flags::REQUIRED != 0) == required
    };
    let mut required = head;
    for (word, flags, next) in entries() {
        // The word first (SeqCst, in `gating`): the flags, Relaxed, are read after it and
        // so are those its ACTIVE CAS published; a reading of an entry being reused only
        // lowers the gate.
        if gating(word, flags, true) && flags.load(Ordering::Relaxed) & consumer_flags::GROUP != 0 {
            // Acquire: a member's claim CAS is a read-modify-write of this word, so this load
            // synchronizes with every claim up to the value read, whose entries the walk
            // below then sees (see the module comment).
            required = required.min(next.load(Ordering::Acquire));
        }
    }
    for (word, flags, next) in entries() {
        if gating(word, flags, true) {
            // Acquire: pairs with the consumer's Release commit, so its reads of the slots
            // below `next` happen before this producer overwrites them.
            required = required.min(next.load(Ordering::Acquire));
        }
    }
    let mut gate = required;
    for (word, flags, next) in entries() {
        if gating(word, flags, false) {
            // Acquire: as above.
            let next = next.load(Ordering::Acquire);
            if required.saturating_sub(next) <= slack {
                gate = gate.min(next);
            }
        }
    }
    gate
}

/// Whether the previous lap of a multi-producer slot, sequence `prev`, was written, as a
/// required consumer's reads vouch for it (see `Producer::begin_write`): the highest `next`
/// of a consumer entry that gates as a required consumer reading every sequence (not a
/// worker group or a member, not an optional consumer, not one whose start is not stored
/// yet) and whose read range `first..next` holds `prev`; `None` if none does. Every
/// sequence in that range was seen published or repaired before `next` passed it (see
/// `ConsumerHot::first`): a producer that finds `prev` there needs no look at the slot for
/// it, nor for any later `prev` below the value returned. With it comes the entry's place
/// in `entries` (from 0).
///
/// Each entry is read as `table::consumer::read_beside` reads one: its word, then its
/// flags, `next` and `first`, then `acquire` (an Acquire fence) and the word again; an
/// entry whose word moved in between is passed over. `next` is loaded before `first`:
/// every store that moves `next` past sequences not read stores `first` before it
/// (`graph::jump`), so a `next` that comes from such a move comes with its `first`.
/// `entries` gives each entry's `(word, flags, next, first)`.
pub fn witness<'e, W, F, I>(prev: u64, entries: I, acquire: impl Fn()) -> Option<(u64, usize)>
where
    W: Word + 'e,
    F: Flags + 'e,
    I: Iterator<Item = (&'e W, &'e F, &'e W, &'e W)>,
{
    let unread = consumer_flags::GROUP | consumer_flags::MEMBER | consumer_flags::STARTING;
    let mut best: Option<(u64, usize)> = None;
    for (at, (word, flags, next, first)) in entries.enumerate() {
        // Acquire: pairs with the CAS that made the holder's word, which published its flags
        // and the `first` and `next` stored before it.
        let seen = word.load(Ordering::Acquire);
        if !consumer_state::gates(owned_word::state(seen)) {
            continue;
        }
        // Relaxed: published with the word (the CAS that set it), read after it.
        let f = flags.load(Ordering::Relaxed);
        if f & consumer_flags::REQUIRED == 0 || f & unread != 0 {
            continue;
        }
        // Acquire: pairs with the consumer's Release commit of `next` (and with `graph::jump`'s
        // Release store): the slot loads by which it passed every sequence below happen
        // before this producer's write of the next lap.
        let n = next.load(Ordering::Acquire);
        if n <= prev || best.is_some_and(|(b, _)| b >= n) {
            continue;
        }
        // Acquire, after `next`: `graph::jump` stores `first` before `next` (Release).
        let from = first.load(Ordering::Acquire);
        acquire();
        // Relaxed: ordered by the fence `acquire` made (as in `read_beside`).
        if from <= prev && word.load(Ordering::Relaxed) == seen {
            best = Some((n, at));
        }
    }
    best
}

/// [`witness`] over the segment's consumer table, entry `hint` first (the one that vouched
/// last: while it vouches for at least `enough` sequences past `prev`, a look reads its
/// line alone, not the table's): the `next` found (the highest, when the table is read)
/// and the index of its entry.
pub(crate) fn witness_scan(seg: &Segment, prev: u64, hint: u32, enough: u64) -> Option<(u64, u32)> {
    let entry = |i: u32| {
        seg.consumer(i)
            .map(|c| (&c.hot.word, &c.hot.flags, &c.hot.next, &c.hot.first))
    };
    let acquire = || fence(Ordering::Acquire);
    if let Some((to, _)) = witness(prev, entry(hint).into_iter(), acquire) {
        if to - prev >= enough {
            return Some((to, hint));
        }
    }
    let entries = (0..seg.geometry().max_consumers).map_while(entry);
    witness(prev, entries, acquire).map(|(to, at)| (to, at as u32))
}

/// The gate, from the shared cache if it already allows `need`, else by a scan whose result
/// raises the shared cache. No scan's gate lies past the line's position (a gate is at most
/// the head it was scanned with, and the position never goes below a head a scan used), so
/// a cache past everything claimed was written by another process: it is not trusted, the
/// gate is scanned, and the cache taken back to it.
pub(crate) fn refresh(seg: &Segment, need: u64) -> u64 {
    let shared = &seg.lines().gating.value;
    // Acquire: pairs with the AcqRel fetch_max below (another producer's scan result).
    let cached = shared.load(Ordering::Acquire);
    if cached >= need {
        if cached <= seg.line().claimed() {
            return cached;
        }
        let gate = scan(seg);
        // AcqRel: as the fetch_max below; from the value read only (a producer's scan
        // since raised it legitimately, or another write moved it: looked at next time).
        // Relaxed on failure: the value is not used.
        let _ = shared.compare_exchange(cached, gate, Ordering::AcqRel, Ordering::Relaxed);
        return gate;
    }
    let gate = scan(seg);
    // AcqRel: publishes this scan to the other producers and orders it after theirs.
    shared.fetch_max(gate, Ordering::AcqRel);
    gate
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    use shmring_layout::{consumer_flags, consumer_state, owned_word};

    /// One consumer entry: word, flags, next, first.
    struct Entry(AtomicU64, AtomicU32, AtomicU64, AtomicU64);

    fn entry(state: u32, flags: u32, first: u64, next: u64) -> Entry {
        Entry(
            AtomicU64::new(owned_word::pack(1, state, 7)),
            AtomicU32::new(flags),
            AtomicU64::new(next),
            AtomicU64::new(first),
        )
    }

    fn witness(prev: u64, entries: &[Entry], acquire: impl Fn()) -> Option<u64> {
        super::witness(
            prev,
            entries.iter().map(|e| (&e.0, &e.1, &e.2, &e.3)),
            acquire,
        )
        .map(|(to, _)| to)
    }

    const REQUIRED: u32 = consumer_flags::REQUIRED;

    #[test]
    fn a_required_reader_vouches_for_what_lies_in_its_read_range() {
        let e = [entry(consumer_state::ACTIVE, REQUIRED, 2, 6)];
        assert_eq!(witness(2, &e, || ()), Some(6));
        assert_eq!(witness(5, &e, || ()), Some(6));
        assert_eq!(witness(6, &e, || ()), None, "not read yet");
        assert_eq!(witness(1, &e, || ()), None, "before its reads began");
    }

    #[test]
    fn the_reader_that_read_furthest_is_the_witness() {
        let e = [
            entry(consumer_state::ACTIVE, REQUIRED, 0, 4),
            entry(consumer_state::ACTIVE, REQUIRED, 1, 9),
            entry(consumer_state::ACTIVE, REQUIRED, 3, 12),
        ];
        assert_eq!(witness(2, &e, || ()), Some(9));
        assert_eq!(witness(3, &e, || ()), Some(12));
    }

    #[test]
    fn only_a_gating_required_reader_of_every_sequence_vouches() {
        for (flags, vouches) in [
            (REQUIRED, true),
            (
                REQUIRED | consumer_flags::DURABLE | consumer_flags::DECLARED,
                true,
            ),
            (0, false),
            (REQUIRED | consumer_flags::GROUP, false),
            (REQUIRED | consumer_flags::MEMBER, false),
            (REQUIRED | consumer_flags::STARTING, false),
        ] {
            let e = [entry(consumer_state::ACTIVE, flags, 0, 8)];
            assert_eq!(witness(3, &e, || ()).is_some(), vouches, "flags {flags:#x}");
        }
        for state in 0..=consumer_state::REATTACHING {
            let e = [entry(state, REQUIRED, 0, 8)];
            assert_eq!(
                witness(3, &e, || ()).is_some(),
                consumer_state::gates(state),
                "state {}",
                consumer_state::name(state)
            );
        }
    }

    #[test]
    fn an_entry_whose_word_moved_while_read_vouches_for_nothing() {
        let e = [entry(consumer_state::ACTIVE, REQUIRED, 0, 8)];
        let moved = || {
            let w = e[0].0.load(Ordering::Relaxed);
            e[0].0.store(
                owned_word::next(w, consumer_state::ACTIVE, 8),
                Ordering::Relaxed,
            );
        };
        assert_eq!(witness(3, &e, moved), None);
    }
}
