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
//! part of the protocol: every wake-up that arrives by the net while an event was waiting is
//! counted, and the tests assert that count stays zero.
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
    /// The timeout passed.
    TimedOut,
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
    match woke {
        Woke::Woken => Parked::Woken,
        // A waker that bumped the word as the timer expired did its part: not the net.
        // Acquire: as (a).
        Woke::TimedOut if line.word.load(Ordering::Acquire) != seen => Parked::Woken,
        Woke::TimedOut => Parked::TimedOut,
    }
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
