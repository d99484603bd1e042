//! Geometry (where every region is) and validation of untrusted segment bytes.

use core::mem::offset_of;

use crate::FIXED_EVENT_ALIGN;
use crate::{
    config_checksum, ConfigWords, Header, ProducerMode, CONSUMER_ENTRY_SIZE, FINGERPRINT,
    HEADER_SIZE, LAYOUT_VERSION, LINE, MAGIC, MAX_CAPACITY, MAX_CONSUMERS, MAX_PRODUCERS,
    MAX_SEGMENT_SIZE, MAX_SLOT_SIZE, MIN_CAPACITY, MIN_SLOT_SIZE, PRODUCER_ENTRY_SIZE,
    SEQ_LINES_OFFSET, SEQ_LINES_SIZE, SIZED_LEN_SIZE, SLOT_FORMAT_FIXED, SLOT_FORMAT_SIZED,
    SLOT_FORMAT_STAMPED, SLOT_HEADER_SIZE,
};

/// Why a segment (or a requested configuration) is not a ring this code can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Fewer bytes than a header.
    #[error("segment is truncated: {len} bytes, a header needs {HEADER_SIZE}: remove the file and create the ring again")]
    TooShortForHeader {
        /// Bytes available.
        len: u64,
    },
    /// Magic is zero: the creator has not finished (or died while creating).
    #[error("segment is not initialised (creator still running or died while creating): remove it and create the ring again")]
    NotInitialised,
    /// Magic is something else.
    #[error(
        "not a shmring segment (magic {found:#018x}): remove the file or use another ring name"
    )]
    BadMagic {
        /// The magic found.
        found: u64,
    },
    /// Another layout version.
    #[error(
        "segment has layout version {found}, this code reads {LAYOUT_VERSION}: {}",
        version_advice(*.found)
    )]
    WrongVersion {
        /// The version found.
        found: u32,
    },
    /// Same version, another layout (built from different code).
    #[error("segment layout fingerprint {found:#018x} differs from this build's {FINGERPRINT:#018x}: client and segment come from different builds")]
    WrongFingerprint {
        /// The fingerprint found.
        found: u64,
    },
    /// A configuration field fails its checksum.
    #[error("segment header checksum mismatch: the header is corrupted; remove the segment and create the ring again")]
    BadChecksum,
    /// Capacity is not a power of two in range.
    #[error("capacity {0} is not a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}")]
    BadCapacity(u64),
    /// Slot size out of range or not a multiple of 64.
    #[error("slot size {0} is not a multiple of 64 in {MIN_SLOT_SIZE}..={MAX_SLOT_SIZE}")]
    BadSlotSize(u32),
    /// A fixed-size ring's event size out of range or not a multiple of 8.
    #[error("event size {0} is not a multiple of {FIXED_EVENT_ALIGN} in {FIXED_EVENT_ALIGN}..={MAX_SLOT_SIZE}")]
    BadEventSize(u32),
    /// A sized ring's largest event out of range or not a multiple of 8.
    #[error("max event size {0} is not a multiple of {FIXED_EVENT_ALIGN} in {FIXED_EVENT_ALIGN}..={max}", max = MAX_SLOT_SIZE - SIZED_LEN_SIZE)]
    BadMaxEventSize(u32),
    /// Unknown slot format.
    #[error("slot format {0} is unknown")]
    BadSlotFormat(u32),
    /// A single-producer ring whose producer table has more than one entry.
    #[error("a single-producer ring has one producer entry, not {0}")]
    SingleWithProducers(u32),
    /// A fixed-size ring asked for with many producers.
    #[error("a ring of fixed-size or sized events takes a single producer (producer_mode Single)")]
    FixedNeedsSingleProducer,
    /// Consumer table size out of range.
    #[error("max consumers {0} is not in 1..={MAX_CONSUMERS}")]
    BadMaxConsumers(u32),
    /// Producer table size out of range.
    #[error("max producers {0} is not in 1..={MAX_PRODUCERS}")]
    BadMaxProducers(u32),
    /// Unknown producer mode.
    #[error("producer mode {0} is unknown")]
    BadProducerMode(u32),
    /// Optional slack larger than the ring.
    #[error("optional slack {slack} exceeds capacity {capacity}")]
    BadSlack {
        /// The slack.
        slack: u64,
        /// The capacity.
        capacity: u64,
    },
    /// The whole segment would be too large.
    #[error("segment of {0} bytes exceeds the {MAX_SEGMENT_SIZE}-byte limit")]
    TooLarge(u64),
    /// The header says one size, the file has another.
    #[error("segment is {actual} bytes but its header says {expected}: it was truncated or grown; remove it and create the ring again")]
    SizeMismatch {
        /// Size computed from the header.
        expected: u64,
        /// Size of the file.
        actual: u64,
    },
}

/// What to do about a segment of layout version `found` (not this code's).
fn version_advice(found: u32) -> &'static str {
    if found < LAYOUT_VERSION {
        "the ring was made by an older shmring; remove it (`Ring::remove`, or delete its file) and create it again with this one"
    } else {
        "the ring was made by a newer shmring; upgrade this client to read it"
    }
}

/// The checked shape of a ring: every region's offset, computed from validated numbers.
/// Any offset the client uses comes from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Slots, a power of two.
    pub capacity: u64,
    /// Bytes per slot: a multiple of 64 (header and payload), or on a fixed-size ring the
    /// event size (a multiple of 8, the slot is the payload), or on a ring of sized events
    /// the length word and the largest event (a multiple of 8).
    pub slot_size: u32,
    /// Whether slots are published by a cursor ([`SLOT_FORMAT_FIXED`] or
    /// [`SLOT_FORMAT_SIZED`]) rather than stamped.
    pub fixed: bool,
    /// Whether each cursor-published slot starts with a length word ([`SLOT_FORMAT_SIZED`]).
    pub sized: bool,
    /// Entries in the consumer table.
    pub max_consumers: u32,
    /// Entries in the producer table.
    pub max_producers: u32,
    /// Producer mode.
    pub producer_mode: ProducerMode,
    /// Optional consumer slack (events).
    pub optional_slack: u64,
    /// Offset of the consumer table.
    pub consumers_offset: u64,
    /// Offset of the producer table.
    pub producers_offset: u64,
    /// Offset of slot 0.
    pub slots_offset: u64,
    /// A fixed-size ring: offset of the tomb words, one `u64` per slot after the slots
    /// (0 on a stamped ring).
    pub tombs_offset: u64,
    /// Total segment size.
    pub total_size: u64,
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl Geometry {
    /// Check a requested configuration of stamped slots and lay it out.
    pub fn new(
        capacity: u64,
        slot_size: u32,
        max_consumers: u32,
        max_producers: u32,
        producer_mode: ProducerMode,
        optional_slack: u64,
    ) -> Result<Self, LayoutError> {
        Self::with_format(
            SLOT_FORMAT_STAMPED,
            capacity,
            slot_size,
            max_consumers,
            max_producers,
            producer_mode,
            optional_slack,
        )
    }

    /// Check a requested configuration in slot format `format` ([`SLOT_FORMAT_STAMPED`]:
    /// `slot_size` is a slot's header and payload; [`SLOT_FORMAT_FIXED`]: the event size;
    /// [`SLOT_FORMAT_SIZED`]: the length word and the largest event) and lay it out.
    pub fn with_format(
        format: u32,
        capacity: u64,
        slot_size: u32,
        max_consumers: u32,
        max_producers: u32,
        producer_mode: ProducerMode,
        optional_slack: u64,
    ) -> Result<Self, LayoutError> {
        if !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) || !capacity.is_power_of_two() {
            return Err(LayoutError::BadCapacity(capacity));
        }
        let (fixed, sized) = match format {
            SLOT_FORMAT_STAMPED => (false, false),
            SLOT_FORMAT_FIXED => (true, false),
            SLOT_FORMAT_SIZED => (true, true),
            other => return Err(LayoutError::BadSlotFormat(other)),
        };
        if fixed {
            let least = if sized { SIZED_LEN_SIZE } else { 0 } + FIXED_EVENT_ALIGN;
            if !(least..=MAX_SLOT_SIZE).contains(&slot_size)
                || !slot_size.is_multiple_of(FIXED_EVENT_ALIGN)
            {
                return Err(if sized {
                    LayoutError::BadMaxEventSize(slot_size.saturating_sub(SIZED_LEN_SIZE))
                } else {
                    LayoutError::BadEventSize(slot_size)
                });
            }
            if producer_mode != ProducerMode::Single {
                return Err(LayoutError::FixedNeedsSingleProducer);
            }
        } else if !(MIN_SLOT_SIZE..=MAX_SLOT_SIZE).contains(&slot_size)
            || !slot_size.is_multiple_of(64)
        {
            return Err(LayoutError::BadSlotSize(slot_size));
        }
        if !(1..=MAX_CONSUMERS).contains(&max_consumers) {
            return Err(LayoutError::BadMaxConsumers(max_consumers));
        }
        if !(1..=MAX_PRODUCERS).contains(&max_producers) {
            return Err(LayoutError::BadMaxProducers(max_producers));
        }
        if producer_mode == ProducerMode::Single && max_producers != 1 {
            // Two entries would let two live producers store the one claim word.
            return Err(LayoutError::SingleWithProducers(max_producers));
        }
        if optional_slack > capacity {
            return Err(LayoutError::BadSlack {
                slack: optional_slack,
                capacity,
            });
        }
        let consumers_offset = (SEQ_LINES_OFFSET + SEQ_LINES_SIZE) as u64;
        let producers_offset =
            consumers_offset + u64::from(max_consumers) * CONSUMER_ENTRY_SIZE as u64;
        let slots_offset = round_up(
            producers_offset + u64::from(max_producers) * PRODUCER_ENTRY_SIZE as u64,
            LINE as u64,
        );
        // Bounded inputs: capacity <= 2^24, slot_size <= 2^24, so this cannot overflow.
        let slots_end = slots_offset + capacity * u64::from(slot_size);
        let (tombs_offset, total_size) = if fixed {
            let tombs = round_up(slots_end, LINE as u64);
            (tombs, tombs + capacity * 8)
        } else {
            (0, slots_end)
        };
        if total_size > MAX_SEGMENT_SIZE {
            return Err(LayoutError::TooLarge(total_size));
        }
        Ok(Self {
            capacity,
            slot_size,
            fixed,
            sized,
            max_consumers,
            max_producers,
            producer_mode,
            optional_slack,
            consumers_offset,
            producers_offset,
            slots_offset,
            tombs_offset,
            total_size,
        })
    }

    /// Index mask (`capacity - 1`).
    pub fn mask(&self) -> u64 {
        self.capacity - 1
    }

    /// Largest payload a slot carries (on a fixed-size ring: the event size; on a ring of
    /// sized events: the slot less its length word).
    pub fn max_payload(&self) -> usize {
        if self.sized {
            (self.slot_size - SIZED_LEN_SIZE) as usize
        } else if self.fixed {
            self.slot_size as usize
        } else {
            self.slot_size as usize - SLOT_HEADER_SIZE
        }
    }

    /// The slot format's header word.
    pub fn slot_format(&self) -> u32 {
        if self.sized {
            SLOT_FORMAT_SIZED
        } else if self.fixed {
            SLOT_FORMAT_FIXED
        } else {
            SLOT_FORMAT_STAMPED
        }
    }

    /// A fixed-size ring: offset of the tomb word of sequence `seq` (always in range).
    #[inline]
    pub fn tomb_offset(&self, seq: u64) -> u64 {
        self.tombs_offset + (seq & self.mask()) * 8
    }

    /// Offset of consumer entry `i`, or `None` out of range.
    pub fn consumer_offset(&self, i: u32) -> Option<u64> {
        (i < self.max_consumers)
            .then(|| self.consumers_offset + u64::from(i) * CONSUMER_ENTRY_SIZE as u64)
    }

    /// Offset of producer entry `i`, or `None` out of range.
    pub fn producer_offset(&self, i: u32) -> Option<u64> {
        (i < self.max_producers)
            .then(|| self.producers_offset + u64::from(i) * PRODUCER_ENTRY_SIZE as u64)
    }

    /// Offset of the slot that carries sequence `seq` (always in range).
    #[inline]
    pub fn slot_offset(&self, seq: u64) -> u64 {
        self.slots_offset + (seq & self.mask()) * u64::from(self.slot_size)
    }

    /// The configuration words for [`config_checksum`].
    pub fn config_words(&self, file_mode: u32, created_unix_ns: u64) -> ConfigWords {
        ConfigWords {
            producer_mode: self.producer_mode as u32,
            capacity: self.capacity,
            slot_size: self.slot_size,
            max_consumers: self.max_consumers,
            max_producers: self.max_producers,
            file_mode,
            optional_slack: self.optional_slack,
            created_unix_ns,
            total_size: self.total_size,
            slot_format: self.slot_format(),
        }
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(w)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_ne_bytes(w)
}

/// The configuration read from a header, after [`validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validated {
    /// Where everything is.
    pub geometry: Geometry,
    /// The file mode the creator asked for.
    pub file_mode: u32,
    /// Creation time (ns since the Unix epoch).
    pub created_unix_ns: u64,
}

/// Check a snapshot of a segment header.
///
/// `header` is at least the first [`HEADER_SIZE`] bytes of the segment (copied out of the
/// mapping, so nothing can change under the check) and `file_len` the segment's size. Never
/// panics, never reads past `header`, for any input.
pub fn validate(header: &[u8], file_len: u64) -> Result<Validated, LayoutError> {
    if header.len() < HEADER_SIZE || file_len < HEADER_SIZE as u64 {
        return Err(LayoutError::TooShortForHeader {
            len: file_len.min(header.len() as u64),
        });
    }
    let magic = u64_at(header, offset_of!(Header, magic));
    if magic == 0 {
        return Err(LayoutError::NotInitialised);
    }
    if magic != MAGIC {
        return Err(LayoutError::BadMagic { found: magic });
    }
    let version = u32_at(header, offset_of!(Header, version));
    if version != LAYOUT_VERSION {
        return Err(LayoutError::WrongVersion { found: version });
    }
    let fingerprint = u64_at(header, offset_of!(Header, fingerprint));
    if fingerprint != FINGERPRINT {
        return Err(LayoutError::WrongFingerprint { found: fingerprint });
    }
    let words = ConfigWords {
        producer_mode: u32_at(header, offset_of!(Header, producer_mode)),
        capacity: u64_at(header, offset_of!(Header, capacity)),
        slot_size: u32_at(header, offset_of!(Header, slot_size)),
        max_consumers: u32_at(header, offset_of!(Header, max_consumers)),
        max_producers: u32_at(header, offset_of!(Header, max_producers)),
        file_mode: u32_at(header, offset_of!(Header, file_mode)),
        optional_slack: u64_at(header, offset_of!(Header, optional_slack)),
        created_unix_ns: u64_at(header, offset_of!(Header, created_unix_ns)),
        total_size: u64_at(header, offset_of!(Header, total_size)),
        slot_format: u32_at(header, offset_of!(Header, slot_format)),
    };
    if u64_at(header, offset_of!(Header, config_checksum)) != config_checksum(&words) {
        return Err(LayoutError::BadChecksum);
    }
    let mode = ProducerMode::from_u32(words.producer_mode)
        .ok_or(LayoutError::BadProducerMode(words.producer_mode))?;
    let geometry = Geometry::with_format(
        words.slot_format,
        words.capacity,
        words.slot_size,
        words.max_consumers,
        words.max_producers,
        mode,
        words.optional_slack,
    )?;
    if geometry.total_size != words.total_size || geometry.total_size != file_len {
        return Err(LayoutError::SizeMismatch {
            expected: geometry.total_size,
            actual: file_len,
        });
    }
    Ok(Validated {
        geometry,
        file_mode: words.file_mode,
        created_unix_ns: words.created_unix_ns,
    })
}

/// Build the header bytes a creator would write for `geometry` (used by tests and fuzzing
/// to start from a valid header; the client writes the same values field by field).
pub fn header_image(
    geometry: &Geometry,
    file_mode: u32,
    created_unix_ns: u64,
) -> [u8; HEADER_SIZE] {
    let mut b = [0u8; HEADER_SIZE];
    let mut put64 = |off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    put64(offset_of!(Header, magic), MAGIC);
    put64(offset_of!(Header, fingerprint), FINGERPRINT);
    put64(offset_of!(Header, capacity), geometry.capacity);
    put64(offset_of!(Header, optional_slack), geometry.optional_slack);
    put64(offset_of!(Header, created_unix_ns), created_unix_ns);
    put64(offset_of!(Header, total_size), geometry.total_size);
    let words = geometry.config_words(file_mode, created_unix_ns);
    put64(offset_of!(Header, config_checksum), config_checksum(&words));
    let mut put32 = |off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put32(offset_of!(Header, version), LAYOUT_VERSION);
    put32(
        offset_of!(Header, producer_mode),
        geometry.producer_mode as u32,
    );
    put32(offset_of!(Header, slot_size), geometry.slot_size);
    put32(offset_of!(Header, max_consumers), geometry.max_consumers);
    put32(offset_of!(Header, max_producers), geometry.max_producers);
    put32(offset_of!(Header, file_mode), file_mode);
    put32(offset_of!(Header, slot_format), geometry.slot_format());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn geo() -> Geometry {
        Geometry::new(16, 64, 4, 2, ProducerMode::Multi, 0).unwrap()
    }

    #[test]
    fn regions_are_line_aligned_and_ordered() {
        let g = geo();
        assert_eq!(g.consumers_offset, 256 + 6 * 128);
        assert_eq!(g.producers_offset, g.consumers_offset + 4 * 384);
        assert_eq!(g.slots_offset % LINE as u64, 0);
        assert_eq!(g.total_size, g.slots_offset + 16 * 64);
        assert_eq!(g.slot_offset(17), g.slots_offset + 64);
        assert_eq!(g.consumer_offset(4), None);
        assert_eq!(g.producer_offset(1), Some(g.producers_offset + 128));
    }

    #[test]
    fn round_trip() {
        let g = geo();
        let img = header_image(&g, 0o600, 42);
        let v = validate(&img, g.total_size).unwrap();
        assert_eq!(v.geometry, g);
        assert_eq!(v.file_mode, 0o600);
        assert_eq!(v.created_unix_ns, 42);
    }

    #[test]
    fn rejects_each_kind_of_damage() {
        let g = geo();
        let img = header_image(&g, 0o600, 42);
        assert!(matches!(
            validate(&img[..100], 4096),
            Err(LayoutError::TooShortForHeader { .. })
        ));
        assert!(matches!(
            validate(&img, g.total_size - 1),
            Err(LayoutError::SizeMismatch { .. })
        ));
        let mut bad = img;
        bad[0] = 0;
        assert!(matches!(
            validate(&bad, g.total_size),
            Err(LayoutError::BadMagic { .. })
        ));
        let mut zero = img;
        zero[..8].fill(0);
        assert_eq!(
            validate(&zero, g.total_size),
            Err(LayoutError::NotInitialised)
        );
        let mut ver = img;
        ver[8] = 9;
        assert_eq!(
            validate(&ver, g.total_size),
            Err(LayoutError::WrongVersion { found: 9 })
        );
        let mut cap = img;
        cap[offset_of!(Header, capacity)] = 17;
        assert_eq!(validate(&cap, g.total_size), Err(LayoutError::BadChecksum));
        // Every single-bit flip in the configuration words is caught.
        let format = offset_of!(Header, slot_format);
        for byte in (0..offset_of!(Header, fence_mode)).chain(format..format + 4) {
            for bit in 0..8 {
                let mut f = img;
                f[byte] ^= 1 << bit;
                assert!(
                    validate(&f, g.total_size).is_err(),
                    "flip {byte}:{bit} accepted"
                );
            }
        }
    }

    #[test]
    fn a_fixed_size_ring_packs_its_events_and_keeps_a_tomb_word_per_slot() {
        let g =
            Geometry::with_format(SLOT_FORMAT_FIXED, 16, 8, 4, 1, ProducerMode::Single, 0).unwrap();
        assert!(g.fixed);
        assert_eq!(g.max_payload(), 8);
        assert_eq!(g.slot_offset(17), g.slots_offset + 8);
        assert_eq!(
            g.tombs_offset,
            g.slots_offset + 128,
            "the slots, rounded to a line"
        );
        assert_eq!(g.tomb_offset(17), g.tombs_offset + 8);
        assert_eq!(g.total_size, g.tombs_offset + 16 * 8);
        let img = header_image(&g, 0o600, 7);
        assert_eq!(validate(&img, g.total_size).unwrap().geometry, g);
        assert_eq!(
            Geometry::with_format(SLOT_FORMAT_FIXED, 16, 12, 1, 1, ProducerMode::Single, 0),
            Err(LayoutError::BadEventSize(12))
        );
        assert_eq!(
            Geometry::with_format(SLOT_FORMAT_FIXED, 16, 8, 1, 2, ProducerMode::Multi, 0),
            Err(LayoutError::FixedNeedsSingleProducer)
        );
        assert_eq!(
            Geometry::with_format(9, 16, 64, 1, 1, ProducerMode::Single, 0),
            Err(LayoutError::BadSlotFormat(9))
        );
        // A single-producer ring (fixed-size or not) has one producer entry: two would let
        // two live producers store its claim word.
        assert_eq!(
            Geometry::with_format(SLOT_FORMAT_FIXED, 16, 8, 1, 2, ProducerMode::Single, 0),
            Err(LayoutError::SingleWithProducers(2))
        );
        assert_eq!(
            Geometry::new(16, 64, 1, 3, ProducerMode::Single, 0),
            Err(LayoutError::SingleWithProducers(3))
        );
    }

    #[test]
    fn a_sized_ring_starts_each_slot_with_a_length_word() {
        let g = Geometry::with_format(SLOT_FORMAT_SIZED, 16, 16, 4, 1, ProducerMode::Single, 0)
            .unwrap();
        assert!(g.fixed && g.sized);
        assert_eq!(g.max_payload(), 8, "the slot less its length word");
        assert_eq!(g.slot_format(), SLOT_FORMAT_SIZED);
        assert_eq!(g.slot_offset(17), g.slots_offset + 16);
        assert_eq!(g.tombs_offset, g.slots_offset + 2 * 128);
        assert_eq!(g.total_size, g.tombs_offset + 16 * 8);
        let img = header_image(&g, 0o600, 7);
        assert_eq!(validate(&img, g.total_size).unwrap().geometry, g);
        // A slot of the length word alone carries nothing; 12 is not a multiple of 8.
        for bad in [8, 12, 0] {
            assert_eq!(
                Geometry::with_format(SLOT_FORMAT_SIZED, 16, bad, 1, 1, ProducerMode::Single, 0),
                Err(LayoutError::BadMaxEventSize(bad.saturating_sub(8)))
            );
        }
        assert_eq!(
            Geometry::with_format(SLOT_FORMAT_SIZED, 16, 16, 1, 2, ProducerMode::Multi, 0),
            Err(LayoutError::FixedNeedsSingleProducer)
        );
    }

    #[test]
    fn rejects_bad_config() {
        assert_eq!(
            Geometry::new(12, 64, 1, 1, ProducerMode::Single, 0),
            Err(LayoutError::BadCapacity(12))
        );
        assert_eq!(
            Geometry::new(16, 100, 1, 1, ProducerMode::Single, 0),
            Err(LayoutError::BadSlotSize(100))
        );
        assert_eq!(
            Geometry::new(16, 64, 0, 1, ProducerMode::Single, 0),
            Err(LayoutError::BadMaxConsumers(0))
        );
        assert!(matches!(
            Geometry::new(1 << 24, 1 << 24, 1, 1, ProducerMode::Single, 0),
            Err(LayoutError::TooLarge(_))
        ));
    }

    /// Run `case` over `strategy` for `cases` cases; returns how many reached the oracle
    /// (`case` returns true for those). A failing case fails the test with proptest's
    /// shrunk input.
    fn count_reached<S: Strategy>(
        cases: u32,
        strategy: S,
        case: impl Fn(S::Value) -> Result<bool, TestCaseError>,
    ) -> u32 {
        let reached = std::sync::atomic::AtomicU32::new(0);
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases,
            ..ProptestConfig::default()
        });
        let result = runner.run(&strategy, |v| {
            if case(v)? {
                reached.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        reached.into_inner()
    }

    /// Arbitrary bytes, and (three times in four) a valid header with a few bytes
    /// overwritten or cut short, at its own length or any: whatever comes, `validate`
    /// returns. Random bytes alone never get past the magic number, so the near-valid
    /// images are what reach the checks behind it; the count is printed and must not be
    /// small.
    #[test]
    fn validate_never_panics() {
        const CASES: u32 = 1024;
        let g = geo();
        let img = header_image(&g, 0o600, 7);
        let bytes = prop_oneof![
            1 => proptest::collection::vec(any::<u8>(), 0..600),
            3 => (
                proptest::collection::vec((0usize..HEADER_SIZE, any::<u8>()), 0..4),
                prop_oneof![3 => Just(HEADER_SIZE), 1 => 0usize..=HEADER_SIZE],
            )
                .prop_map(move |(writes, cut)| {
                    let mut b = img.to_vec();
                    for (i, v) in writes {
                        b[i] = v;
                    }
                    b.truncate(cut);
                    b
                }),
        ];
        let len = prop_oneof![Just(g.total_size), any::<u64>()];
        let reached = count_reached(CASES, (bytes, len), |(bytes, len)| {
            let r = validate(&bytes, len);
            // Past the magic, version and fingerprint: into the configuration checks.
            Ok(!matches!(
                r,
                Err(LayoutError::TooShortForHeader { .. }
                    | LayoutError::NotInitialised
                    | LayoutError::BadMagic { .. }
                    | LayoutError::WrongVersion { .. }
                    | LayoutError::WrongFingerprint { .. })
            ))
        });
        println!("validate_never_panics: {reached} of {CASES} cases got past the magic");
        assert!(reached >= CASES / 8, "{reached} of {CASES}");
    }

    /// A valid header with a few bytes overwritten, mostly outside the checksummed
    /// configuration (where a write is allowed) and at the file's own length: anything
    /// accepted is the configuration written (a write into it fails the checksum). The accepted cases are counted and must not be few.
    #[test]
    fn validate_never_panics_near_valid() {
        const CASES: u32 = 1024;
        let g = geo();
        let unchecked = offset_of!(Header, fence_mode);
        let flips = proptest::collection::vec(
            (
                prop_oneof![1 => 0usize..HEADER_SIZE, 3 => unchecked..HEADER_SIZE],
                any::<u8>(),
            ),
            1..6,
        );
        let len = prop_oneof![7 => Just(g.total_size), 1 => 0u64..1 << 20];
        let accepted = count_reached(CASES, (flips, len), |(flips, len)| {
            let mut img = header_image(&g, 0o600, 7);
            for (i, v) in flips {
                img[i] = v;
            }
            match validate(&img, len) {
                Ok(v) => {
                    // Anything accepted is the configuration the header was written with.
                    prop_assert_eq!(v.geometry, g);
                    prop_assert_eq!(v.geometry.total_size, len);
                    prop_assert_eq!((v.file_mode, v.created_unix_ns), (0o600, 7));
                    Ok(true)
                }
                Err(_) => Ok(false),
            }
        });
        println!("validate_never_panics_near_valid: {accepted} of {CASES} cases accepted");
        assert!(accepted >= CASES / 8, "{accepted} of {CASES}");
    }
}
