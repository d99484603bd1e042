//! Loom models of a consumer attaching, and of the producer's gate scan, on a fixed-size
//! ring whose claim is its publish (the design in `loom_folded.rs`'s module comment; the
//! model ring in `loom_folded_ring`). Today's attach and scan (`loom_attach.rs`) read the
//! line's position, which steps back over the slots of a claim not yet published; here
//! nothing is claimed without being published, but the cursor may hold an event a stop
//! refused (until the next start takes it back) or one a stop in progress may still refuse.
//!
//! The position, one definition for the attach and the consumer's polls
//! (`loom_folded_ring::position`): the lifecycle word, the cursor, a fence, the lifecycle
//! word again; the cursor if both reads are the same Running word; the lesser of the cursor
//! and the stop sequence if both are the same closed word (Stopped, Draining, Deleted, or
//! Starting, as `line::closed_at` reads it: until the start's (t3) the cursor may hold a
//! refused store, after it at most the next run's first event, past the stop sequence); a
//! look again while a stop is in progress or the two reads differ. The attach runs the
//! shipping `graph::start_fresh` with it: the provisional position, the SeqCst CAS of the
//! entry to ACTIVE, a SeqCst fence, the position again.
//!
//! The producer's scan takes as its head the producer's own next sequence, not a word: the
//! single producer scans only between its publishes, when every event below that sequence
//! is accepted and published and nothing at or past it is (a refused event's sequence is
//! its next one, which it publishes again once the line runs). Then the SeqCst fence and
//! the shipping `gating::gate` over the entry, as `gating::scan` does.
//!
//! ```text
//! consumer (attach)                        producer (scan, between publishes at s)
//! provisional = position(); next = it      fence(SeqCst)
//! CAS entry -> ACTIVE     (SeqCst)         head = s (its own next sequence)
//! fence(SeqCst)                            gate = min(head, next if the entry gates)
//! start = max(position(), provisional)
//! next = start            (Release)
//! ```
//!
//! Why a scan that misses the entry gates at or below the start. Its entry load reads a
//! value before the CAS, so its fence precedes the consumer's fence after the CAS in the
//! SeqCst order (C++20 [atomics.order]: were the consumer's fence first, the scan's load,
//! after its own fence, would read the CAS or later). Some store of the cursor at `s`
//! happens before the scan's fence: the producer's own claim store, or a start's take-back
//! ((t3)) or a new producer's (a3), which the producer's Acquire read of Running ((t4)) or
//! its attach ordered before it. So the consumer's cursor load, after its fence, reads that
//! store or a later one: an accepted event's end (at least `s`), or a refused one's, which
//! the position bounds by the stop sequence (at least `s`: the stop that refused it read
//! the cursor at `s` or later) or reads again once the start took it back there. The
//! lifecycle word the consumer reads is no older than the Running word the producer read
//! before its scan, by the same fence order; so when the producer's last event was accepted
//! in (p5) after a start (the stop read the cursor before its store, and its next sequence
//! is the stop sequence plus one), the consumer cannot read the stop's settled word and
//! take the stop sequence, below the gate. The models need the fence after the CAS: their
//! cursor load is Acquire, and the position's own fence comes after it. The client needs
//! none: the design loads the cursor and the second lifecycle word SeqCst (for the
//! consumer's own reason, `loom_folded.rs`), and then the CAS and those loads are in the
//! SeqCst order in program order, which is all the argument above asks of the fence
//! (`Consumer::fresh` passes no fence to `start_fresh`, and need not). loom runs
//! SeqCst accesses as Acquire and Release and a SeqCst fence as one joining clock, stronger
//! than C++20's; the models check the interleavings, the argument above carries the orders.
//!
//! What the models check: the start is at or after every event published before the attach
//! began, and at or before every event whose claim was stored after the attach returned; a
//! scan that did not see the entry gated at or below the start; the consumer, reading from
//! its start (while the producer laps the ring in the first model, after the stop or the
//! start in the others), finds every event intact and exactly the attempt that was
//! accepted; an attach racing a stop starts at or before the stop sequence. (Consumers
//! reading across a stop and a start are `loom_folded.rs`'s.) Witnesses: a scan that missed
//! the entry gated above the provisional position (the case the argument is for), some
//! publish was refused after its cursor store, and an attach returned before a start's new
//! publish (the scan-while-stopped model has none: its control's failure shows the scan
//! before the take-back is reached). The controls: the position from the cursor
//! alone (an attach before a start takes a refused event back starts past the next run's
//! first event and skips it, as an earlier attach read the claim counter's raw bits); from the
//! cursor and the lifecycle word before it alone (an attach during a stop starts past the
//! event the stop refuses); no fence after the CAS; and a scan's head from the cursor (a
//! scan while the ring is stopped after a refusal gates one past the stop sequence, above
//! the start of a consumer that attaches at it after the start, and the producer would go
//! on to lap it, as an earlier scan did with the raw bits).
//!
//! With claim guards (`loom_folded_guard.rs`) the position is also bounded by `pending`,
//! the first sequence of an open guard's claim. The argument carries over: the store that
//! last set `pending` (a record, or the store that ended a claim) comes before the scan's
//! fence, so the attach reads it or a later one, and a record is at least `s` (the guard's
//! first sequence is the producer's next one). No model here has a guard open.
//!
//! The wait for a stop: every attach here takes its start through the client's
//! `fixed::start_position` (`Segment::start_position`), which looks again while a stop is
//! in progress and finishes a dead stopper's stop (`Line::settle`). One model has the
//! stopper die right after its CAS to Stopping, racing the producer's claim (whose (p5)
//! may take the same stop over) and the attach: the stop is finished once and the attach
//! starts at its position. Its control starts at the stop's bound below the position (what
//! a poll reads, `Segment::position`), below an event published before the attach began.
//!
//! A consumer the broker released gating again (`Consumer::jump_to_head`): after a look that
//! finds the position decided (a poll's look, which does not wait), the client's
//! `graph::gate_again`: the SeqCst CAS back to ACTIVE, a SeqCst fence, the head read after
//! it, by the argument above (a scan that missed the ACTIVE word used a head the consumer's
//! read after its CAS reaches); when a stop begun since leaves that head undecided, the
//! entry is released again and the consumer looks again at a later poll. The model races a
//! stop and two publishes, the second of which needs a scan; its control gates again at the
//! stop's bound, below the head (below an event published before it began, or a head a
//! scan that missed the entry used). (A `gate_again` that reads the head before its CAS
//! fails the model the same way.) A holder that dies between `gate_again`'s CAS and its
//! store of the head leaves its entry gating at the old position, flagged `STARTING`; the
//! model at the end has a process resume it while the producer, its gate cached while the
//! entry was released, writes past that position: the resume starts afresh and reads every
//! event from its start intact. Its control, whose `gate_again` cannot flag the entry,
//! keeps the old position and reads the producer's later lap in its slot.
//!
//! `Consumer::resume` (the models at the end): the shipping `graph::resume` against a
//! producer that raises its write horizon before each claim as the client does (never past
//! what the wrap gate passed), with the look at the old position's slot through
//! `fixed::lapped` (`Segment::lapped` on this ring). A dead holder's ACTIVE or DETACHED
//! entry keeps its position; a RELEASED one, and a DETACHED one whose slot a later lap
//! overwrote, start afresh. The controls: a horizon raised past the gate (a gating entry
//! looks lapped and starts afresh past events it holds) and a resume that does not look at
//! the horizon (it keeps a lapped position). Checked by hand, not kept: counting a horizon
//! of exactly the position plus the capacity as lapped (`>=` in `fixed::overwritten`)
//! fails both keeping models, so some interleaving's look reads the horizon at that bound.
//! The resumes here take the flags always REQUIRED and never meet a stop.
//!
//! Not modelled here: the deadlines (a model attach waits as long as it
//! takes), a new producer's attach racing a stop (`Line::take_position`, (a1) to (a4);
//! `loom_folded_repair.rs` runs it after a repair, and racing the start that takes a
//! refused store back), and the scans a repair runs (`gating::scan` from a process with no
//! producer, so no next sequence of its own: it needs the consumers' position instead).

mod loom_env;
mod loom_folded_ring;
mod loom_seen;
mod loom_word;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_env::{env, ModelEnv, DEAD};
use loom_folded_ring::{
    assert_reached, bound, reached, start_position, witness, Path, Reads, Ring, AHEAD,
};
use loom_seen::{Seen, REQUIRED_PASS};
use loom_word::{model, model_bound, W};

use shmring::fixed;
use shmring::gating::{self, Flags};
use shmring::graph;
use shmring::line::{Env, Refused, SeenRunning, Word};
use shmring::table;
use shmring_layout::{consumer_flags, consumer_state, lifecycle, owned_word, RingState};

const CONSUMER: u32 = 1;

/// An entry's `next` before any position is stored in it.
const UNSET: u64 = u64::MAX;

/// The attaching consumer's flags: required.
struct Required;

/// The entry's flags word, as `graph::gate_again` and `graph::started` change it and a
/// resume reads it (the scans read `Required`: they do not look at `STARTING`).
struct EntryFlags(loom::sync::atomic::AtomicU32);

impl graph::FlagsWord for EntryFlags {
    fn fetch_or(&self, value: u32, order: Ordering) -> u32 {
        self.0.fetch_or(value, order)
    }
    fn fetch_and(&self, value: u32, order: Ordering) -> u32 {
        self.0.fetch_and(value, order)
    }
}

/// Control: a flags word that `graph::gate_again` cannot mark (the entry keeps its flags,
/// as before the gate again flagged it `STARTING`).
struct Unmarked;

impl graph::FlagsWord for Unmarked {
    fn fetch_or(&self, _: u32, _: Ordering) -> u32 {
        consumer_flags::REQUIRED
    }
    fn fetch_and(&self, _: u32, _: Ordering) -> u32 {
        consumer_flags::REQUIRED
    }
}

impl Flags for Required {
    fn load(&self, _: Ordering) -> u32 {
        consumer_flags::REQUIRED
    }
}

/// How an attach reads the line's position.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// `loom_folded_ring::position`: both lifecycle reads.
    Folded,
    /// Control: as `Folded`, without the SeqCst fence after the CAS.
    Unfenced,
    /// Control: the cursor alone (SeqCst).
    Cursor,
    /// Control: the lifecycle word before the cursor alone.
    FirstLookOnly,
    /// Control: a stop in progress taken at its bound below the position (what a poll
    /// reads, `Segment::position`), not waited for.
    Bound,
}

/// How the producer's scan takes its head.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Its own next sequence.
    Next,
    /// Control: the cursor word (SeqCst).
    Cursor,
}

/// A ring of `N` slots with one consumer entry, CLAIMED by the attaching consumer, and the
/// models' markers.
struct Model<const N: usize> {
    ring: Ring<N>,
    /// The entry's word, position and the start of what it read.
    word: W,
    next: W,
    first: W,
    /// The entry's flags (required).
    flags: EntryFlags,
    /// Marker: 1 once the attach has returned (stored after the start).
    attached: W,
    /// Marker: one past the last sequence published (stored after the publish).
    published_to: W,
}

/// Where an attach started, and what its bounds are checked against.
#[derive(Clone, Copy, Debug)]
struct Attached {
    /// `published_to` when the attach began: everything below was published before it.
    before: u64,
    /// The provisional position stored as `next` before the CAS to ACTIVE.
    provisional: u64,
    start: u64,
}

impl<const N: usize> Model<N> {
    /// A running ring, the sequences below `published` published, each event's payload
    /// `(seq, seq)`.
    fn running(published: u64) -> Self {
        let m = Model {
            ring: Ring::new(),
            word: W::new(owned_word::pack(1, consumer_state::CLAIMED, CONSUMER)),
            next: W::new(UNSET),
            first: W::new(UNSET),
            flags: EntryFlags(loom::sync::atomic::AtomicU32::new(consumer_flags::REQUIRED)),
            attached: W::new(0),
            published_to: W::new(published),
        };
        for s in 0..published {
            let [a, b] = &m.ring.slots[s as usize % N];
            a.store(s, Ordering::Relaxed);
            b.store(s, Ordering::Relaxed);
        }
        m.ring.cursor.store(published, Ordering::Relaxed);
        m
    }

    /// A ring whose sequences below `stop` are published, stopped at `stop` after a refused
    /// publish of `stop`: its bytes `(stop, 1)` in the slot and its cursor store in the
    /// word, as the stop left them.
    fn stopped_after_a_refusal(stop: u64) -> Self {
        let m = Model::running(stop);
        let [a, b] = &m.ring.slots[stop as usize % N];
        a.store(stop, Ordering::Relaxed);
        b.store(1, Ordering::Relaxed);
        m.ring.cursor.store(stop + 1, Ordering::Relaxed);
        m.ring.stop_seq.store(stop, Ordering::Relaxed);
        m.ring.life.store(
            lifecycle::pack(2, RingState::Stopped as u32, 0),
            Ordering::Relaxed,
        );
        m
    }

    /// The line's position as `how` reads it (the attaching process's surroundings `env`).
    fn position(&self, how: Start, env: &impl Env) -> u64 {
        match how {
            Start::Folded | Start::Unfenced => start_position(&self.ring, env),
            Start::Bound => match fixed::position(&self.ring) {
                fixed::Position::Decided(p) => p,
                fixed::Position::Closing { below, .. } => below,
            },
            // SeqCst: as `Line::position`.
            Start::Cursor => self.ring.cursor.load(Ordering::SeqCst),
            Start::FirstLookOnly => loop {
                if let Some(p) = bound(&self.ring, Reads::NoAfter) {
                    break p;
                }
                thread::yield_now();
            },
        }
    }

    /// `Consumer::fresh`'s attach: the shipping `graph::start_fresh` with the position read
    /// as `how` reads it, and a SeqCst fence after the CAS (module comment; not in the
    /// control).
    fn attach(&self, how: Start) -> Attached {
        self.attach_in(how, &env(4, true))
    }

    /// [`Model::attach`] in the surroundings `env`.
    fn attach_in(&self, how: Start, env: &impl Env) -> Attached {
        // Acquire: pairs with the producer's Release store of the marker.
        let before = self.published_to.load(Ordering::Acquire);
        let mine = self.word.load(Ordering::Acquire);
        let started = graph::start_fresh(
            &self.next,
            &self.first,
            &self.word,
            mine,
            || Some(self.position(how, env)),
            || (),
            || {
                if how != Start::Unfenced {
                    fence(Ordering::SeqCst);
                }
            },
        )
        .expect("nobody else changes the entry");
        // Release: pairs with the producer's Acquire load of the marker.
        self.attached.store(1, Ordering::Release);
        Attached {
            before,
            provisional: started.provisional,
            start: started.start,
        }
    }

    /// The producer's gate scan between publishes, its next sequence `s`: the SeqCst fence,
    /// the head, the shipping `gating::gate` over the entry.
    fn scan(&self, head: Head, s: u64) -> Scan {
        fence(Ordering::SeqCst);
        let head = match head {
            Head::Next => s,
            // SeqCst: as `gating::scan` reads the position.
            Head::Cursor => self.ring.cursor.load(Ordering::SeqCst),
        };
        let (word, next) = (Seen::new(&self.word), Seen::new(&self.next));
        let gate = gating::gate(head, || std::iter::once((&word, &Required, &next)), 0);
        Scan {
            gate,
            saw_entry: word.saw_gating(REQUIRED_PASS),
        }
    }

    /// The consumer reads `from..to` in place, as a poll does: the bound (the position's
    /// reads), each event, then the commit of `next` (Release). Returns the payloads.
    fn read(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let (mut next, mut got) = (from, Vec::new());
        while next < to {
            let Some(end) = bound(&self.ring, Reads::Both).filter(|&end| end > next) else {
                thread::yield_now();
                continue;
            };
            while next < end.min(to) {
                let [a, b] = &self.ring.slots[next as usize % N];
                // Relaxed: ordered by the Acquire cursor load in `bound`.
                // A later lap's bytes show in `check_read`, after the other checks.
                got.push((a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)));
                next += 1;
                // Release: the commit; pairs with the scan's Acquire load of `next`.
                self.next.store(next, Ordering::Release);
            }
        }
        got
    }
}

/// A scan as the producer ran it: the gate, and whether its pass over the required entries
/// saw the entry gating.
struct Scan {
    gate: u64,
    saw_entry: bool,
}

/// The single producer: its next sequence, its cached gate, and what the checks need.
struct Producer {
    seen: SeenRunning,
    next: u64,
    cached_gate: u64,
    head: Head,
    /// Sequences whose claim was stored after the producer saw the attach return.
    after_attach: Vec<u64>,
    /// The accepted events, `(seq, mark)`.
    accepted: Vec<(u64, u64)>,
    /// The scans it ran.
    scans: Vec<Scan>,
    /// Whether a publish was refused after its cursor store (a witness).
    refused_after_store: bool,
    /// How it raises the write horizon before each claim (`None`: the models without
    /// copying readers or resumes, which never read it).
    arm: Option<Arm>,
}

/// How the producer raises the write horizon before a claim of `s`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arm {
    /// As the client (`Producer::arm_fixed`, and before any other claim): to `AHEAD` past
    /// `s`, never past what the wrap gate passed (the cached gate plus the capacity).
    Gated,
    /// Control: to `AHEAD` past `s`, whatever the gate.
    Ungated,
}

impl Producer {
    fn new(next: u64, head: Head) -> Self {
        Producer {
            seen: SeenRunning::default(),
            next,
            cached_gate: 0,
            head,
            after_attach: Vec::new(),
            accepted: Vec::new(),
            scans: Vec::new(),
            refused_after_store: false,
            arm: None,
        }
    }

    /// A producer that raises the write horizon as `arm` says before each claim.
    fn arming(next: u64, arm: Arm) -> Self {
        Producer {
            arm: Some(arm),
            ..Producer::new(next, Head::Next)
        }
    }

    /// One publish of the next sequence, its payload marked `mark`: the wait at the wrap
    /// gate (the cached gate, else a scan), then the write and the claim on the cursor
    /// (`Ring::publish`).
    fn publish<const N: usize>(&mut self, m: &Model<N>, mark: u64) -> Result<u64, Refused> {
        self.wait_gate(m, usize::MAX);
        self.claim(m, mark)
    }

    /// `publish`, if the wrap gate passes within `scans` scans.
    fn try_publish<const N: usize>(
        &mut self,
        m: &Model<N>,
        mark: u64,
        scans: usize,
    ) -> Option<Result<u64, Refused>> {
        self.wait_gate(m, scans).then(|| self.claim(m, mark))
    }

    /// The wait at the wrap gate for the next sequence: the cached gate, else a scan, at
    /// most `scans` of them. Returns whether the gate passed.
    fn wait_gate<const N: usize>(&mut self, m: &Model<N>, scans: usize) -> bool {
        let s = self.next;
        let need = (s + 1).saturating_sub(N as u64);
        for _ in 0..scans {
            if self.cached_gate >= need {
                break;
            }
            let scan = m.scan(self.head, s);
            self.cached_gate = self.cached_gate.max(scan.gate);
            self.scans.push(scan);
            if self.cached_gate < need {
                thread::yield_now();
            }
        }
        self.cached_gate >= need
    }

    /// The write and the claim on the cursor (`Ring::publish`) of the next sequence, once
    /// the wrap gate passed it.
    fn claim<const N: usize>(&mut self, m: &Model<N>, mark: u64) -> Result<u64, Refused> {
        let s = self.next;
        // Acquire: pairs with the attach's Release store of the marker; looked at before
        // the write, so a claim stored after it follows the attach's return.
        let after = m.attached.load(Ordering::Acquire) == 1;
        if let Some(arm) = self.arm {
            let ahead = s + AHEAD;
            let end = match arm {
                Arm::Gated => ahead.min(self.cached_gate + N as u64),
                Arm::Ungated => ahead,
            };
            // The client's raise, before the write under it: the horizon, then the
            // seqlock's Release fence.
            fixed::cover(&m.ring, end);
        }
        let (result, path) = m.ring.publish(s, mark, &mut self.seen, None);
        if result.is_err() && path == Path::Decided {
            self.refused_after_store = true;
        }
        result?;
        if after {
            self.after_attach.push(s);
        }
        self.accepted.push((s, mark));
        self.next = s + 1;
        // Release: pairs with the attach's Acquire load of the marker.
        m.published_to.store(s + 1, Ordering::Release);
        Ok(s)
    }

    /// `publish`, again on `Closed` once the line runs (attempt 1, 2, ... as the mark). The
    /// first attempt waits at the gate, and may scan, while the line is closed.
    fn publish_retrying<const N: usize>(&mut self, m: &Model<N>) -> u64 {
        let mut attempt = 1;
        loop {
            match self.publish(m, attempt) {
                Ok(s) => return s,
                Err(Refused::Closed) => m.ring.wait_running(),
                Err(Refused::Deleted) => unreachable!("nobody removes the ring"),
            }
            attempt += 1;
        }
    }
}

/// The start's bounds (see the module comment).
fn check_start(a: Attached, after_attach: &[u64]) {
    let start = a.start;
    assert!(
        a.before <= start,
        "start {start} is before sequence {}, published before the attach began",
        a.before - 1
    );
    for &s in after_attach {
        assert!(
            s >= start,
            "sequence {s}, claimed after the attach returned, is skipped: start {start}"
        );
    }
}

/// Every scan that did not see the entry gated at or below the start (else the producer,
/// trusting it, may lap the start's slot). Returns whether one of them gated above the
/// provisional position (the case the module comment's argument is for).
fn check_scans(a: Attached, scans: &[Scan]) -> bool {
    let mut above_provisional = false;
    for scan in scans.iter().filter(|s| !s.saw_entry) {
        assert!(
            scan.gate <= a.start,
            "a scan that did not see the entry gated at {}, above the start {}",
            scan.gate,
            a.start
        );
        above_provisional |= scan.gate > a.provisional;
    }
    above_provisional
}

/// What the consumer read from its start is exactly the accepted events from there.
fn check_read(a: Attached, got: &[(u64, u64)], accepted: &[(u64, u64)], to: u64) {
    let want: Vec<(u64, u64)> = accepted
        .iter()
        .copied()
        .filter(|&(s, _)| s >= a.start && s < to)
        .collect();
    assert_eq!(
        got, want,
        "read {got:?} from start {}, where {want:?} were accepted",
        a.start
    );
}

/// A consumer attaches to a running ring of two slots (sequence 0 published) and reads up
/// to sequence 3 while the producer publishes 1, 2 and 3: 2 laps 0 and 3 laps 1, which
/// needs the consumer past 1 (the scan saw its entry) or started after it. Some
/// interleaving has a scan miss the entry and gate above the provisional position.
fn attach_racing_publishes_that_lap_the_ring(how: Start) {
    let above = witness();
    let above_seen = above.clone();
    model(move || {
        let m = Arc::new(Model::<2>::running(1));
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::new(1, Head::Next);
                for s in 1..4 {
                    p.publish(&m, s).expect("the ring runs");
                }
                p
            })
        };
        let a = m.attach(how);
        let got = m.read(a.start, 4);
        let p = producer.join().unwrap();
        check_start(a, &p.after_attach);
        if check_scans(a, &p.scans) {
            above.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut accepted = vec![(0, 0)];
        accepted.extend(p.accepted);
        check_read(a, &got, &accepted, 4);
    });
    assert!(
        above_seen.load(std::sync::atomic::Ordering::Relaxed),
        "no scan missed the entry and gated above the provisional position"
    );
}

#[test]
fn an_attach_racing_publishes_that_lap_the_ring_reads_every_event_intact() {
    attach_racing_publishes_that_lap_the_ring(Start::Folded);
}

/// Without the fence after the CAS (the client's SeqCst cursor load does its work, which
/// loom does not model), the attach's cursor load may read a value older than
/// the store a scan that missed the entry gated at.
#[test]
#[should_panic(expected = "above the start")]
fn control_an_attach_without_the_fence_after_its_cas() {
    attach_racing_publishes_that_lap_the_ring(Start::Unfenced);
}

/// A consumer attaches to a running ring of two slots (0 and 1 published) while the
/// producer publishes 2 and another process stops the ring: 2 is accepted (the stop read
/// its cursor store) or refused (the stop read the cursor before it, and the store stays in
/// the word). Then the ring starts again and the producer publishes the
/// next run's first event, at the stop sequence. The attach starts at or before the stop
/// sequence and reads exactly the accepted events from there. Some interleaving refuses 2
/// after its cursor store.
fn attach_racing_a_stop(how: Start) {
    let refused = witness();
    let refused_seen = refused.clone();
    // Bound 3: the control's failure needs it (the attach reads Running, the stop closes,
    // the producer stores and fences, the attach reads the store, the stop reads before it).
    model_bound(3, move || {
        let m = Arc::new(Model::<2>::running(2));
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::new(2, Head::Next);
                let _ = p.publish(&m, 1);
                p
            })
        };
        let stopper = {
            let m = m.clone();
            thread::spawn(move || {
                m.ring
                    .line()
                    .close(&env(2, true), RingState::Stopped)
                    .expect("stop")
                    .0
            })
        };
        let a = m.attach(how);
        let p = producer.join().unwrap();
        if p.refused_after_store {
            refused.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let stop = stopper.join().unwrap();
        start_and_read_past(&m, a, p, stop);
    });
    assert!(
        refused_seen.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving refused 2 after its cursor store"
    );
}

/// After a model whose ring (0 and 1 published, `p` publishing 2) was stopped at `stop`:
/// the attach at `a` starts at or before the stop sequence; the ring starts again and the
/// producer publishes the next run's first event there; the consumer reads exactly the
/// accepted events from its start.
fn start_and_read_past(m: &Model<2>, a: Attached, mut p: Producer, stop: u64) {
    assert!(
        a.start <= stop,
        "an attach at {} starts past the stop at {stop}",
        a.start
    );
    assert_eq!(m.ring.line().reopen(&env(2, true)), Ok(stop), "started");
    let first = p.publish(m, 2).expect("the ring runs again");
    assert_eq!(first, stop, "the next run starts at the stop sequence");
    check_start(a, &p.after_attach);
    let got = m.read(a.start, stop + 1);
    let mut accepted = vec![(0, 0), (1, 1)];
    accepted.extend(p.accepted);
    check_read(a, &got, &accepted, stop + 1);
}

#[test]
fn an_attach_racing_a_stop_starts_at_or_before_the_stop_sequence() {
    attach_racing_a_stop(Start::Folded);
}

/// The lifecycle word before the cursor alone: an attach that reads Running, then the
/// cursor store of an event the stop then refuses, starts one past the stop.
#[test]
#[should_panic(expected = "past the stop")]
fn control_an_attach_without_the_second_look_starts_past_the_stop() {
    attach_racing_a_stop(Start::FirstLookOnly);
}

/// A consumer attaches to a ring stopped after a refused publish of 0 (its bytes in the
/// slot, its cursor store in the word) while another process starts the ring and the
/// producer publishes 0 again. The attach starts at 0, or past it only if it read the line
/// after the new publish; the consumer reads the new attempt, never the refused bytes. Some
/// interleaving has the attach return before the new publish's claim (the start then read
/// while the cursor held the refused store, or before the take-back).
fn attach_racing_a_start_after_a_refusal(how: Start) {
    let early = witness();
    let early_seen = early.clone();
    model(move || {
        let m = Arc::new(Model::<4>::stopped_after_a_refusal(0));
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::new(0, Head::Next);
                m.ring.wait_running();
                p.publish(&m, 2).expect("the ring runs again");
                p
            })
        };
        let starter = {
            let m = m.clone();
            thread::spawn(move || m.ring.line().reopen(&env(2, true)))
        };
        let a = m.attach(how);
        let p = producer.join().unwrap();
        assert_eq!(starter.join().unwrap(), Ok(0), "started");
        check_start(a, &p.after_attach);
        if !p.after_attach.is_empty() {
            early.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let got = m.read(a.start, 1);
        check_read(a, &got, &p.accepted, 1);
    });
    assert!(
        early_seen.load(std::sync::atomic::Ordering::Relaxed),
        "no interleaving had the attach return before the new publish"
    );
}

#[test]
fn an_attach_racing_a_start_after_a_refusal_reads_the_next_run_from_its_first_event() {
    attach_racing_a_start_after_a_refusal(Start::Folded);
}

/// The cursor alone: before the start takes the refused store back, the attach starts at
/// 1, and the next run's first event, 0, is lost to it (as an earlier attach lost the first
/// events of the next run, reading the claim counter's raw bits).
#[test]
#[should_panic(expected = "is skipped")]
fn control_an_attach_reading_the_cursor_alone_skips_the_next_runs_first_event() {
    attach_racing_a_start_after_a_refusal(Start::Cursor);
}

/// A ring of two slots (0 and 1 published) stopped at 2 after a refused publish of 2 (its
/// bytes in 0's slot, its cursor store in the word). The producer publishes 2 and 3, again
/// on `Closed` once the ring runs (its first attempt waits at the gate, and scans, while
/// the ring may still be stopped), while another process starts the ring and a consumer
/// attaches; then the consumer reads to 3. A scan that missed the entry must not gate past
/// its start (at 3 the producer would go on to write 4 into the start's slot unchecked).
/// The consumer reads after the others are done: with its reads concurrent, the model
/// exceeded loom's branch limit (not looked into further: the scans are checked without
/// them, and the model of laps above reads concurrently).
fn a_scan_while_stopped_racing_a_start_and_an_attach(head: Head) {
    model(move || {
        let m = Arc::new(Model::<2>::stopped_after_a_refusal(2));
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::new(2, head);
                for _ in 2..4 {
                    p.publish_retrying(&m);
                }
                p
            })
        };
        let starter = {
            let m = m.clone();
            thread::spawn(move || m.ring.line().reopen(&env(2, true)))
        };
        let a = m.attach(Start::Folded);
        let p = producer.join().unwrap();
        assert_eq!(starter.join().unwrap(), Ok(2), "started");
        check_start(a, &p.after_attach);
        check_scans(a, &p.scans);
        let got = m.read(a.start, 4);
        check_read(a, &got, &p.accepted, 4);
    });
}

#[test]
fn a_scan_while_stopped_gates_at_or_below_an_attach_after_the_start() {
    a_scan_while_stopped_racing_a_start_and_an_attach(Head::Next);
}

/// The cursor as the head: a scan while the refused store is in the word gates one past
/// the stop sequence, above the start of the consumer that attached at it (as an earlier
/// scan raised the gate with the claim counter's raw bits).
#[test]
#[should_panic(expected = "above the start")]
fn control_a_scan_whose_head_is_the_cursor_gates_above_a_later_attach() {
    a_scan_while_stopped_racing_a_start_and_an_attach(Head::Cursor);
}

/// The consumer's process (4): in an attach, its waits last as long as it takes; in a poll
/// (`polling`), they give up at once (a poll's deadline is now, as `Consumer::jump_to_head`
/// takes `Segment::start_position`). Marks `finished`, if any, when it finishes a dead
/// owner's transition (`Env::finished_for_the_dead`).
struct Consumer4 {
    env: ModelEnv,
    polling: bool,
    finished: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Consumer4 {
    fn attaching(finished: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        Consumer4 {
            env: env(4, true),
            polling: false,
            finished: Some(finished),
        }
    }

    fn polling() -> Self {
        Consumer4 {
            env: env(4, true),
            polling: true,
            finished: None,
        }
    }
}

impl Env for Consumer4 {
    fn me(&self) -> u32 {
        self.env.me()
    }
    fn alive(&self, pid: u32) -> bool {
        self.env.alive(pid)
    }
    fn heavy_fence(&self) {
        self.env.heavy_fence();
    }
    fn has_barrier(&self) -> bool {
        self.env.has_barrier()
    }
    fn pause(&self, round: u32) -> bool {
        !self.polling && self.env.pause(round)
    }
    fn finished_for_the_dead(&self) {
        if let Some(f) = &self.finished {
            reached(f);
        }
    }
    fn count_start(&self) {
        self.env.count_start();
    }
    fn arm_start_count(&self) {
        self.env.arm_start_count();
    }
}

/// A stopper takes the lifecycle word (its (s1), Stopping) and dies before anything else:
/// the word names a dead pid.
fn stop_and_die<const N: usize>(ring: &Ring<N>) {
    // SeqCst: any value will do, the CAS decides (nothing else changes the word from
    // Running here).
    let w = ring.life.load(Ordering::SeqCst);
    let dead = lifecycle::next(w, RingState::Stopping as u32, DEAD);
    ring.life
        .compare_exchange(w, dead, Ordering::AcqRel, Ordering::Acquire)
        .expect("the dead stopper's CAS");
}

/// A consumer attaches to a running ring of two slots (0 and 1 published) while the
/// producer publishes 2 and a stopper takes the lifecycle word and dies. The stop is
/// finished by whoever meets it first: the producer's claim (its (p5) takes a dead
/// stopper's stop over), the attach (`fixed::start_position`), or, when neither did,
/// another process's settle after both. Then the ring starts again and the producer
/// publishes the next run's first event. The attach starts at or after every event
/// published before it began, at or before the stop sequence, and reads exactly the
/// accepted events from there. Some interleaving has the attach finish the dead stop.
fn attach_meeting_a_dead_stop(how: Start) {
    let finished = witness();
    let finished_seen = finished.clone();
    model(move || {
        let m = Arc::new(Model::<2>::running(2));
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::new(2, Head::Next);
                let _ = p.publish(&m, 1);
                p
            })
        };
        let dier = {
            let m = m.clone();
            thread::spawn(move || stop_and_die(&m.ring))
        };
        let a = m.attach_in(how, &Consumer4::attaching(finished.clone()));
        // Before anything runs again: an event published before the attach began is not
        // the consumer's (the control would read it, and start below a scan's gate).
        assert!(
            a.before <= a.start,
            "start {} is before sequence {}, published before the attach began",
            a.start,
            a.before - 1
        );
        let p = producer.join().unwrap();
        dier.join().unwrap();
        // The stop as it was finished (by another process if nobody met it).
        let settled = m.ring.line().settle(&env(2, true)).expect("settled");
        assert_eq!(settled.state, Some(RingState::Stopped));
        let stop = m.ring.line().closed_at().expect("stopped");
        start_and_read_past(&m, a, p, stop);
    });
    assert_reached(&finished_seen, "had the attach finish the dead stop");
}

#[test]
fn an_attach_meeting_a_dead_stoppers_stop_finishes_it_and_starts_at_its_position() {
    attach_meeting_a_dead_stop(Start::Folded);
}

/// The stop's bound below the position taken as the start (not waited for, as a poll
/// takes it): an attach that meets the dead stop after 2 was accepted starts at 2, an event
/// published before it began (and below the gate the producer's scan may have used).
#[test]
#[should_panic(expected = "published before the attach began")]
fn control_an_attach_taking_a_stops_bound_starts_below_the_position() {
    attach_meeting_a_dead_stop(Start::Bound);
}

/// How a released consumer gates again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Regate {
    /// As `Consumer::jump_to_head`: only once a look found the position decided, the
    /// position after the CAS decided too (else released again).
    Decided,
    /// Control: whatever the position's bound says, a stop in progress or not (a poll's
    /// `Segment::position`).
    Bound,
}

impl<const N: usize> Model<N> {
    /// The consumer's entry, released by the broker while its holder (process 4) read at
    /// `next`; its holder's word is returned.
    fn release_entry(&self, next: u64) -> u64 {
        let held = owned_word::pack(2, consumer_state::ACTIVE, 4);
        self.word
            .store(table::consumer::released(held), Ordering::Relaxed);
        self.next.store(next, Ordering::Relaxed);
        self.first.store(next, Ordering::Relaxed);
        held
    }

    /// The bound below the head a consumer that does not gate moves up to
    /// (`Segment::position`).
    fn below(&self) -> u64 {
        match fixed::position(&self.ring) {
            fixed::Position::Decided(p) => p,
            fixed::Position::Closing { below, .. } => below,
        }
    }

    /// `Consumer::jump_to_head` polled until the consumer gates again, its holder's word
    /// `held`: a look that does not wait (`fixed::start_position`, giving up at once);
    /// decided, the shipping `graph::gate_again` (the look after the CAS as `how` says);
    /// not gated, up to the bound below the head, and again at a later poll. Marks
    /// `again` when an entry gated is released again.
    fn regate(&self, held: u64, how: Regate, again: &std::sync::atomic::AtomicBool) -> Attached {
        // Acquire: pairs with the producer's Release store of the marker.
        let before = self.published_to.load(Ordering::Acquire);
        // Relaxed: this thread's own store.
        let provisional = self.next.load(Ordering::Relaxed);
        let polling = Consumer4::polling();
        let mut word = held;
        loop {
            let decided = fixed::start_position(&self.ring, &polling).is_ok();
            if decided || how == Regate::Bound {
                let start = || match how {
                    Regate::Decided => fixed::start_position(&self.ring, &polling),
                    Regate::Bound => Ok(self.below()),
                };
                match graph::gate_again(
                    &self.word,
                    &self.flags,
                    table::consumer::released(word),
                    start,
                    || fence(Ordering::SeqCst),
                ) {
                    graph::Regated::Gated { head, .. } => {
                        // Relaxed: this thread's own store.
                        if head > self.next.load(Ordering::Relaxed) {
                            graph::jump(&self.first, &self.next, head);
                        }
                        graph::started(&self.flags);
                        // Release: pairs with the producer's Acquire load of the marker.
                        self.attached.store(1, Ordering::Release);
                        return Attached {
                            before,
                            provisional,
                            start: head,
                        };
                    }
                    graph::Regated::ReleasedAgain { word: w } => {
                        reached(again);
                        word = w;
                    }
                    graph::Regated::Moved => unreachable!("nobody else changes the entry"),
                }
            }
            let below = self.below();
            // Relaxed: this thread's own store.
            if below > self.next.load(Ordering::Relaxed) {
                graph::jump(&self.first, &self.next, below);
            }
            thread::yield_now();
        }
    }
}

/// A consumer released by the broker at 1 gates again on a running ring of two slots (0
/// and 1 published) while the producer publishes 2 and 3 (once each, its cached gate at 1
/// from a scan before the release: 3 needs a scan) and another process stops the ring.
/// Then the ring starts again and the producer publishes what the stop refused. The
/// consumer gates again at the head, as an attach starts: at or after every event
/// published before it began (producers did not hold back for it while it was released, so
/// what lies below may be overwritten) and every head a scan that missed it used, at or
/// before every event claimed after it; it reads exactly the accepted events from there.
/// Some interleaving has the consumer gate, then find a stop undecided and release itself
/// again.
fn regate_racing_a_stop(how: Regate) {
    let again = witness();
    let again_seen = again.clone();
    model(move || {
        let m = Arc::new(Model::<2>::running(2));
        let held = m.release_entry(1);
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::new(2, Head::Next);
                p.cached_gate = 1;
                // 3 waits for the consumer at most one scan: gated at 1, it reads only
                // after this thread is done.
                if p.publish(&m, 1).is_ok() {
                    let _ = p.try_publish(&m, 1, 1);
                }
                p
            })
        };
        let stopper = {
            let m = m.clone();
            thread::spawn(move || {
                m.ring
                    .line()
                    .close(&env(2, true), RingState::Stopped)
                    .expect("stop")
                    .0
            })
        };
        let a = m.regate(held, how, &again);
        let mut p = producer.join().unwrap();
        let stop = stopper.join().unwrap();
        // Both lower bounds in one check: the control breaks one or the other, as the
        // interleaving has it.
        let missed = p
            .scans
            .iter()
            .filter(|s| !s.saw_entry)
            .map(|s| s.gate)
            .max();
        assert!(
            a.before <= a.start && missed.is_none_or(|g| g <= a.start),
            "gates again at {}, below the head: {} published before it began, a scan that \
             missed it gated at {missed:?}",
            a.start,
            a.before
        );
        assert_eq!(m.ring.line().reopen(&env(2, true)), Ok(stop), "started");
        // What was accepted so far, then the rest (the consumer's reads let the producer
        // past it).
        let mut got = m.read(a.start, p.next);
        while p.next < 4 {
            p.publish(&m, 2).expect("the ring runs again");
        }
        check_start(a, &p.after_attach);
        got.extend(m.read(a.start.max(stop), 4));
        let mut accepted = vec![(0, 0), (1, 1)];
        accepted.extend(p.accepted);
        check_read(a, &got, &accepted, 4);
    });
    assert_reached(&again_seen, "released a consumer again after it gated");
}

#[test]
fn a_released_consumer_gating_again_racing_a_stop_starts_past_every_scan_that_missed_it() {
    regate_racing_a_stop(Regate::Decided);
}

/// Gating again at the bound below the head while a stop is in progress: after 2 was
/// accepted (and a scan that missed the entry gated at 3), the consumer gates at 2, the
/// cursor before the claim the stop decides.
#[test]
#[should_panic(expected = "below the head")]
fn control_a_released_consumer_gating_again_at_a_stops_bound() {
    regate_racing_a_stop(Regate::Bound);
}

// Resuming a durable entry (`Consumer::resume`) on this ring: a process takes over a
// required entry a dead holder left, while the producer publishes, raising its write horizon
// before each claim as the client does. The resume runs the shipping steps in their order:
// the look at the entry (its word, then its position), the line's position
// (`fixed::start_position`) and the look at the old position's slot (`fixed::lapped`,
// `Segment::lapped` on this ring: the write horizon past the position plus the capacity),
// then the shipping `graph::resume` (the take-over CAS, the SeqCst fence, the kept position
// or a fresh attach's start, the SeqCst fence after its CAS as in `Model::attach`).
//
// Why a gating entry is never taken for lapped: the horizon says which sequences may have
// been written, and the producer raises it only to what the wrap gate passed, which an
// entry gating at `next` bounds by `next + capacity`; the look then reads at most that, which
// `fixed::overwritten` does not count as lapped. A horizon raised past the gate (the
// control) makes a resume of a gating entry start afresh past events it still holds.

/// The dead holder of the entry a resume takes over.
const DEAD_HOLDER: u32 = 7;

/// How a resume looks at its old position's slot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotLook {
    /// `fixed::lapped`, as `Consumer::resume`.
    Horizon,
    /// Control: the slot not looked at (never lapped).
    Ignored,
}

impl<const N: usize> Model<N> {
    /// A running ring with the sequences below `published` published (a lapped slot holds
    /// the later lap's `(seq, seq)`), the write horizon at `horizon`, and its consumer entry
    /// held by a dead process in `state` at `next`.
    fn held(state: u32, next: u64, published: u64, horizon: u64) -> Self {
        let m = Model::running(published);
        m.ring.horizon.store(horizon, Ordering::Relaxed);
        m.word
            .store(owned_word::pack(1, state, DEAD_HOLDER), Ordering::Relaxed);
        m.next.store(next, Ordering::Relaxed);
        m.first.store(next, Ordering::Relaxed);
        m
    }

    /// `Consumer::resume` of the entry (required, its holder dead): the look, then the
    /// shipping `graph::resume`. Returns whether it kept the position, and where it started.
    fn resume(&self, slot: SlotLook) -> (bool, Attached) {
        // Acquire: pairs with the producer's Release store of the marker.
        let before = self.published_to.load(Ordering::Acquire);
        // Acquire: as `resume`'s look at the word.
        let seen = self.word.load(Ordering::Acquire);
        // Acquire: as `resume`'s look at the flags (pairs with `graph::started`).
        let flags = self.flags.0.load(Ordering::Acquire);
        // Acquire: pairs with the last holder's Release commit.
        let old_next = self.next.load(Ordering::Acquire);
        let env = env(4, true);
        let head = start_position(&self.ring, &env);
        let look = graph::Look {
            seen,
            flags,
            next: old_next,
            head,
            lapped: slot == SlotLook::Horizon
                && old_next <= head
                && fixed::lapped(&self.ring, old_next),
        };
        let resumed = graph::resume(
            &self.next,
            &self.first,
            &self.word,
            CONSUMER,
            &look,
            true,
            || Some(start_position(&self.ring, &env)),
            || fence(Ordering::SeqCst),
            |_| (),
            // The fence after the CAS to ACTIVE, as in `Model::attach`.
            || fence(Ordering::SeqCst),
        )
        .expect("nobody else changes the entry and the ring runs");
        let (kept, provisional, start) = match resumed {
            graph::Resumed::Kept { .. } => (true, old_next, old_next),
            graph::Resumed::Started(s) => (false, s.provisional, s.start),
        };
        // Release: pairs with the producer's Acquire load of the marker.
        self.attached.store(1, Ordering::Release);
        (
            kept,
            Attached {
                before,
                provisional,
                start,
            },
        )
    }
}

/// A process resumes the required entry a dead holder left in `state` at 0, on a ring of
/// two slots whose sequences below `published` are published (the horizon at `horizon`),
/// and reads up to the third event the producer publishes meanwhile (raising its horizon
/// as `arm` says). A gating entry (a dead holder's ACTIVE or DETACHED word) whose slot was
/// not overwritten keeps its position and reads every event from it intact; a RELEASED one,
/// or one whose slot a later lap overwrote, starts as a fresh attach starts. Every scan that
/// missed the entry gated at or below the start.
fn resume_racing_publishes(
    state: u32,
    published: u64,
    horizon: u64,
    arm: Arm,
    slot: SlotLook,
    kept: bool,
) {
    model(move || {
        let m = Arc::new(Model::<2>::held(state, 0, published, horizon));
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::arming(published, arm);
                for s in published..published + 3 {
                    p.publish(&m, s).expect("the ring runs");
                }
                p
            })
        };
        let (was_kept, a) = m.resume(slot);
        assert_eq!(was_kept, kept, "kept the position or not, from {a:?}");
        let to = published + 3;
        let got = m.read(a.start, to);
        let p = producer.join().unwrap();
        if !kept {
            check_start(a, &p.after_attach);
        }
        check_scans(a, &p.scans);
        let mut accepted: Vec<(u64, u64)> = (0..published).map(|s| (s, s)).collect();
        accepted.extend(p.accepted);
        check_read(a, &got, &accepted, to);
    });
}

#[test]
fn a_resume_of_a_detached_entry_keeps_its_position_while_the_producer_raises_its_horizon() {
    resume_racing_publishes(
        consumer_state::DETACHED,
        1,
        1,
        Arm::Gated,
        SlotLook::Horizon,
        true,
    );
}

#[test]
fn a_resume_of_a_dead_active_entry_keeps_its_position_while_the_producer_raises_its_horizon() {
    resume_racing_publishes(
        consumer_state::ACTIVE,
        1,
        1,
        Arm::Gated,
        SlotLook::Horizon,
        true,
    );
}

#[test]
fn a_resume_of_a_released_entry_starts_afresh_on_a_fixed_size_ring() {
    resume_racing_publishes(
        consumer_state::RELEASED,
        1,
        1,
        Arm::Gated,
        SlotLook::Horizon,
        false,
    );
}

/// A DETACHED entry at 0 whose slot holds 2 (its holder was released, lapped, then
/// detached), the horizon at 3 from the write of 2: it starts afresh.
#[test]
fn a_resume_of_an_entry_lapped_before_it_detached_starts_afresh_on_a_fixed_size_ring() {
    resume_racing_publishes(
        consumer_state::DETACHED,
        3,
        3,
        Arm::Gated,
        SlotLook::Horizon,
        false,
    );
}

/// A horizon raised past what the gate passed: the resume of a gating entry takes its
/// position for lapped and starts afresh past an event it still holds.
#[test]
#[should_panic(expected = "kept the position or not")]
fn control_a_horizon_raised_past_the_gate_makes_a_gating_entry_look_lapped() {
    resume_racing_publishes(
        consumer_state::DETACHED,
        1,
        1,
        Arm::Ungated,
        SlotLook::Horizon,
        true,
    );
}

/// Without the look at the horizon, the lapped DETACHED entry keeps a position whose slot
/// holds a later sequence.
#[test]
#[should_panic(expected = "were accepted")]
fn control_a_resume_that_does_not_look_at_the_horizon_keeps_a_lapped_position() {
    resume_racing_publishes(
        consumer_state::DETACHED,
        3,
        3,
        Arm::Gated,
        SlotLook::Ignored,
        true,
    );
}

// A released consumer's holder that dies as it gates again (`Consumer::jump_to_head`):
// after `graph::gate_again`'s CAS to ACTIVE, before it stores the head. Its entry then
// gates at the old position, which producers did not respect while it was released: a gate
// cached from a scan then lets the producer write a ring past it without another scan, so
// a takeover that kept the position would read slots being overwritten (a required
// consumer on a fixed-size ring reads in place and does not look for laps). `gate_again`
// flags the entry `STARTING` before its CAS, so the takeover starts afresh, as after an
// attach that died before storing its start. Its control leaves the flags unmarked: some
// interleaving's resume looks at the horizon before the producer raises it past the old
// position's lap, keeps the position, and reads 2 where 0 was.

/// How the dying holder's `graph::gate_again` marks the entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// The entry's flags word, as `Consumer::jump_to_head` passes it.
    Starting,
    /// Control: a flags word it cannot mark.
    Unmarked,
}

impl<const N: usize> Model<N> {
    /// The holder (its word `held`) gates again, as `Consumer::jump_to_head` after a look
    /// that found the position decided, and dies before it stores the head.
    fn regate_and_die(&self, held: u64, mark: Mark) {
        let polling = Consumer4::polling();
        let start = || fixed::start_position(&self.ring, &polling);
        let released = table::consumer::released(held);
        let after_cas = || fence(Ordering::SeqCst);
        let regated = match mark {
            Mark::Starting => {
                graph::gate_again(&self.word, &self.flags, released, start, after_cas)
            }
            Mark::Unmarked => graph::gate_again(&self.word, &Unmarked, released, start, after_cas),
        };
        assert!(
            matches!(regated, graph::Regated::Gated { .. }),
            "the ring runs and nobody else changes the entry"
        );
    }
}

/// A consumer released at 0 on a ring of two slots (0 and 1 published, the horizon at 2);
/// the producer, its gate cached at 2 from a scan while the entry was released, publishes
/// 2 and 3 without another scan, raising its horizon as the client does. The holder gates
/// again and dies before it stores the head; a process resumes the entry and reads up to 3.
fn a_holder_dying_as_it_gates_again(mark: Mark) {
    model(move || {
        let m = Arc::new(Model::<2>::running(2));
        m.ring.horizon.store(2, Ordering::Relaxed);
        let held = m.release_entry(0);
        let producer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut p = Producer::arming(2, Arm::Gated);
                p.cached_gate = 2;
                for s in 2..4 {
                    p.publish(&m, s).expect("the ring runs");
                }
                p
            })
        };
        m.regate_and_die(held, mark);
        let (kept, a) = m.resume(SlotLook::Horizon);
        let got = m.read(a.start, 4);
        // The producer needs no scan: it ends whatever the consumer does.
        let p = producer.join().unwrap();
        if !kept {
            check_start(a, &p.after_attach);
        }
        check_scans(a, &p.scans);
        let mut accepted = vec![(0, 0), (1, 1)];
        accepted.extend(p.accepted);
        check_read(a, &got, &accepted, 4);
        // The control fails above, where its read comes after the overwrite.
        assert!(
            mark == Mark::Unmarked || !kept,
            "kept the old position {}, which producers did not respect while it was released",
            a.start
        );
    });
}

#[test]
fn a_holder_dying_as_it_gates_again_is_resumed_afresh() {
    a_holder_dying_as_it_gates_again(Mark::Starting);
}

/// The control reads an overwritten slot: the slot of 0 holding 2.
#[test]
#[should_panic(expected = "were accepted")]
fn control_a_holder_dying_as_it_gates_again_unmarked_reads_an_overwritten_slot() {
    a_holder_dying_as_it_gates_again(Mark::Unmarked);
}
