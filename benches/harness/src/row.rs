//! A row: one measured thing, as printed in the markdown tables and written to `--json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;
use shmring_peers::kit::Measured;

/// The shape of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Hand-off latency percentiles and the consumer's CPU.
    Latency,
    /// Time of each publish call.
    Cost,
    /// Delivered events per second.
    Throughput,
    /// Idle CPU of a stepping thread and its wake-up latency.
    Idle,
}

/// One row. Fields the row does not have are `null` in JSON and blank in the tables.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Suite (`floor`, `latency`, ...).
    pub suite: String,
    /// Table within the suite.
    pub group: String,
    /// What was measured.
    pub name: String,
    /// Table shape.
    pub kind: Kind,
    /// Median (ns).
    pub p50_ns: Option<u64>,
    /// 99th percentile (ns).
    pub p99_ns: Option<u64>,
    /// 99.9th percentile (ns).
    pub p999_ns: Option<u64>,
    /// Largest sample (ns).
    pub max_ns: Option<u64>,
    /// Mean (ns).
    pub mean_ns: Option<f64>,
    /// Delivered events per second (throughput rows), over the whole run.
    pub ops_per_sec: Option<f64>,
    /// The best delivered rate over any 100 ms of the run (50 ms or less with `--quick`).
    pub best_ops_per_sec: Option<f64>,
    /// Consumer's CPU share over the measurement (1.0 = one core).
    pub consumer_cpu: Option<f64>,
    /// Producer's CPU share.
    pub producer_cpu: Option<f64>,
    /// Recorded samples (latency) or delivered events (throughput).
    pub samples: u64,
    /// Events published (throughput rows).
    pub published: Option<u64>,
    /// Events delivered (throughput rows).
    pub delivered: Option<u64>,
    /// Events lost (published and never delivered, or skipped by lapping).
    pub dropped: Option<u64>,
    /// The floor row this row is divided by.
    pub floor: Option<String>,
    /// p50 / floor p50.
    pub x_floor_p50: Option<f64>,
    /// p99.9 / floor p99.9.
    pub x_floor_p999: Option<f64>,
    /// Percentile curve for the SVG: (percentile, ns).
    pub curve: Vec<(f64, u64)>,
    /// Anything else the row reports (wake-ups, fence mode, pacer lateness, ...).
    pub extra: BTreeMap<String, f64>,
    /// Why the row has no numbers.
    pub error: Option<String>,
}

/// Percentiles of the SVG curve.
const CURVE: [f64; 8] = [0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 0.99999, 1.0];

impl Row {
    /// An empty row.
    pub fn new(suite: &str, group: &str, name: &str, kind: Kind) -> Self {
        Self {
            suite: suite.into(),
            group: group.into(),
            name: name.into(),
            kind,
            p50_ns: None,
            p99_ns: None,
            p999_ns: None,
            max_ns: None,
            mean_ns: None,
            ops_per_sec: None,
            best_ops_per_sec: None,
            consumer_cpu: None,
            producer_cpu: None,
            samples: 0,
            published: None,
            delivered: None,
            dropped: None,
            floor: None,
            x_floor_p50: None,
            x_floor_p999: None,
            curve: Vec::new(),
            extra: BTreeMap::new(),
            error: None,
        }
    }

    /// Fill from a measurement: the histogram, and the well-known numbers.
    pub fn with(mut self, m: &Measured) -> Self {
        if let Some(h) = &m.hist {
            self.set_hist(h);
        }
        self.ops_per_sec = m.get("ops_per_sec");
        self.best_ops_per_sec = m.get("best_ops_per_sec");
        self.consumer_cpu = m.get("consumer_cpu");
        self.producer_cpu = m.get("producer_cpu");
        self.published = m.get("published").map(|v| v as u64);
        self.delivered = m.get("delivered").map(|v| v as u64);
        self.dropped =
            m.get("dropped")
                .map(|v| v as u64)
                .or(match (self.published, self.delivered) {
                    (Some(p), Some(d)) if self.kind == Kind::Throughput => {
                        Some(p.saturating_sub(d))
                    }
                    _ => None,
                });
        if self.kind == Kind::Throughput {
            self.samples = self.delivered.unwrap_or(0);
        }
        for (k, v) in &m.values {
            if !matches!(
                k.as_str(),
                "ops_per_sec"
                    | "consumer_cpu"
                    | "producer_cpu"
                    | "published"
                    | "delivered"
                    | "dropped"
            ) {
                self.extra.insert(k.clone(), *v);
            }
        }
        self
    }

    /// Percentiles from a histogram.
    pub fn set_hist(&mut self, h: &Histogram<u64>) {
        if h.is_empty() {
            return;
        }
        self.p50_ns = Some(h.value_at_quantile(0.5));
        self.p99_ns = Some(h.value_at_quantile(0.99));
        self.p999_ns = Some(h.value_at_quantile(0.999));
        self.max_ns = Some(h.max());
        self.mean_ns = Some(h.mean());
        self.samples = h.len();
        let mut last = 0.0;
        for q in CURVE {
            // Only the percentiles the sample count resolves (plus the max).
            if q < 1.0 && (1.0 - q) * (h.len() as f64) < 1.0 {
                continue;
            }
            if q > last {
                self.curve.push((q * 100.0, h.value_at_quantile(q)));
                last = q;
            }
        }
    }

    /// A row that failed.
    pub fn failed(mut self, e: &anyhow::Error) -> Self {
        self.error = Some(format!("{e:#}"));
        self
    }

    /// Divide by a floor row.
    pub fn against(&mut self, floor: &Row) {
        self.floor = Some(floor.name.clone());
        if let (Some(a), Some(b)) = (self.p50_ns, floor.p50_ns) {
            self.x_floor_p50 = Some(a as f64 / b.max(1) as f64);
        }
        if let (Some(a), Some(b)) = (self.p999_ns, floor.p999_ns) {
            self.x_floor_p999 = Some(a as f64 / b.max(1) as f64);
        }
    }
}

/// `1234` -> `1,234`; ns values above 10 µs in µs.
pub fn ns(v: Option<u64>) -> String {
    match v {
        None => String::new(),
        Some(v) if v >= 1_000_000 => format!("{:.1} ms", v as f64 / 1e6),
        Some(v) if v >= 10_000 => format!("{:.1} µs", v as f64 / 1e3),
        Some(v) => format!("{v} ns"),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{:.1}%", v * 100.0))
}

fn ratio(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.2}x"))
}

/// Events per second, human-sized.
pub fn rate(v: Option<f64>) -> String {
    match v {
        None => String::new(),
        Some(v) if v >= 1e6 => format!("{:.2} M/s", v / 1e6),
        Some(v) if v >= 1e3 => format!("{:.1} k/s", v / 1e3),
        Some(v) => format!("{v:.0} /s"),
    }
}

/// Render the rows of one group as a markdown table.
pub fn table(rows: &[&Row]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let mut out = String::new();
    let head: &[&str] = match first.kind {
        Kind::Latency => &[
            "row",
            "p50",
            "p99",
            "p99.9",
            "max",
            "consumer CPU",
            "samples",
            "floor",
            "p50 / floor",
            "p99.9 / floor",
        ],
        Kind::Cost => &["row", "p50", "p99", "p99.9", "max", "mean", "samples", "vs"],
        Kind::Throughput => &[
            "row",
            "delivered (run)",
            "best 100 ms",
            "ns/event (best)",
            "published",
            "delivered (n)",
            "dropped",
            "consumer CPU",
            "producer CPU",
            "vs floor",
        ],
        Kind::Idle => &[
            "row",
            "idle CPU",
            "wake-up p50",
            "p99",
            "max",
            "samples",
            "floor",
            "p50 / floor",
        ],
    };
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let _ = writeln!(
        out,
        "|{}",
        head.iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { " --- |" } else { " ---: |" })
            .collect::<String>()
    );
    for r in rows {
        if let Some(e) = &r.error {
            let _ = writeln!(out, "| {} | error: {} |", r.name, e.replace('|', "/"));
            continue;
        }
        let cells: Vec<String> = match r.kind {
            Kind::Latency => vec![
                r.name.clone(),
                ns(r.p50_ns),
                ns(r.p99_ns),
                ns(r.p999_ns),
                ns(r.max_ns),
                pct(r.consumer_cpu),
                r.samples.to_string(),
                r.floor.clone().unwrap_or_default(),
                ratio(r.x_floor_p50),
                ratio(r.x_floor_p999),
            ],
            Kind::Cost => vec![
                r.name.clone(),
                ns(r.p50_ns),
                ns(r.p99_ns),
                ns(r.p999_ns),
                ns(r.max_ns),
                r.mean_ns.map_or(String::new(), |m| format!("{m:.0} ns")),
                r.samples.to_string(),
                match (&r.floor, r.x_floor_p50) {
                    (Some(f), Some(x)) => format!("{x:.2}x {f}"),
                    _ => String::new(),
                },
            ],
            Kind::Throughput => vec![
                r.name.clone(),
                rate(r.ops_per_sec),
                rate(r.best_ops_per_sec),
                r.best_ops_per_sec
                    .or(r.ops_per_sec)
                    .map_or(String::new(), |v| format!("{:.1}", 1e9 / v.max(1.0))),
                r.published.map_or(String::new(), |v| v.to_string()),
                r.delivered.map_or(String::new(), |v| v.to_string()),
                r.dropped.map_or(String::new(), |v| v.to_string()),
                pct(r.consumer_cpu),
                pct(r.producer_cpu),
                match (&r.floor, r.extra.get("x_floor_rate")) {
                    (Some(f), Some(x)) => format!("{x:.2}x {f}"),
                    _ => String::new(),
                },
            ],
            Kind::Idle => vec![
                r.name.clone(),
                pct(r.extra.get("idle_cpu").copied()),
                ns(r.p50_ns),
                ns(r.p99_ns),
                ns(r.max_ns),
                r.samples.to_string(),
                r.floor.clone().unwrap_or_default(),
                ratio(r.x_floor_p50),
            ],
        };
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    out
}

/// Print every group of `suite`, in the order measured.
pub fn print_suite(rows: &[Row], suite: &str) -> String {
    let mut out = String::new();
    let mut groups: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.suite == suite) {
        if !groups.contains(&r.group.as_str()) {
            groups.push(&r.group);
        }
    }
    for g in groups {
        let rs: Vec<&Row> = rows
            .iter()
            .filter(|r| r.suite == suite && r.group == g)
            .collect();
        let _ = writeln!(out, "\n#### {suite}: {g}\n");
        out.push_str(&table(&rs));
    }
    out
}
