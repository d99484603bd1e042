//! `data-path`: every publish and delivery form, run in seccomp's strict mode, where the
//! kernel kills the thread's process (SIGKILL) at its first system call other than `read`,
//! `write`, `exit` and `sigreturn`. shmring says a ring's data path is plain loads and
//! stores on the mapped segment: with nobody parked, none of these calls may enter the
//! kernel.
//!
//! Three rings (stamped slots with a multi-producer and a single-producer line, and a
//! fixed-size ring of 8-byte events), each with a producer, a required and an optional
//! consumer. One warm-up pass first does what only the first use does (the membarrier
//! registration at the first claim and commit, page faults on first touch, the optional
//! consumer's copy buffer growing). The role prints `armed`, enters strict mode, runs the
//! forms again, writes `done ok=B` (B: every event came back as published) with a bare
//! `write`, and blocks reading stdin until the test ends it. A system call on the way kills
//! it before `done`. `--control` makes one system call in strict mode, which must kill it.

use std::io::Write;
use std::os::fd::AsFd;

use anyhow::{bail, Context};
use rustix::thread::SecureComputingMode;
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
    let stdout = std::io::stdout();
    stdout.lock().flush()?;
    // Only this thread is restricted: the watchdog thread, started earlier, is not.
    rustix::thread::set_secure_computing_mode(SecureComputingMode::Strict)
        .context("entering seccomp strict mode")?;
    if a.control {
        std::hint::black_box(rustix::process::getppid());
    }
    let mut ok = true;
    for _ in 0..a.rounds {
        for s in &mut sides {
            ok &= s.round();
        }
    }
    let line: &[u8] = if ok {
        b"done ok=true\n"
    } else {
        b"done ok=false\n"
    };
    // `write` and `read` are allowed in strict mode; Rust's exit is not (`exit_group`).
    let _ = rustix::io::write(stdout.as_fd(), line);
    let mut byte = [0u8; 1];
    while rustix::io::read(std::io::stdin().as_fd(), &mut byte).is_ok_and(|n| n > 0) {}
    // Stdin closed: the test is over. Any system call from here kills the process, which
    // is how it ends.
    std::hint::black_box(rustix::process::getppid());
    Ok(())
}
