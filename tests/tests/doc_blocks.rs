//! The Rust code blocks of README.md and docs/DEPLOYMENT.md compile: `tests/build.rs` makes
//! each into code included here, so an example that drifts from the API fails this test's
//! build. The blocks use fixed namespaces ("demo", "default"), so they are compiled, not
//! run.

mod blocks {
    include!(concat!(env!("OUT_DIR"), "/doc_blocks.rs"));
}

/// Every ```rust fence of the documents made it into the build: a fence the build script
/// missed would go unchecked (and the build script refuses any other fence naming Rust).
#[test]
fn every_rust_block_of_the_user_documents_is_compiled() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let fences: usize = ["README.md", "docs/DEPLOYMENT.md"]
        .iter()
        .map(|doc| {
            let text = std::fs::read_to_string(root.join(doc)).expect("the document");
            text.lines().filter(|l| l.trim() == "```rust").count()
        })
        .sum();
    assert!(
        fences >= 9,
        "the documents' examples are gone: {fences} fences"
    );
    assert_eq!(
        blocks::BLOCKS,
        fences,
        "blocks compiled against fences written"
    );
}
