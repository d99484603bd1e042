//! `no-waitv`: a thread parking on a `WakeSet` in a process whose seccomp filter makes
//! `futex_waitv(2)` fail with ENOSYS, as a kernel before 5.16 answers (and as a container's
//! seccomp profile that does not know the call may), driven line by line from stdin.
//!
//! The filter is installed before any ring is opened. The role checks that the system call
//! really fails, opens rings `r0` and `r1` with an anonymous consumer on each, builds the
//! set `one` (`r0`) and the set `two` (`r0` and `r1`), prints `ready`, then runs each
//! command it reads and prints one line for it:
//!
//! - `idle SET MS`: `WakeSet::park_until(now + MS, || false)` on SET: only a wake or the
//!   deadline ends it;
//! - `wait SET MS`: prints `parking`, then `park_until(now + MS, ..)` on SET with "a
//!   consumer of the set `has_pending`" as the last look;
//! - `exit` (or the end of stdin): the process exits.
//!
//! After either park it polls the set's consumers and answers `VERB set=SET reason=REASON
//! elapsed_us=E events=N from=RINGS parks=P wakeups=W late_wakeups=L net_wakeups=X
//! fallback_waits=F`: how the park ended (`Ready`, `Woken` or `Deadline`), how long it
//! took, the events the consumers then took and the index of the ring of each
//! (comma-separated, `-` for none), and what the set counted during that call.

use std::io::BufRead;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustix::io::Errno;
use rustix::thread::futex;
use rustix::time::ClockId;
use shmring::{Consumer, ConsumerOptions, Ring, WakeSet, WakeSetStats};
use shmring_testkit::seccomp;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Namespace of the rings `r0` and `r1`.
    #[arg(long)]
    ns: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let filter = seccomp::program(
        &[(libc::SYS_futex_waitv, seccomp::errno(libc::ENOSYS))],
        seccomp::ALLOW,
    );
    seccomp::install(&filter).context("installing the seccomp filter")?;
    // No words at all: the kernel answers EINVAL, the filter ENOSYS.
    match futex::waitv(&[], futex::WaitvFlags::empty(), None, ClockId::Monotonic) {
        Err(Errno::NOSYS) => {}
        other => bail!("futex_waitv still answers under the filter: {other:?}"),
    }
    let rings = ["r0", "r1"]
        .iter()
        .map(|name| {
            Ring::open(&args.ns, name)
                .with_context(|| format!("opening ring {name} in {}", args.ns))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut consumers = rings
        .iter()
        .map(|r| r.consumer(ConsumerOptions::anonymous()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut one = WakeSet::new();
    one.add(&consumers[0])?;
    let mut two = WakeSet::new();
    for c in &consumers {
        two.add(c)?;
    }
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading stdin")?;
        let words: Vec<&str> = line.split(' ').collect();
        let (verb, set_name, ms) = match words[..] {
            ["exit"] => break,
            [verb @ ("idle" | "wait"), set, ms] => {
                (verb, set, ms.parse::<u64>().context("VERB SET MS")?)
            }
            _ => bail!("unknown command {line:?}"),
        };
        let (set, members) = match set_name {
            "one" => (&mut one, &mut consumers[..1]),
            "two" => (&mut two, &mut consumers[..]),
            other => bail!("unknown set {other:?}"),
        };
        let before = set.stats();
        if verb == "wait" {
            println!("parking");
        }
        let start = Instant::now();
        let deadline = start + Duration::from_millis(ms);
        let reason = if verb == "idle" {
            set.park_until(deadline, || false)
        } else {
            set.park_until(deadline, || members.iter().any(|c| c.has_pending()))
        };
        let elapsed = start.elapsed();
        let from = drain(members)?;
        let s = delta(set.stats(), before);
        println!(
            "{verb} set={set_name} reason={reason:?} elapsed_us={} events={} from={} parks={} \
             wakeups={} late_wakeups={} net_wakeups={} fallback_waits={}",
            elapsed.as_micros(),
            from.len(),
            if from.is_empty() {
                "-".to_owned()
            } else {
                from.join(",")
            },
            s.parks,
            s.wakeups,
            s.late_wakeups,
            s.net_wakeups,
            s.fallback_waits,
        );
    }
    println!("done");
    Ok(())
}

/// Poll every consumer until all come back empty: the ring index of each event taken.
fn drain(consumers: &mut [Consumer]) -> anyhow::Result<Vec<String>> {
    let mut from = Vec::new();
    loop {
        let mut any = false;
        for (i, c) in consumers.iter_mut().enumerate() {
            let n = c.poll_once(|_| from.push(i.to_string()))?;
            any |= n > 0;
        }
        if !any {
            return Ok(from);
        }
    }
}

/// What a set counted between `before` and `after`.
fn delta(after: WakeSetStats, before: WakeSetStats) -> WakeSetStats {
    WakeSetStats {
        parks: after.parks - before.parks,
        wakeups: after.wakeups - before.wakeups,
        late_wakeups: after.late_wakeups - before.late_wakeups,
        net_wakeups: after.net_wakeups - before.net_wakeups,
        fallback_waits: after.fallback_waits - before.fallback_waits,
    }
}
