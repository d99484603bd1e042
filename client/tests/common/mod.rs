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
