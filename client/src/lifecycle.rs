//! Ring lifecycle: stop, drain, start and the deletion mark, on top of the line protocol.
//!
//! These are library calls, so a ring works without a broker; with a broker running,
//! lifecycle requests go through it and it runs them one at a time per ring. Every
//! transition is a CAS on the lifecycle word (`line`), so two processes that call them at
//! once (two brokers, a broker and a tool) still leave the ring in one of the states either
//! order would give: never a rewound claim counter, never Stopped over an open line.
//!
//! - **Stop** closes the line: every claim after it is refused, every claim before it is
//!   honoured and stays in the ring for the consumers. A publish racing a stop is refused or
//!   delivered, never accepted and lost. Idempotent.
//! - **Drain** stops, then waits until every gating consumer has consumed up to the stop
//!   sequence. Consumers see the end of the run as the end of a batch, so a handler that
//!   commits on the end-of-batch edge commits everything it was handed.
//! - **Start** reopens the line at the stop sequence and bumps the run counter: sequence
//!   numbers stay unique for the life of the segment.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shmring_layout::{consumer_flags, consumer_state, owned_word, producer_state, RingState};

use crate::fixed::Position as CursorView;
use crate::line::{Env, Line, LineError, LoneSlot, LoneWords};
use crate::names::broker_command;
use crate::segment::Segment;
use crate::{park, process, table, Ring};

/// How long a lifecycle call waits for another live process that owns the lifecycle (a stop
/// or start in progress) before it gives up with [`LifecycleError::Busy`].
pub const LIFECYCLE_WAIT: Duration = Duration::from_secs(10);

/// A lifecycle request the ring's state does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    /// The ring was deleted.
    #[error("ring was deleted")]
    Deleted,
    /// `start` on a running ring.
    #[error("ring is already running")]
    AlreadyRunning,
    /// Another live process is stopping or starting the ring and did not finish in time.
    #[error("process {pid} is changing the ring's lifecycle and has not finished; try again")]
    Busy {
        /// The pid named in the lifecycle word.
        pid: u32,
    },
    /// This process cannot stop, start, drain or remove the ring: the kernel (or a seccomp
    /// filter) refuses it `membarrier`, which the publish path of a producer in another
    /// process relies on (a single-producer ring's producer, or a multi-producer ring's
    /// producer claiming alone: refused at once, or, finishing a dead process's stop, once
    /// that producer did not claim again within the lifecycle wait).
    #[error("this process cannot stop, start, drain or remove the ring: membarrier is not available to it, and a producer in another process publishes relying on it (the producer of a single-producer ring, or a producer claiming alone on a multi-producer ring, which ends its lone claims at its next claim); allow the membarrier system call, or change the ring's lifecycle from a process that has it")]
    NoBarrier,
    /// The ring's file was truncated during the request, and the truncation guard
    /// (`install_truncation_guard`, feature `truncation-guard`) replaced its mapping with
    /// zeros.
    #[error("the ring's file {} was truncated during the request (a process with write access truncated it): drop the ring, stop every process attached to it, remove the file and create the ring again", .path.display())]
    Truncated {
        /// The ring file.
        path: std::path::PathBuf,
    },
    /// The ring's lifecycle word is not a known state.
    #[error("ring lifecycle word {0:#x} is corrupt: remove the ring and create it again")]
    CorruptState(u64),
    /// The claim counter names a lone producer (ARCHITECTURE.md, "Lone claims") whose
    /// position or record holds a value no ring writes (the value), or a producer entry
    /// past the table: the lone claims cannot be ended there. A stop is refused with the
    /// ring left running; a remove closes the counter anyway, at the stop sequence recorded
    /// before (the ring is going: every client gets `Deleted`).
    #[error("the ring's claim counter or its lone producer's position holds {0:#x}, which no ring writes: remove the ring and create it again")]
    CorruptCounter(u64),
    /// A drain's `keep_waiting` said nobody waits for it any more (see
    /// [`Ring::drain_while`]); the ring is left Stopped.
    #[error("drain abandoned, nobody waits for it any more: {} consumer(s) short of sequence {stop_seq}: {}; the ring stays stopped", .behind.len(), describe_behind(.behind))]
    DrainAbandoned {
        /// The stop sequence.
        stop_seq: u64,
        /// (consumer index, name, next) of every consumer still short of it.
        behind: Vec<(u32, String, u64)>,
    },
    /// Every gating consumer reached the stop sequence, but another request (a start, a
    /// stop, a remove, in this process or another) changed the ring's state before this
    /// drain ended it: the ring is in `state`, not left Stopped by this drain, and what
    /// was published since is not drained.
    #[error("the consumers reached sequence {stop_seq}, but another request changed the ring to {state} before the drain ended: it was not left stopped by this drain")]
    DrainInterrupted {
        /// The stop sequence the consumers reached.
        stop_seq: u64,
        /// The ring's state when the drain ended.
        state: String,
    },
    /// Drain did not finish in time.
    #[error("drain timed out: {} consumer(s) short of sequence {stop_seq}: {}{}{}", .behind.len(), describe_behind(.behind), describe_never_attached(.namespace, .ring, .unmoved), describe_unmoved(.namespace, .ring, .behind, .unmoved))]
    DrainTimeout {
        /// The stop sequence.
        stop_seq: u64,
        /// (consumer index, name, next) of every consumer still short of it.
        behind: Vec<(u32, String, u64)>,
        /// The ring's namespace (boxed: this error travels inside `OpenError`, which stays
        /// small).
        namespace: Box<str>,
        /// The ring's name.
        ring: String,
        /// (consumer index, name, why) of those that no running process moves, as the
        /// drain last saw them.
        unmoved: Vec<(u32, String, Unmoved)>,
    },
}

/// Why no running process moves a consumer a drain waited for
/// ([`LifecycleError::DrainTimeout`]). Each keeps its position: it moves once a process
/// attaches under its name again, or `broker release` lets the ring go on without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmoved {
    /// A declared consumer (`RingConfig::declared`) no process ever attached to: it holds
    /// its events for a first attach that never came.
    NeverAttached,
    /// Its handler failed at the event it is at (`ErrorPolicy::Stop`, or `Retry` out of
    /// attempts): its handle returns `PollError::Failed` from then on.
    Failed,
    /// A durable consumer that detached, whose events wait for it.
    Detached,
    /// Attached by a process that is gone: a broker applies its policy once a sweep sees
    /// it.
    ProcessGone,
}

fn describe_unmoved(
    namespace: &str,
    ring: &str,
    behind: &[(u32, String, u64)],
    unmoved: &[(u32, String, Unmoved)],
) -> String {
    let unmoved: Vec<_> = unmoved
        .iter()
        .filter(|(.., why)| *why != Unmoved::NeverAttached)
        .collect();
    let each = unmoved
        .iter()
        .map(|(i, n, why)| {
            let why = match why {
                Unmoved::Failed => {
                    let at = behind.iter().find(|(b, ..)| b == i).map(|&(.., next)| next);
                    match at {
                        Some(at) => format!("FAILED at sequence {at}, where its handler failed"),
                        None => "FAILED".to_owned(),
                    }
                }
                Unmoved::Detached => "DETACHED".to_owned(),
                Unmoved::ProcessGone => "its process is gone".to_owned(),
                Unmoved::NeverAttached => "never attached".to_owned(),
            };
            format!("#{i} {} ({why})", listed(n))
        })
        .collect::<Vec<_>>()
        .join(", ");
    match unmoved.as_slice() {
        [] => String::new(),
        // Anonymous ones only: released by name only, each goes with its handle.
        named if named.iter().all(|(_, n, _)| n.is_empty()) => format!(
            "; no running process moves {each}: restart its process (an anonymous consumer's entry is freed when its handle is dropped, or by a broker's sweep once its process is gone)"
        ),
        [(_, n, _)] => format!(
            "; no running process moves {each}: restart its consumer (it resumes where it stopped), or let the ring go on without it: `{}`",
            broker_command(namespace, "release", &[ring, n], &[])
        ),
        _ => {
            let anonymous = if unmoved.iter().any(|(_, n, _)| n.is_empty()) {
                " (an anonymous one's entry is freed when its handle is dropped, or by a broker's sweep once its process is gone)"
            } else {
                ""
            };
            format!(
                "; no running process moves {each}: restart each consumer (it resumes where it stopped), or let the ring go on without one: `{}`{anonymous}",
                broker_command(
                    namespace,
                    "release",
                    &[ring, "NAME"],
                    &unmoved.iter().map(|(_, n, _)| n.as_str()).collect::<Vec<_>>()
                )
            )
        }
    }
}

fn describe_never_attached(
    namespace: &str,
    ring: &str,
    unmoved: &[(u32, String, Unmoved)],
) -> String {
    let names: Vec<&String> = unmoved
        .iter()
        .filter(|(.., why)| *why == Unmoved::NeverAttached)
        .map(|(_, name, _)| name)
        .collect();
    match names.as_slice() {
        [] => String::new(),
        [name] => format!(
            "; declared consumer {name:?} never attached, so the events it holds wait for it: start it, or remove it from the ring's declared consumers and unsubscribe it (`{}`)",
            broker_command(namespace, "unsubscribe", &[ring, name], &[])
        ),
        _ => format!(
            "; declared consumers {} never attached, so the events they hold wait for them: start them, or remove them from the ring's declared consumers and unsubscribe each (`{}`)",
            names
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            broker_command(
                namespace,
                "unsubscribe",
                &[ring, "NAME"],
                &names.iter().map(|n| n.as_str()).collect::<Vec<_>>()
            )
        ),
    }
}

impl From<LineError> for LifecycleError {
    fn from(e: LineError) -> Self {
        match e {
            LineError::Deleted => Self::Deleted,
            LineError::AlreadyRunning => Self::AlreadyRunning,
            LineError::Busy(pid) => Self::Busy { pid },
            LineError::Corrupt(word) => Self::CorruptState(word),
            LineError::CorruptCounter(word) => Self::CorruptCounter(word),
            LineError::NoBarrier => Self::NoBarrier,
        }
    }
}

/// A consumer's name as a message lists it: quoted and escaped (names other processes
/// chose), `<anonymous>` for none.
fn listed(name: &str) -> String {
    if name.is_empty() {
        "<anonymous>".to_owned()
    } else {
        format!("{name:?}")
    }
}

fn describe_behind(behind: &[(u32, String, u64)]) -> String {
    behind
        .iter()
        .map(|(i, name, next)| format!("#{i} {} at {next}", listed(name)))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Segment {
    /// The claim line as the protocol in `line` sees it.
    #[inline(always)]
    pub(crate) fn line(&self) -> Line<'_, std::sync::atomic::AtomicU64> {
        let lines = self.lines();
        let l = &lines.lifecycle.value;
        Line {
            // A ring published by a cursor claims on the cursor (see `fixed`).
            claim: if self.is_fixed() {
                &lines.cursor.cursor
            } else {
                &lines.claim.value
            },
            lifecycle: &l.lifecycle,
            stop_seq: &l.stop_seq,
            single: self.geometry().producer_mode == shmring_layout::ProducerMode::Single,
            max_claim: self.geometry().capacity / 2,
            lone: self,
        }
    }
}

impl LoneWords<std::sync::atomic::AtomicU64> for Segment {
    fn lone(&self, index: u32) -> Option<LoneSlot<'_, std::sync::atomic::AtomicU64>> {
        let e = self.producer(index)?;
        Some(LoneSlot {
            position: &e.lone,
            end: &e.lone_end,
        })
    }

    fn gone(&self, index: u32) -> bool {
        let Some(e) = self.producer(index) else {
            return true;
        };
        // Acquire: the start time is read after the word that names its holder.
        let word = e.word.load(Ordering::Acquire);
        // Relaxed: written before the word was published ACTIVE.
        let start_time = e.start_time.load(Ordering::Relaxed);
        owned_word::state(word) != producer_state::ACTIVE
            || table::producer::holder(&table::Os, word, start_time) == table::Holder::Open
    }
}

impl Segment {
    /// The line's position (`line::Line::position`), with this segment's slot stamps: the
    /// look-back over a single producer's last claim ends at a slot that holds its
    /// sequence, a tombstone, or a later lap (`reached`). A later lap is no claim still to
    /// be stamped: the producer moved past it since the claim word was read, and a
    /// look-back that stepped over it would start an attach below a position a gate scan
    /// may already have used (`client/tests/loom_attach.rs`).
    ///
    /// A ring published by a cursor has no unstamped slots to step back over: its position
    /// is the cursor as a consumer reads it ([`Segment::cursor_view`]); while a stop is in
    /// progress, a bound below it (the cursor before its last claim, which the stop may
    /// refuse), so that a gate computed from it never lies past what the next run starts
    /// at. Never waits. An attach takes [`Segment::start_position`] instead.
    pub(crate) fn position(&self) -> u64 {
        if self.is_fixed() {
            return match self.cursor_view() {
                CursorView::Decided(p) => p,
                CursorView::Closing { below, .. } => below,
            };
        }
        self.line().position(|s| self.reached(s))
    }

    /// Where a consumer that attaches (or gates again) starts: the position, which must not
    /// lie below a head a gate scan used (a producer's cached gate would let it lap the
    /// consumer there) nor past what the next run starts at. On a ring published by a
    /// cursor, a stop in progress decides that, so this waits for it at most until
    /// `deadline` (finishing a dead stopper's stop itself); `Err(pid)`: the stop of `pid` is
    /// still in progress (alive, or dead with a stop this process cannot finish: no
    /// barrier).
    pub(crate) fn start_position(&self, deadline: Option<Instant>) -> Result<u64, u32> {
        if !self.is_fixed() {
            return Ok(self.position());
        }
        crate::fixed::start_position(&self.events(), &SegEnv::waiting_until(self, deadline))
    }

    /// A cursor-published ring's position (`fixed::position`).
    fn cursor_view(&self) -> CursorView {
        crate::fixed::position(&self.events())
    }
}

/// The line protocol's surroundings in a real process.
pub(crate) struct SegEnv<'a> {
    seg: &'a Segment,
    me: u32,
    /// When waits for a live owner give up (`None`: never, for a producer's own claim).
    deadline: Option<Instant>,
}

impl<'a> SegEnv<'a> {
    /// For a lifecycle call: waits for another owner at most [`LIFECYCLE_WAIT`].
    pub(crate) fn lifecycle(seg: &'a Segment) -> Self {
        Self::lifecycle_within(seg, LIFECYCLE_WAIT)
    }

    /// For a lifecycle call that waits for another owner at most `wait` (zero: not at all,
    /// a live owner is `Busy` at once).
    pub(crate) fn lifecycle_within(seg: &'a Segment, wait: Duration) -> Self {
        SegEnv {
            seg,
            me: process::current().pid,
            deadline: Some(Instant::now() + wait),
        }
    }

    /// For a wait for another owner until `deadline` (`None`: as long as it lives).
    pub(crate) fn waiting_until(seg: &'a Segment, deadline: Option<Instant>) -> Self {
        SegEnv {
            seg,
            me: process::current().pid,
            deadline,
        }
    }

    /// For a producer deciding its claim: waits for the stopper as long as it lives. `me`
    /// is the producer's cached pid (no system call on the publish path).
    #[inline]
    pub(crate) fn producer(seg: &'a Segment, me: u32) -> Self {
        SegEnv {
            seg,
            me,
            deadline: None,
        }
    }
}

impl Env for SegEnv<'_> {
    fn me(&self) -> u32 {
        self.me
    }

    fn alive(&self, pid: u32) -> bool {
        pid == self.me || process::exists(pid)
    }

    fn heavy_fence(&self) {
        crate::fence::heavy();
    }

    fn finished_for_the_dead(&self) {
        // The published word is the store (1) of every line's protocol: the consumer and
        // producer lines are woken unconditionally, each entry's line where someone is
        // counted (after a full fence, `park::notify_consumers`).
        park::wake_consumers(self.seg);
        park::wake(&self.seg.lines().producer_wake.value);
    }

    fn count_start(&self) {
        crate::line::count_start(&self.seg.header().run);
    }

    fn arm_start_count(&self) {
        crate::line::arm_start_count(&self.seg.header().run);
    }

    fn has_barrier(&self) -> bool {
        // With membarrier, the stopper supplies the producer's barrier: issuing it needs no
        // registration here, and a producer whose process has not registered yet fences
        // fully itself (see `fence`). Without it, only a producer in this very process is
        // safe: a process without membarrier publishes with a full fence of its own
        // (`fence::light(false)`).
        crate::fence::supported()
            || (0..self.seg.geometry().max_producers).all(|i| {
                self.seg.producer(i).is_none_or(|p| {
                    // Relaxed: the word names its holder in the same step as its state.
                    let word = p.word.load(Ordering::Relaxed);
                    // No holder (0): no producer process to fence.
                    owned_word::state(word) == producer_state::FREE
                        || owned_word::owner(word) == self.me
                        || owned_word::owner(word) == 0
                })
            })
    }

    fn pause(&self, round: u32) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        match round {
            0..=63 => std::hint::spin_loop(),
            64..=79 => std::thread::yield_now(),
            _ => std::thread::sleep(Duration::from_micros(50 << (round - 80).min(6))),
        }
        true
    }
}

impl Ring {
    /// Close the sequence line: claims from now on are refused; claims already taken are
    /// published as usual. Returns the stop sequence. Idempotent.
    pub fn stop(&self) -> Result<u64, LifecycleError> {
        let (stop, _) = self.close_as(RingState::Stopped)?;
        Ok(stop)
    }

    fn close_as(&self, state: RingState) -> Result<(u64, u64), LifecycleError> {
        self.close_within(state, LIFECYCLE_WAIT)
    }

    /// As `close_as`, waiting for another live owner at most `wait`.
    fn close_within(&self, state: RingState, wait: Duration) -> Result<(u64, u64), LifecycleError> {
        // A process without membarrier makes every producer of the ring use the full fence
        // before it can take part in a single-producer close (see `line`).
        let mode = crate::fence::mode();
        // Relaxed: a mode word that only rises; read by producers on every claim.
        self.seg
            .header()
            .fence_mode
            .fetch_max(mode as u32, Ordering::Relaxed);
        let out = self
            .seg
            .line()
            .close(&SegEnv::lifecycle_within(&self.seg, wait), state)?;
        // Parked consumers look again: a drained consumer returns from `run`.
        park::wake_consumers(&self.seg);
        park::wake(&self.seg.lines().producer_wake.value);
        Ok(out)
    }

    /// Stop (if running) and wait until every gating consumer has consumed everything
    /// published before the stop, at most `timeout`. The ring is left Stopped either way,
    /// unless another request changed its state meanwhile.
    pub fn drain(&self, timeout: Duration) -> Result<u64, LifecycleError> {
        self.drain_while(timeout, || true)
    }

    /// As [`Ring::drain`], asking `keep_waiting` between looks at the consumers (every few
    /// milliseconds) whether anyone still waits for the answer: once it says no, the wait
    /// ends with [`LifecycleError::DrainAbandoned`] and the ring is left Stopped, as a
    /// timeout leaves it. A broker drains for a requester that may go away.
    pub fn drain_while(
        &self,
        timeout: Duration,
        mut keep_waiting: impl FnMut() -> bool,
    ) -> Result<u64, LifecycleError> {
        let (stop, word) = self.close_as(RingState::Draining)?;
        let deadline = crate::wait::deadline_in(timeout);
        let mut pause = Duration::from_micros(50);
        let result = loop {
            let behind = self.behind(stop);
            // After the look: a truncation it ran into turned what it read into the
            // truncation guard's zeros, where every consumer looks caught up.
            if self.seg.zeroed() {
                break Err(LifecycleError::Truncated {
                    path: self.path().to_owned(),
                });
            }
            if behind.is_empty() {
                break Ok(stop);
            }
            if self.is_deleted() && !behind.iter().any(|&(i, ..)| self.held_live(i)) {
                // Removed meanwhile, and nobody left to catch up with it: an attach refuses a
                // deleted ring, so a consumer behind that no live process holds never will.
                // (A live holder delivers up to the stop before it is told.)
                break Err(LifecycleError::Deleted);
            }
            if !keep_waiting() {
                break Err(LifecycleError::DrainAbandoned {
                    stop_seq: stop,
                    behind,
                });
            }
            if Instant::now() >= deadline {
                let unmoved = behind
                    .iter()
                    .filter_map(|(i, name, _)| Some((*i, name.clone(), self.unmoved(*i)?)))
                    .collect();
                break Err(LifecycleError::DrainTimeout {
                    stop_seq: stop,
                    behind,
                    namespace: self.namespace().into(),
                    ring: self.name().to_owned(),
                    unmoved,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        };
        // Only the Draining word this drain left: a start or another request since wins,
        // and a drain that reached its stop sequence says that it did not end the ring
        // (unless another request left it closed at the same stop sequence: Stopped, say a
        // broker ending a drain it adopted, `stop_if_draining`; Draining, another drain,
        // which ends it; or Deleted).
        let line = self.seg.line();
        let ended = line.finish_drain(word)
            || (matches!(
                line.life().state,
                Some(RingState::Stopped | RingState::Draining | RingState::Deleted)
            ) && line.closed_at() == Some(stop));
        let result = match result {
            Ok(stop_seq) if !ended => Err(LifecycleError::DrainInterrupted {
                stop_seq,
                state: line
                    .life()
                    .state
                    .map_or_else(|| "a corrupt state".to_owned(), |s| format!("{s:?}")),
            }),
            other => other,
        };
        if self.seg.zeroed() {
            // A truncation met after the last look (by the deletion or liveness checks, or
            // another thread): what the result was made of may be zeros.
            return Err(LifecycleError::Truncated {
                path: self.path().to_owned(),
            });
        }
        result
    }

    /// End a drain that nobody may be waiting for any more (a broker that finds a ring
    /// Draining when it adopts it): Draining -> Stopped with one CAS on the word read here,
    /// so a start, stop or drain since wins and nothing changes. Returns the stop sequence
    /// when it ended one. A drain still running in another process ends as it would have:
    /// it waits for its consumers, and its own end finds the word changed and leaves it.
    pub fn stop_if_draining(&self) -> Option<u64> {
        let line = self.seg.line();
        let life = line.life();
        if life.state != Some(RingState::Draining) {
            return None;
        }
        // Relaxed: ordered by the Acquire load of the settled word.
        let stop = line.stop_seq.load(Ordering::Relaxed);
        line.finish_drain(life.word).then_some(stop)
    }

    /// Gating consumers whose position is below `stop`, by entry index. Worker groups'
    /// entries are read first, then the others, as a gate scan and a group's barrier read
    /// them (`group::finished`): a member that claimed below the stop sequence before the
    /// work sequence read here (a claim is a read-modify-write of it, which the Acquire
    /// load synchronises with) is seen in the second pass at or below its claim. Read in
    /// index order, a member attaching in an entry below its group's could be passed over
    /// before its claim and its group read after it, past the claim: the drain would end
    /// while the member still handles those events.
    fn behind(&self, stop: u64) -> Vec<(u32, String, u64)> {
        let geo = self.seg.geometry();
        let pass = |groups: bool| {
            (0..geo.max_consumers).filter_map(move |i| {
                let e = self.seg.consumer(i)?;
                let state = e.hot.state(Ordering::Acquire);
                // Relaxed: published by the CAS that set the state read above.
                let group = e.hot.flags.load(Ordering::Relaxed) & consumer_flags::GROUP != 0;
                if group != groups {
                    return None;
                }
                // Acquire: pairs with the consumer's Release commit (a group's: with its
                // members' claim CAS, see above).
                let next = e.hot.next.load(Ordering::Acquire);
                (consumer_state::gates(state) && next < stop)
                    .then(|| (i, crate::consumer::entry_name(e), next))
            })
        };
        let mut behind: Vec<_> = pass(true).collect();
        behind.extend(pass(false));
        behind.sort_unstable_by_key(|&(i, ..)| i);
        behind
    }

    /// Whether consumer entry `i` is held (ACTIVE, or being resumed) by a process that
    /// runs: one that may still deliver.
    fn held_live(&self, i: u32) -> bool {
        self.seg.consumer(i).is_some_and(|e| {
            // Acquire: pairs with the holder's SeqCst CAS of its word.
            let word = e.hot.word.load(Ordering::Acquire);
            matches!(
                owned_word::state(word),
                consumer_state::ACTIVE | consumer_state::RESUMING
            ) && process::exists(owned_word::owner(word))
        })
    }

    /// Why no running process moves consumer entry `i`, if none does. A worker group's
    /// entry is never named: its members move it, and each is judged by its own entry.
    fn unmoved(&self, i: u32) -> Option<Unmoved> {
        let e = self.seg.consumer(i)?;
        // Relaxed: display only, as in `declared_never_attached`.
        if e.hot.flags.load(Ordering::Relaxed) & consumer_flags::GROUP != 0 {
            return None;
        }
        if self.declared_never_attached(i) {
            return Some(Unmoved::NeverAttached);
        }
        // Acquire: pairs with the holder's SeqCst CAS of its word.
        let word = e.hot.word.load(Ordering::Acquire);
        match owned_word::state(word) {
            consumer_state::FAILED => Some(Unmoved::Failed),
            consumer_state::DETACHED => Some(Unmoved::Detached),
            // (A RESUMING entry whose taker died is a sweep's to finish: not named, and
            // `broker release` refuses it meanwhile.)
            consumer_state::ACTIVE if !process::exists(owned_word::owner(word)) => {
                Some(Unmoved::ProcessGone)
            }
            _ => None,
        }
    }

    /// Whether consumer entry `i` is a declared consumer (`RingConfig::declared`) that no
    /// process ever attached to.
    fn declared_never_attached(&self, i: u32) -> bool {
        self.seg.consumer(i).is_some_and(|e| {
            // Relaxed: display only; an attach that lands meanwhile makes the answer stale,
            // never wrong about the past.
            e.hot.flags.load(Ordering::Relaxed) & shmring_layout::consumer_flags::DECLARED != 0
                && e.cold.attaches.load(Ordering::Relaxed) == 0
        })
    }

    /// Reopen a stopped ring: the run counter goes up by one and publishing continues at
    /// the stop sequence. Returns the new run number (as read once started: a stop and a
    /// start by others since count on).
    pub fn start(&self) -> Result<u64, LifecycleError> {
        self.seg.line().reopen(&SegEnv::lifecycle(&self.seg))?;
        let run = self.run_number();
        park::wake(&self.seg.lines().producer_wake.value);
        if self.seg.is_fixed() {
            // A consumer of a ring published by a cursor counts nothing while the start
            // decides (`fixed::published`), and may have parked on that look.
            park::wake_consumers(&self.seg);
        }
        Ok(run)
    }

    /// Wait until no live process is in the middle of a stop or start (at most the
    /// lifecycle wait, then `Busy`), finishing a dead one's. The settled state.
    pub(crate) fn settle_lifecycle(&self) -> Result<RingState, LifecycleError> {
        let life = self.seg.line().settle(&SegEnv::lifecycle(&self.seg))?;
        life.state.ok_or(LifecycleError::CorruptState(life.word))
    }

    /// Mark the ring deleted: the line closes for good and every client gets an error.
    pub(crate) fn mark_deleted(&self) -> Result<u64, LifecycleError> {
        self.mark_deleted_within(LIFECYCLE_WAIT)
    }

    /// As `mark_deleted`, waiting for a live process's stop or start at most `wait`
    /// (`Busy` after that).
    pub(crate) fn mark_deleted_within(&self, wait: Duration) -> Result<u64, LifecycleError> {
        let (stop, _) = match self.close_within(RingState::Deleted, wait) {
            // A corrupt word ends here too (its error says to remove the ring): closed as
            // from Running, from that exact word.
            Err(LifecycleError::CorruptState(word)) => {
                let out = self.seg.line().close_corrupt(
                    &SegEnv::lifecycle_within(&self.seg, wait),
                    word,
                    RingState::Deleted,
                )?;
                tracing::warn!(
                    ring = self.name(),
                    word = format_args!("{word:#x}"),
                    "the ring's lifecycle word was corrupt: closed and marked deleted"
                );
                park::wake_consumers(&self.seg);
                park::wake(&self.seg.lines().producer_wake.value);
                out
            }
            other => other?,
        };
        tracing::info!(
            ring = self.name(),
            stop,
            "ring marked deleted: every client gets an error"
        );
        Ok(stop)
    }

    /// Finish a stop, start or sharing whose owner died half-way (a half-done stop ends
    /// Stopped, a half-done start or sharing Running). One whose owner lives (or a live
    /// process that took a dead owner's word over first) is left to it: this never waits
    /// for one. Finishing a dead stopper's stop or a dead sharing on a multi-producer ring
    /// waits up to the lifecycle wait, as a stop that takes a dead one over does, for a live
    /// lone producer to end its claims (`NoBarrier` after it, from a process without
    /// membarrier). Returns the state, and whether this process finished a dead owner's
    /// change. One load when nothing is in progress.
    pub fn finish_interrupted(&self) -> Result<(RingState, bool), LifecycleError> {
        let line = self.seg.line();
        let before = line.life();
        let state = before
            .state
            .ok_or(LifecycleError::CorruptState(before.word))?;
        if !state.is_transitional() {
            return Ok((state, false));
        }
        // Never waits for a live owner; finishing a dead one's stop or sharing may wait the
        // lifecycle wait for a live lone producer to end its claims.
        let (after, finished) = line.finish_dead(&SegEnv::lifecycle(&self.seg))?;
        let state = after
            .state
            .ok_or(LifecycleError::CorruptState(after.word))?;
        if finished {
            tracing::warn!(
                ring = self.name(),
                owner = before.owner,
                was = ?before.state,
                now = ?state,
                "finished a lifecycle change whose owner died"
            );
        } else if !state.is_transitional() {
            // Another process finished it, and woke the ring (`Env::finished_for_the_dead`)
            // unless it died between its publish and its wakes: a spare wake costs a futex
            // call.
            park::wake_consumers(&self.seg);
            park::wake(&self.seg.lines().producer_wake.value);
        }
        Ok((state, finished))
    }

    /// The run counter (1 for the first run, +1 per start, counted once however many
    /// processes finished it).
    pub fn run_number(&self) -> u64 {
        // Relaxed: a display value, published with the lifecycle word that ended the start.
        shmring_layout::run_number(self.seg.header().run.load(Ordering::Relaxed))
    }

    /// The lifecycle state (`None` if the word is corrupt).
    pub fn state(&self) -> Option<RingState> {
        self.seg.line().life().state
    }

    /// The line's position: the next sequence a producer will claim, or, while the line is
    /// closed, the sequence the next run starts at; on a single-producer ring of stamped
    /// slots, before the slots of its last claim that are not stamped yet (a claim still to
    /// be decided, or accepted by a stop and about to be stamped); on a ring published by a
    /// cursor, while a stop is in progress, the cursor before its last claim (which the stop
    /// may refuse). Never waits.
    pub fn head(&self) -> u64 {
        self.seg.position()
    }

    /// Whether the sequence line is closed (claims are refused).
    pub fn is_closed(&self) -> bool {
        self.seg.line().is_closed()
    }

    /// Whether the ring was deleted ([`Ring::remove`]): every client of it gets an error.
    pub fn is_deleted(&self) -> bool {
        is_deleted(&self.seg)
    }
}

/// Whether the ring was deleted ([`Life::is_deleted`](crate::line::Life::is_deleted)).
pub(crate) fn is_deleted(seg: &Segment) -> bool {
    seg.line().life().is_deleted()
}

/// What an attach checks before it touches the tables: the file still holds the whole
/// segment (one `fstat`, and the truncation guard's mark), and the ring is not deleted.
pub(crate) fn attachable(seg: &Segment) -> Result<(), crate::AttachError> {
    if seg.zeroed() {
        return Err(crate::AttachError::TruncatedWhileMapped {
            size: seg.geometry().total_size,
        });
    }
    // An fstat that fails tells nothing; the attach goes on as before.
    if let Ok(Some(len)) = seg.shrunk() {
        return Err(crate::AttachError::Truncated {
            len,
            size: seg.geometry().total_size,
        });
    }
    if is_deleted(seg) {
        return Err(crate::AttachError::Deleted);
    }
    Ok(())
}
