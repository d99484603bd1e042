//! Removing a ring, all or nothing.
//!
//! A remove does three things: the name goes (new opens get `NotFound`), the ring is marked
//! deleted (attached clients get `Deleted` errors instead of waiting for events that never
//! come), and the file goes. The file system may refuse the first (write and search on the
//! directory, and in a sticky directory ownership of the file or the directory), and the
//! ring may refuse the second (another live process is in the middle of a stop or start).
//! So the steps are ordered to make both refusals undoable:
//!
//! 1. rename the name to a hidden name in the same directory,
//!    `.NAME.PID.SERIAL.NANOS.removing` (scans skip names that start with a dot: it is
//!    never adopted or listed as a ring, and opened only to finish the remove of a dead
//!    remover, below). The kernel applies an unlink's rules to a rename,
//!    so a refusal here leaves everything as it was, and a success proves the final
//!    unlink is allowed.
//! 2. open the file under the hidden name, which no other process uses: what is looked at
//!    from here on is exactly what the name referred to at the rename, whatever has been
//!    put at the name before or since. A file that is not a ring this client can map
//!    (garbage, a truncated file, a symbolic link, a FIFO) goes straight to step 4.
//! 3. mark the ring deleted through the mapping. If the ring refuses, rename it back.
//! 4. unlink the hidden name.
//!
//! What another process sees: before step 1, the ring as it was (one that attaches then is
//! cut off at step 3, like every attached client); from step 1, `open` gets `NotFound` and
//! `open_or_create` makes a new, separate ring under the name, as it would after the remove.
//! Marking first (the other order) cuts every client off before it is known whether the
//! name can go, and a refused unlink then leaves a deleted ring under its name for every
//! opener to find. Opening by the name and then unlinking by the name (the check-then-act
//! order) would unlink whatever another process put there in between: a whole ring, whose
//! clients would carry on unmarked beside the next ring made under the name. (The name is
//! opened once before step 1 all the same, only so that an error that is not about what the
//! file is, such as a missing ring or a refused open, comes back with nothing renamed.)
//!
//! The one thing an undo cannot restore is the name, when a new ring took it while the
//! file was set aside and the remove was then refused (the ring refused step 3, the file
//! under the hidden name could not be opened, or it is a directory, which cannot be
//! unlinked): the error then names the hidden file, whose clients carry on unaware of the
//! new ring until the remove is finished for them (below), once the remover has exited.
//!
//! A process that dies between step 1 and step 4 leaves the ring under its hidden name,
//! and so does a create without `O_TMPFILE` that dies before it renames its build into
//! place (`.NAME.PID.SERIAL.NANOS.tmp`). On `/dev/shm` such a file holds its memory until
//! someone unlinks it. [`Ring::clear_leftover`] (which the broker calls at its rescans)
//! finishes what the dead process began: a build is unlinked (nobody else ever opened it),
//! a removal is marked deleted and unlinked, as the remove would have.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{RenameFlags, CWD};

use crate::names::{ring_path, Leftover, LeftoverKind};
use crate::{LifecycleError, OpenError, Ring};

/// What [`Ring::clear_leftover`] did with a hidden file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    /// Unlinked; a ring set aside by a remove was marked deleted first, so its clients get
    /// `Deleted` errors.
    Removed,
    /// Gone already.
    Gone,
    /// Left alone: a process has the pid in its name. It is the process that made the name,
    /// still at work, or one that reuses its pid: then the file stays until that process
    /// exits.
    OwnerAlive,
    /// Left alone: its name says it was made less than the grace period ago (or later than
    /// this clock's now).
    TooRecent,
    /// Left alone for now: a live process is stopping or starting the ring set aside.
    Busy,
}

/// How old a leftover must be before [`Ring::clear_leftover`] touches it, besides its
/// maker being dead: a maker in another pid namespace (whose pid means nothing here) is
/// long done with a build or a remove by then.
pub const LEFTOVER_GRACE: Duration = Duration::from_secs(60);

impl Ring {
    /// Remove ring `name`: all of it or none of it. Attached clients get
    /// [`crate::PublishError::Deleted`] and friends instead of hanging, new opens get
    /// [`OpenError::NotFound`], and the file is unlinked. If this process may not remove the
    /// file ([`OpenError::PermissionDenied`] says which right is missing) or the ring
    /// refuses to be marked deleted ([`OpenError::Lifecycle`]: another live process is
    /// stopping or starting it), nothing changes, but for a stop or start that a dead
    /// process left half done, which the remove finishes first as any lifecycle call does.
    /// A ring whose lifecycle word another process overwrote is removed too; one created
    /// in another pid namespace is refused ([`OpenError::OtherPidNamespace`]), as at open.
    ///
    /// A name that is not a ring this client can map (it fails validation, it was truncated,
    /// or it is not a regular file) is unlinked all the same; a symbolic link is removed
    /// itself, never its target. What is removed is what the name referred to when it was
    /// set aside (step 1 of the module header): a ring put at the name by another process
    /// is never unlinked without being marked deleted first.
    pub fn remove(namespace: &str, name: &str) -> Result<(), OpenError> {
        let path = ring_path(namespace, name)?;
        // Opened by name first, only to give an error that is not about what the file is
        // (no such ring, no right to open it, no descriptor left) with the name untouched.
        // A ring of another pid namespace is refused as at open: its stops and starts are
        // owned by pids this process cannot judge, so it may neither take one over nor own
        // one there. It is removed from inside its pid namespace.
        let opened = match Self::open(namespace, name) {
            Ok(ring) => Some(ring),
            Err(e) if unmappable(&e) => None,
            Err(e) => return Err(e),
        };
        // A live process in the middle of a stop or start would make step 3 wait for it
        // (up to the lifecycle wait) with the name set aside, free for a new ring: wait
        // here instead, and give up with nothing renamed. (One that begins after this
        // look is still waited for in step 3, for as long as it lasts.)
        if let Some(ring) = opened {
            match ring.settle_lifecycle() {
                // A corrupt word is closed and marked deleted in step 3.
                Ok(_) | Err(crate::LifecycleError::CorruptState(_)) => {}
                Err(e) => return Err(OpenError::Lifecycle(name.to_owned(), e)),
            }
        }
        let aside = aside_path(&path, name);
        rustix::fs::renameat_with(CWD, &path, CWD, &aside, RenameFlags::NOREPLACE)
            .map_err(|e| remove_error(namespace, name, &path, e.into()))?;
        let undo = |e: OpenError| match put_back(&aside, &path) {
            Ok(()) => e.renamed(&aside, &path),
            Err(left) => left,
        };
        match Ring::open_at(aside.clone(), namespace, name) {
            Ok(ring) => ring.remove_set_aside(&aside, &path),
            // A directory at the name cannot be unlinked: it goes back, with the error.
            Err(e) if unmappable(&e) => std::fs::remove_file(&aside)
                .map_err(|e| undo(remove_error(namespace, name, &path, e))),
            Err(e) => Err(undo(e)),
        }
    }

    /// Unlink the file of a ring that is already marked deleted (left behind by a process
    /// that died while removing it, or that could mark it and not unlink it). Returns
    /// `Ok(false)`, and does nothing, when the ring is not marked deleted.
    pub fn unlink_deleted(&self) -> Result<bool, OpenError> {
        if !crate::lifecycle::is_deleted(&self.seg) {
            return Ok(false);
        }
        let aside = self.set_aside()?;
        std::fs::remove_file(&aside).map_err(|e| OpenError::io("remove", &aside, e))?;
        Ok(true)
    }

    /// Finish what the dead maker of a hidden file in `namespace`'s directory began
    /// ([`crate::names::leftovers_in`] lists them): a ring being built is unlinked, a ring
    /// being removed is marked deleted (its attached clients get `Deleted`) and unlinked, and
    /// a file under a removal's name that is not a ring this client can map is unlinked, as
    /// the remove does. Nothing is done while a process has the pid in the name, nor before
    /// the name is `grace` old. What is unlinked is checked to be the file that was marked
    /// (set aside under a hidden name of this process first, as
    /// [`Ring::unlink_deleted`] does); a ring of another pid namespace is refused as at open,
    /// and so is a file under a removal's name that has a second name (a hard link, which a
    /// remove never makes: the other name may be a ring in use).
    pub fn clear_leftover(
        namespace: &str,
        leftover: &Leftover,
        grace: Duration,
    ) -> Result<Cleared, OpenError> {
        if crate::process::exists(leftover.pid) {
            return Ok(Cleared::OwnerAlive);
        }
        let now = crate::names::wall_clock_ns();
        let grace = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
        if now < leftover.nanos.saturating_add(grace) {
            return Ok(Cleared::TooRecent);
        }
        let path = &leftover.path;
        let unlink = || match std::fs::remove_file(path) {
            Ok(()) => Ok(Cleared::Removed),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Cleared::Gone),
            Err(e) => Err(remove_error(namespace, &leftover.ring, path, e)),
        };
        match leftover.kind {
            // Never opened by anyone but its dead builder: only the name goes.
            LeftoverKind::Building => unlink(),
            LeftoverKind::Removing => {
                match Ring::open_at(path.clone(), namespace, &leftover.ring) {
                    Ok(ring) => ring.finish_removal(path),
                    Err(OpenError::NotFound { .. }) => Ok(Cleared::Gone),
                    // A symbolic link put there since the listing goes itself, never its
                    // target; a directory is refused by the unlink.
                    Err(e) if unmappable(&e) => unlink(),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Steps 3 and 4 of a remove whose remover died, on this ring opened at its hidden name.
    fn finish_removal(&self, path: &Path) -> Result<Cleared, OpenError> {
        // A remove sets a file aside by renaming it, so its only name is the hidden one. A
        // second name (a hard link made since, maybe to a ring in use under its own name)
        // would be marked deleted along with it: refused.
        let links =
            crate::file::link_count(self.seg.file()).map_err(|e| OpenError::io("stat", path, e))?;
        if links == 0 {
            // Another clearer unlinked it since this one opened it.
            return Ok(Cleared::Gone);
        }
        if links != 1 {
            return Err(OpenError::Io {
                op: "finish the removal of",
                path: path.to_owned(),
                source: std::io::Error::other(format!(
                    "the file has {links} names, and a remove leaves it only its hidden one: another name may be a ring in use"
                )),
            });
        }
        if !self.is_deleted() {
            // Not waited for: a live process's stop or start is left to a later look (the
            // broker calls this under its lock).
            match self.mark_deleted_within(Duration::ZERO) {
                Ok(_) | Err(LifecycleError::Deleted) => {}
                Err(LifecycleError::Busy { .. }) => return Ok(Cleared::Busy),
                Err(e) => return Err(OpenError::Lifecycle(self.name().to_owned(), e)),
            }
        }
        match self.unlink_deleted() {
            Ok(_) => Ok(Cleared::Removed),
            // Another clearer set it aside or unlinked it first.
            Err(OpenError::NotFound { .. }) => Ok(Cleared::Gone),
            Err(e) => Err(e),
        }
    }

    /// Steps 3 and 4 on this ring, set aside at `aside` from its name `path`.
    fn remove_set_aside(&self, aside: &Path, path: &Path) -> Result<(), OpenError> {
        match self.mark_deleted() {
            // Already deleted (by a remover that could not unlink it): only the file is left.
            Ok(_) | Err(crate::LifecycleError::Deleted) => {}
            Err(e) => {
                return Err(match put_back(aside, path) {
                    Ok(()) => OpenError::Lifecycle(self.name().to_owned(), e),
                    Err(left) => left,
                })
            }
        }
        std::fs::remove_file(aside).map_err(|e| OpenError::io("remove", aside, e))
    }

    /// The mapped file under a hidden name, checked to be the mapped one: the name may have
    /// been pointed at another file since this ring was opened. If not, it is renamed back.
    fn set_aside(&self) -> Result<PathBuf, OpenError> {
        let path = self.path();
        let aside = aside_path(path, self.name());
        rustix::fs::renameat_with(CWD, path, CWD, &aside, RenameFlags::NOREPLACE)
            .map_err(|e| remove_error(self.namespace(), self.name(), path, e.into()))?;
        let mapped = crate::file::identity(self.seg.file());
        let named = crate::file::identity_of(&aside);
        match (mapped, named) {
            (Ok(a), Ok(b)) if a == b => Ok(aside),
            _ => Err(match put_back(&aside, path) {
                Ok(()) => OpenError::Replaced {
                    path: path.to_owned(),
                },
                Err(left) => left,
            }),
        }
    }
}

/// Whether `e` says the name is there but is not a ring this client can map.
fn unmappable(e: &OpenError) -> bool {
    matches!(
        e,
        OpenError::Layout { .. }
            | OpenError::Truncated { .. }
            | OpenError::TruncatedWhileMapped { .. }
            | OpenError::NotRegular { .. }
    )
}

/// A hidden name beside `path` for ring `name` while it is removed.
fn aside_path(path: &Path, name: &str) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join(crate::names::hidden_name(
        name,
        crate::names::wall_clock_ns(),
        crate::names::REMOVING_SUFFIX,
    ))
}

/// The operation of [`put_back`]'s error (see [`OpenError::left_aside`]).
const PUT_BACK: &str =
    "rename back (a new ring took the name meanwhile; the old one is left under the hidden name)";

/// Undo step 1: the file at `aside` back to its name `path`. The error, if the name was
/// taken meanwhile, names the hidden file.
fn put_back(aside: &Path, path: &Path) -> Result<(), OpenError> {
    rustix::fs::renameat_with(CWD, aside, CWD, path, RenameFlags::NOREPLACE).map_err(|e| {
        OpenError::Io {
            op: PUT_BACK,
            path: aside.to_owned(),
            source: e.into(),
        }
    })
}

impl OpenError {
    /// The hidden name a refused remove left the ring under, when it could not put it back
    /// (a new ring took the name meanwhile): the ring's clients carry on there, and a
    /// broker finishes the remove only once the process that made the name has exited.
    pub fn left_aside(&self) -> Option<&Path> {
        match self {
            OpenError::Io { op, path, .. } if *op == PUT_BACK => Some(path),
            _ => None,
        }
    }
}

/// The error of a refused rename or unlink of ring `name` at `path`.
fn remove_error(namespace: &str, name: &str, path: &Path, e: std::io::Error) -> OpenError {
    match e.kind() {
        std::io::ErrorKind::NotFound => OpenError::NotFound {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            path: path.to_owned(),
        },
        std::io::ErrorKind::PermissionDenied => OpenError::PermissionDenied {
            path: path.to_owned(),
            op: "remove",
            detail: crate::access::explain_remove_denied(path),
        },
        _ => OpenError::Io {
            op: "remove",
            path: path.to_owned(),
            source: e,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A put-back refused because the name was taken names the hidden file, and says so
    /// through `left_aside`; other errors do not.
    #[test]
    fn a_put_back_refused_names_the_file_left_aside() {
        let dir = std::env::temp_dir().join(format!("shmring-putback-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (aside, path) = (dir.join(".r.1.0.2.removing"), dir.join("r.ring"));
        std::fs::write(&aside, b"old").unwrap();
        std::fs::write(&path, b"new").unwrap();
        let e = put_back(&aside, &path).expect_err("the name is taken");
        assert_eq!(e.left_aside(), Some(aside.as_path()), "{e}");
        assert!(
            OpenError::io("remove", &aside, std::io::ErrorKind::NotFound.into())
                .left_aside()
                .is_none()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
