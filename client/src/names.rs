//! Where segments live: one directory per namespace under the shared-memory root.

use std::path::{Path, PathBuf};

use crate::OpenError;

/// Environment variable that moves the root away from `/dev/shm` (tests, containers).
pub const ROOT_ENV: &str = "SHMRING_ROOT";
/// Environment variable that names the default namespace.
pub const NAMESPACE_ENV: &str = "SHMRING_NAMESPACE";
/// File name suffix of ring segments in a namespace directory.
pub const RING_SUFFIX: &str = ".ring";

/// The shared-memory root (`$SHMRING_ROOT` or `/dev/shm`).
pub fn root() -> PathBuf {
    root_from(std::env::var_os(ROOT_ENV))
}

/// The root `$SHMRING_ROOT` (`var`) names, or `/dev/shm`.
fn root_from(var: Option<std::ffi::OsString>) -> PathBuf {
    var.map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

/// The namespace from `$SHMRING_NAMESPACE`, or `default`.
pub fn default_namespace() -> String {
    namespace_from(std::env::var(NAMESPACE_ENV).ok())
}

/// The namespace `$SHMRING_NAMESPACE` (`var`) names, or `default`.
fn namespace_from(var: Option<String>) -> String {
    var.unwrap_or_else(|| "default".to_owned())
}

/// Check ring name `name`: 1 to 64 characters of `[A-Za-z0-9_.-]`, not starting with `.`
/// (so a ring's file is always a plain, visible name in its namespace directory).
/// [`OpenError::InvalidName`], which states the rule, otherwise.
///
/// ```
/// assert!(shmring::names::check_ring_name("orders-1.v2_x").is_ok());
/// assert!(shmring::names::check_ring_name("a/../b").is_err());
/// ```
pub fn check_ring_name(name: &str) -> Result<(), OpenError> {
    check_name("ring", name)
}

pub(crate) fn check_name(what: &'static str, name: &str) -> Result<(), OpenError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(OpenError::InvalidName {
            what,
            name: name.to_owned(),
        })
    }
}

/// Make namespace directory `dir` if nothing is at the name: 0700, or with `gid` 03770 and
/// that group (setgid, so that files made in it get the group; sticky, so that a group
/// member can remove or rename only the files it owns). Returns whether this call made it: `Ok(false)` when the name
/// was taken already, possibly by another process making it at the same moment, whose
/// mode and group stand; the caller checks what is there. Only the maker sets the mode
/// and group, on a descriptor of the directory it made (never by a name that may have
/// been replaced since): two processes making the directory at once with different
/// settings never leave it with a mix, or with the settings of the one that lost. The
/// root above it is made too if it is missing.
pub fn make_namespace_dir(dir: &Path, gid: Option<u32>) -> std::io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::fs::DirBuilderExt;
    let mode = if gid.is_some() { 0o3770 } else { 0o700 };
    if let Some(root) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(root)?;
    }
    match rustix::fs::mkdir(dir, Mode::from_raw_mode(mode)) {
        Ok(()) => {}
        Err(rustix::io::Errno::EXIST) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    let set_up = || -> std::io::Result<()> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(dir, flags, Mode::empty())?;
        // The umask may have removed bits, and mkdir does not set setgid: set them.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        if let Some(g) = gid {
            rustix::fs::fchown(&fd, None, Some(rustix::fs::Gid::from_raw(g)))
                .map_err(|e| chown_error(e, g))?;
        }
        Ok(())
    };
    if let Err(e) = set_up() {
        // Not left half set up (a later create would take it as it is): removed, unless
        // another process has put something in it meanwhile.
        let _ = std::fs::remove_dir(dir);
        return Err(e);
    }
    Ok(true)
}

/// The error of giving a file to group `gid`: refused (`EPERM`) when this process is not a
/// member of that group, which only root may do; said so, not as a permission on the file.
pub(crate) fn chown_error(e: rustix::io::Errno, gid: u32) -> std::io::Error {
    if e == rustix::io::Errno::PERM {
        return std::io::Error::other(format!(
            "cannot give it to group {gid}: this process is not a member of that group (only root may give a file to a group it is not in); add the user to the group, or configure a group it is in"
        ));
    }
    e.into()
}

/// A hidden name in a namespace directory for ring `name` while it is built or removed:
/// `.NAME.PID.SERIAL.NANOS.SUFFIX`. The serial is taken from one counter per process, so two
/// threads of one process that ask at the same instant get different names; the process id
/// keeps processes apart; the time keeps a process apart from a dead one whose id it reuses.
/// A leading dot keeps the name out of [`rings_in`].
pub(crate) fn hidden_name(name: &str, nanos: u64, suffix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    // Relaxed: the serial only has to differ between calls; no other memory is published
    // through it.
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    format!(".{name}.{}.{serial}.{nanos}.{suffix}", std::process::id())
}

/// Now on the wall clock, in nanoseconds since the Unix epoch (0 before it): the time a
/// hidden name carries ([`hidden_name`], [`Leftover::nanos`]) and a ring's creation time.
pub(crate) fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Suffix of the hidden name a create without `O_TMPFILE` builds a ring under.
pub(crate) const BUILDING_SUFFIX: &str = "tmp";
/// Suffix of the hidden name a remove sets a ring aside under.
pub(crate) const REMOVING_SUFFIX: &str = "removing";

/// What a hidden file of a namespace directory was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftoverKind {
    /// A ring being built by a create (`.tmp`): nobody else ever opened it.
    Building,
    /// A ring set aside by a remove (`.removing`): the name was already gone, and clients
    /// attached before may still map it.
    Removing,
}

/// A hidden file of a namespace directory, named by [`hidden_name`]: a ring being built
/// or removed, by process `pid` at `nanos`. Left behind when that process died before it
/// renamed or unlinked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The file.
    pub path: PathBuf,
    /// The ring it was built for or removed from.
    pub ring: String,
    /// The process that made the name.
    pub pid: u32,
    /// When it made it: nanoseconds since the Unix epoch (wall clock).
    pub nanos: u64,
    /// Built or removed.
    pub kind: LeftoverKind,
}

impl Leftover {
    /// Parse a file name made by [`hidden_name`] (the ring's own name may hold dots, so the
    /// fields are taken from the right); `None` for any other name.
    pub fn parse(dir: &Path, file: &str) -> Option<Leftover> {
        let mut fields = file.strip_prefix('.')?.rsplitn(5, '.');
        let kind = match fields.next()? {
            BUILDING_SUFFIX => LeftoverKind::Building,
            REMOVING_SUFFIX => LeftoverKind::Removing,
            _ => return None,
        };
        let nanos = fields.next()?.parse().ok()?;
        let _serial: u64 = fields.next()?.parse().ok()?;
        let pid: u32 = fields.next()?.parse().ok().filter(|&p| p != 0)?;
        let ring = fields.next()?;
        check_name("ring", ring).ok()?;
        Some(Leftover {
            path: dir.join(file),
            ring: ring.to_owned(),
            pid,
            nanos,
            kind,
        })
    }
}

/// The hidden files of namespace directory `dir` that a create or a remove named
/// ([`Leftover::parse`]) and that are regular files (the entry's own type: a symbolic link
/// or a directory under such a name is not one), sorted by path. Those of live processes
/// are listed too: [`crate::Ring::clear_leftover`] tells them apart.
pub fn leftovers_in(dir: &Path) -> std::io::Result<Vec<Leftover>> {
    let mut found: Vec<Leftover> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|entry| Leftover::parse(dir, entry.file_name().to_str()?))
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The directory of a namespace: `<root>/shmring.<namespace>`.
pub fn namespace_dir(namespace: &str) -> Result<PathBuf, OpenError> {
    check_name("namespace", namespace)?;
    Ok(root().join(format!("shmring.{namespace}")))
}

/// The segment file of a ring: `<root>/shmring.<namespace>/<name>.ring`.
pub fn ring_path(namespace: &str, name: &str) -> Result<PathBuf, OpenError> {
    check_name("ring", name)?;
    Ok(namespace_dir(namespace)?.join(format!("{name}{RING_SUFFIX}")))
}

/// The ring names in namespace directory `dir` (`NAME.ring`, hidden files skipped), each
/// with the type of its directory entry: its own type, so a symbolic link is a link, never
/// what it points to. Sorted by name.
pub fn ring_entries_in(dir: &Path) -> std::io::Result<Vec<(String, std::fs::FileType)>> {
    let mut names: Vec<(String, std::fs::FileType)> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|entry| {
            let file = entry.file_name().into_string().ok()?;
            if file.starts_with('.') {
                return None;
            }
            let name = file.strip_suffix(RING_SUFFIX)?.to_owned();
            Some((name, entry.file_type().ok()?))
        })
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(names)
}

/// The rings in a namespace directory: the names of its `<name>.ring` regular files (a
/// symbolic link or anything else under a ring's name is not a ring), sorted. Hidden files
/// are left out (a create without `O_TMPFILE` builds under a hidden temporary name), and so are
/// names that are not UTF-8; an entry that cannot be read is skipped.
pub fn rings_in(dir: &Path) -> std::io::Result<Vec<String>> {
    Ok(ring_entries_in(dir)?
        .into_iter()
        .filter(|(_, kind)| kind.is_file())
        .map(|(name, _)| name)
        .collect())
}

/// A `broker` command line for a message to suggest, one a user can paste into a shell:
/// `broker SUBCOMMAND --namespace=NAMESPACE` (always: the CLI's own default may come from
/// `$SHMRING_NAMESPACE`), then `args`, each quoted where a shell would read it otherwise,
/// after `--` when one of them, or of the names a placeholder among them stands for
/// (`stands_for`), begins with `-` (which the CLI would take for an option).
pub fn broker_command(
    namespace: &str,
    subcommand: &str,
    args: &[&str],
    stands_for: &[&str],
) -> String {
    let mut line = format!(
        "broker {subcommand} {}",
        shell_word(&format!("--namespace={namespace}"))
    );
    if args.iter().chain(stands_for).any(|a| a.starts_with('-')) {
        line.push_str(" --");
    }
    for a in args {
        line.push(' ');
        line.push_str(&shell_word(a));
    }
    line
}

/// `word` as one word of a shell command line: as it is when it holds nothing a shell
/// reads specially; else in single quotes; one holding a [`hidden`] character in ANSI-C
/// quotes (`$'...'`: bash, zsh, ksh, POSIX.1-2024), where that character, `'`, `\` and `!`
/// are written as the octal escapes of their UTF-8 bytes (in any locale, and never a
/// control character printed to the user's terminal).
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.:/@+=,".contains(c);
    if !word.is_empty() && !word.starts_with('=') && word.chars().all(plain) {
        word.to_owned()
    } else if word.chars().any(hidden) {
        let mut quoted = String::from("$'");
        for c in word.chars() {
            if hidden(c) || matches!(c, '\'' | '\\' | '!') {
                let mut bytes = [0; 4];
                for b in c.encode_utf8(&mut bytes).bytes() {
                    quoted.push_str(&format!("\\{b:03o}"));
                }
            } else {
                quoted.push(c);
            }
        }
        quoted.push('\'');
        quoted
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Whether `c` is a control, invisible formatting or otherwise unprintable character:
/// printed as it is, a line break could forge a line of output, an escape sequence rewrite
/// the user's terminal and a direction override reorder what a line shows. Every
/// character that Rust's `{:?}` escapes as unprintable counts (separators, format
/// characters, unassigned and private-use code points), and the bidirectional and
/// zero-width controls by name. Names other processes chose (a consumer's: any bytes but
/// NUL) are printed through [`shown`].
pub fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
        || unprintable(c)
}

/// Whether `{:?}` escapes `c` for being unprintable: `str::escape_debug` escapes a
/// character after the first only for that (or for being a quote or a backslash, which
/// are printable).
fn unprintable(c: char) -> bool {
    if c.is_ascii() {
        // Quotes and the backslash, escaped by `escape_debug`, are printable.
        return c.is_ascii_control();
    }
    let mut buf = [0u8; 5];
    buf[0] = b'a';
    let len = 1 + c.encode_utf8(&mut buf[1..]).len();
    std::str::from_utf8(&buf[..len]).map_or(true, |s| s.escape_debug().nth(1) == Some('\\'))
}

/// `name` with its [`hidden`] characters escaped (`\n`, `\u{1b}`, `\u{202e}`): how a name
/// another process chose is printed.
pub fn shown(name: &str) -> String {
    if name.chars().any(hidden) {
        name.chars()
            .map(|c| {
                if hidden(c) {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    } else {
        name.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a suggested command becomes for names a shell or the CLI would misread.
    #[test]
    fn a_suggested_broker_command_survives_a_shell_and_the_cli() {
        assert_eq!(
            broker_command("default", "start", &["r"], &[]),
            "broker start --namespace=default r"
        );
        assert_eq!(
            broker_command("lab", "release", &["r", "audit log's"], &[]),
            r"broker release --namespace=lab r 'audit log'\''s'"
        );
        assert_eq!(
            broker_command("d", "release", &["r", "-v"], &[]),
            "broker release --namespace=d -- r -v"
        );
        assert_eq!(
            broker_command("-n", "release", &["r", "NAME"], &["w", "-v"]),
            "broker release --namespace=-n -- r NAME"
        );
        assert_eq!(
            broker_command("d", "release", &["r", "a\u{1b}[2J\n'\\!\u{202e}"], &[]),
            r"broker release --namespace=d r $'a\033[2J\012\047\134\041\342\200\256'"
        );
    }

    /// Every word `shell_word` writes, read back by bash (in the C locale, where `$'\u...'`
    /// would not be decoded), is the word itself.
    #[test]
    fn a_shell_reads_back_every_quoted_word_as_it_was() {
        let words = [
            "",
            "plain",
            "a b",
            "it's",
            "-v",
            "=ls",
            "~x",
            "a\\b",
            "$HOME",
            "!x'y",
            "évian 🚀",
            "x\u{1b}[2J\nring",
            "\u{202e}abc",
            "\u{85}ab",
            "\u{1b}1",
            "tab\there",
            "\u{7f}",
            "\u{2028}x",
            "a\u{a0}b",
            "\u{e0041}\u{ad}",
        ];
        for word in words {
            let out = std::process::Command::new("bash")
                .env("LC_ALL", "C")
                .arg("-c")
                .arg(format!("printf %s {}", shell_word(word)))
                .output()
                .expect("bash");
            assert!(out.status.success(), "{word:?}: {out:?}");
            assert_eq!(
                out.stdout,
                word.as_bytes(),
                "{word:?} written as {}",
                shell_word(word)
            );
        }
    }

    #[test]
    fn shown_escapes_what_would_reach_a_terminal_raw() {
        assert_eq!(shown("ok name"), "ok name");
        assert_eq!(shown("x\u{1b}[2J\n"), r"x\u{1b}[2J\n");
        assert_eq!(shown("evil\u{202e}gnp"), r"evil\u{202e}gnp");
    }

    /// Every character Rust's `{:?}` escapes as unprintable is hidden too: line and
    /// paragraph separators (a line break to some terminals and log viewers), the soft
    /// hyphen, tag characters; and printable ones, letters with accents and other
    /// scripts, are shown as they are.
    #[test]
    fn hidden_covers_what_debug_formatting_escapes() {
        for c in [
            '\u{2028}',
            '\u{2029}',
            '\u{00ad}',
            '\u{e0001}',
            '\u{e0041}',
            '\u{180e}',
            '\u{fff9}',
            '\u{1d173}',
            '\u{e000}',
            '\u{fffe}',
        ] {
            assert!(hidden(c), "{:?} shown raw", c);
            assert_eq!(
                shown(&format!("a{c}b")),
                format!("a{}b", c.escape_default())
            );
        }
        for name in [
            "caf\u{e9}",
            "ca\u{301}fe",
            "\u{65e5}\u{672c}",
            "\u{3164}x",
            "a'b\"c\\d",
        ] {
            assert_eq!(shown(name), name, "{name:?}");
        }
    }

    /// Without the environment variables, rings live in `/dev/shm/shmring.default/` (the
    /// README's opening).
    #[test]
    fn the_default_root_and_namespace_are_the_documented_ones() {
        assert_eq!(root_from(None), PathBuf::from("/dev/shm"));
        assert_eq!(root_from(Some("/run/x".into())), PathBuf::from("/run/x"));
        assert_eq!(namespace_from(None), "default");
        assert_eq!(namespace_from(Some("lab".into())), "lab");
        assert_eq!(
            ring_path("n", "r").unwrap(),
            root().join("shmring.n").join("r.ring")
        );
    }

    #[test]
    fn a_namespace_directory_is_made_once_with_its_maker_s_mode() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let root = std::env::temp_dir().join(format!("shmring-mkdir-{}", std::process::id()));
        let dir = root.join("shmring.ns");
        let gid = rustix::process::getegid().as_raw();
        assert!(make_namespace_dir(&dir, Some(gid)).unwrap());
        let made = std::fs::symlink_metadata(&dir).unwrap();
        // setgid and sticky, past the umask.
        assert_eq!(made.permissions().mode() & 0o7777, 0o3770);
        assert_eq!(made.gid(), gid);
        // A second maker with other settings finds it there and changes nothing.
        assert!(!make_namespace_dir(&dir, None).unwrap());
        let again = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(again.permissions().mode() & 0o7777, 0o3770);
        // A symbolic link at the name is not a directory this call made, nor followed.
        let link = root.join("shmring.link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(!make_namespace_dir(&link, None).unwrap());
        assert_eq!(
            std::fs::symlink_metadata(&dir)
                .unwrap()
                .permissions()
                .mode()
                & 0o7777,
            0o3770
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn hidden_names_asked_at_one_instant_differ() {
        let a = hidden_name("r", 7, "tmp");
        let b = hidden_name("r", 7, "tmp");
        assert_ne!(a, b, "one process, one instant, two names");
        for n in [&a, &b] {
            assert!(n.starts_with(".r.") && n.ends_with(".7.tmp"), "{n}");
            assert!(check_name("ring", n).is_err(), "{n} is hidden");
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("ring", "orders-1.v2_x").is_ok());
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65), "é"] {
            assert!(check_name("ring", bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rings_in_lists_ring_files_only() {
        let dir = std::env::temp_dir().join(format!("shmring-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "b.ring",
            "a.ring",
            ".a.ring.tmp",
            ".hidden.ring",
            "broker.sock",
            "c.ring.x",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let names = rings_in(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names.unwrap(), ["a", "b"]);
        assert!(rings_in(&dir).is_err(), "a missing directory is an error");
    }
}
