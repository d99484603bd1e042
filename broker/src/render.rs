//! The status screen: a header for the broker, then per ring a summary line, a consumer
//! table and a producer table.

use std::fmt::Write;
use std::time::Duration;

use comfy_table::{presets, Cell, CellAlignment, ContentArrangement, Table};

use crate::human::format_duration;
use crate::report::{RingReport, StatusReport};

fn ms(v: u64) -> String {
    format_duration(Duration::from_millis(v))
}

/// The width of the terminal on stdout, if it is one and says.
pub fn terminal_width() -> Option<usize> {
    let ws = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

/// The whole screen as text. With a `width` (a terminal), tables fit in it; without one
/// (piped), every table has plain columns separated by spaces and is never wrapped.
pub fn render(r: &StatusReport, width: Option<usize>) -> String {
    let mut out = String::new();
    let b = &r.broker;
    if b.running {
        let _ = writeln!(
            out,
            "namespace {:?}: broker pid {}, epoch {}, up {}, last sweep {} ago (every {}), {} sweeps",
            r.namespace,
            b.pid.unwrap_or(0),
            b.epoch.unwrap_or(0),
            ms(b.uptime_ms.unwrap_or(0)),
            ms(b.last_sweep_ms.unwrap_or(0)),
            format_duration(Duration::from_micros(b.sweep_period_us.unwrap_or(0))),
            b.sweeps.unwrap_or(0),
        );
    } else {
        let why = b
            .unreachable
            .as_deref()
            .unwrap_or("no answer on its socket");
        let what = if why.contains("permission denied") {
            "BROKER NOT REACHABLE"
        } else {
            "BROKER DOWN"
        };
        let _ = writeln!(
            out,
            "namespace {:?}: {what} ({why}{}); read from the segments directly, stalls not tracked",
            r.namespace,
            b.pid
                .map_or(String::new(), |p| format!("; last broker was pid {p}")),
        );
    }
    if r.rings.is_empty() && r.unreadable.is_empty() {
        let _ = writeln!(out, "\nno rings");
    }
    for ring in &r.rings {
        out.push('\n');
        out.push_str(&ring_block(ring, b.running, width));
    }
    for u in &r.unreadable {
        let _ = writeln!(out, "\nUNREADABLE {}: {}", u.path, u.error);
    }
    let verdict = match (r.healthy, b.running) {
        (true, true) => "all healthy",
        (true, false) => {
            "nothing unhealthy in the segments (without the broker, stalls are not tracked)"
        }
        (false, _) => "UNHEALTHY: see the states above",
    };
    let _ = writeln!(out, "\n{verdict}");
    out
}

fn table(header: &[&str], width: Option<usize>) -> Table {
    let mut t = Table::new();
    match width {
        Some(w) => {
            t.load_preset(presets::UTF8_HORIZONTAL_ONLY)
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(u16::try_from(w).unwrap_or(u16::MAX));
        }
        None => {
            t.load_preset(presets::NOTHING)
                .set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    t.set_header(header.iter().map(Cell::new).collect::<Vec<_>>());
    t
}

fn right(t: &mut Table, from: usize) {
    let n = t.column_count();
    for i in from..n {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

fn ring_block(ring: &RingReport, swept: bool, width: Option<usize>) -> String {
    let mut out = String::new();
    let slowest = ring.slowest.as_ref().map_or("none".to_owned(), |s| {
        let name = if s.name.is_empty() {
            format!("#{}", s.index)
        } else {
            s.name.clone()
        };
        format!("{name} (lag {})", s.lag)
    });
    let h = &ring.health;
    let _ =
        writeln!(
        out,
        "ring {:?}  {}  run {}  epoch {}  capacity {} x {} B ({})  head {}  free {}  slowest {}",
        ring.name, ring.state, ring.run, ring.epoch, ring.capacity, ring.slot_size,
        ring.producer_mode, ring.head, ring.free, slowest
    );
    if swept {
        let _ = writeln!(
        out,
        "  health: stall after {}, unblock after {}; stalls {}, recoveries {}, deaths {}, releases {}, repaired claims {} ({} tombstoned)",
        ms(h.stall_threshold_ms), ms(h.unblock_timeout_ms), h.stalls, h.recoveries, h.deaths,
        h.releases, h.repaired_claims, h.tombstoned
    );
    }
    let mut c = table(
        &[
            "#",
            "consumer",
            "pid",
            "state",
            "kind",
            "policy",
            "wait",
            "parked",
            "sequence",
            "lag",
            "idle",
            "delivered",
            "skipped",
            "dropped",
            "wake-ups (net)",
        ],
        width,
    );
    for x in &ring.consumers {
        let kind = match (x.required, x.durable) {
            (true, true) => "required",
            (true, false) => "req/anon",
            (false, true) => "optional",
            (false, false) => "opt/anon",
        };
        c.add_row(vec![
            x.index.to_string(),
            if x.name.is_empty() {
                "-".into()
            } else {
                x.name.clone()
            },
            x.pid.to_string(),
            x.state.as_str().to_owned(),
            kind.to_owned(),
            if x.policy.is_empty() {
                "-".into()
            } else {
                x.policy.clone()
            },
            x.wait.clone(),
            if x.parked { "yes" } else { "no" }.to_owned(),
            x.sequence.to_string(),
            x.lag.to_string(),
            x.idle_ms.map_or("-".into(), ms),
            x.delivered.to_string(),
            x.skipped.to_string(),
            x.dropped_behind.to_string(),
            format!("{} ({})", x.wakeups, x.net_wakeups),
        ]);
    }
    right(&mut c, 8);
    if ring.consumers.is_empty() {
        let _ = writeln!(out, "  no consumers");
    } else {
        let _ = writeln!(out, "{c}");
    }
    let mut p = table(
        &[
            "#",
            "producer pid",
            "alive",
            "in flight",
            "published",
            "refused",
            "tombstoned",
            "repaired",
            "parks",
        ],
        width,
    );
    for x in &ring.producers {
        p.add_row(vec![
            x.index.to_string(),
            x.pid.to_string(),
            if x.alive { "yes" } else { "NO" }.to_owned(),
            x.in_flight.map_or("-".into(), |s| s.to_string()),
            x.published.to_string(),
            x.refused.to_string(),
            x.tombstoned.to_string(),
            x.repaired.to_string(),
            x.parks.to_string(),
        ]);
    }
    right(&mut p, 3);
    if ring.producers.is_empty() {
        let _ = writeln!(out, "  no producers");
    } else {
        let _ = writeln!(out, "{p}");
    }
    out
}
