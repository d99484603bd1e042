//! A consumer on a thread of its own that parks whenever it has taken everything: for the
//! tests that check that each publish wakes it, with none of its wake-ups from the timed net.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use shmring::{Consumer, ConsumerStats, Ring, RunExit};

use crate::poll::{eventually, first_u64};

/// What a [`ParkedConsumer`] saw: how its run ended, each event as (sequence, the
/// little-endian `u64` in its first 8 bytes), and its counters.
pub type Seen = (RunExit, Vec<(u64, u64)>, ConsumerStats);

/// A consumer (`WaitStrategy::Blocking`) running `Consumer::run` on a thread.
pub struct ParkedConsumer {
    index: u32,
    progress: Arc<AtomicU64>,
    thread: JoinHandle<Seen>,
}

impl ParkedConsumer {
    /// Run `c` until its ring is stopped and drained.
    pub fn spawn(mut c: Consumer) -> Self {
        let index = c.index();
        let progress = Arc::new(AtomicU64::new(0));
        let shared = progress.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let exit = c
                .run(
                    |ev| {
                        seen.push((ev.sequence(), first_u64(ev.bytes())));
                        // SeqCst: read by `wait_parked_at` (SeqCst), a test's progress flag.
                        shared.store(ev.sequence() + 1, Ordering::SeqCst);
                    },
                    || false,
                )
                .expect("the consumer's run");
            (exit, seen, c.stats())
        });
        ParkedConsumer {
            index,
            progress,
            thread,
        }
    }

    /// Wait until it has taken every event below `i`, and no more, and is parked on `ring`.
    pub fn wait_parked_at(&self, ring: &Ring, i: u64) {
        eventually("the consumer to take everything and park", || {
            // SeqCst: pairs with the consumer thread's store after each event.
            self.progress.load(Ordering::SeqCst) == i
                && ring
                    .info()
                    .consumers
                    .iter()
                    .any(|e| e.index == self.index && e.parked)
        });
    }

    /// Stop `ring` and return what the consumer saw once its run has ended.
    pub fn finish(self, ring: &Ring) -> Seen {
        ring.stop().expect("stop the ring");
        self.thread.join().expect("the consumer thread")
    }
}
