//! What the packaging promises: `Type=notify` readiness (READY=1 once the rings exist and
//! the socket listens, RELOADING=1 on SIGHUP), and a unit file that `systemd-analyze
//! verify` accepts where systemd is installed.

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::Command;

use common::{BrokerNs, Namespace, BIN};
use rustix::process::Signal;

#[test]
fn role() {
    common::roles::run_if_child();
}

/// The next datagram on `sock`, as text.
fn next(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .expect("a notification within the deadline");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn the_broker_notifies_systemd_when_ready_and_when_reloading() {
    let ns = Namespace::new("notify");
    let path = ns.scratch().join("notify");
    let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
    sock.set_read_timeout(Some(common::WAIT)).expect("timeout");
    let config = ns.config("[rings.n]\ncapacity = 64\n");
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--namespace", ns.name(), "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &path);
    let mut broker = ns.spawn("broker", cmd);
    let ready = next(&sock);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(
        ready.contains(&format!("MAINPID={}", broker.pid())),
        "{ready:?}"
    );
    // Ready means ready: the ring and the socket are there.
    assert!(ns.dir().join("n.ring").exists() && ns.dir().join("broker.sock").exists());

    broker.signal(Signal::HUP);
    let reloading = next(&sock);
    assert!(
        reloading.lines().any(|l| l == "RELOADING=1"),
        "{reloading:?}"
    );
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading:?}");
    assert!(next(&sock).lines().any(|l| l == "READY=1"));

    broker.signal(Signal::TERM);
    assert!(next(&sock).lines().any(|l| l == "STOPPING=1"));
}

#[test]
fn the_unit_file_passes_systemd_analyze_verify() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(version.status.success());
    let unit = include_str!("../../dist/shmring-broker@.service");
    assert!(unit.contains("Type=notify") && unit.contains("ExecReload="));
    // Restarted for as long as it takes: never failed for good by the start limit.
    assert!(unit.contains("\nRestart=always\n") && unit.contains("\nStartLimitIntervalSec=0\n"));
    // Verified as installed, with ExecStart pointing at the binary just built.
    let ns = Namespace::concurrent("unit");
    let file = ns.scratch().join("shmring-broker@verify.service");
    std::fs::write(&file, unit.replace("/usr/bin/shmring-broker", BIN)).expect("unit");
    let out = shmring_testkit::output(
        "systemd-analyze",
        Command::new("systemd-analyze").arg("verify").arg(&file),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.trim().is_empty(), "{err}");
}
