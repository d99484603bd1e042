//! The unblock clock: since when a ring has held a hole that a dead producer left.
//!
//! A producer killed between its claim and its stamp leaves a hole that stops every
//! consumer. A broker repairs it (`Ring::repair_dead_producer`) once the ring has had a
//! hole for its `unblock_timeout`. The clock lives in the segment
//! (`shmring_layout::Header::hole_seen_ns`), not in the broker: a broker that restarts,
//! however often, goes on counting from the first sighting instead of starting again.
//!
//! | word | meaning | changed by |
//! | --- | --- | --- |
//! | 0 | no unrepaired hole known | [`Ring::note_hole`]: CAS 0 -> now, by the first sweep that sees a dead producer holding a claim |
//! | t | a broker first saw one at `t` (`CLOCK_BOOTTIME` ns) | [`Ring::clear_hole`]: CAS t -> 0, by a sweep that found none left (repaired, or filled) |
//! | t in the future | corrupt | [`Ring::note_hole`]: CAS t -> now (the clock starts again) |
//!
//! The clock is the ring's, not one hole's: while any hole stays unrepaired, a dead
//! producer's claim found later is repaired as soon as the ring's clock has run the
//! timeout. A broker killed between a repair and the clear leaves the word set with no
//! hole behind it; the next sweep clears it, unless a new hole is there by then, which is
//! then repaired early (it is a dead producer's, so nothing live is lost).
//!
//! `CLOCK_BOOTTIME`: the same for every process of one boot, and it runs through suspend.
//! Segments live in `/dev/shm`, which does not outlive the boot.
//!
//! Orderings: the word is a timestamp, and nothing else is read on its account: every
//! access is Relaxed. Each change is one CAS conditional on the value it saw.

use std::sync::atomic::Ordering;

use crate::Ring;

/// `CLOCK_BOOTTIME` in nanoseconds, never 0 (0 means "no hole" in the clock word).
pub fn boottime_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
        .max(1)
}

impl Ring {
    /// The unblock clock: when a broker first saw the hole a dead producer left in this ring
    /// (`CLOCK_BOOTTIME` ns, see [`boottime_ns`]), or 0 while none is known.
    pub fn hole_seen_ns(&self) -> u64 {
        // Relaxed: a timestamp (see the module comment).
        self.seg.header().hole_seen_ns.load(Ordering::Relaxed)
    }

    /// A hole is seen at `now` (`CLOCK_BOOTTIME` ns): record `now` as the first sighting
    /// unless one is recorded already. Returns the first sighting. A recorded sighting
    /// later than `now` is corrupt and is replaced by `now`.
    pub fn note_hole(&self, now: u64) -> u64 {
        let now = now.max(1);
        let word = &self.seg.header().hole_seen_ns;
        // Relaxed: a timestamp (see the module comment).
        let mut seen = word.load(Ordering::Relaxed);
        loop {
            if seen != 0 && seen <= now {
                return seen;
            }
            match word.compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return now,
                Err(v) => seen = v,
            }
        }
    }

    /// No hole is left: clear the first sighting `seen` (what [`Ring::hole_seen_ns`] or
    /// [`Ring::note_hole`] returned), unless the word changed since. Returns whether it was
    /// cleared.
    pub fn clear_hole(&self, seen: u64) -> bool {
        seen != 0
            && self
                .seg
                .header()
                .hole_seen_ns
                .compare_exchange(seen, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Ring, RingConfig};

    /// The test's namespace, removed even when the test fails.
    use crate::test_ns::Ns;

    #[test]
    fn the_first_sighting_is_kept_until_cleared_and_a_future_one_is_replaced() {
        let ns = Ns(format!("unblock-{}", std::process::id()));
        let ring = Ring::create(&ns.0, "r", &RingConfig::default()).expect("create");
        assert_eq!(ring.hole_seen_ns(), 0);
        assert_eq!(ring.note_hole(100), 100);
        assert_eq!(ring.note_hole(200), 100, "a later sighting keeps the first");
        assert!(!ring.clear_hole(200), "only the value seen is cleared");
        assert!(ring.clear_hole(100));
        assert_eq!(ring.hole_seen_ns(), 0);
        assert_eq!(ring.note_hole(300), 300);
        assert_eq!(
            ring.note_hole(250),
            250,
            "a sighting in the future is corrupt"
        );
        assert!(ring.clear_hole(250));
    }
}
