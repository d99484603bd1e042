//! The bounded poll of a condition: how a test waits for something another process does
//! when there is no line to read. The condition decides; the sleeps between looks are a
//! watchdog's pace, not a synchronisation.

use std::thread;
use std::time::{Duration, Instant};

use crate::WAIT;

/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(1);

/// Wait until `f()` returns `Some`, looking every millisecond, for at most [`WAIT`];
/// returns the value, or panics with `what` when the deadline passes.
pub fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        thread::sleep(POLL);
    }
}

/// Wait until `cond()` holds (see [`wait_until`]).
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    wait_until(what, || cond().then_some(()))
}

/// Poll `c` until its position reaches `head` (for at most [`WAIT`]), collecting each event
/// as (sequence, the little-endian `u64` in its first 8 bytes).
pub fn read_values_to(c: &mut shmring::Consumer, head: u64, got: &mut Vec<(u64, u64)>) {
    let deadline = Instant::now() + WAIT;
    while c.next_sequence() < head {
        assert!(
            Instant::now() < deadline,
            "consumer stuck at {} short of {head}; got {got:?}",
            c.next_sequence()
        );
        c.poll_once(|ev| got.push((ev.sequence(), first_u64(ev.bytes()))))
            .expect("poll");
    }
}

/// The little-endian `u64` in the first 8 bytes of `bytes` (0-padded if shorter).
pub fn first_u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = bytes.len().min(8);
    b[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(b)
}
