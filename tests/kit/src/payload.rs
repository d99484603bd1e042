//! Self-checking event payloads.
//!
//! Two shapes, chosen by length:
//!
//! ```text
//! 8 bytes (one word, little endian):
//!   bits 63..56 producer id | bits 55..16 producer sequence | bits 15..0 check
//!
//! 16 bytes or more (a full slot in the tests):
//!   [0..4) producer id | [4..12) producer sequence | [12..len-4) filler | [len-4..len) FNV-1a
//! ```
//!
//! The filler is a pseudo-random stream seeded by (producer, sequence), and the trailing
//! FNV-1a covers everything before it: a payload stitched together from two writes (a torn
//! read) or left over from an older lap fails [`decode`]. The 8-byte shape is one word, so
//! it cannot tear; its check catches a corrupt or foreign word.

use crate::fault::splitmix64;

/// Length of the small, one-word event.
pub const SMALL: usize = 8;
/// Shortest length of the large shape (header + checksum).
pub const MIN_LARGE: usize = 16;
const HEAD: usize = 12;
const TAIL: usize = 4;
/// Largest producer id the 8-byte shape can carry.
pub const MAX_SMALL_PRODUCER: u32 = 0xff;
/// Largest producer sequence the 8-byte shape can carry.
pub const MAX_SMALL_SEQ: u64 = (1 << 40) - 1;

/// Who published an event, and the how-many-th of that producer it is (from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The producer's id (given on its command line).
    pub producer: u32,
    /// The producer's own sequence number: 0, 1, 2, ... with no gaps.
    pub seq: u64,
}

fn seed(o: Origin) -> u64 {
    splitmix64((u64::from(o.producer) << 48) ^ o.seq)
}

fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Whether `len` is a length [`encode_into`] can fill.
pub fn valid_len(len: usize) -> bool {
    len == SMALL || len >= MIN_LARGE
}

/// Fill `buf` (8 bytes, or 16 and more) with the event of `origin`.
///
/// # Panics
/// If the length is 9..=15 or below 8, or the origin does not fit the 8-byte shape.
pub fn encode_into(buf: &mut [u8], origin: Origin) {
    let len = buf.len();
    if len == SMALL {
        assert!(
            origin.producer <= MAX_SMALL_PRODUCER && origin.seq <= MAX_SMALL_SEQ,
            "{origin:?} does not fit an 8-byte event"
        );
        let word =
            (u64::from(origin.producer) << 56) | (origin.seq << 16) | (seed(origin) & 0xffff);
        buf.copy_from_slice(&word.to_le_bytes());
        return;
    }
    assert!(len >= MIN_LARGE, "payload length {len}: use 8 or >= 16");
    buf[..4].copy_from_slice(&origin.producer.to_le_bytes());
    buf[4..HEAD].copy_from_slice(&origin.seq.to_le_bytes());
    let mut x = seed(origin);
    for chunk in buf[HEAD..len - TAIL].chunks_mut(8) {
        x = splitmix64(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let check = fnv1a32(&buf[..len - TAIL]);
    buf[len - TAIL..].copy_from_slice(&check.to_le_bytes());
}

/// The event of `origin`, `len` bytes long.
pub fn encode(origin: Origin, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    encode_into(&mut v, origin);
    v
}

/// Check an event and say whose it is. The error describes what is wrong with the bytes.
pub fn decode(bytes: &[u8]) -> Result<Origin, String> {
    let len = bytes.len();
    if len == SMALL {
        let mut w = [0u8; 8];
        w.copy_from_slice(bytes);
        let word = u64::from_le_bytes(w);
        let origin = Origin {
            producer: (word >> 56) as u32,
            seq: (word >> 16) & MAX_SMALL_SEQ,
        };
        if word & 0xffff != seed(origin) & 0xffff {
            return Err(format!("8-byte event {word:#018x} fails its check"));
        }
        return Ok(origin);
    }
    if len < MIN_LARGE {
        return Err(format!(
            "event of {len} bytes: expected 8 or >= {MIN_LARGE}"
        ));
    }
    let mut p = [0u8; 4];
    p.copy_from_slice(&bytes[..4]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&bytes[4..HEAD]);
    let origin = Origin {
        producer: u32::from_le_bytes(p),
        seq: u64::from_le_bytes(s),
    };
    let mut c = [0u8; 4];
    c.copy_from_slice(&bytes[len - TAIL..]);
    if fnv1a32(&bytes[..len - TAIL]) != u32::from_le_bytes(c) {
        return Err(format!(
            "{len}-byte event claiming {origin:?} fails its checksum (torn or corrupt)"
        ));
    }
    if encode(origin, len) != bytes {
        return Err(format!(
            "{len}-byte event claiming {origin:?} has the wrong filler (torn or corrupt)"
        ));
    }
    Ok(origin)
}

/// A batch event whose `AsRef` answers one byte string at its first call and another at
/// every later one: what a caller's type that changes between the batch's length check and
/// its write looks like to `Producer::publish_batch`.
pub struct Fickle {
    calls: std::cell::Cell<u32>,
    first: Vec<u8>,
    then: Vec<u8>,
}

impl Fickle {
    /// `first` at the first call, `then` after.
    pub fn new(first: &[u8], then: &[u8]) -> Self {
        Fickle {
            calls: std::cell::Cell::new(0),
            first: first.to_vec(),
            then: then.to_vec(),
        }
    }
}

impl AsRef<[u8]> for Fickle {
    fn as_ref(&self) -> &[u8] {
        let n = self.calls.get();
        self.calls.set(n + 1);
        if n == 0 {
            &self.first
        } else {
            &self.then
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_small_and_large() {
        for len in [8, 16, 17, 48, 112, 1000] {
            for (producer, seq) in [(0, 0), (3, 1), (255, MAX_SMALL_SEQ), (7, 123_456)] {
                let o = Origin { producer, seq };
                assert_eq!(decode(&encode(o, len)), Ok(o), "len {len}");
            }
        }
    }

    #[test]
    fn any_flipped_bit_is_caught() {
        for len in [8, 112] {
            let good = encode(
                Origin {
                    producer: 2,
                    seq: 99,
                },
                len,
            );
            for bit in 0..len * 8 {
                let mut bad = good.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                // The 8-byte check is 16 bits: flips in the id or sequence change the
                // expected check; flips in the check itself are caught directly.
                assert!(decode(&bad).is_err(), "len {len} bit {bit} not caught");
            }
        }
    }

    #[test]
    fn a_torn_large_event_is_caught() {
        let a = encode(
            Origin {
                producer: 1,
                seq: 10,
            },
            112,
        );
        let b = encode(
            Origin {
                producer: 1,
                seq: 26,
            },
            112,
        );
        for cut in [8, 16, 56, 104] {
            let mut torn = a[..cut].to_vec();
            torn.extend_from_slice(&b[cut..]);
            assert!(decode(&torn).is_err(), "cut at {cut} not caught");
        }
    }

    #[test]
    fn wrong_lengths_are_errors() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0; 12]).is_err());
        assert!(!valid_len(12) && valid_len(8) && valid_len(16));
    }
}
