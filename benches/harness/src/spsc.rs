//! The throughput floor: a bare cross-process single-producer single-consumer ring of
//! 8-byte events, with nothing shmring adds (no stamps, no gating table, no lifecycle, no
//! wake check). Two indices on their own 128-byte lines, each side caching the other's and
//! reloading it only when it runs out (the cached-index ring of rtrb and the LMAX single-
//! producer sequencer); the consumer publishes its index once per run it reads, as a
//! shmring consumer commits once per batch. The throughput rows divide by it, measured in
//! the same run with the same duration, sizes and pinning. With `batch=N` its producer
//! writes `N` slots and then stores the head once ([`BareSender::send_batches`]), waiting
//! for room for all `N`: the floor of a batch row, as `Producer::publish_batch` publishes a
//! batch with one store of its cursor.
//!
//! ```text
//! offset 0     head  (next index the producer writes; Release after the slot)
//! offset 128   tail  (next index the consumer reads; Release after the reads)
//! offset 256   end   (total the producer published, written once at the end; 0 before)
//! offset 384   slots: CAPACITY x u64
//! ```
//!
//! The same ring also runs shmring's event protocol without the rest of shmring (the slot
//! format probes, [`Format`]): the head is the claim (stored before the slot, as a single
//! producer claims), every event has a header (stamp, then length and flags) written as a
//! shmring slot is (WRITING stamp, Release fence, payload, length and flags, Release stamp),
//! and the consumer reads the head as a hint and then each event's stamp (Acquire), as a
//! caught-up shmring consumer does. In `Slot64` each event owns a 64-byte slot (header and
//! payload in one line, shmring's format); in `Dense` the 16-byte headers sit in an array
//! of their own (four to a line) and the 8-byte payloads in another (eight to a line). A
//! third, `Cursor`, has no stamps at all: the producer writes the payload and an 8-byte
//! length and flags word (each in a packed array), then publishes the head (Release), and
//! the consumer reads up to the head, as the LMAX single-producer sequencer publishes its
//! cursor; `Sized` is the same with each length beside its payload in a 16-byte slot, as in
//! a shmring ring of sized events of up to 8 bytes. A fourth, `Fixed`, is the floor's
//! format (payload-only 8-byte slots, the head as a published cursor) with the per-event
//! work a single producer of a fixed-size-event shmring ring would keep around it: its
//! claim stored beside the head on the head's line (where the ring kept its claim and
//! cursor until layout 12, which gave the cursor a line of its own; the probe keeps the
//! earlier placement, so its figures compare with those measured before) before the
//! payload, the lifecycle word loaded after the claim, a Release fence, the payload, the
//! head, and the parked-consumer check (a load of a waiter count); its consumer makes the
//! parked-producer check at every commit. No per-event counter. The rows
//! show what the slot format alone costs, and what other ones would give.
//!
//! ```text
//! Slot64: offset 384   slots: CAPACITY x 64 bytes [stamp u64 | len+flags u64 | payload..]
//! Dense:  offset 384   headers: CAPACITY x 16 bytes [stamp u64 | len+flags u64]
//!         then         payloads: CAPACITY x u64
//! Cursor: offset 384   len+flags: CAPACITY x u64, then payloads as in Dense
//! Sized:  offset 384   slots: CAPACITY x 16 bytes [len u64 | payload u64]
//! Fixed:  offset 8     claim (on the head's line)
//!         offset 384   payloads as in Bare; after the largest format's slots, two
//!         128-byte lines: the lifecycle word, the waiter count (both stay 0)
//! ```
//!
//! In turn with shmring's fixed-size ring (`turn`), [`BareSender::send_claimed`] runs the
//! floor with the per-event shared-memory accesses of that ring's single producer, as a
//! `Publisher` makes them (position in a register): the fence-mode look, the lifecycle
//! look, the claim stored on a line of its own, the lifecycle look again, the payload, the
//! head (the ring's cursor, on its own line as in layout 12) and the waiter count's look;
//! each word on a line nobody writes, four lines after the largest format's slots (the
//! lifecycle word and the waiter count shared with `Fixed`, then the claim and the fence
//! mode, both used only there). Layout 12 keeps the fence mode on the header's first line,
//! beside words the broker writes at each sweep. `Producer::publish` makes one more access,
//! a load of its own claim word (its position) before them. What the probe adds to the
//! floor is what the claim protocol costs the producer in memory accesses, with none of
//! shmring's code around them; its reader is the floor's, without the per-commit accesses
//! of a shmring consumer.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{compiler_fence, fence, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use memmap2::MmapMut;
use shmring_peers::kit::{self, Args, Measured};

use crate::shm::kv;

/// Slots in the floor ring (as the throughput rows' rings).
pub const CAPACITY: usize = 4096;
const SLOTS_OFFSET: usize = 384;
/// Where `Dense` keeps its payloads, after the headers.
const DENSE_PAYLOADS: usize = SLOTS_OFFSET + CAPACITY * 16;
/// Where `Fixed` keeps its lifecycle word and its waiter count (a 128-byte line each),
/// after the largest format's slots.
const FIXED_LINES: usize = SLOTS_OFFSET + CAPACITY * 64;
/// Where [`BareSender::send_claimed`] stores its claim: a line of its own, after `Fixed`'s.
const CLAIM_LINE: usize = FIXED_LINES + 2 * 128;
/// Where [`BareSender::send_claimed`] looks at its fence mode (stays 0): a line of its own.
const MODE_LINE: usize = FIXED_LINES + 3 * 128;
/// Size of the ring's file: room for the largest format (`Slot64`), `Fixed`'s lines and
/// the claim's two.
pub const FILE_SIZE: usize = FIXED_LINES + 4 * 128;
// The claim and the fence mode each on a 128-byte line of its own inside the file.
const _: () = assert!(CLAIM_LINE.is_multiple_of(128) && MODE_LINE.is_multiple_of(128));
const _: () = assert!(MODE_LINE >= CLAIM_LINE + 128 && MODE_LINE + 128 <= FILE_SIZE);
/// The stamp bit of a slot being written (as shmring's `STAMP_WRITING`).
const WRITING: u64 = 1 << 63;

/// What the ring carries per event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    /// 8-byte slots and the head: the floor.
    Bare,
    /// shmring's protocol, a 64-byte slot per event.
    Slot64,
    /// shmring's protocol, 16-byte headers apart from packed 8-byte payloads.
    Dense,
    /// No stamps: packed lengths and payloads, published by the head.
    Cursor,
    /// No stamps: 16-byte slots of a length word and an 8-byte payload, published by the
    /// head (the floor of a shmring ring of sized events of up to 8 bytes, whose slots are
    /// those).
    Sized,
    /// The floor's slots and head, with a single producer's claim, lifecycle look and wake
    /// check around each event.
    Fixed,
}

impl Format {
    /// The argument value naming the format.
    pub fn arg(self) -> &'static str {
        match self {
            Format::Bare => "bare",
            Format::Slot64 => "slot64",
            Format::Dense => "dense",
            Format::Cursor => "cursor",
            Format::Sized => "sized",
            Format::Fixed => "fixed",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "bare" => Format::Bare,
            "slot64" => Format::Slot64,
            "dense" => Format::Dense,
            "cursor" => Format::Cursor,
            "sized" => Format::Sized,
            "fixed" => Format::Fixed,
            other => {
                anyhow::bail!(
                    "unknown ring format {other:?} (bare, slot64, dense, cursor, sized, fixed)"
                )
            }
        })
    }

    /// Offsets of the event `i`'s stamp, its length and flags, and its payload.
    fn offsets(self, i: u64) -> (usize, usize, usize) {
        let k = i as usize & (CAPACITY - 1);
        match self {
            Format::Bare | Format::Fixed => (0, 0, SLOTS_OFFSET + k * 8),
            Format::Slot64 => {
                let at = SLOTS_OFFSET + k * 64;
                (at, at + 8, at + 16)
            }
            Format::Dense => {
                let at = SLOTS_OFFSET + k * 16;
                (at, at + 8, DENSE_PAYLOADS + k * 8)
            }
            // No stamp: its offset is never used.
            Format::Cursor => (0, SLOTS_OFFSET + k * 8, DENSE_PAYLOADS + k * 8),
            // No stamp either; the length word first in the slot, as shmring's sized slot.
            Format::Sized => (0, SLOTS_OFFSET + k * 16, SLOTS_OFFSET + k * 16 + 8),
        }
    }
}

/// The mapped floor ring.
struct Spsc {
    map: MmapMut,
}

impl Spsc {
    fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: the file is this run's own (in the harness's private directory), sized
        // FILE_SIZE by the parent before either side starts, and never truncated meanwhile.
        let map = unsafe { MmapMut::map_mut(&file)? };
        anyhow::ensure!(map.len() >= FILE_SIZE, "floor ring file too small");
        Ok(Spsc { map })
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= FILE_SIZE && offset.is_multiple_of(8));
        // SAFETY: offset is 8-aligned and inside the mapping (checked at open); the
        // mapping is page-aligned and lives as long as `self`; every access is atomic.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    fn head(&self) -> &AtomicU64 {
        self.word(0)
    }
    fn tail(&self) -> &AtomicU64 {
        self.word(128)
    }
    fn end(&self) -> &AtomicU64 {
        self.word(256)
    }
    fn slot(&self, i: u64) -> &AtomicU64 {
        self.word(Format::Bare.offsets(i).2)
    }

    /// Wait until the ring has room for the `n` events from `next` (`n` at most
    /// [`CAPACITY`]), reloading the consumer's index into `cached_tail` only while the cached
    /// one says there is none (the cached-index ring's producer). Written as unread events
    /// against the room left for `n`, so that with `n` = 1 the per-event loops compile to
    /// one compare, as before this was shared.
    #[inline(always)]
    fn wait_for_room(&self, next: u64, n: u64, cached_tail: &mut u64) {
        let most = CAPACITY as u64 - n;
        while next - *cached_tail > most {
            // Acquire: pairs with the consumer's Release of its index; its reads of the
            // slots below happen before this producer overwrites them.
            *cached_tail = self.tail().load(Ordering::Acquire);
            if next - *cached_tail > most {
                std::hint::spin_loop();
            }
        }
    }

    /// Publish event `i` (the next) in the `Fixed` format. Returns whether the lifecycle
    /// word said open (the probe never closes it: the look is there for its cost).
    #[inline(always)]
    fn publish_fixed(&self, i: u64) -> bool {
        // Relaxed: the single producer's claim, read by a stopper after its barrier.
        self.word(8).store(i + 1, Ordering::Relaxed);
        // A single shmring producer's fence here is compiler-only (membarrier mode).
        compiler_fence(Ordering::SeqCst);
        // Relaxed: the lifecycle word, ordered by the stopper's barrier.
        let open = self.word(FIXED_LINES).load(Ordering::Relaxed) == 0;
        // Release fence: a copying reader that sees the payload sees the claim.
        fence(Ordering::Release);
        // Relaxed: published by the Release store of the head below.
        self.slot(i).store(i, Ordering::Relaxed);
        // Release: pairs with the consumer's Acquire load of the head.
        self.head().store(i + 1, Ordering::Release);
        // Relaxed: the parked-consumer check's load of the waiter count (never set here).
        if self.word(FIXED_LINES + 128).load(Ordering::Relaxed) != 0 {
            std::hint::spin_loop();
        }
        open
    }

    /// Publish event `i` (the next) with the per-event accesses of a single producer of a
    /// fixed-size shmring ring through a `Publisher`, in its order and with its orderings
    /// (see the module comment): none of them changes what the consumer reads. Returns
    /// whether both looks at the lifecycle word said open and the fence mode light (the
    /// probe never changes either: the looks are there for their cost).
    #[inline(always)]
    fn publish_claimed(&self, i: u64) -> bool {
        // Relaxed: the fence mode, as the producer's check of its common case.
        let light = self.word(MODE_LINE).load(Ordering::Relaxed) == 0;
        // Acquire: the lifecycle look before the claim ((p1) of the claim protocol).
        let life = self.word(FIXED_LINES).load(Ordering::Acquire);
        // Relaxed: the claim, on its own line ((p2)).
        self.word(CLAIM_LINE).store(i + 1, Ordering::Relaxed);
        // The asymmetric fence's producer half is compiler-only ((p3)).
        compiler_fence(Ordering::SeqCst);
        // Relaxed: the lifecycle look after the claim ((p4)).
        let open = light && life == 0 && self.word(FIXED_LINES).load(Ordering::Relaxed) == life;
        // Release fence: a copying reader that sees the payload sees the claim.
        fence(Ordering::Release);
        // Relaxed: published by the Release store of the head below.
        self.slot(i).store(i, Ordering::Relaxed);
        // Release: pairs with the consumer's Acquire load of the head.
        self.head().store(i + 1, Ordering::Release);
        // The wake check's fence, compiler-only in the membarrier mode.
        compiler_fence(Ordering::SeqCst);
        // Relaxed: the parked-consumer check's load of the waiter count (never set here).
        if self.word(FIXED_LINES + 128).load(Ordering::Relaxed) != 0 {
            std::hint::spin_loop();
        }
        open
    }

    /// Claim and publish event `i` as a single shmring producer does (the claim, the
    /// WRITING stamp, the payload, length and flags, the stamp).
    #[inline(always)]
    fn publish_stamped(&self, format: Format, i: u64) {
        let (stamp, len, payload) = format.offsets(i);
        // Relaxed: the claim is a hint to the consumer; the stamp publishes the event.
        self.head().store(i + 1, Ordering::Relaxed);
        self.word(stamp).store(i | WRITING, Ordering::Relaxed);
        // Release fence: as shmring's `begin_write` (a copying reader that sees the payload
        // also sees the WRITING stamp).
        fence(Ordering::Release);
        // Relaxed: published by the Release stamp store below.
        self.word(payload).store(i, Ordering::Relaxed);
        self.word(len).store(8, Ordering::Relaxed);
        // Release: pairs with the consumer's Acquire load of the stamp in `read_stamped`.
        self.word(stamp).store(i, Ordering::Release);
    }

    /// Event `i`'s payload combined with its length word (`Cursor`, `Sized`: both read, as
    /// a consumer of sized events reads them), once the head says it is published.
    #[inline(always)]
    fn read_length_and_payload(&self, format: Format, i: u64) -> u64 {
        let (_, len, payload) = format.offsets(i);
        // Relaxed, both: ordered after the consumer's Acquire load of the head.
        let n = self.word(len).load(Ordering::Relaxed);
        self.word(payload).load(Ordering::Relaxed) ^ n
    }

    /// Event `i`'s payload, once its stamp says it is published.
    #[inline(always)]
    fn read_stamped(&self, format: Format, i: u64) -> Option<u64> {
        let (stamp, _, payload) = format.offsets(i);
        // Acquire: pairs with the Release stamp store in `publish_stamped`.
        if self.word(stamp).load(Ordering::Acquire) != i {
            return None;
        }
        // Relaxed: ordered after the Acquire stamp load above.
        Some(self.word(payload).load(Ordering::Relaxed))
    }
}

/// The floor ring's producer side a chunk at a time, for a measurement that runs it in
/// turn with a shmring ring in the same pinned processes (`turn`): the same per-event work
/// as [`producer`]'s `Bare` loop, a clock read after every 256 events included.
pub struct BareSender {
    ring: Spsc,
    next: u64,
    cached_tail: u64,
}

impl BareSender {
    /// Map the ring's file (made by [`create`]).
    pub fn open(path: &Path) -> Result<Self> {
        Ok(BareSender {
            ring: Spsc::open(path)?,
            next: 0,
            cached_tail: 0,
        })
    }

    /// Publish the next `n` events (`n` a multiple of 256: the `turn` producer checks its
    /// chunk), waiting for room as the floor's producer does.
    #[inline(never)]
    pub fn send(&mut self, n: u64) {
        self.send_with(n, |ring, i| {
            // Relaxed: published by the Release store of the head below.
            ring.slot(i).store(i, Ordering::Relaxed);
            // Release: pairs with the consumer's Acquire load of the head.
            ring.head().store(i + 1, Ordering::Release);
            true
        });
    }

    /// As [`BareSender::send`], each event published with the per-event accesses of a
    /// single producer of a fixed-size shmring ring (see the module comment). Returns
    /// whether every look said open (the lifecycle word unchanged at 0 and the fence mode
    /// light: always, on a file nothing writes them in).
    #[inline(never)]
    pub fn send_claimed(&mut self, n: u64) -> bool {
        self.send_with(n, Spsc::publish_claimed)
    }

    /// Publish `batches` batches of `batch` events each (`batch` at most [`CAPACITY`]),
    /// each batch once the ring has room for all of it: its slots, then the head once (the
    /// floor of a producer that publishes a batch with one store of its cursor, as
    /// `Producer::publish_batch` does). Returns the events sent. The producer of a batched
    /// floor row ([`producer`] with `batch`) calls this between its clock reads.
    #[inline(never)]
    pub fn send_batches(&mut self, batches: u64, batch: u64) -> u64 {
        debug_assert!((1..=CAPACITY as u64).contains(&batch));
        let (ring, mut next, mut cached_tail) = (&self.ring, self.next, self.cached_tail);
        for _ in 0..batches {
            ring.wait_for_room(next, batch, &mut cached_tail);
            for i in next..next + batch {
                // Relaxed: published by the Release store of the head below.
                ring.slot(i).store(i, Ordering::Relaxed);
            }
            next += batch;
            // Release: pairs with the consumer's Acquire load of the head.
            ring.head().store(next, Ordering::Release);
        }
        let sent = next - self.next;
        (self.next, self.cached_tail) = (next, cached_tail);
        sent
    }

    /// The next `n` events (a multiple of 256), each published with `publish` once there
    /// is room, as the floor's producer waits for it (and reads the clock every 256
    /// events). Returns whether every `publish` said true.
    #[inline(always)]
    fn send_with(&mut self, n: u64, publish: impl Fn(&Spsc, u64) -> bool) -> bool {
        debug_assert!(n.is_multiple_of(256));
        let (ring, mut next, mut cached_tail) = (&self.ring, self.next, self.cached_tail);
        let mut all = true;
        for _ in 0..n / 256 {
            for _ in 0..256 {
                ring.wait_for_room(next, 1, &mut cached_tail);
                all &= publish(ring, next);
                next += 1;
            }
            // The floor's producer reads the clock here to see whether its run is over.
            std::hint::black_box(kit::now_ns());
        }
        (self.next, self.cached_tail) = (next, cached_tail);
        all
    }
}

/// The floor ring's consumer side a chunk at a time (see [`BareSender`]): the same
/// per-event work as [`consumer`]'s `Bare` loop without its rate meter (the `turn` producer
/// times the chunks; the ring's side of `turn` has no meter either).
pub struct BareReceiver {
    ring: Spsc,
    next: u64,
    sum: u64,
}

impl BareReceiver {
    /// Map the ring's file (made by [`create`]).
    pub fn open(path: &Path) -> Result<Self> {
        Ok(BareReceiver {
            ring: Spsc::open(path)?,
            next: 0,
            sum: 0,
        })
    }

    /// Events read so far.
    pub fn received(&self) -> u64 {
        self.next
    }

    /// Read the next `n` events, busy-spinning while none is there. Returns false, with
    /// fewer read, if `gave_up` says so: asked once every [`RECV_LOOKS`] empty looks, so
    /// that a consumer whose producer failed before sending the whole chunk ends instead of
    /// spinning until the harness's timeout, without a call per event.
    #[inline(never)]
    pub fn recv(&mut self, n: u64, gave_up: impl Fn() -> bool) -> bool {
        self.recv_pausing(n, 0, gave_up)
    }

    /// As [`BareReceiver::recv`], with `pause` spin-loop hints after each run read (as
    /// `shmring::ConsumerOptions::gather` pauses after each `poll_runs` that handed over
    /// events): the floor of a consumer that reads that way.
    #[inline(never)]
    pub fn recv_gathering(&mut self, n: u64, pause: u32, gave_up: impl Fn() -> bool) -> bool {
        self.recv_pausing(n, pause, gave_up)
    }

    #[inline(always)]
    fn recv_pausing(&mut self, n: u64, pause: u32, gave_up: impl Fn() -> bool) -> bool {
        let (ring, mut next, mut sum) = (&self.ring, self.next, self.sum);
        let to = next + n;
        let mut empty = 0u32;
        let mut done = true;
        while next < to {
            // Acquire: pairs with the producer's Release of the head; the slots below it
            // are written.
            let head = ring.head().load(Ordering::Acquire).min(to);
            if head == next {
                empty = empty.wrapping_add(1);
                if empty.is_multiple_of(RECV_LOOKS) && gave_up() {
                    done = false;
                    break;
                }
                std::hint::spin_loop();
                continue;
            }
            while next < head {
                sum = sum.wrapping_add(ring.slot(next).load(Ordering::Relaxed));
                next += 1;
            }
            // Release: pairs with the producer's Acquire load of the tail.
            ring.tail().store(next, Ordering::Release);
            for _ in 0..pause {
                std::hint::spin_loop();
            }
        }
        (self.next, self.sum) = (next, std::hint::black_box(sum));
        done
    }
}

/// Empty looks of [`BareReceiver::recv`] between two askings whether to give up (each a
/// pause hint: well under a second of spinning on any current x86_64 CPU).
pub const RECV_LOOKS: u32 = 1 << 16;

/// Create the floor ring's file for a row.
pub fn create(path: &Path) -> Result<()> {
    let f = std::fs::File::create(path)?;
    f.set_len(FILE_SIZE as u64)?;
    Ok(())
}

/// Arguments naming the ring's file and its format.
pub fn args(path: &Path, format: Format) -> Vec<String> {
    vec![kv("data", path.display()), kv("format", format.arg())]
}

/// The producer side: publish 8-byte events back to back for `duration_ns`.
pub fn producer(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let ring = Spsc::open(Path::new(args.str("data")?))?;
    let format = Format::parse(args.str_or("format", "bare"))?;
    let batch = batch_arg(args, format)?;
    let mut batched = (batch > 1)
        .then(|| BareSender::open(Path::new(args.str("data")?)))
        .transpose()?;
    ctl.wait_ready(1, Duration::from_secs(20))?;
    let (c0, t_start) = (kit::thread_cpu_ns(), kit::now_ns());
    let end = t_start + args.num::<u64>("duration_ns")?;
    let (mut next, mut cached_tail, mut closed) = (0u64, 0u64, 0u64);
    'outer: loop {
        if let Some(tx) = batched.as_mut() {
            // The batched floor: the clock read every 256 / batch batches (at least one),
            // as the producer of shmring's batch rows reads it.
            next += tx.send_batches((256 / batch).max(1), batch);
            if kit::now_ns() >= end {
                break 'outer;
            }
            continue;
        }
        for _ in 0..256 {
            ring.wait_for_room(next, 1, &mut cached_tail);
            if format == Format::Fixed {
                // Not open: the probe counts nothing (the word is never written).
                closed += u64::from(!ring.publish_fixed(next));
                next += 1;
            } else if format == Format::Bare {
                // Relaxed: published by the Release store of the head below.
                ring.slot(next).store(next, Ordering::Relaxed);
                next += 1;
                // Release: pairs with the consumer's Acquire load of the head.
                ring.head().store(next, Ordering::Release);
            } else if format == Format::Cursor || format == Format::Sized {
                let (_, len, payload) = format.offsets(next);
                // Relaxed, both: published by the Release store of the head below. The
                // length first, as a shmring ring of sized events writes an 8-byte event
                // (two 8-byte stores, length then event, in the build measured).
                ring.word(len).store(8, Ordering::Relaxed);
                ring.word(payload).store(next, Ordering::Relaxed);
                next += 1;
                // Release: pairs with the consumer's Acquire load of the head.
                ring.head().store(next, Ordering::Release);
            } else {
                ring.publish_stamped(format, next);
                next += 1;
            }
        }
        if kit::now_ns() >= end {
            break 'outer;
        }
    }
    let t_end = kit::now_ns();
    anyhow::ensure!(closed == 0, "the probe's lifecycle word changed");
    // Release: the consumer stops once it has read this many.
    ring.end().store(next, Ordering::Release);
    let mut m = Measured::default();
    m.set("cpu_share", crate::roles::cpu_share(c0, t_start))
        .set("published", next as f64)
        .set("t_start", t_start as f64)
        .set("t_end", t_end as f64);
    kit::report(args, &m)
}

/// The producer's `batch=N` (1 when absent): events per store of the head. Only the bare
/// ring publishes in batches, of 2 to half the ring; a value that is not a number, or out of
/// that range, is an error (never read as 1: the row would measure the per-event floor under
/// the batched floor's name).
fn batch_arg(args: &Args, format: Format) -> Result<u64> {
    if args.str("batch").is_err() {
        return Ok(1);
    }
    let batch: u64 = args.num("batch")?;
    anyhow::ensure!(
        batch == 1 || (format == Format::Bare && (2..=CAPACITY as u64 / 2).contains(&batch)),
        "batch={batch}: only the bare ring publishes in batches, of 2 to {} events",
        CAPACITY / 2
    );
    Ok(batch)
}

/// The events `next..head` of a run of `format` (`run` is `(next, head, sum)`), read and
/// added to `sum`, the meter ticked once after them; a stamped format's up to the first
/// whose stamp says it is not written yet. Returns the next event to read and the sum.
fn read_events(
    ring: &Spsc,
    format: Format,
    run: (u64, u64, u64),
    meter: &mut kit::RateMeter,
) -> (u64, u64) {
    match format {
        Format::Bare | Format::Fixed => read_run(ring, run, meter, |r, i| {
            // Relaxed: ordered after the consumer's Acquire load of the head.
            Some(r.slot(i).load(Ordering::Relaxed))
        }),
        Format::Cursor => read_run(ring, run, meter, |r, i| {
            Some(r.read_length_and_payload(Format::Cursor, i))
        }),
        Format::Sized => read_run(ring, run, meter, |r, i| {
            Some(r.read_length_and_payload(Format::Sized, i))
        }),
        Format::Slot64 => read_run(ring, run, meter, |r, i| r.read_stamped(Format::Slot64, i)),
        Format::Dense => read_run(ring, run, meter, |r, i| r.read_stamped(Format::Dense, i)),
    }
}

/// The events `next..head` of a run (`run` is `(next, head, sum)`), each read by `read`
/// and added to `sum` (up to the first `read` gives none of), then the meter ticked once,
/// as shmring's readers tick theirs once per batch. Returns the next event to read and the
/// sum. A function of its own for each format, so that the index and the sum stay in
/// registers: inside [`consumer`]'s loop, among the meter's and the other formats' locals,
/// the compiler kept the sum on the stack, and each event's addition waited on the previous
/// one's store (a chain the floor's reader in turn, [`BareReceiver::recv`], never had;
/// PERFORMANCE.md, "The floor's own reader").
#[inline(never)]
fn read_run(
    ring: &Spsc,
    run: (u64, u64, u64),
    meter: &mut kit::RateMeter,
    read: impl Fn(&Spsc, u64) -> Option<u64>,
) -> (u64, u64) {
    let (mut next, head, mut sum) = run;
    while next < head {
        let Some(v) = read(ring, next) else {
            break;
        };
        sum = sum.wrapping_add(v);
        next += 1;
    }
    meter.tick(next);
    (next, sum)
}

/// The consumer side: busy-spin, read every event, count; with `gather=N`, pause `N`
/// spin-loop hints after each run read (as [`BareReceiver::recv_gathering`] does in turn).
pub fn consumer(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let ring = Spsc::open(Path::new(args.str("data")?))?;
    let format = Format::parse(args.str_or("format", "bare"))?;
    let gather: u32 = args.num_or("gather", 0);
    let mut meter = kit::RateMeter::new();
    let (c0, w0) = (kit::thread_cpu_ns(), kit::now_ns());
    ctl.arrive();
    let (mut next, mut sum) = (0u64, 0u64);
    loop {
        // Acquire: pairs with the producer's Release of the head; the slots below it are
        // written (`Bare`, `Fixed`, `Cursor`, `Sized`; for the stamped formats a hint, the
        // stamps decide).
        let head = ring.head().load(Ordering::Acquire);
        if head == next {
            // Acquire: pairs with the producer's Release of the total.
            let end = ring.end().load(Ordering::Acquire);
            if end != 0 && next >= end {
                break;
            }
            std::hint::spin_loop();
            continue;
        }
        let from = next;
        (next, sum) = read_events(&ring, format, (next, head, sum), &mut meter);
        if next == from {
            // A stamped event not yet written (its stamp decides, not the head).
            std::hint::spin_loop();
            continue;
        }
        // Release: pairs with the producer's Acquire load of the tail.
        ring.tail().store(next, Ordering::Release);
        // Relaxed: the commit's parked-producer check, as a shmring consumer makes it (the
        // probe's producer never parks: the word stays 0).
        if format == Format::Fixed && ring.word(FIXED_LINES + 128).load(Ordering::Relaxed) != 0 {
            std::hint::spin_loop();
        }
        for _ in 0..gather {
            std::hint::spin_loop();
        }
    }
    let t_end = kit::now_ns();
    std::hint::black_box(sum);
    let mut m = Measured::default();
    if let Some(r) = meter.best(args.num_or("best_window_ns", 100_000_000)) {
        m.set("best_ops_per_sec", r);
    }
    m.set("cpu_share", crate::roles::cpu_share(c0, w0))
        .set("delivered", next as f64)
        .set("t_end", t_end as f64);
    kit::report(args, &m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shmring_testkit::namespace::Namespace;

    /// A floor ring's file in a namespace of its own (removed with it), mapped, with a
    /// sender and a receiver on it.
    fn floor_ring(name: &str) -> (Namespace, Spsc, BareSender, BareReceiver) {
        let ns = Namespace::new(name);
        let path = ns.scratch().join("floor");
        create(&path).expect("floor ring file");
        let ring = Spsc::open(&path).expect("map");
        let tx = BareSender::open(&path).expect("sender");
        let rx = BareReceiver::open(&path).expect("receiver");
        (ns, ring, tx, rx)
    }

    #[test]
    fn a_receiver_gives_up_on_an_empty_ring_when_asked_to_and_reads_what_was_sent() {
        // The namespace's scratch directory holds the floor ring's file and goes with it.
        let ns = Namespace::new("harness_spsc_recv");
        let path = ns.scratch().join("floor");
        create(&path).expect("floor ring file");
        let mut rx = BareReceiver::open(&path).expect("receiver");
        let asked = std::cell::Cell::new(0u32);
        // Nothing sent: the receiver asks after RECV_LOOKS empty looks, goes on spinning
        // when told not to give up, asks again after as many more, and gives up when told
        // to, without events.
        assert!(!rx.recv(256, || {
            asked.set(asked.get() + 1);
            asked.get() == 2
        }));
        assert_eq!((rx.received(), asked.get()), (0, 2));
        // A chunk sent: read whole, without asking (the ring never runs empty before it ends).
        let mut tx = BareSender::open(&path).expect("sender");
        tx.send(256);
        assert!(rx.recv(256, || panic!("asked to give up with events waiting")));
        assert_eq!(rx.received(), 256);
        // Half a chunk short: the receiver reads what is there, then gives up.
        tx.send(256);
        assert!(!rx.recv(512, || true));
        assert_eq!(rx.received(), 512);
    }

    #[test]
    fn the_claimed_sender_publishes_as_the_floor_does_and_keeps_its_claim_on_its_own_line() {
        let (_ns, ring, mut tx, mut rx) = floor_ring("harness_spsc_claimed");
        // The floor's events, then the claimed sender's after them on the same ring: each
        // event's index in its slot, the head after it, the claim at the head.
        tx.send(256);
        assert!(tx.send_claimed(512));
        assert!(rx.recv_gathering(768, 4, || panic!("asked to give up with events waiting")));
        assert_eq!(rx.received(), 768);
        assert_eq!(rx.sum, (0..768).sum::<u64>());
        assert_eq!(ring.head().load(Ordering::Relaxed), 768);
        assert_eq!(ring.word(CLAIM_LINE).load(Ordering::Relaxed), 768);
        // The looks are loads of the words: a lifecycle word or a fence mode other than 0
        // reads as not open (the events still go out: the probe never refuses).
        ring.word(FIXED_LINES).store(1, Ordering::Relaxed);
        assert!(!tx.send_claimed(256));
        ring.word(FIXED_LINES).store(0, Ordering::Relaxed);
        ring.word(MODE_LINE).store(1, Ordering::Relaxed);
        assert!(!tx.send_claimed(256));
        assert!(rx.recv(512, || panic!("asked to give up with events waiting")));
        assert_eq!(ring.word(CLAIM_LINE).load(Ordering::Relaxed), 1280);
    }

    #[test]
    fn the_floor_reader_reads_a_run_of_each_format_up_to_its_head_or_an_unwritten_stamp() {
        let ns = Namespace::new("harness_spsc_read_events");
        let path = ns.scratch().join("floor");
        for format in [
            Format::Bare,
            Format::Fixed,
            Format::Cursor,
            Format::Sized,
            Format::Slot64,
            Format::Dense,
        ] {
            create(&path).expect("floor ring file");
            let ring = Spsc::open(&path).expect("map");
            let stamped = matches!(format, Format::Slot64 | Format::Dense);
            // Events 0..12 written as each format's producer writes them (a stamped
            // format's 10 and 11 not: their stamps stay as they were).
            for i in 0..12u64 {
                let (_, len, payload) = format.offsets(i);
                match format {
                    Format::Bare | Format::Fixed => ring.slot(i).store(i, Ordering::Relaxed),
                    Format::Cursor | Format::Sized => {
                        ring.word(len).store(8, Ordering::Relaxed);
                        ring.word(payload).store(i, Ordering::Relaxed);
                    }
                    _ if i < 10 => ring.publish_stamped(format, i),
                    _ => {}
                }
            }
            let value = |i: u64| match format {
                Format::Cursor | Format::Sized => i ^ 8,
                _ => i,
            };
            let mut meter = kit::RateMeter::new();
            // From 3 to the head at 8, onto a sum carried in: every event of the run, once.
            let expect: u64 = 100 + (3..8).map(value).sum::<u64>();
            assert_eq!(
                read_events(&ring, format, (3, 8, 100), &mut meter),
                (8, expect),
                "{format:?}"
            );
            // The meter ticked once, after the run: its first checkpoint at the run's end.
            assert_eq!(meter.points.len(), 1, "{format:?}");
            assert_eq!(meter.points[0].1, 8, "{format:?}");
            // Up to a head at 12: a stamped format stops at the first unwritten stamp.
            let (next, sum) = read_events(&ring, format, (8, 12, 0), &mut meter);
            let end = if stamped { 10 } else { 12 };
            assert_eq!((next, sum), (end, (8..end).map(value).sum()), "{format:?}");
            // An empty run reads nothing.
            assert_eq!(
                read_events(&ring, format, (5, 5, 7), &mut meter),
                (5, 7),
                "{format:?}"
            );
        }
    }

    #[test]
    fn a_batch_argument_is_a_number_in_range_for_the_bare_ring_or_an_error() {
        let args = |words: &[&str]| {
            Args::parse(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>())
                .expect("arguments")
        };
        assert_eq!(batch_arg(&args(&[]), Format::Sized).ok(), Some(1));
        assert_eq!(batch_arg(&args(&["batch=1"]), Format::Fixed).ok(), Some(1));
        assert_eq!(
            batch_arg(&args(&["batch=100"]), Format::Bare).ok(),
            Some(100)
        );
        let half = CAPACITY / 2;
        assert_eq!(
            batch_arg(&args(&[&format!("batch={half}")]), Format::Bare).ok(),
            Some(half as u64)
        );
        for (words, format) in [
            (vec!["batch=x".to_owned()], Format::Bare),
            (vec!["batch=0".to_owned()], Format::Bare),
            (vec![format!("batch={}", half + 1)], Format::Bare),
            (vec!["batch=100".to_owned()], Format::Sized),
        ] {
            let a = Args::parse(&words).expect("arguments");
            assert!(batch_arg(&a, format).is_err(), "{words:?} {format:?}");
        }
    }

    #[test]
    fn the_sized_format_holds_each_length_beside_its_payload_four_slots_to_a_line() {
        for i in 0..CAPACITY as u64 * 2 {
            let (_, len, payload) = Format::Sized.offsets(i);
            let k = (i as usize) % CAPACITY;
            // The length word first, then the payload, in the slot's 16 bytes.
            assert_eq!(
                (len, payload),
                (SLOTS_OFFSET + 16 * k, SLOTS_OFFSET + 16 * k + 8)
            );
            // Inside the file, before the lines the other formats keep after the slots.
            assert!(payload + 8 <= FIXED_LINES);
        }
        // Four events to a 64-byte line: the slots of events 0-3 on one line, 4 on the next.
        let line = |i| Format::Sized.offsets(i).1 / 64;
        assert_eq!([line(0), line(3), line(4)], [line(0), line(0), line(0) + 1]);
        assert_eq!(
            Format::parse(Format::Sized.arg()).expect("parse"),
            Format::Sized
        );
    }

    #[test]
    fn the_batched_sender_publishes_whole_batches_and_waits_for_room_for_a_whole_one() {
        let (_ns, ring, mut tx, mut rx) = floor_ring("harness_spsc_batched");
        // Three batches of 100: each event's index in its slot, the head after the last.
        assert_eq!(tx.send_batches(3, 100), 300);
        assert_eq!(ring.head().load(Ordering::Relaxed), 300);
        assert!(rx.recv(300, || panic!("asked to give up with events waiting")));
        assert_eq!(rx.sum, (0..300).sum::<u64>());
        // Room for exactly one batch: sent at once (the ring may fill to its last slot).
        let fill = CAPACITY as u64 - 100;
        assert_eq!(tx.send_batches(fill / 4, 4), fill);
        // On a thread of its own, waited for with a bound: a sender that took a full ring's
        // last batch for no room would fail the test, not hang it.
        let (sent, done) = std::sync::mpsc::channel();
        let sender = std::thread::spawn(move || {
            let n = tx.send_batches(1, 100);
            let _ = sent.send(n);
            tx
        });
        let n = done.recv_timeout(Duration::from_secs(30));
        assert_eq!(n, Ok(100), "the sender waited with room for its batch");
        let mut tx = sender.join().expect("sender thread");
        assert!(rx.recv(CAPACITY as u64, || panic!(
            "asked to give up with events waiting"
        )));
        assert_eq!(rx.sum, (0..300 + CAPACITY as u64).sum::<u64>());
        // A ring with room for less than a batch: the sender waits (it would overwrite an
        // unread slot otherwise) and publishes nothing until the reader frees a whole
        // batch's room. Here the reader is this thread, so the sender runs on another and
        // is seen not to move the head while the room is short.
        let fill = CAPACITY as u64 - 50;
        assert_eq!(tx.send_batches(fill / 2, 2), fill);
        let head = ring.head().load(Ordering::Relaxed);
        assert_eq!(head, 300 + CAPACITY as u64 + fill);
        let (sent, done) = std::sync::mpsc::channel();
        let sender = std::thread::spawn(move || {
            let n = tx.send_batches(1, 100);
            let _ = sent.send(n);
        });
        // The ring holds CAPACITY - 50 unread events: room for 50, not for 100.
        for _ in 0..1000 {
            std::thread::yield_now();
            assert_eq!(
                ring.head().load(Ordering::Relaxed),
                head,
                "published past the room"
            );
        }
        assert!(rx.recv(fill, || panic!("asked to give up with events waiting")));
        // Bounded: a sender that never saw the room would fail the test, not hang it.
        let n = done.recv_timeout(Duration::from_secs(30));
        assert_eq!(
            n,
            Ok(100),
            "the sender did not publish once the room was there"
        );
        sender.join().expect("sender thread");
        assert!(rx.recv(100, || panic!("asked to give up with events waiting")));
        assert_eq!(
            rx.sum,
            (0..(300 + CAPACITY as u64 + fill + 100)).sum::<u64>()
        );
    }
}
