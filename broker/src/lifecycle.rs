//! `broker create|stop|start|drain|delete RING` and `broker release|unsubscribe RING
//! CONSUMER`: requests sent to the running broker, so that one process orders them. Each
//! carries a deadline: the broker never begins one after the CLI stopped waiting. Exit
//! status: 0 done, 1 refused, 2 no broker reachable.

use std::process::ExitCode;
use std::time::Duration;

use crate::client::{self, ClientError, Wait};
use crate::exit;
use crate::protocol::{Reply, Request};

/// How long a request may wait for the broker to begin it (another request on the same
/// ring, a sweep).
const START_WITHIN: Duration = Duration::from_secs(10);
/// How long the work of a quick request may take once begun, besides its wait for another
/// process's stop or start of the ring.
const QUICK_WORK: Duration = Duration::from_secs(5);

/// How long the CLI waits, past the deadline, for the reply to `req`: the broker may have
/// begun it just before the deadline, and every lifecycle call it makes waits for another
/// process's stop or start of the ring up to `LIFECYCLE_WAIT` before it answers that the
/// ring is busy (a drain then waits for its consumers up to its timeout; a delete may wait
/// twice, before it sets the file aside and again to mark the ring deleted). The reply
/// that names that process comes within this.
fn work(req: &Request) -> Duration {
    let work = shmring::LIFECYCLE_WAIT + QUICK_WORK;
    match req {
        Request::Drain { timeout_ms, .. } => {
            work + timeout_ms.map_or(crate::run::DRAIN_TIMEOUT, Duration::from_millis)
        }
        Request::Delete { .. } => work + shmring::LIFECYCLE_WAIT,
        _ => work,
    }
}

/// Send `req` and print the outcome.
pub fn run(namespace: &str, req: Request) -> anyhow::Result<ExitCode> {
    let work = work(&req);
    let wait = Wait {
        start_within: START_WITHIN,
        work,
    };
    match client::request_by(namespace, &req, wait) {
        Ok(Reply::Done { message, .. }) => {
            let _ = exit::outln(&message);
            Ok(ExitCode::from(exit::OK))
        }
        // Refused before it was looked at, for the broker's connections: nothing was done,
        // and no broker could take the request (exit status 2, as for a broker down).
        Ok(Reply::Error { message }) if message == crate::protocol::BUSY => {
            exit::err(&format!("error: {message}"));
            Ok(ExitCode::from(exit::UNREACHABLE))
        }
        Ok(Reply::Error { message }) => {
            exit::err(&format!("error: {message}"));
            Ok(ExitCode::from(exit::FAILED))
        }
        Ok(other) => anyhow::bail!("unexpected reply from the broker: {other:?}"),
        Err(
            e @ (ClientError::NotRunning { .. }
            | ClientError::NoNamespace { .. }
            | ClientError::PermissionDenied { .. }
            | ClientError::NotTheBroker { .. }),
        ) => {
            exit::err(&format!("error: {e}"));
            Ok(ExitCode::from(exit::UNREACHABLE))
        }
        Err(e) => Err(e.into()),
    }
}
