//! `shmring-broker` (`broker` for short in the docs): the shmring broker and its command
//! line.
//!
//! `broker run` creates the configured rings, adopts every segment already in the
//! namespace, sweeps their health and serves the control socket. The other commands talk
//! to it (`create`, `stop`, `start`, `drain`, `delete`, `release`, `unsubscribe`,
//! `status`), or, for `status` when it is down, read the segments directly. Exit codes are
//! in `exit`. See broker/README.md.

#![warn(missing_docs)]

mod client;
mod config;
mod demo;
mod exit;
mod file_kind;
mod group;
mod human;
mod lifecycle;
mod names;
mod offline;
mod protocol;
mod render;
mod report;
mod run;
mod status;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use protocol::Request;

/// Printed under `--help`: what scripts may rely on.
const AFTER_HELP: &str = "\
Exit codes: 0 done (status: all healthy), 1 refused or failed (status: something unhealthy \
or blocked), 2 no broker reachable, 64 usage error. A closed stdout ends a command quietly.

Signals (broker run): SIGTERM or SIGINT stop the broker (rings stay, the socket is removed); \
SIGHUP reloads the --config file (new rings, thresholds, policies; a bad file is logged \
and the running config kept).";

#[derive(Parser, Debug)]
#[command(
    name = "shmring-broker",
    version,
    about = "The shmring broker: ring lifecycle, health sweeps and status",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Namespace: the directory /dev/shm/shmring.NAMESPACE holding its rings.
    #[arg(long, global = true, env = shmring::names::NAMESPACE_ENV, default_value = "default")]
    namespace: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the broker (until SIGTERM or SIGINT; rings stay when it exits; SIGHUP reloads).
    Run {
        /// TOML config (default: the embedded one, `broker config --print-default`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Serve Prometheus metrics at http://ADDR:PORT/metrics (e.g. 127.0.0.1:9477).
        #[arg(long, value_name = "ADDR:PORT")]
        metrics_listen: Option<std::net::SocketAddr>,
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
        /// Print the report as JSON (a stable schema, see broker/README.md); with --watch,
        /// one document per line.
        #[arg(long)]
        json: bool,
        /// Print again every second (or every given interval: "2", "0.5", "250ms", "1m").
        #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "1",
            value_parser = human::parse_interval)]
        watch: Option<std::time::Duration>,
        /// Only this ring.
        #[arg(value_parser = names::ring_arg)]
        ring: Option<String>,
    },
    /// Create a ring (configured shape, else the defaults).
    Create {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
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
        #[arg(value_parser = names::ring_arg)]
        ring: String,
    },
    /// Start a stopped ring again (run + 1); a running ring is left as it is.
    Start {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
        ring: String,
    },
    /// Stop a ring and wait until every gating consumer consumed what was published.
    Drain {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
        ring: String,
        /// How long to wait, e.g. "10s".
        #[arg(long, default_value = "10s", value_parser = human::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Delete a ring: attached clients get a Deleted error, the segment is unlinked.
    Delete {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
        ring: String,
    },
    /// Stop a durable consumer from gating producers: they move on without it, and it
    /// resumes at the head (counting the gap as dropped) when it attaches again.
    Release {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
        ring: String,
        /// Consumer name.
        #[arg(value_parser = names::consumer_arg)]
        consumer: String,
    },
    /// Show everything in under a minute on a namespace of its own: a broker, a producer,
    /// consumers with each wait strategy (one killed and restarted), the live status, and
    /// what each consumer saw. Cleans up after itself, also on Ctrl-C.
    Demo {
        /// How long the producer publishes, e.g. "20s".
        #[arg(long, default_value = "20s", value_parser = human::parse_duration)]
        duration: std::time::Duration,
        /// Also serve the demo broker's Prometheus metrics at http://ADDR:PORT/metrics.
        #[arg(long, value_name = "ADDR:PORT")]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// Generate shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// The processes `demo` starts (not for direct use).
    #[command(hide = true)]
    DemoRole {
        #[command(subcommand)]
        role: DemoRole,
    },
    /// Forget a durable consumer that is not attached (detached, dead, failed or released):
    /// its entry is freed and it gates nothing any more.
    Unsubscribe {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
        ring: String,
        /// Consumer name.
        #[arg(value_parser = names::consumer_arg)]
        consumer: String,
    },
}

#[derive(Subcommand, Debug)]
enum DemoRole {
    /// `broker run`, tied to the demo.
    Broker {
        /// The demo's config file.
        #[arg(long)]
        config: PathBuf,
        /// Where to serve metrics.
        #[arg(long)]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// A paced producer.
    Producer {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
        ring: String,
        /// Events a second.
        rate: u32,
    },
    /// A durable consumer.
    Consumer {
        /// Ring name.
        #[arg(value_parser = names::ring_arg)]
        ring: String,
        /// Consumer name.
        #[arg(value_parser = names::consumer_arg)]
        name: String,
        /// Wait strategy, by name (`WaitStrategy`'s `FromStr`): busy-spin, blocking, ...
        wait: shmring::WaitStrategy,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors; they print to stdout and exit 0.
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => exit::fail(&e),
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let ns = cli.namespace;
    if let Err(e) = shmring::names::namespace_dir(&ns) {
        exit::err(&format!("error: {e}"));
        return Ok(ExitCode::from(exit::USAGE));
    }
    // The broker and the CLI read ring files that any member of a ring's group can
    // truncate: a page gone from under the mapping becomes zeros and an error, not SIGBUS.
    // Not the demo's producers and consumers, which are clients on the data path: there a
    // truncation kills, as it does any client's.
    let data_path = matches!(
        cli.command,
        Command::DemoRole {
            role: DemoRole::Producer { .. } | DemoRole::Consumer { .. }
        }
    );
    let guard = if data_path {
        Ok(())
    } else {
        shmring::install_truncation_guard()
    };
    if let Err(e) = guard {
        exit::err(&format!(
            "warning: no truncation guard ({e}): a ring file truncated while this process reads it kills it with SIGBUS"
        ));
    }
    let lifecycle = |req| lifecycle::run(&ns, req);
    match cli.command {
        Command::Run {
            config,
            metrics_listen,
        } => {
            run::run(run::RunOptions {
                config,
                namespace: ns.clone(),
                metrics_listen,
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
            watch,
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
            timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
        }),
        Command::Delete { ring } => lifecycle(Request::Delete { ring }),
        Command::Release { ring, consumer } => lifecycle(Request::Release { ring, consumer }),
        Command::Unsubscribe { ring, consumer } => {
            lifecycle(Request::Unsubscribe { ring, consumer })
        }
        Command::Demo {
            duration,
            metrics_listen,
        } => demo::run(demo::DemoOptions {
            duration,
            metrics_listen,
        }),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "shmring-broker", &mut out);
            let _ = exit::out(&String::from_utf8_lossy(&out));
            Ok(ExitCode::SUCCESS)
        }
        Command::DemoRole { role } => {
            match role {
                DemoRole::Broker {
                    config,
                    metrics_listen,
                } => demo::role::broker(&ns, config, metrics_listen)?,
                DemoRole::Producer { ring, rate } => demo::role::producer(&ns, &ring, rate)?,
                DemoRole::Consumer { ring, name, wait } => {
                    demo::role::consumer(&ns, &ring, &name, wait)?
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn config_command(print_default: bool, check: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    if let Some(path) = check {
        let c = config::Config::load(&path)?;
        let mut text = String::new();
        for (name, spec) in &c.rings {
            text.push_str(&format!(
                "ring {name}: capacity {}, slot size {}, stall after {:?}, dead policy {}\n",
                spec.capacity,
                spec.slot_size,
                spec.stall_threshold,
                spec.dead_policy.as_str()
            ));
        }
        text.push_str(&format!(
            "{} ring(s); sweep every {:?}\n",
            c.rings.len(),
            c.sweep_period()
        ));
        let _ = exit::out(&text);
        return Ok(ExitCode::SUCCESS);
    }
    if !print_default {
        exit::err(
            "error: say what to show: `broker config --print-default` or `broker config --check FILE`",
        );
        return Ok(ExitCode::from(exit::USAGE));
    }
    let _ = exit::out(config::DEFAULT_CONFIG);
    Ok(ExitCode::SUCCESS)
}
