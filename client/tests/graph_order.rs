//! The order a dependent consumer promises (`ConsumerOptions::after`: an event is handed
//! over only once every upstream has committed past it) and the records it rests on, in
//! the states where they are easiest to break: an optional upstream that detached or is
//! being taken over, a refused re-attach, and a skip decided before the first poll.
//!
//! Another process's state between two of its instructions is set up by writing the word
//! it would have written at that instant straight into the segment file (as the hostile
//! table tests do): the shipping code of this process then runs against it.

use std::fs::OpenOptions;
use std::mem::offset_of;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use shmring::{ConsumerOptions, ErrorPolicy, Ring};
use shmring_layout::{consumer_state, owned_word, ConsumerCold, ConsumerEntry, ConsumerHot};
use shmring_testkit::Namespace;

mod common;
use common::{graph_ring, poll_all, publish_range};

const HOT_WORD: usize = offset_of!(ConsumerEntry, hot) + offset_of!(ConsumerHot, word);
const COLD_POISON_SEQ: usize =
    offset_of!(ConsumerEntry, cold) + offset_of!(ConsumerCold, poison_seq);
const COLD_POISON_ATTEMPTS: usize =
    offset_of!(ConsumerEntry, cold) + offset_of!(ConsumerCold, poison_attempts);

fn path(ns: &Namespace) -> PathBuf {
    shmring::names::ring_path(ns.name(), "r").unwrap()
}

fn put(path: &PathBuf, off: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).expect("open");
    f.write_all_at(bytes, off).expect("write");
}

fn field(ring: &Ring, i: u32, field: usize) -> u64 {
    ring.geometry().consumer_offset(i).expect("entry") + field as u64
}

fn info(ring: &Ring, name: &str) -> shmring::ConsumerInfo {
    ring.info()
        .consumers
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no consumer {name}"))
}

/// An optional durable upstream `u` that detaches cleanly leaves its entry RELEASED (an
/// optional consumer's detach does not gate), which `d`'s barrier reads as "does not hold
/// me": `d` delivers 0..4 although `u` committed none of them. `u` re-attaches as
/// optional, keeps its position 0 (`keep = old_next <= head`) and handles 0..4 after `d`:
/// the order `after` promises is broken by an ordinary restart of `u`.
#[test]
fn a_downstream_never_passes_an_optional_upstream_that_detached() {
    let ns = Namespace::concurrent("order-opt-detach");
    let ring = graph_ring(&ns, 4);
    let u = ring
        .consumer(ConsumerOptions::durable("u").optional())
        .unwrap();
    let mut d = ring
        .consumer(ConsumerOptions::durable("d").after(["u"]))
        .unwrap();
    drop(u);
    publish_range(&ring, 0..4);
    let by_d = poll_all(&mut d);
    let mut u = ring
        .consumer(ConsumerOptions::durable("u").optional())
        .unwrap();
    let by_u = poll_all(&mut u);
    assert!(
        by_d.is_empty(),
        "d handled {by_d:?} before u, which then handled {by_u:?} after its restart"
    );
}

/// An optional durable upstream `u` whose process died while ACTIVE still holds `d` (an
/// ACTIVE word gates). A process re-attaching `u` takes the entry over: `take_over` makes
/// it REATTACHING (an optional consumer is not `gated_required`), and an optional consumer
/// keeps its position, so `u` will resume at 0. Between that CAS and its ACTIVE CAS, `d`'s
/// barrier revalidates `u`, finds a state that does not gate and delivers everything up to
/// the head before `u` has committed any of it.
#[test]
fn a_downstream_never_passes_an_optional_upstream_being_taken_over() {
    let ns = Namespace::concurrent("order-reattach");
    let ring = graph_ring(&ns, 4);
    let u = ring
        .consumer(ConsumerOptions::durable("u").optional())
        .unwrap();
    let mut d = ring
        .consumer(ConsumerOptions::durable("d").after(["u"]))
        .unwrap();
    publish_range(&ring, 0..4);
    assert_eq!(
        poll_all(&mut d),
        Vec::<u64>::new(),
        "held by u, ACTIVE at 0"
    );

    // u's holder is gone and another live process (here: this one's pid) is between its
    // take_over CAS and its ACTIVE CAS of u's entry: the word take_over wrote.
    let ui = info(&ring, "u");
    let reattaching = owned_word::next(ui.word, consumer_state::REATTACHING, std::process::id());
    put(
        &path(&ns),
        field(&ring, ui.index, HOT_WORD),
        &reattaching.to_ne_bytes(),
    );
    // The old handle stands for the dead process: it must not touch the entry again.
    std::mem::forget(u);
    let seen = poll_all(&mut d);
    let u_next = info(&ring, "u").next;
    assert!(
        seen.is_empty(),
        "d delivered {seen:?} while u, which resumes at its position {u_next}, committed none of them"
    );
}

/// A refused attach of a durable consumer that was taken over (`fresh == false`) takes
/// its record back by zeroing it: the entry, DETACHED again, has lost the dependencies it
/// had before that attach. Its durable dependencies are "part of it while it is away"
/// (`graph`), for the cycle check and for `broker status`: after the refusal, `x` can
/// name `a` (the cycle `x -> a -> x` is no longer seen), and `a`'s own restart with its
/// real dependencies is then refused.
#[test]
fn a_refused_reattach_keeps_the_durable_consumers_recorded_upstreams() {
    let ns = Namespace::concurrent("order-refused-record");
    let ring = graph_ring(&ns, 4);
    let x = ring.consumer(ConsumerOptions::durable("x")).unwrap();
    let a = ring
        .consumer(ConsumerOptions::durable("a").after(["x"]))
        .unwrap();
    let xi = x.index();
    drop(a);
    let b = ring
        .consumer(ConsumerOptions::durable("b").after(["a"]))
        .unwrap();
    assert_eq!(
        info(&ring, "a").upstream,
        vec![xi],
        "a's record while it is away"
    );
    // A re-attach of a that would close a -> b -> a is refused...
    assert!(ring
        .consumer(ConsumerOptions::durable("a").after(["b"]))
        .is_err());
    // ...and must leave a as it was.
    assert_eq!(
        info(&ring, "a").upstream,
        vec![xi],
        "the refused attach erased a's recorded upstream x"
    );
    drop((x, b));
}

/// A durable consumer `d` whose last holder died in its handler at event 0 (the record
/// the attach window leaves: poison_seq = 1 | SUSPECT, one attempt) restarts with
/// `Skip { attempts: 1 }` behind an upstream `u` that has not committed 0. The first poll
/// finds the attempts used up (`exhausted`) and `policy_first` skips event 0 (dead letter,
/// commit past it) before `upstream_limit` is ever consulted: `d` passes `u`.
#[test]
fn an_exhausted_skip_waits_for_the_upstreams() {
    const SUSPECT: u64 = 1 << 62;
    let ns = Namespace::concurrent("order-exhausted");
    let ring = graph_ring(&ns, 4);
    let u = ring.consumer(ConsumerOptions::durable("u")).unwrap();
    let d = ring.consumer(ConsumerOptions::durable("d")).unwrap();
    let di = d.index();
    drop(d);
    publish_range(&ring, 0..4);
    // What a holder of d that died inside its handler at event 0 leaves (`mark_before`).
    let p = path(&ns);
    put(
        &p,
        field(&ring, di, COLD_POISON_ATTEMPTS),
        &1u32.to_ne_bytes(),
    );
    put(
        &p,
        field(&ring, di, COLD_POISON_SEQ),
        &(1 | SUSPECT).to_ne_bytes(),
    );
    let mut d = ring
        .consumer(
            ConsumerOptions::durable("d")
                .after(["u"])
                .on_error(ErrorPolicy::Skip { attempts: 1 }),
        )
        .unwrap();
    assert_eq!(d.next_sequence(), 0);
    let _ = d.poll_once(|_| {});
    assert!(
        d.next_sequence() <= info(&ring, "u").next,
        "d moved to {} (dead-lettered event 0) while u is at {}",
        d.next_sequence(),
        info(&ring, "u").next
    );
    drop(u);
}
