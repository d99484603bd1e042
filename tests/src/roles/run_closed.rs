//! `run-closed`: a consumer that lives through stops and starts of its ring.
//!
//! Attaches a consumer (durable with `--name`, else anonymous) before anything is published
//! and runs it with `Consumer::run` and its wait strategy. Every event is checked (it
//! decodes; per producer the sequences are 0, 1, 2, ... with no gap; ring sequences
//! increase). When the ring is stopped and this consumer has consumed everything published
//! before the stop, `run` returns `RunExit::Closed`: it prints
//! `closed next=N run=R wakeups=W` and waits for the ring to run again, either by reading
//! `again` from stdin (`--on-closed stdin`; the parent starts the ring first) or by looking
//! at the run counter every millisecond (`--on-closed poll`). It then checks that the run
//! counter went up, prints `reopened run=R next=N`, and re-enters `run`: the first event of
//! the new run must be exactly at the stop sequence. `exit` on stdin (while closed) ends it
//! with `done delivered=D next=N closes=C wakeups=W late_wakeups=L net_wakeups=X
//! lasts=p:s,..`.

use std::cell::RefCell;
use std::io::BufRead;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use shmring::{ConsumerOptions, Event, RingState, RunExit, DEFAULT_BATCH_CAP};
use shmring_testkit::order::OrderCheck;
use shmring_testkit::report::format_per_producer;

use super::{RingArgs, Wait};

/// How a closed consumer learns that the ring runs again.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnClosed {
    /// Wait for `again` on stdin.
    Stdin,
    /// Look at the ring's run counter every millisecond.
    Poll,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
    /// Durable consumer name (anonymous if absent).
    #[arg(long)]
    name: Option<String>,
    #[arg(long, default_value_t = Wait::Block)]
    wait: Wait,
    #[arg(long, default_value_t = DEFAULT_BATCH_CAP)]
    batch_cap: usize,
    #[arg(long, value_enum, default_value_t = OnClosed::Stdin)]
    on_closed: OnClosed,
    /// Give up after this many seconds (shorter than the parent's 60 s watchdog).
    #[arg(long, default_value_t = 50)]
    deadline_secs: u64,
}

struct Checker {
    /// The order rule: every producer's events from 0, none missing.
    order: OrderCheck,
    /// The ring sequence the first event after a restart must carry.
    first_after_restart: Option<u64>,
    violation: Option<String>,
}

impl Checker {
    fn on_event(&mut self, ev: Event<'_>) {
        if self.violation.is_none() {
            if let Err(v) = self.check(&ev) {
                self.violation = Some(v);
            }
        }
    }

    fn check(&mut self, ev: &Event<'_>) -> Result<(), String> {
        let r = ev.sequence();
        if let Some(want) = self.first_after_restart.take() {
            if r != want {
                return Err(format!(
                    "the first event after the restart is at {r}, not at the stop sequence {want}"
                ));
            }
        }
        self.order.check(r, ev.bytes()).map(drop)
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let ring = a.ring.open()?;
    let opts = match &a.name {
        Some(n) => ConsumerOptions::durable(n.clone()),
        None => ConsumerOptions::anonymous(),
    }
    .wait(a.wait.strategy())
    .batch_cap(a.batch_cap);
    let mut c = ring.consumer(opts).context("attaching the consumer")?;
    let (tx, stdin) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_owned()).is_err() {
                break;
            }
        }
    });
    println!(
        "ready start={} index={} run={}",
        c.next_sequence(),
        c.index(),
        ring.run_number()
    );
    let deadline = Instant::now() + Duration::from_secs(a.deadline_secs);
    let checker = RefCell::new(Checker {
        order: OrderCheck::new(true, false),
        first_after_restart: None,
        violation: None,
    });
    let mut closes = 0u64;
    loop {
        let exit = c.run(
            |ev| checker.borrow_mut().on_event(ev),
            || checker.borrow().violation.is_some() || Instant::now() > deadline,
        )?;
        if let Some(v) = checker.borrow().violation.clone() {
            bail!(
                "violation after {} events: {v}",
                checker.borrow().order.delivered
            );
        }
        if exit == RunExit::Stopped {
            bail!("still running at the deadline, at {}", c.next_sequence());
        }
        closes += 1;
        let run = ring.run_number();
        println!(
            "closed next={} run={run} wakeups={}",
            c.next_sequence(),
            c.stats().wakeups
        );
        let told = loop {
            if Instant::now() > deadline {
                bail!("closed at run {run} and never started again");
            }
            match a.on_closed {
                OnClosed::Stdin => match stdin.recv_timeout(Duration::from_millis(100)) {
                    Ok(line) => break line,
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break "exit".to_owned(),
                },
                OnClosed::Poll => {
                    if let Ok(line) = stdin.try_recv() {
                        break line;
                    }
                    if ring.run_number() > run && ring.state() == Some(RingState::Running) {
                        break "again".to_owned();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        };
        match told.as_str() {
            "exit" => break,
            "again" => {}
            other => bail!("expected `again` or `exit` on stdin, got {other:?}"),
        }
        let now = ring.run_number();
        if now <= run {
            bail!("told the ring runs again, but its run counter is still {now} (was {run})");
        }
        println!("reopened run={now} next={}", c.next_sequence());
        checker.borrow_mut().first_after_restart = Some(c.next_sequence());
    }
    let ch = checker.into_inner();
    let s = c.stats();
    println!(
        "done delivered={} next={} closes={closes} wakeups={} late_wakeups={} net_wakeups={} lasts={}",
        ch.order.delivered,
        c.next_sequence(),
        s.wakeups,
        s.late_wakeups,
        s.net_wakeups,
        format_per_producer(&ch.order.lasts)
    );
    Ok(())
}
