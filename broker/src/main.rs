//! `broker`: the shmring broker and its command line.
//!
//! `broker run` creates the configured rings, adopts every segment already in the
//! namespace, sweeps their health and serves the control socket. The other commands talk
//! to it (`create`, `stop`, `start`, `drain`, `delete`, `status`), or, for `status` when it
//! is down, read the segments directly. See broker/README.md.

#![warn(missing_docs)]

mod client;
mod config;
mod group;
mod human;
mod lifecycle;
mod offline;
mod protocol;
mod render;
mod report;
mod run;
mod status;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use protocol::Request;

#[derive(Parser, Debug)]
#[command(
    name = "broker",
    version,
    about = "The shmring broker: ring lifecycle, health sweeps and status"
)]
struct Cli {
    /// Namespace (default: $SHMRING_NAMESPACE, else "default").
    #[arg(long, global = true)]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the broker (until SIGTERM or SIGINT; rings stay when it exits).
    Run {
        /// TOML config (default: the embedded one, `broker config --print-default`).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Show the configuration.
    Config {
        /// Print the embedded default config.
        #[arg(long)]
        print_default: bool,
        /// Check a config file and print the rings it defines.
        #[arg(long, value_name = "FILE")]
        check: Option<PathBuf>,
    },
    /// Rings, consumers, producers and their health. Exit 0 healthy, 1 unhealthy, 2 broker down.
    Status {
        /// Print the report as JSON (a stable schema, see broker/README.md).
        #[arg(long)]
        json: bool,
        /// Redraw every second (or every given number of seconds).
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "1")]
        watch: Option<f64>,
        /// Only this ring.
        ring: Option<String>,
    },
    /// Create a ring (configured shape, else the defaults).
    Create {
        /// Ring name.
        ring: String,
        /// Slots (a power of two).
        #[arg(long)]
        capacity: Option<u64>,
        /// Bytes per slot (a multiple of 64).
        #[arg(long)]
        slot_size: Option<u32>,
    },
    /// Stop a ring: publishes are refused, what was published stays for consumers.
    Stop {
        /// Ring name.
        ring: String,
    },
    /// Start a stopped ring again (run + 1).
    Start {
        /// Ring name.
        ring: String,
    },
    /// Stop a ring and wait until every gating consumer consumed what was published.
    Drain {
        /// Ring name.
        ring: String,
        /// How long to wait, e.g. "10s".
        #[arg(long, default_value = "10s", value_parser = human::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Delete a ring: attached clients get a Deleted error, the segment is unlinked.
    Delete {
        /// Ring name.
        ring: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let ns = cli
        .namespace
        .unwrap_or_else(shmring::names::default_namespace);
    shmring::names::namespace_dir(&ns)?;
    let lifecycle = |req| lifecycle::run(&ns, req);
    match cli.command {
        Command::Run { config } => {
            run::run(run::RunOptions {
                config,
                namespace: ns.clone(),
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config {
            print_default,
            check,
        } => config_command(print_default, check),
        Command::Status { json, watch, ring } => status::run(status::StatusOptions {
            namespace: ns.clone(),
            ring,
            json,
            watch: watch.map(|s| std::time::Duration::from_secs_f64(s.clamp(0.1, 3600.0))),
        }),
        Command::Create {
            ring,
            capacity,
            slot_size,
        } => lifecycle(Request::Create {
            ring,
            capacity,
            slot_size,
        }),
        Command::Stop { ring } => lifecycle(Request::Stop { ring }),
        Command::Start { ring } => lifecycle(Request::Start { ring }),
        Command::Drain { ring, timeout } => lifecycle(Request::Drain {
            ring,
            timeout_ms: Some(timeout.as_millis() as u64),
        }),
        Command::Delete { ring } => lifecycle(Request::Delete { ring }),
    }
}

fn config_command(print_default: bool, check: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    if let Some(path) = check {
        let c = config::Config::load(&path)?;
        for (name, spec) in &c.rings {
            println!(
                "ring {name}: capacity {}, slot size {}, stall after {:?}, dead policy {}",
                spec.capacity,
                spec.slot_size,
                spec.stall_threshold,
                spec.dead_policy.as_str()
            );
        }
        println!(
            "{} ring(s); sweep every {:?}",
            c.rings.len(),
            c.sweep_period()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !print_default {
        anyhow::bail!(
            "say what to show: `broker config --print-default` or `broker config --check FILE`"
        );
    }
    print!("{}", config::DEFAULT_CONFIG);
    Ok(ExitCode::SUCCESS)
}
