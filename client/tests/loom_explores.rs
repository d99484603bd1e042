//! The models' words (`loom_word::W`) let loom run the interleavings the models rely on.
//!
//! loom's partial-order reduction keeps one last access per atomic, so a thread that loads
//! a word and then writes it hides another thread's earlier load of that word behind its
//! own: on a plain loom atomic the model below runs once, with the reader's load first,
//! and never sees the write (tokio-rs/loom#392). Every lifecycle transition loads its word
//! before its CAS, so the models depend on `W` not having that blind spot.

mod loom_word;

use std::collections::BTreeSet;
use std::sync::Mutex;

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;

use loom_word::{model, W};
use shmring::line::Word;

#[test]
fn loom_word_explores_a_load_racing_a_later_write() {
    let seen = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let outcomes = seen.clone();
    model(move || {
        let word = Arc::new(W::new(5));
        let writer = {
            let word = word.clone();
            thread::spawn(move || {
                // Acquire, SeqCst: as a lifecycle transition's settle load and CAS.
                let v = word.load(Ordering::Acquire);
                let _ = word.compare_exchange(v, 7, Ordering::SeqCst, Ordering::SeqCst);
            })
        };
        // Acquire: the reader's look.
        let read = word.load(Ordering::Acquire);
        writer.join().unwrap();
        seen.lock().unwrap().insert(read);
    });
    let outcomes = outcomes.lock().unwrap().clone();
    assert_eq!(outcomes, BTreeSet::from([5, 7]));
}
