//! The testkit's roles, one per module, and what they share: the ring arguments, the event
//! size and the wait strategy.

pub mod attach_loop;
pub mod claim_batch;
pub mod consume;
pub mod data_path;
pub mod lifecycle_storm;
pub mod no_membarrier;
pub mod no_waitv;
pub mod ping_pong;
pub mod produce;
pub mod run_closed;
pub mod wake_set;
pub mod worker;

use std::str::FromStr;

use anyhow::Context;
use shmring::Ring;

/// What the thread that outlives the main thread does.
#[derive(clap::Args, Debug)]
pub struct MainExits {
    /// Once the main thread has exited, create ring `r` in this namespace and say
    /// `created` (or `create failed: ERROR`).
    #[arg(long)]
    create: Option<String>,
}

/// A process whose main thread exits while another thread runs on, as a program that ends
/// `main` with `pthread_exit` does: `/proc/PID/stat` then says zombie while the process
/// still runs. The other thread says `ready` (first, with `--create`, it waits for the main
/// thread to be gone and creates a ring) and sleeps until the watchdog or the parent ends
/// the process.
pub fn main_exits(args: MainExits) -> anyhow::Result<()> {
    let main = rustix::process::getpid().as_raw_nonzero().get();
    std::thread::spawn(move || {
        if let Some(namespace) = args.create {
            // The main thread's own task entry says Z once it has exited. A bounded wait:
            // the watchdog ends the process otherwise.
            let stat = format!("/proc/{main}/task/{main}/stat");
            while std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
                != Some(true)
            {
                std::thread::yield_now();
            }
            match Ring::create(&namespace, "r", &shmring::RingConfig::default()) {
                Ok(_) => println!("created"),
                Err(e) => println!("create failed: {e}"),
            }
        }
        println!("ready");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    });
    // The raw `exit` system call ends the calling thread alone, without unwinding (glibc's
    // `pthread_exit` unwinds, which aborts through the Rust runtime's frames).
    // SAFETY: nothing on this thread's stack is used afterwards, and no lock is held; the
    // process lives on in the thread spawned above.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    unreachable!("the exit system call returned")
}

/// Processes to judge, each as `PID:START` (its pid and the start time an entry would hold).
#[derive(clap::Args, Debug)]
pub struct Liveness {
    #[arg(long = "process", value_parser = parse_process)]
    processes: Vec<(u32, u64)>,
}

fn parse_process(s: &str) -> Result<(u32, u64), String> {
    let (pid, start) = s.split_once(':').ok_or("expected PID:START")?;
    Ok((
        pid.parse().map_err(|e| format!("pid {pid}: {e}"))?,
        start.parse().map_err(|e| format!("start {start}: {e}"))?,
    ))
}

/// One line per process: `seen pid=P visible=B alive=B exists=B`, where `visible` says
/// whether this process can read the other's `/proc/PID/stat`.
pub fn liveness(args: Liveness) -> anyhow::Result<()> {
    for (pid, start) in args.processes {
        let visible = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok();
        println!(
            "seen pid={pid} visible={visible} alive={} exists={}",
            shmring::process::is_alive(pid, start),
            shmring::process::exists(pid),
        );
    }
    Ok(())
}

/// Which ring to attach to.
#[derive(clap::Args, Debug, Clone)]
pub struct RingArgs {
    /// Namespace of the ring.
    #[arg(long)]
    pub ns: String,
    /// Name of the ring.
    #[arg(long)]
    pub ring: String,
}

impl RingArgs {
    pub fn open(&self) -> anyhow::Result<Ring> {
        Ring::open(&self.ns, &self.ring)
            .with_context(|| format!("opening ring {} in {}", self.ring, self.ns))
    }
}

/// An event size: a number of bytes, or `max` for a full slot.
#[derive(Debug, Clone, Copy)]
pub enum Size {
    Max,
    Bytes(usize),
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "max" {
            return Ok(Size::Max);
        }
        let n: usize = s.parse().map_err(|_| format!("{s:?}: a number or `max`"))?;
        if !shmring_testkit::payload::valid_len(n) {
            return Err(format!("{n}: events are 8 bytes or at least 16"));
        }
        Ok(Size::Bytes(n))
    }
}

impl Size {
    pub fn resolve(self, ring: &Ring) -> usize {
        match self {
            Size::Max => ring.max_payload(),
            Size::Bytes(n) => n,
        }
    }
}

/// A consumer wait strategy, by the kit's short names (`--wait block`).
pub use shmring_testkit::Wait;
