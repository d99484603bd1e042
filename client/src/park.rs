//! Parking without a producer tax: the park/wake protocol on a wake line.
//!
//! ```text
//! parker (consumer with nothing to read)        waker (producer after a publish)
//! (a) seen = word           (Acquire)
//! (b) waiters += 1                               (1) stamp = s          (Release)
//! (c) fence::heavy()  -- membarrier              (2) fence::light()  -- compiler only
//! (d) last look: stamp == s ?                    (3) waiters != 0 ?     (Relaxed)
//! (e) futex_wait(word, seen, net)                (4)   word += 1        (Release)
//!     waiters -= 1                               (5)   futex_wake(word)
//! ```
//!
//! (b)-(d) against (1)-(3) is the store-buffering race: with a full fence between store and
//! load on both sides (see `fence`), either (d) sees the stamp (no sleep) or (3) sees the
//! waiter (a wake follows). If (4) lands before (e), the kernel's compare of `word` with
//! `seen` fails and the parker does not sleep; if after, (5) wakes it. If (a) already read
//! the incremented word, (4) happened-before (d) through the Release/Acquire pair on `word`,
//! so (d) sees the stamp written before it. The timed net under (e) is a safety net, not
//! part of the protocol. How each park ended is counted ([`WakeCounts`]) in three kinds
//! that fail differently:
//!
//! - *woken*: the kernel woke the parker (or the word had moved before it slept): the
//!   protocol working.
//! - *late*: the timeout passed, but the waker had already done (4), so its wake (5) did
//!   not arrive in time: a waker preempted between (4) and (5), or a wake the kernel
//!   never delivered (a wrong futex key or flags, see `futex`). Also a timeout shorter
//!   than the net that passed with the condition already true: the waker may still be
//!   between (1) and (4), so a short timeout cannot tell a lost wake from a slow one.
//! - *lost*: the net passed, the word never moved, and the condition was true: the
//!   waker saw no waiter at (3), the store-buffering race the fences exist to close.
//!
//! The tests assert that lost and late stay zero where the net is the only timeout, and
//! that parks were woken.
//!
//! The same protocol runs the other way for producers waiting for room: the producer
//! parks on the ring's producer wake line, and a consumer that commits is the waker.

use std::sync::atomic::Ordering;
use std::time::Duration;

use shmring_layout::{FenceMode, Header, WakeLine};

use crate::fence;
use crate::futex::{self, Woke};

/// The timed net under every park.
pub const PARK_NET: Duration = Duration::from_millis(50);

/// How a park ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    /// The last look found the condition true: did not sleep.
    Ready,
    /// Woken by a waker (or the word moved before sleeping).
    Woken,
    /// The timeout passed after a waker had moved the word: its wake came too late or
    /// never arrived.
    Late,
    /// The timeout passed and the word never moved. `net`: the timeout was the full net
    /// (not a shorter one the caller asked for).
    TimedOut {
        /// Whether the timeout was [`PARK_NET`].
        net: bool,
    },
}

/// How the parks of one parker ended (see the module comment for the three kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct WakeCounts {
    /// Woken by a waker.
    pub woken: u64,
    /// Woken by a timeout although a waker had done its part (or, with a timeout shorter
    /// than the net, might still be doing it).
    pub late: u64,
    /// Woken by the net with the condition true and the word unmoved: a lost wake-up.
    pub lost: u64,
}

impl WakeCounts {
    /// Count a park that ended as `parked`; `ready` is the parker's condition, looked at
    /// only after a timeout with the word unmoved.
    pub fn count(&mut self, parked: Parked, ready: impl FnOnce() -> bool) {
        match parked {
            Parked::Ready => {}
            Parked::Woken => self.woken = self.woken.wrapping_add(1),
            Parked::Late => self.late = self.late.wrapping_add(1),
            Parked::TimedOut { net } if ready() => {
                if net {
                    self.lost = self.lost.wrapping_add(1);
                } else {
                    self.late = self.late.wrapping_add(1);
                }
            }
            Parked::TimedOut { .. } => {}
        }
    }
}

/// Classify the end of a sleep: `moved`, whether the word moved since the parker read it;
/// `net`, whether the sleep's timeout was the full net.
pub(crate) fn classify(woke: Woke, moved: bool, net: bool) -> Parked {
    match woke {
        Woke::Woken => Parked::Woken,
        Woke::TimedOut if moved => Parked::Late,
        Woke::TimedOut => Parked::TimedOut { net },
    }
}

/// Park on `line` for at most `timeout` unless `ready()` (the last look) is already true.
pub(crate) fn park(line: &WakeLine, timeout: Duration, ready: impl FnOnce() -> bool) -> Parked {
    // (a) Acquire: pairs with the waker's Release increment (4).
    let seen = line.word.load(Ordering::Acquire);
    // (b) Relaxed: ordered before (d) by the heavy fence.
    line.waiters.fetch_add(1, Ordering::Relaxed);
    // (c)
    fence::heavy();
    // (d)
    if ready() {
        line.waiters.fetch_sub(1, Ordering::Relaxed);
        return Parked::Ready;
    }
    // (e)
    let woke = futex::wait(&line.word, seen, timeout);
    line.waiters.fetch_sub(1, Ordering::Relaxed);
    // Acquire: as (a).
    classify(
        woke,
        line.word.load(Ordering::Acquire) != seen,
        timeout >= PARK_NET,
    )
}

/// After a store that may satisfy a parker on `line` ((1) done): wake if anyone parks.
///
/// The compiler-only fence is enough only if every parker on the ring issues a membarrier:
/// `membarrier_mode` is this process's mode, and the ring header's `fence_mode` holds the
/// weakest mode of every process that attached (a process without membarrier raises it to
/// `SeqCstFence` when it attaches, long before it can park), so a waker in a mixed ring
/// pays the full fence.
#[inline(always)]
pub(crate) fn notify(line: &WakeLine, header: &Header, membarrier_mode: bool) {
    // Relaxed: the mode is set at attach, before any park of that process.
    let light = membarrier_mode
        && header.fence_mode.load(Ordering::Relaxed) == FenceMode::Membarrier as u32;
    // (2)
    fence::light(light);
    // (3) Relaxed: the fence pair above orders it against the parker's (b).
    if line.waiters.load(Ordering::Relaxed) != 0 {
        wake(line);
    }
}

/// Wake every parker on `line`, unconditionally.
#[cold]
pub(crate) fn wake(line: &WakeLine) {
    // (4) Release: pairs with the parker's Acquire load (a).
    line.word.fetch_add(1, Ordering::Release);
    // (5)
    futex::wake_all(&line.word);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_after_the_word_moved_is_late_and_one_with_it_unmoved_is_lost() {
        let mut n = WakeCounts::default();
        n.count(classify(Woke::Woken, false, true), || true);
        n.count(classify(Woke::TimedOut, true, true), || true);
        n.count(classify(Woke::TimedOut, false, true), || true);
        n.count(classify(Woke::TimedOut, false, true), || false);
        n.count(Parked::Ready, || true);
        assert_eq!(
            n,
            WakeCounts {
                woken: 1,
                late: 1,
                lost: 1
            }
        );
    }

    #[test]
    fn a_timeout_shorter_than_the_net_with_the_condition_true_is_late_not_lost() {
        let mut n = WakeCounts::default();
        n.count(classify(Woke::TimedOut, false, false), || true);
        n.count(classify(Woke::TimedOut, false, false), || false);
        assert_eq!(
            n,
            WakeCounts {
                woken: 0,
                late: 1,
                lost: 0
            }
        );
    }
}
