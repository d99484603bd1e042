//! Attaching a consumer: a free entry, or a durable name taken over (see `table`).

use shmring_layout::{MAX_SEQUENCE, MAX_UPSTREAM};

use super::*;
use crate::graph;

/// The error of an attach whose dependencies would close the cycle `path` (entry indices,
/// from `graph::find_cycle`).
pub(super) fn cycle_error(seg: &Segment, path: &[u32]) -> AttachError {
    AttachError::Cycle {
        names: path
            .iter()
            .map(|&i| seg.consumer(i).map(entry_name).unwrap_or_default())
            .collect(),
    }
}

pub(crate) fn pack_name(name: &str) -> Result<[u64; NAME_LEN / 8], AttachError> {
    if name.is_empty() || name.len() > NAME_LEN || name.contains('\0') {
        return Err(AttachError::BadName(name.to_owned()));
    }
    let mut bytes = [0u8; NAME_LEN];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    let mut words = [0u64; NAME_LEN / 8];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_ne_bytes(b);
    }
    Ok(words)
}

/// The name stored in an entry (lossy for corrupt bytes).
pub(crate) fn entry_name(e: &ConsumerEntry) -> String {
    let mut bytes = Vec::with_capacity(NAME_LEN);
    for w in &e.cold.name {
        bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
    }
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Whether an entry other than `i` gates under the durable name `words`: the check that
/// follows the ACTIVE CAS of a new durable entry. Two processes creating the same new name
/// at once: the later of the two ACTIVE CASes (SeqCst) always sees the earlier one here
/// (SeqCst loads), so at most one keeps its entry. A process that finishes the creation of
/// an entry whose creator died after that CAS (`member::find_group`) comes after the CAS
/// and runs the check in its place.
pub(super) fn named_elsewhere(seg: &Segment, i: u32, words: &[u64; NAME_LEN / 8]) -> bool {
    (0..seg.geometry().max_consumers).any(|j| {
        j != i
            && seg.consumer(j).is_some_and(|o| {
                let st = o.hot.state(Ordering::SeqCst);
                // The same test `resume` uses to find a durable entry, so that a retry
                // always finds what made an attach give way.
                consumer_state::gates(st)
                    && o.hot.flags.load(Ordering::Relaxed) & consumer_flags::DURABLE != 0
                    && name_is(o, words)
            })
    })
}

pub(super) fn name_is(e: &ConsumerEntry, words: &[u64; NAME_LEN / 8]) -> bool {
    e.cold
        .name
        .iter()
        .zip(words)
        .all(|(a, b)| a.load(Ordering::Relaxed) == *b)
}

/// The holder of entry `e` has stored its start: its `next` is a position producers
/// respected since before it (see `consumer_flags::STARTING`, [`graph::started`]).
pub(super) fn started(e: &ConsumerEntry) {
    graph::started(&e.hot.flags);
}

impl Ring {
    /// Attach a consumer.
    pub fn consumer(&self, options: ConsumerOptions) -> Result<Consumer, AttachError> {
        Consumer::attach(self.seg.clone(), options)
    }
}

pub(super) enum Found {
    /// Attached to entry `index`, starting at `next`, holding it with `word`, the upstreams
    /// it recorded before (`previous`: given back if the attach is refused); `fresh`: a
    /// free entry (not a durable one taken over).
    Attached {
        index: u32,
        next: u64,
        word: u64,
        previous: [u32; MAX_UPSTREAM],
        fresh: bool,
    },
    /// Lost a race; scan again.
    Retry,
}

impl Consumer {
    fn attach(seg: Arc<Segment>, opts: ConsumerOptions) -> Result<Self, AttachError> {
        crate::lifecycle::attachable(&seg)?;
        if opts.group.is_some() && seg.is_fixed() {
            // Refused at once, before any wait for a stop in progress.
            return Err(AttachError::FixedSizeRing {
                what: "worker group member",
            });
        }
        // A position no ring reaches (another process overwrote the claim word or the stop
        // sequence): refused before an entry is taken, as a producer's attach refuses it,
        // where the consumer would start there and count past the largest sequence. On a
        // ring published by a cursor, a stop in progress decides the position: waited for
        // here, before an entry is taken, at most as long as a lifecycle call waits.
        let deadline = Instant::now() + crate::lifecycle::LIFECYCLE_WAIT;
        let head = seg
            .start_position(Some(deadline))
            .map_err(|_| AttachError::Busy)?;
        if head >= MAX_SEQUENCE {
            return Err(AttachError::CorruptPosition { position: head });
        }
        if let Some(group) = &opts.group {
            if seg.is_fixed() {
                return Err(AttachError::FixedSizeRing {
                    what: "worker group member",
                });
            }
            if opts.upstream.iter().any(|u| u == group) {
                return Err(AttachError::SelfUpstream {
                    name: group.clone(),
                });
            }
            // A member reads behind the group's upstreams as a dependent consumer does; the
            // group's entry records them (see `member::attach`).
            let upstream = Self::resolve(&seg, &opts)?;
            let (m, entry, next, word) = member::attach(&seg, group, &opts, &upstream)?;
            let lost = upstream.named_at(entry);
            let mut c = Self::handle(seg, &opts, entry, next, word, true, false, upstream);
            c.group = Some(m.group());
            c.member = Some(m);
            if let Some(name) = lost {
                // An upstream was freed while this member attached, and its entry took the
                // upstream's place: it is gone. The member leaves as any does.
                drop(c);
                return Err(AttachError::UnknownUpstream { name });
            }
            if let Some(position) = c.corrupt_work() {
                // A work sequence no ring reaches (another process overwrote the group's
                // entry): its claims would wait there for ever. The member leaves as any
                // does.
                drop(c);
                return Err(AttachError::CorruptPosition { position });
            }
            // A member carries on the poison record of an entry it took over, as a durable
            // consumer does at its attach (see `policy`).
            c.mark_suspect();
            if c.careful > 0 {
                // The window covers the whole claim taken over: it was made with its last
                // holder's batch cap, which may be larger than this one's.
                let claim = c.member.as_ref().map_or(0, |m| m.claim_end());
                c.careful = c.careful.max(claim.saturating_sub(c.next));
            }
            c.join_group();
            return Ok(c);
        }
        let words = opts.name.as_deref().map(pack_name).transpose()?;
        let flags = if opts.required {
            consumer_flags::REQUIRED
        } else {
            0
        } | if words.is_some() {
            consumer_flags::DURABLE
        } else {
            0
        };
        let upstream = Self::resolve(&seg, &opts)?;
        let record = upstream.record();
        let mut dropped = 0;
        let (entry, next, word, previous, fresh) = loop {
            let found = match &words {
                Some(w) => match Self::resume(&seg, w, flags, &opts, &record, deadline)? {
                    Some((f, lost)) => {
                        dropped = lost;
                        f
                    }
                    None => Self::fresh(&seg, Some(w), flags, &opts, &record, None, deadline)?,
                },
                None => Self::fresh(&seg, None, flags, &opts, &record, None, deadline)?,
            };
            match found {
                Found::Attached {
                    index,
                    next,
                    word,
                    previous,
                    fresh,
                } => break (index, next, word, previous, fresh),
                Found::Retry => std::thread::yield_now(),
            }
        };
        let durable = words.is_some();
        let mut c = Self::handle(
            seg,
            &opts,
            entry,
            next,
            word,
            opts.required,
            durable,
            upstream,
        );
        if next >= MAX_SEQUENCE {
            // The position was overwritten past any sequence after the look above, before
            // this consumer read its start: given back as a refused attach gives it back.
            graph::record(&*c.seg, entry, &previous);
            c.durable &= !fresh;
            drop(c);
            return Err(AttachError::CorruptPosition { position: next });
        }
        if !c.upstream.is_empty() {
            let refused = if let Some(name) = c.upstream.named_at(entry) {
                // The upstream was freed while this consumer attached, and this attach took
                // its entry: it is gone.
                Some(AttachError::UnknownUpstream { name })
            } else {
                // After the ACTIVE CAS: record first, then look (see `graph`).
                graph::find_cycle(&*c.seg, entry, &record, || {
                    // SeqCst fence: (3) in `graph`, the fence the store-buffering argument
                    // orders against the other attacher's.
                    fence(Ordering::SeqCst)
                })
                .map(|path| cycle_error(&c.seg, &path))
            };
            if let Some(err) = refused {
                // Put the record back as it was, then give the entry back as a detach does
                // (a fresh entry is freed; a durable one taken over keeps its name, its
                // position, its upstreams and the count of what it lost on the way).
                graph::record(&*c.seg, entry, &previous);
                c.durable &= !fresh;
                if dropped > 0 {
                    c.stats.dropped_behind = c.stats.dropped_behind.wrapping_add(dropped);
                    c.store_stats();
                }
                drop(c);
                return Err(err);
            }
        }
        if dropped > 0 {
            c.stats.dropped_behind = c.stats.dropped_behind.wrapping_add(dropped);
            c.store_stats();
        }
        if c.durable {
            c.mark_suspect();
        }
        Ok(c)
    }

    /// The handle of an attached entry, with the entry's counters.
    #[allow(clippy::too_many_arguments)]
    fn handle(
        seg: Arc<Segment>,
        opts: &ConsumerOptions,
        entry: u32,
        next: u64,
        word: u64,
        required: bool,
        durable: bool,
        upstream: barrier::Upstreams,
    ) -> Self {
        let Some(seg) = Attached::consumer(seg, entry) else {
            unreachable!("consumer entry index checked before the handle is made")
        };
        let geo = *seg.geometry();
        let mode = fence::mode();
        // Relaxed: a display value; the max keeps the weaker mode once any process uses it.
        seg.header()
            .fence_mode
            .fetch_max(mode as u32, Ordering::Relaxed);
        let mut c = Consumer {
            wait: opts.wait,
            idle_since: None,
            registered: fence::registered(),
            word,
            next,
            required,
            fixed: geo.fixed,
            sized: geo.sized,
            durable,
            batch_cap: (opts.batch_cap as u64).clamp(1, geo.capacity),
            max_payload: geo.max_payload(),
            idler: Idler::new(opts.wait),
            failed: false,
            policy: opts.on_error,
            poison: None,
            suspect: None,
            exhausted: false,
            careful: 0,
            read_to: 0,
            retry_at: None,
            dead_letter: None,
            flush: opts.flush_within.map(Flush::new),
            scratch: [Vec::new(), Vec::new()],
            stats: ConsumerStats::default(),
            upstream,
            member: None,
            group: None,
            group_scan: Default::default(),
            // Where the consumer reads up to a cursor (fixed-size and sized events): a
            // stamped ring's consumer watches the next slot's stamp instead.
            gather: runs::Gather::new(if geo.fixed { opts.gather } else { 0 }),
            seg,
            _not_sync: PhantomData,
        };
        c.load_stats();
        // Relaxed: a display value.
        c.entry()
            .cold
            .error_policy
            .store(opts.on_error.code(), Ordering::Relaxed);
        c
    }

    /// The holder's details, written after the CAS that made this process the holder and
    /// published by its next CAS.
    pub(super) fn fill_cold(e: &ConsumerEntry, opts: &ConsumerOptions) {
        // Release fence: pairs with the Acquire fence of a snapshot (`info::snapshot`) that
        // reads these fields between two loads of the entry word: one that sees any of
        // them sees the word this process took the entry with (or a later one) on its
        // second load, and reads again.
        fence(Ordering::Release);
        let me = process::current();
        e.cold.start_time.store(me.start_time, Ordering::Relaxed);
        e.cold
            .wait_kind
            .store(opts.wait.kind_code(), Ordering::Relaxed);
        e.cold
            .wait_param
            .store(opts.wait.param_ns(), Ordering::Relaxed);
        e.cold.parked.store(0, Ordering::Relaxed);
        // Relaxed: ordered by the fence above.
        e.cold.attaches.fetch_add(1, Ordering::Relaxed);
    }

    /// Take over the durable entry named `words`, if there is one. Returns the outcome and
    /// the events lost while it did not gate as a required consumer. A stop in progress on
    /// a ring published by a cursor is waited for until `deadline` (`AttachError::Busy`
    /// after it, the entry given up as the broker releases one).
    fn resume(
        seg: &Segment,
        words: &[u64; NAME_LEN / 8],
        flags: u32,
        opts: &ConsumerOptions,
        record: &[u32; MAX_UPSTREAM],
        deadline: Instant,
    ) -> Result<Option<(Found, u64)>, AttachError> {
        let name = opts.name.as_deref();
        let geo = seg.geometry();
        let me = process::current().pid;
        for i in 0..geo.max_consumers {
            let Some(e) = seg.consumer(i) else { break };
            // Acquire: the name, flags and start time were written before the word was
            // published.
            let seen = e.hot.word.load(Ordering::Acquire);
            let state = owned_word::state(seen);
            if matches!(state, consumer_state::FREE | consumer_state::CLAIMED)
                || e.hot.flags.load(Ordering::Relaxed) & consumer_flags::DURABLE == 0
                || !name_is(e, words)
            {
                continue;
            }
            if e.hot.flags.load(Ordering::Relaxed) & consumer_flags::GROUP != 0 {
                return Err(AttachError::IsAGroup {
                    name: name.unwrap_or_default().to_owned(),
                });
            }
            let start_time = e.cold.start_time.load(Ordering::Relaxed);
            match table::consumer::holder(&table::Os, seen, start_time) {
                Holder::Open => {}
                Holder::Free => continue,
                Holder::Held(pid) => {
                    return Err(AttachError::NameInUse {
                        name: name.unwrap_or_default().to_owned(),
                        pid,
                    })
                }
            }
            // Its holder is gone or gave it up, so nobody writes these until the CAS below
            // (which fails if the word moved). Acquire: pairs with the holder's Release clear
            // of STARTING (`started`), after its start's store.
            let old_flags = e.hot.flags.load(Ordering::Acquire);
            // Acquire: pairs with the last holder's Release commit.
            let old_next = e.hot.next.load(Ordering::Acquire);
            // Before the entry is taken: a stop in progress decides the head (as in
            // `attach`).
            let head = seg
                .start_position(Some(deadline))
                .map_err(|_| AttachError::Busy)?;
            // A position whose slot already holds a later sequence was overwritten: whatever
            // the entry says, it did not hold producers there. (A holder that died between
            // publishing ACTIVE and storing its start left STARTING, see `fresh`, which
            // `gated_required` refuses whatever the slot holds.)
            // Acquire (in `Segment::lapped`): on stamped slots, pairs with the producers'
            // Release stamp store; on a fixed-size ring, a look at the write horizon.
            let look = graph::Look {
                seen,
                flags: old_flags,
                next: old_next,
                head,
                lapped: old_next <= head && seg.lapped(old_next),
            };
            let required = flags & consumer_flags::REQUIRED != 0;
            let mut previous = [0; MAX_UPSTREAM];
            // The holder's fields, before the CAS to ACTIVE that publishes them.
            let fill = |kept: bool| {
                Self::fill_cold(e, opts);
                // Relaxed: this process holds the entry; the last holder's record was
                // published by its last CAS, which the take-over CAS read.
                previous = graph::recorded(seg, i, Ordering::Relaxed);
                graph::record(seg, i, record);
                // A declared consumer stays declared whoever takes it over. A new start is
                // flagged STARTING until it is stored (see `fresh`). Relaxed: published by
                // the SeqCst CAS to ACTIVE.
                let starting = if kept { 0 } else { consumer_flags::STARTING };
                e.hot.flags.store(
                    flags | (old_flags & consumer_flags::DECLARED) | starting,
                    Ordering::Relaxed,
                );
            };
            let wake = || {
                if state == consumer_state::ACTIVE {
                    // Its holder died while ACTIVE (an ACTIVE word whose holder lives is
                    // held), maybe between a commit and its wake: producers parked for the
                    // room it freed, and consumers parked behind it, look again, as at the
                    // broker's first sweep that sees a death (this resume may come before
                    // any). A holder that detached or failed made its own wakes.
                    park::wake(&seg.lines().producer_wake.value);
                    park::wake_consumers(seg);
                    park::wake_behind(seg, e);
                }
            };
            // The take-over, then the kept position or a fresh attach's start
            // (`graph::resume`, which the loom models in `client/tests/loom_attach.rs` run
            // too). A stop begun since the look above and not done by the deadline leaves
            // the position of a new start unknown: the entry is given up.
            let resumed = graph::resume(
                &e.hot.next,
                &e.hot.first,
                &e.hot.word,
                me,
                &look,
                required,
                || seg.start_position(Some(deadline)).ok(),
                // SeqCst fence: as (2) in `consumer/barrier.rs`, between the take-over
                // (which a downstream that let a released entry go looks at again) and
                // reading the head.
                || fence(Ordering::SeqCst),
                fill,
                wake,
            );
            let (word, start) = match resumed {
                // Another process changed the entry since the look (its take-over CAS lost):
                // look again.
                Err(graph::Unresumed::Changed) => return Ok(Some((Found::Retry, 0))),
                // Freed under this process after the take-over, which cannot happen while
                // it runs: look again.
                Err(graph::Unresumed::Moved(_)) => return Ok(Some((Found::Retry, 0))),
                Err(graph::Unresumed::Undecided { mine }) => {
                    // Nothing of the entry changed but its word: given up as the broker
                    // releases one (not gating).
                    Self::give_up_late(seg, e, mine);
                    return Err(AttachError::Busy);
                }
                Ok(graph::Resumed::Kept { word }) => (word, old_next),
                Ok(graph::Resumed::Started(s)) if !s.decided => {
                    // ACTIVE at the provisional position, where it gates: given up as the
                    // broker releases one, its record and flags put back and the gap to
                    // where the entry now is counted in the entry (the next attach counts
                    // from there). STARTING stays: the position was read before the entry
                    // gated, and a death before the give-up must not leave it looking like
                    // one producers respected (`gated_required`). Relaxed: published by the
                    // SeqCst give-up CAS.
                    graph::record(seg, i, &previous);
                    e.hot
                        .flags
                        .store(old_flags | consumer_flags::STARTING, Ordering::Relaxed);
                    e.cold
                        .counters
                        .dropped_behind
                        .fetch_add(s.start.saturating_sub(old_next), Ordering::Relaxed);
                    Self::give_up_late(seg, e, s.word);
                    return Err(AttachError::Busy);
                }
                Ok(graph::Resumed::Started(s)) => {
                    started(e);
                    (s.word, s.start)
                }
            };
            let lost = start.saturating_sub(old_next);
            if lost > 0 {
                // Moved ahead as a commit moves it: the consumers that run after this one may
                // deliver up to here, and those parked are woken, as a commit wakes them.
                park::notify_downstreams(seg, e, None, fence::registered());
            }
            let found = Found::Attached {
                index: i,
                next: start,
                word,
                previous,
                fresh: false,
            };
            return Ok(Some((found, lost)));
        }
        Ok(None)
    }

    /// An entry this attach took (its word `mine`, or the broker's release of it) given up
    /// because a stop in progress did not decide the position in time: RELEASED, as the
    /// broker releases an entry (not gating; the next required attach starts at the head,
    /// an optional one keeps the position).
    fn give_up_late(seg: &Segment, e: &ConsumerEntry, mine: u64) {
        let released = table::consumer::released(mine);
        let given = [mine, released]
            .into_iter()
            .any(|w| table::consumer::give_up(&e.hot.word, w, consumer_state::RELEASED).is_ok());
        if given {
            park::entry_changed(seg, e, consumer_state::RELEASED, fence::registered());
        }
    }

    /// Attach to a free entry, starting at the head; a member of the group at index `group`
    /// starts at the group's work sequence instead (it claims there or later). A stop in
    /// progress on a ring published by a cursor is waited for until `deadline`
    /// (`AttachError::Busy` after it, the entry freed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fresh(
        seg: &Segment,
        words: Option<&[u64; NAME_LEN / 8]>,
        flags: u32,
        opts: &ConsumerOptions,
        record: &[u32; MAX_UPSTREAM],
        group: Option<u32>,
        deadline: Instant,
    ) -> Result<Found, AttachError> {
        let group_entry = group.and_then(|g| seg.consumer(g));
        // Where it starts: the head, or the group's work sequence, which only grows, so the
        // provisional start and the start read below keep the entry's `next` monotonic.
        // Acquire: pairs with the members' SeqCst claim CAS.
        // `None`: a stop begun since `attach` looked and not done within the wait; the
        // position is not known, and the attach gives the entry up below.
        let start_at = || {
            group_entry.map_or_else(
                || seg.start_position(Some(deadline)).ok(),
                |g| Some(g.hot.next.load(Ordering::Acquire)),
            )
        };
        let geo = seg.geometry();
        let me = process::current().pid;
        let mut taken = None;
        for i in 0..geo.max_consumers {
            let Some(e) = seg.consumer(i) else { break };
            // Relaxed: only picks a candidate; the CAS decides.
            let seen = e.hot.word.load(Ordering::Relaxed);
            if let Some(mine) = table::consumer::take_free(&e.hot.word, seen, me) {
                taken = Some((i, e, mine));
                break;
            }
        }
        let Some((i, e, mine)) = taken else {
            return Err(AttachError::TableFull {
                what: "consumer",
                max: geo.max_consumers,
            });
        };
        let zero = [0u64; NAME_LEN / 8];
        for (w, v) in e.cold.name.iter().zip(words.unwrap_or(&zero)) {
            w.store(*v, Ordering::Relaxed);
        }
        Self::fill_cold(e, opts);
        let c = &e.cold.counters;
        for ctr in [
            &c.delivered,
            &c.batches,
            &c.skipped,
            &c.dropped_behind,
            &c.clamped,
            &c.wakeups,
            &c.net_wakeups,
            &c.failures,
            &e.cold.graph.redelivered,
            &e.cold.graph.dead_lettered,
            &e.cold.graph.retries,
            &e.cold.claim_end,
            &e.cold.poison_seq,
        ] {
            ctr.store(0, Ordering::Relaxed);
        }
        for w in [&e.cold.group, &e.cold.error_policy, &e.cold.poison_attempts] {
            w.store(0, Ordering::Relaxed);
        }
        graph::record(seg, i, record);
        // Relaxed: published by the SeqCst CAS to ACTIVE below.
        e.cold
            .group
            .store(group.map_or(0, |g| g + 1), Ordering::Relaxed);
        // STARTING until the start is stored (`started`). Relaxed: published by the SeqCst
        // CAS to ACTIVE below.
        e.hot
            .flags
            .store(flags | consumer_flags::STARTING, Ordering::Relaxed);
        // The provisional position, the CAS to ACTIVE, the start (`graph::start_fresh`,
        // which the loom models run too). A scan that sees the entry ACTIVE before its start
        // is stored gates at or before the provisional position; a value that never lowers
        // the gate there would let such a scan gate at its own, later, position and lap the
        // start. The provisional store is Release (not published by the CAS alone): a
        // dependent consumer that reads it then reads this holder's word, never the previous
        // one's (see `consumer/barrier.rs`). Every field above is published by the CAS.
        let begun = graph::start_fresh(
            &e.hot.next,
            &e.hot.first,
            &e.hot.word,
            mine,
            start_at,
            || (),
            || (),
        );
        let (word, start) = match begun {
            Ok(s) if s.decided => (s.word, s.start),
            Ok(graph::Started { word, .. }) => {
                // Not decided after the CAS: freed again, from this word or the broker's
                // release of it.
                if table::consumer::free(&e.hot.word, word, consumer_state::FREE)
                    || table::consumer::free(
                        &e.hot.word,
                        table::consumer::released(word),
                        consumer_state::FREE,
                    )
                {
                    park::entry_changed(seg, e, consumer_state::FREE, fence::registered());
                }
                return Err(AttachError::Busy);
            }
            Err(graph::Unstarted::Undecided) => {
                // Never ACTIVE: freed from the CLAIMED word.
                let _ = table::consumer::free(&e.hot.word, mine, consumer_state::FREE);
                return Err(AttachError::Busy);
            }
            // Freed under this process, which cannot happen while it runs: look again.
            Err(graph::Unstarted::Moved(_)) => return Ok(Found::Retry),
        };
        started(e);

        if let Some(w) = words {
            if named_elsewhere(seg, i, w) {
                // From this word, or the broker's release of it.
                if !table::consumer::free(&e.hot.word, word, consumer_state::FREE) {
                    let released = table::consumer::released(word);
                    let _ = table::consumer::free(&e.hot.word, released, consumer_state::FREE);
                }
                // A consumer after the name may have resolved this entry while it was ACTIVE:
                // parked, it finds it lost now, as after any durable entry's free.
                park::entry_changed(seg, e, consumer_state::FREE, fence::registered());
                return Ok(Found::Retry);
            }
        }
        Ok(Found::Attached {
            index: i,
            next: start,
            word,
            previous: [0; MAX_UPSTREAM],
            fresh: true,
        })
    }

    /// Resolve the names of `ConsumerOptions::after` to the durable entries holding them.
    fn resolve(seg: &Segment, opts: &ConsumerOptions) -> Result<barrier::Upstreams, AttachError> {
        let mut names: Vec<&str> = Vec::with_capacity(opts.upstream.len());
        for n in &opts.upstream {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
        if names.len() > MAX_UPSTREAM {
            return Err(AttachError::TooManyUpstreams { max: MAX_UPSTREAM });
        }
        let mut ups = barrier::Upstreams::default();
        for name in names {
            if opts.name.as_deref() == Some(name) {
                return Err(AttachError::SelfUpstream {
                    name: name.to_owned(),
                });
            }
            let words = pack_name(name)?;
            let found = (0..seg.geometry().max_consumers).find_map(|i| {
                let e = seg.consumer(i)?;
                // Acquire: the name and flags were written before the word was published.
                let word = e.hot.word.load(Ordering::Acquire);
                let flags = e.hot.flags.load(Ordering::Relaxed);
                let durable = flags & consumer_flags::DURABLE != 0;
                (!matches!(
                    owned_word::state(word),
                    consumer_state::FREE | consumer_state::CLAIMED
                ) && durable
                    && name_is(e, &words))
                .then_some((i, word, flags))
            });
            let Some((index, word, flags)) = found else {
                return Err(AttachError::UnknownUpstream {
                    name: name.to_owned(),
                });
            };
            ups.push(index, word, flags, words);
        }
        Ok(ups)
    }
}
