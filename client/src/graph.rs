//! Consumer dependencies: the graph of upstream consumers recorded in the table, and the
//! cycle check of an attach.
//!
//! A consumer attached with `ConsumerOptions::after([...])` names upstream consumers of
//! the same ring by durable name. At attach the names are resolved to table entries and
//! recorded, each as its entry index plus one, in `ConsumerCold::upstream` of the
//! attaching entry, before the compare-and-swap that makes it ACTIVE. A worker group's
//! upstreams are recorded the same way in the group's entry, by the member that creates it
//! (which runs the cycle check below for it); its members record none. Delivery then stops
//! below the lowest `next` of the gating upstreams (see `consumer/barrier.rs`).
//!
//! ## The cycle check: record first, then look
//!
//! After its ACTIVE CAS (SeqCst) and a SeqCst fence, the attaching process walks the
//! recorded upstream graph from its own entry, loading each entry's word (SeqCst) and then
//! its record. Reaching its own entry again is a cycle: it takes its record back and gives
//! the entry back. Two processes that close a cycle at once (`a` attaching after `b` while
//! `b` attaches after `a`) run the store-buffering race:
//!
//! ```text
//! process A (entry a)                     process B (entry b)
//! (1) upstream[a] = b        (Relaxed)    (1') upstream[b] = a       (Relaxed)
//! (2) word[a] -> ACTIVE      (SeqCst CAS) (2') word[b] -> ACTIVE     (SeqCst CAS)
//! (3) fence                  (SeqCst)     (3') fence                 (SeqCst)
//! (4) w = word[b]            (SeqCst)     (4') w = word[a]           (SeqCst)
//! (5) upstream[b] == a+1 ?   (Relaxed)    (5') upstream[a] == b+1 ?  (Relaxed)
//! ```
//!
//! The fences (3) and (3') are ordered one way or the other in the single total order of
//! SeqCst operations. If (3) comes first, (2) happens before (4'): (4') reads ACTIVE (or a
//! later word of `a`), which synchronizes with (2), so (5') sees (1) and B reports the
//! cycle; symmetrically if (3') comes first. Both may see it (both refuse); never neither.
//! A check made before the record (the order reversed) lets both through: the loom model
//! `client/tests/loom_graph.rs` runs this very walk and shows both.
//!
//! The fence is what the model can check: loom treats SeqCst accesses as Acquire/Release
//! but implements SeqCst fences. (On the C++ model the SeqCst CAS and loads alone already
//! order it; the fence costs nothing that matters at attach time.)
//!
//! The walk follows the records of entries in a settled state (ACTIVE, DETACHED, FAILED,
//! RELEASED): a durable consumer's dependencies are part of it while it is away. An entry
//! being attached (CLAIMED, RESUMING, REATTACHING) is rewriting its record and runs its own
//! check after its ACTIVE CAS, which by the argument above sees this one's. A walk that
//! races such a rewrite can read a half-written record: at worst it reports a cycle that a
//! retry does not (never the reverse). Every entry is visited once, so the walk is bounded
//! by the table size whatever the records say; indices outside the table are ignored.

use std::sync::atomic::{AtomicU32, Ordering};

use shmring_layout::{consumer_flags, consumer_state, owned_word, MAX_UPSTREAM};

use crate::line::Word;
use crate::segment::Segment;

/// An upstream's position as a dependent consumer's barrier reads it: its `next`, if its
/// entry still holds the word `validated` (else `None`: the entry changed, look again).
/// `next` before the word: see `consumer/barrier.rs` for why this order, with
/// [`provisional_position`] on the other side, never pairs one tenure's position with
/// another's word.
#[inline(always)]
pub fn upstream_next<W: Word + ?Sized>(next: &W, word: &W, validated: u64) -> Option<u64> {
    // Acquire: SYNC POINT with the upstream's Release commit (`Consumer::commit`) and with
    // a new holder's Release `provisional_position`.
    let n = next.load(Ordering::Acquire);
    // Relaxed: ordered after the Acquire load above; reads the new holder's take of the
    // entry (or later) whenever `n` is that holder's.
    (word.load(Ordering::Relaxed) == validated).then_some(n)
}

/// Whether an upstream in `state`, `required` or not, holds the consumers reading behind
/// it at its `next`: always, except a required one the broker released from gating (see
/// `consumer/barrier.rs`). The barrier and the health checks both ask this.
pub fn upstream_holds(state: u32, required: bool) -> bool {
    !(state == consumer_state::RELEASED && required)
}

/// After a barrier that let released upstreams go and the scan of a run: a `fence` (SeqCst),
/// then whether each word still holds the value the barrier validated (SeqCst loads).
/// `false`: an upstream gated again meanwhile and the run must not be delivered (see
/// `consumer/barrier.rs`).
pub fn unchanged<'w, W: Word + ?Sized + 'w>(
    words: impl IntoIterator<Item = (&'w W, u64)>,
    fence: impl FnOnce(),
) -> bool {
    fence();
    // SeqCst: after the fence, in the total order the argument of `consumer/barrier.rs`
    // uses; pairs with the upstream holder's SeqCst CAS to ACTIVE.
    words
        .into_iter()
        .all(|(w, v)| w.load(Ordering::SeqCst) == v)
}

/// A new holder's first store of its entry's `next`, before the CAS that makes it ACTIVE:
/// a Release store, so that a barrier that reads it also reads the CAS that took the entry
/// ([`upstream_next`]).
#[inline(always)]
pub fn provisional_position<W: Word + ?Sized>(next: &W, position: u64) {
    // Release: pairs with the Acquire load in `upstream_next`.
    next.store(position, Ordering::Release);
}

/// Move an entry's position to `to` past sequences its holder did not read (an attach's
/// provisional position and start, a jump to the head): `first` first, then `next`, so
/// that a reader that loads `next` and then `first` (`gating::witness`) and finds the new
/// position finds the new `first` too, and never takes the range between the old `first`
/// and `to` for read. The `next` store is Release, as [`provisional_position`]'s.
#[inline(always)]
pub fn jump<W: Word + ?Sized>(first: &W, next: &W, to: u64) {
    // Release: before the `next` store below; pairs with the witness's Acquire load of
    // `next` (its load of `first` comes after).
    first.store(to, Ordering::Release);
    provisional_position(next, to);
}

/// What [`start_fresh`] left in the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The entry's word after the CAS to ACTIVE.
    pub word: u64,
    /// The provisional position stored before that CAS.
    pub provisional: u64,
    /// Where the new holder starts: the position read after the CAS, never below the
    /// provisional one; the provisional one where that read was not decided.
    pub start: u64,
    /// Whether the position read after the CAS was decided (`false`: a stop in progress
    /// did not finish in time, and `start` is the provisional position, where the entry
    /// gates; the caller gives the entry up).
    pub decided: bool,
}

/// Why [`start_fresh`] did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unstarted {
    /// The position read before the CAS was not decided (a stop in progress did not
    /// finish in time): nothing of the entry changed.
    Undecided,
    /// The word changed under the holder (to this value).
    Moved(u64),
}

/// A fresh attach's start, on an entry the caller holds as `mine` (`Consumer::fresh`, and
/// `Consumer::resume` through [`resume`] where it does not keep the entry's position; run
/// by the loom models in `client/tests/loom_attach.rs` too): the provisional position
/// ([`jump`]), `before_cas` (the holder's other fields), the SeqCst CAS to ACTIVE, then the
/// position read again and stored as `next` (with `first`), never below the provisional
/// one. `position` reads the line's position (or the group's work sequence); `None`: not
/// decided (a stop in progress did not finish in time). `after_cas` runs right after the
/// CAS (the models' stand-in for the total order of SeqCst operations; a resume's wakes).
///
/// A scan that sees the entry ACTIVE gates at or before the provisional position, read
/// just before the CAS; the start is read later. The position does not go down between the
/// two reads (`Line::position`), and the start is kept at least at the provisional one as
/// a second guard, which the models in `client/tests/loom_attach.rs` do not need.
#[inline]
pub fn start_fresh<W: Word>(
    next: &W,
    first: &W,
    word: &W,
    mine: u64,
    position: impl Fn() -> Option<u64>,
    before_cas: impl FnOnce(),
    after_cas: impl FnOnce(),
) -> Result<Started, Unstarted> {
    let Some(provisional) = position() else {
        return Err(Unstarted::Undecided);
    };
    jump(first, next, provisional);
    before_cas();
    // SeqCst CAS, then SeqCst load of the line's position: the attach protocol (see
    // `gating`). Every field stored before is published by this CAS.
    let word = crate::table::consumer::set(word, mine, consumer_state::ACTIVE)
        .map_err(Unstarted::Moved)?;
    after_cas();
    let (start, decided) = match position() {
        Some(p) => (p.max(provisional), true),
        None => (provisional, false),
    };
    // Release (in `jump`): pairs with the producers' Acquire scan; moving forward only
    // loosens the gate.
    jump(first, next, start);
    Ok(Started {
        word,
        provisional,
        start,
        decided,
    })
}

/// What a resume saw of a durable entry before taking it over (`Consumer::resume`): its
/// word, then its flags and position, and the line's position with whether the entry's
/// slot there was overwritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// The entry's word.
    pub seen: u64,
    /// Its flags, read after the word.
    pub flags: u32,
    /// Its position, read after the word.
    pub next: u64,
    /// The line's position.
    pub head: u64,
    /// Whether the slot of `next` holds a later sequence.
    pub lapped: bool,
}

/// How [`resume`] took an entry over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resumed {
    /// At its position: a required consumer's, which it gated at throughout; an optional
    /// one's, any position not past the head.
    Kept {
        /// The entry's word after the CAS to ACTIVE.
        word: u64,
    },
    /// At a new start ([`start_fresh`]).
    Started(Started),
}

/// Why [`resume`] did not take an entry over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresumed {
    /// The entry changed since the look: nothing done; look again.
    Changed,
    /// Taken over (its word `mine`), but the position for a new start was not decided (a
    /// stop in progress did not finish in time): nothing else of the entry changed.
    Undecided {
        /// The word the take-over made.
        mine: u64,
    },
    /// The word changed under this process after the take-over (to this value).
    Moved(u64),
}

/// A resume of the durable entry `look` saw (`Consumer::resume`, run by the loom models in
/// `client/tests/loom_attach.rs` too), by process `me`, as a `required` consumer or not.
/// The take-over CAS (SeqCst) keeps the entry gating (RESUMING) where it gated as a
/// required consumer at a position not overwritten, else stops its gating (REATTACHING);
/// then `fence` (the caller's SeqCst fence, (2) in `consumer/barrier.rs`). A required
/// consumer keeps its position only where the entry gated there: what was published
/// meanwhile is otherwise not protected, and it starts afresh at the line's position
/// ([`start_fresh`]); an optional one keeps any position not past the head (it checks
/// every slot it reads for a lap). `before_cas(kept)` writes the holder's other fields
/// before the CAS to ACTIVE, `after_cas` runs right after it.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn resume<W: Word>(
    next: &W,
    first: &W,
    word: &W,
    me: u32,
    look: &Look,
    required: bool,
    position: impl Fn() -> Option<u64>,
    fence: impl FnOnce(),
    before_cas: impl FnOnce(bool),
    after_cas: impl FnOnce(),
) -> Result<Resumed, Unresumed> {
    use crate::table::consumer::{gated_required, keeps_position, set, take_over};
    let state = owned_word::state(look.seen);
    let gated = gated_required(state, look.flags, look.next, look.head) && !look.lapped;
    let mine = take_over(word, look.seen, me, gated).ok_or(Unresumed::Changed)?;
    fence();
    if keeps_position(required, gated, look.next, look.head) {
        before_cas(true);
        let word = set(word, mine, consumer_state::ACTIVE).map_err(Unresumed::Moved)?;
        after_cas();
        return Ok(Resumed::Kept { word });
    }
    match start_fresh(
        next,
        first,
        word,
        mine,
        position,
        || before_cas(false),
        after_cas,
    ) {
        Ok(started) => Ok(Resumed::Started(started)),
        Err(Unstarted::Undecided) => Err(Unresumed::Undecided { mine }),
        Err(Unstarted::Moved(w)) => Err(Unresumed::Moved(w)),
    }
}

/// How [`gate_again`] left a released entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regated {
    /// Gating again (its word `word`), from `head`, which the caller stores ([`jump`]).
    Gated {
        /// The entry's word after the CAS to ACTIVE.
        word: u64,
        /// Where it starts again: the position read after the CAS.
        head: u64,
    },
    /// Gated, then released again (from `word`, as the broker releases): the position was
    /// not decided after the CAS.
    ReleasedAgain {
        /// The word the CAS to ACTIVE made (the holder's word from now on).
        word: u64,
    },
    /// The word is no longer the release of the holder's: nothing changed.
    Moved,
}

/// An entry's flags word, as [`gate_again`] and [`started`] change it (the loom models
/// implement it on loom's atomics).
pub trait FlagsWord {
    /// Atomic or, returning the previous value.
    fn fetch_or(&self, value: u32, order: Ordering) -> u32;
    /// Atomic and, returning the previous value.
    fn fetch_and(&self, value: u32, order: Ordering) -> u32;
}

impl FlagsWord for AtomicU32 {
    #[inline(always)]
    fn fetch_or(&self, value: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_or(self, value, order)
    }
    #[inline(always)]
    fn fetch_and(&self, value: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_and(self, value, order)
    }
}

/// The holder of an entry flagged `STARTING` has stored its start (or, gating again, the
/// head it jumped to): its `next` is a position producers respected since before it.
pub fn started<F: FlagsWord + ?Sized>(flags: &F) {
    // Release: after the start's Release store, so that whoever reads the flag cleared reads
    // the start too (a process taking the entry over after this holder died).
    flags.fetch_and(!consumer_flags::STARTING, Ordering::Release);
}

/// A released consumer's holder gates again (`Consumer::jump_to_head`, run by the loom
/// models in `client/tests/loom_folded_attach.rs` too), after a look found the position
/// decided: it flags its entry `STARTING`, then the SeqCst CAS of the entry from `released`
/// to ACTIVE (its `next` still the old position, which only holds producers back further),
/// `after_cas` (the caller's SeqCst fence, (2) in `consumer/barrier.rs`), then `start`, the
/// position read after the CAS by the attach protocol (see `gating`): a scan that missed
/// the ACTIVE entry used a head at or below it. The caller stores that head ([`jump`]) and
/// then clears the flag ([`started`]). A stop begun since the caller's look, not decided
/// when `start` looks (`Err`): the entry is released again as the broker releases it
/// (SeqCst CAS), its flag cleared; the holder looks again later.
///
/// The flag is what a holder that dies between the CAS and its store leaves behind: its
/// `next` is the old position, which producers did not respect while it was released
/// (a gate cached then lets them write up to a ring past it), so a takeover must not keep
/// it, whatever its slot holds; flagged, the takeover starts at the head, as after an
/// attach that died before storing its start (`table::consumer::gated_required`).
pub fn gate_again<W: Word, F: FlagsWord + ?Sized>(
    word: &W,
    flags: &F,
    released: u64,
    start: impl FnOnce() -> Result<u64, u32>,
    after_cas: impl FnOnce(),
) -> Regated {
    // Relaxed: published by the SeqCst CAS to ACTIVE below, as a fresh attach's flags. A
    // released entry's flags are its holder's, which runs: nobody else writes them (an entry
    // is taken over or freed only once its holder is gone). The word moved (a damaged
    // segment, or a process that took this live holder for dead): the flag stays on the
    // entry, now another holder's, and makes a takeover of it start at the head (the gap
    // counted as dropped) instead of at its position, as for a holder that died attaching;
    // clearing it could clear that holder's own flag, which is worse.
    flags.fetch_or(consumer_flags::STARTING, Ordering::Relaxed);
    let Ok(mine) = crate::table::consumer::set(word, released, consumer_state::ACTIVE) else {
        return Regated::Moved;
    };
    after_cas();
    match start() {
        Ok(head) => Regated::Gated { word: mine, head },
        Err(_) => {
            crate::table::consumer::release(word, mine);
            started(flags);
            Regated::ReleasedAgain { word: mine }
        }
    }
}

/// The consumer table as the dependency graph sees it. Implemented for the segment; the
/// loom model implements it on loom's atomics.
pub trait Graph {
    /// Number of entries.
    fn entries(&self) -> u32;
    /// Entry `i`'s word, loaded with `order` (`i` below [`Graph::entries`]).
    fn word(&self, i: u32, order: Ordering) -> u64;
    /// Entry `i`'s recorded upstream number `k` (an index plus one, 0: none).
    fn upstream(&self, i: u32, k: usize, order: Ordering) -> u32;
    /// Record `value` as entry `i`'s upstream number `k`.
    fn set_upstream(&self, i: u32, k: usize, value: u32, order: Ordering);
}

impl Graph for Segment {
    fn entries(&self) -> u32 {
        self.geometry().max_consumers
    }
    fn word(&self, i: u32, order: Ordering) -> u64 {
        self.consumer(i).map_or(0, |e| e.hot.word.load(order))
    }
    fn upstream(&self, i: u32, k: usize, order: Ordering) -> u32 {
        self.consumer(i)
            .and_then(|e| e.cold.upstream.get(k))
            .map_or(0, |u: &AtomicU32| u.load(order))
    }
    fn set_upstream(&self, i: u32, k: usize, value: u32, order: Ordering) {
        if let Some(u) = self.consumer(i).and_then(|e| e.cold.upstream.get(k)) {
            u.store(value, order);
        }
    }
}

/// Record `upstream` (entry indices plus one, 0 for none) as entry `me`'s upstreams: the
/// holder's write before the SeqCst CAS that makes it ACTIVE, which publishes it.
pub fn record<G: Graph + ?Sized>(g: &G, me: u32, upstream: &[u32; MAX_UPSTREAM]) {
    for (k, &u) in upstream.iter().enumerate() {
        // Relaxed: published by the holder's SeqCst CAS to ACTIVE (see the module comment).
        g.set_upstream(me, k, u, Ordering::Relaxed);
    }
}

/// Entry `me`'s recorded upstreams (entry indices plus one, 0 for none), loaded with
/// `order`.
pub fn recorded<G: Graph + ?Sized>(g: &G, me: u32, order: Ordering) -> [u32; MAX_UPSTREAM] {
    std::array::from_fn(|k| g.upstream(me, k, order))
}

/// Whether the walk follows the record of an entry whose word is `word`.
fn settled(word: u64) -> bool {
    matches!(
        owned_word::state(word),
        consumer_state::ACTIVE
            | consumer_state::DETACHED
            | consumer_state::FAILED
            | consumer_state::RELEASED
    )
}

/// Look for a cycle through entry `me`, whose record is `mine` (what it recorded before
/// its ACTIVE CAS): the entries of the cycle, starting and ending with `me`. `fence` is the
/// SeqCst fence (3) of the module comment, issued before any entry is read.
pub fn find_cycle<G: Graph + ?Sized>(
    g: &G,
    me: u32,
    mine: &[u32; MAX_UPSTREAM],
    fence: impl FnOnce(),
) -> Option<Vec<u32>> {
    fence();
    let n = g.entries();
    if me >= n {
        return None;
    }
    // parent[v]: the entry from which the walk reached v (me for the roots).
    let mut parent: Vec<Option<u32>> = vec![None; n as usize];
    let mut stack = Vec::new();
    let visit = |v: u32, from: u32, parent: &mut Vec<Option<u32>>, stack: &mut Vec<u32>| {
        if v < n && v != me && parent[v as usize].is_none() {
            parent[v as usize] = Some(from);
            stack.push(v);
        }
    };
    for &u in mine {
        if u != 0 {
            if u - 1 == me {
                return Some(vec![me, me]);
            }
            visit(u - 1, me, &mut parent, &mut stack);
        }
    }
    while let Some(v) = stack.pop() {
        // SeqCst: (4) of the module comment; it also orders the record's loads after it.
        let word = g.word(v, Ordering::SeqCst);
        if !settled(word) {
            continue;
        }
        for k in 0..MAX_UPSTREAM {
            // Relaxed: ordered after the SeqCst load of the word (5).
            let u = g.upstream(v, k, Ordering::Relaxed);
            if u == 0 {
                continue;
            }
            if u - 1 == me {
                let mut path = vec![me, v];
                let mut at = v;
                // Bounded: every parent link was set once, on the way from `me`.
                while let Some(p) = parent.get(at as usize).copied().flatten() {
                    if p == me {
                        break;
                    }
                    path.push(p);
                    at = p;
                }
                path.push(me);
                path.reverse();
                return Some(path);
            }
            visit(u - 1, v, &mut parent, &mut stack);
        }
    }
    None
}
