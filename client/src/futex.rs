//! Shared futexes on 32-bit words in the segment.
//!
//! Never `FUTEX_PRIVATE_FLAG`: a private futex is keyed by the process's address space, so a
//! wake from another process would never reach a waiter. Shared futexes are keyed by the
//! mapped file and offset, which every process mapping the segment agrees on.
//!
//! `futex_waitv` (one sleep on many words, for `WakeSet`) needs Linux 5.16, and a seccomp
//! profile may refuse it where the kernel has it. [`waitv`] tells a refusal apart from a
//! wake-up and remembers, for the whole process, a refusal that the next call would meet
//! again ([`waitv_available`]); the caller then waits another way.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::thread::futex;
use rustix::time::{ClockId, Timespec};

/// Why a futex wait returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// Woken (or the word had already changed, or a signal interrupted: all mean "look").
    Woken,
    /// The timeout passed.
    TimedOut,
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// Sleep while `*word == expected`, at most `timeout`.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Woke {
    match futex::wait(
        word,
        futex::Flags::empty(),
        expected,
        Some(&timespec(timeout)),
    ) {
        Err(Errno::TIMEDOUT) => Woke::TimedOut,
        // Ok: woken. AGAIN: the word moved before we slept. INTR: a signal. Anything else
        // (EFAULT cannot happen on a live mapping): look again rather than fail.
        _ => Woke::Woken,
    }
}

/// Wake every waiter on `word`. Returns how many were woken.
pub(crate) fn wake_all(word: &AtomicU32) -> usize {
    futex::wake(word, futex::Flags::empty(), i32::MAX as u32).unwrap_or(0)
}

/// Most words one `waitv` can wait on (the kernel's FUTEX_WAITV_MAX).
pub(crate) const WAITV_MAX: usize = 128;

/// Set once `futex_waitv` was refused in a way every later call would meet again.
static WAITV_REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether `futex_waitv` may work in this process: false once [`waitv`] met a lasting
/// refusal.
pub(crate) fn waitv_available() -> bool {
    // Relaxed: pairs with the Relaxed store in `waitv`; the flag publishes no other data,
    // and a thread that reads it late only makes one more call that the kernel refuses.
    !WAITV_REFUSED.load(Ordering::Relaxed)
}

/// Sleep while every `(word, expected)` holds, until `deadline` (monotonic clock).
///
/// `Err` with the errno when the kernel refused the call, which is no wake-up: `NOSYS` (a
/// kernel before 5.16, or a seccomp filter), `PERM` or another errno a seccomp profile
/// names, `INVAL`, `FAULT` (which a well-formed call on a live mapping never meets: a ring
/// file truncated under its mapping, say), or `NOMEM`. A refusal every later call would
/// meet too ([`lasting`]) is remembered for the process: [`waitv_available`] says false
/// from then on. `FAULT` and `NOMEM` concern this call: the caller waits another way this
/// time only.
pub(crate) fn waitv(words: &[(&AtomicU32, u32)], deadline: Instant) -> Result<Woke, Errno> {
    debug_assert!(!words.is_empty() && words.len() <= WAITV_MAX);
    let mut waits = [futex::Wait::new(); WAITV_MAX];
    for (w, (word, expected)) in waits.iter_mut().zip(words) {
        w.val = u64::from(*expected);
        w.uaddr = futex::WaitPtr::new(word.as_ptr().cast());
        w.flags = futex::WaitFlags::SIZE_U32;
    }
    // futex_waitv takes an absolute time on the given clock; `Instant` is CLOCK_MONOTONIC.
    let now = rustix::time::clock_gettime(ClockId::Monotonic);
    let left = deadline.saturating_duration_since(Instant::now());
    let abs_ns =
        (now.tv_sec as i128 * 1_000_000_000 + now.tv_nsec as i128) + left.as_nanos() as i128;
    let abs = Timespec {
        tv_sec: (abs_ns / 1_000_000_000) as i64,
        tv_nsec: (abs_ns % 1_000_000_000) as i64,
    };
    match futex::waitv(
        &waits[..words.len()],
        futex::WaitvFlags::empty(),
        Some(&abs),
        ClockId::Monotonic,
    ) {
        // Ok: woken. AGAIN: a word moved before we slept. INTR: a signal. All mean "look".
        Ok(_) | Err(Errno::AGAIN) | Err(Errno::INTR) => Ok(Woke::Woken),
        Err(Errno::TIMEDOUT) => Ok(Woke::TimedOut),
        Err(e) => {
            if lasting(e) {
                // Relaxed: see `waitv_available`.
                WAITV_REFUSED.store(true, Ordering::Relaxed);
            }
            Err(e)
        }
    }
}

/// Whether `futex_waitv`'s refusal `e` lasts: every later call of the process would meet
/// it (no such call; a seccomp filter, which answers `PERM`, `NOSYS` or whatever errno
/// its profile names; arguments this kernel does not take, `INVAL`). Not `FAULT` (a ring
/// truncated under its mapping) and `NOMEM`, which concern this call's words or memory:
/// the next call, on other words or with memory, may go through.
fn lasting(e: Errno) -> bool {
    !matches!(e, Errno::FAULT | Errno::NOMEM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_or_forbidden_call_switches_the_process_to_the_fallback() {
        // No such call, seccomp filters (whatever errno their profile names), and
        // arguments this kernel does not take.
        for e in [Errno::NOSYS, Errno::PERM, Errno::ACCESS, Errno::INVAL] {
            assert!(lasting(e), "{e}");
        }
        // This call's words (a ring truncated under its mapping) or memory.
        for e in [Errno::FAULT, Errno::NOMEM] {
            assert!(!lasting(e), "{e}");
        }
    }
}
