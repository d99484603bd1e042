//! What the kernel says about a child process: the CPU time it consumed, and the system call
//! a thread of it is blocked in. Used by the parking tests to check that a parked process
//! burns nothing, and to know that a waiter is really asleep in the futex before waking it;
//! and, when a child does not answer in time, what each of its threads is doing.

use std::path::Path;
use std::thread;
use std::time::Duration;

/// `futex_waitv`, the same number on every architecture (it postdates the unified table).
pub const SYS_FUTEX_WAITV: i64 = 449;

/// `futex` on x86_64.
#[cfg(target_arch = "x86_64")]
pub const SYS_FUTEX: i64 = 202;
/// `futex` on aarch64 (the generic table).
#[cfg(target_arch = "aarch64")]
pub const SYS_FUTEX: i64 = 98;

/// CPU time consumed so far by every live thread of `pid`: the sum of the first field of
/// `/proc/<pid>/task/*/schedstat` (nanoseconds on the CPU, exact, unlike the 10 ms ticks of
/// `/proc/<pid>/stat`). Panics if the process is gone.
pub fn cpu_time(pid: u32) -> Duration {
    let dir = format!("/proc/{pid}/task");
    let tasks =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {dir}: {e} (process gone?)"));
    let mut ns = 0u64;
    for task in tasks.filter_map(Result::ok) {
        // A thread that exits between the listing and the read just drops out of the sum.
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("bad schedstat of {}: {text:?}", task.path().display()));
    }
    Duration::from_nanos(ns)
}

/// The CPU time `pid` consumes over `window`: read before and after, by the caller's thread,
/// which sleeps in between (the window is a measurement interval, not a synchronisation).
pub fn cpu_over(pid: u32, window: Duration) -> Duration {
    let before = cpu_time(pid);
    thread::sleep(window);
    cpu_time(pid).saturating_sub(before)
}

/// The system call thread `tid` of `pid` is blocked in (from `/proc/<pid>/task/<tid>/syscall`),
/// or `None` while it runs (or is not in a system call, or the file cannot be read).
pub fn blocked_in(pid: u32, tid: u32) -> Option<i64> {
    let path = format!("/proc/{pid}/task/{tid}/syscall");
    let text = std::fs::read_to_string(Path::new(&path)).ok()?;
    text.split_whitespace()
        .next()
        .and_then(|w| w.parse::<i64>().ok())
        .filter(|&nr| nr >= 0)
}

/// The state letter of `pid`'s main thread (`/proc/<pid>/stat`), `None` once the process is
/// gone. A main thread that exited, or was killed alone (seccomp's strict mode kills only
/// the thread), while another thread runs reads as a zombie (`Z`).
pub fn main_thread_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// Whether every thread of `pid` is stopped (`T` in `/proc/PID/task/*/stat`: a SIGSTOP
/// has reached them all); false once the process is gone.
pub fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            let rest = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
            rest.split_whitespace().next() == Some("T")
        })
    })
}

/// What the kernel says each thread of `pid` is doing (state, system call, wait channel,
/// kernel stack): attached to a failure when a child does not get ready in time.
pub fn diagnose(pid: u32) -> String {
    let mut out = String::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("pid {pid} is gone");
    };
    for t in tasks.flatten() {
        let p = t.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        out.push_str(&format!(
            "task {} ({}) state {:?} syscall {:?} wchan {:?}\n{}",
            t.file_name().to_string_lossy(),
            read("comm").trim(),
            state,
            read("syscall").trim(),
            read("wchan").trim(),
            read("stack")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventually;
    use std::time::Instant;

    #[test]
    fn this_process_has_cpu_time() {
        // Burn a little CPU so the sum is certainly non-zero.
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        assert!(cpu_time(std::process::id()) > Duration::ZERO);
    }

    #[test]
    fn a_parked_thread_is_seen_blocked_in_the_futex() {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let t = thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            // `thread::park` sleeps in `futex` on Linux.
            while !stop2.load(std::sync::atomic::Ordering::SeqCst) {
                thread::park();
            }
        });
        let tid = rx.recv().unwrap();
        eventually("the thread to block in futex", || {
            blocked_in(std::process::id(), tid) == Some(SYS_FUTEX)
        });
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        t.thread().unpark();
        t.join().unwrap();
    }
}
