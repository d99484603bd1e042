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
//! ## Which upstreams hold
//!
//! Every upstream holds this consumer at its `next`, in every state (attached, detached,
//! failed, dead, being taken over, optional or required), except a required upstream that
//! is RELEASED: the broker's policy released it from the producers, and that releases it
//! from its downstream consumers too. An optional durable upstream that detached is
//! RELEASED as well, but it resumes at its own position, so it keeps holding.
//!
//! ## After a worker group
//!
//! A worker group's entry is durable and named, so a consumer may name it in `after`; its
//! `next` is the group's work sequence, the first sequence no member has *claimed*. A
//! member handles its claim after taking it, so the barrier of a group upstream is the
//! lower of the work sequence and every gating member's `next` (`group::finished`, which
//! says why the work sequence is read first). The handle remembers the member entries of
//! its last walk of the table and, while the work sequence has not moved since, reads only
//! those (`Consumer::group_finished`). Members commit as any consumer does, and
//! that commit wakes a parked downstream.
//!
//! ## A released upstream that gates again
//!
//! A released upstream's holder may gate again while this consumer scans a run the barrier
//! did not limit: it CASes its word to ACTIVE (SeqCst), issues a SeqCst fence, reads the
//! head `h` and from then on reads every event from `h` first. So after scanning a run under
//! a barrier that let a released upstream go, this consumer issues a SeqCst fence and reads
//! that upstream's word again ([`crate::graph::unchanged`]); if it moved, it delivers nothing
//! this time.
//!
//! ```text
//! downstream                                 upstream holder (jump_to_head)
//! (a) barrier: u RELEASED -> no limit        (1) word -> ACTIVE   (SeqCst CAS)
//! (b) scan: stamps up to s published         (2) fence            (SeqCst)
//! (c) fence (SeqCst); word[u] still RELEASED (3) h = position      (SeqCst)
//! ```
//!
//! The fences (c) and (2) are ordered in the single total order. If (c) comes first, the
//! claims of every sequence whose stamp (b) saw happen before (c), so (3) reads a position
//! beyond them: the upstream starts after the run, and delivering it passes nothing the
//! upstream will read. If (2) comes first, (c)'s load of the word reads (1) or later: the
//! run is not delivered. `client/tests/loom_regate.rs` checks this with the shipping
//! functions, and shows the run delivered without the check.
//!
//! ## Worker group members
//!
//! A member of a group that runs after other consumers holds this barrier too (the group's
//! upstreams). It delivers its own claim and the claims it took over only below the barrier,
//! in the same order: barrier, scan of what is published below it, re-check, delivery
//! (`consumer/member.rs`). Those claims may lie below the member's position, so a
//! revalidation that finds an upstream still moving answers 0, not the position.

use shmring_layout::{MAX_CONSUMERS, MAX_UPSTREAM};

use super::attach::name_is;
use super::*;

/// One upstream as the handle knows it.
#[derive(Debug, Clone, Copy, Default)]
struct Upstream {
    index: u32,
    /// The word validated last.
    word: u64,
    /// Whether the upstream holds this consumer in that word (see the module comment).
    holds: bool,
    /// Whether it is a worker group's entry: its `next` counts claims, and what holds this
    /// consumer is the lowest of that and its members' positions (see "After a worker
    /// group").
    group: bool,
    name: [u64; NAME_LEN / 8],
}

/// The upstreams of a consumer handle.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Upstreams {
    list: [Upstream; MAX_UPSTREAM],
    len: usize,
}

impl Upstreams {
    /// Add the upstream at `index`, validated with `word` and `flags`, named `name`.
    pub(crate) fn push(&mut self, index: u32, word: u64, flags: u32, name: [u64; NAME_LEN / 8]) {
        if let Some(u) = self.list.get_mut(self.len) {
            *u = Upstream {
                index,
                word,
                holds: holds(word, flags),
                group: flags & consumer_flags::GROUP != 0,
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

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether some upstream does not hold this consumer (a required one released).
    #[inline]
    pub(crate) fn releasing(&self) -> bool {
        self.list[..self.len].iter().any(|u| !u.holds)
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

/// Words of a bitmap with one bit per consumer entry.
const MEMBER_WORDS: usize = MAX_CONSUMERS as usize / 64;

/// What the last full walk for a group upstream found (see `Consumer::group_finished`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GroupScan {
    /// The group's entry index plus one (0: no walk yet) and the word it was validated with.
    group: u32,
    word: u64,
    /// The work sequence read before the walk.
    work: u64,
    /// The member entries of the group, one bit per entry index.
    members: [u64; MEMBER_WORDS],
}

impl GroupScan {
    fn add(&mut self, index: u32) {
        if let Some(w) = self.members.get_mut(index as usize / 64) {
            *w |= 1 << (index % 64);
        }
    }

    /// The entry indices recorded, in table order.
    fn members(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().enumerate().flat_map(|(k, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                let i = bits.trailing_zeros();
                (i < 64).then(|| {
                    bits &= bits - 1;
                    k as u32 * 64 + i
                })
            })
        })
    }
}

impl Consumer {
    /// The first sequence the upstreams do not allow yet (`u64::MAX` with none gating).
    #[inline]
    pub(crate) fn barrier(&self) -> Result<u64, Stale> {
        let mut min = u64::MAX;
        for (k, u) in self.upstream.list[..self.upstream.len].iter().enumerate() {
            if let Some(limit) = self.limit_of(k, u)? {
                min = min.min(limit);
            }
        }
        Ok(min)
    }

    /// The first sequence upstream `u` (the `k`th) does not allow yet, `None` if it does not
    /// hold this consumer (see the module comment).
    #[inline(always)]
    fn limit_of(&self, k: usize, u: &Upstream) -> Result<Option<u64>, Stale> {
        let e = self.seg.consumer(u.index).ok_or(Stale)?;
        // `next` (Acquire), then the word: see the module comment.
        let next = crate::graph::upstream_next(&e.hot.next, &e.hot.word, u.word).ok_or(Stale)?;
        if !u.holds {
            return Ok(None);
        }
        Ok(Some(if u.group {
            self.group_finished(&self.group_scan[k], u.index, u.word, next)
        } else {
            next
        }))
    }

    /// The first sequence the worker group at `index` has not finished, from its work
    /// sequence `work` (loaded with Acquire by `upstream_next`, before any member entry is
    /// read: see `group::finished`).
    ///
    /// While the work sequence still holds the value the last full walk of the table read,
    /// no member has claimed since (every claim raises it), so only the member entries that
    /// walk found can hold a claim below the floor: those are read alone, and a consumer
    /// waiting after an idle group reads its members' lines, not every entry's.
    #[inline(never)]
    fn group_finished(
        &self,
        remembered: &Cell<GroupScan>,
        index: u32,
        validated: u64,
        work: u64,
    ) -> u64 {
        let seg = &*self.seg;
        let tag = index + 1;
        let is_member = |e: &ConsumerEntry| {
            // Relaxed (both): written before the member's ACTIVE CAS, which the Acquire
            // load of `work` orders before these reads for any member that claimed below
            // it (`group::finished`); a stale reading of an entry being reused only
            // lowers the floor.
            e.hot.flags.load(Ordering::Relaxed) & consumer_flags::MEMBER != 0
                && e.cold.group.load(Ordering::Relaxed) == tag
        };
        let last = remembered.get();
        if last.group == tag && last.word == validated && last.work == work {
            let members = last
                .members()
                .filter_map(|i| seg.consumer(i))
                .filter(|e| is_member(e))
                .map(|e| (&e.hot.word, &e.hot.next));
            return crate::group::finished(work, members);
        }
        let mut scan = GroupScan {
            group: tag,
            word: validated,
            work,
            members: [0; MEMBER_WORDS],
        };
        let members = (0..seg.geometry().max_consumers)
            .map_while(|i| seg.consumer(i).map(|e| (i, e)))
            .filter(|(_, e)| is_member(e))
            .map(|(i, e)| {
                scan.add(i);
                (&e.hot.word, &e.hot.next)
            });
        let floor = crate::group::finished(work, members);
        remembered.set(scan);
        floor
    }

    /// The entry index of an upstream (`only`, or the first in `after` order) that holds
    /// this consumer at or below every sequence it could deliver next: then only a change of
    /// that upstream's entry (a commit, a move, a release) lets it past, never a publish,
    /// and it parks on that entry's line (see `park`, "A downstream's line"). A worker
    /// group's entry stands for its members. `None` with no such upstream, and with one
    /// whose word moved (the poll after the park revalidates it).
    pub(crate) fn held_by(&self, only: Option<u32>) -> Option<u32> {
        let lowest = self.lowest_to_deliver();
        for (k, u) in self.upstream.list[..self.upstream.len].iter().enumerate() {
            if only.is_some_and(|i| i != u.index) {
                continue;
            }
            if self
                .limit_of(k, u)
                .ok()?
                .is_some_and(|limit| limit <= lowest)
            {
                return Some(u.index);
            }
        }
        None
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

    /// After scanning a run under a barrier that let a released upstream go: whether every
    /// such upstream still has the word the barrier read (see the module comment). When not,
    /// the caller delivers nothing this time.
    #[cold]
    fn released_upstreams_unchanged(&self) -> bool {
        let seg = &*self.seg;
        crate::graph::unchanged(
            self.upstream.list[..self.upstream.len]
                .iter()
                .filter(|u| !u.holds)
                .filter_map(|u| seg.consumer(u.index).map(|e| (&e.hot.word, u.word))),
            // SeqCst fence: (c) in the module comment, ordered against the upstream's (2).
            || fence(Ordering::SeqCst),
        )
    }

    /// Whether the run just scanned under the barrier may be delivered: always, unless a
    /// released upstream gated again meanwhile (see the module comment).
    #[inline]
    pub(crate) fn run_still_allowed(&self) -> bool {
        !self.upstream.releasing() || self.released_upstreams_unchanged()
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
                return Err(lost(u));
            }
            u.word = word;
            let flags = e.hot.flags.load(Ordering::Relaxed);
            u.holds = holds(word, flags);
            u.group = flags & consumer_flags::GROUP != 0;
        }
        // Still moving: deliver nothing this time (the next call looks again). Nothing means
        // 0, not this consumer's position: a worker group member delivers the claims it took
        // over below its own position.
        Ok(self.barrier().unwrap_or(0))
    }
}

/// Whether an upstream whose entry has `word` and `flags` holds its downstream consumers:
/// always, except a required one the broker released (see the module comment).
fn holds(word: u64, flags: u32) -> bool {
    !table::consumer::passable(owned_word::state(word), flags)
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
