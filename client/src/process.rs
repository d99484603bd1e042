//! Process identity: pid plus start time, so that a reused pid is never mistaken for the
//! process that wrote an entry. Nothing here signals a process (signal 0 only asks the
//! kernel whether a pid is in use).

use std::sync::atomic::{AtomicU64, Ordering};

use rustix::io::Errno;
use rustix::process::Pid;

/// Pid and start time of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// The pid.
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start_time: u64,
}

/// What can be learnt about a pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// No process has the pid, or the one that has it has exited (a zombie waiting to be
    /// reaped, or a dead task, is not running anything).
    Gone,
    /// A running process, which started at this time.
    Started(u64),
    /// A process has the pid, but `/proc` does not show it to this one: `/proc` mounted with
    /// `hidepid` hides other users' processes (`hidepid=2` as if absent, `hidepid=1` with
    /// its files unreadable). Its start time cannot be read, so it cannot be told apart from
    /// the process an entry names; nor can its state, so a hidden zombie counts too, until
    /// its parent reaps it.
    Hidden,
}

fn look(pid: u32) -> Seen {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => started(pid, &stat).map_or(Seen::Gone, Seen::Started),
        // Unreadable or absent: the kernel says whether the pid is in use, whatever `/proc`
        // shows (a process that ends in between is gone either way).
        Err(_) if in_use(pid) => Seen::Hidden,
        Err(_) => Seen::Gone,
    }
}

/// Whether any process (a zombie included) has pid `pid`, asked of the kernel with signal 0:
/// only "no such process" says it is free. Any other refusal (permission, a security
/// module, a seccomp filter) leaves it in use: a live process is never judged dead.
fn in_use(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e != Errno::SRCH,
    }
}

/// The start time in a readable `stat`, or `None` if the process has exited.
fn started(pid: u32, stat: &str) -> Option<u64> {
    let mut fields = fields_after_name(stat)?;
    // Field 3 is the state; Z (zombie) and X (dead) mean the main thread has exited. The
    // process has exited only if no other thread runs either: a program may end its main
    // thread alone (`pthread_exit`) and go on in the others.
    if matches!(fields.next()?, "Z" | "X") && !another_thread_runs(pid) {
        return None;
    }
    // Start time is field 22, i.e. the 19th after the state.
    fields.nth(18)?.parse().ok()
}

/// Read a process's start time, or `None` if there is no such process, it has exited, or
/// `/proc` hides it (see [`exists`] and [`is_alive`], which tell those apart).
pub fn start_time(pid: u32) -> Option<u64> {
    match look(pid) {
        Seen::Started(start) => Some(start),
        Seen::Gone | Seen::Hidden => None,
    }
}

/// Whether a running process has pid `pid`, including one that `/proc` hides from this
/// process, which may also be a zombie not yet reaped (0: none).
pub fn exists(pid: u32) -> bool {
    pid != 0 && look(pid) != Seen::Gone
}

/// The fields of a `stat` file after the command name (field 2), which may hold spaces and
/// parentheses: counted from the last ')'.
fn fields_after_name(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace())
}

/// Whether a thread of `pid` is neither a zombie nor dead (`/proc/PID/task/*/stat`).
fn another_thread_runs(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| {
                let state = fields_after_name(&stat)?.next()?;
                Some(!matches!(state, "Z" | "X"))
            })
            .unwrap_or(false)
    })
}

/// Whether the process that wrote `(pid, start_time)` still runs.
///
/// A process that `/proc` hides (mounted with `hidepid`) counts as alive while its pid is in
/// use: its start time cannot be checked, and taking over a live process's entry or
/// transition breaks what that process is doing, where holding a dead one's only waits
/// (until the process reusing the pid exits).
pub fn is_alive(pid: u32, start: u64) -> bool {
    pid != 0
        && match look(pid) {
            Seen::Started(s) => s == start,
            Seen::Hidden => true,
            Seen::Gone => false,
        }
}

/// A `CLOCK_BOOTTIME` reading ([`crate::boottime_ns`]) in the unit of a process's start
/// time (clock ticks since boot, at the kernel's `USER_HZ`), rounded down as the kernel
/// rounds a start time; `None` where the tick rate is not known. A process whose start
/// time is above `boot_ticks(t)` started after `t`: at least one tick past it. (A kernel
/// that counts start times on the monotonic clock, which stops during suspend, gives start
/// times at or below the boot clock's, so the conclusion holds there too.)
///
/// The rate comes from this process's auxiliary vector (`AT_CLKTCK`), read through
/// `/proc/self/auxv` on kernels before 6.4: where neither can be read it panics, so
/// [`started_after`] asks only once it has read a start time from `/proc`.
pub fn boot_ticks(boot_ns: u64) -> Option<u64> {
    ns_to_ticks(boot_ns, rustix::param::clock_ticks_per_second())
}

/// `boot_ns` in ticks of `hz` per second, rounded down (`None` for a rate of 0).
fn ns_to_ticks(boot_ns: u64, hz: u64) -> Option<u64> {
    if hz == 0 {
        return None;
    }
    let ticks = u128::from(boot_ns) * u128::from(hz) / 1_000_000_000;
    Some(u64::try_from(ticks).unwrap_or(u64::MAX))
}

/// Whether the process that has pid `pid` now started after `boot_ns` (a
/// [`crate::boottime_ns`] reading): false when no running process has it, `/proc` hides
/// it, or the tick rate its start time counts in is not known. The rate is read only once
/// a start time was (where `/proc` is readable, so is this process's auxiliary vector).
pub fn started_after(pid: u32, boot_ns: u64) -> bool {
    if pid == 0 {
        return false;
    }
    match look(pid) {
        Seen::Started(start) => is_after(start, boot_ticks(boot_ns)),
        Seen::Gone | Seen::Hidden => false,
    }
}

/// Whether a start time of `start` ticks is after the reading that was `ticks` ticks
/// rounded down: at least one tick past it (the same tick may be either side).
fn is_after(start: u64, ticks: Option<u64>) -> bool {
    ticks.is_some_and(|t| start > t)
}

/// This process's pid namespace: the inode of `/proc/thread-self/ns/pid` (the calling
/// thread's, as `/proc/self` is the main thread's, which may have exited), or 0 where it
/// cannot be read (no `/proc`). A process keeps its pid namespace for life; its children
/// may be in another one.
pub fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/pid").map_or(0, |m| m.ino())
}

// The pid the cache was filled for, and its start time: recomputed after fork.
static CACHED_PID: AtomicU64 = AtomicU64::new(0);
static CACHED_START: AtomicU64 = AtomicU64::new(0);

/// This process.
pub fn current() -> ProcessId {
    let pid = std::process::id();
    // Acquire: pairs with the Release below, so the start time read is the one stored.
    if CACHED_PID.load(Ordering::Acquire) == u64::from(pid) {
        return ProcessId {
            pid,
            start_time: CACHED_START.load(Ordering::Relaxed),
        };
    }
    let start_time = start_time(pid).unwrap_or(0);
    CACHED_START.store(start_time, Ordering::Relaxed);
    CACHED_PID.store(u64::from(pid), Ordering::Release);
    ProcessId { pid, start_time }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_time_is_after_a_reading_only_from_the_next_tick_on() {
        // At 100 ticks per second: 9.999999 ms is tick 0, 10 ms tick 1.
        assert_eq!(ns_to_ticks(9_999_999, 100), Some(0));
        assert_eq!(ns_to_ticks(10_000_000, 100), Some(1));
        assert_eq!(ns_to_ticks(u64::MAX, 1_000_000_000), Some(u64::MAX));
        assert_eq!(ns_to_ticks(5, 0), None, "no rate: no answer");
        // A reading in tick 7: a process started in tick 7 may have run before it.
        let t = ns_to_ticks(75_000_000, 100);
        assert!(!is_after(7, t));
        assert!(is_after(8, t));
        assert!(!is_after(8, None));
    }

    #[test]
    fn self_is_alive_and_wrong_start_is_not() {
        let me = current();
        assert!(me.start_time > 0);
        assert!(is_alive(me.pid, me.start_time));
        assert!(!is_alive(me.pid, me.start_time + 1));
        assert!(!is_alive(0, 0));
    }

    #[test]
    fn a_zombie_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: the child is a zombie once it exits. Wait for that state through
        // /proc (bounded), without reaping it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
        {
            assert!(std::time::Instant::now() < deadline, "child never exited");
            std::thread::yield_now();
        }
        assert_eq!(start_time(pid), None);
        assert!(!exists(pid), "a zombie counts as a running process");
        child.wait().unwrap();
        assert!(!exists(pid), "a reaped child still exists");
    }
}
