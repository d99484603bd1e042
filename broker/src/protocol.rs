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
//! -> {"op":"release","ring":"orders","consumer":"audit"}
//! -> {"op":"unsubscribe","ring":"orders","consumer":"audit"}
//! -> {"op":"ping"}                        <- {"reply":"pong","pid":1234,"namespace":"default"}
//!    anything refused                     <- {"reply":"error","message":"..."}
//! ```
//!
//! Any request may carry `"deadline_ns"`: a `CLOCK_MONOTONIC` instant (the machine's
//! clock, the same in every process) after which the broker must not begin it. The CLI sets
//! it to when it stops waiting for the reply, so a request it gave up on is never carried
//! out later; the broker answers such a request with an error saying it was not done.
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
/// File name of the broker's lock in the namespace directory: the broker holds an exclusive
/// `flock` on it for as long as it runs.
pub const LOCK_NAME: &str = "broker.lock";

/// The error a broker serving as many control connections as it may answers a new one
/// with (`status` then reads the segments itself, as when no broker is reachable).
pub const BUSY: &str = "broker busy: too many control connections, try again";

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
    /// Stop a durable consumer from gating producers.
    Release {
        /// Ring name.
        ring: String,
        /// Consumer name.
        consumer: String,
    },
    /// Free the entry of a durable consumer that is not attached.
    Unsubscribe {
        /// Ring name.
        ring: String,
        /// Consumer name.
        consumer: String,
    },
}

impl Request {
    /// Whether it changes something (everything but `ping` and `status`).
    pub fn is_lifecycle(&self) -> bool {
        !matches!(self, Request::Ping | Request::Status { .. })
    }
}

/// Key of the deadline in a request line.
const DEADLINE_KEY: &str = "deadline_ns";

/// The instant after which the broker must not begin a request (`CLOCK_MONOTONIC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(pub u64);

impl Deadline {
    /// `after` from now.
    pub fn after(after: std::time::Duration) -> Deadline {
        let ns = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        Deadline(monotonic_ns().saturating_add(ns))
    }

    /// Whether it has passed.
    pub fn passed(self) -> bool {
        monotonic_ns() > self.0
    }

    /// The time left until it, `None` once it has passed.
    pub fn left(self) -> Option<std::time::Duration> {
        self.0
            .checked_sub(monotonic_ns())
            .filter(|&ns| ns > 0)
            .map(std::time::Duration::from_nanos)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// A request line: the request and its deadline, if any.
pub fn encode(req: &Request, deadline: Option<Deadline>) -> serde_json::Result<Vec<u8>> {
    let mut value = serde_json::to_value(req)?;
    if let (Some(d), Some(map)) = (deadline, value.as_object_mut()) {
        map.insert(DEADLINE_KEY.to_owned(), d.0.into());
    }
    let mut line = serde_json::to_vec(&value)?;
    line.push(b'\n');
    Ok(line)
}

/// Parse a request line (without its newline).
pub fn decode(text: &str) -> serde_json::Result<(Request, Option<Deadline>)> {
    let mut value: serde_json::Value = serde_json::from_str(text)?;
    let deadline = match value.as_object_mut().and_then(|m| m.remove(DEADLINE_KEY)) {
        None => None,
        Some(v) => Some(Deadline(serde::Deserialize::deserialize(v)?)),
    };
    Ok((serde_json::from_value(value)?, deadline))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_travels_beside_the_request() {
        let req = Request::Release {
            ring: "orders".into(),
            consumer: "audit".into(),
        };
        let line = encode(&req, Some(Deadline(42))).expect("encode");
        let text = std::str::from_utf8(&line).expect("utf8");
        assert!(text.ends_with('\n'));
        assert_eq!(
            decode(text.trim_end()).expect("decode"),
            (req.clone(), Some(Deadline(42)))
        );
        let line = encode(&req, None).expect("encode");
        let text = std::str::from_utf8(&line).expect("utf8");
        assert_eq!(decode(text.trim_end()).expect("decode"), (req, None));
    }

    #[test]
    fn unknown_fields_and_bad_deadlines_are_refused() {
        assert!(decode(r#"{"op":"stop","ring":"x","force":true}"#).is_err());
        assert!(decode(r#"{"op":"stop","ring":"x","deadline_ns":"soon"}"#).is_err());
        assert!(decode(r#"{"op":"stop","ring":"x","deadline_ns":-1}"#).is_err());
        assert!(decode(r#"[1,2]"#).is_err());
    }
}
