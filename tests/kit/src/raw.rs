//! Raw words of a segment, read and written through its file at offsets taken from
//! `shmring_layout` (`offset_of!` on its `#[repr(C)]` types, the validated `Geometry`),
//! never hard-coded.
//!
//! For the fault tests: to read what the client keeps to itself (the waiter count and the
//! wake word of a wake line, a claim's length), and to lay down exactly the state a process
//! killed at one particular instruction leaves behind (a claim in flight of a dead
//! producer, a CLOSED bit whose stop was never recorded), where a SIGKILL at a random time
//! would hit that instruction once in a million runs. `pread`/`pwrite` on the tmpfs file
//! reach the same pages every mapping of the segment sees.

use std::fs::{File, OpenOptions};
use std::mem::offset_of;
use std::os::unix::fs::FileExt;

use shmring::Ring;
use shmring_layout::{
    owned_word, producer_state, waiters, ConsumerCold, ConsumerEntry, ConsumerHot, Geometry,
    LifecycleLine, Padded, ProducerEntry, SequenceLines, WakeLine, NAME_LEN, SEQ_LINES_OFFSET,
};

/// A segment file opened for raw access.
pub struct RawSegment {
    file: File,
    geo: Geometry,
}

/// Which of the ring's two ring-wide wake lines (each consumer entry has a third, for the
/// consumers parked behind it: `ConsumerHot::downstream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// Consumers parked waiting for events (producers wake it).
    Consumer,
    /// Producers parked waiting for room (consumers wake it).
    Producer,
}

impl RawSegment {
    /// Open `ring`'s segment file.
    pub fn open(ring: &Ring) -> RawSegment {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(ring.path())
            .unwrap_or_else(|e| panic!("opening {}: {e}", ring.path().display()));
        RawSegment {
            file,
            geo: *ring.geometry(),
        }
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The native-endian u32 at `offset`.
    pub fn read_u32(&self, offset: u64) -> u32 {
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, offset).expect("pread");
        u32::from_ne_bytes(b)
    }

    /// The native-endian u64 at `offset`.
    pub fn read_u64(&self, offset: u64) -> u64 {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, offset).expect("pread");
        u64::from_ne_bytes(b)
    }

    /// Write a native-endian u32 at `offset`.
    pub fn write_u32(&self, offset: u64, v: u32) {
        self.file
            .write_all_at(&v.to_ne_bytes(), offset)
            .expect("pwrite");
    }

    /// Write a native-endian u64 at `offset`.
    pub fn write_u64(&self, offset: u64, v: u64) {
        self.file
            .write_all_at(&v.to_ne_bytes(), offset)
            .expect("pwrite");
    }

    fn wake_line(line: Line) -> u64 {
        let field = match line {
            Line::Consumer => offset_of!(SequenceLines, consumer_wake),
            Line::Producer => offset_of!(SequenceLines, producer_wake),
        };
        (SEQ_LINES_OFFSET + field + offset_of!(Padded<WakeLine>, value)) as u64
    }

    /// The waiter count of a wake line: parkers between raising and lowering it, until a
    /// waker resets it (`shmring_layout::waiters`).
    pub fn waiters(&self, line: Line) -> u32 {
        waiters::count(self.read_u64(Self::wake_line(line) + offset_of!(WakeLine, waiters) as u64))
    }

    /// The futex word of a wake line: bumped once by every wake.
    pub fn wake_word(&self, line: Line) -> u32 {
        self.read_u32(Self::wake_line(line) + offset_of!(WakeLine, word) as u64)
    }

    /// Offset of the claim counter (sequence, with `CLAIM_CLOSED` in bit 63).
    pub fn claim_offset() -> u64 {
        (SEQ_LINES_OFFSET + offset_of!(SequenceLines, claim) + offset_of!(Padded<u64>, value))
            as u64
    }

    fn claim_line_offset() -> u64 {
        (SEQ_LINES_OFFSET
            + offset_of!(SequenceLines, lifecycle)
            + offset_of!(Padded<LifecycleLine>, value)) as u64
    }

    /// The raw lifecycle word (`shmring_layout::lifecycle`).
    pub fn lifecycle_word(&self) -> u64 {
        self.read_u64(Self::claim_line_offset() + offset_of!(LifecycleLine, lifecycle) as u64)
    }

    /// Overwrite the raw lifecycle word.
    pub fn set_lifecycle_word(&self, v: u64) {
        self.write_u64(
            Self::claim_line_offset() + offset_of!(LifecycleLine, lifecycle) as u64,
            v,
        );
    }

    /// The raw claim counter.
    pub fn claim_word(&self) -> u64 {
        self.read_u64(Self::claim_offset())
    }

    /// Overwrite the raw claim counter.
    pub fn set_claim_word(&self, v: u64) {
        self.write_u64(Self::claim_offset(), v);
    }

    /// The claim line's recorded stop sequence.
    pub fn stop_seq(&self) -> u64 {
        self.read_u64(Self::claim_line_offset() + offset_of!(LifecycleLine, stop_seq) as u64)
    }

    /// Overwrite the claim line's recorded stop sequence.
    pub fn set_stop_seq(&self, v: u64) {
        self.write_u64(
            Self::claim_line_offset() + offset_of!(LifecycleLine, stop_seq) as u64,
            v,
        );
    }

    fn producer_field(&self, index: u32, field: usize) -> u64 {
        self.geo
            .producer_offset(index)
            .unwrap_or_else(|| panic!("producer index {index} out of range"))
            + field as u64
    }

    /// Length of the claim producer entry `index` holds (meaningful while it holds one).
    pub fn producer_in_flight_len(&self, index: u32) -> u64 {
        self.read_u64(self.producer_field(index, offset_of!(ProducerEntry, in_flight_len)))
    }

    /// The raw in-flight word of producer entry `index` (0: none; first + 1; or
    /// `IN_FLIGHT_CLAIMING`).
    pub fn producer_in_flight(&self, index: u32) -> u64 {
        self.read_u64(self.producer_field(index, offset_of!(ProducerEntry, in_flight)))
    }

    /// Lay down producer entry `index` as a process `(pid, start_time)` that attached and
    /// died holding `in_flight` (raw word) of `len` sequences, as a SIGKILL would leave it.
    /// The entry must be free (nobody else writes it meanwhile). Returns the entry's word,
    /// what a repair of it names.
    pub fn fabricate_dead_producer(
        &self,
        index: u32,
        pid: u32,
        start_time: u64,
        in_flight: u64,
        len: u64,
    ) -> u64 {
        let f = |field| self.producer_field(index, field);
        self.write_u64(f(offset_of!(ProducerEntry, start_time)), start_time);
        self.write_u64(f(offset_of!(ProducerEntry, in_flight)), in_flight);
        self.write_u64(f(offset_of!(ProducerEntry, in_flight_len)), len);
        let word = owned_word::pack(1, producer_state::ACTIVE, pid);
        self.write_u64(f(offset_of!(ProducerEntry, word)), word);
        word
    }

    /// Overwrite producer entry `index`'s lone position (`ProducerEntry::lone`), as another
    /// process writing into the segment would.
    pub fn set_producer_lone(&self, index: u32, v: u64) {
        self.write_u64(
            self.producer_field(index, offset_of!(ProducerEntry, lone)),
            v,
        );
    }

    /// Overwrite producer entry `index`'s record of where its lone claims ended
    /// (`ProducerEntry::lone_end`).
    pub fn set_producer_lone_end(&self, index: u32, v: u64) {
        self.write_u64(
            self.producer_field(index, offset_of!(ProducerEntry, lone_end)),
            v,
        );
    }

    /// Overwrite producer entry `index`'s word (`shmring_layout::owned_word`), as a process
    /// killed between two steps of taking or repairing it leaves it.
    pub fn set_producer_word(&self, index: u32, word: u64) {
        self.write_u64(
            self.producer_field(index, offset_of!(ProducerEntry, word)),
            word,
        );
    }

    /// Consumer entry `index`'s word (its state, owner and generation).
    pub fn consumer_word(&self, index: u32) -> u64 {
        self.read_u64(self.consumer_hot(index) + offset_of!(ConsumerHot, word) as u64)
    }

    /// Set consumer entry `index`'s word, as a holder's CAS would have left it.
    pub fn set_consumer_word(&self, index: u32, word: u64) {
        self.write_u64(
            self.consumer_hot(index) + offset_of!(ConsumerHot, word) as u64,
            word,
        );
    }

    /// Set consumer entry `index`'s poison record (`ConsumerCold::poison_seq` and
    /// `poison_attempts`): the event whose handler is failing, as its holders left it.
    pub fn set_consumer_poison(&self, index: u32, poison_seq: u64, attempts: u32) {
        let cold = self.consumer_cold(index);
        self.write_u32(
            cold + offset_of!(ConsumerCold, poison_attempts) as u64,
            attempts,
        );
        self.write_u64(
            cold + offset_of!(ConsumerCold, poison_seq) as u64,
            poison_seq,
        );
    }

    fn consumer_base(&self, index: u32) -> u64 {
        self.geo
            .consumer_offset(index)
            .unwrap_or_else(|| panic!("consumer index {index} out of range"))
    }

    fn consumer_hot(&self, index: u32) -> u64 {
        self.consumer_base(index) + offset_of!(ConsumerEntry, hot) as u64
    }

    fn consumer_cold(&self, index: u32) -> u64 {
        self.consumer_base(index) + offset_of!(ConsumerEntry, cold) as u64
    }

    /// Set consumer entry `index`'s position (`ConsumerHot::next`), as its holder's commit
    /// leaves it.
    pub fn set_consumer_next(&self, index: u32, next: u64) {
        self.write_u64(
            self.consumer_hot(index) + offset_of!(ConsumerHot, next) as u64,
            next,
        );
    }

    /// Reset the waiter count of consumer entry `index`'s line (`ConsumerHot::downstream`)
    /// as a waker's (r) does, without the bump and the wake that follow it: what a waker
    /// killed between the two leaves behind.
    pub fn reset_consumer_waiters(&self, index: u32) {
        let at = self.consumer_hot(index)
            + (offset_of!(ConsumerHot, downstream) + offset_of!(WakeLine, waiters)) as u64;
        self.write_u64(at, waiters::reset(self.read_u64(at)));
    }

    /// The waiter count of consumer entry `index`'s line (`ConsumerHot::downstream`).
    pub fn consumer_waiters(&self, index: u32) -> u32 {
        let at = self.consumer_hot(index)
            + (offset_of!(ConsumerHot, downstream) + offset_of!(WakeLine, waiters)) as u64;
        waiters::count(self.read_u64(at))
    }

    /// The futex word of consumer entry `index`'s line: bumped by every wake of it.
    pub fn consumer_wake_word(&self, index: u32) -> u32 {
        let at = self.consumer_hot(index)
            + (offset_of!(ConsumerHot, downstream) + offset_of!(WakeLine, word)) as u64;
        self.read_u32(at)
    }

    /// Set consumer entry `index`'s owner start time (`ConsumerCold::start_time`): with a
    /// live pid in the word, the entry then reads as that process's.
    pub fn set_consumer_start_time(&self, index: u32, start_time: u64) {
        self.write_u64(
            self.consumer_cold(index) + offset_of!(ConsumerCold, start_time) as u64,
            start_time,
        );
    }

    /// Consumer entry `index`'s flags (`shmring_layout::consumer_flags`).
    pub fn consumer_flags(&self, index: u32) -> u32 {
        self.read_u32(self.consumer_hot(index) + offset_of!(ConsumerHot, flags) as u64)
    }

    /// Lay down the entries a process `pid` was taking when it stopped: consumer 0 CLAIMED
    /// (a new anonymous consumer), consumer 1 RESUMING (the durable required consumer "d"
    /// taken over by name), consumer 2 REATTACHING (the durable "r", not gating), producer 2
    /// ATTACHING and producer 3 REPAIRING. Each entry must be free; its start time is left
    /// as it is (a previous holder's, or 0).
    pub fn half_take(&self, pid: u32) -> HalfTaken {
        use shmring_layout::{consumer_flags as f, consumer_state as cs, producer_state as ps};
        let taken = HalfTaken {
            claimed: owned_word::pack(3, cs::CLAIMED, pid),
            resuming: owned_word::pack(5, cs::RESUMING, pid),
            reattaching: owned_word::pack(9, cs::REATTACHING, pid),
            attaching: owned_word::pack(2, ps::ATTACHING, pid),
            repairing: owned_word::pack(4, ps::REPAIRING, pid),
        };
        self.fabricate_consumer(0, taken.claimed, 0, "", 0);
        let durable = f::REQUIRED | f::DURABLE;
        self.fabricate_consumer(1, taken.resuming, durable, "d", 0);
        self.fabricate_consumer(2, taken.reattaching, durable, "r", 0);
        self.set_producer_word(2, taken.attaching);
        self.set_producer_word(3, taken.repairing);
        taken
    }

    /// Lay down consumer entry `index` as its holder left it: `word`, `flags`
    /// (`shmring_layout::consumer_flags`), `name` (empty: anonymous) and position `next`.
    /// The entry must be free (nobody else writes it meanwhile).
    pub fn fabricate_consumer(&self, index: u32, word: u64, flags: u32, name: &str, next: u64) {
        let (hot, cold) = (self.consumer_hot(index), self.consumer_cold(index));
        assert!(name.len() <= NAME_LEN, "name too long");
        let mut padded = [0u8; NAME_LEN];
        padded[..name.len()].copy_from_slice(name.as_bytes());
        self.file
            .write_all_at(&padded, cold + offset_of!(ConsumerCold, name) as u64)
            .expect("pwrite");
        self.write_u64(hot + offset_of!(ConsumerHot, next) as u64, next);
        self.write_u32(hot + offset_of!(ConsumerHot, flags) as u64, flags);
        self.write_u64(hot + offset_of!(ConsumerHot, word) as u64, word);
    }
}

/// The words [`RawSegment::half_take`] laid down.
#[derive(Debug, Clone, Copy)]
pub struct HalfTaken {
    /// Consumer 0's (CLAIMED).
    pub claimed: u64,
    /// Consumer 1's (RESUMING).
    pub resuming: u64,
    /// Consumer 2's (REATTACHING).
    pub reattaching: u64,
    /// Producer 2's (ATTACHING).
    pub attaching: u64,
    /// Producer 3's (REPAIRING).
    pub repairing: u64,
}
