//! Loom models of the park/wake protocol (`client/src/park.rs`): the shipping `Wake` code
//! (park, raise, lower, notify, wake, reset), run on loom's atomics through the `Word` and
//! `Futex` traits it is written against.
//!
//! loom cannot run `membarrier`; what the asymmetric fence guarantees is exactly what a
//! `SeqCst` fence on both sides guarantees (a full barrier between each side's store and
//! its load), so the models pass `SeqCst` fences as the heavy and light fences (loom models
//! `SeqCst` fences faithfully). The futex is modelled as the kernel does it: wait compares
//! the word under the bucket lock and sleeps atomically; wake takes the lock and wakes
//! every sleeper. There is no timed net in the models, so a lost wake-up is a deadlock,
//! which loom reports.
//!
//! What they check:
//!
//! - a parker is woken by the publish that makes it ready, with the fences; without them
//!   loom must find the lost wake-up (the model is only worth something if it can fail);
//! - a raise nobody takes back (a parker killed asleep) costs the next waker one wake and
//!   then nothing, and never makes a live parker miss its wake-up, whatever the resets of
//!   concurrent wakers drop;
//! - a reset that is not followed by the reset's waker moving the word and waking (a
//!   recount stored by a third party, as a broker could do it) loses a wake-up: loom must
//!   find it;
//! - mixed fence modes: a waker of the asymmetric mode (a compiler fence only) against a
//!   parker whose process fell back to the `SeqCst` fence must read the ring's fence mode
//!   and pay the full fence; a waker that trusts its own mode loses the wake-up, and so
//!   does a parker whose raise of the mode is not yet seen by the waker (a known gap).
//!
//! Preemption bound 2 by default (`LOOM_MAX_PREEMPTIONS` overrides it).

use std::time::Duration;

use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

mod loom_word;

use loom_word::{model, W};
use shmring::park::{Futex, Parked, Wake, Woke};
use shmring_layout::waiters;

struct F {
    word: AtomicU32,
    bucket: Mutex<()>,
    sleepers: Condvar,
}

impl Futex for F {
    fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }
    fn fetch_add(&self, value: u32, order: Ordering) -> u32 {
        self.word.fetch_add(value, order)
    }
    fn wait(&self, seen: u32, _timeout: Duration) -> Woke {
        let guard = self.bucket.lock().unwrap();
        if self.word.load(Ordering::Relaxed) == seen {
            drop(self.sleepers.wait(guard).unwrap());
        }
        Woke::Woken
    }
    fn wake_all(&self) {
        let _guard = self.bucket.lock().unwrap();
        self.sleepers.notify_all();
    }
}

/// A ring reduced to what the protocol needs: how many events were published, and its
/// consumer wake line.
struct Line {
    published: AtomicU64,
    waiters: W,
    futex: F,
}

impl Line {
    /// A line whose waiter word starts at `waiters` (a raise left by a dead parker, say).
    fn new(waiters: u64) -> Arc<Line> {
        Arc::new(Line {
            published: AtomicU64::new(0),
            waiters: W::new(waiters),
            futex: F {
                word: AtomicU32::new(0),
                bucket: Mutex::new(()),
                sleepers: Condvar::new(),
            },
        })
    }

    fn wake(&self) -> Wake<'_, W, F> {
        Wake {
            waiters: &self.waiters,
            word: &self.futex,
        }
    }

    /// A producer: publish one event, then `notify` with `light` as the fence (2).
    fn publish(&self, light: impl FnOnce()) {
        // (1) Release: the stamp of a real publish.
        self.published.fetch_add(1, Ordering::Release);
        self.wake().notify(light);
    }

    /// A consumer: poll, and park while fewer than `events` are published, with `heavy` as
    /// the fence (c).
    fn consume(&self, events: u64, heavy: impl Fn()) {
        let ready = || self.published.load(Ordering::Acquire) >= events;
        while !ready() {
            if self.wake().park(&heavy, Duration::MAX, ready) == Parked::Ready {
                break;
            }
        }
    }

    fn count(&self) -> u32 {
        waiters::count(shmring::line::Word::load(&self.waiters, Ordering::Relaxed))
    }
}

fn full_fence() {
    fence(Ordering::SeqCst);
}

fn no_fence() {}

/// One publish (waker) against one consumer that parks until it sees it (parker).
fn publish_against_parker(fenced: bool) {
    let fence = if fenced { full_fence } else { no_fence };
    model(move || {
        let line = Line::new(0);
        let producer = {
            let line = line.clone();
            thread::spawn(move || line.publish(fence))
        };
        line.consume(1, fence);
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

/// A parker killed asleep left its raise in the word (epoch 0, count 1); two producers
/// publish one event each while a live consumer waits for both. Nobody loses a wake-up,
/// and once both published the dead raise is gone: the count is back to zero.
#[test]
fn a_dead_parkers_raise_costs_one_wake_and_never_hides_a_live_parker() {
    model(|| {
        let line = Line::new(waiters::RAISE);
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let line = line.clone();
                thread::spawn(move || line.publish(full_fence))
            })
            .collect();
        line.consume(2, full_fence);
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(line.count(), 0, "the dead raise was reset");
        assert!(
            line.futex.word.load(Ordering::Relaxed) >= 1,
            "and woken for"
        );
    });
}

/// Two consumers park on one line; one producer's reset drops both raises (and, if one
/// consumer raised again meanwhile, that one too): each is still woken.
#[test]
fn a_reset_that_drops_several_parkers_wakes_them_all() {
    model(|| {
        let line = Line::new(0);
        let other = {
            let line = line.clone();
            thread::spawn(move || line.consume(1, full_fence))
        };
        let producer = {
            let line = line.clone();
            thread::spawn(move || line.publish(full_fence))
        };
        line.consume(1, full_fence);
        other.join().unwrap();
        producer.join().unwrap();
        assert_eq!(line.count(), 0, "every raise taken back or reset");
    });
}

/// A third party (a broker recounting from the tables, say) stores a count of zero while a
/// consumer parks and a producer publishes. The consumer's raise is dropped without a wake,
/// the producer then sees nobody, and the consumer sleeps on an event: the lost wake-up
/// that makes `reset` something only a waker does, right before it wakes.
#[test]
#[should_panic(expected = "deadlock")]
fn a_reset_without_the_wake_behind_it_loses_a_wakeup() {
    model(|| {
        let line = Line::new(0);
        let recount = {
            let line = line.clone();
            thread::spawn(move || line.wake().reset())
        };
        let producer = {
            let line = line.clone();
            thread::spawn(move || line.publish(full_fence))
        };
        line.consume(1, full_fence);
        recount.join().unwrap();
        producer.join().unwrap();
    });
}

/// The ring header's fence mode, as `shmring_layout::FenceMode` numbers it.
const MEMBARRIER: u32 = 1;
const SEQCST_FENCE: u32 = 2;

/// Mixed fence modes on one ring: the waker's process uses the asymmetric fence (its own
/// fence is compiler-only), the parker's process could not register for membarrier and
/// parks with a `SeqCst` fence alone. The parker's process raised the header's fence mode
/// to `SEQCST_FENCE` when it attached; `park::notify` reads it and pays the full fence.
///
/// `raise_first`: the attach (the raise) happens before the waker runs, as an attach does
/// long before a park; otherwise the raise races the publish. `header_checked`: the waker
/// reads the header (as `notify` does); otherwise it trusts its own mode.
fn mixed_modes(raise_first: bool, header_checked: bool) {
    model(move || {
        let line = Line::new(0);
        let fence_mode = Arc::new(AtomicU32::new(MEMBARRIER));
        // The parker's attach: raise the mode (Relaxed, as `Producer::attach` and
        // `Consumer::attach` do).
        let raise = |m: &AtomicU32| {
            m.fetch_max(SEQCST_FENCE, Ordering::Relaxed);
        };
        if raise_first {
            raise(&fence_mode);
        }
        let producer = {
            let (line, fence_mode) = (line.clone(), fence_mode.clone());
            thread::spawn(move || {
                // `park::notify`: the light fence only while every process uses membarrier.
                line.publish(|| {
                    let light = !header_checked || fence_mode.load(Ordering::Relaxed) == MEMBARRIER;
                    if !light {
                        fence(Ordering::SeqCst);
                    }
                })
            })
        };
        if !raise_first {
            raise(&fence_mode);
        }
        // The parker, in the SeqCst fallback: its heavy fence is a SeqCst fence only.
        line.consume(1, full_fence);
        producer.join().unwrap();
    });
}

#[test]
fn mixed_modes_with_the_header_checked_never_lose_a_wakeup() {
    mixed_modes(true, true);
}

#[test]
#[should_panic(expected = "deadlock")]
fn mixed_modes_with_a_waker_that_trusts_its_own_mode_lose_a_wakeup() {
    mixed_modes(true, false);
}

/// The raise is a Relaxed store nothing orders with the park, so a waker may still read
/// the old mode after the parker raised it and parked: a lost wake-up (caught by the 50 ms
/// net). In a running system the attach precedes the park by far more than a store takes
/// to be seen; the model has no such time, and finds the window (FAILURE_MODES.md, Known
/// gaps).
#[test]
#[should_panic(expected = "deadlock")]
fn mixed_modes_with_the_raise_racing_the_first_publish_can_lose_a_wakeup() {
    mixed_modes(false, true);
}

/// A ring's consumer line, whose `published` is the cursor a publish stores, and the line
/// of an upstream consumer's entry (`park`, "A downstream's line"), whose `published` is
/// that consumer's position, which its commit stores. A consumer reading after that
/// upstream waits for its first event: published and committed upstream.
struct Graph {
    publish: Arc<Line>,
    downstream: Arc<Line>,
}

/// How the model's commit and park are made.
#[derive(Clone, Copy)]
enum Variant {
    /// As shipped: the commit notifies the consumer line and its entry's line
    /// (`park::notify_both`, as `park::notify_downstreams` calls it), the park is
    /// `park::park_consumer`.
    Shipped,
    /// The commit notifies the consumer line alone, as a commit did before the entries had
    /// lines.
    CommitOnConsumerLine,
    /// The park picks the line as `park_consumer` does but its last look does not ask
    /// whether the consumer is still behind its upstream.
    NoRecheck,
}

impl Graph {
    fn new() -> Graph {
        Graph {
            publish: Line::new(0),
            downstream: Line::new(0),
        }
    }

    /// The upstream's commit of sequence 0: its position, then the wakes.
    fn commit(&self, variant: Variant) {
        // (1) Release: the commit's store of `next`.
        self.downstream.published.fetch_add(1, Ordering::Release);
        match variant {
            Variant::CommitOnConsumerLine => self.publish.wake().notify(full_fence),
            _ => shmring::park::notify_both(
                &self.publish.wake(),
                &self.downstream.wake(),
                full_fence,
            ),
        }
    }

    /// The downstream consumer, at position 0: park until event 0 is published and the
    /// upstream committed it.
    fn consume(&self, variant: Variant) {
        let ready = || {
            self.publish.published.load(Ordering::Acquire) >= 1
                && self.downstream.published.load(Ordering::Acquire) >= 1
        };
        // The upstream holds it at its position: `Consumer::behind_upstreams`.
        let behind = || self.downstream.published.load(Ordering::Acquire) == 0;
        let (publish, downstream) = (self.publish.wake(), self.downstream.wake());
        while !ready() {
            match variant {
                Variant::NoRecheck if behind() => {
                    downstream.park(full_fence, Duration::MAX, ready);
                }
                Variant::NoRecheck => {
                    publish.park(full_fence, Duration::MAX, ready);
                }
                _ => {
                    let held = behind().then_some((&downstream, &behind as &dyn Fn() -> bool));
                    shmring::park::park_consumer(&publish, held, full_fence, Duration::MAX, ready);
                }
            }
        }
    }
}

/// A producer publishes event 0, an upstream commits it, and a consumer after the
/// upstream waits for both; the commit may come before the publish (an upstream moved
/// ahead to the head, past what is published, by a takeover).
fn publish_commit_and_downstream(variant: Variant) {
    model(move || {
        let g = Arc::new(Graph::new());
        let producer = {
            let g = g.clone();
            thread::spawn(move || g.publish.publish(full_fence))
        };
        let upstream = {
            let g = g.clone();
            thread::spawn(move || g.commit(variant))
        };
        g.consume(variant);
        producer.join().unwrap();
        upstream.join().unwrap();
        assert_eq!(
            g.publish.count() + g.downstream.count(),
            0,
            "every raise taken back"
        );
    });
}

#[test]
fn a_downstream_on_its_own_line_is_woken_by_the_commit_or_the_publish_it_waits_for() {
    publish_commit_and_downstream(Variant::Shipped);
}

#[test]
#[should_panic(expected = "deadlock")]
fn a_commit_that_wakes_only_the_consumer_line_loses_the_downstreams_wakeup() {
    publish_commit_and_downstream(Variant::CommitOnConsumerLine);
}

#[test]
#[should_panic(expected = "deadlock")]
fn a_downstream_that_does_not_recheck_its_line_at_the_last_look_loses_a_wakeup() {
    publish_commit_and_downstream(Variant::NoRecheck);
}
