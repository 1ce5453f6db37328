//! `--json`: one JSON object per row (JSON Lines), the same rows as the tables.
//!
//! Counting rows carry `set` (the `-c` text), `tick` when `-t` was given, and
//! `counters: [{pic, event, value}]`; when the kernel multiplexed the counters the values
//! are scaled estimates, with `raw` beside them and `multiplexed_pct`. cputrack rows carry
//! `pid` and `lwp` (a Linux tid); cpustat rows `cpu`, or `cpus` on the `total` row.

use serde::Serialize;

use super::{sample::Sample, spec::SetSpec};

#[derive(Serialize)]
struct Counter<'a> {
    pic: u32,
    event: &'a str,
    value: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<u64>,
}

#[derive(Serialize)]
struct Counts<'a> {
    set: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tick: Option<u64>,
    counters: Vec<Counter<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    multiplexed_pct: Option<f64>,
}

impl<'a> Counts<'a> {
    fn new(set: &'a SetSpec, sample: &Sample, tick: bool) -> Self {
        let pct = sample.multiplexed_pct();
        let shown = sample.shown();
        Counts {
            set: &set.text,
            tick: tick.then_some(sample.tick),
            counters: set
                .requests
                .iter()
                .enumerate()
                .map(|(i, r)| Counter {
                    pic: r.pic,
                    event: &r.event,
                    value: shown.get(i).copied().unwrap_or_default(),
                    raw: pct.map(|_| sample.values.get(i).copied().unwrap_or_default()),
                })
                .collect(),
            multiplexed_pct: pct.map(|p| (p * 100.0).round() / 100.0),
        }
    }
}

#[derive(Serialize)]
struct TrackRow<'a> {
    time: f64,
    pid: i32,
    lwp: i32,
    event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    child: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    argv: Option<&'a str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    counts: Option<Counts<'a>>,
}

#[derive(Serialize)]
struct StatRow<'a> {
    time: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpus: Option<i64>,
    event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<i64>,
    #[serde(flatten)]
    counts: Counts<'a>,
}

/// Milliseconds, as the tables show.
fn ms(time: f64) -> f64 {
    (time * 1000.0).round() / 1000.0
}

fn line(row: &impl Serialize) -> String {
    let mut s = serde_json::to_string(row).expect("rows are plain data");
    s.push('\n');
    s
}

/// A cputrack counting row.
pub fn track_row(
    time: f64,
    (pid, lwp): (i32, i32),
    event: &str,
    sample: &Sample,
    set: &SetSpec,
    tick: bool,
) -> String {
    line(&TrackRow {
        time: ms(time),
        pid,
        lwp,
        event,
        child: None,
        argv: None,
        counts: Some(Counts::new(set, sample, tick)),
    })
}

/// cputrack's `fork` row.
pub fn track_fork(time: f64, pid: i32, lwp: i32, child: i32) -> String {
    line(&TrackRow {
        time: ms(time),
        pid,
        lwp,
        event: "fork",
        child: Some(child),
        argv: None,
        counts: None,
    })
}

/// The `exec` row naming the new image.
pub fn track_exec_args(time: f64, pid: i32, lwp: i32, argv: &str) -> String {
    line(&TrackRow {
        time: ms(time),
        pid,
        lwp,
        event: "exec",
        child: None,
        argv: Some(argv),
        counts: None,
    })
}

/// A cpustat row; `cpu` is the CPU for `tick`, the number of CPUs for `total`.
pub fn stat_row(
    time: f64,
    cpu: i64,
    event: &str,
    sample: &Sample,
    set: &SetSpec,
    tick: bool,
    timestamp: Option<i64>,
) -> String {
    let total = event == "total";
    line(&StatRow {
        time: ms(time),
        cpu: (!total).then_some(cpu),
        cpus: total.then_some(cpu),
        event,
        timestamp,
        counts: Counts::new(set, sample, tick),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::spec::RequestSpec;

    fn set() -> SetSpec {
        SetSpec {
            text: "page-faults,sys".into(),
            requests: vec![RequestSpec {
                pic: 0,
                event: "page-faults".into(),
                flags: 6,
                attrs: vec![],
            }],
        }
    }

    fn sample(v: u64) -> Sample {
        Sample {
            values: vec![v],
            scaled: vec![v * 2],
            tick: 77,
            hrtime: 1,
            enabled: 10,
            running: 10,
        }
    }

    #[test]
    fn track_rows() {
        assert_eq!(
            track_row(1.0074, (10, 11), "tick", &sample(5000), &set(), true),
            concat!(
                r#"{"time":1.007,"pid":10,"lwp":11,"event":"tick","set":"page-faults,sys","#,
                r#""tick":77,"counters":[{"pic":0,"event":"page-faults","value":5000}]}"#,
                "\n"
            )
        );
        assert_eq!(
            track_fork(0.5, 10, 11, 12),
            "{\"time\":0.5,\"pid\":10,\"lwp\":11,\"event\":\"fork\",\"child\":12}\n"
        );
        assert_eq!(
            track_exec_args(0.5, 12, 12, "true 'x'"),
            "{\"time\":0.5,\"pid\":12,\"lwp\":12,\"event\":\"exec\",\"argv\":\"true 'x'\"}\n"
        );
    }

    #[test]
    fn stat_rows_and_multiplexing() {
        let mut m = sample(100);
        m.running = 5;
        assert_eq!(
            stat_row(2.0, 2, "total", &m, &set(), false, Some(1700000000)),
            concat!(
                r#"{"time":2.0,"cpus":2,"event":"total","timestamp":1700000000,"#,
                r#""set":"page-faults,sys","counters":[{"pic":0,"event":"page-faults","#,
                r#""value":200,"raw":100}],"multiplexed_pct":50.0}"#,
                "\n"
            )
        );
        let row: serde_json::Value =
            serde_json::from_str(&stat_row(1.0, 0, "tick", &sample(1), &set(), false, None))
                .unwrap();
        assert_eq!(row["cpu"], 0);
        assert!(row.get("multiplexed_pct").is_none());
        assert!(row.get("cpus").is_none());
    }
}
