//! shmring-bridge: carries a ring between hosts over Zenoh.
//!
//! `export` is a consumer on a source ring that publishes its events, in batches, on a
//! Zenoh key; `import` subscribes to that key and publishes the events into a local ring in
//! the source's order. In the default, reliable mode an event published once into the
//! source lands exactly once in the destination, across crashes of either side: the
//! exporter commits its ring position only up to what the importer confirmed (the source
//! ring is the replay buffer), and the importer drops what it already has by source and
//! sequence. In DROP mode the exporter is an optional consumer, Zenoh drops under
//! congestion, and both sides count the gaps.
//!
//! Modules, one concept each: `wire` (the two Zenoh messages), `header` (the 32 bytes in
//! front of each imported event: source identity, run, sequence), `link` (the Zenoh
//! session and keys), `export`, `import`, and `track` (the importer's per-source
//! bookkeeping: duplicates, gaps, resends). See docs/SCALE_OUT.md for the topologies and
//! guarantees.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod export;
pub mod header;
pub mod import;
pub mod link;
pub mod track;
pub mod wire;

pub use header::{Bridged, SourceHeader};
pub use wire::Mode;

/// Install the tracing subscriber (stderr; `RUST_LOG` overrides, default info for the
/// bridge and warnings for Zenoh).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,zenoh=warn"));
    // A log line that cannot be written (stderr's reader gone) is dropped: the layer's
    // default reports it with `eprintln!` to the same stderr, which panics on a closed pipe.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false)
        .with_writer(std::io::stderr)
        .try_init();
}
