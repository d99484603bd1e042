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
//! The limit (a) is taken from a snapshot that (1) makes stale, but the scan (b) is not
//! checked against it again: events published after the upstream gated again are handed
//! to the downstream first. The downstream side mirrors `Consumer::barrier` (one upstream:
//! the shipping `graph::upstream_next`, and `consumer_state::gates` of the cached word);
//! the upstream side runs the shipping `table::consumer::set`.
//!
//! The model is `#[ignore]`d: it fails on the protocol as it is (the other states that do
//! not gate are shown in `graph_order.rs`).

mod loom_word;

use loom::sync::atomic::Ordering;
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
#[ignore = "defect: a downstream's batch can pass an upstream that gates again while the batch is scanned"]
fn a_downstream_never_delivers_an_event_its_upstream_gated_again_for() {
    model(|| {
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
        // The downstream's poll: the barrier (validated word: RELEASED, not gating)...
        let cached = released;
        let limit = match graph::upstream_next(&ring.next, &ring.word, cached) {
            Some(n) if consumer_state::gates(owned_word::state(cached)) => n,
            Some(_) => u64::MAX,
            // Stale: revalidation delivers nothing this time.
            None => 0,
        };
        // ...then the scan of the run from its position 0.
        let delivered = limit > 0 && ring.stamp.load(Ordering::Acquire) == 0;
        let from = upstream.join().unwrap();
        producer.join().unwrap();
        assert!(
            !(delivered && from == 0),
            "the downstream delivered event 0, which its upstream (gated again at 0) reads after it"
        );
    });
}
