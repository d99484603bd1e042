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
