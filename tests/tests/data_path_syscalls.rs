//! README: "a ring's data path is plain loads and stores on the mapped segment, with no
//! system call on the data path". The `data-path` role runs every publish form (single
//! events, batches, values, claims, a `Publisher`) and every delivery form (`poll_once`,
//! `poll_once_fallible`, `poll_runs`; required, dependent, optional and worker-group
//! consumers) on stamped rings of either producer mode and on a fixed-size ring, under a
//! seccomp filter that kills it at its first system call other than its final
//! `exit_group`. Nobody parks on those rings and they never fill: waking a parked consumer
//! or producer, and waiting for room, are the system calls the data path makes, and only
//! then. The timed forms (`publish_timeout`, `flush_within`) read the clock, which is no
//! system call only where the kernel's vDSO serves it: they are left out.

use std::os::unix::process::ExitStatusExt;

use shmring_testkit::{testkit, Namespace};

#[test]
fn publishing_and_delivering_make_no_system_call() {
    let ns = Namespace::new("nosyscall");
    let mut child = testkit!(
        ns,
        "data path",
        "data-path --ns {} --rounds 1000",
        ns.name()
    );
    child.expect("armed");
    let status = child.wait_status();
    assert!(
        status.success(),
        "the data path under the filter ended with {status:?} (signal {} is SIGSYS: a system \
         call; status 1: an event came back wrong): {}",
        libc::SIGSYS,
        child.stderr()
    );
}

/// The control: one system call under the same filter kills the role, so the test above
/// can fail.
#[test]
fn control_a_system_call_under_the_filter_kills_the_process() {
    let ns = Namespace::new("syscallctl");
    let mut child = testkit!(
        ns,
        "control",
        "data-path --ns {} --rounds 10 --control",
        ns.name()
    );
    child.expect("armed");
    assert_eq!(child.wait_status().signal(), Some(libc::SIGSYS));
}
