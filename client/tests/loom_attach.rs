//! Loom models of a consumer attaching while producers claim and compute the wrap gate (the
//! attach protocol in `client/src/gating.rs`), on loom's atomics through the `Word` trait:
//! first on a multi-producer ring, then on a single-producer ring, where the line's
//! position is defined differently.
//!
//! ## Multi-producer rings
//!
//! The consumer's side runs the shipping code: `table::consumer::set` (the SeqCst CAS of its
//! entry to ACTIVE) and `line::Line::position` (the SeqCst load of its start), then the
//! Release store of its `next`, as `Consumer::attach` does. The producer's claim is the
//! shipping `Line::claim_multi`. The gate scan is the shipping `gating::gate` (what
//! `gating::scan` runs on the segment's table), after the position (SeqCst,
//! `Line::position`): the entry's state (SeqCst), flags and `next` (Acquire).
//!
//! ```text
//! consumer (attach)                 producer (claim)        producer (scan)
//! set(word, ACTIVE)      (SeqCst)   claim.fetch_add(1)     head = position() (SeqCst)
//! start = position()     (SeqCst)            (SeqCst)      state = word      (SeqCst)
//! next = start           (Release)                         gate = min(head, next if state gates)
//! ```
//!
//! Property: the scan allows claims below `gate + capacity`, so every claim it allows lies
//! below `start + capacity` (the new consumer's first slot is never overwritten) exactly
//! when `gate <= start`.
//!
//! loom runs SeqCst accesses as Acquire/Release, so the half of that argument that rests on
//! the single SeqCst total order (a scan that does not see the entry ACTIVE read a position
//! at most the start) is outside what it checks. The half it can check is modelled: a scan
//! that reads the entry ACTIVE (its SeqCst load synchronizes with the CAS) also reads a
//! `next` at most the start. The shipping attach stores a provisional `next` (the position
//! read just before the CAS) for exactly this. The control that stores none (a `next` above
//! every sequence until the start is stored) must fail it: a claim between the consumer's
//! load of its start and the scan's load of the position moves the scan's own gate past
//! the start (found: gate 1, start 0), an interleaving SeqCst allows as well.
//!
//! Second control (`#[should_panic]`): a scan that reads the entry before the position (with
//! the provisional start). It can miss the ACTIVE store and still read a position taken
//! after the consumer's start.
//!
//! ## Single-producer rings
//!
//! A single producer claims with a plain store of its position ((p1) to (p5) in `line.rs`),
//! and while the line runs or is stopping, `Line::position` steps back from that position
//! over the slots of its last claim that are not stamped yet: a racing stop may still
//! refuse that claim, and then the next start takes it back. The producer runs the
//! shipping `line::claim_single_fast` and `Line::finish_claim_single`, then waits at the
//! wrap gate (its cached gate, else a scan: the SeqCst fence, `Line::position`, the shipping
//! `gating::gate`), writes its event and stamps it. The attach is `Consumer::fresh`'s own
//! `graph::start_fresh`: the provisional position (`graph::provisional_position`), the CAS
//! to ACTIVE (`table::consumer::set`), the start read from `Line::position` with the
//! segment's `published` (`Segment::reached`: the slot holds that sequence or a later one),
//! at least the provisional position, `next = start`. The ring has two slots. What the models check,
//! in every interleaving (the "no lap" half in the models whose producer reads on past the
//! start, and after a scan while stopped):
//!
//! - **from below**: the start is at or after every sequence published before the attach
//!   began, and at or after the provisional position (a scan that read the entry ACTIVE
//!   before the start was stored gated there, and may have let the producer lap what lies
//!   below);
//! - **from above**: the start is at or before every event claimed after the attach
//!   returned and, on a running ring, every event stamped after it (the look-back: a claim
//!   not stamped yet at the attach is received);
//! - **no lap**: the consumer, reading from its start, finds every event intact: the
//!   producer overwrites no slot it is entitled to before it has read it, and a scan that
//!   did not see the entry computed a gate at most the start. That half rests on the single
//!   SeqCst total order of the CAS and the position's load, which loom does not model: a
//!   SeqCst fence after the CAS stands in for it (the locked CAS is one on x86_64);
//! - **stop**: raced against a stop (a claim refused, its position left past the stop) and
//!   a start (which takes it back), an attach that read the line before the restarted run
//!   starts at or before the stop sequence, and the next run's first event, at the stop
//!   sequence, is delivered to it.
//!
//! The controls read the start without the look-back (loom finds it one past the stop,
//! reading a refused claim's position while the ring stops) and as the claim word itself
//! (the same, before the start takes the claim back).
//!
//! ## What these models found: an attach below its provisional position
//!
//! The attach used to step back over every slot not holding its own sequence and to take
//! the position it read after the CAS as its start. Loom found two interleavings where that
//! start was below the provisional position the entry had already gated at, so that the
//! producer could lap the start:
//!
//! ```text
//! 1. consumer (attach)                                producer
//!    provisional: claim 1, slot 0 holds 0: 1; next = 1
//!    CAS ACTIVE; start: claim = 1
//!                                                     publish 1; claim 2, scan: next 1,
//!                                                     gate 1, slot 0 <- 2, stamp
//!    start: slot 0 holds 2, not 0: steps back to 0
//!    next = 0; slot 0 is lapped
//!
//! 2. producer: claim 0 accepted (the stop read 1), not stamped yet
//!    consumer: provisional, line Stopped: stop_seq 1; next = 1; CAS ACTIVE
//!    starter:  Running
//!    consumer: start, line Running: claim 1, slot 0 not stamped: steps back to 0; next = 0
//!    (a scan between the two stores gates at 1: the producer stamps 0, publishes 1 and 2
//!    into slot 0, and the consumer at 0 finds it lapped)
//! ```
//!
//! A required consumer that finds its slot lapped goes to the head (`jump_to_head`), past 1
//! and 2, which were claimed after its start was read: they were lost to it and counted as
//! `dropped_behind`. The fix has two parts, each needed: (a) the look-back ends at a slot
//! that holds a later lap (a lapped slot is a published sequence, never a claim still to be
//! stamped): `Segment::position` passes `reached` (`stamp::reached`; a fixed-size ring's
//! `seq < cursor`) where it passed `is_done`; (b) the attach starts at least at its
//! provisional position (`graph::start_fresh`, which `Consumer::fresh` and `resume` run:
//! `start.max(provisional)`). The controls
//! `control_an_attach_whose_look_back_steps_over_a_lap_starts_below_its_gate` (the
//! attach as it was) and `control_an_attach_below_its_provisional_position_across_a_start`
//! ((a) alone) fail. (b) alone passes these models, but not a ring of four slots where a
//! scan that did not see the entry yet gated at 4 (the provisional position was 3, read
//! before sequence 3 was stamped), the start reads the claim word 5, slot 4 not stamped
//! yet, then slot 3 already lapped by 7, and steps back to 3 (found at preemption bound 3,
//! too slow to keep here). Since the position steps back from the stop sequence too while
//! the line is closed (so it never goes down across a start), the floor at the provisional
//! position is not needed by these models: `graph::start_fresh` without it passes them all.
//! It stays, a second guard that costs a compare. Without its provisional store, two of
//! them fail (`a_scan_that_sees_the_attaching_entry_gates_at_or_before_its_start` and
//! `single_producer_attach_racing_claims_that_lap_the_ring`): the models run that function
//! itself, so a change to it is a change to what they check.
//!
//! A review then found a third way down, which `single_producer_attach_after_a_scan_while_stopped`
//! models: a producer waiting for room for a claim the stop accepted scans while the ring
//! is stopped and gates at the stop sequence; after a start, an attach's position steps
//! back over that claim's unstamped slots, below the gate, in both of its reads. The
//! position now steps back from the stop sequence too while the line is closed, so it never
//! goes down across a start (`control_a_scan_at_the_stop_sequence_gates_above_a_later_attach`
//! fails without it); with that, part (b) is a second guard.
//!
//! ## Resuming a durable entry
//!
//! `Consumer::resume` takes over a required entry whose holder died (or detached, or the
//! broker released it) while the producer publishes on the two slots. It runs the shipping
//! steps: the look at the entry and the line (`gated`: `table::consumer::gated_required`
//! and a slot not lapped), the take-over CAS (`table::consumer::take_over`: RESUMING, still
//! gating, where the entry gated; REATTACHING where it did not), the SeqCst fence, then the
//! kept position (`table::consumer::keeps_position`, the CAS to ACTIVE) or a fresh attach's
//! start (`graph::start_fresh`, the same function `Consumer::fresh` runs). A kept position
//! is read intact from the start (the entry gated there throughout); a new start meets the
//! bounds of a fresh attach. The controls fail: a take-over that stops gating for a moment
//! (a scan in that moment lets the producer lap the kept position), a released entry that
//! keeps its position, and a resume that does not look at the slot of a lapped entry.

mod loom_env;
mod loom_seen;
mod loom_word;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_env::env;
use loom_seen::{Seen, REQUIRED_PASS};
use loom_word::{model, W};

use shmring::gating::{self, Flags};
use shmring::graph;
use shmring::line::{self, Line, Refused, SeenRunning, Word};
use shmring::table;
use shmring_layout::{consumer_flags, consumer_state, lifecycle, owned_word, stamp, RingState};

/// The control's `next` before the start is stored: above every sequence.
const UNSET: u64 = u64::MAX;

const CAPACITY: u64 = 4;
const CONSUMER: u32 = 1;

/// The new consumer's flags: required (written before the model starts).
struct Required;

impl Flags for Required {
    fn load(&self, _: Ordering) -> u32 {
        consumer_flags::REQUIRED
    }
}

struct Ring {
    claim: W,
    lifecycle: W,
    stop_seq: W,
    /// The new consumer's entry: its word, its position and the start of what it read.
    word: W,
    next: W,
    first: W,
}

impl Ring {
    /// A running multi-producer line at `head`, and one consumer entry CLAIMED by the
    /// attaching consumer (not gating yet, no position).
    fn new(head: u64) -> Self {
        Ring {
            claim: W::new(head),
            lifecycle: W::new(lifecycle::pack(0, RingState::Running as u32, 0)),
            stop_seq: W::new(0),
            word: W::new(owned_word::pack(1, consumer_state::CLAIMED, CONSUMER)),
            next: W::new(UNSET),
            first: W::new(UNSET),
        }
    }

    fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.lifecycle,
            stop_seq: &self.stop_seq,
            single: false,
            max_claim: CAPACITY / 2,
            lone: &shmring::line::NoLone,
        }
    }

    /// `Consumer::fresh`'s last steps: ACTIVE, then the start. Returns the start.
    /// `provisional`: the shipping steps (`graph::start_fresh`, which stores the position
    /// read before the CAS as `next`); without it, the control: the same steps with no
    /// provisional position, written out.
    fn attach(&self, provisional: bool) -> u64 {
        let mine = self.word.load(Ordering::Acquire);
        if provisional {
            return graph::start_fresh(
                &self.next,
                &self.first,
                &self.word,
                mine,
                || Some(self.line().position(|_| true)),
                || (),
                || (),
            )
            .expect("nobody else changes the entry")
            .start;
        }
        table::consumer::set(&self.word, mine, consumer_state::ACTIVE)
            .expect("nobody else changes the entry");
        let start = self.line().position(|_| true);
        // Release: pairs with the scan's Acquire load of `next`.
        self.next.store(start, Ordering::Release);
        start
    }

    /// A producer's gate scan over this one entry: the shipping `gating::gate` after the
    /// position. `entry_first` is the control: a copy that reads the entry before the
    /// position. Returns the gate, and whether the scan read the entry gating.
    fn scan(&self, entry_first: bool) -> (u64, bool) {
        if entry_first {
            // SeqCst: as in `gating::gate`.
            let state = owned_word::state(self.word.load(Ordering::SeqCst));
            // Acquire: as in `gating::gate`.
            let next = consumer_state::gates(state).then(|| self.next.load(Ordering::Acquire));
            let head = self.line().position(|_| true);
            return (next.map_or(head, |n| head.min(n)), next.is_some());
        }
        let head = self.line().position(|_| true);
        let (word, next) = (Seen::new(&self.word), Seen::new(&self.next));
        let gate = gating::gate(head, || std::iter::once((&word, &Required, &next)), 0);
        (gate, word.saw_gating(REQUIRED_PASS))
    }
}

/// The attach racing a claim and a scan; `claims` producers each take one sequence.
fn attach_against_a_scan(entry_first: bool, provisional: bool, claims: usize) {
    model(move || {
        let ring = Arc::new(Ring::new(0));
        let consumer = {
            let ring = ring.clone();
            thread::spawn(move || ring.attach(provisional))
        };
        let producers: Vec<_> = (0..claims)
            .map(|_| {
                let ring = ring.clone();
                thread::spawn(move || {
                    ring.line().claim_multi(1).expect("the line is open");
                })
            })
            .collect();
        let (gate, saw_entry) = ring.scan(entry_first);
        let start = consumer.join().unwrap();
        for p in producers {
            p.join().unwrap();
        }
        assert!(
            gate <= start || !saw_entry,
            "first slot overwritten by a scan that saw the entry gating: it computed gate \
             {gate}, allowing sequence {} = start {start} + capacity {CAPACITY}",
            gate + CAPACITY - 1
        );
        // The full property rests on the SeqCst total order, which loom does not model (see
        // the module comment): checked only for the control.
        assert!(
            gate <= start || !entry_first,
            "first slot overwritten: a scan computed gate {gate}, allowing sequence {} \
             = start {start} + capacity {CAPACITY}",
            gate + CAPACITY - 1
        );
    });
}

#[test]
fn a_scan_that_sees_the_attaching_entry_gates_at_or_before_its_start() {
    attach_against_a_scan(false, true, 1);
    attach_against_a_scan(false, true, 2);
}

#[test]
#[should_panic(expected = "first slot overwritten by a scan that saw the entry gating")]
fn control_an_attach_without_a_provisional_position_is_lapped() {
    attach_against_a_scan(false, false, 1);
}

#[test]
#[should_panic(expected = "first slot overwritten")]
fn control_a_scan_reading_the_entry_before_the_position_laps_the_new_consumer() {
    attach_against_a_scan(true, true, 1);
}

// Single-producer rings (see the module comment): the attach races the producer's claims,
// its wrap gate, a stop and a start.

/// The single-producer models' ring: two slots, so that the third claim laps the first;
/// a claim takes one sequence (`max_claim`, capacity / 2).
const SP_CAPACITY: u64 = 2;
const SLOTS: usize = SP_CAPACITY as usize;

/// A slot that was never written.
const EMPTY: u64 = shmring_layout::STAMP_EMPTY;

/// How a single-producer model's attach reads the line's position.
#[derive(Clone, Copy)]
enum Position {
    /// The shipping `Segment::position`: `Line::position` whose look-back steps back over a
    /// slot only while it is pending (`stamp::reached` false, as `Segment::reached`): a slot
    /// that holds a later lap ends it.
    Shipping,
    /// Control: the look-back as it was, stepping back over every slot that does not hold
    /// its own sequence (`stamp::is_done` false), a slot a later lap overwrote included.
    OverLaps,
    /// Control: the position as it was while the line is closed, the stop sequence itself
    /// (no look-back over an accepted claim not stamped yet), else `Shipping`.
    ClosedAtTheStop,
    /// Control: `Line::position` without the look-back (every slot reads as published).
    NoLookBack,
    /// Control: the claim word itself.
    RawClaim,
}

/// How a single-producer model's attach takes its start.
#[derive(Clone, Copy)]
struct Start {
    position: Position,
    /// The start is at least the provisional position read before the CAS to ACTIVE.
    at_least_provisional: bool,
}

/// The shipping attach (`Consumer::fresh`).
const SHIPPING: Start = Start {
    position: Position::Shipping,
    at_least_provisional: true,
};

/// A single-producer ring, one consumer entry (CLAIMED by the attaching consumer) and the
/// models' two markers.
struct Sp {
    claim: W,
    lifecycle: W,
    stop_seq: W,
    word: W,
    next: W,
    first: W,
    stamps: [W; SLOTS],
    /// Each slot's event: the sequence it was written for.
    payloads: [W; SLOTS],
    /// Marker: 1 once the attach has returned (stored after the start).
    attached: W,
    /// Marker: one past the last sequence stamped (stored after the stamp).
    stamped_to: W,
}

/// Where an attach started, and what its bounds are checked against.
#[derive(Clone, Copy)]
struct Attached {
    /// `stamped_to` when the attach began: everything below was published before it.
    before: u64,
    /// The provisional position stored as `next` before the CAS to ACTIVE.
    provisional: u64,
    start: u64,
}

/// A scan as the producer ran it: the gate, and whether its pass over the required entries
/// saw the new entry gating.
struct Scan {
    gate: u64,
    saw_entry: bool,
}

fn slot(s: u64) -> usize {
    (s % SP_CAPACITY) as usize
}

fn running() -> u64 {
    lifecycle::pack(0, RingState::Running as u32, 0)
}

impl Sp {
    /// A single-producer ring whose lifecycle word is `life` and claim word `claim`, with
    /// the sequences in `published` published (at most one lap).
    fn new(life: u64, claim: u64, published: std::ops::Range<u64>) -> Self {
        let ring = Sp {
            claim: W::new(claim),
            lifecycle: W::new(life),
            stop_seq: W::new(0),
            word: W::new(owned_word::pack(1, consumer_state::CLAIMED, CONSUMER)),
            next: W::new(UNSET),
            first: W::new(UNSET),
            stamps: std::array::from_fn(|_| W::new(EMPTY)),
            payloads: std::array::from_fn(|_| W::new(EMPTY)),
            attached: W::new(0),
            stamped_to: W::new(published.end),
        };
        for s in published {
            ring.payloads[slot(s)].store(s, Ordering::Relaxed);
            ring.stamps[slot(s)].store(s, Ordering::Relaxed);
        }
        ring
    }

    /// A ring stopped at `stop` whose claim word is `claim` (past the stop: a refused
    /// claim's position; at it: the last accepted claim's), its sequences below `published`
    /// published.
    fn stopped(stop: u64, claim: u64, published: u64) -> Self {
        let stopped = lifecycle::pack(2, RingState::Stopped as u32, 0);
        let ring = Sp::new(stopped, claim, 0..published);
        ring.stop_seq.store(stop, Ordering::Relaxed);
        ring
    }

    fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.lifecycle,
            stop_seq: &self.stop_seq,
            single: true,
            max_claim: SP_CAPACITY / 2,
            lone: &shmring::line::NoLone,
        }
    }

    /// The stamp of `s`'s slot, as a reader expecting `s` reads it. Acquire: pairs with
    /// the Release stamp store in `SpProducer::finish`.
    fn stamp(&self, s: u64) -> stamp::Stamp {
        stamp::read(self.stamps[slot(s)].load(Ordering::Acquire), s)
    }

    /// `Segment::is_done`: `s` is published.
    fn published(&self, s: u64) -> bool {
        self.stamp(s) == stamp::Stamp::Published
    }

    /// The line's position as `how` reads it.
    fn position(&self, how: Position) -> u64 {
        match how {
            // Acquire: as in `stamp`.
            Position::Shipping => self
                .line()
                .position(|s| stamp::reached(self.stamps[slot(s)].load(Ordering::Acquire), s)),
            Position::OverLaps => self.line().position(|s| self.published(s)),
            Position::ClosedAtTheStop => match self.line().closed_at() {
                Some(stop) => stop,
                None => self.position(Position::Shipping),
            },
            Position::NoLookBack => self.line().position(|_| true),
            // SeqCst: as in `Line::position`.
            Position::RawClaim => self.claim.load(Ordering::SeqCst),
        }
    }

    /// `Consumer::fresh`'s attach, `graph::start_fresh` (the controls without its floor at
    /// the provisional position: the same steps, written out). `total_order`: a SeqCst fence
    /// after the CAS stands in for the single total
    /// order of the CAS and the position's SeqCst load, which loom does not model (on
    /// x86_64 the locked CAS is such a fence).
    fn attach(&self, how: Start, total_order: bool) -> Attached {
        // Acquire: pairs with the producer's Release store after its stamp.
        let before = self.stamped_to.load(Ordering::Acquire);
        let mine = self.word.load(Ordering::Acquire);
        let after_cas = || {
            if total_order {
                fence(Ordering::SeqCst);
            }
        };
        let (provisional, start) = if how.at_least_provisional {
            // The shipping start itself.
            let started = graph::start_fresh(
                &self.next,
                &self.first,
                &self.word,
                mine,
                || Some(self.position(how.position)),
                || (),
                after_cas,
            )
            .expect("nobody else changes the entry");
            (started.provisional, started.start)
        } else {
            // The control: `start_fresh` without its floor at the provisional position.
            let provisional = self.position(how.position);
            graph::provisional_position(&self.next, provisional);
            table::consumer::set(&self.word, mine, consumer_state::ACTIVE)
                .expect("nobody else changes the entry");
            after_cas();
            let start = self.position(how.position);
            // Release: pairs with the scan's Acquire load of `next`.
            self.next.store(start, Ordering::Release);
            (provisional, start)
        };
        // Release: pairs with the producer's Acquire load of the marker.
        self.attached.store(1, Ordering::Release);
        Attached {
            before,
            provisional,
            start,
        }
    }

    /// `gating::scan` on a single-producer ring: the SeqCst fence, the position, then the
    /// shipping `gating::gate` over the one entry.
    fn scan(&self) -> Scan {
        self.scan_with(Position::Shipping)
    }

    /// `scan` with the position read as `how` reads it.
    fn scan_with(&self, how: Position) -> Scan {
        fence(Ordering::SeqCst);
        let head = self.position(how);
        let (word, next) = (Seen::new(&self.word), Seen::new(&self.next));
        let gate = gating::gate(head, || std::iter::once((&word, &Required, &next)), 0);
        Scan {
            gate,
            saw_entry: word.saw_gating(REQUIRED_PASS),
        }
    }

    /// The consumer reads `from..end` in place, as `Consumer::poll_once` does: the stamp
    /// (Acquire), the event, then the commit of `next` (Release). The event is read last
    /// before the commit, where a lap of the slot during the read would show.
    fn read(&self, from: u64, end: u64) {
        for s in from..end {
            loop {
                match self.stamp(s) {
                    stamp::Stamp::Published => break,
                    stamp::Stamp::Lapped => {
                        panic!("sequence {s} overwritten before the consumer read it")
                    }
                    _ => thread::yield_now(),
                }
            }
            // Relaxed: ordered by the Acquire stamp load.
            let event = self.payloads[slot(s)].load(Ordering::Relaxed);
            assert_eq!(
                event, s,
                "sequence {s} overwritten while the consumer read it"
            );
            // Release: the commit; pairs with the scan's Acquire load of `next`.
            self.next.store(s + 1, Ordering::Release);
        }
    }
}

/// When the producer looks whether the attach has returned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    /// Before each claim: the events claimed after the attach, which every attach receives.
    Claim,
    /// Before each stamp: the events stamped after the attach, which an attach that read a
    /// running line receives too (the look-back; one that read a closed line starts at the
    /// stop sequence, above an accepted claim its producer has not stamped yet).
    Stamp,
}

/// The single producer: its claim state, its cached gate, and what the checks need.
struct SpProducer {
    seen: SeenRunning,
    next: u64,
    cached_gate: u64,
    scans: Vec<Scan>,
    mark: After,
    /// Sequences claimed or stamped (`mark`) after the producer saw the attach return.
    after_attach: Vec<u64>,
}

impl SpProducer {
    /// The producer at `next`, its cached gate 0.
    fn new(next: u64, mark: After) -> Self {
        SpProducer {
            seen: SeenRunning::default(),
            next,
            cached_gate: 0,
            scans: Vec::new(),
            mark,
            after_attach: Vec::new(),
        }
    }

    /// Whether the attach has returned, looked at only when `mark` says. Acquire: pairs
    /// with the attach's Release store of the marker.
    fn attached(&self, ring: &Sp, now: After) -> bool {
        now == self.mark && ring.attached.load(Ordering::Acquire) == 1
    }

    /// `Producer::claim_blocking` and the publish of one event on a stamped ring.
    fn publish(&mut self, ring: &Sp) -> Result<u64, Refused> {
        let s = self.claim(ring)?;
        self.finish(ring, s);
        Ok(s)
    }

    /// As `publish`, trying again while the ring is closed (until a start).
    fn publish_once_running(&mut self, ring: &Sp) -> u64 {
        loop {
            match self.publish(ring) {
                Ok(s) => return s,
                Err(Refused::Closed) => thread::yield_now(),
                Err(Refused::Deleted) => panic!("the ring is not deleted"),
            }
        }
    }

    /// The claim of one sequence: the shipping `claim_single_fast` and, past it,
    /// `Line::finish_claim_single` ((p1) to (p5) in `line.rs`).
    fn claim(&mut self, ring: &Sp) -> Result<u64, Refused> {
        let s = self.next;
        let after = self.attached(ring, After::Claim);
        let fast =
            line::claim_single_fast(&ring.claim, &ring.lifecycle, &mut self.seen, s, 1, || {
                fence(Ordering::SeqCst)
            });
        ring.line().finish_claim_single(&env(1, true), fast, s, 1)?;
        if after {
            self.after_attach.push(s);
        }
        self.next = s + 1;
        Ok(s)
    }

    /// The rest of the publish of the claimed `s`: the wait at the wrap gate (`has_room`:
    /// the cached gate, else a scan), the event, the stamp.
    fn finish(&mut self, ring: &Sp, s: u64) {
        let need = (s + 1).saturating_sub(SP_CAPACITY);
        while self.cached_gate < need {
            let scan = ring.scan();
            self.cached_gate = self.cached_gate.max(scan.gate);
            self.scans.push(scan);
            if self.cached_gate < need {
                thread::yield_now();
            }
        }
        // Relaxed: published by the Release stamp store.
        ring.payloads[slot(s)].store(s, Ordering::Relaxed);
        if self.attached(ring, After::Stamp) {
            self.after_attach.push(s);
        }
        // Release: the stamp (`Producer::stamp`); pairs with the readers' Acquire loads.
        ring.stamps[slot(s)].store(s, Ordering::Release);
        // Release: pairs with the attach's Acquire load of the marker.
        ring.stamped_to.store(s + 1, Ordering::Release);
    }
}

/// The start's bounds: at or after everything published before the attach began (which
/// it may miss), at or after the provisional position a scan may have gated at (a `next`
/// that moves back is below a gate already computed from it), and at or before every
/// event claimed (or, on a running line, stamped) after the attach returned.
fn check_start(a: Attached, after_attach: &[u64]) {
    let start = a.start;
    assert!(
        a.before <= start,
        "start {start} is before sequence {}, published before the attach began",
        a.before - 1
    );
    assert!(
        a.provisional <= start,
        "start {start} is below the provisional position {} a scan may have gated at",
        a.provisional
    );
    for &s in after_attach {
        assert!(
            s >= start,
            "sequence {s}, claimed or stamped after the attach returned, is skipped: \
             start {start}"
        );
    }
}

/// A consumer attaches to a running single-producer ring (sequence 0 published) and reads
/// up to sequence 3, while the producer publishes 1, 2 and 3 on the two slots: 2 laps 0 and
/// 3 laps 1, which needs the consumer past 1 (the wrap gate saw its entry) or started after
/// it.
fn sp_attach_racing_claims(how: Start) {
    model(move || {
        let ring = Arc::new(Sp::new(running(), 1, 0..1));
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut p = SpProducer::new(1, After::Stamp);
                for _ in 1..4 {
                    p.publish(&ring).expect("the ring runs");
                }
                p
            })
        };
        let a = ring.attach(how, true);
        ring.read(a.start, 4);
        let p = producer.join().unwrap();
        check_start(a, &p.after_attach);
        for scan in p.scans.iter().filter(|s| !s.saw_entry) {
            assert!(
                scan.gate <= a.start,
                "first slot overwritten: a scan that did not see the entry computed gate {}, \
                 allowing sequence {} = start {} + capacity {SP_CAPACITY}",
                scan.gate,
                scan.gate + SP_CAPACITY - 1,
                a.start
            );
        }
    });
}

#[test]
fn single_producer_attach_racing_claims_that_lap_the_ring() {
    sp_attach_racing_claims(SHIPPING);
}

/// The attach as it was (the look-back over a lapped slot, no floor at the provisional
/// position): the first interleaving of the module comment.
#[test]
#[should_panic(expected = "overwritten before the consumer read it")]
fn control_an_attach_whose_look_back_steps_over_a_lap_starts_below_its_gate() {
    sp_attach_racing_claims(Start {
        position: Position::OverLaps,
        at_least_provisional: false,
    });
}

/// After the line settled closed at `stop` (the attach and any claim joined), the next
/// run's first event, at `stop`, is delivered from the start: every sequence from the start
/// up to it is published.
fn check_delivered(ring: &Sp, a: Attached, stop: u64) {
    for s in a.start..=stop {
        assert!(
            ring.published(s),
            "sequence {s}, between the start {} and the next run's first event {stop}, is \
             never published",
            a.start
        );
    }
}

/// A consumer attaches to an empty single-producer ring while the producer claims sequence
/// 0 and another process stops the ring: the claim is accepted (the stop reads its
/// position) or refused (the stop read the position before the claim's store, which stays
/// past the stop). Then the ring starts again (taking a refused claim back) and the
/// producer publishes the next run's first event, at the stop sequence. The attach starts
/// at or before the stop sequence and receives that event.
fn sp_attach_racing_a_stop(how: Start) {
    model(move || {
        let ring = Arc::new(Sp::new(running(), 0, 0..0));
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut p = SpProducer::new(0, After::Claim);
                let _ = p.publish(&ring);
                p
            })
        };
        let stopper = {
            let ring = ring.clone();
            thread::spawn(move || {
                let (stop, _) = ring
                    .line()
                    .close(&env(2, true), RingState::Stopped)
                    .expect("stop");
                stop
            })
        };
        let a = ring.attach(how, false);
        let mut p = producer.join().unwrap();
        let stop = stopper.join().unwrap();
        assert!(
            a.start <= stop,
            "an attach at {} starts past the stop at {stop}",
            a.start
        );
        assert_eq!(ring.line().reopen(&env(2, true)), Ok(stop), "started");
        let first = p.publish(&ring).expect("the ring runs again");
        assert_eq!(first, stop, "the next run starts at the stop sequence");
        check_start(a, &p.after_attach);
        check_delivered(&ring, a, stop);
    });
}

#[test]
fn single_producer_attach_racing_a_stop() {
    sp_attach_racing_a_stop(SHIPPING);
}

/// Without the look-back, an attach that reads the claim word of a claim the stop refused
/// (the stopper read the position before the claim's store) starts one past the stop, and
/// the next run's first event, at the stop sequence, is lost to it.
#[test]
#[should_panic(expected = "past the stop")]
fn control_an_attach_without_the_look_back_starts_past_the_stop() {
    sp_attach_racing_a_stop(Start {
        position: Position::NoLookBack,
        ..SHIPPING
    });
}

/// What a stopped single-producer ring holds when a start races the attach.
#[derive(Clone, Copy)]
enum Left {
    /// A claim of sequence 0 that the stop at 0 refused: the claim word (1) is past the
    /// stop until the start takes it back.
    Refused,
    /// A claim of sequence 0 that the stop at 1 accepted and its producer has not stamped.
    Unstamped,
}

/// A consumer attaches to a stopped single-producer ring while another process starts it
/// and the producer publishes the next run's first event (at the stop sequence, once the
/// ring runs; with `Left::Unstamped`, after it stamps its accepted claim). An attach that
/// read the line before the restarted run starts at or before the stop sequence; the
/// next run's first event is delivered from the start.
fn sp_attach_racing_a_start(how: Start, left: Left) {
    model(move || {
        let (ring, stop, unstamped) = match left {
            Left::Refused => (Sp::stopped(0, 1, 0), 0, None),
            Left::Unstamped => (Sp::stopped(1, 1, 0), 1, Some(0)),
        };
        let ring = Arc::new(ring);
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut p = SpProducer::new(stop, After::Claim);
                if let Some(s) = unstamped {
                    p.finish(&ring, s);
                }
                let first = p.publish_once_running(&ring);
                (p, first)
            })
        };
        let starter = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(2, true)))
        };
        let a = ring.attach(how, false);
        // After the attach: Running means the attach may have read the line after the start
        // (and after the next run's first event).
        let restarted = ring.line().life().state == Some(RingState::Running);
        let (p, first) = producer.join().unwrap();
        assert_eq!(starter.join().unwrap(), Ok(stop), "started");
        assert_eq!(first, stop, "the next run starts at the stop sequence");
        assert!(
            restarted || a.start <= stop,
            "an attach at {} starts past the stop at {stop}",
            a.start
        );
        check_start(a, &p.after_attach);
        if a.start <= stop {
            check_delivered(&ring, a, stop);
        }
    });
}

#[test]
fn single_producer_attach_racing_a_start_after_an_unstamped_claim() {
    sp_attach_racing_a_start(SHIPPING, Left::Unstamped);
}

/// The position as it was while closed (the stop sequence itself), without the floor at
/// the provisional position: the second interleaving of the module comment.
#[test]
#[should_panic(expected = "below the provisional position")]
fn control_an_attach_below_its_provisional_position_across_a_start() {
    sp_attach_racing_a_start(
        Start {
            position: Position::ClosedAtTheStop,
            at_least_provisional: false,
        },
        Left::Unstamped,
    );
}

#[test]
fn single_producer_attach_racing_a_start_that_takes_a_refused_claim_back() {
    sp_attach_racing_a_start(SHIPPING, Left::Refused);
}

/// A gate scan while the ring is stopped, then a start and an attach, one after another:
/// the stop at 3 accepted the producer's claim of 2, which it has not stamped yet, and the
/// producer, waiting for room for it, scans while the ring is still stopped (the new entry
/// not yet gating). The start reopens at 3 and the consumer attaches, its position stepping
/// back over 2. The gate that scan computed must not be above that start, or the producer,
/// trusting it, laps the start's slot: the line's position, closed or not, steps back over
/// the last accepted claim's unstamped slots, so it never goes down across a start.
fn sp_scan_while_stopped_then_attach(how: Start) {
    model(move || {
        let ring = Sp::stopped(3, 3, 2);
        let scan = ring.scan_with(how.position);
        assert!(!scan.saw_entry);
        assert_eq!(ring.line().reopen(&env(2, true)), Ok(3), "started");
        let a = ring.attach(how, true);
        assert!(
            scan.gate <= a.start,
            "a scan while stopped gated at {}, above the start {} of a later attach",
            scan.gate,
            a.start
        );
    });
}

#[test]
fn single_producer_attach_after_a_scan_while_stopped() {
    sp_scan_while_stopped_then_attach(SHIPPING);
}

/// The position as it was while closed, the stop sequence itself: the scan gates at 3,
/// the attach after the start starts at 2 (the floor at the provisional position does not
/// help: both of its reads came after the start).
#[test]
#[should_panic(expected = "above the start")]
fn control_a_scan_at_the_stop_sequence_gates_above_a_later_attach() {
    sp_scan_while_stopped_then_attach(Start {
        position: Position::ClosedAtTheStop,
        ..SHIPPING
    });
}

/// Reading the claim word as the start: before the start takes the refused claim back,
/// the attach starts one past the stop, and the next run's first event is lost to it.
#[test]
#[should_panic(expected = "past the stop")]
fn control_an_attach_reading_the_claim_word_starts_past_the_stop() {
    sp_attach_racing_a_start(
        Start {
            position: Position::RawClaim,
            ..SHIPPING
        },
        Left::Refused,
    );
}

// Resuming a durable entry (`Consumer::resume`): a process takes over a required entry a
// dead holder left, while the producer publishes. The resume runs the shipping steps in
// their order: the look at the entry (its word, then its position), the line's position
// and the slot's stamp (`gated`: `table::consumer::gated_required` and not lapped), the
// take-over CAS (`table::consumer::take_over`: RESUMING, still gating, where it gated),
// the SeqCst fence, then either the kept position (`table::consumer::keeps_position`;
// the CAS to ACTIVE) or a fresh attach's start (`graph::start_fresh`).

/// The dead holder of the entry a resume takes over.
const DEAD_HOLDER: u32 = 7;

/// How a resume model's take-over is made.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// The shipping steps.
    Shipping,
    /// Control: the take-over CAS stops gating (REATTACHING) even where the entry gated,
    /// and the position is still kept.
    TakeOverNotGating,
    /// Control: a required consumer keeps its position whether or not its entry gated.
    KeepAlways,
    /// Control: an entry in a gating state is taken for gating at its position even where
    /// its slot holds a later sequence.
    IgnoreLapped,
}

/// Where a resume started, and what the checks need.
#[derive(Clone, Copy)]
struct Resumed {
    /// Whether it was kept.
    kept: bool,
    /// The bounds of a new start (`provisional` and `start` equal to `old_next` if kept).
    attached: Attached,
}

impl Sp {
    /// A running single-producer ring with the sequences in `published` published (at
    /// most one lap, the last of them its last claim), its consumer entry held by a dead
    /// process in `state`, at `next`.
    fn held(state: u32, next: u64, published: std::ops::Range<u64>) -> Self {
        let ring = Sp::new(running(), published.end, published);
        ring.word
            .store(owned_word::pack(1, state, DEAD_HOLDER), Ordering::Relaxed);
        ring.next.store(next, Ordering::Relaxed);
        ring.first.store(next, Ordering::Relaxed);
        ring
    }

    /// `Consumer::resume` of the entry (required, its holder dead), as `how` makes it: the
    /// look (`resume`'s loads, in its order), then the shipping `graph::resume`, whose
    /// take-over and keep decisions the controls replace.
    fn resume(&self, how: Resume) -> Resumed {
        // Acquire: pairs with the producer's Release store after its stamp.
        let before = self.stamped_to.load(Ordering::Acquire);
        // Acquire: as `resume`'s look at the word.
        let seen = self.word.load(Ordering::Acquire);
        // Acquire: pairs with the last holder's Release commit.
        let old_next = self.next.load(Ordering::Acquire);
        let head = self.position(Position::Shipping);
        let look = graph::Look {
            seen,
            flags: consumer_flags::REQUIRED,
            next: old_next,
            head,
            lapped: old_next <= head && self.stamp(old_next) == stamp::Stamp::Lapped,
        };
        let position = || Some(self.position(Position::Shipping));
        // The total order stand-in after the CAS to ACTIVE, as in `attach`.
        let after_cas = || fence(Ordering::SeqCst);
        let (kept, provisional, start) = match how {
            Resume::Shipping => {
                match graph::resume(
                    &self.next,
                    &self.first,
                    &self.word,
                    CONSUMER,
                    &look,
                    true,
                    position,
                    || fence(Ordering::SeqCst),
                    |_| (),
                    after_cas,
                )
                .expect("nobody else changes the entry and the ring runs")
                {
                    graph::Resumed::Kept { .. } => (true, old_next, old_next),
                    graph::Resumed::Started(s) => (false, s.provisional, s.start),
                }
            }
            Resume::TakeOverNotGating | Resume::KeepAlways | Resume::IgnoreLapped => {
                // The controls: `graph::resume`'s steps written out, one of them changed.
                let gated = table::consumer::gated_required(
                    owned_word::state(seen),
                    look.flags,
                    old_next,
                    head,
                ) && (!look.lapped || how == Resume::IgnoreLapped);
                let mine = table::consumer::take_over(
                    &self.word,
                    seen,
                    CONSUMER,
                    gated && how != Resume::TakeOverNotGating,
                )
                .expect("nobody else takes the entry");
                fence(Ordering::SeqCst);
                let kept = how == Resume::KeepAlways
                    || table::consumer::keeps_position(true, gated, old_next, head);
                assert!(kept, "the controls keep the position");
                table::consumer::set(&self.word, mine, consumer_state::ACTIVE)
                    .expect("nobody else changes the entry");
                after_cas();
                (true, old_next, old_next)
            }
        };
        // Release: pairs with the producer's Acquire load of the marker.
        self.attached.store(1, Ordering::Release);
        Resumed {
            kept,
            attached: Attached {
                before,
                provisional,
                start,
            },
        }
    }
}

/// A process resumes the required entry a dead holder left in `state` at `old_next`, on a
/// ring whose sequences in `published` are published, and reads up to the third event
/// the producer publishes meanwhile on the two slots (each laps the one two before it).
/// An entry that gated (a dead holder's ACTIVE or DETACHED word) at a position not
/// overwritten keeps its position (`kept`) and holds the producer there throughout, so
/// every event from it is read intact. One the broker released (RELEASED: not gating, the
/// producer may have lapped its position), or whose position's slot holds a later
/// sequence (a released holder that detached after the producer lapped it), starts as a
/// fresh attach starts, at or after what was published before the resume began, and is
/// never lapped from there.
fn sp_resume_racing_claims(
    state: u32,
    old_next: u64,
    published: std::ops::Range<u64>,
    how: Resume,
    kept: bool,
) {
    model(move || {
        let from = published.end;
        let ring = Arc::new(Sp::held(state, old_next, published.clone()));
        let producer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut p = SpProducer::new(from, After::Stamp);
                for _ in 0..3 {
                    p.publish(&ring).expect("the ring runs");
                }
                p
            })
        };
        let r = ring.resume(how);
        assert_eq!(r.kept, kept, "kept the position or not");
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ring.read(r.attached.start, from + 3)
        }));
        if let Err(lap) = read {
            // The entry stops holding the producer (it gated where the read failed), so that
            // the producer finishes inside the model before the failure is reported.
            ring.next.store(u64::MAX, Ordering::Release);
            let _ = producer.join();
            std::panic::resume_unwind(lap);
        }
        let p = producer.join().unwrap();
        if !r.kept {
            check_start(r.attached, &p.after_attach);
        }
        for scan in p.scans.iter().filter(|s| !s.saw_entry) {
            assert!(
                scan.gate <= r.attached.start,
                "first slot overwritten: a scan that did not see the entry computed gate {}, \
                 allowing sequence {} = start {} + capacity {SP_CAPACITY}",
                scan.gate,
                scan.gate + SP_CAPACITY - 1,
                r.attached.start
            );
        }
    });
}

#[test]
fn single_producer_resume_of_a_detached_entry_keeps_its_position_racing_claims() {
    sp_resume_racing_claims(consumer_state::DETACHED, 0, 0..1, Resume::Shipping, true);
}

#[test]
fn single_producer_resume_of_a_dead_active_entry_keeps_its_position_racing_claims() {
    sp_resume_racing_claims(consumer_state::ACTIVE, 0, 0..1, Resume::Shipping, true);
}

#[test]
fn single_producer_resume_of_a_released_entry_starts_afresh_racing_claims() {
    sp_resume_racing_claims(consumer_state::RELEASED, 0, 0..1, Resume::Shipping, false);
}

/// A DETACHED entry at 0 whose slot holds 2: its holder was released, lapped, and then
/// detached. It gates at 0, which the producer respects from now on, but 0 is gone.
#[test]
fn single_producer_resume_of_an_entry_lapped_before_it_detached_starts_afresh() {
    sp_resume_racing_claims(consumer_state::DETACHED, 0, 1..3, Resume::Shipping, false);
}

/// A take-over that stops gating for a moment: a scan in that moment lets the producer
/// lap the position the resume keeps.
#[test]
#[should_panic(expected = "overwritten")]
fn control_a_take_over_that_stops_gating_is_lapped_at_its_kept_position() {
    sp_resume_racing_claims(
        consumer_state::DETACHED,
        0,
        0..1,
        Resume::TakeOverNotGating,
        true,
    );
}

/// A released entry that keeps its position: the producer lapped it, or laps it before the
/// resume's CAS to ACTIVE.
#[test]
#[should_panic(expected = "overwritten")]
fn control_a_released_entry_that_keeps_its_position_is_lapped() {
    sp_resume_racing_claims(consumer_state::RELEASED, 0, 0..1, Resume::KeepAlways, true);
}

/// Without the look at the slot, the lapped DETACHED entry keeps a position already gone.
#[test]
#[should_panic(expected = "overwritten before the consumer read it")]
fn control_a_resume_that_does_not_look_at_the_slot_keeps_a_lapped_position() {
    sp_resume_racing_claims(
        consumer_state::DETACHED,
        0,
        1..3,
        Resume::IgnoreLapped,
        true,
    );
}
