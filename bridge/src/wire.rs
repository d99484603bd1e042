//! The bridge's two messages on Zenoh, and their byte layout.
//!
//! Everything is little-endian and fixed-width; a message that does not parse is counted
//! and ignored, never trusted.
//!
//! **Batch** (exporter -> importer, on `KEY/data`): a 64-byte header, then `count` events.
//!
//! ```text
//! off  size  field
//!   0     4  magic "SRBD"
//!   4     1  version (1)
//!   5     1  mode: 0 reliable, 1 drop
//!   6     2  reserved (0)
//!   8     8  source: the source ring's identity (see `header::source_id`)
//!  16     8  run: the source ring's run counter when the batch was sent (a replay after
//!             a stop and a start of the source ring carries the later run)
//!  24     8  committed: the exporter's committed position (everything below is confirmed)
//!  32     8  start: the first source sequence this batch covers
//!  40     8  end: one past the last sequence it covers (tombstones inside are skipped)
//!  48     8  dropped: events the exporter knows it lost (DROP mode: lapped), cumulative
//!  56     4  count: events that follow
//!  60     4  reserved (0)
//!  64        count x { seq: u64, len: u32, payload: len bytes }
//! ```
//!
//! A batch with `count == 0` and `start == end` is a heartbeat: the exporter is alive and
//! has sent everything below `end`.
//!
//! **Ack** (importer -> exporter, on `KEY/ack`), 32 bytes:
//!
//! ```text
//!   0     4  magic "SRBA"
//!   4     1  version (1)
//!   5     1  flags: bit 0 = resend (the importer misses sequences from `next` on)
//!   6     2  reserved (0)
//!   8     8  source
//!  16     8  next: every event of `source` below `next` is published in the importer's ring
//!  24     8  reserved (0)
//! ```
//!
//! Every sequence in either message is at most `MAX_SEQUENCE` (2^62), the most a ring
//! hands out; a message naming a larger one is refused.

use shmring_layout::MAX_SEQUENCE;

/// Wire format version of both messages.
pub const VERSION: u8 = 1;
const BATCH_MAGIC: [u8; 4] = *b"SRBD";
const ACK_MAGIC: [u8; 4] = *b"SRBA";
/// Bytes before the first event of a batch.
pub const BATCH_HEADER: usize = 64;
/// Bytes before each event's payload in a batch.
pub const EVENT_HEADER: usize = 12;
/// Bytes of an ack.
pub const ACK_LEN: usize = 32;

/// Delivery mode of a bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Nothing lost, nothing doubled: the exporter commits only what the importer confirmed.
    Reliable,
    /// Fresh over complete: the exporter is an optional consumer, Zenoh drops under
    /// congestion, and gaps are counted.
    Drop,
}

/// The fixed part of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Delivery mode of the exporter.
    pub mode: Mode,
    /// Source ring identity.
    pub source: u64,
    /// Source run counter.
    pub run: u64,
    /// Exporter's committed position.
    pub committed: u64,
    /// First sequence covered.
    pub start: u64,
    /// One past the last sequence covered.
    pub end: u64,
    /// Events the exporter knows it lost (cumulative).
    pub dropped: u64,
}

/// Builds one batch message in a reusable buffer.
#[derive(Debug, Default)]
pub struct BatchWriter {
    buf: Vec<u8>,
    count: u32,
    /// Length of the last finished message: the next buffer's first reservation.
    last_len: usize,
}

impl BatchWriter {
    /// Start a batch (clears the previous one).
    pub fn begin(&mut self) {
        if self.buf.capacity() == 0 {
            self.buf.reserve(self.last_len.max(BATCH_HEADER));
        }
        self.buf.clear();
        self.buf.resize(BATCH_HEADER, 0);
        self.count = 0;
    }

    /// Append one event.
    pub fn push(&mut self, seq: u64, payload: &[u8]) {
        self.buf.extend_from_slice(&seq.to_le_bytes());
        // Payloads come from ring slots, far below 4 GiB.
        self.buf
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(payload);
        self.count += 1;
    }

    /// Events appended since `begin`.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The message's length so far, its header included: what `finish` hands over.
    pub fn len(&self) -> usize {
        self.buf.len().max(BATCH_HEADER)
    }

    /// Whether no event was appended since `begin`.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Write the header and hand the finished message over (the next `begin` starts a new
    /// buffer, so the message can be given to the transport without a copy).
    pub fn finish(&mut self, h: &BatchHeader) -> Vec<u8> {
        if self.buf.len() < BATCH_HEADER {
            self.buf.resize(BATCH_HEADER, 0);
        }
        let b = &mut self.buf[..BATCH_HEADER];
        b[0..4].copy_from_slice(&BATCH_MAGIC);
        b[4] = VERSION;
        b[5] = match h.mode {
            Mode::Reliable => 0,
            Mode::Drop => 1,
        };
        b[6..8].fill(0);
        for (off, v) in [
            (8, h.source),
            (16, h.run),
            (24, h.committed),
            (32, h.start),
            (40, h.end),
            (48, h.dropped),
        ] {
            b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[56..60].copy_from_slice(&self.count.to_le_bytes());
        b[60..64].fill(0);
        self.last_len = self.buf.len();
        std::mem::take(&mut self.buf)
    }
}

/// What [`WireError::Field`] says of a sequence past the largest a ring hands out.
const PAST_MAX: &str = "sequence past the largest a ring hands out";

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its header or than its events claim.
    #[error("message truncated")]
    Truncated,
    /// Not a bridge message of this kind.
    #[error("bad magic")]
    Magic,
    /// A wire version this build does not read.
    #[error("wire version {0}, this build reads {VERSION}: upgrade both bridge ends together")]
    Version(u8),
    /// A field out of range (mode, `start > end`, an event outside `start..end` or out of order).
    #[error("inconsistent field: {0}")]
    Field(&'static str),
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(w)
}

/// One event of a parsed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireEvent<'a> {
    /// Source sequence.
    pub seq: u64,
    /// Payload.
    pub payload: &'a [u8],
}

/// A batch checked in full: every event lies inside the message, in `start..end`, in
/// increasing order.
#[derive(Debug)]
pub struct Batch<'a> {
    /// The header.
    pub header: BatchHeader,
    count: u32,
    body: &'a [u8],
}

impl<'a> Batch<'a> {
    /// Parse and check a batch.
    pub fn parse(msg: &'a [u8]) -> Result<Self, WireError> {
        if msg.len() < BATCH_HEADER {
            return Err(WireError::Truncated);
        }
        if msg[0..4] != BATCH_MAGIC {
            return Err(WireError::Magic);
        }
        if msg[4] != VERSION {
            return Err(WireError::Version(msg[4]));
        }
        let mode = match msg[5] {
            0 => Mode::Reliable,
            1 => Mode::Drop,
            _ => return Err(WireError::Field("mode")),
        };
        let header = BatchHeader {
            mode,
            source: u64_at(msg, 8),
            run: u64_at(msg, 16),
            committed: u64_at(msg, 24),
            start: u64_at(msg, 32),
            end: u64_at(msg, 40),
            dropped: u64_at(msg, 48),
        };
        if header.start > header.end {
            return Err(WireError::Field("start > end"));
        }
        // A ring's sequences stay below MAX_SEQUENCE: bounding them here keeps every sum the
        // importer makes of them (drops, positions) far from overflow.
        if header.end > MAX_SEQUENCE || header.committed > MAX_SEQUENCE {
            return Err(WireError::Field(PAST_MAX));
        }
        let count = u32_at(msg, 56);
        let batch = Batch {
            header,
            count,
            body: &msg[BATCH_HEADER..],
        };
        // Walk once to check every bound, so that `events` cannot fail.
        let mut seen = 0u32;
        let mut prev: Option<u64> = None;
        let mut rest = batch.body;
        while seen < count {
            let (ev, tail) = split_event(rest).ok_or(WireError::Truncated)?;
            if ev.seq < header.start || ev.seq >= header.end || prev.is_some_and(|p| ev.seq <= p) {
                return Err(WireError::Field("event sequence"));
            }
            prev = Some(ev.seq);
            rest = tail;
            seen += 1;
        }
        if !rest.is_empty() {
            return Err(WireError::Field("bytes after the last event"));
        }
        Ok(batch)
    }

    /// Number of events.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether it is a heartbeat (no events, nothing covered).
    pub fn is_heartbeat(&self) -> bool {
        self.count == 0 && self.header.start == self.header.end
    }

    /// The events, in order.
    pub fn events(&self) -> impl Iterator<Item = WireEvent<'a>> + '_ {
        let mut rest = self.body;
        (0..self.count).map_while(move |_| {
            let (ev, tail) = split_event(rest)?;
            rest = tail;
            Some(ev)
        })
    }
}

fn split_event(b: &[u8]) -> Option<(WireEvent<'_>, &[u8])> {
    if b.len() < EVENT_HEADER {
        return None;
    }
    let seq = u64_at(b, 0);
    let len = u32_at(b, 8) as usize;
    let end = EVENT_HEADER.checked_add(len)?;
    if b.len() < end {
        return None;
    }
    Some((
        WireEvent {
            seq,
            payload: &b[EVENT_HEADER..end],
        },
        &b[end..],
    ))
}

/// An importer's confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// Source ring identity.
    pub source: u64,
    /// Every event below it is published in the importer's ring.
    pub next: u64,
    /// The importer misses sequences from `next` on: send them again.
    pub resend: bool,
}

impl Ack {
    /// The message bytes.
    pub fn encode(&self) -> [u8; ACK_LEN] {
        let mut b = [0u8; ACK_LEN];
        b[0..4].copy_from_slice(&ACK_MAGIC);
        b[4] = VERSION;
        b[5] = u8::from(self.resend);
        b[8..16].copy_from_slice(&self.source.to_le_bytes());
        b[16..24].copy_from_slice(&self.next.to_le_bytes());
        b
    }

    /// Parse an ack.
    pub fn parse(msg: &[u8]) -> Result<Self, WireError> {
        if msg.len() != ACK_LEN {
            return Err(WireError::Truncated);
        }
        if msg[0..4] != ACK_MAGIC {
            return Err(WireError::Magic);
        }
        if msg[4] != VERSION {
            return Err(WireError::Version(msg[4]));
        }
        if msg[5] & !1 != 0 {
            return Err(WireError::Field("ack flags"));
        }
        let next = u64_at(msg, 16);
        if next > MAX_SEQUENCE {
            return Err(WireError::Field(PAST_MAX));
        }
        Ok(Ack {
            source: u64_at(msg, 8),
            next,
            resend: msg[5] & 1 != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring_layout::MAX_SEQUENCE;

    fn header() -> BatchHeader {
        BatchHeader {
            mode: Mode::Reliable,
            source: 7,
            run: 2,
            committed: 10,
            start: 12,
            end: 20,
            dropped: 0,
        }
    }

    #[test]
    fn a_batch_round_trips() {
        let mut w = BatchWriter::default();
        w.begin();
        w.push(12, b"abc");
        w.push(15, b"");
        w.push(19, &[9; 100]);
        let msg = w.finish(&header()).to_vec();
        let b = Batch::parse(&msg).expect("parse");
        assert_eq!(b.header, header());
        assert_eq!(b.count(), 3);
        let evs: Vec<_> = b.events().collect();
        assert_eq!(
            evs[0],
            WireEvent {
                seq: 12,
                payload: b"abc"
            }
        );
        assert_eq!(evs[1].seq, 15);
        assert!(evs[1].payload.is_empty());
        assert_eq!(evs[2].payload.len(), 100);
        assert!(!b.is_heartbeat());
    }

    #[test]
    fn a_heartbeat_is_an_empty_batch() {
        let mut w = BatchWriter::default();
        w.begin();
        let msg = w
            .finish(&BatchHeader {
                start: 5,
                end: 5,
                ..header()
            })
            .to_vec();
        assert!(Batch::parse(&msg).expect("parse").is_heartbeat());
    }

    #[test]
    fn inconsistent_batches_are_refused() {
        let mut w = BatchWriter::default();
        w.begin();
        w.push(13, b"x");
        w.push(13, b"y");
        let msg = w.finish(&header()).to_vec();
        assert_eq!(
            Batch::parse(&msg).err(),
            Some(WireError::Field("event sequence"))
        );

        w.begin();
        w.push(25, b"x");
        let msg = w.finish(&header()).to_vec();
        assert_eq!(
            Batch::parse(&msg).err(),
            Some(WireError::Field("event sequence"))
        );

        w.begin();
        w.push(12, b"xyz");
        let msg = w.finish(&header()).to_vec();
        assert_eq!(
            Batch::parse(&msg[..msg.len() - 1]).err(),
            Some(WireError::Truncated)
        );
        let mut bad = msg.clone();
        bad[4] = 9;
        assert_eq!(Batch::parse(&bad).err(), Some(WireError::Version(9)));
        let mut bad = msg.clone();
        bad[0] = b'X';
        assert_eq!(Batch::parse(&bad).err(), Some(WireError::Magic));
        let mut bad = msg;
        bad.push(0);
        assert!(Batch::parse(&bad).is_err());
    }

    /// A ring's sequences stay below `MAX_SEQUENCE`: a batch or an ack that names one past
    /// it is refused, so the importer's and exporter's sums over them cannot overflow.
    #[test]
    fn sequences_past_the_largest_a_ring_hands_out_are_refused() {
        let mut w = BatchWriter::default();
        let past = Some(WireError::Field(
            "sequence past the largest a ring hands out",
        ));
        for (committed, start, end) in [
            (10, 0, u64::MAX),
            (10, 12, MAX_SEQUENCE + 1),
            (MAX_SEQUENCE + 1, 12, 20),
            (u64::MAX, 12, 20),
        ] {
            w.begin();
            let h = BatchHeader {
                committed,
                start,
                end,
                mode: Mode::Drop,
                ..header()
            };
            let msg = w.finish(&h).to_vec();
            assert_eq!(Batch::parse(&msg).err(), past, "{h:?}");
        }
        w.begin();
        let h = BatchHeader {
            committed: MAX_SEQUENCE,
            start: 12,
            end: MAX_SEQUENCE,
            ..header()
        };
        assert!(Batch::parse(&w.finish(&h)).is_ok(), "up to the largest");
        for next in [MAX_SEQUENCE + 1, u64::MAX] {
            let a = Ack {
                source: 1,
                next,
                resend: false,
            };
            assert_eq!(Ack::parse(&a.encode()).err(), past);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A deterministic sweep of prefixes and byte flips of a valid batch.
        let mut w = BatchWriter::default();
        w.begin();
        w.push(12, b"hello");
        w.push(14, b"world");
        let msg = w.finish(&header()).to_vec();
        for cut in 0..msg.len() {
            let _ = Batch::parse(&msg[..cut]);
        }
        for i in 0..msg.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = msg.clone();
                m[i] = v;
                if let Ok(b) = Batch::parse(&m) {
                    assert_eq!(b.events().count() as u32, b.count());
                }
            }
        }
    }

    #[test]
    fn an_ack_round_trips() {
        let a = Ack {
            source: 99,
            next: 1 << 40,
            resend: true,
        };
        assert_eq!(Ack::parse(&a.encode()), Ok(a));
        assert_eq!(Ack::parse(&a.encode()[..31]), Err(WireError::Truncated));
        let mut bad = a.encode();
        bad[5] = 2;
        assert!(Ack::parse(&bad).is_err());
    }
}
