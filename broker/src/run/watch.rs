//! Seeing client deaths at once: a pidfd per client process, waited on with epoll.
//!
//! Each consumer and producer entry holds the pid and start time of its process. The
//! broker opens a pidfd on the pid, then re-reads the start time: if it differs, the pid
//! was reused and the entry's process is already gone (a pidfd opened before the check
//! cannot be redirected to another process later). The pidfd becomes readable when the
//! process exits, which wakes the sweep loop's `epoll_wait`. Nothing here signals anyone:
//! a pid read from shared memory is only ever watched.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::event::epoll;
use rustix::process::{pidfd_open, Pid, PidfdFlags};

/// Epoll tokens below this are the daemon's own (signals).
pub const FIRST_WATCH_TOKEN: u64 = 16;

/// A client process: pid and start time.
pub type ProcKey = (u32, u64);

struct Watch {
    /// Open while the process lives; dropped (which also leaves the epoll set) at death.
    fd: Option<OwnedFd>,
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

    /// Whether process `(pid, start)` is alive, watching it from now on if it is.
    pub fn alive(&mut self, pid: u32, start: u64) -> bool {
        if pid == 0 {
            return false;
        }
        let key = (pid, start);
        if let Some(w) = self.by_proc.get_mut(&key) {
            w.seen = true;
            return w.fd.is_some();
        }
        let token = self.next_token;
        self.next_token += 1;
        let fd = self.open(pid, start, token);
        if fd.is_some() {
            self.by_token.insert(token, key);
        }
        let alive = fd.is_some();
        self.by_proc.insert(
            key,
            Watch {
                fd,
                token,
                seen: true,
            },
        );
        alive
    }

    /// A pidfd on `pid` if it is still the process that started at `start`, in the epoll set.
    fn open(&self, pid: u32, start: u64, token: u64) -> Option<OwnedFd> {
        let raw = i32::try_from(pid).ok()?;
        let fd = pidfd_open(Pid::from_raw(raw)?, PidfdFlags::empty()).ok()?;
        // Re-check after opening: the pid may have been reused between the entry's write
        // and our open. From here on the pidfd pins this process. (A process that `/proc`
        // hides counts as the one named: see `process::is_alive`.)
        if !shmring::process::is_alive(pid, start) {
            return None;
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
        if rustix::event::poll(&mut pfd, Some(&zero)).ok()? > 0 {
            return None;
        }
        epoll::add(
            &*self.epoll,
            &fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN,
        )
        .ok()?;
        Some(fd)
    }

    /// The process behind `token` exited: forget its pidfd. Returns it, if known.
    pub fn exited(&mut self, token: u64) -> Option<ProcKey> {
        let key = self.by_token.remove(&token)?;
        if let Some(w) = self.by_proc.get_mut(&key) {
            if let Some(fd) = w.fd.take() {
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

    /// Processes watched right now (alive ones).
    pub fn live_count(&self) -> usize {
        self.by_proc.values().filter(|w| w.fd.is_some()).count()
    }
}
