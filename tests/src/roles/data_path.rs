//! `data-path`: every publish and delivery form, run after a seccomp filter that kills the
//! process at its first system call (other than `exit_group`). shmring says a ring's data
//! path is plain loads and stores on the mapped segment: with nobody parked, none of these
//! calls may enter the kernel.
//!
//! Three rings (stamped slots with a multi-producer and a single-producer line, and a
//! fixed-size ring of 8-byte events), each with a producer, a required and an optional
//! consumer. One warm-up pass first does what only the first use does (the membarrier
//! registration at the first claim and commit, page faults on first touch, the optional
//! consumer's copy buffer growing). The role prints `armed`, installs the filter, runs the
//! forms again and exits 0 if every event came back as published, 1 if not; a system call
//! on the way kills it with SIGSYS. `--control` makes one system call under the filter,
//! which must kill it.

use std::io::Write;

use anyhow::{bail, Context};
use shmring::{ConsumerOptions, ProducerMode, Ring, RingConfig};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Namespace to create the rings in.
    #[arg(long)]
    ns: String,
    /// Rounds of every form on every ring (each round publishes and delivers 8 events).
    #[arg(long, default_value_t = 500)]
    rounds: u64,
    /// Make one system call under the filter: the control.
    #[arg(long)]
    control: bool,
}

/// Slots per ring: a round takes 8, and every round reads them all back.
const CAPACITY: u64 = 64;

struct Side {
    ring: Ring,
    producer: shmring::Producer,
    required: shmring::Consumer,
    optional: shmring::Consumer,
    fixed: bool,
    /// The next value to publish (events carry 0, 1, 2, ... as little-endian u64).
    next: u64,
}

impl Side {
    fn new(ns: &str, name: &str, mode: ProducerMode, fixed: bool) -> anyhow::Result<Self> {
        let config = RingConfig {
            capacity: CAPACITY,
            producer_mode: mode,
            event_size: fixed.then_some(8),
            ..RingConfig::default()
        };
        let ring = Ring::create(ns, name, &config).with_context(|| format!("creating {name}"))?;
        let required = ring.consumer(ConsumerOptions::anonymous())?;
        let optional = ring.consumer(ConsumerOptions::anonymous().optional())?;
        let producer = ring.producer()?;
        Ok(Side {
            ring,
            producer,
            required,
            optional,
            fixed,
            next: 0,
        })
    }

    /// One round: 8 events through every publish form, then read back by both consumers
    /// (the fixed-size ring's required one a run at a time). Returns false on any error or
    /// if a consumer was not handed all 8; allocates nothing and prints nothing.
    fn round(&mut self) -> bool {
        let v = self.next;
        let p = &mut self.producer;
        let mut ok = p.publish(&v.to_le_bytes()).is_ok()
            && p.try_publish(&(v + 1).to_le_bytes()).is_ok()
            && p.publish_value(&(v + 2)).is_ok()
            && p.publish_batch(&[(v + 3).to_le_bytes(), (v + 4).to_le_bytes()])
                .is_ok();
        match p.claim() {
            Ok(mut c) => {
                if !self.fixed {
                    ok &= c.set_len(8).is_ok();
                }
                c.payload_mut()[..8].copy_from_slice(&(v + 5).to_le_bytes());
                c.commit();
            }
            Err(_) => ok = false,
        }
        match p.claim_batch(2) {
            Ok(mut b) => {
                ok &= b.write(0, &(v + 6).to_le_bytes()).is_ok()
                    && b.write_value(1, &(v + 7)).is_ok();
                b.commit();
            }
            Err(_) => ok = false,
        }
        self.next = v + 8;
        // What the 8 events sum to.
        let want = 8 * v + 28;
        let value = |b: &[u8]| {
            b.get(..8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        };
        let mut sum = 0u64;
        let mut seen = 0;
        ok &= self.required.has_pending();
        while seen < 8 {
            let got = if self.fixed {
                self.required.poll_runs(|_, events| {
                    for e in events.chunks_exact(8) {
                        sum += value(e);
                    }
                })
            } else {
                self.required.poll_once(|ev| sum += value(ev.bytes()))
            };
            match got {
                Ok(n) if n > 0 => seen += n,
                _ => return false,
            }
        }
        ok &= sum == want;
        let (mut sum, mut seen) = (0u64, 0);
        while seen < 8 {
            match self.optional.poll_once(|ev| sum += value(ev.bytes())) {
                Ok(n) if n > 0 => seen += n,
                _ => return false,
            }
        }
        ok && sum == want && !self.required.has_pending()
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !cfg!(target_arch = "x86_64") {
        bail!("the seccomp filter is written for x86_64");
    }
    let mut sides = [
        Side::new(&a.ns, "multi", ProducerMode::Multi, false)?,
        Side::new(&a.ns, "single", ProducerMode::Single, false)?,
        Side::new(&a.ns, "fixed", ProducerMode::Single, true)?,
    ];
    // The warm-up: two laps of every ring.
    for _ in 0..2 * CAPACITY / 8 {
        for s in &mut sides {
            if !s.round() {
                bail!("warm-up round failed on {}", s.ring.name());
            }
        }
    }
    println!("armed");
    std::io::stdout().flush()?;
    kill_at_the_first_system_call()?;
    if a.control {
        // SAFETY: getppid takes no arguments and cannot fail.
        unsafe { libc::getppid() };
    }
    let mut ok = true;
    for _ in 0..a.rounds {
        for s in &mut sides {
            ok &= s.round();
        }
    }
    // The raw exit: Rust's `exit` flushes and runs handlers, which may make system calls.
    // SAFETY: ends the process; nothing runs after it.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

/// A seccomp filter on this thread (the watchdog thread, started earlier, is not under it):
/// every system call but `exit_group` kills the process.
fn kill_at_the_first_system_call() -> anyhow::Result<()> {
    // Classic BPF over `struct seccomp_data { int nr; u32 arch; ... }`.
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    let f = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let prog = [
        f(LD_W_ABS, 0, 0, 4),
        f(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        f(RET_K, 0, 0, RET_KILL_PROCESS),
        f(LD_W_ABS, 0, 0, 0),
        f(JEQ_K, 0, 1, libc::SYS_exit_group as u32),
        f(RET_K, 0, 0, RET_ALLOW),
        f(RET_K, 0, 0, RET_KILL_PROCESS),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only; PR_SET_SECCOMP reads `fprog`, which
    // points at `prog`, both alive for the call (the kernel copies the program).
    let rc = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            -1
        } else {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            )
        }
    };
    if rc != 0 {
        bail!(
            "cannot install the seccomp filter: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
