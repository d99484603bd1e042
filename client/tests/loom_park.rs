//! A loom model of the park/wake protocol (`client/src/park.rs`), on heap atomics.
//!
//! loom cannot run `membarrier`; what the asymmetric fence guarantees is exactly what a
//! `SeqCst` fence on both sides guarantees (a full barrier between each side's store and
//! its load), so the model uses that (loom models `SeqCst` fences faithfully). The futex is
//! modelled as the kernel does it: wait compares the word under the bucket lock and sleeps
//! atomically; wake takes the lock and wakes every sleeper. There is no timed net in the
//! model, so a lost wake-up is a deadlock, which loom reports.
//!
//! The second test removes the fences and requires loom to find that lost wake-up: the
//! model is only worth something if it can fail.

use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

struct Futex {
    word: AtomicU32,
    bucket: Mutex<()>,
    sleepers: Condvar,
}

impl Futex {
    fn wait(&self, expected: u32) {
        let guard = self.bucket.lock().unwrap();
        if self.word.load(Ordering::Relaxed) == expected {
            drop(self.sleepers.wait(guard).unwrap());
        }
    }

    fn wake(&self) {
        let _guard = self.bucket.lock().unwrap();
        self.sleepers.notify_all();
    }
}

struct Line {
    stamp: AtomicU64,
    waiters: AtomicU32,
    futex: Futex,
}

/// One publish (waker) against one consumer that parks until it sees it (parker).
fn publish_against_parker(fenced: bool) {
    loom::model(move || {
        let line = Arc::new(Line {
            stamp: AtomicU64::new(0),
            waiters: AtomicU32::new(0),
            futex: Futex {
                word: AtomicU32::new(0),
                bucket: Mutex::new(()),
                sleepers: Condvar::new(),
            },
        });
        let producer = {
            let line = line.clone();
            thread::spawn(move || {
                // (1) publish
                line.stamp.store(1, Ordering::Release);
                // (2) the publisher's half of the fence pair
                if fenced {
                    fence(Ordering::SeqCst);
                }
                // (3)-(5) wake only if someone parks
                if line.waiters.load(Ordering::Relaxed) != 0 {
                    line.futex.word.fetch_add(1, Ordering::Release);
                    line.futex.wake();
                }
            })
        };
        // The consumer: poll, and park while nothing is published.
        loop {
            if line.stamp.load(Ordering::Acquire) == 1 {
                break;
            }
            // (a)-(d)
            let seen = line.futex.word.load(Ordering::Acquire);
            line.waiters.fetch_add(1, Ordering::Relaxed);
            if fenced {
                fence(Ordering::SeqCst);
            }
            if line.stamp.load(Ordering::Acquire) == 1 {
                line.waiters.fetch_sub(1, Ordering::Relaxed);
                break;
            }
            // (e)
            line.futex.wait(seen);
            line.waiters.fetch_sub(1, Ordering::Relaxed);
        }
        producer.join().unwrap();
    });
}

#[test]
fn park_wake_with_the_fence_pair_never_loses_a_wakeup() {
    publish_against_parker(true);
}

#[test]
#[should_panic(expected = "deadlock")]
fn park_wake_without_the_fences_loses_a_wakeup() {
    publish_against_parker(false);
}
