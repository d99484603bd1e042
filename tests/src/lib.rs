//! Helpers shared by shmring's multi-process integration tests (`tests/tests/*.rs`) and by
//! the child processes they spawn (the `shmring-testkit` binary, `src/main.rs`).
//!
//! - [`payload`]: self-checking events. Each payload carries its producer's id, that
//!   producer's own sequence number and a checksum over every byte, so a consumer can tell
//!   a lost, duplicated, reordered or torn event from a good one without any side channel.
//! - [`Namespace`]: a unique namespace per test whose `Drop` removes every segment, even
//!   when the test panics; it also serialises the process-heavy tests of one test binary so
//!   that a 2-core machine never has more than two busy processes.
//! - [`Child`]: a spawned testkit process. Readiness comes from lines it prints on stdout;
//!   every wait has a deadline (a watchdog), and `Drop` SIGKILLs and reaps it.
//! - [`report`]: parsing the `key=value` summary lines the children print.
//! - [`fault`]: the seeded randomness of the fault-injection tests (`SHMRING_FAULT_SEED`).
//! - [`raw`]: raw words of a segment at `shmring_layout` offsets, to read the wake lines and
//!   to lay down the state a process killed at one exact instruction leaves.
//! - [`procfs`]: a child's CPU time and the system call it is blocked in, for the parking
//!   tests; [`eventually`], the bounded poll of a condition.

pub mod child;
pub mod fault;
pub mod namespace;
pub mod payload;
pub mod procfs;
pub mod raw;
pub mod report;

pub use child::{Child, WAIT};
pub use namespace::Namespace;
pub use procfs::eventually;

/// Spawn the testkit binary: `testkit!("label", "consume --ns {ns} --ring r --per-producer
/// {n}")`. The command line is a `format!` string split at whitespace (every argument the
/// tests pass is a plain word). A macro so that `CARGO_BIN_EXE_shmring-testkit` is read
/// where Cargo sets it: in the integration tests.
#[macro_export]
macro_rules! testkit {
    ($label:expr, $($fmt:tt)+) => {
        $crate::Child::spawn(
            env!("CARGO_BIN_EXE_shmring-testkit"),
            &$label,
            &format!($($fmt)+).split_whitespace().collect::<Vec<_>>(),
        )
    };
}
