//! The segment file as untrusted input.
//!
//! The namespace directory is shared with every member of the ring's group, so what a name
//! in it refers to is decided by whoever wrote it last. A ring file is therefore opened
//! with `O_NOFOLLOW` (a symbolic link is refused, never followed to another namespace's
//! ring or to a file such as `/etc/passwd`), checked with `fstat` on the descriptor to be a
//! regular file (a FIFO, socket or directory is refused; `O_NONBLOCK` keeps the open of a
//! FIFO from blocking), and its size is checked against the segment before it is mapped and
//! again, by the broker, before it is touched: a file that shrank under a mapping kills
//! whoever touches the pages past its end with SIGBUS.

use std::fs::File;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// Why a name in the namespace directory was not opened as a ring file.
#[derive(Debug)]
pub(crate) enum FileError {
    /// The name is not a regular file: what it is instead.
    NotRegular(&'static str),
    /// The directory holding the name is not a directory (a symbolic link, say): what it
    /// is instead. It is never followed.
    DirNotDirectory(&'static str),
    /// Any other failure of the open (not found, permission denied, ...).
    Io(std::io::Error),
}

/// What a non-regular file type is called in errors.
pub(crate) fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

/// Open an existing ring file read+write without following a symbolic link, at its name or
/// at its directory's (the namespace directory: a link there, planted in the world-writable
/// root, would lead to another namespace's rings), and check on the descriptor that it is
/// a regular file.
pub(crate) fn open_regular(path: &Path) -> Result<File, FileError> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(FileError::Io(std::io::Error::from(
            std::io::ErrorKind::InvalidInput,
        )));
    };
    // O_PATH with O_NOFOLLOW opens a link itself, which O_DIRECTORY then refuses.
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = match rustix::fs::open(dir, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOTDIR) => {
            // What the namespace directory's own name is; a path above it that is not a
            // directory is the plain error.
            return Err(match rustix::fs::lstat(dir) {
                Ok(st) => {
                    FileError::DirNotDirectory(kind_name(FileType::from_raw_mode(st.st_mode)))
                }
                Err(e) => FileError::Io(e.into()),
            });
        }
        Err(e) => return Err(FileError::Io(e.into())),
    };
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        // O_NOFOLLOW on a symbolic link.
        Err(rustix::io::Errno::LOOP) => return Err(FileError::NotRegular("a symbolic link")),
        Err(rustix::io::Errno::ISDIR) => return Err(FileError::NotRegular("a directory")),
        // A socket (or a device without a driver) cannot be opened at all.
        Err(rustix::io::Errno::NXIO) => return Err(FileError::NotRegular("a socket")),
        Err(e) => return Err(FileError::Io(e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| FileError::Io(e.into()))?;
    let t = FileType::from_raw_mode(st.st_mode);
    if t != FileType::RegularFile {
        return Err(FileError::NotRegular(kind_name(t)));
    }
    // O_NONBLOCK stays set: it changes nothing for a regular file (reads, writes and mmap
    // of a tmpfs file never block on it).
    Ok(File::from(fd))
}

/// The size of the open file now (`fstat` on the descriptor, so a rename or unlink of its
/// name changes nothing).
pub(crate) fn size_now(file: &File) -> std::io::Result<u64> {
    Ok(rustix::fs::fstat(file)?.st_size as u64)
}

/// Device and inode of the open file.
pub(crate) fn identity(file: &File) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(file)?;
    Ok((st.st_dev, st.st_ino))
}

/// Device and inode of the name `path` (not followed).
pub(crate) fn identity_of(path: &Path) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::lstat(path)?;
    Ok((st.st_dev, st.st_ino))
}

/// How many names (hard links) the open file has.
pub(crate) fn link_count(file: &File) -> std::io::Result<u64> {
    Ok(rustix::fs::fstat(file)?.st_nlink as u64)
}
