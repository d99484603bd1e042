//! Fault injection: a durable consumer SIGKILLed again and again at random points, and
//! restarted under the same name each time. Durable restart means nothing is lost and at
//! most one batch (the uncommitted one) is delivered twice per kill.
//!
//! One to three producer processes publish self-checking events (every publishing form in
//! turn). A `steady` consumer process, never killed, must get every event. The durable
//! consumer `d` is run in incarnations, each with a wait strategy and a batch cap drawn at
//! random, printing every event from inside its handler (`ev p s r`), so the parent knows
//! exactly what each incarnation was handed. Each incarnation but the last is killed:
//! after a random number of its event lines (inside a batch, between batches, or parked,
//! wherever it got to), after a random short delay, or while it is still attaching (taking
//! over the dead incarnation's entry). After each kill, the committed position is read from
//! the ring's consumer table, and:
//!
//! - the incarnation was handed a contiguous run of ring sequences from where it started,
//!   and the committed position lies inside that run;
//! - what it was handed beyond the commit (the events the next one gets again) is at most
//!   one batch;
//! - the next incarnation starts exactly at the commit, and exactly at the next sequence of
//!   every producer (`consume --resume-from`, strict);
//! - the union of all incarnations is every event of every producer.
//!
//! The seed is printed; `SHMRING_FAULT_SEED` replays the same schedule of kills.

use std::collections::BTreeMap;
use std::time::Duration;

use shmring::{Ring, RingConfig};
use shmring_testkit::fault::Rng;
use shmring_testkit::raw::{Line, RawSegment};
use shmring_testkit::report::{format_per_producer, line, num};
use shmring_testkit::{testkit, Child, Namespace};

/// One event a consumer child was handed: (producer, producer sequence, ring sequence).
type Seen = (u32, u64, u64);

fn parse_event(l: &str) -> Option<Seen> {
    let rest = l.strip_prefix("ev ")?;
    let v: Vec<u64> = rest
        .split(' ')
        .map(|w| w.parse().unwrap_or_else(|_| panic!("bad event line {l:?}")))
        .collect();
    Some((v[0] as u32, v[1], v[2]))
}

/// The committed position of durable consumer `name`, from the ring's table.
fn committed(ring: &Ring, name: &str) -> Option<u64> {
    ring.info()
        .consumers
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.next)
}

/// Wait strategies a killed consumer may use (none spins: two cores).
const WAITS: [&str; 7] = [
    "yield",
    "sleep",
    "phased-park",
    "phased-sleep",
    "block",
    "timeout-block",
    "adaptive",
];

#[test]
fn a_durable_consumer_killed_at_random_points_loses_nothing_and_repeats_at_most_a_batch() {
    let mut rng = Rng::for_test("durable_consumer_killed_at_random_points");
    let ns = Namespace::new("fault_consumer_kill");
    let capacity = *rng.pick(&[16u64, 64]);
    let producers = rng.range(1..=3) as u32;
    let per_producer = 6000u64;
    let total = per_producer * u64::from(producers);
    let size = *rng.pick(&["8", "48", "max"]);
    let config = RingConfig {
        capacity,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut steady = testkit!(
        ns,
        "steady",
        "consume --ns {ns} --ring r --name steady --producers {producers} --per-producer \
         {per_producer} --wait block --size {size}"
    );
    steady.expect_line("ready");

    let kills = rng.range(4..=8);
    // Every event any incarnation was handed, by ring sequence (the first hand-out wins;
    // a repeat must carry the same event).
    let mut by_ring: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
    let mut commit = 0u64;
    let mut resume_from: Option<BTreeMap<u32, u64>> = None;
    let mut producer_children: Vec<Child> = Vec::new();
    let (mut duplicates, mut done_kills) = (0u64, 0u64);
    let mut schedule = Vec::new();
    let mut last_done = None;
    for k in 0..=kills {
        let wait = *rng.pick(&WAITS);
        let batch_cap = rng.range(1..=16);
        let resume = resume_from.as_ref().map_or(String::new(), |m| {
            format!("--resume-from {}", format_per_producer(m))
        });
        let mut c = testkit!(
            ns,
            format!("incarnation {k}"),
            "consume --ns {ns} --ring r --name d --producers {producers} --per-producer \
             {per_producer} --batch-cap {batch_cap} --wait {wait} --size {size} \
             --print-events {resume}"
        );
        let mut lines: Vec<String> = Vec::new();
        let last = k == kills;
        // Kill while attaching (only a restart: the first attach must finish before the
        // producers start).
        let early = !last && k > 0 && rng.chance(1, 5);
        let how = if last {
            "ran to the end".to_owned()
        } else if early {
            let us = rng.range(0..=6000);
            std::thread::sleep(Duration::from_micros(us));
            format!("{us} us after spawning (attaching)")
        } else {
            lines.push(c.expect_line("ready"));
            if producer_children.is_empty() {
                producer_children = (0..producers)
                    .map(|p| {
                        testkit!(
                            ns,
                            format!("producer {p}"),
                            "produce --ns {ns} --ring r --producer-id {p} --count \
                             {per_producer} --size {size} --mode mixed"
                        )
                    })
                    .collect();
            }
            if rng.chance(1, 2) {
                // After a number of events: leave most of the stream for later incarnations.
                let room = (total.saturating_sub(commit) / 2 / (kills - k + 1)).max(1);
                let n = rng.range(1..=room);
                let mut got = 0;
                while got < n {
                    match c.next_line() {
                        Some(l) => {
                            got += u64::from(l.starts_with("ev "));
                            lines.push(l);
                        }
                        None => break,
                    }
                }
                format!("after {n} events")
            } else {
                let ms = rng.range(0..=20);
                std::thread::sleep(Duration::from_millis(ms));
                format!("{ms} ms after ready")
            }
        };
        // Killed (or, the last one, run to the end); a kill that came after the end finds
        // it exited successfully.
        let status_ok = if last {
            lines.extend(c.wait_ok());
            true
        } else {
            lines.extend(c.kill());
            c.wait_status().success()
        };
        let ready = lines.iter().find(|l| l.starts_with("ready"));
        if let Some(r) = ready {
            assert_eq!(
                num(r, "start"),
                commit,
                "incarnation {k} did not start at the commit: {r}"
            );
        }
        let events: Vec<Seen> = lines.iter().filter_map(|l| parse_event(l)).collect();
        for (i, e) in events.iter().enumerate() {
            assert_eq!(
                e.2,
                commit + i as u64,
                "incarnation {k}: ring sequences not contiguous from {commit}"
            );
            let prev = by_ring.insert(e.2, (e.0, e.1));
            assert!(
                prev.is_none_or(|p| p == (e.0, e.1)),
                "ring sequence {} carried {prev:?} before and {:?} now",
                e.2,
                (e.0, e.1)
            );
        }
        let end = commit + events.len() as u64;
        if last || status_ok {
            // It finished (the last one, or a kill that came after the end).
            let done = line(&lines, "done").to_owned();
            assert_eq!(num(&done, "next"), total, "{done}");
            last_done = Some(done);
            if !last {
                schedule.push(format!(
                    "#{k} {wait}/{batch_cap}: {how}, but it had finished"
                ));
            }
            break;
        }
        done_kills += 1;
        let new_commit = committed(&ring, "d").unwrap_or(commit);
        assert!(
            new_commit >= commit && new_commit <= end,
            "incarnation {k}: committed {new_commit}, outside the {commit}..={end} it was handed"
        );
        let repeated = end - new_commit;
        assert!(
            repeated <= batch_cap,
            "incarnation {k}: {repeated} events handed but not committed: more than one batch \
             of {batch_cap}"
        );
        duplicates += repeated;
        schedule.push(format!(
            "#{k} {wait}/{batch_cap}: killed {how}, handed {}..{end}, committed {new_commit}",
            commit
        ));
        commit = new_commit;
        // Where each producer resumes: after its last event below the commit.
        let mut from: BTreeMap<u32, u64> = (0..producers).map(|p| (p, 0)).collect();
        for (_, (p, s)) in by_ring.range(..commit) {
            from.insert(*p, s + 1);
        }
        resume_from = Some(from);
    }
    for p in producer_children {
        p.wait_ok();
    }
    let steady_done = steady.wait_ok();
    let steady_done = line(&steady_done, "done");
    assert_eq!(num(steady_done, "delivered"), total, "{steady_done}");
    let last_done = last_done.expect("the last incarnation finished");
    assert_eq!(num(&last_done, "delivered"), total - commit, "{last_done}");

    // The union of every incarnation: every event of every producer.
    assert_eq!(by_ring.len() as u64, total, "ring sequences handed out");
    for p in 0..producers {
        let mut seqs: Vec<u64> = by_ring
            .values()
            .filter(|(q, _)| *q == p)
            .map(|(_, s)| *s)
            .collect();
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (0..per_producer).collect::<Vec<_>>(),
            "producer {p}: the union of all incarnations is not every event"
        );
    }
    // The table's counter: committed batches only; a kill between the commit of the
    // position and the store of the counters loses at most that batch's count.
    let info = ring.info();
    let d = info.consumers.iter().find(|c| c.name == "d").expect("d");
    assert!(
        d.stats.delivered <= total && d.stats.delivered + done_kills * 16 >= total,
        "{d:?}"
    );
    // A kill that lands while the consumer is parked leaves its raise counted until the
    // next publish, which pays one wake for it and resets the count; only kills after the
    // last publish stay counted. Nothing else is left behind.
    let leaked = RawSegment::open(&ring).waiters(Line::Consumer);
    assert!(
        u64::from(leaked) <= done_kills,
        "waiter count {leaked} after {done_kills} kills, with nobody attached"
    );
    println!(
        "consumer kills: {done_kills} ({producers} producers x {per_producer} events, capacity \
         {capacity}, size {size}); events handed twice: {duplicates}; table says delivered {}; \
         waiter count left raised by {leaked} kill(s) after the last publish\n  {}",
        d.stats.delivered,
        schedule.join("\n  ")
    );
}
