//! `no-membarrier`: a producer process whose seccomp filter makes `membarrier(2)` fail with
//! EPERM (as a container runtime's default profile does), driven line by line from stdin.
//!
//! The filter is installed before the ring is opened, so the client's one look at
//! membarrier finds it missing: this process raises the ring's fence mode when it attaches
//! and cannot issue the heavy fence that ends another producer's lone claims or closes a
//! single-producer ring (docs/FAILURE_MODES.md, known gap 6). It checks that the system
//! call really fails, attaches a producer, prints `ready`, then runs each command it reads
//! and prints one line for it:
//!
//! - `try TEXT`: `Producer::try_publish` of TEXT: `try ok=SEQ` or `try err=KIND`;
//! - `timeout MS TEXT`: `Producer::publish_timeout`: `timeout ok=SEQ` or `timeout err=KIND`;
//! - `publish TEXT`: `Producer::publish`, which may wait without bound (the parent's
//!   deadline and this process's watchdog bound it): `publish ok=SEQ` or `publish err=KIND`;
//! - `stop`: `Ring::stop`: `stop ok=SEQ` or `stop err=KIND`;
//! - `finish`: `Ring::finish_interrupted`, as a broker's sweep calls it:
//!   `finish ok=STATE,FINISHED` (`Stopped,true`: it finished a dead owner's stop) or
//!   `finish err=KIND`;
//! - `exit` (or the end of stdin): the producer detaches and the process exits.
//!
//! KIND is the error's variant in kebab case (`full`, `timeout`, `no-barrier`, ...).

use std::io::BufRead;
use std::time::Duration;

use anyhow::{bail, Context};
use shmring::{LifecycleError, PublishError, TryPublishError};
use shmring_testkit::seccomp;

use super::RingArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    ring: RingArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let filter = seccomp::program(
        &[(libc::SYS_membarrier, seccomp::errno(libc::EPERM))],
        seccomp::ALLOW,
    );
    seccomp::install(&filter).context("installing the seccomp filter")?;
    if !rustix::thread::membarrier_query().is_empty() {
        bail!("membarrier still answers under the filter");
    }
    let ring = args.ring.open()?;
    let mut producer = ring.producer().context("attaching a producer")?;
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading stdin")?;
        let (command, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let answer = match command {
            "try" => outcome(producer.try_publish(rest.as_bytes()), try_kind),
            "timeout" => {
                let (ms, text) = rest.split_once(' ').context("timeout MS TEXT")?;
                let ms: u64 = ms.parse().context("timeout MS TEXT")?;
                outcome(
                    producer.publish_timeout(text.as_bytes(), Duration::from_millis(ms)),
                    try_kind,
                )
            }
            "publish" => outcome(producer.publish(rest.as_bytes()), publish_kind),
            "stop" => outcome(ring.stop(), lifecycle_kind),
            "finish" => match ring.finish_interrupted() {
                Ok((state, finished)) => format!("ok={state:?},{finished}"),
                Err(e) => format!("err={}", lifecycle_kind(&e)),
            },
            "exit" => break,
            other => bail!("unknown command {other:?}"),
        };
        println!("{command} {answer}");
    }
    drop(producer);
    println!("done");
    Ok(())
}

fn outcome<E>(result: Result<u64, E>, kind: fn(&E) -> &'static str) -> String {
    match result {
        Ok(seq) => format!("ok={seq}"),
        Err(e) => format!("err={}", kind(&e)),
    }
}

fn try_kind(e: &TryPublishError) -> &'static str {
    match e {
        TryPublishError::Full => "full",
        TryPublishError::Timeout => "timeout",
        TryPublishError::Closed => "closed",
        TryPublishError::Deleted => "deleted",
        _ => "other",
    }
}

fn publish_kind(e: &PublishError) -> &'static str {
    match e {
        PublishError::Closed => "closed",
        PublishError::Deleted => "deleted",
        _ => "other",
    }
}

fn lifecycle_kind(e: &LifecycleError) -> &'static str {
    match e {
        LifecycleError::NoBarrier => "no-barrier",
        LifecycleError::Busy { .. } => "busy",
        LifecycleError::AlreadyRunning => "already-running",
        _ => "other",
    }
}
