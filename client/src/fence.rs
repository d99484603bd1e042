//! The StoreLoad fence of the park/wake protocol and of the single-producer stop, made
//! asymmetric.
//!
//! A publisher stores a stamp then loads the waiter count; a parking consumer stores the
//! waiter count then loads the stamp. That is the store-buffering pattern: without a full
//! fence between the store and the load on *both* sides, each can miss the other's store
//! and the consumer sleeps on an event nobody will wake it for. (A single producer's claim
//! against a stopper is the same pattern, see `line`.)
//!
//! A `SeqCst` fence costs ~10 ns on every publish. Instead the heavy side, which is about
//! to sleep (or to stop the ring) anyway, calls `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`:
//! the kernel runs a full barrier on every CPU currently running a *registered* process,
//! which turns that process's compiler-only fence into a real one at that instant (a CPU
//! not running it has gone through a context switch, itself a full barrier). Issuing the
//! command needs no registration; being reached by it does. Without kernel support each
//! side falls back to a `SeqCst` fence; the ring's header records which mode is in use.
//!
//! ## When a process registers
//!
//! Registering (`MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`) waits for an RCU grace period
//! in a multi-threaded process: ~10 ms idle, seconds on a loaded machine. So it is done
//! lazily, by the first publish or commit of a handle ([`light_allowed`]), the first
//! operation that may use the compiler-only side, and before that operation's first store:
//! a registration between the store and the wake would keep a parker that already sees the
//! store waiting for the wake (its 50 ms net would count it as lost). Attaching, parking,
//! building a `WakeSet` and stopping a ring never register: the heavy side only issues the
//! command.
//!
//! Until its process has registered, a handle takes the `SeqCst` fence on the light side
//! (a full barrier of its own, sound against any heavy side). Once registration returns,
//! it may use the compiler fence alone, and that is sound too: the registration marks
//! every CPU that runs this process and executes a full barrier on each before it returns.
//! A heavy side whose membarrier reads a CPU's mark after that reaches the CPU (or finds
//! it switched away, a barrier too). One that read the mark before it was set did so after
//! its own store (it raised the waiter count or stored Stopping, then its membarrier
//! begins with a full barrier): store-buffering once more, between the mark and that store,
//! with a full barrier on both sides, so this process's first load after registering sees
//! the heavy side's store. Either way the pair holds for every publish after registration.
//!
//! So "registered" always comes before the first publish that relies on it, in the same
//! thread (or, for another handle of the process, through the `OnceLock` that records it).
//! A stopper of a single-producer ring reaches the producer's process only if that process
//! registered, and it has, if its producer ever used the compiler fence: until then the
//! producer fenced fully itself. That is why [`supported`] (can this process *issue* the
//! command) is all `Env::has_barrier` asks of the stopper.

use std::sync::atomic::{compiler_fence, fence, Ordering};
use std::sync::OnceLock;

use rustix::thread::{membarrier, membarrier_query, MembarrierCommand, MembarrierQuery};
use shmring_layout::FenceMode;

/// Whether the kernel lets this process issue and register for global expedited
/// membarriers (asked once).
static SUPPORTED: OnceLock<bool> = OnceLock::new();

/// Whether this process registered (set once, by the first registration attempt).
static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Whether this process can use the asymmetric fence: the kernel supports global expedited
/// membarriers and their registration. One system call, once; registers nothing.
pub(crate) fn supported() -> bool {
    *SUPPORTED.get_or_init(|| {
        membarrier_query().contains(
            MembarrierQuery::GLOBAL_EXPEDITED | MembarrierQuery::REGISTER_GLOBAL_EXPEDITED,
        )
    })
}

/// Register this process for expedited global membarriers (once; waits for an RCU grace
/// period). Returns whether it is registered.
#[cold]
pub(crate) fn register() -> bool {
    *REGISTERED.get_or_init(|| {
        supported() && membarrier(MembarrierCommand::RegisterGlobalExpedited).is_ok()
    })
}

/// Whether this process has registered for expedited global membarriers (no system call).
pub(crate) fn registered() -> bool {
    REGISTERED.get().copied().unwrap_or(false)
}

/// Whether a handle whose process registered as far as it knows (`registered`) may use the
/// compiler-only light fence; registers the process first if it has not yet (see the module
/// comment). One branch on the handle's own flag once registered.
#[inline(always)]
pub(crate) fn light_allowed(registered: &mut bool) -> bool {
    if !*registered {
        *registered = register();
    }
    *registered
}

/// The mode this process uses (and writes into a ring's header when it attaches): the
/// asymmetric fence wherever the kernel supports it, registered or not yet.
pub(crate) fn mode() -> FenceMode {
    if supported() {
        FenceMode::Membarrier
    } else {
        FenceMode::SeqCstFence
    }
}

/// The light side's fence, between its store (stamp, a consumer's commit, a single
/// producer's position) and its load (a waiter count, the lifecycle word). `light`: this
/// process registered and every process of the ring uses membarrier.
#[inline(always)]
pub(crate) fn light(light: bool) {
    if light {
        // The heavy side's membarrier supplies the hardware barrier; this keeps the
        // compiler from moving the load above the store.
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The heavy side's fence: between raising a waiter count and the last look, or between
/// storing Stopping and reading a single producer's position.
#[cold]
pub(crate) fn heavy() {
    if supported() && membarrier(MembarrierCommand::GlobalExpedited).is_ok() {
        return;
    }
    fence(Ordering::SeqCst);
}
