//! What the example tests share: the path of a built example.

/// The example binary `name`, beside this test's own directory (`target/<profile>/deps`):
/// `cargo test` builds a package's examples next to its tests.
pub fn example(name: &str) -> std::path::PathBuf {
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
