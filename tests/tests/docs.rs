//! `docs/FAILURE_MODES.md` names the test behind each statement it makes. Every test it
//! names must exist, and every test file it names too: a test renamed or removed fails here
//! instead of leaving the document pointing at nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// The test files of the workspace: their file names and the names of their functions.
fn test_files() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut files, mut fns) = (BTreeSet::new(), BTreeSet::new());
    for dir in [
        "client/tests",
        "tests/tests",
        "broker/tests",
        "shm-layout/tests",
    ] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
            panic!("no directory {dir}");
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".rs") {
                continue;
            }
            let text = std::fs::read_to_string(e.path()).expect("a test file");
            files.insert(name);
            for piece in text.split("fn ").skip(1) {
                let ident: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                fns.insert(ident);
            }
        }
    }
    (files, fns)
}

#[test]
fn every_test_and_test_file_named_in_failure_modes_exists() {
    let doc = std::fs::read_to_string(root().join("docs/FAILURE_MODES.md")).expect("the doc");
    let (files, fns) = test_files();
    let spans: Vec<&str> = doc.split('`').skip(1).step_by(2).collect();
    let mut named = 0;
    let mut missing = Vec::new();
    for span in spans {
        let span = span.strip_prefix("as_root::").unwrap_or(span);
        let is_ident = span
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        // A test name: a sentence in snake case (the field and option names the document
        // also quotes have at most two underscores).
        if is_ident && span.matches('_').count() >= 3 {
            named += 1;
            if !fns.contains(span) {
                missing.push(span.to_owned());
            }
        }
        if let Some(file) = span.rsplit('/').next().filter(|f| f.ends_with(".rs")) {
            let in_tests = [
                "client/tests/",
                "tests/tests/",
                "broker/tests/",
                "shm-layout/tests/",
            ]
            .iter()
            .any(|d| span.starts_with(d))
                || !span.contains('/');
            if in_tests && !files.contains(file) && !root().join(span).exists() {
                missing.push(span.to_owned());
            }
        }
    }
    println!("FAILURE_MODES.md names {named} tests");
    assert!(
        named >= 40,
        "only {named} test names found: is the table still there?"
    );
    assert!(
        missing.is_empty(),
        "named in FAILURE_MODES.md but not found: {missing:?}"
    );
}
