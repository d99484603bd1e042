//! The mapped segment: the one place that turns mapped bytes into typed references.
//!
//! Every offset comes from a [`Geometry`] that [`shmring_layout::validate`] produced (or that
//! the creator computed), and every region is checked to lie inside the mapping when the
//! segment is built, so the accessors below are safe to call.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};
use shmring_layout::stamp::{self, Stamp};
use shmring_layout::{
    ClaimLine, ConsumerEntry, Geometry, Header, ProducerEntry, SequenceLines, SlotHeader,
    HEADER_SIZE, SEQ_LINES_OFFSET, SIZED_LEN_SIZE, SLOT_HEADER_SIZE,
};

use crate::fixed;
use crate::truncation::Registration;

/// The length word at the start of a sized event's slot, in bytes.
const SIZED_LEN: usize = SIZED_LEN_SIZE as usize;

/// What a header read cut short by a truncation says.
const TRUNCATED_WHILE_READ: &str =
    "the file was truncated while its header was read: another process with write access truncated it";

/// A mapped, validated segment.
pub(crate) struct Segment {
    // Declared before `map`, so dropped first: the mapping leaves the truncation guard's
    // table before it is unmapped.
    guard: Registration,
    map: MmapRaw,
    geo: Geometry,
    path: PathBuf,
    namespace: String,
    name: String,
    // Keeps the file open: fchmod/fchown, the size check (`fstat`) and the identity check
    // of `Ring::remove` use it.
    file: File,
}

// SAFETY: the mapping is shared memory accessed only through atomics (and through slot
// payloads whose exclusive ownership the ring protocol hands out); the raw pointer inside
// `MmapRaw` is what makes it !Send/!Sync by default, not any thread-local state.
unsafe impl Send for Segment {}
// SAFETY: as above; every shared access goes through atomic types.
unsafe impl Sync for Segment {}

impl Segment {
    /// Map `file` (already sized to `geo.total_size`).
    pub(crate) fn map(
        file: File,
        geo: Geometry,
        path: &Path,
        namespace: &str,
        name: &str,
    ) -> std::io::Result<Self> {
        let map = MmapOptions::new()
            .len(geo.total_size as usize)
            .populate()
            .map_raw(&file)?;
        // The mapping is page aligned, so every 128-byte aligned offset is 128 aligned.
        debug_assert_eq!(map.as_ptr() as usize % 4096, 0);
        Ok(Self {
            guard: Registration::new(map.as_ptr(), map.len()),
            map,
            geo,
            path: path.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            file,
        })
    }

    /// Copy the header out of a mapping of `len` bytes of `file`, for validation.
    pub(crate) fn header_snapshot(file: &File) -> std::io::Result<[u8; HEADER_SIZE]> {
        let map = MmapOptions::new()
            .len(HEADER_SIZE)
            .map_raw_read_only(file)?;
        // Declared after `map`, so dropped first.
        let guard = Registration::new(map.as_ptr(), map.len());
        let words = map.as_ptr() as *const AtomicU64;
        let mut out = [0u8; HEADER_SIZE];
        for i in 0..HEADER_SIZE / 8 {
            // SAFETY: the mapping is HEADER_SIZE bytes, page aligned; word i is inside it and
            // 8-byte aligned. Atomic loads, because another process may be writing.
            let w = unsafe { &*words.add(i) };
            // Acquire on word 0 (the magic): pairs with the creator's Release store of the
            // magic, so the configuration words read after it are the creator's.
            let order = if i == 0 {
                Ordering::Acquire
            } else {
                Ordering::Relaxed
            };
            out[i * 8..i * 8 + 8].copy_from_slice(&w.load(order).to_ne_bytes());
        }
        if guard.zeroed() {
            return Err(std::io::Error::other(TRUNCATED_WHILE_READ));
        }
        Ok(out)
    }

    /// Whether the truncation guard replaced this mapping with zeros: the file was
    /// truncated under it and a page past its end was touched (feature `truncation-guard`;
    /// without it, such a touch kills the process and this is always false).
    pub(crate) fn zeroed(&self) -> bool {
        self.guard.zeroed()
    }

    /// The open segment file.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// `Some(len)` when the file has shrunk to `len` bytes, below the mapped segment: a
    /// touch of a page past its end would raise SIGBUS. `fstat` on the descriptor, so it
    /// speaks of the mapped file whatever its name now refers to. (Nothing stops a process
    /// with write access from truncating it right after this check; the check makes the
    /// window a few instructions wide instead of the whole life of the mapping.)
    pub(crate) fn shrunk(&self) -> std::io::Result<Option<u64>> {
        let len = crate::file::size_now(&self.file)?;
        Ok((len < self.geo.total_size).then_some(len))
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geo
    }
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// The header.
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: offset 0 of a page-aligned mapping of at least `total_size` >= HEADER_SIZE
        // bytes; Header is 128-aligned and made of atomics only.
        unsafe { &*(self.base() as *const Header) }
    }

    /// The ring-wide sequence lines.
    pub(crate) fn lines(&self) -> &SequenceLines {
        // SAFETY: SEQ_LINES_OFFSET is 128-aligned and the lines end before the consumer
        // table (checked by `Geometry`); SequenceLines is made of atomics only.
        unsafe { &*(self.base().add(SEQ_LINES_OFFSET) as *const SequenceLines) }
    }

    /// Consumer entry `i`, or `None` past the table.
    pub(crate) fn consumer(&self, i: u32) -> Option<&ConsumerEntry> {
        let off = self.geo.consumer_offset(i)?;
        debug_assert!(off + std::mem::size_of::<ConsumerEntry>() as u64 <= self.geo.total_size);
        // SAFETY: `consumer_offset` bounds i by the table size, the table lies inside the
        // mapping, entries are 128-aligned and made of atomics only.
        Some(unsafe { &*(self.base().add(off as usize) as *const ConsumerEntry) })
    }

    /// Producer entry `i`, or `None` past the table.
    #[inline]
    pub(crate) fn producer(&self, i: u32) -> Option<&ProducerEntry> {
        let off = self.geo.producer_offset(i)?;
        debug_assert!(off + std::mem::size_of::<ProducerEntry>() as u64 <= self.geo.total_size);
        // SAFETY: as for `consumer`.
        Some(unsafe { &*(self.base().add(off as usize) as *const ProducerEntry) })
    }

    /// Whether the ring carries fixed-size events under a cursor (see `fixed`) rather than
    /// stamped slots.
    #[inline(always)]
    pub(crate) fn is_fixed(&self) -> bool {
        self.geo.fixed
    }

    /// A fixed-size ring's events and tomb words (see `fixed`). On a ring of stamped slots
    /// the array is never used (its accessors are only called on fixed rings).
    #[inline]
    pub(crate) fn events(&self) -> Events<'_> {
        debug_assert!(self.geo.fixed, "events of a ring of stamped slots");
        Events {
            array: self.event_array(),
            _seg: std::marker::PhantomData,
        }
    }

    fn event_array(&self) -> EventArray {
        EventArray {
            // SAFETY: `slots_offset` lies inside the mapping (see `SlotArray::of`).
            first: unsafe { self.base().add(self.geo.slots_offset as usize) },
            // SAFETY: on a fixed-size ring `Geometry` puts `capacity` tomb words, 8-aligned
            // (line-aligned start), inside `total_size`; on a stamped ring `tombs_offset` is
            // 0 (the header) and the array is never read.
            tombs: unsafe { self.base().add(self.geo.tombs_offset as usize) } as *const AtomicU64,
            lines: self.lines() as *const SequenceLines,
            mask: self.geo.mask(),
            size: self.geo.slot_size as usize,
            sized: self.geo.sized,
        }
    }

    /// Whether `seq` is published: an event or a tombstone, not a later lap and not a claim
    /// still being written. Acquire: what was published with it is visible after.
    pub(crate) fn is_done(&self, seq: u64) -> bool {
        if self.geo.fixed {
            let ev = self.events();
            ev.reached_by_cursor(seq) && !ev.lapped(seq)
        } else {
            // Acquire: pairs with the producer's Release stamp store.
            stamp::is_done(self.slot(seq).header.stamp.load(Ordering::Acquire), seq)
        }
    }

    /// Whether the ring has something at or past `seq` for a reader at `seq`: published,
    /// a tombstone, or overwritten by a later lap. Acquire, as `is_done`.
    pub(crate) fn reached(&self, seq: u64) -> bool {
        if self.geo.fixed {
            self.events().reached_by_cursor(seq)
        } else {
            // Acquire: pairs with the producer's Release stamp store.
            stamp::reached(self.slot(seq).header.stamp.load(Ordering::Acquire), seq)
        }
    }

    /// Whether `seq`'s slot holds (or is being written with) a later lap's event.
    pub(crate) fn lapped(&self, seq: u64) -> bool {
        if self.geo.fixed {
            self.events().lapped(seq)
        } else {
            // Acquire: pairs with the producer's Release stamp store.
            stamp::read(self.slot(seq).header.stamp.load(Ordering::Acquire), seq) == Stamp::Lapped
        }
    }

    /// The slot array, its geometry read once: for loops over many slots, whose slot
    /// lookups then make no loads of the segment's fields.
    #[inline]
    pub(crate) fn slots(&self) -> Slots<'_> {
        debug_assert!(!self.geo.fixed, "stamped slots of a fixed-size ring");
        Slots {
            array: SlotArray::of(self),
            _seg: std::marker::PhantomData,
        }
    }

    /// The slot that carries sequence `seq`.
    #[inline]
    pub(crate) fn slot(&self, seq: u64) -> Slot<'_> {
        self.slots().get(seq)
    }
}

/// A segment as an attached handle (a producer or a consumer) holds it for its whole life:
/// the slot array's geometry and the handle's own table entry (`E`: [`ProducerEntry`] or
/// [`ConsumerEntry`]) resolved once, at attach, so that the per-event path finds slots and
/// its entry without loading the segment's fields or checking the entry index again (see
/// ARCHITECTURE.md, "Instructions per event"). Derefs to the [`Segment`] for the rest.
pub(crate) struct Attached<E> {
    seg: Arc<Segment>,
    /// The mapping's first byte (as [`Segment::base`]): the header and the sequence lines
    /// one load away.
    base: *mut u8,
    /// The slot array (as [`Segment::slots`] returns it, without the borrow).
    slots: SlotArray,
    /// A fixed-size ring's events (as [`Segment::events`] returns them, without the borrow).
    events: EventArray,
    /// The entry this handle holds, inside the mapping `seg` keeps.
    entry: NonNull<E>,
    /// That entry's index in its table.
    index: u32,
}

// SAFETY: the pointers point into the mapping that `seg` (Send + Sync) keeps alive as long
// as this value; what they reach is accessed as `Segment`'s accessors do (atomics, and
// payloads the ring protocol hands out exclusively). Entries are made of atomics only.
unsafe impl<E: Sync> Send for Attached<E> {}

impl Attached<ProducerEntry> {
    /// `seg` held by the producer of entry `i`; `None` past the producer table.
    pub(crate) fn producer(seg: Arc<Segment>, i: u32) -> Option<Self> {
        let entry = NonNull::from(seg.producer(i)?);
        Some(Self::new(seg, entry, i))
    }
}

impl Attached<ConsumerEntry> {
    /// `seg` held by the consumer of entry `i`; `None` past the consumer table.
    pub(crate) fn consumer(seg: Arc<Segment>, i: u32) -> Option<Self> {
        let entry = NonNull::from(seg.consumer(i)?);
        Some(Self::new(seg, entry, i))
    }
}

impl<E> Attached<E> {
    /// `entry` must come from one of `seg`'s entry accessors, given `index`.
    fn new(seg: Arc<Segment>, entry: NonNull<E>, index: u32) -> Self {
        Attached {
            base: seg.base(),
            slots: SlotArray::of(&seg),
            events: seg.event_array(),
            entry,
            index,
            seg,
        }
    }

    /// The index of the entry this handle holds, in its table.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// The segment itself, to share.
    pub(crate) fn arc(&self) -> &Arc<Segment> {
        &self.seg
    }

    /// The header (as [`Segment::header`]), from the base resolved at attach.
    #[inline(always)]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: as in `Segment::header`; `base` is that segment's, kept by `self.seg`.
        unsafe { &*(self.base as *const Header) }
    }

    /// The ring-wide sequence lines (as [`Segment::lines`]), from the base resolved at
    /// attach.
    #[inline(always)]
    pub(crate) fn lines(&self) -> &SequenceLines {
        // SAFETY: as in `Segment::lines`; `base` is that segment's, kept by `self.seg`.
        unsafe { &*(self.base.add(SEQ_LINES_OFFSET) as *const SequenceLines) }
    }

    /// The slot array, from the geometry resolved at attach (as [`Segment::slots`]).
    #[inline(always)]
    pub(crate) fn slots(&self) -> Slots<'_> {
        Slots {
            array: self.slots,
            _seg: std::marker::PhantomData,
        }
    }

    /// The slot that carries sequence `seq` (as [`Segment::slot`]).
    #[inline(always)]
    pub(crate) fn slot(&self, seq: u64) -> Slot<'_> {
        self.slots().get(seq)
    }

    /// A fixed-size ring's events, resolved at attach (as [`Segment::events`]).
    #[inline(always)]
    pub(crate) fn events(&self) -> Events<'_> {
        Events {
            array: self.events,
            _seg: std::marker::PhantomData,
        }
    }

    /// The entry this handle holds (as `Segment::producer` or `Segment::consumer` of its
    /// index).
    #[inline(always)]
    pub(crate) fn entry(&self) -> &E {
        // SAFETY: `Segment::producer` or `Segment::consumer` returned this reference at
        // construction (the index inside the table, the table inside the mapping);
        // `self.seg` keeps the mapping, and the borrow cannot outlive `self`.
        unsafe { self.entry.as_ref() }
    }
}

impl<E> std::ops::Deref for Attached<E> {
    type Target = Segment;
    fn deref(&self) -> &Segment {
        &self.seg
    }
}

/// Where a segment's slot array is and how it is cut: what [`Slots`] holds under the borrow
/// of its segment, and [`Attached`] under the `Arc` it keeps.
#[derive(Clone, Copy)]
struct SlotArray {
    first: *mut u8,
    /// The slot array's length in bytes, for the debug check in `get`.
    #[cfg(debug_assertions)]
    end: usize,
    mask: u64,
    slot_size: usize,
    /// Payload bytes per slot.
    capacity: usize,
}

impl SlotArray {
    fn of(seg: &Segment) -> Self {
        SlotArray {
            // SAFETY: the mapping is `total_size` bytes, and `Geometry` makes `total_size`
            // `slots_offset` plus the slot array (capacity >= 2 slots of >= 8 bytes, and a
            // fixed-size ring's tomb words after them), so `slots_offset` lies inside it.
            first: unsafe { seg.base().add(seg.geo.slots_offset as usize) },
            #[cfg(debug_assertions)]
            end: seg.geo.total_size as usize - seg.geo.slots_offset as usize,
            mask: seg.geo.mask(),
            slot_size: seg.geo.slot_size as usize,
            capacity: seg.geo.max_payload(),
        }
    }
}

/// Ask the CPU to bring the line holding `p` into this core's cache, and go on without
/// waiting for it: a hint, which changes nothing but timing (and is nothing on a CPU the
/// hint is not written for).
#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` reads nothing architecturally and cannot fault, whatever the
    // address (the callers' are inside the mapping anyway); it needs SSE, which every
    // x86_64 CPU has.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The fewest bytes of a run [`Events::prefetch_run`] asks for (16 lines): a shorter run's
/// reads wait on few lines.
const PREFETCH_MIN: usize = 1024;

/// The most bytes of a run [`Events::prefetch_run`] asks for (256 lines, a third of the
/// 48 KiB L1 data cache of the Intel Xeon host the project measures on): lines asked for
/// past what the cache holds would push out those asked for first before they are read.
const PREFETCH_MAX: usize = 16 * 1024;

/// The offsets of the 64-byte lines of an array of `total` bytes (its first byte at the
/// start of a line) that lie wholly inside the first [`PREFETCH_MAX`] of the `len` bytes
/// from offset `first` (below `total`), which wrap at the array's end to its start; none if
/// `len` is below [`PREFETCH_MIN`]: what [`Events::prefetch_run`] asks for.
fn whole_lines(first: usize, len: usize, total: usize) -> impl Iterator<Item = usize> {
    let len = if len < PREFETCH_MIN {
        0
    } else {
        len.min(PREFETCH_MAX)
    };
    let end = first + len.min(total);
    let lines = |from: usize, to: usize| (from.div_ceil(64)..to / 64).map(|k| k * 64);
    lines(first, end.min(total)).chain(lines(0, end.saturating_sub(total)))
}

/// Where a fixed-size ring's events and tomb words are (see `fixed`).
#[derive(Clone, Copy)]
struct EventArray {
    /// The first event's payload.
    first: *mut u8,
    /// The first tomb word.
    tombs: *const AtomicU64,
    /// The sequence lines: the claim line, the cursor line (cursor, tombstone bound) and
    /// the lifecycle line.
    lines: *const SequenceLines,
    mask: u64,
    /// Bytes per slot (a multiple of 8): the event, or on a ring of sized events the length
    /// word and the largest event.
    size: usize,
    /// A ring of sized events: each slot starts with a length word (see [`Events::write_sized`]).
    sized: bool,
}

/// A fixed-size ring's events (see [`Segment::events`]): payload-only slots (on a ring of
/// sized events, each after its length word), their tomb words, and the claim and cursor
/// lines that say which are claimed and published.
#[derive(Clone, Copy)]
pub(crate) struct Events<'a> {
    array: EventArray,
    _seg: std::marker::PhantomData<&'a Segment>,
}

impl<'a> Events<'a> {
    /// Bytes per event (on a ring of sized events, per slot: see [`Events::max`]).
    #[inline(always)]
    pub(crate) fn size(&self) -> usize {
        self.array.size
    }

    /// Whether each slot starts with a length word (a ring of sized events).
    #[inline(always)]
    pub(crate) fn sized(&self) -> bool {
        self.array.sized
    }

    /// The largest event: the event size, or a sized slot less its length word.
    #[inline(always)]
    pub(crate) fn max(&self) -> usize {
        if self.array.sized {
            self.array.size - SIZED_LEN
        } else {
            self.array.size
        }
    }

    #[inline(always)]
    fn line(&self) -> &'a ClaimLine {
        &self.lines().claim
    }

    #[inline(always)]
    fn lines(&self) -> &'a SequenceLines {
        // SAFETY: the sequence lines of the mapping, which outlives 'a; made of atomics only.
        unsafe { &*self.array.lines }
    }

    #[inline(always)]
    fn at(&self, seq: u64) -> *mut u8 {
        let a = &self.array;
        // SAFETY: `seq & mask` is below the capacity, so the event lies inside the event
        // array of the mapping (`Geometry` puts `capacity * size` bytes there).
        unsafe { a.first.add((seq & a.mask) as usize * a.size) }
    }

    /// Whether what a reader may count as published now is past `seq` (`fixed::published`;
    /// nothing while the lifecycle word changes under the look).
    #[inline(always)]
    pub(crate) fn reached_by_cursor(&self, seq: u64) -> bool {
        fixed::published(self).is_some_and(|(end, _)| seq < end)
    }

    /// The cursor, below a claim still being written (`pending`), whatever the lifecycle
    /// word says: what the producers wrote and claimed, a refused store included. For
    /// counts and the corrupt-word checks of `Ring::info`, never for delivering.
    pub(crate) fn written(&self) -> u64 {
        // Acquire, both: as in `fixed::published`.
        let c = self.lines().cursor.cursor.load(Ordering::Acquire);
        c.min(self.lines().cursor.pending.load(Ordering::Acquire))
    }

    /// The tombstone bound, for a reader that saw its sequence published already.
    pub(crate) fn tomb_end_now(&self) -> u64 {
        // Acquire, with no store to pair with (`tomb_end` is stored Relaxed and published
        // by the Release store of `pending` that ends its claim): what covers the
        // tombstones published with the caller's sequence is the caller's earlier Acquire
        // look that saw it published, which this load follows.
        self.lines().cursor.tomb_end.load(Ordering::Acquire)
    }

    /// Whether `seq`'s slot holds, or is being written with, a later lap's event: the
    /// write horizon is past `seq + capacity` (see `fixed`). A look: a copying reader's
    /// before its copy is decided again by `fixed::copy_held` after it; an attach's only
    /// says whether an old position still has its slot (gating holds producers from then
    /// on).
    pub(crate) fn lapped(&self, seq: u64) -> bool {
        fixed::lapped(self, seq)
    }

    /// Write `bytes` (exactly one event's size) as the event of `seq`.
    ///
    /// # Safety
    /// The caller holds `seq`'s claim and passed the wrap gate for it (see `Slot::write`),
    /// and `bytes` is one event's size (checked by every publish; were it 8 bytes of a larger
    /// event, the write would land inside the array, but in another sequence's slot).
    #[inline(always)]
    pub(crate) unsafe fn write(&self, seq: u64, bytes: &[u8]) {
        debug_assert_eq!(bytes.len(), self.array.size);
        if bytes.len() == 8 {
            // The event's size is the caller's length (its contract): with a constant 8 the
            // slot's address is a shift, not a multiply by the size read from the array.
            let a = &self.array;
            // SAFETY: `seq & mask` is below the capacity and the size is 8, so the event lies
            // inside the event array (as in `at`); one 8-byte event, 8-aligned in the slot
            // (reads of `bytes` unaligned); exclusive by the caller's contract.
            unsafe {
                let p = a.first.add((seq & a.mask) as usize * 8);
                let v = std::ptr::read_unaligned(bytes.as_ptr() as *const u64);
                std::ptr::write(p as *mut u64, v);
            }
            return;
        }
        let p = self.at(seq);
        let n = bytes.len().min(self.array.size);
        // SAFETY: n <= size bytes inside the slot; exclusive by the caller's contract, so no
        // byte of the caller's `bytes` lies in it.
        unsafe { copy_payload(&bytes[..n], p) };
    }

    /// The event of `seq`, writable.
    ///
    /// # Safety
    /// As for [`Events::write`], and the borrow ends before `seq` is published.
    #[inline]
    pub(crate) unsafe fn payload_mut(&self, seq: u64) -> &'a mut [u8] {
        let skip = if self.array.sized { SIZED_LEN } else { 0 };
        // SAFETY: the slot's payload, inside the slot; exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.at(seq).add(skip), self.array.size - skip) }
    }

    /// The event of `seq`, read in place.
    ///
    /// # Safety
    /// The caller saw the cursor past `seq` (Acquire) and holds the producer off the slot
    /// (its committed sequence gates it) for as long as the borrow lives.
    #[inline(always)]
    pub(crate) unsafe fn payload(&self, seq: u64) -> &'a [u8] {
        debug_assert!(!self.array.sized, "a sized event read as a fixed-size one");
        // SAFETY: size bytes inside the slot; no writer by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.at(seq), self.array.size) }
    }

    /// The length word of `seq`'s slot on a ring of sized events.
    #[inline(always)]
    fn len_word(&self, seq: u64) -> &'a AtomicU64 {
        // SAFETY: the slot of `seq` lies inside the event array (see `at`) and starts
        // 8-aligned (line-aligned array, slots a multiple of 8); its first word is the length
        // word, accessed atomically by every reader (a copier may race the producer).
        unsafe { &*(self.at(seq) as *const AtomicU64) }
    }

    /// A ring of sized events: write `bytes` (at most [`Events::max`]) and its length as the
    /// event of `seq`. The length word is stored with the payload, before the cursor that
    /// publishes both (Relaxed here; ordered by the producer's fences as the payload is).
    ///
    /// # Safety
    /// As for [`Events::write`]; `bytes` is at most the largest event (checked by every
    /// publish; a longer one is cut at the slot's end).
    #[inline(always)]
    pub(crate) unsafe fn write_sized(&self, seq: u64, bytes: &[u8]) {
        // Not `bytes.len() <= max`: a batch event whose `AsRef` answered a longer length the
        // second time comes here, to be cut.
        debug_assert!(self.array.sized);
        let slot = self.at(seq);
        // The caller's length, a constant where the caller's event is (`publish_value` of a
        // `u64`): the test and the other arm then go.
        if bytes.len() == 8 {
            // The length word and the event side by side, which the compiler may make one
            // 16-byte store (unaligned: a slot is 16-aligned only when its size is a
            // multiple of 16). Each word is native-endian, as the readers load them.
            // SAFETY: the slot holds the length word and at least 8 payload bytes (`max` is
            // 8 or more); exclusive by the caller's contract.
            unsafe {
                let v = std::ptr::read_unaligned(bytes.as_ptr() as *const u64);
                std::ptr::write_unaligned(slot as *mut [u64; 2], [8, v]);
            }
            return;
        }
        let n = bytes.len().min(self.array.size - SIZED_LEN);
        // Relaxed: published with the payload by the cursor's Release store.
        self.len_word(seq).store(n as u64, Ordering::Relaxed);
        // SAFETY: n bytes from the slot's payload, inside the slot; exclusive by the
        // caller's contract, so no byte of the caller's `bytes` lies in it.
        unsafe { copy_payload(&bytes[..n], slot.add(SIZED_LEN)) };
    }

    /// A ring of sized events: set the length of the claimed `seq`'s event (a claim guard's
    /// `set_len`, or 0 before its first write), at most [`Events::max`].
    ///
    /// Exclusive: the caller holds `seq`'s claim, past the wrap gate.
    #[inline]
    pub(crate) fn set_len(&self, seq: u64, len: usize) {
        debug_assert!(self.array.sized && len <= self.max());
        // Relaxed: published with the payload by the cursor's Release store.
        self.len_word(seq)
            .store(len.min(self.max()) as u64, Ordering::Relaxed);
    }

    /// The event of `seq` read in place, in either format: the whole slot, or on a ring of
    /// sized events the payload up to its length word (clamped to the largest event: a
    /// length past it is a corrupt word, and `clamped` says so).
    ///
    /// # Safety
    /// As for [`Events::payload`].
    #[inline(always)]
    pub(crate) unsafe fn event(&self, seq: u64) -> (&'a [u8], bool) {
        if !self.array.sized {
            // SAFETY: the caller's contract.
            return (unsafe { self.payload(seq) }, false);
        }
        // SAFETY: the caller's contract.
        unsafe { self.sized_event(seq, self.max()) }
    }

    /// [`Events::event`] on a ring of sized events whose largest event is `max`
    /// ([`Events::max`], read once by a caller that reads many events).
    ///
    /// # Safety
    /// As for [`Events::payload`]; the ring is one of sized events.
    #[inline(always)]
    pub(crate) unsafe fn sized_event(&self, seq: u64, max: usize) -> (&'a [u8], bool) {
        debug_assert!(self.array.sized && max == self.max());
        // Relaxed: ordered by the caller's Acquire cursor load, as the payload is.
        let len = self.len_word(seq).load(Ordering::Relaxed);
        if len > max as u64 {
            // SAFETY: the caller's contract.
            return (unsafe { self.clamped(seq, max) }, true);
        }
        // SAFETY: `len <= max` bytes of the slot's payload, inside the slot; no writer by
        // the caller's contract.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.at(seq).add(SIZED_LEN), len as usize) };
        (bytes, false)
    }

    /// A sized event whose length word is past the largest event (a corrupt word): its
    /// whole payload area.
    ///
    /// # Safety
    /// As for [`Events::sized_event`].
    #[cold]
    unsafe fn clamped(&self, seq: u64, max: usize) -> &'a [u8] {
        // SAFETY: `max` bytes of the slot's payload, inside the slot; no writer by the
        // caller's contract.
        unsafe { std::slice::from_raw_parts(self.at(seq).add(SIZED_LEN), max) }
    }

    /// The `count` events from `seq`, read in place as one slice (they must not run past
    /// the end of the slot array: `seq % capacity + count <= capacity`).
    ///
    /// # Safety
    /// As for [`Events::payload`], for every one of the events.
    #[inline]
    pub(crate) unsafe fn run(&self, seq: u64, count: usize) -> &'a [u8] {
        let a = &self.array;
        debug_assert!(!a.sized, "runs of a ring of sized events");
        let first = (seq & a.mask) as usize;
        let count = count.min((a.mask as usize + 1).saturating_sub(first));
        // SAFETY: `first + count` slots lie inside the slot array (clamped above); no
        // writer by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.at(seq), count * a.size) }
    }

    /// Ask the CPU to bring the lines of the published events `seq..seq + count` into this
    /// core's cache, all at once, and go on without waiting for them: a hint, which changes
    /// nothing but timing (and is nothing on a CPU the hint is not written for). Only the
    /// lines that lie wholly inside those events, and of a long run its first 16 KiB
    /// ([`whole_lines`]): a line that also holds an event at or past the cursor may be in the
    /// producer's cache being written, and taking it from there makes the producer wait for
    /// it back. (The CPU's adjacent-line prefetcher may still fetch such a line as the pair
    /// of the run's last whole one, as it may when that line is read.) For a consumer that
    /// holds the producer off the events, so that none of these lines is being rewritten
    /// for a later lap. On a ring of sized events the slots are asked for whole, an event's
    /// unused tail included.
    #[inline(always)]
    pub(crate) fn prefetch_run(&self, seq: u64, count: u64) {
        let a = &self.array;
        let total = (a.mask as usize + 1) * a.size;
        let first = (seq & a.mask) as usize * a.size;
        // `usize` is 64 bits (the crate builds for 64-bit targets only).
        for offset in whole_lines(first, (count as usize).saturating_mul(a.size), total) {
            // `wrapping_add`: an address only, never dereferenced (`offset` is below `total`,
            // inside the event array, anyway).
            prefetch_line(a.first.wrapping_add(offset));
        }
    }

    /// Copy the `count` events from `seq` (not past the end of the slot array) into `dst`
    /// with atomic word loads, for a reader that checks the copy with `fixed::copy_held`.
    pub(crate) fn copy_run_racy(&self, seq: u64, count: usize, dst: &mut Vec<u8>) {
        let a = &self.array;
        debug_assert!(!a.sized, "runs of a ring of sized events");
        let first = (seq & a.mask) as usize;
        let count = count.min((a.mask as usize + 1).saturating_sub(first));
        let p = self.at(seq);
        let words = count * a.size / 8;
        dst.clear();
        dst.reserve(words * 8);
        for i in 0..words {
            // SAFETY: the events are 8-aligned and `words` words from `p` stay inside the
            // slot array (clamped above). Atomic load: may race the producer.
            let w = unsafe { &*(p.add(i * 8) as *const AtomicU64) };
            dst.extend_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
    }

    /// Copy the event of `seq` into `dst` with atomic word loads, for a reader that does not
    /// hold the producer off the slot: the caller checks the copy with `fixed::copy_held`.
    /// A fixed-size ring's event (see [`Events::copy_event_racy`] for either format).
    pub(crate) fn copy_racy(&self, seq: u64, dst: &mut Vec<u8>) {
        debug_assert!(
            !self.array.sized,
            "a sized event copied as a fixed-size one"
        );
        // SAFETY: the slot of `seq` is `size` bytes inside the array (see `at`).
        unsafe { copy_words_racy(self.at(seq), self.array.size, dst) };
    }

    /// [`Events::copy_racy`] of a sized event: the payload up to the length word read first
    /// (clamped to the largest event, which the returned `true` reports). A length read
    /// from a later lap's write only changes how much is copied, inside the slot, and the
    /// caller's check refuses that copy.
    pub(crate) fn copy_sized_racy(&self, seq: u64, max: usize, dst: &mut Vec<u8>) -> bool {
        debug_assert!(self.array.sized && max == self.max());
        // Relaxed: a racy read, checked with the copy by the caller.
        let len = self.len_word(seq).load(Ordering::Relaxed);
        let n = (len as usize).min(max);
        // SAFETY: the payload follows the length word inside the slot, `max` bytes long.
        unsafe { copy_words_racy(self.at(seq).add(SIZED_LEN), n, dst) };
        len > max as u64
    }

    /// The event of `seq` copied in either format (for the readers off the hot path: a
    /// policy's look, `recall`); `true` if a sized event's length word was clamped.
    pub(crate) fn copy_event_racy(&self, seq: u64, dst: &mut Vec<u8>) -> bool {
        if self.array.sized {
            self.copy_sized_racy(seq, self.max(), dst)
        } else {
            self.copy_racy(seq, dst);
            false
        }
    }
}

/// Copy `n` bytes from `p` into `dst` with atomic 8-byte loads (the last one whole, then cut):
/// a copy that may race a writer, which the caller checks afterwards.
///
/// # Safety
/// `p` is 8-aligned and `n.next_multiple_of(8)` bytes from it lie inside the mapping.
unsafe fn copy_words_racy(p: *const u8, n: usize, dst: &mut Vec<u8>) {
    dst.clear();
    dst.reserve(n.next_multiple_of(8));
    for i in 0..n.div_ceil(8) {
        // SAFETY: word i is 8-aligned and inside the range, by the caller's contract. Atomic
        // load: may race the producer.
        let w = unsafe { &*(p.add(i * 8) as *const AtomicU64) };
        dst.extend_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    dst.truncate(n);
}

impl fixed::Words for Events<'_> {
    type W = AtomicU64;
    #[inline(always)]
    fn horizon(&self) -> &AtomicU64 {
        &self.line().value
    }
    #[inline(always)]
    fn pending(&self) -> &AtomicU64 {
        &self.lines().cursor.pending
    }
    #[inline(always)]
    fn cursor(&self) -> &AtomicU64 {
        &self.lines().cursor.cursor
    }
    #[inline(always)]
    fn tomb_end(&self) -> &AtomicU64 {
        &self.lines().cursor.tomb_end
    }
    #[inline(always)]
    fn lifecycle(&self) -> &AtomicU64 {
        &self.lines().lifecycle.value.lifecycle
    }
    #[inline(always)]
    fn stop_seq(&self) -> &AtomicU64 {
        &self.lines().lifecycle.value.stop_seq
    }
    #[inline(always)]
    fn tomb(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: `seq & mask` is below the capacity: a tomb word inside the mapping (see
        // `Segment::event_array`), 8-aligned, atomic.
        unsafe { &*self.array.tombs.add((seq & self.array.mask) as usize) }
    }
    #[inline(always)]
    fn capacity(&self) -> u64 {
        self.array.mask + 1
    }
    #[inline(always)]
    fn fence(&self, order: Ordering) {
        std::sync::atomic::fence(order)
    }
    #[inline(always)]
    fn reader_fence(&self) {
        // None: the reader's cursor and second lifecycle loads are SeqCst (see
        // `fixed::published`).
    }
}

/// The slot array of a segment (see [`Segment::slots`]).
#[derive(Clone, Copy)]
pub(crate) struct Slots<'a> {
    array: SlotArray,
    _seg: std::marker::PhantomData<&'a Segment>,
}

impl<'a> Slots<'a> {
    /// The slot that carries sequence `seq` (as [`Segment::slot`]).
    #[inline(always)]
    pub(crate) fn get(&self, seq: u64) -> Slot<'a> {
        let a = &self.array;
        #[cfg(debug_assertions)]
        debug_assert!((seq & a.mask) as usize * a.slot_size + a.slot_size <= a.end);
        // SAFETY: `seq & mask` is below the capacity, so the slot lies inside the slot
        // array of the mapping, which outlives 'a; slots are 64-aligned and start with an
        // all-atomic SlotHeader.
        unsafe {
            let p = a.first.add((seq & a.mask) as usize * a.slot_size);
            Slot {
                header: &*(p as *const SlotHeader),
                payload: p.add(SLOT_HEADER_SIZE),
                capacity: a.capacity,
            }
        }
    }
}

/// One slot: its header and a pointer to its payload bytes.
#[derive(Clone, Copy)]
pub(crate) struct Slot<'a> {
    pub(crate) header: &'a SlotHeader,
    payload: *mut u8,
    capacity: usize,
}

impl<'a> Slot<'a> {
    /// Ask the CPU to bring the slot's header line (its stamp) into this core's cache, and
    /// go on without waiting for it: a hint, which changes nothing but timing (and is
    /// nothing on a CPU the hint is not written for).
    #[inline(always)]
    pub(crate) fn prefetch(&self) {
        prefetch_line(self.header.stamp.as_ptr().cast());
    }

    /// Write `bytes` into the payload.
    ///
    /// # Safety
    /// The caller owns the slot's current claim (it claimed the sequence and passed the wrap
    /// gate), so no consumer reads these bytes and no other producer writes them.
    #[inline]
    pub(crate) unsafe fn write(&self, bytes: &[u8]) {
        debug_assert!(bytes.len() <= self.capacity);
        // A stamped ring's validated slot is at least `MIN_SLOT_SIZE` (64) bytes, 16 of them
        // its header: every payload holds 8 bytes (a fixed-size ring's slots are never
        // written through `Slot`). So an 8-byte event is decided by its length alone,
        // before the clamp: when the caller's length is a constant 8, the copy below is
        // not compiled in, and the caller's event can stay in a register (a `memcpy` taking
        // its address would keep it in memory, a stack store and load per publish).
        debug_assert!(self.capacity >= 8);
        if bytes.len() == 8 {
            // The common small event as one 8-byte move instead of a `memcpy` call. SAFETY:
            // 8 <= capacity bytes inside the slot (above; payloads are 16-byte aligned, reads
            // of `bytes` unaligned); exclusive by the caller's contract.
            unsafe {
                let v = std::ptr::read_unaligned(bytes.as_ptr() as *const u64);
                std::ptr::write_unaligned(self.payload as *mut u64, v);
            }
            return;
        }
        let n = bytes.len().min(self.capacity);
        // SAFETY: n <= capacity bytes inside the slot; exclusive by the caller's contract, so
        // no byte of the caller's `bytes` lies in it.
        unsafe { copy_payload(&bytes[..n], self.payload) };
    }

    /// The whole payload area, writable.
    ///
    /// # Safety
    /// As for [`Slot::write`], and the returned borrow ends before the claim is published.
    #[inline]
    pub(crate) unsafe fn payload_mut(&self) -> &'a mut [u8] {
        // SAFETY: capacity bytes inside the slot; exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.payload, self.capacity) }
    }

    /// The first `len` payload bytes (clamped to the slot).
    ///
    /// # Safety
    /// The caller has seen this slot's stamp equal its sequence (Acquire) and holds the
    /// producers off it (its committed sequence gates them) for as long as the borrow lives.
    #[inline]
    pub(crate) unsafe fn payload(&self, len: usize) -> &'a [u8] {
        // SAFETY: at most capacity bytes inside the slot; no writer by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.payload, len.min(self.capacity)) }
    }

    /// Copy the first `len` payload bytes into `dst` with atomic word loads, for a reader
    /// that does not hold the producers off this slot (an optional consumer): a producer may
    /// be overwriting it, so the caller re-checks the stamp afterwards and discards the copy
    /// if it moved (seqlock). Returns the number of bytes copied.
    pub(crate) fn copy_racy(&self, len: usize, dst: &mut Vec<u8>) -> usize {
        let n = len.min(self.capacity);
        dst.clear();
        let words = n.div_ceil(8);
        dst.reserve(words * 8);
        for i in 0..words {
            // SAFETY: payload is 16 bytes past a 64-aligned slot, so 8-aligned; word i ends at
            // or before capacity (capacity is a multiple of 16). Atomic load: may race a writer.
            let w = unsafe { &*(self.payload.add(i * 8) as *const AtomicU64) };
            dst.extend_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        dst.truncate(n);
        n
    }
}

/// Copy an event's bytes into its slot: up to [`INLINE_COPY`] bytes in line, as two
/// overlapping moves of the widest size that fits (2, 4, 8 or 16 bytes; one move for a
/// 1-byte event), longer ones through `copy_nonoverlapping`.
///
/// `copy_nonoverlapping` of a length known only at run time is a call to the C library's
/// `memcpy` (in a dynamically linked build, through the dynamic linker's table). On a paced
/// publish, the producer back from a sleep, that call cost a 16-byte event 47.5 ns at the
/// median in one series of in-run switches on the 2-vCPU KVM guest of
/// `benches/harness/results/2vcpu-kvm-paced-bare-ring-2026-12-03.md`, and 0 ns at the
/// median in three later series (ARCHITECTURE.md, "The publish's `memcpy` call"); over the
/// 120 rounds the call's half was the faster at p50 in 19, by at most 9 ns. The 32-byte
/// bound is not measured: it is where two 16-byte moves stop covering the event.
///
/// # Safety
/// `dst` is valid for `src.len()` bytes of writes and overlaps no byte of `src`.
#[inline(always)]
unsafe fn copy_payload(src: &[u8], dst: *mut u8) {
    use std::ptr::{read_unaligned as get, write_unaligned as put};
    let n = src.len();
    let s = src.as_ptr();
    // Every in-line arm of width `w` reads `[0, w)` and `[n - w, n)` of `src` and writes the
    // same ranges of `dst`, with `w <= n` in its arm; the two ranges overlap when `n < 2w`,
    // and then write the same bytes twice.
    // SAFETY: both ranges lie inside `src` and, by the caller's contract, inside `dst`,
    // which overlaps no byte of `src`; the moves are unaligned.
    unsafe {
        match n {
            0 => {}
            1 => *dst = *s,
            2..=3 => {
                let (a, b) = (get(s as *const u16), get(s.add(n - 2) as *const u16));
                put(dst as *mut u16, a);
                put(dst.add(n - 2) as *mut u16, b);
            }
            4..=7 => {
                let (a, b) = (get(s as *const u32), get(s.add(n - 4) as *const u32));
                put(dst as *mut u32, a);
                put(dst.add(n - 4) as *mut u32, b);
            }
            8..=15 => {
                let (a, b) = (get(s as *const u64), get(s.add(n - 8) as *const u64));
                put(dst as *mut u64, a);
                put(dst.add(n - 8) as *mut u64, b);
            }
            16..=INLINE_COPY => {
                let (a, b) = (get(s as *const u128), get(s.add(n - 16) as *const u128));
                put(dst as *mut u128, a);
                put(dst.add(n - 16) as *mut u128, b);
            }
            _ => std::ptr::copy_nonoverlapping(s, dst, n),
        }
    }
}

/// The longest event [`copy_payload`] copies in line.
const INLINE_COPY: usize = 32;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shmring_layout::SLOT_HEADER_SIZE;

    use super::{copy_payload, whole_lines, Attached, INLINE_COPY};
    use crate::{Ring, RingConfig};

    /// The lines a run's prefetch asks for are those wholly inside the run, on both sides
    /// of the array's end: never the line in which the run's last event ends when the run
    /// ends inside it (the producer may be writing the rest of that line), nor the one in
    /// which its first event starts when that is not at the line's start; none for a short
    /// run, and no more than 16 KiB of a long one.
    #[test]
    fn a_run_s_prefetch_asks_for_the_lines_wholly_inside_it() {
        let lines = |first, len, total| whole_lines(first, len, total).collect::<Vec<_>>();
        let from = |first: usize, n: usize| (0..n).map(|k| first + k * 64).collect::<Vec<_>>();
        // 128 8-byte events from 0: 16 whole lines; seven more: the same 16.
        assert_eq!(lines(0, 1024, 4096), from(0, 16));
        assert_eq!(lines(0, 1024 + 56, 4096), from(0, 16));
        // From the middle of a line to the middle of another: the whole ones between.
        assert_eq!(lines(8, 1088, 4096), from(64, 16));
        assert_eq!(lines(64, 1024 + 8, 4096), from(64, 16));
        // Wrapping at the array's end (64 lines): the end's lines, then the start's.
        let mut wrapped = vec![4032];
        wrapped.extend(from(0, 16));
        assert_eq!(lines(4096 - 72, 72 + 1032, 4096), wrapped);
        assert_eq!(lines(4032, 1024, 4096), wrapped[..16]);
        // The whole array from the middle of a line: every line but the one it starts and
        // ends in.
        let all = lines(40, 4096, 4096);
        assert_eq!(all, (1..64).map(|k| k * 64).collect::<Vec<_>>());
        // Longer than the array: no more than the array.
        assert_eq!(lines(0, 1 << 20, 4096).len(), 64);
        // A run of fewer than 1024 bytes: none; of more than 16 KiB: its first 256 lines.
        assert_eq!(lines(0, 1023, 4096), Vec::<usize>::new());
        assert_eq!(lines(0, 1024, 4096).len(), 16);
        assert_eq!(
            lines(1 << 20, 1 << 20, 4 << 20),
            (0..256).map(|k| (1 << 20) + k * 64).collect::<Vec<_>>()
        );
        assert_eq!(lines(4096 - 128, 1 << 20, 4096).len(), 64);
        // An array whose end is not at a line's end: its last part is no whole line.
        assert_eq!(lines(0, 1040, 1040).len(), 16);
        assert_eq!(lines(1024, 1040, 1040).len(), 16);
    }

    /// Every length up to well past the in-line sizes, at source and destination offsets
    /// 0-3: exactly the source's bytes land, and no byte before or after them changes.
    #[test]
    fn copy_payload_writes_exactly_the_event_s_bytes() {
        const SENTINEL: u8 = 0xA5;
        let src_buf: Vec<u8> = (0..80u8)
            .map(|b| b.wrapping_mul(37).wrapping_add(1))
            .collect();
        for n in 0..=2 * INLINE_COPY + 3 {
            for src_off in 0..4 {
                for dst_off in 0..4 {
                    let src = &src_buf[src_off..src_off + n];
                    let mut dst = vec![SENTINEL; dst_off + n + 8];
                    // SAFETY: `dst` holds `dst_off + n + 8` bytes, a buffer apart from `src`.
                    unsafe { copy_payload(src, dst.as_mut_ptr().add(dst_off)) };
                    assert_eq!(
                        &dst[dst_off..dst_off + n],
                        src,
                        "length {n}, offsets {src_off}/{dst_off}"
                    );
                    assert!(
                        dst[..dst_off]
                            .iter()
                            .chain(&dst[dst_off + n..])
                            .all(|&b| b == SENTINEL),
                        "length {n}, offsets {src_off}/{dst_off}: a byte outside the event changed"
                    );
                }
            }
        }
    }

    /// Through a ring: an event of every length from 0 to past the in-line sizes comes out
    /// of a stamped ring and of a ring of sized events as it went in, and events of 16-64
    /// bytes out of fixed-size rings of that size (a fixed size is a multiple of 8).
    #[test]
    fn every_short_length_arrives_as_published() {
        let ns = shmring_testkit::Namespace::concurrent("segment-copy-lengths");
        let bytes: Vec<u8> = (0..=255u8).rev().collect();
        let stamped = Ring::create(
            ns.name(),
            "stamped",
            &RingConfig {
                capacity: 8,
                slot_size: 128,
                ..RingConfig::default()
            },
        )
        .expect("create the stamped ring");
        let mut c = stamped
            .consumer(crate::ConsumerOptions::anonymous())
            .expect("consumer");
        let mut p = stamped.producer().expect("producer");
        for n in 0..=2 * INLINE_COPY + 3 {
            p.publish(&bytes[n..2 * n]).expect("publish");
            let mut got = Vec::new();
            c.poll_once(|ev| got.push(ev.bytes().to_vec()))
                .expect("poll");
            assert_eq!(got, vec![bytes[n..2 * n].to_vec()], "stamped, length {n}");
        }
        for size in [16usize, 24, 32, 40, 64] {
            let ring = Ring::create(
                ns.name(),
                &format!("fixed{size}"),
                &RingConfig {
                    capacity: 8,
                    producer_mode: crate::ProducerMode::Single,
                    event_size: Some(size as u32),
                    ..RingConfig::default()
                },
            )
            .expect("create the fixed-size ring");
            let mut c = ring
                .consumer(crate::ConsumerOptions::anonymous())
                .expect("consumer");
            let mut p = ring.producer().expect("producer");
            for k in 0..10 {
                let ev = &bytes[k..k + size];
                p.publish(ev).expect("publish");
                let mut got = Vec::new();
                c.poll_once(|e| got.push(e.bytes().to_vec())).expect("poll");
                assert_eq!(got, vec![ev.to_vec()], "fixed size {size}, event {k}");
            }
        }
        // A ring of sized events: every length up to its largest event (past the in-line
        // sizes), each in place and copied, over laps whose lengths differ slot by slot.
        let max = 2 * INLINE_COPY + 8;
        let sized = Ring::create(
            ns.name(),
            "sized",
            &RingConfig {
                capacity: 8,
                producer_mode: crate::ProducerMode::Single,
                max_event_size: Some(max as u32),
                ..RingConfig::default()
            },
        )
        .expect("create the ring of sized events");
        let mut c = sized
            .consumer(crate::ConsumerOptions::anonymous())
            .expect("consumer");
        let mut copier = sized
            .consumer(crate::ConsumerOptions::anonymous().optional())
            .expect("optional consumer");
        let mut p = sized.producer().expect("producer");
        // The rounded slot's whole payload (128 bytes less the length word).
        let max = p.max_payload();
        assert_eq!(max, 120);
        for n in (0..=max).chain((0..=max).rev()) {
            let ev = &bytes[n..2 * n];
            p.publish(ev).expect("publish");
            for (c, how) in [(&mut c, "in place"), (&mut copier, "copied")] {
                let mut got = Vec::new();
                c.poll_once(|e| got.push(e.bytes().to_vec())).expect("poll");
                assert_eq!(got, vec![ev.to_vec()], "sized, length {n}, {how}");
            }
        }
    }

    /// What `Attached` resolved at attach is what the segment's own accessors find: each
    /// sequence's slot and its payload capacity, and the entry of the index it was made for;
    /// an index past either table makes none.
    #[test]
    fn attached_resolves_what_the_segment_finds() {
        let ns = shmring_testkit::Namespace::concurrent("segment-attached");
        let config = RingConfig {
            capacity: 8,
            slot_size: 128,
            max_producers: 3,
            max_consumers: 4,
            ..RingConfig::default()
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create ring r");
        let seg = &ring.seg;
        let addr = |p: &shmring_layout::SlotHeader| p as *const _ as usize;
        for i in 0..3 {
            let a = Attached::producer(Arc::clone(seg), i).expect("producer entry in the table");
            let want = seg.producer(i).expect("producer entry") as *const _;
            assert_eq!(a.entry() as *const _, want, "producer entry {i}");
            assert_eq!(a.index(), i);
            assert!(
                std::ptr::eq(a.header(), seg.header()),
                "header of producer {i}"
            );
            assert!(
                std::ptr::eq(a.lines(), seg.lines()),
                "lines of producer {i}"
            );
            for seq in (0..3 * config.capacity).chain([u64::MAX - 1, u64::MAX]) {
                let (got, want) = (a.slot(seq), seg.slot(seq));
                assert_eq!(addr(got.header), addr(want.header), "slot of {seq}");
                assert_eq!(got.capacity, want.capacity, "capacity of {seq}");
            }
        }
        for i in 0..4 {
            let a = Attached::consumer(Arc::clone(seg), i).expect("consumer entry in the table");
            let want = seg.consumer(i).expect("consumer entry") as *const _;
            assert_eq!(a.entry() as *const _, want, "consumer entry {i}");
            assert_eq!(a.index(), i);
            assert_eq!(addr(a.slot(5).header), addr(seg.slot(5).header));
        }
        assert!(Attached::producer(Arc::clone(seg), 3).is_none());
        assert!(Attached::consumer(Arc::clone(seg), 4).is_none());
    }

    /// `Segment::position` on a single-producer ring of stamped slots: the look-back over the
    /// last claim steps back over slots still to be stamped (an older lap's stamp, or the
    /// sequence being written), at most `max_claim` of them, and stops at a slot that holds
    /// its sequence, a tombstone, or a later lap. A later lap is no claim still to be
    /// stamped: a look-back that stepped over it would start an attach below a position a
    /// gate scan may already have used (`client/tests/loom_attach.rs`).
    #[test]
    fn position_steps_back_over_unstamped_slots_only() {
        use shmring_layout::{ProducerMode, STAMP_TOMBSTONE, STAMP_WRITING};
        use std::sync::atomic::Ordering;

        let ns = shmring_testkit::Namespace::concurrent("segment-position");
        let config = RingConfig {
            capacity: 8,
            slot_size: 64,
            producer_mode: ProducerMode::Single,
            ..RingConfig::default()
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create ring r");
        {
            let mut p = ring.producer().expect("attach a producer");
            for i in 0..10u64 {
                p.publish(&i.to_le_bytes()).expect("publish");
            }
        }
        let seg = &*ring.seg;
        let claim = &seg.lines().claim.value;
        // SeqCst stores throughout: this thread plays the producer and reads what it wrote;
        // no other thread or process has the ring.
        let stamp =
            |seq: u64, value: u64| seg.slot(seq).header.stamp.store(value, Ordering::SeqCst);
        assert_eq!(seg.position(), 10, "every claim stamped");
        // A claim of 10 and 11 stored, neither slot stamped yet: they hold the last lap's 2, 3.
        claim.store(12, Ordering::SeqCst);
        assert_eq!(seg.position(), 10, "the last lap's stamps");
        stamp(10, 10 | STAMP_WRITING);
        assert_eq!(seg.position(), 10, "10 being written");
        stamp(10, 10);
        assert_eq!(seg.position(), 11, "10 stamped, 11 not");
        stamp(11, 11 | STAMP_TOMBSTONE);
        assert_eq!(seg.position(), 12, "11 a tombstone");
        // 11's slot holds a later lap (19): the producer moved past the claim since.
        stamp(10, 2);
        stamp(11, 19);
        assert_eq!(seg.position(), 12, "a later lap in 11's slot");
        stamp(11, 19 | STAMP_WRITING);
        assert_eq!(seg.position(), 12, "a later lap being written in 11's slot");
        // Nothing stamped past 9 and a claim word five past it: at most `max_claim` (4) back.
        stamp(11, 3);
        claim.store(15, Ordering::SeqCst);
        assert_eq!(
            seg.position(),
            11,
            "the look-back is bounded by the largest claim"
        );
    }

    /// `Slots::get` (and `Segment::slot`, which calls it) finds each sequence's slot where
    /// the layout puts it (`Geometry::slot_offset`), with the layout's payload capacity,
    /// across laps and near the end of the sequence space.
    #[test]
    fn slots_get_is_the_layouts_slot() {
        let ns = shmring_testkit::Namespace::concurrent("segment-slots");
        let config = RingConfig {
            capacity: 16,
            slot_size: 192,
            ..RingConfig::default()
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create ring r");
        let seg = &*ring.seg;
        let slots = seg.slots();
        let seqs = (0..3 * config.capacity).chain(u64::MAX - 2 * config.capacity..=u64::MAX);
        let base = seg.header() as *const _ as usize;
        let geo = seg.geometry();
        for seq in seqs {
            let a = slots.get(seq);
            let header = a.header as *const _ as usize;
            assert_eq!(
                header - base,
                geo.slot_offset(seq) as usize,
                "header of {seq}"
            );
            assert_eq!(
                a.payload as usize,
                header + SLOT_HEADER_SIZE,
                "payload of {seq}"
            );
            assert_eq!(a.capacity, geo.max_payload(), "capacity of {seq}");
        }
    }
}
