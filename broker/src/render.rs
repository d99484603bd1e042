//! The status screen: a header for the broker, then per ring a summary line, a consumer
//! table and a producer table.

use std::fmt::Write;
use std::time::Duration;

use comfy_table::{presets, Cell, CellAlignment, ContentArrangement, Table};

// Names another process chose (a consumer's: any bytes but NUL) are printed through `shown`:
// raw, a line break could forge a row, an escape sequence rewrite the operator's terminal
// and a direction override reorder what a row shows.
use shmring::names::shown;

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
            "namespace {:?}: broker pid {}, epoch {}, up {}, last sweep {} ago (took {}, every {}), {} sweeps",
            r.namespace,
            b.pid.unwrap_or(0),
            b.epoch.unwrap_or(0),
            ms(b.uptime_ms.unwrap_or(0)),
            ms(b.last_sweep_ms.unwrap_or(0)),
            format_duration(Duration::from_micros(b.last_sweep_us.unwrap_or(0))),
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
        } else if why == crate::protocol::BUSY {
            "BROKER BUSY"
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
        out.push_str(&ring_block(&r.namespace, ring, b.running, width));
    }
    for u in &r.unreadable {
        // Both name a file anyone who can write the namespace's directory may have named.
        let _ = writeln!(out, "\nUNREADABLE {}: {}", shown(&u.path), shown(&u.error));
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

/// Each worker group with its members and each member's share of the events they
/// delivered.
fn groups(out: &mut String, ring: &RingReport) {
    for g in ring.consumers.iter().filter(|c| c.is_group) {
        let members: Vec<_> = ring
            .consumers
            .iter()
            .filter(|c| c.group == Some(g.index))
            .collect();
        // Wider than a counter: the counters come from the segment, and any member process
        // can write them.
        let total: u128 = members.iter().map(|m| u128::from(m.delivered)).sum();
        let _ = writeln!(
            out,
            "  group {:?} (#{}): work sequence {}, {} member entr{}, {} delivered",
            g.name,
            g.index,
            g.sequence,
            members.len(),
            if members.len() == 1 { "y" } else { "ies" },
            total
        );
        for m in members {
            let share = if total == 0 {
                0.0
            } else {
                m.delivered as f64 * 100.0 / total as f64
            };
            let _ = writeln!(
                out,
                "    member #{} pid {} {}: delivered {} ({share:.1}%), redelivered {}, at {}",
                m.index,
                m.pid,
                m.state.as_str(),
                m.delivered,
                m.redelivered,
                m.sequence
            );
        }
    }
}

fn consumer_name(name: &str, index: u32) -> String {
    if name.is_empty() {
        format!("#{index}")
    } else {
        shown(name)
    }
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

/// The error policy, and the event the handler is failing at with its failed attempts:
/// `skip`, `stop: 41 x1`.
fn on_error(x: &crate::report::ConsumerReport) -> String {
    let policy = if x.error_policy.is_empty() {
        "-"
    } else {
        x.error_policy.as_str()
    };
    match x.poison_sequence {
        Some(s) => format!("{policy}: {s} x{}", x.poison_attempts),
        None => policy.to_owned(),
    }
}

fn ring_block(namespace: &str, ring: &RingReport, swept: bool, width: Option<usize>) -> String {
    let mut out = String::new();
    let slowest = ring.slowest.as_ref().map_or("none".to_owned(), |s| {
        format!("{} (lag {})", consumer_name(&s.name, s.index), s.lag)
    });
    let h = &ring.health;
    let blocked = ring.blocked_by.as_ref().map_or(String::new(), |b| {
        let state = ring
            .consumers
            .iter()
            .find(|c| c.index == b.index)
            .map_or("", |c| c.state_label());
        format!("  BLOCKED by {} ({state})", consumer_name(&b.name, b.index))
    });
    let _ = writeln!(
        out,
        "ring {:?}  {}{blocked}  run {}  epoch {}  capacity {} x {} B{} ({})  head {}  free {}  slowest {}",
        ring.name, ring.state, ring.run, ring.epoch, ring.capacity, ring.slot_size,
        format_label(ring),
        ring.producer_mode, ring.head, ring.free, slowest
    );
    let blocker = ring
        .blocked_by
        .as_ref()
        .and_then(|b| ring.consumers.iter().find(|c| c.index == b.index));
    if let Some(g) = blocker.filter(|c| c.is_group || c.group.is_some()) {
        let group = ring
            .consumers
            .iter()
            .find(|c| c.is_group && (c.index == g.index || Some(c.index) == g.group))
            .map_or_else(|| "?".to_owned(), |c| c.name.clone());
        let _ = writeln!(
            out,
            "  producers wait for worker group {group:?}: start a member of it (ConsumerOptions::worker) to consume its events"
        );
    } else if let Some(b) = &ring.blocked_by {
        let first = ring
            .consumers
            .iter()
            .any(|c| c.index == b.index && c.awaits_first_attach());
        let what = if first {
            "start it (a declared consumer that never attached)"
        } else {
            "restart it"
        };
        if b.name.is_empty() {
            // Released by name only: an anonymous one's entry goes with its process.
            let _ = writeln!(
                out,
                "  producers wait for {} and it cannot move: {what} (an anonymous consumer's entry is freed once its process is gone)",
                consumer_name(&b.name, b.index),
            );
        } else {
            let _ = writeln!(
                out,
                "  producers wait for {} and it cannot move: {what}, or `{}` to let them go on without it",
                consumer_name(&b.name, b.index),
                shmring::names::broker_command(namespace, "release", &[&ring.name, &b.name], &[]),
            );
        }
    }
    for w in &ring.corrupt {
        let _ = writeln!(
            out,
            "  CORRUPT: {}; stop every process attached to it, `{}` and create it again",
            w.message,
            shmring::names::broker_command(namespace, "delete", &[&ring.name], &[])
        );
    }
    if swept {
        let _ = writeln!(
        out,
        "  health: stall after {}, unblock after {}; stalls {}, recoveries {}, deaths {}, releases {}, repaired claims {} ({} tombstoned)",
        ms(h.stall_threshold_ms), ms(h.unblock_timeout_ms), h.stalls, h.recoveries, h.deaths,
        h.releases, h.repaired_claims, h.tombstoned
    );
    }
    let _ = writeln!(
        out,
        "  wake: fence {}; parked now: {} consumer(s) ({} behind an upstream), {} producer(s); wake-ups paid by publishers {}, by consumers {}, by upstream consumers {}",
        ring.fence_mode, ring.consumer_waiters, ring.downstream_waiters, ring.producer_waiters,
        ring.consumer_wakes, ring.producer_wakes, ring.downstream_wakes
    );
    let mut c = table(
        &[
            "#",
            "consumer",
            "pid",
            "state",
            "kind",
            "policy",
            "on error",
            "wait",
            "parked",
            "sequence",
            "lag",
            "idle",
            "delivered",
            "skipped",
            "dropped",
            "wake-ups (net)",
            "dead letters",
        ],
        width,
    );
    for x in &ring.consumers {
        let kind = match (x.required, x.durable) {
            _ if x.is_group => "group",
            _ if x.group.is_some() => "member",
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
                shown(&x.name)
            },
            if x.pid == 0 {
                "-".into()
            } else {
                x.pid.to_string()
            },
            x.state_label().to_owned(),
            kind.to_owned(),
            if x.policy.is_empty() {
                "-".into()
            } else {
                x.policy.clone()
            },
            on_error(x),
            x.wait.clone(),
            if x.parked { "yes" } else { "no" }.to_owned(),
            x.sequence.to_string(),
            x.lag.to_string(),
            x.idle_ms.map_or("-".into(), ms),
            x.delivered.to_string(),
            x.skipped.to_string(),
            x.dropped_behind.to_string(),
            format!("{} ({})", x.wakeups, x.net_wakeups),
            x.dead_lettered.to_string(),
        ]);
    }
    right(&mut c, 9);
    if ring.consumers.is_empty() {
        let _ = writeln!(out, "  no consumers");
    } else {
        let _ = writeln!(out, "{c}");
    }
    // The dependency graph: each dependent consumer, what it reads behind, and how far it
    // trails the slowest of them.
    for x in ring.consumers.iter().filter(|x| !x.upstream.is_empty()) {
        let _ = writeln!(
            out,
            "  {} after: {} (stage lag {})",
            consumer_name(&x.name, x.index),
            x.upstream
                .iter()
                .map(|u| shown(u))
                .collect::<Vec<_>>()
                .join(", "),
            x.stage_lag.map_or("-".into(), |l| l.to_string())
        );
    }
    for x in ring.consumers.iter().filter(|x| x.awaits_first_attach()) {
        let _ = writeln!(
            out,
            "  {0} is DECLARED and has not attached yet: what is published waits for its first attach (start it, or remove it from declared_consumers and `{1}`)",
            consumer_name(&x.name, x.index),
            shmring::names::broker_command(namespace, "unsubscribe", &[&ring.name, &x.name], &[])
        );
    }
    groups(&mut out, ring);
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
    if let Some(x) = ring.producers.iter().find(|x| x.lone) {
        let _ = writeln!(
            out,
            "  lone claims: producer #{} (pid {}) has the line to itself until another producer claims",
            x.index, x.pid
        );
    }
    out
}

/// What a ring's slots carry, after its slot size on the status line: nothing for stamped
/// slots, " fixed events" (each of the slot size), " sized events of up to N B" (the slot less
/// its 8-byte length word).
fn format_label(ring: &RingReport) -> String {
    if ring.fixed_events {
        " fixed events".to_owned()
    } else if ring.sized_events {
        format!(
            " sized events of up to {} B",
            ring.slot_size
                .saturating_sub(shmring_layout::SIZED_LEN_SIZE)
        )
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_line_says_what_its_slots_carry() {
        let mut r = report();
        let line = |r: &StatusReport| {
            render(r, None)
                .lines()
                .find(|l| l.starts_with("ring \"r\""))
                .expect("the ring's line")
                .to_owned()
        };
        assert!(
            line(&r).contains("capacity 64 x 128 B (multi)"),
            "{}",
            line(&r)
        );
        r.rings[0].slot_size = 32;
        r.rings[0].sized_events = true;
        assert!(
            line(&r).contains("capacity 64 x 32 B sized events of up to 24 B (multi)"),
            "{}",
            line(&r)
        );
        r.rings[0].sized_events = false;
        r.rings[0].fixed_events = true;
        r.rings[0].slot_size = 16;
        assert!(
            line(&r).contains("capacity 64 x 16 B fixed events (multi)"),
            "{}",
            line(&r)
        );
    }

    fn report() -> StatusReport {
        let consumer = serde_json::json!({
            "index": 0, "name": "a-rather-long-consumer-name", "pid": 4242, "state": "DETACHED",
            "required": true, "durable": true, "policy": "alert", "wait": "timeout-blocking",
            "parked": false, "sequence": 10, "lag": 64, "idle_ms": 1500, "delivered": 10,
            "skipped": 0, "dropped_behind": 0, "wakeups": 3, "net_wakeups": 0, "failures": 2,
            "error_policy": "skip", "poison_sequence": 9, "poison_attempts": 2,
            "dead_lettered": 1, "retries": 1
        });
        let slowest = serde_json::json!({"index": 0, "name": "a-rather-long-consumer-name",
            "sequence": 10, "lag": 64});
        serde_json::from_value(serde_json::json!({
            "schema": 1, "namespace": "n", "healthy": false, "unreadable": [],
            "broker": {"running": true, "pid": 1, "epoch": 1, "uptime_ms": 10,
                "last_sweep_ms": 1, "sweep_period_us": 250000, "sweeps": 3,
                "watched_processes": 1},
            "rings": [{"name": "r", "state": "RUNNING", "run": 1, "epoch": 1, "capacity": 64,
                "slot_size": 128, "producer_mode": "multi", "head": 74, "free": 0,
                "closed": false, "slowest": slowest, "blocked_by": slowest,
                "fence_mode": "membarrier", "consumer_waiters": 0, "producer_waiters": 1,
                "consumer_wakes": 7, "producer_wakes": 2,
                "health": {"stall_threshold_ms": 500, "unblock_timeout_ms": 1000, "stalls": 0,
                    "recoveries": 0, "deaths": 0, "releases": 0, "freed": 0,
                    "policy_stops": 0, "repaired_claims": 0, "tombstoned": 0},
                "consumers": [consumer], "producers": []}]
        }))
        .expect("a report")
    }

    #[test]
    fn tables_fit_the_terminal_width() {
        // Narrower than any table can be: no panic, the text still says what matters.
        let narrow = render(&report(), Some(20));
        assert!(narrow.contains("BLOCKED by a-rather-long-consumer-name"));
        for width in [80, 100, 160] {
            let text = render(&report(), Some(width));
            let table_lines = text
                .lines()
                .filter(|l| l.starts_with('─') || l.starts_with('═') || l.starts_with(" "))
                .filter(|l| !l.starts_with("  "));
            for line in table_lines {
                assert!(line.chars().count() <= width, "{width}: {line:?}\n{text}");
            }
            assert!(text.contains("BLOCKED by a-rather-long-consumer-name (DETACHED)"));
        }
    }

    #[test]
    fn piped_tables_have_plain_columns_on_one_line_each() {
        let text = render(&report(), None);
        assert!(!text.contains('─') && !text.contains('═'), "{text}");
        let row = text
            .lines()
            .find(|l| l.contains("a-rather-long-consumer-name") && l.contains("4242"))
            .expect("the consumer row on one line");
        assert!(
            row.contains("DETACHED") && row.contains("timeout-blocking"),
            "{row}"
        );
        assert!(
            row.contains("skip: 9 x2"),
            "the poison event and its attempts: {row}"
        );
    }

    /// A worker group whose members' delivered counters (read from the segment, which any
    /// member process can write) add up past `u64::MAX`: the group's line gives their sum
    /// and each member its share, never an overflow.
    #[test]
    fn a_group_whose_members_counters_add_past_the_largest_count_renders() {
        let mut r = report();
        let ring = &mut r.rings[0];
        let mut group = ring.consumers[0].clone();
        (group.index, group.name, group.is_group) = (1, "g".into(), true);
        let mut members = Vec::new();
        for index in [2, 3] {
            let mut m = ring.consumers[0].clone();
            (m.index, m.name, m.group, m.delivered) = (index, String::new(), Some(1), u64::MAX);
            members.push(m);
        }
        ring.consumers.push(group);
        ring.consumers.extend(members);
        let text = render(&r, None);
        assert!(
            text.contains(&format!(
                "2 member entries, {} delivered",
                2 * u128::from(u64::MAX)
            )),
            "{text}"
        );
        assert!(text.contains("(50.0%)"), "{text}");
    }

    /// A consumer's name is whatever its process chose (any bytes but NUL): control
    /// characters in it (a line break, a terminal escape) are shown escaped wherever the
    /// name is printed, so a name cannot forge a row or clear the operator's screen.
    #[test]
    fn control_characters_in_a_consumer_name_are_shown_escaped() {
        let mut r = report();
        let name = "x\u{1b}[2J\nring \"fake\"  RUNNING";
        let ring = &mut r.rings[0];
        ring.consumers[0].name = name.into();
        ring.consumers[0].upstream = vec![name.into()];
        if let Some(b) = ring.blocked_by.as_mut() {
            b.name = name.into();
        }
        for width in [None, Some(120)] {
            let text = render(&r, width);
            assert!(!text.contains('\u{1b}'), "{text}");
            assert!(
                !text.lines().any(|l| l.starts_with("ring \"fake\"")),
                "{text}"
            );
            assert!(text.contains(r"x\u{1b}[2J\nring"), "{text}");
        }
        r.rings[0].consumers[0].name = "evil\u{202e}gnp.exe".into();
        let text = render(&r, None);
        assert!(!text.contains('\u{202e}'), "{text}");
        assert!(text.contains(r"evil\u{202e}gnp.exe"), "{text}");
        // A file anyone who can write the namespace's directory named.
        r.unreadable = vec![crate::report::Unreadable {
            path: "/dev/shm/shmring.n/x\u{1b}[2J.ring".into(),
            error: "not a ring: x\u{1b}[2J".into(),
        }];
        let text = render(&r, None);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            text.contains(r"UNREADABLE /dev/shm/shmring.n/x\u{1b}[2J.ring"),
            "{text}"
        );
    }

    /// A ring blocked by an anonymous consumer is not told to release it by name (the
    /// broker releases by name only): restarting its process is the way.
    #[test]
    fn a_ring_blocked_by_an_anonymous_consumer_is_not_told_to_release_it_by_name() {
        let mut r = report();
        let ring = &mut r.rings[0];
        ring.consumers[0].name = String::new();
        if let Some(b) = ring.blocked_by.as_mut() {
            b.name = String::new();
        }
        let text = render(&r, None);
        assert!(
            text.contains("producers wait for #0 and it cannot move"),
            "{text}"
        );
        assert!(!text.contains("broker release"), "{text}");
    }

    /// A declared consumer that never attached reads DECLARED, with no pid, and the text
    /// says to start it; the same entry once attached reads DETACHED.
    #[test]
    fn a_declared_consumer_waiting_for_its_first_attach_reads_declared() {
        let mut r = report();
        let c = &mut r.rings[0].consumers[0];
        assert!(!c.declared && c.attached_ever, "older reports: attached");
        (c.declared, c.attached_ever, c.pid) = (true, false, 0);
        let text = render(&r, None);
        assert!(
            text.contains("BLOCKED by a-rather-long-consumer-name (DECLARED)")
                && text.contains("start it (a declared consumer that never attached)")
                && text.contains("is DECLARED and has not attached yet")
                && text
                    .contains("`broker unsubscribe --namespace=n r a-rather-long-consumer-name`"),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.contains("a-rather-long-consumer-name") && l.contains("timeout-blocking"))
            .expect("the consumer row");
        assert!(row.contains("DECLARED") && row.contains(" - "), "{row}");
        r.rings[0].consumers[0].attached_ever = true;
        let text = render(&r, None);
        assert!(!text.contains("DECLARED"), "{text}");
    }
}
