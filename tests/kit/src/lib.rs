//! The test kit of the shmring workspace: what every package's tests, and the child
//! processes they spawn, share. One namespace guard, one child-process handle, one set of
//! fault and /proc helpers, for the client's, the broker's, the bridge's, the examples' and
//! the multi-process tests of `shmring-tests` alike.
//!
//! - [`Namespace`]: a unique namespace per test. Children are spawned through it
//!   ([`Namespace::spawn`], [`Namespace::role`], [`testkit!`]); its `Drop`, even while a
//!   failed test unwinds, SIGKILLs and reaps every one of them still there, marks every
//!   ring in it deleted and removes its directory and its scratch directory. [`Namespace::new`]
//!   also serialises the process-heavy tests of one test binary, so that a 2-core machine
//!   never has more than two busy processes.
//! - [`Child`]: a spawned process. Readiness comes from lines it prints on stdout; every
//!   wait has a deadline (a watchdog); stderr is collected and shown when a test fails;
//!   signals reach it only while it is not reaped; `Drop` SIGKILLs and reaps it.
//!   [`output`] runs a short command to its end, as `Command::output` does, but bounded.
//! - [`role`]: a test binary run again as a child ("a role"), and a copy of a binary that
//!   another uid can run.
//! - [`fault`]: the seeded randomness of the fault-injection tests (`SHMRING_FAULT_SEED`),
//!   and the identity of a process that is certainly dead.
//! - [`procfs`]: a child's CPU time, the system call it is blocked in, and what its threads
//!   are doing when it does not answer; [`wait_until`] and [`eventually`], the bounded poll
//!   of a condition.
//! - [`payload`]: self-checking events. Each payload carries its producer's id, that
//!   producer's own sequence number and a checksum over every byte, so a consumer can tell
//!   a lost, duplicated, reordered or torn event from a good one without any side channel.
//! - [`order`]: the order rule a checking consumer holds every event to.
//! - [`report`]: parsing the `key=value` summary lines the children print.
//! - [`raw`]: raw words of a segment at `shmring_layout` offsets, to read the wake lines and
//!   to lay down the state a process killed at one exact instruction leaves.
//! - [`seccomp`]: a filter that kills, or fails, the system calls a test must not see.
//! - [`Wait`]: the wait strategies the tests pick from, by their short names.
//! - [`ParkedConsumer`]: a consumer on a thread that parks whenever it has taken
//!   everything, for the tests that check every publish wakes it.
//!
//! The `shmring-testkit` binary (package `shmring-tests`, whose tests spawn it with
//! [`testkit!`]) is this kit's child program: Cargo hands a binary's path only to the
//! tests of its own package, so it lives there.

pub mod child;
pub mod fault;
pub mod namespace;
pub mod order;
pub mod output;
pub mod parked;
pub mod payload;
pub mod poll;
pub mod procfs;
pub mod raw;
pub mod report;
pub mod role;
pub mod seccomp;
pub mod strategy;

pub use child::{Child, WAIT};
pub use namespace::{serial, Namespace};
pub use output::output;
pub use parked::ParkedConsumer;
pub use poll::{eventually, wait_until};
pub use strategy::Wait;

/// Spawn the `shmring-testkit` binary as a child of namespace `ns`:
/// `testkit!(ns, "label", "consume --ns {ns} --ring r --per-producer {n}")`. The command
/// line is a `format!` string split at whitespace (every argument the tests pass is a plain
/// word). A macro so that `CARGO_BIN_EXE_shmring-testkit` is read where Cargo sets it: in
/// the integration tests of `shmring-tests`.
#[macro_export]
macro_rules! testkit {
    ($ns:expr, $label:expr, $($fmt:tt)+) => {{
        let mut cmd = ::std::process::Command::new(env!("CARGO_BIN_EXE_shmring-testkit"));
        cmd.args(format!($($fmt)+).split_whitespace());
        $crate::Namespace::spawn(&$ns, &$label, cmd)
    }};
}
