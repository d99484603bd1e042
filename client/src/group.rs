//! Worker groups: consumers that share one stream of events, each event to one member (the
//! Disruptor's `WorkerPool` / `WorkProcessor`, across processes).
//!
//! A group is a consumer entry of its own (flags `REQUIRED | DURABLE | GROUP`, the group's
//! name, held DETACHED by nobody): its `next` is the group's **work sequence**, the first
//! sequence no member has claimed. A member is an anonymous required entry (`MEMBER`,
//! `cold.group` = the group's index plus one) whose `next` is the first sequence of the
//! claim it has not finished and whose `cold.claim_end` is that claim's end. Producers gate
//! on all of them with the ordinary gate (`gating`): the work sequence holds what nobody
//! claimed, each member's `next` what it claimed and has not finished. The gate reads the
//! work sequence before the members' entries, as a consumer after the group does
//! ([`finished`] says why).
//!
//! ## Claim ([`claim`])
//!
//! ```text
//! member                                   producer (gate scan)
//! a. w = work (Acquire)                    reads work, then member.next (Acquire each)
//! b. member.next = w, claim_end = w + k    gate = min of what it read
//! c. CAS work w -> w + k (SeqCst); lost: back to a
//! ```
//!
//! The member publishes its claim (b) before it takes it (c), as LMAX's `WorkProcessor`
//! does. For the gate the order of b and c is not what matters: `member.next` never
//! decreases (a member claims only at or after the end of its previous claim, and starts at
//! or below the work sequence), so any value a scan reads of an attached member is at most
//! the start of its current claim. (A member attaching while the scan runs is covered by
//! the scan reading the work sequence first: see [`finished`].) One exception: a member
//! that carries on with an entry whose dead holder named a claim it never won (it died
//! between b and c) delivers that whole range, then claims from the work sequence, which
//! the winner of that CAS may have left below the range's end. Its `next` goes back to the
//! work sequence, which every scan reads before the entries, so no gate moves past it; the
//! events between the two it delivers twice (at least once, as for any claim a member
//! died in). The order matters when the
//! member dies: its entry must name every sequence it may have taken. With b before c, a
//! member that dies between them names a claim it never won: that range is delivered twice
//! at most (by the recovering member, counted in `redelivered`, and by whoever claims it
//! from the work sequence), never lost. With c before b, a member dying between them has
//! won `[w, w + k)` while its entry still names its previous, finished claim: nobody
//! delivers those events and, once its entry is freed, producers overwrite them
//! (`client/tests/loom_group.rs` has that control).
//!
//! b's stores are Release (they pair with the producers' Acquire scan, as any commit
//! does) and c is SeqCst; nothing needs b to be seen before c by a live reader (see
//! above), and a reader after a death reads the entry after the holder is gone.
//!
//! ## Recovery ([`adopt`], [`claim_range`], [`table::consumer::free`])
//!
//! A member's entry outlives its process: gating at `next`, it holds the unfinished claim
//! `[next, claim_end)`. A live member of the same group that finds such an entry open
//! (`table::consumer::holder`: its process is gone, or it gave its claim back as DETACHED)
//! takes it over by CAS into RESUMING (it keeps gating at `next`), delivers the claim to its
//! own handler (counted as redelivered: the dead member may have handled some of it),
//! committing the adopted entry's `next` as it goes, and frees the entry when it reaches
//! `claim_end`. Two members racing for one entry: one CAS wins. A recoverer that dies
//! leaves the entry RESUMING by a gone pid, open again, at the position it had committed;
//! a member judges that pid alone, so the broker, which can tell a reused one, also puts
//! such an entry back to DETACHED with no owner (`Ring::detach_member_entry_seen`), which a
//! member reads as a death, as it reads RESUMING.
//!
//! ## Leaving
//!
//! A member that leaves with an unfinished claim leaves its entry DETACHED, holding the
//! claim, for a member that joins (it carries on with the entry) or for a live member to
//! adopt once the claim's events are published: no event is left behind. The claim is not
//! given back to the work sequence: that would move the work sequence backwards, and a
//! gate scan that read it before and the member's entry after its free would compute a
//! gate past the given-back events (every position a scan reads must only grow).

use std::sync::atomic::Ordering;

use shmring_layout::{consumer_state as cs, owned_word};

use crate::line::Word;
use crate::table::{self, Holder, Procs};

/// The first sequence a worker group has not finished: the lower of its work sequence
/// `work` and the `next` of each of its members' entries that gates (`members`: each
/// entry's word and `next`). What a consumer that runs after the group may deliver up to
/// (`ConsumerOptions::after` naming a group, as the Disruptor's handlers after a
/// `WorkerPool` wait for its workers' sequences).
///
/// `work` must be loaded (Acquire) before any member entry is read:
///
/// ```text
/// member                                   downstream (barrier)
/// (1) word -> ACTIVE (SeqCst CAS)          (a) w = work          (Acquire)
/// (2) next = c, claim_end (Release)        (b) per member: word, then next (Acquire)
/// (3) CAS work c -> c + k (SeqCst)         (c) floor = min(w, gating members' next)
/// ```
///
/// A claim whose CAS (3) comes after the value (a) read, in the work sequence's
/// modification order, starts at or after `w`, so the floor holds it. A claim whose CAS
/// comes at or before it: every CAS is a read-modify-write, so (a) synchronizes with it and
/// (b) reads the member's (1) and (2) or later stores, whose `next` only grows past what
/// the member finished. Either way every sequence below the floor was finished by the
/// member that claimed it. Reading the members before the work sequence would not do: a
/// member that claims in between is counted at its previous, finished position, and the
/// work sequence read after is past its claim (`client/tests/loom_group_then.rs` has
/// that control).
pub fn finished<'e, W: Word + 'e>(
    work: u64,
    members: impl IntoIterator<Item = (&'e W, &'e W)>,
) -> u64 {
    let mut floor = work;
    for (word, next) in members {
        // Acquire: (b) above; with the Acquire load of `work` before it, it reads the
        // member's take of its entry (1) whenever the member claimed before that load.
        if cs::gates(owned_word::state(word.load(Ordering::Acquire))) {
            // Acquire: SYNC POINT with the member's Release commit (`Consumer::commit`) and
            // its claim's Release store (2): its handler's effects below `next` happen
            // before the downstream's handler sees those events.
            floor = floor.min(next.load(Ordering::Acquire));
        }
    }
    floor
}

/// Claim the next sequences of the group from the work sequence `work`: `[start, end)`,
/// with `end - start` in `1..=cap`. `run(w)` is the number of events from `w` the member
/// may take: published, and finished by the group's upstreams if it has any (0 when `w` is
/// not: the member then claims `w` alone and waits for it).
/// `next` and `claim_end` are the member entry's; they are stored before the CAS that takes
/// the claim (see the module comment).
pub fn claim<V: Word, W: Word>(
    work: &V,
    next: &W,
    claim_end: &W,
    cap: u64,
    mut run: impl FnMut(u64) -> u64,
) -> (u64, u64) {
    loop {
        // Acquire: pairs with the SeqCst CAS of the member that claimed before; nothing is
        // read through it, the CAS below decides.
        let w = work.load(Ordering::Acquire);
        let k = run(w).clamp(1, cap.max(1));
        // Saturating: `w` is read from shared memory, which may hold anything.
        let end = w.saturating_add(k);
        // Release (both): pair with the producers' Acquire gate scan. `next` first: on the
        // first try, after a finished claim (`next == claim_end`), a member dying between
        // the two stores names an empty claim. Once a try's CAS is lost, the entry names
        // that try's claim, part of which another member took, until the next try's first
        // store (then the part no member has claimed yet): a member taking such an entry
        // over hands those events again, the at-least-once of a member that dies in its
        // claim.
        next.store(w, Ordering::Release);
        claim_end.store(end, Ordering::Release);
        // SeqCst: the claim; its place in the single total order is what two members
        // claiming at once agree on.
        if work
            .compare_exchange(w, end, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            return (w, end);
        }
    }
}

/// The unfinished claim an entry names, `[next, max(next, claim_end))`. Acquire: read after
/// the takeover (see [`adopt`]), it pairs with the last holder's Release stores.
pub fn claim_range<W: Word>(next: &W, claim_end: &W) -> (u64, u64) {
    let start = next.load(Ordering::Acquire);
    let end = claim_end.load(Ordering::Acquire);
    (start, end.max(start))
}

/// Take over a member entry whose word was read as `seen` (Acquire) and whose start time,
/// read after it, is `start_time`, if its holder is gone or gave it up: RESUMING by `me`,
/// still gating at its position. Returns the word now held.
pub fn adopt<W: Word, P: Procs>(
    procs: &P,
    word: &W,
    seen: u64,
    start_time: u64,
    me: u32,
) -> Option<u64> {
    // Only an entry that gates: its claim is still held at `next`. (A member entry that
    // stopped gating has nothing left to protect; it is freed, not adopted.)
    if !cs::gates(owned_word::state(seen)) {
        return None;
    }
    if table::consumer::holder(procs, seen, start_time) != Holder::Open {
        return None;
    }
    table::consumer::take_over(word, seen, me, true)
}
