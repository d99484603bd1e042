//! `consume`: attach a consumer and check every event it is handed.
//!
//! Checks, per event: the payload decodes (checksum over every byte: no torn or stale slot),
//! has the expected length, comes from a known producer, and carries exactly the next
//! sequence of that producer (a required consumer) or a later one (an optional consumer,
//! which may be lapped); ring sequences strictly increase. The first event of each producer
//! must be its sequence 0, unless `--resume` (a durable consumer taking over where a dead
//! one committed: any first sequence) or `--resume-from p:s,..` (exactly those).
//!
//! Ends when every producer's last event (`--per-producer` - 1) arrived, or, with
//! `--until-seq N` (or `until N` on stdin with `--until-stdin`), once the consumer's
//! position reached ring sequence N. Prints
//! `ready start=S index=I` after attaching and
//! `done delivered=.. skipped=.. dropped=.. clamped=.. batches=.. start=.. next=..
//! first_ring=.. last_ring=.. firsts=p:s,.. lasts=p:s,..` at the end.
//!
//! `--print-events` prints `ev <producer> <seq> <ring seq>` per event, from inside the
//! handler, so a parent that SIGKILLs this process knows everything it was handed.
//! `--hang-after N` blocks forever inside the handler of the N-th event (after printing
//! `hang delivered=N ring_seq=R`): that batch is never committed.
//!
//! `--after NAME` (repeatable) reads behind the durable consumer NAME
//! (`ConsumerOptions::after`), and checks inside the handler of every event that each such
//! upstream's committed position, read from the ring's table, is already past it.
//!
//! `--hold` attaches, prints `ready`, then reads nothing from the ring until the parent
//! writes `resume` to stdin (a blocking read: the process uses no CPU meanwhile), so a
//! producer fills the ring and has to wait for room. The `done` line also carries the
//! consumer's `wakeups` (returns from a futex park by a wake), `late_wakeups` (by a timeout
//! after a producer moved the wake line: a wake that came late or never arrived) and
//! `net_wakeups` (by the 50 ms net while an event was waiting: lost wake-ups).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shmring::{ConsumerOptions, Event, DEFAULT_BATCH_CAP};
use shmring_testkit::order::OrderCheck;
use shmring_testkit::report::format_per_producer;

use super::{RingArgs, Size, Wait};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
    /// Durable consumer name (anonymous if absent).
    #[arg(long)]
    name: Option<String>,
    /// Attach as an optional consumer: skipped sequences are allowed, and must be accounted
    /// for exactly by its counters.
    #[arg(long)]
    optional: bool,
    /// Producers publishing (ids 0..producers).
    #[arg(long, default_value_t = 1)]
    producers: u32,
    /// Events each producer publishes.
    #[arg(long)]
    per_producer: u64,
    /// End once the consumer's position reaches this ring sequence (instead of once every
    /// producer's last event arrived).
    #[arg(long)]
    until_seq: Option<u64>,
    /// End once the consumer's position reaches the ring sequence N the parent writes to
    /// stdin as `until N` (when the end is only known after the producers finished).
    #[arg(long, conflicts_with = "until_seq")]
    until_stdin: bool,
    /// After `ready`, read nothing until the parent writes `resume` to stdin.
    #[arg(long, conflicts_with = "until_stdin")]
    hold: bool,
    /// Accept any first sequence per producer (a resuming durable consumer).
    #[arg(long)]
    resume: bool,
    /// Resume with exactly these next sequences per producer (`p:s,p:s`, producers not
    /// listed start at 0): a durable consumer taking over where a dead one committed, when
    /// the parent knows what was committed. Stricter than `--resume`.
    #[arg(long, conflicts_with = "resume")]
    resume_from: Option<String>,
    #[arg(long, default_value_t = DEFAULT_BATCH_CAP)]
    batch_cap: usize,
    #[arg(long, default_value_t = Wait::Yield)]
    wait: Wait,
    /// Expected event size (bytes or `max`); unchecked if absent.
    #[arg(long)]
    size: Option<Size>,
    /// Print `ev <producer> <seq> <ring seq>` for every event.
    #[arg(long)]
    print_events: bool,
    /// Block forever inside the handler of the N-th event (1-based).
    #[arg(long)]
    hang_after: Option<u64>,
    /// Read behind this durable consumer (repeatable), checking per event that it has
    /// committed past the event.
    #[arg(long)]
    after: Vec<String>,
    /// Give up after this many seconds without finishing (shorter than the parent's 60 s
    /// watchdog, so the parent sees this error rather than a kill).
    #[arg(long, default_value_t = 50)]
    deadline_secs: u64,
}

/// Parse `p:s,p:s` (or `-`, none).
fn parse_per_producer(v: &str) -> anyhow::Result<Vec<(u32, u64)>> {
    if v == "-" {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(|kv| {
            let (p, s) = kv.split_once(':').context("expected p:s")?;
            Ok((p.parse()?, s.parse()?))
        })
        .collect()
}

/// What the handler has seen so far.
struct Checker {
    producers: u32,
    per_producer: u64,
    len: Option<usize>,
    print_events: bool,
    hang_after: Option<u64>,
    /// The order rule (ring sequences, payloads, each producer's sequences).
    order: OrderCheck,
    violation: Option<String>,
    /// With `--after`: the ring and the upstream names, to check their positions.
    upstream: Option<(shmring::Ring, Vec<String>)>,
}

impl Checker {
    fn on_event(&mut self, ev: Event<'_>) {
        if self.violation.is_some() {
            return;
        }
        if let Err(v) = self.check(ev) {
            self.violation = Some(v);
            return;
        }
        if Some(self.order.delivered) == self.hang_after {
            println!(
                "hang delivered={} ring_seq={}",
                self.order.delivered,
                ev.sequence()
            );
            loop {
                // Until SIGKILL (or the watchdog): this batch is never committed.
                std::thread::park();
            }
        }
    }

    fn check(&mut self, ev: Event<'_>) -> Result<(), String> {
        let r = ev.sequence();
        if let Some(len) = self.len {
            if ev.bytes().len() != len {
                return Err(format!(
                    "ring sequence {r}: {} bytes, expected {len}",
                    ev.bytes().len()
                ));
            }
        }
        if let Some((ring, names)) = &self.upstream {
            let info = ring.info();
            for n in names {
                let next = info.consumers.iter().find(|c| &c.name == n).map(|c| c.next);
                if next.is_none_or(|next| next <= r) {
                    return Err(format!(
                        "ring sequence {r} handed over before upstream {n:?} committed past it \
                         (its position: {next:?})"
                    ));
                }
            }
        }
        let o = self.order.check(r, ev.bytes())?;
        if o.producer >= self.producers {
            return Err(format!(
                "ring sequence {r}: unknown producer {}",
                o.producer
            ));
        }
        if o.seq >= self.per_producer {
            return Err(format!(
                "ring sequence {r}: producer {} seq {} beyond its {} events",
                o.producer, o.seq, self.per_producer
            ));
        }
        if self.print_events {
            println!("ev {} {} {r}", o.producer, o.seq);
        }
        Ok(())
    }

    /// Every producer's last event arrived.
    fn complete(&self) -> bool {
        (0..self.producers).all(|p| self.order.next(p) == Some(self.per_producer))
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ring = a.ring.open()?;
    let mut opts = match &a.name {
        Some(n) => ConsumerOptions::durable(n.clone()),
        None => ConsumerOptions::anonymous(),
    }
    .batch_cap(a.batch_cap)
    .wait(a.wait.strategy())
    .after(a.after.iter().cloned());
    if a.optional {
        opts = opts.optional();
    }
    let mut c = ring.consumer(opts).context("attaching the consumer")?;
    let start = c.next_sequence();
    println!("ready start={start} index={}", c.index());
    if a.hold {
        let mut l = String::new();
        std::io::stdin()
            .read_line(&mut l)
            .context("reading `resume`")?;
        if l.trim() != "resume" {
            bail!("held: expected `resume` on stdin, got {l:?}");
        }
        println!("resumed");
    }

    let resume = a.resume || a.resume_from.is_some();
    let mut order = OrderCheck::new(!resume && !a.optional, a.optional);
    if let Some(from) = &a.resume_from {
        for p in 0..a.producers {
            order.expect_next(p, 0);
        }
        for (p, s) in parse_per_producer(from)? {
            if p >= a.producers {
                bail!("--resume-from names producer {p}");
            }
            order.expect_next(p, s);
        }
    }
    let checker = RefCell::new(Checker {
        producers: a.producers,
        per_producer: a.per_producer,
        len: a.size.map(|s| s.resolve(&ring)),
        print_events: a.print_events,
        hang_after: a.hang_after,
        order,
        violation: None,
        upstream: if a.after.is_empty() {
            None
        } else {
            Some((a.ring.open()?, a.after.clone()))
        },
    });
    let deadline = Instant::now() + Duration::from_secs(a.deadline_secs);
    let timed_out = || Instant::now() > deadline;

    if a.optional || a.until_seq.is_some() || a.until_stdin {
        // Step by hand: the end condition needs the consumer's position.
        let until = Arc::new(AtomicU64::new(
            a.until_seq
                .unwrap_or(a.per_producer * u64::from(a.producers)),
        ));
        if a.until_stdin {
            until.store(u64::MAX, Ordering::Relaxed);
            let until = until.clone();
            std::thread::spawn(move || {
                let mut l = String::new();
                let _ = std::io::stdin().read_line(&mut l);
                let n = l.trim().strip_prefix("until ").and_then(|n| n.parse().ok());
                // Relaxed: a number, nothing else is published with it. A bad line ends now.
                until.store(n.unwrap_or(0), Ordering::Relaxed);
            });
        }
        while c.next_sequence() < until.load(Ordering::Relaxed)
            && checker.borrow().violation.is_none()
        {
            if timed_out() {
                bail!(
                    "position {} short of {} at the deadline",
                    c.next_sequence(),
                    until.load(Ordering::Relaxed)
                );
            }
            if c.poll_once(|ev| checker.borrow_mut().on_event(ev))? == 0 {
                std::thread::yield_now();
            }
        }
    } else {
        c.run(
            |ev| checker.borrow_mut().on_event(ev),
            || {
                let ch = checker.borrow();
                ch.complete() || ch.violation.is_some() || timed_out()
            },
        )?;
    }

    let ch = checker.into_inner();
    if let Some(v) = ch.violation {
        bail!("violation after {} events: {v}", ch.order.delivered);
    }
    let s = c.stats();
    if a.until_seq.is_none() && !a.until_stdin && !a.optional && !ch.complete() {
        bail!(
            "deadline: {} events delivered, producers' next {:?}",
            ch.order.delivered,
            ch.order.next_all()
        );
    }
    // A resumed durable consumer's counters continue from its previous incarnation's
    // committed ones: the parent checks those.
    if !resume && s.delivered != ch.order.delivered {
        bail!(
            "stats().delivered {} but the handler saw {}",
            s.delivered,
            ch.order.delivered
        );
    }
    println!(
        "done delivered={} stats_delivered={} skipped={} dropped={} clamped={} batches={} \
         start={start} next={} first_ring={} last_ring={} firsts={} lasts={} wakeups={} \
         late_wakeups={} net_wakeups={}",
        ch.order.delivered,
        s.delivered,
        s.skipped,
        s.dropped_behind,
        s.clamped,
        s.batches,
        c.next_sequence(),
        ch.order
            .first_ring
            .map_or("-".to_owned(), |r| r.to_string()),
        ch.order.last_ring.map_or("-".to_owned(), |r| r.to_string()),
        format_per_producer(&ch.order.firsts),
        format_per_producer(&ch.order.lasts),
        s.wakeups,
        s.late_wakeups,
        s.net_wakeups,
    );
    Ok(())
}
