//! The fault-injection roles, and the parent's side of them: spawning, reading their
//! reports, and the end-of-run invariant. Shared by `fault_*.rs` and `soak.rs`.
//!
//! Two roles, selected like those of `roles.rs` (parameters in `ROLE_*`):
//!
//! - `fproducer`: publishes self-checking events (`shmring_testkit::payload`: producer id,
//!   that producer's own sequence 0, 1, 2, ..., a checksum over every byte) with every
//!   publishing form in turn: `publish`, `publish_batch`, the claim guard, `try_publish`,
//!   `publish_timeout`. With `ROLE_LEDGER` it keeps a ledger file of two little-endian u64s
//!   (see [`Ledger`]): before each publish, how many events it will have accepted if the
//!   publish goes through; after it, how many it has accepted. A SIGKILL leaves the file as
//!   it was, so the parent knows a killed producer's accepted count exactly, up to the one
//!   publish in flight. Prints `@acc N` every `ROLE_PROGRESS` accepted events (progress for
//!   the parent to wait on), and with `ROLE_DWELL_US` sometimes holds a claim open for a
//!   while between claim and commit, printing `@dwell seq=S` first. After a `hold` line on
//!   stdin, its next claim-guard publish holds the claim open until it is killed, printing
//!   `@holding seq=S` first: a kill inside a claim on demand. After a `pause` line, it
//!   stops right after its next accepted publish, printing `@paused acc=N`, until it is
//!   killed: a kill just after a publish returned. On a stopped ring it ends
//!   (`@done published=N`) or, with `ROLE_ON_CLOSED=retry`, prints `@refused acc=N` (N:
//!   accepted so far, final for this run), waits for the ring to run again and retries the
//!   same event (until `finish` arrives on stdin: then a stopped ring ends it).
//! - `fconsumer`: attaches a consumer (durable `ROLE_NAME` or anonymous, `ROLE_OPTIONAL`,
//!   `ROLE_WAIT`, `ROLE_BATCH`) and checks every event: it decodes (no torn or stale slot),
//!   ring sequences increase, and per producer the sequences are contiguous (required) or
//!   increasing (optional), starting at 0 with `ROLE_FROM_ZERO`. Its wait strategy runs
//!   (`Consumer::run`); every 50 ms it prints `@prog` with its counters. It ends when `run`
//!   returns `Closed` (the ring stopped and it consumed everything), printing `@done` with
//!   its counters and per-producer first and last sequences; with `ROLE_ON_CLOSED=again` it
//!   waits for the ring to start again instead, until `finish` arrives on stdin.
//!   `ROLE_EXIT_AFTER=N` detaches cleanly after N events (`@done ... detached=1`);
//!   `ROLE_SLOW_US` sleeps that long in the handler of every event (a slow consumer).
//!
//! Any violation is printed as `@violation ...` and the role exits with status 1.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufRead;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shmring::{
    ConsumerOptions, Event, PollError, Producer, PublishError, Ring, RingState, RunExit,
    TryPublishError,
};
use shmring_testkit::fault::Rng;
use shmring_testkit::order::OrderCheck;
use shmring_testkit::payload::{encode, encode_into, Origin};
use shmring_testkit::report::{format_per_producer, num, per_producer};

use shmring_testkit::procfs::diagnose;
use shmring_testkit::{Child, Namespace, Wait};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn var_u64(name: &str, default: u64) -> u64 {
    var(name).parse().unwrap_or(default)
}

fn open() -> Ring {
    let ns = shmring::names::default_namespace();
    Ring::open(&ns, &var("ROLE_RING")).unwrap_or_else(|e| {
        println!("@error open: {e}");
        std::process::exit(2)
    })
}

fn fail(what: &str) -> ! {
    println!("@violation {what}");
    std::process::exit(1)
}

/// How long a parent waits for a producer to say it holds a claim open (`@dwell`) before
/// it kills it anyway (a producer held at the wrap gate publishes nothing meanwhile).
pub const DWELL_WAIT: Duration = Duration::from_millis(500);

/// The strategies a fault test may pick: none spins (two cores, many processes).
pub const WAITS: [&str; 6] = [
    "yield",
    "sleep",
    "phased-park",
    "block",
    "timeout-block",
    "adaptive",
];

// ---------------------------------------------------------------------------------------
// fproducer

/// Why a publish did not go through.
enum Refused {
    Closed,
    Deleted,
    Other(String),
}

impl From<PublishError> for Refused {
    fn from(e: PublishError) -> Self {
        match e {
            PublishError::Closed => Refused::Closed,
            PublishError::Deleted => Refused::Deleted,
            e => Refused::Other(e.to_string()),
        }
    }
}

impl From<TryPublishError> for Refused {
    fn from(e: TryPublishError) -> Self {
        match e {
            TryPublishError::Closed => Refused::Closed,
            TryPublishError::Deleted => Refused::Deleted,
            e => Refused::Other(e.to_string()),
        }
    }
}

struct Publisher {
    p: Producer,
    id: u32,
    len: usize,
    half: u64,
    rng: Rng,
    dwell_us: u64,
    dwell_every: u64,
    buf: Vec<u8>,
    /// Set by a `hold` line on stdin: the next claim is held open until the kill.
    hold: Arc<AtomicBool>,
    deadline: Instant,
}

impl Publisher {
    fn origin(&self, seq: u64) -> Origin {
        Origin {
            producer: self.id,
            seq,
        }
    }

    /// How many events the next publish with form `form` takes, at most `room`.
    fn size(&mut self, form: u64, room: u64) -> u64 {
        match form {
            1 => self.rng.range(1..=self.half).min(room),
            _ => 1,
        }
    }

    /// Publish the `k` event(s) starting at producer sequence `seq` with form `form` (`k`
    /// from [`Publisher::size`]); returns how many were accepted.
    fn step(&mut self, form: u64, seq: u64, k: u64) -> Result<u64, Refused> {
        match form {
            0 => {
                let origin = self.origin(seq);
                encode_into(&mut self.buf, origin);
                self.p.publish(&self.buf)?;
                Ok(1)
            }
            1 => {
                let events: Vec<Vec<u8>> = (0..k)
                    .map(|i| encode(self.origin(seq + i), self.len))
                    .collect();
                self.p.publish_batch(&events)?;
                Ok(k)
            }
            2 => {
                let dwell = self.dwell_us > 0 && self.rng.chance(1, self.dwell_every);
                let pause = Duration::from_micros(self.rng.range(1..=self.dwell_us.max(1)));
                let origin = self.origin(seq);
                let len = self.len;
                let mut c = self.p.claim()?;
                encode_into(&mut c.payload_mut()[..len], origin);
                c.set_len(len).map_err(Refused::from)?;
                if self.hold.load(Ordering::SeqCst) {
                    // A claim held until the parent kills this process.
                    println!("@holding seq={}", c.sequence());
                    await_kill(self.deadline, "held a claim");
                }
                if dwell {
                    // Between claim and commit: the window the fault tests aim at.
                    println!("@dwell seq={}", c.sequence());
                    std::thread::sleep(pause);
                }
                c.commit();
                Ok(1)
            }
            3 => {
                let origin = self.origin(seq);
                encode_into(&mut self.buf, origin);
                match self.p.try_publish(&self.buf) {
                    Ok(_) => Ok(1),
                    Err(TryPublishError::Full) => {
                        self.p.publish(&self.buf)?;
                        Ok(1)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            _ => {
                let origin = self.origin(seq);
                encode_into(&mut self.buf, origin);
                loop {
                    match self.p.publish_timeout(&self.buf, Duration::from_millis(1)) {
                        Ok(_) => return Ok(1),
                        Err(TryPublishError::Timeout | TryPublishError::Full) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
}

/// Flags set by lines on stdin (read on a thread of its own).
#[derive(Default, Clone)]
struct StdinFlags {
    finish: Arc<AtomicBool>,
    hold: Arc<AtomicBool>,
    pause: Arc<AtomicBool>,
}

fn stdin_flags() -> StdinFlags {
    let flags = StdinFlags::default();
    let f = flags.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let flag = match line.as_deref().map(str::trim) {
                Ok("finish") => &f.finish,
                Ok("hold") => &f.hold,
                Ok("pause") => &f.pause,
                _ => continue,
            };
            flag.store(true, Ordering::SeqCst);
        }
    });
    flags
}

/// Set once `finish` arrives on stdin.
fn finish_flag() -> Arc<AtomicBool> {
    stdin_flags().finish
}

/// Wait to be killed (bounded by `deadline`).
fn await_kill(deadline: Instant, what: &str) -> ! {
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("@error {what} until the deadline without being killed");
    std::process::exit(4)
}

/// A producer's ledger file: at offset 0 the events it has accepted (written after each
/// publish returns), at offset 8 the events it will have accepted if the publish in flight
/// goes through (written before it). Each is one `pwrite` of 8 bytes; the process is the
/// only writer and the parent reads only after the process is dead, so the two numbers
/// bracket what a killed producer's consumers must have got.
pub struct Ledger(Option<File>);

impl Ledger {
    fn open() -> Ledger {
        let path = var("ROLE_LEDGER");
        if path.is_empty() {
            return Ledger(None);
        }
        let f = File::create(&path).unwrap_or_else(|e| {
            println!("@error ledger {path}: {e}");
            std::process::exit(2)
        });
        let l = Ledger(Some(f));
        l.write(0, 0);
        l.write(8, 0);
        l
    }

    fn write(&self, at: u64, n: u64) {
        if let Some(f) = &self.0 {
            if let Err(e) = f.write_all_at(&n.to_le_bytes(), at) {
                println!("@error ledger: {e}");
                std::process::exit(2)
            }
        }
    }

    /// What a dead producer's ledger says: (accepted, accepted if the publish in flight
    /// went through).
    pub fn read(path: &std::path::Path) -> (u64, u64) {
        let b = std::fs::read(path).unwrap_or_else(|e| panic!("ledger {path:?}: {e}"));
        assert_eq!(b.len(), 16, "ledger {path:?}: {b:?}");
        let at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        (at(0), at(8))
    }
}

/// Wait until `ring` runs again after a stop (bounded by `deadline`). False if `finish`
/// was set first.
fn await_running(ring: &Ring, deadline: Instant, finish: &AtomicBool) -> bool {
    loop {
        if finish.load(Ordering::SeqCst) {
            return false;
        }
        match ring.state() {
            Some(RingState::Running) if !ring.is_closed() => return true,
            Some(RingState::Deleted) => {
                println!("@deleted");
                std::process::exit(3)
            }
            _ => {}
        }
        if Instant::now() > deadline {
            println!("@error the ring never ran again");
            std::process::exit(4)
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The `fproducer` role (see the module comment). Env: `ROLE_ID`, `ROLE_COUNT` (0:
/// forever), `ROLE_SIZE` (bytes, 0: a full slot), `ROLE_MODE` (`mixed`, `batch`, `claim`,
/// `publish`), `ROLE_SEED`, `ROLE_PROGRESS`, `ROLE_DWELL_US`, `ROLE_DWELL_EVERY`,
/// `ROLE_PACE_US`, `ROLE_ON_CLOSED`, `ROLE_DEADLINE_SECS`.
pub fn fproducer() {
    let ring = open();
    let id = var_u64("ROLE_ID", 0) as u32;
    let count = var_u64("ROLE_COUNT", 0);
    let size = var_u64("ROLE_SIZE", 8) as usize;
    let len = if size == 0 { ring.max_payload() } else { size };
    let progress = var_u64("ROLE_PROGRESS", 64).max(1);
    let pace_us = var_u64("ROLE_PACE_US", 0);
    let retry = var("ROLE_ON_CLOSED") == "retry";
    let mode = var("ROLE_MODE");
    let deadline = Instant::now() + Duration::from_secs(var_u64("ROLE_DEADLINE_SECS", 100));
    let p = ring.producer().unwrap_or_else(|e| {
        println!("@error attach: {e}");
        std::process::exit(2)
    });
    let mut rng = Rng::new(var_u64("ROLE_SEED", 1) ^ (u64::from(id) << 40));
    let flags = stdin_flags();
    let finish = flags.finish.clone();
    let ledger = Ledger::open();
    let mut w = Publisher {
        p,
        id,
        len,
        half: ring.capacity() / 2,
        rng: Rng::new(rng.fork()),
        dwell_us: var_u64("ROLE_DWELL_US", 0),
        dwell_every: var_u64("ROLE_DWELL_EVERY", 8).max(1),
        buf: vec![0; len],
        hold: flags.hold.clone(),
        deadline,
    };
    // Register for membarrier now, not at the first publish: see `READY_WAIT`.
    shmring::register_membarrier();
    println!("@ready pid={}", std::process::id());
    let (mut seq, mut next_report) = (0u64, progress);
    while count == 0 || seq < count {
        if Instant::now() > deadline {
            println!("@error still publishing at the deadline ({seq} published)");
            std::process::exit(4)
        }
        let form = match mode.as_str() {
            "publish" => 0,
            "batch" => 1,
            "claim" => 2,
            _ => rng.below(5),
        };
        let room = if count == 0 { u64::MAX } else { count - seq };
        let k = w.size(form, room);
        ledger.write(8, seq + k);
        match w.step(form, seq, k) {
            Ok(n) => {
                seq += n;
                ledger.write(0, seq);
                if flags.pause.load(Ordering::SeqCst) {
                    println!("@paused acc={seq}");
                    await_kill(deadline, "paused");
                }
            }
            Err(Refused::Closed) if retry => {
                // Everything this producer will ever have accepted in this run.
                println!("@refused acc={seq}");
                if await_running(&ring, deadline, &finish) {
                    continue;
                }
                break;
            }
            Err(Refused::Closed) => break,
            Err(Refused::Deleted) => {
                println!("@deleted published={seq}");
                std::process::exit(3)
            }
            Err(Refused::Other(e)) => {
                println!("@error publish: {e}");
                std::process::exit(4)
            }
        }
        if seq >= next_report {
            println!("@acc {seq}");
            next_report = (seq / progress + 1) * progress;
        }
        if pace_us > 0 {
            std::thread::sleep(Duration::from_micros(rng.range(0..=2 * pace_us)));
        }
    }
    let s = w.p.stats();
    println!(
        "@done published={seq} stats_published={} refused={} parks={}",
        s.published, s.refused, s.parks
    );
}

// ---------------------------------------------------------------------------------------
// fconsumer

/// What the `fconsumer` handler has seen: the kit's order rule, and its first violation.
struct Check {
    order: OrderCheck,
    violation: Option<String>,
}

impl Check {
    fn on_event(&mut self, ev: Event<'_>) {
        if self.violation.is_none() {
            if let Err(v) = self.order.check(ev.sequence(), ev.bytes()) {
                self.violation = Some(v);
            }
        }
    }
}

/// The `fconsumer` role (see the module comment). Env: `ROLE_NAME`, `ROLE_OPTIONAL`,
/// `ROLE_FROM_ZERO`, `ROLE_WAIT`, `ROLE_BATCH`, `ROLE_EXIT_AFTER`, `ROLE_ON_CLOSED`,
/// `ROLE_SLOW_US`, `ROLE_DEADLINE_SECS`.
pub fn fconsumer() {
    let ring = open();
    let name = var("ROLE_NAME");
    let optional = var("ROLE_OPTIONAL") == "1";
    let mut opts = if name.is_empty() {
        ConsumerOptions::anonymous()
    } else {
        ConsumerOptions::durable(name)
    }
    .wait(
        var("ROLE_WAIT")
            .parse()
            .unwrap_or(Wait::Adaptive)
            .strategy(),
    )
    .batch_cap(var_u64("ROLE_BATCH", shmring::DEFAULT_BATCH_CAP as u64) as usize);
    if optional {
        opts = opts.optional();
    }
    let exit_after = var_u64("ROLE_EXIT_AFTER", 0);
    let again = var("ROLE_ON_CLOSED") == "again";
    let deadline = Instant::now() + Duration::from_secs(var_u64("ROLE_DEADLINE_SECS", 100));
    let slow = Duration::from_micros(var_u64("ROLE_SLOW_US", 0));
    let finish = finish_flag();
    let mut c = match ring.consumer(opts) {
        Ok(c) => c,
        Err(e) => {
            println!("@error attach: {e}");
            std::process::exit(2)
        }
    };
    let s0 = c.stats();
    let start = c.next_sequence();
    // Register for membarrier now, not at the first commit: see `READY_WAIT`.
    shmring::register_membarrier();
    println!(
        "@ready index={} start={start} pid={} run={}",
        c.index(),
        std::process::id(),
        ring.run_number()
    );
    let check = RefCell::new(Check {
        order: OrderCheck::new(var("ROLE_FROM_ZERO") == "1" && !optional, optional),
        violation: None,
    });
    let mut last_prog = Instant::now();
    let mut detached = false;
    loop {
        let exit = c.run(
            |ev| {
                check.borrow_mut().on_event(ev);
                if !slow.is_zero() {
                    std::thread::sleep(slow);
                }
            },
            || {
                let ch = check.borrow();
                ch.violation.is_some()
                    || (exit_after > 0 && ch.order.delivered >= exit_after)
                    || last_prog.elapsed() >= Duration::from_millis(50)
                    || Instant::now() > deadline
            },
        );
        if let Some(v) = check.borrow().violation.clone() {
            fail(&v);
        }
        match exit {
            Ok(RunExit::Stopped) => {
                let s = c.stats();
                println!(
                    "@prog delivered={} next={} net={} wakeups={}",
                    check.borrow().order.delivered,
                    c.next_sequence(),
                    s.net_wakeups,
                    s.wakeups
                );
                last_prog = Instant::now();
                if exit_after > 0 && check.borrow().order.delivered >= exit_after {
                    detached = true;
                    break;
                }
                if Instant::now() > deadline {
                    println!("@error still consuming at the deadline");
                    std::process::exit(4)
                }
            }
            Ok(RunExit::Closed) => {
                if !again {
                    break;
                }
                let run = ring.run_number();
                println!("@closed next={} run={run}", c.next_sequence());
                // Wait for the next start, or for `finish`.
                loop {
                    if finish.load(Ordering::SeqCst) && ring.state() != Some(RingState::Running) {
                        break;
                    }
                    if ring.state() == Some(RingState::Running) && ring.run_number() > run {
                        println!(
                            "@reopened run={} next={}",
                            ring.run_number(),
                            c.next_sequence()
                        );
                        break;
                    }
                    if Instant::now() > deadline {
                        println!("@error the ring never ran again");
                        std::process::exit(4)
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                if finish.load(Ordering::SeqCst) && ring.state() != Some(RingState::Running) {
                    break;
                }
            }
            Err(PollError::Deleted) => {
                println!("@deleted delivered={}", check.borrow().order.delivered);
                std::process::exit(3)
            }
            Err(e) => {
                println!("@error poll: {e}");
                std::process::exit(4)
            }
        }
    }
    let ch = check.into_inner();
    let s = c.stats();
    let (delivered, skipped, dropped) = (
        s.delivered - s0.delivered,
        s.skipped - s0.skipped,
        s.dropped_behind - s0.dropped_behind,
    );
    if delivered != ch.order.delivered {
        fail(&format!(
            "stats say {delivered} delivered, the handler saw {}",
            ch.order.delivered
        ));
    }
    let walked = c.next_sequence() - start;
    if delivered + skipped + dropped != walked {
        fail(&format!(
            "delivered {delivered} + skipped {skipped} + dropped {dropped} != {walked} \
             sequences walked ({start}..{})",
            c.next_sequence()
        ));
    }
    println!(
        "@done delivered={delivered} skipped={skipped} dropped={dropped} start={start} next={} \
         net={} wakeups={} total_delivered={} total_skipped={} total_dropped={} detached={} \
         firsts={} lasts={}",
        c.next_sequence(),
        s.net_wakeups,
        s.wakeups,
        s.delivered,
        s.skipped,
        s.dropped_behind,
        u8::from(detached),
        format_per_producer(&ch.order.firsts),
        format_per_producer(&ch.order.lasts),
    );
}

// ---------------------------------------------------------------------------------------
// The parent's side.

/// The env of a fault role on ring `ring`.
pub fn env(ring: &str, pairs: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut v = vec![("ROLE_RING", ring.to_owned())];
    v.extend(pairs.iter().cloned());
    v
}

/// What a consumer's `@done` line says.
#[derive(Debug, Clone)]
pub struct Done {
    /// The whole line after `@done`.
    pub line: String,
    /// Events delivered by this incarnation.
    pub delivered: u64,
    /// Tombstones skipped by this incarnation.
    pub skipped: u64,
    /// Sequences lost to lapping or a release, by this incarnation.
    pub dropped: u64,
    /// Where it started and ended.
    pub start: u64,
    /// Next sequence at the end.
    pub next: u64,
    /// Wake-ups by the net with an event waiting (over every incarnation of a durable one).
    pub net: u64,
    /// It detached after its `ROLE_EXIT_AFTER` events (rather than draining to a stop).
    pub detached: bool,
    /// Per producer: first and last producer sequence seen.
    pub firsts: BTreeMap<u32, u64>,
    /// See `firsts`.
    pub lasts: BTreeMap<u32, u64>,
}

impl Done {
    /// Parse the rest of an `@done` line.
    pub fn parse(line: &str) -> Done {
        Done {
            line: line.to_owned(),
            delivered: num(line, "delivered"),
            skipped: num(line, "skipped"),
            dropped: num(line, "dropped"),
            start: num(line, "start"),
            next: num(line, "next"),
            net: num(line, "net"),
            detached: num(line, "detached") == 1,
            firsts: per_producer(line, "firsts"),
            lasts: per_producer(line, "lasts"),
        }
    }

    /// Events of producer `p` delivered, for a consumer that got them all from 0.
    pub fn count_of(&self, p: u32) -> u64 {
        self.lasts.get(&p).map_or(0, |l| l + 1)
    }
}

/// What is known of how many events a producer had accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// It ended cleanly and said so.
    Exactly(u64),
    /// It was killed: its ledger says it had accepted `accepted` events, and was
    /// publishing up to `upto` (the publish in flight at the kill may have gone through,
    /// wholly or, a batch killed while stamping, in part).
    Killed {
        /// Events whose publish had returned.
        accepted: u64,
        /// `accepted` plus the publish in flight.
        upto: u64,
    },
}

impl Accepted {
    /// What the ledger at `path` of a producer killed and reaped says.
    pub fn killed(path: &std::path::Path) -> Accepted {
        let (accepted, upto) = Ledger::read(path);
        Accepted::Killed {
            accepted,
            upto: upto.max(accepted),
        }
    }
}

/// The ledger file of producer `id` in namespace `ns` (in the namespace's scratch
/// directory, removed with it).
pub fn ledger_path(ns: &Namespace, id: u32) -> PathBuf {
    ns.scratch().join(format!("ledger-{id}"))
}

/// The `published=N` of a producer's `@done` line.
pub fn published(done: &str) -> u64 {
    num(done, "published")
}

/// The end-of-run invariant for one consumer that was attached before any publish and
/// never killed: every event a producer accepted was delivered to it exactly once and in
/// order (its role checked order and contiguity from 0 per producer), and every sequence it
/// walked past is a delivered event or a counted tombstone. Returns the total accepted.
pub fn check_delivered_all(who: &str, done: &Done, producers: &BTreeMap<u32, Accepted>) -> u64 {
    let mut total = 0;
    for (p, acc) in producers {
        let got = done.count_of(*p);
        match *acc {
            Accepted::Exactly(n) => assert_eq!(
                got, n,
                "{who}: producer {p} accepted {n} events, {got} delivered: {}",
                done.line
            ),
            Accepted::Killed { accepted, upto } => assert!(
                got >= accepted && got <= upto,
                "{who}: producer {p} was killed after accepting {accepted} events (publishing \
                 up to {upto}), {got} delivered: {}",
                done.line
            ),
        }
        if got > 0 {
            assert_eq!(done.firsts.get(p), Some(&0), "{who}: {}", done.line);
        }
        total += got;
    }
    assert!(
        done.lasts.keys().all(|p| producers.contains_key(p)),
        "{who}: events of an unknown producer: {}",
        done.line
    );
    assert_eq!(done.delivered, total, "{who}: {}", done.line);
    assert_eq!(
        done.dropped, 0,
        "{who}: a required consumer lost events: {}",
        done.line
    );
    assert_eq!(
        done.delivered + done.skipped,
        done.next - done.start,
        "{who}: {}",
        done.line
    );
    total
}

/// Wait (bounded) for `proc`'s `@done` line and parse it.
pub fn expect_done(proc: &mut Child) -> Done {
    Done::parse(&proc.expect("@done"))
}

/// How long a child may take to attach and get ready. The fault roles register the process
/// for expedited membarriers before `@ready` (`shmring::register_membarrier`; otherwise its
/// first publish or commit would), which in a multi-threaded process waits for an RCU
/// grace period: ~10 ms here when idle, but on this 2-vCPU machine saturated by a soak
/// and two CPU hogs a grace period has been seen to take over 30 s (the RCU kthread is an
/// ordinary task competing for the CPUs).
pub const READY_WAIT: Duration = Duration::from_secs(120);

/// Wait for `proc`'s `line` (bounded by [`READY_WAIT`]); on a timeout, fail with what its
/// threads are doing.
fn expect_or_diagnose(proc: &mut Child, line: &str) -> String {
    match proc.expect_within(line, READY_WAIT) {
        Some(rest) => rest,
        None => panic!(
            "{} (pid {}): no {line:?} within {READY_WAIT:?}; saw {:?}\n{}",
            proc.label(),
            proc.pid(),
            proc.seen(),
            diagnose(proc.pid())
        ),
    }
}

/// Spawn an `fproducer` on ring `ring` as producer `id` and wait for `@ready`.
pub fn spawn_producer(
    ns: &Namespace,
    ring: &str,
    id: u32,
    seed: u64,
    extra: &[(&'static str, String)],
) -> Child {
    let mut pairs = vec![
        ("ROLE_ID", id.to_string()),
        ("ROLE_SEED", seed.to_string()),
        (
            "ROLE_LEDGER",
            ledger_path(ns, id).to_string_lossy().into_owned(),
        ),
    ];
    pairs.extend(extra.iter().cloned());
    let mut p = ns.role("fproducer", &env(ring, &pairs));
    expect_or_diagnose(&mut p, "@ready");
    p
}

/// Spawn an `fconsumer` on ring `ring` and wait for `@ready`; returns it and its start.
pub fn spawn_consumer(
    ns: &Namespace,
    ring: &str,
    pairs: &[(&'static str, String)],
) -> (Child, u64) {
    let mut c = ns.role("fconsumer", &env(ring, pairs));
    let ready = expect_or_diagnose(&mut c, "@ready");
    let start = num(&ready, "start");
    (c, start)
}

/// Start a broker CLI command, a child of `ns`, without waiting for it.
pub fn cli_spawn(ns: &Namespace, args: &[&str]) -> Child {
    use super::BrokerNs;
    ns.spawn("broker CLI", ns.cli_command(args))
}

/// Wait (bounded) for a CLI command started by [`cli_spawn`]; returns whether it succeeded
/// and what it printed (stdout, then stderr).
pub fn cli_finish(mut child: Child) -> (bool, String) {
    let status = child.wait_status();
    let out = child.rest_of_stdout().join("\n");
    let text = format!("{out}\n{}", child.stderr());
    (status.success(), text.trim().to_owned())
}

/// Entries of `ring` that belong to a process that is gone: what a broker still has to
/// free, release or repair.
pub fn dead_entries(ring: &Ring) -> usize {
    let info = ring.info();
    let alive = |pid, start| shmring::process::is_alive(pid, start);
    info.consumers
        .iter()
        .filter(|c| {
            c.state_code == shmring_layout::consumer_state::ACTIVE && !alive(c.pid, c.start_time)
        })
        .count()
        + info
            .producers
            .iter()
            .filter(|p| !alive(p.pid, p.start_time))
            .count()
}
