//! `wake-set`: one thread stepping consumers on many rings, parking once on a `WakeSet`.
//!
//! Opens rings `<prefix>0 .. <prefix>N-1`, attaches one consumer to each and puts them all
//! in one `WakeSet`. Then, until `--events` events arrived: `poll_once` on every consumer;
//! when all came back empty, print `parking` and park on the set until any consumer
//! `has_pending` (the last look). Each event is checked (it decodes; its producer id is the
//! index of the ring it came from) and reported as `ev ring=<index> seq=<ring sequence>
//! origin=<producer sequence>`.
//!
//! Prints `ready rings=N` after attaching and at the end
//! `done events=E parks=P wakeups=W late_wakeups=L net_wakeups=X woken=K ready=R`: the
//! set's counters (`parks` that slept, `wakeups` by a wake, `late_wakeups` by a timeout
//! after a word moved, `net_wakeups` by the 50 ms net while an event was waiting and no
//! word moved), and how the calls to `park_until` ended (`Woken`, or `Ready`: the last
//! look of a park found the event).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shmring::{ConsumerOptions, Ring, WakeReason, WakeSet};
use shmring_testkit::payload::decode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Namespace of the rings.
    #[arg(long)]
    ns: String,
    /// Ring names are this prefix and an index.
    #[arg(long, default_value = "r")]
    prefix: String,
    /// Number of rings.
    #[arg(long)]
    rings: usize,
    /// Exit after this many events.
    #[arg(long)]
    events: u64,
    /// Give up after this many seconds (shorter than the parent's 60 s watchdog).
    #[arg(long, default_value_t = 50)]
    deadline_secs: u64,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let rings = (0..a.rings)
        .map(|i| {
            let name = format!("{}{i}", a.prefix);
            Ring::open(&a.ns, &name).with_context(|| format!("opening ring {name}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut consumers = rings
        .iter()
        .map(|r| r.consumer(ConsumerOptions::anonymous()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut set = WakeSet::new();
    for c in &consumers {
        set.add(c)?;
    }
    println!("ready rings={}", set.len());
    let deadline = Instant::now() + Duration::from_secs(a.deadline_secs);
    let mut got = 0u64;
    let (mut woken, mut ready) = (0u64, 0u64);
    let mut violation = None;
    while got < a.events {
        let mut any = false;
        for (i, c) in consumers.iter_mut().enumerate() {
            let n = c.poll_once(|ev| match decode(ev.bytes()) {
                Ok(o) if o.producer as usize == i => {
                    println!("ev ring={i} seq={} origin={}", ev.sequence(), o.seq)
                }
                Ok(o) => violation = Some(format!("ring {i} carried {o:?}")),
                Err(e) => violation = Some(format!("ring {i}: {e}")),
            })?;
            if let Some(v) = violation.take() {
                bail!("{v}");
            }
            any |= n > 0;
            got += n as u64;
        }
        if !any {
            println!("parking");
            match set.park_until(deadline, || consumers.iter().any(|c| c.has_pending())) {
                WakeReason::Woken => woken += 1,
                WakeReason::Ready => ready += 1,
                WakeReason::Deadline => bail!("{got} of {} events by the deadline", a.events),
            }
        }
    }
    let s = set.stats();
    println!(
        "done events={got} parks={} wakeups={} late_wakeups={} net_wakeups={} woken={woken} \
         ready={ready}",
        s.parks, s.wakeups, s.late_wakeups, s.net_wakeups
    );
    Ok(())
}
