//! The truncation guard (feature `truncation-guard`): a process that installed it survives
//! a ring file truncated under its mapping, and learns of it from the ring's errors; a
//! SIGBUS anywhere else still kills it.
//!
//! Each case runs in a child process of this test binary (a role), so that a guard that
//! fails kills the child, not the test run.

use std::fs::OpenOptions;
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use shmring::{ConsumerOptions, Ring, RingConfig};
use shmring_testkit::{role, Child, Namespace};

/// The child's environment: the ring's name, or the file to map.
const TARGET_ENV: &str = "GUARD_TARGET";

/// A SIGBUS handler that dies of the signal: the default disposition, and the signal again.
extern "C" fn reraise(_sig: libc::c_int) {
    // SAFETY: both are async-signal-safe.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
        libc::raise(libc::SIGBUS);
    }
}

/// Wait for `child` to end, and fail unless SIGBUS (signal 7) killed it.
fn killed_by_sigbus(child: &mut Child) {
    let status = child.wait_status();
    assert_eq!(
        status.signal(),
        Some(7),
        "the child was not killed by SIGBUS: {status}"
    );
}

/// The next line on stdin (the parent's go-ahead).
fn wait_for_parent() {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}

#[test]
#[ignore = "the child-process role: run by the other tests of this file"]
fn role() {
    let Some(role) = role::current() else {
        return;
    };
    let target = std::env::var(TARGET_ENV).unwrap_or_default();
    if role == "reraiser" {
        // A handler before the guard that dies of a sent SIGBUS by raising it again under
        // the default disposition, as crash reporters do.
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int) = reraise;
            action.sa_sigaction = handler as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    }
    if role == "sent" {
        // The default disposition before the guard, as in a program whose runtime put no
        // handler of its own there.
        // SAFETY: setting a signal's disposition to the default.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
    }
    if let Err(e) = shmring::install_truncation_guard() {
        println!("@error {e}");
        std::process::exit(1);
    }
    match role.as_str() {
        "drainer" => drainer(&target),
        "outsider" => outsider(&target),
        "sent" | "reraiser" => {
            // SAFETY: raising a signal has no memory effects of its own.
            unsafe { libc::raise(libc::SIGBUS) };
            println!("@survived");
        }
        other => println!("@error unknown role {other}"),
    }
    std::process::exit(0);
}

/// Drain the ring (whose declared consumer never reads), say when the drain waits, and
/// report what the drain, `check_file` and an attach say once the parent has truncated
/// the file; then `check_file` again after the parent has grown it back.
fn drainer(ring: &str) {
    let ns = std::env::var(shmring::names::NAMESPACE_ENV).unwrap_or_default();
    let ring = match Ring::open(&ns, ring) {
        Ok(r) => r,
        Err(e) => {
            println!("@error open: {e}");
            return;
        }
    };
    // A SIGBUS that is no fault (raised, as another process would send it) goes to the
    // handler from before the guard (the standard library's, which takes it by resetting
    // the disposition to the default): the guard must still be there afterwards.
    // SAFETY: raising a signal has no memory effects of its own.
    unsafe { libc::raise(libc::SIGBUS) };
    let mut told = false;
    let drained = ring.drain_while(Duration::from_secs(60), || {
        if !told {
            told = true;
            println!("@draining");
        }
        true
    });
    println!("@drain {drained:?}");
    match ring.check_file() {
        Ok(()) => println!("@check ok"),
        Err(e) => println!("@check {e}"),
    }
    match ring.producer() {
        Ok(_) => println!("@attach ok"),
        Err(e) => println!("@attach {e}"),
    }
    match ring.consumer(ConsumerOptions::anonymous()) {
        Ok(_) => println!("@consumer ok"),
        Err(e) => println!("@consumer {e}"),
    }
    wait_for_parent();
    match ring.check_file() {
        Ok(()) => println!("@regrown ok"),
        Err(e) => println!("@regrown {e}"),
    }
    // On the zeros the lifecycle word reads 0, which a start and a stop refuse as corrupt;
    // the sweep mark is written whatever it reads. Both on the first page, which the
    // truncation left in the file: nothing may land there.
    let started = ring.start();
    let stopped = ring.stop();
    ring.mark_sweep(0x5eed_5eed_5eed_5eed);
    println!("@wrote {started:?} {stopped:?}");
}

/// With a ring open (its mapping recorded by the guard), map a file that is no ring, wait
/// for the parent to truncate it, and touch it.
fn outsider(path: &str) {
    let ns = std::env::var(shmring::names::NAMESPACE_ENV).unwrap_or_default();
    let _ring = match Ring::open(&ns, "r") {
        Ok(r) => r,
        Err(e) => {
            println!("@error open: {e}");
            return;
        }
    };
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) => {
            println!("@error open {path}: {e}");
            return;
        }
    };
    // SAFETY: the file is this test's own, and the fault its truncation causes is the point.
    let map = match unsafe { memmap2::MmapMut::map_mut(&file) } {
        Ok(m) => m,
        Err(e) => {
            println!("@error map {path}: {e}");
            return;
        }
    };
    println!("@mapped");
    wait_for_parent();
    let last = map.len() - 1;
    // Volatile: the read must happen.
    // SAFETY: inside the mapping; what backs it is gone, which raises SIGBUS.
    let byte = unsafe { std::ptr::read_volatile(map.as_ptr().add(last)) };
    println!("@survived {byte}");
}

/// A drain in a process with the guard, its ring file truncated under it to one page: the
/// drain's next look at the consumer table runs past that page and faults. The drain ends
/// with `LifecycleError::Truncated` (not `Ok`: the zeros it now reads show every consumer
/// caught up), `check_file` and attaches refuse the ring, and the process lives. The
/// whole mapping is zeros, the page that stayed in the file included: with the file grown
/// back, `check_file` still refuses, and writes to it change nothing in the file. Before
/// the drain, the process raised a SIGBUS that is no fault, which must not have taken the
/// guard away.
#[test]
fn a_drain_in_a_guarded_process_ends_with_an_error_when_the_file_is_truncated() {
    let ns = Namespace::new("guard_drain");
    let config = RingConfig {
        capacity: 64,
        declared: vec!["audit".to_owned()],
        ..RingConfig::default()
    };
    let size = {
        let ring = Ring::create(ns.name(), "r", &config).expect("create");
        let mut p = ring.producer().expect("producer");
        for i in 0u64..3 {
            p.publish(&i.to_ne_bytes()).expect("publish");
        }
        ring.geometry().total_size
        // This process unmaps the ring here: it must not touch it after the truncation.
    };
    let path = ns.ring_path("r");
    let mut child = ns.role("drainer", &[(TARGET_ENV, "r".to_owned())]);
    child.expect("@draining");
    let file = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open for truncation");
    file.set_len(4096).expect("truncate");

    let drained = child.expect("@drain");
    assert!(
        drained.starts_with("Err(Truncated"),
        "the drain should end with Truncated: {drained}"
    );
    let check = child.expect("@check");
    assert!(
        check.contains("truncated") && check.contains(&size.to_string()),
        "{check}"
    );
    for what in ["@attach", "@consumer"] {
        let attach = child.expect(what);
        assert!(
            attach.contains("truncated") && attach.contains("zeros"),
            "{what}: {attach}"
        );
    }
    let first_page = std::fs::read(&path).expect("read the page left");
    assert_eq!(first_page.len(), 4096);
    file.set_len(size).expect("grow back");
    child.send_line("go");
    let regrown = child.expect("@regrown");
    assert!(
        regrown.contains("while this process had it mapped"),
        "{regrown}"
    );
    let wrote = child.expect("@wrote");
    assert_eq!(
        wrote, "Err(CorruptState(0)) Err(CorruptState(0))",
        "the first page should read as zeros"
    );
    let status = child.wait_status();
    assert_eq!(status.code(), Some(0), "the guarded child died: {status}");
    let bytes = std::fs::read(&path).expect("read the file");
    assert_eq!(bytes.len() as u64, size);
    assert!(
        bytes[..4096] == first_page[..],
        "the child's writes reached the page left in the file"
    );
    assert!(
        bytes[4096..].iter().all(|&b| b == 0),
        "the child wrote to the file past the page left"
    );
}

/// The guard takes only faults in ring mappings: a file of the process's own, mapped
/// without this crate and truncated, still kills it with SIGBUS (signal 7), though the
/// process has a ring open too.
#[test]
fn a_fault_outside_every_ring_mapping_still_kills() {
    let ns = Namespace::new("guard_outsider");
    let _ring = Ring::create(
        ns.name(),
        "r",
        &RingConfig {
            capacity: 64,
            ..RingConfig::default()
        },
    )
    .expect("create");
    let path = ns.scratch().join("not-a-ring");
    std::fs::write(&path, vec![1u8; 3 * 4096]).expect("write the file");
    let mut child = ns.role(
        "outsider",
        &[(TARGET_ENV, path.to_string_lossy().into_owned())],
    );
    child.expect("@mapped");
    OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open for truncation")
        .set_len(4096)
        .expect("truncate");
    child.send_line("go");
    killed_by_sigbus(&mut child);
}

/// A SIGBUS sent to a guarded process whose disposition was the default before the guard
/// kills it, as it would without the guard: the guard takes faults in ring mappings, not
/// signals.
#[test]
fn a_sent_sigbus_still_kills_where_the_default_did() {
    let ns = Namespace::new("guard_sent");
    killed_by_sigbus(&mut ns.role("sent", &[]));
}

/// A handler from before the guard that dies of a sent SIGBUS by raising it again gets
/// its way: the guard does not put itself back over the default that handler set.
#[test]
fn a_handler_before_the_guard_that_raises_again_dies_of_a_sent_sigbus() {
    let ns = Namespace::new("guard_reraiser");
    killed_by_sigbus(&mut ns.role("reraiser", &[]));
}
