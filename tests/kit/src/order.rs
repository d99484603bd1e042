//! The order rule a checking consumer holds its events to, event by event: ring sequences
//! strictly increase, every payload decodes ([`crate::payload`]: not torn, not stale), and
//! each producer's own sequences follow one another: exactly (a required consumer loses
//! nothing), or only upwards (an optional consumer may be lapped and skip ahead). A
//! producer's first event is its sequence 0 unless the consumer resumed or may skip.

use std::collections::BTreeMap;

use crate::payload::{decode, Origin};

/// What a checking consumer has seen so far.
#[derive(Debug, Clone, Default)]
pub struct OrderCheck {
    /// The first event seen of each producer must be its sequence 0.
    pub from_zero: bool,
    /// A producer's sequence may jump ahead (never back).
    pub gaps_allowed: bool,
    /// Per producer, the sequence expected next.
    next: BTreeMap<u32, u64>,
    /// Per producer, the first sequence seen.
    pub firsts: BTreeMap<u32, u64>,
    /// Per producer, the last sequence seen.
    pub lasts: BTreeMap<u32, u64>,
    /// Events that passed.
    pub delivered: u64,
    /// The ring sequence of the first event that passed.
    pub first_ring: Option<u64>,
    /// The ring sequence of the last event that passed.
    pub last_ring: Option<u64>,
}

impl OrderCheck {
    /// A check with nothing seen yet.
    pub fn new(from_zero: bool, gaps_allowed: bool) -> Self {
        Self {
            from_zero,
            gaps_allowed,
            ..Self::default()
        }
    }

    /// Expect `seq` as the next event of `producer` (a consumer resuming where it was).
    pub fn expect_next(&mut self, producer: u32, seq: u64) {
        self.next.insert(producer, seq);
    }

    /// The sequence expected next of `producer` (`None`: nothing seen or expected of it).
    pub fn next(&self, producer: u32) -> Option<u64> {
        self.next.get(&producer).copied()
    }

    /// The sequence expected next of every producer.
    pub fn next_all(&self) -> &BTreeMap<u32, u64> {
        &self.next
    }

    /// Check the event at ring sequence `ring_seq` with payload `bytes` and return whose it
    /// is, or say what rule it breaks.
    pub fn check(&mut self, ring_seq: u64, bytes: &[u8]) -> Result<Origin, String> {
        let r = ring_seq;
        if let Some(l) = self.last_ring.filter(|&l| r <= l) {
            return Err(format!("ring sequence went from {l} to {r}"));
        }
        self.last_ring = Some(r);
        self.first_ring.get_or_insert(r);
        let o = decode(bytes).map_err(|e| format!("ring sequence {r}: {e}"))?;
        match self.next(o.producer) {
            None if self.from_zero && o.seq != 0 => {
                return Err(format!(
                    "ring sequence {r}: the first event of producer {} is its seq {}, not 0",
                    o.producer, o.seq
                ))
            }
            Some(want) if o.seq < want || (o.seq > want && !self.gaps_allowed) => {
                return Err(format!(
                    "ring sequence {r}: producer {} seq {}, expected {want} ({})",
                    o.producer,
                    o.seq,
                    if o.seq < want {
                        "duplicate or reordered"
                    } else {
                        "gap: events lost"
                    }
                ))
            }
            _ => {}
        }
        self.next.insert(o.producer, o.seq + 1);
        self.firsts.entry(o.producer).or_insert(o.seq);
        self.lasts.insert(o.producer, o.seq);
        self.delivered += 1;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::encode;

    fn ev(producer: u32, seq: u64) -> Vec<u8> {
        encode(Origin { producer, seq }, 8)
    }

    #[test]
    fn a_required_consumer_takes_each_producer_in_order_from_zero() {
        let mut c = OrderCheck::new(true, false);
        assert!(c.check(0, &ev(0, 0)).is_ok());
        assert!(c.check(1, &ev(1, 0)).is_ok());
        assert!(c.check(2, &ev(0, 1)).is_ok());
        assert!(c
            .check(2, &ev(0, 2))
            .unwrap_err()
            .contains("went from 2 to 2"));
        assert!(c.check(3, &ev(0, 1)).unwrap_err().contains("duplicate"));
        assert!(c.check(4, &ev(1, 2)).unwrap_err().contains("gap"));
        assert!(c.check(5, &ev(2, 7)).unwrap_err().contains("not 0"));
        assert_eq!((c.delivered, c.next(0), c.next(1)), (3, Some(2), Some(1)));
    }

    #[test]
    fn an_optional_consumer_may_skip_ahead_but_not_back() {
        let mut c = OrderCheck::new(false, true);
        c.expect_next(0, 5);
        assert!(c.check(10, &ev(0, 9)).is_ok());
        assert!(c.check(11, &ev(0, 3)).unwrap_err().contains("duplicate"));
        assert_eq!(c.firsts.get(&0), Some(&9));
    }
}
