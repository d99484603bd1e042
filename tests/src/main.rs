//! `shmring-testkit`: the child processes of the multi-process integration tests.
//!
//! Each subcommand is one role (`produce`, `consume`, `attach-loop`, `claim-batch`,
//! `ping-pong`, `wake-set`, `run-closed`, `lifecycle-storm`, `worker`, `main-exits`, `liveness`, `data-path`, `no-membarrier`, `no-waitv`), in its own module under `roles/`. A role reports on stdout, one line per fact, `word key=value ...`:
//! `ready` once attached (the parent waits for it instead of sleeping), `done ...` with its
//! counters at the end. A violation of an ordering or integrity rule is printed on stderr
//! and exits with status 1; a panic exits with 101.
//!
//! Children never outlive their test: they ask the kernel for SIGKILL when the thread that
//! spawned them exits (`PR_SET_PDEATHSIG`), and a watchdog thread ends them after
//! `--timeout-secs` whatever happens.

mod roles;

use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Child roles for shmring's multi-process tests")]
struct Cli {
    /// Exit with status 3 after this many seconds, whatever the role is doing.
    #[arg(long, global = true, default_value_t = 120)]
    timeout_secs: u64,
    #[command(subcommand)]
    role: Role,
}

#[derive(Subcommand)]
enum Role {
    /// Publish self-checking events with per-producer sequence numbers.
    Produce(roles::produce::Args),
    /// Attach a consumer, check every event's order and checksum, report counters.
    Consume(roles::consume::Args),
    /// Attach and detach a consumer repeatedly while a producer runs.
    AttachLoop(roles::attach_loop::Args),
    /// Publish some events, then hold a `claim_batch` uncommitted until killed.
    ClaimBatch(roles::claim_batch::Args),
    /// One side of a park/wake ping-pong over two rings (Blocking consumers).
    PingPong(roles::ping_pong::Args),
    /// Step consumers on many rings from one thread, parking on one WakeSet.
    WakeSet(roles::wake_set::Args),
    /// A consumer that lives through stops and starts of its ring.
    RunClosed(roles::run_closed::Args),
    /// Stop, start and drain a ring in a seeded order, racing other processes.
    LifecycleStorm(roles::lifecycle_storm::Args),
    /// A member of a worker group that prints every event it is handed.
    Worker(roles::worker::Args),
    /// A process whose main thread exits while another of its threads runs on.
    MainExits(roles::MainExits),
    /// Report how this process judges other processes: whether each is alive and exists.
    Liveness(roles::Liveness),
    /// Every publish and delivery form in seccomp strict mode: killed at a system call.
    DataPath(roles::data_path::Args),
    /// A producer in a process whose membarrier fails, run command by command from stdin.
    NoMembarrier(roles::no_membarrier::Args),
    /// A thread parking on WakeSets in a process whose futex_waitv fails, run from stdin.
    NoWaitv(roles::no_waitv::Args),
}

fn main() -> anyhow::Result<()> {
    // Die with the parent test: SIGKILL when the spawning thread exits.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let cli = Cli::parse();
    let limit = Duration::from_secs(cli.timeout_secs);
    std::thread::spawn(move || {
        // A watchdog, not synchronisation: the parent's own deadlines are shorter.
        std::thread::sleep(limit);
        eprintln!("testkit watchdog: still running after {limit:?}, exiting");
        std::process::exit(3);
    });
    match cli.role {
        Role::Produce(a) => roles::produce::run(a),
        Role::Consume(a) => roles::consume::run(a),
        Role::AttachLoop(a) => roles::attach_loop::run(a),
        Role::ClaimBatch(a) => roles::claim_batch::run(a),
        Role::PingPong(a) => roles::ping_pong::run(a),
        Role::WakeSet(a) => roles::wake_set::run(a),
        Role::RunClosed(a) => roles::run_closed::run(a),
        Role::LifecycleStorm(a) => roles::lifecycle_storm::run(a),
        Role::Worker(a) => roles::worker::run(a),
        Role::MainExits(a) => roles::main_exits(a),
        Role::Liveness(a) => roles::liveness(a),
        Role::DataPath(a) => roles::data_path::run(a),
        Role::NoMembarrier(a) => roles::no_membarrier::run(a),
        Role::NoWaitv(a) => roles::no_waitv::run(a),
    }
}
