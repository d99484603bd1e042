//! `ipc-bench`: shmring across real processes, beside the physical floor and the peers a
//! user would pick instead, measured in one run so that every claim is a ratio.
//!
//! ```text
//! ipc-bench <floor|latency|publish-cost|throughput|paired|wakeset|pipeline|peers|bridge|all>
//!           [--quick] [--json FILE] [--svg FILE] [--pin]
//! ```
//!
//! Every shmring row runs in separate processes: the harness re-executes itself as
//! `ipc-bench __role <role> k=v ...` (see `roles` and `shmring_peers::kit`). Tables go to
//! stdout as markdown, progress to stderr. See benches/harness/README.md.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

/// `eprintln!` that drops what a closed standard error cannot take, where `eprintln!`
/// would panic: the exit code still says how the run ended.
macro_rules! tell {
    ($($arg:tt)*) => {{
        let _ = ::std::io::Write::write_fmt(
            &mut ::std::io::stderr().lock(),
            format_args!("{}\n", format_args!($($arg)*)),
        );
    }};
}

mod bridge;
#[cfg(feature = "bridge")]
mod bridge_roles;
mod floor;
mod latency;
mod paired;
mod peers;
mod pipeline;
mod publish_cost;
mod roles;
mod row;
mod run;
mod shm;
mod spsc;
mod svg;
mod targets;
mod throughput;
mod turn;
mod wakeset;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use shmring_peers::kit::{self, Args, ROLE_ARG};

use crate::run::Ctx;

/// Suites, in the order `all` runs them.
const SUITES: [&str; 9] = [
    floor::SUITE,
    latency::SUITE,
    publish_cost::SUITE,
    throughput::SUITE,
    paired::SUITE,
    wakeset::SUITE,
    pipeline::SUITE,
    peers::SUITE,
    bridge::SUITE,
];

#[derive(Parser, Debug)]
#[command(
    name = "ipc-bench",
    about = "shmring across processes, beside the floor and its peers, as ratios",
    after_help = "Suites: floor, latency, publish-cost, throughput, paired, wakeset, pipeline, peers, bridge, all. \
                  The floor is always measured (every ratio divides by it)."
)]
struct Cli {
    /// Suite to run: floor, latency, publish-cost, throughput, paired, wakeset, pipeline, peers, bridge, or all.
    suite: String,
    /// Small sizes: every suite in well under a minute (the CI smoke test).
    #[arg(long)]
    quick: bool,
    /// Write every row (and the targets) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Draw the latency percentiles of every table to FILE (SVG).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// Pin the producer side to CPU 0 and the consumer side to CPU 1.
    #[arg(long)]
    pin: bool,
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(ROLE_ARG) {
        std::process::exit(role_main(&argv[2..]));
    }
    let cli = Cli::parse();
    let code = match bench(&cli) {
        Ok(code) => code,
        Err(e) => {
            tell!("ipc-bench: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

fn role_main(argv: &[String]) -> i32 {
    kit::die_with_parent();
    let Some(role) = argv.first() else {
        tell!("ipc-bench {ROLE_ARG}: no role");
        return 2;
    };
    let args = match Args::parse(&argv[1..]) {
        Ok(a) => a,
        Err(e) => {
            tell!("ipc-bench {ROLE_ARG} {role}: {e:#}");
            return 2;
        }
    };
    let result = roles::run_role(role, &args)
        .or_else(|| pipeline::run_role(role, &args))
        .or_else(|| bridge_role(role, &args))
        .or_else(|| shmring_peers::run_role(role, &args))
        .unwrap_or_else(|| Err(anyhow::anyhow!("unknown role")));
    match result {
        Ok(()) => 0,
        Err(e) => {
            tell!("ipc-bench {ROLE_ARG} {role}: {e:#}");
            1
        }
    }
}

#[cfg(feature = "bridge")]
fn bridge_role(role: &str, args: &Args) -> Option<Result<()>> {
    bridge_roles::run_role(role, args)
}

#[cfg(not(feature = "bridge"))]
fn bridge_role(_role: &str, _args: &Args) -> Option<Result<()>> {
    None
}

/// Write `text` and a newline to stdout, where the tables go: an error once nobody reads
/// them (`ipc-bench all | head`), so that the run ends and removes its files, where
/// `println!` would panic.
fn say(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .context("writing the tables to stdout")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn machine() -> serde_json::Value {
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_owned();
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu_model": cpu,
        "kernel": read("/proc/sys/kernel/osrelease"),
        "clocksource": read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "loadavg_start": read("/proc/loadavg"),
    })
}

fn bench(cli: &Cli) -> Result<i32> {
    let selected: Vec<&str> = if cli.suite == "all" {
        SUITES.to_vec()
    } else if let Some(s) = SUITES.iter().find(|s| **s == cli.suite) {
        vec![*s]
    } else {
        bail!(
            "unknown suite {:?}: one of {}, all",
            cli.suite,
            SUITES.join(", ")
        );
    };
    let started = Instant::now();
    let mut ctx = Ctx::new(cli.quick, cli.pin)?;
    let mut meta = machine();
    let command: Vec<String> = std::env::args().collect();
    say(&format!(
        "## ipc-bench {}\n\n- command: `{}`\n- machine: {} CPUs, {}, kernel {}, clocksource {}\n- load average at start: {}\n- sizes: {}{}",
        cli.suite,
        command.join(" "),
        meta["cpus"],
        meta["cpu_model"].as_str().unwrap_or("?"),
        meta["kernel"].as_str().unwrap_or("?"),
        meta["clocksource"].as_str().unwrap_or("?"),
        meta["loadavg_start"].as_str().unwrap_or("?"),
        if cli.quick { "--quick" } else { "default" },
        if cli.pin { ", pinned (producer side CPU 0, consumer side CPU 1)" } else { ", not pinned" },
    ))?;
    let mut total = 0;
    let with_floor = !selected.contains(&floor::SUITE);
    if with_floor {
        total += floor::rows();
    }
    for s in &selected {
        total += match *s {
            floor::SUITE => floor::rows(),
            latency::SUITE => latency::rows(),
            publish_cost::SUITE => publish_cost::rows(),
            throughput::SUITE => throughput::rows(),
            paired::SUITE => paired::rows(),
            wakeset::SUITE => wakeset::rows(),
            pipeline::SUITE => pipeline::rows(),
            bridge::SUITE => bridge::rows(),
            _ => peers::rows(),
        };
    }
    ctx.bar.set_length(total);
    if with_floor {
        floor::run(&mut ctx)?;
        let t = row::print_suite(&ctx.rows, floor::SUITE);
        ctx.bar
            .suspend(|| say(&format!("\n### floor (measured for the ratios)\n{t}")))?;
    }
    for s in &selected {
        let t0 = Instant::now();
        match *s {
            floor::SUITE => floor::run(&mut ctx)?,
            latency::SUITE => latency::run(&mut ctx)?,
            publish_cost::SUITE => publish_cost::run(&mut ctx)?,
            throughput::SUITE => throughput::run(&mut ctx)?,
            paired::SUITE => paired::run(&mut ctx)?,
            wakeset::SUITE => wakeset::run(&mut ctx)?,
            pipeline::SUITE => pipeline::run(&mut ctx)?,
            bridge::SUITE => bridge::run(&mut ctx)?,
            _ => peers::run(&mut ctx)?,
        }
        let t = row::print_suite(&ctx.rows, s);
        let took = t0.elapsed();
        ctx.bar
            .suspend(|| say(&format!("\n### {s} ({:.1} s)\n{t}", took.as_secs_f64())))?;
    }
    let targets = targets::evaluate(&ctx.rows);
    let bounds = targets::bounds(&ctx.rows);
    let goals = targets::absolute_goals(&ctx.rows) + &targets::bounds_text(&bounds);
    let elapsed = started.elapsed();
    meta["loadavg_end"] = serde_json::Value::String(read("/proc/loadavg"));
    meta["seconds"] = serde_json::json!(elapsed.as_secs_f64());
    meta["quick"] = serde_json::json!(cli.quick);
    meta["pinned"] = serde_json::json!(cli.pin);
    meta["command"] = serde_json::json!(command.join(" "));
    meta["peers_built"] = serde_json::json!(shmring_peers::built_peers());
    meta["bridge_built"] = serde_json::json!(cfg!(feature = "bridge"));
    ctx.bar.finish_and_clear();
    if !targets.is_empty() || !goals.is_empty() {
        say(&format!(
            "\n### targets and goals, as ratios measured in this run\n\n{}\n{goals}",
            targets::table(&targets)
        ))?;
    }
    say(&format!(
        "\n- took {:.1} s; load average at end: {}",
        elapsed.as_secs_f64(),
        meta["loadavg_end"].as_str().unwrap_or("?")
    ))?;
    if let Some(path) = &cli.json {
        let doc = serde_json::json!({
            "meta": meta,
            "rows": ctx.rows,
            "targets": targets,
            "bounds": bounds,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
        tell!("ipc-bench: wrote {}", path.display());
    }
    if let Some(path) = &cli.svg {
        svg::draw(&ctx.rows, path)?;
        tell!("ipc-bench: wrote {}", path.display());
    }
    let failed = ctx
        .rows
        .iter()
        .filter(|r| {
            r.error
                .as_deref()
                .is_some_and(|e| !e.starts_with("not built"))
        })
        .count();
    if failed > 0 {
        tell!("ipc-bench: {failed} row(s) failed");
        return Ok(1);
    }
    Ok(0)
}
