//! What the loom models share: the shipping protocol's `Word` trait on loom's atomics.

use loom::sync::atomic::{AtomicU64, Ordering};

use shmring::line::Word;

/// A 64-bit word of a model, run through the shipping code's `Word` trait.
///
/// Every load is preceded by a Relaxed store to a shadow word that nobody reads. loom's
/// partial-order reduction remembers one last access per atomic, and takes two loads for
/// independent: a thread that loads a word and then writes it hides, behind
/// its own load, another thread's earlier load of that word, so the interleaving with the
/// write first is never run (tokio-rs/loom#392; `client/tests/loom_explores.rs` fails
/// without the shadow). Through the shadow two loads of one word race as writes do, and
/// the thread that loads and then writes is run first from the other's load on. Stores and
/// read-modify-writes need no shadow: loom checks them against every last access. A store
/// that nobody loads synchronises nothing, so the loads still see every value the memory
/// model allows (a read-modify-write would not do: it reads the latest store and takes on
/// its release, an edge the program does not have). Models' own plain loom atomics
/// (stamps, counters) have no shadow.
pub struct W {
    /// The word.
    pub value: AtomicU64,
    shadow: AtomicU64,
}

impl W {
    /// A word holding `v`.
    pub fn new(v: u64) -> Self {
        W {
            value: AtomicU64::new(v),
            shadow: AtomicU64::new(0),
        }
    }

    /// The access to the shadow word that makes a load race the other loads of the word.
    fn touch(&self) {
        // Relaxed, and never loaded: orders nothing; only the scheduler looks at it.
        self.shadow.store(0, Ordering::Relaxed);
    }
}

impl Word for W {
    fn load(&self, order: Ordering) -> u64 {
        self.touch();
        self.value.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.value.store(value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        self.value.compare_exchange(current, new, ok, err)
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        self.value.fetch_add(value, order)
    }
}

/// Run `f` under loom with the preemption bound (2, or `LOOM_MAX_PREEMPTIONS`).
pub fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    model_bound(2, f);
}

/// Run `f` under loom with the preemption bound `bound` (or `LOOM_MAX_PREEMPTIONS`), for a
/// model whose failure needs more preemptions than the default allows.
pub fn model_bound<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    b.check(f);
}
