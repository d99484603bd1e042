//! What the bridge's multi-process tests share: loopback endpoints, the two bridge
//! processes (spawned with the workspace's child-process kit), their JSON counter lines, and
//! the self-checking events of the producer and the consumer threads.

#![allow(dead_code)] // each test file uses a different part

use std::net::TcpListener;

use serde_json::Value;
use shmring::{Ring, RingConfig};
use shmring_testkit::{Child, Namespace};

/// A free TCP port on 127.0.0.1 (bound, read, released; the exporter binds it next).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("local addr").port()
}

/// Zenoh flags every test process gets: reconnect quickly after the other side restarts.
/// (Scouting, multicast and gossip, is off and nothing listens unless asked: the bridge's
/// defaults.)
const RETRY: &str = "connect/retry={period_init_ms:20,period_max_ms:100,period_increase_factor:2}";

/// Two "hosts": the source ring `src` in namespace `a` and the destination ring `dst` in
/// namespace `b`, with `capacity` and `dst_capacity` slots.
pub fn src_and_dst(a: &Namespace, capacity: u64, b: &Namespace, dst_capacity: u64) -> (Ring, Ring) {
    let ring = |ns: &Namespace, name: &str, capacity: u64| {
        let config = RingConfig {
            capacity,
            ..RingConfig::default()
        };
        Ring::create(ns.name(), name, &config)
            .unwrap_or_else(|e| panic!("create ring {name} in {}: {e}", ns.name()))
    };
    (ring(a, "src", capacity), ring(b, "dst", dst_capacity))
}

/// The exporter, a child of `ns`: listens on `port`, consumes `ring` in `ns`.
pub fn exporter(
    label: &str,
    ns: &Namespace,
    ring: &str,
    key: &str,
    port: u16,
    extra: &[&str],
) -> Child {
    let listen = format!("tcp/127.0.0.1:{port}");
    let mut more = vec!["--ack-timeout-ms", "300"];
    more.extend_from_slice(extra);
    bridge(label, ns, "export", ring, key, ["--listen", &listen], &more)
}

/// The importer, a child of `ns`: connects to `port`, publishes into `ring` in `ns`.
pub fn importer(label: &str, ns: &Namespace, ring: &str, key: &str, port: u16) -> Child {
    importer_with(label, ns, ring, key, port, &[])
}

/// As [`importer`], with `extra` flags.
pub fn importer_with(
    label: &str,
    ns: &Namespace,
    ring: &str,
    key: &str,
    port: u16,
    extra: &[&str],
) -> Child {
    let connect = format!("tcp/127.0.0.1:{port}");
    bridge(
        label,
        ns,
        "import",
        ring,
        key,
        ["--connect", &connect],
        extra,
    )
}

/// `shmring-bridge VERB` on `ring` of `ns` with `key`, reaching the other side at
/// `endpoint`, as a child of `ns`.
fn bridge(
    label: &str,
    ns: &Namespace,
    verb: &str,
    ring: &str,
    key: &str,
    endpoint: [&str; 2],
    extra: &[&str],
) -> Child {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_shmring-bridge"));
    cmd.args([verb, "--namespace", ns.name(), "--ring", ring, "--key", key])
        .args(endpoint)
        .args(["--zenoh-set", RETRY, "--stats-ms", "50"])
        .args(extra);
    ns.spawn(label, cmd)
}

/// Read counter lines from `child` until one satisfies `done`; return it. Bounded: each
/// line by the kit's deadline, the whole wait by the same deadline.
pub fn stats_until(child: &mut Child, mut done: impl FnMut(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + shmring_testkit::WAIT;
    let mut last = Value::Null;
    loop {
        if std::time::Instant::now() > deadline {
            child.fail(&format!(
                "counters never reached the condition; last: {last}"
            ));
        }
        let line = child.expect_line("{");
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("counter line {line:?} from {}: {e}", child.label()));
        if done(&v) {
            return v;
        }
        last = v;
    }
}

/// A counter of a JSON line (0 if absent).
pub fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The payload of the `i`-th event: `i` and a check word, so a torn or shifted event shows.
pub fn payload(i: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&i.to_le_bytes());
    p[8..].copy_from_slice(&(i ^ 0x5a5a_5a5a_5a5a_5a5a).wrapping_mul(31).to_le_bytes());
    p
}

/// The index a payload carries, if its check word is right.
pub fn check(p: &[u8]) -> Option<u64> {
    if p.len() != 16 {
        return None;
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&p[..8]);
    let i = u64::from_le_bytes(w);
    (p[..] == payload(i)[..]).then_some(i)
}

/// Wait (bounded) until the exporter `child` has its consumer `name` ACTIVE in `ring`;
/// on timeout fail with the child's stderr.
pub fn await_attached(child: &mut Child, ring: &shmring::Ring, name: &str) {
    let deadline = std::time::Instant::now() + shmring_testkit::WAIT;
    while !ring
        .info()
        .consumers
        .iter()
        .any(|c| c.name == name && c.state == "ACTIVE")
    {
        if std::time::Instant::now() > deadline {
            child.fail(&format!("consumer {name:?} not attached"));
        }
        // A watchdog poll of the consumer table, not a synchronisation sleep.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
