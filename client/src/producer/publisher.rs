//! [`Publisher`]: a producer's position held by value for a loop of publishes.
//!
//! The compiler cannot keep a field of a `&mut` handle in a register across the atomic
//! stores of a publish. [`Producer::publish`] on a fixed-size ring therefore takes its
//! position from the claim word in its common case (`Producer::position`: the claim store
//! writes it there anyway), which costs a load and a test of whether that case is armed per
//! event, where storing it to the handle would cost a fourth store per event behind the
//! claim line's (ARCHITECTURE.md, "Fixed-size rings: the position in a register").
//! [`Producer::publisher`] lends a closure a [`Publisher`] that holds the position as a
//! plain value: once the closure is inlined into the caller's loop (it is generic, so it
//! normally is) no out-of-line call receives the publisher, and the position stays in a
//! register, with neither the load nor the test. The position goes back to the handle when
//! the closure returns or unwinds; the closure only borrows the publisher, for a lifetime of
//! the call alone, so it cannot move, swap or leak it.
//!
//! Every publish through it is a [`Producer::publish`]: one event, visible to consumers on
//! its own, the same sequence, the same refusals and errors, the same wake-ups. A fixed-size
//! ring's common case (room under the cached gate, the process registered for membarrier,
//! the ring's fence mode membarrier, an event of the ring's size, or on a ring of sized
//! events of at most its bound) runs inline with the position from the publisher,
//! lifecycle changes included (the claim's (p1) to (p5) of `line`); anything else on that
//! ring (the first publish, a refresh of the cached gate or a wait for room, a leaked claim
//! guard, a raised fence mode, a wrong size or a longer event) hands the
//! position to the handle and publishes through it, out of line. On a ring of stamped slots
//! (either producer mode) the handle keeps its position throughout and every publish is the
//! handle's own, inline: a publisher there is the handle's `publish`, no faster, within a
//! few instructions of it.

use super::*;

/// Events up to this size are copied before [`Publisher::publish`] hands them to its
/// out-of-line path (see `Publisher::through_handle`).
const SMALL_EVENT: usize = 64;

/// A publisher's position while the handle holds it (inside the handle's publish): a
/// publisher that sees it takes the handle's position, and does not write its own back.
const HANDED: u64 = u64::MAX;

impl Producer {
    /// Run `f` with a [`Publisher`] of this producer: on a fixed-size ring, a loop of
    /// publishes through it keeps the producer's position in a register instead of loading
    /// it from the claim word per event (ARCHITECTURE.md, "Fixed-size rings: the position in
    /// a register", has the measurements). Each publish is a [`Producer::publish`]; on a ring
    /// of stamped slots it is exactly that call. Returns what `f` returns.
    ///
    /// ```
    /// use shmring::{ConsumerOptions, ProducerMode, PublishError, Ring, RingConfig};
    /// # let ns = format!("doc-publisher-{}", std::process::id());
    /// let config = RingConfig {
    ///     capacity: 64,
    ///     producer_mode: ProducerMode::Single,
    ///     event_size: Some(8),
    ///     ..RingConfig::default()
    /// };
    /// let ring = Ring::create(&ns, "ticks", &config)?;
    /// let mut consumer = ring.consumer(ConsumerOptions::anonymous())?;
    /// let mut producer = ring.producer()?;
    /// producer.publisher(|p| -> Result<(), PublishError> {
    ///     for tick in 0u64..10 {
    ///         p.publish(&tick.to_ne_bytes())?;
    ///     }
    ///     Ok(())
    /// })?;
    /// let mut sum = 0;
    /// consumer.poll_once(|ev| sum += ev.read::<u64>().unwrap_or(0))?;
    /// assert_eq!(sum, 45);
    /// # drop((consumer, producer));
    /// Ring::remove(&ns, "ticks")?;
    /// # std::fs::remove_dir(shmring::names::namespace_dir(&ns)?).ok();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    pub fn publisher<R>(&mut self, f: impl FnOnce(&mut Publisher<'_>) -> R) -> R {
        // On a ring of stamped slots the handle keeps its position: every publish is the
        // handle's own.
        let next = if self.fixed { self.position() } else { HANDED };
        let mut publisher = Publisher {
            producer: self,
            next,
        };
        f(&mut publisher)
    }
}

/// A [`Producer`] lent to a loop of publishes, its position held by value (see
/// [`Producer::publisher`]). Only [`Producer::publisher`] makes one, and it ends with the
/// closure it was lent to.
///
/// The closure borrows it for the call alone: it cannot keep it, nor swap it with another
/// producer's (each would leave a handle with the other's position):
///
/// ```compile_fail
/// fn swap(a: &mut shmring::Producer, b: &mut shmring::Producer) {
///     a.publisher(|pa| b.publisher(|pb| std::mem::swap(pa, pb)));
/// }
/// ```
///
/// ```compile_fail
/// fn keep(a: &mut shmring::Producer) {
///     let mut kept = None;
///     a.publisher(|p| kept = Some(p));
///     drop(kept);
/// }
/// ```
pub struct Publisher<'p> {
    producer: &'p mut Producer,
    /// The producer's position: the handle's `next` is stale while this publisher lives,
    /// and gets this back when it is dropped and before each publish it hands to the handle.
    /// [`HANDED`] while the handle publishes (if that unwinds, the handle's is the one), and
    /// always on a ring of stamped slots, where the handle keeps its position.
    next: u64,
}

impl Publisher<'_> {
    /// As [`Producer::publish`]: publish one event, waiting for room. Returns its sequence.
    #[inline(always)]
    pub fn publish(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        let seq = self.next;
        let p = &mut *self.producer;
        if !p.fixed {
            // Stamped slots (either producer mode): the handle holds the position (`HANDED`
            // from the start), and its publish is the whole path, inline. Out of line with
            // a copy of the event, as below, it cost 52 more instructions per event than
            // `Producer::publish`; inline, 6 (`per_event` under callgrind).
            return p.publish(bytes);
        }
        // The common case of `Producer::publish_fixed`, with the position from this value
        // (`HANDED` never passes the bound).
        if p.fixed_common_case(seq, bytes.len()) && p.publish_fixed_at::<true>(seq, bytes)? {
            self.next = seq + 1;
            return Ok(seq);
        }
        self.through_handle(bytes)
    }

    /// As [`Producer::publish_value`].
    #[inline(always)]
    pub fn publish_value<T: bytemuck::NoUninit>(&mut self, value: &T) -> Result<u64, PublishError> {
        self.publish(bytemuck::bytes_of(value))
    }

    /// Anything but the common case: the handle publishes at this publisher's position, and
    /// its position comes back.
    #[inline(always)]
    fn through_handle(&mut self, bytes: &[u8]) -> Result<u64, PublishError> {
        // A small event is copied here, on this path only, and the copy goes out of line: a
        // caller's event built in a register (`&x.to_ne_bytes()`) then never needs an
        // address, where handing it over itself would store it to the stack on every
        // publish, the common case included.
        let mut copy = [0u8; SMALL_EVENT];
        let bytes = match copy.get_mut(..bytes.len()) {
            Some(c) => {
                c.copy_from_slice(bytes);
                &*c
            }
            None => bytes,
        };
        let next = std::mem::replace(&mut self.next, HANDED);
        let (r, next) = through_handle(self.producer, next, bytes);
        self.next = next;
        r
    }

    /// The producer's counters, as [`Producer::stats`] gives them.
    pub fn stats(&mut self) -> ProducerStats {
        self.give_back();
        self.producer.stats()
    }

    /// The handle's position from this publisher's (unless the handle holds it).
    fn give_back(&mut self) {
        if self.next != HANDED {
            self.producer.next = self.next;
        }
    }
}

/// [`Publisher::publish`] outside its common case, out of line: the handle publishes at
/// `next` (unless it is [`HANDED`]: an earlier handed publish unwound, and the handle's
/// position is the one); returns what it returned, and the handle's position after it. It
/// takes no reference to the publisher, whose position then stays a value in a register.
#[cold]
#[inline(never)]
fn through_handle(p: &mut Producer, next: u64, bytes: &[u8]) -> (Result<u64, PublishError>, u64) {
    if next != HANDED {
        p.next = next;
    }
    let r = p.publish(bytes);
    // `position`, not `next`: the handle's publish may have taken its common case, which
    // keeps the position in the cursor.
    (r, p.position())
}

impl Drop for Publisher<'_> {
    fn drop(&mut self) {
        // The position goes back to the handle: its next publish (or its detach, or its
        // counters) goes on from here.
        self.give_back();
    }
}
