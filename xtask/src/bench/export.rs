//! Measurement 10: shipping profiles. A system-wide continuous recording (`record -a
//! --interval`) while `work 0 NCPU` keeps every CPU busy, sent to one store at a time (OTLP
//! gRPC, OTLP HTTP with gzip, Pyroscope's `/ingest` and its Push API; the receivers are
//! `tests/export/receiver.py`, built on the official OTLP definitions), with frames named at
//! the source and with `--symbolize none` (build ids and file offsets), beside the same
//! recording with no store. Measured: the recorder's CPU time per interval and what exporting
//! adds to it, and the bytes each interval puts on the wire (request bodies as sent, the
//! recorder's own count on its exit line).

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
};

use anyhow::Context as _;
use serde_json::json;

use super::{
    Ctx, Goal, Section,
    proc::{self, Background, median},
};
use crate::util::workspace_root;

/// Exporting may cost at most this share of one CPU over the interval it sends.
const GOAL_CPU_SHARE: f64 = 0.01;

/// The store kinds, as `--export` schemes.
const STORES: [(&str, &str); 4] = [
    ("OTLP gRPC", "otlp+grpc"),
    ("OTLP HTTP (gzip)", "otlp+http"),
    ("Pyroscope /ingest", "pyroscope+http"),
    ("Pyroscope Push API", "pyroscope+connect"),
];

/// The receivers of the export tests, stopped when dropped.
pub(super) struct Receivers {
    child: std::process::Child,
    ports: serde_json::Value,
}

impl Receivers {
    pub(super) fn start(log: &Path) -> anyhow::Result<Self> {
        let script = workspace_root().join("tests/export/receiver.py");
        let mut child = Command::new(crate::venv::otlp_python()?)
            .arg(&script)
            .args(["serve", "--out"])
            .arg(log)
            .args(["--max-seconds", "3600"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("receiver stdout")?)
            .read_line(&mut line)
            .context("reading the receivers' ports")?;
        let ports =
            serde_json::from_str(&line).with_context(|| format!("receiver.py said {line:?}"))?;
        Ok(Self { child, ports })
    }

    /// The port of receiver `key` (`grpc`, `http`, `pyroscope`).
    pub(super) fn port(&self, key: &str) -> u64 {
        self.ports[key].as_u64().unwrap_or(0)
    }

    fn url(&self, scheme: &str) -> String {
        let key = match scheme {
            "otlp+grpc" => "grpc",
            "otlp+http" => "http",
            // Both Pyroscope APIs are served on its port.
            _ => "pyroscope",
        };
        format!("{scheme}://127.0.0.1:{}", self.ports[key])
    }
}

impl Drop for Receivers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One recording: its CPU seconds, intervals sent and bytes sent (0 without a store).
struct Run {
    cpu_s: f64,
    sent: u64,
    bytes: u64,
    command: String,
}

/// `profiler: export: N sent, S spooled, D dropped (URL: B bytes sent...)`.
fn exit_line(stderr: &str) -> Option<(u64, u64, u64, u64)> {
    let l = stderr
        .lines()
        .find_map(|l| l.strip_prefix("profiler: export: "))?;
    let words: Vec<&str> = l.split([' ', ',', '(']).collect();
    let num = |after: &str| -> Option<u64> {
        let i = words.iter().position(|w| *w == after)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    Some((
        num("sent")?,
        num("spooled")?,
        num("dropped")?,
        num("bytes")?,
    ))
}

fn record(ctx: &mut Ctx, what: &str, args: &[String]) -> anyhow::Result<Run> {
    let series = ctx.path(&format!("export-{what}"));
    let _ = std::fs::remove_dir_all(&series);
    std::fs::create_dir_all(&series)?;
    let mut argv: Vec<String> = ["record", "-a", "-F", "99", "-q"]
        .map(String::from)
        .to_vec();
    argv.extend(args.iter().cloned());
    argv.extend(["-o".into(), series.display().to_string()]);
    let log = ctx.log(&format!("export-{what}"));
    let f = proc::run(&mut ctx.profiler(&argv), &log, &[0])?;
    let files = std::fs::read_dir(&series)?.count() as u64;
    anyhow::ensure!(files > 0, "`{}` wrote no interval", f.command);
    let (sent, bytes) = match args.iter().any(|a| a == "--export") {
        true => {
            let (sent, spooled, dropped, bytes) = exit_line(&f.stderr)
                .with_context(|| format!("no export line from `{}`:\n{}", f.command, f.stderr))?;
            anyhow::ensure!(
                sent > 0 && spooled == 0 && dropped == 0,
                "`{}`: {sent} sent, {spooled} spooled, {dropped} dropped",
                f.command
            );
            (sent, bytes)
        }
        false => (files, 0),
    };
    Ok(Run {
        cpu_s: f.cpu_s,
        sent,
        bytes,
        command: f.command,
    })
}

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let interval = ctx.size(5u64, 2);
    let secs = ctx.size(30u64, 4);
    let rounds = ctx.rounds(3);
    let w = ctx.work(0, ctx.ncpu as u32);
    let log = ctx.log("busy");
    let _busy = Background::start(Command::new(&w[0]).args(&w[1..]), &log)?;
    let receivers = Receivers::start(&ctx.path("export-requests.jsonl"))?;
    let base = vec![
        "--interval".to_string(),
        interval.to_string(),
        "-d".into(),
        secs.to_string(),
    ];
    let (mut rows, mut commands, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    let mut worst_share: f64 = 0.0;
    for symbolize in ["names", "none"] {
        let mut args = base.clone();
        if symbolize == "none" {
            args.extend(["--symbolize".into(), "none".into()]);
        }
        // Interleaved: each round runs every variant once, so drift hits them alike.
        let variants: Vec<Option<(&str, &str)>> = std::iter::once(None)
            .chain(STORES.iter().map(|s| Some(*s)))
            .collect();
        let mut runs: Vec<Vec<Run>> = variants.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            for (k, v) in variants.iter().enumerate() {
                let mut a = args.clone();
                let what = match v {
                    Some((_, scheme)) => {
                        a.extend(["--export".into(), receivers.url(scheme)]);
                        format!("{}-{symbolize}", scheme.replace('+', "-"))
                    }
                    None => format!("none-{symbolize}"),
                };
                runs[k].push(record(ctx, &what, &a)?);
            }
        }
        let per_interval = |r: &Run| r.cpu_s / r.sent.max(1) as f64;
        let alone = median(&runs[0].iter().map(per_interval).collect::<Vec<_>>());
        for (v, runs) in variants.iter().zip(&runs) {
            let cpu = median(&runs.iter().map(per_interval).collect::<Vec<_>>());
            let bytes = median(
                &runs
                    .iter()
                    .map(|r| r.bytes as f64 / r.sent.max(1) as f64)
                    .collect::<Vec<_>>(),
            );
            // What the store adds, as a share of one CPU over the interval's length.
            let share = (cpu - alone) / interval as f64;
            if v.is_some() {
                worst_share = worst_share.max(share);
            }
            rows.push(vec![
                v.map_or("no store (files only)", |s| s.0).to_string(),
                symbolize.to_string(),
                runs.iter().map(|r| r.sent).sum::<u64>().to_string(),
                match v {
                    Some(_) => format!("{:.1}", bytes / 1024.0),
                    None => "-".into(),
                },
                format!("{:.1}", cpu * 1000.0),
                match v {
                    Some(_) => format!("{:+.1}", (cpu - alone) * 1000.0),
                    None => "-".into(),
                },
                match v {
                    Some(_) => format!("{:+.2} %", share * 100.0),
                    None => "-".into(),
                },
            ]);
            commands.push(ctx.show(&runs[0].command));
            raw.push(json!({
                "store": v.map(|s| s.1),
                "symbolize": symbolize,
                "runs": runs.iter().map(|r| json!({
                    "cpu_s": r.cpu_s, "intervals": r.sent, "bytes": r.bytes
                })).collect::<Vec<_>>(),
            }));
        }
    }
    drop(receivers);
    Ok(Section {
        title: "10. Shipping profiles",
        method: format!(
            "`profiler record -a -F 99 --interval {interval} -d {secs} -o DIR` while `work 0 \
             {n}` keeps every CPU busy, with one `--export` store at a time (the export tests' \
             receivers on 127.0.0.1: OTLP gRPC, OTLP HTTP with gzip, a Pyroscope-shaped \
             `/ingest`) and with none, frames named at the source and with `--symbolize none`; \
             {rounds} round(s), interleaved, medians. CPU: the recorder's own user+system time \
             (wait4) per interval, start-up included, and what a store adds to it; bytes: request bodies as sent (compressed where the \
             protocol compresses), from the recorder's exit line, per interval.",
            n = ctx.ncpu
        ),
        headers: vec![
            "store",
            "frames",
            "intervals",
            "KiB per interval",
            "CPU ms per interval",
            "added by the store (ms)",
            "added, % of one CPU",
        ],
        rows,
        commands,
        goal: Goal {
            target: "exporting costs at most 1 % of one CPU (10 ms per second of interval)",
            measured: format!("at most {:+.2} % of one CPU", worst_share * 100.0),
            met: worst_share <= GOAL_CPU_SHARE,
            why: if worst_share <= GOAL_CPU_SHARE {
                String::new()
            } else {
                "encoding and sending an interval's profile costs more than 1 % of a CPU; \
                 the rows say which protocol, and whether naming frames is the cost (the \
                 quick run's 4 s recordings are mostly start-up: noise)"
                    .into()
            },
        },
        notes: vec![
            "The receivers run on the same host and decode every request (their CPU is not \
             counted); a store across a network adds latency, not recorder CPU."
                .into(),
        ],
        raw: json!(raw),
    })
}

#[cfg(test)]
mod tests {
    use super::exit_line;

    #[test]
    fn the_exit_line_gives_counts_and_bytes() {
        let e = "x\nprofiler: export: 6 sent, 0 spooled, 1 dropped (otlp+grpc://127.0.0.1:5: \
                 12345 bytes sent, 1 of them refused by the store)\n";
        assert_eq!(exit_line(e), Some((6, 0, 1, 12345)));
        assert_eq!(exit_line("profiler: other\n"), None);
    }
}
