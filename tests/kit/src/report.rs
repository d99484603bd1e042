//! The children's report lines: a word, then `key=value` fields separated by spaces.
//!
//! ```text
//! ready start=0 index=1
//! done delivered=2000 skipped=0 dropped=0 clamped=0 next=2000 firsts=0:0 lasts=0:1999
//! ```

use std::collections::BTreeMap;

/// The value of `key` in `line`, if present.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The numeric value of `key` in `line`; panics with the line if missing or not a number.
pub fn num(line: &str, key: &str) -> u64 {
    field(line, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {key}= in report line {line:?}"))
}

/// A `p:n,p:n` map field (per-producer values); empty if the value is `-`.
pub fn per_producer(line: &str, key: &str) -> BTreeMap<u32, u64> {
    let v = field(line, key).unwrap_or_else(|| panic!("no {key}= in report line {line:?}"));
    if v == "-" {
        return BTreeMap::new();
    }
    v.split(',')
        .map(|kv| {
            let (p, n) = kv
                .split_once(':')
                .unwrap_or_else(|| panic!("bad {key}= entry {kv:?} in {line:?}"));
            (
                p.parse()
                    .unwrap_or_else(|_| panic!("bad producer in {line:?}")),
                n.parse()
                    .unwrap_or_else(|_| panic!("bad number in {line:?}")),
            )
        })
        .collect()
}

/// Format a per-producer map as `p:n,p:n` (`-` when empty).
pub fn format_per_producer(m: &BTreeMap<u32, u64>) -> String {
    if m.is_empty() {
        return "-".to_owned();
    }
    m.iter()
        .map(|(p, n)| format!("{p}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The first line of `lines` that starts with `word`; panics with all lines if none.
pub fn line<'a>(lines: &'a [String], word: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with(word))
        .unwrap_or_else(|| panic!("no {word:?} line in {lines:#?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse() {
        let l = "done delivered=12 firsts=0:3,2:5 lasts=-";
        assert_eq!(num(l, "delivered"), 12);
        assert_eq!(field(l, "nope"), None);
        let m = per_producer(l, "firsts");
        assert_eq!(m, BTreeMap::from([(0, 3), (2, 5)]));
        assert_eq!(format_per_producer(&m), "0:3,2:5");
        assert!(per_producer(l, "lasts").is_empty());
    }
}
