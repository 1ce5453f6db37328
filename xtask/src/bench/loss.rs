//! Measurement 3: Loss: samples expected vs delivered vs reported lost at 1k, 10k and 50k samples/s in
//! total, system-wide cpu-clock with a period (per-CPU timers fire whether a CPU is busy or
//! idle, so the expected count is CPUs x duration / period), every CPU kept busy.

use std::process::Command;

use anyhow::Context as _;
use serde_json::json;

use super::{
    Ctx, Goal, Section,
    proc::{self, Background, Finished, median},
};

const RATES: [u64; 3] = [1_000, 10_000, 50_000];

/// Expected, delivered and lost samples of one run.
#[derive(Clone, Copy, serde::Serialize)]
struct Count {
    duration_s: f64,
    expected: f64,
    delivered: u64,
    lost: u64,
    /// Samples the tool says the kernel never took (perf says none).
    skipped: u64,
}

impl Count {
    fn unaccounted_pct(&self) -> f64 {
        let accounted = self.delivered + self.lost + self.skipped;
        (self.expected - accounted as f64) / self.expected * 100.0
    }
}

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(5u64, 1);
    let rounds = ctx.rounds(3);
    let w = ctx.work(0, ctx.ncpu as u32);
    let log = ctx.log("busy");
    let busy = Background::start(Command::new(&w[0]).args(&w[1..]), &log)?;
    let mut results = Vec::new();
    let mut commands = Vec::new();
    for rate in RATES {
        // cpu-clock counts nanoseconds: one sample per `period` ns on each CPU.
        let period = ctx.ncpu as u64 * 1_000_000_000 / rate;
        let (mut prof, mut perf) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for tool in if round % 2 == 0 {
                ["profiler", "perf"]
            } else {
                ["perf", "profiler"]
            } {
                let (c, cmd) = if tool == "profiler" {
                    profiler(ctx, period, secs)?
                } else {
                    perf_run(ctx, period, secs)?
                };
                if rate == RATES[2] && commands.len() < 2 {
                    commands.push(cmd);
                }
                if tool == "profiler" {
                    &mut prof
                } else {
                    &mut perf
                }
                .push(c);
            }
        }
        results.push((rate, period, prof, perf));
    }
    drop(busy);
    let mut rows = Vec::new();
    for (rate, _, prof, perf) in &results {
        for (tool, v) in [("profiler", prof), ("perf", perf)] {
            let m = |f: fn(&Count) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
            rows.push(vec![
                rate.to_string(),
                tool.to_string(),
                format!("{:.0}", m(|c| c.expected)),
                format!("{:.0}", m(|c| c.delivered as f64)),
                format!("{:.0}", m(|c| c.lost as f64)),
                format!("{:.0}", m(|c| c.skipped as f64)),
                format!("{:.2}%", m(Count::unaccounted_pct)),
            ]);
        }
    }
    // Targets: no loss at 10k/s; at 50k/s every missing sample reported (within 0.1%: the
    // recording's start and end are not exact to the sample).
    let prof = |rate: u64| &results.iter().find(|r| r.0 == rate).expect("rate").2;
    let lost10: u64 = prof(10_000).iter().map(|c| c.lost).sum();
    let short10 = median(
        &prof(10_000)
            .iter()
            .map(Count::unaccounted_pct)
            .collect::<Vec<_>>(),
    );
    let un50 = median(
        &prof(50_000)
            .iter()
            .map(Count::unaccounted_pct)
            .collect::<Vec<_>>(),
    );
    let met = lost10 == 0 && short10.abs() <= 0.1 && un50.abs() <= 0.1;
    Ok(Section {
        title: "3. Loss",
        method: format!(
            "System-wide `-e cpu-clock -c PERIOD` (PERIOD = {n} CPUs x 1e9 / rate ns), {secs} s, \
             while `work 0 {n}` keeps every CPU busy; {rounds} rounds, the tools alternating. \
             Expected = CPUs x recorded duration / period (the profiler's summary line gives \
             its duration, perf's header its first-to-last sample time); delivered = samples \
             in the profile; lost = what the tool reports lost (the profiler's summary line; \
             perf's `Total Lost Samples`); skipped = samples the tool says the kernel never \
             took (the profiler's `skipped by the kernel`: late timers and throttling, from \
             each clock event's running time; perf reports none). Unaccounted = expected - \
             delivered - lost - skipped, i.e. samples missing without a report (and the start \
             and end of the recording). Default buffers: the profiler's 8 MiB ring, perf's \
             512 KiB per CPU. Medians.",
            n = ctx.ncpu
        ),
        headers: vec![
            "samples/s",
            "tool",
            "expected",
            "delivered",
            "reported lost",
            "reported skipped",
            "unaccounted",
        ],
        rows,
        commands,
        goal: Goal {
            target: "no loss at 10k samples/s; every missing sample reported at 50k (0.1%)",
            measured: format!(
                "10k/s: {lost10} lost, {short10:.2}% unaccounted; 50k/s: {un50:.2}% unaccounted"
            ),
            met,
            why: if met {
                String::new()
            } else {
                "Samples are missing beyond the 0.1% allowed for the recording's edges: the \
                 profiler counts every run of its program and what the kernel skipped, so \
                 what is left is where its duration and its events' enabled time differ."
                    .into()
            },
        },
        notes: vec![],
        raw: json!(
            results
                .iter()
                .map(|(rate, period, p, f)| json!({"rate": rate, "period_ns": period, "profiler": p, "perf": f}))
                .collect::<Vec<_>>()
        ),
    })
}

fn profiler(ctx: &mut Ctx, period: u64, secs: u64) -> anyhow::Result<(Count, String)> {
    let (p, d) = (period.to_string(), secs.to_string());
    let log = ctx.log("loss-profiler");
    // The profile goes to the scratch directory (without -o it lands where xtask runs).
    let pb = ctx.path("loss.pb.gz").display().to_string();
    let args = [
        "record",
        "-a",
        "-e",
        "cpu-clock",
        "-c",
        &p,
        "-d",
        &d,
        "--limit",
        "1",
        "-o",
        &pb,
    ];
    let f = proc::run(&mut ctx.profiler(&args), &log, &[0])?;
    let (delivered, duration_s, lost, skipped) = summary(&f)?;
    Ok((
        Count {
            duration_s,
            expected: ctx.ncpu as f64 * duration_s * 1e9 / period as f64,
            delivered,
            lost,
            skipped,
        },
        ctx.show(&f.command),
    ))
}

/// `N samples of EVENT ... in X s; lost L; ...[; skipped by the kernel S]`
fn summary(f: &Finished) -> anyhow::Result<(u64, f64, u64, u64)> {
    let line = f
        .stdout
        .lines()
        .find(|l| l.contains(" samples of "))
        .with_context(|| format!("no summary line from `{}`", f.command))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .map(|w| w.trim_end_matches([';', ',']))
    };
    let parsed = (|| {
        Some((
            words.first()?.parse().ok()?,
            after("in")?.parse().ok()?,
            after("lost")?.parse().ok()?,
            // Said only when not 0.
            match line.split_once("skipped by the kernel ") {
                Some((_, rest)) => rest.split(';').next()?.trim().parse().ok()?,
                None => 0,
            },
        ))
    })();
    parsed.with_context(|| format!("cannot read the summary line `{line}`"))
}

fn perf_run(ctx: &mut Ctx, period: u64, secs: u64) -> anyhow::Result<(Count, String)> {
    let (p, d) = (period.to_string(), secs.to_string());
    let data = ctx.path("loss.data").display().to_string();
    let log = ctx.log("loss-perf");
    let args = [
        "record",
        "-a",
        "-g",
        "-e",
        "cpu-clock",
        "-c",
        &p,
        "-o",
        &data,
        "--",
        "sleep",
        &d,
    ];
    let f = proc::run(&mut ctx.perf(&args), &log, &[0])?;
    let log = ctx.log("loss-perf-header");
    let h = proc::run(
        &mut ctx.perf(&["report", "-i", &data, "--header-only"]),
        &log,
        &[0],
    )?;
    let duration_ms: f64 = field(&h.stdout, "# sample duration :")
        .and_then(|v| v.trim_end_matches("ms").trim().parse().ok())
        .context("no sample duration in perf's header")?;
    let log = ctx.log("loss-perf-report");
    let r = proc::run(
        &mut ctx.perf(&[
            "report", "-i", &data, "--stdio", "-g", "none", "--sort", "comm",
        ]),
        &log,
        &[0],
    )?;
    let lost = field(&r.stdout, "# Total Lost Samples:")
        .and_then(|v| v.parse().ok())
        .context("no `Total Lost Samples` in perf report")?;
    let log = ctx.log("loss-perf-stats");
    let s = proc::run(
        &mut ctx.perf(&["report", "-i", &data, "--stats"]),
        &log,
        &[0],
    )?;
    let delivered = field(&s.stdout, "SAMPLE events:")
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no SAMPLE events in perf report --stats")?;
    let duration_s = duration_ms / 1e3;
    Ok((
        Count {
            duration_s,
            expected: ctx.ncpu as f64 * duration_s * 1e9 / period as f64,
            delivered,
            lost,
            skipped: 0,
        },
        format!(
            "{}; perf report -i $W/loss.data --stats",
            ctx.show(&f.command)
        ),
    ))
}

/// The text after `key` on the first line that holds it, trimmed.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.split_once(key).map(|(_, v)| v.trim()))
}
