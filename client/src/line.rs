//! The sequence line: where it is, and the lifecycle that closes and reopens it.
//!
//! Every publish, attach, gate scan, repair and lifecycle change reads this line, so it has
//! one definition of its position ([`Line::position`]) and one set of transitions, all in
//! this file. The code is generic over its atomic words ([`Word`]) and its surroundings
//! ([`Env`]) so that the loom models in `client/tests/loom_line.rs` run this very code on
//! heap atomics.
//!
//! ## The words (`shmring_layout::SequenceLines`: the claim line, and the lifecycle line
//! that every producer and idle consumer reads and only lifecycle changes write)
//!
//! - `claim`: multi-producer, the claim counter taken with `fetch_add`, bit 63 CLOSED;
//!   single producer, the producer's own position, written only by it with plain stores.
//! - `lifecycle`: `generation | state | owner pid` (`shmring_layout::lifecycle`), changed only
//!   by CAS, each change bumping the generation, so a stale CAS always fails.
//! - `stop_seq`: the position the line was closed at, written only by the owner of a
//!   `Stopping` word, before it publishes `Stopped`, `Draining` or `Deleted` (Release).
//!
//! ## The position
//!
//! | mode | line | position |
//! | --- | --- | --- |
//! | multi | CLOSED bit clear | the claim counter |
//! | multi | CLOSED bit set | `stop_seq` (refused claims still bump the low bits: ignored) |
//! | multi | the counter names a lone producer | its position, as a single producer's below (see "Lone claims") |
//! | single | Running, Stopping | the producer's position, before the unstamped slots of its last claim (that claim may still be refused) |
//! | single | any other state | `stop_seq` |
//!
//! ## Transitions
//!
//! `Stopping`, `Starting` and `Sharing` are owned: the process that CASed the word into them
//! (its pid is in the word) is the only one that closes, reopens or shares the line. Anyone else waits while the
//! owner lives, and takes the word over with a CAS (new generation, its own pid) once the
//! owner is dead, then finishes the owner's work; a dead process cannot act again, so there
//! is never a second live owner.
//!
//! ```text
//!  Running --stop/drain/remove--> Stopping(pid) --line closed, stop_seq recorded--> Stopped | Draining | Deleted
//!  Stopped | Draining --start--> Starting(pid) --line reopened at stop_seq--> Running
//!  Draining --drain done (CAS on the exact word)--> Stopped
//!  Stopped | Draining --remove--> Deleted
//!  <a word of no state> --remove (CAS on the exact word)--> Stopping(pid) --as above--> Deleted
//!  Running --a claim meets a lone producer (multi)--> Sharing(pid) --lone claims ended--> Running
//! ```
//!
//! A transition's owner that died is taken over by the next lifecycle call, by a single
//! producer's claim that meets it (in (p5), or refused with nothing stored: then without
//! waiting for a live owner), and by the broker's sweep.
//!
//! Closing, multi-producer: record `stop_seq = c`, then CAS the counter `c -> c | CLOSED`; if a
//! claim moved it, record again and retry. Every claim before the CAS holds a sequence below
//! `c` and is honoured; every claim after it reads the bit and is refused. A owner that died
//! after the CAS left the bit set and its record in place: a takeover returns that record.
//!
//! Closing, single producer (no locked instruction on the producer's path): the producer
//! stores its new position, then loads the lifecycle word; the stopper stores `Stopping`,
//! issues the heavy fence (`membarrier`), then loads the position. That is the
//! store-buffering pattern with a full barrier on both sides (the membarrier supplies the
//! producer's), so at least one sees the other:
//!
//! ```text
//! producer, claim s..s+n                   stopper (owner of Stopping)
//! (p1) life Running? else refuse, no store  (s1) CAS life Running -> Stopping(me)
//! (p2) claim = s + n                        (s2) heavy fence (membarrier)
//! (p3) light fence (compiler only)          (s3) c = claim
//! (p4) life as (p1) read it? accepted       (s4) stop_seq = c; CAS life -> Stopped (Release)
//! (p5) else wait out Stopping and Starting, then:
//!      settled closed: accepted iff s + n <= stop_seq, refused otherwise (no store)
//!      Running (a stop and a start since): accepted iff claim still s + n
//! ```
//!
//! (p4) compares the whole word (generation included) with (p1)'s, so an unchanged word is
//! Running with no transition in between. If (p4) sees it, (s3) sees `s + n` (so the claim
//! is below the stop). If it does not, the producer waits for the record, which says either
//! way, and obeys it. `c` is `s` or `s + n`: the producer stores its position once per claim
//! and never again for that claim, whatever (p5) decides.
//!
//! Reopening, single producer: a refused claim leaves the position at `s + n`, past the stop
//! sequence. The producer does not take it back: a store of its own could land after a start
//! and a later stop had read `s + n` as accepted (that stop would then record a sequence
//! nobody publishes, and the run after it would reuse it). The starter takes it back, while
//! it owns `Starting` and so no stop can read the position, with the same handshake as the
//! stop's:
//!
//! ```text
//! starter (owner of Starting)
//! (t1) CAS life Stopped | Draining -> Starting(me)
//! (t2) heavy fence (membarrier)
//! (t3) c = claim; while c > stop_seq: CAS claim c -> stop_seq
//! (t4) CAS life -> Running (Release)
//! ```
//!
//! A producer whose (p4) or (p5) read the word before (t1) stored `s + n` before it, so (t3)
//! sees it and takes it back. One whose (p4) read `Starting` or later waits in (p5) for
//! Running, then reads the position: (t3) either took the claim back (refused) or read the
//! position before the claim's store (the stop read `s` too, the run reopens at `s`, and the
//! claim's sequences are its first: accepted). The next claim's (p1) acquires Running, so
//! its store follows (t3) and is never undone by it. A dead producer's refused claim is
//! taken back the same way, if it died after its (p4): its read of the word before (t1)
//! put its fence before (t2). One that died before (p4) may be missed by (t3); the repair
//! of its claim, which fences before it reads the line, decides it then (as accepted, if
//! the line runs with the claim in place, as (p5) would; see `fixed::repair_dead`,
//! `table::producer::single_hole_decided`).
//!
//! Attaching, single producer: a new producer (its predecessor detached, or died and had its
//! claims stamped or repaired first, so nobody else claims) takes the position as its next
//! sequence and makes it the claim word ([`Line::take_position`]):
//!
//! ```text
//! new single producer
//! (a1) w = life; Stopping: wait it out (finish it if its owner is dead), again from (a1)
//! (a2) p = stop_seq while settled closed, else the position (the claim word less an
//!      unstamped last claim)
//! (a3) claim = p (SeqCst); full fence
//! (a4) life still w? p is the producer's next sequence; else again from (a1)
//! ```
//!
//! (a3) and (a4) against (s1) to (s3) are the stop's handshake again: if (a4) finds `w`, a
//! stop's (s1) comes after it, so its (s3) reads (a3) (or a later claim of this producer) and
//! records `p`; if a stop began, (a4) sees its word, and the producer waits for its record
//! and takes that. Against a start, (a3) and (t3) write the same value, the stop
//! sequence. What (a3) changes: while the line is settled closed, a refused claim's position
//! past the stop (a dead predecessor's) comes down to the stop sequence, as (t3) would do;
//! while it runs, nothing once the predecessor's last claim is stamped (the attach repairs
//! it first), and the handshake above covers a running line whose word is past its position.
//!
//! Limits. An owner is named by its pid alone (the word has no room for a start time), so a
//! pid reused by an unrelated process makes a dead owner look alive: the transition then
//! waits (lifecycle calls give up after `LIFECYCLE_WAIT`) until that process exits. Every
//! process sharing a ring must see the same pid namespace, as the rest of the liveness
//! checks already require (`Ring::open` refuses a ring created in another one). The
//! transitions assume one live owner at a time, so a live process judged dead would break
//! them (a starter that resumes after such a takeover could CAS back a claim accepted
//! meanwhile, since a single producer's position values recur).
//! `process::exists` never judges a live process dead: a process whose main thread exited
//! while others run reads as a zombie in its own `stat`, and its threads are looked at; a
//! process that `/proc` mounted with `hidepid` hides is alive while the kernel says its pid
//! is in use (a zombie too, until its parent reaps it). A single producer waiting in (p5)
//! for a live stopper or starter has no deadline (a `try_publish` too): a stopper or
//! starter stopped by a signal between (s1) and (s4), or (t1) and (t4), holds it, and so
//! does one that died there and that `hidepid` hides, until it is reaped.
//!
//! Reopening, multi-producer: the owner of `Starting` CASes the counter from its closed value
//! (refused claims change it: reload and retry) to `stop_seq`. No other process writes the
//! counter's closed value meanwhile (closing needs `Running`), so the CAS cannot act on a
//! stale value.
//!
//! ## Lone claims (multi-producer)
//!
//! A producer alone on a running multi-producer line takes it to itself: its claims are
//! then a single producer's, plain stores to its own entry's `lone` word (`p`) checked
//! against the lifecycle word, with no locked instruction. The counter says so
//! (`shmring_layout::CLAIM_LONE` with the entry's index): a claim through the counter that
//! reads it ends the lone claims, and the counter takes over where they ended. Each entry
//! also has `lone_end` (`e`): `LONE_OPEN`, or the position the lone claims ended at.
//!
//! ```text
//! taking (the producer, alone)             a lone claim s..s+n (`claim_lone_fast`)
//! (k1) w = life, Running                   (p1) life == w (the very word (k1) read) and
//! (k2) c = counter, below MAX_SEQUENCE,         e == LONE_OPEN? else (p5)
//!      slot c - 1 stamped; p = c;          (p2) p = s + n
//!      e = LONE_OPEN                       (p3) light fence
//! (k3) CAS counter c -> LONE(index)        (p4) life == w? accepted; else (p5)
//! (k4) life still w? else end at once      (p5) `decide_lone`: end them itself (below),
//!                                               then accepted iff s + n <= e
//!
//! ending, by the owner of a word that (p4) sees: Stopping, or Sharing (Running -> Sharing
//! -> Running) for a claim through the counter that met LONE
//! (e1) heavy fence (membarrier)            (e3) CAS e LONE_OPEN -> q (a record there
//! (e2) q = p                                    already: that one is q)
//!                                          (e4) CAS counter LONE(index)+bumps -> q
//!
//! ending, by the lone producer itself at its position q (in (p5), at detach): (e3), (e4);
//! by the owner, for a lone producer that is gone: q = p (final), (e3), (e4)
//! ```
//!
//! (e1) and (e2) against (p2) to (p4) are the single-producer stop's handshake: if (p4)
//! does not see the owner's word, (e2) reads `s + n` and the claim stands; if it does, the
//! producer goes to (p5), and the one CAS on `e` decides whose record counts. The
//! producer's record counts its claim (`s + n`, its exact position); the owner's counts
//! what (e2) read, which holds every claim whose (p4) did not see the owner's word. Either
//! way the claim is accepted exactly when it lies below the record, and the counter is
//! reopened at the record, so no sequence is handed out twice and none is skipped. A
//! refused lone claim's `p` is past the record; nothing reads `p` once the counter no
//! longer names the entry, and only the producer writes it.
//!
//! Who ends them: the owner of a transitional lifecycle word (one at a time, and one that
//! died is dead; a takeover simply does its steps again), and the lone producer itself
//! (in no claim but the one it decides, and taking the line again only after). A repair or
//! an attach that finds a dead lone producer ends its claims as the owner of `Sharing`.
//! So none of them acts on a later run of lone claims: a take needs Running (k1) and a
//! counter no longer lone (k3), and every owner installs before it leaves its word.
//!
//! The position of a lone line is the lone producer's, stepped back over its last claim's
//! unstamped slots as a single producer's is (that claim may yet end up refused); (k2)
//! takes the line only where the slot before `c` is stamped, so stepping back stops at
//! `c`, which a gate scan may have read. A gate scan fences before it reads the position
//! (see `gating`). A position or record at or past `MAX_SEQUENCE` (another process wrote
//! it) is never installed: `CorruptCounter`.
//!
//! Without the fence. An owner whose process has no `membarrier` (`Env::has_barrier`)
//! cannot read a live lone producer's position: it waits for the producer's own record,
//! which its next claim makes (it sees the owner's word at (p1) or (p4)). A close or a
//! sharing from such a process looks first and refuses with `NoBarrier` instead (a lone
//! producer that appears after that look is waited for), and a claim through the counter
//! from one waits without a transition until the counter no longer names the lone
//! producer. The lone producer ends its claims at its next claim once such a process
//! attached to the ring (the ring's fence mode is no longer membarrier), and takes the line
//! only while every process of the ring has `membarrier`.

use std::sync::atomic::{AtomicU64, Ordering};

use shmring_layout::{
    claim_lone, claim_lone_index, lifecycle, run_number, RingState, CLAIM_CLOSED, LONE_OPEN,
    MAX_SEQUENCE, RUN_COUNTED,
};

/// A 64-bit atomic word of the line. Implemented for the segment's `AtomicU64`; the loom
/// models implement it for loom's.
pub trait Word {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic store.
    fn store(&self, value: u64, order: Ordering);
    /// Atomic compare-and-swap (strong).
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64>;
    /// Atomic add, returning the previous value.
    fn fetch_add(&self, value: u64, order: Ordering) -> u64;
}

impl Word for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
    #[inline(always)]
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, current, new, ok, err)
    }
    #[inline(always)]
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_add(self, value, order)
    }
}

/// What the line's transitions need from their surroundings.
pub trait Env {
    /// This process's pid (the owner written into a transitional word).
    fn me(&self) -> u32;
    /// Whether the process `pid` still runs (0 never does).
    fn alive(&self, pid: u32) -> bool;
    /// The stopper's half of the single-producer handshake: `membarrier`.
    fn heavy_fence(&self);
    /// Whether `heavy_fence` pairs with every producer of the ring: this process can issue
    /// a membarrier (a producer uses only a compiler fence once its process registered for
    /// it, and a full fence before), or the only producer is in this process (which, lacking
    /// membarrier, fences fully itself). Otherwise a single-producer line is not closed:
    /// another process's producer may use only a compiler fence.
    fn has_barrier(&self) -> bool;
    /// Wait a little before looking again (round counts from 0). `false`: give up.
    fn pause(&self, round: u32) -> bool;
    /// A dead owner's stop or start was just finished by this process (the word published
    /// Stopped or Running): whoever waits on the ring looks again (a consumer parked until
    /// the line closes, a producer parked for room). Nothing by default.
    fn finished_for_the_dead(&self) {}
    /// The owner of `Starting` (the starter, or a process finishing a dead starter's start),
    /// before it reopens the line: the ring's run word counts the start ([`count_start`]).
    fn count_start(&self);
    /// The owner of `Stopping` (the stopper, or a process finishing a dead stopper's stop),
    /// once it closed the line, before it publishes the closed state: the next start is
    /// counted ([`arm_start_count`]).
    fn arm_start_count(&self);
}

/// Count a start in the run word (`shmring_layout::RUN_COUNTED`), once: its owner may be a
/// process that took a dead starter's word over, after that starter counted it. The run word changes only while the lifecycle word is owned (here, while
/// Starting; in `arm_start_count`, while Stopping), and every owner of one start writes the
/// same value (one more than the stop left, marked), so a dead owner's count and its
/// finisher's never add up.
pub fn count_start<W: Word>(run: &W) {
    // Relaxed, here and in the CAS. What the last stop left happens before this load, by
    // the lifecycle word's chain of CASes (each an RMW, so in the release sequence of the
    // closed word's Release CAS, acquired by the Starting CAS): its owner wrote the clear,
    // or found the word clear by a load that read a dead stopper's clear (read-read
    // coherence carries that). So this load reads the clear or a later value, and a mark
    // read here is this start's, counted by a dead owner. A stale clear read here fails the
    // CAS, which then reads the count.
    let mut r = run.load(Ordering::Relaxed);
    loop {
        if r & RUN_COUNTED != 0 {
            return;
        }
        let counted = (r + 1) | RUN_COUNTED;
        match run.compare_exchange(r, counted, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => r = now,
        }
    }
}

/// Clear the run word's mark (`shmring_layout::RUN_COUNTED`), so that the next start is
/// counted. By the owner of a stop, once it closed the line, before it publishes the closed
/// state.
pub fn arm_start_count<W: Word>(run: &W) {
    // Relaxed. The last start's count happens before this load, as in `count_start`: the
    // start's owner wrote it, or read it (a dead starter's) before its Release CAS to
    // Running, which this stop's CAS acquired through the chain of CASes; read-read
    // coherence then keeps this load from reading the clear before it. The clear is
    // published by the closed word this stop leaves, which the next start's CAS acquires.
    let mut r = run.load(Ordering::Relaxed);
    while r & RUN_COUNTED != 0 {
        match run.compare_exchange(r, run_number(r), Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break,
            Err(now) => r = now,
        }
    }
}

/// An [`Env`] that never waits: `pause` gives up at once (a settle then returns `Busy`
/// where it would wait for a live owner).
pub(crate) struct NoWait<'e, E>(pub(crate) &'e E);

impl<E: Env> Env for NoWait<'_, E> {
    fn me(&self) -> u32 {
        self.0.me()
    }
    fn alive(&self, pid: u32) -> bool {
        self.0.alive(pid)
    }
    fn heavy_fence(&self) {
        self.0.heavy_fence();
    }
    fn has_barrier(&self) -> bool {
        self.0.has_barrier()
    }
    fn pause(&self, _round: u32) -> bool {
        false
    }
    fn finished_for_the_dead(&self) {
        self.0.finished_for_the_dead();
    }
    fn count_start(&self) {
        self.0.count_start();
    }
    fn arm_start_count(&self) {
        self.0.arm_start_count();
    }
}

/// A producer entry's words for lone claims (`shmring_layout::CLAIM_LONE`).
#[derive(Clone, Copy)]
pub struct LoneSlot<'a, W> {
    /// The lone producer's position (`ProducerEntry::lone`).
    pub position: &'a W,
    /// Where its lone claims ended (`ProducerEntry::lone_end`).
    pub end: &'a W,
}

/// The producer entries a multi-producer line's counter may name as its lone producer.
pub trait LoneWords<W: Word> {
    /// Entry `index`'s words, or `None` past the table.
    fn lone(&self, index: u32) -> Option<LoneSlot<'_, W>>;
    /// Whether nobody can claim through entry `index` any more: its holder is dead, or the
    /// entry is not held by a producer. Its position is then final.
    fn gone(&self, index: u32) -> bool;
}

/// No producer entries: a single-producer line, or a model without lone claims.
pub struct NoLone;

impl<W: Word> LoneWords<W> for NoLone {
    fn lone(&self, _index: u32) -> Option<LoneSlot<'_, W>> {
        None
    }
    fn gone(&self, _index: u32) -> bool {
        true
    }
}

/// Why a transition did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineError {
    /// The ring was deleted.
    Deleted,
    /// `start` on a running ring.
    AlreadyRunning,
    /// Another live process owns the lifecycle (its pid) and did not finish in time.
    Busy(u32),
    /// The lifecycle word holds no known state.
    Corrupt(u64),
    /// A single-producer line cannot be closed or reopened from this process: it has no
    /// `membarrier`. On a multi-producer line: a lone producer lives, and this process
    /// cannot end its claims (see "Lone claims").
    NoBarrier,
    /// A multi-producer counter names a lone producer that cannot be one (an entry past the
    /// table, or a settled closed line): another process wrote this counter.
    CorruptCounter(u64),
}

/// Why a new single producer did not take the line's position ([`Line::take_position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeError {
    /// A stop in progress did not finish in time (its owner lives), or finishing a dead
    /// stopper's failed.
    Busy,
    /// The position read is at or past `shmring_layout::MAX_SEQUENCE`, which no ring
    /// reaches: the word was overwritten.
    CorruptPosition(u64),
}

/// Why a claim was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The line is closed.
    Closed,
    /// The ring was deleted.
    Deleted,
}

impl Refused {
    /// Why a claim that met a closed line in lifecycle `state` is refused.
    fn in_state(state: Option<RingState>) -> Refused {
        if state == Some(RingState::Deleted) {
            Refused::Deleted
        } else {
            Refused::Closed
        }
    }
}

/// What the fast path of a single-producer claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fast {
    /// (p4) saw Running: the claim is accepted.
    Accepted,
    /// (p1) saw the line not running: refused, nothing stored.
    NotRunning,
    /// The position was stored and (p4) saw a lifecycle change: (p5) decides.
    Decide,
}

/// The lifecycle word a single producer last found Running (generation and owner
/// included): (p1) compares the word with it, and decodes the state only when the word
/// changed. It only ever holds a word whose state is Running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenRunning(u64);

impl Default for SeenRunning {
    /// The word a new ring starts with (Running, generation 0): Running by construction.
    fn default() -> Self {
        SeenRunning(lifecycle::pack(0, RingState::Running as u32, 0))
    }
}

/// (p1) to (p4) of a single-producer claim, on the two words alone (the publish path does
/// not build a [`Line`]). `seen`: the producer's own, from one claim to the next.
#[inline(always)]
pub fn claim_single_fast<W: Word>(
    claim: &W,
    life: &W,
    seen: &mut SeenRunning,
    next: u64,
    n: u64,
    light: impl Fn(),
) -> Fast {
    let Some(running) = look_running(life, seen) else {
        return Fast::NotRunning;
    };
    claim_after_look(claim, life, running, next, n, light)
}

/// (p1) of a single-producer claim: the lifecycle word if it is Running (`seen` updated),
/// `None` if not (refused, nothing stored). A fixed-size ring's common case makes it before
/// it writes its event, and the rest of the claim ([`claim_after_look`]) after.
#[inline(always)]
pub fn look_running<W: Word>(life: &W, seen: &mut SeenRunning) -> Option<u64> {
    // (p1) Acquire: pairs with the Release CAS that published Running, so a starter's
    // take-back of a refused claim (t3) happens before this claim's store (p2): the store
    // comes after it in the word's order and is never undone by it. (p4) decides.
    let running = life.load(Ordering::Acquire);
    if running != seen.0 {
        if lifecycle::state(running) != RingState::Running as u32 {
            return None;
        }
        *seen = SeenRunning(running);
    }
    Some(running)
}

/// (p2) to (p4) of a single-producer claim after (p1) read `running` ([`look_running`]).
#[inline(always)]
pub fn claim_after_look<W: Word>(
    claim: &W,
    life: &W,
    running: u64,
    next: u64,
    n: u64,
    light: impl Fn(),
) -> Fast {
    // (p2) Relaxed: the fence pair orders it against the stopper's (s3); the gate scan has
    // its own fence (see `gating`). On a fixed-size ring it publishes too: the caller's
    // Release fence before it orders the events (or the pending record) first.
    claim.store(next + n, Ordering::Relaxed);
    // (p3)
    light();
    // (p4) Relaxed: the fence pair above orders it after (p2). The word (p1) read, unchanged:
    // still Running. Any change, even back to Running (a stop and a start between the two
    // loads), goes to (p5), which accepts a claim that finds the line Running.
    if life.load(Ordering::Relaxed) == running {
        Fast::Accepted
    } else {
        Fast::Decide
    }
}

/// (p1) to (p4) of a lone producer's claim (see "Lone claims"): the single producer's, on
/// its own position word, except that (p1) takes only the very word its claims began with
/// (`seen`, from [`Line::take_lone`]), and only while its entry's `lone_end` (`end`) is
/// still open: any change of the lifecycle word since, even back to Running, may have
/// ended the lone claims, and goes to [`Line::decide_lone`] (so does an ended run whose
/// lifecycle word came back to the very value after 2^24 transitions).
#[inline(always)]
pub fn claim_lone_fast<W: Word>(
    position: &W,
    end: &W,
    life: &W,
    seen: SeenRunning,
    next: u64,
    n: u64,
    light: impl Fn(),
) -> Fast {
    // (p1) Acquire: as a single producer's. Then `end` Relaxed: the word read comes from
    // the last transition's Release CAS, made after any record that ended the run.
    if life.load(Ordering::Acquire) != seen.0 || end.load(Ordering::Relaxed) != LONE_OPEN {
        return Fast::NotRunning;
    }
    // (p2) Relaxed: the fence pair orders it against the owner's read (e2); a gate scan fences
    // before it reads the position (see `gating`).
    position.store(next + n, Ordering::Relaxed);
    // (p3)
    light();
    // (p4) Acquire: the fence pair above orders it after (p2); as at (p1), a word that came
    // back to `seen` comes with any record that ended the run since, which `end` shows.
    if life.load(Ordering::Acquire) == seen.0 && end.load(Ordering::Relaxed) == LONE_OPEN {
        Fast::Accepted
    } else {
        Fast::Decide
    }
}

/// [`Line::closed_at`] from the two words it reads: the stop sequence once the line has
/// settled closed (Stopped, Draining, Starting or Deleted); `None` while it runs, is
/// closing, or the word is corrupt.
#[inline]
pub fn closed_at<W: Word>(lifecycle: &W, stop_seq: &W) -> Option<u64> {
    // Acquire: pairs with the Release CAS of whoever changed it, so a settled state comes
    // with the stop sequence recorded before it.
    match Life::of(lifecycle.load(Ordering::Acquire)).state {
        Some(RingState::Running | RingState::Stopping | RingState::Sharing) | None => None,
        // Relaxed: ordered by the Acquire load of the settled word.
        Some(_) => Some(stop_seq.load(Ordering::Relaxed)),
    }
}

/// The lifecycle word, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Life {
    /// The raw word (what a CAS compares).
    pub word: u64,
    /// The state (`None`: corrupt).
    pub state: Option<RingState>,
    /// The owner of a transitional state.
    pub owner: u32,
}

impl Life {
    /// The word decoded.
    pub fn of(word: u64) -> Self {
        Life {
            word,
            state: RingState::from_u32(lifecycle::state(word)),
            owner: lifecycle::owner(word),
        }
    }

    /// Whether the ring was deleted: the one test of it every client makes.
    pub fn is_deleted(&self) -> bool {
        self.state == Some(RingState::Deleted)
    }
}

/// The three words of a claim line and the ring's producer mode.
#[derive(Clone, Copy)]
pub struct Line<'a, W: Word> {
    /// See the module comment.
    pub claim: &'a W,
    /// See the module comment.
    pub lifecycle: &'a W,
    /// See the module comment.
    pub stop_seq: &'a W,
    /// Whether the ring is single-producer.
    pub single: bool,
    /// The most sequences one claim takes (capacity / 2).
    pub max_claim: u64,
    /// Multi-producer: the producer entries, for a lone producer's words.
    pub lone: &'a dyn LoneWords<W>,
}

/// What a lone producer's claim came to, once a lifecycle change met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoneClaim {
    /// The claim lies below where the lone claims ended: it stands.
    Accepted,
    /// The lone claims ended before it: nothing was claimed; claim from the counter.
    Shared,
}

/// Who ends a lone producer's claims ([`Line::end_lone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ender {
    /// The lone producer itself, at position `p`: in no claim, or in the one `p` counts.
    Own(u64),
    /// The owner of a transitional lifecycle word, for a lone producer that is gone: its
    /// position is final.
    ForTheGone,
    /// The owner of a transitional lifecycle word (Stopping, Sharing), which every later
    /// claim of the lone producer sees (its (p4)). `fenced`: it can issue the heavy fence;
    /// without it, it waits for the lone producer to end its claims itself.
    Owner { fenced: bool },
}

/// Why [`Line::end_lone`] did not end the claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndLone {
    /// An owner without the fence: the lone producer has not ended them itself yet.
    NotYet,
    /// The position read, the record or the counter holds a value no ring writes.
    Corrupt(u64),
}

fn next_word(life: &Life, state: RingState, owner: u32) -> u64 {
    lifecycle::next(life.word, state as u32, owner)
}

impl<W: Word> Line<'_, W> {
    /// The lifecycle word.
    #[inline]
    pub fn life(&self) -> Life {
        // Acquire: pairs with the Release CAS of whoever changed it, so a settled state comes
        // with the stop sequence recorded before it.
        Life::of(self.lifecycle.load(Ordering::Acquire))
    }

    /// The line's position: the next sequence a claim will get, or, while the line is
    /// closed, the sequence the next run starts at. The only definition (see the module
    /// comment's table); never waits. `published(s)`: whether slot `s` holds sequence `s`
    /// (an event or a tombstone) or a later one, i.e. is not a claim still to be stamped.
    pub fn position(&self, published: impl Fn(u64) -> bool) -> u64 {
        if self.single {
            let life = self.life();
            let p = match life.state {
                // SeqCst: the attach protocol's load of the head (see `gating`).
                Some(RingState::Running | RingState::Stopping) => self.claim.load(Ordering::SeqCst),
                // Relaxed: ordered by the Acquire load of the settled word.
                _ => self.stop_seq.load(Ordering::Relaxed),
            };
            // The last claim's fate is decided by the producer's (p4) after its store: until
            // its slots are stamped it may still be refused and taken back, so the position is
            // before it (an attach then linearises before that claim, which it receives if it
            // is accepted). A claim is at most `max_claim` sequences, stamped in order once
            // accepted. Closed too, from the stop sequence: a claim the stop accepted and its
            // producer has not stamped yet lies below it, and once a start reopens the line
            // the running position steps back over it; stepping back here as well keeps the
            // position from going down across a start, which a gate computed while the line
            // was closed relies on (`loom_attach`'s
            // `single_producer_attach_after_a_scan_while_stopped`). A word at or past
            // `MAX_SEQUENCE` is no claim (no ring gets there): another process wrote it, and
            // stepping back from it would make it read as a sequence, so it is the position
            // as it is, for every reader to refuse.
            return self.stepped_back(p, published);
        }
        // SeqCst: the attach protocol's load of the head (see `gating`); it also reads from
        // the closing CAS's release sequence, so `stop_seq` (recorded before it) is visible.
        let c = self.claim.load(Ordering::SeqCst);
        if c & CLAIM_CLOSED != 0 {
            return self.stop_seq.load(Ordering::Relaxed);
        }
        match self.lone_at(c) {
            // A lone producer's position, as a single producer's: its last claim may still
            // end up not its own (see "Lone claims" in the module comment). SeqCst: as the
            // counter's load; a gate scan fences before it (see `gating`).
            Some((_, slot)) => self.stepped_back(slot.position.load(Ordering::SeqCst), published),
            None => c,
        }
    }

    /// A single or lone producer's position `p`, before the unstamped slots of its last
    /// claim (see [`Line::position`]). A `p` at or past `MAX_SEQUENCE` is returned as it is.
    fn stepped_back(&self, p: u64, published: impl Fn(u64) -> bool) -> u64 {
        if p >= MAX_SEQUENCE {
            return p;
        }
        let mut q = p;
        while q > 0 && p - q < self.max_claim && !published(q - 1) {
            q -= 1;
        }
        q
    }

    /// The lone producer a multi-producer counter `c` names, with its words; `None` for a
    /// counter that names none, or an entry past the table (then `c`, at or past
    /// `MAX_SEQUENCE`, is no position and every reader refuses it as such).
    fn lone_at(&self, c: u64) -> Option<(u32, LoneSlot<'_, W>)> {
        let index = claim_lone_index(c)?;
        Some((index, self.lone.lone(index)?))
    }

    /// Single producer: a new producer takes the position as its next sequence and stores
    /// it into the claim word ((a1) to (a4) in the module comment). A dead predecessor may
    /// have left a refused claim's position there; a claim it left unfinished was repaired
    /// by the caller. `published` as for [`Line::position`]; `fence` is a full (SeqCst)
    /// fence, loom's in the models.
    pub fn take_position(
        &self,
        env: &impl Env,
        published: impl Fn(u64) -> bool,
        fence: impl Fn(),
    ) -> Result<u64, TakeError> {
        debug_assert!(self.single, "take_position on a multi-producer line");
        let mut round = 0;
        loop {
            // (a1) Acquire (`life`): pairs with the Release CAS that left the state, so a
            // settled word comes with its stop sequence.
            let life = self.life();
            if life.state == Some(RingState::Stopping) {
                // The stop reads the position: let it finish (or finish a dead stopper's).
                if !env.alive(life.owner) {
                    self.settle(env).map_err(|_| TakeError::Busy)?;
                } else if !env.pause(round) {
                    return Err(TakeError::Busy);
                }
                round += 1;
                continue;
            }
            // (a2) Running: the claim word, stepped back over a last claim not all stamped
            // (none, once the predecessor's repair ran). Settled closed or Starting: the stop
            // sequence, which also takes back a refused claim a dead predecessor left (as a
            // starter does, (t3)): the sequence the next run starts at, which is what a new
            // producer claims next, not the position (which steps back from it over an
            // accepted claim's unstamped slots while the line is closed).
            let p = closed_at(self.lifecycle, self.stop_seq)
                .unwrap_or_else(|| self.position(&published));
            if p >= MAX_SEQUENCE {
                // Another process wrote it: the publish arithmetic would overflow on it.
                return Err(TakeError::CorruptPosition(p));
            }
            // (a3) SeqCst store, then the full fence: pairs with the stopper's heavy fence (s2)
            // and its SeqCst load (s3), so a stop that (a4) does not see reads this store.
            self.claim.store(p, Ordering::SeqCst);
            fence();
            // (a4) Acquire (`life`), after the fence: a stop whose (s3) missed (a3) has its
            // Stopping word seen here. The whole word, so a stop and a start since (a1) count.
            if self.life().word == life.word {
                return Ok(p);
            }
        }
    }

    /// Every sequence claimed so far (the position, counting a single producer's last claim
    /// even before its fate is known): the upper end of what a repair of a dead producer
    /// may have to tombstone.
    pub fn claimed(&self) -> u64 {
        if self.single
            && matches!(
                self.life().state,
                Some(RingState::Running | RingState::Stopping)
            )
        {
            // SeqCst: as in `position`.
            return self.claim.load(Ordering::SeqCst);
        }
        if !self.single {
            // SeqCst: as in `position`.
            let c = self.claim.load(Ordering::SeqCst);
            if let Some((_, slot)) = self.lone_at(c) {
                // SeqCst: as in `position`. A lone producer's last claim counts.
                return slot.position.load(Ordering::SeqCst);
            }
        }
        self.position(|_| true)
    }

    /// [`Line::claimed`], unless a multi-producer counter names a lone producer (`None`):
    /// then the lone producer's last claim may still end up refused and its sequences handed
    /// out again from the counter, so no repair may read them as claimed.
    pub fn claimed_unless_lone(&self) -> Option<u64> {
        if self.single {
            return Some(self.claimed());
        }
        // SeqCst: as in `position`. One load: a take between two would read a lone
        // position as the counter.
        let c = self.claim.load(Ordering::SeqCst);
        if claim_lone_index(c).is_some() {
            return None;
        }
        if c & CLAIM_CLOSED != 0 {
            // Relaxed: as in `position`.
            return Some(self.stop_seq.load(Ordering::Relaxed));
        }
        Some(c)
    }

    /// Whether claims are refused now (the line is closed or closing).
    pub fn is_closed(&self) -> bool {
        if self.single {
            self.life().state != Some(RingState::Running)
        } else {
            // Acquire: pairs with the closing CAS.
            self.claim.load(Ordering::Acquire) & CLAIM_CLOSED != 0
        }
    }

    /// The stop sequence once the line has settled closed (Stopped, Draining, Starting or
    /// Deleted); `None` while it runs or is closing, and on a multi-producer line whose
    /// counter a start has reopened (Starting still, its owner before its Running, or dead
    /// there): claims are taken from then on.
    pub fn closed_at(&self) -> Option<u64> {
        let stop = closed_at(self.lifecycle, self.stop_seq)?;
        // Acquire: pairs with the closing CAS. After the Acquire load of a settled word in
        // `closed_at`, the counter reads closed unless a start reopened it since.
        if !self.single && self.claim.load(Ordering::Acquire) & CLAIM_CLOSED == 0 {
            return None;
        }
        Some(stop)
    }

    /// Wait until no live process owns the lifecycle: a dead owner's transition is taken
    /// over and finished (a half-done stop ends Stopped, a half-done start Running).
    /// Returns the settled word.
    pub fn settle(&self, env: &impl Env) -> Result<Life, LineError> {
        self.settle_or_leave(env, true).map(|(life, _)| life)
    }

    /// Finish a stop, start or sharing whose owner died (as `settle` does), never waiting
    /// for a live owner: one that lives, or that took the word over from the dead one
    /// first, is left to it. Finishing a dead owner's work waits as `env` lets it (a
    /// multi-producer stop ends a live lone producer's claims). Returns the word after,
    /// and whether this process finished a dead owner's change.
    pub fn finish_dead(&self, env: &impl Env) -> Result<(Life, bool), LineError> {
        self.settle_or_leave(env, false)
    }

    /// `settle` (`wait`) or `finish_dead` (not `wait`: a live owner's word is returned as
    /// it is).
    fn settle_or_leave(&self, env: &impl Env, wait: bool) -> Result<(Life, bool), LineError> {
        let mut round = 0;
        let mut finished = false;
        loop {
            let life = self.life();
            match life.state {
                None => return Err(LineError::Corrupt(life.word)),
                Some(s) if !s.is_transitional() => return Ok((life, finished)),
                // A single-producer line has no lone claims to share: another process wrote
                // this word.
                Some(RingState::Sharing) if self.single => {
                    return Err(LineError::Corrupt(life.word));
                }
                Some(s) => {
                    if env.alive(life.owner) {
                        if !wait {
                            return Ok((life, finished));
                        }
                        if !env.pause(round) {
                            return Err(LineError::Busy(life.owner));
                        }
                        round += 1;
                        continue;
                    }
                    // The owner is dead: take the word over (new generation, this pid). A
                    // single-producer close or reopen needs the barrier (see
                    // `Env::has_barrier`).
                    if self.single && !env.has_barrier() {
                        return Err(LineError::NoBarrier);
                    }
                    let mine = next_word(&life, s, env.me());
                    if self.cas(life.word, mine) {
                        let owned = Life::of(mine);
                        match s {
                            RingState::Stopping => {
                                self.close_owned_or_back(env, &owned, false)?;
                                self.publish_owned(&owned, RingState::Stopped)?;
                            }
                            RingState::Sharing => {
                                self.finish_sharing(env, &owned)?;
                            }
                            _ => {
                                self.finish_start(env, &owned)?;
                            }
                        }
                        finished = true;
                        env.finished_for_the_dead();
                    }
                }
            }
        }
    }

    /// CAS the lifecycle word. AcqRel: the success publishes what the caller did before it
    /// (the recorded stop sequence, the reopened line) and acquires the previous owner's.
    fn cas(&self, from: u64, to: u64) -> bool {
        self.lifecycle
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Leave an owned transitional word for `state`. Only a takeover (which needs this
    /// process dead) can have changed it: a failure means the word is corrupt.
    fn publish_owned(&self, owned: &Life, state: RingState) -> Result<u64, LineError> {
        let to = next_word(owned, state, 0);
        if self.cas(owned.word, to) {
            Ok(to)
        } else {
            Err(LineError::Corrupt(self.life().word))
        }
    }

    /// Close the line and settle in `target` (Stopped, Draining or Deleted). Idempotent on
    /// a closed line: switches between Stopped and Draining, or to Deleted. Returns the stop
    /// sequence and the word it left (for `finish_drain`).
    pub fn close(&self, env: &impl Env, target: RingState) -> Result<(u64, u64), LineError> {
        loop {
            let life = match self.settle(env) {
                // A dead stopper's close met corrupt lone words and left the word Running:
                // a remove closes from there, forcing the counter closed.
                Err(LineError::CorruptCounter(_)) if target == RingState::Deleted => continue,
                other => other?,
            };
            match life.state {
                None => return Err(LineError::Corrupt(life.word)),
                Some(RingState::Deleted) => {
                    return if target == RingState::Deleted {
                        Ok((self.stop_seq.load(Ordering::Relaxed), life.word))
                    } else {
                        Err(LineError::Deleted)
                    };
                }
                Some(RingState::Running) => {
                    if self.single && !env.has_barrier() {
                        return Err(LineError::NoBarrier);
                    }
                    if self.lone_needs_barrier(env) {
                        return Err(LineError::NoBarrier);
                    }
                    let owned = Life::of(next_word(&life, RingState::Stopping, env.me()));
                    if !self.cas(life.word, owned.word) {
                        continue;
                    }
                    let stop =
                        self.close_owned_or_back(env, &owned, target == RingState::Deleted)?;
                    let word = self.publish_owned(&owned, target)?;
                    return Ok((stop, word));
                }
                Some(current) => {
                    // Closed already (Stopped or Draining): only the state changes.
                    // Relaxed: ordered by the Acquire load of the settled word.
                    let stop = self.stop_seq.load(Ordering::Relaxed);
                    if current == target {
                        return Ok((stop, life.word));
                    }
                    let to = next_word(&life, target, 0);
                    if self.cas(life.word, to) {
                        return Ok((stop, to));
                    }
                }
            }
        }
    }

    /// Close a line whose lifecycle word is `corrupt` (no known state; another process
    /// overwrote it) into `target`, as a stop from Running does: the word is CASed from that
    /// exact value to `Stopping` owned by this process, then the line is closed. For a
    /// remove, which must be able to end a corrupt ring (its clients then get `Deleted`).
    /// `Corrupt` with the word now there if it changed meanwhile.
    pub fn close_corrupt(
        &self,
        env: &impl Env,
        corrupt: u64,
        target: RingState,
    ) -> Result<(u64, u64), LineError> {
        let life = Life::of(corrupt);
        // Sharing is no state of a single-producer line: corrupt there.
        if life.state.is_some() && !(self.single && life.state == Some(RingState::Sharing)) {
            return Err(LineError::Corrupt(corrupt));
        }
        if self.single && !env.has_barrier() {
            return Err(LineError::NoBarrier);
        }
        if self.lone_needs_barrier(env) {
            return Err(LineError::NoBarrier);
        }
        let owned = Life::of(next_word(&life, RingState::Stopping, env.me()));
        if !self.cas(corrupt, owned.word) {
            return Err(LineError::Corrupt(self.life().word));
        }
        let stop = self.close_owned_or_back(env, &owned, target == RingState::Deleted)?;
        let word = self.publish_owned(&owned, target)?;
        Ok((stop, word))
    }

    /// [`Line::close_owned`] by the owner of `owned` (Stopping); if the line cannot be
    /// closed from this process (a lone producer lives and this process has no fence to
    /// end its claims with, see "Lone claims"; or its words hold values no ring writes), the
    /// word goes back to Running, with nothing closed, and `NoBarrier` or `CorruptCounter`.
    /// `force` (a remove): a counter whose lone claims cannot be ended for corrupt words is
    /// closed as it is instead, at the stop sequence recorded before (every claim is refused
    /// from then on, and the ring is going).
    fn close_owned_or_back(
        &self,
        env: &impl Env,
        owned: &Life,
        force: bool,
    ) -> Result<u64, LineError> {
        let closed = match self.close_owned(env) {
            Err(LineError::CorruptCounter(_)) if force => self.close_corrupt_counter(),
            Ok(stop) => stop,
            Err(e) => {
                self.publish_owned(owned, RingState::Running)?;
                return Err(e);
            }
        };
        // The line is closed: the next start is counted. (A stop that went back to Running
        // leaves the run's count as it was.)
        env.arm_start_count();
        Ok(closed)
    }

    /// The owner of `Stopping`, for a remove, closes a counter that names a lone producer
    /// whose words hold values no ring writes: CAS to the recorded stop sequence with CLOSED
    /// (whatever the counter holds). Returns that stop sequence.
    fn close_corrupt_counter(&self) -> u64 {
        // Relaxed: this owner's word acquired the last record.
        let stop = self.stop_seq.load(Ordering::Relaxed);
        // SeqCst: as the close.
        let mut c = self.claim.load(Ordering::SeqCst);
        while c & CLAIM_CLOSED == 0 {
            match self.claim.compare_exchange(
                c,
                stop | CLAIM_CLOSED,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(now) => c = now,
            }
        }
        stop
    }

    /// The owner of `Stopping` closes the line and records its position.
    fn close_owned(&self, env: &impl Env) -> Result<u64, LineError> {
        if self.single {
            // (s2): the producer's stores before this are visible below, and its loads of
            // the lifecycle word after this see Stopping.
            env.heavy_fence();
            // (s3) SeqCst: after the fence, as the handshake needs.
            let c = self.claim.load(Ordering::SeqCst);
            // (s4) Relaxed: published by the Release CAS that leaves Stopping.
            self.stop_seq.store(c, Ordering::Relaxed);
            return Ok(c);
        }
        // SeqCst: the close is one point in the order of every claim.
        let mut c = self.claim.load(Ordering::SeqCst);
        loop {
            if c & CLAIM_CLOSED != 0 {
                // Closed by an owner that died after its CAS: it recorded first.
                return Ok(self.stop_seq.load(Ordering::SeqCst));
            }
            if let Some((index, _)) = self.lone_at(c) {
                // Lone claims: end them first, then close the counter they reopened.
                c = self.end_lone_owned(env, index)?;
                continue;
            }
            if claim_lone_index(c).is_some() {
                // A lone counter naming an entry past the table: no position to close at.
                return Err(LineError::CorruptCounter(c));
            }
            // Record, then close at exactly the recorded count. SeqCst: ordered before the CAS.
            self.stop_seq.store(c, Ordering::SeqCst);
            match self.claim.compare_exchange(
                c,
                c | CLAIM_CLOSED,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Ok(c),
                Err(now) => c = now,
            }
        }
    }

    /// Reopen a stopped line. Returns the stop sequence the new run starts at.
    pub fn reopen(&self, env: &impl Env) -> Result<u64, LineError> {
        loop {
            let life = self.settle(env)?;
            match life.state {
                Some(RingState::Running) => return Err(LineError::AlreadyRunning),
                Some(RingState::Deleted) => return Err(LineError::Deleted),
                _ => {
                    if self.single && !env.has_barrier() {
                        return Err(LineError::NoBarrier);
                    }
                    let owned = Life::of(next_word(&life, RingState::Starting, env.me()));
                    if !self.cas(life.word, owned.word) {
                        continue;
                    }
                    return self.finish_start(env, &owned);
                }
            }
        }
    }

    /// As the owner of `Starting`: reopen the line and publish Running.
    fn finish_start(&self, env: &impl Env, owned: &Life) -> Result<u64, LineError> {
        // Counted before the line reopens: a multi-producer line takes claims from then
        // on, and a starter that died after it would leave the new run's events under the
        // old run number until someone finished its start.
        env.count_start();
        let stop = self.reopen_owned(env);
        self.publish_owned(owned, RingState::Running)?;
        Ok(stop)
    }

    /// The owner of `Starting` reopens the line at the stop sequence.
    fn reopen_owned(&self, env: &impl Env) -> u64 {
        // Relaxed: the owner acquired the settled word that published it.
        let stop = self.stop_seq.load(Ordering::Relaxed);
        if self.single {
            // (t2): the producer's store of a claim that (p4) found refused is visible below
            // (the handshake of the stop, with this Starting word in the place of Stopping).
            env.heavy_fence();
            // (t3) SeqCst: after the fence. A position past the stop is a claim the stop
            // refused (read `s` before its store): take it back here, while no stop can read
            // the position (closing needs Running). The producer never takes it back itself,
            // so no store of it can land in a later run. A dead producer's refused claim is
            // taken back the same way (one that died before its (p4) may be missed here: its
            // repair decides it, see the module comment); a producer attaching
            // meanwhile stores the stop sequence itself (the CAS then fails, and the loop
            // reads that).
            let mut pos = self.claim.load(Ordering::SeqCst);
            while pos > stop {
                match self
                    .claim
                    .compare_exchange(pos, stop, Ordering::SeqCst, Ordering::SeqCst)
                {
                    Ok(_) => break,
                    Err(now) => pos = now,
                }
            }
            return stop;
        }
        // SeqCst: one point in the order of the claims, like the close.
        let mut c = self.claim.load(Ordering::SeqCst);
        while c & CLAIM_CLOSED != 0 {
            // Refused claims bump the closed value: retry from what they left.
            match self
                .claim
                .compare_exchange(c, stop, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => c = now,
            }
        }
        stop
    }

    /// End a drain: Draining -> Stopped, only if the word is still the one the drain left.
    pub fn finish_drain(&self, word: u64) -> bool {
        let life = Life::of(word);
        life.state == Some(RingState::Draining)
            && self.cas(word, next_word(&life, RingState::Stopped, 0))
    }

    /// Multi-producer: take `n` sequences with one `fetch_add`; refused (with the low bits
    /// bumped, which the position ignores) once the CLOSED bit is set.
    #[inline]
    pub fn claim_multi(&self, n: u64) -> Result<u64, Refused> {
        // SeqCst: the claim is an RMW in the total order the close and the attach protocol
        // rely on (see `gating`); on x86_64 every locked RMW costs the same.
        let c = self.claim.fetch_add(n, Ordering::SeqCst);
        if c & CLAIM_CLOSED != 0 {
            return Err(self.refusal());
        }
        Ok(c)
    }

    /// Single producer: claim `next .. next + n` ((p1) to (p5) in the module comment).
    /// `light` is the producer's half of the fence pair.
    #[inline(always)]
    pub fn claim_single(
        &self,
        env: &impl Env,
        seen: &mut SeenRunning,
        next: u64,
        n: u64,
        light: impl Fn(),
    ) -> Result<(), Refused> {
        let fast = claim_single_fast(self.claim, self.lifecycle, seen, next, n, light);
        self.finish_claim_single(env, fast, next, n)
    }

    /// The rest of a single-producer claim after [`claim_single_fast`].
    #[inline(always)]
    pub fn finish_claim_single(
        &self,
        env: &impl Env,
        fast: Fast,
        next: u64,
        n: u64,
    ) -> Result<(), Refused> {
        match fast {
            Fast::Accepted => Ok(()),
            Fast::NotRunning => Err(self.refusal_settling(env)),
            Fast::Decide => self.decide(env, next, n),
        }
    }

    /// Why a claim is refused now.
    #[cold]
    fn refusal(&self) -> Refused {
        Refused::in_state(self.life().state)
    }

    /// Why a single-producer claim that stored nothing is refused now. A stop or start
    /// whose owner is dead is finished first (as `decide` does), so that a start killed
    /// before it published Running does not leave every later claim refused where no
    /// broker runs to finish it: this claim is refused, the next finds the line as that
    /// left it. Never waits: a transition whose owner lives (one that took the word over
    /// first, say) is left to it.
    #[cold]
    fn refusal_settling(&self, env: &impl Env) -> Refused {
        let life = self.life();
        if life.state.is_some_and(RingState::is_transitional) && !env.alive(life.owner) {
            let _ = self.settle(&NoWait(env));
        }
        self.refusal()
    }

    /// (p5): a claim whose position was stored met a lifecycle change. Never stores: a
    /// refused claim's position is taken back by the next start (t3).
    #[cold]
    fn decide(&self, env: &impl Env, next: u64, n: u64) -> Result<(), Refused> {
        let mut round = 0;
        loop {
            let life = self.life();
            match life.state {
                // A stop and a start since (p1). The start took the position back if the
                // stop refused the claim; otherwise the position still holds the claim: a
                // stop that read it recorded it below its stop sequence, or the stop read the
                // position before it and so did the start, which reopened there, and the
                // claim's sequences are the first of the new run. Relaxed: the Acquire load
                // of Running ordered the starter's take-back before it, and only a starter
                // writes the word besides this producer (an attaching producer and a repair
                // of a fixed-size ring write it too, but only once this producer is dead).
                Some(RingState::Running) => {
                    return if self.claim.load(Ordering::Relaxed) == next + n {
                        Ok(())
                    } else {
                        Err(Refused::Closed)
                    };
                }
                // No state of a single-producer line: another process wrote the word.
                Some(RingState::Sharing) => return Err(Refused::Closed),
                Some(RingState::Stopping | RingState::Starting) => {
                    // The record (or the take-back) is on its way; a dead owner's transition
                    // is finished here.
                    if !env.alive(life.owner) {
                        let _ = self.settle(env);
                    }
                    env.pause(round);
                    round = round.saturating_add(1);
                }
                state => {
                    // Relaxed: ordered by the Acquire load of the settled word.
                    let stop = self.stop_seq.load(Ordering::Relaxed);
                    if next + n <= stop {
                        return Ok(());
                    }
                    // Refused: the position stays past the stop (which every reader ignores
                    // while the line is closed) until a start takes it back.
                    return Err(Refused::in_state(state));
                }
            }
        }
    }

    /// Whether a close or a sharing cannot go ahead from this process: the counter names a
    /// lone producer that lives, and this process cannot issue the heavy fence its claims
    /// pair with (see "Lone claims"). Looked at before the transition is owned; a lone
    /// producer that appears after it is waited for (see [`Line::end_lone_owned`]).
    fn lone_needs_barrier(&self, env: &impl Env) -> bool {
        if self.single {
            return false;
        }
        // SeqCst: as in `position`.
        let c = self.claim.load(Ordering::SeqCst);
        self.lone_at(c)
            .is_some_and(|(index, _)| !self.lone.gone(index))
            && !env.has_barrier()
    }

    /// As the owner of a transitional lifecycle word (Stopping, Sharing): end the lone
    /// claims of entry `index` and reopen the counter where they ended. Returns the counter.
    /// Without the heavy fence (and the lone producer alive) it waits for the producer to end
    /// them itself, which its next claim does (it sees the owned word): `NoBarrier` if the
    /// wait gives up (`Env::pause`). `CorruptCounter`: a position or record no ring holds.
    fn end_lone_owned(&self, env: &impl Env, index: u32) -> Result<u64, LineError> {
        let mut round = 0;
        loop {
            let ender = if self.lone.gone(index) {
                Ender::ForTheGone
            } else {
                Ender::Owner {
                    fenced: env.has_barrier(),
                }
            };
            match self.end_lone(env, index, ender) {
                Ok(c) => return Ok(c),
                Err(EndLone::Corrupt(word)) => return Err(LineError::CorruptCounter(word)),
                Err(EndLone::NotYet) => {
                    if !env.pause(round) {
                        return Err(LineError::NoBarrier);
                    }
                    round = round.saturating_add(1);
                }
            }
        }
    }

    /// End the lone claims of producer entry `index` (see "Lone claims" in the module
    /// comment): record where they end in the entry's `lone_end` (one CAS from `LONE_OPEN`
    /// decides whose record it is), then install the record in the counter. Returns the
    /// counter after it (the record, or what claims made of it since), once it no longer
    /// names `index`. Every caller but the lone producer itself owns a transitional
    /// lifecycle word meanwhile, so no new run of lone claims begins (a take needs Running)
    /// before it is done: none of its steps can land in a later run.
    fn end_lone(&self, env: &impl Env, index: u32, ender: Ender) -> Result<u64, EndLone> {
        let Some(slot) = self.lone.lone(index) else {
            return Err(EndLone::Corrupt(self.claim.load(Ordering::Relaxed)));
        };
        loop {
            // SeqCst: the counter's order, with the take and the claims.
            let c = self.claim.load(Ordering::SeqCst);
            if claim_lone_index(c) != Some(index) {
                return Ok(c);
            }
            // Acquire: pairs with the AcqRel CAS of the record.
            let end = slot.end.load(Ordering::Acquire);
            let at = if end == LONE_OPEN {
                let p = match ender {
                    Ender::Own(p) => p,
                    // SeqCst: as in `position`. Final: nobody claims through the entry.
                    Ender::ForTheGone => slot.position.load(Ordering::SeqCst),
                    // Without the fence, the lone producer records at its next claim (it
                    // sees the owned word).
                    Ender::Owner { fenced: false } => return Err(EndLone::NotYet),
                    Ender::Owner { fenced: true } => {
                        // (e1) The lone producer's position stores before this are visible
                        // below, and its loads of the lifecycle word after it see this
                        // owner's word (set before this call).
                        env.heavy_fence();
                        // (e2) SeqCst: after the fence.
                        slot.position.load(Ordering::SeqCst)
                    }
                };
                if p >= MAX_SEQUENCE {
                    // Another process wrote the position: no sequence to reopen at.
                    return Err(EndLone::Corrupt(p));
                }
                // (e3) AcqRel: the success publishes the record to whoever installs it or
                // decides by it; a failure is another ender's record, installed below.
                if slot
                    .end
                    .compare_exchange(LONE_OPEN, p, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                p
            } else if end < MAX_SEQUENCE {
                end
            } else {
                // Neither open nor a position: another process wrote it.
                return Err(EndLone::Corrupt(end));
            };
            // (e4) Install: from the lone counter (bumped by claims that met it) to the
            // record. SeqCst: one point in the order of the claims; its Release part
            // publishes the record to a lone producer that reads the counter.
            let mut cur = c;
            loop {
                match self
                    .claim
                    .compare_exchange(cur, at, Ordering::SeqCst, Ordering::SeqCst)
                {
                    Ok(_) => return Ok(at),
                    Err(now) if claim_lone_index(now) == Some(index) => cur = now,
                    Err(now) => return Ok(now),
                }
            }
        }
    }

    /// As the owner of `Sharing`: end the lone claims (if the counter still names a lone
    /// producer) and publish Running. If they cannot be ended from this process
    /// (`NoBarrier`, `CorruptCounter`), the word goes back to Running with nothing changed
    /// and that error.
    fn finish_sharing(&self, env: &impl Env, owned: &Life) -> Result<u64, LineError> {
        // SeqCst: as in `position`.
        let c = self.claim.load(Ordering::SeqCst);
        let outcome = match self.lone_at(c) {
            Some((index, _)) => self.end_lone_owned(env, index).map(|_| ()),
            None => Ok(()),
        };
        let word = self.publish_owned(owned, RingState::Running)?;
        outcome.map(|()| word)
    }

    /// A claim through the counter met lone producer `index` (the counter names it): end
    /// its claims, so that the next claim through the counter counts, as the owner of
    /// `Sharing` (Running -> Sharing -> Running), whose word the lone producer's next claim
    /// sees. Returns once the counter no longer names it, or with `NoBarrier` (the producer
    /// lives and this process cannot end its claims: wait for it to end them, see "Lone
    /// claims"), `CorruptCounter`, or `Busy` or `Corrupt` as [`Line::settle`].
    pub fn share(&self, env: &impl Env, index: u32) -> Result<(), LineError> {
        let mut round = 0;
        loop {
            if self.lone.lone(index).is_none() {
                // A counter naming an entry past the table: no position.
                return Err(LineError::CorruptCounter(
                    self.claim.load(Ordering::Relaxed),
                ));
            }
            if !self.lone.gone(index) && !env.has_barrier() {
                return Err(LineError::NoBarrier);
            }
            // Acquire (`life`): a settled word comes with what its transition did.
            let life = self.life();
            // SeqCst: as in `position`. Read after the word, so that a transition that
            // ended the lone claims and left the word is seen to have.
            let c = self.claim.load(Ordering::SeqCst);
            if claim_lone_index(c) != Some(index) {
                // Ended: by this claim's sharing, another's, a stop, or the producer itself.
                return Ok(());
            }
            match life.state {
                None => return Err(LineError::Corrupt(life.word)),
                Some(RingState::Running) => {
                    let owned = Life::of(next_word(&life, RingState::Sharing, env.me()));
                    if self.cas(life.word, owned.word) {
                        self.finish_sharing(env, &owned)?;
                        return Ok(());
                    }
                }
                Some(s) if s.is_transitional() => {
                    // Another owner's transition: it ends the lone claims (a stop, a sharing),
                    // or the lone producer does at its next claim (it sees the word), and
                    // this waits only until the counter says so. A dead owner's is finished.
                    if !env.alive(life.owner) {
                        // Another live owner may take it first: looked at again above.
                        let _ = self.settle(&NoWait(env));
                    } else if !env.pause(round) {
                        return Err(LineError::Busy(life.owner));
                    }
                    round = round.saturating_add(1);
                }
                Some(_) => {
                    // Settled closed, the counter read after it still lone, and the word
                    // still the same (no start and take since): every close ends the lone
                    // claims first, and a take needs Running, so another process wrote this
                    // counter.
                    if self.life().word == life.word {
                        return Err(LineError::CorruptCounter(c));
                    }
                }
            }
        }
    }

    /// A producer of entry `index` alone on a running multi-producer line takes it to
    /// itself ((k1) to (k4) in "Lone claims"): returns its position and the lifecycle word
    /// its lone claims compare with, or `None` (the line closed or closing, the counter
    /// moved, the sequence before it not yet stamped: `published` as for
    /// [`Line::position`]; or a transition began meanwhile, and the producer ended the
    /// claims again at once).
    pub fn take_lone(
        &self,
        env: &impl Env,
        index: u32,
        published: impl Fn(u64) -> bool,
    ) -> Option<(u64, SeenRunning)> {
        debug_assert!(!self.single, "take_lone on a single-producer line");
        // (k1) Acquire (`life`): the claims that reopened the line come before.
        let life = self.life();
        if life.state != Some(RingState::Running) {
            return None;
        }
        // SeqCst: the counter's order.
        let c = self.claim.load(Ordering::SeqCst);
        // The sequence before `c` is stamped, so that the position, stepped back over
        // unstamped slots (see `stepped_back`), never goes below `c`, which a gate scan may
        // have read.
        if c >= MAX_SEQUENCE || (c > 0 && !published(c - 1)) {
            return None;
        }
        let slot = self.lone.lone(index)?;
        // (k2) Relaxed: published by the CAS below to whoever reads the lone counter.
        slot.position.store(c, Ordering::Relaxed);
        slot.end.store(LONE_OPEN, Ordering::Relaxed);
        // (k3) SeqCst: fails if any claim, close or take moved the counter since.
        if self
            .claim
            .compare_exchange(c, claim_lone(index), Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return None;
        }
        // (k4) SeqCst: a transition that began since (k1) ends the lone claims at once (the
        // producer is in no claim), so that an owner that looked for a lone producer before
        // its transition (`lone_needs_barrier`) finds the counter reopened.
        if self.lifecycle.load(Ordering::SeqCst) != life.word {
            self.end_own_lone(env, index, c);
            return None;
        }
        Some((c, SeenRunning(life.word)))
    }

    /// The lone producer of entry `index`, at position `p` and in no claim, ends its own
    /// claims there (a detach, a ring that lost the asymmetric fence, a take that met a
    /// transition): no fence, it knows its position. Never waits. Returns the counter
    /// after, or `None` if the entry's record or the counter holds a value no ring writes.
    pub fn end_own_lone(&self, env: &impl Env, index: u32, p: u64) -> Option<u64> {
        self.end_lone(env, index, Ender::Own(p)).ok()
    }

    /// The lone producer of entry `index` whose claim of `next .. next + n` met a lifecycle
    /// change or an ended run (`stored`: its (p2) stored `next + n`; else (p1) found the run
    /// changed and it stored nothing): it ends its claims itself, unless another ender
    /// recorded first, and the record decides the claim. Never waits.
    #[cold]
    pub fn decide_lone(
        &self,
        env: &impl Env,
        index: u32,
        next: u64,
        n: u64,
        stored: bool,
    ) -> LoneClaim {
        let own = if stored { next + n } else { next };
        if self.end_lone(env, index, Ender::Own(own)).is_err() {
            // A record or a counter no ring writes: no lone claim stands on it.
            return LoneClaim::Shared;
        }
        let Some(slot) = self.lone.lone(index) else {
            return LoneClaim::Shared;
        };
        // Acquire: the counter no longer names this producer (read by `end_lone`, SeqCst,
        // in the release sequence of the install), and the record was made before it.
        let end = slot.end.load(Ordering::Acquire);
        if stored && end < MAX_SEQUENCE && next + n <= end {
            LoneClaim::Accepted
        } else {
            LoneClaim::Shared
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A pid that is not running.
    const DEAD: u32 = 99;
    /// A live process other than this one.
    const OTHER: u32 = 7;

    /// Process 1, which counts its pauses and gives up after a few. `race`: on its first
    /// look at the dead owner, another live process takes the word over first (between
    /// that look and this process's CAS).
    struct Racing<'a> {
        word: &'a AtomicU64,
        race: bool,
        raced: Cell<bool>,
        pauses: Cell<u32>,
        finished: Cell<u32>,
    }

    impl Env for Racing<'_> {
        fn me(&self) -> u32 {
            1
        }
        fn alive(&self, pid: u32) -> bool {
            if pid == DEAD && self.race && !self.raced.replace(true) {
                let seen = Life::of(self.word.load(Ordering::SeqCst));
                let state = seen.state.expect("a transitional word") as u32;
                let taken = lifecycle::next(seen.word, state, OTHER);
                assert!(self
                    .word
                    .compare_exchange(seen.word, taken, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok());
            }
            pid != 0 && pid != DEAD
        }
        fn heavy_fence(&self) {}
        fn has_barrier(&self) -> bool {
            true
        }
        fn pause(&self, round: u32) -> bool {
            self.pauses.set(self.pauses.get() + 1);
            round < 3
        }
        fn finished_for_the_dead(&self) {
            self.finished.set(self.finished.get() + 1);
        }
        fn count_start(&self) {}
        fn arm_start_count(&self) {}
    }

    struct Words {
        claim: AtomicU64,
        life: AtomicU64,
        stop_seq: AtomicU64,
    }

    impl Words {
        fn stopping(owner: u32) -> Self {
            Words {
                claim: AtomicU64::new(5),
                life: AtomicU64::new(lifecycle::pack(3, RingState::Stopping as u32, owner)),
                stop_seq: AtomicU64::new(0),
            }
        }

        fn line(&self) -> Line<'_, AtomicU64> {
            Line {
                claim: &self.claim,
                lifecycle: &self.life,
                stop_seq: &self.stop_seq,
                single: false,
                max_claim: 4,
                lone: &NoLone,
            }
        }

        fn env(&self, race: bool) -> Racing<'_> {
            Racing {
                word: &self.life,
                race,
                raced: Cell::new(false),
                pauses: Cell::new(0),
                finished: Cell::new(0),
            }
        }
    }

    #[test]
    fn finish_dead_finishes_a_dead_stoppers_stop_and_says_so() {
        let w = Words::stopping(DEAD);
        let env = w.env(false);
        let (life, finished) = w.line().finish_dead(&env).expect("finished");
        assert_eq!(life.state, Some(RingState::Stopped));
        assert!(finished);
        assert_eq!(env.finished.get(), 1);
        assert_eq!(w.stop_seq.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn finish_dead_leaves_a_settled_word_alone() {
        let w = Words::stopping(DEAD);
        w.life.store(
            lifecycle::pack(4, RingState::Running as u32, 0),
            Ordering::SeqCst,
        );
        let env = w.env(false);
        let (life, finished) = w.line().finish_dead(&env).expect("settled");
        assert_eq!(life.state, Some(RingState::Running));
        assert!(!finished);
        assert_eq!(env.pauses.get(), 0);
    }

    /// A sweep saw a dead owner, but a live process took the word over before the sweep's
    /// CAS: the sweep neither waits for that process nor says it finished anything.
    #[test]
    fn finish_dead_neither_waits_for_nor_claims_a_live_processs_takeover() {
        let w = Words::stopping(DEAD);
        let env = w.env(true);
        let (life, finished) = w.line().finish_dead(&env).expect("left to the live owner");
        assert_eq!(life.state, Some(RingState::Stopping));
        assert_eq!(life.owner, OTHER);
        assert!(!finished);
        assert_eq!(env.finished.get(), 0);
        assert_eq!(env.pauses.get(), 0, "waited for a live owner");
    }
}
