//! Talking to a running broker over its control socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::{Reply, Request, MAX_REPLY, SOCKET_NAME};

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nobody listens on the socket.
    #[error("no broker is running for namespace {namespace:?} (nothing listens on {path}): start one with `broker run --namespace {namespace}`")]
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
    /// The broker's answer was not a reply.
    #[error("the broker at {path} sent an unreadable reply: {message}")]
    BadReply {
        /// The socket path.
        path: PathBuf,
        /// The parse error.
        message: String,
    },
}

/// The control socket of a namespace.
pub fn socket_path(namespace: &str) -> Result<PathBuf, shmring::OpenError> {
    Ok(shmring::names::namespace_dir(namespace)?.join(SOCKET_NAME))
}

/// Send one request and read its reply, waiting at most `timeout` for it.
pub fn request(namespace: &str, req: &Request, timeout: Duration) -> Result<Reply, ClientError> {
    let path = socket_path(namespace)?;
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
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    let mut line = serde_json::to_vec(req).map_err(|e| io(std::io::Error::other(e)))?;
    line.push(b'\n');
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
