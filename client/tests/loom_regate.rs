//! A loom model of a dependent consumer's barrier while its upstream gates again: the
//! upstream was released from gating (by the broker's policy; an optional consumer's
//! detach, a takeover without gating, REATTACHING, are the same state for the barrier), so
//! the downstream's barrier ignores it; the upstream's holder then gates again from the
//! head (`jump_to_head`: the SeqCst CAS RELEASED -> ACTIVE, then the head, then `next`),
//! and from then on every event at or above that head is the upstream's to read first.
//!
//! ```text
//! downstream d (poll_once)                  upstream u (jump_to_head)   producer
//! (a) barrier: u's word is RELEASED,
//!     cached as not gating: limit = MAX
//!                                           (1) word -> ACTIVE (SeqCst)
//!                                           (2) h = position   (SeqCst)
//!                                           (3) next = h       (Release)
//!                                                                       claim h, stamp h
//! (b) scan: stamp h is published, h < MAX
//! (c) deliver h                             ... u delivers h after d
//! ```
//!
//! The limit (a) is taken from a snapshot that (1) makes stale. The shipping answer
//! (`consumer/barrier.rs`): after the scan, a SeqCst fence and a second look at the
//! upstream's word (`graph::unchanged`), with a SeqCst fence on the upstream's side between
//! gating again and reading the head; a moved word delivers nothing. The downstream side
//! runs the shipping `graph::upstream_next` and `graph::unchanged`, the upstream side the
//! shipping `table::consumer::set`. The control leaves the second look out and loom finds
//! event 0 handed to the downstream first.

mod loom_word;

use loom::sync::atomic::{fence, Ordering};
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};

use shmring::graph;
use shmring::line::Word;
use shmring::table;
use shmring_layout::{consumer_state, owned_word};

/// The slot stamp before the event is published.
const EMPTY: u64 = u64::MAX;

struct Ring {
    /// The upstream's entry: word and `next`.
    word: W,
    next: W,
    /// The claim position, and the stamp of the slot of sequence 0.
    position: W,
    stamp: W,
}

#[test]
fn a_downstream_never_delivers_an_event_its_upstream_gated_again_for() {
    regate(true);
}

#[test]
#[should_panic(expected = "reads after it")]
fn control_a_downstream_that_does_not_look_again_passes_its_upstream() {
    regate(false);
}

/// The model; `look_again`: the downstream's second look after its scan.
fn regate(look_again: bool) {
    model(move || {
        let holding = owned_word::pack(1, consumer_state::ACTIVE, 1);
        let released = table::consumer::released(holding);
        let ring = Arc::new(Ring {
            word: W::new(released),
            // The upstream was released at 0; nothing is published yet.
            next: W::new(0),
            position: W::new(0),
            stamp: W::new(EMPTY),
        });
        let upstream = {
            let r = ring.clone();
            thread::spawn(move || {
                // jump_to_head: gate again, by the attach protocol, then read the head.
                table::consumer::set(&r.word, released, consumer_state::ACTIVE)
                    .expect("the holder keeps its entry");
                fence(Ordering::SeqCst);
                let head = r.position.load(Ordering::SeqCst);
                r.next.store(head, Ordering::Release);
                head
            })
        };
        let producer = {
            let r = ring.clone();
            thread::spawn(move || {
                let seq = r.position.fetch_add(1, Ordering::SeqCst);
                assert_eq!(seq, 0);
                r.stamp.store(seq, Ordering::Release);
            })
        };
        // The downstream's poll: the barrier (validated word: a required upstream
        // RELEASED, which does not hold it)...
        let cached = released;
        let limit = match graph::upstream_next(&ring.next, &ring.word, cached) {
            Some(_) => u64::MAX,
            // Stale: revalidation delivers nothing this time.
            None => 0,
        };
        // ...the scan of the run from its position 0, and the second look.
        let scanned = limit > 0 && ring.stamp.load(Ordering::Acquire) == 0;
        let delivered = scanned
            && (!look_again
                || graph::unchanged([(&ring.word, cached)], || fence(Ordering::SeqCst)));
        let from = upstream.join().unwrap();
        producer.join().unwrap();
        assert!(
            !(delivered && from == 0),
            "the downstream delivered event 0, which its upstream (gated again at 0) reads after it"
        );
    });
}
