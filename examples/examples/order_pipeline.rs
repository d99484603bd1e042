//! An order pipeline across processes: the Disruptor's diamond, a worker pool, and a poison
//! order that is skipped and reported while the rest flow.
//!
//! ```text
//! cargo run --release -p shmring-examples --example order_pipeline             # 2 gateways x 200,000 orders
//! cargo run --release -p shmring-examples --example order_pipeline -- 1000000  # orders per gateway
//! ```
//!
//! ```text
//!  gateway 0 ─┐                 ┌─ journal ─┐
//!             ├─► ring orders ──┤           ├─► matching ─► ring fills ─► notify (worker group:
//!  gateway 1 ─┘                 └─ risk ────┘                            notifier 0, notifier 1)
//! ```
//!
//! - Two gateway processes publish orders into one multi-producer ring.
//! - `journal` and `risk` read every order in parallel; `matching` reads an order only once
//!   both have committed it (`ConsumerOptions::after`). The three are declared in the ring's
//!   configuration, so they may start in any order and none misses an order.
//! - `matching` turns each order into a fill on a second ring; one order of gateway 0 has a
//!   quantity of 0, which matching refuses: its skip policy reports it once as a dead letter
//!   and the pipeline carries on.
//! - Two notifier processes share the fills as the worker group `notify`: each fill goes to
//!   one of them. The group is declared in the fills ring's configuration
//!   (`declared_groups`), so fills published before a notifier starts wait for the group.
//! - Each stage prints its throughput and its end-to-end latency (from the gateway's publish
//!   to the stage's handler, one clock for all processes: `CLOCK_MONOTONIC`); the parent
//!   prints the table and checks every count, then drains both rings and removes them.

use std::error::Error;
use std::fmt;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use shmring::{
    names, ConsumerOptions, ErrorPolicy, Event, ProducerMode, Ring, RingConfig, RunExit,
    WaitStrategy,
};
use shmring_examples::{field, note, say, Children};

const GATEWAYS: u32 = 2;
const NOTIFIERS: u32 = 2;
const DEFAULT_ORDERS: u64 = 200_000;
/// The order of gateway 0 with this number has quantity 0: the poison order.
const POISON: u64 = 1_000;
const STAGES: [&str; 3] = ["journal", "risk", "matching"];
const GROUP: &str = "notify";
/// The parent gives up (and kills the children) after this long.
const WATCHDOG: Duration = Duration::from_secs(180);
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
const USAGE: &str = "usage: order_pipeline [ORDERS_PER_GATEWAY]";

/// An order, as a gateway publishes it.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Order {
    /// `CLOCK_MONOTONIC` nanoseconds at publish.
    sent_ns: u64,
    /// The gateway's own order number.
    number: u64,
    /// Price in ticks.
    price: u64,
    gateway: u32,
    /// 0 buy, 1 sell.
    side: u32,
    quantity: u32,
    _pad: u32,
}

/// A fill, as matching publishes it for the notifiers.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Fill {
    /// The order's `sent_ns`: latency is measured from the gateway.
    sent_ns: u64,
    number: u64,
    price: u64,
    gateway: u32,
    quantity: u32,
}

fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
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
        // Child roles: order_pipeline <role> <namespace> <orders ring> <fills ring> <index> <orders>
        Some(role @ ("gateway" | "journal" | "risk" | "matching" | "notifier")) => {
            child(role, &args[1..])
        }
        Some("-h" | "--help") => {
            say!("{USAGE}");
            Ok(())
        }
        Some(n) if args.len() == 1 => parent(parse(n, "ORDERS_PER_GATEWAY")?),
        None => parent(DEFAULT_ORDERS),
        Some(_) => Err(USAGE.into()),
    }
}

// ---------------------------------------------------------------------------------------
// Parent

fn parent(per_gateway: u64) -> Result<(), Box<dyn Error>> {
    if per_gateway <= POISON {
        return Err(format!("ORDERS_PER_GATEWAY must be above {POISON}").into());
    }
    let namespace = names::default_namespace();
    let orders_name = format!("orders-{}", std::process::id());
    let fills_name = format!("fills-{}", std::process::id());
    let orders_config = RingConfig {
        capacity: 4096,
        slot_size: 64,
        max_producers: GATEWAYS,
        producer_mode: ProducerMode::Multi,
        declared: STAGES.iter().map(|s| s.to_string()).collect(),
        ..RingConfig::default()
    };
    let fills_config = RingConfig {
        capacity: 4096,
        slot_size: 64,
        max_producers: 1,
        producer_mode: ProducerMode::Single,
        declared_groups: vec![GROUP.to_owned()],
        ..RingConfig::default()
    };
    let dir = names::namespace_dir(&namespace)?;
    let dir_existed = dir.exists();
    // Before the rings exist: from here a Ctrl-C ends the waits, not the process, and the
    // rings are removed.
    let mut children = Children::interruptible()?;
    let orders = Ring::create(&namespace, &orders_name, &orders_config)?;
    let fills = match Ring::create(&namespace, &fills_name, &fills_config) {
        Ok(r) => r,
        Err(e) => {
            drop(orders);
            Ring::remove(&namespace, &orders_name)?;
            return Err(e.into());
        }
    };
    // Said once the ring exists, and never before its cleanup below: a stdout that cannot
    // be written ends the run there, and the ring is still removed.
    let said = (|| -> Result<(), Box<dyn Error>> {
        say!(
            "rings {} and {}: {GATEWAYS} gateways x {per_gateway} orders -> journal, risk -> \
             matching -> {NOTIFIERS} notifiers (group {GROUP:?})",
            orders.path().display(),
            fills.path().display(),
        );
        Ok(())
    })();
    let args = [namespace.clone(), orders_name.clone(), fills_name.clone()];
    let result =
        said.and_then(|()| run_children(&orders, &fills, &mut children, &args, per_gateway));
    children.kill_all();
    drop((orders, fills));
    Ring::remove(&namespace, &orders_name)?;
    Ring::remove(&namespace, &fills_name)?;
    if !dir_existed {
        // Fails (harmlessly) if someone else put a ring there meanwhile.
        let _ = std::fs::remove_dir(&dir);
    }
    say!("removed both rings");
    result
}

/// Start the stage process `role` number `index` (named `"{role} {index}"`).
fn spawn(
    children: &mut Children,
    role: &str,
    index: u32,
    rings: &[String; 3],
    orders: u64,
) -> Result<(), Box<dyn Error>> {
    let mut args = vec![role.to_owned()];
    args.extend(rings.iter().cloned());
    args.extend([index.to_string(), orders.to_string()]);
    children.spawn(format!("{role} {index}"), &args)
}

/// What one stage process reports: `stage=NAME events=N ... key=value`.
struct Report(String);

impl Report {
    fn get(&self, key: &str) -> Result<u64, Box<dyn Error>> {
        field(&self.0, key)
    }
}

fn run_children(
    orders: &Ring,
    fills: &Ring,
    children: &mut Children,
    rings: &[String; 3],
    per_gateway: u64,
) -> Result<(), Box<dyn Error>> {
    let deadline = Instant::now() + WATCHDOG;
    // Any order: the stages and the notifier group are declared in the rings'
    // configurations, so each keeps what is published before its processes start.
    spawn(children, "matching", 0, rings, per_gateway)?;
    for i in 0..GATEWAYS {
        spawn(children, "gateway", i, rings, per_gateway)?;
    }
    spawn(children, "risk", 0, rings, per_gateway)?;
    spawn(children, "journal", 0, rings, per_gateway)?;
    for i in 0..NOTIFIERS {
        spawn(children, "notifier", i, rings, per_gateway)?;
    }

    let mut sent = 0;
    for i in 0..GATEWAYS {
        sent += Report(children.finish(&format!("gateway {i}"), deadline)?).get("orders")?;
    }
    // Shutdown: no more orders; every stage finishes what was accepted, then the fills.
    // A Ctrl-C ends the drain too: the consumers it waits for may have died of it.
    let drained = orders.drain_while(DRAIN_TIMEOUT, || children.check_interrupt().is_ok());
    children.check_interrupt()?;
    drained?;
    let mut reports = Vec::new();
    for stage in STAGES {
        reports.push(Report(children.finish(&format!("{stage} 0"), deadline)?));
    }
    let drained = fills.drain_while(DRAIN_TIMEOUT, || children.check_interrupt().is_ok());
    children.check_interrupt()?;
    drained?;
    for i in 0..NOTIFIERS {
        reports.push(Report(children.finish(&format!("notifier {i}"), deadline)?));
    }

    for r in &reports {
        say!("{}", r.0.trim());
    }
    say!("");
    say!(
        "{:<12} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "stage",
        "events",
        "events/s",
        "p50 µs",
        "p99 µs",
        "skipped"
    );
    for r in &reports {
        say!(
            "{:<12} {:>10} {:>12} {:>10.1} {:>10.1} {:>10}",
            r.0.split_whitespace()
                .next()
                .and_then(|s| s.strip_prefix("stage="))
                .unwrap_or("?"),
            r.get("events")?,
            r.get("rate")?,
            r.get("p50_ns")? as f64 / 1e3,
            r.get("p99_ns")? as f64 / 1e3,
            r.get("dead_lettered")?,
        );
    }
    say!("");

    // Every count: journal and risk saw every order, matching all but the poison one
    // (dead-lettered once), the notifiers shared the fills without loss or duplicate.
    let [journal, risk, matching, notifiers @ ..] = reports.as_slice() else {
        return Err("missing reports".into());
    };
    let expected = u64::from(GATEWAYS) * per_gateway;
    let mut problems = Vec::new();
    if sent != expected {
        problems.push(format!("gateways sent {sent} of {expected}"));
    }
    for r in [journal, risk] {
        if r.get("events")? != sent {
            problems.push(format!("{} saw {} of {sent} orders", r.0, r.get("events")?));
        }
    }
    if matching.get("events")? != sent - 1 || matching.get("dead_lettered")? != 1 {
        problems.push(format!(
            "matching: {} (expected {} and 1 dead letter)",
            matching.0,
            sent - 1
        ));
    }
    let shared: u64 = notifiers
        .iter()
        .map(|r| r.get("events"))
        .sum::<Result<u64, _>>()?;
    if shared != sent - 1
        || notifiers
            .iter()
            .any(|r| r.get("redelivered").ok() != Some(0))
    {
        problems.push(format!(
            "the notifiers shared {shared} of {} fills",
            sent - 1
        ));
    }
    if !problems.is_empty() {
        return Err(problems.join("; ").into());
    }
    say!(
        "ok: {sent} orders journaled and risk-checked, {} matched, 1 poison order skipped and \
         reported, {shared} fills shared by {NOTIFIERS} notifiers",
        sent - 1
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Children

fn child(role: &str, args: &[String]) -> Result<(), Box<dyn Error>> {
    let [namespace, orders_ring, fills_ring, index, per_gateway] = args else {
        return Err(
            "child roles take: <namespace> <orders ring> <fills ring> <index> <orders>".into(),
        );
    };
    let index = parse(index, "index")? as u32;
    let per_gateway = parse(per_gateway, "orders")?;
    let orders = Ring::open(namespace, orders_ring)?;
    match role {
        "gateway" => gateway(&orders, index, per_gateway),
        "notifier" => notifier(&Ring::open(namespace, fills_ring)?, index),
        "matching" => matching(&orders, &Ring::open(namespace, fills_ring)?),
        stage => check_stage(&orders, stage),
    }
}

fn gateway(orders: &Ring, index: u32, count: u64) -> Result<(), Box<dyn Error>> {
    let mut producer = orders.producer()?;
    for number in 0..count {
        let order = Order {
            sent_ns: now_ns(),
            number,
            price: 10_000 + (number % 100),
            gateway: index,
            side: (number % 2) as u32,
            quantity: if index == 0 && number == POISON {
                0
            } else {
                1 + (number % 50) as u32
            },
            _pad: 0,
        };
        producer.publish_value(&order)?;
    }
    say!("stage=gateway orders={count}");
    Ok(())
}

/// Latency and throughput of one stage.
struct Meter {
    latency: Histogram<u64>,
    first: Option<Instant>,
    last: Instant,
    events: u64,
}

impl Meter {
    fn new() -> Result<Self, Box<dyn Error>> {
        Ok(Meter {
            latency: Histogram::new_with_bounds(1, 60_000_000_000, 3)?,
            first: None,
            last: Instant::now(),
            events: 0,
        })
    }

    fn record(&mut self, sent_ns: u64) {
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = now;
        self.events += 1;
        self.latency
            .saturating_record(now_ns().saturating_sub(sent_ns).max(1));
    }

    fn report(&self, stage: &str, extra: &str) -> String {
        let secs = self
            .first
            .map_or(0.0, |f| self.last.duration_since(f).as_secs_f64());
        let rate = if secs > 0.0 {
            (self.events as f64 / secs) as u64
        } else {
            0
        };
        format!(
            "stage={stage} events={} rate={rate} p50_ns={} p99_ns={} {extra}",
            self.events,
            self.latency.value_at_quantile(0.5),
            self.latency.value_at_quantile(0.99),
        )
    }
}

fn read<T: bytemuck::AnyBitPattern>(ev: &Event<'_>) -> Result<T, String> {
    ev.read::<T>().ok_or_else(|| {
        format!(
            "event {} has {} bytes, not an {}",
            ev.sequence(),
            ev.bytes().len(),
            std::any::type_name::<T>()
        )
    })
}

/// `journal` and `risk`: read every order, in parallel with each other.
fn check_stage(orders: &Ring, stage: &str) -> Result<(), Box<dyn Error>> {
    let mut consumer =
        orders.consumer(ConsumerOptions::durable(stage).wait(WaitStrategy::Blocking))?;
    let mut meter = Meter::new()?;
    let mut checksum = 0u64;
    let mut exposure = [0i64; GATEWAYS as usize];
    consumer.run_fallible(
        |ev| {
            let order: Order = read(&ev)?;
            meter.record(order.sent_ns);
            if stage == "journal" {
                checksum = checksum.rotate_left(5) ^ order.number ^ order.price;
            } else {
                let signed = if order.side == 0 { 1 } else { -1 } * i64::from(order.quantity);
                let g = (order.gateway as usize).min(exposure.len() - 1);
                exposure[g] += signed;
            }
            Ok::<(), String>(())
        },
        || false,
    )?;
    say!(
        "{}",
        meter.report(
            stage,
            &format!(
                "dead_lettered={} checksum={checksum:x}",
                consumer.stats().dead_lettered
            )
        )
    );
    Ok(())
}

/// Why matching refuses an order.
#[derive(Debug)]
struct Refused(String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `matching`: after journal and risk, one fill per order on the fills ring.
fn matching(orders: &Ring, fills: &Ring) -> Result<(), Box<dyn Error>> {
    let mut consumer = orders.consumer(
        ConsumerOptions::durable("matching")
            .after(["journal", "risk"])
            .on_error(ErrorPolicy::Skip { attempts: 2 })
            .wait(WaitStrategy::Blocking),
    )?;
    consumer.on_dead_letter(|dead| {
        note!(
            "matching: order at sequence {} skipped after {} attempts: {}",
            dead.sequence,
            dead.attempts,
            dead.error
        );
    });
    let mut producer = fills.producer()?;
    let mut meter = Meter::new()?;
    let exit = consumer.run_fallible(
        |ev| {
            let order: Order = read(&ev).map_err(Refused)?;
            if order.quantity == 0 {
                return Err(Refused(format!(
                    "order {} of gateway {} has quantity 0",
                    order.number, order.gateway
                )));
            }
            meter.record(order.sent_ns);
            let fill = Fill {
                sent_ns: order.sent_ns,
                number: order.number,
                price: order.price,
                gateway: order.gateway,
                quantity: order.quantity,
            };
            producer
                .publish_value(&fill)
                .map_err(|e| Refused(format!("publishing the fill: {e}")))?;
            Ok(())
        },
        || false,
    )?;
    let s = consumer.stats();
    say!(
        "{}",
        meter.report(
            "matching",
            &format!(
                "dead_lettered={} exit={}",
                s.dead_lettered,
                exit == RunExit::Closed
            )
        )
    );
    Ok(())
}

/// A notifier: one member of the worker group that shares the fills.
fn notifier(fills: &Ring, index: u32) -> Result<(), Box<dyn Error>> {
    let mut consumer =
        fills.consumer(ConsumerOptions::worker(GROUP).wait(WaitStrategy::Blocking))?;
    let mut meter = Meter::new()?;
    let mut notional = 0u64;
    consumer.run_fallible(
        |ev| {
            let fill: Fill = read(&ev)?;
            meter.record(fill.sent_ns);
            notional = notional.wrapping_add(fill.price * u64::from(fill.quantity));
            Ok::<(), String>(())
        },
        || false,
    )?;
    let s = consumer.stats();
    say!(
        "{}",
        meter.report(
            &format!("notifier-{index}"),
            &format!(
                "dead_lettered={} redelivered={} notional={notional}",
                s.dead_lettered, s.redelivered
            )
        )
    );
    Ok(())
}
