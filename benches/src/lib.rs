//! Helpers shared by the in-process benchmarks: a ring in a namespace of its own that is
//! removed on drop, and a consumer thread that drains a ring until told to stop.
//!
//! Every bench here runs in one process over one segment. On the 2-vCPU machine these
//! numbers come from, one producer thread plus one busy consumer thread is the limit: no
//! bench starts more spinning threads than that.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use shmring::{Consumer, ConsumerOptions, ProducerMode, Ring, RingConfig};

/// A ring in the namespace `bench-<pid>`; the ring and the namespace directory are removed
/// on drop (the directory only if nothing else is left in it).
pub struct BenchRing {
    /// The ring.
    pub ring: Ring,
    namespace: String,
    name: String,
}

impl BenchRing {
    /// Create ring `name` with `capacity` 64-byte slots (48 bytes of payload).
    pub fn new(name: &str, capacity: u64, mode: ProducerMode) -> Self {
        let namespace = format!("bench-{}", std::process::id());
        let config = RingConfig {
            capacity,
            slot_size: 64,
            max_consumers: 4,
            max_producers: 4,
            producer_mode: mode,
            ..RingConfig::default()
        };
        // A bench that cannot set up its ring has nothing to measure: fail loudly.
        let ring = Ring::create(&namespace, name, &config)
            .unwrap_or_else(|e| panic!("cannot create bench ring {name:?}: {e}"));
        Self {
            ring,
            namespace,
            name: name.to_owned(),
        }
    }
}

impl Drop for BenchRing {
    fn drop(&mut self) {
        let _ = Ring::remove(&self.namespace, &self.name);
        if let Ok(dir) = shmring::names::namespace_dir(&self.namespace) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A thread that busy-polls one consumer until dropped, counting the events it saw.
pub struct Drainer {
    stop: Arc<AtomicBool>,
    seen: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Drainer {
    /// Attach an anonymous required consumer now (so it sees everything published after
    /// this returns) and drain it on a new thread.
    pub fn start(ring: &Ring) -> Self {
        let consumer = ring
            .consumer(ConsumerOptions::anonymous())
            .unwrap_or_else(|e| panic!("cannot attach the draining consumer: {e}"));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || drain_until(consumer, &stop, &seen))
        };
        Self {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// Events delivered so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }
}

fn drain_until(mut consumer: Consumer, stop: &AtomicBool, seen: &AtomicU64) {
    let mut sum = 0u64;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll_once(|ev| sum = sum.wrapping_add(ev.read::<u64>().unwrap_or(1))) {
            Ok(0) => std::hint::spin_loop(),
            Ok(k) => {
                n += k as u64;
                seen.store(n, Ordering::Relaxed);
            }
            Err(e) => panic!("draining consumer failed: {e}"),
        }
    }
    std::hint::black_box(sum);
}

impl Drop for Drainer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Drain exactly `events` events on the calling thread with a busy-polling consumer;
/// returns the instant the last one was handed to the handler.
pub fn drain_exactly(consumer: &mut Consumer, events: u64) -> Instant {
    let mut sum = 0u64;
    let mut n = 0u64;
    while n < events {
        match consumer.poll_once(|ev| sum = sum.wrapping_add(ev.read::<u64>().unwrap_or(1))) {
            Ok(0) => std::hint::spin_loop(),
            Ok(k) => n += k as u64,
            Err(e) => panic!("consumer failed: {e}"),
        }
    }
    let end = Instant::now();
    std::hint::black_box(sum);
    end
}
