//! `broker status [--json] [--watch] [RING]`.
//!
//! Exit status: 0 all healthy, 1 something unhealthy (a consumer STALLED, DEAD or FAILED,
//! or a segment that fails validation), 2 the broker is unreachable (the report is then
//! read from the segments directly and says so).

use std::process::ExitCode;
use std::time::Duration;

use crate::client::{self, ClientError};
use crate::protocol::{Reply, Request};
use crate::report::StatusReport;

/// Options of `broker status`.
#[derive(Debug, Clone)]
pub struct StatusOptions {
    /// Namespace.
    pub namespace: String,
    /// Only this ring.
    pub ring: Option<String>,
    /// Print JSON.
    pub json: bool,
    /// Redraw every `interval` until interrupted.
    pub watch: Option<Duration>,
}

/// Exit code for a healthy report.
pub const EXIT_HEALTHY: u8 = 0;
/// Exit code when something is unhealthy.
pub const EXIT_UNHEALTHY: u8 = 1;
/// Exit code when the broker is unreachable.
pub const EXIT_UNREACHABLE: u8 = 2;

/// Fetch the report from the broker, or build it from the segments if it is down.
pub fn fetch(
    namespace: &str,
    ring: Option<&str>,
) -> anyhow::Result<(StatusReport, Option<String>)> {
    let req = Request::Status {
        ring: ring.map(str::to_owned),
    };
    match client::request(namespace, &req, Duration::from_secs(5)) {
        Ok(Reply::Status(report)) => Ok((*report, None)),
        Ok(Reply::Error { message }) => anyhow::bail!("{message}"),
        Ok(other) => anyhow::bail!("unexpected reply from the broker: {other:?}"),
        Err(
            e @ (ClientError::NotRunning { .. }
            | ClientError::Io { .. }
            | ClientError::PermissionDenied { .. }),
        ) => Ok((crate::offline::report(namespace, ring), Some(e.to_string()))),
        Err(e) => Err(e.into()),
    }
}

/// Run the command.
pub fn run(opts: StatusOptions) -> anyhow::Result<ExitCode> {
    loop {
        let (report, down) = fetch(&opts.namespace, opts.ring.as_deref())?;
        if opts.watch.is_some() {
            print!("\x1b[2J\x1b[H");
        }
        if opts.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", crate::render::render(&report));
        }
        if let Some(why) = &down {
            eprintln!("broker unreachable: {why}");
        }
        match opts.watch {
            Some(every) => std::thread::sleep(every),
            None => {
                let code = if down.is_some() {
                    EXIT_UNREACHABLE
                } else if report.healthy {
                    EXIT_HEALTHY
                } else {
                    EXIT_UNHEALTHY
                };
                return Ok(ExitCode::from(code));
            }
        }
    }
}
