//! Seeded randomness for the fault-injection tests, and the odd process they need.
//!
//! Every fault test draws its decisions (which process to kill, after how many progress
//! lines or how long, which wait strategy, which batch cap) from an [`Rng`] made by
//! [`Rng::for_test`]. The seed comes from `SHMRING_FAULT_SEED` if set, else from the
//! system's randomness, and is always printed (on stdout, which the test harness shows
//! when a test fails):
//!
//! ```text
//! fault seed 0x5eed1234abcd: rerun with SHMRING_FAULT_SEED=0x5eed1234abcd
//! ```
//!
//! The seed reproduces the schedule of decisions, not the interleaving: a kill "after 3
//! progress lines" lands wherever the child has got to by then, which is the point.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::ops::RangeInclusive;

/// The environment variable that fixes the seed.
pub const SEED_ENV: &str = "SHMRING_FAULT_SEED";

/// A small, fast, seeded generator (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

/// The increment of splitmix64's state.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's output for state `x` (the state before its increment): a well-mixed 64-bit
/// function of `x`, also what seeds the payloads' filler.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Parse a seed written in decimal or as `0x` hex.
pub fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The run's seed: `SHMRING_FAULT_SEED`, else a fresh random one. Panics on a bad value.
pub fn seed() -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(v) => parse_seed(&v)
            .unwrap_or_else(|| panic!("{SEED_ENV}={v:?}: expected a number (decimal or 0x hex)")),
        Err(_) => RandomState::new().build_hasher().finish(),
    }
}

impl Rng {
    /// A generator from `seed` as it is.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The generator of test `test`: the run's [`seed`] (printed, with the way to rerun
    /// it) mixed with the test's name, so that one seed reproduces every test of a run.
    pub fn for_test(test: &str) -> Rng {
        let seed = seed();
        println!("fault seed {seed:#x} ({test}): rerun with {SEED_ENV}={seed:#x}");
        let mut h = 0xcbf2_9ce4_8422_2325_u64;
        for b in test.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng::new(seed ^ h)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.state);
        self.state = self.state.wrapping_add(GOLDEN);
        out
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        // Multiply-shift: no modulo bias worth mentioning at these sizes.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `range`.
    pub fn range(&mut self, range: RangeInclusive<u64>) -> u64 {
        let (lo, hi) = (*range.start(), *range.end());
        assert!(lo <= hi, "empty range {lo}..={hi}");
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One element of `items` (not empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A seed for a child process or a sub-generator.
    pub fn fork(&mut self) -> u64 {
        self.next_u64()
    }
}

/// The pid of a process that has exited and been reaped, and a start time it never had:
/// what a producer entry of a SIGKILLed process holds, for tests that fabricate one.
pub fn dead_process() -> (u32, u64) {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawning `true`");
    let pid = child.id();
    child.wait().expect("reaping `true`");
    // A start time no live process has (clock ticks since boot, far in the future), so the
    // pair stays dead even if the pid is reused meanwhile.
    (pid, u64::MAX / 2)
}

/// A `sleep` child standing for a process a test names by pid: killed and reaped when
/// dropped, so a failing test leaves none behind.
#[derive(Debug)]
pub struct Sleeper(std::process::Child);

impl Sleeper {
    /// A new one, with the pid the kernel hands out.
    pub fn spawn() -> Sleeper {
        Sleeper(
            std::process::Command::new("sleep")
                .arg("3600")
                .spawn()
                .expect("spawning `sleep`"),
        )
    }

    /// As root: a new one with pid `pid`, which its last process left (killed and reaped):
    /// a reused pid. The kernel's next pid is set through `/proc/sys/kernel/ns_last_pid`
    /// (root with a writable `/proc/sys`: not in a container that mounts it read-only); a
    /// process that forks in between takes it first, and this tries again once the pid is
    /// free, for at most [`crate::WAIT`]. Setting it moves the next pid back for the whole
    /// pid namespace: processes started meanwhile get pids freed not long ago.
    pub fn with_pid(pid: u32) -> Sleeper {
        assert!(pid > 1, "pid {pid} cannot be handed out again");
        crate::wait_until(&format!("a new process with pid {pid}"), || {
            // A thread's id is a pid too, and has its /proc entry as well.
            if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return None;
            }
            std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
                .expect("setting the next pid (/proc/sys/kernel/ns_last_pid: root, writable)");
            let s = Sleeper::spawn();
            (s.pid() == pid).then_some(s)
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it still runs (its pid names the process it started as).
    pub fn runs(&self) -> bool {
        let pid = self.pid();
        shmring::process::start_time(pid).is_some_and(|s| shmring::process::is_alive(pid, s))
    }

    /// Kill and reap it: its pid is free again.
    pub fn kill(self) {
        drop(self);
    }
}

/// Wait until the start-time clock (clock ticks since boot, what `/proc` gives as a
/// process's start time) has ticked past the reading `boot_ns` ([`shmring::boottime_ns`]):
/// a process started from then on has a start time above it.
pub fn tick_past(boot_ns: u64) {
    use shmring::process::boot_ticks;
    let at = boot_ticks(boot_ns).expect("the start-time tick rate");
    crate::eventually("a tick of the start-time clock", || {
        boot_ticks(shmring::boottime_ns()) > Some(at)
    });
}

/// As root: kill `taker` and, a tick of the start-time clock later, hand its pid to a new
/// [`Sleeper`]: a process under the same pid that started after anything that saw `taker`
/// run.
pub fn reuse_pid(taker: Sleeper) -> Sleeper {
    let pid = taker.pid();
    taker.kill();
    tick_past(shmring::boottime_ns());
    Sleeper::with_pid(pid)
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed("0x2a"), Some(42));
        assert_eq!(parse_seed(" 0X2A "), Some(42));
        assert_eq!(parse_seed("nope"), None);
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.range(3..=9), b.range(3..=9));
        }
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            assert!((3..=9).contains(&r.range(3..=9)));
            assert!(r.below(5) < 5);
        }
    }
}
