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
    /// The name was changed to refer to another file between the open and the remove, so
    /// nothing was removed.
    #[error("{path} was replaced by another file while it was being removed; nothing was removed: try again")]
    Replaced {
        /// The path.
        path: PathBuf,
    },
}

impl OpenError {
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
}

/// `publish`, `publish_batch` and `claim`: the forms that wait for room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The payload does not fit in a slot.
    #[error(
        "payload of {len} bytes exceeds the slot's {max}: create the ring with a larger slot size"
    )]
    TooLarge {
        /// Payload length.
        len: usize,
        /// Largest payload.
        max: usize,
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
        "payload of {len} bytes exceeds the slot's {max}: create the ring with a larger slot size"
    )]
    TooLarge {
        /// Payload length.
        len: usize,
        /// Largest payload.
        max: usize,
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
}

/// `Consumer::poll_once` and `Consumer::run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PollError {
    /// The handler panicked at `sequence`. Events before it were committed; the consumer is
    /// FAILED in the table and keeps its position there (a durable consumer that re-attaches
    /// starts again at `sequence`); this handle delivers nothing more.
    #[error("handler panicked at sequence {sequence}; consumer marked FAILED")]
    HandlerPanicked {
        /// The sequence whose handler call panicked.
        sequence: u64,
    },
    /// An earlier handler failure made this consumer FAILED.
    #[error("consumer is FAILED after a handler panic; re-attach to resume")]
    Failed,
    /// The ring was deleted.
    #[error("ring was deleted")]
    Deleted,
    /// This consumer's table entry is no longer its own: another process freed or took it
    /// (only a damaged segment or a process that wrote into it by hand does that). The
    /// handle delivers nothing more.
    #[error("this consumer's table entry was taken by another process; re-attach")]
    EntryLost,
}
