//! The importer: subscribes to a bridge key and publishes into a local ring in source order.
//!
//! Every event it publishes carries a 32-byte header with the source ring's identity, run
//! and sequence (see `header`). That header is also the importer's durable record: at start
//! it reads its ring back (`Ring::recall`, newest first, over the ring's window) and takes,
//! per source, the newest sequence found as what it already has. The record and the event
//! are one store, so no crash can separate them: a crash after publishing leaves the event
//! (and so the record), a crash before leaves neither. A slot a dead predecessor claimed but
//! never filled is first repaired into a tombstone, as the broker would.
//!
//! This is exact as long as the importer's newest event is still in the ring's window when
//! it restarts, which always holds when the importer is the ring's only producer. With
//! several producers in one ring, more than a ring's worth of other events published while
//! the importer was down pushes its record out; it then starts from the exporter's confirmed
//! position and may publish events a second time (see docs/SCALE_OUT.md).
//!
//! What to publish, what to count as a duplicate or a gap, and when to ask for a resend is
//! decided per source by `track` (see there).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use shmring::{Producer, Recall, Ring, TryPublishError};
use tracing::{info, warn};
use zenoh::handlers::FifoChannel;
use zenoh::qos::CongestionControl;
use zenoh::Wait;

use crate::export::print_stats;
use crate::header::{Bridged, SourceHeader, HEADER_LEN};
use crate::link::{Keys, LinkArgs};
use crate::track::Sources;
use crate::wire::{Ack, Batch, Mode};

/// `shmring-bridge import`.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// Zenoh key expression of the bridge (concrete, no wildcards).
    #[arg(long)]
    pub key: String,
    /// The local ring to publish into (it must exist; its slots must hold the source's
    /// payloads plus the 32-byte bridge header).
    #[arg(long)]
    pub ring: String,
    /// Namespace of the local ring (default: $SHMRING_NAMESPACE, else "default").
    #[arg(long)]
    pub namespace: Option<String>,
    /// Acknowledge every source heard from within --ack-quiet-ms this often, and count the
    /// link down after five periods without a message (ms).
    #[arg(long, default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// Ask again for the same missing position at most this often (ms).
    #[arg(long, default_value_t = 200)]
    pub resend_ms: u64,
    /// Print the counters as one JSON line this often (ms; 0: only at exit).
    #[arg(long, default_value_t = 1000)]
    pub stats_ms: u64,
    /// Know at most this many sources (those recalled from the ring included). A new one
    /// past that takes the place of the source quiet the longest, if that one has been
    /// quiet for --forget-after-ms (counted in `forgotten_sources`); otherwise its message
    /// is ignored (counted in `refused_sources`). The link is not authenticated: this
    /// bounds what a stray or forged sender can make the importer keep.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_sources: u64,
    /// The heartbeat's acks go only to sources heard from within this many ms; a quiet
    /// source's next message is acknowledged as it arrives.
    #[arg(long, default_value_t = 10_000)]
    pub ack_quiet_ms: u64,
    /// A source quiet this long gives its place to a new one once --max-sources are known
    /// (ms). Heard again, it is a new source: reliable, it starts at its exporter's
    /// committed position.
    #[arg(long, default_value_t = 3_600_000)]
    pub forget_after_ms: u64,
    /// Zenoh session.
    #[command(flatten)]
    pub link: LinkArgs,
}

/// The importer's counters, printed as one JSON line (`"role":"import"`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ImportStats {
    /// Always "import".
    pub role: &'static str,
    /// Events received (duplicates included).
    pub events_received: u64,
    /// Batches received (heartbeats excluded).
    pub batches_received: u64,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// Events published into the local ring.
    pub published: u64,
    /// Events received that the ring already had.
    pub duplicates: u64,
    /// Batches dropped because an earlier part was missing (reliable mode).
    pub out_of_order: u64,
    /// Resends asked for.
    pub resends: u64,
    /// Sequences known lost (DROP mode: transport drops and the exporter's lapping).
    pub dropped: u64,
    /// What the exporter reports it lost itself (DROP mode; included in `dropped`).
    pub dropped_at_exporter: u64,
    /// Acks sent.
    pub acks: u64,
    /// Messages that did not parse.
    pub malformed: u64,
    /// Next sequence expected of the (last active) source: everything below is in the ring.
    pub expected: u64,
    /// Sources known (from the ring's record or the link).
    pub sources: u64,
    /// Messages ignored because they came from a new source past `--max-sources`, none of
    /// the known ones quiet for `--forget-after-ms`.
    pub refused_sources: u64,
    /// Sources forgotten, quiet for `--forget-after-ms`, to make room for a new one.
    pub forgotten_sources: u64,
    /// Claims of dead predecessors repaired at start.
    pub repaired: u64,
    /// "up" while the exporter's messages arrive, else "down".
    pub link: &'static str,
}

/// The clock of the sources' quiet time (`--forget-after-ms`, `--ack-quiet-ms`): the wall
/// clock less the time the importer spent publishing into its ring (waiting for room while
/// it is full). While it publishes it hears no source (their messages wait in the
/// subscriber's queue), so a source whose events it waited to publish is not quiet for that
/// time; an importer held up for longer than the forget period would otherwise forget a
/// source for the first new one it hears when its ring has room again.
struct Clock {
    start: Instant,
    /// The time spent publishing, publishes in progress excluded.
    stalled: Duration,
    /// When the publishing in progress began (`None`: none).
    publishing_since: Option<Instant>,
}

impl Clock {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            stalled: Duration::ZERO,
            publishing_since: None,
        }
    }

    /// Now, by this clock: never ahead of the wall clock, never going back, and standing
    /// still while the importer publishes (the acknowledgements it sends while it waits
    /// for room go to the sources heard before the wait began).
    fn now(&self) -> Instant {
        let publishing = self
            .publishing_since
            .map_or(Duration::ZERO, |t| t.elapsed());
        self.start
            + self
                .start
                .elapsed()
                .saturating_sub(self.stalled.saturating_add(publishing))
    }

    /// The importer begins publishing a batch (it may wait for room while its ring is full).
    fn publishing(&mut self) {
        self.publishing_since = Some(Instant::now());
    }

    /// The batch is published (or given up): the time it took is not the sources' quiet
    /// time.
    fn published(&mut self) {
        if let Some(t) = self.publishing_since.take() {
            self.stalled = self.stalled.saturating_add(t.elapsed());
        }
    }
}

/// Run the importer until `stop` is set. Returns the final counters.
pub fn run(args: &ImportArgs, stop: &AtomicBool) -> Result<ImportStats> {
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(shmring::names::default_namespace);
    let keys = Keys::new(&args.key)?;
    let ring = Ring::open(&namespace, &args.ring).with_context(|| {
        format!(
            "opening the importer's ring {:?} in {namespace:?}",
            args.ring
        )
    })?;
    let repaired = repair_dead_claims(&ring);
    let producer = ring
        .producer()
        .with_context(|| format!("attaching a producer to {:?}", args.ring))?;
    let recalled = recall_sources(&ring);
    for (s, e) in &recalled {
        info!(
            source = format_args!("{s:016x}"),
            expected = e,
            "resuming from the ring's record"
        );
    }
    let session = args.link.open()?;
    let subscriber = session
        .declare_subscriber(keys.data.clone())
        .with(FifoChannel::new(1024))
        .wait()
        .map_err(|e| anyhow!("declaring the subscriber on {}: {e}", keys.data))?;
    let ack_pub = session
        .declare_publisher(keys.ack.clone())
        .congestion_control(CongestionControl::Block)
        .wait()
        .map_err(|e| anyhow!("declaring the publisher on {}: {e}", keys.ack))?;
    let clock = Clock::new();
    let mut im = Importer {
        args,
        stop,
        ring: &ring,
        ring_name: &args.ring,
        producer,
        scratch: Vec::new(),
        sources: Sources::new(
            recalled,
            Duration::from_millis(args.resend_ms),
            (
                usize::try_from(args.max_sources).unwrap_or(usize::MAX),
                Duration::from_millis(args.forget_after_ms),
            ),
            clock.now(),
        ),
        clock,
        ack_pub: &ack_pub,
        stats: ImportStats {
            role: "import",
            repaired,
            link: "down",
            ..ImportStats::default()
        },
        last_msg: None,
        was_up: false,
        heartbeat: Duration::from_millis(args.heartbeat_ms.max(1)),
        last_ack: Instant::now(),
        last_stats: Instant::now(),
        publishing: None,
    };
    let result = im.run_loop(&subscriber);
    let stats = im.snapshot();
    print_stats(&stats);
    drop(subscriber);
    let _ = session.close().wait();
    result.map(|()| stats)
}

/// Tombstone claims that dead producers left unpublished, so that the ring's record is
/// complete (and its consumers are not held at a hole) before it is read back.
fn repair_dead_claims(ring: &Ring) -> u64 {
    let mut repaired = 0;
    for p in ring.info().producers {
        // The repair itself checks that the entry's holder is gone.
        if p.in_flight.is_some() || p.claiming {
            let r = ring.repair_dead_producer(p.index, p.word);
            if r.waiting > 0 {
                warn!(
                    pid = p.pid,
                    waiting = r.waiting,
                    "a dead producer's claim waits for a slow consumer; the broker will finish it"
                );
            }
            repaired += r.tombstoned;
        }
    }
    repaired
}

/// Read the ring back, newest first, for the newest sequence of every source in it.
fn recall_sources(ring: &Ring) -> Vec<(u64, u64)> {
    let mut found: Vec<(u64, u64)> = Vec::new();
    let head = ring.head();
    let mut buf = Vec::new();
    for seq in (head.saturating_sub(ring.capacity())..head).rev() {
        match ring.recall(seq, &mut buf) {
            Recall::Event => {}
            Recall::Gone => break,
            _ => continue,
        }
        if let Some(b) = Bridged::parse(&buf) {
            if !found.iter().any(|(s, _)| *s == b.header.source) {
                found.push((b.header.source, b.header.seq + 1));
            }
        }
    }
    found
}

/// The importer was told to stop while it waited for its stopped ring to start, or for
/// room in its full ring: it ends as at any other stop, with the rest of the batch it was
/// publishing not acknowledged (the exporter sends it again to the next importer, which
/// keeps only what its ring does not hold).
#[derive(Debug, thiserror::Error)]
#[error("told to stop while waiting for the ring to start or to have room")]
struct Interrupted;

/// How often a publish refused by a stopped ring looks again whether the ring started.
const STOPPED_LOOK: Duration = Duration::from_millis(10);

struct Importer<'a> {
    args: &'a ImportArgs,
    /// Set by SIGINT or SIGTERM.
    stop: &'a AtomicBool,
    /// The ring the producer publishes into (to wait for its start).
    ring: &'a Ring,
    ring_name: &'a str,
    producer: Producer,
    scratch: Vec<u8>,
    sources: Sources,
    /// The clock of the sources' quiet time.
    clock: Clock,
    ack_pub: &'a zenoh::pubsub::Publisher<'static>,
    stats: ImportStats,
    last_msg: Option<Instant>,
    was_up: bool,
    heartbeat: Duration,
    last_ack: Instant,
    last_stats: Instant,
    /// The source and sequence of the event being published (`None` between batches):
    /// below it that source's events are in the ring, whatever `sources` says (it moved
    /// the source on when it planned the batch).
    publishing: Option<(u64, u64)>,
}

impl Importer<'_> {
    fn run_loop(
        &mut self,
        sub: &zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>,
    ) -> Result<()> {
        // Relaxed: a flag; the signal handler's store needs no other memory.
        while !self.stop.load(Ordering::Relaxed) {
            match sub.recv_timeout(self.heartbeat) {
                Ok(Some(sample)) => {
                    self.last_msg = Some(Instant::now());
                    let bytes = sample.payload().to_bytes();
                    match self.on_message(&bytes) {
                        Err(e) if e.is::<Interrupted>() => break,
                        done => done?,
                    }
                }
                Ok(None) => {}
                Err(e) => bail!("the zenoh subscriber closed: {e}"),
            }
            self.tick(true)?;
        }
        Ok(())
    }

    /// The periodic work, each part when it is due: the heartbeat's acks (every source heard
    /// lately, at what its ring holds), the link's state (`listening`: not while the importer
    /// waits to publish, when messages wait in the subscriber's queue unheard), and the
    /// counters line. The acks go out while the importer waits for room or for its ring to
    /// start too, so that its exporters hold the rest of their window instead of sending it
    /// again at every timeout.
    fn tick(&mut self, listening: bool) -> Result<()> {
        if self.last_ack.elapsed() >= self.heartbeat {
            self.last_ack = Instant::now();
            let quiet = Duration::from_millis(self.args.ack_quiet_ms);
            let mut lately: Vec<(u64, u64)> = match self.clock.now().checked_sub(quiet) {
                Some(since) => self.sources.heard_since(since).collect(),
                // The clock started less than `quiet` ago: every source was heard lately
                // or not at all.
                None => self.sources.heard_ever().collect(),
            };
            if let Some((source, seq)) = self.publishing {
                for (s, next) in &mut lately {
                    if *s == source {
                        *next = seq;
                    }
                }
            }
            for (source, next) in lately {
                self.ack(source, next, false)?;
            }
            if listening {
                self.link_check(self.heartbeat);
            }
        }
        let every = self.args.stats_ms;
        if every > 0 && self.last_stats.elapsed() >= Duration::from_millis(every) {
            self.last_stats = Instant::now();
            let s = self.snapshot();
            info!(
                published = s.published,
                duplicates = s.duplicates,
                dropped = s.dropped,
                "importer counters"
            );
            print_stats(&s);
        }
        Ok(())
    }

    fn link_check(&mut self, heartbeat: Duration) {
        let up = self.last_msg.is_some_and(|t| t.elapsed() <= heartbeat * 5);
        if up != self.was_up {
            self.was_up = up;
            if up {
                info!("link up: the exporter's messages arrive");
            } else {
                warn!("link down: nothing from the exporter");
            }
        }
    }

    fn ack(&mut self, source: u64, next: u64, resend: bool) -> Result<()> {
        self.ack_pub
            .put(
                Ack {
                    source,
                    next,
                    resend,
                }
                .encode()
                .to_vec(),
            )
            .wait()
            .map_err(|e| anyhow!("publishing an ack: {e}"))?;
        self.stats.acks += 1;
        self.stats.resends += u64::from(resend);
        Ok(())
    }

    fn on_message(&mut self, msg: &[u8]) -> Result<()> {
        let batch = match Batch::parse(msg) {
            Ok(b) => b,
            Err(e) => {
                self.stats.malformed = self.stats.malformed.saturating_add(1);
                // The first and then every power of two: anyone who can publish on the key
                // can send any number of them.
                if self.stats.malformed.is_power_of_two() {
                    warn!(
                        error = %e,
                        malformed = self.stats.malformed,
                        "malformed batch ignored"
                    );
                }
                return Ok(());
            }
        };
        let h = batch.header;
        if batch.is_heartbeat() {
            self.stats.heartbeats += 1;
        } else {
            self.stats.batches_received += 1;
            self.stats.events_received += u64::from(batch.count());
        }
        let plan = self
            .sources
            .plan(&h, batch.events().map(|e| e.seq), self.clock.now());
        if plan.refused {
            self.stats.refused_sources = self.stats.refused_sources.saturating_add(1);
            // The first refusal and then every power of two: a flood of them cannot flood the
            // log.
            if self.stats.refused_sources.is_power_of_two() {
                warn!(
                    source = format_args!("{:016x}", h.source),
                    known = self.sources.len(),
                    refused = self.stats.refused_sources,
                    "a message from a new source ignored: the importer knows --max-sources sources, none quiet for --forget-after-ms"
                );
            }
            return Ok(());
        }
        if h.mode == Mode::Drop {
            // An accepted source's own count: a refused one's is not this importer's to show.
            self.stats.dropped_at_exporter = h.dropped;
        }
        if let Some(old) = plan.forgot {
            self.stats.forgotten_sources = self.stats.forgotten_sources.saturating_add(1);
            info!(
                source = format_args!("{old:016x}"),
                new = format_args!("{:016x}", h.source),
                "a source quiet for --forget-after-ms forgotten for a new one"
            );
        }
        if plan.new_source {
            info!(source = format_args!("{:016x}", h.source), "new source");
        }
        // Saturating: each is bounded by the wire's sequences, not their sum over a run.
        self.stats.duplicates = self.stats.duplicates.saturating_add(plan.duplicates);
        self.stats.dropped = self.stats.dropped.saturating_add(plan.dropped);
        if let Some(from) = plan.resend {
            if !batch.is_heartbeat() {
                self.stats.out_of_order += 1;
            }
            self.ack(h.source, from, true)?;
        }
        if let Some(from) = plan.keep_from {
            // Publishing waits for room while the ring is full, and no source is heard
            // meanwhile (their messages wait in the subscriber's queue): that time is not
            // their quiet time. One look at the clock per batch, not per event.
            self.clock.publishing();
            let published = self.publish_from(&batch, from);
            self.clock.published();
            published?;
        }
        if let Some(next) = plan.ack {
            self.stats.expected = next;
            self.ack(h.source, next, false)?;
        }
        Ok(())
    }

    fn publish(&mut self, header: SourceHeader, payload: &[u8]) -> Result<()> {
        let len = HEADER_LEN + payload.len();
        let max = self.producer.max_payload();
        if len > max {
            bail!(
                "an event of {} bytes plus the {HEADER_LEN}-byte bridge header does not fit ring {:?}'s {max}-byte slots: create it with a slot size of at least {} bytes (a ring of sized events: a max_event_size of at least {})",
                payload.len(),
                self.ring_name,
                len + 16,
                len.next_multiple_of(8)
            );
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&header.encode());
        self.scratch.extend_from_slice(payload);
        self.publishing = Some((header.source, header.seq));
        let published = self.publish_waiting();
        self.publishing = None;
        published
    }

    /// Publish `scratch`, waiting for room and for a stopped ring to start, and meanwhile
    /// acknowledging what the ring holds every heartbeat and stopping when told to.
    fn publish_waiting(&mut self) -> Result<()> {
        let mut told = false;
        loop {
            // A timeout spends no sequence and counts a refused publish in the producer's
            // counters: one per heartbeat while the ring is full.
            match self.producer.publish_timeout(&self.scratch, self.heartbeat) {
                Ok(_) => {
                    self.stats.published += 1;
                    if told {
                        info!(ring = self.ring_name, "the ring started again: publishing");
                    }
                    return Ok(());
                }
                Err(TryPublishError::Timeout | TryPublishError::Full) => {
                    // Relaxed: a flag; the signal handler's store needs no other memory.
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(Interrupted.into());
                    }
                    self.tick(false)?;
                }
                // Stopped (`broker stop` or `drain`): nothing of the batch is acknowledged
                // until it is all in the ring, so the importer waits for the start, as it
                // waits for room while the ring is full, and publishes the refused event then.
                Err(TryPublishError::Closed) => {
                    if !told {
                        told = true;
                        warn!(
                            "ring {:?} is stopped: waiting for it to start (`{}`)",
                            self.ring_name,
                            shmring::names::broker_command(
                                self.ring.namespace(),
                                "start",
                                &[self.ring_name],
                                &[]
                            )
                        );
                    }
                    // Looks at the ring's state, not refused publishes (each one counted).
                    while self.ring.is_closed() && !self.ring.is_deleted() {
                        // Relaxed: a flag; the signal handler's store needs no other memory.
                        if self.stop.load(Ordering::Relaxed) {
                            return Err(Interrupted.into());
                        }
                        self.tick(false)?;
                        std::thread::sleep(STOPPED_LOOK);
                    }
                }
                Err(e) => return Err(e).context("publishing into the importer's ring"),
            }
        }
    }

    /// Publish the events of `batch` from sequence `from` on, in order.
    fn publish_from(&mut self, batch: &Batch<'_>, from: u64) -> Result<()> {
        let h = batch.header;
        for ev in batch.events().filter(|e| e.seq >= from) {
            let header = SourceHeader {
                source: h.source,
                run: h.run,
                seq: ev.seq,
            };
            self.publish(header, ev.payload)?;
        }
        Ok(())
    }

    fn snapshot(&self) -> ImportStats {
        let mut s = self.stats.clone();
        s.sources = self.sources.len() as u64;
        s.link = if self.was_up { "up" } else { "down" };
        s
    }
}
