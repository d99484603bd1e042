//! One broker per namespace: an exclusive `flock` on `<namespace dir>/broker.lock`. The
//! kernel drops the lock when the broker dies (even by SIGKILL), so a new broker can take
//! over at once. The file also counts brokers: `pid=<pid> epoch=<n>`.
//!
//! A lock is only a lock while its name cannot be taken away. The namespace directory is
//! shared with the broker group, so it is sticky (a group member cannot remove or rename a
//! file it does not own), the lock file is opened without following a symbolic link and
//! must be a regular file of the broker's own user, and every sweep checks that the name
//! still refers to the locked inode ([`NamespaceLock::check`]): if it was removed or
//! replaced anyway (by root, or in a directory that could not be made sticky), the broker
//! takes the lock again under the name, or exits if another broker holds it there.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use tracing::warn;

pub use crate::protocol::LOCK_NAME;

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
    /// The lock's name is something a broker must not open.
    #[error("cannot lock {path}: {why}; remove it and start the broker again")]
    Unsafe {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// The held lock (released when dropped or when the process dies).
#[derive(Debug)]
pub struct NamespaceLock {
    file: File,
    namespace: String,
    path: PathBuf,
    /// Device and inode of the locked file.
    id: (u64, u64),
    /// The name no longer refers to the locked file and could not be locked again (said
    /// once, until it can).
    stuck: bool,
    /// This broker's number in the namespace (1 for the first broker ever).
    pub epoch: u64,
}

/// Make the namespace directory if needed: 0700, or 03770 owned by `gid` (setgid, so the
/// files made in it get the group; sticky, so a group member cannot remove or rename the
/// broker's lock, socket and rings). An existing directory must be a directory (not a
/// symbolic link) owned by this user or root; if others may write it and it is not sticky,
/// the sticky bit is added, or a warning says it could not be.
pub fn ensure_dir(dir: &Path, gid: Option<u32>) -> std::io::Result<()> {
    match check_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        other => return other,
    }
    if shmring::names::make_namespace_dir(dir, gid)? {
        return Ok(());
    }
    // Made by another process meanwhile (a client creating a ring, or something else put
    // at the name): check it like any directory that was there.
    check_dir(dir)
}

/// Check (and where needed repair) an existing namespace directory, through one descriptor
/// of it (`O_PATH`, never through a link): what is checked is what is repaired, even if
/// the name is replaced meanwhile. `NotFound` when nothing is at the name.
fn check_dir(dir: &Path) -> std::io::Result<()> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        // A link or another kind of file at the name: say which.
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
            let kind = rustix::fs::lstat(dir).map(|st| FileType::from_raw_mode(st.st_mode))?;
            return Err(std::io::Error::other(format!(
                "{} is not a directory ({kind:?}): the broker does not follow a symbolic link to its namespace; remove it",
                dir.display()
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me && st.st_uid != 0 {
        return Err(std::io::Error::other(format!(
            "{} is owned by uid {}, neither this broker's uid {me} nor root: whoever made it controls what is in it; remove it (or chown it to the broker's user)",
            dir.display(),
            st.st_uid
        )));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        let sticky = mode | 0o1000;
        // Through the descriptor's /proc link (an `O_PATH` descriptor takes no fchmod), the
        // calling thread's: the directory checked above, whatever the name holds now.
        let opened = format!("/proc/thread-self/fd/{}", fd.as_raw_fd());
        match rustix::fs::chmod(opened.as_str(), Mode::from_raw_mode(sticky)) {
            Ok(()) => warn!(dir = %dir.display(),
                "the namespace directory was writable by others without the sticky bit: mode {mode:04o} -> {sticky:04o}, so that only a file's owner may remove it"),
            Err(e) => warn!(dir = %dir.display(),
                "the namespace directory (mode {mode:04o}) is writable by others and has no sticky bit, and setting it failed ({e}): any member of its group can remove or replace the broker's lock, socket and rings; `chmod +t` it"),
        }
    }
    Ok(())
}

/// Open (creating it if needed) the lock file: never through a symbolic link, a regular
/// file, owned by this user. A file of another user is removed and made again (the
/// broker's user owns its lock), unless it is held: then another broker runs
/// ([`LockError::Held`]). It stays locked by this process until it is removed, so no broker
/// takes it in between (one that opened it before and locks it after holds a removed file,
/// which [`lock_file`] sees).
fn open_lock(namespace: &str, path: &Path) -> Result<File, LockError> {
    let io = |source: rustix::io::Errno| LockError::Io {
        path: path.to_owned(),
        source: source.into(),
    };
    let unsafe_name = |why: String| LockError::Unsafe {
        path: path.to_owned(),
        why,
    };
    let me = rustix::process::geteuid().as_raw();
    let flags =
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    // A few tries: the next after removing a file of another user, or after finding the name
    // changed under the one locked here.
    for _ in 0..4 {
        let fd = match rustix::fs::open(path, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => {
                return Err(unsafe_name("it is a symbolic link".into()))
            }
            Err(e) => return Err(io(e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(io)?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            return Err(unsafe_name(format!("it is not a regular file ({kind:?})")));
        }
        if st.st_uid == me {
            // Whatever mode another process left it with: 0600.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600)).map_err(io)?;
            return Ok(File::from(fd));
        }
        let held = try_flock(namespace, path, File::from(fd))?;
        // Removed by name, so only while the name still holds the file locked here: another
        // broker that removed it meanwhile may have put its own, live, lock file there.
        if !rustix::fs::lstat(path)
            .is_ok_and(|now| (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino))
        {
            continue;
        }
        warn!(path = %path.display(), owner = st.st_uid,
            "the lock file belongs to another user and nobody holds it; removing it and making the broker's own");
        rustix::fs::unlink(path).map_err(io)?;
        // Unlocked only once it is gone from the name.
        drop(held);
    }
    Err(unsafe_name(
        "the name kept holding a file of another user, made again or put there as soon as one was removed".into(),
    ))
}

/// Device and inode of an open file.
fn identity(file: &File) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(file)?;
    Ok((st.st_dev, st.st_ino))
}

/// Take the lock of `namespace` in `dir`.
pub fn acquire(namespace: &str, dir: &Path) -> Result<NamespaceLock, LockError> {
    let path = dir.join(LOCK_NAME);
    let mut file = lock_file(namespace, &path)?;
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    let previous = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("epoch="))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    // Saturating: the number is read from a file, and a corrupt one may hold the largest.
    let epoch = previous.saturating_add(1);
    write_holder(&mut file, epoch).map_err(io)?;
    let id = identity(&file).map_err(io)?;
    Ok(NamespaceLock {
        file,
        namespace: namespace.to_owned(),
        path,
        id,
        stuck: false,
        epoch,
    })
}

/// Open the lock file and take its `flock`, on the file that is at the name once locked:
/// one removed or replaced between the open and the lock (by a broker that found it
/// another user's and free) is no lock, and the name is opened again.
fn lock_file(namespace: &str, path: &Path) -> Result<File, LockError> {
    for _ in 0..8 {
        let file = try_flock(namespace, path, open_lock(namespace, path)?)?;
        let locked = identity(&file).map_err(|source| LockError::Io {
            path: path.to_owned(),
            source,
        })?;
        if rustix::fs::lstat(path).is_ok_and(|st| (st.st_dev, st.st_ino) == locked) {
            return Ok(file);
        }
    }
    Err(LockError::Unsafe {
        path: path.to_owned(),
        why: "the file at the name kept changing while the broker locked it".into(),
    })
}

/// Take the `flock` of the open lock file `file` (at `path`), or say who holds it.
fn try_flock(namespace: &str, path: &Path, mut file: File) -> Result<File, LockError> {
    match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            Err(LockError::Held {
                namespace: namespace.to_owned(),
                holder: if text.trim().is_empty() {
                    "lock file is empty".to_owned()
                } else {
                    text.trim().to_owned()
                },
            })
        }
        Err(e) => Err(LockError::Io {
            path: path.to_owned(),
            source: e.into(),
        }),
    }
}

fn write_holder(file: &mut File, epoch: u64) -> std::io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    writeln!(file, "pid={} epoch={epoch}", std::process::id())
}

impl NamespaceLock {
    /// Check that the lock's name still refers to the locked file. If it was removed or
    /// replaced, take the lock again under the name (logged). If another broker holds the
    /// file now under the name, that is [`LockError::Held`]: two brokers would sweep the same
    /// rings, and the caller exits. If the name cannot be locked at all (it is a symbolic
    /// link, say), no other broker can lock it either: this broker carries on, says so once,
    /// and tries again at every sweep.
    pub fn check(&mut self) -> Result<(), LockError> {
        let why = match rustix::fs::lstat(&self.path) {
            Ok(st) if (st.st_dev, st.st_ino) == self.id => return Ok(()),
            Ok(_) => "was replaced by another file".to_owned(),
            Err(e) => format!("is gone ({e})"),
        };
        match self.retake() {
            Ok(()) => {
                self.stuck = false;
                warn!(path = %self.path.display(), "the namespace lock file {why}; took the lock again");
                Ok(())
            }
            Err(e @ LockError::Held { .. }) => Err(e),
            // A file this broker cannot open (another user's, made by root at the name),
            // held by some process: another broker runs there.
            Err(LockError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied
                    && crate::client::flock_held(&self.path, None) == Some(true) =>
            {
                Err(LockError::Held {
                    namespace: self.namespace.clone(),
                    holder: format!(
                        "{} is another user's file, held by another process",
                        self.path.display()
                    ),
                })
            }
            Err(e) => {
                if !self.stuck {
                    self.stuck = true;
                    warn!(path = %self.path.display(),
                        "the namespace lock file {why}, and locking the name again failed ({e}); carrying on, and trying again at every sweep");
                }
                Ok(())
            }
        }
    }

    /// Lock the file under the name now, and hold it instead of the old one.
    fn retake(&mut self) -> Result<(), LockError> {
        let mut file = lock_file(&self.namespace, &self.path)?;
        let io = |source| LockError::Io {
            path: self.path.clone(),
            source,
        };
        write_holder(&mut file, self.epoch).map_err(io)?;
        self.id = identity(&file).map_err(io)?;
        // The old file (and its flock) goes; the new one is held from here on.
        self.file = file;
        Ok(())
    }
}
