//! An asynchronous logger across processes: several application processes log through one
//! ring into one writer process that formats each line and appends it to a file.
//!
//! ```text
//! cargo run --release -p shmring-examples --example async_logger                 # BLOCK, 3 apps x 200,000 lines
//! cargo run --release -p shmring-examples --example async_logger -- drop 500000  # DROP mode
//! ```
//!
//! - The ring declares its writer (`RingConfig::declared`): it gates from the ring's
//!   creation, so the lines the applications log before the writer process first starts are
//!   kept for it. The parent starts the writer only after the first line is logged.
//! - BLOCK mode: an application waits for room (`Producer::publish`), no line is lost.
//!   DROP mode: an application never waits (`Producer::try_publish`) and counts the lines it
//!   dropped; each prints that count.
//! - The writer flushes its file on every end-of-batch edge, and `flush_within` makes such an
//!   edge come at least every 20 ms while lines flow, so no line waits longer in its buffer.
//! - Each application logs one line the writer cannot format (its text is not UTF-8): the
//!   writer's skip-and-count policy reports it as a dead letter and carries on.
//! - Shutdown drains: once the applications are done the parent drains the ring (no more lines
//!   accepted, the writer finishes every accepted one), then checks that every accepted line
//!   is either in the file or was dead-lettered, and removes the ring and the file.
//!
//! The ring lives in `$SHMRING_NAMESPACE` (or `default`) as `async-logger-<pid>`; the log file
//! is `async-logger-<pid>.log` in the system's temporary directory, made afresh by the writer
//! (a name already taken there, a symbolic link included, is refused).

use std::error::Error;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use shmring::{
    names, ConsumerOptions, ErrorPolicy, Event, ProducerMode, PublishError, Ring, RingConfig,
    RunExit, TryPublishError, WaitStrategy,
};
use shmring_examples::{field, note, say, Children};

const APPS: u32 = 3;
const DEFAULT_LINES: u64 = 200_000;
const WRITER: &str = "writer";
/// The parent gives up (and kills the children) after this long.
const WATCHDOG: Duration = Duration::from_secs(120);
/// How long shutdown waits for the writer to finish the accepted lines.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
const USAGE: &str = "usage: async_logger [block|drop] [LINES_PER_APP]";

/// The fixed part of a log record; the message text follows it in the slot.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Record {
    /// Wall-clock nanoseconds since the Unix epoch.
    time_ns: u64,
    /// The application's own line counter.
    line: u64,
    /// Which application.
    app: u32,
    /// 0 debug, 1 info, 2 warn, 3 error.
    level: u32,
}

const RECORD: usize = std::mem::size_of::<Record>();

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Block,
    Drop,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Block => "block",
            Mode::Drop => "drop",
        })
    }
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "block" => Ok(Mode::Block),
        "drop" => Ok(Mode::Drop),
        _ => Err(format!("mode must be block or drop, got {s:?}\n{USAGE}")),
    }
}

fn parse(s: &str, what: &str) -> Result<u64, String> {
    s.replace('_', "")
        .parse()
        .map_err(|_| format!("{what} must be a whole number, got {s:?}\n{USAGE}"))
}

fn main() -> std::process::ExitCode {
    shmring_examples::finish(run())
}

fn run() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        // Child roles: async_logger app <namespace> <ring> <index> <mode> <lines>
        //              async_logger writer <namespace> <ring> <file>
        Some("app") => app(&args[1..]),
        Some("writer") => writer(&args[1..]),
        Some("-h" | "--help") => {
            say!("{USAGE}");
            Ok(())
        }
        _ => {
            let mode = args.first().map_or(Ok(Mode::Block), |m| parse_mode(m))?;
            let lines = args
                .get(1)
                .map_or(Ok(DEFAULT_LINES), |n| parse(n, "LINES_PER_APP"))?;
            if args.len() > 2 {
                return Err(USAGE.into());
            }
            parent(mode, lines)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parent

fn parent(mode: Mode, lines: u64) -> Result<(), Box<dyn Error>> {
    let namespace = names::default_namespace();
    let ring_name = format!("async-logger-{}", std::process::id());
    let log = std::env::temp_dir().join(format!("{ring_name}.log"));
    let config = RingConfig {
        capacity: 4096,
        slot_size: 256,
        max_producers: APPS,
        producer_mode: ProducerMode::Multi,
        declared: vec![WRITER.to_owned()],
        ..RingConfig::default()
    };
    let dir = names::namespace_dir(&namespace)?;
    let dir_existed = dir.exists();
    // Before the ring exists: from here a Ctrl-C ends the waits, not the process, and the
    // ring and the log file are removed.
    let mut children = Children::interruptible()?;
    let ring = Ring::create(&namespace, &ring_name, &config)?;
    // Said once the ring exists, and never before its cleanup below: a stdout that cannot
    // be written ends the run there, and the ring is still removed.
    let said = (|| -> Result<(), Box<dyn Error>> {
        say!(
            "ring {} ({} slots), {mode} mode: {APPS} application processes x {lines} lines -> \
             writer process -> {}",
            ring.path().display(),
            config.capacity,
            log.display(),
        );
        Ok(())
    })();
    let result = said.and_then(|()| {
        run_children(
            &ring,
            &mut children,
            &namespace,
            &ring_name,
            &log,
            mode,
            lines,
        )
    });
    children.kill_all();
    drop(ring);
    Ring::remove(&namespace, &ring_name)?;
    let _ = std::fs::remove_file(&log);
    if !dir_existed {
        // Fails (harmlessly) if someone else put a ring there meanwhile.
        let _ = std::fs::remove_dir(&dir);
    }
    say!("removed ring {ring_name:?} and the log file");
    result
}

fn run_children(
    ring: &Ring,
    children: &mut Children,
    namespace: &str,
    ring_name: &str,
    log: &Path,
    mode: Mode,
    lines: u64,
) -> Result<(), Box<dyn Error>> {
    let deadline = Instant::now() + WATCHDOG;
    for i in 0..APPS {
        let args = [
            "app".to_owned(),
            namespace.to_owned(),
            ring_name.to_owned(),
            i.to_string(),
            mode.to_string(),
            lines.to_string(),
        ];
        children.spawn(format!("app {i}"), &args)?;
    }
    // The writer starts late on purpose: the declared entry kept every line for it.
    while ring.info().head == 0 {
        children.check_interrupt()?;
        if Instant::now() >= deadline {
            return Err("no application logged a line".into());
        }
        std::thread::yield_now();
    }
    let before_writer = ring.info().head;
    let args = [
        "writer".to_owned(),
        namespace.to_owned(),
        ring_name.to_owned(),
        log.display().to_string(),
    ];
    children.spawn("writer".to_owned(), &args)?;

    let (mut accepted, mut dropped, mut bad) = (0, 0, 0);
    for i in 0..APPS {
        let report = children.finish(&format!("app {i}"), deadline)?;
        write!(std::io::stdout().lock(), "{report}")?;
        accepted += field(&report, "accepted")?;
        dropped += field(&report, "dropped")?;
        bad += field(&report, "bad")?;
    }
    // Shutdown: refuse new lines, let the writer finish every accepted one.
    // A Ctrl-C ends the drain too: the consumers it waits for may have died of it.
    let drained = ring.drain_while(DRAIN_TIMEOUT, || children.check_interrupt().is_ok());
    children.check_interrupt()?;
    let stop = drained?;
    let report = children.finish("writer", deadline)?;
    write!(std::io::stdout().lock(), "{report}")?;
    let written = field(&report, "written")?;
    let dead = field(&report, "dead_lettered")?;
    let in_file = BufReader::new(File::open(log)?).lines().count() as u64;

    say!(
        "{before_writer} lines were logged before the writer started; {accepted} accepted \
         (sequences 0..{stop}), {dropped} dropped by the applications, {written} written, \
         {dead} dead-lettered"
    );
    if stop != accepted {
        return Err(format!("the ring accepted {stop} lines, the applications {accepted}").into());
    }
    if written + dead != accepted || in_file != written || dead != bad {
        return Err(format!(
            "lost lines: accepted {accepted}, written {written} ({in_file} in the file), \
             dead-lettered {dead} of {bad} unformattable"
        )
        .into());
    }
    if mode == Mode::Block && dropped != 0 {
        return Err(format!("BLOCK mode dropped {dropped} lines").into());
    }
    say!("ok: every accepted line is in the file or was dead-lettered");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Application

fn app(args: &[String]) -> Result<(), Box<dyn Error>> {
    let [namespace, ring_name, index, mode, lines] = args else {
        return Err("app takes: <namespace> <ring> <index> <mode> <lines>".into());
    };
    let index = parse(index, "index")? as u32;
    let mode = parse_mode(mode)?;
    let lines = parse(lines, "lines")?;
    let ring = Ring::open(namespace, ring_name)?;
    let mut producer = ring.producer()?;
    let mut buf = Vec::with_capacity(256);
    let (mut accepted, mut dropped, mut bad) = (0u64, 0u64, 0u64);
    let poison_at = lines / 2;
    for line in 0..lines {
        buf.clear();
        let record = Record {
            time_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            line,
            app: index,
            level: (line % 4) as u32,
        };
        buf.extend_from_slice(bytemuck::bytes_of(&record));
        if line == poison_at {
            // A message the writer cannot format: not UTF-8.
            buf.extend_from_slice(b"payment id \xff\xfe truncated");
        } else {
            use std::io::Write as _;
            write!(buf, "order {line} accepted by app {index}")?;
        }
        let ok = match mode {
            Mode::Block => match producer.publish(&buf) {
                Ok(_) => true,
                Err(PublishError::Closed) => false,
                Err(e) => return Err(e.into()),
            },
            Mode::Drop => match producer.try_publish(&buf) {
                Ok(_) => true,
                Err(TryPublishError::Full | TryPublishError::Closed) => false,
                Err(e) => return Err(e.into()),
            },
        };
        if ok {
            accepted += 1;
            bad += u64::from(line == poison_at);
        } else {
            dropped += 1;
        }
    }
    say!("app {index}: accepted={accepted} dropped={dropped} bad={bad}");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Writer

/// Why a record cannot be formatted.
#[derive(Debug)]
enum FormatError {
    Short(usize),
    NotUtf8(std::str::Utf8Error),
    Io(std::io::Error),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Short(n) => write!(f, "a record of {n} bytes is shorter than its header"),
            FormatError::NotUtf8(e) => write!(f, "the message is not UTF-8: {e}"),
            FormatError::Io(e) => write!(f, "writing the log file: {e}"),
        }
    }
}

const LEVELS: [&str; 4] = ["DEBUG", "INFO", "WARN", "ERROR"];

fn format_line(out: &mut impl Write, bytes: &[u8]) -> Result<(), FormatError> {
    let header = bytes.get(..RECORD).ok_or(FormatError::Short(bytes.len()))?;
    let record: Record = bytemuck::pod_read_unaligned(header);
    let text = std::str::from_utf8(&bytes[RECORD..]).map_err(FormatError::NotUtf8)?;
    let level = LEVELS.get(record.level as usize).copied().unwrap_or("?");
    writeln!(
        out,
        "{}.{:09} {level:5} app={} line={} {text}",
        record.time_ns / 1_000_000_000,
        record.time_ns % 1_000_000_000,
        record.app,
        record.line,
    )
    .map_err(FormatError::Io)
}

/// Make the log file at `path` afresh, readable by this user only. A name that is taken
/// is refused, a symbolic link included (`O_EXCL`, and `O_NOFOLLOW`): in a shared
/// temporary directory another user can guess the path and plant a link there, to have the
/// writer truncate and fill the file it points to.
fn create_log(path: &Path) -> Result<File, Box<dyn Error>> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| {
            format!(
                "cannot create the log file {}: {e}: the writer makes it afresh and never opens a name that exists (a file, or a symbolic link); remove it, or run again",
                path.display()
            )
            .into()
        })
}

fn writer(args: &[String]) -> Result<(), Box<dyn Error>> {
    let [namespace, ring_name, path] = args else {
        return Err("writer takes: <namespace> <ring> <file>".into());
    };
    let ring = Ring::open(namespace, ring_name)?;
    let mut consumer = ring.consumer(
        ConsumerOptions::durable(WRITER)
            .on_error(ErrorPolicy::Skip { attempts: 1 })
            .flush_within(Duration::from_millis(20))
            .wait(WaitStrategy::Blocking),
    )?;
    consumer.on_dead_letter(|dead| {
        note!(
            "writer: skipped line at sequence {} after {} attempt(s): {}",
            dead.sequence,
            dead.attempts,
            dead.error
        );
    });
    let path = PathBuf::from(path);
    let mut out = BufWriter::with_capacity(1 << 16, create_log(&path)?);
    let (mut written, mut flushes) = (0u64, 0u64);
    let exit = consumer.run_fallible(
        |ev: Event<'_>| {
            format_line(&mut out, ev.bytes())?;
            written += 1;
            if ev.is_end_of_batch() {
                out.flush().map_err(FormatError::Io)?;
                flushes += 1;
            }
            Ok::<(), FormatError>(())
        },
        || false,
    )?;
    out.flush()?;
    let stats = consumer.stats();
    // Every line is written, or dead-lettered, once: the writer's own count and the
    // consumer's agree.
    say!(
        "writer: written={written} dead_lettered={} flushes={flushes} ({})",
        stats.dead_lettered,
        match exit {
            RunExit::Closed => "the ring was drained",
            RunExit::Stopped => "stopped",
        }
    );
    Ok(())
}
