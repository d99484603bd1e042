//! A half-taken table entry (a consumer CLAIMED or RESUMING, a producer ATTACHING) names
//! its taker by pid alone: its start time may still be the previous holder's, so the taker
//! counts as gone only once no process has that pid. A caller that remembers when it first
//! saw the entry's word ([`FirstSeen`], as the broker does across its sweeps) also tells a
//! reused pid: the word's writer ran before the word was read, so a process under that pid
//! that started after the sighting is not the taker.
//!
//! Handing a process a given pid takes root (`/proc/sys/kernel/ns_last_pid`): the tests are
//! in `as_root`, ignored by a plain `cargo test` and run by CI.

mod as_root {
    use shmring::{process, FirstSeen, Repair, Ring, RingConfig};
    use shmring_layout::{consumer_flags, consumer_state, owned_word, producer_state};
    use shmring_testkit::fault::Sleeper;
    use shmring_testkit::raw::RawSegment;
    use shmring_testkit::{eventually, Namespace};

    /// Producer entry `index`'s word; `None` once it is free (`RingInfo` lists taken ones).
    fn producer_word(ring: &Ring, index: u32) -> Option<u64> {
        let info = ring.info();
        let p = info.producers.iter().find(|p| p.index == index);
        p.map(|p| p.word)
    }

    #[test]
    #[ignore = "needs root (a process handed a given pid): run by CI with --ignored as_root::"]
    fn a_half_taken_entry_is_given_back_once_its_pid_is_a_process_started_after_its_first_sighting()
    {
        let ns = Namespace::new("reused_pid");
        let config = RingConfig {
            capacity: 64,
            max_producers: 4,
            ..RingConfig::default()
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create");
        let raw = RawSegment::open(&ring);
        let taker = Sleeper::spawn();
        let pid = taker.pid();
        // Entries a process `pid` was taking: a new consumer's, a durable required one's it
        // was taking over by name, a producer's.
        let claimed = owned_word::pack(3, consumer_state::CLAIMED, pid);
        let resuming = owned_word::pack(5, consumer_state::RESUMING, pid);
        let attaching = owned_word::pack(2, producer_state::ATTACHING, pid);
        raw.fabricate_consumer(0, claimed, 0, "", 0);
        let durable = consumer_flags::REQUIRED | consumer_flags::DURABLE;
        raw.fabricate_consumer(1, resuming, durable, "d", 0);
        raw.set_producer_word(2, attaching);
        let first = [claimed, resuming, attaching].map(FirstSeen::now);
        // A sighting of a word the entry does not hold, as early.
        let other = FirstSeen::now(owned_word::pack(2, consumer_state::CLAIMED, pid));

        // The taker runs: held, whether or not the caller saw the word before.
        assert!(!ring.free_consumer_seen(0, first[0]));
        assert!(!ring.free_consumer_seen(1, first[1]));
        assert_eq!(
            ring.repair_dead_producer_seen(2, first[2]),
            Repair::default()
        );
        assert_eq!(producer_word(&ring, 2), Some(attaching));

        // The taker dies and, a clock tick of the start times later (they count in ticks),
        // an unrelated process gets its pid.
        taker.kill();
        let seen = process::boot_ticks_now();
        eventually("a clock tick to pass", || process::boot_ticks_now() > seen);
        let reuser = Sleeper::with_pid(pid);

        // Without a sighting the pid in use keeps each entry held: what a caller that
        // cannot tell a reused pid must do.
        assert!(!ring.free_consumer(0, claimed));
        assert!(!ring.free_consumer(1, resuming));
        assert_eq!(ring.repair_dead_producer(2, attaching), Repair::default());
        // Nor does a sighting after the reuser started tell it from the taker.
        assert!(!ring.free_consumer_seen(0, FirstSeen::now(claimed)));
        // A sighting of another word says nothing about the one the entry holds.
        assert!(!ring.free_consumer_seen(0, other));
        assert_eq!(raw.consumer_word(0), claimed);

        // The first sighting: the process under that pid started after it, so it is not
        // the taker. Each entry is given back as its taker's death would have it.
        assert!(ring.free_consumer_seen(0, first[0]));
        assert_eq!(
            owned_word::state(raw.consumer_word(0)),
            consumer_state::FREE
        );
        assert!(ring.free_consumer_seen(1, first[1]));
        assert_eq!(
            owned_word::state(raw.consumer_word(1)),
            consumer_state::DETACHED,
            "a durable required entry keeps its name and position"
        );
        ring.repair_dead_producer_seen(2, first[2]);
        assert_eq!(producer_word(&ring, 2), None, "the producer entry is freed");
        assert!(
            process::is_alive(reuser.pid(), process::start_time(reuser.pid()).unwrap_or(0)),
            "the reuser still runs: the entries went back while its pid was in use"
        );
    }
}
