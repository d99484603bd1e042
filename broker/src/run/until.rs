//! A socket read or written against one deadline: each call waits at most what is left of
//! it, so a peer that sends or takes a byte at a time, each within any per-call timeout,
//! still runs out of time. The metrics endpoint and the control socket serve their peers
//! through it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A stream whose reads and writes can be given a timeout.
pub trait Timed {
    /// `set_read_timeout` of the stream.
    fn read_timeout(&self, t: Duration) -> std::io::Result<()>;
    /// `set_write_timeout` of the stream.
    fn write_timeout(&self, t: Duration) -> std::io::Result<()>;
}

impl Timed for TcpStream {
    fn read_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

impl Timed for UnixStream {
    fn read_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

/// `stream` read or written until `deadline`; past it, every call fails with `TimedOut`.
pub struct Until<'a, S> {
    /// The stream.
    pub stream: &'a S,
    /// When time runs out.
    pub deadline: Instant,
}

impl<'a, S> Until<'a, S> {
    /// `stream` until `within` from now.
    pub fn within(stream: &'a S, within: Duration) -> Self {
        Self {
            stream,
            deadline: Instant::now() + within,
        }
    }

    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl<S: Timed> Read for Until<'_, S>
where
    for<'s> &'s S: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.read_timeout(self.left()?)?;
        self.stream.read(buf)
    }
}

impl<S: Timed> Write for Until<'_, S>
where
    for<'s> &'s S: Write,
{
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write_timeout(self.left()?)?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that sends a byte at a time, each well within the time left, runs out of
    /// time all the same: the deadline is for the whole read, not each call.
    #[test]
    fn a_trickle_runs_out_of_time() {
        let (a, mut b) = UnixStream::pair().expect("a socket pair");
        let writer = std::thread::spawn(move || {
            for _ in 0..50 {
                // A pace for the trickle, not a synchronisation sleep.
                std::thread::sleep(Duration::from_millis(20));
                if b.write_all(b"x").is_err() {
                    return;
                }
            }
        });
        let mut r = Until::within(&a, Duration::from_millis(200));
        let mut got = Vec::new();
        let e = r
            .read_to_end(&mut got)
            .expect_err("a trickle of 1 s within 200 ms");
        // Out of time before a read (`TimedOut`), or in one (the socket's own timeout,
        // set to what was left: `WouldBlock`).
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        // The writer takes at least 1 s for its 50 bytes.
        assert!(got.len() < 50, "read all {} bytes", got.len());
        drop(a);
        writer.join().expect("the writer");
    }
}
