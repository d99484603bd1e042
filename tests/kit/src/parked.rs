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

/// A producer parked for room behind a consumer that then dies between its commit and its
/// wake: for the tests of who wakes such a producer (the broker's sweep, a resume).
/// Consumer entry 0 is laid down as this process's (a required durable consumer named
/// `name`, at sequence 0, its start time written before its word, so it reads as alive);
/// a producer thread fills the ring behind it and parks for room on one more event.
pub struct ParkedProducer {
    thread: JoinHandle<shmring::ProducerStats>,
}

impl ParkedProducer {
    /// Lay down the consumer and park the producer behind it; returns once the producer
    /// counts as a waiter on the producer wake line.
    pub fn behind_a_live_consumer(ring: &Ring, raw: &crate::raw::RawSegment, name: &str) -> Self {
        Self::lay_down_live_consumer(raw, name);
        Self::park_behind(ring, raw)
    }

    /// Park a producer thread for room behind whatever gates `ring` at sequence 0: it
    /// fills the ring and waits on one more event. Returns once the producer counts as a
    /// waiter on the producer wake line.
    pub fn park_behind(ring: &Ring, raw: &crate::raw::RawSegment) -> Self {
        // `capacity` fill the ring behind the consumer at 0; one more waits for room.
        Self::publish_parked(ring, raw, ring.capacity() + 1)
    }

    /// Park a producer thread for room on one event, on a ring already full behind whatever
    /// gates it. Returns once the producer counts as a waiter on the producer wake line.
    pub fn park_on_full(ring: &Ring, raw: &crate::raw::RawSegment) -> Self {
        Self::publish_parked(ring, raw, 1)
    }

    /// A producer thread publishing `n` events, the last of which waits for room.
    fn publish_parked(ring: &Ring, raw: &crate::raw::RawSegment, n: u64) -> Self {
        let ring = ring.clone();
        let thread = std::thread::spawn(move || {
            let mut p = ring.producer().expect("producer");
            for v in 0..n {
                p.publish(&v.to_le_bytes()).expect("publish");
            }
            p.stats()
        });
        eventually("the producer parks for room", || {
            raw.waiters(crate::raw::Line::Producer) >= 1
        });
        ParkedProducer { thread }
    }

    /// Lay down consumer entry 0 as this process's: a required durable consumer named
    /// `name`, ACTIVE at sequence 0, its start time written before its word, so that it
    /// reads as alive (and a consumer `after` it can name it).
    pub fn lay_down_live_consumer(raw: &crate::raw::RawSegment, name: &str) {
        use shmring_layout::{consumer_flags, consumer_state, owned_word};
        let me = shmring::process::current();
        // The start time first: an ACTIVE word without it would read as a dead owner's.
        raw.set_consumer_start_time(0, me.start_time);
        raw.fabricate_consumer(
            0,
            owned_word::pack(1, consumer_state::ACTIVE, me.pid),
            consumer_flags::REQUIRED | consumer_flags::DURABLE,
            name,
            0,
        );
    }

    /// The consumer commits one event (room for the producer) and dies: its word names
    /// `dead`, a process that no longer runs. Nothing is woken.
    pub fn commit_one_and_die(raw: &crate::raw::RawSegment, dead: u32) {
        Self::commit_and_die(raw, 0, 1, dead);
    }

    /// Consumer entry `index` commits up to `next` and dies: its word keeps its generation
    /// and state and names `dead`, a process that no longer runs. Nothing is woken.
    pub fn commit_and_die(raw: &crate::raw::RawSegment, index: u32, next: u64, dead: u32) {
        use shmring_layout::owned_word;
        raw.set_consumer_next(index, next);
        let w = raw.consumer_word(index);
        raw.set_consumer_word(
            index,
            owned_word::pack(owned_word::generation(w), owned_word::state(w), dead),
        );
    }

    /// The producer's counters once its last publish is through.
    pub fn join(self) -> shmring::ProducerStats {
        self.thread.join().expect("the producer thread")
    }
}

/// Whether a producer's one wait for room parked and was ended by a wake in time: not at
/// the net (`net_wakeups`), not late (`late_wakeups`), and not found ready before it slept
/// (no park counted: a commit that landed between its count of itself as a waiter and its
/// last look).
pub fn woken(stats: &shmring::ProducerStats) -> bool {
    stats.parks >= 1 && (stats.net_wakeups, stats.late_wakeups) == (0, 0)
}

/// The tries of a wake test: `attempt` on each of `rings` in turn until `ok` says one
/// succeeded. A wake that comes later than a park's 50 ms net (a loaded machine) leaves
/// that try to the net, so one success is enough; when none succeeds, panics with `what`
/// and every try's outcome.
pub fn in_one_try<T: std::fmt::Debug>(
    rings: &[&str],
    what: &str,
    mut attempt: impl FnMut(&str) -> T,
    ok: impl Fn(&T) -> bool,
) {
    let mut tries = Vec::new();
    for r in rings {
        let t = attempt(r);
        let done = ok(&t);
        tries.push(t);
        if done {
            return;
        }
    }
    panic!("{what}: {tries:?}");
}
