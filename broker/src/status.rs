//! `broker status [--json] [RING] [--watch [INTERVAL]]`.
//!
//! Exit status: 0 all healthy, 1 something unhealthy (a consumer STALLED, DEAD or FAILED,
//! a ring BLOCKED, or a segment that fails validation), 2 the broker is unreachable (the
//! report is then read from the segments directly and says so) or the namespace does not
//! exist.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use crate::client::{self, ClientError};
use crate::exit;
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

/// Fetch the report from the broker, or build it from the segments if it is down (the
/// report's `broker.unreachable` then says why).
pub fn fetch(namespace: &str, ring: Option<&str>) -> anyhow::Result<(StatusReport, bool)> {
    let req = Request::Status {
        ring: ring.map(str::to_owned),
    };
    let offline = |why: String| {
        let mut report = crate::offline::report(namespace, ring)?;
        report.broker.unreachable = Some(why);
        Ok((report, true))
    };
    match client::request(namespace, &req, Duration::from_secs(5)) {
        Ok(Reply::Status(report)) => Ok((*report, false)),
        // Not an answer about the rings: what they hold is read from the segments, and the
        // exit status says the broker was not reachable (not that something is unhealthy).
        Ok(Reply::Error { message }) if message == crate::protocol::BUSY => offline(message),
        Ok(Reply::Error { message }) => anyhow::bail!("{message}"),
        Ok(other) => anyhow::bail!("unexpected reply from the broker: {other:?}"),
        Err(
            e @ (ClientError::NotRunning { .. }
            | ClientError::Io { .. }
            | ClientError::PermissionDenied { .. }
            | ClientError::NotTheBroker { .. }),
        ) => offline(e.to_string()),
        Err(e) => Err(e.into()),
    }
}

/// The exit code of one report.
pub fn exit_code(report: &StatusReport, down: bool) -> u8 {
    if down {
        exit::UNREACHABLE
    } else if report.healthy {
        exit::OK
    } else {
        exit::FAILED
    }
}

/// Run the command. With `--watch`, the screen is cleared between reports only on a
/// terminal; elsewhere the reports follow each other (`--json`: one document per line).
pub fn run(opts: StatusOptions) -> anyhow::Result<ExitCode> {
    let tty = std::io::stdout().is_terminal();
    let mut told_down = false;
    loop {
        if let Err(e) = client::existing_dir(&opts.namespace) {
            exit::err(&format!("error: {e}"));
            return Ok(ExitCode::from(exit::UNREACHABLE));
        }
        let (report, down) = fetch(&opts.namespace, opts.ring.as_deref())?;
        let code = exit_code(&report, down);
        let mut text = String::new();
        match (opts.json, opts.watch.is_some()) {
            (true, true) => text.push_str(&serde_json::to_string(&report)?),
            (true, false) => text.push_str(&serde_json::to_string_pretty(&report)?),
            (false, watching) => {
                if watching && tty {
                    text.push_str("\x1b[2J\x1b[H");
                }
                let width = if tty {
                    crate::render::terminal_width()
                } else {
                    None
                };
                text.push_str(&crate::render::render(&report, width));
            }
        }
        text.push('\n');
        if exit::out(&text).is_err() {
            return Ok(ExitCode::from(code));
        }
        if let (Some(why), false) = (&report.broker.unreachable, told_down) {
            exit::err(&format!("broker unreachable: {why}"));
            told_down = opts.watch.is_some();
        }
        match opts.watch {
            Some(every) => std::thread::sleep(every),
            None => return Ok(ExitCode::from(code)),
        }
    }
}
