//! `broker create|stop|start|drain|delete RING`: lifecycle requests sent to the running
//! broker, so that one process orders them. Exit status: 0 done, 1 refused, 2 no broker.

use std::process::ExitCode;
use std::time::Duration;

use crate::client::{self, ClientError};
use crate::protocol::{Reply, Request};

/// Send `req` and print the outcome.
pub fn run(namespace: &str, req: Request) -> anyhow::Result<ExitCode> {
    let wait = match &req {
        Request::Drain { timeout_ms, .. } => {
            Duration::from_millis(timeout_ms.unwrap_or(10_000)) + Duration::from_secs(5)
        }
        _ => Duration::from_secs(10),
    };
    match client::request(namespace, &req, wait) {
        Ok(Reply::Done { message, .. }) => {
            println!("{message}");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Reply::Error { message }) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(1))
        }
        Ok(other) => anyhow::bail!("unexpected reply from the broker: {other:?}"),
        Err(e @ ClientError::NotRunning { .. }) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
        Err(e) => Err(e.into()),
    }
}
