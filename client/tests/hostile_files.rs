//! The namespace directory as input: a member of the ring's group can truncate a ring file,
//! put a symbolic link or a FIFO where a ring file should be, or remove names. Whatever it
//! finds there, the client refuses what is not a whole regular ring file with an error
//! that says so, never follows a link, and never touches a page past a file's end.

use std::fs::OpenOptions;
use std::os::unix::fs::symlink;

use shmring::{ConsumerOptions, OpenError, Ring, RingConfig, RingState};

mod common;
use shmring_testkit::Namespace;

/// The names in directory `dir` (none if it is gone).
fn names_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn cfg() -> RingConfig {
    RingConfig {
        capacity: 64,
        ..RingConfig::default()
    }
}

/// A ring file truncated to one page: a new `open` is refused with the sizes, and a handle
/// opened before the truncation refuses to attach instead of touching the missing pages
/// (which would kill this process with SIGBUS).
#[test]
fn a_truncated_segment_is_refused_at_open_and_at_attach() {
    let ns = Namespace::concurrent("truncated");
    let ring = Ring::create(ns.name(), "r", &cfg()).expect("create");
    let size = ring.geometry().total_size;
    assert!(
        size > 4096,
        "the segment spans more than the page that stays"
    );
    OpenOptions::new()
        .write(true)
        .open(ring.path())
        .expect("open for truncation")
        .set_len(4096)
        .expect("truncate");

    let e = Ring::open(ns.name(), "r").expect_err("a truncated segment is not opened");
    let text = e.to_string();
    assert!(
        text.contains("4096") && text.contains(&size.to_string()),
        "{text}"
    );

    match ring.producer() {
        Ok(_) => panic!("a producer attached to a truncated segment"),
        Err(e) => assert!(e.to_string().contains("truncated"), "{e}"),
    }
    match ring.consumer(ConsumerOptions::anonymous()) {
        Ok(_) => panic!("a consumer attached to a truncated segment"),
        Err(e) => assert!(e.to_string().contains("truncated"), "{e}"),
    }
    assert!(
        matches!(ring.check_file(), Err(OpenError::Truncated { len: 4096, size: s, .. }) if s == size),
        "{:?}",
        ring.check_file()
    );
}

/// `NAME.ring` as a symbolic link to another namespace's ring is refused, not followed:
/// the other ring is neither opened nor marked deleted by a remove of the link's name, which
/// removes the link alone. A FIFO under a ring name is refused without blocking.
#[test]
fn a_ring_name_that_is_not_a_regular_file_is_refused_not_followed() {
    let ns = Namespace::concurrent("links");
    let other = Namespace::concurrent("links_target");
    let target = Ring::create(other.name(), "default", &cfg()).expect("create the target");
    Ring::create(ns.name(), "real", &cfg()).expect("create the namespace");

    let alias = ns.ring_path("alias");
    symlink(target.path(), &alias).expect("symlink");
    let e = Ring::open(ns.name(), "alias").expect_err("a symbolic link is not followed");
    assert!(e.to_string().contains("symbolic link"), "{e}");

    Ring::remove(ns.name(), "alias").expect("removing the link's name");
    assert!(alias.symlink_metadata().is_err(), "the link is gone");
    assert!(target.path().exists(), "the target is still there");
    assert_eq!(target.state(), Some(RingState::Running), "and not deleted");
    Ring::open(other.name(), "default").expect("the target opens as before");

    let pipe = ns.ring_path("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &pipe,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let e = Ring::open(ns.name(), "pipe").expect_err("a FIFO is not a ring");
    assert!(e.to_string().contains("FIFO"), "{e}");
}

/// A namespace directory that is a symbolic link to another namespace's directory (anyone
/// may plant one in the world-writable root before the namespace is made) is refused, not
/// followed, as `create` refuses it: an open through it would alias the other namespace's
/// rings, and a remove through it would delete one of them under its clients.
#[test]
fn a_namespace_directory_that_is_a_link_is_refused_not_followed() {
    let other = Namespace::concurrent("dirlink_target");
    let ns = Namespace::concurrent("dirlink");
    let target = Ring::create(other.name(), "r", &cfg()).expect("create the target");
    symlink(other.dir(), ns.dir()).expect("a link at the namespace's path");

    for e in [
        Ring::open(ns.name(), "r").map(drop),
        Ring::open_or_create(ns.name(), "r", &cfg()).map(drop),
        Ring::remove(ns.name(), "r"),
    ] {
        let e = e.expect_err("a namespace directory is never followed through a link");
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }
    assert_eq!(
        target.state(),
        Some(RingState::Running),
        "the target is not deleted"
    );
    assert!(target.path().exists(), "the target is still there");
    assert!(
        ns.dir().symlink_metadata().is_ok(),
        "the link is left alone"
    );
    std::fs::remove_file(ns.dir()).expect("remove the link");
}

/// A ring whose lifecycle word another process overwrote refuses every stop and start,
/// and its error says to remove it and create it again: a remove does end it. The word is
/// closed as from Running (from that exact value), so attached clients get `Deleted`, and
/// the file goes, for either producer mode. A ring that is already deleted (under another
/// name, a hard link) is removed by unlinking alone.
#[test]
fn a_remove_ends_a_ring_whose_lifecycle_word_is_corrupt() {
    for mode in [shmring::ProducerMode::Multi, shmring::ProducerMode::Single] {
        let ns = Namespace::concurrent("corrupt_remove");
        let config = RingConfig {
            producer_mode: mode,
            ..cfg()
        };
        let ring = Ring::create(ns.name(), "r", &config).expect("create");
        let mut p = ring.producer().expect("producer");
        let mut c = ring
            .consumer(ConsumerOptions::anonymous())
            .expect("consumer");
        p.publish(b"before").expect("publish");
        shmring_testkit::raw::RawSegment::open(&ring)
            .set_lifecycle_word(shmring_layout::lifecycle::pack(0, 0xee, 0));
        assert!(
            matches!(ring.stop(), Err(shmring::LifecycleError::CorruptState(_))),
            "{mode:?}"
        );
        Ring::remove(ns.name(), "r").expect("a corrupt ring is removed");
        assert_eq!(ring.state(), Some(RingState::Deleted), "{mode:?}");
        assert!(!ring.path().exists(), "{mode:?}");
        assert!(names_in(ns.dir()).is_empty(), "{mode:?}: nothing left");
        assert_eq!(
            p.publish(b"after"),
            Err(shmring::PublishError::Deleted),
            "{mode:?}"
        );
        assert_eq!(c.poll_once(|_| {}), Ok(1), "{mode:?}: what came before");
        assert_eq!(
            c.poll_once(|_| {}),
            Err(shmring::PollError::Deleted),
            "{mode:?}"
        );
    }

    let ns = Namespace::concurrent("hardlink_remove");
    let ring = Ring::create(ns.name(), "r", &cfg()).expect("create");
    let second = ns.ring_path("second");
    std::fs::hard_link(ring.path(), &second).expect("hard link");
    Ring::remove(ns.name(), "second").expect("remove the second name");
    assert_eq!(ring.state(), Some(RingState::Deleted));
    Ring::remove(ns.name(), "r").expect("a deleted ring's name is removed");
    assert!(!ring.path().exists());
}

/// A ring is built without a name and linked into place whole, and removed
/// by renaming it aside first: a process that opens the name while others create and
/// remove it, over and over, finds a whole ring or no ring, never a half-built or
/// half-removed one. Two `open_or_create` calls racing on a missing name both get the same
/// ring.
#[test]
fn a_ring_being_created_or_removed_is_never_opened_half_built() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let ns = Namespace::concurrent("half-built");
    let name = ns.name().to_owned();
    let done = AtomicBool::new(false);
    let (opened, missing) = std::thread::scope(|s| {
        let churn = s.spawn(|| {
            for _ in 0..400 {
                match Ring::create(&name, "x", &cfg()) {
                    Ok(_) | Err(OpenError::AlreadyExists { .. }) => {}
                    Err(e) => panic!("create: {e}"),
                }
                match Ring::remove(&name, "x") {
                    Ok(()) | Err(OpenError::NotFound { .. }) => {}
                    Err(e) => panic!("remove: {e}"),
                }
            }
            done.store(true, Ordering::Release);
        });
        let (mut opened, mut missing) = (0u64, 0u64);
        loop {
            // Read before the open, so the last open races the last remove.
            let last = done.load(Ordering::Acquire);
            match Ring::open(&name, "x") {
                Ok(r) => {
                    assert_eq!(r.capacity(), 64, "a ring opened with another geometry");
                    opened += 1;
                }
                Err(OpenError::NotFound { .. }) => missing += 1,
                Err(e) => panic!("open found a ring half built or half removed: {e}"),
            }
            if last {
                break;
            }
        }
        churn.join().expect("the creating thread");
        (opened, missing)
    });
    eprintln!("opened {opened}, not found {missing}");
    let left = names_in(ns.dir());
    assert!(left.is_empty(), "left behind: {left:?}");

    for _ in 0..50 {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| Ring::open_or_create(&name, "y", &cfg()).expect("first"));
            let b = s.spawn(|| Ring::open_or_create(&name, "y", &cfg()).expect("second"));
            (a.join().expect("first"), b.join().expect("second"))
        });
        let mut c = b.consumer(ConsumerOptions::anonymous()).expect("consumer");
        a.producer()
            .expect("producer")
            .publish(b"one")
            .expect("publish");
        assert_eq!(c.poll_once(|ev| assert_eq!(ev.bytes(), b"one")), Ok(1));
        drop((a, c));
        Ring::remove(&name, "y").expect("remove y");
    }
}

/// Threads of one process that create the same ring at the same instant each build a file
/// of their own: every call gets the ring or `AlreadyExists`, never an error about another
/// thread's file, and none is left behind.
#[test]
fn threads_creating_one_ring_at_once_never_collide_on_a_temporary_name() {
    let ns = Namespace::concurrent("same-instant");
    let name = ns.name().to_owned();
    let threads = 4;
    let barrier = std::sync::Barrier::new(threads);
    for _ in 0..200 {
        let created = std::thread::scope(|s| {
            let calls: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        Ring::create(&name, "z", &cfg())
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
                .sum::<u32>()
        });
        assert_eq!(
            created, 1,
            "exactly one of the racing creates builds the ring"
        );
        Ring::remove(&name, "z").expect("remove z");
    }
    let left = names_in(ns.dir());
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A create names nothing in the namespace directory but the ring, and only once it is
/// whole: the segment is built in a file without a name and linked in at the end. So a
/// creator killed while it builds leaves nothing behind (the file's pages go back with its
/// last descriptor) and no other process can find the half-built file under any name. The
/// directory is watched (inotify) through a stamped and a fixed-size ring's create, and
/// through a create that finds the name taken. (Where the file system has no `O_TMPFILE`,
/// each create makes a hidden temporary name first: the test says so and checks that.)
#[test]
fn a_create_names_nothing_in_the_directory_but_the_whole_ring() {
    use rustix::fs::{inotify, Mode, OFlags};
    let ns = Namespace::concurrent("unnamed-build");
    // A first ring makes the directory, so that it can be watched.
    drop(Ring::create(ns.name(), "first", &cfg()).expect("create first"));
    let unnamed = std::path::Path::new("/proc/thread-self/fd").is_dir()
        && rustix::fs::open(
            ns.dir(),
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .is_ok();
    let watch = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)
        .expect("inotify_init");
    inotify::add_watch(
        &watch,
        ns.dir(),
        inotify::WatchFlags::CREATE | inotify::WatchFlags::MOVED_TO,
    )
    .expect("watch the namespace directory");
    let fixed = RingConfig {
        event_size: Some(8),
        producer_mode: shmring::ProducerMode::Single,
        ..cfg()
    };
    drop(Ring::create(ns.name(), "r", &cfg()).expect("create r"));
    drop(Ring::create(ns.name(), "f", &fixed).expect("create f"));
    assert!(matches!(
        Ring::create(ns.name(), "r", &cfg()),
        Err(OpenError::AlreadyExists { .. })
    ));
    let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
    let mut events = inotify::Reader::new(&watch, &mut buf);
    let mut named = Vec::new();
    loop {
        match events.next() {
            Ok(ev) => named.push(
                ev.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => panic!("reading the watch: {e}"),
        }
    }
    let (hidden, named): (Vec<String>, Vec<String>) =
        named.into_iter().partition(|n| n.starts_with('.'));
    assert_eq!(
        named,
        ["r.ring", "f.ring"],
        "names made in the directory by the creates"
    );
    if unnamed {
        assert_eq!(hidden, Vec::<String>::new(), "names made while building");
    } else {
        eprintln!(
            "no O_TMPFILE in {}: each create built under a hidden name",
            ns.dir().display()
        );
        assert_eq!(hidden.len(), 3, "{hidden:?}");
    }
    let mut left = names_in(ns.dir());
    left.sort();
    assert_eq!(left, ["f.ring", "first.ring", "r.ring"]);
}

/// A remove that finds a name it cannot map (here a file of garbage) unlinks only that:
/// when another remover takes the garbage away and a whole ring is put at the name between
/// the failed open and the unlink, the ring is removed like any ring (marked deleted, so
/// its clients get `Deleted`) or left alone, never unlinked unmarked under its clients.
#[test]
fn removing_an_unmappable_name_never_unlinks_a_ring_that_took_its_place() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let ns = Namespace::concurrent("unmappable_race");
    let name = ns.name().to_owned();
    let target = ns.ring_path("x");
    let garbage = ns.dir().join(".garbage");
    let done = AtomicBool::new(false);
    let rounds = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !done.load(Ordering::Acquire) {
                    match Ring::remove(&name, "x") {
                        Ok(()) | Err(OpenError::NotFound { .. }) => {}
                        Err(e) => panic!("remove: {e}"),
                    }
                }
            });
        }
        let planter = s.spawn(|| {
            let result = std::panic::catch_unwind(|| {
                let mut rounds = 0u32;
                for round in 0..300 {
                    // A whole ring under a name of its own, ready to be moved into place.
                    let staged = Ring::create(&name, "staged", &cfg()).expect("stage a ring");
                    std::fs::write(&garbage, [0xa5u8; 512]).expect("write garbage");
                    if std::fs::hard_link(&garbage, &target).is_err() {
                        // The ring of the last round is still at the name: its removers
                        // have not finished; wait for them.
                        std::fs::remove_file(&garbage).expect("drop garbage");
                        Ring::remove(&name, "staged").expect("remove the staged ring");
                        std::thread::yield_now();
                        continue;
                    }
                    std::fs::remove_file(&garbage).expect("drop garbage");
                    // The removers take the garbage away; the ring takes its place at once.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while target.symlink_metadata().is_ok() {
                        assert!(Instant::now() < deadline, "the garbage was never removed");
                        std::hint::spin_loop();
                    }
                    if std::fs::hard_link(staged.path(), &target).is_err() {
                        Ring::remove(&name, "staged").expect("remove the staged ring");
                        continue;
                    }
                    std::fs::remove_file(staged.path()).expect("unname the staged ring");
                    rounds += 1;
                    // Its only name is now the ring's: it leaves that name only by a remove
                    // that marks it deleted first.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while staged.state() != Some(RingState::Deleted) {
                        assert!(
                            Instant::now() < deadline,
                            "round {round}: the ring is gone from its name ({}) but not \
                             marked deleted: {:?}",
                            target.exists(),
                            staged.state()
                        );
                        std::thread::yield_now();
                    }
                }
                rounds
            });
            done.store(true, Ordering::Release);
            result
        });
        match planter.join().expect("the planter") {
            Ok(rounds) => rounds,
            Err(p) => std::panic::resume_unwind(p),
        }
    });
    eprintln!("{rounds} rounds with a ring put in the garbage's place");
    assert!(rounds > 0, "no round put a ring in the garbage's place");
    let left = names_in(ns.dir());
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A directory at a ring's name cannot be unlinked: the remove says so and leaves it at
/// its name with what is in it, never under a hidden name nothing lists.
#[test]
fn a_directory_at_a_ring_name_is_refused_and_left_where_it_was() {
    let ns = Namespace::concurrent("dir_at_name");
    Ring::create(ns.name(), "other", &cfg()).expect("make the namespace");
    let at = ns.ring_path("d");
    std::fs::create_dir(&at).expect("a directory at the name");
    std::fs::write(at.join("inside"), b"kept").expect("a file in it");
    let e = Ring::remove(ns.name(), "d").expect_err("a directory is not removed");
    assert!(e.to_string().contains(&*at.to_string_lossy()), "{e}");
    assert_eq!(
        std::fs::read(at.join("inside")).ok().as_deref(),
        Some(&b"kept"[..])
    );
    let hidden: Vec<String> = names_in(ns.dir())
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "no hidden name left: {hidden:?}");
    std::fs::remove_dir_all(&at).expect("clean up");
    Ring::remove(ns.name(), "other").expect("remove other");
}
