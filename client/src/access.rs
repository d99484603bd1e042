//! Saying which permission is missing when the kernel says EACCES.

use std::path::Path;

use rustix::fs::{Mode, RawMode};

/// Which rights the calling process has on a file of `mode` owned by `uid`:`gid`, as the
/// kernel decides it (owner class, else group class, else other; root passes).
fn rights(mode: RawMode, uid: u32, gid: u32) -> RawMode {
    let me = rustix::process::geteuid().as_raw();
    if me == 0 {
        return 0o7;
    }
    if me == uid {
        return (mode >> 6) & 0o7;
    }
    let in_group = rustix::process::getegid().as_raw() == gid
        || rustix::process::getgroups()
            .unwrap_or_default()
            .iter()
            .any(|g| g.as_raw() == gid);
    if in_group {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    }
}

fn who() -> String {
    format!(
        "uid {} (gid {})",
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw()
    )
}

fn describe(what: &str, path: &Path, st: &rustix::fs::Stat) -> String {
    format!(
        "{what} {} (mode {:04o}, owner uid {}, group {})",
        path.display(),
        Mode::from_raw_mode(st.st_mode).bits() & 0o7777,
        st.st_uid,
        st.st_gid
    )
}

/// Walk from the root to `path`: the first directory this process cannot search, or the
/// file's missing read/write right, said in one sentence.
pub(crate) fn explain_denied(path: &Path) -> String {
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    for dir in dirs.into_iter().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(st) = rustix::fs::stat(dir) {
            if rights(st.st_mode, st.st_uid, st.st_gid) & 0o1 == 0 {
                return format!(
                    "{} lacks search (x) permission on {}",
                    who(),
                    describe("directory", dir, &st)
                );
            }
        }
    }
    match rustix::fs::stat(path) {
        Ok(st) => {
            let r = rights(st.st_mode, st.st_uid, st.st_gid);
            let missing = match (r & 0o4 != 0, r & 0o2 != 0) {
                (false, false) => "read and write",
                (false, true) => "read",
                (true, false) => "write",
                (true, true) => "no",
            };
            format!(
                "{} lacks {missing} permission on {}",
                who(),
                describe("file", path, &st)
            )
        }
        Err(_) => format!("{} was refused by {}", who(), path.display()),
    }
}
