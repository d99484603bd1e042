//! Worker group members: attaching to a group, claiming from its work sequence, adopting
//! the claims of members that are gone, and leaving (the protocol is in `crate::group`).

use shmring_layout::{MAX_SEQUENCE, MAX_UPSTREAM};

use super::deliver::call;
use super::policy::{self, Verdict, DIED_IN_HANDLER};
use super::*;
use crate::graph;
use crate::group;

/// Claims between two scans of the group's members for claims left behind.
const SCAN_EVERY_CLAIMS: u32 = 64;
/// Empty polls between two such scans (a member that never parks still scans).
const SCAN_EVERY_IDLE_POLLS: u32 = 1024;

/// What a member handle holds beside the ordinary consumer's fields. Its own claim is
/// `[Consumer::next, claim_end)`.
pub(crate) struct Member {
    /// The group's entry index.
    group: u32,
    claim_end: u64,
    /// Entries of members that are gone, taken over to deliver their claims.
    adopted: Vec<Adopted>,
    claims: u32,
    idle_polls: u32,
    /// Its own claim up to here was taken over from a member that died or failed: what it
    /// delivers below this counts as redelivered.
    redeliver_until: u64,
}

struct Adopted {
    index: u32,
    /// Its word as this handle holds it (RESUMING by this process).
    word: u64,
    /// The next sequence of its claim to deliver, and the claim's end.
    at: u64,
    end: u64,
    /// Whether what it delivers counts as redelivered (its holder died or failed; a claim
    /// given back by a member that left was never handed to a handler). Each event of an
    /// adopted claim is marked under way in the entry's poison record before it is handed
    /// over (its holder may have died in any of them), as in a durable consumer's window.
    redelivery: bool,
    /// In a claim without `redelivery`: its first event, if the entry's poison record names
    /// it (a member had it and failed at it, and left before its retry): counted as
    /// redelivered when it is handed over again.
    handled: Option<u64>,
    /// The event the entry's poison record names, and this handle's mark of the attempt at
    /// it under way (see `policy`): the error policy counts on from the holders before.
    poison: Option<u64>,
    suspect: Option<(u64, u32)>,
}

/// The attach of a worker: the group's entry found or created, then a member entry: one
/// that a member left holding a claim (it carries on with that claim), or a free one.
/// Returns the member's state and its entry's index, start and word.
pub(super) fn attach(
    seg: &Arc<Segment>,
    group_name: &str,
    opts: &ConsumerOptions,
    upstream: &barrier::Upstreams,
) -> Result<(Member, u32, u64, u64), AttachError> {
    let words = attach::pack_name(group_name)?;
    let record = upstream.record();
    let mut creating = 0u32;
    let group = loop {
        match find_group(seg, &words, group_name)? {
            GroupAt::Index(i) => {
                same_upstreams(seg, i, group_name, &record, opts)?;
                break i;
            }
            // Its creator is between its ACTIVE CAS and its DETACHED one, storing the work
            // sequence: a claim now could be undone by that store. A few instructions (or
            // its death, after which `find_group` finishes the creation); a creator stopped
            // there (a debugger, SIGSTOP) is waited for without spinning.
            GroupAt::BeingCreated => {
                creating += 1;
                if creating < 256 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            GroupAt::None => {
                let flags =
                    consumer_flags::REQUIRED | consumer_flags::DURABLE | consumer_flags::GROUP;
                // The group's upstreams are recorded in its entry, before its ACTIVE CAS, as
                // a dependent consumer's are in its own (see `graph`).
                if let attach::Found::Attached { index, word, .. } = Consumer::fresh(
                    seg,
                    Some(&words),
                    flags,
                    opts,
                    &record,
                    None,
                    attach_deadline(),
                )? {
                    let e = seg
                        .consumer(index)
                        .unwrap_or_else(|| unreachable!("index from the table scan"));
                    if let Some(name) = upstream.named_at(index) {
                        // An upstream was freed while this member attached, and the group's
                        // entry took its place: it is gone.
                        free_new_group(seg, e, word);
                        return Err(AttachError::UnknownUpstream { name });
                    }
                    if let Some(cycle) = cycle_of_new_group(seg, index, word) {
                        return Err(cycle);
                    }
                    // The group gates with no holder: DETACHED, like a durable consumer
                    // whose events wait for it. From this word or the broker's release of it.
                    if table::consumer::give_up(&e.hot.word, word, consumer_state::DETACHED).is_ok()
                    {
                        break index;
                    }
                }
                std::thread::yield_now();
            }
        }
    };
    let flags = consumer_flags::REQUIRED | consumer_flags::MEMBER;
    loop {
        if let Some((a, word)) = take_left_entry(seg, group, opts) {
            let m = Member {
                claim_end: a.end,
                // A claim left by a member counts none of its events as redelivered, but the
                // one its poison record names, which a handler had.
                redeliver_until: if a.redelivery {
                    a.end
                } else {
                    a.handled.map_or(0, |k| k + 1)
                },
                ..Member::new(group)
            };
            return Ok((m, a.index, a.at, word));
        }
        if let attach::Found::Attached {
            index, next, word, ..
        } = Consumer::fresh(
            seg,
            None,
            flags,
            opts,
            &[0; MAX_UPSTREAM],
            Some(group),
            attach_deadline(),
        )? {
            return Ok((Member::new(group), index, next, word));
        }
        std::thread::yield_now();
    }
}

/// The cycle check of a group being created (see `graph`: record first, then look), by its
/// creator after its ACTIVE CAS, or by a process finishing the creation of a creator that
/// died: the group's recorded upstreams, walked after a SeqCst fence. A cycle: the entry
/// (ACTIVE as `word`; no member joins it while it is) is freed, and the cycle returned.
fn cycle_of_new_group(seg: &Segment, index: u32, word: u64) -> Option<AttachError> {
    let e = seg.consumer(index)?;
    // Relaxed: written before the ACTIVE CAS that the caller made or read (Acquire).
    let record = graph::recorded(seg, index, Ordering::Relaxed);
    if record.iter().all(|&u| u == 0) {
        return None;
    }
    let path = graph::find_cycle(seg, index, &record, || {
        // SeqCst fence: (3) in `graph`.
        fence(Ordering::SeqCst)
    })?;
    free_new_group(seg, e, word);
    Some(attach::cycle_error(seg, &path))
}

/// Give back a group's entry that is being created (ACTIVE as `word`) as FREE: a consumer
/// after the group's name may have resolved it meanwhile and parked; it finds it lost now,
/// as after any durable entry's free.
fn free_new_group(seg: &Segment, e: &ConsumerEntry, word: u64) {
    if table::consumer::give_up(&e.hot.word, word, consumer_state::FREE).is_ok() {
        park::entry_changed(seg, e, consumer_state::FREE, fence::registered());
    }
}

/// Whether a member that names `record` (entry indices plus one, see `graph`) may join the
/// group at `group`: the group's entry records the upstreams the member that created it
/// named, and every member reads behind those (as sets; a declared group records none).
fn same_upstreams(
    seg: &Segment,
    group: u32,
    group_name: &str,
    record: &[u32; MAX_UPSTREAM],
    opts: &ConsumerOptions,
) -> Result<(), AttachError> {
    // Relaxed: written before the group's ACTIVE CAS, which `find_group`'s Acquire load of
    // its word (or of a later word) synchronizes with.
    let recorded: Vec<u32> = graph::recorded(seg, group, Ordering::Relaxed)
        .into_iter()
        .filter(|&u| u != 0)
        .collect();
    let asked: Vec<u32> = record.iter().copied().filter(|&u| u != 0).collect();
    if recorded.len() == asked.len() && asked.iter().all(|u| recorded.contains(u)) {
        return Ok(());
    }
    let name = |u: u32| {
        seg.consumer(u - 1)
            .filter(|e| e.hot.flags.load(Ordering::Relaxed) & consumer_flags::DURABLE != 0)
            .map(attach::entry_name)
            .unwrap_or_else(|| format!("#{}", u - 1))
    };
    Err(AttachError::GroupUpstreams {
        group: group_name.to_owned(),
        recorded: recorded.into_iter().map(name).collect(),
        asked: opts.upstream.clone(),
    })
}

/// Take over, as this member's own entry, an entry of the group that its member left
/// (gave up or died) holding a claim: ACTIVE by this process, carrying on with the claim.
/// So a group's entries number at most its largest number of members at once.
fn take_left_entry(seg: &Segment, group: u32, opts: &ConsumerOptions) -> Option<(Adopted, u64)> {
    let a = find_left_claim(seg, group, None, false)?;
    let e = seg.consumer(a.index)?;
    Consumer::fill_cold(e, opts);
    // SeqCst: a gating change (see `table`); publishes the holder's details.
    match table::consumer::set(&e.hot.word, a.word, consumer_state::ACTIVE) {
        Ok(word) => Some((a, word)),
        // Taken from this process, which cannot happen while it runs: attach afresh.
        Err(_) => None,
    }
}

/// Scan the group's members for an entry left open (its process is gone, or it left or
/// failed holding a claim) and take it over (RESUMING by this process, still gating).
/// `published_only`: only an entry whose next event is published (waiting for a member).
/// A live member adopts only those, so that it does not collect the entries of members
/// that left holding a claim the producers have not reached: those stay DETACHED (they
/// hold nothing back yet) for a member that joins to carry on with.
fn find_left_claim(
    seg: &Segment,
    group: u32,
    skip: Option<u32>,
    published_only: bool,
) -> Option<Adopted> {
    for i in 0..seg.geometry().max_consumers {
        let Some(e) = seg.consumer(i) else { break };
        if Some(i) == skip {
            continue;
        }
        // Acquire: the flags and group were written before the word was published.
        let seen = e.hot.word.load(Ordering::Acquire);
        if !consumer_state::gates(owned_word::state(seen))
            || e.hot.flags.load(Ordering::Relaxed) & consumer_flags::MEMBER == 0
            || e.cold.group.load(Ordering::Relaxed) != group + 1
        {
            continue;
        }
        if published_only {
            // Acquire: pairs with the holder's Release commit; a hint, the range is read
            // again after the takeover.
            let next = e.hot.next.load(Ordering::Acquire);
            // Acquire: pairs with the producer's Release stamp store.
            let stamp = seg.slot(next).header.stamp.load(Ordering::Acquire);
            if !stamp::reached(stamp, next) {
                continue;
            }
        }
        let start_time = e.cold.start_time.load(Ordering::Relaxed);
        // Asked only here, with a candidate in hand (a member of the group with a
        // published event waiting: `adopt` then reads /proc to judge its holder anyway):
        // `process::current` makes a system call (getpid), and a member scans every few
        // claims, on its data path, where mostly no other member has an event waiting.
        let me = process::current().pid;
        let Some(word) = group::adopt(&table::Os, &e.hot.word, seen, start_time, me) else {
            continue;
        };
        let (before, _) = group::claim_range(&e.hot.next, &e.cold.claim_end);
        // Release: SYNC POINT with the producers' Acquire gate scan, as `commit`.
        let poison =
            policy::take_over_record(&e.cold, before, |n| e.hot.next.store(n, Ordering::Release));
        let (at, end) = group::claim_range(&e.hot.next, &e.cold.claim_end);
        // A member that leaves keeps its pid in the DETACHED word (`give_up`); DETACHED
        // with no owner is the broker's giving back of an entry whose adopter died
        // (`Ring::detach_member_entry_seen`): a death, as RESUMING is; or a member's giving
        // back of a claim it carried on from one that died or failed (`give_up_handled`).
        let given_back =
            owned_word::state(seen) == consumer_state::DETACHED && owned_word::owner(seen) == 0;
        let died_holding = given_back
            || matches!(
                owned_word::state(seen),
                consumer_state::ACTIVE | consumer_state::RESUMING
            );
        if died_holding || at > before {
            // Its holder (the member, or a member delivering it as an adopted claim) died
            // holding it, maybe between a commit and its wake, or the takeover just moved
            // the entry past a skip its holder had begun: producers parked for the room
            // look again, as at the broker's first sweep that sees a death. This takeover
            // may come before any sweep, and once the entry is held or freed again no sweep
            // sees the death. A member that left or failed made its own wakes; the consumers
            // after the group are woken by the caller (`wake_after_group`), and here, for a
            // holder killed inside its own wake of the group's line (`park::wake_behind`).
            park::wake(&seg.lines().producer_wake.value);
            if died_holding {
                park::wake_behind(seg, e);
            }
        }
        return Some(Adopted {
            index: i,
            word,
            at,
            end,
            // Every holder but a member that left (whose claim no handler saw) may have
            // handled some of it.
            redelivery: given_back || owned_word::state(seen) != consumer_state::DETACHED,
            handled: poison.filter(|&k| k == at),
            poison,
            suspect: None,
        });
    }
    None
}

/// Where `find_group` found a group.
enum GroupAt {
    Index(u32),
    /// No group of that name yet.
    None,
    /// Its creator (alive) has not made it DETACHED yet.
    BeingCreated,
}

/// The group named `words`, or an error if the name belongs to a durable consumer. A group
/// whose creator is still making it is not handed out: the creator stores the work
/// sequence (`Consumer::fresh`) before it gives the entry up as DETACHED, and after that
/// only members' claim CASes write it (what `group::finished` and the gate rely on).
///
/// The whole table is looked at: an entry of the name whose creator died after its ACTIVE
/// CAS is finished here, with the duplicate-name check its creator did not live to make,
/// wherever it lies. One that another entry of the name already holds is freed (it holds no
/// member: members join DETACHED groups only), so that a second group never takes every
/// event again, nor holds producers for ever at its start.
fn find_group(
    seg: &Segment,
    words: &[u64; NAME_LEN / 8],
    name: &str,
) -> Result<GroupAt, AttachError> {
    let mut found = GroupAt::None;
    let mut durable = false;
    for i in 0..seg.geometry().max_consumers {
        let Some(e) = seg.consumer(i) else { break };
        // Acquire: the name and flags were written before the word was published.
        let seen = e.hot.word.load(Ordering::Acquire);
        let state = owned_word::state(seen);
        // Acquire: pairs with a creator's Release clear of STARTING (`attach::started`).
        let flags = e.hot.flags.load(Ordering::Acquire);
        if matches!(state, consumer_state::FREE | consumer_state::CLAIMED)
            || flags & consumer_flags::DURABLE == 0
            || !attach::name_is(e, words)
        {
            continue;
        }
        if flags & consumer_flags::GROUP == 0 {
            // The name is a durable consumer's, unless a group of it is in the table too: a
            // durable attach racing the group's creation gives way by its own check, wherever
            // its entry lies.
            durable = true;
            continue;
        }
        if state != consumer_state::ACTIVE {
            if matches!(found, GroupAt::None | GroupAt::BeingCreated) {
                found = GroupAt::Index(i);
            }
            continue;
        }
        let start_time = e.cold.start_time.load(Ordering::Relaxed);
        if table::consumer::holder(&table::Os, seen, start_time) != Holder::Open {
            // Its creator lives and makes its own check.
            if matches!(found, GroupAt::None) {
                found = GroupAt::BeingCreated;
            }
            continue;
        }
        // Its creator died before it stored the group's start (STARTING): the work sequence
        // is the position read before the ACTIVE CAS, which producers may have run a lap
        // past before the entry gated. Free it (it holds no member: members join DETACHED
        // groups only, and the creator clears STARTING before it gives the entry up); the
        // attaching member makes the group again, from the position then.
        if flags & consumer_flags::STARTING != 0 {
            free_new_group(seg, e, seen);
            continue;
        }
        // Its creator died between making it ACTIVE and DETACHED: finish that for it, the
        // duplicate-name check and the cycle check of its upstreams included (this process's
        // fence comes after the creator's ACTIVE CAS, which its load above read, so the
        // arguments of `attach::named_elsewhere` and `graph` hold for it as for the
        // creator).
        if attach::named_elsewhere(seg, i, words) {
            free_new_group(seg, e, seen);
            continue;
        }
        // A cycle frees the entry: the attaching member then creates the group again, and
        // is refused itself.
        if cycle_of_new_group(seg, i, seen).is_some()
            || table::consumer::give_up(&e.hot.word, seen, consumer_state::DETACHED).is_err()
        {
            if matches!(found, GroupAt::None) {
                found = GroupAt::BeingCreated;
            }
            continue;
        }
        if matches!(found, GroupAt::None | GroupAt::BeingCreated) {
            found = GroupAt::Index(i);
        }
    }
    match found {
        GroupAt::None if durable => Err(AttachError::NotAGroup {
            name: name.to_owned(),
        }),
        found => Ok(found),
    }
}

impl Member {
    /// The group's entry index.
    pub(super) fn group(&self) -> u32 {
        self.group
    }

    /// The end of its own claim.
    pub(super) fn claim_end(&self) -> u64 {
        self.claim_end
    }

    pub(super) fn new(group: u32) -> Self {
        Member {
            group,
            claim_end: 0,
            adopted: Vec::new(),
            claims: 0,
            idle_polls: 0,
            redeliver_until: 0,
        }
    }
}

impl Consumer {
    fn group_entry(&self, m: &Member) -> &ConsumerEntry {
        self.seg
            .consumer(m.group)
            .unwrap_or_else(|| unreachable!("group entry index checked at attach"))
    }

    /// The first claim (unless it carries on with a claim taken over) and the first scan
    /// for claims left behind, right after the attach.
    pub(super) fn join_group(&mut self) {
        self.claim_if_done();
        self.adopt_left_claims();
        // A member that carries on with an entry left holding a claim may have moved its
        // position past a skip its last holder had begun (`take_over_record`).
        self.wake_after_group();
    }

    /// Claim the next sequences from the group's work sequence (see `group::claim`).
    fn claim(&mut self) {
        let Some(mut m) = self.member.take() else {
            return;
        };
        let seg = &*self.seg;
        let cap = self.batch_cap;
        // A group after other consumers claims only what they have finished (a claim of one
        // at the work sequence otherwise, as when nothing is published: it is delivered once
        // they pass it). An upstream that changed reads as nothing finished: the poll
        // revalidates it.
        let limit = if self.upstream.is_empty() {
            u64::MAX
        } else {
            self.barrier().unwrap_or(0)
        };
        let e = self.entry();
        let (start, end) = group::claim(
            &self.group_entry(&m).hot.next,
            &e.hot.next,
            &e.cold.claim_end,
            cap,
            |w| published_run(seg, w, cap.min(limit.saturating_sub(w))),
        );
        self.next = start;
        m.claim_end = end;
        // A claim of its own: nothing in it is a redelivery, even where it covers the
        // events of a claim taken over whose holder died before taking it (the work
        // sequence had not moved past them), which were counted when delivered then.
        m.redeliver_until = 0;
        m.claims = m.claims.wrapping_add(1);
        let scan = m.claims % SCAN_EVERY_CLAIMS == 0;
        self.member = Some(m);
        // The entry's `next` moved from the end of the finished claim to the new one's
        // start (the work sequence), which may raise the group's floor.
        self.wake_after_group();
        if scan {
            self.adopt_left_claims();
        }
    }

    /// A member entry this member freed gates no more: the producers parked for room may
    /// have waited for it (the change is "publish" (1) on the producer wake line). One load
    /// of the waiter count when nobody parks; it does not register the process, as
    /// `wake_after_group`.
    fn wake_producers(&self) {
        park::notify(
            &self.seg.lines().producer_wake.value,
            self.seg.header(),
            self.registered,
        );
    }

    /// A member entry's position moved (a claim, a commit of an adopted claim, a skip at a
    /// takeover) or an adopted entry was freed: a consumer after the group may be parked on
    /// the floor before the change (its barrier reads the members' positions,
    /// `group::finished`). The change is "publish" (1) of the park protocol on the consumer
    /// line, this member's entry line and the group's (see `park::notify_downstreams`); a
    /// load of each waiter count when nobody parks.
    ///
    /// It does not register the process for membarrier: a member's attach and drop make
    /// these changes, and neither registers (see `fence`); unregistered, the notify's fence
    /// is a full one.
    fn wake_after_group(&self) {
        park::notify_downstreams(&self.seg, self.entry(), self.group, self.registered);
    }

    /// A member entry was given back (a claim left for the others to adopt, or freed): the
    /// consumers after the group, as [`Consumer::wake_after_group`], and the other members
    /// wherever they park. A member held by the group's upstreams parks on an upstream's
    /// line, which this change does not notify, and looks for left claims only when its
    /// park ends (`Consumer::park`): every line is woken (a cold path: a member leaving or
    /// failing).
    pub(super) fn wake_after_left_claim(&self) {
        park::wake_consumers(&self.seg);
    }

    /// `poll_once` of a member: an adopted claim first, then its own.
    #[cold]
    pub(super) fn poll_member<F, E>(&mut self, handler: &mut F) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        if self.failed {
            return Err(PollError::Failed);
        }
        if self.suspect.is_some() {
            // A retry of its own claim is marked under way, but the adopted claims come
            // first: a death in one of those must not count against it. Taken back, and
            // marked again right before the retry is made (the window of one event).
            self.undo_suspect();
            self.careful = self.careful.max(1);
        }
        // What every upstream has finished (none: no bound). Delivery stops there, in the
        // adopted claims and in its own, whatever a claim covers.
        let limit = self.upstream_limit()?;
        let n = match self.poll_adopted(handler, limit) {
            Ok(n) => n,
            Err(e) => {
                // Stopped at an adopted claim's event (that claim is left FAILED there): its
                // own claim and the other adopted ones are not at fault and go back to the
                // others now, not when the handle is dropped.
                self.give_back_adopted();
                self.give_back_own();
                return Err(e);
            }
        };
        if n > 0 || self.retry_at.is_some() {
            // Delivered, or an adopted claim's event failed and its retry waits: nothing of
            // the own claim during the back-off either.
            return Ok(n);
        }
        let Some(claim_end) = self.member.as_ref().map(|m| m.claim_end) else {
            return Ok(0);
        };
        let start = self.next;
        let end = claim_end.min(limit);
        let mut n = 0u64;
        while start + n < end {
            let seq = start + n;
            // Acquire: SYNC POINT with the producer's Release stamp store, as `poll_once`.
            let stamp = self.seg.slot(seq).header.stamp.load(Ordering::Acquire);
            if stamp == seq {
                n += 1;
                continue;
            }
            if n == 0 {
                match stamp::read(stamp, seq) {
                    // A repaired hole holds no event; a lapped slot means the table was
                    // written from outside (neither the broker nor `Ring` releases a group's
                    // entries): skip and count either.
                    Stamp::Repaired => {
                        self.commit(seq + 1, 0, 1, 0);
                        self.claim_if_done();
                        return Ok(0);
                    }
                    Stamp::Lapped => {
                        self.stats.dropped_behind = self.stats.dropped_behind.wrapping_add(1);
                        self.commit(seq + 1, 0, 0, 0);
                        self.claim_if_done();
                        return Ok(0);
                    }
                    Stamp::Published | Stamp::Pending => {}
                }
            }
            break;
        }
        if n == 0 {
            return self.member_idle();
        }
        if !self.run_still_allowed() {
            // A released upstream gated again while the run was scanned: look again.
            return Ok(0);
        }
        if self.poison.is_some() {
            // As in `poll`: the batch ends before an event whose attempts are used up, and
            // the policy acts on it once it is the position.
            if let Some(k) = self.exhausted_in(start, n) {
                if k == start {
                    self.exhausted = true;
                    let r = self.policy_first().unwrap_or(Ok(0));
                    self.claim_if_done();
                    return r;
                }
                n = k - start;
            }
        }
        let redeliver_until = self.member.as_ref().map_or(0, |m| m.redeliver_until);
        let delivered_before = self.stats.delivered;
        let r = self.deliver_in_place::<super::deliver::Stamped, _, _>(start, n, (), handler);
        if start < redeliver_until {
            // The events of a taken-over claim that the handler took (the run lies inside
            // the claim; tombstones and repaired slots are not events).
            let handed = self
                .stats
                .delivered
                .wrapping_sub(delivered_before)
                .min(redeliver_until - start);
            self.stats.redelivered = self.stats.redelivered.wrapping_add(handed);
            if !self.failed {
                // Not once FAILED: the entry is open to another member, whose counts these
                // stores would overwrite.
                self.store_stats();
            }
        }
        let delivered = match r {
            Ok(n) => n,
            Err(e) => {
                // This member is failed: what it adopted goes back to the others now, not
                // when the handle is dropped.
                self.give_back_adopted();
                return Err(e);
            }
        };
        self.claim_if_done();
        Ok(delivered)
    }

    pub(super) fn claim_if_done(&mut self) {
        if self
            .member
            .as_ref()
            .is_some_and(|m| self.next >= m.claim_end)
        {
            self.claim();
        }
    }

    /// The group's work sequence, or this member's position, if either is at or past
    /// `MAX_SEQUENCE` (another process overwrote the table): a member's attach refuses it.
    pub(super) fn corrupt_work(&self) -> Option<u64> {
        let m = self.member.as_ref()?;
        // Acquire: pairs with the SeqCst CAS of the member that claimed last; only the
        // value is looked at.
        let work = self.group_entry(m).hot.next.load(Ordering::Acquire);
        [work, self.next].into_iter().find(|&p| p >= MAX_SEQUENCE)
    }

    /// Nothing of the claims is published: check the entry, and now and then look for
    /// claims left behind.
    fn member_idle(&mut self) -> Result<usize, PollError> {
        // Acquire: pairs with any SeqCst CAS of the entry's word.
        if self.entry().hot.word.load(Ordering::Acquire) != self.word {
            // Members are never released (the broker leaves group entries alone): the entry
            // is not this handle's any more.
            self.failed = true;
            return Err(PollError::EntryLost);
        }
        if is_deleted(&self.seg) {
            return Err(PollError::Deleted);
        }
        if self.next >= MAX_SEQUENCE {
            // Its claim came from a work sequence no ring reaches (another process overwrote
            // the group's entry): nothing is ever published there.
            return Err(PollError::CorruptPosition {
                position: self.next,
            });
        }
        let scan = self.member.as_mut().is_some_and(|m| {
            m.idle_polls = m.idle_polls.wrapping_add(1);
            m.idle_polls % SCAN_EVERY_IDLE_POLLS == 0
        });
        if scan {
            self.adopt_left_claims();
        }
        Ok(0)
    }

    /// Whether a member has an event waiting (its own claim or an adopted one), below
    /// `limit`, what its upstreams have finished.
    pub(super) fn member_pending(&self, limit: u64) -> bool {
        let reached = |seq: u64| {
            // Acquire: as in `poll_once`.
            let s = self.seg.slot(seq).header.stamp.load(Ordering::Acquire);
            seq < limit && stamp::reached(s, seq)
        };
        let adopted = self
            .member
            .as_ref()
            .is_some_and(|m| m.adopted.iter().any(|a| reached(a.at)));
        adopted || reached(self.next)
    }

    /// The lowest sequence this consumer could deliver next: its position, or a member's
    /// adopted claim below it (what `member_pending` looks at).
    pub(super) fn lowest_to_deliver(&self) -> u64 {
        let adopted = self.member.as_ref().map(|m| m.adopted.iter().map(|a| a.at));
        adopted.into_iter().flatten().fold(self.next, u64::min)
    }

    /// Whether the member still has an adopted claim to deliver.
    pub(super) fn holds_adopted(&self) -> bool {
        self.member.as_ref().is_some_and(|m| !m.adopted.is_empty())
    }

    /// Scan the group's members for entries left open (their process is gone, or they
    /// left or failed holding a claim) and adopt them.
    pub(super) fn adopt_left_claims(&mut self) {
        let Some(mut m) = self.member.take() else {
            return;
        };
        let before = m.adopted.len();
        while let Some(a) = find_left_claim(&self.seg, m.group, Some(self.seg.index()), true) {
            m.adopted.push(a);
        }
        let adopted = m.adopted.len() > before;
        self.member = Some(m);
        if adopted {
            // A takeover may have moved the entry past a skip its last holder had begun.
            self.wake_after_group();
        }
    }

    /// Deliver what is published of the adopted claims; free each entry once it is done.
    fn poll_adopted<F, E>(&mut self, handler: &mut F, limit: u64) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        let Some(mut m) = self.member.take() else {
            return Ok(0);
        };
        let seg = Arc::clone(self.seg.arc());
        let mut r = Ok(0);
        let mut i = 0;
        while i < m.adopted.len() {
            let a = &mut m.adopted[i];
            r = self.deliver_adopted(a, handler, limit);
            let done = a.at >= a.end || seg.line().closed_at().is_some_and(|stop| a.at >= stop);
            let (index, word) = (a.index, a.word);
            let Some(e) = seg.consumer(index) else {
                m.adopted.swap_remove(i);
                continue;
            };
            if r.is_err() {
                // Its handler failed here: leave the claim, at the failing event, to another.
                self.fold_skips(e);
                // Counted in the claim's entry too (this member's own counts its attempts):
                // the entry says FAILED again, and a reader (the broker) tells this failure
                // from the one it was adopted at by the entry's failure count. Relaxed: the
                // give-up's CAS below publishes it.
                e.cold.counters.failures.fetch_add(1, Ordering::Relaxed);
                let _ = table::consumer::give_up(&e.hot.word, word, consumer_state::FAILED);
                m.adopted.swap_remove(i);
                break;
            }
            if done {
                self.fold_skips(e);
                let freed = table::consumer::free(&e.hot.word, word, consumer_state::FREE);
                m.adopted.swap_remove(i);
                self.wake_after_group();
                if freed {
                    self.wake_producers();
                }
            } else {
                i += 1;
            }
            if r.as_ref().is_ok_and(|&n| n > 0) || self.retry_at.is_some() {
                break;
            }
        }
        self.member = Some(m);
        r
    }

    /// Deliver what is published of an adopted claim, under this member's error policy:
    /// the attempts at a failing event are counted in the adopted entry, on from its holders
    /// before (see `policy`), so an event that fails in every member that adopts it is still
    /// skipped or stopped at once its attempts are used up.
    fn deliver_adopted<F, E>(
        &mut self,
        a: &mut Adopted,
        handler: &mut F,
        limit: u64,
    ) -> Result<usize, PollError>
    where
        F: FnMut(Event<'_>) -> Result<(), E>,
        E: std::fmt::Display,
    {
        let seg = Arc::clone(self.seg.arc());
        let Some(e) = seg.consumer(a.index) else {
            return Ok(0);
        };
        let cold = &e.cold;
        let max = self.max_payload;
        let (mut delivered, mut skipped, mut clamped) = (0u64, 0u64, 0u64);
        // Slots a later lap wrote: the table was written from outside (the adopted entry
        // gates at its claim), skipped and counted as `poll_member` does.
        let mut lapped = 0u64;
        // Events handed over again: the claim's holder died or failed, or its first event
        // had a failed attempt (`Adopted::handled`).
        let mut handled_again = 0u64;
        let (mut dead_lettered, mut failed_attempt) = (false, false);
        let mut outcome = Ok(());
        // The claim up to what the upstreams have finished (see `poll_member`) and this
        // member's batch cap, and of that the run published (or repaired) now: scanned
        // before the re-check of a released upstream, as `poll` does (barrier, scan,
        // re-check: see `barrier`). The last event of the run that is not a tombstone or a
        // repaired slot ends the batch (u64::MAX: none).
        let end = a.end.min(limit).min(a.at.saturating_add(self.batch_cap));
        let (mut scanned, mut last_event) = (a.at, u64::MAX);
        while scanned < end {
            if scanned > a.at
                && a.poison == Some(scanned)
                && policy::used_up(cold, scanned, a.suspect, self.policy).is_some()
            {
                // The batch ends before an event whose attempts are used up (as `poll_member`
                // ends a run of its own claim): the events before it are handed over with
                // the edge on the last, and the next poll starts at that event (skipped, and
                // the events after it handed over in the same batch; or stopped at).
                break;
            }
            let slot = seg.slot(scanned);
            // Acquire: SYNC POINT with the producer's Release stamp store (read again below).
            let st = slot.header.stamp.load(Ordering::Acquire);
            if st == scanned {
                // Relaxed: ordered by the Acquire stamp load above.
                if slot.header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE == 0 {
                    last_event = scanned;
                }
            } else if !matches!(stamp::read(st, scanned), Stamp::Repaired | Stamp::Lapped) {
                break;
            }
            scanned += 1;
        }
        if scanned > a.at && !self.run_still_allowed() {
            return Ok(0);
        }
        let end = scanned;
        while a.at < end && delivered + skipped + lapped < self.batch_cap {
            let seq = a.at;
            let slot = seg.slot(seq);
            // Acquire: SYNC POINT with the producer's Release stamp store.
            let st = slot.header.stamp.load(Ordering::Acquire);
            if st != seq {
                match stamp::read(st, seq) {
                    Stamp::Repaired => skipped += 1,
                    Stamp::Lapped => lapped += 1,
                    Stamp::Published | Stamp::Pending => break,
                }
                a.at += 1;
                continue;
            }
            // Relaxed: ordered by the Acquire stamp load above.
            if slot.header.flags.load(Ordering::Relaxed) & SLOT_FLAG_TOMBSTONE != 0 {
                skipped += 1;
                a.at += 1;
                continue;
            }
            let mut len = slot.header.len.load(Ordering::Relaxed) as usize;
            if len > max {
                len = max;
                clamped += 1;
            }
            if a.poison == Some(seq) {
                if let Some(attempts) = policy::used_up(cold, seq, a.suspect, self.policy) {
                    // Used up by processes that died in the handler: the policy acts without
                    // handing the event over again.
                    if self.policy.verdict(attempts) == Verdict::Skip {
                        self.skip_adopted(a.index, seq, attempts, DIED_IN_HANDLER, len);
                        a.at += 1;
                        dead_lettered = true;
                        continue;
                    }
                    outcome = Err(PollError::HandlerFailed {
                        sequence: seq,
                        attempts,
                    });
                    break;
                }
            }
            // Its holder may have died in any of its events, or (a claim given back) the
            // adopter that takes it next may: counted before it is tried.
            policy::mark_before(cold, seq, &mut a.suspect, &mut a.poison);
            // SAFETY: the stamp equalled `seq` (Acquire) and the adopted entry gates
            // producers at `a.at <= seq` until the commit below, so the slot is not
            // overwritten while the handler reads it.
            let bytes = unsafe { slot.payload(len) };
            let last = seq == last_event;
            // The timed flush cuts the batch here, as in the member's own claims (no clock
            // read when it is unset).
            let cut = !last && self.flush.as_mut().is_some_and(Flush::due);
            let ev = Event {
                seq,
                bytes,
                end_of_batch: last || cut,
            };
            if let Err(failure) = call(handler, ev) {
                let attempts = policy::count_attempt_in(cold, seq, a.suspect.take());
                a.poison = Some(seq);
                failed_attempt = true;
                self.stats.failures = self.stats.failures.wrapping_add(1);
                match self.policy.verdict(attempts) {
                    // The claim stays at this event for another member (see `poll_adopted`).
                    Verdict::Stop => {
                        outcome = Err(if failure.panicked {
                            PollError::HandlerPanicked { sequence: seq }
                        } else {
                            PollError::HandlerFailed {
                                sequence: seq,
                                attempts,
                            }
                        });
                    }
                    Verdict::Again(wait) => {
                        self.stats.retries = self.stats.retries.wrapping_add(1);
                        self.retry_at = (!wait.is_zero()).then(|| crate::wait::deadline_in(wait));
                        // Not marked now: the member may hand over events of its other
                        // claims first, and a death in one of those must not count against
                        // this one. `mark_before` marks the retry right before it is made.
                    }
                    Verdict::Skip => {
                        self.skip_adopted(a.index, seq, attempts, &failure.text, len);
                        a.at += 1;
                        dead_lettered = true;
                    }
                }
                break;
            }
            delivered += 1;
            handled_again += u64::from(a.redelivery || a.handled == Some(seq));
            a.at += 1;
            if last || cut {
                if let Some(f) = self.flush.as_mut() {
                    f.edge();
                }
                if cut {
                    break;
                }
            }
        }
        if a.poison.is_some_and(|k| a.at > k) {
            // Past the event its record named (delivered or skipped).
            policy::clear_poison(cold);
            a.poison = None;
            a.suspect = None;
        }
        if delivered + skipped + lapped > 0 || dead_lettered || outcome.is_err() {
            // Registered before the store, as in `commit`: never between the store and the
            // wakes below.
            let registered = fence::light_allowed(&mut self.registered);
            // Release: SYNC POINT with the producers' Acquire gate scan, as `commit`.
            e.hot.next.store(a.at, Ordering::Release);
            park::notify(
                &self.seg.lines().producer_wake.value,
                self.seg.header(),
                registered,
            );
            // A consumer after the group may be parked waiting for the adopted claim (its
            // barrier reads this entry's `next`): woken as by any commit.
            self.wake_after_group();
            let s = &mut self.stats;
            s.delivered = s.delivered.wrapping_add(delivered);
            s.skipped = s.skipped.wrapping_add(skipped);
            s.dropped_behind = s.dropped_behind.wrapping_add(lapped);
            s.clamped = s.clamped.wrapping_add(clamped);
            s.batches = s.batches.wrapping_add(u64::from(delivered > 0));
            s.redelivered = s.redelivered.wrapping_add(handled_again);
            if outcome.is_err() {
                self.failed = true;
            }
            let redelivered = s.redelivered;
            self.store_stats();
            // Relaxed: a counter only this member writes (`store_stats` skips it while the
            // member's state is out of the handle, as here).
            self.entry()
                .cold
                .graph
                .redelivered
                .store(redelivered, Ordering::Relaxed);
        } else if failed_attempt {
            // A failed attempt to be made again: its counts.
            self.store_stats();
        }
        outcome.map(|()| delivered as usize)
    }

    /// The member leaves: an adopted claim and its own unfinished claim are left open
    /// (DETACHED) for another member; a finished claim's entry is freed.
    pub(super) fn leave_group(&mut self) {
        self.give_back_adopted();
        if self.failed && owned_word::state(self.word) != consumer_state::ACTIVE {
            // Already FAILED at the failing event (see `fail`), or given back when it
            // stopped at an adopted claim: open to another member.
            return;
        }
        self.give_back_own();
    }

    /// Give the member's own entry up: DETACHED holding its unfinished claim for another
    /// member, or FREE once the claim is done. A retry it marked under way and never made
    /// is taken back first, so the next member counts on from the attempts made.
    fn give_back_own(&mut self) {
        let Some(claim_end) = self.member.as_ref().map(|m| m.claim_end) else {
            return;
        };
        // Acquire: pairs with any SeqCst CAS of the entry's word.
        if self.entry().hot.word.load(Ordering::Acquire) != self.word {
            return;
        }
        self.undo_suspect();
        let to = if self.next < claim_end {
            consumer_state::DETACHED
        } else {
            consumer_state::FREE
        };
        // A claim carried on from a member that died or failed, not all delivered: the
        // next member counts the rest as redelivered too. (One whose next event had a
        // failed attempt tells the next member by its poison record.)
        let handled = self
            .member
            .as_ref()
            .is_some_and(|m| self.next < m.redeliver_until && m.redeliver_until >= claim_end);
        if let Ok(word) = give_back(&self.entry().hot.word, self.word, to, handled) {
            self.word = word;
            self.wake_after_left_claim();
            if to == consumer_state::FREE {
                self.wake_producers();
            }
        }
    }

    /// Move the skips counted in an adopted entry (its members' before it left or died, and
    /// this member's while it held the entry) to this member's count, as it lets the entry
    /// go (freed, or given back): a freed entry's counts leave the table, and the next
    /// holder of one given back counts only what it skips. The entry's count only serves
    /// the skip steps while a skip runs (see `policy`), and every skip in it has finished.
    /// The entry is cleared first: a process that dies between the two stores loses the
    /// count rather than showing it twice.
    fn fold_skips(&mut self, e: &ConsumerEntry) {
        // Relaxed: this process is the counter's only writer while it holds the entry; the
        // CAS that lets the entry go publishes the store.
        let d = e.cold.graph.dead_lettered.swap(0, Ordering::Relaxed);
        if d != 0 {
            let s = &mut self.stats;
            s.dead_lettered = s.dead_lettered.wrapping_add(d);
            self.store_stats();
        }
    }

    /// Leave the adopted claims open (DETACHED) for another member; free the entries of
    /// those delivered to their end.
    pub(super) fn give_back_adopted(&mut self) {
        let Some(adopted) = self.member.as_mut().map(|m| std::mem::take(&mut m.adopted)) else {
            return;
        };
        let seg = Arc::clone(self.seg.arc());
        // Acquire: pairs with any SeqCst CAS of the entry's word. A member whose own entry
        // went to another holder has no counters left to move the skips to: they stay in
        // the adopted entry, counted once.
        let own_held = self.entry().hot.word.load(Ordering::Acquire) == self.word;
        let mut gave_back = false;
        let mut freed = false;
        for a in adopted {
            if let Some(e) = seg.consumer(a.index) {
                // Acquire: as above. An adopted entry no longer this member's is not touched.
                // Only this handle changes the word of an entry it adopted while its process
                // lives, so this guards against a process misjudged dead, nothing more.
                if e.hot.word.load(Ordering::Acquire) != a.word {
                    continue;
                }
                if let Some(mark) = a.suspect {
                    policy::undo_mark(&e.cold, mark);
                }
                if own_held {
                    self.fold_skips(e);
                }
                // A finished claim is freed, unless it still counts skips that had nowhere
                // to go: then it goes back, and the member that adopts it next folds them.
                // Relaxed: this handle is the counter's only writer while it holds the entry.
                let unfolded = e.cold.graph.dead_lettered.load(Ordering::Relaxed) != 0;
                let to = if a.at < a.end || (!own_held && unfolded) {
                    consumer_state::DETACHED
                } else {
                    consumer_state::FREE
                };
                // The rest of a dead or failed member's claim goes back as one a handler may
                // have seen, so that the next member counts it as redelivered too. (One whose
                // next event had a failed attempt tells the next member by its poison record.)
                if give_back(&e.hot.word, a.word, to, a.redelivery).is_ok() {
                    gave_back = true;
                    freed |= to == consumer_state::FREE;
                }
            }
        }
        if gave_back {
            self.wake_after_left_claim();
        }
        if freed {
            self.wake_producers();
        }
    }
}

/// Give up a member entry held as `mine`, as `to` (FREE, or DETACHED holding a claim): one
/// DETACHED holding a claim a handler may have seen (`handled`) names no holder
/// (`table::consumer::give_up_handled`), else its last holder (`give_up`).
fn give_back(
    word: &std::sync::atomic::AtomicU64,
    mine: u64,
    to: u32,
    handled: bool,
) -> Result<u64, u64> {
    if to == consumer_state::DETACHED && handled {
        table::consumer::give_up_handled(word, mine)
    } else {
        table::consumer::give_up(word, mine, to)
    }
}

/// The published run from `w`, at most `cap` events (0 when `w` is not published yet).
fn published_run(seg: &Segment, w: u64, cap: u64) -> u64 {
    (0..cap)
        .take_while(|&i| {
            // Acquire: a hint for the claim's size; delivery loads the stamp again.
            seg.slot(w.wrapping_add(i))
                .header
                .stamp
                .load(Ordering::Acquire)
                == w.wrapping_add(i)
        })
        .count() as u64
}

/// A member's attach waits for a stop in progress as a consumer's does (worker groups run
/// on rings of stamped slots, whose position a stop never leaves undecided).
fn attach_deadline() -> std::time::Instant {
    std::time::Instant::now() + crate::lifecycle::LIFECYCLE_WAIT
}
