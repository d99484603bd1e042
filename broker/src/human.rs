//! Durations as people write them in the config ("250ms", "2s") and read them in status.

use std::time::Duration;

/// Parse `<number><unit>` with unit `ns`, `us`, `ms`, `s` or `m`.
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
        other => {
            return Err(format!(
                "duration {text:?} has unknown unit {other:?}: use ns, us, ms, s or m"
            ))
        }
    };
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
        for bad in ["", "ms", "12", "1.5s", "3 parsecs", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
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
