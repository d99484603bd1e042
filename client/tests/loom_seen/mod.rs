//! A consumer entry's word as one gate scan of a loom model sees it (`loom_attach.rs`,
//! `loom_folded_attach.rs`): whether the scan read the entry gating.

use std::cell::RefCell;

use loom::sync::atomic::Ordering;

use shmring::line::Word;
use shmring_layout::{consumer_state, owned_word};

use crate::loom_word::W;

/// A word as one scan sees it: remembers the values its SeqCst loads read, one per pass of
/// `gating::gate` over the entries (worker groups, required, optional).
pub struct Seen<'a> {
    word: &'a W,
    seqcst: RefCell<Vec<u64>>,
}

/// The pass of `gating::gate` over the required entries: its second SeqCst load of a word.
pub const REQUIRED_PASS: usize = 1;

impl<'a> Seen<'a> {
    pub fn new(word: &'a W) -> Self {
        Seen {
            word,
            seqcst: RefCell::new(Vec::new()),
        }
    }

    /// Whether pass `pass` read the entry in a state that gates.
    pub fn saw_gating(&self, pass: usize) -> bool {
        self.seqcst
            .borrow()
            .get(pass)
            .is_some_and(|&w| consumer_state::gates(owned_word::state(w)))
    }
}

impl Word for Seen<'_> {
    fn load(&self, order: Ordering) -> u64 {
        let v = self.word.load(order);
        if order == Ordering::SeqCst {
            self.seqcst.borrow_mut().push(v);
        }
        v
    }
    fn store(&self, value: u64, order: Ordering) {
        self.word.store(value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        ok: Ordering,
        err: Ordering,
    ) -> Result<u64, u64> {
        self.word.compare_exchange(current, new, ok, err)
    }
    fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        self.word.fetch_add(value, order)
    }
}
