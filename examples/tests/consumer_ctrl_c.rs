//! The quickstart consumer detaches on Ctrl-C: it says so, exits 0, and its durable entry is
//! left DETACHED (keeping its position for the next run), not ACTIVE under a dead pid.
//!
//! It runs the built example (`cargo test` builds a package's examples next to its tests:
//! `target/<profile>/examples/consumer`) in a namespace of its own, and interrupts it with
//! SIGINT once it has attached. Every wait is bounded.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use shmring::Ring;
use shmring_examples::{READER, RING};

/// The example binary, beside this test's own directory (`target/<profile>/deps`).
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run this test through `cargo test -p shmring-examples` (it builds the examples)",
        path.display()
    );
    path
}

/// Kills the child and removes the namespace, also when the test fails.
struct Guard {
    child: Child,
    namespace: String,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(dir) = shmring::names::namespace_dir(&self.namespace) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn the_consumer_example_detaches_on_ctrl_c() {
    let namespace = format!("ex-ctrlc-{}", std::process::id());
    let child = Command::new(example("consumer"))
        .env("SHMRING_NAMESPACE", &namespace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the consumer example");
    let mut guard = Guard { child, namespace };
    let stdout = guard.child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // It prints a line once it has attached.
    let first = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the consumer example never said it attached");
    let ring = Ring::open(&guard.namespace, RING).expect("the example created its ring");
    let entry = |ring: &Ring| {
        ring.info()
            .consumers
            .into_iter()
            .find(|c| c.name == READER)
            .unwrap_or_else(|| panic!("no consumer {READER:?} in {:#?}", ring.info()))
    };
    assert_eq!(entry(&ring).state, "ACTIVE", "attached: {first}");

    let status = Command::new("kill")
        .args(["-INT", &guard.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -INT failed");
    let mut said = vec![first];
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
        said.push(line);
    }
    let exit = guard.child.wait().expect("wait for the example");
    assert!(exit.success(), "exit {exit:?}; it said {said:#?}");
    assert!(
        said.iter()
            .any(|l| l.contains("interrupted (Ctrl-C): detaching")),
        "it did not say why it stopped: {said:#?}"
    );
    assert_eq!(
        entry(&ring).state,
        "DETACHED",
        "a durable consumer that detached keeps its position"
    );
}
