//! The StoreLoad fence of the park/wake protocol, made asymmetric.
//!
//! A publisher stores a stamp then loads the waiter count; a parking consumer stores the
//! waiter count then loads the stamp. That is the store-buffering pattern: without a full
//! fence between the store and the load on *both* sides, each can miss the other's store
//! and the consumer sleeps on an event nobody will wake it for.
//!
//! A `SeqCst` fence costs ~10 ns on every publish. Instead the parking side, which is about
//! to sleep anyway, calls `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`: the kernel runs a
//! full barrier on every CPU currently running a registered process, which turns the
//! publisher's compiler-only fence into a real one at that instant (a CPU not running it has
//! gone through a context switch, itself a full barrier). Every process registers when it
//! attaches a producer or a consumer. Without kernel support each side falls back to a
//! `SeqCst` fence; the ring's header records which mode is in use.

use std::sync::atomic::{compiler_fence, fence, Ordering};
use std::sync::OnceLock;

use rustix::thread::{membarrier, membarrier_query, MembarrierCommand, MembarrierQuery};
use shmring_layout::FenceMode;

static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Register this process for expedited global membarriers (once). Returns whether the
/// asymmetric fence is in use in this process.
pub(crate) fn register() -> bool {
    *REGISTERED.get_or_init(|| {
        let q = membarrier_query();
        q.contains(MembarrierQuery::GLOBAL_EXPEDITED | MembarrierQuery::REGISTER_GLOBAL_EXPEDITED)
            && membarrier(MembarrierCommand::RegisterGlobalExpedited).is_ok()
    })
}

/// The mode this process uses.
pub(crate) fn mode() -> FenceMode {
    if register() {
        FenceMode::Membarrier
    } else {
        FenceMode::SeqCstFence
    }
}

/// The publishing side's fence, between its store (stamp, or a consumer's commit) and its
/// load of a waiter count.
#[inline(always)]
pub(crate) fn light(membarrier_mode: bool) {
    if membarrier_mode {
        // The parker's membarrier supplies the hardware barrier; this keeps the compiler
        // from moving the waiter load above the store.
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The parking side's fence, between raising a waiter count and its last look.
#[cold]
pub(crate) fn heavy() {
    if register() && membarrier(MembarrierCommand::GlobalExpedited).is_ok() {
        return;
    }
    fence(Ordering::SeqCst);
}
