//! A durable consumer killed with SIGKILL and restarted under the same name resumes from its
//! last committed sequence: at-least-once across the crash, with at most one batch (the
//! batch cap) delivered twice.
//!
//! The first incarnation prints every event from inside its handler (`ev p s r`), so the
//! parent knows exactly what it was handed before the SIGKILL, committed or not. The
//! committed position is read from the ring's consumer table after the kill. The second
//! incarnation must start exactly there; the union of both must cover every event, and the
//! overlap (the duplicates) must be the uncommitted tail of the first, at most one batch.

use shmring::{Ring, RingConfig};
use shmring_testkit::report::{self, line, num};
use shmring_testkit::{testkit, Child, Namespace};

/// One event a consumer child was handed: (producer, producer sequence, ring sequence).
type Seen = (u32, u64, u64);

fn parse_events(lines: &[String]) -> Vec<Seen> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ev "))
        .map(|l| {
            let v: Vec<u64> = l
                .split(' ')
                .map(|w| w.parse().unwrap_or_else(|_| panic!("bad event line {l:?}")))
                .collect();
            (v[0] as u32, v[1], v[2])
        })
        .collect()
}

fn committed(ring: &Ring, name: &str) -> u64 {
    let info = ring.info();
    let c = info
        .consumers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no consumer {name:?} in {info:#?}"));
    assert!(c.durable && c.required, "{c:?}");
    c.next
}

struct Case {
    test: &'static str,
    producers: u32,
    per_producer: u64,
    size: &'static str,
    batch_cap: u64,
}

/// The first incarnation: durable consumer `d`, printing every event it is handed;
/// `extra` adds flags (`--hang-after N`).
fn spawn_first(ns: &Namespace, c: &Case, extra: &str) -> Child {
    let Case {
        producers,
        per_producer,
        size,
        batch_cap,
        ..
    } = c;
    let mut a = testkit!(
        ns,
        "first incarnation",
        "consume --ns {ns} --ring r --name d --producers {producers} --per-producer \
         {per_producer} --batch-cap {batch_cap} --size {size} --print-events {extra}"
    );
    assert_eq!(num(&a.expect_line("ready"), "start"), 0);
    a
}

fn spawn_producers(ns: &Namespace, c: &Case) -> Vec<Child> {
    let Case {
        per_producer, size, ..
    } = c;
    (0..c.producers)
        .map(|p| {
            testkit!(
                ns,
                format!("producer {p}"),
                "produce --ns {ns} --ring r --producer-id {p} --count {per_producer} \
                 --size {size} --mode mixed"
            )
        })
        .collect()
}

/// Restart under the same name after the first incarnation (which saw `first`) died with
/// the ring's committed position at `commit`; check the resume and the union.
fn restart_and_check(ns: &Namespace, ring: &Ring, c: &Case, first: &[Seen], commit: u64) {
    let total = c.per_producer * u64::from(c.producers);
    // The first incarnation was handed a contiguous run 0..n (no tombstones here).
    for (i, e) in first.iter().enumerate() {
        assert_eq!(
            e.2, i as u64,
            "first incarnation's ring sequences: {first:?}"
        );
    }
    let n = first.len() as u64;
    assert!(
        commit <= n,
        "committed {commit} beyond the {n} events handed out"
    );
    // The overlap of the two incarnations: the first's uncommitted tail commit..n, which
    // the second (starting at `commit`, checked below) delivers again.
    let duplicates = n - commit;
    assert!(
        duplicates <= c.batch_cap,
        "{duplicates} uncommitted events: more than one batch of {}",
        c.batch_cap
    );

    let Case {
        producers,
        per_producer,
        size,
        batch_cap,
        ..
    } = c;
    let mut b = testkit!(
        ns,
        "second incarnation",
        "consume --ns {ns} --ring r --name d --resume --producers {producers} --per-producer \
         {per_producer} --batch-cap {batch_cap} --size {size} --until-seq {total}"
    );
    let ready = b.expect_line("ready");
    assert_eq!(
        num(&ready, "start"),
        commit,
        "resumed elsewhere than the commit: {ready}"
    );
    let out = b.wait_ok();
    let done = line(&out, "done");
    if commit < total {
        assert_eq!(num(done, "first_ring"), commit, "{done}");
    }
    assert_eq!(num(done, "delivered"), total - commit, "{done}");
    assert_eq!(num(done, "next"), total, "{done}");

    // Union: per producer, what the first saw plus firsts..=last of the second is
    // everything, and the second picks up right after the first's last committed event.
    let firsts = report::per_producer(done, "firsts");
    for p in 0..c.producers {
        let mut seen: Vec<u64> = first.iter().filter(|e| e.0 == p).map(|e| e.1).collect();
        let committed_last = first
            .iter()
            .filter(|e| e.0 == p && e.2 < commit)
            .map(|e| e.1)
            .max();
        let resume_at = committed_last.map_or(0, |s| s + 1);
        match firsts.get(&p) {
            Some(&f) => {
                assert_eq!(f, resume_at, "producer {p}: second starts at {f}");
                seen.extend(f..c.per_producer);
            }
            None => assert_eq!(resume_at, c.per_producer, "producer {p}: nothing resumed"),
        }
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen,
            (0..c.per_producer).collect::<Vec<_>>(),
            "producer {p}: events missing from the union"
        );
    }
    assert_eq!(ring.head(), total);
}

/// Killed while its handler is inside a batch: that batch was never committed, so it is
/// delivered again (at least the event the handler was in, at most the whole batch).
#[test]
fn killed_inside_a_batch_resumes_at_the_last_commit() {
    let c = Case {
        test: "durable_kill_in_batch",
        producers: 1,
        per_producer: 3000,
        size: "8",
        batch_cap: 4,
    };
    let ns = Namespace::new(c.test);
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut a = spawn_first(&ns, &c, "--hang-after 1001");
    let producers = spawn_producers(&ns, &c);
    let hang = a.expect_line("hang");
    let hung_at = num(&hang, "ring_seq");
    assert_eq!(hung_at, 1000);
    let first = parse_events(&a.kill());
    assert_eq!(first.len(), 1001);
    let commit = committed(&ring, "d");
    assert!(
        commit <= hung_at,
        "the batch in the handler was committed: {commit}"
    );
    assert!(
        hung_at - commit < c.batch_cap,
        "commit {commit} lags a whole batch"
    );
    restart_and_check(&ns, &ring, &c, &first, commit);
    // The counters continue: the first committed `commit` events, the second the rest.
    let info = ring.info();
    let d = info.consumers.iter().find(|x| x.name == "d").unwrap();
    assert_eq!(d.stats.delivered, c.per_producer, "{d:?}");
    for p in producers {
        p.wait_ok();
    }
}

/// Killed at whatever point it reached after 1000 events (handler, commit, poll or wait),
/// with two producers and full-slot events.
#[test]
fn killed_at_an_arbitrary_point_resumes_at_the_last_commit() {
    let c = Case {
        test: "durable_kill_anywhere",
        producers: 2,
        per_producer: 3000,
        size: "max",
        batch_cap: 8,
    };
    let ns = Namespace::new(c.test);
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut a = spawn_first(&ns, &c, "");
    let producers = spawn_producers(&ns, &c);
    let mut lines = Vec::new();
    while lines.len() < 1000 {
        match a.next_line() {
            Some(l) if l.starts_with("ev ") => lines.push(l),
            Some(_) => {}
            None => a.fail("exited before handing out 1000 events"),
        }
    }
    lines.extend(a.kill());
    let first = parse_events(&lines);
    assert!(first.len() >= 1000);
    let commit = committed(&ring, "d");
    restart_and_check(&ns, &ring, &c, &first, commit);
    for p in producers {
        p.wait_ok();
    }
}

/// The restart must work as soon as the old process is dead, also before its parent has
/// reaped it (a zombie runs nothing and holds no mapping). Regression test: the client used
/// to read a zombie's `/proc/<pid>/stat` as a live process and refused the restart with
/// `AttachError::NameInUse` (`client/src/process.rs`, `start_time`).
#[test]
fn restart_works_while_the_dead_process_is_still_a_zombie() {
    let c = Case {
        test: "durable_kill_zombie",
        producers: 1,
        per_producer: 200,
        size: "8",
        batch_cap: 4,
    };
    let ns = Namespace::new(c.test);
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let mut a = spawn_first(&ns, &c, "--hang-after 50");
    let producers = spawn_producers(&ns, &c);
    a.expect_line("hang");
    let pid = a.pid();
    a.sigkill_no_reap();
    // Bounded wait until the kernel has made it a zombie (state Z in /proc/<pid>/stat).
    let deadline = std::time::Instant::now() + shmring_testkit::WAIT;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        if state == Some("Z") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid} never became a zombie"
        );
        std::thread::yield_now();
    }
    // The dead entry's position, before the second incarnation moves it.
    let commit = committed(&ring, "d");
    let mut b = testkit!(
        ns,
        "second incarnation",
        "consume --ns {ns} --ring r --name d --resume --per-producer {} --batch-cap {} \
         --until-seq {}",
        c.per_producer,
        c.batch_cap,
        c.per_producer
    );
    let ready = b.next_line().unwrap_or_default();
    if !ready.starts_with("ready") {
        let status = b.wait_status();
        panic!(
            "restart refused while the old process is a zombie ({status}): {}",
            b.stderr()
        );
    }
    assert_eq!(num(&ready, "start"), commit);
    b.wait_ok();
    drop(a);
    for p in producers {
        p.wait_ok();
    }
}
