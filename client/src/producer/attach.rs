//! Attaching a producer: a free entry, or one a dead producer left (see `table`).

use super::*;

impl Ring {
    /// Attach a producer. On a single-producer ring a second live producer is refused.
    pub fn producer(&self) -> Result<Producer, AttachError> {
        Producer::attach(self.seg.clone())
    }
}

impl Producer {
    fn attach(seg: Arc<Segment>) -> Result<Self, AttachError> {
        crate::lifecycle::attachable(&seg)?;
        let geo = *seg.geometry();
        let me = process::current();
        let (entry, taken) = Self::take_entry(&seg, me.pid)?;
        let Some(e) = seg.producer(entry) else {
            unreachable!("producer entry index checked by take_entry")
        };
        // Relaxed: published by the Release CAS to ACTIVE below.
        e.start_time.store(me.start_time, Ordering::Relaxed);
        e.in_flight.store(0, Ordering::Relaxed);
        e.in_flight_len.store(0, Ordering::Relaxed);
        // Not known until the position is taken (after ACTIVE): readers of a fixed-size
        // ring's counters fall back to `published` meanwhile (see `ProducerInfo`). Relaxed:
        // published by the Release CAS to ACTIVE below, as the counters are.
        e.base.store(u64::MAX, Ordering::Relaxed);
        for c in [
            &e.published,
            &e.refused,
            &e.tombstoned,
            &e.repaired,
            &e.parks,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        let word = match table::producer::publish(&e.word, taken) {
            Ok(word) => word,
            // Freed under this process, which cannot happen while it runs.
            Err(_) => return Err(AttachError::Busy),
        };
        let mode = fence::mode();
        // Relaxed: the max keeps the weaker mode once any process uses it; producers read it
        // on every publish.
        seg.header()
            .fence_mode
            .fetch_max(mode as u32, Ordering::Relaxed);
        let single = geo.producer_mode == ProducerMode::Single;
        let next = if single {
            match Self::take_position(&seg) {
                Ok(p) => p,
                Err(err) => {
                    let _ = table::producer::free(&e.word, word);
                    return Err(err);
                }
            }
        } else {
            0
        };
        let fixed = geo.fixed;
        if fixed {
            // Relaxed: a counter's base, for display; read after the ACTIVE word.
            e.base.store(next, Ordering::Relaxed);
        }
        let cached_gate = gating::refresh(&seg, 0);
        let Some(seg) = Attached::producer(seg, entry) else {
            unreachable!("producer entry index checked by take_entry")
        };
        let mut producer = Producer {
            pid: me.pid,
            word,
            open_claim: None,
            seen: line::SeenRunning::default(),
            fast_end: 0,
            run: 0..0,
            vouched: std::cell::Cell::new((0, 0)),
            laps_checked: std::cell::Cell::new((0, 0)),
            witness_retry: std::cell::Cell::new(0),
            witness_hint: std::cell::Cell::new(0),
            slot_takes: std::cell::Cell::new(0),
            single,
            lone: false,
            lone_retry: 0,
            next,
            fixed,
            sized: geo.sized,
            base: next,
            registered: fence::registered(),
            parks: 0,
            room_waits: 0,
            lap_waits: std::cell::Cell::new(0),
            wakes: WakeCounts::default(),
            cached_gate,
            capacity: geo.capacity,
            max_payload: geo.max_payload(),
            seg,
            published: 0,
            refused: 0,
            tombstoned: 0,
            _not_sync: PhantomData,
        };
        producer.try_lone();
        Ok(producer)
    }

    /// Take a producer entry: a free one, else one whose process died holding no claim (a
    /// held claim is the broker's to repair). A single producer's claim is the line's
    /// position, not in its entry: repair what a dead one left first (tombstones for its
    /// unstamped claims, which also frees the entry), then take the freed entry. Returns the
    /// index and the word taken (ATTACHING by `me`).
    fn take_entry(seg: &Arc<Segment>, me: u32) -> Result<(u32, u64), AttachError> {
        let geo = *seg.geometry();
        for i in 0..geo.max_producers {
            let Some(e) = seg.producer(i) else { break };
            // Relaxed: only picks a candidate; the CAS decides.
            let seen = e.word.load(Ordering::Relaxed);
            if let Some(taken) = table::producer::take_free(&e.word, seen, me) {
                return Ok((i, taken));
            }
        }
        // A dead lone producer's entry not taken for another live process's lifecycle change.
        let mut busy = false;
        for i in 0..geo.max_producers {
            let Some(e) = seg.producer(i) else { break };
            // Acquire: the start time and claim below were written before the word.
            let seen = e.word.load(Ordering::Acquire);
            let start_time = e.start_time.load(Ordering::Relaxed);
            if table::producer::holder(&table::Os, seen, start_time) != Holder::Open {
                continue;
            }
            let dead = owned_word::owner(seen);
            if geo.producer_mode == ProducerMode::Single {
                let ring = Ring { seg: seg.clone() };
                // The first to see the death may be this attach (before any broker sweep):
                // the dead producer may have stamped events and not woken the consumers
                // parked on them (see `Ring::wake_consumers`). Before the repair, which may
                // have to wait.
                ring.wake_consumers();
                if ring.repair_dead_producer(i, seen).waiting > 0 {
                    return Err(AttachError::PredecessorClaim { pid: dead });
                }
                // Acquire: as above.
                let freed = e.word.load(Ordering::Acquire);
                if let Some(taken) = table::producer::take_free(&e.word, freed, me) {
                    return Ok((i, taken));
                }
                continue;
            }
            // Acquire: pairs with the dead producer's Release record of its claim.
            if e.in_flight.load(Ordering::Acquire) == 0 {
                // A dead lone producer's claims end where it left them before its entry
                // is anyone else's (the counter names the entry until then).
                // SeqCst: as in `Line::position`.
                let c = seg.lines().claim.value.load(Ordering::SeqCst);
                if shmring_layout::claim_lone_index(c) == Some(i) {
                    match seg.line().share(&SegEnv::lifecycle(seg), i) {
                        Ok(()) => {}
                        Err(crate::line::LineError::Busy(_)) => {
                            busy = true;
                            continue;
                        }
                        Err(_) => continue,
                    }
                }
                if let Some(taken) = table::producer::take_over(&e.word, seen, me) {
                    return Ok((i, taken));
                }
            }
        }
        if busy {
            return Err(AttachError::Busy);
        }
        Err(match (geo.producer_mode, seg.producer(0)) {
            (ProducerMode::Single, Some(e)) => AttachError::SingleProducerTaken {
                pid: owned_word::owner(e.word.load(Ordering::Relaxed)),
            },
            _ => AttachError::TableFull {
                what: "producer",
                max: geo.max_producers,
            },
        })
    }

    /// Single producer: start at the line's position and make it the claim word
    /// (`line::Line::take_position`, which waits out a stop in progress and takes the
    /// position again if one began meanwhile).
    ///
    /// On a ring published by a cursor nothing is claimed unpublished once the predecessor
    /// is gone (its open claim was repaired first): no slot to step back over.
    fn take_position(seg: &Segment) -> Result<u64, AttachError> {
        let fixed = seg.is_fixed();
        seg.line()
            .take_position(
                &SegEnv::lifecycle(seg),
                |s| fixed || seg.reached(s),
                || fence(Ordering::SeqCst),
            )
            .map_err(|err| match err {
                line::TakeError::Busy => AttachError::Busy,
                line::TakeError::CorruptPosition(position) => {
                    AttachError::CorruptPosition { position }
                }
            })
    }
}
