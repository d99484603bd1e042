//! One lifecycle request at a time per ring (a drain holds the ring for its whole wait),
//! each waiting for its turn no longer than its own deadline: a request queued behind a
//! long drain gets a clear refusal by then, not an answer after the drain.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::protocol::Deadline;

/// A ring's lifecycle turn.
#[derive(Debug, Default)]
pub struct Serial {
    busy: Mutex<bool>,
    free: Condvar,
}

/// The turn, held until dropped.
#[derive(Debug)]
pub struct Turn<'a>(&'a Serial);

impl Serial {
    fn busy(&self) -> MutexGuard<'_, bool> {
        self.busy.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait for the turn until `deadline` (for ever without one), calling `waiting` first if
    /// another request holds it; `None`: the deadline passed while another request held it.
    pub fn turn(&self, deadline: Option<Deadline>, waiting: impl FnOnce()) -> Option<Turn<'_>> {
        let mut busy = self.busy();
        if *busy {
            waiting();
        }
        while *busy {
            busy = match deadline {
                None => self.free.wait(busy).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.left()?;
                    self.free
                        .wait_timeout(busy, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        *busy = true;
        Some(Turn(self))
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.busy() = false;
        self.0.free.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_turn_held_elsewhere_is_refused_by_the_deadline_and_given_once_free() {
        let serial = Serial::default();
        let held = serial.turn(None, || panic!("free")).expect("a free turn");
        let mut waited = false;
        assert!(serial
            .turn(Some(Deadline::after(Duration::from_millis(20))), || {
                waited = true
            })
            .is_none());
        assert!(waited, "told that it waits");
        drop(held);
        let again = serial.turn(Some(Deadline::after(Duration::from_millis(20))), || {
            panic!("free again")
        });
        assert!(again.is_some(), "free again once dropped");
        std::thread::scope(|s| {
            // Handed over to a waiter without a deadline when the holder drops it.
            let waiter = s.spawn(|| serial.turn(None, || {}).is_some());
            drop(again);
            assert!(waiter.join().expect("the waiter"));
        });
    }
}
