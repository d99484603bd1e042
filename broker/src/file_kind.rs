//! What a file that is not a regular file is, in words, for the errors that refuse it: a
//! name in the namespace directory (never followed, so a symbolic link is a link) and a
//! config file (opened, so what it is, a FIFO or a device, is what `fstat` says).

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
