//! The segment header and the ring-wide sequence lines.

use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::LINE;

/// One value alone on a 128-byte line (explicit, unlike `CachePadded`, whose alignment
/// changes per target).
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Padded<T> {
    /// The value.
    pub value: T,
}

/// The segment header at offset 0.
///
/// The configuration fields (`capacity` to `config_checksum`) are written once by the
/// creator before `magic` and never again; every reader copies them through [`crate::validate`]
/// and uses the copy. The fields after them change while the ring lives.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct Header {
    /// [`crate::MAGIC`] once initialised; written last (Release).
    pub magic: AtomicU64,
    /// [`crate::LAYOUT_VERSION`] of the creator.
    pub version: AtomicU32,
    /// [`ProducerMode`] as a number.
    pub producer_mode: AtomicU32,
    /// [`crate::FINGERPRINT`] of the creator.
    pub fingerprint: AtomicU64,
    /// Slots in the ring, a power of two.
    pub capacity: AtomicU64,
    /// Bytes per slot including the slot header, a multiple of 64.
    pub slot_size: AtomicU32,
    /// Entries in the consumer table.
    pub max_consumers: AtomicU32,
    /// Entries in the producer table.
    pub max_producers: AtomicU32,
    /// File mode the creator asked for (for display).
    pub file_mode: AtomicU32,
    /// How many events an optional consumer may hold producers back, beyond the slowest
    /// required consumer, before producers stop waiting for it.
    pub optional_slack: AtomicU64,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_ns: AtomicU64,
    /// Total bytes of the segment.
    pub total_size: AtomicU64,
    /// Checksum over the configuration fields above ([`config_checksum`]).
    pub config_checksum: AtomicU64,
    /// How a producer orders its publish against a parking consumer ([`FenceMode`]).
    pub fence_mode: AtomicU32,
    /// Pid of the broker that last adopted the segment (0: none).
    pub broker_pid: AtomicU32,
    /// The run number (the first run is 1, each start adds one) with [`crate::RUN_COUNTED`]:
    /// read it with [`crate::run_number`].
    pub run: AtomicU64,
    /// Incremented by every broker that adopts the segment.
    pub broker_epoch: AtomicU64,
    /// Monotonic nanoseconds of the broker's last sweep over this ring.
    pub last_sweep_ns: AtomicU64,
    /// The unblock clock: `CLOCK_BOOTTIME` nanoseconds at which a broker first saw a dead
    /// producer's claim unrepaired in this ring, 0 while none is known. Set by CAS from 0
    /// by the first sweep that sees such a hole; cleared by CAS from the value it read by
    /// a sweep that finds none left (repaired or filled). It outlives the broker, so a
    /// broker that restarts keeps counting the ring's `unblock_timeout` from the first
    /// sighting.
    pub hole_seen_ns: AtomicU64,
    /// How a slot holds its event: [`crate::SLOT_FORMAT_STAMPED`] or
    /// [`crate::SLOT_FORMAT_FIXED`]. A configuration field (in the checksum).
    pub slot_format: AtomicU32,
    _pad: AtomicU32,
    /// The creator's pid namespace: the inode of its `/proc/thread-self/ns/pid` (0: not
    /// known). Every entry records its process's pid as that process sees it, so only
    /// processes of this pid namespace can judge one another's liveness; others are refused
    /// at open. Written once, before the magic.
    pub pid_ns: AtomicU64,
    _reserved: [AtomicU64; 15],
}

/// Size of [`Header`].
pub const HEADER_SIZE: usize = 256;
const _: () = assert!(size_of::<Header>() == HEADER_SIZE);
const _: () = assert!(offset_of!(Header, magic) == 0);
const _: () = assert!(offset_of!(Header, version) == 8);
const _: () = assert!(offset_of!(Header, producer_mode) == 12);
const _: () = assert!(offset_of!(Header, fingerprint) == 16);
const _: () = assert!(offset_of!(Header, capacity) == 24);
const _: () = assert!(offset_of!(Header, slot_size) == 32);
const _: () = assert!(offset_of!(Header, max_consumers) == 36);
const _: () = assert!(offset_of!(Header, max_producers) == 40);
const _: () = assert!(offset_of!(Header, file_mode) == 44);
const _: () = assert!(offset_of!(Header, optional_slack) == 48);
const _: () = assert!(offset_of!(Header, created_unix_ns) == 56);
const _: () = assert!(offset_of!(Header, total_size) == 64);
const _: () = assert!(offset_of!(Header, config_checksum) == 72);
const _: () = assert!(offset_of!(Header, fence_mode) == 80);
const _: () = assert!(offset_of!(Header, run) == 88);
const _: () = assert!(offset_of!(Header, last_sweep_ns) == 104);
const _: () = assert!(offset_of!(Header, hole_seen_ns) == 112);
const _: () = assert!(offset_of!(Header, slot_format) == 120);
const _: () = assert!(offset_of!(Header, pid_ns) == 128);

/// The configuration words covered by [`Header::config_checksum`], in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigWords {
    /// See [`Header::producer_mode`].
    pub producer_mode: u32,
    /// See [`Header::capacity`].
    pub capacity: u64,
    /// See [`Header::slot_size`].
    pub slot_size: u32,
    /// See [`Header::max_consumers`].
    pub max_consumers: u32,
    /// See [`Header::max_producers`].
    pub max_producers: u32,
    /// See [`Header::file_mode`].
    pub file_mode: u32,
    /// See [`Header::optional_slack`].
    pub optional_slack: u64,
    /// See [`Header::created_unix_ns`].
    pub created_unix_ns: u64,
    /// See [`Header::total_size`].
    pub total_size: u64,
    /// See [`Header::slot_format`].
    pub slot_format: u32,
}

/// The checksum stored in [`Header::config_checksum`]: a bit flip in any configuration field
/// is caught by validation rather than read as a different ring.
pub const fn config_checksum(w: &ConfigWords) -> u64 {
    crate::fnv1a(&[
        w.producer_mode as u64,
        w.capacity,
        w.slot_size as u64,
        w.max_consumers as u64,
        w.max_producers as u64,
        w.file_mode as u64,
        w.optional_slack,
        w.created_unix_ns,
        w.total_size,
        w.slot_format as u64,
        crate::FINGERPRINT,
    ])
}

/// Whether one or many producers may publish into the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum ProducerMode {
    /// One producer at a time (others are refused at attach).
    Single = 1,
    /// Any number of producers up to the table size.
    #[default]
    Multi = 2,
}

impl ProducerMode {
    /// Decode the header word.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Single),
            2 => Some(Self::Multi),
            _ => None,
        }
    }
}

/// The ring's lifecycle state (the state byte of [`LifecycleLine::lifecycle`], see
/// [`lifecycle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum RingState {
    /// Publishing and consuming.
    Running = 1,
    /// Closed: claims are refused (the claim counter's CLOSED bit is set).
    Stopped = 2,
    /// Closed, consumers finishing what was published.
    Draining = 3,
    /// Being removed: every client gets an error.
    Deleted = 4,
    /// A stop (or drain, or remove) in progress, owned by the process named in the word: it
    /// is closing the line and recording the stop sequence.
    Stopping = 5,
    /// A start in progress, owned by the process named in the word: it is reopening the line.
    Starting = 6,
    /// A multi-producer line's lone producer is losing the line to itself, owned by the
    /// process named in the word: it is ending the lone claims and reopening the counter
    /// where they ended (see [`crate::CLAIM_LONE`]). Claims through the counter go on.
    Sharing = 7,
}

impl RingState {
    /// Decode the header word.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Running),
            2 => Some(Self::Stopped),
            3 => Some(Self::Draining),
            4 => Some(Self::Deleted),
            5 => Some(Self::Stopping),
            6 => Some(Self::Starting),
            7 => Some(Self::Sharing),
            _ => None,
        }
    }

    /// Whether a process owns the ring's lifecycle for the moment (the word names it).
    pub const fn is_transitional(self) -> bool {
        matches!(self, Self::Stopping | Self::Starting | Self::Sharing)
    }
}

/// The lifecycle word ([`LifecycleLine::lifecycle`]), an [owned word](crate::owned_word)
/// whose state byte is a [`RingState`](super::RingState) number.
///
/// | state | owner | line | stop sequence |
/// | --- | --- | --- | --- |
/// | Running | 0 | open | stale |
/// | Stopping | the stopper | closing | being recorded |
/// | Stopped, Draining | 0 | closed | valid |
/// | Starting | the starter | reopening | valid |
/// | Sharing | the sharer | open (a lone producer's claims ending) | stale |
/// | Deleted | 0 | closed | valid |
pub mod lifecycle {
    pub use crate::owned_word::*;
}

/// How a producer's publish is ordered against a consumer that is about to park.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum FenceMode {
    /// Not decided yet (no parking consumer attached so far).
    Unset = 0,
    /// Parking side issues `membarrier(GLOBAL_EXPEDITED)`; publish is a plain load.
    Membarrier = 1,
    /// Publish issues a `SeqCst` fence (kernel lacks membarrier).
    SeqCstFence = 2,
}

impl FenceMode {
    /// Decode the header word.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Unset),
            1 => Some(Self::Membarrier),
            2 => Some(Self::SeqCstFence),
            _ => None,
        }
    }
}

/// A waiter word and a 32-bit futex word, on one line.
#[repr(C)]
#[derive(Debug, Default)]
pub struct WakeLine {
    /// Parkers counted on `word`, and the epoch they were counted in: see [`waiters`].
    pub waiters: AtomicU64,
    /// The futex word: bumped by a waker, waited on by a parker. 32-bit: the kernel has no
    /// 64-bit futex, and mixed-size access to one atomic is undefined.
    pub word: AtomicU32,
}

/// The waiter word of a [`WakeLine`]: `epoch (32 bits) | count (32 bits)`.
///
/// | who | change | how |
/// | --- | --- | --- |
/// | a parker, before its last look | count + 1, remembering the epoch | `fetch_add(RAISE)` |
/// | that parker, after it woke | count - 1, only if the epoch is still the one it raised in | CAS from the value read |
/// | a waker that finds the count non-zero | count 0, epoch + 1, then it bumps the futex word and wakes every sleeper | CAS from the value read |
///
/// A waker's reset drops every raise counted so far, including one a killed parker can no
/// longer take back: a dead parker costs one wake, then nothing. The parkers it drops are
/// woken by the same waker and raise again if they park again.
pub mod waiters {
    /// What a parker adds: one to the count.
    pub const RAISE: u64 = 1;

    /// The parkers counted.
    pub const fn count(word: u64) -> u32 {
        word as u32
    }
    /// The epoch: bumped by every reset.
    pub const fn epoch(word: u64) -> u32 {
        (word >> 32) as u32
    }
    /// The word a reset of `word` leaves: no parker counted, the next epoch.
    pub const fn reset(word: u64) -> u64 {
        (epoch(word).wrapping_add(1) as u64) << 32
    }
}

/// The lifecycle of the sequence line, on a line of its own: read on every publish by a
/// single producer and on every idle look by a consumer, written only by lifecycle changes,
/// so it stays shared in every cache (apart from the claim counter, which a single producer
/// writes on every publish).
#[repr(C)]
#[derive(Debug, Default)]
pub struct LifecycleLine {
    /// The lifecycle word, see [`lifecycle`].
    pub lifecycle: AtomicU64,
    /// The line's position when it was last closed (valid while the lifecycle state is not
    /// Running or Stopping): the first sequence of the next run.
    pub stop_seq: AtomicU64,
}

/// The ring-wide sequences, each alone on its line.
#[repr(C)]
#[derive(Debug, Default)]
pub struct SequenceLines {
    /// The claim counter: see [`ClaimLine`].
    pub claim: ClaimLine,
    /// A fixed-size ring's cursor and tombstone bound: see [`CursorLine`].
    pub cursor: CursorLine,
    /// A lower bound of every gating consumer's next sequence, shared by producers so that
    /// one scan of the consumer table serves them all.
    pub gating: Padded<AtomicU64>,
    /// Consumers parked waiting for events: woken by every publish, and by every change of
    /// a consumer entry that lets the consumers after it act. A consumer held by an
    /// upstream consumer parks on that consumer's entry instead
    /// ([`crate::ConsumerHot::downstream`]).
    pub consumer_wake: Padded<WakeLine>,
    /// Producers parked waiting for room.
    pub producer_wake: Padded<WakeLine>,
    /// The lifecycle word and the stop sequence.
    pub lifecycle: Padded<LifecycleLine>,
}

/// The claim line.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct ClaimLine {
    /// The claim. Multi-producer: the claim counter, next sequence to hand out, taken with
    /// `fetch_add`, with [`crate::CLAIM_CLOSED`] in bit 63. Single producer: the producer's
    /// own position (next sequence), written only by it with plain stores (before it writes
    /// the events); the line is closed by the lifecycle word alone. A ring published by a
    /// cursor (fixed-size or sized events, since layout 13): the write horizon instead, no
    /// sequence at or past it written and the cursor never past it, raised by the producer
    /// before it writes or claims past it and never lowered; the producer's claims are made
    /// on [`CursorLine::cursor`].
    pub value: AtomicU64,
}

/// A fixed-size ring's cursor and tombstone bound, on a line of their own, apart from the
/// claim: a consumer waiting for the next event reads this line, and only the store that
/// publishes events writes it. On the claim's line (before layout 12), each event's claim
/// store first took the line back from a consumer waiting on the cursor, and the cursor
/// store often again: a busy-spin consumer's one-way latency on such a ring was 37-137 ns
/// above what it is with the cursor apart (ARCHITECTURE.md, "A fixed-size ring's cursor on
/// a line of its own").
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub struct CursorLine {
    /// A fixed-size ring's cursor, which is also its claim word (since layout 13): the
    /// single producer's position, stored by its claim, after the event in the common case
    /// (the claim is the publish) and before the events otherwise (then `pending` says
    /// from where they are still being written). Every sequence below it, and below
    /// `pending`, that the lifecycle word lets a reader count holds its event or is a
    /// tombstone (the client's `fixed` module); 0 and unused on a ring of stamped slots.
    pub cursor: AtomicU64,
    /// A fixed-size ring's tombstone bound: every tombstone lies below it (see
    /// `Geometry::tombs_offset`). Stored before the `pending` store that publishes the
    /// tombstones.
    pub tomb_end: AtomicU64,
    /// A fixed-size ring's first sequence claimed and not yet written ([`PENDING_NONE`]:
    /// none): stored by the single producer before a claim whose events it writes after
    /// claiming, and set back to [`PENDING_NONE`] (Release) once they are written or
    /// tombstoned.
    pub pending: AtomicU64,
}

/// [`CursorLine::pending`] when no claim is being written: every sequence below the cursor
/// is written.
pub const PENDING_NONE: u64 = u64::MAX;

/// Offset of [`SequenceLines`] in the segment.
pub const SEQ_LINES_OFFSET: usize = HEADER_SIZE;
/// Size of [`SequenceLines`].
pub const SEQ_LINES_SIZE: usize = 6 * LINE;
const _: () = assert!(size_of::<Padded<AtomicU64>>() == LINE);
const _: () = assert!(size_of::<SequenceLines>() == SEQ_LINES_SIZE);
const _: () = assert!(offset_of!(SequenceLines, claim) == 0);
const _: () = assert!(size_of::<ClaimLine>() == LINE);
const _: () = assert!(offset_of!(ClaimLine, value) == 0);
const _: () = assert!(size_of::<CursorLine>() == LINE);
const _: () = assert!(offset_of!(SequenceLines, cursor) == LINE);
const _: () = assert!(offset_of!(CursorLine, cursor) == 0);
const _: () = assert!(offset_of!(CursorLine, tomb_end) == 8);
const _: () = assert!(offset_of!(CursorLine, pending) == 16);
const _: () = assert!(offset_of!(SequenceLines, gating) == 2 * LINE);
const _: () = assert!(offset_of!(SequenceLines, consumer_wake) == 3 * LINE);
const _: () = assert!(offset_of!(SequenceLines, producer_wake) == 4 * LINE);
const _: () = assert!(offset_of!(WakeLine, waiters) == 0);
const _: () = assert!(offset_of!(WakeLine, word) == 8);
const _: () = assert!(size_of::<Padded<LifecycleLine>>() == LINE);
const _: () = assert!(offset_of!(SequenceLines, lifecycle) == 5 * LINE);
const _: () = assert!(offset_of!(LifecycleLine, lifecycle) == 0);
const _: () = assert!(offset_of!(LifecycleLine, stop_seq) == 8);
