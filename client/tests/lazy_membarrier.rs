//! Registering a process for expedited membarriers waits for an RCU grace period (~10 ms
//! idle, seconds under load), so it happens when the process first relies on it: its
//! first publish or commit, which may use the compiler-only side of the fence pair. Not
//! when it attaches, builds a `WakeSet` or stops a ring.
//!
//! One test in this file: registration is per process, and this test binary's process
//! must not have registered before it runs.

use shmring::{ConsumerOptions, FenceMode, ProducerMode, Ring, RingConfig, WakeSet};

struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        if let Ok(dir) = shmring::names::namespace_dir(&self.0) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn attaching_does_not_register_for_membarrier_and_the_first_publish_does() {
    let ns = Ns(format!("lazy-membarrier-{}", std::process::id()));
    let config = RingConfig {
        capacity: 16,
        ..RingConfig::default()
    };
    let ring = Ring::create(&ns.0, "r", &config).expect("create");
    let mut consumer = ring
        .consumer(ConsumerOptions::durable("c"))
        .expect("consumer");
    let mut producer = ring.producer().expect("producer");
    let mut set = WakeSet::new();
    set.add(&consumer).expect("add");
    // A single-producer ring with its producer here, stopped and started.
    let single = Ring::create(
        &ns.0,
        "single",
        &RingConfig {
            capacity: 16,
            producer_mode: ProducerMode::Single,
            ..RingConfig::default()
        },
    )
    .expect("create single");
    let _single_producer = single.producer().expect("single producer");
    single.stop().expect("stop");
    single.start().expect("start");
    // Worker group members joining (the first creates the group; each claims as it joins)
    // and one leaving with its claim.
    let member = ring.consumer(ConsumerOptions::worker("w")).expect("member");
    let _other = ring
        .consumer(ConsumerOptions::worker("w"))
        .expect("other member");
    drop(member);
    assert!(
        !shmring::membarrier_registered(),
        "attaching, a WakeSet, a stop and a start, a worker joining or leaving registered \
         this process for membarrier"
    );

    producer.publish(b"first").expect("publish");
    let supported = ring.fence_mode() == Some(FenceMode::Membarrier);
    assert_eq!(
        shmring::membarrier_registered(),
        supported,
        "the first publish registers where the kernel supports membarrier"
    );
    assert_eq!(consumer.poll_once(|_| {}).expect("poll"), 1);
}
