//! What the client's test files share: a namespace of their own per test.

#![allow(dead_code)] // each test file uses a different part

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A namespace of its own, removed with everything in it on drop (also on panic).
pub struct Ns(pub String);

impl Ns {
    /// A fresh namespace for `test` (unique per process and call).
    pub fn new(test: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Ns(format!("c-{}-{test}-{n}", std::process::id()))
    }

    /// Its directory.
    pub fn dir(&self) -> PathBuf {
        shmring::names::namespace_dir(&self.0).expect("valid namespace")
    }

    /// The segment path of ring `name` in it.
    pub fn ring(&self, name: &str) -> PathBuf {
        shmring::names::ring_path(&self.0, name).expect("valid ring name")
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir());
    }
}

/// `poll_once` with a handler that cannot panic, on a consumer this test owns. Such a
/// handler never makes `poll_once` report `HandlerPanicked` (only the handler's own panic
/// does), so that error, or the `Failed` that follows it, is the client panicking inside
/// its delivery loop: fail the test. The consumer's entry must not be FAILED afterwards.
pub fn poll_quiet(
    ring: &shmring::Ring,
    c: &mut shmring::Consumer,
    handler: impl FnMut(shmring::Event<'_>),
) -> Result<usize, shmring::PollError> {
    let r = c.poll_once(handler);
    assert!(
        !matches!(
            r,
            Err(shmring::PollError::HandlerPanicked { .. } | shmring::PollError::Failed)
        ),
        "poll_once with a handler that cannot panic returned {r:?}: the client panicked"
    );
    let index = c.index();
    if let Some(e) = ring.info().consumers.iter().find(|e| e.index == index) {
        assert_ne!(e.state, "FAILED", "consumer {index} left FAILED: {e:?}");
    }
    r
}
