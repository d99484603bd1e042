//! The header an importer puts in front of every event it publishes, and the source identity.
//!
//! Each event in the importer's ring carries where it came from, so that
//!
//! - a consumer there can learn the source sequence of each event ([`Bridged::parse`]);
//! - a restarted importer learns what it had already published by reading its own ring
//!   back (`import` does this at start): the ring is the importer's durable record, written
//!   in the same store as the event, so the two can never disagree.
//!
//! Layout (little-endian), 32 bytes, so the payload after it keeps the slot's 16-byte
//! alignment:
//!
//! ```text
//! off  size  field
//!   0     4  magic "SRBH"
//!   4     4  version (1)
//!   8     8  source: the source ring's identity (`source_id`)
//!  16     8  run: the source ring's run counter when the exporter sent the event (a
//!             replay after a stop and a start of the source ring carries the later run)
//!  24     8  seq: the event's sequence in the source ring
//!  32        the original payload, unchanged
//! ```
//!
//! ```
//! use shmring_bridge::header::{Bridged, SourceHeader};
//! let h = SourceHeader { source: 42, run: 1, seq: 7 };
//! let mut event = h.encode().to_vec();
//! event.extend_from_slice(b"buy 100 @ 42");
//! let got = Bridged::parse(&event).expect("a bridged event");
//! assert_eq!((got.header.seq, got.payload), (7, b"buy 100 @ 42".as_slice()));
//! ```

/// Bytes in front of the payload.
pub const HEADER_LEN: usize = 32;
const MAGIC: [u8; 4] = *b"SRBH";
const VERSION: u32 = 1;

/// Where a bridged event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceHeader {
    /// The source ring's identity.
    pub source: u64,
    /// The source ring's run counter when the exporter sent the event.
    pub run: u64,
    /// The event's sequence in the source ring.
    pub seq: u64,
}

impl SourceHeader {
    /// The 32 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..8].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.source.to_le_bytes());
        b[16..24].copy_from_slice(&self.run.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b
    }
}

/// A bridged event split into its header and the original payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bridged<'a> {
    /// Where it came from.
    pub header: SourceHeader,
    /// The payload as the source's producer published it.
    pub payload: &'a [u8],
}

impl<'a> Bridged<'a> {
    /// Split an event published by an importer; `None` if it does not start with a bridge
    /// header of this version (an event some other producer published into the ring), or
    /// names a sequence no ring hands out.
    pub fn parse(event: &'a [u8]) -> Option<Self> {
        if event.len() < HEADER_LEN || event[0..4] != MAGIC {
            return None;
        }
        let word = |off: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&event[off..off + 8]);
            u64::from_le_bytes(w)
        };
        let mut v = [0u8; 4];
        v.copy_from_slice(&event[4..8]);
        if u32::from_le_bytes(v) != VERSION {
            return None;
        }
        let seq = word(24);
        // Ring sequences stay below MAX_SEQUENCE: a larger one is no importer's (the wire
        // refuses it), and the importer's read-back adds one to what it finds.
        if seq >= shmring_layout::MAX_SEQUENCE {
            return None;
        }
        Some(Bridged {
            header: SourceHeader {
                source: word(8),
                run: word(16),
                seq,
            },
            payload: &event[HEADER_LEN..],
        })
    }
}

/// The identity of a source ring: FNV-1a over its namespace, name and creation time. Two
/// incarnations of a ring with the same name (deleted and created again, sequences starting
/// over) have different identities, so an importer never mistakes one for the other.
pub fn source_id(namespace: &str, name: &str, created_unix_ns: u64) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let bytes = namespace
        .bytes()
        .chain([b'/'])
        .chain(name.bytes())
        .chain([0])
        .chain(created_unix_ns.to_le_bytes());
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_events_are_not_bridged() {
        assert_eq!(Bridged::parse(b"plain event from a local producer!!"), None);
        assert_eq!(Bridged::parse(b"SRBH"), None);
        let mut wrong_version = SourceHeader {
            source: 1,
            run: 0,
            seq: 0,
        }
        .encode();
        wrong_version[4] = 2;
        assert_eq!(Bridged::parse(&wrong_version), None);
        // A sequence no ring hands out: no importer wrote it (the wire refuses such
        // sequences), and an importer reading its ring back must not count past it.
        for seq in [shmring_layout::MAX_SEQUENCE, u64::MAX] {
            let h = SourceHeader {
                source: 1,
                run: 0,
                seq,
            };
            assert_eq!(Bridged::parse(&h.encode()), None, "{seq:#x}");
        }
    }

    #[test]
    fn an_empty_payload_parses() {
        let h = SourceHeader {
            source: 1,
            run: 2,
            seq: 3,
        };
        let bytes = h.encode();
        let b = Bridged::parse(&bytes).expect("parse");
        assert_eq!(b.header, h);
        assert!(b.payload.is_empty());
    }

    #[test]
    fn identities_differ_by_incarnation() {
        assert_ne!(source_id("a", "r", 1), source_id("a", "r", 2));
        assert_ne!(source_id("a", "r", 1), source_id("ar", "", 1));
        assert_eq!(source_id("a", "r", 1), source_id("a", "r", 1));
    }
}
