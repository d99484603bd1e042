//! Loom models of the run counter (`Header::run`, `line::count_start`,
//! `line::arm_start_count`): the run number goes up by exactly one per start, whoever
//! finishes the start. The owner of a start counts it before it reopens the line, unless
//! the word's mark says it is counted; the owner of a stop clears the mark once the line is
//! closed, before it publishes the closed state. A starter that dies after its count leaves the mark for the process that
//! finishes its start; one that dies before it leaves the count to that process. One model
//! lets a starter already seen dead still count, racing the process that finishes its
//! start: both write the same value.
//!
//! The controls count with a plain add (a dead starter's count is counted again) and never
//! clear the mark (a start after a stop is not counted): each must fail.

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;

mod loom_env;
mod loom_word;

use loom_env::{ModelEnv, DEAD};
use loom_word::{model, W};
use shmring::line::{arm_start_count, count_start, Env, Line, LineError, Word};
use shmring::RingState;
use shmring_layout::{lifecycle, run_number, CLAIM_CLOSED, RUN_COUNTED};

/// The words of a multi-producer line and its run word.
struct Ring {
    claim: W,
    life: W,
    stop_seq: W,
    run: W,
}

impl Ring {
    /// Stopped at 0 in run `run` (the stop cleared the mark).
    fn stopped(run: u64) -> Self {
        Ring {
            claim: W::new(CLAIM_CLOSED),
            life: W::new(lifecycle::pack(3, RingState::Stopped as u32, 0)),
            stop_seq: W::new(0),
            run: W::new(run),
        }
    }

    /// Running at 0 in run `run`, counted.
    fn running(run: u64) -> Self {
        Ring {
            claim: W::new(0),
            life: W::new(lifecycle::pack(3, RingState::Running as u32, 0)),
            stop_seq: W::new(0),
            run: W::new(run | RUN_COUNTED),
        }
    }

    fn line(&self) -> Line<'_, W> {
        Line {
            claim: &self.claim,
            lifecycle: &self.life,
            stop_seq: &self.stop_seq,
            single: false,
            max_claim: 2,
            lone: &shmring::line::NoLone,
        }
    }

    fn run_number(&self) -> u64 {
        run_number(self.run.load(Ordering::SeqCst))
    }
}

/// How a process counts starts: as shipped, or one of the controls.
#[derive(Clone, Copy, PartialEq)]
enum Counting {
    Shipped,
    /// A plain add: a dead starter's count is counted again.
    Add,
    /// The mark is never cleared: a start after a stop is not counted.
    NeverArmed,
}

/// A process (`loom_env`'s) of a ring whose run word is `run`.
struct RunEnv<'a> {
    process: ModelEnv,
    run: &'a W,
    counting: Counting,
}

impl Env for RunEnv<'_> {
    fn me(&self) -> u32 {
        self.process.me()
    }
    fn alive(&self, pid: u32) -> bool {
        self.process.alive(pid)
    }
    fn heavy_fence(&self) {
        self.process.heavy_fence();
    }
    fn has_barrier(&self) -> bool {
        self.process.has_barrier()
    }
    fn pause(&self, round: u32) -> bool {
        self.process.pause(round)
    }
    fn count_start(&self) {
        if self.counting == Counting::Add {
            self.run.fetch_add(1, Ordering::Relaxed);
        } else {
            count_start(self.run);
        }
    }
    fn arm_start_count(&self) {
        if self.counting != Counting::NeverArmed {
            arm_start_count(self.run);
        }
    }
}

fn env(ring: &Ring, me: u32, counting: Counting) -> RunEnv<'_> {
    RunEnv {
        process: loom_env::env(me, true),
        run: &ring.run,
        counting,
    }
}

/// A process CASes the lifecycle word to `state` as its owner and dies; a starter that
/// `counted` counted its start first.
fn take_and_die(ring: &Ring, state: RingState, counted: bool, counting: Counting) {
    let w = ring.life.load(Ordering::SeqCst);
    let dead = lifecycle::next(w, state as u32, DEAD);
    ring.life
        .compare_exchange(w, dead, Ordering::AcqRel, Ordering::Acquire)
        .expect("the dead owner's CAS");
    if counted {
        env(ring, DEAD, counting).count_start();
    }
}

/// A starter died owning Starting, before or after it counted its start. Another starter
/// and a third process's settle race to finish it (each takeover is a CAS to a new
/// generation): the run number is one more than before, and the next stop and start add
/// exactly one.
fn a_dead_starters_start(counted: bool, counting: Counting) {
    model(move || {
        let ring = Arc::new(Ring::stopped(1));
        take_and_die(&ring, RingState::Starting, counted, counting);
        let starter = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(&ring, 1, counting)))
        };
        let settled = ring
            .line()
            .settle(&env(&ring, 2, counting))
            .expect("settle");
        assert_eq!(settled.state, Some(RingState::Running));
        let started = starter.join().unwrap();
        assert_eq!(started, Err(LineError::AlreadyRunning));
        assert_eq!(
            ring.run_number(),
            2,
            "the dead starter's start counted once"
        );
        let e = env(&ring, 1, counting);
        ring.line().close(&e, RingState::Stopped).expect("stop");
        ring.line().reopen(&e).expect("start");
        assert_eq!(ring.run_number(), 3, "the next start counted");
    });
}

#[test]
fn a_dead_starters_start_is_counted_once_by_whoever_finishes_it() {
    a_dead_starters_start(false, Counting::Shipped);
}

#[test]
fn a_start_counted_by_its_dead_starter_is_not_counted_again() {
    a_dead_starters_start(true, Counting::Shipped);
}

/// Control: a plain add counts the dead starter's start a second time.
#[test]
#[should_panic(expected = "counted once")]
fn control_a_plain_add_counts_a_dead_starters_start_twice() {
    a_dead_starters_start(true, Counting::Add);
}

/// A starter already seen dead (its pid gone) while its last stores are still landing: its
/// CAS to Starting and its count race a live start, which may take its word over and
/// count before the dying one's count lands. The run number is one more than before
/// either way.
fn a_dying_starter(counting: Counting) {
    model(move || {
        let ring = Arc::new(Ring::stopped(1));
        let dying = {
            let ring = ring.clone();
            thread::spawn(move || {
                let w = ring.life.load(Ordering::SeqCst);
                if lifecycle::state(w) != RingState::Stopped as u32 {
                    return;
                }
                let dead = lifecycle::next(w, RingState::Starting as u32, DEAD);
                if ring
                    .life
                    .compare_exchange(w, dead, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    env(&ring, DEAD, counting).count_start();
                }
            })
        };
        let started = ring.line().reopen(&env(&ring, 1, counting));
        assert!(
            started == Ok(0) || started == Err(LineError::AlreadyRunning),
            "{started:?}"
        );
        dying.join().unwrap();
        assert_eq!(ring.line().life().state, Some(RingState::Running));
        assert_eq!(ring.run_number(), 2, "the start counted once");
    });
}

#[test]
fn a_dying_starters_late_count_and_its_finishers_add_up_to_one() {
    a_dying_starter(Counting::Shipped);
}

/// Control: a plain add lets the dying starter's late count land on top of its finisher's.
#[test]
#[should_panic(expected = "counted once")]
fn control_a_plain_add_counts_a_dying_starters_start_twice() {
    a_dying_starter(Counting::Add);
}

/// How far a stopper got before it died owning Stopping.
#[derive(Clone, Copy)]
enum DiedAfter {
    /// Its CAS to Stopping.
    Taking,
    /// Closing the counter (its stop recorded), before clearing the mark.
    Closing,
    /// Closing the counter and clearing the mark, before publishing Stopped.
    Clearing,
}

/// A stopper died owning Stopping (`died`). One process stops (taking the dead stop over,
/// whose close finds the counter closed when the dead one closed it, or finding it
/// finished) and starts; another starts (its settle may finish the dead stop first). Every
/// start that returned Ok is counted once: the run number is 2 plus the starts.
fn a_dead_stoppers_stop(died: DiedAfter, counting: Counting) {
    model(move || {
        let ring = Arc::new(Ring::running(2));
        let w = ring.life.load(Ordering::SeqCst);
        let dead = lifecycle::next(w, RingState::Stopping as u32, DEAD);
        ring.life
            .compare_exchange(w, dead, Ordering::AcqRel, Ordering::Acquire)
            .expect("the dead stopper's CAS");
        if matches!(died, DiedAfter::Closing | DiedAfter::Clearing) {
            // Its close (`close_owned` on a multi-producer line): the stop recorded, then
            // the counter closed at it.
            ring.stop_seq.store(0, Ordering::SeqCst);
            ring.claim
                .compare_exchange(0, CLAIM_CLOSED, Ordering::SeqCst, Ordering::SeqCst)
                .expect("the dead stopper's close");
        }
        if matches!(died, DiedAfter::Clearing) {
            env(&ring, DEAD, counting).arm_start_count();
        }
        let other = {
            let ring = ring.clone();
            thread::spawn(move || ring.line().reopen(&env(&ring, 2, counting)).is_ok())
        };
        let e = env(&ring, 1, counting);
        ring.line().close(&e, RingState::Stopped).expect("stop");
        let mut starts = u64::from(ring.line().reopen(&e).is_ok());
        starts += u64::from(other.join().unwrap());
        assert!(starts >= 1, "the stopper's own start or the other's ran");
        assert_eq!(
            ring.run_number(),
            2 + starts,
            "every start counted once ({starts} starts)"
        );
    });
}

#[test]
fn every_start_around_a_dead_stoppers_stop_is_counted_once() {
    a_dead_stoppers_stop(DiedAfter::Taking, Counting::Shipped);
}

#[test]
fn every_start_after_a_dead_stoppers_close_is_counted_once() {
    a_dead_stoppers_stop(DiedAfter::Closing, Counting::Shipped);
}

#[test]
fn every_start_after_a_dead_stopper_cleared_the_mark_is_counted_once() {
    a_dead_stoppers_stop(DiedAfter::Clearing, Counting::Shipped);
}

/// Control: a stop that leaves the mark set makes the next start go uncounted.
#[test]
#[should_panic(expected = "counted once")]
fn control_a_stop_that_never_clears_the_mark_loses_the_next_start() {
    a_dead_stoppers_stop(DiedAfter::Closing, Counting::NeverArmed);
}
