//! Durations as people write them in the config ("250ms", "2s") and read them in status.

use std::time::Duration;

/// Parse `<number><unit>` with unit `ns`, `us`, `ms`, `s`, `m` or `h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} has no unit: write e.g. \"250ms\" or \"2s\""))?;
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("duration {text:?} does not start with a whole number"))?;
    let d = match unit.trim() {
        "ns" => Duration::from_nanos(n),
        "us" | "µs" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" | "min" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        other => {
            return Err(format!(
                "duration {text:?} has unknown unit {other:?}: use ns, us, ms, s, m or h"
            ))
        }
    };
    Ok(d)
}

/// Shortest and longest `status --watch` interval.
const INTERVALS: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(3600));

/// A `--watch` interval: seconds as a plain number ("2", "0.5") or a duration with a unit
/// ("250ms", "1m"), from 100ms to 1h.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let d = if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') && !t.is_empty() {
        let secs: f64 = t
            .parse()
            .map_err(|_| format!("interval {text:?} is not a number of seconds"))?;
        Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("interval {text:?} is not a number of seconds"))?
    } else if t.starts_with(|c: char| c.is_ascii_digit()) {
        parse_duration(t)?
    } else {
        // A word: most likely a ring name after `--watch`, whose interval is optional.
        return Err(format!(
            "interval {text:?} is not a number of seconds or a duration like \"250ms\" (to watch one ring, name it before the option: `status {t} --watch`)"
        ));
    };
    let (min, max) = INTERVALS;
    if d < min || d > max {
        return Err(format!(
            "interval {text:?} is out of range: from {} to {}",
            format_duration(min),
            format_duration(max)
        ));
    }
    Ok(d)
}

/// A short human form: "850us", "250ms", "2.5s", "3m 04s", "2h 05m".
pub fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{}ms", us / 1_000)
    } else if us < 60_000_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if us < 3_600_000_000 {
        format!("{}m {:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h {:02}m", d.as_secs() / 3600, (d.as_secs() / 60) % 60)
    }
}

/// Serde adapter for `Duration` fields written as strings.
pub mod serde_duration {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    /// Deserialize "250ms" and friends.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_refuses_nonsense() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 2s "), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("15us"), Ok(Duration::from_micros(15)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "ms", "12", "1.5s", "3 parsecs", "-1s", "1d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn watch_intervals_are_numbers_or_durations_in_range() {
        assert_eq!(parse_interval("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_interval("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "nan", "NaN", "inf", "-1", "0", "0.01", "2h", "", ".", "1..2", "1e3",
        ] {
            assert!(parse_interval(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn formats_short() {
        assert_eq!(format_duration(Duration::from_micros(850)), "850us");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(format_duration(Duration::from_secs(184)), "3m 04s");
    }
}
