//! The control socket protocol: one JSON object per line each way.
//!
//! ```text
//! -> {"op":"status"}                      <- {"reply":"status", ...StatusReport}
//! -> {"op":"status","ring":"orders"}
//! -> {"op":"create","ring":"orders","capacity":4096}
//! -> {"op":"stop","ring":"orders"}        <- {"reply":"done","message":"...","sequence":120}
//! -> {"op":"start","ring":"orders"}       <- {"reply":"done","message":"...","run":2}
//! -> {"op":"drain","ring":"orders","timeout_ms":5000}
//! -> {"op":"delete","ring":"orders"}
//! -> {"op":"ping"}                        <- {"reply":"pong","pid":1234,"namespace":"default"}
//!    anything refused                     <- {"reply":"error","message":"..."}
//! ```
//!
//! Requests are at most [`MAX_REQUEST`] bytes; only the broker's uid, root, or the
//! configured group may send them.

use serde::{Deserialize, Serialize};

use crate::report::StatusReport;

/// Longest request line accepted.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Longest reply line a client reads.
pub const MAX_REPLY: usize = 64 << 20;
/// File name of the control socket in the namespace directory.
pub const SOCKET_NAME: &str = "broker.sock";

/// A request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Is anybody there?
    Ping,
    /// The status report, of every ring or one.
    Status {
        /// Only this ring.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ring: Option<String>,
    },
    /// Create a ring (configured shape, else the defaults with these overrides).
    Create {
        /// Name.
        ring: String,
        /// Slots.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capacity: Option<u64>,
        /// Bytes per slot.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot_size: Option<u32>,
    },
    /// Close the ring's sequence line.
    Stop {
        /// Name.
        ring: String,
    },
    /// Reopen a stopped ring.
    Start {
        /// Name.
        ring: String,
    },
    /// Stop and wait for gating consumers to consume everything published.
    Drain {
        /// Name.
        ring: String,
        /// How long to wait (default 10 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Delete the ring: attached clients get an error, the segment is unlinked.
    Delete {
        /// Name.
        ring: String,
    },
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// To `ping`.
    Pong {
        /// The broker's pid.
        pid: u32,
        /// Its namespace.
        namespace: String,
    },
    /// To `status`.
    Status(Box<StatusReport>),
    /// A lifecycle request succeeded.
    Done {
        /// What happened.
        message: String,
        /// The stop sequence (stop, drain).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sequence: Option<u64>,
        /// The new run number (start).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run: Option<u64>,
    },
    /// Refused, with the reason.
    Error {
        /// What went wrong and what to do.
        message: String,
    },
}

impl Reply {
    /// An error reply.
    pub fn error(message: impl Into<String>) -> Reply {
        Reply::Error {
            message: message.into(),
        }
    }
}
