//! `data-path`: every publish and delivery form, run under a seccomp filter that kills the
//! process (SIGSYS) at its first system call other than `exit_group`. shmring says a ring's
//! data path is plain loads and stores on the mapped segment: with nobody parked and room in
//! the ring, none of these calls may enter the kernel.
//!
//! Three rings (stamped slots with a multi-producer and a single-producer line, and a
//! fixed-size ring of 8-byte events), each with a producer, a durable required consumer, a
//! durable consumer after it, and an optional one; the stamped rings also a worker group
//! member. One warm-up pass first does what only the first use does (the membarrier
//! registration at the first claim and commit, page faults on first touch, the optional
//! consumer's copy buffer growing). The role prints `armed`, installs the filter, runs the
//! forms again and ends with the bare `exit_group`: status 0 if every event came back as
//! published, 1 if not. `--control` makes one system call under the filter, which must
//! kill it.

use std::io::Write;

use anyhow::{bail, Context};
use shmring::{ConsumerOptions, ProducerMode, Ring, RingConfig};
use shmring_testkit::seccomp;

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

/// Slots per ring: a round takes [`EVENTS`], and every round reads them all back.
const CAPACITY: u64 = 64;
/// Events a round publishes, two or one per publish form.
const EVENTS: u64 = 14;

/// A consumer of the role, and how it reads.
struct Reader {
    consumer: shmring::Consumer,
    /// Which delivery forms it takes turns with (round by round).
    forms: &'static [Deliver],
}

#[derive(Clone, Copy)]
enum Deliver {
    /// `poll_once`.
    Once,
    /// `poll_once_fallible`.
    OnceFallible,
    /// `poll_runs` (fixed-size rings).
    Runs,
}

struct Side {
    ring: Ring,
    producer: shmring::Producer,
    readers: Vec<Reader>,
    /// The next value to publish (events carry 0, 1, 2, ... as little-endian u64).
    next: u64,
}

/// The little-endian u64 an event starts with (0 for a shorter one).
fn value(b: &[u8]) -> u64 {
    b.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
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
        let in_place: &'static [Deliver] = if fixed {
            &[Deliver::Runs, Deliver::Once, Deliver::OnceFallible]
        } else {
            &[Deliver::Once, Deliver::OnceFallible]
        };
        let copied: &'static [Deliver] = if fixed {
            &[Deliver::Once, Deliver::Runs]
        } else {
            &[Deliver::Once]
        };
        let mut readers = vec![
            Reader {
                consumer: ring.consumer(ConsumerOptions::durable("first"))?,
                forms: in_place,
            },
            Reader {
                consumer: ring.consumer(ConsumerOptions::durable("then").after(["first"]))?,
                forms: &[Deliver::Once],
            },
            Reader {
                consumer: ring.consumer(ConsumerOptions::anonymous().optional())?,
                forms: copied,
            },
        ];
        if !fixed {
            // Worker groups run on rings of stamped slots only.
            readers.push(Reader {
                consumer: ring.consumer(ConsumerOptions::worker("group"))?,
                forms: &[Deliver::Once],
            });
        }
        let producer = ring.producer()?;
        Ok(Side {
            ring,
            producer,
            readers,
            next: 0,
        })
    }

    /// Publish [`EVENTS`] events, two or one through each publish form. Returns false on
    /// any refusal.
    fn publish(&mut self) -> bool {
        let v = self.next;
        self.next = v + EVENTS;
        let p = &mut self.producer;
        let b = |k: u64| (v + k).to_le_bytes();
        let mut ok = p.publish(&b(0)).is_ok()
            && p.try_publish(&b(1)).is_ok()
            && p.publish_value(&(v + 2)).is_ok()
            && p.publish_batch(&[b(3), b(4)]).is_ok()
            && p.try_publish_batch(&[b(5), b(6)]).is_ok()
            && p.publish_batch_values(&[v + 7, v + 8]).is_ok();
        match p.claim() {
            Ok(mut c) => {
                let len = c.payload_mut().len();
                if len != 8 {
                    ok &= c.set_len(8).is_ok();
                }
                c.payload_mut()[..8].copy_from_slice(&b(9));
                c.commit();
            }
            Err(_) => ok = false,
        }
        match p.claim_batch(2) {
            Ok(mut batch) => {
                ok &= batch.write(0, &b(10)).is_ok() && batch.write_value(1, &(v + 11)).is_ok();
                batch.commit();
            }
            Err(_) => ok = false,
        }
        ok && p
            .publisher(|w| -> Result<(), shmring::PublishError> {
                w.publish(&b(12))?;
                w.publish_value(&(v + 13))?;
                Ok(())
            })
            .is_ok()
    }

    /// One round: [`EVENTS`] events published, then read back by every reader with the
    /// delivery form its turn names. Returns false on any error, or if a reader was not
    /// handed exactly the round's events; allocates nothing and prints nothing.
    fn round(&mut self, round: u64) -> bool {
        let v = self.next;
        let mut ok = self.publish();
        // What the round's events sum to.
        let want = EVENTS * v + EVENTS * (EVENTS - 1) / 2;
        for r in &mut self.readers {
            let c = &mut r.consumer;
            ok &= c.has_pending();
            let form = r.forms[(round % r.forms.len() as u64) as usize];
            let (mut sum, mut seen) = (0u64, 0u64);
            while seen < EVENTS {
                let got = match form {
                    Deliver::Once => c.poll_once(|ev| sum += value(ev.bytes())),
                    Deliver::OnceFallible => c.poll_once_fallible(|ev| {
                        sum += value(ev.bytes());
                        Ok::<(), std::convert::Infallible>(())
                    }),
                    Deliver::Runs => c.poll_runs(|_, events| {
                        for e in events.chunks_exact(8) {
                            sum += value(e);
                        }
                    }),
                };
                match got {
                    Ok(n) if n > 0 => seen += n as u64,
                    _ => return false,
                }
            }
            ok &= seen == EVENTS && sum == want && !c.has_pending();
        }
        ok
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let mut sides = [
        Side::new(&a.ns, "multi", ProducerMode::Multi, false)?,
        Side::new(&a.ns, "single", ProducerMode::Single, false)?,
        Side::new(&a.ns, "fixed", ProducerMode::Single, true)?,
    ];
    // The warm-up: two laps of every ring, every form.
    for round in 0..2 * CAPACITY / EVENTS {
        for s in &mut sides {
            if !s.round(round) {
                bail!("warm-up round failed on {}", s.ring.name());
            }
        }
    }
    let filter = seccomp::program(
        &[(libc::SYS_exit_group, seccomp::ALLOW)],
        seccomp::KILL_PROCESS,
    );
    println!("armed");
    std::io::stdout().flush()?;
    // Only this thread is under the filter: the watchdog thread, started earlier, is not.
    seccomp::install(&filter).context("installing the seccomp filter")?;
    if a.control {
        std::hint::black_box(rustix::process::getppid());
    }
    let mut ok = true;
    for round in 0..a.rounds {
        for s in &mut sides {
            ok &= s.round(round);
        }
    }
    // The bare `exit_group`: Rust's exit flushes and runs handlers, which may make other
    // system calls.
    // SAFETY: ends the process; nothing runs after it.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}
