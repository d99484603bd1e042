//! The exporter: a consumer on the source ring that publishes its events to Zenoh.
//!
//! **Reliable mode.** The exporter is a durable *required* consumer. It reads ahead of its
//! committed position (`Consumer::read_ahead`), sends what it read as batches, and commits
//! (`Consumer::commit_to`) only up to what the importer confirmed. The source ring is
//! therefore the replay buffer: while the importer or the link is down, unconfirmed events
//! stay in the ring and the producers feel the back-pressure exactly as they would a slow
//! local consumer. The exporter sends again from the confirmed position when
//!
//! - the importer asks (an ack with the resend flag: it saw a batch start beyond what it
//!   has, so something in between was lost, typically while it was down), or
//! - no confirmation arrived for `--ack-timeout` while events are outstanding, or
//! - the exporter restarts (it resumes at its committed position).
//!
//! Duplicates this produces are dropped by the importer, which knows by source and sequence
//! what it already has. Confirmations are applied by the Zenoh callback thread directly
//! (the consumer sits behind a mutex that the reading thread holds only while copying a
//! batch out), so back-pressure is released as soon as an ack lands.
//!
//! **Drop mode.** The exporter is a durable *optional* consumer: it copies events out with
//! `poll_once`, commits at once, and publishes with Zenoh's congestion control set to drop.
//! When it falls behind, the ring laps it and its consumer counts the loss
//! (`dropped_behind`); each batch covers `start..end` of the source sequences, so the importer
//! counts every sequence it did not receive, whichever side lost it.
//!
//! **Batches.** A batch is what the exporter finds published past its cursor when it
//! looks: the contiguous run up to the ring's head (its end-of-batch edge), cut at
//! `--batch-events` events and at `--batch-bytes` bytes (a batch always carries at least
//! one event). The byte cut keeps a message under the receiving Zenoh's
//! `transport/link/rx/max_message_size`, which drops a larger one without telling either
//! side: in reliable mode that message would be asked for and sent again the same, for ever.
//! In drop mode, where the consumer's poll commits what it hands over, the cut is made by
//! counting every event at the ring's largest payload. It never waits to fill a batch, so no time limit is needed: an idle
//! ring sends single events at once, a busy one sends long runs (the bench measured 100 to
//! 250 events per message under load).
//!
//! When it has nothing to send, the exporter sends a heartbeat (an empty batch) every
//! `--heartbeat`, so an importer learns where the exporter stands even on an idle ring.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use shmring::{Consumer, ConsumerOptions, LeaseError, Ring};
use tracing::{info, warn};
use zenoh::qos::CongestionControl;
use zenoh::Wait;

use crate::header::source_id;
use crate::link::{Keys, LinkArgs};
use crate::wire::{Ack, BatchHeader, BatchWriter, Mode, BATCH_HEADER, EVENT_HEADER};

/// `--batch-bytes` by default: 1 MiB.
pub const DEFAULT_BATCH_BYTES: usize = 1 << 20;

/// `shmring-bridge export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The source ring.
    #[arg(long)]
    pub ring: String,
    /// Zenoh key expression of the bridge (concrete, no wildcards).
    #[arg(long)]
    pub key: String,
    /// Namespace of the source ring (default: $SHMRING_NAMESPACE, else "default").
    #[arg(long)]
    pub namespace: Option<String>,
    /// Delivery mode.
    #[arg(long, value_enum, default_value_t = Mode::Reliable)]
    pub mode: Mode,
    /// Name of the exporter's durable consumer (default: `default_consumer_name(key)`).
    #[arg(long)]
    pub name: Option<String>,
    /// Most events in one Zenoh message.
    #[arg(long, default_value_t = 256)]
    pub batch_events: usize,
    /// Most bytes in one Zenoh message, its header included; an event larger than that goes
    /// alone. Keep it below the importer's Zenoh `transport/link/rx/max_message_size` (1 GiB
    /// by default), which drops a larger message without an error.
    #[arg(long, default_value_t = DEFAULT_BATCH_BYTES)]
    pub batch_bytes: usize,
    /// Send again from the confirmed position after this long without a confirmation (ms).
    #[arg(long, default_value_t = 1000)]
    pub ack_timeout_ms: u64,
    /// Heartbeat period when there is nothing to send (ms).
    #[arg(long, default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// Print the counters as one JSON line this often (ms; 0: only at exit).
    #[arg(long, default_value_t = 1000)]
    pub stats_ms: u64,
    /// Zenoh session.
    #[command(flatten)]
    pub link: LinkArgs,
}

/// The exporter's counters, printed as one JSON line (`"role":"export"`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ExportStats {
    /// Always "export".
    pub role: &'static str,
    /// Delivery mode.
    pub mode: Option<Mode>,
    /// Events sent (replays included).
    pub events_sent: u64,
    /// Batches sent (heartbeats excluded).
    pub batches_sent: u64,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Times it went back to the confirmed position and sent again.
    pub replays: u64,
    /// Acks received for this source.
    pub acks: u64,
    /// Highest sequence the importer confirmed (exclusive).
    pub acked: u64,
    /// The consumer's committed position.
    pub committed: u64,
    /// Next sequence to send.
    pub cursor: u64,
    /// Events the exporter's consumer lost to lapping (DROP mode; cumulative for the entry).
    pub dropped: u64,
    /// Messages on the ack key that did not parse or came from another source.
    pub foreign: u64,
    /// Acks for this source that could not be applied (confirming sequences the ring never
    /// published, or a ring's worth past the position): ignored, and logged the first time
    /// and then at every power of two.
    pub refused_acks: u64,
    /// "up" while acks arrive, else "down".
    pub link: &'static str,
}

/// The exporter's consumer name when `--name` is not given: "bridge:" + the key, or, when
/// that does not fit a consumer name (48 bytes), "bridge:" + a 64-bit hash of the key.
pub fn default_consumer_name(key: &str) -> String {
    let name = format!("bridge:{key}");
    if name.len() <= 48 {
        return name;
    }
    format!("bridge:{:016x}", crate::header::source_id("", key, 0))
}

/// What the ack callback and the sending thread share.
struct Shared {
    source: u64,
    consumer: Mutex<Consumer>,
    /// The committed position after the last ack applied.
    committed: AtomicU64,
    acked: AtomicU64,
    acks: AtomicU64,
    foreign: AtomicU64,
    /// Acks for this source refused for confirming sequences the ring never published.
    forged: AtomicU64,
    /// Acks for this source refused for another reason (the entry lost, the ring deleted):
    /// logged on their own count, so that a flood of forged acks cannot hide the first of
    /// them. `refused_acks` is the sum of the two.
    commit_errors: AtomicU64,
    /// A resend request not yet acted on (`u64::MAX`: none).
    rewind: AtomicU64,
    /// When the last ack for this source arrived (ms since `epoch`; 0: never).
    last_ack_ms: AtomicU64,
    epoch: Instant,
    sender: Thread,
}

const NO_REWIND: u64 = u64::MAX;

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Consumer> {
        // A panic while holding it leaves a consumer whose state is still consistent (its
        // position moves in one store), so a poisoned lock is used as is.
        self.consumer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        (self.epoch.elapsed().as_millis() as u64).max(1)
    }

    /// Apply one message from the ack key (runs on a Zenoh thread).
    fn on_ack(&self, msg: &[u8], mode: Mode) {
        let ack = match Ack::parse(msg) {
            Ok(a) if a.source == self.source => a,
            _ => {
                self.foreign.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        // Relaxed, all: counters and hints for the sending thread, which re-reads the
        // consumer's position under the lock before acting on them.
        self.acks.fetch_add(1, Ordering::Relaxed);
        self.last_ack_ms.store(self.now_ms(), Ordering::Relaxed);
        self.acked.fetch_max(ack.next, Ordering::Relaxed);
        if mode == Mode::Reliable {
            let mut c = self.lock();
            if let Err(e) = c.commit_to(ack.next) {
                // Relaxed, all: counters. Each kind logged the first time and then at every
                // power of two of its own count: the ack key is open to anyone who can
                // publish on it.
                match e {
                    LeaseError::NotPublished { unpublished, .. } => {
                        let n = self.forged.fetch_add(1, Ordering::Relaxed) + 1;
                        if n.is_power_of_two() {
                            warn!(
                                ack = ack.next,
                                unpublished,
                                refused = n,
                                "importer confirms sequences this ring never published; ignored"
                            );
                        }
                    }
                    e => {
                        let n = self.commit_errors.fetch_add(1, Ordering::Relaxed) + 1;
                        if n.is_power_of_two() {
                            warn!(error = %e, failed = n, "cannot commit the confirmed position");
                        }
                    }
                }
            }
            self.committed.store(c.next_sequence(), Ordering::Relaxed);
            drop(c);
            if ack.resend {
                self.rewind.store(ack.next, Ordering::Relaxed);
            }
        }
        self.sender.unpark();
    }

    /// When the last ack of this source arrived (`None`: none yet).
    fn last_ack(&self) -> Option<Instant> {
        match self.last_ack_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => self.epoch.checked_add(Duration::from_millis(ms)),
        }
    }

    fn link_up(&self, within: Duration) -> bool {
        let last = self.last_ack_ms.load(Ordering::Relaxed);
        last != 0 && self.now_ms().saturating_sub(last) <= within.as_millis() as u64
    }
}

/// Run the exporter until `stop` is set. Returns the final counters.
pub fn run(args: &ExportArgs, stop: &AtomicBool) -> Result<ExportStats> {
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(shmring::names::default_namespace);
    let keys = Keys::new(&args.key)?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| default_consumer_name(&args.key));
    let ring = Ring::open(&namespace, &args.ring)
        .with_context(|| format!("opening source ring {:?} in {namespace:?}", args.ring))?;
    let opts = match args.mode {
        Mode::Reliable => ConsumerOptions::durable(name.clone()),
        Mode::Drop => ConsumerOptions::durable(name.clone()).optional(),
    }
    .batch_cap(match args.mode {
        Mode::Reliable => args.batch_events.max(1),
        // A poll commits what it hands over, so it is cut before: at the number of the
        // ring's largest events that fit `--batch-bytes`.
        Mode::Drop => args
            .batch_events
            .min(
                args.batch_bytes.saturating_sub(BATCH_HEADER) / (ring.max_payload() + EVENT_HEADER),
            )
            .max(1),
    });
    let consumer = ring.consumer(opts).with_context(|| {
        format!(
            "attaching the exporter's consumer {name:?} (another exporter on this key? use --name)"
        )
    })?;
    let source = source_id(&namespace, &args.ring, ring.created_unix_ns());
    let start = consumer.next_sequence();
    info!(ring = %args.ring, %namespace, consumer = ?name, source = format_args!("{source:016x}"), start, mode = ?args.mode, "exporter attached");

    let shared = Arc::new(Shared {
        source,
        committed: AtomicU64::new(start),
        acked: AtomicU64::new(0),
        acks: AtomicU64::new(0),
        foreign: AtomicU64::new(0),
        forged: AtomicU64::new(0),
        commit_errors: AtomicU64::new(0),
        rewind: AtomicU64::new(NO_REWIND),
        last_ack_ms: AtomicU64::new(0),
        epoch: Instant::now(),
        sender: std::thread::current(),
        consumer: Mutex::new(consumer),
    });
    let session = args.link.open()?;
    let publisher = session
        .declare_publisher(keys.data.clone())
        .congestion_control(match args.mode {
            Mode::Reliable => CongestionControl::Block,
            Mode::Drop => CongestionControl::Drop,
        })
        .wait()
        .map_err(|e| anyhow!("declaring the publisher on {}: {e}", keys.data))?;
    let on_ack = shared.clone();
    let mode = args.mode;
    let _acks = session
        .declare_subscriber(keys.ack.clone())
        .callback(move |sample| on_ack.on_ack(&sample.payload().to_bytes(), mode))
        .wait()
        .map_err(|e| anyhow!("declaring the subscriber on {}: {e}", keys.ack))?;

    let mut ex = Exporter {
        args,
        ring: &ring,
        shared: &shared,
        publisher: &publisher,
        writer: BatchWriter::default(),
        cursor: start,
        stats: ExportStats {
            role: "export",
            mode: Some(args.mode),
            link: "down",
            ..ExportStats::default()
        },
        last_send: Instant::now(),
        last_progress: Instant::now(),
        last_stats: Instant::now(),
        was_up: false,
    };
    let result = ex.run_loop(stop);
    let stats = ex.snapshot();
    print_stats(&stats);
    drop(_acks);
    let _ = session.close().wait();
    result.map(|()| stats)
}

struct Exporter<'a> {
    args: &'a ExportArgs,
    ring: &'a Ring,
    shared: &'a Arc<Shared>,
    publisher: &'a zenoh::pubsub::Publisher<'static>,
    writer: BatchWriter,
    cursor: u64,
    stats: ExportStats,
    last_send: Instant,
    /// When the confirmed position last moved (or a replay started).
    last_progress: Instant,
    last_stats: Instant,
    was_up: bool,
}

impl Exporter<'_> {
    fn run_loop(&mut self, stop: &AtomicBool) -> Result<()> {
        let heartbeat = Duration::from_millis(self.args.heartbeat_ms.max(1));
        let ack_timeout = Duration::from_millis(self.args.ack_timeout_ms.max(1));
        let capacity = self.ring.capacity();
        let mut committed_seen = self.cursor;
        // Relaxed: a flag; the signal handler's store needs no other memory.
        while !stop.load(Ordering::Relaxed) {
            self.maybe_report(heartbeat);
            let sent = match self.args.mode {
                Mode::Reliable => {
                    let committed = self.shared.committed.load(Ordering::Relaxed);
                    if committed != committed_seen {
                        committed_seen = committed;
                        self.last_progress = Instant::now();
                    }
                    // Any ack of this source restarts the timeout, whatever it confirms: an
                    // importer that waits for room in its ring, or for its ring to start,
                    // acknowledges what it has every heartbeat and holds the rest of the
                    // window, which sending again would only queue up before it. What it
                    // lost is asked for (the next batch or heartbeat starts past it).
                    if let Some(at) = self.shared.last_ack() {
                        self.last_progress = self.last_progress.max(at);
                    }
                    self.reliable_step(committed, ack_timeout)?
                }
                Mode::Drop => self.drop_step()?,
            };
            if sent {
                continue;
            }
            if self.last_send.elapsed() >= heartbeat {
                self.send_heartbeat()?;
            }
            if self.ring.is_deleted() {
                bail!("source ring {:?} was deleted", self.args.ring);
            }
            let committed = self.shared.committed.load(Ordering::Relaxed);
            if self.args.mode == Mode::Reliable && self.cursor >= committed.saturating_add(capacity)
            {
                // A ring's worth is unconfirmed: nothing more can be read until an ack
                // lands (the ack callback unparks this thread).
                std::thread::park_timeout(heartbeat);
            } else {
                self.ring.wait_published(self.cursor, heartbeat);
            }
        }
        Ok(())
    }

    /// One reliable step: act on acks, then send what is published past the cursor.
    fn reliable_step(&mut self, committed: u64, ack_timeout: Duration) -> Result<bool> {
        let rewind = self.shared.rewind.swap(NO_REWIND, Ordering::Relaxed);
        if rewind != NO_REWIND {
            let to = rewind.max(committed);
            if to < self.cursor {
                info!(from = self.cursor, to, "importer asked for a resend");
                self.cursor = to;
                self.stats.replays += 1;
                self.last_progress = Instant::now();
            }
        }
        if self.cursor < committed {
            // The importer already had these (a restart of this side): skip ahead.
            self.cursor = committed;
        }
        if self.cursor > committed && self.last_progress.elapsed() >= ack_timeout {
            info!(
                from = self.cursor,
                to = committed,
                "no confirmation in time: sending again"
            );
            self.cursor = committed;
            self.stats.replays += 1;
            self.last_progress = Instant::now();
        }
        self.writer.begin();
        let writer = &mut self.writer;
        let budget = self.args.batch_bytes;
        let mut bytes = 0u64;
        // The first event that did not fit the byte budget: the batch ends before it.
        let mut cut: Option<u64> = None;
        let mut committed = committed;
        let end = {
            let mut c = self.shared.lock();
            let read = c.read_ahead(self.cursor, self.args.batch_events.max(1), |ev| {
                if cut.is_some() {
                    return;
                }
                let len = ev.bytes().len();
                if !writer.is_empty() && writer.len() + EVENT_HEADER + len > budget {
                    cut = Some(ev.sequence());
                    return;
                }
                bytes += len as u64;
                writer.push(ev.sequence(), ev.bytes());
            });
            // A read ahead moves the position only when the source ring's broker released
            // this consumer: it went to the head, letting the events in between go. The ack
            // callback stores what it committed before it lets the lock go, so a position
            // past that is such a jump: tell the importer (the next header's committed
            // position), so that it does not ask for what the ring no longer holds.
            let next = c.next_sequence();
            let acked = self.shared.committed.fetch_max(next, Ordering::Relaxed);
            if next > acked {
                warn!(
                    from = acked,
                    to = next,
                    "released by the source ring's broker: the events in between are not sent"
                );
                self.stats.dropped = c.stats().dropped_behind;
                committed = committed.max(next);
            }
            match read {
                Ok(end) => cut.unwrap_or(end),
                // The ack callback committed past the cursor in between, or the jump above:
                // start there.
                Err(LeaseError::BeforePosition { next, .. }) => {
                    self.cursor = next;
                    return Ok(true);
                }
                Err(e) => return Err(e).context("reading the source ring"),
            }
        };
        if end == self.cursor {
            return Ok(false);
        }
        if self.cursor <= committed {
            // Nothing was outstanding: the timeout counts from this batch, not from the
            // last time the confirmed position moved (an idle time ago).
            self.last_progress = Instant::now();
        }
        self.send_batch(self.cursor, end, committed, bytes)?;
        self.cursor = end;
        Ok(true)
    }

    /// One DROP step: copy out what is published, commit at once, send.
    fn drop_step(&mut self) -> Result<bool> {
        let start = self.cursor;
        self.writer.begin();
        let writer = &mut self.writer;
        let mut bytes = 0u64;
        let mut c = self.shared.lock();
        c.poll_once(|ev| {
            bytes += ev.bytes().len() as u64;
            writer.push(ev.sequence(), ev.bytes());
        })
        .context("reading the source ring")?;
        let end = c.next_sequence();
        self.stats.dropped = c.stats().dropped_behind;
        drop(c);
        self.shared.committed.store(end, Ordering::Relaxed);
        if end == start {
            return Ok(false);
        }
        self.send_batch(start, end, end, bytes)?;
        self.cursor = end;
        Ok(true)
    }

    fn header(&self, start: u64, end: u64, committed: u64) -> BatchHeader {
        BatchHeader {
            mode: self.args.mode,
            source: self.shared.source,
            run: self.ring.run_number(),
            committed,
            start,
            end,
            dropped: self.stats.dropped,
        }
    }

    fn send_batch(&mut self, start: u64, end: u64, committed: u64, bytes: u64) -> Result<()> {
        let h = self.header(start, end, committed);
        let n = u64::from(self.writer.count());
        let msg = self.writer.finish(&h);
        self.publisher
            .put(msg)
            .wait()
            .map_err(|e| anyhow!("publishing a batch: {e}"))?;
        self.stats.events_sent += n;
        self.stats.batches_sent += u64::from(n > 0);
        self.stats.bytes_sent += bytes;
        self.last_send = Instant::now();
        Ok(())
    }

    fn send_heartbeat(&mut self) -> Result<()> {
        let committed = self.shared.committed.load(Ordering::Relaxed);
        if self.args.mode == Mode::Drop {
            // Lapped while idle: the jump shows as a gap at the importer.
            let c = self.shared.lock();
            self.cursor = c.next_sequence();
            self.stats.dropped = c.stats().dropped_behind;
        }
        self.writer.begin();
        let h = self.header(self.cursor, self.cursor, committed);
        let msg = self.writer.finish(&h);
        self.publisher
            .put(msg)
            .wait()
            .map_err(|e| anyhow!("publishing a heartbeat: {e}"))?;
        self.stats.heartbeats += 1;
        self.last_send = Instant::now();
        Ok(())
    }

    fn snapshot(&mut self) -> ExportStats {
        let up = self.shared.link_up(Duration::from_secs(1));
        let mut s = self.stats.clone();
        // Relaxed: counters.
        s.acks = self.shared.acks.load(Ordering::Relaxed);
        s.acked = self.shared.acked.load(Ordering::Relaxed);
        s.committed = self.shared.committed.load(Ordering::Relaxed);
        s.foreign = self.shared.foreign.load(Ordering::Relaxed);
        s.refused_acks = self
            .shared
            .forged
            .load(Ordering::Relaxed)
            .saturating_add(self.shared.commit_errors.load(Ordering::Relaxed));
        s.cursor = self.cursor;
        s.link = if up { "up" } else { "down" };
        s
    }

    fn maybe_report(&mut self, heartbeat: Duration) {
        let up = self
            .shared
            .link_up(Duration::from_secs(1).max(heartbeat * 5));
        if up != self.was_up {
            self.was_up = up;
            if up {
                info!("link up: the importer confirms");
            } else {
                warn!("link down: no confirmation from the importer");
            }
        }
        let every = self.args.stats_ms;
        if every > 0 && self.last_stats.elapsed() >= Duration::from_millis(every) {
            self.last_stats = Instant::now();
            let s = self.snapshot();
            info!(
                events_sent = s.events_sent,
                acked = s.acked,
                replays = s.replays,
                "exporter counters"
            );
            print_stats(&s);
        }
    }
}

/// Print one JSON line of counters on stdout (a closed stdout is ignored).
pub fn print_stats<T: serde::Serialize>(stats: &T) {
    if let Ok(line) = serde_json::to_string(stats) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}
