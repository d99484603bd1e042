//! Worker group members in separate processes, one SIGKILLed in the middle of an event
//! (its handler blocks on it): every event is delivered at least once; the only duplicates
//! are events of the killed member's claim, and the survivors count exactly those as
//! redelivered.
//!
//! Each worker has a batch cap of 1, so a claim is one event and the killed member's claim
//! is the event it hangs on: it printed that event (it was handed it), and a survivor
//! delivers it again, counted in `redelivered`.

use std::collections::BTreeMap;

use shmring::{Ring, RingConfig};
use shmring_testkit::report::{line, num};
use shmring_testkit::{testkit, Namespace};

fn events(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("ev "))
        .map(|l| l.parse().unwrap_or_else(|_| panic!("bad event line {l:?}")))
        .collect()
}

#[test]
fn a_member_killed_mid_event_loses_nothing_and_its_claim_is_redelivered_once() {
    let ns = Namespace::new("group_kill");
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    let count = 3000u64;
    let worker = |label: &str, extra: &str| {
        testkit!(
            ns,
            label,
            "worker --ns {ns} --ring r --group g --batch-cap 1 --wait block {extra}"
        )
    };
    let mut victim = worker("victim", "--hang-after 5");
    victim.expect_line("ready");
    let mut survivors = vec![worker("survivor 0", ""), worker("survivor 1", "")];
    for s in &mut survivors {
        s.expect_line("ready");
    }
    let producer = testkit!(
        ns,
        "producer",
        "produce --ns {ns} --ring r --producer-id 0 --count {count} --size 8 --mode mixed"
    );
    let hang = victim.expect_line("hang");
    let hung_on = num(&hang, "ring_seq");
    victim.kill();
    // Every line it printed, the `ev` lines before the hang included.
    let victim_lines = victim.seen().to_vec();
    producer.wait_ok();
    ring.stop().expect("stop the ring");

    let mut redelivered = 0u64;
    let mut handed: BTreeMap<u64, u32> = BTreeMap::new();
    for s in survivors {
        let lines = s.wait_ok();
        redelivered += num(line(&lines, "done"), "redelivered");
        for e in events(&lines) {
            *handed.entry(e).or_default() += 1;
        }
    }
    let victims = events(&victim_lines);
    assert_eq!(
        victims.last(),
        Some(&hung_on),
        "the victim hung on its last event"
    );
    for &e in &victims {
        *handed.entry(e).or_default() += 1;
    }
    let lost: Vec<u64> = (0..count).filter(|s| !handed.contains_key(s)).collect();
    assert!(lost.is_empty(), "events never delivered: {lost:?}");
    let duplicates: Vec<u64> = handed
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(&s, _)| s)
        .collect();
    // The killed member's claim was the one event it hung on (batch cap 1).
    assert_eq!(
        duplicates,
        vec![hung_on],
        "duplicates beyond the killed claim"
    );
    assert_eq!(
        redelivered,
        duplicates.len() as u64,
        "the survivors count the killed member's claim as redelivered"
    );
}
