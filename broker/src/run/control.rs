//! The control socket: `<namespace dir>/broker.sock`, mode 0600 (0660 with the broker
//! group). Each connection's peer is checked with the credentials the kernel recorded on the
//! socket at `connect` (`SO_PEERCRED` for the uid and primary gid, `SO_PEERGROUPS` for the
//! supplementary groups): only the broker's uid, root, or a member of the configured group
//! (primary or supplementary) may send requests. One thread accepts; each connection
//! gets a thread of its own (at most `MAX_CONNECTIONS` at once), reads newline-delimited
//! JSON requests of bounded size, each within one deadline in all (not one per read), and
//! answers each one within another. Nothing a peer
//! sends can take the broker down: a bad request gets an error reply.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{Gid, Mode};
use tracing::{debug, warn};

use super::ops;
use super::registry::Broker;
use super::until::Until;
use crate::protocol::{Deadline, Reply, Request, MAX_REQUEST};

/// Connections served at once; more are answered "busy" and closed.
const MAX_CONNECTIONS: usize = 16;
/// How long a peer may take to send a request line, in all (from when the broker starts
/// reading it: the connection's first, or the one after a reply).
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a peer may take to read a reply, in all.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a refused peer may take to send its request line, and the accept thread to
/// write a "busy" reply, in all.
const BRIEF: Duration = Duration::from_secs(1);

/// Who may send requests.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    /// The broker's effective uid.
    pub uid: u32,
    /// The configured group.
    pub gid: Option<u32>,
}

impl Access {
    fn allows(&self, uid: u32, gid: u32, groups: &[u32]) -> bool {
        uid == 0 || uid == self.uid || self.gid.is_some_and(|g| g == gid || groups.contains(&g))
    }
}

/// A socket peer's credentials as the kernel recorded them at `connect` (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// The peer's pid in this process's pid namespace; `None` when the peer runs in one
    /// this process cannot see (the kernel gives 0), as from a container's pid namespace
    /// to the host's or between two containers'.
    pub pid: Option<i32>,
    /// The peer's effective uid.
    pub uid: u32,
    /// The peer's effective primary gid.
    pub gid: u32,
}

/// The peer's credentials (`SO_PEERCRED`). Read as plain integers: rustix's `UCred` holds
/// the pid as a non-zero number, and a peer in a pid namespace this process cannot see
/// has pid 0 (which that type cannot hold).
pub fn peer_cred(stream: &UnixStream) -> std::io::Result<PeerCred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let size = std::mem::size_of::<libc::ucred>();
    let mut len = size as libc::socklen_t;
    // SAFETY: `cred` is a writable, aligned `ucred` of `len` bytes that outlives the call;
    // the kernel writes at most `len` bytes into it and stores the count it wrote in `len`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::from_mut(&mut cred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if len as usize != size {
        return Err(std::io::Error::other(format!(
            "SO_PEERCRED gave {len} bytes, not {size}"
        )));
    }
    Ok(PeerCred {
        pid: (cred.pid > 0).then_some(cred.pid),
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Most supplementary groups a process can have (`NGROUPS_MAX` on Linux).
const NGROUPS_MAX: usize = 65536;

/// The peer's supplementary groups, as the kernel recorded them on the socket when the peer
/// connected (`SO_PEERGROUPS`, Linux 4.13). Read from the connection itself, not from
/// `/proc/PID/status`: a pid names whichever process has it now, and the peer may have
/// exited and its pid been reused by then. rustix has no wrapper for this option.
fn peer_groups(stream: &UnixStream) -> std::io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    const GID: usize = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    loop {
        let mut len = (groups.len() * GID) as libc::socklen_t;
        // SAFETY: `groups` is a writable, aligned buffer of `len` bytes that outlives the
        // call; the kernel writes at most `len` bytes into it and stores the byte count it
        // wrote (or, failing with ERANGE, the count it needs) in `len`.
        let r = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let len = len as usize;
        if r == 0 {
            groups.truncate(len / GID);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        let needed = len.div_ceil(GID);
        if e.raw_os_error() == Some(libc::ERANGE) && needed > groups.len() && needed <= NGROUPS_MAX
        {
            groups.resize(needed, 0);
            continue;
        }
        return Err(e);
    }
}

/// Bind the socket (replacing a stale one: the caller holds the namespace lock) and set
/// its mode and group explicitly (the umask would change a requested mode).
pub fn bind(path: &Path, gid: Option<u32>) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => debug!(path = %path.display(), "removed a stale control socket"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    let mode = if gid.is_some() { 0o660 } else { 0o600 };
    rustix::fs::chmod(path, Mode::from_raw_mode(mode))?;
    if let Some(g) = gid {
        rustix::fs::chown(path, None, Some(Gid::from_raw(g)))?;
    }
    Ok(listener)
}

/// A connection's place among the [`MAX_CONNECTIONS`], given back however its thread ends
/// (an unwinding one included: a slot kept would leave the broker answering "busy" to
/// every request once all were lost).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serve connections until the process exits.
pub fn serve(listener: UnixListener, shared: Arc<Mutex<Broker>>, access: Access) {
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                warn!("control socket accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            let _ = reply(&stream, &Reply::error(crate::protocol::BUSY), BRIEF);
            continue;
        }
        let shared = shared.clone();
        let slot = Slot(active.clone());
        let spawned = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                let _slot = slot;
                connection(stream, &shared, access);
            });
        // A thread that could not start dropped its closure, and with it the slot.
        if let Err(e) = spawned {
            warn!("cannot start a control thread: {e}");
        }
    }
}

fn connection(stream: UnixStream, shared: &Mutex<Broker>, access: Access) {
    let peer = match peer_cred(&stream) {
        Ok(c) => c,
        Err(e) => {
            let _ = reply(
                &stream,
                &Reply::error(format!("cannot identify the peer: {e}")),
                BRIEF,
            );
            return;
        }
    };
    let (uid, gid) = (peer.uid, peer.gid);
    // Without them (a kernel before 4.13), the primary group alone decides.
    let groups = peer_groups(&stream).unwrap_or_else(|e| {
        debug!("cannot read the peer's supplementary groups: {e}");
        Vec::new()
    });
    if !access.allows(uid, gid, &groups) {
        warn!(
            uid,
            gid,
            ?groups,
            pid = %peer
                .pid
                .map_or_else(|| "not in this pid namespace".to_owned(), |p| p.to_string()),
            "refused a control connection"
        );
        // Take the request line first (briefly, bounded in all), so the refusal is its
        // reply and not a reset the peer sees as a broken pipe.
        let _ = BufReader::new(Until::within(&stream, BRIEF))
            .take(MAX_REQUEST as u64)
            .read_until(b'\n', &mut Vec::new());
        let group = access
            .gid
            .map_or(String::new(), |g| format!(", members of group {g}"));
        let owner = if access.uid == 0 {
            String::new()
        } else {
            format!("uid {}, ", access.uid)
        };
        let _ = reply(&stream, &Reply::error(format!(
            "permission denied: uid {uid} (gid {gid}, groups {groups:?}) may not control this broker; allowed: {owner}root{group}"
        )), BRIEF);
        return;
    }
    let mut reader = BufReader::new(Until::within(&stream, READ_TIMEOUT));
    loop {
        // One deadline for the whole line: a peer that trickles it a byte at a time runs out
        // of time as one that sends nothing does.
        reader.get_mut().deadline = Instant::now() + READ_TIMEOUT;
        let mut line = Vec::new();
        let n = match (&mut reader)
            .take(MAX_REQUEST as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(n) => n,
            Err(e) => {
                debug!("control connection: {e}");
                return;
            }
        };
        if n == 0 {
            return;
        }
        if line.len() > MAX_REQUEST {
            let _ = reply(
                &stream,
                &Reply::error(format!("request longer than {MAX_REQUEST} bytes refused")),
                WRITE_TIMEOUT,
            );
            return;
        }
        let answer = match parse(&line) {
            Ok((req, deadline)) => {
                debug!(?req, uid, "control request");
                ops::execute(shared, req, deadline, &|| !hung_up(&stream))
            }
            Err(message) => Reply::error(message),
        };
        if reply(&stream, &answer, WRITE_TIMEOUT).is_err() {
            return;
        }
    }
}

/// A request line and its deadline, or an error message saying what was expected.
pub fn parse(line: &[u8]) -> Result<(Request, Option<Deadline>), String> {
    let text = std::str::from_utf8(line).map_err(|_| "malformed request: not UTF-8".to_owned())?;
    crate::protocol::decode(text.trim_end()).map_err(|e| {
        format!("malformed request ({e}): send one JSON object per line, e.g. {{\"op\":\"status\"}}; ops: ping, status, create, stop, start, drain, delete, release, unsubscribe")
    })
}

/// Whether the peer closed its end of the connection (both directions: a peer that only
/// shut down its writing half after its request still waits for the reply). Looked at
/// without waiting; a failed look counts as still there.
fn hung_up(stream: &UnixStream) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    // POLLHUP is reported whatever events are asked for.
    let mut fd = [PollFd::new(stream, PollFlags::empty())];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fd, Some(&now)), Ok(n) if n > 0) && fd[0].revents().contains(PollFlags::HUP)
}

/// Write `reply` and its newline, all of it `within`.
fn reply(stream: &UnixStream, reply: &Reply, within: Duration) -> std::io::Result<()> {
    let mut out = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    out.push(b'\n');
    Until::within(stream, within).write_all(&out)
}

/// The socket path of a namespace directory.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(crate::protocol::SOCKET_NAME)
}
