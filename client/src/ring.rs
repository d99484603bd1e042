//! Creating, opening and removing rings; attaching producers and consumers.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustix::fs::{FileType, Gid, Mode};
use shmring_layout::{
    config_checksum, consumer_flags, validate, FenceMode, Geometry, ProducerMode, RingState,
    FINGERPRINT, HEADER_SIZE, LAYOUT_VERSION, MAGIC, MAX_SEGMENT_SIZE, NAME_LEN, SIZED_LEN_SIZE,
    SLOT_FORMAT_FIXED, SLOT_FORMAT_SIZED, SLOT_FORMAT_STAMPED, STAMP_EMPTY, TOMB_NONE,
};

use crate::file::FileError;
use crate::fixed;
use crate::names::{namespace_dir, ring_path};
use crate::segment::Segment;
use crate::{DeclaredError, OpenError, RingInfo};

/// The shape and access rights of a ring, given at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingConfig {
    /// Slots, a power of two (default 1024).
    pub capacity: u64,
    /// Bytes per slot including its 16-byte header, a multiple of 64 (default 128).
    pub slot_size: u32,
    /// Consumer table size (default 16).
    pub max_consumers: u32,
    /// Producer table size (default 16).
    pub max_producers: u32,
    /// One producer or many (default many).
    pub producer_mode: ProducerMode,
    /// Events of exactly this many bytes (a multiple of 8), in payload-only slots published
    /// by a cursor: a fixed-size ring, the fastest per-event path (see ARCHITECTURE.md,
    /// "Fixed-size rings"). Needs `producer_mode: Single`; `slot_size` is then not used.
    /// Every publish carries exactly this many bytes. `None` (the default): stamped slots of
    /// `slot_size` bytes, each carrying an event of any length up to `slot_size - 16`.
    pub event_size: Option<u32>,
    /// Events of any length up to at least this many bytes (a multiple of 8), each in a slot
    /// of an 8-byte length word and the payload, published by a cursor as on a fixed-size
    /// ring: a
    /// ring of sized events, for variable-length events on the fixed-size ring's path (see
    /// ARCHITECTURE.md, "Rings of sized events"). The slot is rounded up to 16, 32 or 64
    /// bytes or whole 64-byte lines, so that none straddles two cache lines, and the events
    /// get all of it (`Producer::max_payload` says the bound: 40 gives 56). Needs
    /// `producer_mode: Single`; not with `event_size`; `slot_size` is then not used. `None`
    /// (the default): the ring's format is set by `event_size`.
    pub max_event_size: Option<u32>,
    /// How far (in events) an optional consumer may hold producers back beyond the slowest
    /// required consumer before producers stop waiting for it and may lap it. `None`: half
    /// the capacity.
    pub optional_slack: Option<u64>,
    /// File mode of the segment (default 0o600; 0o660 with `group`). Set with `fchmod`, so
    /// the umask does not change it.
    pub mode: u32,
    /// Group that owns the segment (and the namespace directory when this call creates it).
    pub group: Option<u32>,
    /// Durable required consumers that gate from the ring's creation (default none): each
    /// name gets its own consumer entry, DETACHED at the ring's first sequence, so every
    /// event published before that consumer first attaches waits for it. The first
    /// `ConsumerOptions::durable(name)` attach takes the entry over and reads from the
    /// first sequence. Applies when the ring is created; opening an existing ring ignores
    /// it. At most `max_consumers` distinct names of 1 to 48 bytes.
    pub declared: Vec<String>,
    /// Worker groups that gate from the ring's creation (default none): each name gets its
    /// group entry, DETACHED at the ring's first sequence, so what is published before the
    /// group's first member joins waits for the group, and its members
    /// (`ConsumerOptions::worker(name)`) share it from the first sequence. Applies when the
    /// ring is created. Names are checked with `declared` (distinct across both lists,
    /// together at most `max_consumers`).
    pub declared_groups: Vec<String>,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            capacity: 1024,
            slot_size: 128,
            max_consumers: 16,
            max_producers: 16,
            producer_mode: ProducerMode::Multi,
            event_size: None,
            max_event_size: None,
            optional_slack: None,
            mode: 0o600,
            group: None,
            declared: Vec::new(),
            declared_groups: Vec::new(),
        }
    }
}

impl RingConfig {
    /// Check the configuration (the declared consumers included) and lay it out.
    pub fn geometry(&self) -> Result<Geometry, OpenError> {
        self.declared_names().map_err(OpenError::Declared)?;
        if let (Some(event_size), Some(max_event_size)) = (self.event_size, self.max_event_size) {
            return Err(OpenError::TwoEventSizes {
                event_size,
                max_event_size,
            });
        }
        let cursor = self.event_size.is_some() || self.max_event_size.is_some();
        if let (true, Some(group)) = (cursor, self.declared_groups.first()) {
            return Err(OpenError::Declared(DeclaredError::GroupOnFixedRing(
                group.clone(),
            )));
        }
        let max_producers = match self.producer_mode {
            ProducerMode::Single => 1,
            ProducerMode::Multi => self.max_producers,
        };
        let (format, slot_size) = match (self.event_size, self.max_event_size) {
            (Some(size), _) => (SLOT_FORMAT_FIXED, size),
            (None, Some(max)) => (SLOT_FORMAT_SIZED, Self::sized_slot(max)?),
            (None, None) => (SLOT_FORMAT_STAMPED, self.slot_size),
        };
        Geometry::with_format(
            format,
            self.capacity,
            slot_size,
            self.max_consumers,
            max_producers,
            self.producer_mode,
            self.optional_slack.unwrap_or(self.capacity / 2),
        )
        .map_err(OpenError::Config)
    }

    /// The slot of a ring of sized events whose largest event is `max`: the length word and
    /// `max` bytes, rounded up to a power of two below a line and to whole lines above, so that
    /// no two slots share a cache line. 64-byte events in 72-byte slots, sharing lines with
    /// their neighbours, ran at 0.63-0.72x the rate of stamped slots, and 15-20% faster in
    /// 128-byte ones (`ipc-bench throughput`, 2026-12-05); the rounding gives the events the
    /// slot's whole payload (`Producer::max_payload`).
    fn sized_slot(max: u32) -> Result<u32, OpenError> {
        use shmring_layout::{LayoutError, FIXED_EVENT_ALIGN, MAX_SLOT_SIZE};
        if max < FIXED_EVENT_ALIGN || !max.is_multiple_of(FIXED_EVENT_ALIGN) {
            return Err(OpenError::Config(LayoutError::BadMaxEventSize(max)));
        }
        let slot = u64::from(max) + u64::from(SIZED_LEN_SIZE);
        let slot = if slot <= 64 {
            slot.next_power_of_two()
        } else {
            slot.next_multiple_of(64)
        };
        // Past every slot size: refused by the layout as the bound asked for.
        u32::try_from(slot)
            .ok()
            .filter(|&s| s <= MAX_SLOT_SIZE)
            .ok_or(OpenError::Config(LayoutError::BadMaxEventSize(max)))
    }

    /// The declared names (consumers, then groups), each packed as it is stored in a
    /// consumer entry, checked: each fits an entry, none twice across both lists, no more
    /// than the table holds.
    fn declared_names(&self) -> Result<Vec<[u64; NAME_LEN / 8]>, DeclaredError> {
        let names: Vec<&String> = self.declared.iter().chain(&self.declared_groups).collect();
        if names.len() > self.max_consumers as usize {
            return Err(DeclaredError::TooMany {
                declared: names.len(),
                max_consumers: self.max_consumers,
            });
        }
        let mut packed = Vec::with_capacity(names.len());
        for (i, &name) in names.iter().enumerate() {
            if names[..i].contains(&name) {
                return Err(DeclaredError::Duplicate(name.clone()));
            }
            packed.push(
                crate::consumer::pack_name(name)
                    .map_err(|_| DeclaredError::BadName(name.clone()))?,
            );
        }
        Ok(packed)
    }
}

fn describe(g: &Geometry) -> String {
    let slots = if g.sized {
        format!("sized events of up to {} bytes", g.max_payload())
    } else if g.fixed {
        format!("fixed-size events of {} bytes", g.slot_size)
    } else {
        format!("slot size {}", g.slot_size)
    };
    format!(
        "capacity {}, {slots}, {} consumers, {} producers, {:?} producer",
        g.capacity, g.max_consumers, g.max_producers, g.producer_mode
    )
}

/// A ring in shared memory. Cheap to clone; every producer and consumer attached through it
/// keeps the mapping alive.
#[derive(Clone)]
pub struct Ring {
    pub(crate) seg: Arc<Segment>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("path", &self.seg.path())
            .field("geometry", self.seg.geometry())
            .finish()
    }
}

impl Ring {
    /// Create ring `name` in `namespace`. Fails with [`OpenError::AlreadyExists`] if it is
    /// there: a live segment is never replaced (a waiter on the old file would never wake).
    ///
    /// The segment is built in a file without a name (`O_TMPFILE`) and linked in at the
    /// ring's name once whole, with its magic written last: no process can open a half-built
    /// ring, and a creator that dies while it builds leaves nothing behind. Where the file
    /// system has no `O_TMPFILE` (or `/proc` is not mounted) it is built under a hidden
    /// temporary name and renamed into place (no-replace) instead.
    pub fn create(namespace: &str, name: &str, config: &RingConfig) -> Result<Ring, OpenError> {
        Self::create_staged(namespace, name, config, true)
    }

    /// [`Ring::create`]; `unnamed: false` builds under a temporary name even where a file
    /// without a name could be made.
    fn create_staged(
        namespace: &str,
        name: &str,
        config: &RingConfig,
        unnamed: bool,
    ) -> Result<Ring, OpenError> {
        let geo = config.geometry()?;
        let path = ring_path(namespace, name)?;
        let dir = namespace_dir(namespace)?;
        ensure_dir(&dir, config)?;
        let created = crate::names::wall_clock_ns();
        let unnamed = if unnamed {
            unnamed_file(&dir, config.mode)?
        } else {
            None
        };
        let (file, staging) = match unnamed {
            Some(file) => (file, Staging::Unnamed),
            None => named_file(&dir, name, created, config.mode)?,
        };
        let result = build(file, geo, config, created, &staging, &path, namespace, name);
        if let (Err(_), Staging::Named(tmp)) = (&result, &staging) {
            let _ = std::fs::remove_file(tmp);
        }
        match result {
            // No room for this ring where the name is taken (by a ring that took the room,
            // or one another process made meanwhile): the answer is that it exists, which
            // `open_or_create` opens.
            Err(OpenError::NoSpace { .. }) if path.symlink_metadata().is_ok() => {
                Err(OpenError::AlreadyExists {
                    name: name.to_owned(),
                    path,
                })
            }
            other => other,
        }
    }

    /// Open an existing ring, validating its segment. The file is opened without following
    /// a symbolic link and must be a regular file ([`OpenError::NotRegular`]).
    pub fn open(namespace: &str, name: &str) -> Result<Ring, OpenError> {
        Self::open_at(ring_path(namespace, name)?, namespace, name)
    }

    /// Open the file at `path` as ring `name` of `namespace` (its own name, or the hidden
    /// name a remove set it aside under).
    pub(crate) fn open_at(path: PathBuf, namespace: &str, name: &str) -> Result<Ring, OpenError> {
        let file = match crate::file::open_regular(&path) {
            Ok(f) => f,
            Err(FileError::NotRegular(kind)) => return Err(OpenError::NotRegular { path, kind }),
            Err(FileError::DirNotDirectory(kind)) => {
                return Err(not_a_directory(path.parent().unwrap_or(&path), kind))
            }
            Err(FileError::Io(e)) if e.kind() == ErrorKind::NotFound => {
                return Err(OpenError::NotFound {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    path,
                })
            }
            Err(FileError::Io(e)) => return Err(OpenError::io("open", &path, e)),
        };
        Self::from_file(file, &path, namespace, name)
    }

    /// Map an opened regular segment file after validating its header and size, and that
    /// it was created in this process's pid namespace.
    pub(crate) fn from_file(
        file: File,
        path: &Path,
        namespace: &str,
        name: &str,
    ) -> Result<Ring, OpenError> {
        let len = file
            .metadata()
            .map_err(|e| OpenError::io("stat", path, e))?
            .len();
        let layout = |source| OpenError::Layout {
            path: path.to_owned(),
            source,
        };
        if len < HEADER_SIZE as u64 {
            return Err(layout(shmring_layout::LayoutError::TooShortForHeader {
                len,
            }));
        }
        if len > MAX_SEGMENT_SIZE {
            return Err(layout(shmring_layout::LayoutError::TooLarge(len)));
        }
        let snapshot =
            Segment::header_snapshot(&file).map_err(|e| OpenError::io("map", path, e))?;
        let checked = validate(&snapshot, len).map_err(layout)?;
        let seg = Segment::map(file, checked.geometry, path, namespace, name)
            .map_err(|e| OpenError::io("map", path, e))?;
        // Relaxed: written before the magic, whose Acquire load (`header_snapshot`) this
        // follows.
        let ring = seg.header().pid_ns.load(Ordering::Relaxed);
        let own = crate::process::pid_namespace();
        if ring != 0 && own != 0 && ring != own {
            return Err(OpenError::OtherPidNamespace {
                path: path.to_owned(),
                ring,
                own,
            });
        }
        let ring = Ring { seg: Arc::new(seg) };
        // A truncation since the size was checked, caught by the truncation guard.
        ring.check_file()?;
        Ok(ring)
    }

    /// Open the ring if it exists (its shape must match `config`), else create it. Safe to
    /// race: of two processes creating at once, one creates and the other opens.
    pub fn open_or_create(
        namespace: &str,
        name: &str,
        config: &RingConfig,
    ) -> Result<Ring, OpenError> {
        let want = config.geometry()?;
        loop {
            match Self::open(namespace, name) {
                Ok(ring) => {
                    let have = *ring.seg.geometry();
                    if have != want {
                        return Err(OpenError::ConfigMismatch {
                            name: name.to_owned(),
                            found: describe(&have),
                            requested: describe(&want),
                        });
                    }
                    return Ok(ring);
                }
                Err(OpenError::NotFound { .. }) => match Self::create(namespace, name, config) {
                    Err(OpenError::AlreadyExists { .. }) => continue,
                    other => return other,
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// The ring's name.
    pub fn name(&self) -> &str {
        self.seg.name()
    }
    /// The ring's namespace.
    pub fn namespace(&self) -> &str {
        self.seg.namespace()
    }
    /// The segment file.
    pub fn path(&self) -> &Path {
        self.seg.path()
    }
    /// The ring's validated shape.
    pub fn geometry(&self) -> &Geometry {
        self.seg.geometry()
    }
    /// Slots in the ring.
    pub fn capacity(&self) -> u64 {
        self.seg.geometry().capacity
    }
    /// Largest payload one event carries.
    pub fn max_payload(&self) -> usize {
        self.seg.geometry().max_payload()
    }
    /// How publishes are ordered against parking consumers on this ring: the asymmetric
    /// membarrier fence, or a `SeqCst` fence on publish where the kernel lacks it (the
    /// weaker mode wins once any attached process uses it).
    pub fn fence_mode(&self) -> Option<FenceMode> {
        FenceMode::from_u32(self.seg.header().fence_mode.load(Ordering::Relaxed))
    }
    /// A consistent-enough snapshot of the ring's tables, for status displays.
    pub fn info(&self) -> RingInfo {
        crate::info::snapshot(&self.seg)
    }

    /// Check, with `fstat` on the open file, that the file still holds the whole segment.
    /// A file truncated under a mapping raises SIGBUS in whoever touches a page past its
    /// end, so a process that holds a `Ring` for long (the broker) calls this before it
    /// reads or writes the segment, and drops the ring on [`OpenError::Truncated`].
    /// Attaching a producer or a consumer checks the same.
    ///
    /// With the truncation guard (`install_truncation_guard`, feature `truncation-guard`),
    /// a truncation that landed after this check and was touched is
    /// [`OpenError::TruncatedWhileMapped`], whatever the file's size is now.
    pub fn check_file(&self) -> Result<(), OpenError> {
        if self.seg.zeroed() {
            return Err(OpenError::TruncatedWhileMapped {
                path: self.path().to_owned(),
                size: self.geometry().total_size,
            });
        }
        match self.seg.shrunk() {
            Ok(None) => Ok(()),
            Ok(Some(len)) => Err(OpenError::Truncated {
                path: self.path().to_owned(),
                len,
                size: self.geometry().total_size,
            }),
            Err(e) => Err(OpenError::io("stat", self.path(), e)),
        }
    }
}

impl Ring {
    /// Whether the ring's name in its namespace directory still names the file this `Ring`
    /// mapped (device and inode, the name not followed): `Ok(false)` once that file was
    /// removed and another created, or renamed, in its place. A name that is gone is an
    /// error (`NotFound`). A process that holds a `Ring` for long (the broker) asks this to
    /// follow the name to the ring its clients now open.
    pub fn is_at_path(&self) -> std::io::Result<bool> {
        let mapped = crate::file::identity(self.seg.file())?;
        Ok(crate::file::identity_of(self.path())? == mapped)
    }
}

/// The error for a namespace directory `dir` that is `kind` (a symbolic link, say), not a
/// directory.
fn not_a_directory(dir: &Path, kind: &str) -> OpenError {
    OpenError::Io {
        op: "use the namespace directory",
        path: dir.to_owned(),
        source: std::io::Error::other(format!(
            "it is {kind}, not a directory (a namespace directory is never followed through a link): remove it"
        )),
    }
}

/// Make the namespace directory if it is not there ([`crate::names::make_namespace_dir`]
/// gives its mode). An existing directory is used as it is, whoever made
/// it and with whatever mode (the broker adds only a missing sticky bit, see
/// docs/DEPLOYMENT.md), unless the name is not a directory (a symbolic link).
fn ensure_dir(dir: &Path, config: &RingConfig) -> Result<(), OpenError> {
    let is_dir = |dir: &Path| match rustix::fs::lstat(dir) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Ok(true),
        Ok(st) => Err(not_a_directory(
            dir,
            crate::file::kind_name(FileType::from_raw_mode(st.st_mode)),
        )),
        Err(_) => Ok(false),
    };
    if is_dir(dir)? {
        return Ok(());
    }
    match crate::names::make_namespace_dir(dir, config.group) {
        Ok(true) => Ok(()),
        // Made by another process meanwhile (or something else put there): check it.
        Ok(false) if is_dir(dir)? => Ok(()),
        Ok(false) => Err(OpenError::io(
            "use the namespace directory",
            dir,
            std::io::Error::other("it was removed while it was being made: try again"),
        )),
        Err(e) => Err(OpenError::io("create directory", dir, e)),
    }
}

fn gid(g: u32) -> Gid {
    Gid::from_raw(g)
}

/// Lay out the declared consumers (`RingConfig::declared`) and then the declared groups
/// (`RingConfig::declared_groups`), one entry each from the first, in a segment nobody
/// else can see yet: name, flags (REQUIRED | DURABLE | DECLARED for a consumer, REQUIRED |
/// DURABLE | GROUP for a group, as a group's first member makes it), position the ring's
/// first sequence, no attach, and last the word, DETACHED with no holder
/// (`table::consumer::declare`). Every store is Relaxed: the Release store of the magic
/// publishes them, so no process ever sees a half-built declared entry.
fn declare(seg: &Segment, config: &RingConfig) -> Result<(), OpenError> {
    let names = config.declared_names().map_err(OpenError::Declared)?;
    let first = seg.position();
    for (i, words) in names.iter().enumerate() {
        let e = u32::try_from(i)
            .ok()
            .and_then(|i| seg.consumer(i))
            .ok_or(OpenError::Declared(DeclaredError::TooMany {
                declared: names.len(),
                max_consumers: seg.geometry().max_consumers,
            }))?;
        for (w, v) in e.cold.name.iter().zip(words) {
            w.store(*v, Ordering::Relaxed);
        }
        e.cold.start_time.store(0, Ordering::Relaxed);
        e.cold.attaches.store(0, Ordering::Relaxed);
        let kind = if i < config.declared.len() {
            consumer_flags::DECLARED
        } else {
            consumer_flags::GROUP
        };
        e.hot.flags.store(
            consumer_flags::REQUIRED | consumer_flags::DURABLE | kind,
            Ordering::Relaxed,
        );
        // Relaxed, as every field here: published by the Release store of the magic.
        e.hot.next.store(first, Ordering::Relaxed);
        e.hot.first.store(first, Ordering::Relaxed);
        crate::table::consumer::declare(&e.hot.word);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn build(
    file: File,
    geo: Geometry,
    config: &RingConfig,
    created: u64,
    staging: &Staging,
    path: &Path,
    namespace: &str,
    name: &str,
) -> Result<Ring, OpenError> {
    // What an error names: the temporary name, or the ring's name the file will take.
    let tmp = match staging {
        Staging::Named(tmp) => tmp.as_path(),
        Staging::Unnamed => path,
    };
    // Explicit mode and group: the umask would turn a requested 0660 into 0640.
    rustix::fs::fchmod(&file, Mode::from_raw_mode(config.mode))
        .map_err(|e| OpenError::io("chmod", tmp, e.into()))?;
    if let Some(g) = config.group {
        rustix::fs::fchown(&file, None, Some(gid(g)))
            .map_err(|e| OpenError::io("chown", tmp, crate::names::chown_error(e, g)))?;
    }
    // Reserve every page now: on a full /dev/shm a sparse file would map fine and then
    // kill the first process that touches a missing page with SIGBUS.
    match rustix::fs::fallocate(
        &file,
        rustix::fs::FallocateFlags::empty(),
        0,
        geo.total_size,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOSPC) => {
            return Err(OpenError::NoSpace {
                path: path.to_owned(),
                size: geo.total_size,
            })
        }
        // A filesystem without fallocate: size it the sparse way.
        Err(rustix::io::Errno::OPNOTSUPP) => file
            .set_len(geo.total_size)
            .map_err(|e| OpenError::io("size", tmp, e))?,
        Err(e) => return Err(OpenError::io("reserve", tmp, e.into())),
    }
    let seg =
        Segment::map(file, geo, path, namespace, name).map_err(|e| OpenError::io("map", tmp, e))?;
    let h = seg.header();
    // Nobody else can see the file yet (it has no name, or a temporary one): Relaxed
    // stores, published by the Release store of the magic below and by the link or rename.
    h.producer_mode
        .store(geo.producer_mode as u32, Ordering::Relaxed);
    h.fingerprint.store(FINGERPRINT, Ordering::Relaxed);
    h.capacity.store(geo.capacity, Ordering::Relaxed);
    h.slot_size.store(geo.slot_size, Ordering::Relaxed);
    h.slot_format.store(geo.slot_format(), Ordering::Relaxed);
    h.max_consumers.store(geo.max_consumers, Ordering::Relaxed);
    h.max_producers.store(geo.max_producers, Ordering::Relaxed);
    h.file_mode.store(config.mode, Ordering::Relaxed);
    h.optional_slack
        .store(geo.optional_slack, Ordering::Relaxed);
    h.created_unix_ns.store(created, Ordering::Relaxed);
    h.total_size.store(geo.total_size, Ordering::Relaxed);
    h.config_checksum.store(
        config_checksum(&geo.config_words(config.mode, created)),
        Ordering::Relaxed,
    );
    seg.lines().lifecycle.value.lifecycle.store(
        shmring_layout::lifecycle::pack(0, RingState::Running as u32, 0),
        Ordering::Relaxed,
    );
    h.fence_mode
        .store(FenceMode::Unset as u32, Ordering::Relaxed);
    // The first run, counted (a stop clears the mark for the next start's count).
    h.run
        .store(1 | shmring_layout::RUN_COUNTED, Ordering::Relaxed);
    h.pid_ns
        .store(crate::process::pid_namespace(), Ordering::Relaxed);
    if geo.fixed {
        seg.lines()
            .cursor
            .pending
            .store(shmring_layout::PENDING_NONE, Ordering::Relaxed);
        let events = seg.events();
        for seq in 0..geo.capacity {
            fixed::Words::tomb(&events, seq).store(TOMB_NONE, Ordering::Relaxed);
        }
    } else {
        for seq in 0..geo.capacity {
            seg.slot(seq)
                .header
                .stamp
                .store(STAMP_EMPTY, Ordering::Relaxed);
        }
    }
    declare(&seg, config)?;
    h.version.store(LAYOUT_VERSION, Ordering::Relaxed);
    // Release, last: pairs with the Acquire load of the magic in `header_snapshot`; a reader
    // that sees the magic sees every field above.
    h.magic.store(MAGIC, Ordering::Release);

    // Both fail with EEXIST where the name is taken (by anything, a dangling link
    // included): a ring is never replaced.
    let named = match staging {
        // Through the descriptor's /proc link (`AT_EMPTY_PATH` would need a capability), the
        // calling thread's: `/proc/self` is the main thread's, which has no open files once
        // it has exited while other threads run.
        Staging::Unnamed => rustix::fs::linkat(
            rustix::fs::CWD,
            format!("{THREAD_FDS}/{}", seg.file().as_raw_fd()),
            rustix::fs::CWD,
            path,
            rustix::fs::AtFlags::SYMLINK_FOLLOW,
        ),
        Staging::Named(tmp) => rustix::fs::renameat_with(
            rustix::fs::CWD,
            tmp,
            rustix::fs::CWD,
            path,
            rustix::fs::RenameFlags::NOREPLACE,
        ),
    };
    match named {
        Ok(()) => Ok(Ring { seg: Arc::new(seg) }),
        Err(rustix::io::Errno::EXIST) => Err(OpenError::AlreadyExists {
            name: name.to_owned(),
            path: path.to_owned(),
        }),
        Err(e) => Err(OpenError::io(
            match staging {
                Staging::Unnamed => "link",
                Staging::Named(_) => "rename",
            },
            path,
            e.into(),
        )),
    }
}

/// Where a create builds the segment before it takes the ring's name.
enum Staging {
    /// A file without a name (`O_TMPFILE`), linked in at the ring's name when whole.
    Unnamed,
    /// A hidden temporary name in the namespace directory, renamed to the ring's name when
    /// whole: a creator that dies while it builds leaves the file behind.
    Named(PathBuf),
}

/// The calling thread's descriptors in `/proc`, through which a file without a name is
/// linked in.
const THREAD_FDS: &str = "/proc/thread-self/fd";

/// A new file without a name in `dir` (`O_TMPFILE`), to build a segment in; `None` where
/// it cannot be made and named later: no `O_TMPFILE` in the file system or the kernel, or
/// no `/proc` to link it through.
fn unnamed_file(dir: &Path, mode: u32) -> Result<Option<File>, OpenError> {
    use rustix::fs::OFlags;
    if !Path::new(THREAD_FDS).is_dir() {
        return Ok(None);
    }
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(dir, flags, Mode::from_raw_mode(mode)) {
        Ok(fd) => Ok(Some(File::from(fd))),
        // EOPNOTSUPP: a file system without it; EISDIR or EINVAL: a kernel without it.
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR | rustix::io::Errno::INVAL) => {
            Ok(None)
        }
        Err(e) => Err(OpenError::io("create", dir, e.into())),
    }
}

/// A new file under a hidden temporary name in `dir`, to build ring `name`'s segment in.
fn named_file(
    dir: &Path,
    name: &str,
    created: u64,
    mode: u32,
) -> Result<(File, Staging), OpenError> {
    let tmp = dir.join(crate::names::hidden_name(
        name,
        created,
        crate::names::BUILDING_SUFFIX,
    ));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| OpenError::io("create", &tmp, e))?;
    Ok((file, Staging::Named(tmp)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_ns::Ns;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read the namespace directory")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Where no file without a name can be made, a create builds under a hidden name and
    /// renames it into place: the ring opens whole, and a second create of the name, refused
    /// with `AlreadyExists` after it built, removes its own temporary file.
    #[test]
    fn a_ring_built_under_a_temporary_name_is_renamed_into_place_whole() {
        let ns = Ns(format!("named-build-{}", std::process::id()));
        let config = RingConfig {
            capacity: 16,
            ..RingConfig::default()
        };
        let ring = Ring::create_staged(&ns.0, "r", &config, false).expect("create r");
        let dir = namespace_dir(&ns.0).expect("namespace directory");
        assert_eq!(names(&dir), ["r.ring"]);
        let opened = Ring::open(&ns.0, "r").expect("open r");
        assert_eq!(opened.capacity(), 16);
        let mut c = opened
            .consumer(crate::ConsumerOptions::anonymous())
            .expect("consumer");
        ring.producer()
            .expect("producer")
            .publish(b"whole")
            .expect("publish");
        assert_eq!(c.poll_once(|ev| assert_eq!(ev.bytes(), b"whole")), Ok(1));
        assert!(matches!(
            Ring::create_staged(&ns.0, "r", &config, false),
            Err(OpenError::AlreadyExists { .. })
        ));
        assert_eq!(names(&dir), ["r.ring"], "a temporary file was left behind");
    }

    /// Threads of one process building the same ring under temporary names at the same
    /// instant each get a name of their own: every call gets the ring or `AlreadyExists`,
    /// never an error about another thread's file, and none is left behind.
    #[test]
    fn threads_building_under_temporary_names_at_once_never_collide() {
        let ns = Ns(format!("named-race-{}", std::process::id()));
        let config = RingConfig {
            capacity: 16,
            ..RingConfig::default()
        };
        let threads = 4;
        let barrier = std::sync::Barrier::new(threads);
        for _ in 0..100 {
            let created: u32 = std::thread::scope(|s| {
                let calls: Vec<_> = (0..threads)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            Ring::create_staged(&ns.0, "z", &config, false)
                        })
                    })
                    .collect();
                calls
                    .into_iter()
                    .map(|c| match c.join().expect("a creating thread") {
                        Ok(_) => 1,
                        Err(OpenError::AlreadyExists { .. }) => 0,
                        Err(e) => panic!("a create racing others failed: {e}"),
                    })
                    .sum()
            });
            assert_eq!(
                created, 1,
                "exactly one of the racing creates builds the ring"
            );
            Ring::remove(&ns.0, "z").expect("remove z");
        }
        let dir = namespace_dir(&ns.0).expect("namespace directory");
        assert_eq!(names(&dir), Vec::<String>::new(), "left behind");
    }
}
