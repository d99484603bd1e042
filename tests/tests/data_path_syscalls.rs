//! README: "a ring's data path is plain loads and stores on the mapped segment, with no
//! system call on the data path". The `data-path` role runs every publish and delivery
//! form (stamped slots with either producer mode, a fixed-size ring; required and optional
//! consumers; single events, batches, claims) in seccomp's strict mode, where the kernel
//! kills its main thread at its first system call other than `read` and `write` (only that
//! thread: the process's watchdog thread lives on, and `/proc` shows the main thread as a
//! zombie). Nobody parks on those rings: waking a parked consumer or producer is the one
//! system call the data path makes, and only then.

use std::time::Duration;

use shmring_testkit::{eventually, procfs, testkit, wait_until, Child, Namespace};

/// What the role says at the end (`done ...`), or `None` if its main thread was killed.
fn outcome(child: &mut Child) -> Option<String> {
    let pid = child.pid();
    child.expect("armed");
    wait_until("the role to say `done` or its main thread to die", || {
        if let Some(done) = child.expect_within("done", Duration::from_millis(20)) {
            return Some(Some(done));
        }
        (procfs::main_thread_state(pid) == Some('Z')).then_some(None)
    })
}

#[test]
fn publishing_and_delivering_make_no_system_call() {
    let ns = Namespace::new("nosyscall");
    let mut child = testkit!(
        ns,
        "data path",
        "data-path --ns {} --rounds 2000",
        ns.name()
    );
    let done = outcome(&mut child);
    assert_eq!(
        done.as_deref(),
        Some("ok=true"),
        "None: the main thread was killed in strict mode, by a system call ({})",
        child.stderr_so_far()
    );
}

/// The control: one system call in strict mode kills the role's main thread before it
/// says `done`, so the test above can fail.
#[test]
fn control_a_system_call_in_strict_mode_kills_the_main_thread() {
    let ns = Namespace::new("syscallctl");
    let mut child = testkit!(
        ns,
        "control",
        "data-path --ns {} --rounds 10 --control",
        ns.name()
    );
    assert_eq!(outcome(&mut child), None);
    eventually("the main thread to stay dead", || {
        procfs::main_thread_state(child.pid()) == Some('Z')
    });
}
