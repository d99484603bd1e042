//! The surroundings (`line::Env`) of the loom models that run the sequence line's
//! lifecycle: processes by number, and `membarrier` as a `SeqCst` fence.
//!
//! loom cannot run `membarrier`; what the asymmetric fence guarantees is what a `SeqCst`
//! fence on both sides guarantees (a full barrier between each side's store and its load),
//! so `heavy_fence` is a `SeqCst` fence here, and the producer's light fence is one too.

use loom::sync::atomic::{fence, Ordering};
use loom::thread;

use shmring::line::Env;

/// A pid that is not running.
pub const DEAD: u32 = 99;

/// The process `me`, whose heavy fence is a `SeqCst` fence when `fenced` (unfenced: the
/// control models that must fail without it).
pub struct ModelEnv {
    me: u32,
    fenced: bool,
}

impl Env for ModelEnv {
    fn me(&self) -> u32 {
        self.me
    }
    fn alive(&self, pid: u32) -> bool {
        pid != 0 && pid != DEAD
    }
    fn heavy_fence(&self) {
        if self.fenced {
            fence(Ordering::SeqCst);
        }
    }
    fn has_barrier(&self) -> bool {
        true
    }
    fn pause(&self, _round: u32) -> bool {
        thread::yield_now();
        true
    }
    // The run word is modelled in `loom_run_count.rs` only.
    fn count_start(&self) {}
    fn arm_start_count(&self) {}
}

/// Process `me` (`fenced`: with its heavy fence).
pub fn env(me: u32, fenced: bool) -> ModelEnv {
    ModelEnv { me, fenced }
}
