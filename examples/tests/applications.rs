//! The two applications the ring was built for, run as a user runs them: the built example
//! binaries, each parent spawning its own child processes, in a namespace of this test's own.
//! The examples check their own counts and exit 1 on any mismatch; these tests check the exit
//! and the counts the examples print.

use shmring_testkit::Namespace;

mod common;
use common::example;

/// Run example `name` with `args` in `ns` and return its stdout lines (fails the test on a
/// non-zero exit or after the kit's bounded wait).
fn run(ns: &Namespace, name: &str, args: &[&str]) -> Vec<String> {
    let mut cmd = std::process::Command::new(example(name));
    cmd.args(args).env(shmring::names::NAMESPACE_ENV, ns.name());
    ns.spawn(name, cmd).wait_ok()
}

/// The `key=value` numbers of every line that has `key`.
fn values(lines: &[String], key: &str) -> Vec<u64> {
    lines
        .iter()
        .flat_map(|l| l.split_whitespace())
        .filter_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{key}={v}: {e}")))
        .collect()
}

#[test]
fn the_async_logger_writes_every_accepted_line_in_block_mode() {
    let ns = Namespace::new("ex_logger_block");
    let out = run(&ns, "async_logger", &["block", "20000"]);
    let accepted = values(&out, "accepted");
    assert_eq!(accepted, vec![20_000; 3], "every line accepted: {out:#?}");
    assert_eq!(values(&out, "dropped"), vec![0; 3], "{out:#?}");
    // One unformattable line per application, each dead-lettered once by the writer.
    assert_eq!(values(&out, "dead_lettered"), vec![3], "{out:#?}");
    assert_eq!(values(&out, "written"), vec![60_000 - 3], "{out:#?}");
    assert!(out.iter().any(|l| l.starts_with("ok:")), "{out:#?}");
    assert!(ns.segments().is_empty(), "the example removed its ring");
}

#[test]
fn the_async_logger_counts_what_it_drops_in_drop_mode() {
    let ns = Namespace::new("ex_logger_drop");
    let out = run(&ns, "async_logger", &["drop", "50000"]);
    let accepted: u64 = values(&out, "accepted").iter().sum();
    let dropped: u64 = values(&out, "dropped").iter().sum();
    let bad: u64 = values(&out, "bad").iter().sum();
    // Every line is either accepted or counted as dropped by its application ...
    assert_eq!(accepted + dropped, 150_000, "{out:#?}");
    // ... and every accepted line is written or dead-lettered (the example checks the file).
    assert_eq!(
        values(&out, "written")[0] + values(&out, "dead_lettered")[0],
        accepted,
        "{out:#?}"
    );
    assert_eq!(values(&out, "dead_lettered"), vec![bad], "{out:#?}");
    assert!(out.iter().any(|l| l.starts_with("ok:")), "{out:#?}");
}
#[test]
fn the_order_pipeline_delivers_every_order_through_every_stage() {
    let ns = Namespace::new("ex_pipeline");
    let per_gateway = 5_000u64;
    let out = run(&ns, "order_pipeline", &[&per_gateway.to_string()]);
    let total = 2 * per_gateway;
    let stage = |name: &str| {
        out.iter()
            .find(|l| l.starts_with(&format!("stage={name} ")))
            .unwrap_or_else(|| panic!("no report of {name}: {out:#?}"))
            .clone()
    };
    assert_eq!(values(&[stage("journal")], "events"), vec![total]);
    assert_eq!(values(&[stage("risk")], "events"), vec![total]);
    // The poison order is skipped exactly once; the rest are matched.
    assert_eq!(values(&[stage("matching")], "events"), vec![total - 1]);
    assert_eq!(values(&[stage("matching")], "dead_lettered"), vec![1]);
    let notifiers: Vec<String> = (0..2).map(|i| stage(&format!("notifier-{i}"))).collect();
    let shared: u64 = values(&notifiers, "events").iter().sum();
    assert_eq!(
        shared,
        total - 1,
        "each fill to exactly one notifier: {out:#?}"
    );
    assert_eq!(values(&notifiers, "redelivered"), vec![0, 0]);
    assert!(out.iter().any(|l| l.starts_with("ok:")), "{out:#?}");
    assert!(ns.segments().is_empty(), "the example removed its rings");
}

/// The async logger's writer makes its log file afresh and never opens a name that is
/// taken: a symbolic link planted at the path (in a shared temporary directory, by another
/// user) makes it fail with an error that names the path, and the file the link points to
/// is left as it was, not truncated. The ring is drained first, so a writer that did take
/// the link would find the ring closed and exit.
#[test]
fn the_async_logger_writer_refuses_a_link_at_its_log_path() {
    use std::os::unix::fs::symlink;
    let ns = Namespace::new("ex_logger_link");
    let ring = shmring::Ring::create(ns.name(), "log", &shmring::RingConfig::default())
        .expect("create the ring");
    ring.drain(std::time::Duration::ZERO).expect("drain");
    let target = ns.scratch().join("precious");
    std::fs::write(&target, "keep me\n").expect("write the target");
    let link = ns.scratch().join("async-logger.log");
    symlink(&target, &link).expect("plant the link");

    let mut cmd = std::process::Command::new(example("async_logger"));
    cmd.arg("writer").arg(ns.name()).arg("log").arg(&link);
    let mut writer = ns.spawn("writer", cmd);
    let status = writer.wait_status();
    let err = writer.stderr();
    assert!(!status.success(), "the writer took the link: {err}");
    assert!(
        err.contains(&link.display().to_string()) && err.contains("exists"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).expect("read the target"),
        "keep me\n"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("the link")
            .file_type()
            .is_symlink(),
        "the link was replaced"
    );
}
