//! The throughput floor: a bare cross-process single-producer single-consumer ring of
//! 8-byte events, with nothing shmring adds (no stamps, no gating table, no lifecycle, no
//! wake check). Two indices on their own 128-byte lines, each side caching the other's and
//! reloading it only when it runs out (the cached-index ring of rtrb and the LMAX single-
//! producer sequencer); the consumer publishes its index once per run it reads, as a
//! shmring consumer commits once per batch. The throughput rows divide by it, measured in
//! the same run with the same duration, sizes and pinning.
//!
//! ```text
//! offset 0     head  (next index the producer writes; Release after the slot)
//! offset 128   tail  (next index the consumer reads; Release after the reads)
//! offset 256   end   (total the producer published, written once at the end; 0 before)
//! offset 384   slots: CAPACITY x u64
//! ```

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use memmap2::MmapMut;
use shmring_peers::kit::{self, Args, Measured};

use crate::shm::kv;

/// Slots in the floor ring (as the throughput rows' rings).
pub const CAPACITY: usize = 4096;
const SLOTS_OFFSET: usize = 384;
/// Size of the floor ring's file.
pub const FILE_SIZE: usize = SLOTS_OFFSET + CAPACITY * 8;

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
        self.word(SLOTS_OFFSET + (i as usize & (CAPACITY - 1)) * 8)
    }
}

/// Create the floor ring's file for a row.
pub fn create(path: &Path) -> Result<()> {
    let f = std::fs::File::create(path)?;
    f.set_len(FILE_SIZE as u64)?;
    Ok(())
}

/// Arguments naming the floor ring's file.
pub fn args(path: &Path) -> Vec<String> {
    vec![kv("data", path.display())]
}

/// The producer side: publish 8-byte events back to back for `duration_ns`.
pub fn producer(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let ring = Spsc::open(Path::new(args.str("data")?))?;
    ctl.wait_ready(1, Duration::from_secs(20))?;
    let (c0, t_start) = (kit::thread_cpu_ns(), kit::now_ns());
    let end = t_start + args.num::<u64>("duration_ns")?;
    let (mut next, mut cached_tail) = (0u64, 0u64);
    'outer: loop {
        for _ in 0..256 {
            while next - cached_tail >= CAPACITY as u64 {
                // Acquire: pairs with the consumer's Release of its index; its reads of
                // the slots below happen before this producer overwrites them.
                cached_tail = ring.tail().load(Ordering::Acquire);
                if next - cached_tail >= CAPACITY as u64 {
                    std::hint::spin_loop();
                }
            }
            // Relaxed: published by the Release store of the head below.
            ring.slot(next).store(next, Ordering::Relaxed);
            next += 1;
            // Release: pairs with the consumer's Acquire load of the head.
            ring.head().store(next, Ordering::Release);
        }
        if kit::now_ns() >= end {
            break 'outer;
        }
    }
    let t_end = kit::now_ns();
    // Release: the consumer stops once it has read this many.
    ring.end().store(next, Ordering::Release);
    let mut m = Measured::default();
    m.set("cpu_share", crate::roles::cpu_share(c0, t_start))
        .set("published", next as f64)
        .set("t_start", t_start as f64)
        .set("t_end", t_end as f64);
    kit::report(args, &m)
}

/// The consumer side: busy-spin, read every event, count.
pub fn consumer(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let ring = Spsc::open(Path::new(args.str("data")?))?;
    let mut meter = kit::RateMeter::new();
    let (c0, w0) = (kit::thread_cpu_ns(), kit::now_ns());
    ctl.arrive();
    let (mut next, mut sum) = (0u64, 0u64);
    loop {
        // Acquire: pairs with the producer's Release of the head; the slots below it are
        // written.
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
        while next < head {
            sum = sum.wrapping_add(ring.slot(next).load(Ordering::Relaxed));
            next += 1;
            meter.tick(next);
        }
        // Release: pairs with the producer's Acquire load of the tail.
        ring.tail().store(next, Ordering::Release);
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
