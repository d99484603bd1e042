//! Bad input: a ring that does not exist, a truncated segment, a wrong magic, a wrong
//! layout version, a corrupt header, a capacity that is not a power of two, a payload too
//! large for the slot, a corrupt length in a published slot, garbage in every slot. Each is
//! a typed error (or, for the slot, clamped and counted), never a panic or a hang.
//!
//! Segment bytes are corrupted through the file, at offsets taken from `shmring_layout`
//! (`offset_of!` on its `#[repr(C)]` types, `Geometry::slot_offset`), never hard-coded.

use std::fs::OpenOptions;
use std::mem::offset_of;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use shmring::{
    ConsumerOptions, LayoutError, OpenError, PublishError, Ring, RingConfig, TryPublishError,
};
use shmring_layout::{Header, SlotHeader, HEADER_SIZE, LAYOUT_VERSION, MAGIC};
use shmring_testkit::payload::{decode, encode, Origin};
use shmring_testkit::Namespace;

fn small() -> RingConfig {
    RingConfig {
        capacity: 16,
        ..RingConfig::default()
    }
}

/// Create ring `name`, drop every handle (a mapping must not outlive a truncation), and
/// return its path.
fn created(ns: &Namespace, name: &str) -> std::path::PathBuf {
    let ring = Ring::create(ns.name(), name, &small()).expect("create ring");
    ring.path().to_owned()
}

fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open segment");
    f.write_all_at(bytes, offset).expect("write segment");
}

fn truncate(path: &Path, len: u64) {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open segment");
    f.set_len(len).expect("truncate segment");
}

fn open_err(ns: &Namespace, name: &str) -> OpenError {
    match Ring::open(ns.name(), name) {
        Ok(r) => panic!("opened a bad segment: {r:?}"),
        Err(e) => e,
    }
}

/// The message is there, names the file, and contains one of `hints` (what to do).
fn check_message(e: &dyn std::error::Error, path: Option<&Path>, hints: &[&str]) {
    let msg = e.to_string();
    assert!(!msg.trim().is_empty(), "empty message for {e:?}");
    if let Some(p) = path {
        assert!(
            msg.contains(&*p.to_string_lossy()),
            "{msg:?} does not name {}",
            p.display()
        );
    }
    let lower = msg.to_lowercase();
    assert!(
        hints.iter().any(|h| lower.contains(h)),
        "{msg:?} says none of {hints:?}: it does not say what to do"
    );
}

/// The layout error inside an `OpenError::Layout`, after checking the path.
fn layout_source(e: &OpenError, path: &Path) -> LayoutError {
    match e {
        OpenError::Layout { path: p, source } => {
            assert_eq!(p, path);
            source.clone()
        }
        other => panic!("expected OpenError::Layout, got {other:?}"),
    }
}

/// What a user can do about an unusable segment.
const FIX_SEGMENT: &[&str] = &["remove", "recreate", "create", "upgrade", "restart"];

#[test]
fn opening_a_ring_that_does_not_exist_is_not_found() {
    let ns = Namespace::new("bad_not_found");
    let e = open_err(&ns, "nope");
    assert!(
        matches!(&e, OpenError::NotFound { namespace, name, .. }
            if namespace == ns.name() && name == "nope"),
        "{e:?}"
    );
    check_message(&e, None, &["create it"]);
    assert!(e.to_string().contains("nope"));
    // Nothing was created by looking.
    assert!(ns.segments().is_empty());
}

#[test]
fn a_truncated_segment_is_a_layout_error() {
    let ns = Namespace::new("bad_truncated");
    let path = created(&ns, "short");
    truncate(&path, 100);
    let e = open_err(&ns, "short");
    assert_eq!(
        layout_source(&e, &path),
        LayoutError::TooShortForHeader { len: 100 }
    );
    assert!(!e.to_string().is_empty());

    let path = created(&ns, "short2");
    truncate(&path, HEADER_SIZE as u64 + 1);
    let e = open_err(&ns, "short2");
    assert!(
        matches!(
            layout_source(&e, &path),
            LayoutError::SizeMismatch { actual, .. } if actual == HEADER_SIZE as u64 + 1
        ),
        "{e:?}"
    );
    assert!(!e.to_string().is_empty());
    // Removing what cannot be opened works: the way out the messages point to.
    Ring::remove(ns.name(), "short").expect("remove a truncated segment");
    Ring::remove(ns.name(), "short2").expect("remove a truncated segment");
    assert!(ns.segments().is_empty());
}

#[test]
fn a_wrong_magic_is_a_layout_error() {
    let ns = Namespace::new("bad_magic");
    let path = created(&ns, "m");
    let magic = offset_of!(Header, magic) as u64;
    write_at(&path, magic, &(MAGIC ^ 0xff).to_ne_bytes());
    let e = open_err(&ns, "m");
    assert_eq!(
        layout_source(&e, &path),
        LayoutError::BadMagic {
            found: MAGIC ^ 0xff
        }
    );
    assert!(!e.to_string().is_empty());

    // A zero magic: a creator that died half-way. Its message says what to do.
    write_at(&path, magic, &0u64.to_ne_bytes());
    let e = open_err(&ns, "m");
    assert_eq!(layout_source(&e, &path), LayoutError::NotInitialised);
    check_message(&e, Some(&path), FIX_SEGMENT);
}

#[test]
fn a_wrong_layout_version_is_a_layout_error() {
    let ns = Namespace::new("bad_version");
    let path = created(&ns, "v");
    // The ring's file with its version word set to `v`, opened.
    let opened_at = |v: u32| {
        write_at(&path, offset_of!(Header, version) as u64, &v.to_ne_bytes());
        open_err(&ns, "v")
    };
    let found = LAYOUT_VERSION + 1;
    let e = opened_at(found);
    assert_eq!(
        layout_source(&e, &path),
        LayoutError::WrongVersion { found }
    );
    check_message(&e, Some(&path), &["newer", "upgrade"]);
    assert!(e.to_string().contains(&found.to_string()));
    // A segment of an older layout (a ring made before an upgrade): the advice is to make
    // it again, not to upgrade a client that is already the newer one.
    let older = LAYOUT_VERSION - 1;
    let e = opened_at(older);
    assert_eq!(
        layout_source(&e, &path),
        LayoutError::WrongVersion { found: older }
    );
    check_message(&e, Some(&path), &["older", "remove", "create it again"]);
    assert!(!e.to_string().contains("upgrade"), "{e}");
}

#[test]
fn a_corrupt_header_field_fails_its_checksum() {
    let ns = Namespace::new("bad_checksum");
    let path = created(&ns, "c");
    // Another power of two: plausible on its own, caught only by the checksum.
    write_at(
        &path,
        offset_of!(Header, capacity) as u64,
        &32u64.to_ne_bytes(),
    );
    let e = open_err(&ns, "c");
    assert_eq!(layout_source(&e, &path), LayoutError::BadChecksum);
    assert!(!e.to_string().is_empty());
}

#[test]
fn a_capacity_that_is_not_a_power_of_two_is_a_config_error() {
    let ns = Namespace::new("bad_capacity");
    for capacity in [12, 0, 1, 3] {
        let config = RingConfig {
            capacity,
            ..RingConfig::default()
        };
        let e = Ring::create(ns.name(), "r", &config).unwrap_err();
        assert!(
            matches!(e, OpenError::Config(LayoutError::BadCapacity(c)) if c == capacity),
            "{e:?}"
        );
        check_message(&e, None, &["power of two"]);
        let e = Ring::open_or_create(ns.name(), "r", &config).unwrap_err();
        assert!(matches!(e, OpenError::Config(_)), "{e:?}");
    }
    let config = RingConfig {
        slot_size: 100,
        ..RingConfig::default()
    };
    let e = Ring::create(ns.name(), "r", &config).unwrap_err();
    assert!(
        matches!(e, OpenError::Config(LayoutError::BadSlotSize(100))),
        "{e:?}"
    );
    check_message(&e, None, &["multiple of 64"]);
    assert!(ns.segments().is_empty(), "a refused config left a segment");
}

/// The hidden names in the namespace directory: files a create or a remove made for itself.
fn tmp_files(ns: &Namespace) -> Vec<String> {
    std::fs::read_dir(ns.dir()).map_or(Vec::new(), |d| {
        d.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect()
    })
}

/// A create that fails after it built its segment (the ring exists already, so giving it
/// the name is refused) leaves no file of its own behind. (A refused
/// configuration fails before any file is made; the out-of-space path is checked in
/// `client/tests/shm_full.rs`.)
#[test]
fn a_create_refused_after_building_leaves_no_temporary_file() {
    let ns = Namespace::new("bad_exists");
    let ring = Ring::create(ns.name(), "r", &small()).expect("create ring");
    for _ in 0..3 {
        let e = Ring::create(ns.name(), "r", &small()).unwrap_err();
        assert!(matches!(e, OpenError::AlreadyExists { .. }), "{e:?}");
        assert_eq!(tmp_files(&ns), Vec::<String>::new());
    }
    assert_eq!(ns.segments().len(), 1);
    drop(ring);
}

#[test]
fn a_payload_too_large_for_the_slot_is_refused_by_every_form() {
    let ns = Namespace::new("bad_too_large");
    let ring = Ring::create(ns.name(), "r", &small()).expect("create ring");
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut p = ring.producer().unwrap();
    let max = ring.max_payload();
    assert_eq!(p.max_payload(), max);
    let big = vec![7u8; max + 1];
    let want = PublishError::TooLarge { len: max + 1, max };

    let e = p.publish(&big).unwrap_err();
    assert_eq!(e, want);
    check_message(&e, None, &["larger slot size"]);
    assert_eq!(
        p.try_publish(&big),
        Err(TryPublishError::TooLarge { len: max + 1, max })
    );
    assert_eq!(
        p.publish_timeout(&big, Duration::from_millis(1)),
        Err(TryPublishError::TooLarge { len: max + 1, max })
    );
    check_message(
        &p.try_publish(&big).unwrap_err(),
        None,
        &["larger slot size"],
    );
    assert_eq!(p.publish_batch(&[vec![1u8; 8], big.clone()]), Err(want));
    {
        let mut claim = p.claim().unwrap();
        assert_eq!(claim.write(&big), Err(want));
        assert_eq!(claim.set_len(max + 1), Err(want));
        claim
            .write(&encode(
                Origin {
                    producer: 0,
                    seq: 0,
                },
                max,
            ))
            .unwrap();
        claim.commit();
    }
    assert_eq!(ring.head(), 1, "a refused payload took a sequence");
    assert_eq!(p.stats().published, 1);
    assert!(p.stats().refused >= 5);
    // Exactly a full slot is fine.
    let mut got = Vec::new();
    c.poll_once(|e| got.push(decode(e.bytes()).unwrap()))
        .unwrap();
    assert_eq!(
        got,
        vec![Origin {
            producer: 0,
            seq: 0
        }]
    );
}

/// Write a huge length into a published slot's header; `required` picks the consumer kind
/// (in place, or the optional seqlock copy).
fn corrupt_len_is_clamped(test: &str, required: bool) {
    let ns = Namespace::new(test);
    let ring = Ring::create(ns.name(), "r", &small()).expect("create ring");
    let opts = if required {
        ConsumerOptions::durable("reader")
    } else {
        ConsumerOptions::durable("reader").optional()
    };
    let mut c = ring.consumer(opts).unwrap();
    let mut p = ring.producer().unwrap();
    let ev = |seq| encode(Origin { producer: 0, seq }, 8);
    for s in 0..3 {
        p.publish(&ev(s)).unwrap();
    }
    let geo = *ring.geometry();
    let len_at = geo.slot_offset(1) + offset_of!(SlotHeader, len) as u64;
    write_at(ring.path(), len_at, &u32::MAX.to_ne_bytes());

    let mut lens = Vec::new();
    let n = c.poll_once(|e| lens.push(e.bytes().len())).unwrap();
    assert_eq!(n, 3);
    assert_eq!(
        lens,
        vec![8, geo.max_payload(), 8],
        "the length was not clamped"
    );
    assert_eq!(c.stats().clamped, 1);
    assert_eq!(c.stats().delivered, 3);
    let info = ring.info();
    assert_eq!(info.consumers[0].stats.clamped, 1);
    // The ring carries on.
    p.publish(&ev(3)).unwrap();
    let mut got = Vec::new();
    c.poll_once(|e| got.push(decode(e.bytes()).unwrap().seq))
        .unwrap();
    assert_eq!(got, vec![3]);
    assert_eq!(c.stats().clamped, 1);
}

#[test]
fn a_corrupt_slot_length_is_clamped_and_counted_by_a_required_consumer() {
    corrupt_len_is_clamped("bad_len_required", true);
}

#[test]
fn a_corrupt_slot_length_is_clamped_and_counted_by_an_optional_consumer() {
    corrupt_len_is_clamped("bad_len_optional", false);
}

/// Garbage in every slot (stamps, lengths, flags, payloads) of a ring nobody has published
/// to: consumers neither panic nor deliver it, and publishing over it works.
#[test]
fn garbage_in_every_slot_is_neither_a_panic_nor_an_event() {
    let ns = Namespace::new("bad_garbage_slots");
    let ring = Ring::create(ns.name(), "r", &small()).expect("create ring");
    let geo = *ring.geometry();
    let mut c = ring.consumer(ConsumerOptions::anonymous()).unwrap();
    let mut o = ring
        .consumer(ConsumerOptions::anonymous().optional())
        .unwrap();
    let garbage = vec![0xa5u8; (geo.total_size - geo.slots_offset) as usize];
    write_at(ring.path(), geo.slots_offset, &garbage);
    for consumer in [&mut c, &mut o] {
        let _ = consumer.has_pending();
        let n = consumer
            .poll_once(|e| panic!("garbage delivered: {e:?}"))
            .expect("poll");
        assert_eq!(n, 0);
    }
    let mut p = ring.producer().unwrap();
    for s in 0..3 {
        p.try_publish(&encode(
            Origin {
                producer: 0,
                seq: s,
            },
            8,
        ))
        .expect("publish over garbage");
    }
    for consumer in [&mut c, &mut o] {
        let mut got = Vec::new();
        consumer
            .poll_once(|e| got.push(decode(e.bytes()).unwrap().seq))
            .expect("poll");
        assert_eq!(got, vec![0, 1, 2]);
        assert_eq!(consumer.next_sequence(), 3);
    }
    let _ = ring.info();
}

/// Every layout error a user can meet should say what to do about it, as the style guide
/// asks ("An error says what to do").
#[test]
fn every_segment_error_says_what_to_do() {
    let ns = Namespace::new("bad_messages");
    let mut errors = Vec::new();
    let path = created(&ns, "a");
    truncate(&path, 100);
    errors.push((open_err(&ns, "a"), path));
    let path = created(&ns, "b");
    truncate(&path, HEADER_SIZE as u64 + 1);
    errors.push((open_err(&ns, "b"), path));
    let path = created(&ns, "c");
    write_at(&path, offset_of!(Header, magic) as u64, &1u64.to_ne_bytes());
    errors.push((open_err(&ns, "c"), path));
    let path = created(&ns, "d");
    write_at(
        &path,
        offset_of!(Header, capacity) as u64,
        &32u64.to_ne_bytes(),
    );
    errors.push((open_err(&ns, "d"), path));
    let mut silent = Vec::new();
    for (e, path) in &errors {
        let lower = e.to_string().to_lowercase();
        if !FIX_SEGMENT.iter().any(|h| lower.contains(h)) {
            silent.push(e.to_string());
        }
        assert!(e.to_string().contains(&*path.to_string_lossy()));
    }
    assert!(
        silent.is_empty(),
        "messages that do not say what to do: {silent:#?}"
    );
}
