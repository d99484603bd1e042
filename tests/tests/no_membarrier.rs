//! A process without membarrier next to a lone producer (docs/FAILURE_MODES.md, known gap
//! 6; ARCHITECTURE.md, "Lone claims"). The child role `no-membarrier` runs under a seccomp
//! filter that makes `membarrier(2)` fail, as a container's default profile does, so it
//! cannot issue the heavy fence that ends a live lone producer's claims.
//!
//! Checked: such a process waits for an idle lone producer (its bounded publish forms find
//! the ring full or time out, its blocking publish sleeps), without a transition of the
//! ring's lifecycle word, and never claims beside it; the lone producer's next claim ends
//! its lone claims (it sees the fence mode the attach raised), the waiter's event follows,
//! and no sequence is handed out twice; no producer takes the line alone on that ring
//! again. A stop from such a process is
//! refused with `NoBarrier` and leaves the ring running, also when it takes over a dead
//! stopper's half-done stop; a lone producer that claims while it waits there lets the
//! stop finish, and a broker's sweep (`Ring::finish_interrupted`) finishing that stop waits
//! the same way. A lone producer that dies while such a process waits is noticed: its claims
//! end where its position says and the waiter's event lands after its dead claim.

use std::time::Instant;

use shmring::{Consumer, ConsumerOptions, Producer, Ring, RingConfig, RingState, LIFECYCLE_WAIT};
use shmring_layout::{lifecycle, FenceMode};
use shmring_testkit::procfs::blocked_in;
use shmring_testkit::raw::RawSegment;
use shmring_testkit::{eventually, testkit, Child, Namespace};

/// The table index of the producer that has the line to itself, if any.
fn lone(ring: &Ring) -> Option<u32> {
    ring.info()
        .producers
        .iter()
        .find(|p| p.lone)
        .map(|p| p.index)
}

/// Whether `child`'s main thread sleeps (`std::thread::sleep`: the waits of a producer
/// that has nothing to do but look again later).
fn asleep(child: &Child) -> bool {
    matches!(
        blocked_in(child.pid(), child.pid()),
        Some(nr) if nr == libc::SYS_nanosleep || nr == libc::SYS_clock_nanosleep
    )
}

/// Send `command` to a `no-membarrier` child and return its answer.
fn ask(child: &mut Child, command: &str) -> String {
    child.send_line(command);
    let verb = command.split(' ').next().unwrap_or(command);
    child.expect_line(&format!("{verb} "))
}

/// Every event `c` can take now, as (sequence, bytes).
fn drain(c: &mut Consumer) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    while c
        .poll_once(|ev| got.push((ev.sequence(), ev.bytes().to_vec())))
        .expect("poll")
        > 0
    {}
    got
}

/// What each test starts from: a multi-producer ring in `ns` with an anonymous consumer, a
/// producer of this process that published `a` at 0 and claims alone (its table index),
/// and a `no-membarrier` child attached as a second producer, ready.
struct Beside {
    ring: Ring,
    c: Consumer,
    p: Producer,
    lone: u32,
    other: Child,
}

fn beside_an_idle_lone_producer(ns: &Namespace) -> Beside {
    let ring = Ring::create(ns.name(), "r", &RingConfig::default()).expect("create ring");
    let c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    let mut p = ring.producer().expect("producer");
    assert_eq!(p.publish(b"a"), Ok(0));
    let lone = lone(&ring).expect("the only producer claims alone");
    let mut other = testkit!(
        ns,
        "producer without membarrier",
        "no-membarrier --ns {ns} --ring r"
    );
    other.expect_line("ready");
    Beside {
        ring,
        c,
        p,
        lone,
        other,
    }
}

/// Leave the lifecycle word as a stopper that died right after it took it leaves it
/// (Stopping, its pid, nothing closed), send `other` `command` (`stop`, or a sweep's
/// `finish`), and wait until it has taken the word over.
fn over_a_dead_stopper(raw: &RawSegment, other: &mut Child, command: &str) {
    let (dead, _) = shmring_testkit::fault::dead_process();
    let word = raw.lifecycle_word();
    raw.set_lifecycle_word(lifecycle::pack(
        lifecycle::generation(word) + 1,
        RingState::Stopping as u32,
        dead,
    ));
    other.send_line(command);
    eventually("the dead stopper's word taken over", || {
        let word = raw.lifecycle_word();
        lifecycle::state(word) == RingState::Stopping as u32
            && lifecycle::owner(word) == other.pid()
    });
}

/// The lone producer `p` (which published `a` at 0) publishes `b` while another process's
/// stop waits for it: accepted at 1 or refused, as the stop decides. How many events the
/// ring holds at its stop.
fn lone_claims_b(p: &mut Producer) -> u64 {
    match p.publish(b"b") {
        Ok(seq) => {
            assert_eq!(seq, 1);
            2
        }
        Err(shmring::PublishError::Closed) => 1,
        Err(e) => panic!("the lone producer's claim: {e}"),
    }
}

/// A producer alone on a multi-producer ring publishes once and stays idle; a process
/// without membarrier attaches and cannot end its lone claims: its bounded forms give up
/// and its blocking publish sleeps, all without a transition of the ring's lifecycle
/// word. The lone producer's next claim ends them (it sees the fence mode the attach
/// raised); both events land once each, and no producer takes the line alone on this ring
/// again, the process without membarrier gone or not.
#[test]
fn a_producer_without_membarrier_waits_for_an_idle_lone_producer_until_its_next_claim() {
    let ns = Namespace::new("nomb_wait");
    let Beside {
        ring,
        mut c,
        mut p,
        lone: me,
        mut other,
    } = beside_an_idle_lone_producer(&ns);
    // Its attach raised the ring's fence mode: the one thing of it the lone producer sees.
    assert_eq!(ring.info().fence_mode, Some(FenceMode::SeqCstFence));
    let raw = RawSegment::open(&ring);
    let word = raw.lifecycle_word();
    assert_eq!(ask(&mut other, "try t"), "try err=full");
    assert_eq!(ask(&mut other, "timeout 50 t"), "timeout err=timeout");
    assert_eq!(
        raw.lifecycle_word(),
        word,
        "its claims waited without a transition of the ring"
    );
    assert_eq!(lone(&ring), Some(me), "nothing ended the lone claims");
    assert_eq!(
        drain(&mut c),
        [(0, b"a".to_vec())],
        "and nothing was claimed beside them"
    );

    other.send_line("publish b");
    eventually("the publish without membarrier waits, asleep", || {
        asleep(&other)
    });
    assert_eq!(raw.lifecycle_word(), word, "it waits without a transition");
    assert_eq!(lone(&ring), Some(me));
    assert_eq!(drain(&mut c), [], "it waits without a claim");

    // The lone producer's next claim ends its lone claims at 1: the two events take 1 and
    // 2, in either order.
    let mine = p.publish(b"c").expect("the lone producer's next claim");
    let answer = other.expect_line("publish ");
    let theirs: u64 = answer
        .strip_prefix("publish ok=")
        .unwrap_or_else(|| other.fail(&format!("the waiter's publish: {answer}")))
        .parse()
        .expect("a sequence");
    let mut both = [mine, theirs];
    both.sort_unstable();
    assert_eq!(both, [1, 2], "one sequence each");
    let mut want = vec![(mine, b"c".to_vec()), (theirs, b"b".to_vec())];
    want.sort();
    assert_eq!(drain(&mut c), want);
    assert_eq!(lone(&ring), None);

    // The fence mode the attach raised stays raised: a producer alone on the ring, with the
    // process without membarrier gone, does not take the line (it would at its attach).
    other.send_line("exit");
    other.expect_line("done");
    other.wait_ok();
    drop(p);
    let mut p = ring.producer().expect("producer");
    assert_eq!(lone(&ring), None, "no lone claims on this ring any more");
    assert_eq!(p.publish(b"d"), Ok(3));
    assert_eq!(lone(&ring), None);
    assert_eq!(ring.stop(), Ok(4));
}

/// A stop from a process without membarrier next to an idle lone producer is refused with
/// `NoBarrier` before any transition. One that takes over a dead stopper's half-done stop
/// waits for the idle lone producer as long as a lifecycle call waits for another owner,
/// then leaves the ring running and says `NoBarrier`. The lone producer then claims
/// (accepted), and the ring stops at its events.
#[test]
fn a_stop_without_membarrier_over_a_dead_stopper_and_an_idle_lone_producer_leaves_it_running() {
    let ns = Namespace::new("nomb_dead_stopper");
    let Beside {
        ring,
        mut c,
        mut p,
        lone: me,
        mut other,
    } = beside_an_idle_lone_producer(&ns);
    let raw = RawSegment::open(&ring);
    let word = raw.lifecycle_word();
    assert_eq!(ask(&mut other, "stop"), "stop err=no-barrier");
    assert_eq!(
        raw.lifecycle_word(),
        word,
        "refused before a transition of the ring"
    );

    let asked = Instant::now();
    over_a_dead_stopper(&raw, &mut other, "stop");
    let answer = other
        .expect_within("stop ", LIFECYCLE_WAIT * 3)
        .unwrap_or_else(|| other.fail("the stop did not give up"));
    assert_eq!(answer, "err=no-barrier");
    assert!(
        asked.elapsed() >= LIFECYCLE_WAIT,
        "it waited for the lone producer as long as a lifecycle call waits"
    );
    assert_eq!(
        ring.info().state,
        Some(RingState::Running),
        "the stop not done"
    );
    assert_eq!(
        lone(&ring),
        Some(me),
        "the idle lone producer kept its claims"
    );
    assert_eq!(raw.claim_word() & shmring_layout::CLAIM_CLOSED, 0);
    // With no half-done stop to finish, refused before a transition again.
    let word = raw.lifecycle_word();
    assert_eq!(ask(&mut other, "stop"), "stop err=no-barrier");
    assert_eq!(raw.lifecycle_word(), word);

    assert_eq!(
        p.publish(b"b"),
        Ok(1),
        "the lone producer's claim is accepted"
    );
    assert_eq!(lone(&ring), None);
    assert_eq!(ask(&mut other, "stop"), "stop ok=2");
    assert_eq!(drain(&mut c), [(0, b"a".to_vec()), (1, b"b".to_vec())]);
    other.send_line("exit");
    other.wait_ok();
}

/// A stop from a process without membarrier that took over a dead stopper's word waits for
/// the lone producer; the lone producer claims meanwhile: it ends its lone claims itself,
/// and the stop finishes at the counter, its claim accepted exactly when it lies below.
#[test]
fn a_lone_producer_that_claims_lets_a_waiting_stop_without_membarrier_finish() {
    let ns = Namespace::new("nomb_stop_finish");
    let Beside {
        ring,
        mut c,
        mut p,
        mut other,
        ..
    } = beside_an_idle_lone_producer(&ns);
    over_a_dead_stopper(&RawSegment::open(&ring), &mut other, "stop");
    let accepted = lone_claims_b(&mut p);
    assert_eq!(other.expect_line("stop "), format!("stop ok={accepted}"));
    assert_eq!(ring.info().state, Some(RingState::Stopped));
    let got = drain(&mut c);
    assert_eq!(got.len() as u64, accepted, "{got:?}");
    assert_eq!(p.publish(b"x"), Err(shmring::PublishError::Closed));
    other.send_line("exit");
    other.wait_ok();
}

/// A broker's sweep (`Ring::finish_interrupted`) from a process without membarrier, over a
/// dead stopper's half-done stop beside an idle lone producer: it never waits for a live
/// owner of the lifecycle word, but it takes the dead stopper's word over and waits, as
/// the stop itself would, for the lone producer to end its claims. The lone producer
/// claims meanwhile, and the sweep finishes the stop and says it did. (A sweep that gave
/// up at once put the ring back to Running, the stop lost.)
#[test]
fn a_sweep_without_membarrier_finishing_a_dead_stop_waits_for_the_lone_producer() {
    let ns = Namespace::new("nomb_sweep");
    let Beside {
        ring,
        mut c,
        mut p,
        lone: me,
        mut other,
    } = beside_an_idle_lone_producer(&ns);
    let raw = RawSegment::open(&ring);
    assert_eq!(lone(&ring), Some(me), "the lone producer claims alone");
    over_a_dead_stopper(&raw, &mut other, "finish");
    let accepted = lone_claims_b(&mut p);
    assert_eq!(other.expect_line("finish "), "finish ok=Stopped,true");
    assert_eq!(ring.info().state, Some(RingState::Stopped));
    assert_eq!(raw.stop_seq(), accepted);
    assert_eq!(drain(&mut c).len() as u64, accepted);
    other.send_line("exit");
    other.wait_ok();
}

/// A lone producer fills the ring and waits for room holding its next claim; a process
/// without membarrier publishes and sleeps beside it; the lone producer is killed. The
/// sleeper notices: it ends the dead producer's claims past its dead claim, without the
/// fence, and its event lands after the hole the repair tombstones.
#[test]
fn a_producer_without_membarrier_notices_a_lone_producer_die_while_it_waits() {
    const CAPACITY: u64 = 16;
    let ns = Namespace::new("nomb_kill");
    let config = RingConfig {
        capacity: CAPACITY,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut c = ring
        .consumer(ConsumerOptions::anonymous())
        .expect("consumer");
    let mut first = testkit!(
        ns,
        "lone producer",
        "produce --ns {ns} --ring r --producer-id 0 --count 0 --mode publish"
    );
    first.expect_line("started");
    eventually("the lone producer holds a claim past the full ring", || {
        ring.info()
            .producers
            .iter()
            .any(|p| p.lone && p.in_flight == Some(CAPACITY))
    });
    let mut other = testkit!(
        ns,
        "producer without membarrier",
        "no-membarrier --ns {ns} --ring r"
    );
    other.expect_line("ready");
    other.send_line("publish after");
    eventually("the publish without membarrier waits, asleep", || {
        asleep(&other)
    });
    let dead = ring
        .info()
        .producers
        .into_iter()
        .find(|p| p.lone)
        .expect("still lone");
    first.kill();

    let seen: Vec<u64> = drain(&mut c).into_iter().map(|(s, _)| s).collect();
    assert_eq!(seen, (0..CAPACITY).collect::<Vec<_>>());
    assert_eq!(
        other.expect_line("publish "),
        format!("publish ok={}", CAPACITY + 1),
        "the counter took over past the dead claim"
    );
    let repair = ring.repair_dead_producer(dead.index, dead.word);
    assert_eq!(repair.tombstoned, 1, "{repair:?}");
    assert_eq!(drain(&mut c), [(CAPACITY + 1, b"after".to_vec())]);
    assert_eq!(c.stats().skipped, 1, "the dead claim, skipped once");
    other.send_line("exit");
    other.wait_ok();
}
