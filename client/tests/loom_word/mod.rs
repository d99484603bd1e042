//! What the loom models share: the shipping protocol's `Word` trait on loom's atomics.

use loom::sync::atomic::{AtomicU64, Ordering};

use shmring::line::Word;

/// A 64-bit word of a model, run through the shipping code's `Word` trait.
pub struct W(pub AtomicU64);

impl W {
    /// A word holding `v`.
    pub fn new(v: u64) -> Self {
        W(AtomicU64::new(v))
    }
}

impl Word for W {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        self.0.compare_exchange(current, new, ok, err)
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        self.0.fetch_add(value, order)
    }
}

/// Run `f` under loom with the preemption bound (2, or `LOOM_MAX_PREEMPTIONS`).
pub fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}
