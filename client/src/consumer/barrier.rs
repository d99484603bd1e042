//! The barrier of a dependent consumer: it delivers only sequences below the lowest `next`
//! of its gating upstream consumers (see `graph` for how they are named and recorded).
//!
//! The handle caches each upstream's entry index, the word it validated and the name it
//! holds. The fast path is two loads per upstream: its `next` (Acquire), then its word
//! (Relaxed), compared with the cached word. Equal: the `next` belongs to the tenure that
//! was validated. Different (a re-attach, a takeover, a detach, a failure, a release: every
//! change of an entry is a new word): the cold path reads the entry again and keeps it if
//! it still holds the same durable name, or ends with [`PollError::UpstreamLost`] if it was
//! freed or now holds another consumer.
//!
//! ## Why `next` before the word
//!
//! An entry freed and taken by a fresh attach of another consumer gets a provisional
//! position (the head) before its ACTIVE CAS; that position may lie far beyond what the
//! old upstream committed.
//!
//! ```text
//! new holder of entry u                     downstream (barrier)
//! (1) word: FREE -> CLAIMED (AcqRel CAS)    (a) n = next[u]   (Acquire)
//! (2) next[u] = head        (Release)       (b) w = word[u]   (Relaxed)
//! (3) word -> ACTIVE        (SeqCst CAS)    (c) use n only if w == the cached word
//! ```
//!
//! If (a) reads (2) or a later store of the new tenure, it synchronizes with it (Release /
//! Acquire), so (1) happens before (b): by coherence (b) reads (1) or a later word, never
//! the cached one, and `n` is not used. Reading the word first would not do: (b) could read
//! the old word and (a) then the new position. This is why every store of `next` by a new
//! holder, the provisional one included, is a Release store.
//!
//! An upstream in a state that does not gate (RELEASED by the broker's policy, or taken
//! over without gating) does not hold this consumer either: the policy that released it
//! from the producers releases it from its downstream consumers.

use shmring_layout::MAX_UPSTREAM;

use super::attach::name_is;
use super::*;

/// One upstream as the handle knows it.
#[derive(Debug, Clone, Copy, Default)]
struct Upstream {
    index: u32,
    /// The word validated last.
    word: u64,
    /// Whether that word's state gates.
    gates: bool,
    name: [u64; NAME_LEN / 8],
}

/// The upstreams of a consumer handle.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Upstreams {
    list: [Upstream; MAX_UPSTREAM],
    len: usize,
}

impl Upstreams {
    /// Add the upstream at `index`, validated with `word`, named `name`.
    pub(crate) fn push(&mut self, index: u32, word: u64, name: [u64; NAME_LEN / 8]) {
        if let Some(u) = self.list.get_mut(self.len) {
            *u = Upstream {
                index,
                word,
                gates: consumer_state::gates(owned_word::state(word)),
                name,
            };
            self.len += 1;
        }
    }

    /// What the entry records: each index plus one, 0 for none.
    pub(crate) fn record(&self) -> [u32; MAX_UPSTREAM] {
        let mut r = [0; MAX_UPSTREAM];
        for (r, u) in r.iter_mut().zip(&self.list[..self.len]) {
            *r = u.index + 1;
        }
        r
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The name of the upstream resolved to entry `index`, if any.
    pub(crate) fn named_at(&self, index: u32) -> Option<String> {
        self.list[..self.len]
            .iter()
            .find(|u| u.index == index)
            .map(name_of)
    }
}

/// An upstream's word moved since the handle validated it.
pub(crate) struct Stale;

impl Consumer {
    /// The first sequence the upstreams do not allow yet (`u64::MAX` with none gating).
    #[inline]
    pub(crate) fn barrier(&self) -> Result<u64, Stale> {
        let mut min = u64::MAX;
        for u in &self.upstream.list[..self.upstream.len] {
            let Some(e) = self.seg.consumer(u.index) else {
                return Err(Stale);
            };
            // `next` (Acquire), then the word: see the module comment.
            let Some(next) = crate::graph::upstream_next(&e.hot.next, &e.hot.word, u.word) else {
                return Err(Stale);
            };
            if u.gates {
                min = min.min(next);
            }
        }
        Ok(min)
    }

    /// The barrier, revalidating upstreams whose word moved. With no upstream, `u64::MAX`.
    #[inline]
    pub(crate) fn upstream_limit(&mut self) -> Result<u64, PollError> {
        if self.upstream.is_empty() {
            return Ok(u64::MAX);
        }
        match self.barrier() {
            Ok(b) => Ok(b),
            Err(Stale) => self.revalidate(),
        }
    }

    /// Read every upstream's entry again: keep it if it holds the same durable name.
    #[cold]
    fn revalidate(&mut self) -> Result<u64, PollError> {
        for u in &mut self.upstream.list[..self.upstream.len] {
            let Some(e) = self.seg.consumer(u.index) else {
                return Err(lost(u));
            };
            // Acquire: the name and flags were written before the word was published.
            let word = e.hot.word.load(Ordering::Acquire);
            if word == u.word {
                continue;
            }
            let state = owned_word::state(word);
            if matches!(state, consumer_state::FREE | consumer_state::CLAIMED)
                || e.hot.flags.load(Ordering::Relaxed) & consumer_flags::DURABLE == 0
                || !name_is(e, &u.name)
            {
                // The cached word stays: every later call ends here again.
                return Err(lost(u));
            }
            u.word = word;
            u.gates = consumer_state::gates(state);
        }
        // Still moving: deliver nothing this time (the next call looks again).
        Ok(self.barrier().unwrap_or(self.next))
    }
}

fn name_of(u: &Upstream) -> String {
    let mut bytes = Vec::with_capacity(NAME_LEN);
    for w in &u.name {
        bytes.extend_from_slice(&w.to_ne_bytes());
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn lost(u: &Upstream) -> PollError {
    PollError::UpstreamLost { name: name_of(u) }
}
