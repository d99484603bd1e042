//! The consumer and producer tables: who holds each entry, every change of holder, and the
//! one write a repair makes into a slot a dead producer left.
//!
//! Every entry has one word, `generation | state | owner pid` (`shmring_layout::owned_word`),
//! and every take, takeover, free, release and repair is one compare-and-swap from the word
//! the caller read and validated to its successor. So:
//!
//! - two processes that read the same word and both act on it: one CAS succeeds, the other
//!   fails (the generation moved), and the loser reads again;
//! - a repair validated against a word acts only if the entry still holds that word: an
//!   entry taken over meanwhile has a new generation, so it is never freed under its owner;
//! - the owner's pid changes in the same step as the state, so no reader ever pairs a state
//!   with the previous owner's pid.
//!
//! Beside the word, the owner's start time tells a reused pid apart. The owner writes it
//! after the CAS that made it the owner and before its next CAS, so it belongs to the word's
//! owner once the state is settled (ACTIVE, DETACHED, FAILED, RELEASED: published by the
//! owner's Release CAS, read after an Acquire load of the word). In the transitional states
//! (CLAIMED, RESUMING, REATTACHING, ATTACHING, REPAIRING) it may still be the previous
//! owner's; there the owner counts as gone once no process has its pid at all, or, for a
//! caller that remembers when it first saw the word ([`FirstSeen`], the broker across its
//! sweeps), once the process with that pid started after then: the word's writer ran
//! before the word was read, so a later process is a reused pid. (A pid reused before the
//! first sighting still keeps such an entry held until that process exits. Every process
//! sharing a ring must see the same pid namespace, which `Ring::open` enforces: it refuses
//! a ring created in another one.)
//!
//! ## Who may take an entry ([`Holder`])
//!
//! An entry changes hands only when its holder gave it up (a consumer that detached or
//! failed: its last write was that CAS) or is gone. A live holder keeps its entry whatever
//! its state, including a consumer the broker released from gating: it still writes its
//! position, so nobody else may take the entry under it. A consumer or producer handle
//! changes its own entry only by CAS from the word it holds (or the one the broker's
//! release made of it), so a handle that lost its entry never writes into the new tenure.
//!
//! ## Consumer entries
//!
//! ```text
//!  FREE --take_free--> CLAIMED(me) --set--> ACTIVE(me) --give_up--> DETACHED(me) | RELEASED | FREE
//!  ACTIVE(me) --set, handler failed--> FAILED(me)
//!  open durable entry --take_over--> RESUMING(me) | REATTACHING(me) --set--> ACTIVE(me)
//!  (segment being built, unseen) --declare--> DETACHED(none), a declared consumer
//!  ACTIVE --release--> RELEASED (holder kept: it re-gates itself)   FAILED | DETACHED --release--> RELEASED(none)
//!  gone CLAIMED, open anonymous --free--> FREE
//!  gone RESUMING --free--> DETACHED | RELEASED     gone REATTACHING --free--> RELEASED
//! ```
//!
//! A takeover keeps the entry gating only if it gated as a required consumer at a valid
//! position (RESUMING): the events it holds stay held while the new process attaches. An
//! entry that did not (released, optional, flagged STARTING: its holder died between
//! publishing ACTIVE and storing its start; or whose first slot already holds a later
//! sequence) is taken over into REATTACHING, which does not gate, so a stale position never holds
//! producers, not even when the new process dies half-way.
//!
//! ```text
//! ```
//!
//! ## Producer entries
//!
//! ```text
//!  FREE --take_free--> ATTACHING(me) --publish--> ACTIVE(me) --drop--> FREE
//!  dead ACTIVE holding no claim --take_over--> ATTACHING(me)
//!  dead ACTIVE | gone ATTACHING | gone REPAIRING --begin_repair--> REPAIRING(me)
//!  REPAIRING(me) --end_repair--> FREE, or back to ACTIVE(dead pid) when a slot must wait
//! ```
//!
//! ## A repaired slot
//!
//! A dead producer's unpublished sequence `s` is marked with one CAS of the slot stamp from
//! the value the repair read to `s | STAMP_TOMBSTONE` ([`tombstone`]). Nothing else of the
//! slot is written, so there is no half-written tombstone: a producer of the next lap takes
//! the slot only once it holds `s` or the tombstone ([`take_slot`]), then writes the whole
//! word, and a consumer sees the old stamp, the tombstone or a newer sequence, never a mix.

use std::sync::atomic::Ordering;

use shmring_layout::stamp::{self, Lap, Stamp};
use shmring_layout::RingState;
use shmring_layout::{consumer_state as cs, owned_word, producer_state as ps};
use shmring_layout::{IN_FLIGHT_CLAIMING, STAMP_EMPTY, STAMP_TOMBSTONE, STAMP_WRITING};

use crate::line::Line;
pub use crate::line::Word;

/// What the table's rules need to know about processes.
pub trait Procs {
    /// Whether the process `(pid, start_time)` still runs.
    fn alive(&self, pid: u32, start_time: u64) -> bool;
    /// Whether any process has pid `pid` (0: none).
    fn exists(&self, pid: u32) -> bool;
    /// Whether the process that has pid `pid` now started after `boot_ns` (a
    /// [`crate::boottime_ns`] reading). One that cannot tell says false: the entry stays
    /// held, as without a sighting.
    fn started_after(&self, _pid: u32, _boot_ns: u64) -> bool {
        false
    }
}

/// The processes of this machine, from `/proc`.
pub(crate) struct Os;

impl Procs for Os {
    fn alive(&self, pid: u32, start_time: u64) -> bool {
        crate::process::is_alive(pid, start_time)
    }
    fn exists(&self, pid: u32) -> bool {
        crate::process::exists(pid)
    }
    fn started_after(&self, pid: u32, boot_ns: u64) -> bool {
        crate::process::started_after(pid, boot_ns)
    }
}

/// An entry's word and when a snapshot saw it, for the transitional states, whose start
/// time may not be the holder's yet: the process that wrote the word ran before the word
/// was read, so a process with the word's pid that started after the sighting is a reused
/// pid, not the holder. A sighting comes only from a snapshot
/// ([`crate::ConsumerInfo::first_seen`], [`crate::ProducerInfo::first_seen`]), which reads
/// the clock after the word. The broker keeps the first one per entry across its sweeps
/// ([`FirstSeen::keep_or_now`]) and passes it to [`crate::Ring::free_consumer_seen`] and
/// [`crate::Ring::repair_dead_producer_seen`].
///
/// A word repeats only after 2^24 changes of its entry ([`owned_word::GEN_BITS`]): a caller
/// that keeps a sighting across looks would need that many changes, by the same pid, to
/// come back to the word between two of its looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstSeen {
    word: u64,
    /// `CLOCK_BOOTTIME` ns, read after the word.
    boot_ns: u64,
}

impl FirstSeen {
    /// A sighting of `word`, read before `boot_ns` was (a snapshot's).
    pub(crate) fn new(word: u64, boot_ns: u64) -> FirstSeen {
        FirstSeen { word, boot_ns }
    }

    /// `earlier` if it saw the same word as `now`, else `now`.
    pub fn keep_or_now(earlier: Option<FirstSeen>, now: FirstSeen) -> FirstSeen {
        match earlier {
            Some(f) if f.word == now.word => f,
            _ => now,
        }
    }

    /// The word it saw.
    pub fn word(&self) -> u64 {
        self.word
    }

    /// When, if it saw `word`. A reading of 0 is no sighting: a snapshot's is never 0
    /// (`boottime_ns`), and 0 would make every process look started after it.
    fn boot_ns_for(first: Option<FirstSeen>, word: u64) -> Option<u64> {
        first
            .filter(|f| f.word == word && f.boot_ns != 0)
            .map(|f| f.boot_ns)
    }
}

/// Who holds an entry, as read from its word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Nobody: take it with `take_free`.
    Free,
    /// A process that runs (or may: a pid that exists), or a state no rule knows: hands off.
    Held(u32),
    /// Its holder gave it up or is gone: it may be taken over, released or freed.
    Open,
}

/// Whether the owner `word` names is gone: by pid and start time in a settled state; in a
/// transitional one, by pid alone, or by a process under that pid that started after
/// `first` saw the word.
fn owner_is_gone<P: Procs>(
    procs: &P,
    word: u64,
    start_time: u64,
    settled: bool,
    first: Option<FirstSeen>,
) -> bool {
    let pid = owned_word::owner(word);
    if settled {
        !procs.alive(pid, start_time)
    } else {
        !procs.exists(pid)
            || FirstSeen::boot_ns_for(first, word).is_some_and(|t| procs.started_after(pid, t))
    }
}

fn held_unless_gone<P: Procs>(
    procs: &P,
    word: u64,
    start_time: u64,
    settled: bool,
    first: Option<FirstSeen>,
) -> Holder {
    if owner_is_gone(procs, word, start_time, settled, first) {
        Holder::Open
    } else {
        Holder::Held(owned_word::owner(word))
    }
}

/// CAS `seen -> next(seen, state, owner)`. `Ok`: the new word.
#[inline]
fn advance<W: Word>(word: &W, seen: u64, state: u32, owner: u32, ok: Ordering) -> Result<u64, u64> {
    let new = owned_word::next(seen, state, owner);
    word.compare_exchange(seen, new, ok, Ordering::Acquire)
        .map(|_| new)
}

/// Consumer entries.
pub mod consumer {
    use super::*;

    /// Who holds a consumer entry whose word is `word` (an Acquire load) and whose start
    /// time, read after it, is `start_time`.
    pub fn holder<P: Procs>(procs: &P, word: u64, start_time: u64) -> Holder {
        holder_seen(procs, word, start_time, None)
    }

    /// [`holder`], for a caller that first saw the word at `first` (see [`FirstSeen`]).
    pub fn holder_seen<P: Procs>(
        procs: &P,
        word: u64,
        start_time: u64,
        first: Option<FirstSeen>,
    ) -> Holder {
        match owned_word::state(word) {
            cs::FREE => Holder::Free,
            cs::DETACHED | cs::FAILED => Holder::Open,
            cs::ACTIVE | cs::RELEASED => held_unless_gone(procs, word, start_time, true, None),
            cs::CLAIMED | cs::RESUMING | cs::REATTACHING => {
                held_unless_gone(procs, word, start_time, false, first)
            }
            _ => Holder::Held(owned_word::owner(word)),
        }
    }

    /// Lay out a declared consumer's entry in a segment that no other process can see yet
    /// (being built, before it has its name and its magic): DETACHED with
    /// no holder (pid 0). DETACHED is open to a takeover whoever it names ([`holder`]), and
    /// no pid is right to name: no process has held the entry, so none may be watched for
    /// it, signalled or taken for its holder. It gates from the ring's first publish and a
    /// durable attach under its name takes it over as a detached consumer's (RESUMING),
    /// keeping its position. Relaxed: published by the Release store of the segment's magic.
    pub fn declare<W: Word>(word: &W) {
        word.store(owned_word::next(0, cs::DETACHED, 0), Ordering::Relaxed);
    }

    /// Take the FREE entry read as `seen`: CLAIMED by `me`, not gating. AcqRel: exclusive
    /// hold of the entry; Acquire sees the previous holder's last writes.
    pub fn take_free<W: Word>(word: &W, seen: u64, me: u32) -> Option<u64> {
        if owned_word::state(seen) != cs::FREE {
            return None;
        }
        advance(word, seen, cs::CLAIMED, me, Ordering::AcqRel).ok()
    }

    /// Take over the open entry read as `seen` (see [`holder`]): RESUMING by `me` if it
    /// gated as a required consumer at a valid position (`gated_required`: it keeps gating
    /// there throughout), else REATTACHING (not gating). SeqCst: a gating change in the
    /// attach protocol's total order (see `gating`).
    pub fn take_over<W: Word>(word: &W, seen: u64, me: u32, gated_required: bool) -> Option<u64> {
        if matches!(owned_word::state(seen), cs::FREE | cs::CLAIMED) {
            return None;
        }
        let to = if gated_required {
            cs::RESUMING
        } else {
            cs::REATTACHING
        };
        advance(word, seen, to, me, Ordering::SeqCst).ok()
    }

    /// Whether an entry in `state` with `flags` and position `next` (the head is `head`)
    /// holds producers as a required consumer at a position they have respected: what a
    /// takeover must keep holding. Not an entry whose holder had not stored its start
    /// (`STARTING`): its position was read before it gated.
    pub fn gated_required(state: u32, flags: u32, next: u64, head: u64) -> bool {
        matches!(state, cs::ACTIVE | cs::DETACHED | cs::FAILED | cs::RESUMING)
            && flags & shmring_layout::consumer_flags::REQUIRED != 0
            && flags & shmring_layout::consumer_flags::STARTING == 0
            && next <= head
    }

    /// Whether a takeover keeps the entry's position `next` (the head is `head`): a
    /// required consumer only where the entry gated as one (`gated`, from
    /// [`gated_required`] and a slot not lapped): what was published meanwhile is otherwise
    /// not protected. An optional consumer keeps any position not past the head: it checks
    /// every slot it reads for a lap.
    pub fn keeps_position(required: bool, gated: bool, next: u64, head: u64) -> bool {
        if required {
            gated
        } else {
            next <= head
        }
    }

    /// The holder's own change of state, from the word it holds. SeqCst: every consumer
    /// state change may start or stop gating (see `gating`). `Err`: the entry no longer
    /// holds `mine` (the broker released it: see [`released`]; or it was lost).
    pub fn set<W: Word>(word: &W, mine: u64, state: u32) -> Result<u64, u64> {
        advance(word, mine, state, owned_word::owner(mine), Ordering::SeqCst)
    }

    /// Whether the consumers that run after an entry in `state` with `flags` may pass it:
    /// a required consumer the broker released. Any other state of a durable entry holds
    /// them (see `consumer::barrier`).
    pub fn passable(state: u32, flags: u32) -> bool {
        state == cs::RELEASED && flags & shmring_layout::consumer_flags::REQUIRED != 0
    }

    /// Whether changing an entry to `to` (its `flags`) lets the consumers that run after it
    /// act, so that those parked are woken: a durable entry (only those have consumers
    /// after them) freed (they find it lost) or [`passable`].
    pub fn lets_downstreams_act(to: u32, flags: u32) -> bool {
        flags & shmring_layout::consumer_flags::DURABLE != 0
            && (to == cs::FREE || passable(to, flags))
    }

    /// The word the broker's release makes of `mine`: a holder that finds it still holds
    /// the entry (released from gating, not taken).
    pub fn released(mine: u64) -> u64 {
        owned_word::next(mine, cs::RELEASED, owned_word::owner(mine))
    }

    /// Stop the entry read as `seen` from gating (ACTIVE, FAILED or DETACHED). An ACTIVE
    /// entry's holder keeps it (it still writes its position: see [`released`]); an entry
    /// its holder gave up is left with no holder. SeqCst: a gating change (see `gating`).
    pub fn release<W: Word>(word: &W, seen: u64) -> bool {
        let owner = match owned_word::state(seen) {
            cs::ACTIVE => owned_word::owner(seen),
            cs::FAILED | cs::DETACHED => 0,
            _ => return false,
        };
        advance(word, seen, cs::RELEASED, owner, Ordering::SeqCst).is_ok()
    }

    /// The holder gives its entry up, from the word it holds (`mine`, or the broker's
    /// [`released`] of it): FREE or RELEASED with no holder, or DETACHED or FAILED naming
    /// it as the last holder (either is open to a takeover: [`holder`]). SeqCst: a gating
    /// change; the final position and counters are visible with it.
    pub fn give_up<W: Word>(word: &W, mine: u64, to: u32) -> Result<u64, u64> {
        let owner = match to {
            cs::DETACHED | cs::FAILED => owned_word::owner(mine),
            _ => 0,
        };
        advance(word, mine, to, owner, Ordering::SeqCst)
    }

    /// The holder of a worker group's member entry gives it up holding a claim that a
    /// handler may have seen (taken over from a member that died or failed, and not all
    /// delivered since): DETACHED with no holder named, as the broker gives back the entry of
    /// a member that died taking one over. A DETACHED entry naming its last holder says
    /// that member left, so no handler saw its claim; the member that takes this one counts
    /// what it delivers of the claim as redelivered. SeqCst, as [`give_up`].
    pub fn give_up_handled<W: Word>(word: &W, mine: u64) -> Result<u64, u64> {
        advance(word, mine, cs::DETACHED, 0, Ordering::SeqCst)
    }

    /// A reader's look at an entry's word and at what its holder writes beside it (start
    /// time, attach count, counters): `read` runs between two loads of the word, with
    /// `acquire` (an Acquire fence) before the second, and is run again while the word
    /// moved in between (at most `tries` times: a word that keeps moving is taken as it was
    /// on the last try). A holder writes those fields after the CAS that made it the holder,
    /// behind a Release fence or as Release stores; a value written so that `read` sees it
    /// makes the second load see that CAS or a later one. So a word read twice alike comes
    /// with no value of a later holder (`client/tests/loom_table.rs`,
    /// `a_snapshot_pairs_a_word_with_its_holder_s_fields`). Values of the word's own holder
    /// are read as they are; in a transitional state (CLAIMED, RESUMING, REATTACHING) they
    /// may still be the last holder's, as the start time is (see the module's comment).
    pub fn read_beside<W: Word, T>(
        word: &W,
        mut read: impl FnMut() -> T,
        acquire: impl Fn(),
        tries: u32,
    ) -> (u64, T) {
        let mut tried = 0;
        loop {
            // Acquire: the fields of a settled state were written before the word.
            let first = word.load(Ordering::Acquire);
            let values = read();
            acquire();
            tried += 1;
            // Relaxed: ordered by the fence `acquire` made.
            if word.load(Ordering::Relaxed) == first || tried >= tries {
                return (first, values);
            }
        }
    }

    /// Free the entry read as `seen`, whose holder must be gone or have given it up
    /// ([`holder`] said [`Holder::Open`]): FREE, or for a durable entry that a process died
    /// taking over (RESUMING), back to DETACHED or RELEASED (`to`), keeping its name and
    /// position. SeqCst: a gating change.
    pub fn free<W: Word>(word: &W, seen: u64, to: u32) -> bool {
        owned_word::state(seen) != cs::FREE
            && matches!(to, cs::FREE | cs::DETACHED | cs::RELEASED)
            && advance(word, seen, to, 0, Ordering::SeqCst).is_ok()
    }
}

/// Producer entries.
pub mod producer {
    use super::*;

    /// Who holds a producer entry whose word is `word` (an Acquire load) and whose start
    /// time, read after it, is `start_time`.
    pub fn holder<P: Procs>(procs: &P, word: u64, start_time: u64) -> Holder {
        holder_seen(procs, word, start_time, None)
    }

    /// [`holder`], for a caller that first saw the word at `first` (see [`FirstSeen`]).
    pub fn holder_seen<P: Procs>(
        procs: &P,
        word: u64,
        start_time: u64,
        first: Option<FirstSeen>,
    ) -> Holder {
        match owned_word::state(word) {
            ps::FREE => Holder::Free,
            ps::ACTIVE => held_unless_gone(procs, word, start_time, true, None),
            ps::ATTACHING | ps::REPAIRING => {
                held_unless_gone(procs, word, start_time, false, first)
            }
            _ => Holder::Held(owned_word::owner(word)),
        }
    }

    /// Take the FREE entry read as `seen`: ATTACHING by `me`. AcqRel: exclusive hold; the
    /// Acquire sees the previous holder's last writes (its Release free).
    pub fn take_free<W: Word>(word: &W, seen: u64, me: u32) -> Option<u64> {
        if owned_word::state(seen) != ps::FREE {
            return None;
        }
        advance(word, seen, ps::ATTACHING, me, Ordering::AcqRel).ok()
    }

    /// Take over the open entry read as `seen` (see [`holder`]: its producer, attacher or
    /// repairer is gone) that the caller saw holding no claim: ATTACHING by `me`. AcqRel as
    /// in [`take_free`].
    pub fn take_over<W: Word>(word: &W, seen: u64, me: u32) -> Option<u64> {
        if owned_word::state(seen) == ps::FREE {
            return None;
        }
        advance(word, seen, ps::ATTACHING, me, Ordering::AcqRel).ok()
    }

    /// ATTACHING -> ACTIVE, by its holder. Release: the entry's fields, written after the
    /// take, are visible to whoever reads ACTIVE.
    pub fn publish<W: Word>(word: &W, mine: u64) -> Result<u64, u64> {
        advance(
            word,
            mine,
            ps::ACTIVE,
            owned_word::owner(mine),
            Ordering::Release,
        )
    }

    /// Hold the entry read as `seen` (open: [`holder`]) to repair what its dead producer
    /// left: REPAIRING by `me`. AcqRel: exclusive hold, and the Acquire orders the reads of
    /// the dead producer's claim after it.
    pub fn begin_repair<W: Word>(word: &W, seen: u64, me: u32) -> Option<u64> {
        if owned_word::state(seen) == ps::FREE {
            return None;
        }
        advance(word, seen, ps::REPAIRING, me, Ordering::AcqRel).ok()
    }

    /// The repair is done: free the entry. Release: the repair's writes (the cleared claim,
    /// the tombstones) are visible to whoever takes the entry.
    pub fn end_repair<W: Word>(word: &W, mine: u64) -> bool {
        advance(word, mine, ps::FREE, 0, Ordering::Release).is_ok()
    }

    /// The repair must wait (a slot still holds an unread event): give the entry back as
    /// the dead producer's ACTIVE entry (`dead` its pid), for a later repair. Release, as in
    /// [`end_repair`].
    pub fn abandon_repair<W: Word>(word: &W, mine: u64, dead: u32) -> bool {
        advance(word, mine, ps::ACTIVE, dead, Ordering::Release).is_ok()
    }

    /// The holder frees its entry (detach). Release: its last writes (counters, the
    /// cleared claim) are visible to the next holder.
    pub fn free<W: Word>(word: &W, mine: u64) -> bool {
        advance(word, mine, ps::FREE, 0, Ordering::Release).is_ok()
    }

    /// Announce a claim before taking it (`in_flight = IN_FLIGHT_CLAIMING`): a producer that
    /// dies between this and [`record_claim`] leaves a hole that [`unattributed_hole`]
    /// finds. Relaxed: the claim's SeqCst RMW that follows releases it, and a repair's
    /// SeqCst load of the claim word that reads from that RMW (or a later one) sees it.
    #[inline]
    pub fn announce_claim<W: Word>(in_flight: &W) {
        in_flight.store(IN_FLIGHT_CLAIMING, Ordering::Relaxed);
    }

    /// Record the claim `first .. first + n` in the entry. The length Relaxed, then
    /// `in_flight` Release: pairs with the Acquire load in [`unattributed_hole`] (and in
    /// `Ring::repair_dead_producer`), so a repair that reads this claim reads its length,
    /// never the previous claim's.
    #[inline]
    pub fn record_claim<W: Word>(in_flight: &W, in_flight_len: &W, first: u64, n: u64) {
        in_flight_len.store(n, Ordering::Relaxed);
        in_flight.store(first + 1, Ordering::Release);
    }

    /// The claim is published (or refused): clear it. Release: pairs with the Acquire load
    /// in [`unattributed_hole`] (and in `Ring::repair_dead_producer`), so a repair that
    /// reads 0 also sees this claim's stamps and never takes a published claim for a hole.
    #[inline]
    pub fn clear_claim<W: Word>(in_flight: &W) {
        in_flight.store(0, Ordering::Release);
    }

    /// Whether a repair of a single producer's hole may read the line's head now: `false`
    /// while a stop or start is deciding the last claim's fate (a claim it takes back must
    /// not be marked repaired: its sequences are handed out again; try again later).
    /// `fence` is a SeqCst fence (loom's in the models), issued first: the dead producer may
    /// have died between its claim's store ((p2) in `line`) and its own fence ((p3)), so
    /// nothing of its own orders that store before a concurrent stop's read of the
    /// position ((s3)). Its death happens before this fence (the caller saw it), so either
    /// this fence precedes the stopper's heavy fence and the stop reads the claim (accepts
    /// it, as the repair's mark says), or it follows, and the lifecycle load here reads
    /// Stopping or later. The same with a starter's heavy fence ((t2)) and its take-back.
    /// `client/tests/loom_repair.rs` has the model that fails without it. A multi-producer
    /// line decides nothing here: its claims through the counter are read-modify-writes the
    /// close's CAS orders, and a lone producer's plain stores are ended first by the
    /// repairs (`Ring::repair_dead_producer` ends them before it reads the head);
    /// `Ring::tombstone`, which ends nothing, takes [`decided_claimed`].
    pub fn single_hole_decided<W: Word>(line: &Line<'_, W>, fence: impl FnOnce()) -> bool {
        if !line.single {
            return true;
        }
        fence();
        !matches!(
            line.life().state,
            Some(RingState::Stopping | RingState::Starting)
        )
    }

    /// Every sequence claimed so far whose claim no stop, start or sharing may still
    /// refuse, for a repair that marks a dead producer's claim without ending anything
    /// (`Ring::tombstone`); `None`: one of them is deciding the last claim (try again
    /// later). A multi-producer counter's claims are read-modify-writes the close's CAS
    /// orders: the counter as read, in one load (a counter read twice may name a lone
    /// producer the second time, whose last claim is not decided). A single or lone
    /// producer's last claim is a plain store: as [`single_hole_decided`] (`fence` first,
    /// the same argument, a sharing deciding a lone claim as a stop does), then the
    /// position with that claim ([`Line::claimed`]). The dead producer's claim was made
    /// before the call (the caller saw it dead); a live producer's claim read here may
    /// still be refused, and the caller must not name one (see `Ring::tombstone`).
    /// `client/tests/loom_lone.rs` runs it on a lone line.
    pub fn decided_claimed<W: Word>(line: &Line<'_, W>, fence: impl FnOnce()) -> Option<u64> {
        if !line.single {
            if let Some(head) = line.claimed_unless_lone() {
                return Some(head);
            }
        }
        fence();
        if matches!(
            line.life().state,
            Some(RingState::Stopping | RingState::Starting | RingState::Sharing)
        ) {
            return None;
        }
        Some(line.claimed())
    }

    /// The decision of the repair of a hole nobody can name (a producer died between
    /// [`announce_claim`] and [`record_claim`]): `mark(seq)` is called for every sequence
    /// from `from(head)` to the head that no producer in `live` holds, `live` being the
    /// `(in_flight, in_flight_len)` words of every other attached producer. Returns `false`,
    /// calling nothing, if one of them is itself between announcing and recording a claim
    /// (its sequence is unknown: try again later). `mark` decides per sequence whether it
    /// is still unpublished ([`super::tombstone`]).
    ///
    /// The head first, then the producer table: a live producer that claims after the
    /// head's load holds a sequence at or above it, outside the range marked; one that
    /// claimed before it has announced its claim (the claim RMW released the announcement,
    /// and the head's SeqCst load reads from that RMW or a later one), or recorded it, or
    /// cleared it after publishing, and the scan sees which. `live` is iterated after the
    /// head is read, so any filter it applies reads the table after the head too.
    pub fn unattributed_hole<'w, W: Word + 'w>(
        line: &Line<'_, W>,
        live: impl IntoIterator<Item = (&'w W, &'w W)>,
        from: impl FnOnce(u64) -> u64,
        mut mark: impl FnMut(u64),
    ) -> bool {
        // A lone producer's last claim may still be refused and its sequences handed out
        // again from the counter: no scan while the line is lone (the repair ends the lone
        // claims first; a producer that took the line since is looked at again later).
        let Some(head) = line.claimed_unless_lone() else {
            return false;
        };
        let mut held: Vec<(u64, u64)> = Vec::new();
        for (in_flight, in_flight_len) in live {
            // Acquire: pairs with the Release in `record_claim` (the length comes with it)
            // and in `clear_claim` (the stamps of a cleared claim come with it).
            match in_flight.load(Ordering::Acquire) {
                0 => {}
                IN_FLIGHT_CLAIMING => return false,
                // Relaxed: ordered by the Acquire load of `in_flight` above.
                first => held.push((first - 1, in_flight_len.load(Ordering::Relaxed))),
            }
        }
        for seq in from(head)..head {
            if !held
                .iter()
                .any(|&(f, n)| seq >= f && seq < f.saturating_add(n))
            {
                mark(seq);
            }
        }
        true
    }
}

/// What [`tombstone`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tombstone {
    /// The slot now says `seq` was repaired.
    Written,
    /// Nothing to do: `seq` is published or repaired, or a newer sequence took the slot.
    NotNeeded,
    /// Not now: the slot still holds an older event that a gating consumer has not read
    /// (`gate_allows` said no), or an older sequence is still to be written into it, or
    /// (`Ring::tombstone`) a stop, a start or a sharing is deciding a single or lone
    /// producer's last claim.
    Wait,
}

/// What the slot whose stamp is `slot_stamp` holds for the producer of `seq` on a
/// multi-producer ring of `capacity` slots ([`stamp::lap`]), looked at without taking it:
/// for a producer that has not claimed `seq` yet (the try forms' room). Only the producer
/// of `seq` changes the slot once it is [`Lap::Free`], so the answer holds until it writes.
#[inline(always)]
pub fn slot_lap<W: Word>(slot_stamp: &W, seq: u64, capacity: u64) -> Lap {
    // Acquire: as in `take_slot`.
    stamp::lap(slot_stamp.load(Ordering::Acquire), seq, capacity)
}

/// The producer of `seq`, past the wrap gate on a multi-producer ring of `capacity` slots,
/// takes the slot whose stamp is `slot_stamp` for its write: one CAS from the previous
/// lap's stamp to `seq | STAMP_WRITING`, made only while the slot is [`Lap::Free`]. While
/// it is [`Lap::Held`] the previous lap's producer has not written its sequence yet (no
/// gating consumer waited for it, see `stamp::lap`): a write now would be overwritten by
/// that late write, leaving the slot with an older stamp than the sequence consumers wait
/// for there, so the caller waits and asks again. [`Lap::Taken`]: `seq` or a later
/// sequence is there (this producer's own WRITING stamp, or a repair that judged it dead);
/// nothing was written. The common case is one CAS, which takes the line in one step where
/// a look and then a store would fetch it twice from the consumer reading it.
#[inline(always)]
pub fn take_slot<W: Word>(slot_stamp: &W, seq: u64, capacity: u64) -> Lap {
    let mut free = match seq.checked_sub(capacity) {
        Some(previous) => previous,
        None => STAMP_EMPTY,
    };
    loop {
        // Acquire: pairs with the Release stamp store (or tombstone CAS) of the slot's
        // previous lap: its writes happen-before this producer's. The WRITING stamp itself
        // is ordered before the payload by the caller's Release fence, as a plain store was.
        match slot_stamp.compare_exchange(
            free,
            seq | STAMP_WRITING,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => return Lap::Free,
            Err(now) => match stamp::lap(now, seq, capacity) {
                // The previous lap repaired: its other free stamp. A free slot changes only
                // by this producer, so this CAS is the last.
                Lap::Free => free = now,
                other => return other,
            },
        }
    }
}

/// Mark sequence `seq`, which a dead producer claimed and never published, as repaired: one
/// CAS of its slot's stamp from the value read to `seq | STAMP_TOMBSTONE` (see the module
/// comment). `gate_allows` says whether every gating consumer has read the slot's previous
/// sequence, `seq - capacity`; it is asked only when the slot still needs the tombstone.
///
/// The CAS starts only from a value that says the slot is done with everything before
/// `seq`: the previous lap `seq - capacity` published or repaired, the slot never written
/// (the first lap), or `seq | STAMP_WRITING` (the dead producer's unfinished write). Any
/// other older value means a producer of an older lap has not written it yet and may still
/// do so with plain stores: marking the slot now would be overwritten by that write, and
/// the hole would come back with nobody left to repair it, so the repair waits. Only the
/// one process that claimed `seq` ever writes `seq` into the slot, and it is dead (the
/// caller holds its entry, or on a single-producer ring its position, so no new producer
/// claims `seq` again while this runs).
pub fn tombstone<W: Word>(
    slot_stamp: &W,
    seq: u64,
    capacity: u64,
    gate_allows: impl FnOnce() -> bool,
) -> Tombstone {
    // Acquire: pairs with the Release stamp store of whoever wrote the slot last.
    let seen = slot_stamp.load(Ordering::Acquire);
    match stamp::read(seen, seq) {
        Stamp::Published | Stamp::Repaired | Stamp::Lapped => return Tombstone::NotNeeded,
        Stamp::Pending => {}
    }
    let previous_done = stamp::lap(seen, seq, capacity) == Lap::Free;
    if !previous_done && seen != seq | STAMP_WRITING {
        return Tombstone::Wait;
    }
    if !gate_allows() {
        return Tombstone::Wait;
    }
    // Release: SYNC POINT with the consumers' Acquire stamp load (as a publish; the
    // tombstone carries no payload, so there is nothing else to publish). Acquire on
    // failure: the value read is judged below.
    match slot_stamp.compare_exchange(
        seen,
        seq | STAMP_TOMBSTONE,
        Ordering::Release,
        Ordering::Acquire,
    ) {
        Ok(_) => Tombstone::Written,
        Err(now) => match stamp::read(now, seq) {
            Stamp::Pending => Tombstone::Wait,
            _ => Tombstone::NotNeeded,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use shmring_layout::{STAMP_EMPTY, STAMP_TOMBSTONE, STAMP_WRITING};

    use super::{consumer, producer, tombstone, FirstSeen, Holder, Procs, Tombstone};
    use shmring_layout::{consumer_state as cs, owned_word, producer_state as ps};

    const CAP: u64 = 8;

    /// One process, pid 7, started at 100 (on the sightings' clock).
    struct Seven;

    impl Procs for Seven {
        fn alive(&self, pid: u32, start_time: u64) -> bool {
            (pid, start_time) == (7, 100)
        }
        fn exists(&self, pid: u32) -> bool {
            pid == 7
        }
        fn started_after(&self, pid: u32, boot_ns: u64) -> bool {
            pid == 7 && 100 > boot_ns
        }
    }

    #[test]
    fn a_half_taken_entry_is_open_once_its_pid_is_a_process_started_after_its_first_sighting() {
        let sighted = |word, boot_ns| Some(FirstSeen { word, boot_ns });
        type HolderSeen = fn(&Seven, u64, u64, Option<FirstSeen>) -> Holder;
        let (c, p): (HolderSeen, HolderSeen) = (consumer::holder_seen, producer::holder_seen);
        for (word, holder) in [
            (owned_word::pack(1, cs::CLAIMED, 7), c),
            (owned_word::pack(1, cs::RESUMING, 7), c),
            (owned_word::pack(1, cs::REATTACHING, 7), c),
            (owned_word::pack(1, ps::ATTACHING, 7), p),
            (owned_word::pack(1, ps::REPAIRING, 7), p),
        ] {
            // The start time may be a previous holder's: never looked at here.
            assert_eq!(holder(&Seven, word, 0, None), Holder::Held(7));
            // Seen at 100 or later: pid 7 may have written it.
            assert_eq!(holder(&Seven, word, 0, sighted(word, 100)), Holder::Held(7));
            // Seen at 99: pid 7 started after, so it did not write it.
            assert_eq!(holder(&Seven, word, 0, sighted(word, 99)), Holder::Open);
            // A sighting of another word of the entry says nothing about this one.
            let other = owned_word::next(word, owned_word::state(word), 7);
            assert_eq!(holder(&Seven, word, 0, sighted(other, 99)), Holder::Held(7));
        }
        // A reading of 0 is no sighting (a snapshot's never is).
        let claimed = owned_word::pack(1, cs::CLAIMED, 7);
        assert_eq!(c(&Seven, claimed, 0, sighted(claimed, 0)), Holder::Held(7));
        // A settled entry goes by pid and start time, whatever the sighting.
        for (active, holder) in [
            (owned_word::pack(1, cs::ACTIVE, 7), c),
            (owned_word::pack(1, ps::ACTIVE, 7), p),
        ] {
            let early = sighted(active, 1);
            assert_eq!(holder(&Seven, active, 100, early), Holder::Held(7));
            assert_eq!(holder(&Seven, active, 50, None), Holder::Open);
        }
    }

    #[test]
    fn a_sighting_is_kept_while_the_word_stays_and_renewed_when_it_changes() {
        let w = owned_word::pack(4, cs::CLAIMED, 7);
        let first = FirstSeen::new(w, 3);
        assert_eq!(
            FirstSeen::keep_or_now(Some(first), FirstSeen::new(w, 9)),
            first
        );
        let moved = FirstSeen::new(owned_word::next(w, cs::ACTIVE, 7), 9);
        assert_eq!(FirstSeen::keep_or_now(Some(first), moved), moved);
        assert_eq!(FirstSeen::keep_or_now(None, moved), moved);
    }

    fn mark(stamp: u64, seq: u64, gate: bool) -> (Tombstone, u64) {
        let w = AtomicU64::new(stamp);
        let done = tombstone(&w, seq, CAP, || gate);
        (done, w.into_inner())
    }

    #[test]
    fn a_tombstone_is_written_only_over_a_slot_done_with_every_older_sequence() {
        let t = 9 | STAMP_TOMBSTONE;
        // The previous lap published or repaired, the dead producer's unfinished write, a
        // first-lap slot never written.
        assert_eq!(mark(1, 9, true), (Tombstone::Written, t));
        assert_eq!(mark(1 | STAMP_TOMBSTONE, 9, true), (Tombstone::Written, t));
        assert_eq!(mark(9 | STAMP_WRITING, 9, true), (Tombstone::Written, t));
        assert_eq!(
            mark(STAMP_EMPTY, 3, true),
            (Tombstone::Written, 3 | STAMP_TOMBSTONE)
        );
        // The previous lap not read by every gating consumer yet.
        assert_eq!(mark(1, 9, false), (Tombstone::Wait, 1));
        // An older lap still to be written (claimed, not stamped; or being written).
        assert_eq!(
            mark(1 | STAMP_WRITING, 9, true),
            (Tombstone::Wait, 1 | STAMP_WRITING)
        );
        assert_eq!(mark(STAMP_EMPTY, 9, true), (Tombstone::Wait, STAMP_EMPTY));
        assert_eq!(mark(9, 25, true), (Tombstone::Wait, 9));
        // Published, repaired already, or a newer lap (written or being written).
        assert_eq!(mark(9, 9, true), (Tombstone::NotNeeded, 9));
        assert_eq!(mark(t, 9, true), (Tombstone::NotNeeded, t));
        assert_eq!(mark(17, 9, true), (Tombstone::NotNeeded, 17));
        assert_eq!(
            mark(17 | STAMP_WRITING, 9, true),
            (Tombstone::NotNeeded, 17 | STAMP_WRITING)
        );
    }
}
