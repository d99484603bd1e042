//! Typed errors, one per operation. Hot-path errors carry plain numbers: no allocation,
//! no logging.

use std::path::PathBuf;

use shmring_layout::LayoutError;

/// Creating, opening or removing a ring.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A namespace or ring name with characters outside `[A-Za-z0-9_.-]`, empty, too long,
    /// or starting with a dot.
    #[error("invalid {what} name {name:?}: use 1 to 64 characters of [A-Za-z0-9_.-], not starting with '.'")]
    InvalidName {
        /// "namespace" or "ring".
        what: &'static str,
        /// The name given.
        name: String,
    },
    /// The requested configuration is not a valid ring.
    #[error("invalid ring configuration: {0}")]
    Config(#[source] LayoutError),
    /// Both `RingConfig::event_size` and `RingConfig::max_event_size` were set.
    #[error("invalid ring configuration: event_size {event_size} and max_event_size {max_event_size} are both set: a ring carries events of exactly one size (event_size) or of any size up to a bound (max_event_size), so set one")]
    TwoEventSizes {
        /// The exact event size asked for.
        event_size: u32,
        /// The largest event asked for.
        max_event_size: u32,
    },
    /// The configuration's declared consumers (`RingConfig::declared`) cannot be laid out.
    #[error("invalid ring configuration: {0}")]
    Declared(#[source] DeclaredError),
    /// No such ring.
    #[error("ring {name:?} does not exist in namespace {namespace:?} (no file {path}): create it first, or start the broker that creates it")]
    NotFound {
        /// Namespace.
        namespace: String,
        /// Ring name.
        name: String,
        /// The segment path looked for.
        path: PathBuf,
    },
    /// `create` found the ring already there.
    #[error("ring {name:?} already exists at {path}: open it, or remove it first")]
    AlreadyExists {
        /// Ring name.
        name: String,
        /// Its path.
        path: PathBuf,
    },
    /// The file's permissions (or its directory's) exclude this process. `detail` says who
    /// was refused, by which path, which right is missing, and what to do.
    #[error("permission denied on {path} ({op}): {detail}")]
    PermissionDenied {
        /// The path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// Who was refused, by which path, which right is missing, and what to do.
        detail: String,
    },
    /// The segment exists but is not a ring this client can use.
    #[error("segment {path} is unusable: {source}")]
    Layout {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: LayoutError,
    },
    /// `open_or_create` found a ring whose shape differs from the requested one.
    #[error("ring {name:?} exists with {found}, but {requested} was requested: open it as it is, or remove it first")]
    ConfigMismatch {
        /// Ring name.
        name: String,
        /// What exists.
        found: String,
        /// What was asked for.
        requested: String,
    },
    /// The shared-memory filesystem has no room for the segment.
    #[error("no space for ring segment {path} ({size} bytes): the filesystem holding it (/dev/shm, or $SHMRING_ROOT) is full; free space, make it larger (containers: --shm-size), or create a smaller ring")]
    NoSpace {
        /// The segment path.
        path: PathBuf,
        /// Bytes the segment needs.
        size: u64,
    },
    /// Any other I/O failure.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Marking the ring deleted was refused by its lifecycle. Nothing was removed.
    #[error("ring {0:?} could not be marked deleted, so nothing was removed: {1}")]
    Lifecycle(String, crate::LifecycleError),
    /// The name is a symbolic link, a FIFO, a directory or anything else that is not a
    /// regular file. Ring files are opened with `O_NOFOLLOW` and checked on the descriptor,
    /// so such a name is refused, never followed.
    #[error("{path} is {kind}, not a regular file: a ring file is never followed or opened as anything else; remove the name (`rm`, which removes a link itself, never its target)")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is ("a symbolic link", "a FIFO", ...).
        kind: &'static str,
    },
    /// The ring was created in another pid namespace than this process's (a container
    /// that does not share the broker's, say). Its entries record each process's pid as
    /// that process sees it, and liveness is judged by pid: across pid namespaces live
    /// processes would be taken for dead and their entries freed or repaired. So only the
    /// creator's pid namespace may open it.
    #[error("segment {path} was created in pid namespace pid:[{ring}], and this process runs in pid:[{own}]: every process of a ring must share one pid namespace, as processes are told alive by pid (containers: share the broker's, e.g. docker run --pid=container:BROKER; see docs/DEPLOYMENT.md); a ring whose pid namespace is gone (its container exited) is removed with rm")]
    OtherPidNamespace {
        /// The path.
        path: PathBuf,
        /// The ring's creator's pid namespace (the inode of its `/proc/PID/ns/pid`).
        ring: u64,
        /// This process's.
        own: u64,
    },
    /// The file is shorter than the segment mapped from it: someone with write access
    /// truncated it. Touching a page past its end raises SIGBUS.
    #[error("segment {path} shrank to {len} bytes, below its {size}: a process with write access truncated it, and any process that touches the missing pages is killed by SIGBUS; stop every process attached to it, remove the file and create the ring again")]
    Truncated {
        /// The path.
        path: PathBuf,
        /// Bytes left in the file.
        len: u64,
        /// Bytes of the segment.
        size: u64,
    },
    /// The file was truncated under this process's mapping and a page past its end was
    /// touched: the truncation guard (`install_truncation_guard`, feature
    /// `truncation-guard`) replaced the mapping with zeros instead of letting SIGBUS kill
    /// the process. The mapping no longer shows the file, whatever its size is now.
    #[error("segment {path} was truncated below its {size} bytes while this process had it mapped (a process with write access truncated it); this process now sees zeros in its place and nothing it writes reaches the file: drop the ring, stop every process attached to it, remove the file and create the ring again")]
    TruncatedWhileMapped {
        /// The path.
        path: PathBuf,
        /// Bytes of the segment.
        size: u64,
    },
    /// The name was changed to refer to another file between the open of a ring and the
    /// unlink of its leftover file ([`crate::Ring::unlink_deleted`]), so nothing was
    /// removed.
    #[error("{path} was replaced by another file while it was being removed; nothing was removed: try again")]
    Replaced {
        /// The path.
        path: PathBuf,
    },
}

impl OpenError {
    /// This error with `from` replaced by `to` where it names a path: an error met under a
    /// hidden name, told about the name it was put back to.
    pub(crate) fn renamed(mut self, from: &std::path::Path, to: &std::path::Path) -> Self {
        match &mut self {
            Self::NotFound { path, .. }
            | Self::AlreadyExists { path, .. }
            | Self::PermissionDenied { path, .. }
            | Self::Layout { path, .. }
            | Self::NoSpace { path, .. }
            | Self::Io { path, .. }
            | Self::NotRegular { path, .. }
            | Self::Truncated { path, .. }
            | Self::TruncatedWhileMapped { path, .. }
            | Self::Replaced { path }
                if path == from =>
            {
                to.clone_into(path);
            }
            _ => {}
        }
        self
    }

    pub(crate) fn io(op: &'static str, path: &std::path::Path, e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            OpenError::PermissionDenied {
                path: path.to_owned(),
                op,
                detail: format!(
                    "{}; run as the owner or a member of the group, or create the ring with a group mode (see docs/DEPLOYMENT.md)",
                    crate::access::explain_denied(path)
                ),
            }
        } else {
            OpenError::Io {
                op,
                path: path.to_owned(),
                source: e,
            }
        }
    }
}

/// Why a ring's declared consumers (`RingConfig::declared`) cannot be laid out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclaredError {
    /// A name that does not fit a consumer entry.
    #[error("declared consumer name {0:?} is empty, longer than 48 bytes, or contains NUL: use 1 to 48 bytes")]
    BadName(String),
    /// The same name declared twice.
    #[error("consumer {0:?} is declared twice: declare each durable consumer once")]
    Duplicate(String),
    /// More names than consumer entries.
    #[error("{declared} declared consumers do not fit a consumer table of {max_consumers}: declare fewer, or raise max_consumers")]
    TooMany {
        /// Names declared.
        declared: usize,
        /// The consumer table size.
        max_consumers: u32,
    },
    /// Worker groups declared on a ring of fixed-size or sized events, which carries none.
    #[error("worker group {0:?} is declared on a ring published by a cursor (event_size or max_event_size), which carries no worker groups: declare it on a ring of stamped slots")]
    GroupOnFixedRing(String),
}

/// Attaching a producer or a consumer to a ring.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachError {
    /// Every table entry is taken.
    #[error(
        "all {max} {what} entries of the ring are taken: detach one, or create the ring with more"
    )]
    TableFull {
        /// "consumer" or "producer".
        what: &'static str,
        /// Table size.
        max: u32,
    },
    /// A single-producer ring already has its producer.
    #[error("ring is single-producer and pid {pid} already produces into it")]
    SingleProducerTaken {
        /// That producer's pid.
        pid: u32,
    },
    /// A durable consumer of that name is attached by a live process.
    #[error("consumer {name:?} is attached by live pid {pid}: one process per durable consumer")]
    NameInUse {
        /// The name.
        name: String,
        /// The process holding it.
        pid: u32,
    },
    /// A consumer name that does not fit.
    #[error("consumer name {0:?} is empty, longer than 48 bytes, or contains NUL")]
    BadName(String),
    /// The ring was deleted.
    #[error("ring was deleted")]
    Deleted,
    /// The ring's previous single producer died holding a claim whose slot still holds an
    /// event a consumer has not read, so its hole cannot be tombstoned yet.
    #[error("the ring's previous producer (pid {pid}) died holding a claim that cannot be repaired until the consumers read further; retry")]
    PredecessorClaim {
        /// The dead producer's pid.
        pid: u32,
    },
    /// The segment file shrank below the mapped segment (someone with write access
    /// truncated it): the attach would touch pages that no longer exist.
    #[error("the segment file shrank to {len} bytes, below its {size}: it was truncated; stop every process attached to it, remove the file and create the ring again")]
    Truncated {
        /// Bytes left in the file.
        len: u64,
        /// Bytes of the segment.
        size: u64,
    },
    /// The segment file was truncated under this process's mapping and the truncation
    /// guard (`install_truncation_guard`, feature `truncation-guard`) replaced the mapping
    /// with zeros: an attach would publish or read where no other process does.
    #[error("the segment file was truncated below its {size} bytes while this process had it mapped, and this process now sees zeros in its place: stop every process attached to it, remove the file and create the ring again")]
    TruncatedWhileMapped {
        /// Bytes of the segment.
        size: u64,
    },
    /// A worker attaching to a group whose name belongs to a durable consumer.
    #[error("{name:?} is a durable consumer of this ring, not a worker group: pick another group name, or attach with ConsumerOptions::durable")]
    NotAGroup {
        /// The name.
        name: String,
    },
    /// A durable consumer attaching under the name of a worker group.
    #[error("{name:?} is a worker group of this ring, not a durable consumer: pick another name, or attach with ConsumerOptions::worker")]
    IsAGroup {
        /// The name.
        name: String,
    },
    /// Another live process has been stopping or starting the ring for longer than an
    /// attach waits.
    #[error(
        "the ring is being stopped or started by another process that has not finished; try again"
    )]
    Busy,
    /// A name given to `ConsumerOptions::after` is not a durable consumer of this ring.
    #[error("upstream consumer {name:?} is not a durable consumer of this ring: attach it (or declare it in the ring's configuration) before the consumers that read behind it, or fix the name")]
    UnknownUpstream {
        /// The name.
        name: String,
    },
    /// The dependencies would form a cycle: each consumer in `names` reads behind the next,
    /// and the last is the first again.
    #[error("consumer dependencies would form a cycle ({}): remove one of these `after` names", names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(" -> "))]
    Cycle {
        /// The consumers of the cycle, each reading behind the next; the first and the last
        /// are this consumer.
        names: Vec<String>,
    },
    /// More upstream consumers than an entry records.
    #[error("a consumer reads behind at most {max} upstream consumers: chain them through an intermediate consumer")]
    TooManyUpstreams {
        /// `shmring_layout::MAX_UPSTREAM`.
        max: usize,
    },
    /// A consumer named itself in `ConsumerOptions::after`.
    #[error("consumer {name:?} names itself as an upstream: a consumer cannot read behind itself")]
    SelfUpstream {
        /// The name.
        name: String,
    },
    /// A worker group member named upstream consumers (`ConsumerOptions::after`) other
    /// than the group's: the member that created the group recorded them in its entry, and
    /// every member reads behind those (a declared group has none).
    #[error("worker group {group:?} runs after {recorded:?}, and a member asked for {asked:?}: give every member of a group the same `after`; a group's upstreams are fixed when its first member creates it (a declared group runs after nothing), so changing them takes a new group name or a new ring")]
    GroupUpstreams {
        /// The group.
        group: String,
        /// The names the group's entry records (an entry that no longer holds a durable
        /// name shows as `#index`).
        recorded: Vec<String>,
        /// The names the member asked for.
        asked: Vec<String>,
    },
    /// The ring's position (the claim word, or the stop sequence of a closed line), or a
    /// worker group's work sequence at a member's attach, is at or past
    /// `shmring_layout::MAX_SEQUENCE`, which no ring reaches: the segment was overwritten.
    /// A producer's and a consumer's attach both refuse it.
    #[error("the ring's position {position:#x} is past any sequence a ring reaches: the segment is corrupt; stop every process attached to it, remove the ring and create it again")]
    CorruptPosition {
        /// The position found.
        position: u64,
    },
    /// What a ring of fixed-size or sized events (`RingConfig::event_size`,
    /// `RingConfig::max_event_size`) does not carry.
    #[error("a {what} is not available on a ring published by a cursor (event_size or max_event_size): use a ring of stamped slots for it")]
    FixedSizeRing {
        /// What was asked for.
        what: &'static str,
    },
}

/// `publish`, `publish_batch` and `claim`: the forms that wait for room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The payload does not fit in a slot.
    #[error(
        "payload of {len} bytes exceeds the slot's {max}: create the ring with a larger slot size (on a ring of sized events, a larger max_event_size)"
    )]
    TooLarge {
        /// Payload length.
        len: usize,
        /// Largest payload.
        max: usize,
    },
    /// A payload of another size than a fixed-size ring's events (`RingConfig::event_size`).
    #[error("payload of {len} bytes on a ring of {size}-byte events: every event is exactly {size} bytes")]
    WrongSize {
        /// Payload length.
        len: usize,
        /// The ring's event size.
        size: usize,
    },
    /// A batch outside `1..=capacity/2`.
    #[error("batch of {len} events is outside 1..={max}; nothing was published")]
    BatchSize {
        /// Events in the batch.
        len: usize,
        /// Largest batch.
        max: usize,
    },
    /// A slot index outside a [`ClaimBatch`](crate::ClaimBatch) of `len` slots.
    #[error("slot {index} is outside the claimed batch of {len} slots")]
    BatchIndex {
        /// The index asked for.
        index: usize,
        /// Slots in the batch.
        len: usize,
    },
    /// The ring is stopped: the claim was refused and nothing was published.
    #[error("ring is stopped: publish refused")]
    Closed,
    /// The ring was deleted while waiting.
    #[error("ring was deleted")]
    Deleted,
    /// The claim on a multi-producer ring got a position at or past
    /// `shmring_layout::MAX_SEQUENCE`, which no ring reaches: another process overwrote the
    /// claim word. Nothing was published.
    #[error("the ring's position {position:#x} is past any sequence a ring reaches: the segment is corrupt; stop every process attached to it, remove the ring and create it again")]
    CorruptPosition {
        /// The position found.
        position: u64,
    },
}

/// `try_publish`, `publish_timeout` and their batch forms: the forms that do not wait, or wait
/// until a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TryPublishError {
    /// No room (try), or no room before the deadline (timeout). No sequence was spent.
    #[error("ring is full")]
    Full,
    /// No room before the deadline. No sequence was spent.
    #[error("no room before the deadline")]
    Timeout,
    /// As [`PublishError::TooLarge`].
    #[error(
        "payload of {len} bytes exceeds the slot's {max}: create the ring with a larger slot size (on a ring of sized events, a larger max_event_size)"
    )]
    TooLarge {
        /// Payload length.
        len: usize,
        /// Largest payload.
        max: usize,
    },
    /// As [`PublishError::WrongSize`].
    #[error("payload of {len} bytes on a ring of {size}-byte events: every event is exactly {size} bytes")]
    WrongSize {
        /// Payload length.
        len: usize,
        /// The ring's event size.
        size: usize,
    },
    /// As [`PublishError::BatchSize`]. No sequence was spent.
    #[error("batch of {len} events is outside 1..={max}; nothing was published")]
    BatchSize {
        /// Events in the batch.
        len: usize,
        /// Largest batch.
        max: usize,
    },
    /// As [`PublishError::Closed`].
    #[error("ring is stopped: publish refused")]
    Closed,
    /// The ring was deleted.
    #[error("ring was deleted")]
    Deleted,
    /// As [`PublishError::CorruptPosition`]. No sequence was spent.
    #[error("the ring's position {position:#x} is past any sequence a ring reaches: the segment is corrupt; stop every process attached to it, remove the ring and create it again")]
    CorruptPosition {
        /// The position found.
        position: u64,
    },
}

/// `Consumer::poll_once` and `Consumer::run`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PollError {
    /// The handler panicked at `sequence`. Events before it were committed; the consumer is
    /// FAILED in the table and keeps its position there (a durable consumer that re-attaches
    /// starts again at `sequence`); this handle delivers nothing more.
    #[error("handler panicked at sequence {sequence}; consumer marked FAILED")]
    HandlerPanicked {
        /// The sequence whose handler call panicked.
        sequence: u64,
    },
    /// The handler failed (returned an error, or its process died in it on every restart)
    /// at `sequence` after `attempts` attempts, and the error policy stopped the consumer:
    /// it is FAILED at `sequence` as after a panic. The error text went to the `tracing`
    /// warning.
    #[error(
        "handler failed at sequence {sequence} after {attempts} attempt(s); consumer marked \
         FAILED: fix the handler or choose ErrorPolicy::Skip, then re-attach to resume"
    )]
    HandlerFailed {
        /// The sequence whose handler failed.
        sequence: u64,
        /// The failed attempts at it.
        attempts: u32,
    },
    /// An earlier handler failure made this consumer FAILED, or an earlier call found its
    /// entry taken (`EntryLost`): the handle delivers nothing more.
    #[error("consumer is FAILED after a handler failure or the loss of its entry (the error an earlier call returned); re-attach to resume")]
    Failed,
    /// The broker released this required consumer (`broker release`) while its handler read
    /// events `from..to` in place, and a producer has since written into their slots: what
    /// the handler was handed may be torn, so discard what it made of them. They are counted
    /// in `dropped_behind`, not `delivered`, and the consumer went on from the head, gating
    /// again, as after any release. A release that left those slots alone is taken at the
    /// next poll instead. `Consumer::run` logs this and goes on.
    #[error("released by the broker while the handler read events {from}..{to} in place, and a producer wrote into them since: what the handler got may be torn, discard it; the consumer goes on from the head")]
    ReleasedWhileReading {
        /// The first event the handler read.
        from: u64,
        /// The sequence after the last one it read.
        to: u64,
    },
    /// The ring was deleted.
    #[error("ring was deleted")]
    Deleted,
    /// `Consumer::poll_runs` on a ring of stamped slots or of sized events: runs are a
    /// fixed-size ring's.
    #[error("poll_runs needs a ring of fixed-size events (RingConfig::event_size): use poll_once")]
    NotFixedSize,
    /// This consumer's table entry is no longer its own: another process freed or took it
    /// (only a damaged segment or a process that wrote into it by hand does that). The
    /// handle delivers nothing more.
    #[error("this consumer's table entry was taken by another process; re-attach")]
    EntryLost,
    /// The entry of upstream consumer `name` (see `ConsumerOptions::after`) was freed (the
    /// upstream unsubscribed) or now holds another consumer: what this consumer reads
    /// behind is gone. The handle delivers nothing more; re-attach with the dependencies
    /// as they are now.
    #[error("upstream consumer {name:?} was unsubscribed or its entry reused: re-attach with the current dependencies")]
    UpstreamLost {
        /// The upstream's name.
        name: String,
    },
    /// This consumer was lapped (or released by the broker) and would go on from the ring's
    /// position, or this worker's claim came from its group's work sequence, but that
    /// position is at or past `shmring_layout::MAX_SEQUENCE`, which no ring reaches: another
    /// process overwrote the segment. The consumer stays where it was; each poll returns
    /// this until the position reads as a sequence again (never, for a worker).
    #[error("the ring's position {position:#x} is past any sequence a ring reaches: the segment is corrupt; stop every process attached to it, remove the ring and create it again")]
    CorruptPosition {
        /// The position found.
        position: u64,
    },
    /// A fixed-size ring's cursor reads more than the capacity past this consumer's
    /// position. No producer publishes that far past a consumer (the wrap gate holds a
    /// required consumer's producers within the capacity; an optional consumer further behind
    /// is lapped, which the claim says), so another process overwrote the cursor and the
    /// slots between are not events. Nothing was delivered and the consumer stays where it
    /// was; each poll returns this until the cursor reads as a position again (the
    /// producer's next publish stores it from its own position).
    #[error("the ring's cursor {cursor:#x} is more than its {capacity} slots past this consumer's position {next}: the segment is corrupt; stop every process attached to it, remove the ring and create it again")]
    CorruptCursor {
        /// The cursor found.
        cursor: u64,
        /// The consumer's position.
        next: u64,
        /// The ring's capacity.
        capacity: u64,
    },
}
