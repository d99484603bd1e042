//! Seeing client deaths at once: a pidfd per client process, waited on with epoll.
//!
//! Each consumer and producer entry holds the pid and start time of its process. The
//! broker opens a pidfd on the pid, then re-reads the start time: if it differs, the pid
//! was reused and the entry's process is already gone (a pidfd opened before the check
//! cannot be redirected to another process later). The pidfd becomes readable when the
//! process exits, which wakes the sweep loop's `epoll_wait`. A live process whose pidfd
//! cannot be opened or added (out of file descriptors or memory, a kernel without
//! `pidfd_open`) is never taken for dead for that: it is looked at through `/proc` at every
//! sweep instead. Nothing here signals anyone: a pid read from shared memory is only ever
//! watched.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::event::epoll;
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use tracing::warn;

/// Epoll tokens below this are the daemon's own (signals).
pub const FIRST_WATCH_TOKEN: u64 = 16;

/// A client process: pid and start time.
pub type ProcKey = (u32, u64);

/// What the broker knows of a process.
enum Life {
    /// Alive, its pidfd in the epoll set: its exit wakes the sweep loop.
    Watched(OwnedFd),
    /// Alive when last looked at, but no pidfd could be opened or added (out of file
    /// descriptors or memory, a kernel without `pidfd_open`): looked at again through
    /// `/proc` at every sweep that asks, until a pidfd can be opened.
    Polled,
    /// Gone: it exited, or its pid now names another process.
    Gone,
}

struct Watch {
    life: Life,
    token: u64,
    /// Seen by the current sweep (unseen watches are dropped at its end).
    seen: bool,
}

/// Every watched process.
pub struct Watches {
    epoll: Arc<OwnedFd>,
    by_proc: HashMap<ProcKey, Watch>,
    by_token: HashMap<u64, ProcKey>,
    next_token: u64,
}

impl Watches {
    /// Watches registered in `epoll`.
    pub fn new(epoll: Arc<OwnedFd>) -> Self {
        Self {
            epoll,
            by_proc: HashMap::new(),
            by_token: HashMap::new(),
            next_token: FIRST_WATCH_TOKEN,
        }
    }

    /// Whether process `(pid, start)` is alive, watching it from now on if it is. A process
    /// that cannot be watched is never taken for dead for that: it is looked at through
    /// `/proc` instead, at every call, until it can be watched.
    pub fn alive(&mut self, pid: u32, start: u64) -> bool {
        if pid == 0 {
            return false;
        }
        let key = (pid, start);
        let known = match self.by_proc.get_mut(&key) {
            Some(w) => {
                w.seen = true;
                match w.life {
                    Life::Watched(_) => return true,
                    Life::Gone => return false,
                    Life::Polled => Some(w.token),
                }
            }
            None => None,
        };
        let token = known.unwrap_or_else(|| {
            let t = self.next_token;
            self.next_token += 1;
            t
        });
        let life = self.open(pid, start, token, known.is_none());
        let alive = !matches!(life, Life::Gone);
        if matches!(life, Life::Watched(_)) {
            self.by_token.insert(token, key);
        }
        self.by_proc.insert(
            key,
            Watch {
                life,
                token,
                seen: true,
            },
        );
        alive
    }

    /// A pidfd on `pid` in the epoll set if it is still the process that started at
    /// `start`; `Polled` if it is, but it cannot be watched (logged the `first` time).
    fn open(&self, pid: u32, start: u64, token: u64, first: bool) -> Life {
        let Ok(raw) = i32::try_from(pid) else {
            return Life::Gone;
        };
        let Some(pid_) = Pid::from_raw(raw) else {
            return Life::Gone;
        };
        let unwatched = |what: &str, e: rustix::io::Errno| {
            // Whether it lives is still known: its start time, through /proc.
            if shmring::process::is_alive(pid, start) {
                if first {
                    warn!(
                    pid,
                    "cannot watch a client process ({what}: {e}); looking at it at every sweep instead, so its exit is seen at a sweep, not at once"
                    );
                }
                Life::Polled
            } else {
                Life::Gone
            }
        };
        let fd = match pidfd_open(pid_, PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return Life::Gone,
            Err(e) => return unwatched("pidfd_open", e),
        };
        // Re-check after opening: the pid may have been reused between the entry's write
        // and our open. From here on the pidfd pins this process. (A process that `/proc`
        // hides counts as the one named: see `process::is_alive`.)
        if !shmring::process::is_alive(pid, start) {
            return Life::Gone;
        }
        // Already exited (a zombie keeps its /proc entry): the pidfd is readable now.
        let mut pfd = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match rustix::event::poll(&mut pfd, Some(&zero)) {
            Ok(0) => {}
            Ok(_) => return Life::Gone,
            Err(e) => return unwatched("poll", e),
        }
        match epoll::add(
            &*self.epoll,
            &fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN,
        ) {
            Ok(()) => Life::Watched(fd),
            Err(e) => unwatched("epoll_ctl", e),
        }
    }

    /// The process behind `token` exited: forget its pidfd. Returns it, if known.
    pub fn exited(&mut self, token: u64) -> Option<ProcKey> {
        let key = self.by_token.remove(&token)?;
        if let Some(w) = self.by_proc.get_mut(&key) {
            if let Life::Watched(fd) = std::mem::replace(&mut w.life, Life::Gone) {
                let _ = epoll::delete(&*self.epoll, &fd);
            }
        }
        Some(key)
    }

    /// Start a sweep: every watch is unseen until an entry asks about it.
    pub fn begin_sweep(&mut self) {
        for w in self.by_proc.values_mut() {
            w.seen = false;
        }
    }

    /// End a sweep: drop the watches no entry asked about.
    pub fn end_sweep(&mut self) {
        let by_token = &mut self.by_token;
        self.by_proc.retain(|_, w| {
            if !w.seen {
                by_token.remove(&w.token);
            }
            w.seen
        });
    }

    /// Processes watched right now (pidfds held).
    pub fn live_count(&self) -> usize {
        self.by_proc
            .values()
            .filter(|w| matches!(w.life, Life::Watched(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> ProcKey {
        let me = shmring::process::current();
        (me.pid, me.start_time)
    }

    /// A process the broker cannot watch (here: the epoll set refuses every fd, as it would
    /// for want of memory; out of file descriptors `pidfd_open` does) is still alive: a
    /// death reported for it would release or stop-ring a live consumer. It is looked at
    /// through `/proc`, and its exit is seen at the next look.
    #[test]
    fn a_process_that_cannot_be_watched_is_not_taken_for_dead() {
        let not_epoll: OwnedFd = std::fs::File::open("/dev/null").expect("/dev/null").into();
        let mut w = Watches::new(Arc::new(not_epoll));
        let (pid, start) = me();
        assert!(w.alive(pid, start), "this process lives");
        assert!(w.alive(pid, start), "and still does at the next sweep");
        assert_eq!(w.live_count(), 0, "no pidfd is held");
        assert!(
            !w.alive(pid, start + 1),
            "another start time is another process"
        );

        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let cpid = child.id();
        let cstart = shmring::process::start_time(cpid);
        let _ = child.wait();
        if let Some(cstart) = cstart {
            assert!(!w.alive(cpid, cstart), "an exited process is dead");
        }
    }

    #[test]
    fn a_watched_process_is_alive_until_its_pidfd_says_it_exited() {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll");
        let mut w = Watches::new(Arc::new(epoll));
        let (pid, start) = me();
        assert!(w.alive(pid, start));
        assert_eq!(w.live_count(), 1);
        let token = w.by_proc[&(pid, start)].token;
        assert_eq!(w.exited(token), Some((pid, start)));
        assert!(!w.alive(pid, start), "reported exited");
        assert_eq!(w.live_count(), 0);
    }
}
