//! Lifecycle storms across processes: two processes stop, start and drain one ring in
//! random orders while producer processes publish without end and retry every refusal of
//! the stopped ring, a durable required consumer reads everything, and consumers attach and
//! detach. When the stormers are done the test stops the ring at `S`, lets the reader reach
//! `S`, and removes the ring, which ends the producers.
//!
//! Checked: the events the producers were told were accepted are exactly the `S` the line
//! closed at, and every one reaches the required consumer exactly once, in each producer's
//! order (the `consume` role checks each producer's sequence is exactly the next, so
//! nothing is lost, doubled or reordered), ring sequences strictly increase, every stop
//! sequence a stormer saw only moves forward, and an attaching consumer sees a contiguous
//! run from where it attached. Run for both producer modes and a ring of fixed-size
//! events (its single producer's cursor published after the claim; see `fixed`); every
//! choice comes from a printed seed (`SHMRING_FAULT_SEED` replays it).

use shmring::{ProducerMode, Ring, RingConfig};
use shmring_testkit::fault::Rng;
use shmring_testkit::report::{line, num};
use shmring_testkit::{testkit, Child, Namespace};

/// `sizes`: the ring's `event_size` and `max_event_size`; `producers`: producer processes
/// (1 on a single-producer ring).
fn storm(mode: ProducerMode, sizes: (Option<u32>, Option<u32>), producers: u32, test: &str) {
    let (event_size, max_event_size) = sizes;
    let mut rng = Rng::for_test(test);
    let ns = Namespace::new("lc_storm");
    let capacity = *rng.pick(&[16u64, 64]);
    let config = RingConfig {
        capacity,
        producer_mode: mode,
        event_size,
        max_event_size,
        ..RingConfig::default()
    };
    let ring = Ring::create(ns.name(), "r", &config).expect("create ring");
    // A ring of sized events takes its largest events, which its publish writes the general
    // way (a length word and a copy), where 8-byte ones are written side by side with it.
    let size = if max_event_size.is_some() { "max" } else { "8" };
    let mut reader = testkit!(
        ns,
        "required reader",
        "consume --ns {ns} --ring r --name reader --producers {producers} \
         --per-producer {} --until-stdin --wait yield",
        u64::MAX / 4
    );
    reader.expect_line("ready");
    let mut publishers: Vec<Child> = (0..producers)
        .map(|id| {
            let mut p = testkit!(
                ns,
                format!("producer {id}"),
                "produce --ns {ns} --ring r --producer-id {id} --count 0 --mode mixed \
                 --retry-closed --size {size}"
            );
            p.expect_line("ready");
            p
        })
        .collect();
    let mut stormers: Vec<Child> = (0..2)
        .map(|i| {
            let mut s = testkit!(
                ns,
                format!("stormer {i}"),
                "lifecycle-storm --ns {ns} --ring r --rounds {} --seed {}",
                rng.range(150..=300),
                rng.below(u64::MAX)
            );
            s.expect_line("ready");
            s
        })
        .collect();
    // Consumers attach and detach all along: each one must see a contiguous run of ring
    // sequences from where it attached (a required consumer misses nothing after its start).
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attacher = {
        let (ring, done) = (ring.clone(), done.clone());
        std::thread::spawn(move || {
            let mut attaches = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(mut c) = ring.consumer(shmring::ConsumerOptions::anonymous()) else {
                    break;
                };
                let mut expect = c.next_sequence();
                for _ in 0..20 {
                    let polled = c.poll_once(|ev| {
                        assert_eq!(ev.sequence(), expect, "a gap after attaching");
                        expect += 1;
                    });
                    if polled.is_err() {
                        break;
                    }
                    std::thread::yield_now();
                }
                attaches += 1;
            }
            attaches
        })
    };
    let mut max_stop = 0;
    let mut stats = Vec::new();
    for s in stormers.drain(..) {
        let out = s.wait_ok();
        let done = line(&out, "done");
        max_stop = max_stop.max(num(done, "max_stop"));
        stats.push(done.to_owned());
    }
    let stop = ring.stop().expect("final stop");
    assert!(stop >= max_stop, "the line only moves forward");
    reader.send_line(&format!("until {stop}"));
    let out = reader.wait_ok();
    let read = line(&out, "done");
    assert_eq!(
        num(read, "delivered"),
        stop,
        "every accepted event, once: {read}"
    );
    assert_eq!(num(read, "dropped"), 0, "{read}");
    Ring::remove(ns.name(), "r").expect("remove");
    let mut accepted = 0;
    let mut retries = 0;
    for p in publishers.drain(..) {
        let out = p.wait_ok();
        let done = line(&out, "done");
        accepted += num(done, "published");
        retries += num(done, "retries");
    }
    assert_eq!(
        accepted, stop,
        "accepted = the stop sequence: nothing accepted and lost"
    );
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let attaches = attacher.join().expect("attacher");
    println!(
        "lifecycle storm ({mode:?}, event sizes {sizes:?}, capacity {capacity}): {accepted} events accepted and \
         delivered, {retries} refusals retried, {attaches} attaches; stormers: {stats:?}"
    );
}

#[test]
fn stop_start_drain_storm_multi_producer() {
    storm(
        ProducerMode::Multi,
        (None, None),
        3,
        "lifecycle_storm_multi",
    );
}

/// One producer on a multi-producer ring: it claims alone (ARCHITECTURE.md, "Lone
/// claims"), every stop ends that, and it takes the line again once it has claimed
/// through the counter for a while.
#[test]
fn stop_start_drain_storm_multi_producer_ring_with_one_producer() {
    storm(ProducerMode::Multi, (None, None), 1, "lifecycle_storm_lone");
}

#[test]
fn stop_start_drain_storm_single_producer() {
    storm(
        ProducerMode::Single,
        (None, None),
        1,
        "lifecycle_storm_single",
    );
}

#[test]
fn stop_start_drain_storm_fixed_size_ring() {
    storm(
        ProducerMode::Single,
        (Some(8), None),
        1,
        "lifecycle_storm_fixed",
    );
}

#[test]
fn stop_start_drain_storm_ring_of_sized_events() {
    storm(
        ProducerMode::Single,
        (None, Some(24)),
        1,
        "lifecycle_storm_sized",
    );
}
