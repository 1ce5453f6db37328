//! The report of a counter group: per row, the sampled event's events (its CPU time in ms
//! for a clock) and what each counter of the group counted on those stacks, and ratios
//! between them (`--ratio A/B`, e.g. `instructions/cycles` for IPC).

use std::{collections::HashMap, fmt::Write as _};

use super::{
    By, Profile, Sort,
    top::{Key, keys},
};

/// A ratio of two of a profile's events (`A/B`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ratio {
    pub numerator: String,
    pub denominator: String,
}

/// Why a `--ratio` was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RatioError {
    #[error("malformed ratio '{0}': write EVENT/EVENT")]
    Malformed(String),
    #[error("ratio '{spec}': '{event}' is not an event of the profile (it has: {})", .known.join(", "))]
    NotAnEvent {
        spec: String,
        event: String,
        known: Vec<String>,
    },
}

impl Ratio {
    /// Parses `A/B`; both must be events of `events` (the sampled events and the counters).
    pub fn parse(spec: &str, events: &[String]) -> Result<Ratio, RatioError> {
        let (a, b) = spec
            .split_once('/')
            .filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains('/'))
            .ok_or_else(|| RatioError::Malformed(spec.to_string()))?;
        for e in [a, b] {
            if !events.iter().any(|x| x == e) {
                return Err(RatioError::NotAnEvent {
                    spec: spec.to_string(),
                    event: e.to_string(),
                    known: events.to_vec(),
                });
            }
        }
        Ok(Ratio {
            numerator: a.to_string(),
            denominator: b.to_string(),
        })
    }
}

/// One row: its key, the samples (column 0) and each counter's count (columns 1..).
struct Row {
    key: Key,
    values: Vec<u64>,
}

/// The group table. Values are self (the row was the innermost frame) by default and
/// inclusive (the row was anywhere on the stack, once per stack) with `Sort::Total`.
pub fn render_group_table(
    profile: &Profile,
    by: By,
    sort: Sort,
    limit: usize,
    ratios: &[Ratio],
) -> String {
    let counters: Vec<&str> = profile
        .info
        .counters
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let sampled = profile
        .events()
        .into_iter()
        .find(|e| !profile.is_counter(e))
        .map_or_else(|| "samples".to_string(), |e| e.to_string());
    let column = |event: &str| -> usize {
        if profile.is_counter(event) {
            1 + counters.iter().position(|c| *c == event).unwrap_or(0)
        } else {
            0
        }
    };
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut totals = vec![0u64; 1 + counters.len()];
    for stack in &profile.stacks {
        let col = column(&stack.event);
        totals[col] += stack.count;
        let keys = keys(profile, stack, by);
        let mut chosen: Vec<&Key> = Vec::new();
        if sort == Sort::Total {
            for k in &keys {
                if !chosen.contains(&k) {
                    chosen.push(k);
                }
            }
        } else if let Some(leaf) = keys.last() {
            chosen.push(leaf);
        }
        for k in chosen {
            let i = *index.entry(k.clone()).or_insert_with(|| {
                rows.push(Row {
                    key: k.clone(),
                    values: vec![0; 1 + counters.len()],
                });
                rows.len() - 1
            });
            rows[i].values[col] += stack.count;
        }
    }
    rows.sort_by(|a, b| match sort {
        Sort::Name => a.key.cmp(&b.key),
        _ => b.values.cmp(&a.values).then_with(|| a.key.cmp(&b.key)),
    });
    let (what, detail) = by.headings();
    // Each column in its event's unit; time in milliseconds (a ratio per ms of CPU time).
    let ms = |event: &str| profile.unit(event) == super::Unit::Nanoseconds;
    let mut names = vec![sampled.clone()];
    names.extend(counters.iter().map(|c| c.to_string()));
    let mut headers = names.clone();
    for h in &mut headers {
        if ms(h) {
            h.push_str("(ms)");
        }
    }
    let width = |s: &str| s.len().max(10);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} per {}, {}",
        names.join(", "),
        what.to_lowercase(),
        if sort == Sort::Total {
            "anywhere on the stack"
        } else {
            "as the innermost frame (--sort total: anywhere on the stack)"
        }
    );
    let mut header = String::new();
    for n in &headers {
        let _ = write!(header, "{:>w$}  ", n, w = width(n));
    }
    let ratio_names: Vec<String> = ratios
        .iter()
        .map(|r| format!("{}/{}", r.numerator, r.denominator))
        .collect();
    for n in &ratio_names {
        let _ = write!(header, "{:>w$}  ", n, w = width(n));
    }
    let _ = writeln!(out, "{}", format!("{header}{what:<40} {detail}").trim_end());
    let value_of = |values: &[u64], event: &str| -> f64 {
        let v = if event == sampled {
            values[0]
        } else {
            values[column(event)]
        };
        if ms(event) { v as f64 / 1e6 } else { v as f64 }
    };
    let mut line = |values: &[u64], label: &str, detail: &str| {
        let mut row = String::new();
        for ((n, h), v) in names.iter().zip(&headers).zip(values) {
            let text = match ms(n) {
                true => format!("{:.1}", *v as f64 / 1e6),
                false => v.to_string(),
            };
            let _ = write!(row, "{:>w$}  ", text, w = width(h));
        }
        for (r, n) in ratios.iter().zip(&ratio_names) {
            let (a, b) = (
                value_of(values, &r.numerator),
                value_of(values, &r.denominator),
            );
            let text = if b == 0.0 {
                "-".to_string()
            } else {
                format!("{:.3}", a / b)
            };
            let _ = write!(row, "{:>w$}  ", text, w = width(n));
        }
        let _ = writeln!(out, "{}", format!("{row}{label:<40} {detail}").trim_end());
    };
    for r in rows.iter().take(limit) {
        let detail = match (&r.key.1, by) {
            (Some(m), _) => m.as_ref(),
            (None, By::Function) => "?",
            (None, _) => "",
        };
        line(&r.values, &r.key.0, detail);
    }
    line(&totals, "(all stacks)", "");
    if !ratios.is_empty() {
        let unit = match ms(&sampled) {
            true => " (milliseconds: a ratio to it is per ms)",
            false => "",
        };
        out.push_str(&format!(
            "each ratio rests on the row's {sampled}{unit}, the first column\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        profile::CounterTotal,
        symbolize::{Frame, FrameKind},
    };

    fn f(name: &str) -> Frame {
        Frame::named(name, FrameKind::User)
    }

    fn group_profile() -> Profile {
        let mut p = Profile::default();
        // cpu-clock at 1000 Hz: a millisecond a sample.
        for (event, frames, count) in [
            ("cpu-clock", ["main", "faulter"], 10_000_000),
            ("page-faults", ["main", "faulter"], 1000),
            ("cpu-clock", ["main", "spinner"], 30_000_000),
            ("page-faults", ["main", "spinner"], 3),
        ] {
            let frames: Vec<Frame> = frames.iter().map(|n| f(n)).collect();
            p.push(event, "w", &frames, count);
        }
        p.info.counters = vec![CounterTotal {
            name: "page-faults".into(),
            total: 1010,
            unattributed: 7,
        }];
        p
    }

    #[test]
    fn columns_per_counter_and_ratios_with_their_samples() {
        let p = group_profile();
        let events = vec!["cpu-clock".to_string(), "page-faults".to_string()];
        let r = Ratio::parse("page-faults/cpu-clock", &events).unwrap();
        let text = render_group_table(&p, By::Function, Sort::SelfSamples, 10, &[r]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("cpu-clock(ms)") && lines[1].contains("page-faults/cpu-clock"));
        let row = |name: &str| -> Vec<String> {
            lines
                .iter()
                .find(|l| l.split_whitespace().any(|w| w == name))
                .unwrap()
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        assert_eq!(row("spinner")[..3], ["30.0", "3", "0.100"]);
        assert_eq!(row("faulter")[..3], ["10.0", "1000", "100.000"]);
        assert_eq!(row("stacks)")[..3], ["40.0", "1003", "25.075"]);
        assert!(!text.lines().any(|l| l.contains(" main ")), "self only");
        let total = render_group_table(&p, By::Function, Sort::Total, 10, &[]);
        assert!(
            total
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()[..3] == ["40.0", "1003", "main"])
        );
    }

    #[test]
    fn bad_ratios_are_one_line_errors() {
        let events = vec!["cpu-clock".to_string(), "page-faults".to_string()];
        for (spec, text) in [
            ("page-faults", "malformed ratio"),
            ("a/b/c", "malformed ratio"),
            ("/cpu-clock", "malformed ratio"),
            (
                "cycles/cpu-clock",
                "'cycles' is not an event of the profile",
            ),
        ] {
            let e = Ratio::parse(spec, &events).unwrap_err().to_string();
            assert!(e.contains(text), "{spec}: {e}");
        }
    }
}
