//! The shared-memory segment layout of shmring.
//!
//! One segment holds one ring. Everything in it is `#[repr(C)]`, every region starts on a
//! 128-byte line, and every offset the protocols rely on is asserted at compile time. This
//! crate makes no syscalls and holds no policy: it says where things are, and
//! [`validate`] turns any byte buffer (a snapshot of a segment's first [`HEADER_SIZE`]
//! bytes, plus the file's length) into either a checked [`Geometry`] or a typed
//! [`LayoutError`].
//!
//! ```text
//! offset 0            Header            (256 B: magic, version, fingerprint, config, state)
//! SEQ_LINES_OFFSET    SequenceLines     (6 x 128 B: claim counter, a fixed-size ring's
//!                                        cursor and tombstone bound, gating cache,
//!                                        consumer wake line, producer wake line,
//!                                        lifecycle word and stop sequence)
//! consumers_offset    ConsumerEntry x max_consumers   (hot 128 B + cold 256 B each)
//! producers_offset    ProducerEntry x max_producers   (128 B each)
//! slots_offset        slot x capacity   ([stamp u64 | len u32 | flags u32 | payload])
//! ```
//!
//! The creating process writes every field with `magic == 0`, then the version, then the
//! magic last (Release): a half-built segment never validates.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod entries;
mod header;
mod validate;

pub use entries::*;
pub use header::*;
pub use validate::*;

/// The size of one padded line. 128 bytes on every target: the adjacent-line prefetcher on
/// x86_64 pulls cache lines in pairs, so two hot words 64 bytes apart still share traffic.
pub const LINE: usize = 128;

/// Layout version. Bump it on any change to a type in this crate.
pub const LAYOUT_VERSION: u32 = 14;

/// "SHMRING\0" read as a little-endian u64; 0 means "not yet initialised".
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMRING\0");

/// A sequence number with this bit set in a slot stamp means "a producer is writing the
/// sequence in the low bits into this slot" (see [`SlotHeader::stamp`]).
pub const STAMP_WRITING: u64 = 1 << 63;

/// A sequence number with this bit set in a slot stamp means "sequence `s` (the low bits)
/// was repaired: it holds no event". A repair writes it with one compare-and-swap, so the
/// slot never holds a half-written tombstone (see [`stamp`]).
pub const STAMP_TOMBSTONE: u64 = 1 << 62;

/// A stamp that no sequence ever has: the slot was never written.
pub const STAMP_EMPTY: u64 = u64::MAX;

/// What a slot stamp says about the sequence a reader expects there. The one reading of a
/// stamp: consumers, repairs, recalls and the line's position all use it.
pub mod stamp {
    use super::{STAMP_EMPTY, STAMP_TOMBSTONE, STAMP_WRITING};

    /// What a slot holds, relative to the sequence `seq` a reader expects in it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Stamp {
        /// `seq` is published (an event, or a tombstone its producer wrote in the flags).
        Published,
        /// `seq` was repaired: no event, skip it.
        Repaired,
        /// `seq` is not there yet: an older sequence, `seq` being written, or never written.
        Pending,
        /// A newer sequence is there (or being written): `seq` was overwritten.
        Lapped,
    }

    /// The sequence a stamp names, without its WRITING and TOMBSTONE bits.
    pub const fn sequence(stamp: u64) -> u64 {
        stamp & !(STAMP_WRITING | STAMP_TOMBSTONE)
    }

    /// Read `stamp` for the reader that expects sequence `seq` (below `MAX_SEQUENCE`).
    #[inline(always)]
    pub const fn read(stamp: u64, seq: u64) -> Stamp {
        if stamp == seq {
            Stamp::Published
        } else if stamp == seq | STAMP_TOMBSTONE {
            Stamp::Repaired
        } else if stamp != STAMP_EMPTY && sequence(stamp) > seq {
            Stamp::Lapped
        } else {
            Stamp::Pending
        }
    }

    /// Whether `seq` is there, as an event or a tombstone of either kind.
    #[inline(always)]
    pub const fn is_done(stamp: u64, seq: u64) -> bool {
        matches!(read(stamp, seq), Stamp::Published | Stamp::Repaired)
    }

    /// What a slot holds for the producer of `seq` on a ring of `capacity` slots, before
    /// it writes there (see [`lap`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Lap {
        /// The slot is done with every earlier sequence: the previous lap `seq - capacity`
        /// is published or repaired, or on the first lap the slot was never written.
        Free,
        /// An earlier sequence is still to be written there: the previous lap claimed and
        /// not written yet (the slot holds an older lap), or being written.
        Held,
        /// `seq` or a later sequence is there already (written, being written or repaired).
        Taken,
    }

    /// Read `stamp` for the producer that holds `seq` (below `MAX_SEQUENCE`) on a ring of
    /// `capacity` slots. The wrap gate lets a producer write `seq` once every gating
    /// consumer has read `seq - capacity`, but a consumer that attached after the previous
    /// lap was claimed does not gate it: the slot may still be waiting for that write.
    #[inline(always)]
    pub const fn lap(stamp: u64, seq: u64, capacity: u64) -> Lap {
        let free = match seq.checked_sub(capacity) {
            Some(previous) => stamp == previous || stamp == previous | STAMP_TOMBSTONE,
            None => stamp == STAMP_EMPTY,
        };
        if free {
            Lap::Free
        } else if stamp != STAMP_EMPTY && sequence(stamp) >= seq {
            Lap::Taken
        } else {
            Lap::Held
        }
    }

    /// Whether a reader waiting for `seq` has something to act on: `seq` itself (an event
    /// or a tombstone), or a later sequence (it was lapped). Not a sequence of the previous
    /// lap, not `seq` while it is being written (or was left half written by a producer
    /// that died), and not an empty slot.
    #[inline(always)]
    pub const fn reached(stamp: u64, seq: u64) -> bool {
        !matches!(read(stamp, seq), Stamp::Pending)
    }
}

/// Bit 63 of the run word ([`Header::run`]): the start of the current run has been counted.
/// The owner of a start (the starter, or whoever finishes a dead starter's start) adds one
/// to the run number and sets it in one step before it reopens the line, unless it is set:
/// a start is counted once, however many processes finish it. The owner of a stop clears it
/// once it closed the line, before it publishes the closed state, so the next start is
/// counted.
pub const RUN_COUNTED: u64 = 1 << 63;

/// The run number a run word holds (without [`RUN_COUNTED`]).
pub const fn run_number(word: u64) -> u64 {
    word & !RUN_COUNTED
}

/// Bit 63 of the claim counter: set when the ring is stopped. A claim that reads it set is
/// refused; the low bits keep counting claims.
pub const CLAIM_CLOSED: u64 = 1 << 63;

/// Mask of the low bits of the claim counter: the next sequence to hand out.
pub const CLAIM_SEQ_MASK: u64 = CLAIM_CLOSED - 1;

/// Bit 62 of a multi-producer claim counter: one producer has the line to itself (a lone
/// producer), and claims go through its entry's [`ProducerEntry::lone`] with plain stores
/// instead of the counter. The entry's index is in bits 32..40 and its complement in bits
/// 40..48 ([`claim_lone`]), so that a word overwritten with some value past any sequence
/// is seldom taken for one; a `fetch_add` of another producer bumps the low 32 bits, which
/// mean nothing while the bit is set, and sends that producer to end the lone claims (see
/// the client's `line`).
pub const CLAIM_LONE: u64 = 1 << 62;

/// The bits of a [`CLAIM_LONE`] counter above the bumps: the bit, the index, its
/// complement, and bits 48..62, zero.
const CLAIM_LONE_TAG: u64 = !((1 << 32) - 1);

/// The claim counter that says producer entry `index` (below [`MAX_PRODUCERS`]) is the
/// lone producer.
pub const fn claim_lone(index: u32) -> u64 {
    let index = index as u64 & 0xff;
    CLAIM_LONE | (index << 32) | ((!index & 0xff) << 40)
}

/// The lone producer's entry index in a claim counter, if the counter says there is one
/// (as [`claim_lone`] writes it, plus bumps). Any other counter with bit 62 set is at or
/// past [`MAX_SEQUENCE`]: no position, and every reader refuses it as such.
pub const fn claim_lone_index(counter: u64) -> Option<u32> {
    let index = ((counter >> 32) & 0xff) as u32;
    if counter & CLAIM_LONE_TAG == claim_lone(index) {
        Some(index)
    } else {
        None
    }
}

/// [`ProducerEntry::lone_end`] while the lone claims are open: no one has ended them.
pub const LONE_OPEN: u64 = u64::MAX;

/// Sequences stay below this (2^62): a stamp's WRITING and TOMBSTONE bits and the claim
/// counter's CLOSED bit never collide with a real sequence. At 10^9 events/s that is 146 years.
pub const MAX_SEQUENCE: u64 = 1 << 62;

/// [`ProducerEntry::in_flight`] while a producer is taking a claim and does not know its
/// sequence yet: if it dies there, the hole it leaves can only be found by looking.
pub const IN_FLIGHT_CLAIMING: u64 = u64::MAX;

/// Size of the slot header that precedes every payload.
pub const SLOT_HEADER_SIZE: usize = 16;

/// [`Header::slot_format`] of a ring of stamped slots: each a [`SlotHeader`] then up to
/// `slot_size - SLOT_HEADER_SIZE` payload bytes.
pub const SLOT_FORMAT_STAMPED: u32 = 0;
/// [`Header::slot_format`] of a fixed-size ring: each slot is exactly one event's payload
/// (`slot_size` bytes), published by [`CursorLine::cursor`], with a tomb word per slot after
/// the slots (see `Geometry::tombs_offset`). Single producer only.
pub const SLOT_FORMAT_FIXED: u32 = 1;
/// [`Header::slot_format`] of a ring of sized events: each slot is a length word
/// ([`SIZED_LEN_SIZE`] bytes, the event's length in bytes) then up to
/// `slot_size - SIZED_LEN_SIZE` payload bytes, published by [`CursorLine::cursor`] with tomb
/// words as on a fixed-size ring. Single producer only.
pub const SLOT_FORMAT_SIZED: u32 = 2;
/// The length word at the start of every slot of a ring of sized events.
pub const SIZED_LEN_SIZE: u32 = 8;
/// A fixed-size ring's tomb word that names no sequence (every tomb word starts so): a
/// tomb word equal to a sequence marks that sequence a tombstone.
pub const TOMB_NONE: u64 = u64::MAX;
/// A fixed-size ring's events are a multiple of this many bytes.
pub const FIXED_EVENT_ALIGN: u32 = 8;

/// Smallest slot (header + 48 bytes of payload).
pub const MIN_SLOT_SIZE: u32 = 64;
/// Largest slot: 16 MiB.
pub const MAX_SLOT_SIZE: u32 = 16 << 20;
/// Smallest capacity.
pub const MIN_CAPACITY: u64 = 2;
/// Largest capacity (2^24 slots).
pub const MAX_CAPACITY: u64 = 1 << 24;
/// Most consumers one ring can carry.
pub const MAX_CONSUMERS: u32 = 256;
/// Most producers one ring can carry.
pub const MAX_PRODUCERS: u32 = 256;
/// Largest segment this layout accepts (16 GiB).
pub const MAX_SEGMENT_SIZE: u64 = 16 << 30;
/// Bytes of a consumer name (UTF-8, NUL padded).
pub const NAME_LEN: usize = 48;

/// A slot's flags word: the slot holds no event (a claim that was dropped or repaired).
pub const SLOT_FLAG_TOMBSTONE: u32 = 1;

/// A word that names who holds a thing and in which state: `generation (24 bits) | state
/// (8 bits) | owner pid (32 bits)`. The ring's lifecycle word and every table entry's word
/// have this shape. It changes only by compare-and-swap, each change bumping the
/// generation, so a value never repeats within 2^24 changes: a CAS made on the strength of
/// an old reading fails, and the owner's pid changes in the same step as the state.
pub mod owned_word {
    /// Bits of the generation.
    pub const GEN_BITS: u32 = 24;
    const GEN_MASK: u64 = (1 << GEN_BITS) - 1;

    /// Build a word.
    pub const fn pack(generation: u32, state: u32, owner: u32) -> u64 {
        ((generation as u64 & GEN_MASK) << 40) | ((state as u64 & 0xff) << 32) | owner as u64
    }
    /// The generation.
    pub const fn generation(word: u64) -> u32 {
        ((word >> 40) & GEN_MASK) as u32
    }
    /// The state byte.
    pub const fn state(word: u64) -> u32 {
        ((word >> 32) & 0xff) as u32
    }
    /// The owner's pid.
    pub const fn owner(word: u64) -> u32 {
        word as u32
    }
    /// The word after `word`: the next generation, with a new state and owner.
    pub const fn next(word: u64, state: u32, owner: u32) -> u64 {
        pack(generation(word).wrapping_add(1), state, owner)
    }
}

/// FNV-1a over a list of words, usable in `const` context.
const fn fnv1a(words: &[u64]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < words.len() {
        let mut b = 0;
        while b < 8 {
            hash ^= (words[i] >> (b * 8)) & 0xff;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            b += 1;
        }
        i += 1;
    }
    hash
}

/// A hash of every size and offset in this layout. A client built against another layout
/// (same version number, different code) refuses the segment instead of misreading it.
pub const FINGERPRINT: u64 = fnv1a(&[
    LAYOUT_VERSION as u64,
    LINE as u64,
    core::mem::size_of::<Header>() as u64,
    core::mem::size_of::<SequenceLines>() as u64,
    core::mem::size_of::<ConsumerEntry>() as u64,
    core::mem::size_of::<ProducerEntry>() as u64,
    SLOT_HEADER_SIZE as u64,
    core::mem::offset_of!(Header, capacity) as u64,
    core::mem::offset_of!(Header, run) as u64,
    core::mem::offset_of!(Header, hole_seen_ns) as u64,
    core::mem::offset_of!(Header, slot_format) as u64,
    core::mem::offset_of!(SequenceLines, cursor) as u64,
    core::mem::offset_of!(CursorLine, cursor) as u64,
    core::mem::offset_of!(CursorLine, tomb_end) as u64,
    core::mem::offset_of!(CursorLine, pending) as u64,
    PENDING_NONE,
    core::mem::offset_of!(ProducerEntry, base) as u64,
    SLOT_FORMAT_FIXED as u64,
    SLOT_FORMAT_SIZED as u64,
    SIZED_LEN_SIZE as u64,
    core::mem::offset_of!(SequenceLines, claim) as u64,
    core::mem::offset_of!(SequenceLines, lifecycle) as u64,
    core::mem::offset_of!(LifecycleLine, stop_seq) as u64,
    core::mem::offset_of!(SequenceLines, consumer_wake) as u64,
    core::mem::offset_of!(ConsumerHot, downstream) as u64,
    core::mem::offset_of!(WakeLine, word) as u64,
    core::mem::offset_of!(ConsumerEntry, cold) as u64,
    core::mem::offset_of!(ConsumerCold, upstream) as u64,
    core::mem::offset_of!(ConsumerCold, claim_end) as u64,
    core::mem::offset_of!(ConsumerCold, graph) as u64,
    MAX_UPSTREAM as u64,
    core::mem::offset_of!(ConsumerHot, word) as u64,
    core::mem::offset_of!(ConsumerHot, flags) as u64,
    core::mem::offset_of!(ConsumerCold, counters) as u64,
    core::mem::offset_of!(ProducerEntry, published) as u64,
    core::mem::offset_of!(SlotHeader, len) as u64,
    STAMP_WRITING,
    STAMP_TOMBSTONE,
    CLAIM_CLOSED,
    CLAIM_LONE,
    core::mem::offset_of!(ProducerEntry, lone) as u64,
    core::mem::offset_of!(ProducerEntry, lone_end) as u64,
    LONE_OPEN,
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_has_something_at_its_sequence_or_past_it_never_at_an_older_or_half_written_one() {
        let seq = 20;
        assert!(stamp::reached(seq, seq), "published");
        assert!(stamp::reached(seq | STAMP_TOMBSTONE, seq), "repaired");
        assert!(stamp::reached(seq + 16, seq), "lapped");
        assert!(
            stamp::reached((seq + 16) | STAMP_WRITING, seq),
            "lapped mid-write"
        );
        assert!(
            stamp::reached((seq + 16) | STAMP_TOMBSTONE, seq),
            "lapped by a repair"
        );
        assert!(!stamp::reached(seq - 16, seq), "the previous lap: a hole");
        assert!(
            !stamp::reached((seq - 16) | STAMP_TOMBSTONE, seq),
            "the previous lap repaired: still a hole"
        );
        assert!(!stamp::reached(seq | STAMP_WRITING, seq), "being written");
        assert!(!stamp::reached(STAMP_EMPTY, seq), "never written");
    }

    #[test]
    fn a_slot_is_free_for_a_sequence_only_once_its_previous_lap_is_done() {
        use stamp::{lap, Lap};
        let (seq, cap) = (40, 16);
        assert_eq!(lap(24, seq, cap), Lap::Free, "the previous lap published");
        assert_eq!(
            lap(24 | STAMP_TOMBSTONE, seq, cap),
            Lap::Free,
            "and repaired"
        );
        assert_eq!(lap(STAMP_EMPTY, 3, cap), Lap::Free, "the first lap");
        assert_eq!(
            lap(STAMP_EMPTY, seq, cap),
            Lap::Held,
            "the previous lap to come"
        );
        assert_eq!(
            lap(24 | STAMP_WRITING, seq, cap),
            Lap::Held,
            "being written"
        );
        assert_eq!(lap(8, seq, cap), Lap::Held, "two laps back");
        assert_eq!(lap(seq, seq, cap), Lap::Taken, "this sequence");
        assert_eq!(
            lap(seq | STAMP_WRITING, seq, cap),
            Lap::Taken,
            "being written by its producer"
        );
        assert_eq!(lap(seq | STAMP_TOMBSTONE, seq, cap), Lap::Taken, "repaired");
        assert_eq!(lap(seq + cap, seq, cap), Lap::Taken, "a later lap");
    }
}
