//! A read-only snapshot of a ring's tables, for status displays and tests.

use std::sync::atomic::{fence, Ordering};

use shmring_layout::{
    consumer_flags, consumer_state, owned_word, producer_state, waiters, RingState, MAX_SEQUENCE,
};

use crate::consumer::{entry_name, read_poison};
use crate::segment::Segment;
use crate::table::FirstSeen;
use crate::{ConsumerStats, ProducerStats, WaitStrategy};

/// One consumer entry as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerInfo {
    /// Index in the table.
    pub index: u32,
    /// Name (empty for anonymous consumers).
    pub name: String,
    /// The entry's word as read (`shmring_layout::owned_word`): what a release or free of
    /// this entry acts on, so that it never touches a later holder.
    pub word: u64,
    /// `CLOCK_BOOTTIME` ns ([`crate::boottime_ns`]) read after `word`: its writer started
    /// before then (see [`ConsumerInfo::first_seen`]).
    pub seen_ns: u64,
    /// The process holding the entry (or that held it last; 0: none, as for a declared
    /// consumer no process attached to yet).
    pub pid: u32,
    /// Start time of that process (see [`crate::process::ProcessId`]).
    pub start_time: u64,
    /// State name (ACTIVE, DETACHED, FAILED, ...).
    pub state: &'static str,
    /// State code (see `shmring_layout::consumer_state`).
    pub state_code: u32,
    /// Gates producers unconditionally.
    pub required: bool,
    /// Has a durable name.
    pub durable: bool,
    /// Declared in the ring's configuration (`RingConfig::declared`): it has gated since
    /// the ring was created.
    pub declared: bool,
    /// Its holder had not stored its start yet (`consumer_flags::STARTING`): attaching or
    /// gating again after a release, or dead inside either, when its position is one
    /// producers did not respect and is not kept for it.
    pub starting: bool,
    /// Whether any process ever attached to this entry (from its attach count). A declared
    /// consumer that never attached holds its events for its first attach.
    pub attached_ever: bool,
    /// Attaches to this entry so far (every process that took it, and every attach of a
    /// durable name), written before the attach is published: a new value is a new
    /// attachment.
    pub attaches: u64,
    /// Next sequence it will read.
    pub next: u64,
    /// Events published beyond its position.
    pub lag: u64,
    /// Wait strategy name.
    pub wait: &'static str,
    /// Whether it is parked on the ring's futex right now.
    pub parked: bool,
    /// Counters.
    pub stats: ConsumerStats,
    /// The event its handler is failing at, and the failed attempts at it so far (across
    /// re-attaches of a durable consumer); `None` when no attempt is known to have failed.
    pub poison: Option<(u64, u32)>,
    /// Its error policy: `stop`, `skip` or `retry` (see `ErrorPolicy`).
    pub error_policy: &'static str,
    /// The entry indices of the consumers this one reads behind (see
    /// `ConsumerOptions::after`), as recorded in its entry.
    pub upstream: Vec<u32>,
    /// For a worker group member: the index of its group's entry.
    pub group: Option<u32>,
    /// Whether this entry is a worker group (its `next` is the group's work sequence: the
    /// first sequence no member has claimed).
    pub is_group: bool,
}

/// One producer entry as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerInfo {
    /// Index in the table.
    pub index: u32,
    /// The entry's word as read (`shmring_layout::owned_word`): what a repair acts on.
    pub word: u64,
    /// `CLOCK_BOOTTIME` ns ([`crate::boottime_ns`]) read after `word` (see
    /// [`ProducerInfo::first_seen`]).
    pub seen_ns: u64,
    /// State name (ACTIVE, ATTACHING, REPAIRING).
    pub state: &'static str,
    /// State code (see `shmring_layout::producer_state`).
    pub state_code: u32,
    /// The process holding the entry: its producer, or a process repairing it.
    pub pid: u32,
    /// Start time of that process.
    pub start_time: u64,
    /// First sequence of the claim it holds, if any (and known: see `claiming`).
    pub in_flight: Option<u64>,
    /// Taking a claim whose sequence it does not know yet.
    pub claiming: bool,
    /// Sequences of its claims the broker tombstoned after it died.
    pub repaired: u64,
    /// It has the multi-producer line to itself: its claims are plain stores to its entry,
    /// without the counter's locked instruction, until another producer claims (or a stop,
    /// or its detach) ends that (ARCHITECTURE.md, "Lone claims").
    pub lone: bool,
    /// Counters.
    pub stats: ProducerStats,
}

/// A word of the segment holding a value no ring writes there: another process overwrote
/// it. What each one does to the ring, and what to do: docs/FAILURE_MODES.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CorruptWord {
    /// The lifecycle word names no state: every lifecycle change refuses it
    /// (`LifecycleError::CorruptState`).
    Lifecycle {
        /// The word found.
        word: u64,
    },
    /// The fence mode word names no mode.
    FenceMode {
        /// The word found.
        word: u32,
    },
    /// The ring's position (the claim word, or the stop sequence of a closed line) is at or
    /// past `shmring_layout::MAX_SEQUENCE`, which no ring reaches: attaches refuse it, and a
    /// caught-up consumer, which never reads it, waits for events that never come.
    Position {
        /// The position found.
        position: u64,
    },
    /// A fixed-size ring's cursor is past its write horizon (the producer raises the horizon
    /// before it writes or claims past it), or at or past `MAX_SEQUENCE`: consumers would
    /// read slots nobody wrote.
    Cursor {
        /// The cursor found (below a claim still being written).
        cursor: u64,
        /// The write horizon read after it (the claim line's word).
        claim: u64,
    },
    /// A consumer entry's position (a worker group's: its work sequence) is at or past
    /// `MAX_SEQUENCE`.
    ConsumerPosition {
        /// The entry's index.
        index: u32,
        /// The position found.
        next: u64,
    },
    /// A consumer entry's state is one no code writes: it does not gate.
    ConsumerState {
        /// The entry's index.
        index: u32,
        /// The state code found.
        state: u32,
    },
}

impl CorruptWord {
    /// A short name for the word: `lifecycle`, `fence_mode`, `position`, `cursor`,
    /// `consumer_position` or `consumer_state`.
    pub fn word(&self) -> &'static str {
        match self {
            CorruptWord::Lifecycle { .. } => "lifecycle",
            CorruptWord::FenceMode { .. } => "fence_mode",
            CorruptWord::Position { .. } => "position",
            CorruptWord::Cursor { .. } => "cursor",
            CorruptWord::ConsumerPosition { .. } => "consumer_position",
            CorruptWord::ConsumerState { .. } => "consumer_state",
        }
    }

    /// The value found.
    pub fn value(&self) -> u64 {
        match *self {
            CorruptWord::Lifecycle { word } => word,
            CorruptWord::FenceMode { word } => u64::from(word),
            CorruptWord::Position { position } => position,
            CorruptWord::Cursor { cursor, .. } => cursor,
            CorruptWord::ConsumerPosition { next, .. } => next,
            CorruptWord::ConsumerState { state, .. } => u64::from(state),
        }
    }

    /// The consumer entry the word belongs to, if it is one of an entry's.
    pub fn consumer(&self) -> Option<u32> {
        match *self {
            CorruptWord::ConsumerPosition { index, .. }
            | CorruptWord::ConsumerState { index, .. } => Some(index),
            _ => None,
        }
    }
}

impl std::fmt::Display for CorruptWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            CorruptWord::Lifecycle { word } => write!(f, "lifecycle word {word:#x} names no state"),
            CorruptWord::FenceMode { word } => write!(f, "fence mode word {word:#x} names no mode"),
            CorruptWord::Position { position } => {
                write!(
                    f,
                    "position {position:#x} is past any sequence a ring reaches"
                )
            }
            CorruptWord::Cursor { cursor, claim } => write!(
                f,
                "cursor {cursor:#x} is past the write horizon {claim:#x} or any sequence a ring reaches"
            ),
            CorruptWord::ConsumerPosition { index, next } => write!(
                f,
                "consumer entry {index}'s position {next:#x} is past any sequence a ring reaches"
            ),
            CorruptWord::ConsumerState { index, state } => {
                write!(f, "consumer entry {index}'s state {state} is no state")
            }
        }?;
        f.write_str(": the segment is corrupt")
    }
}

/// The words of `seg` holding values no ring writes there, for [`RingInfo::corrupt`]:
/// `life`, `head` and `consumers` are the lifecycle word, position and entries the snapshot
/// read.
fn corrupt_words(
    seg: &Segment,
    life: &crate::line::Life,
    head: u64,
    consumers: &[ConsumerInfo],
) -> Vec<CorruptWord> {
    let mut found = Vec::new();
    if life.state.is_none() {
        found.push(CorruptWord::Lifecycle { word: life.word });
    }
    // Relaxed: a display value.
    let fence = seg.header().fence_mode.load(Ordering::Relaxed);
    if shmring_layout::FenceMode::from_u32(fence).is_none() {
        found.push(CorruptWord::FenceMode { word: fence });
    }
    // The line's one definition of its position (`Line::position`), which reads a damaged
    // word as it is, never stepped back over unpublished slots to below `MAX_SEQUENCE`.
    if head >= MAX_SEQUENCE {
        found.push(CorruptWord::Position { position: head });
    }
    if seg.geometry().fixed {
        let events = seg.events();
        let cursor = events.written();
        // Relaxed: raised before any write under it (and before the Release store that
        // ends a claim whose horizon follows its cursor store), never lowered.
        let horizon = crate::fixed::Words::horizon(&events).load(Ordering::Relaxed);
        if cursor > horizon || cursor >= MAX_SEQUENCE {
            found.push(CorruptWord::Cursor {
                cursor,
                claim: horizon,
            });
        }
    }
    for c in consumers {
        if !consumer_state::is_known(c.state_code) {
            found.push(CorruptWord::ConsumerState {
                index: c.index,
                state: c.state_code,
            });
        } else if c.next >= MAX_SEQUENCE {
            found.push(CorruptWord::ConsumerPosition {
                index: c.index,
                next: c.next,
            });
        }
    }
    found
}

impl ConsumerInfo {
    /// This snapshot's sighting of the entry's word, for [`crate::Ring::free_consumer_seen`]
    /// (kept across snapshots with [`FirstSeen::keep_or_now`] while the word stays).
    pub fn first_seen(&self) -> FirstSeen {
        FirstSeen::new(self.word, self.seen_ns)
    }
}

impl ProducerInfo {
    /// This snapshot's sighting of the entry's word, for
    /// [`crate::Ring::repair_dead_producer_seen`] (see [`ConsumerInfo::first_seen`]).
    pub fn first_seen(&self) -> FirstSeen {
        FirstSeen::new(self.word, self.seen_ns)
    }
}

/// A snapshot of a ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingInfo {
    /// How publishes are ordered against parking consumers (`None` if corrupt).
    pub fence_mode: Option<shmring_layout::FenceMode>,
    /// Lifecycle state (`None` if corrupt).
    pub state: Option<RingState>,
    /// Run counter.
    pub run: u64,
    /// Next sequence to claim.
    pub head: u64,
    /// Whether claims are refused.
    pub closed: bool,
    /// Attached (non-free) consumers.
    pub consumers: Vec<ConsumerInfo>,
    /// Producer entries in use (attached, attaching, or being repaired).
    pub producers: Vec<ProducerInfo>,
    /// Consumers parked (or about to park) waiting for events, on either consumer line
    /// (`downstream_waiters` included). A process killed while parked stays counted until
    /// the next notify of its line (a publish, or a commit for one behind an upstream)
    /// wakes for it and resets the count.
    pub consumer_waiters: u32,
    /// Of `consumer_waiters`, those parked behind an upstream consumer that holds them, on
    /// that upstream's entry line, which its commits wake and publishes do not (summed over
    /// the entries).
    pub downstream_waiters: u32,
    /// Producers parked (or about to park) waiting for room (a killed one stays counted
    /// until the next commit).
    pub producer_waiters: u32,
    /// Wake-ups issued to parked consumers since the ring was created, each one a
    /// `futex_wake` paid by the publisher (or stopper) that issued it: the producers'
    /// wake-up bill, plus one per producer death a broker or a taking-over producer saw
    /// (`Ring::wake_consumers`). A 32-bit count that wraps.
    pub consumer_wakes: u32,
    /// Wake-ups issued to consumers parked behind an upstream, summed over the entries'
    /// lines (an entry's count outlives its holders): each a `futex_wake` paid by the
    /// upstream that committed or moved, or by a release, a free, a member leaving or
    /// failing, a stop, a repair or a death seen; never by a publish. A 32-bit count that
    /// wraps.
    pub downstream_wakes: u32,
    /// Wake-ups issued to parked producers (by consumers that freed room, releases, starts,
    /// and a broker that saw a consumer die).
    /// A 32-bit count that wraps.
    pub producer_wakes: u32,
    /// Words of the segment holding values no ring writes there (another process overwrote
    /// them); empty for a sound segment.
    pub corrupt: Vec<CorruptWord>,
}

/// A consumer entry's word with its holder's start time, attach count and counters as they
/// were under that word (`table::consumer::read_beside`: a process that takes the entry
/// over writes its start time and bumps the count after the CAS that took it and a Release
/// fence, and a failing one stores its failures Release). The broker reports a failure
/// once per attach and failure count and a death once per attach count, so a count paired
/// with an older word would report one failure twice.
fn entry_words(e: &shmring_layout::ConsumerEntry) -> EntryWords {
    let (word, (start_time, attaches, stats)) = crate::table::consumer::read_beside(
        &e.hot.word,
        || {
            // Relaxed, all: ordered by the fence `read_beside` makes.
            let start_time = e.cold.start_time.load(Ordering::Relaxed);
            let attaches = e.cold.attaches.load(Ordering::Relaxed);
            (start_time, attaches, ConsumerStats::read_entry(e))
        },
        || fence(Ordering::Acquire),
        8,
    );
    EntryWords {
        word,
        start_time,
        attaches,
        stats,
    }
}

/// What [`entry_words`] reads of an entry, as one set.
struct EntryWords {
    word: u64,
    start_time: u64,
    attaches: u64,
    stats: ConsumerStats,
}

pub(crate) fn snapshot(seg: &Segment) -> RingInfo {
    let geo = seg.geometry();
    let h = seg.header();
    let head = seg.position();
    let mut consumers = Vec::new();
    for i in 0..geo.max_consumers {
        let Some(e) = seg.consumer(i) else { break };
        let EntryWords {
            word,
            start_time,
            attaches,
            stats,
        } = entry_words(e);
        let code = owned_word::state(word);
        if code == consumer_state::FREE {
            continue;
        }
        let flags = e.hot.flags.load(Ordering::Relaxed);
        let next = e.hot.next.load(Ordering::Acquire);
        consumers.push(ConsumerInfo {
            index: i,
            name: entry_name(e),
            word,
            seen_ns: crate::boottime_ns(),
            pid: owned_word::owner(word),
            start_time,
            state: consumer_state::name(code),
            state_code: code,
            required: flags & consumer_flags::REQUIRED != 0,
            durable: flags & consumer_flags::DURABLE != 0,
            declared: flags & consumer_flags::DECLARED != 0,
            starting: flags & consumer_flags::STARTING != 0,
            attached_ever: attaches != 0,
            attaches,
            next,
            lag: head.saturating_sub(next),
            wait: WaitStrategy::kind_name(e.cold.wait_kind.load(Ordering::Relaxed)),
            parked: e.cold.parked.load(Ordering::Relaxed) != 0,
            stats,
            poison: read_poison(&e.cold),
            // Relaxed: a display value.
            error_policy: shmring_layout::error_policy::name(
                e.cold.error_policy.load(Ordering::Relaxed),
            ),
            upstream: e
                .cold
                .upstream
                .iter()
                // Relaxed: written before the word was published (Acquire above).
                .map(|u| u.load(Ordering::Relaxed))
                .filter(|&u| u != 0 && u <= geo.max_consumers)
                .map(|u| u - 1)
                .collect(),
            // Relaxed: published with the word (Acquire above).
            group: (flags & consumer_flags::MEMBER != 0)
                .then(|| e.cold.group.load(Ordering::Relaxed).checked_sub(1))
                .flatten(),
            is_group: flags & consumer_flags::GROUP != 0,
        });
    }
    let mut producers = Vec::new();
    // Relaxed: a display value.
    let lone = shmring_layout::claim_lone_index(seg.lines().claim.value.load(Ordering::Relaxed));
    for i in 0..geo.max_producers {
        let Some(e) = seg.producer(i) else { break };
        // Acquire: the fields below were written before the word.
        let word = e.word.load(Ordering::Acquire);
        let code = owned_word::state(word);
        if code == producer_state::FREE {
            continue;
        }
        let in_flight = e.in_flight.load(Ordering::Relaxed);
        let stored = e.published.load(Ordering::Relaxed);
        let tombstoned = e.tombstoned.load(Ordering::Relaxed);
        let repaired = e.repaired.load(Ordering::Relaxed);
        // A fixed-size ring's producer stores no per-event counter (see
        // `ProducerEntry::base`): its events are the cursor's advance since it attached,
        // less its tombstones and those repaired for it.
        let base = e.base.load(Ordering::Relaxed);
        let published = if geo.fixed && base != u64::MAX {
            // As consumers count it (a refused store not counted), or while a stop
            // decides what it has.
            let events = seg.events();
            crate::fixed::published(&events)
                .map_or_else(|| events.written(), |(end, _)| end)
                .saturating_sub(base)
                .saturating_sub(tombstoned.saturating_add(repaired))
                .max(stored)
        } else {
            stored
        };
        producers.push(ProducerInfo {
            index: i,
            word,
            seen_ns: crate::boottime_ns(),
            state: producer_state::name(code),
            state_code: code,
            pid: owned_word::owner(word),
            start_time: e.start_time.load(Ordering::Relaxed),
            in_flight: (in_flight != shmring_layout::IN_FLIGHT_CLAIMING)
                .then(|| in_flight.checked_sub(1))
                .flatten(),
            claiming: in_flight == shmring_layout::IN_FLIGHT_CLAIMING,
            repaired,
            lone: lone == Some(i),
            stats: ProducerStats {
                published,
                refused: e.refused.load(Ordering::Relaxed),
                tombstoned,
                parks: e.parks.load(Ordering::Relaxed),
                late_wakeups: 0,
                net_wakeups: 0,
                room_waits: 0,
                lap_waits: 0,
                slot_takes: 0,
            },
        });
    }
    let lines = seg.lines();
    let life = seg.line().life();
    let corrupt = corrupt_words(seg, &life, head, &consumers);
    // Every entry's line, whoever holds it now (a raise left by a killed parker included):
    // the consumers parked behind it, and the wakes its holders paid for them. Relaxed:
    // display only, as below.
    let (mut downstream_waiters, mut downstream_wakes) = (0u32, 0u32);
    for e in (0..seg.geometry().max_consumers).map_while(|i| seg.consumer(i)) {
        let line = &e.hot.downstream;
        let count = waiters::count(line.waiters.load(Ordering::Relaxed));
        downstream_waiters = downstream_waiters.saturating_add(count);
        downstream_wakes = downstream_wakes.wrapping_add(line.word.load(Ordering::Relaxed));
    }
    RingInfo {
        // Relaxed: display only; nothing is ordered against these reads.
        consumer_waiters: waiters::count(lines.consumer_wake.value.waiters.load(Ordering::Relaxed))
            .saturating_add(downstream_waiters),
        downstream_waiters,
        producer_waiters: waiters::count(lines.producer_wake.value.waiters.load(Ordering::Relaxed)),
        consumer_wakes: lines.consumer_wake.value.word.load(Ordering::Relaxed),
        downstream_wakes,
        producer_wakes: lines.producer_wake.value.word.load(Ordering::Relaxed),
        fence_mode: shmring_layout::FenceMode::from_u32(h.fence_mode.load(Ordering::Relaxed)),
        state: life.state,
        run: shmring_layout::run_number(h.run.load(Ordering::Relaxed)),
        head,
        closed: seg.line().is_closed(),
        consumers,
        producers,
        corrupt,
    }
}
