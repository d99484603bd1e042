//! One wait over many rings, for a thread that steps consumers itself.
//!
//! A thread that owns consumers on many rings calls `poll_once` on each; when every one
//! came back empty it parks once on a [`WakeSet`] holding their rings, and a publish into
//! any of them wakes it. The park is the protocol of `park` run over every ring at once:
//! raise the waiter count on each ring's consumer wake line, one heavy fence, one last look
//! (the caller's predicate, normally "any consumer has_pending"), then `futex_waitv` on
//! every ring's wake word (at most 128 rings, the kernel's limit; measured: 8 words ~5.7 µs
//! wake, 128 words ~12 µs). Producers need nothing new: they already wake a ring's wake
//! line whenever its waiter count is non-zero.
//!
//! `futex_waitv` needs Linux 5.16. Where the kernel lacks it or a seccomp filter refuses
//! it, the sleep (e) falls back to a plain futex wait on the first ring's word, in slices
//! of at most [`FALLBACK_SLICE`], looking at every ring's word after each slice (a set of
//! one ring waits on its word to the end, with no slices). The raise, the fence and the
//! last look are the same, so every ring's waker still moves its word and wakes: the first
//! ring's wake reaches the sleeper at once, another ring's move is seen at the end of the
//! slice. The first lasting refusal switches the whole process to the fallback
//! (`futex::waitv_available`), so a refused call costs one system call per process.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::futex::{self, Woke, WAITV_MAX};
use crate::park::{self, Parked, WakeCounts, PARK_NET};
use crate::segment::Segment;
use crate::{fence, Consumer, Ring};

/// Longest sleep of the fallback for a set of more than one ring, where `futex_waitv` is
/// unavailable: what a publish into a ring other than the set's first may wait on top of
/// the wake.
const FALLBACK_SLICE: Duration = Duration::from_millis(1);

/// A set of rings one thread waits on.
///
/// A park sleeps in one `futex_waitv` (Linux 5.16 or later) on every ring's wake word.
/// Where that call is missing (a kernel before 5.16, such as Ubuntu 22.04's 5.15, RHEL 9's
/// 5.14 or Debian 11's 5.10) or refused (a seccomp profile without it, as some container
/// runtimes ship), the set falls back to a plain futex wait on the first ring it holds, in
/// slices of at most 1 ms, and looks at the other rings' words after each slice: a publish
/// into the first ring wakes it at once, one into another ring adds up to 1 ms, and the
/// parked thread wakes about a thousand times a second to look (a set of one ring waits on
/// its word without slices). Deadlines hold as with `futex_waitv`, and
/// [`WakeSetStats::fallback_waits`] counts the fallback's waits that found nothing.
#[derive(Default)]
pub struct WakeSet {
    rings: Vec<Arc<Segment>>,
    stats: WakeSetStats,
}

/// What a [`WakeSet`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WakeSetStats {
    /// Parks that slept.
    pub parks: u64,
    /// Returns from a sleep by a wake (or a word that moved before the sleep, or, in the
    /// fallback without `futex_waitv`, one found moved at the end of a slice).
    pub wakeups: u64,
    /// Returns by a timeout after a waker had moved a word (its wake came too late or
    /// never arrived), or by a deadline shorter than the net with the predicate already
    /// true. Zero on an idle machine; many, with `wakeups` zero, when wakes do not arrive.
    pub late_wakeups: u64,
    /// Returns by the timed net while the predicate was already true and no word moved:
    /// lost wake-ups, or a predicate that came true with no wake to send (a consumer's
    /// `Retry` back-off ending: see `Consumer::has_pending`).
    pub net_wakeups: u64,
    /// Waits of the fallback (where `futex_waitv` is unavailable, see [`WakeSet`]) that
    /// ended with no word moved: its 1 ms slices, and for a set of one ring its waits to
    /// the net or the deadline. No wake-ups; zero where the kernel has `futex_waitv`.
    pub fallback_waits: u64,
}

/// How a park on a [`WakeSet`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeReason {
    /// The predicate was already true at the last look: no sleep.
    Ready,
    /// A ring was published to (or the set was otherwise woken).
    Woken,
    /// The deadline passed.
    Deadline,
}

/// Adding a ring to a full set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a WakeSet holds at most {max} rings: split the rings over more stepping threads")]
pub struct WakeSetFull {
    /// The limit.
    pub max: usize,
}

impl std::fmt::Debug for WakeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeSet")
            .field("rings", &self.rings.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl WakeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a ring (a ring already in the set is not added twice).
    pub fn add_ring(&mut self, ring: &Ring) -> Result<(), WakeSetFull> {
        self.add_segment(&ring.seg)
    }

    /// Add the ring of `consumer`.
    pub fn add(&mut self, consumer: &Consumer) -> Result<(), WakeSetFull> {
        self.add_segment(consumer.segment())
    }

    fn add_segment(&mut self, seg: &Arc<Segment>) -> Result<(), WakeSetFull> {
        if self.rings.iter().any(|r| Arc::ptr_eq(r, seg)) {
            return Ok(());
        }
        if self.rings.len() == WAITV_MAX {
            return Err(WakeSetFull { max: WAITV_MAX });
        }
        // A set parks on the ring whether or not this process attached to it.
        crate::park::raise_fence_mode(seg.header());
        self.rings.push(seg.clone());
        Ok(())
    }

    /// Rings in the set.
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// What this set counted.
    pub fn stats(&self) -> WakeSetStats {
        self.stats
    }

    /// Park until a ring in the set is published to, unless `ready()` is already true at
    /// the last look. Returns `Ready` or `Woken`; the caller polls its consumers again.
    pub fn park_unless(&mut self, mut ready: impl FnMut() -> bool) -> WakeReason {
        loop {
            match self.park_once(Instant::now() + PARK_NET, true, &mut ready) {
                // The net, with nothing pending: keep waiting.
                WakeReason::Deadline => continue,
                other => return other,
            }
        }
    }

    /// As [`WakeSet::park_unless`], but return `Deadline` once `deadline` (monotonic
    /// clock) passes. A deadline in the past returns at once.
    pub fn park_until(&mut self, deadline: Instant, mut ready: impl FnMut() -> bool) -> WakeReason {
        loop {
            if Instant::now() >= deadline {
                return if ready() {
                    WakeReason::Ready
                } else {
                    WakeReason::Deadline
                };
            }
            let net = Instant::now() + PARK_NET;
            match self.park_once(deadline.min(net), deadline >= net, &mut ready) {
                WakeReason::Deadline => continue,
                other => return other,
            }
        }
    }

    /// One park, at most until `until` (`net`: `until` is the full net away).
    fn park_once(
        &mut self,
        until: Instant,
        net: bool,
        ready: &mut impl FnMut() -> bool,
    ) -> WakeReason {
        if self.rings.is_empty() {
            // Nothing can wake an empty set: sleep to the deadline, checking once.
            if ready() {
                return WakeReason::Ready;
            }
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            return WakeReason::Deadline;
        }
        let mut words: Vec<(&AtomicU32, u32)> = Vec::with_capacity(self.rings.len());
        let mut raised = Vec::with_capacity(self.rings.len());
        for seg in &self.rings {
            let line = &seg.lines().consumer_wake.value;
            // (a) Acquire: pairs with a waker's Release increment (see `park`).
            words.push((&line.word, line.word.load(Ordering::Acquire)));
            // (b)
            raised.push(park::on(line).raise());
        }
        // (c)
        fence::heavy();
        // (d)
        let parked = if ready() {
            Parked::Ready
        } else {
            self.stats.parks += 1;
            // (e)
            let woke = sleep(&words, until, &mut self.stats.fallback_waits);
            let moved = self
                .rings
                .iter()
                .zip(&words)
                .zip(&raised)
                .any(|((seg, (_, seen)), r)| {
                    park::on(&seg.lines().consumer_wake.value).moved(*seen, *r)
                });
            park::classify(woke, moved, net)
        };
        // (f)
        for (seg, r) in self.rings.iter().zip(raised) {
            park::on(&seg.lines().consumer_wake.value).lower(r);
        }
        let mut counts = WakeCounts::default();
        let mut pending = false;
        counts.count(parked, || {
            pending = ready();
            pending
        });
        self.stats.wakeups += counts.woken;
        self.stats.late_wakeups += counts.late;
        self.stats.net_wakeups += counts.lost;
        match parked {
            Parked::Ready => WakeReason::Ready,
            Parked::Woken | Parked::Late => WakeReason::Woken,
            // Something was published and the net (or the deadline) found it.
            Parked::TimedOut { .. } if pending => WakeReason::Woken,
            Parked::TimedOut { .. } => WakeReason::Deadline,
        }
    }
}

/// The sleep (e): while every word holds its value, until `until`. One `futex_waitv`;
/// where the kernel refuses it, the fallback, counting in `fallback_waits` its waits that
/// ended with no word moved.
fn sleep(words: &[(&AtomicU32, u32)], until: Instant, fallback_waits: &mut u64) -> Woke {
    if futex::waitv_available() {
        if let Ok(woke) = futex::waitv(words, until) {
            return woke;
        }
        // Refused: no wake-up. This park falls back, and so does every later one if the
        // refusal lasts.
    }
    sleep_in_slices(words, until, fallback_waits)
}

/// The fallback without `futex_waitv`: a futex wait on the first word, in slices of at
/// most [`FALLBACK_SLICE`] when there are more, each followed by a look at every word.
fn sleep_in_slices(words: &[(&AtomicU32, u32)], until: Instant, fallback_waits: &mut u64) -> Woke {
    let (first, seen) = words[0];
    let slice = if words.len() == 1 {
        Duration::MAX
    } else {
        FALLBACK_SLICE
    };
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Woke::TimedOut;
        }
        if futex::wait(first, seen, left.min(slice)) == Woke::Woken {
            return Woke::Woken;
        }
        // Acquire: as (a), pairs with a waker's Release increment (4) of that word, so
        // the caller's look after this park sees the publish that preceded it.
        if words
            .iter()
            .any(|(word, seen)| word.load(Ordering::Acquire) != *seen)
        {
            return Woke::Woken;
        }
        *fallback_waits += 1;
    }
}
