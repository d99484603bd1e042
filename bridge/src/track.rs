//! The importer's bookkeeping per source: what it has, what a batch adds, what is missing.
//!
//! Per source it keeps `expected`, the next sequence it needs (everything below is in the
//! ring, or carried no event). For a batch covering `start..end`:
//!
//! - **reliable**: `start > expected` means something in between was lost (sent while the
//!   importer was down): the batch is dropped and a resend from `expected` is asked for,
//!   at most once per `resend_every` for the same position. Otherwise the events at or
//!   above `expected` are published, those below counted as duplicates, and `end` becomes
//!   `expected`. `expected` never stays below the exporter's committed position: the
//!   exporter commits only what this importer confirmed after publishing it, so what the
//!   ring's record lacks below that position carried no event (tombstones in the source).
//! - **drop**: sequences in `expected..start`, and those inside the batch without an
//!   event, are counted as dropped; the rest is published as above. Nothing is asked for.
//!
//! A source the importer has no record of starts, reliable, at the exporter's committed
//! position, and, dropping, at the first batch it sees.
//!
//! The link is not authenticated (docs/SCALE_OUT.md), and every source identity a message
//! names would otherwise stay known for the importer's life (a source ring created again
//! is a new identity too): the importer knows at most `max` sources (those recalled from
//! its ring included). A new one past that takes the place of the source quiet the longest
//! if that one has been quiet for `forget`, and is refused (its message ignored) if none
//! has. A forgotten source heard again is a new one: reliable, it starts at its exporter's
//! committed position, so events its last lost acks covered are published a second time.
//! The importer's heartbeat acknowledges only the sources heard from lately (see
//! `heard_since`), so a source that has gone away costs nothing per heartbeat.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::wire::{BatchHeader, Mode};

/// What the importer knows of one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// The next sequence it needs.
    pub expected: u64,
    /// The last resend asked for, and when.
    resent: Option<(u64, Instant)>,
    /// When a message from it last arrived (`None`: recalled from the ring, not heard since).
    heard: Option<Instant>,
}

/// What to do with one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// Publish the batch's events whose sequence is at least this, in order (`None`: none).
    pub keep_from: Option<u64>,
    /// Ask the exporter to send again from this sequence.
    pub resend: Option<u64>,
    /// Acknowledge this position once the kept events are published.
    pub ack: Option<u64>,
    /// Events of the batch the ring already has.
    pub duplicates: u64,
    /// Sequences known lost (DROP mode).
    pub dropped: u64,
    /// Whether the source was new.
    pub new_source: bool,
    /// The source was new, the importer already knows its largest number of sources, and
    /// every one of them was heard from lately: the message is ignored (nothing else in the
    /// plan is set).
    pub refused: bool,
    /// The source was new, and this source, quiet the longest, was forgotten to make room.
    pub forgot: Option<u64>,
}

/// Every source an importer knows.
#[derive(Debug)]
pub struct Sources {
    map: HashMap<u64, Source>,
    resend_every: Duration,
    /// The most sources it knows.
    max: usize,
    /// How long a source must have been quiet to be forgotten for a new one.
    forget: Duration,
    /// When the recalled sources became known: their quiet time counts from here.
    since: Instant,
    /// No known source can be forgotten before this: the quietest one's last message,
    /// plus `forget`, when the sources were last looked through for one (the times they
    /// were heard only move on, so the bound holds until then). A refusal before it costs
    /// no look through the sources.
    none_forgettable_before: Option<Instant>,
}

impl Sources {
    /// Sources recalled from the ring at `now`: `(identity, next sequence needed)`; at most
    /// `max` sources in all (the recalled ones are all kept), one quiet for `forget` giving
    /// its place to a new one.
    pub fn new(
        recalled: impl IntoIterator<Item = (u64, u64)>,
        resend_every: Duration,
        (max, forget): (usize, Duration),
        now: Instant,
    ) -> Self {
        Self {
            map: recalled
                .into_iter()
                .map(|(s, expected)| {
                    (
                        s,
                        Source {
                            expected,
                            resent: None,
                            heard: None,
                        },
                    )
                })
                .collect(),
            resend_every,
            max,
            forget,
            since: now,
            none_forgettable_before: None,
        }
    }

    /// Every source and its next needed sequence.
    pub fn positions(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(s, e)| (*s, e.expected))
    }

    /// The sources heard from since the importer started, and their next needed sequence.
    pub fn heard_ever(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map
            .iter()
            .filter(|(_, e)| e.heard.is_some())
            .map(|(s, e)| (*s, e.expected))
    }

    /// The sources heard from at or after `since`, and their next needed sequence: those
    /// the importer's heartbeat acknowledges.
    pub fn heard_since(&self, since: Instant) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map
            .iter()
            .filter(move |(_, e)| e.heard.is_some_and(|t| t >= since))
            .map(|(s, e)| (*s, e.expected))
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it knows no source.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Decide what to do with a batch whose events have sequences `seqs` (in order), and
    /// move the source on as if the kept events were published.
    pub fn plan(&mut self, h: &BatchHeader, seqs: impl Iterator<Item = u64>, now: Instant) -> Plan {
        let mut plan = Plan::default();
        let fresh = match h.mode {
            Mode::Reliable => h.committed,
            Mode::Drop => h.start,
        };
        if !self.map.contains_key(&h.source) && self.map.len() >= self.max {
            if self.none_forgettable_before.is_some_and(|t| now < t) {
                plan.refused = true;
                return plan;
            }
            let quietest = self
                .map
                .iter()
                .map(|(s, e)| (e.heard.unwrap_or(self.since), *s))
                .min();
            match quietest {
                Some((heard, s)) if now.saturating_duration_since(heard) >= self.forget => {
                    self.map.remove(&s);
                    plan.forgot = Some(s);
                }
                _ => {
                    self.none_forgettable_before =
                        quietest.and_then(|(heard, _)| heard.checked_add(self.forget));
                    plan.refused = true;
                    return plan;
                }
            }
        }
        let src = self.map.entry(h.source).or_insert_with(|| {
            plan.new_source = true;
            Source {
                expected: fresh,
                resent: None,
                heard: None,
            }
        });
        src.heard = Some(now);
        let mut expected = src.expected;
        match h.mode {
            Mode::Reliable => {
                expected = expected.max(h.committed);
                if h.start > expected {
                    let due = src.resent.is_none_or(|(at, when)| {
                        at != expected || now.duration_since(when) >= self.resend_every
                    });
                    if due {
                        src.resent = Some((expected, now));
                        plan.resend = Some(expected);
                    }
                    src.expected = expected;
                    return plan;
                }
            }
            Mode::Drop => {
                if h.start > expected {
                    plan.dropped += h.start - expected;
                    expected = h.start;
                }
            }
        }
        let covered_from = expected;
        let mut kept = 0u64;
        for seq in seqs {
            if seq < covered_from {
                plan.duplicates += 1;
            } else {
                kept += 1;
                expected = seq + 1;
            }
        }
        expected = expected.max(h.end);
        if h.mode == Mode::Drop && h.end > covered_from {
            // Covered without an event: lapped at the exporter (or a tombstone in the source).
            plan.dropped += (h.end - covered_from) - kept;
        }
        src.expected = expected;
        plan.keep_from = (kept > 0).then_some(covered_from);
        plan.ack = Some(expected);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const HOUR: Duration = Duration::from_secs(3600);

    fn batch(mode: Mode, committed: u64, start: u64, end: u64) -> BatchHeader {
        BatchHeader {
            mode,
            source: 7,
            run: 1,
            committed,
            start,
            end,
            dropped: 0,
        }
    }

    #[test]
    fn reliable_keeps_only_what_the_ring_lacks() {
        let mut s = Sources::new([(7, 10)], 200 * MS, (16, HOUR), Instant::now());
        let t = Instant::now();
        // Replay after an exporter restart: 5..10 are already in the ring.
        let p = s.plan(&batch(Mode::Reliable, 5, 5, 15), 5..15, t);
        assert_eq!(p.keep_from, Some(10));
        assert_eq!(p.duplicates, 5);
        assert_eq!(p.ack, Some(15));
        assert_eq!(p.resend, None);
        // Entirely old: nothing kept, the position is acknowledged again.
        let p = s.plan(&batch(Mode::Reliable, 5, 5, 15), 5..15, t);
        assert_eq!((p.keep_from, p.duplicates, p.ack), (None, 10, Some(15)));
    }

    #[test]
    fn reliable_asks_for_what_is_missing_at_most_once_per_period() {
        let mut s = Sources::new([], 200 * MS, (16, HOUR), Instant::now());
        let t = Instant::now();
        // A new source starts at the exporter's committed position.
        let p = s.plan(&batch(Mode::Reliable, 100, 120, 130), 120..130, t);
        assert!(p.new_source);
        assert_eq!((p.keep_from, p.resend, p.ack), (None, Some(100), None));
        let p = s.plan(&batch(Mode::Reliable, 100, 130, 140), 130..140, t + MS);
        assert_eq!(p.resend, None, "asked a moment ago");
        let p = s.plan(
            &batch(Mode::Reliable, 100, 140, 150),
            140..150,
            t + 300 * MS,
        );
        assert_eq!(p.resend, Some(100));
        // The resend arrives.
        let p = s.plan(
            &batch(Mode::Reliable, 100, 100, 150),
            100..150,
            t + 301 * MS,
        );
        assert_eq!((p.keep_from, p.ack), (Some(100), Some(150)));
    }

    #[test]
    fn reliable_skips_tombstones_the_exporter_committed() {
        // The ring's record ends at 9 (expected 10); 10..12 were tombstones in the source,
        // confirmed (via `end`) before a restart.
        let mut s = Sources::new([(7, 10)], 200 * MS, (16, HOUR), Instant::now());
        let p = s.plan(&batch(Mode::Reliable, 12, 12, 14), 12..14, Instant::now());
        assert_eq!((p.keep_from, p.resend, p.ack), (Some(12), None, Some(14)));
        // Tombstones inside a batch: covered by `end`, nothing to publish for them.
        let p = s.plan(
            &batch(Mode::Reliable, 12, 14, 20),
            [14, 19].into_iter(),
            Instant::now(),
        );
        assert_eq!((p.keep_from, p.ack, p.dropped), (Some(14), Some(20), 0));
    }

    #[test]
    fn drop_counts_every_sequence_it_did_not_get() {
        let mut s = Sources::new([], 200 * MS, (16, HOUR), Instant::now());
        let t = Instant::now();
        let hb = s.plan(&batch(Mode::Drop, 0, 0, 0), std::iter::empty(), t);
        assert_eq!((hb.dropped, hb.ack), (0, Some(0)));
        let p = s.plan(&batch(Mode::Drop, 10, 0, 10), 0..10, t);
        assert_eq!((p.keep_from, p.dropped), (Some(0), 0));
        // A batch lost on the link (10..15), then one with a lap inside (15..20 carries two).
        let p = s.plan(&batch(Mode::Drop, 20, 15, 20), [15, 17].into_iter(), t);
        assert_eq!((p.keep_from, p.dropped, p.resend), (Some(15), 5 + 3, None));
        // A heartbeat beyond what arrived: the tail was lost too.
        let p = s.plan(&batch(Mode::Drop, 25, 25, 25), std::iter::empty(), t);
        assert_eq!(p.dropped, 5);
        assert_eq!(s.positions().collect::<Vec<_>>(), vec![(7, 25)]);
    }

    fn from(source: u64, committed: u64) -> BatchHeader {
        BatchHeader {
            source,
            ..batch(Mode::Reliable, committed, committed, committed)
        }
    }

    #[test]
    fn a_new_source_past_the_largest_number_is_refused() {
        // One source recalled from the ring, room for two.
        let t = Instant::now();
        let mut s = Sources::new([(7, 10)], 200 * MS, (2, HOUR), t);
        let p = s.plan(&from(8, 0), std::iter::empty(), t);
        assert!(p.new_source && !p.refused);
        assert_eq!(p.ack, Some(0));
        for source in [9, 10, u64::MAX] {
            let p = s.plan(&from(source, 5), 5..6, t);
            assert_eq!(
                p,
                Plan {
                    refused: true,
                    ..Plan::default()
                },
                "source {source}"
            );
        }
        assert_eq!(s.len(), 2);
        // The sources it knows carry on.
        let p = s.plan(&batch(Mode::Reliable, 10, 10, 12), 10..12, t);
        assert_eq!((p.keep_from, p.ack, p.refused), (Some(10), Some(12), false));
        let p = s.plan(&from(8, 3), std::iter::empty(), t);
        assert_eq!((p.ack, p.refused), (Some(3), false));
    }

    #[test]
    fn a_source_quiet_for_the_forget_period_gives_its_place_to_a_new_one() {
        let t = Instant::now();
        // Source 7 recalled at `t` and never heard since; source 8 heard at `t + 10 min`.
        let mut s = Sources::new([(7, 10)], 200 * MS, (2, HOUR), t);
        s.plan(&from(8, 4), std::iter::empty(), t + 600 * 1000 * MS);
        // Neither quiet for an hour yet: refused.
        let p = s.plan(&from(9, 0), std::iter::empty(), t + HOUR - MS);
        assert!(p.refused && p.forgot.is_none());
        // Source 7 has been: forgotten for source 9, which is then known as any other.
        let p = s.plan(&from(9, 0), std::iter::empty(), t + HOUR);
        assert_eq!((p.refused, p.forgot, p.new_source), (false, Some(7), true));
        assert_eq!(p.ack, Some(0));
        let mut known: Vec<u64> = s.positions().map(|(id, _)| id).collect();
        known.sort_unstable();
        assert_eq!(known, [8, 9]);
        // Source 9 was just heard, source 8 only 50 min ago: the next new one is refused.
        let p = s.plan(&from(10, 0), std::iter::empty(), t + HOUR + MS);
        assert!(p.refused);
        // Refused again just before source 8's hour is up at 70 min, from the bound the last
        // look through the sources left (no look this time).
        let p = s.plan(
            &from(11, 0),
            std::iter::empty(),
            t + 70 * 60 * 1000 * MS - MS,
        );
        assert!(p.refused);
        // Source 7 back, a new source now: it starts at its exporter's committed position.
        let p = s.plan(&from(7, 12), std::iter::empty(), t + 2 * HOUR);
        assert_eq!((p.forgot, p.new_source, p.ack), (Some(8), true, Some(12)));
    }

    #[test]
    fn the_heartbeat_acknowledges_only_sources_heard_lately() {
        let t = Instant::now();
        let mut s = Sources::new([(7, 10)], 200 * MS, (16, HOUR), t);
        // Recalled, not heard yet: nothing to acknowledge until it speaks.
        assert_eq!(s.heard_since(t).count(), 0);
        s.plan(&from(8, 4), std::iter::empty(), t);
        s.plan(&from(7, 10), std::iter::empty(), t + 500 * MS);
        let mut lately: Vec<_> = s.heard_since(t).collect();
        lately.sort_unstable();
        assert_eq!(lately, [(7, 10), (8, 4)]);
        // Source 8 has been quiet since `t`.
        assert_eq!(s.heard_since(t + MS).collect::<Vec<_>>(), [(7, 10)]);
        assert_eq!(s.heard_since(t + 501 * MS).count(), 0);
        // Both are still known: a quiet source's next message is planned as before.
        assert_eq!(s.len(), 2);
        let p = s.plan(&from(8, 4), std::iter::empty(), t + 600 * MS);
        assert_eq!((p.new_source, p.ack), (false, Some(4)));
    }
}
