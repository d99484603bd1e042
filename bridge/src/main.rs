//! `shmring-bridge`: export a ring to Zenoh, or import one from it. See the crate docs.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use shmring_bridge::{export, import};

#[derive(Parser, Debug)]
#[command(
    name = "shmring-bridge",
    version,
    about = "Carry a shmring ring between hosts over Zenoh"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Consume ring R and publish its events on Zenoh key KEY (until SIGTERM or SIGINT).
    Export(export::ExportArgs),
    /// Subscribe to KEY and publish its events into ring R2 (until SIGTERM or SIGINT).
    Import(import::ImportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    shmring_bridge::init_tracing();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            say(format_args!("cannot install the signal handler: {e}"));
            return ExitCode::FAILURE;
        }
    }
    let result = match &cli.command {
        Command::Export(args) => export::run(args, &stop).map(|_| ()),
        Command::Import(args) => import::run(args, &stop).map(|_| ()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Once, on stderr (where the tracing output goes too).
            say(format_args!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}

/// One line on stderr. A stderr nobody reads any more (a closed pipe) drops it: the exit
/// code still says how the run ended.
fn say(message: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "shmring-bridge: {message}");
}
