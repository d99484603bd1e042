//! The measurement kit the harness and every peer share: the clock, CPU time, pacing,
//! histograms, the control page, role processes and their results.
//!
//! Every cross-process number comes from `CLOCK_MONOTONIC`, which is one clock for every
//! process on a machine: a sender writes `now_ns()` (or the intended send time) into the
//! message and the receiver subtracts it from its own `now_ns()` at handler entry.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use hdrhistogram::Histogram;

/// The hidden subcommand a role process is started with: `ipc-bench __role <name> k=v ...`.
pub const ROLE_ARG: &str = "__role";

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call. (glibc's
    // vDSO path: rustix's own vDSO parser does not run under valgrind, which the profiles
    // of the README use.)
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Nanoseconds on `CLOCK_MONOTONIC`: the same clock in every process of the machine.
#[inline(always)]
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread in nanoseconds, from `/proc/thread-self/schedstat`
/// (the scheduler's own run-time accounting, not 10 ms ticks).
pub fn thread_cpu_ns() -> u64 {
    schedstat(Path::new("/proc/thread-self/schedstat")).unwrap_or(0)
}

/// CPU time of process `pid`'s main thread, from `/proc/<pid>/schedstat`.
pub fn pid_cpu_ns(pid: u32) -> Option<u64> {
    schedstat(&PathBuf::from(format!("/proc/{pid}/schedstat")))
}

fn schedstat(path: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// CPU time of the whole calling process (all threads), `CLOCK_PROCESS_CPUTIME_ID`.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Ask for 1 ns timer slack, so that a paced sender's sleeps end when asked (the default
/// 50 µs slack would move every paced send).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Die with the parent: a role process never outlives the harness that started it.
pub fn die_with_parent() {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
}

/// Pin the calling thread to `cpu` (ignored if the CPU does not exist).
pub fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// Sends at intended times, `interval` apart.
///
/// Coordinated omission: when the sender is still busy with the previous message (a slow
/// publish, a full ring, a blocked write: the system under test holding it up) as the next
/// one falls due, that message is stamped with the time it was *meant* to leave, so the
/// delay is charged to every message it held up, as a user on that schedule would see it.
/// The pacer's own lateness is not the system's: it sleeps until 30 µs before the due time
/// (timer slack set to 1 ns) and spins the rest, and if the sleep still overshoots (on a
/// loaded VM a timer wake-up can be late by far more), the message is stamped with its
/// actual send time and the schedule moves with it. Both are recorded: `late` (the pacer's
/// overshoot) and `held` (how long the system under test held the sender past a due time).
pub struct Pacer {
    next_due: u64,
    interval: u64,
    margin: u64,
    /// How late past its due time each send left because the pacer woke late (ns).
    pub late: Histogram<u64>,
    /// How long past a due time the sender was still inside the previous send (ns).
    pub held: Histogram<u64>,
}

impl Pacer {
    /// A pacer whose first message is due `interval` from now (from when it is made: its
    /// histograms, a few hundred kilobytes each, are allocated and the timer slack set
    /// before the clock is read, so that a pacer made between two phases of a run does
    /// not start with its first message due before it was ready, late by the time the
    /// allocation took).
    pub fn new(interval: Duration) -> Self {
        tight_timer_slack();
        let interval = interval.as_nanos() as u64;
        let (late, held) = (new_hist(), new_hist());
        Self {
            next_due: now_ns() + interval,
            interval,
            margin: (interval / 4).min(30_000),
            late,
            held,
        }
    }

    /// Start again at `interval`, the first message due `interval` from now: the schedule
    /// and both histograms cleared (no allocation, no free), the clock read last. For a
    /// sender whose warm-up ran at another interval.
    pub fn restart(&mut self, interval: Duration) {
        let interval = interval.as_nanos() as u64;
        self.late.reset();
        self.held.reset();
        self.interval = interval;
        self.margin = (interval / 4).min(30_000);
        self.next_due = now_ns() + interval;
    }

    /// Wait for the next message's due time; returns the time to stamp it with. (`_i`, the
    /// message's index, is for the caller's readability only.)
    // Always inlined: what runs between the clock read that stamps a message and the
    // message's send is then the same code in every sender loop (the floor's and the
    // rings'), whatever else the loop's function holds.
    #[inline(always)]
    pub fn wait(&mut self, _i: u64) -> u64 {
        let due = self.next_due;
        self.next_due += self.interval;
        let entry = now_ns();
        if entry > due {
            // Held up by the previous send: charge from the intended time.
            self.held.saturating_record(entry - due);
            return due;
        }
        if due > entry + self.margin {
            std::thread::sleep(Duration::from_nanos(due - entry - self.margin));
        }
        let mut now = now_ns();
        while now < due {
            std::hint::spin_loop();
            now = now_ns();
        }
        self.late.saturating_record(now - due);
        // The pacer's own overshoot: stamp the real send time, move the schedule with it.
        self.next_due += now - due;
        now
    }
}

/// Delivered-count checkpoints, for the best sustained rate over a window: on a shared
/// 2-CPU machine another tenant can take a CPU for part of a throughput run, and the rate
/// over the whole run then measures the tenant as much as the ring. Both are reported.
#[derive(Debug, Clone)]
pub struct RateMeter {
    next: u64,
    /// Events between two checkpoints ([`RATE_EVERY`] unless made with [`RateMeter::every`]).
    every: u64,
    /// (time ns, events so far).
    pub points: Vec<(u64, u64)>,
}

/// Events between two checkpoints of a [`RateMeter`].
pub const RATE_EVERY: u64 = 1 << 16;

impl Default for RateMeter {
    fn default() -> Self {
        Self::new()
    }
}

impl RateMeter {
    /// A meter whose first checkpoint is at event 0.
    pub fn new() -> Self {
        Self::every(RATE_EVERY)
    }

    /// A meter with a checkpoint at most every `every` events (at least 1): a test's, to
    /// see where its reader ticks.
    pub fn every(every: u64) -> Self {
        Self {
            next: 0,
            every: every.max(1),
            points: Vec::with_capacity(4096),
        }
    }

    /// Note that `n` events have been delivered so far (cheap unless a checkpoint is due).
    #[inline(always)]
    pub fn tick(&mut self, n: u64) {
        if n >= self.next {
            self.points.push((now_ns(), n));
            self.next = n + self.every;
        }
    }

    /// The best rate (events/s) over any stretch of at least `window_ns`.
    pub fn best(&self, window_ns: u64) -> Option<f64> {
        best_rate(&self.points, window_ns)
    }
}

/// The best rate over any stretch of `points` at least `window_ns` long.
pub fn best_rate(points: &[(u64, u64)], window_ns: u64) -> Option<f64> {
    let mut best: Option<f64> = None;
    let mut j = 0;
    for i in 0..points.len() {
        j = j.max(i + 1);
        while j < points.len() && points[j].0 - points[i].0 < window_ns {
            j += 1;
        }
        if j >= points.len() {
            break;
        }
        let (t0, n0) = points[i];
        let (t1, n1) = points[j];
        let r = (n1 - n0) as f64 / ((t1 - t0) as f64 / 1e9);
        best = Some(best.map_or(r, |b: f64| b.max(r)));
    }
    best
}

/// The window of [`RateMeter::best`] the harness reports: 100 ms (50 ms with `--quick`
/// runs shorter than 400 ms).
pub fn best_window(run: Duration) -> u64 {
    if run >= Duration::from_millis(400) {
        100_000_000
    } else {
        (run.as_nanos() as u64 / 4).max(1)
    }
}

/// A latency histogram: 1 ns to 1 hour, 3 significant digits.
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
        .unwrap_or_else(|e| unreachable!("constant histogram bounds are valid: {e}"))
}

/// What one role process measured; the parent merges the parts of a row.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Latencies (ns), if this role recorded any.
    pub hist: Option<Histogram<u64>>,
    /// A second set of latencies (ns), for a role that measures two things in turn in the
    /// same processes (the `paired` suite's interleaved rows: the spin floor's line).
    pub hist_b: Option<Histogram<u64>>,
    /// A third set of latencies (ns), for a role that measures three things in turn (the
    /// `paired` suite's interleaved rows: the bare ring of lines).
    pub hist_c: Option<Histogram<u64>>,
    /// Named numbers: counts, timestamps, CPU times, anything else a row reports.
    pub values: HashMap<String, f64>,
}

impl Measured {
    /// Set a named number.
    pub fn set(&mut self, key: &str, v: impl Into<f64>) -> &mut Self {
        self.values.insert(key.to_owned(), v.into());
        self
    }

    /// A named number.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.values.get(key).copied()
    }

    /// A named number that must be there.
    pub fn need(&self, key: &str) -> Result<f64> {
        self.get(key)
            .ok_or_else(|| anyhow!("the role process reported no {key:?}"))
    }

    /// Take `other`'s histogram (merged) and numbers (prefixed with `prefix`).
    pub fn absorb(&mut self, prefix: &str, other: Measured) {
        for (h, mine) in [
            (other.hist, &mut self.hist),
            (other.hist_b, &mut self.hist_b),
            (other.hist_c, &mut self.hist_c),
        ] {
            let Some(h) = h else { continue };
            match mine {
                Some(mine) => {
                    let _ = mine.add(&h);
                }
                None => *mine = Some(h),
            }
        }
        for (k, v) in other.values {
            self.values.insert(format!("{prefix}{k}"), v);
        }
    }

    /// Write as text: `v <key> <value>`, `h <value> <count>`, (`hist_b`) `g <value>
    /// <count>` and (`hist_c`) `c <value> <count>` lines.
    pub fn write_to(&self, path: &Path) -> Result<()> {
        let mut out = String::new();
        for (k, v) in &self.values {
            out.push_str(&format!("v {k} {v}\n"));
        }
        for (tag, h) in [("h", &self.hist), ("g", &self.hist_b), ("c", &self.hist_c)] {
            let Some(h) = h else { continue };
            for it in h.iter_recorded() {
                out.push_str(&format!(
                    "{tag} {} {}\n",
                    it.value_iterated_to(),
                    it.count_at_value()
                ));
            }
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, out).with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
        Ok(())
    }

    /// Read what `write_to` wrote.
    pub fn read_from(path: &Path) -> Result<Measured> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("the role process left no result at {}", path.display()))?;
        let mut m = Measured::default();
        for line in text.lines() {
            let mut it = line.split(' ');
            match (it.next(), it.next(), it.next()) {
                (Some("v"), Some(k), Some(v)) => {
                    m.values.insert(k.to_owned(), v.parse()?);
                }
                (Some(tag @ ("h" | "g" | "c")), Some(v), Some(c)) => {
                    let h = match tag {
                        "h" => &mut m.hist,
                        "g" => &mut m.hist_b,
                        _ => &mut m.hist_c,
                    };
                    h.get_or_insert_with(new_hist)
                        .saturating_record_n(v.parse()?, c.parse()?);
                }
                _ => bail!("bad result line {line:?} in {}", path.display()),
            }
        }
        Ok(m)
    }
}

/// `key=value` arguments of a role process.
#[derive(Debug, Clone, Default)]
pub struct Args {
    map: HashMap<String, String>,
}

impl Args {
    /// Parse `key=value` words.
    pub fn parse(words: &[String]) -> Result<Self> {
        let mut map = HashMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| anyhow!("role argument {w:?} is not key=value"))?;
            map.insert(k.to_owned(), v.to_owned());
        }
        Ok(Self { map })
    }

    /// A string argument.
    pub fn str(&self, key: &str) -> Result<&str> {
        self.map
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("role argument {key} missing"))
    }

    /// A string argument with a default.
    pub fn str_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.map.get(key).map_or(default, String::as_str)
    }

    /// A number argument.
    pub fn num<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        let s = self.str(key)?;
        s.parse()
            .map_err(|_| anyhow!("role argument {key}={s} is not a number"))
    }

    /// A number argument with a default.
    pub fn num_or<T: std::str::FromStr>(&self, key: &str, default: T) -> T {
        self.map
            .get(key)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    }

    /// Pin this thread if `cpu=N` was passed.
    pub fn pin(&self) {
        if let Some(cpu) = self.map.get("cpu").and_then(|s| s.parse().ok()) {
            pin_to(cpu);
        }
    }

    /// Where to write the result.
    pub fn out(&self) -> Result<PathBuf> {
        Ok(PathBuf::from(self.str("out")?))
    }

    /// The control page.
    pub fn ctl(&self) -> Result<Ctl> {
        Ctl::open(Path::new(self.str("ctl")?))
    }
}

/// Shared control words in a file, mapped by every process of one measurement:
/// a ready count and a go flag (the start barrier), a done flag, spare lines for the
/// floor's ping-pong and the peers that need a shared word, and a ring of lines
/// ([`Ctl::ring_line`]).
pub struct Ctl {
    map: memmap2::MmapMut,
}

/// Byte offsets of the control file's flag and spare lines (each on its own 256-byte
/// stretch, so that the adjacent-line prefetcher never couples two of them; the ring of
/// lines after them is 64 bytes apart, as a ring's slots are).
const CTL_READY: usize = 0;
const CTL_GO: usize = 256;
const CTL_DONE: usize = 512;
/// First of the spare lines.
const CTL_LINES: usize = 1024;
/// End of the spare lines, where the ring of lines starts.
const CTL_RING: usize = 4096 * 2;
/// Spare lines.
pub const CTL_SPARE_LINES: usize = (CTL_RING - CTL_LINES) / 256;
/// Lines of the ring of lines, 64 bytes apart as a ring's slots are: as many as the slots
/// of the harness's latency rings.
pub const CTL_RING_LINES: usize = 1024;
/// The distance between two lines of the ring of lines: one line.
const CTL_RING_STRIDE: usize = std::mem::size_of::<Line>();
/// Size of the control file.
const CTL_SIZE: usize = CTL_RING + CTL_RING_LINES * CTL_RING_STRIDE;

/// One line of the control file (a spare line or a line of its ring of lines): a futex word
/// and two 64-bit words.
#[repr(C, align(64))]
pub struct Line {
    /// A 32-bit word, futex-able.
    pub word: AtomicU32,
    _pad: u32,
    /// A sequence number.
    pub seq: AtomicU64,
    /// A timestamp.
    pub stamp: AtomicU64,
}

// The ring of lines is laid out as a ring of 64-byte slots is.
const _: () = assert!(CTL_RING_STRIDE == 64);

impl Ctl {
    /// Create a zeroed control file.
    pub fn create(path: &Path) -> Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("create {}", path.display()))?;
        f.set_len(CTL_SIZE as u64)?;
        Self::map(&f)
    }

    /// Map an existing control file.
    pub fn open(path: &Path) -> Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("open {}", path.display()))?;
        Self::map(&f)
    }

    fn map(f: &File) -> Result<Self> {
        // Populated: no page of it faults in the middle of a measurement.
        // SAFETY: the file is ours (in the run's private directory), made CTL_SIZE bytes
        // long by `create` (checked below) and never truncated; every access to the mapping
        // goes through atomics.
        let map = unsafe { memmap2::MmapOptions::new().populate().map_mut(f)? };
        ensure!(
            map.len() >= CTL_SIZE,
            "the control file is {} bytes, not {CTL_SIZE}",
            map.len()
        );
        Ok(Self { map })
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= CTL_SIZE && off.is_multiple_of(4));
        // SAFETY: in bounds (above), 4-aligned (the mapping is page-aligned), and the
        // mapping lives as long as `self`; AtomicU32 has u32's layout.
        unsafe { &*(self.map.as_ptr().add(off) as *const AtomicU32) }
    }

    /// The ready count.
    pub fn ready(&self) -> &AtomicU32 {
        self.u32_at(CTL_READY)
    }

    /// The go flag.
    pub fn go(&self) -> &AtomicU32 {
        self.u32_at(CTL_GO)
    }

    /// The done flag.
    pub fn done(&self) -> &AtomicU32 {
        self.u32_at(CTL_DONE)
    }

    /// Spare line `i`.
    pub fn line(&self, i: usize) -> &Line {
        assert!(i < CTL_SPARE_LINES, "control line {i} out of range");
        let off = CTL_LINES + i * 256;
        // SAFETY: in bounds (asserted), 64-aligned (page-aligned mapping, 256-byte
        // stride), lives as long as `self`; `Line` is atomics only, valid for any bits.
        unsafe { &*(self.map.as_ptr().add(off) as *const Line) }
    }

    /// Line `i` of the ring of lines: [`CTL_RING_LINES`] lines, each on its own 64 bytes,
    /// after the spare lines.
    pub fn ring_line(&self, i: usize) -> &Line {
        assert!(i < CTL_RING_LINES, "ring line {i} out of range");
        let off = CTL_RING + i * CTL_RING_STRIDE;
        // SAFETY: in bounds (asserted: CTL_SIZE holds every ring line), 64-aligned
        // (page-aligned mapping, page-aligned start, a stride of `Line`'s 64 bytes),
        // lives as long as `self`; `Line` is atomics only, valid for any bits.
        unsafe { &*(self.map.as_ptr().add(off) as *const Line) }
    }

    /// Say this process is ready (Release: its setup is visible to whoever sees the count).
    pub fn arrive(&self) {
        self.ready().fetch_add(1, Ordering::Release);
    }

    /// Wait (sleeping 200 µs between looks) until `n` processes arrived.
    pub fn wait_ready(&self, n: u32, timeout: Duration) -> Result<()> {
        if wait_for(|| self.ready().load(Ordering::Acquire) >= n, timeout) {
            Ok(())
        } else {
            bail!("timed out waiting for {n} role processes to get ready")
        }
    }

    /// Open the start barrier.
    pub fn open_gate(&self) {
        self.go().store(1, Ordering::Release);
    }

    /// Wait (sleeping) until the gate opens.
    pub fn wait_gate(&self, timeout: Duration) -> Result<()> {
        if wait_for(|| self.go().load(Ordering::Acquire) != 0, timeout) {
            Ok(())
        } else {
            bail!("timed out waiting for the start")
        }
    }
}

/// Poll `cond` with 200 µs sleeps until true (returns true) or `timeout` (false).
pub fn wait_for(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

/// Pids of the role processes alive right now, for the harness's signal handler.
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kill every role process still alive (the signal handler's and the error path's job).
pub fn kill_all_children() {
    let pids = CHILDREN.lock().map(|v| v.clone()).unwrap_or_default();
    for pid in pids {
        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

/// A role process started by re-executing this binary.
pub struct RoleProc {
    child: Child,
    name: String,
    out: PathBuf,
}

impl RoleProc {
    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Starts role processes for one measurement and collects their results.
pub struct Roles {
    dir: PathBuf,
    tag: String,
    procs: Vec<RoleProc>,
    n: usize,
}

impl Roles {
    /// Role processes whose results go to files `<dir>/<tag>.<n>.out`.
    pub fn new(dir: &Path, tag: &str) -> Self {
        Self {
            dir: dir.to_owned(),
            tag: tag.to_owned(),
            procs: Vec::new(),
            n: 0,
        }
    }

    /// Start role `role` with `args` (`out=` is added). Returns its index.
    pub fn spawn(&mut self, role: &str, args: &[String]) -> Result<usize> {
        let out = self.dir.join(format!("{}.{}.out", self.tag, self.n));
        self.n += 1;
        let exe = std::env::current_exe().context("cannot find this executable to re-run it")?;
        let child = Command::new(exe)
            .arg(ROLE_ARG)
            .arg(role)
            .args(args)
            .arg(format!("out={}", out.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start role process {role}"))?;
        if let Ok(mut v) = CHILDREN.lock() {
            v.push(child.id());
        }
        self.procs.push(RoleProc {
            child,
            name: role.to_owned(),
            out,
        });
        Ok(self.procs.len() - 1)
    }

    /// The role process at `i`.
    pub fn get(&self, i: usize) -> &RoleProc {
        &self.procs[i]
    }

    /// Wait for every process to exit (polling every 5 ms, so the harness stays off the
    /// CPUs), killing them all if one fails or `timeout` passes; then read every result.
    pub fn finish(mut self, timeout: Duration) -> Result<Vec<Measured>> {
        let end = Instant::now() + timeout;
        let mut done = vec![false; self.procs.len()];
        let mut failure = None;
        while done.iter().any(|d| !d) && failure.is_none() {
            for (i, p) in self.procs.iter_mut().enumerate() {
                if done[i] {
                    continue;
                }
                match p.child.try_wait() {
                    Ok(Some(st)) if st.success() => done[i] = true,
                    Ok(Some(st)) => {
                        done[i] = true;
                        failure = Some(anyhow!("role process {} failed: {st}", p.name));
                    }
                    Ok(None) => {}
                    Err(e) => failure = Some(anyhow!("cannot wait for {}: {e}", p.name)),
                }
            }
            if failure.is_none() && Instant::now() > end {
                let names: Vec<_> = self
                    .procs
                    .iter()
                    .zip(&done)
                    .filter(|(_, d)| !**d)
                    .map(|(p, _)| p.name.clone())
                    .collect();
                failure = Some(anyhow!(
                    "timed out after {:.0?}: {} still running (killed)",
                    timeout,
                    names.join(", ")
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.reap();
        if let Some(e) = failure {
            return Err(e);
        }
        let mut out = Vec::new();
        for p in &self.procs {
            let m = Measured::read_from(&p.out);
            let _ = std::fs::remove_file(&p.out);
            out.push(m?);
        }
        Ok(out)
    }

    fn reap(&mut self) {
        for p in &mut self.procs {
            if matches!(p.child.try_wait(), Ok(None)) {
                let _ = p.child.kill();
            }
            let _ = p.child.wait();
            let pid = p.child.id();
            if let Ok(mut v) = CHILDREN.lock() {
                v.retain(|&x| x != pid);
            }
        }
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        self.reap();
    }
}

/// Write a result and flush stdio: the last thing a role process does.
pub fn report(args: &Args, m: &Measured) -> Result<()> {
    m.write_to(&args.out()?)?;
    std::io::stdout().flush()?;
    Ok(())
}

/// Percentile helper that tolerates an empty histogram.
pub fn pct(h: &Histogram<u64>, q: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_round_trips_through_its_file() {
        let dir = std::env::temp_dir().join(format!("ipcb-kit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.out");
        let mut m = Measured::default();
        let mut h = new_hist();
        for v in [100u64, 200, 200, 5_000, 1_000_000] {
            h.record(v).unwrap();
        }
        m.hist = Some(h.clone());
        let mut g = new_hist();
        for v in [7u64, 9, 11] {
            g.record(v).unwrap();
        }
        m.hist_b = Some(g.clone());
        let mut k = new_hist();
        for v in [300u64, 310] {
            k.record(v).unwrap();
        }
        m.hist_c = Some(k);
        m.set("delivered", 42.0).set("cpu_share", 0.25);
        m.write_to(&path).unwrap();
        let back = Measured::read_from(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let hb = back.hist.clone().unwrap();
        assert_eq!(hb.len(), h.len());
        assert_eq!(hb.value_at_quantile(0.5), h.value_at_quantile(0.5));
        assert_eq!(hb.max(), h.max());
        let gb = back.hist_b.clone().unwrap();
        assert_eq!((gb.len(), gb.min(), gb.max()), (3, 7, 11));
        let kb = back.hist_c.clone().unwrap();
        assert_eq!((kb.len(), kb.min(), kb.max()), (2, 300, 310));
        assert_eq!(back.get("delivered"), Some(42.0));
        assert_eq!(back.get("cpu_share"), Some(0.25));
    }

    #[test]
    fn args_parse_key_values() {
        let a = Args::parse(&["count=10".to_owned(), "kind=pipe".to_owned()]).unwrap();
        assert_eq!(a.num::<u64>("count").unwrap(), 10);
        assert_eq!(a.str("kind").unwrap(), "pipe");
        assert_eq!(a.num_or("missing", 7u32), 7);
        assert!(Args::parse(&["novalue".to_owned()]).is_err());
    }
}
