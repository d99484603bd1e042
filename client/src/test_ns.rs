//! The unit tests' namespace guard (the integration tests use the workspace test kit, which
//! the library's own unit tests cannot link).

/// A test's namespace, removed with everything in it when dropped, also when the test fails.
pub(crate) struct Ns(pub(crate) String);

impl Drop for Ns {
    fn drop(&mut self) {
        if let Ok(dir) = crate::names::namespace_dir(&self.0) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
