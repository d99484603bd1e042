//! Suite `publish-cost`: the time of each `publish()` call, read from the producer's own
//! clock around the call. With the consumer parked between
//! messages, with it keeping up, with two consumers (one spinning, one parked), and the
//! same ring published without the parked-consumer check ("parking compiled out",
//! `publish_without_wake_check`): the proof that a producer pays for a sleeping consumer
//! only while one sleeps; and with a blocking consumer reading after the busy-spin one,
//! which parks behind it between messages: its upstream's commit wakes it, the producer
//! pays nothing for it. Plus the `SeqCst`-fence fallback, forced with a seccomp filter
//! that makes `membarrier(2)` fail in the producer process.
//!
//! Every number includes two clock reads; the "clock pair" row is that overhead alone.

use std::time::Duration;

use anyhow::Result;
use shmring_peers::kit::Measured;

use crate::row::{Kind, Row};
use crate::run::{Ctx, PACE};
use crate::shm::{self, kv, Setup};

pub const SUITE: &str = "publish-cost";
pub const GROUP: &str = "time of one publish() call (two clock reads included)";

pub const CLOCK: &str = "clock pair (the measurement's own cost)";
pub const PARKED_SPIN: &str = "paced 100 µs: busy-spin consumer";
pub const PARKED_BLOCK: &str = "paced 100 µs: blocking consumer (parked between messages)";
pub const PARKED_TWO: &str = "paced 100 µs: two consumers, busy-spin + blocking";
pub const PARKED_BEHIND: &str =
    "paced 100 µs: busy-spin consumer + blocking consumer after it (parked behind it)";
pub const PARKED_BASE: &str = "paced 100 µs: busy-spin consumer, parking compiled out";
pub const PARKED_SEQCST: &str = "paced 100 µs: busy-spin consumer, SeqCst fence (no membarrier)";
pub const BURST_SPIN: &str = "back-to-back: busy-spin consumer keeping up";
pub const BURST_BLOCK: &str = "back-to-back: blocking consumer mostly keeping up";
pub const BURST_BASE: &str = "back-to-back: busy-spin consumer, parking compiled out";
pub const BURST_SEQCST: &str = "back-to-back: busy-spin consumer, SeqCst fence (no membarrier)";

/// Rows this suite adds.
pub fn rows() -> u64 {
    11
}

struct Case {
    name: &'static str,
    /// Each consumer: its wait strategy, then `as <name>` (durable under that name) or
    /// `after <name>` (reading after that consumer).
    consumers: &'static [&'static str],
    paced: bool,
    publish: &'static str,
    fence: &'static str,
    baseline: Option<&'static str>,
}

const CASES: [Case; 10] = [
    Case {
        name: PARKED_BASE,
        consumers: &["busy-spin"],
        paced: true,
        publish: "nowake",
        fence: "default",
        baseline: None,
    },
    Case {
        name: PARKED_SPIN,
        consumers: &["busy-spin"],
        paced: true,
        publish: "normal",
        fence: "default",
        baseline: Some(PARKED_BASE),
    },
    Case {
        name: PARKED_SEQCST,
        consumers: &["busy-spin"],
        paced: true,
        publish: "normal",
        fence: "seqcst",
        baseline: Some(PARKED_BASE),
    },
    Case {
        name: PARKED_BLOCK,
        consumers: &["blocking"],
        paced: true,
        publish: "normal",
        fence: "default",
        baseline: Some(PARKED_BASE),
    },
    Case {
        name: PARKED_TWO,
        consumers: &["busy-spin", "blocking"],
        paced: true,
        publish: "normal",
        fence: "default",
        baseline: Some(PARKED_BASE),
    },
    Case {
        name: PARKED_BEHIND,
        consumers: &["busy-spin as up", "blocking after up"],
        paced: true,
        publish: "normal",
        fence: "default",
        baseline: Some(PARKED_BASE),
    },
    Case {
        name: BURST_BASE,
        consumers: &["busy-spin"],
        paced: false,
        publish: "nowake",
        fence: "default",
        baseline: None,
    },
    Case {
        name: BURST_SPIN,
        consumers: &["busy-spin"],
        paced: false,
        publish: "normal",
        fence: "default",
        baseline: Some(BURST_BASE),
    },
    Case {
        name: BURST_SEQCST,
        consumers: &["busy-spin"],
        paced: false,
        publish: "normal",
        fence: "seqcst",
        baseline: Some(BURST_BASE),
    },
    Case {
        name: BURST_BLOCK,
        consumers: &["blocking"],
        paced: false,
        publish: "normal",
        fence: "default",
        baseline: Some(BURST_BASE),
    },
];

/// Measure every case.
pub fn run(ctx: &mut Ctx) -> Result<()> {
    let s = ctx.sizes;
    ctx.bar.set_message("publish-cost: clock pair");
    let clock = Setup::one_to_one(
        vec![kv("wait", "blocking"), kv("mode", "count")],
        vec![
            kv("mode", "clock"),
            kv("count", s.burst),
            kv("warmup", s.warmup),
        ],
        ctx.timeout(0, Duration::ZERO),
    );
    let row = Row::new(SUITE, GROUP, CLOCK, Kind::Cost);
    let row = match shm::run(ctx, "clock", clock) {
        Ok(p) => row.with(&p.producers[0]),
        Err(e) => row.failed(&e),
    };
    ctx.push(row);
    for case in &CASES {
        ctx.bar.set_message(format!("publish-cost: {}", case.name));
        let count = if case.paced { s.paced } else { s.burst };
        let mut producer = vec![
            kv("count", count),
            kv("warmup", s.warmup),
            kv("time_each", 1),
            kv("publish", case.publish),
            kv("fence", case.fence),
            kv("size", 16),
        ];
        if case.paced {
            producer.extend([kv("mode", "paced"), kv("interval_ns", PACE.as_nanos())]);
        } else {
            producer.push(kv("mode", "stream"));
        }
        let mut setup = Setup::one_to_one(
            vec![],
            producer,
            ctx.timeout(
                count,
                if case.paced {
                    PACE
                } else {
                    Duration::from_micros(5)
                },
            ),
        );
        setup.consumers = case
            .consumers
            .iter()
            .map(|c| {
                let mut words = c.split_whitespace();
                let mut kvs = vec![kv("mode", "count"), kv("fence", case.fence)];
                kvs.extend(words.next().map(|w| kv("wait", w)));
                match (words.next(), words.next()) {
                    (Some("as"), Some(name)) => kvs.push(kv("name", name)),
                    (Some("after"), Some(up)) => kvs.push(kv("after", up)),
                    _ => {}
                }
                kvs
            })
            .collect();
        let row = Row::new(SUITE, GROUP, case.name, Kind::Cost);
        let mut row = match shm::run(ctx, "cost", setup) {
            Ok(p) => {
                let pm: &Measured = &p.producers[0];
                let mut r = row.with(pm);
                r.producer_cpu = pm.get("cpu_share");
                r.consumer_cpu = p.consumers[0].get("cpu_share");
                let wakeups: f64 = p.consumers.iter().filter_map(|c| c.get("wakeups")).sum();
                r.extra.insert("consumer_wakeups".into(), wakeups);
                r
            }
            Err(e) => row.failed(&e),
        };
        if let Some(b) = case.baseline {
            if let Some(base) = ctx.rows.iter().find(|r| r.suite == SUITE && r.name == b) {
                let base = base.clone();
                row.against(&base);
            }
        }
        ctx.push(row);
    }
    Ok(())
}
