//! What a file that is not a regular file is, in words, for the errors that refuse it: a
//! name in the namespace directory (never followed, so a symbolic link is a link), listed
//! by the broker and by `broker status` without one alike, and a config file (opened, so
//! what it is, a FIFO or a device, is what `fstat` says).

use std::os::unix::fs::FileTypeExt;

/// `t` as the words an error puts after "is": "a symbolic link", "a FIFO", ...
pub fn kind_name(t: std::fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "of an unknown type"
    }
}

/// Why the entry at `path` in a namespace directory, of type `t` (its own type: a link is a
/// link), is not opened as a ring: the reason the broker lists it under, and `broker
/// status` without a broker too.
pub fn not_regular(path: std::path::PathBuf, t: std::fs::FileType) -> shmring::OpenError {
    shmring::OpenError::NotRegular {
        path,
        kind: kind_name(t),
    }
}
