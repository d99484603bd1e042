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

/// The first directory above `path` that this process cannot search, said in one sentence.
fn unsearchable_ancestor(path: &Path) -> Option<String> {
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    dirs.into_iter()
        .filter(|d| !d.as_os_str().is_empty())
        .find_map(|dir| {
            let st = rustix::fs::stat(dir).ok()?;
            (rights(st.st_mode, st.st_uid, st.st_gid) & 0o1 == 0).then(|| {
                format!(
                    "{} lacks search (x) permission on {}",
                    who(),
                    describe("directory", dir, &st)
                )
            })
        })
}

/// What to say when the permission bits allow what the kernel refused.
const NOT_THE_MODE: &str =
    "yet was refused: not by the mode (a security module, an immutable file or a read-only mount?)";

/// Walk from the root to `path`: the first directory this process cannot search, or the
/// file's missing read/write right, said in one sentence.
pub(crate) fn explain_denied(path: &Path) -> String {
    if let Some(why) = unsearchable_ancestor(path) {
        return why;
    }
    match rustix::fs::lstat(path) {
        Ok(st) => {
            let r = rights(st.st_mode, st.st_uid, st.st_gid);
            let file = describe("file", path, &st);
            let missing = match (r & 0o4 != 0, r & 0o2 != 0) {
                (false, false) => "read and write",
                (false, true) => "read",
                (true, false) => "write",
                (true, true) => {
                    return format!("{} may read and write {file}, {NOT_THE_MODE}", who())
                }
            };
            format!("{} lacks {missing} permission on {file}", who())
        }
        Err(_) => format!("{} was refused by {}", who(), path.display()),
    }
}

/// Why this process may not remove (or rename) `path`: removing a name needs write and
/// search on its directory, and in a sticky directory also ownership of the file or of the
/// directory (or root).
pub(crate) fn explain_remove_denied(path: &Path) -> String {
    if let Some(why) = unsearchable_ancestor(path) {
        return why;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(dst) = rustix::fs::stat(dir) else {
        return format!("{} was refused by {}", who(), dir.display());
    };
    let on_dir = describe("directory", dir, &dst);
    if rights(dst.st_mode, dst.st_uid, dst.st_gid) & 0o3 != 0o3 {
        return format!(
            "{} lacks write (w) permission on {on_dir}, which removing a name from it needs: remove it as a user who may write the directory",
            who()
        );
    }
    let me = rustix::process::geteuid().as_raw();
    let sticky = dst.st_mode & 0o1000 != 0;
    match rustix::fs::lstat(path) {
        Ok(fst) if sticky && me != 0 && me != fst.st_uid && me != dst.st_uid => format!(
            "{} owns neither {} nor the sticky {on_dir}: in a sticky directory only the file's owner, the directory's owner or root may remove a file, so remove it as one of them (or ask the broker: `broker delete`)",
            who(),
            describe("file", path, &fst)
        ),
        _ => format!("{} may write {on_dir}, {NOT_THE_MODE}", who()),
    }
}
