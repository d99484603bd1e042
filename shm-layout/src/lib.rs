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
//! SEQ_LINES_OFFSET    SequenceLines     (5 x 128 B: claim counter, gating cache,
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
pub const LAYOUT_VERSION: u32 = 3;

/// "SHMRING\0" read as a little-endian u64; 0 means "not yet initialised".
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMRING\0");

/// A sequence number with this bit set in a slot stamp means "a producer is writing the
/// sequence in the low bits into this slot" (see [`SlotHeader::stamp`]).
pub const STAMP_WRITING: u64 = 1 << 63;

/// A stamp that no sequence ever has: the slot was never written.
pub const STAMP_EMPTY: u64 = u64::MAX;

/// Whether a slot stamped `stamp` gives a reader waiting for sequence `seq` something to
/// act on: `seq` itself, published, or a later sequence (the reader was lapped). Not a
/// sequence of the previous lap, not `seq` while it is being written (or was left half
/// written by a producer that died), and not an empty slot.
pub const fn stamp_reached(stamp: u64, seq: u64) -> bool {
    stamp == seq || (stamp != STAMP_EMPTY && (stamp & !STAMP_WRITING) > seq)
}

/// Bit 63 of the claim counter: set when the ring is stopped. A claim that reads it set is
/// refused; the low bits keep counting claims.
pub const CLAIM_CLOSED: u64 = 1 << 63;

/// Mask of the low bits of the claim counter: the next sequence to hand out.
pub const CLAIM_SEQ_MASK: u64 = CLAIM_CLOSED - 1;

/// Sequences stay below this (2^62): a stamp's WRITING bit and the claim counter's CLOSED
/// bit never collide with a real sequence. At 10^9 events/s that is 146 years.
pub const MAX_SEQUENCE: u64 = 1 << 62;

/// [`ProducerEntry::in_flight`] while a producer is taking a claim and does not know its
/// sequence yet: if it dies there, the hole it leaves can only be found by looking.
pub const IN_FLIGHT_CLAIMING: u64 = u64::MAX;

/// Size of the slot header that precedes every payload.
pub const SLOT_HEADER_SIZE: usize = 16;

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
    core::mem::offset_of!(SequenceLines, claim) as u64,
    core::mem::offset_of!(SequenceLines, lifecycle) as u64,
    core::mem::offset_of!(LifecycleLine, stop_seq) as u64,
    core::mem::offset_of!(SequenceLines, consumer_wake) as u64,
    core::mem::offset_of!(WakeLine, word) as u64,
    core::mem::offset_of!(ConsumerEntry, cold) as u64,
    core::mem::offset_of!(ConsumerCold, counters) as u64,
    core::mem::offset_of!(ProducerEntry, published) as u64,
    core::mem::offset_of!(SlotHeader, len) as u64,
    STAMP_WRITING,
    CLAIM_CLOSED,
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_has_something_at_its_sequence_or_past_it_never_at_an_older_or_half_written_one() {
        let seq = 20;
        assert!(stamp_reached(seq, seq), "published");
        assert!(stamp_reached(seq + 16, seq), "lapped");
        assert!(
            stamp_reached((seq + 16) | STAMP_WRITING, seq),
            "lapped mid-write"
        );
        assert!(!stamp_reached(seq - 16, seq), "the previous lap: a hole");
        assert!(!stamp_reached(seq | STAMP_WRITING, seq), "being written");
        assert!(!stamp_reached(STAMP_EMPTY, seq), "never written");
    }
}
