//! The namespace directory as input: a member of the ring's group can truncate a ring file,
//! put a symbolic link or a FIFO where a ring file should be, or remove names. Whatever it
//! finds there, the client refuses what is not a whole regular ring file with an error
//! that says so, never follows a link, and never touches a page past a file's end.

use std::fs::OpenOptions;
use std::os::unix::fs::symlink;

use shmring::{ConsumerOptions, OpenError, Ring, RingConfig, RingState};

mod common;
use common::Ns;

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
    let ns = Ns::new("truncated");
    let ring = Ring::create(&ns.0, "r", &cfg()).expect("create");
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

    let e = Ring::open(&ns.0, "r").expect_err("a truncated segment is not opened");
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
    let ns = Ns::new("links");
    let other = Ns::new("links_target");
    let target = Ring::create(&other.0, "default", &cfg()).expect("create the target");
    Ring::create(&ns.0, "real", &cfg()).expect("create the namespace");

    let alias = ns.ring("alias");
    symlink(target.path(), &alias).expect("symlink");
    let e = Ring::open(&ns.0, "alias").expect_err("a symbolic link is not followed");
    assert!(e.to_string().contains("symbolic link"), "{e}");

    Ring::remove(&ns.0, "alias").expect("removing the link's name");
    assert!(alias.symlink_metadata().is_err(), "the link is gone");
    assert!(target.path().exists(), "the target is still there");
    assert_eq!(target.state(), Some(RingState::Running), "and not deleted");
    Ring::open(&other.0, "default").expect("the target opens as before");

    let pipe = ns.ring("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &pipe,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let e = Ring::open(&ns.0, "pipe").expect_err("a FIFO is not a ring");
    assert!(e.to_string().contains("FIFO"), "{e}");
}
