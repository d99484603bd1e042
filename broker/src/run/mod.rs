//! `broker run`: the daemon.
//!
//! ```text
//! take the namespace lock ──> open/create configured rings, adopt every other segment
//!        │                     (epoch + 1 each), bind the control socket
//!        ▼
//! loop: epoll_wait(pidfds + signal pipe, timeout = sweep period)
//!        ├─ a pidfd fired: that client died -> sweep now (DEAD within one wake-up)
//!        ├─ SIGTERM/SIGINT: stop sweeping, remove the socket, exit 0 (rings stay)
//!        ├─ SIGHUP: reload the config file (`reload`)
//!        └─ timeout: sweep (stalls, deaths, repairs, report)
//! ```
//!
//! The broker is never on the data path: kill it at any moment and producers and
//! consumers carry on; the next `broker run` adopts the rings as they are.

mod consumer_ops;
pub(crate) mod control;
mod health;
mod lock;
mod metrics;
mod ops;
pub(crate) use ops::DRAIN_TIMEOUT;
mod policy;
mod registry;
mod reload;
mod repair;
mod serial;
mod sweep;
mod until;
mod watch;

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rustix::event::epoll;
use tracing::{error, info, warn};

use crate::config::Config;
use registry::Broker;
use watch::Watches;

/// Epoll token of the signal pipe of SIGTERM and SIGINT.
const SIGNAL_TOKEN: u64 = 1;
/// Epoll token of the signal pipe of SIGHUP.
const HUP_TOKEN: u64 = 2;

/// Options of `broker run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Config file (else the embedded default).
    pub config: Option<PathBuf>,
    /// Namespace.
    pub namespace: String,
    /// Where to serve metrics (overrides the config's `metrics_listen`).
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// Run the broker until SIGTERM or SIGINT.
pub fn run(opts: RunOptions) -> anyhow::Result<()> {
    init_logging();
    let config = match &opts.config {
        Some(path) => Config::load(path)?,
        None => Config::embedded()?,
    };
    let gid = config.broker_gid()?;
    let ns = opts.namespace;
    let dir = shmring::names::namespace_dir(&ns)?;
    lock::ensure_dir(&dir, gid)
        .with_context(|| format!("cannot create the namespace directory {}", dir.display()))?;
    let mut held = lock::acquire(&ns, &dir)?;

    let epfd: Arc<OwnedFd> =
        Arc::new(epoll::create(epoll::CreateFlags::CLOEXEC).context("epoll_create")?);
    let (sig_read, sig_write) = UnixStream::pair().context("signal pipe")?;
    sig_read.set_nonblocking(true)?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::low_level::pipe::register(sig, sig_write.try_clone()?)
            .context("installing signal handlers")?;
    }
    let (hup_read, hup_write) = UnixStream::pair().context("signal pipe")?;
    hup_read.set_nonblocking(true)?;
    signal_hook::low_level::pipe::register(signal_hook::consts::SIGHUP, hup_write)
        .context("installing signal handlers")?;
    for (fd, token) in [
        (sig_read.as_fd(), SIGNAL_TOKEN),
        (hup_read.as_fd(), HUP_TOKEN),
    ] {
        epoll::add(
            &*epfd,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN,
        )
        .context("epoll_ctl")?;
    }

    let config_path = opts.config.clone();
    let metrics_at = opts.metrics_listen.or(config.broker.metrics_listen);
    let mut broker = Broker::new(
        ns.clone(),
        config,
        gid,
        held.epoch,
        Watches::new(epfd.clone()),
    );
    broker.open_configured();
    broker.rescan(true);
    sweep::sweep(&mut broker);
    let period = broker.period;
    let rings = broker.rings.len();
    let shared = Arc::new(Mutex::new(broker));

    // The metrics address first: one in use ends the start before the control socket
    // exists, so nothing is left for the next start or `status` to find.
    if let Some(addr) = metrics_at {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        let local = listener.local_addr().context("metrics address")?;
        let serving = shared.clone();
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || metrics::serve(listener, serving))
            .context("starting the metrics thread")?;
        info!(address = %local, "metrics at http://{local}/metrics");
    }
    let sock = control::socket_path(&dir);
    let listener = control::bind(&sock, gid)
        .with_context(|| format!("cannot bind the control socket {}", sock.display()))?;
    let access = control::Access {
        uid: rustix::process::geteuid().as_raw(),
        gid,
    };
    let serving = shared.clone();
    if let Err(e) = std::thread::Builder::new()
        .name("control-accept".into())
        .spawn(move || control::serve(listener, serving, access))
    {
        let _ = std::fs::remove_file(&sock);
        return Err(e).context("starting the control thread");
    }
    info!(namespace = %ns, pid = std::process::id(), epoch = held.epoch, rings,
        period = ?period, socket = %sock.display(), "broker ready");
    // systemd (Type=notify): the rings exist and the socket listens, so units ordered
    // after this one find them. Without $NOTIFY_SOCKET this does nothing.
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::MainPid(std::process::id()),
        sd_notify::NotifyState::Status(&format!(
            "namespace {ns}: {rings} ring(s), epoch {}",
            held.epoch
        )),
    ]);

    let signals = Signals {
        stop: sig_read,
        hup: hup_read,
        reloads: reload::Reloads::new(config_path),
    };
    sweep_loop(&shared, &epfd, &signals, &mut held)?;
    notify(&[sd_notify::NotifyState::Stopping]);
    info!(namespace = %ns, "stopping on signal: sweeps end, rings stay");
    let _ = std::fs::remove_file(&sock);
    drop(held);
    Ok(())
}

/// The signal pipes the sweep loop waits on.
struct Signals {
    /// SIGTERM, SIGINT.
    stop: UnixStream,
    /// SIGHUP.
    hup: UnixStream,
    /// The config file to reload on SIGHUP.
    reloads: reload::Reloads,
}

/// Empty a non-blocking signal pipe.
fn drain_pipe(mut pipe: &UnixStream) {
    let mut buf = [0u8; 64];
    while matches!(pipe.read(&mut buf), Ok(n) if n > 0) {}
}

/// Wait for deaths, signals or the period; sweep after each wake-up, and check that the
/// namespace lock is still this broker's. Returns on SIGTERM or SIGINT, and with an error
/// when another broker took the lock (the socket is then that broker's, and stays).
fn sweep_loop(
    shared: &Arc<Mutex<Broker>>,
    epfd: &OwnedFd,
    signals: &Signals,
    held: &mut lock::NamespaceLock,
) -> anyhow::Result<()> {
    let empty = epoll::Event {
        flags: epoll::EventFlags::empty(),
        data: epoll::EventData::new_u64(0),
    };
    let mut events = [empty; 32];
    loop {
        // Until the next sweep is due, but never longer than a rescan's interval: a ring
        // created meanwhile (by a client, or `broker create` with a shorter stall threshold,
        // which shortens the period) is taken up then, not after the period this wait began
        // with (up to 12 hours).
        let wait = {
            let b = ops::lock(shared);
            b.period
                .saturating_sub(since_last_sweep(&b))
                .min(registry::RESCAN_EVERY)
        };
        let timeout = rustix::event::Timespec::try_from(wait).context("sweep period")?;
        let n = match epoll::wait(epfd, &mut events[..], Some(&timeout)) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e).context("epoll_wait"),
        };
        let tokens = || events[..n].iter().map(|ev| ev.data.u64());
        if tokens().any(|t| t == SIGNAL_TOKEN) {
            drain_pipe(&signals.stop);
            return Ok(());
        }
        // Before the broker's lock is taken: a reload takes it (on this thread if no other
        // can be started).
        if tokens().any(|t| t == HUP_TOKEN) {
            drain_pipe(&signals.hup);
            signals.reloads.start(shared);
        }
        let mut broker = ops::lock(shared);
        for token in tokens().filter(|&t| t != HUP_TOKEN) {
            if let Some((pid, _)) = broker.watches.exited(token) {
                info!(pid, "client process exited");
            } else {
                warn!(token, "unknown epoll token");
            }
        }
        if n == 0 && !sweep_due(&mut broker) {
            continue;
        }
        sweep::sweep(&mut broker);
        drop(broker);
        if let Err(e) = held.check() {
            error!("the namespace lock was taken away: {e}; exiting, so that one broker sweeps the rings");
            return Err(e).context("the namespace lock was taken away; exiting");
        }
    }
}

/// After a wait that ended with nothing to act on: whether to sweep now, because the period
/// has passed since the last sweep, or a ring was taken up and no sweep has looked at it yet
/// (found by this look at the directory, or by a control request's: a new ring, or a file
/// that replaced a tracked one).
fn sweep_due(broker: &mut Broker) -> bool {
    broker.rescan(false);
    broker.rings.values().any(|t| t.last.is_none()) || since_last_sweep(broker) >= broker.period
}

/// Time since the last sweep ended (all of it without one): the period is a pause between
/// sweeps, so a sweep that takes longer than the period is not followed by another at once.
fn since_last_sweep(broker: &Broker) -> Duration {
    broker.last_sweep.map_or(Duration::MAX, |t| {
        t.elapsed()
            .saturating_sub(broker.last_sweep_took.unwrap_or_default())
    })
}

/// Tell systemd (a failure is logged: the broker works the same without it).
fn notify(state: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        warn!("sd_notify failed: {e}");
    }
}

fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A log line that cannot be written (stderr's reader gone: `broker run 2>&1 | grep -m1
    // ready`) is dropped. The layer's default reports such a failure with `eprintln!` to
    // the same stderr, which panics on the closed pipe, in the sweep loop or in a control
    // thread after its change was made and before its reply.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
