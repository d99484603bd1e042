//! The truncation guard: a process that watches rings survives a ring file truncated under
//! its mapping (feature `truncation-guard`).
//!
//! Any process with write access to a ring file (every member of the ring's group) can
//! truncate it. A page of a mapping past the file's new end raises SIGBUS in whoever
//! touches it, and SIGBUS kills. A process that holds many rings for long (the broker, a
//! monitor) checks the file's size with `fstat` before it touches a ring
//! ([`crate::Ring::check_file`]), but a truncation can land between that check and the
//! touch, or during a long operation such as a drain.
//!
//! [`install_truncation_guard`] puts a SIGBUS handler in the process. Every segment
//! mapping this crate makes is recorded in a table of address ranges while it exists. A
//! fault inside one of them replaces that whole mapping with private zero pages (`mmap`
//! with `MAP_FIXED`) and marks it; the faulting instruction then runs again on the zeros
//! and the process goes on. The marked ring's [`crate::Ring::check_file`] says the ring is
//! gone ([`crate::OpenError::TruncatedWhileMapped`]), attaches are refused, a drain ends
//! with [`crate::LifecycleError::Truncated`], and the process drops the ring. Nothing it
//! writes to the zeros reaches the file or another process. A fault anywhere else goes to the
//! handler that was there before (the default one kills, as without the guard).
//!
//! It is for processes that watch and manage rings. A producer with the guard installed
//! would go on publishing into private memory that no consumer sees, where without it the
//! producer is killed at its next publish, so a data-path process should leave it out, or
//! check [`crate::Ring::check_file`] itself.
//!
//! Without the feature this module records nothing and costs nothing.

#[cfg(feature = "truncation-guard")]
pub use guard::install_truncation_guard;
#[cfg(feature = "truncation-guard")]
pub(crate) use guard::Registration;

/// Without the feature: a mapping is never recorded and never replaced.
#[cfg(not(feature = "truncation-guard"))]
pub(crate) struct Registration;

#[cfg(not(feature = "truncation-guard"))]
impl Registration {
    pub(crate) fn new(_start: *const u8, _len: usize) -> Self {
        Registration
    }

    pub(crate) fn zeroed(&self) -> bool {
        false
    }
}

#[cfg(feature = "truncation-guard")]
mod guard {
    use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
    use std::sync::{Mutex, OnceLock, PoisonError};

    /// Mappings recorded at once; one more is left unguarded (and says so in the log).
    const SLOTS: usize = 4096;

    /// Bits of a slot's word that hold the mapping's first page number (addresses below
    /// 2^52); the bits above hold its length in pages (fewer than 2^24 pages, 64 GiB).
    const PAGE_BITS: u32 = 40;
    const PAGE: usize = 4096;

    /// One recorded mapping. `word` is the mapping's first page and its length in pages in
    /// one atomic word (0: a free slot), so whoever reads it reads a start and a length of
    /// the same mapping. `state` is [`LIVE`], [`ZEROING`] or [`ZEROED`].
    struct Slot {
        word: AtomicU64,
        state: AtomicU8,
    }

    /// The mapping shows its file.
    const LIVE: u8 = 0;
    /// A handler is replacing it with zeros.
    const ZEROING: u8 = 1;
    /// It is zeros.
    const ZEROED: u8 = 2;

    #[allow(clippy::declare_interior_mutable_const)] // the initialiser of the array only
    const FREE: Slot = Slot {
        word: AtomicU64::new(0),
        state: AtomicU8::new(LIVE),
    };

    static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

    /// The SIGBUS disposition before [`install_truncation_guard`]: where a fault outside
    /// every recorded mapping goes.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

    /// `[start, start + len)` as a slot's word, if it fits one (page aligned, below 2^52,
    /// fewer than 2^24 pages).
    fn pack(start: usize, len: usize) -> Option<u64> {
        let first = (start / PAGE) as u64;
        let pages = len.div_ceil(PAGE) as u64;
        let fits = start.is_multiple_of(PAGE)
            && first != 0
            && first < 1 << PAGE_BITS
            && pages != 0
            && pages < 1 << (64 - PAGE_BITS);
        fits.then_some(pages << PAGE_BITS | first)
    }

    /// A slot's word as the mapping's first byte and its length in bytes (whole pages).
    fn unpack(word: u64) -> (usize, usize) {
        let first = (word & ((1 << PAGE_BITS) - 1)) as usize;
        let pages = (word >> PAGE_BITS) as usize;
        (first * PAGE, pages * PAGE)
    }

    /// Install the truncation guard in this process (once; later calls return at once).
    ///
    /// From then on, a SIGBUS in a mapping of a ring file (the file was truncated under it)
    /// replaces that mapping with private zero pages instead of killing the process. The
    /// ring's [`crate::Ring::check_file`] then says so
    /// ([`crate::OpenError::TruncatedWhileMapped`]), attaches are refused, a drain ends with
    /// [`crate::LifecycleError::Truncated`], and the process drops the ring. A SIGBUS
    /// anywhere else goes to the handler that was there before.
    ///
    /// For processes that watch and manage rings (the broker installs it). A producer
    /// with the guard would go on publishing into memory no consumer sees after a
    /// truncation, where without it the producer is killed at its next publish.
    pub fn install_truncation_guard() -> std::io::Result<()> {
        static ONCE: Mutex<bool> = Mutex::new(false);
        let mut done = ONCE.lock().unwrap_or_else(PoisonError::into_inner);
        if *done {
            return Ok(());
        }
        // SAFETY: a zeroed `sigaction` is a valid value of the C struct (no handler, empty
        // mask, no flags); the kernel fills it in below.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `old`.
        if unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Set before the handler can run: the handler only reads it.
        let _ = PREVIOUS.set(old);
        // SAFETY: as above.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        let handler: Handler = on_sigbus;
        action.sa_sigaction = handler as usize;
        // ONSTACK: on a thread that has an alternate signal stack, the handler runs there.
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `sa_mask` is a valid sigset_t owned by `action`.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is fully initialised and `on_sigbus` has the SA_SIGINFO signature.
        if unsafe { libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        *done = true;
        Ok(())
    }

    /// An SA_SIGINFO handler.
    type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

    /// The handler. It calls only atomics and two system calls, `mmap` and `sigaction`
    /// (POSIX lists the second as async-signal-safe; on Linux the first is a plain system
    /// call too, with no lock of the C library's), and keeps the interrupted code's errno.
    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the calling thread's errno, always a valid location.
        let errno = unsafe { *libc::__errno_location() };
        // SAFETY: for an SA_SIGINFO handler the kernel passes a valid siginfo. Only a fault
        // past the end of a mapped file (BUS_ADRERR) is taken: not a SIGBUS another process
        // sent (whose "address" is its pid and uid), nor a hardware memory error.
        let ours =
            unsafe { (*info).si_code == libc::BUS_ADRERR && zero_fill((*info).si_addr() as usize) };
        if !ours {
            forward(sig, info, ctx);
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }

    /// Hand a SIGBUS that is not a ring's fault to the disposition from before
    /// [`install_truncation_guard`], as that disposition would take it, and keep the guard
    /// unless that disposition was one-shot or chose to die of the signal.
    fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: a valid siginfo (see `on_sigbus`).
        let code = unsafe { (*info).si_code };
        // A fault (an alignment, address, object or action-required memory error) runs its
        // instruction again when the handler returns; a SIGBUS sent by a process (code 0 or
        // below), by the kernel (SI_KERNEL) or an asynchronous memory error report does not.
        let fault = (libc::BUS_ADRALN..=libc::BUS_MCEERR_AR).contains(&code);
        // SAFETY: a zeroed `sigaction` is SIG_DFL with no flags.
        let default: libc::sigaction = unsafe { std::mem::zeroed() };
        let previous = PREVIOUS.get().unwrap_or(&default);
        let handler = previous.sa_sigaction;
        if handler == libc::SIG_IGN && !fault {
            // Ignored, as it was.
            return;
        }
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // Put the old disposition back. A fault runs again on return and is handled as
            // without the guard (the default kills; for a fault the kernel treats an
            // ignored SIGBUS as the default). A sent one is raised again: blocked while
            // this handler runs, it is delivered to the default on return, which kills.
            // SAFETY: `previous` is a disposition the kernel gave, or SIG_DFL; `raise` is
            // async-signal-safe.
            unsafe {
                libc::sigaction(libc::SIGBUS, previous, std::ptr::null_mut());
                if !fault {
                    libc::raise(libc::SIGBUS);
                }
            }
            return;
        }
        // A one-shot handler: the kernel would have reset the disposition on delivery.
        let one_shot = previous.sa_flags & libc::SA_RESETHAND != 0;
        // SAFETY: zeroed `sigaction` and `sigset_t` are valid values for the calls below to
        // fill in; `sigaction`, `pthread_sigmask`, `sigpending` and the set functions are
        // async-signal-safe.
        unsafe {
            if one_shot {
                libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
            }
            let mut before: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut before);
            // The signals that handler asked to block while it runs, and SIGBUS itself
            // unblocked if it asked for that (SA_NODEFER).
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &previous.sa_mask, &mut old_mask);
            if previous.sa_flags & libc::SA_NODEFER != 0 {
                let mut bus: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut bus);
                libc::sigaddset(&mut bus, libc::SIGBUS);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &bus, std::ptr::null_mut());
            }
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                let f = std::mem::transmute::<usize, Handler>(handler);
                f(sig, info, ctx);
            } else {
                let f = std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(handler);
                f(sig);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, std::ptr::null_mut());
            // A handler may take a sent SIGBUS by resetting the disposition for a fault's
            // second run (the standard library's stack overflow handler does, for any
            // address outside a stack's guard page), which would leave the guard gone: put
            // back what was there. Not after a fault, whose second run must meet what the
            // handler left; not after a one-shot handler; and not when the handler raised
            // the signal again to die of it (pending now, it is delivered on return).
            let mut after: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut after);
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            let raised = libc::sigismember(&pending, libc::SIGBUS) == 1;
            if !fault && !one_shot && !raised && after.sa_sigaction != before.sa_sigaction {
                libc::sigaction(libc::SIGBUS, &before, std::ptr::null_mut());
            }
        }
    }

    /// If `addr` lies in a recorded mapping, replace the whole mapping with private zero
    /// pages (once, whichever thread faults first) and mark it. Whether it was a recorded
    /// mapping's fault.
    fn zero_fill(addr: usize) -> bool {
        for slot in &TABLE {
            // Acquire: pairs with the AcqRel claim of `Registration::new`, whose state reset
            // (by the `Drop` before it) this then sees.
            let word = slot.word.load(Ordering::Acquire);
            if word == 0 {
                continue;
            }
            let (start, len) = unpack(word);
            if addr < start || addr - start >= len {
                continue;
            }
            // The faulting thread reads through this mapping's `Segment`, so the mapping
            // stays recorded (and mapped) until the handler returns: its slot is cleared
            // only when the `Segment` drops. One thread replaces it; another that faults
            // meanwhile returns and runs its instruction again, faulting again until the
            // replacement is done, so nothing written to the zeros is zeroed a second time.
            // Acquire on failure: pairs with the Release store of ZEROED.
            if let Err(now) =
                slot.state
                    .compare_exchange(LIVE, ZEROING, Ordering::Acquire, Ordering::Acquire)
            {
                return now == ZEROING || now == ZEROED;
            }
            // SAFETY: [start, start + len) is a live mapping this crate made (see above), and
            // replacing it in place leaves every reference into it valid: the same
            // addresses, readable and writable, now zero.
            let got = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if got == libc::MAP_FAILED {
                // Relaxed: nothing was replaced; the fault goes on as without the guard.
                slot.state.store(LIVE, Ordering::Relaxed);
                return false;
            }
            // Release: pairs with the Acquire loads of `zeroed` and of a second faulting
            // thread, after which the zero pages are what every read sees.
            slot.state.store(ZEROED, Ordering::Release);
            return true;
        }
        false
    }

    /// A mapping recorded in the table while this lives. Drop it before unmapping.
    pub(crate) struct Registration {
        slot: Option<&'static Slot>,
    }

    impl Registration {
        /// Record the mapping `[start, start + len)`. A full table, or a mapping whose
        /// place or size does not fit a slot's word, leaves it unrecorded: a fault in it
        /// kills, as without the guard.
        pub(crate) fn new(start: *const u8, len: usize) -> Self {
            let Some(word) = pack(start as usize, len) else {
                tracing::warn!(
                    start = start as usize,
                    len,
                    "the truncation guard cannot record this mapping: it is unguarded"
                );
                return Self { slot: None };
            };
            for slot in &TABLE {
                // AcqRel: Acquire pairs with the Release clearing of the slot in `Drop`
                // (so its state reset is seen here, and by a handler that acquires this),
                // Release hands that on to a handler's Acquire load of the word.
                if slot
                    .word
                    .compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return Self { slot: Some(slot) };
                }
            }
            tracing::warn!(
                mappings = SLOTS,
                "the truncation guard records {SLOTS} mappings at most: this one is unguarded"
            );
            Self { slot: None }
        }

        /// Whether a fault replaced the mapping with zeros (or is replacing it).
        pub(crate) fn zeroed(&self) -> bool {
            // Acquire: pairs with the handler's Release store of ZEROED.
            self.slot
                .is_some_and(|s| s.state.load(Ordering::Acquire) != LIVE)
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            if let Some(slot) = self.slot {
                // Nobody reads through the mapping any more, so no handler is in it: reset
                // its state for the slot's next mapping, then free the slot (Release: pairs
                // with the AcqRel claim of the next `Registration::new`).
                slot.state.store(LIVE, Ordering::Relaxed);
                slot.word.store(0, Ordering::Release);
            }
        }
    }
}
