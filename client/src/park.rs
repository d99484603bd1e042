//! Parking without a producer tax: the park/wake protocol on a wake line.
//!
//! ```text
//! parker (consumer with nothing to read)           waker (producer after a publish)
//! (a) seen = word             (Acquire)
//! (b) raise: count + 1, in epoch e                  (1) stamp = s            (Release)
//! (c) heavy fence  -- membarrier                    (2) light fence  -- compiler only
//! (d) last look: stamp == s ?                       (3) count != 0 ?         (Relaxed)
//! (e) futex_wait(word, seen, net)                   (r)   reset: count 0, epoch + 1
//! (f) lower: count - 1, only while the epoch is e   (4)   word += 1          (Release)
//!                                                   (5)   futex_wake_all(word)
//! ```
//!
//! The waiter word packs the count with an epoch (`shmring_layout::waiters`); each of (b),
//! (f) and (r) is one atomic step on it ((f) and (r) CAS from the value they read).
//!
//! - (b)-(d) against (1)-(3) is the store-buffering race: with a full fence between store
//!   and load on both sides (see `fence`), either (d) sees the stamp (no sleep) or (3) reads
//!   the raise or a later value of the word. A later value still counts the raise unless the
//!   parker lowered it after its sleep (f), or a reset dropped it, and the waker of that
//!   reset wakes the parker (next point).
//! - A reset (r) drops every raise before it, and each parker it drops still wakes. (r)
//!   is sequenced before the same waker's (4): had the parker's (a) read the value (4)
//!   wrote (Acquire against Release), (r) would happen-before (b) and so come before it in
//!   the word's order, not after. So `seen` is older than (4): the kernel's compare in (e)
//!   fails, or (5) wakes the sleeper. This is why the reset comes before the bump, never
//!   after it, and never alone (a reset that is not followed by (4) and (5), such as a
//!   recount stored by a third party, loses the dropped parker's wake-up; the loom model
//!   `client/tests/loom_park.rs` finds it).
//! - If (a) already read the incremented word, (4) happened-before (d) through the
//!   Release/Acquire pair on `word`, so (d) sees the stamp written before it.
//! - (f) takes back only the parker's own raise: in the epoch it raised in, by a CAS. After
//!   a reset there is nothing of its own left to take back.
//! - A parker killed between (b) and (f) leaves its raise counted. The next waker pays
//!   one wake for it and resets the count; from then on publishing costs one load again.
//!   No broker and no table entry is involved, so a `WakeSet` thread (which holds no entry)
//!   and `Ring::wait_published` are covered too.
//!
//! The timed net under (e) is a safety net, not part of the protocol. How each park ended
//! is counted ([`WakeCounts`]) in three kinds that fail differently:
//!
//! - *woken*: the kernel woke the parker (or the word had moved before it slept): the
//!   protocol working.
//! - *late*: the timeout passed, but a waker had already done (r) or (4), so its wake (5)
//!   did not arrive in time: a waker preempted between (r) and (5), or a wake the kernel
//!   never delivered (a wrong futex key or flags, see `futex`). Also a timeout shorter
//!   than the net that passed with the condition already true: the waker may still be
//!   between (1) and (r), so a short timeout cannot tell a lost wake from a slow one.
//! - *lost*: the net passed, neither the word nor the epoch moved, and the condition was
//!   true: the waker saw no waiter at (3), the store-buffering race the fences exist to
//!   close.
//!
//! The tests assert that lost and late stay zero where the net is the only timeout, and
//! that parks were woken.
//!
//! The same protocol runs the other way for producers waiting for room: the producer
//! parks on the ring's producer wake line, and a consumer that commits is the waker.
//!
//! And a consumer's commit is a waker as well: a consumer that reads behind it
//! (`ConsumerOptions::after`) parks on its entry's line (next section), and its last look
//! (d) loads the upstream's `next`. The commit's Release store of `next` is then the store
//! (1), followed by the same (2) and (3), so the argument above holds for it unchanged:
//! this code never looks at what (1) stored or what (d) reads.
//!
//! ## A downstream's line: the entry of the upstream that holds it
//!
//! A consumer that reads behind other consumers (`after`, or after a worker group) and has
//! caught up with one of them waits for that upstream's commit, not for a publish: a
//! publish alone cannot let it deliver while the upstream holds it at its position. Were it
//! parked on the consumer line, the producer would pay a futex wake per publish for as long
//! as the upstream lags, and the consumer a wake and a fence per publish to find nothing;
//! on a ring-wide line of their own, every other consumer's commit would. So every
//! consumer entry carries a wake line (`ConsumerHot::downstream`, on the line of its
//! `next`). The consumer picks where to park (`Consumer::held_by`), and [`park_consumer`]
//! parks there:
//!
//! - *held by an upstream* (its position, or for a worker group the lowest of the work
//!   sequence and its members' positions, at or below every sequence the consumer could
//!   deliver next): on that upstream's entry line. Only a change of that entry lets the
//!   consumer past it: a commit or another move of its position (a jump to the head, a
//!   takeover, for a group a member's claim, commit or adoption), which notifies the
//!   entry's line (a member's, its group's line too: [`notify_downstreams`]) as well as the
//!   consumer line, as it always did, for the parkers there (a `WakeSet`, say); or a
//!   release or a free, which notifies every line ([`notify_consumers`]: a consumer held
//!   by another upstream finds this one passed or lost at once). Lifecycle changes,
//!   repairs, deaths and a member's claim left for the others (a member held by the
//!   group's upstreams adopts it when it wakes) wake every line ([`wake_consumers`]).
//! - otherwise: the consumer line, which the publish it waits for notifies.
//!
//! The choice is read before the park and may be stale by the last look: the upstream may
//! have moved past the consumer's position in between (a takeover moves an entry to the
//! head, which may lie past what is published), and the publish the consumer then waits
//! for does not notify the entry's line. So the last look on an entry's line also ends the
//! park when that upstream no longer holds the consumer (`Parked::Ready`: the caller looks
//! again and parks where it now belongs). Each line on its own is the protocol above,
//! unchanged. The loom models in `client/tests/loom_park.rs` run [`park_consumer`] and
//! [`notify_both`] against a publish and a commit in either order, and find the lost
//! wake-ups of a commit that notifies only the consumer line and of a last look that does
//! not ask again.
//!
//! The protocol is written against two small traits, [`Word`] (the waiter word) and
//! [`Futex`] (the futex word), with the fences passed in, so that the loom models in
//! `client/tests/loom_park.rs` run this very code on heap atomics.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use shmring_layout::{waiters, FenceMode, Header, WakeLine};

pub use crate::futex::Woke;

use crate::line::Word;

use crate::{fence, futex};

/// The timed net under every park.
pub const PARK_NET: Duration = Duration::from_millis(50);

/// The futex word of a wake line. Implemented for the segment's `AtomicU32` (a shared
/// futex); the loom models implement it with a lock and a condition variable, as the kernel
/// does it (compare under the bucket lock, sleep atomically).
pub trait Futex {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u32;
    /// Atomic add, returning the previous value.
    fn fetch_add(&self, value: u32, order: Ordering) -> u32;
    /// Sleep while the word equals `seen`, at most `timeout`.
    fn wait(&self, seen: u32, timeout: Duration) -> Woke;
    /// Wake every sleeper.
    fn wake_all(&self);
}

impl Futex for AtomicU32 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
    #[inline(always)]
    fn fetch_add(&self, value: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_add(self, value, order)
    }
    fn wait(&self, seen: u32, timeout: Duration) -> Woke {
        futex::wait(self, seen, timeout)
    }
    fn wake_all(&self) {
        futex::wake_all(self);
    }
}

/// How a park ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// The last look found the condition true: did not sleep.
    Ready,
    /// Woken by a waker (or the word moved before sleeping).
    Woken,
    /// The timeout passed after a waker had reset the count or moved the word: its wake
    /// came too late or never arrived.
    Late,
    /// The timeout passed and neither the word nor the epoch moved. `net`: the timeout was
    /// the full net (not a shorter one the caller asked for).
    TimedOut {
        /// Whether the timeout was [`PARK_NET`].
        net: bool,
    },
}

/// How the parks of one parker ended (see the module comment for the three kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WakeCounts {
    /// Woken by a waker.
    pub woken: u64,
    /// Woken by a timeout although a waker had done its part (or, with a timeout shorter
    /// than the net, might still be doing it).
    pub late: u64,
    /// Woken by the net with the condition true and nothing moved: a lost wake-up.
    pub lost: u64,
}

impl WakeCounts {
    /// Count a park that ended as `parked`; `ready` is the parker's condition, looked at
    /// only after a timeout with nothing moved.
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

/// Classify the end of a sleep: `moved`, whether a waker reset the count or moved the word
/// since the parker raised ([`Wake::moved`]); `net`, whether the sleep's timeout was the
/// full net.
pub fn classify(woke: Woke, moved: bool, net: bool) -> Parked {
    match woke {
        Woke::Woken => Parked::Woken,
        Woke::TimedOut if moved => Parked::Late,
        Woke::TimedOut => Parked::TimedOut { net },
    }
}

/// A parker's raise (b): the epoch it was counted in, which is what (f) takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    epoch: u32,
}

/// A wake line as the protocol sees it: the waiter word and the futex word.
#[derive(Clone, Copy)]
pub struct Wake<'a, W: Word, F: Futex> {
    /// `epoch | count` (`shmring_layout::waiters`).
    pub waiters: &'a W,
    /// The futex word.
    pub word: &'a F,
}

/// [`Wake::wake`] on the two words of a line.
#[cold]
#[inline(never)]
fn wake_words<W: Word, F: Futex>(waiters: &W, word: &F) {
    Wake { waiters, word }.wake();
}

/// The protocol on a wake line of a segment.
#[inline(always)]
pub(crate) fn on(line: &WakeLine) -> Wake<'_, AtomicU64, AtomicU32> {
    Wake {
        waiters: &line.waiters,
        word: &line.word,
    }
}

impl<W: Word, F: Futex> Wake<'_, W, F> {
    /// Park for at most `timeout` unless `ready()` (the last look) is already true:
    /// (a) to (f). `heavy` is the parker's half of the fence pair.
    pub fn park(
        &self,
        heavy: impl FnOnce(),
        timeout: Duration,
        ready: impl FnOnce() -> bool,
    ) -> Parked {
        // (a) Acquire: pairs with the waker's Release increment (4).
        let seen = self.word.load(Ordering::Acquire);
        // (b)
        let raised = self.raise();
        // (c)
        heavy();
        // (d)
        if ready() {
            self.lower(raised);
            return Parked::Ready;
        }
        // (e)
        let woke = self.word.wait(seen, timeout);
        let moved = self.moved(seen, raised);
        // (f)
        self.lower(raised);
        classify(woke, moved, timeout >= PARK_NET)
    }

    /// (b): count this parker in.
    #[inline]
    pub fn raise(&self) -> Raised {
        // Relaxed: ordered before the last look (d) by the heavy fence.
        let before = self.waiters.fetch_add(waiters::RAISE, Ordering::Relaxed);
        Raised {
            epoch: waiters::epoch(before),
        }
    }

    /// (f): take back `raised`, unless a reset dropped it already.
    #[inline]
    pub fn lower(&self, raised: Raised) {
        // Relaxed: the count orders nothing else; the CAS makes the step conditional on
        // the epoch it checked.
        let mut w = self.waiters.load(Ordering::Relaxed);
        while waiters::epoch(w) == raised.epoch && waiters::count(w) != 0 {
            match self.waiters.compare_exchange(
                w,
                w - waiters::RAISE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }

    /// Whether a waker did its part since this parker read `seen` and raised `raised`: it
    /// moved the word (4), or reset the count (r) and is about to.
    pub fn moved(&self, seen: u32, raised: Raised) -> bool {
        // Acquire: as (a). Relaxed: a reset only says a wake is on its way.
        self.word.load(Ordering::Acquire) != seen
            || waiters::epoch(self.waiters.load(Ordering::Relaxed)) != raised.epoch
    }

    /// After a store that may satisfy a parker ((1) done): wake if anyone is counted.
    /// `light` is the waker's half of the fence pair (2).
    #[inline(always)]
    pub fn notify(&self, light: impl FnOnce()) {
        // (2)
        light();
        self.wake_if_counted();
    }

    /// (3) and, if anyone is counted, (r) to (5): the waker's half after its fence (2).
    #[inline(always)]
    pub fn wake_if_counted(&self) {
        // (3) Relaxed: the caller's fence (2) orders it against the parker's (b).
        if waiters::count(self.waiters.load(Ordering::Relaxed)) != 0 {
            // The two words by value: a publish that wakes nobody does not store a `Wake`
            // on its stack for this cold call.
            wake_words(self.waiters, self.word);
        }
    }

    /// Wake every parker, unconditionally: (r), (4), (5).
    #[cold]
    pub fn wake(&self) {
        // (r), before (4): see the module comment.
        self.reset();
        // (4) Release: pairs with the parker's Acquire load (a).
        self.word.fetch_add(1, Ordering::Release);
        // (5)
        self.word.wake_all();
    }

    /// (r) alone: drop every raise counted so far. Only [`Wake::wake`] may call it, right
    /// before it moves the word and wakes (public for the loom model that shows why).
    pub fn reset(&self) {
        // Relaxed: ordered before (4) by program order, which is all the argument needs.
        let mut w = self.waiters.load(Ordering::Relaxed);
        while waiters::count(w) != 0 {
            match self.waiters.compare_exchange(
                w,
                waiters::reset(w),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => w = now,
            }
        }
    }
}

/// The line of the upstream entry that holds a parking consumer, and whether it still
/// holds it (see [`park_consumer`]).
pub type Held<'w, 'a, W, F> = (&'w Wake<'a, W, F>, &'w dyn Fn() -> bool);

/// Park a consumer for at most `timeout` unless `ready()` (the last look) is already true,
/// on the line that can wake it (see "A downstream's line" in the module comment): with
/// `held` `Some((line, holds))`, on the line of the upstream entry that holds it, where the
/// last look also ends the park once `holds()` is false (returned as `Ready`: look again);
/// on `publish` otherwise. `heavy` as in [`Wake::park`].
pub fn park_consumer<W: Word, F: Futex>(
    publish: &Wake<'_, W, F>,
    held: Option<Held<'_, '_, W, F>>,
    heavy: impl FnOnce(),
    timeout: Duration,
    ready: impl Fn() -> bool,
) -> Parked {
    match held {
        Some((line, holds)) => line.park(heavy, timeout, || ready() || !holds()),
        None => publish.park(heavy, timeout, ready),
    }
}

/// [`park_consumer`] on `seg`: on the entry line of upstream entry `held.0` while
/// `held.1()` says it still holds the consumer, or on the consumer line.
pub(crate) fn park_consumer_on(
    seg: &crate::segment::Segment,
    timeout: Duration,
    held: Option<(u32, &dyn Fn() -> bool)>,
    ready: impl Fn() -> bool,
) -> Parked {
    let entry_line =
        held.and_then(|(i, holds)| Some((on(&seg.consumer(i)?.hot.downstream), holds)));
    park_consumer(
        &on(&seg.lines().consumer_wake.value),
        entry_line.as_ref().map(|(w, holds)| (w, *holds)),
        fence::heavy,
        timeout,
        ready,
    )
}

/// Park on `line` for at most `timeout` unless `ready()` (the last look) is already true.
pub(crate) fn park(line: &WakeLine, timeout: Duration, ready: impl FnOnce() -> bool) -> Parked {
    on(line).park(fence::heavy, timeout, ready)
}

/// After a store that may satisfy a parker on `line` ((1) done): wake if anyone parks.
///
/// The compiler-only fence is enough only if this process is registered for membarrier
/// (`registered`, see `fence`) and every parker on the ring issues one: the ring header's
/// `fence_mode` holds the weakest mode of every process that attached (a process without
/// membarrier raises it to `SeqCstFence` when it attaches, long before it can park), so a
/// waker in a mixed ring pays the full fence.
#[inline(always)]
pub(crate) fn notify(line: &WakeLine, header: &Header, registered: bool) {
    notify_light(line, light(header, registered));
}

/// Whether a handle of this process may use the compiler-only fence on `header`'s ring
/// (`registered` as in [`notify`]). A publish that fences twice reads it once for both: the
/// mode only rises, and nothing between the two fences orders a later read of it.
#[inline(always)]
pub(crate) fn light(header: &Header, registered: bool) -> bool {
    // Relaxed: the mode is set at attach, before any park of that process.
    registered && header.fence_mode.load(Ordering::Relaxed) == FenceMode::Membarrier as u32
}

/// [`notify`] with the fence mode already read ([`light`]).
#[inline(always)]
pub(crate) fn notify_light(line: &WakeLine, light: bool) {
    on(line).notify(|| fence::light(light));
}

/// After consumer entry `e` changed so that its downstreams can act (a commit or any other
/// move of its position; a required one released: they pass it; a durable one freed: they
/// find it lost; one taken over and moved ahead to the head: they may deliver up to it),
/// wake the consumers parked for it: on the consumer line, on `e`'s own line, and for a
/// worker group member's change on the line of its group, entry `group` (the group's floor
/// reads its members), see "A downstream's line". The change (the entry's CAS, or the
/// store of its position) is the store (1) of the protocol: a downstream's last look
/// before it sleeps reads its upstreams' positions and entries (`Consumer::has_pending`). `registered` as in
/// [`notify`]; one fence and a load per line when nobody parks (`e`'s line is the line of
/// its `next`, which a commit has just written).
pub(crate) fn notify_downstreams(
    seg: &crate::segment::Segment,
    e: &shmring_layout::ConsumerEntry,
    group: Option<u32>,
    registered: bool,
) {
    let light = light(seg.header(), registered);
    notify_both(
        &on(&seg.lines().consumer_wake.value),
        &on(&e.hot.downstream),
        || fence::light(light),
    );
    if let Some(group) = group.and_then(|g| seg.consumer(g)) {
        // After the fence above.
        on(&group.hot.downstream).wake_if_counted();
    }
}

/// Wake every consumer parked on the ring: the consumer line unconditionally, and each
/// entry's line where someone is counted (as [`notify_consumers`] does). For a lifecycle
/// change, a repair, a death: anything a consumer on any line may wait for.
///
/// The consumer line is not looked at again after its wake: a consumer it woke that found
/// nothing and parked again is counted by then, and a second wake would only wake it for
/// nothing. It read the moved word before its last look, so that look saw the store this
/// wake follows.
#[cold]
pub(crate) fn wake_consumers(seg: &crate::segment::Segment) {
    wake(&seg.lines().consumer_wake.value);
    // (2) for the entries' lines.
    std::sync::atomic::fence(Ordering::SeqCst);
    notify_entry_lines(seg);
}

/// Wake the consumers parked behind consumer entry `e`, unconditionally: on its line, and
/// for a member's entry on its group's line. For a holder seen dead: one killed inside
/// its own wake, after the reset (r) and before the bump (4), left those parkers asleep
/// with nobody counted, so a wake that looks at the count first ([`notify_consumers`])
/// would pass them by.
#[cold]
pub(crate) fn wake_behind(seg: &crate::segment::Segment, e: &shmring_layout::ConsumerEntry) {
    wake(&e.hot.downstream);
    // Relaxed: a dead holder's entry, written before its ACTIVE CAS; a stale reading of an
    // entry taken since only wakes a line for nothing.
    if e.hot.flags.load(Ordering::Relaxed) & shmring_layout::consumer_flags::MEMBER != 0 {
        let tag = e.cold.group.load(Ordering::Relaxed);
        if let Some(group) = tag.checked_sub(1).and_then(|g| seg.consumer(g)) {
            wake(&group.hot.downstream);
        }
    }
}

/// After a store that may let any consumer parked on the ring act ((1) done): wake every
/// line where someone is counted, the consumer line and each entry's, after a full fence
/// (the waker's half of the pair, whatever this process's fence mode). A load per line
/// when nobody parks.
#[cold]
pub(crate) fn notify_consumers(seg: &crate::segment::Segment) {
    // (2)
    std::sync::atomic::fence(Ordering::SeqCst);
    on(&seg.lines().consumer_wake.value).wake_if_counted();
    notify_entry_lines(seg);
}

/// (3) to (5) on every consumer entry's line, after the caller's fence (2).
fn notify_entry_lines(seg: &crate::segment::Segment) {
    for e in (0..seg.geometry().max_consumers).map_while(|i| seg.consumer(i)) {
        on(&e.hot.downstream).wake_if_counted();
    }
}

/// [`Wake::notify`] on two lines after one store (1), with one fence (2) for both: each
/// line's (3) is a load after it.
#[inline(always)]
pub fn notify_both<W: Word, F: Futex>(
    a: &Wake<'_, W, F>,
    b: &Wake<'_, W, F>,
    light: impl FnOnce(),
) {
    // (2)
    light();
    a.wake_if_counted();
    b.wake_if_counted();
}

/// After this process changed consumer entry `e` of `seg` to state `to` (its CAS done):
/// every consumer line ([`notify_consumers`]: a consumer parked on another upstream's line
/// finds this one passed or lost at once) if the change lets the consumers that run after
/// it act (`table::consumer::lets_downstreams_act`), and the producers parked for room if `to`
/// gates nothing (the entry may have been the one they waited for: freed, or released).
/// The CAS is the store (1) of the producers' protocol: a producer's last look before it
/// sleeps scans the entries (`gating::refresh`).
pub(crate) fn entry_changed(
    seg: &crate::segment::Segment,
    e: &shmring_layout::ConsumerEntry,
    to: u32,
    registered: bool,
) {
    // Relaxed: each holder writes them before its CAS to ACTIVE, which the caller's CAS
    // read. A holder that took the entry since can only make this wake for nothing, or
    // leave a downstream to its 50 ms net.
    let flags = e.hot.flags.load(Ordering::Relaxed);
    if crate::table::consumer::lets_downstreams_act(to, flags) {
        notify_consumers(seg);
    }
    if !shmring_layout::consumer_state::gates(to) {
        notify(&seg.lines().producer_wake.value, seg.header(), registered);
    }
}

/// Write this process's fence mode into `header` if it is weaker than the ring's (the
/// weakest of every process that attached or waits wins), as an attach does: for a
/// process that waits on a ring without attaching (`Ring::wait_published`, a `WakeSet`).
/// A process without membarrier parks with a plain fence, so the publishers of the ring
/// must pay the full fence too from then on. A load, and a write only the first time.
pub(crate) fn raise_fence_mode(header: &Header) {
    let mode = crate::fence::mode() as u32;
    // Relaxed: a word that only rises, read by producers on every claim; the locked write
    // only where it rises, so that waits do not take the line from them.
    if header.fence_mode.load(Ordering::Relaxed) < mode {
        header.fence_mode.fetch_max(mode, Ordering::Relaxed);
    }
}

/// Wake every parker on `line`, unconditionally.
#[cold]
pub(crate) fn wake(line: &WakeLine) {
    on(line).wake();
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

    #[test]
    fn a_raise_nobody_takes_back_costs_one_wake_then_nothing() {
        let line = WakeLine::default();
        let w = on(&line);
        let _dead = w.raise();
        let live = w.raise();
        w.lower(live);
        assert_eq!(waiters::count(line.waiters.load(Ordering::Relaxed)), 1);
        w.notify(|| {});
        assert_eq!(line.word.load(Ordering::Relaxed), 1, "one wake");
        assert_eq!(waiters::count(line.waiters.load(Ordering::Relaxed)), 0);
        w.notify(|| {});
        assert_eq!(line.word.load(Ordering::Relaxed), 1, "then none");
    }

    #[test]
    fn a_raise_dropped_by_a_reset_is_not_taken_back_from_a_later_parker() {
        let line = WakeLine::default();
        let w = on(&line);
        let early = w.raise();
        assert!(!w.moved(0, early));
        w.wake();
        assert!(w.moved(0, early), "the reset and the bump are seen");
        let later = w.raise();
        w.lower(early);
        assert_eq!(
            waiters::count(line.waiters.load(Ordering::Relaxed)),
            1,
            "the later raise stays counted"
        );
        w.lower(later);
        assert_eq!(waiters::count(line.waiters.load(Ordering::Relaxed)), 0);
    }
}
