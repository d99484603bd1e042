//! One broker per namespace: an exclusive `flock` on `<namespace dir>/broker.lock`. The
//! kernel drops the lock when the broker dies (even by SIGKILL), so a new broker can take
//! over at once. The file also counts brokers: `pid=<pid> epoch=<n>`.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Gid, Mode};

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another broker holds it.
    #[error("another broker already runs for namespace {namespace:?} ({holder}): stop it first, or use another --namespace")]
    Held {
        /// The namespace.
        namespace: String,
        /// What the lock file says about the holder.
        holder: String,
    },
    /// The directory or the file could not be made.
    #[error("cannot lock {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The held lock (released when dropped or when the process dies).
#[derive(Debug)]
pub struct NamespaceLock {
    _file: File,
    /// This broker's number in the namespace (1 for the first broker ever).
    pub epoch: u64,
}

/// Make the namespace directory if needed: 0700, or 02770 owned by `gid`.
pub fn ensure_dir(dir: &Path, gid: Option<u32>) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mode = if gid.is_some() { 0o2770 } else { 0o700 };
    match DirBuilder::new().recursive(true).mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    // The umask may have removed bits and DirBuilder does not set setgid: set them.
    rustix::fs::chmod(dir, Mode::from_raw_mode(mode))?;
    if let Some(g) = gid {
        rustix::fs::chown(dir, None, Some(Gid::from_raw(g)))?;
    }
    Ok(())
}

/// Take the lock of `namespace` in `dir`.
pub fn acquire(namespace: &str, dir: &Path) -> Result<NamespaceLock, LockError> {
    let path = dir.join("broker.lock");
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    let mut text = String::new();
    match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let _ = file.read_to_string(&mut text);
            return Err(LockError::Held {
                namespace: namespace.to_owned(),
                holder: if text.trim().is_empty() {
                    "lock file is empty".to_owned()
                } else {
                    text.trim().to_owned()
                },
            });
        }
        Err(e) => return Err(io(e.into())),
    }
    file.read_to_string(&mut text).map_err(io)?;
    let previous = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("epoch="))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let epoch = previous + 1;
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    writeln!(file, "pid={} epoch={epoch}", std::process::id()).map_err(io)?;
    Ok(NamespaceLock { _file: file, epoch })
}
