//! Talking to a running broker over its control socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::{Deadline, Reply, Request, MAX_REPLY, SOCKET_NAME};

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The namespace has no directory: nothing ever ran or was created in it (often a
    /// mistyped name).
    #[error("namespace {namespace:?} does not exist: there is no directory {}; no broker ran and no ring was created in it ({})", .dir.display(), describe_known(.known))]
    NoNamespace {
        /// The namespace.
        namespace: String,
        /// Its directory.
        dir: PathBuf,
        /// The namespaces that do exist under the same root.
        known: Vec<String>,
    },
    /// Nobody listens on the socket.
    #[error("no broker is running for namespace {namespace:?} (nothing listens on {path}): start one with `broker run --namespace={namespace}`")]
    NotRunning {
        /// The namespace.
        namespace: String,
        /// The socket path.
        path: PathBuf,
    },
    /// The socket exists but refuses this user: the broker may well be running.
    #[error("permission denied connecting to {path} as uid {uid}: {detail}; the broker may be running: use its user, or a member of its configured group")]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
        /// This process's effective uid.
        uid: u32,
        /// The socket's (or its directory's) mode and owners, when readable.
        detail: String,
    },
    /// The process listening on the socket runs neither as root nor as the namespace
    /// directory's owner, nor (in a directory root owns) holds the namespace's lock: another
    /// user who may write the directory took the path after the broker stopped. Nothing
    /// was sent to it.
    #[error("the process listening on {path} runs as uid {uid}, neither root nor the namespace directory's owner ({owner}): it is not this namespace's broker, so nothing was asked of it; no broker answers here")]
    NotTheBroker {
        /// The socket path.
        path: PathBuf,
        /// The listening process's uid.
        uid: u32,
        /// The namespace directory's owner ("uid N"), or why there is none.
        owner: String,
    },
    /// The namespace name is not valid.
    #[error(transparent)]
    Name(#[from] shmring::OpenError),
    /// The exchange failed half-way.
    #[error("talking to the broker at {path}: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No reply in time to a request that carried a deadline.
    #[error("no reply from the broker within {}: it does not begin a request after the request's deadline ({} after sending), but one it began before then may still complete: check `broker status`", crate::human::format_duration(*.waited), crate::human::format_duration(*.deadline))]
    NoReply {
        /// How long the CLI waited.
        waited: Duration,
        /// The request's deadline, from sending.
        deadline: Duration,
    },
    /// The broker's answer was not a reply.
    #[error("the broker at {path} sent an unreadable reply: {message}")]
    BadReply {
        /// The socket path.
        path: PathBuf,
        /// The parse error.
        message: String,
    },
}

fn describe_known(known: &[String]) -> String {
    if known.is_empty() {
        "no namespace exists on this machine yet: `broker run --namespace NAME` makes one"
            .to_owned()
    } else {
        // Quoted and escaped: anyone may make a directory in the shared-memory root.
        let known: Vec<String> = known.iter().map(|k| format!("{k:?}")).collect();
        format!("namespaces here: {}", known.join(", "))
    }
}

/// The namespaces that exist under the shared-memory root, sorted.
pub fn known_namespaces() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(shmring::names::root())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let f = e.file_name().into_string().ok()?;
            f.strip_prefix("shmring.").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// The namespace's directory, or `NoNamespace` when it does not exist.
pub fn existing_dir(namespace: &str) -> Result<PathBuf, ClientError> {
    let dir = shmring::names::namespace_dir(namespace)?;
    if dir.exists() {
        Ok(dir)
    } else {
        Err(ClientError::NoNamespace {
            namespace: namespace.to_owned(),
            dir,
            known: known_namespaces(),
        })
    }
}

/// How long a lifecycle request may wait in the broker before it must not begin, and how
/// much longer the CLI waits for the reply of one that began in time.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    /// From sending to the request's deadline.
    pub start_within: Duration,
    /// After the deadline, for the work itself (a drain's timeout, for one).
    pub work: Duration,
}

/// Send one request and read its reply, waiting at most `timeout` for it.
pub fn request(namespace: &str, req: &Request, timeout: Duration) -> Result<Reply, ClientError> {
    exchange(namespace, req, None, timeout)
}

/// Send one request with a deadline `wait.start_within` from now and wait for its reply
/// until `wait.work` after that; a reply that does not come is `NoReply`.
pub fn request_by(namespace: &str, req: &Request, wait: Wait) -> Result<Reply, ClientError> {
    let deadline = Deadline::after(wait.start_within);
    let limit = wait.start_within + wait.work;
    match exchange(namespace, req, Some(deadline), limit) {
        Err(ClientError::Io { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(ClientError::NoReply {
                waited: limit,
                deadline: wait.start_within,
            })
        }
        other => other,
    }
}

fn exchange(
    namespace: &str,
    req: &Request,
    deadline: Option<Deadline>,
    timeout: Duration,
) -> Result<Reply, ClientError> {
    let path = existing_dir(namespace)?.join(SOCKET_NAME);
    let io = |source| ClientError::Io {
        path: path.clone(),
        source,
    };
    let stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(ClientError::NotRunning {
                namespace: namespace.to_owned(),
                path,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(ClientError::PermissionDenied {
                uid: rustix::process::geteuid().as_raw(),
                detail: describe_access(&path),
                path,
            })
        }
        Err(e) => return Err(io(e)),
    };
    // Who may serve the namespace. A broker runs as the directory's owner, or in a
    // directory root owns (which it also accepts) as any user: there its uid is not known,
    // and it is the process holding the namespace's lock (`run::lock`). Root may serve any.
    // A broker's socket is removed when it stops, and a member of its group may then bind
    // the path: in a directory a user owns, such a process is asked nothing. (In one root
    // owns, a member may lock the name and run a real broker just the same: the lock is
    // all there is to go by; where `/proc/locks` cannot be read, or the listener runs in a
    // pid namespace this process cannot see, so that its pid is not known, the listener is
    // believed.)
    let cred = crate::run::control::peer_cred(&stream).map_err(io)?;
    let uid = cred.uid;
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    // The path's own owner, never a link's: the broker refuses a namespace path that is a
    // symbolic link (anyone may plant one in `/dev/shm`), so no broker serves one.
    let owner = dir
        .symlink_metadata()
        .ok()
        .filter(|m| m.file_type().is_dir())
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    let broker = uid == 0
        || owner == Some(uid)
        || (owner == Some(0)
            && cred
                .pid
                .and_then(|pid| flock_held(&dir.join(crate::protocol::LOCK_NAME), Some(pid)))
                .unwrap_or(true));
    if !broker {
        return Err(ClientError::NotTheBroker {
            path,
            uid,
            owner: owner.map_or_else(
                || "none: the namespace's path is not a directory".to_owned(),
                |o| format!("uid {o}"),
            ),
        });
    }
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    let line = crate::protocol::encode(req, deadline).map_err(|e| io(std::io::Error::other(e)))?;
    // A refused peer may find the socket closed before it finishes writing; the reply
    // that says why is still there to read.
    if let Err(e) = (&stream).write_all(&line) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(io(e));
        }
    }
    let mut reader = BufReader::new((&stream).take(MAX_REPLY as u64));
    let mut buf = Vec::new();
    reader.read_until(b'\n', &mut buf).map_err(io)?;
    if buf.is_empty() {
        return Err(ClientError::BadReply {
            path,
            message: "the connection closed without a reply".into(),
        });
    }
    serde_json::from_slice(&buf).map_err(|e| ClientError::BadReply {
        path,
        message: e.to_string(),
    })
}

/// Whether process `pid` (any process: `None`) holds an exclusive `flock` on the file at
/// `path` (a namespace's `broker.lock`, as a running broker does), by `/proc/locks`; `None`
/// when that cannot be read. No file, or something else than a regular file at the name:
/// nobody holds it. Locks of processes outside this pid namespace are not listed.
pub(crate) fn flock_held(path: &std::path::Path, pid: Option<i32>) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let Ok(lock) = path.symlink_metadata() else {
        return Some(false);
    };
    if !lock.file_type().is_file() {
        return Some(false);
    }
    // As the kernel prints a lock's file: major:minor (hex) of its device, then its inode.
    let dev = lock.dev();
    let file = format!(
        "{:02x}:{:02x}:{}",
        rustix::fs::major(dev),
        rustix::fs::minor(dev),
        lock.ino()
    );
    let pid = pid.map(|p| p.to_string());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // `N: FLOCK ADVISORY WRITE PID FILE START END`; a waiter's line has `->` after `N:`.
    Some(locks.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.len() >= 6
            && f[1] == "FLOCK"
            && f[3] == "WRITE"
            && pid.as_deref().is_none_or(|p| f[4] == p)
            && f[5] == file
    }))
}

/// The mode and owners of the socket, or of its directory when the socket cannot be seen.
fn describe_access(path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let show = |what: &str, p: &std::path::Path, m: &std::fs::Metadata| {
        format!(
            "{what} {} is mode {:04o}, owner uid {}, group {}",
            p.display(),
            m.mode() & 0o7777,
            m.uid(),
            m.gid()
        )
    };
    match std::fs::metadata(path) {
        Ok(m) => show("socket", path, &m),
        Err(_) => match path.parent().map(|d| (d, std::fs::metadata(d))) {
            Some((d, Ok(m))) => show("directory", d, &m),
            _ => "its mode and owner cannot be read either".to_owned(),
        },
    }
}
