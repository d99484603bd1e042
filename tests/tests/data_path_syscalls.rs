//! README: "a ring's data path is plain loads and stores on the mapped segment, with no
//! system call on the data path". The `data-path` role runs every publish and delivery
//! form (stamped slots with either producer mode, a fixed-size ring; required and optional
//! consumers; single events, batches, claims) under a seccomp filter that kills it at its
//! first system call. Nobody parks on those rings: waking a parked consumer or producer is
//! the one system call the data path makes, and only then.

use std::os::unix::process::ExitStatusExt;

use shmring_testkit::{testkit, Namespace};

#[test]
fn publishing_and_delivering_make_no_system_call() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: the seccomp filter is written for x86_64");
        return;
    }
    let ns = Namespace::new("nosyscall");
    let mut child = testkit!(
        ns,
        "data path",
        "data-path --ns {} --rounds 2000",
        ns.name()
    );
    child.expect("armed");
    let status = child.wait_status();
    assert!(
        status.success(),
        "the data path under the filter ended with {status:?} (SIGSYS is signal {}): {}",
        libc::SIGSYS,
        child.stderr()
    );
}

/// The control: one system call under the same filter kills the role, so the test above
/// can fail.
#[test]
fn control_a_system_call_under_the_filter_kills_the_process() {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: the seccomp filter is written for x86_64");
        return;
    }
    let ns = Namespace::new("syscallctl");
    let mut child = testkit!(
        ns,
        "control",
        "data-path --ns {} --rounds 10 --control",
        ns.name()
    );
    child.expect("armed");
    let status = child.wait_status();
    assert_eq!(status.signal(), Some(libc::SIGSYS), "{status:?}");
}
