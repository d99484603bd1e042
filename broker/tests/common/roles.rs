//! What a re-executed test binary does as a child process (a role of the kit's
//! `shmring_testkit::role`); parameters come in `ROLE_*` env vars; readiness and results go out as stdout lines
//! starting with `@`; commands come in on stdin.

use std::io::{BufRead, Read, Write};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shmring::{ConsumerOptions, PollError, PublishError, Ring, WaitOutcome, WaitStrategy};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn num(name: &str) -> u64 {
    var(name).parse().unwrap_or(0)
}

fn open() -> Ring {
    let ns = shmring::names::default_namespace();
    Ring::open(&ns, &var("ROLE_RING")).unwrap_or_else(|e| {
        println!("@error open: {e}");
        std::process::exit(2)
    })
}

/// In a child: run its role and exit. In the test itself: return.
pub fn run_if_child() {
    let Some(role) = shmring_testkit::role::current() else {
        return;
    };
    match role.as_str() {
        "consumer" => consumer(),
        "producer" => producer(),
        "claimer" => claimer(),
        "racer" => racer(),
        "foreign" => foreign(),
        "impostor" => impostor(),
        "fproducer" => super::fault::fproducer(),
        "fconsumer" => super::fault::fconsumer(),
        other => println!("@error unknown role {other}"),
    }
    std::process::exit(0);
}

const RUN: u8 = 0;
const PAUSE: u8 = 1;
const EXIT: u8 = 2;

/// A consumer that checks the events are consecutive u64s. stdin: pause, resume; EOF exits.
fn consumer() {
    let ring = open();
    let name = var("ROLE_NAME");
    let group = var("ROLE_GROUP");
    let opts = if !group.is_empty() {
        ConsumerOptions::worker(group)
    } else if name.is_empty() {
        ConsumerOptions::anonymous()
    } else {
        ConsumerOptions::durable(name)
    };
    let opts = opts.wait(WaitStrategy::TimeoutBlocking {
        timeout: Duration::from_millis(20),
    });
    let mut c = match ring.consumer(opts) {
        Ok(c) => c,
        Err(e) => {
            println!("@error attach: {e}");
            std::process::exit(2)
        }
    };
    let expect = num("ROLE_EXPECT");
    let panic_at = std::env::var("ROLE_PANIC_AT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    if panic_at.is_some() {
        std::panic::set_hook(Box::new(|_| {})); // the failure is the point: keep the log quiet
    }
    let mode = Arc::new(AtomicU8::new(if var("ROLE_PAUSED") == "1" {
        PAUSE
    } else {
        RUN
    }));
    let m = mode.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line.as_deref() {
                Ok("pause") => m.store(PAUSE, Ordering::SeqCst),
                Ok("resume") => m.store(RUN, Ordering::SeqCst),
                _ => {}
            }
        }
        m.store(EXIT, Ordering::SeqCst);
    });
    println!("@ready index={} next={}", c.index(), c.next_sequence());
    let (mut count, mut first, mut last) = (0u64, None::<u64>, None::<u64>);
    let mut paused_said = false;
    let mut done_said = false;
    loop {
        match mode.load(Ordering::SeqCst) {
            EXIT => return,
            PAUSE => {
                if !paused_said {
                    println!("@paused next={}", c.next_sequence());
                    paused_said = true;
                }
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            _ => {
                if paused_said {
                    println!("@resumed");
                    paused_said = false;
                }
            }
        }
        let polled = c.poll_once(|ev| {
            let mut b = [0u8; 8];
            let n = ev.bytes().len().min(8);
            b[..n].copy_from_slice(&ev.bytes()[..n]);
            let v = u64::from_le_bytes(b);
            assert_ne!(Some(v), panic_at, "the handler fails at {v} (on purpose)");
            if let Some(l) = last {
                assert_eq!(v, l + 1, "event after {l} is {v}: lost or reordered");
            }
            first.get_or_insert(v);
            last = Some(v);
            count += 1;
        });
        let n = match polled {
            Ok(n) => n,
            Err(PollError::Deleted) => {
                println!("@deleted count={count}");
                std::process::exit(3)
            }
            Err(PollError::HandlerPanicked { sequence }) => {
                // Stay alive with the failed handle until told to exit.
                println!("@failed sequence={sequence}");
                while mode.load(Ordering::SeqCst) != EXIT {
                    std::thread::sleep(Duration::from_millis(2));
                }
                return;
            }
            Err(e) => {
                println!("@error poll: {e}");
                std::process::exit(4)
            }
        };
        if n > 0 && expect > 0 && count >= expect && !done_said {
            done_said = true;
            let s = c.stats();
            println!(
                "@done count={count} first={} last={} skipped={} dropped={}",
                first.unwrap_or(0),
                last.unwrap_or(0),
                s.skipped,
                s.dropped_behind
            );
        }
        if n == 0 {
            match c.wait() {
                Ok(WaitOutcome::Closed) => std::thread::sleep(Duration::from_millis(2)),
                Ok(_) => {}
                Err(PollError::Deleted) => {
                    println!("@deleted count={count}");
                    std::process::exit(3)
                }
                Err(e) => {
                    println!("@error wait: {e}");
                    std::process::exit(4)
                }
            }
        }
    }
}

fn publish_error(e: PublishError, i: u64) -> ! {
    match e {
        PublishError::Deleted => {
            println!("@deleted published={i}");
            std::process::exit(3)
        }
        PublishError::Closed => {
            println!("@closed published={i}");
            std::process::exit(5)
        }
        e => {
            println!("@error publish: {e}");
            std::process::exit(4)
        }
    }
}

/// Publish ROLE_COUNT (0: forever) consecutive u64s from ROLE_FIRST, ROLE_PACE_US apart;
/// "@progress N" every ROLE_PROGRESS; after ROLE_PHASE events, wait for "go" on stdin.
fn producer() {
    let ring = open();
    let mut p = ring.producer().unwrap_or_else(|e| {
        println!("@error attach: {e}");
        std::process::exit(2)
    });
    let (count, first, pace) = (num("ROLE_COUNT"), num("ROLE_FIRST"), num("ROLE_PACE_US"));
    let (progress, phase) = (num("ROLE_PROGRESS"), num("ROLE_PHASE"));
    println!("@ready");
    let mut i = 0u64;
    while count == 0 || i < count {
        if phase > 0 && i == phase {
            println!("@phase {i}");
            let mut line = String::new();
            let _ = std::io::stdin().lock().read_line(&mut line);
        }
        if let Err(e) = p.publish(&(first + i).to_le_bytes()) {
            publish_error(e, i);
        }
        i += 1;
        if progress > 0 && i.is_multiple_of(progress) {
            println!("@progress {i}");
        }
        if pace > 0 {
            std::thread::sleep(Duration::from_micros(pace));
        }
    }
    println!("@published {i}");
}

/// Claim a slot, write into it, say so, and never commit (wait to be killed).
fn claimer() {
    let ring = open();
    let mut p = ring.producer().unwrap_or_else(|e| {
        println!("@error attach: {e}");
        std::process::exit(2)
    });
    let mut claim = p.claim().unwrap_or_else(|e| publish_error(e, 0));
    let _ = claim.write(&999_999u64.to_le_bytes());
    println!("@claimed {}", claim.sequence());
    let _ = std::io::stdout().flush();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    // Stdin closed without a kill: leave the claim in flight, as a crash would.
    std::mem::forget(claim);
    std::process::exit(0);
}

/// On each "go [PACE_US]": publish `(ROLE_ID << 32) | counter` until the ring refuses,
/// PACE_US apart (default ROLE_PACE_US; 0: flat out), then print "@accepted N" for that
/// round. The counter runs on across rounds.
fn racer() {
    let ring = open();
    let mut p = ring.producer().unwrap_or_else(|e| {
        println!("@error attach: {e}");
        std::process::exit(2)
    });
    let id = num("ROLE_ID");
    let pace = num("ROLE_PACE_US");
    let mut counter = 0u64;
    println!("@ready");
    for line in std::io::stdin().lock().lines() {
        let Some(rest) = line.as_deref().ok().and_then(|l| l.strip_prefix("go")) else {
            break;
        };
        let pace = rest.trim().parse().unwrap_or(pace);
        let mut accepted = 0u64;
        loop {
            match p.publish(&((id << 32) | counter).to_le_bytes()) {
                Ok(_) => {
                    counter += 1;
                    accepted += 1;
                }
                Err(PublishError::Closed) => break,
                Err(e) => publish_error(e, accepted),
            }
            if pace > 0 {
                std::thread::sleep(Duration::from_micros(pace));
            }
        }
        println!("@accepted {accepted}");
    }
}

/// Send ROLE_REQUEST to the control socket and print the reply line.
fn foreign() {
    let ns = shmring::names::default_namespace();
    let path = shmring::names::namespace_dir(&ns)
        .expect("namespace")
        .join("broker.sock");
    let reply = (|| -> std::io::Result<String> {
        let mut s = std::os::unix::net::UnixStream::connect(&path)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        writeln!(s, "{}", var("ROLE_REQUEST"))?;
        let mut line = String::new();
        std::io::BufReader::new(s).read_line(&mut line)?;
        Ok(line)
    })();
    match reply {
        Ok(line) => println!("@reply {}", line.trim()),
        Err(e) => println!("@reply io error: {e}"),
    }
}

/// Listens on the namespace's control socket path (left free by a broker that stopped) and
/// answers requests as a broker would answer a `stop`: says `@listening`, then serves two
/// connections.
fn impostor() {
    let ns = shmring::names::default_namespace();
    let dir = shmring::names::namespace_dir(&ns).expect("namespace");
    let path = dir.join("broker.sock");
    // With IMPOSTOR_LOCK set it also makes a lock file of its own (and holds no lock on it).
    // With IMPOSTOR_FLOCK set, it holds a flock on it too.
    let _lock = if std::env::var_os("IMPOSTOR_LOCK").is_some() {
        let file = match std::fs::File::create(dir.join("broker.lock")) {
            Ok(f) => f,
            Err(e) => {
                println!("@error lock: {e}");
                return;
            }
        };
        if std::env::var_os("IMPOSTOR_FLOCK").is_some() {
            if let Err(e) =
                rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            {
                println!("@error flock: {e}");
                return;
            }
        }
        Some(file)
    } else {
        None
    };
    let listener = match std::os::unix::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            println!("@error bind {}: {e}", path.display());
            return;
        }
    };
    println!("@listening");
    for _ in 0..2 {
        let Ok((mut s, _)) = listener.accept() else {
            break;
        };
        let mut line = String::new();
        let _ = std::io::BufReader::new(&s).read_line(&mut line);
        let _ = writeln!(s, "{{\"reply\":\"done\",\"message\":\"ring stopped\"}}");
    }
    let _ = std::fs::remove_file(&path);
}
