//! A bounded soak: a broker with short thresholds, producers publishing checksummed events,
//! and consumer processes of every kind attaching, detaching and being killed at random,
//! for a fixed time; then a report, and the invariant.
//!
//! ```sh
//! cargo test -p shmring-broker --test soak -- --nocapture                         # ~1 minute (CI)
//! SHMRING_SOAK_SECS=600 cargo test -p shmring-broker --release --test soak -- --nocapture
//! ```
//!
//! (`SHMRING_FAULT_SEED` replays a schedule; the seed is printed.)
//!
//! One ring (64 slots of 128 bytes, many producers) under a broker that sweeps every 10 ms
//! and repairs a dead producer's claim after 50 ms. On it:
//!
//! - `audit`: a durable required consumer, attached first and never killed, parked on the
//!   futex between batches: the oracle. At the end it must have been handed every event
//!   every producer accepted, once, in order, intact.
//! - `billing`: a durable required consumer (policy `alert`), killed at random and
//!   restarted after a random pause with a random wait strategy and batch cap. Every
//!   restart must resume exactly at the position the dead one committed, so across its
//!   incarnations nothing is lost; it must end at the stop sequence with nothing dropped.
//! - `metrics`: a durable required consumer with policy `release`, killed and restarted
//!   too: the broker releases it, producers move on, and on restart it resumes at the head
//!   and counts what it missed in `dropped` (losses by policy, counted, not silent).
//! - `peek`: a durable optional consumer that detaches after a random number of events and
//!   comes back later; anonymous optional consumers (slow, so producers lap them); and
//!   anonymous required consumers with random strategies that detach after a random number
//!   of events or are killed (the broker frees their entries).
//! - Two producer processes at any time, with every publishing form; every few seconds one
//!   is killed at a random point (sometimes while it holds a claim open) and a new one, with
//!   a new producer id, takes its place. The broker tombstones the dead one's claim.
//!
//! Every consumer process checks every event it gets (checksum, per-producer order, no
//! gap for a required one). At the end the ring is stopped; everything drains to the stop
//! sequence. The invariant: the audit consumer got everything accepted, and whatever
//! else it walked past is a tombstone the broker wrote; `billing` lost nothing; no consumer
//! was woken by the 50 ms net (a lost wake-up) in any process, but for at most one per
//! producer killed outside a held claim (it may die between its stamp and its wake, and the
//! net may come before the broker's wake for that death). The report prints events,
//! losses (zero for the required consumers), drops by policy and by lapping, repairs and
//! the broker's counters.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::fault::{
    check_delivered_all, expect_done, ledger_path, published, spawn_consumer, spawn_producer,
    Accepted, Done, DWELL_WAIT, WAITS,
};
use common::{num, ring, BrokerNs, Child, Namespace};
use shmring::Ring;
use shmring_testkit::fault::Rng;
use shmring_testkit::report;

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    common::roles::run_if_child();
}

/// The soak's length without `SHMRING_SOAK_SECS`.
const QUICK_SECS: u64 = 50;
/// `@acc` every this many events.
const PROGRESS: u64 = 512;
// The consumers pick their wait strategies from `fault::WAITS` (none spins: two cores). A
// `timeout-block` consumer's 5 ms timeouts that pass with an event waiting count as late,
// not lost, so it is held to the same bound on net wake-ups as the others.

/// Anonymous consumers alive at once, at most.
const TRANSIENTS: usize = 3;

/// The parent's look at its children, and the unit of its random schedule.
const TICK: Duration = Duration::from_millis(10);

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// The last `@prog ... net=N` (or `@done`) a consumer printed: its net wake-ups so far.
fn last_net(lines: &[String]) -> u64 {
    lines
        .iter()
        .rev()
        .find(|l| l.contains("@prog") || l.contains("@done"))
        .map_or(0, |l| report::num(l, "net"))
}

/// A durable consumer that is killed (or detaches) and comes back under the same name.
struct Durable {
    name: &'static str,
    base: Vec<(&'static str, String)>,
    /// Its process, while one runs.
    proc: Option<Child>,
    /// When the current one died and how long until the next starts.
    down: Option<(Instant, Duration)>,
    /// Its table position when the last one died (the committed position).
    committed: Option<u64>,
    /// Whether a restart must resume exactly at `committed` (policy alert, required).
    exact: bool,
    kills: u64,
    starts: u64,
    /// `@done` of incarnations that ended on their own (detached).
    dones: Vec<Done>,
}

impl Durable {
    fn new(name: &'static str, base: Vec<(&'static str, String)>, exact: bool) -> Durable {
        Durable {
            name,
            base,
            proc: None,
            down: None,
            committed: None,
            exact,
            kills: 0,
            starts: 0,
            dones: Vec::new(),
        }
    }

    fn start(&mut self, ns: &Namespace, rng: &mut Rng) {
        let mut pairs = self.base.clone();
        pairs.push(("ROLE_NAME", s(self.name)));
        if !pairs.iter().any(|(k, _)| *k == "ROLE_WAIT") {
            pairs.push(("ROLE_WAIT", s(rng.pick(&WAITS))));
        }
        pairs.push(("ROLE_BATCH", s(rng.range(1..=64))));
        let (p, start) = spawn_consumer(ns, "soak", &pairs);
        if let Some(c) = self.committed {
            if self.exact {
                assert_eq!(start, c, "{} resumed elsewhere than its commit", self.name);
            } else {
                assert!(start >= c, "{} resumed at {start}, before {c}", self.name);
            }
        }
        self.proc = Some(p);
        self.down = None;
        self.starts += 1;
    }

    fn kill(&mut self, handle: &Ring, rng: &mut Rng, pause_ms: u64) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
            self.kills += 1;
            self.committed = handle
                .info()
                .consumers
                .iter()
                .find(|c| c.name == self.name)
                .map(|c| c.next);
            self.down = Some((
                Instant::now(),
                Duration::from_millis(rng.range(0..=pause_ms)),
            ));
        }
    }

    /// Restart if it has been down long enough (or `now_anyway`).
    fn maybe_restart(&mut self, ns: &Namespace, rng: &mut Rng, now_anyway: bool) {
        if let Some((since, pause)) = self.down {
            if now_anyway || since.elapsed() >= pause {
                self.start(ns, rng);
            }
        }
    }

    /// Notice an incarnation that ended by itself (detached after its event count).
    fn reap(&mut self, handle: &Ring, rng: &mut Rng) {
        let Some(p) = self.proc.as_mut() else { return };
        p.try_lines();
        if let Some(status) = p.exited() {
            p.rest_of_stdout();
            assert!(status.success(), "{} failed: {:?}", self.name, p.seen());
            let line = p
                .seen()
                .iter()
                .rev()
                .find_map(|l| l.find("@done ").map(|at| l[at + 6..].to_owned()));
            let done = Done::parse(&line.unwrap_or_else(|| panic!("{}: no @done", self.name)));
            self.dones.push(done);
            self.proc = None;
            self.committed = handle
                .info()
                .consumers
                .iter()
                .find(|c| c.name == self.name)
                .map(|c| c.next);
            self.down = Some((Instant::now(), Duration::from_millis(rng.range(0..=500))));
        }
    }
}

/// Anonymous consumers (required or optional) that come and go.
#[derive(Default)]
struct Transients {
    /// `ROLE_DEADLINE_SECS` of every one.
    deadline: u64,
    live: Vec<(String, Child)>,
    attaches: u64,
    optional_attaches: u64,
    detaches: u64,
    kills: u64,
    /// Net wake-ups reported by the ones that are gone.
    net: u64,
    /// Events lost to lapping by optional ones that detached.
    dropped_optional: u64,
    /// Events delivered by the ones that detached or finished.
    delivered: u64,
}

impl Transients {
    fn spawn(&mut self, ns: &Namespace, rng: &mut Rng, optional: bool) {
        let mut pairs = vec![
            ("ROLE_BATCH", s(rng.range(1..=64))),
            ("ROLE_EXIT_AFTER", s(rng.range(50..=20_000))),
            ("ROLE_DEADLINE_SECS", s(self.deadline)),
        ];
        let label = if optional {
            pairs.push(("ROLE_OPTIONAL", s(1)));
            pairs.push(("ROLE_WAIT", s("sleep")));
            pairs.push(("ROLE_SLOW_US", s(rng.range(0..=50))));
            self.optional_attaches += 1;
            "optional".to_owned()
        } else {
            let wait = rng.pick(&WAITS).to_string();
            pairs.push(("ROLE_WAIT", wait.clone()));
            format!("required {wait}")
        };
        let (p, _) = spawn_consumer(ns, "soak", &pairs);
        self.live.push((label, p));
        self.attaches += 1;
    }

    fn kill_one(&mut self, rng: &mut Rng) {
        if self.live.is_empty() {
            return;
        }
        let i = rng.below(self.live.len() as u64) as usize;
        let (_, mut p) = self.live.swap_remove(i);
        p.kill();
        p.rest_of_stdout();
        self.net += last_net(p.seen());
        self.kills += 1;
    }

    /// Collect the ones that detached by themselves.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.live.len() {
            let (label, p) = &mut self.live[i];
            p.try_lines();
            match p.exited() {
                None => i += 1,
                Some(status) => {
                    p.rest_of_stdout();
                    assert!(status.success(), "{label} failed: {:?}", p.seen());
                    let (label, p) = self.live.swap_remove(i);
                    self.absorb(label.starts_with("optional"), &p);
                    self.detaches += 1;
                }
            }
        }
    }

    fn absorb(&mut self, optional: bool, p: &Child) {
        let line = p
            .seen()
            .iter()
            .rev()
            .find_map(|l| l.find("@done ").map(|at| l[at + 6..].to_owned()))
            .expect("@done");
        let done = Done::parse(&line);
        if optional {
            self.dropped_optional += done.dropped;
        } else {
            assert_eq!(done.dropped, 0, "a required consumer lost events: {line}");
        }
        self.net += done.net;
        self.delivered += done.delivered;
    }
}

#[test]
fn soak_quick() {
    let secs = std::env::var("SHMRING_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(QUICK_SECS);
    let mut rng = Rng::for_test("soak");
    let ns = Namespace::new("soak");
    let config = "[rings.soak]\ncapacity = 64\nslot_size = 128\nstall_threshold = \"20ms\"\n\
                  unblock_timeout = \"50ms\"\ndead_policy = \"alert\"\n\
                  [rings.soak.policies]\nmetrics = \"release\"\n";
    let _broker = ns.broker(Some(config));
    let handle = Ring::open(ns.name(), "soak").expect("open");
    let began = Instant::now();
    // Every child gives up on its own well after the soak's end.
    let deadline = s(secs + 100);

    let (mut audit, _) = spawn_consumer(
        &ns,
        "soak",
        &[
            ("ROLE_NAME", s("audit")),
            ("ROLE_FROM_ZERO", s(1)),
            ("ROLE_WAIT", s("block")),
            ("ROLE_BATCH", s(rng.range(1..=64))),
            ("ROLE_DEADLINE_SECS", deadline.clone()),
        ],
    );
    let mut billing = Durable::new(
        "billing",
        vec![("ROLE_DEADLINE_SECS", deadline.clone())],
        true,
    );
    billing.start(&ns, &mut rng);
    let mut metrics = Durable::new(
        "metrics",
        vec![("ROLE_DEADLINE_SECS", deadline.clone())],
        false,
    );
    metrics.start(&ns, &mut rng);
    let mut peek = Durable::new(
        "peek",
        vec![
            ("ROLE_OPTIONAL", s(1)),
            ("ROLE_WAIT", s("sleep")),
            ("ROLE_EXIT_AFTER", s(rng.range(100..=20_000))),
            ("ROLE_DEADLINE_SECS", deadline.clone()),
        ],
        false,
    );
    peek.start(&ns, &mut rng);
    let mut transients = Transients {
        deadline: secs + 100,
        ..Transients::default()
    };

    let sizes = ["8", "48", "0"];
    let mut accepted: BTreeMap<u32, Accepted> = BTreeMap::new();
    let mut producers: Vec<(u32, Child)> = Vec::new();
    let mut next_id = 0u32;
    let producer_env = |rng: &mut Rng, id: u32| {
        // The 8-byte event carries producer ids up to 255 only.
        let size = match *rng.pick(&sizes) {
            "8" if id > shmring_testkit::payload::MAX_SMALL_PRODUCER => "48",
            size => size,
        };
        vec![
            ("ROLE_SIZE", s(size)),
            ("ROLE_PROGRESS", s(PROGRESS)),
            ("ROLE_DWELL_US", s(2000)),
            ("ROLE_DWELL_EVERY", s(64)),
            // Some producers flat out (the ring full, producers parked at the wrap gate),
            // some paced (consumers parked on an idle ring).
            ("ROLE_PACE_US", s(rng.pick(&[0, 0, 10, 50]))),
            ("ROLE_DEADLINE_SECS", deadline.clone()),
        ]
    };
    for _ in 0..2 {
        let env = producer_env(&mut rng, next_id);
        producers.push((
            next_id,
            spawn_producer(&ns, "soak", next_id, rng.fork(), &env),
        ));
        next_id += 1;
    }
    let mut producer_kills = 0;
    // Producers killed while holding a claim: each leaves a claim the broker repairs.
    let mut holds = 0u64;

    let until = began + Duration::from_secs(secs);
    while Instant::now() < until {
        std::thread::sleep(TICK);
        for (id, p) in &mut producers {
            p.try_lines();
            assert!(p.exited().is_none(), "producer {id} ended: {:?}", p.seen());
        }
        audit.try_lines();
        assert!(audit.exited().is_none(), "audit ended: {:?}", audit.seen());
        for d in [&mut billing, &mut metrics, &mut peek] {
            d.reap(&handle, &mut rng);
            d.maybe_restart(&ns, &mut rng, false);
        }
        transients.reap();

        // The random schedule: on average one of these every ~0.3 s.
        match rng.below(30) {
            0 => billing.kill(&handle, &mut rng, 300),
            1 => metrics.kill(&handle, &mut rng, 300),
            2 if transients.live.len() < TRANSIENTS => transients.spawn(&ns, &mut rng, false),
            3 if transients.live.len() < TRANSIENTS => transients.spawn(&ns, &mut rng, true),
            4 => transients.kill_one(&mut rng),
            5 if rng.chance(1, 8) => {
                // A producer: at a random moment, in a claim held open for a while, or
                // holding a claim until the kill. Bounded waits: a producer held at the
                // wrap gate by a dead required consumer publishes nothing meanwhile.
                let i = rng.below(producers.len() as u64) as usize;
                let (id, victim) = &mut producers[i];
                match rng.below(3) {
                    0 => {}
                    1 => {
                        victim.try_lines();
                        victim.expect_within("@dwell", DWELL_WAIT);
                    }
                    _ => {
                        victim.send_line("hold");
                        if victim.expect_within("@holding", DWELL_WAIT).is_some() {
                            holds += 1;
                        }
                    }
                }
                victim.kill();
                victim.rest_of_stdout();
                accepted.insert(*id, Accepted::killed(&ledger_path(&ns, *id)));
                let env = producer_env(&mut rng, next_id);
                producers[i] = (
                    next_id,
                    spawn_producer(&ns, "soak", next_id, rng.fork(), &env),
                );
                next_id += 1;
                producer_kills += 1;
            }
            _ => {}
        }
    }

    // The end: everyone back, then stop the ring; everything drains to the stop sequence.
    for d in [&mut billing, &mut metrics, &mut peek] {
        d.reap(&handle, &mut rng);
        d.maybe_restart(&ns, &mut rng, true);
    }
    transients.reap();
    let out = ns.cli(&["stop", "soak"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stop = handle.head();
    for (id, p) in &mut producers {
        accepted.insert(*id, Accepted::Exactly(published(&p.expect("@done"))));
    }
    let a = expect_done(&mut audit);
    let total = check_delivered_all("audit", &a, &accepted);
    assert_eq!(a.next, stop);
    // Net wake-ups by who reported them (see the check at the end).
    let mut nets: Vec<(String, u64)> = vec![
        ("audit".to_owned(), a.net),
        ("anonymous consumers".to_owned(), transients.net),
    ];
    let mut finals = BTreeMap::new();
    for d in [&mut billing, &mut metrics, &mut peek] {
        // A durable one may have detached (peek) just before the stop: it is not back.
        if let Some(p) = d.proc.as_mut() {
            let done = expect_done(p);
            assert!(
                done.next == stop || done.detached,
                "{} did not drain to the stop: {}",
                d.name,
                done.line
            );
            finals.insert(d.name, done);
        }
    }
    for (label, mut p) in std::mem::take(&mut transients.live) {
        let done = expect_done(&mut p);
        // It drained to the stop, or detached after its event count just before.
        assert!(done.next == stop || done.detached, "{label}: {}", done.line);
        transients.absorb(label.starts_with("optional"), &p);
    }
    // The durable ones' counters live in the table, over all their incarnations.
    let info = handle.info();
    let entry = |name: &str| {
        info.consumers
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no entry {name}: {info:#?}"))
            .clone()
    };
    for name in ["billing", "metrics", "peek"] {
        nets.push((name.to_owned(), entry(name).stats.net_wakeups));
    }
    let net: u64 = nets.iter().map(|(_, n)| n).sum();
    let b = entry("billing");
    assert_eq!(b.next, stop, "{b:?}");
    assert_eq!(
        b.stats.dropped_behind, 0,
        "billing (required, alert) lost events: {b:?}"
    );
    // Its counters lag its position by at most one uncommitted-count batch per kill.
    assert!(
        b.stats.delivered + b.stats.skipped <= stop
            && b.stats.delivered + b.stats.skipped + 64 * billing.kills >= stop,
        "billing's counters do not add up to its position: {b:?}"
    );
    assert!(
        finals
            .get("billing")
            .is_some_and(|f| !f.detached && f.dropped == 0),
        "billing's last incarnation: {:?}",
        finals.get("billing")
    );
    if let Some(f) = finals.get("billing") {
        for (p, last) in &f.lasts {
            assert_eq!(a.lasts.get(p), Some(last), "billing's last of producer {p}");
        }
    }
    let m = entry("metrics");
    let v = ns.wait_status("the last sweep to see the end", |v, _| {
        let r = ring(v, "soak")?;
        (num(r, "head") == stop).then(|| v.clone())
    });
    let h = &ring(&v, "soak").expect("soak")["health"];
    assert_eq!(
        num(h, "tombstoned"),
        a.skipped,
        "every sequence the audit skipped is a tombstone the broker wrote: {v:#}"
    );
    assert!(
        num(h, "repaired_claims") >= holds,
        "{holds} producer(s) killed holding a claim (of {producer_kills} killed), each a \
         claim to repair: {v:#}"
    );
    let elapsed = began.elapsed();
    println!(
        "soak: {:.1} s, seed above\n\
         events: {total} accepted by {} producers ({producer_kills} killed, {holds} holding a \
         claim), all delivered to audit; stop sequence {stop}\n\
         losses of required consumers: 0 (audit, billing over {} incarnations / {} kills, {} \
         anonymous required ones)\n\
         dropped by policy: metrics {} over {} kills (release); by lapping: optional {} + peek {}\n\
         repairs: {} repaired claims, {} sequences tombstoned (all skipped and counted)\n\
         anonymous consumer attaches: {} ({} optional; {} detached, {} killed)\n\
         broker: deaths {}, releases {}, freed {}, stalls {}, recoveries {}\n\
         net wake-ups: {net} (producer kills outside a held claim: {})",
        elapsed.as_secs_f64(),
        next_id,
        billing.starts,
        billing.kills,
        transients.attaches - transients.optional_attaches,
        m.stats.dropped_behind,
        metrics.kills,
        transients.dropped_optional,
        entry("peek").stats.dropped_behind,
        num(h, "repaired_claims"),
        num(h, "tombstoned"),
        transients.attaches,
        transients.optional_attaches,
        transients.detaches,
        transients.kills,
        num(h, "deaths"),
        num(h, "releases"),
        num(h, "freed"),
        num(h, "stalls"),
        num(h, "recoveries"),
        producer_kills - holds,
    );
    // A producer killed between its stamp and its wake leaves a consumer parked right then
    // to whichever comes first: another publish, the broker's wake at the sweep its pidfd
    // triggers, or the 50 ms net (docs/FAILURE_MODES.md, "What each crash costs"). The
    // broker is usually first, but its sweep can come later than a net about to expire: at
    // most one net wake-up per such kill and parked consumer. Only a kill that saw
    // `@holding` is known to stop the producer away from that window (every earlier wake
    // done); a kill at a random moment, in a dwell (which may have ended by then) or after a
    // wait that gave up may land in it. The anonymous consumers' count sums every one of
    // them, up to `TRANSIENTS` alive at each kill.
    let may_cost = producer_kills - holds;
    for (who, n) in &nets {
        let allowed = if who == "anonymous consumers" {
            may_cost * TRANSIENTS as u64
        } else {
            may_cost
        };
        assert!(
            *n <= allowed,
            "{who} woken by the 50 ms net (lost wake-ups) {n} time(s), beyond the {may_cost} \
             producer kill(s) that may cost one: {nets:?}"
        );
    }
}
