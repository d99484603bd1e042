//! The consumer table, the producer table and the slot header.

use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::{LINE, NAME_LEN, SLOT_HEADER_SIZE};

/// What a consumer table entry holds: the state byte of its [`ConsumerHot::word`].
///
/// | state      | gates producers | meaning |
/// |------------|-----------------|---------|
/// | `FREE`     | no  | unused; taken by CAS FREE -> CLAIMED |
/// | `CLAIMED`  | no  | a new consumer filling in its entry (flags, name, start) |
/// | `RESUMING` | yes | a durable consumer that gated as required, being taken over by a new process; keeps gating at its position |
/// | `REATTACHING` | no | a durable consumer that did not gate as required (released, optional, or never started), being taken over |
/// | `ACTIVE`   | yes | attached and consuming |
/// | `DETACHED` | yes | a durable required consumer that detached: its events wait for it |
/// | `FAILED`   | yes | its handler failed; a restart resumes at that event |
/// | `RELEASED` | no  | not gating (an optional durable consumer that detached, or broker policy) |
///
/// "Gates" means the entry's `next` holds producers at the wrap gate: always for a
/// required consumer, within the ring's slack for an optional one.
///
/// The owner pid in the word is the process that holds the entry: the attaching or
/// attached process, or the last one for DETACHED, FAILED and RELEASED.
pub mod consumer_state {
    /// Unused entry.
    pub const FREE: u32 = 0;
    /// Being filled in by a newly attaching process (not gating yet).
    pub const CLAIMED: u32 = 1;
    /// Attached and consuming.
    pub const ACTIVE: u32 = 2;
    /// A durable consumer that detached; it keeps its position.
    pub const DETACHED: u32 = 3;
    /// Its handler failed; it keeps its position at the failing event.
    pub const FAILED: u32 = 4;
    /// Not gating; on re-attach a required consumer resumes at the head.
    pub const RELEASED: u32 = 5;
    /// A durable consumer that gated as required, being taken over (gating, position kept).
    pub const RESUMING: u32 = 6;
    /// A durable consumer that did not gate as required, being taken over (not gating).
    pub const REATTACHING: u32 = 7;

    /// Whether an entry in `state` holds producers at the wrap gate.
    pub const fn gates(state: u32) -> bool {
        matches!(state, RESUMING | ACTIVE | DETACHED | FAILED)
    }

    /// Whether `state` is one the code writes (any other is a corrupt entry).
    pub const fn is_known(state: u32) -> bool {
        state <= REATTACHING
    }

    /// A display name for a state code.
    pub const fn name(state: u32) -> &'static str {
        match state {
            FREE => "FREE",
            CLAIMED => "ATTACHING",
            ACTIVE => "ACTIVE",
            DETACHED => "DETACHED",
            FAILED => "FAILED",
            RELEASED => "RELEASED",
            RESUMING | REATTACHING => "ATTACHING",
            _ => "CORRUPT",
        }
    }
}

/// Consumer flags ([`ConsumerHot::flags`]).
pub mod consumer_flags {
    /// Gates producers and never loses an event.
    pub const REQUIRED: u32 = 1;
    /// Has a name and resumes from its position on re-attach.
    pub const DURABLE: u32 = 2;
    /// A worker group's entry: its `next` is the group's work sequence (the first sequence
    /// no member has claimed yet). Members claim from it by compare-and-swap.
    pub const GROUP: u32 = 4;
    /// A member of the worker group whose entry index plus one is
    /// [`ConsumerCold::group`](super::ConsumerCold::group): its `next` is the first
    /// sequence of the claim it has not finished, and
    /// [`ConsumerCold::claim_end`](super::ConsumerCold::claim_end) the end of that claim.
    pub const MEMBER: u32 = 8;
    /// Declared in the ring's configuration: it gated from the ring's creation, before any
    /// process attached to it.
    pub const DECLARED: u32 = 16;
    /// Set by an attacher before the compare-and-swap that makes the entry ACTIVE, cleared
    /// once it has stored its start. Until then `next` is a position read before that
    /// compare-and-swap (it gates there, so that a scan that sees the entry ACTIVE never
    /// gates past the start), which producers may have run a lap past: an entry whose
    /// holder died with this bit set is taken over at the head, not at `next`. A released
    /// consumer gating again sets it too, until it has stored the head (its `next` is the
    /// position it was released at).
    pub const STARTING: u32 = 32;
}

/// How many upstream consumers one consumer may name ([`ConsumerCold::upstream`]).
pub const MAX_UPSTREAM: usize = 4;

/// Error policies ([`ConsumerCold::error_policy`], for display).
pub mod error_policy {
    /// A failing event stops the consumer (it is marked FAILED at that event).
    pub const STOP: u32 = 0;
    /// A failing event is retried, then skipped and reported after a number of attempts.
    pub const SKIP: u32 = 1;
    /// A failing event is retried with back-off, then the consumer stops.
    pub const RETRY: u32 = 2;

    /// A display name for a policy code.
    pub const fn name(policy: u32) -> &'static str {
        match policy {
            STOP => "stop",
            SKIP => "skip",
            RETRY => "retry",
            _ => "unknown",
        }
    }
}

/// The part of a consumer entry that producers read: its position and whether it gates.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct ConsumerHot {
    /// The next sequence this consumer will read. Written once per batch (Release).
    pub next: AtomicU64,
    /// Who holds the entry: an [owned word](crate::owned_word) whose state byte is a
    /// [`consumer_state`] value. Changed only by compare-and-swap.
    pub word: AtomicU64,
    /// [`consumer_flags`] bits.
    pub flags: AtomicU32,
    _reserved: AtomicU32,
    /// The consumers parked behind this one (reading after it, `after`, or after the
    /// worker group whose entry this is) while it holds them at their position: woken by
    /// this entry's commits and other changes that let them act, never by a publish. On
    /// this line, next to `next`: the commit that stores `next` finds the waiter count in a
    /// line it already holds.
    pub downstream: crate::WakeLine,
    /// The first sequence of the range `first..next` that this entry's holder has read
    /// slot by slot: `next` moves past a sequence only once its slot showed it published or
    /// repaired. Every store that moves `next` otherwise (an attach's start, a jump to the
    /// head, a confirmation while released) stores the new position here first, and readers load `next` before this, so
    /// that a pair read under one word never covers a sequence nobody read. A multi-producer
    /// publish takes it as a witness that the previous lap of its slot was written
    /// (`gating::witness`).
    pub first: AtomicU64,
}

impl ConsumerHot {
    /// The state byte of [`Self::word`].
    #[inline(always)]
    pub fn state(&self, order: core::sync::atomic::Ordering) -> u32 {
        crate::owned_word::state(self.word.load(order))
    }
}

/// Per-consumer counters, written by the consumer once per batch and read by the broker.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ConsumerCounters {
    /// Events handed to the handler.
    pub delivered: AtomicU64,
    /// Batches (calls of `poll_once` that delivered something).
    pub batches: AtomicU64,
    /// Tombstoned slots skipped.
    pub skipped: AtomicU64,
    /// Events lost to lapping (optional consumers only).
    pub dropped_behind: AtomicU64,
    /// Slots whose length field exceeded the slot and was clamped.
    pub clamped: AtomicU64,
    /// Times this consumer woke from a park.
    pub wakeups: AtomicU64,
    /// Wake-ups that came by the timed net while an event was pending.
    pub net_wakeups: AtomicU64,
    /// Handler failures.
    pub failures: AtomicU64,
}

/// The part of a consumer entry that only the consumer and the broker touch.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct ConsumerCold {
    _reserved_pid: AtomicU32,
    /// Wait strategy kind, for display.
    pub wait_kind: AtomicU32,
    /// Start time of the owner process of [`ConsumerHot::word`] (clock ticks since boot,
    /// from `/proc/<pid>/stat`), so a reused pid is told apart. Written by the owner after
    /// the CAS that made it the owner, before its next state change: valid while the state
    /// is neither CLAIMED, RESUMING nor REATTACHING.
    pub start_time: AtomicU64,
    /// Wait strategy parameter (nanoseconds), for display.
    pub wait_param: AtomicU64,
    /// Monotonic nanoseconds of the last batch or heartbeat.
    pub heartbeat_ns: AtomicU64,
    /// Name, UTF-8, NUL padded (empty for anonymous consumers).
    pub name: [AtomicU64; NAME_LEN / 8],
    /// Times this entry was attached.
    pub attaches: AtomicU64,
    /// Whether the consumer is parked right now (1) or not (0).
    pub parked: AtomicU32,
    _reserved0: AtomicU32,
    /// The counters.
    pub counters: ConsumerCounters,
    /// The consumers this one reads behind: each an entry index plus one (0: none). It
    /// delivers an event only once every one of them has committed past it. Written by
    /// the holder before the CAS that makes it ACTIVE.
    pub upstream: [AtomicU32; MAX_UPSTREAM],
    /// For a [`consumer_flags::MEMBER`]: its group's entry index plus one.
    pub group: AtomicU32,
    /// The [`error_policy`] code, for display.
    pub error_policy: AtomicU32,
    /// For a [`consumer_flags::MEMBER`]: the end of the claim that starts at
    /// [`ConsumerHot::next`] (equal to it when the member holds no claim).
    pub claim_end: AtomicU64,
    /// The sequence plus one of the event whose handler is failing now (0: none).
    pub poison_seq: AtomicU64,
    /// Failed attempts at [`Self::poison_seq`] so far, across re-attaches.
    pub poison_attempts: AtomicU32,
    _reserved1: AtomicU32,
    /// The counters of the graph: redelivery, dead letters, retries.
    pub graph: GraphCounters,
}

/// The counters of dependencies, worker groups and error policies.
#[repr(C)]
#[derive(Debug, Default)]
pub struct GraphCounters {
    /// Events handed to this worker again because the member that claimed them died
    /// before committing them (each possibly a duplicate).
    pub redelivered: AtomicU64,
    /// Events skipped by the error policy (each reported as a dead letter).
    pub dead_lettered: AtomicU64,
    /// Failed attempts that were retried.
    pub retries: AtomicU64,
}

/// One consumer table entry: a hot line and a cold part.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ConsumerEntry {
    /// Read by producers at the wrap gate.
    pub hot: ConsumerHot,
    /// Read by the broker.
    pub cold: ConsumerCold,
}

/// Size of [`ConsumerEntry`].
pub const CONSUMER_ENTRY_SIZE: usize = 3 * LINE;
const _: () = assert!(size_of::<ConsumerHot>() == LINE);
const _: () = assert!(size_of::<ConsumerCold>() == 2 * LINE);
const _: () = assert!(size_of::<ConsumerEntry>() == CONSUMER_ENTRY_SIZE);
const _: () = assert!(offset_of!(ConsumerEntry, cold) == LINE);
const _: () = assert!(offset_of!(ConsumerHot, next) == 0);
const _: () = assert!(offset_of!(ConsumerHot, word) == 8);
const _: () = assert!(offset_of!(ConsumerHot, flags) == 16);
const _: () = assert!(offset_of!(ConsumerHot, downstream) == 24);
const _: () = assert!(offset_of!(ConsumerHot, first) == 40);
const _: () = assert!(offset_of!(ConsumerCold, name) == 32);
const _: () = assert!(offset_of!(ConsumerCold, counters) == 96);
const _: () = assert!(offset_of!(ConsumerCold, upstream) == 160);
const _: () = assert!(offset_of!(ConsumerCold, claim_end) == 184);
const _: () = assert!(offset_of!(ConsumerCold, graph) == 208);

/// Producer table entry states: the state byte of [`ProducerEntry::word`], whose owner pid
/// is the process holding the entry.
pub mod producer_state {
    /// Unused entry.
    pub const FREE: u32 = 0;
    /// Being filled in.
    pub const ATTACHING: u32 = 1;
    /// Attached.
    pub const ACTIVE: u32 = 2;
    /// Its producer died; the owner is repairing the claim it left, then frees the entry.
    pub const REPAIRING: u32 = 3;

    /// A display name for a state code.
    pub const fn name(state: u32) -> &'static str {
        match state {
            FREE => "FREE",
            ATTACHING => "ATTACHING",
            ACTIVE => "ACTIVE",
            REPAIRING => "REPAIRING",
            _ => "CORRUPT",
        }
    }
}

/// One producer table entry, written only by its owner: the producer, or a process
/// repairing what a dead producer left.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct ProducerEntry {
    /// Who holds the entry: an [owned word](crate::owned_word) whose state byte is a
    /// [`producer_state`] value. Changed only by compare-and-swap.
    pub word: AtomicU64,
    /// Process start time of the owner (see [`ConsumerCold::start_time`]; valid while the
    /// state is ACTIVE).
    pub start_time: AtomicU64,
    /// First sequence of the claim this producer holds, plus one (0: none;
    /// [`crate::IN_FLIGHT_CLAIMING`]: taking a claim, sequence not known yet).
    pub in_flight: AtomicU64,
    /// Number of sequences in that claim.
    pub in_flight_len: AtomicU64,
    /// Events published.
    pub published: AtomicU64,
    /// Publishes refused (ring full on try, timed out, closed, too large).
    pub refused: AtomicU64,
    /// Claims dropped without commit (published as tombstones).
    pub tombstoned: AtomicU64,
    /// Claims of this producer repaired by the broker after it died.
    pub repaired: AtomicU64,
    /// Times this producer parked waiting for room.
    pub parks: AtomicU64,
    /// A fixed-size ring's producer: the position it attached at. While it holds the entry
    /// it does not store `published` per event; its events are the cursor's advance since
    /// `base`, less its `tombstoned` (see `ProducerInfo`). Stored at attach, before ACTIVE.
    pub base: AtomicU64,
    /// A lone producer's position (see [`crate::CLAIM_LONE`]): the next sequence it claims,
    /// written only by it, with plain stores, while the claim counter names this entry.
    pub lone: AtomicU64,
    /// Where the lone claims of this entry ended: [`crate::LONE_OPEN`] while they run, then
    /// the position they ended at (every claim below it is the lone producer's, every one
    /// from it is taken from the counter again). Changed from `LONE_OPEN` by one
    /// compare-and-swap, which decides whose record it is; set back to `LONE_OPEN` only by
    /// the producer of the entry when it takes the line again.
    pub lone_end: AtomicU64,
}

impl ProducerEntry {
    /// The state byte of [`Self::word`].
    #[inline(always)]
    pub fn state(&self, order: core::sync::atomic::Ordering) -> u32 {
        crate::owned_word::state(self.word.load(order))
    }
}

/// Size of [`ProducerEntry`].
pub const PRODUCER_ENTRY_SIZE: usize = LINE;
const _: () = assert!(size_of::<ProducerEntry>() == PRODUCER_ENTRY_SIZE);
const _: () = assert!(offset_of!(ProducerEntry, start_time) == 8);
const _: () = assert!(offset_of!(ProducerEntry, in_flight) == 16);
const _: () = assert!(offset_of!(ProducerEntry, published) == 32);
const _: () = assert!(offset_of!(ProducerEntry, base) == 72);
const _: () = assert!(offset_of!(ProducerEntry, lone) == 80);
const _: () = assert!(offset_of!(ProducerEntry, lone_end) == 88);

/// The header of every slot. The payload follows it.
///
/// `stamp` is the protocol: a producer that owns sequence `s` for this slot stores
/// `s | STAMP_WRITING` (Relaxed) before touching the payload and `s` (Release) after; a
/// consumer waiting for `s` loads `stamp` (Acquire) and reads the payload once it equals
/// `s`. A repair of a sequence a dead producer never published swaps the stamp to
/// `s | STAMP_TOMBSTONE` in one compare-and-swap. [`crate::stamp::read`] says what a stamp
/// means to a reader.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SlotHeader {
    /// Sequence last published into the slot (see above).
    pub stamp: AtomicU64,
    /// Payload length in bytes.
    pub len: AtomicU32,
    /// [`crate::SLOT_FLAG_TOMBSTONE`] or 0.
    pub flags: AtomicU32,
}

const _: () = assert!(size_of::<SlotHeader>() == SLOT_HEADER_SIZE);
const _: () = assert!(offset_of!(SlotHeader, stamp) == 0);
const _: () = assert!(offset_of!(SlotHeader, len) == 8);
const _: () = assert!(offset_of!(SlotHeader, flags) == 12);
