//! The command line's contract with scripts and monitoring: exit codes, errors printed once,
//! and output that survives a reader that went away.
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | done; for `status`: everything healthy |
//! | 1 | refused or failed; for `status`: something unhealthy or blocked |
//! | 2 | no broker could be reached (for `status`: the report was read from the segments) |
//! | 64 | usage error: unknown command or option, or a bad value (`EX_USAGE`) |
//!
//! A closed stdout (`shmring-broker status | head -1`) ends the command quietly with the
//! code it would have had: the reader has what it wanted.

use std::io::Write;
use std::process::ExitCode;

/// Done, healthy.
pub const OK: u8 = 0;
/// Refused, failed, or unhealthy.
pub const FAILED: u8 = 1;
/// No broker answered.
pub const UNREACHABLE: u8 = 2;
/// The command line itself is wrong (`EX_USAGE` of sysexits.h).
pub const USAGE: u8 = 64;

/// The reader of stdout went away (`EPIPE`): stop writing, exit quietly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// Write `text` to stdout and flush it. Any write error ends the output: a closed pipe is
/// the usual one, and there is nobody left to tell about the others.
pub fn out(text: &str) -> Result<(), Closed> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|_| Closed)
}

/// `out` with a newline.
pub fn outln(text: &str) -> Result<(), Closed> {
    out(&format!("{text}\n"))
}

/// Write one line to stderr; a closed stderr is ignored (never a panic).
pub fn err(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Print `error: ...` once and return exit code 1.
pub fn fail(e: &anyhow::Error) -> ExitCode {
    err(&format!("error: {}", describe(e)));
    ExitCode::from(FAILED)
}

/// An error and its causes on one line, each cause only if the text so far does not
/// already say it (many errors print their source in their own message).
pub fn describe(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("talking to the broker: {source}")]
    struct SaysItsSource {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = anyhow::Error::new(SaysItsSource {
            source: std::io::Error::other("connection reset"),
        });
        assert_eq!(describe(&e), "talking to the broker: connection reset");
        let e = e.context("status");
        assert_eq!(
            describe(&e),
            "status: talking to the broker: connection reset"
        );
    }

    #[test]
    fn a_cause_not_in_the_message_is_added_once() {
        let e = anyhow::Error::new(std::io::Error::other("address in use"))
            .context("cannot bind 127.0.0.1:9100");
        assert_eq!(describe(&e), "cannot bind 127.0.0.1:9100: address in use");
    }
}
