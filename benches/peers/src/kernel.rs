//! The kernel's own channels between two processes: a pipe, a Unix stream socket
//! (`socketpair`), and an eventfd. What a user reaches for first; every message is a system
//! call on each side, and a receiver with nothing to read sleeps in the kernel.
//!
//! Messages are 16 bytes `[sequence, send time]`. An eventfd carries only a counter, so its
//! sender puts the message in a shared line of the control page and the eventfd is the
//! doorbell (the way it is used in practice).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustix::io::{read, write, Errno};

use crate::kit::{self, new_hist, now_ns, Args, Ctl, Measured, Pacer, Roles};
use crate::Plan;

/// Which kernel channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `pipe(2)`.
    Pipe,
    /// `socketpair(AF_UNIX, SOCK_STREAM)`.
    Uds,
    /// `eventfd(2)` doorbell plus a shared line.
    Eventfd,
}

impl Kind {
    /// Short name used in row names and role arguments.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pipe => "pipe",
            Kind::Uds => "unix-socket",
            Kind::Eventfd => "eventfd",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "pipe" => Kind::Pipe,
            "unix-socket" => Kind::Uds,
            "eventfd" => Kind::Eventfd,
            _ => bail!("unknown kernel channel {s}"),
        })
    }

    /// A channel: (sending end, receiving end), both inheritable (no CLOEXEC).
    fn channel(self) -> Result<(OwnedFd, OwnedFd)> {
        Ok(match self {
            Kind::Pipe => {
                let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::empty())?;
                (w, r)
            }
            Kind::Uds => rustix::net::socketpair(
                rustix::net::AddressFamily::UNIX,
                rustix::net::SocketType::STREAM,
                rustix::net::SocketFlags::empty(),
                None,
            )?,
            Kind::Eventfd => {
                let fd = rustix::event::eventfd(0, rustix::event::EventfdFlags::empty())?;
                let dup = rustix::io::dup(&fd)?;
                (fd, dup)
            }
        })
    }
}

/// One direction of a channel, in a role process.
struct End {
    kind: Kind,
    fd: OwnedFd,
    /// The control-page line carrying an eventfd's message.
    line: usize,
}

impl End {
    fn send(&self, ctl: &Ctl, seq: u64, stamp: u64) -> Result<()> {
        match self.kind {
            Kind::Eventfd => {
                let l = ctl.line(self.line);
                l.stamp.store(stamp, Ordering::Relaxed);
                // Release: the stamp is visible to the receiver's Acquire load of `seq`.
                l.seq.store(seq, Ordering::Release);
                write_all(&self.fd, &1u64.to_ne_bytes())
            }
            _ => {
                let mut msg = [0u8; 16];
                msg[..8].copy_from_slice(&seq.to_ne_bytes());
                msg[8..].copy_from_slice(&stamp.to_ne_bytes());
                write_all(&self.fd, &msg)
            }
        }
    }

    fn recv(&self, ctl: &Ctl) -> Result<(u64, u64)> {
        match self.kind {
            Kind::Eventfd => {
                let mut b = [0u8; 8];
                read_exact(&self.fd, &mut b)?;
                let l = ctl.line(self.line);
                // Acquire: pairs with the sender's Release store of `seq`.
                let seq = l.seq.load(Ordering::Acquire);
                Ok((seq, l.stamp.load(Ordering::Relaxed)))
            }
            _ => {
                let mut b = [0u8; 16];
                read_exact(&self.fd, &mut b)?;
                let seq = u64::from_ne_bytes(b[..8].try_into().unwrap_or_default());
                let stamp = u64::from_ne_bytes(b[8..].try_into().unwrap_or_default());
                Ok((seq, stamp))
            }
        }
    }
}

fn write_all(fd: &OwnedFd, mut buf: &[u8]) -> Result<()> {
    while !buf.is_empty() {
        match write(fd, buf) {
            Ok(n) => buf = &buf[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e).context("write"),
        }
    }
    Ok(())
}

fn read_exact(fd: &OwnedFd, mut buf: &mut [u8]) -> Result<()> {
    while !buf.is_empty() {
        match read(fd, &mut *buf) {
            Ok(0) => bail!("unexpected end of stream"),
            Ok(n) => buf = &mut buf[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e).context("read"),
        }
    }
    Ok(())
}

/// Take the inherited descriptors `fds` (a comma list); close all but the wanted ones.
fn take_fds(args: &Args) -> Result<Vec<(RawFd, OwnedFd)>> {
    let mut out = Vec::new();
    for s in args.str("fds")?.split(',') {
        let raw: RawFd = s.parse()?;
        // SAFETY: the harness created this descriptor without CLOEXEC just before starting
        // this process and passed its number; nothing else in this process owns it.
        out.push((raw, unsafe { OwnedFd::from_raw_fd(raw) }));
    }
    Ok(out)
}

fn end_of(args: &Args, fds: &mut Vec<(RawFd, OwnedFd)>, key: &str, line: usize) -> Result<End> {
    let want: RawFd = args.num(key)?;
    let i = fds
        .iter()
        .position(|(r, _)| *r == want)
        .with_context(|| format!("descriptor {want} was not inherited"))?;
    Ok(End {
        kind: Kind::parse(args.str("kind")?)?,
        fd: fds.swap_remove(i).1,
        line,
    })
}

/// Hand-off latency through `kind`: paced (`plan.interval`) one way, or back-to-back
/// ping-pong when `pingpong`. The receiver records send-to-receive time.
pub fn latency(kind: Kind, plan: &Plan, pingpong: bool, tag: &str) -> Result<Measured> {
    let ctl_path = plan.dir.join(format!("{tag}.ctl"));
    let _ctl = Ctl::create(&ctl_path)?;
    let (tx0, rx0) = kind.channel()?;
    let (tx1, rx1) = kind.channel()?;
    let all = [&tx0, &rx0, &tx1, &rx1]
        .iter()
        .map(|f| f.as_raw_fd().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let common = vec![
        format!("kind={}", kind.name()),
        format!("ctl={}", ctl_path.display()),
        format!("fds={all}"),
        format!("count={}", plan.count),
        format!("warmup={}", plan.warmup),
        format!("interval_ns={}", plan.interval.as_nanos()),
        format!("pingpong={}", u8::from(pingpong)),
    ];
    let mut roles = Roles::new(&plan.dir, tag);
    let mut a = common.clone();
    a.extend([
        format!("rx={}", rx0.as_raw_fd()),
        format!("tx={}", tx1.as_raw_fd()),
    ]);
    a.extend(plan.cpu_arg(1));
    roles.spawn("peer-kernel-rx", &a)?;
    let mut a = common;
    a.extend([
        format!("tx={}", tx0.as_raw_fd()),
        format!("rx={}", rx1.as_raw_fd()),
    ]);
    a.extend(plan.cpu_arg(0));
    roles.spawn("peer-kernel-tx", &a)?;
    drop((tx0, rx0, tx1, rx1));
    let mut parts = roles.finish(plan.timeout)?.into_iter();
    let mut m = Measured::default();
    if let (Some(rx), Some(tx)) = (parts.next(), parts.next()) {
        m.absorb("", rx);
        m.absorb("tx_", tx);
    }
    let cpu = m.get("tx_cpu_share");
    if let Some(c) = cpu {
        m.set("producer_cpu", c);
    }
    if let Some(c) = m.get("cpu_share") {
        m.set("consumer_cpu", c);
    }
    std::fs::remove_file(&ctl_path).ok();
    Ok(m)
}

fn role_latency_rx(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let mut fds = take_fds(args)?;
    let rx = end_of(args, &mut fds, "rx", 0)?;
    let tx = end_of(args, &mut fds, "tx", 1)?;
    drop(fds);
    let total = args.num::<u64>("count")? + args.num::<u64>("warmup")?;
    let warmup: u64 = args.num("warmup")?;
    let pingpong = args.num::<u8>("pingpong")? != 0;
    let mut hist = new_hist();
    let (mut c0, mut w0) = (kit::thread_cpu_ns(), now_ns());
    let mut started = false;
    ctl.arrive();
    // Until the last message. An eventfd receiver late by more than the pacing gap finds
    // the line already carrying a newer message (and its doorbells coalesced): it records
    // the newest once and counts the ones it missed.
    let (mut next, mut missed) = (0u64, 0u64);
    while next < total {
        let (seq, stamp) = rx.recv(&ctl)?;
        let now = now_ns();
        if seq < next {
            continue;
        }
        if seq >= warmup {
            hist.saturating_record(now.saturating_sub(stamp));
            if !started {
                // CPU over the recorded part only.
                started = true;
                (c0, w0) = (kit::thread_cpu_ns(), now_ns());
            }
        }
        missed += seq - next;
        if pingpong {
            tx.send(&ctl, seq, 0)?;
        }
        next = seq + 1;
    }
    let (c1, w1) = (kit::thread_cpu_ns(), now_ns());
    let mut m = Measured {
        hist: Some(hist),
        ..Default::default()
    };
    m.set("cpu_share", (c1 - c0) as f64 / (w1 - w0).max(1) as f64)
        .set("missed", missed as f64);
    kit::report(args, &m)
}

fn role_latency_tx(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let mut fds = take_fds(args)?;
    let tx = end_of(args, &mut fds, "tx", 0)?;
    let rx = end_of(args, &mut fds, "rx", 1)?;
    drop(fds);
    let total = args.num::<u64>("count")? + args.num::<u64>("warmup")?;
    let pingpong = args.num::<u8>("pingpong")? != 0;
    ctl.wait_ready(1, Duration::from_secs(10))?;
    let mut pacer = Pacer::new(Duration::from_nanos(args.num("interval_ns")?));
    let (c0, w0) = (kit::thread_cpu_ns(), now_ns());
    for i in 0..total {
        if pingpong {
            tx.send(&ctl, i, now_ns())?;
            rx.recv(&ctl)?;
        } else {
            let due = pacer.wait(i);
            tx.send(&ctl, i, due)?;
        }
    }
    let (c1, w1) = (kit::thread_cpu_ns(), now_ns());
    let mut m = Measured::default();
    m.set("cpu_share", (c1 - c0) as f64 / (w1 - w0).max(1) as f64);
    if !pingpong {
        m.set("pacer_late_p99_ns", kit::pct(&pacer.late, 0.99) as f64)
            .set("pacer_held_p99_ns", kit::pct(&pacer.held, 0.99) as f64);
    }
    kit::report(args, &m)
}

/// 1P1C throughput of 8-byte messages through `kind` for `plan.duration`: one system call
/// per message on the sending side; the receiver reads whatever is there (64 KiB at a time).
pub fn throughput(kind: Kind, plan: &Plan, tag: &str) -> Result<Measured> {
    let ctl_path = plan.dir.join(format!("{tag}.ctl"));
    let _ctl = Ctl::create(&ctl_path)?;
    let (tx, rx) = kind.channel()?;
    let all = format!("{},{}", tx.as_raw_fd(), rx.as_raw_fd());
    let common = vec![
        format!("kind={}", kind.name()),
        format!("ctl={}", ctl_path.display()),
        format!("fds={all}"),
        format!("duration_ns={}", plan.duration.as_nanos()),
        format!("best_window_ns={}", kit::best_window(plan.duration)),
    ];
    let mut roles = Roles::new(&plan.dir, tag);
    let mut a = common.clone();
    a.push(format!("rx={}", rx.as_raw_fd()));
    a.extend(plan.cpu_arg(1));
    roles.spawn("peer-kernel-sink", &a)?;
    let mut a = common;
    a.push(format!("tx={}", tx.as_raw_fd()));
    a.extend(plan.cpu_arg(0));
    roles.spawn("peer-kernel-source", &a)?;
    drop((tx, rx));
    let mut parts = roles.finish(plan.timeout)?.into_iter();
    let (Some(sink), Some(src)) = (parts.next(), parts.next()) else {
        bail!("missing results");
    };
    let delivered = sink.need("delivered")?;
    let window = sink.need("t_end")? - src.need("t_start")?;
    let mut m = Measured::default();
    m.set("delivered", delivered)
        .set("published", src.need("published")?)
        .set("ops_per_sec", delivered / (window.max(1.0) / 1e9))
        .set("consumer_cpu", sink.need("cpu_share")?)
        .set("producer_cpu", src.need("cpu_share")?);
    if let Some(r) = sink.get("best_ops_per_sec") {
        m.set("best_ops_per_sec", r);
    }
    std::fs::remove_file(&ctl_path).ok();
    Ok(m)
}

fn role_source(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let mut fds = take_fds(args)?;
    let tx = end_of(args, &mut fds, "tx", 0)?;
    drop(fds);
    let dur: u64 = args.num("duration_ns")?;
    ctl.wait_ready(1, Duration::from_secs(10))?;
    let c0 = kit::thread_cpu_ns();
    let t_start = now_ns();
    let end = t_start + dur;
    let mut n = 0u64;
    let one = 1u64.to_ne_bytes();
    loop {
        for _ in 0..64 {
            match tx.kind {
                Kind::Eventfd => write_all(&tx.fd, &one)?,
                _ => write_all(&tx.fd, &n.to_ne_bytes())?,
            }
            n += 1;
        }
        if now_ns() >= end {
            break;
        }
    }
    let t1 = now_ns();
    let c1 = kit::thread_cpu_ns();
    if tx.kind == Kind::Eventfd {
        ctl.line(0).seq.store(n, Ordering::Relaxed);
        // Release: the total is visible to the sink once it sees `done`.
        ctl.done().store(1, Ordering::Release);
        // The doorbell that gets a sleeping sink to look at `done` (not counted).
        write_all(&tx.fd, &one)?;
    }
    drop(tx);
    let mut m = Measured::default();
    m.set("t_start", t_start as f64)
        .set("published", n as f64)
        .set("cpu_share", (c1 - c0) as f64 / (t1 - t_start).max(1) as f64);
    kit::report(args, &m)
}

fn role_sink(args: &Args) -> Result<()> {
    args.pin();
    let ctl = args.ctl()?;
    let mut fds = take_fds(args)?;
    let rx = end_of(args, &mut fds, "rx", 0)?;
    drop(fds);
    let (c0, w0) = (kit::thread_cpu_ns(), now_ns());
    ctl.arrive();
    let mut buf = vec![0u8; 64 * 1024];
    let mut delivered = 0u64;
    let mut bytes = 0u64;
    let mut meter = kit::RateMeter::new();
    loop {
        match read(rx.fd.as_fd(), &mut buf[..]) {
            Ok(0) => break,
            Ok(n) => {
                if rx.kind == Kind::Eventfd {
                    delivered += u64::from_ne_bytes(buf[..8].try_into().unwrap_or_default());
                    // Acquire: pairs with the source's Release store of `done`.
                    if ctl.done().load(Ordering::Acquire) != 0 {
                        let total = ctl.line(0).seq.load(Ordering::Relaxed);
                        if delivered >= total {
                            delivered = total;
                            break;
                        }
                    }
                    meter.tick(delivered);
                } else {
                    bytes += n as u64;
                    meter.tick(bytes / 8);
                }
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e).context("read"),
        }
    }
    if rx.kind != Kind::Eventfd {
        delivered = bytes / 8;
    }
    let (c1, w1) = (kit::thread_cpu_ns(), now_ns());
    let mut m = Measured::default();
    m.set("delivered", delivered as f64)
        .set("t_end", w1 as f64)
        .set("cpu_share", (c1 - c0) as f64 / (w1 - w0).max(1) as f64);
    if let Some(r) = meter.best(args.num("best_window_ns")?) {
        m.set("best_ops_per_sec", r);
    }
    kit::report(args, &m)
}

/// Run a kernel-peer role, if `role` is one.
pub fn run_role(role: &str, args: &Args) -> Option<Result<()>> {
    Some(match role {
        "peer-kernel-rx" => role_latency_rx(args),
        "peer-kernel-tx" => role_latency_tx(args),
        "peer-kernel-source" => role_source(args),
        "peer-kernel-sink" => role_sink(args),
        _ => return None,
    })
}
