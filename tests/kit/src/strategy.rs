//! The wait strategies the tests pick from, by the short names their command lines use
//! (`--wait block`, `ROLE_WAIT=phased-park`): every kind the client offers, with the
//! parking and sleeping fallbacks of the phased back-off told apart.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use shmring::{Fallback, WaitStrategy};

/// A consumer wait strategy, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `BusySpin`.
    Spin,
    /// `Yielding` after 100 spins.
    Yield,
    /// `Sleeping`: 100 spins, 10 yields, then 100 µs sleeps.
    Sleep,
    /// `PhasedBackoff`: 100 spins, 10 yields, then park on the futex.
    PhasedPark,
    /// `PhasedBackoff`: 100 spins, 10 yields, then 50 µs sleeps.
    PhasedSleep,
    /// `Blocking`: park on the futex as soon as the ring is empty.
    Block,
    /// `TimeoutBlocking` with a 5 ms timeout: park, and give control back every 5 ms.
    TimeoutBlock,
    /// `Adaptive` (the client's default): spin, yield, then park.
    Adaptive,
}

/// Every strategy with its name.
const NAMES: [(Wait, &str); 8] = [
    (Wait::Spin, "spin"),
    (Wait::Yield, "yield"),
    (Wait::Sleep, "sleep"),
    (Wait::PhasedPark, "phased-park"),
    (Wait::PhasedSleep, "phased-sleep"),
    (Wait::Block, "block"),
    (Wait::TimeoutBlock, "timeout-block"),
    (Wait::Adaptive, "adaptive"),
];

impl Wait {
    /// The client's strategy.
    pub fn strategy(self) -> WaitStrategy {
        match self {
            Wait::Spin => WaitStrategy::BusySpin,
            Wait::Yield => WaitStrategy::Yielding { spins: 100 },
            Wait::Sleep => WaitStrategy::sleeping(),
            Wait::PhasedPark => WaitStrategy::PhasedBackoff {
                spins: 100,
                yields: 10,
                fallback: Fallback::Park,
            },
            Wait::PhasedSleep => WaitStrategy::PhasedBackoff {
                spins: 100,
                yields: 10,
                fallback: Fallback::Sleep(Duration::from_micros(50)),
            },
            Wait::Block => WaitStrategy::Blocking,
            Wait::TimeoutBlock => WaitStrategy::TimeoutBlocking {
                timeout: Duration::from_millis(5),
            },
            Wait::Adaptive => WaitStrategy::Adaptive,
        }
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = NAMES
            .iter()
            .find(|(w, _)| w == self)
            .map_or("?", |(_, n)| n);
        f.write_str(name)
    }
}

impl FromStr for Wait {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        NAMES
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(w, _)| *w)
            .ok_or_else(|| {
                let names: Vec<&str> = NAMES.iter().map(|(_, n)| *n).collect();
                format!("unknown wait strategy {s:?}: one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for (w, n) in NAMES {
            assert_eq!(w.to_string(), n);
            assert_eq!(n.parse::<Wait>(), Ok(w));
        }
        assert!("busy-spin".parse::<Wait>().is_err());
    }
}
