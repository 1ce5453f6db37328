//! Measurement 9: Counter groups: `profiler record -e '{cpu-clock,page-faults}:S'` against
//! `perf record -e '{cpu-clock,page-faults}:S' -g` on the `group` fixture (20000 page
//! faults over a second of its CPU, then a second of spinning): the tools' own CPU time and
//! the bytes each sample costs.

use std::{collections::BTreeMap, process::Command};

use serde_json::json;

use super::{
    Ctx, Goal, Section,
    proc::{self, median},
};

const GROUP: &str = "{cpu-clock,page-faults}:S";

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let rounds = ctx.rounds(5);
    let (pages, secs) = ctx.size(("20000", "1"), ("2000", "0.2"));
    let fixture = ctx.tools.fixture("group").display().to_string();
    let workload = [fixture.as_str(), "seq", pages, secs];
    let pb = ctx.path("group.pb.gz").display().to_string();
    let data = ctx.path("group.perf.data").display().to_string();
    // Per tool: (CPU seconds of the whole run, bytes per sample).
    let mut runs: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    let mut commands = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            ["none", "profiler", "perf"]
        } else {
            ["none", "perf", "profiler"]
        };
        for tool in order {
            let mut cmd = match tool {
                "profiler" => ctx.profiler(&[
                    "record",
                    "-F",
                    "999",
                    "-e",
                    GROUP,
                    "-q",
                    "--unwind-stats",
                    "-o",
                    &pb,
                    "--",
                ]),
                "perf" => ctx.perf(&["record", "-F", "999", "-e", GROUP, "-g", "-o", &data, "--"]),
                _ => Command::new("env"),
            };
            let log = ctx.log(&format!("group-{tool}"));
            let f = proc::run(cmd.args(workload), &log, &[0])?;
            let per_sample = match tool {
                "profiler" => profiler_bytes_per_sample(&f.stderr)?,
                "perf" => {
                    let samples = perf_samples(&f.stderr)?;
                    std::fs::metadata(&data)?.len() as f64 / samples
                }
                _ => 0.0,
            };
            runs.entry(tool).or_default().push((f.cpu_s, per_sample));
            if round == 0 && tool != "none" {
                commands.push(ctx.show(&f.command));
            }
        }
    }
    let cpu = |t: &str| median(&runs[t].iter().map(|x| x.0).collect::<Vec<_>>());
    let bytes = |t: &str| median(&runs[t].iter().map(|x| x.1).collect::<Vec<_>>());
    let base = cpu("none");
    let (p_cpu, f_cpu) = (cpu("profiler") - base, cpu("perf") - base);
    let (p_b, f_b) = (bytes("profiler"), bytes("perf"));
    let rows = vec![
        vec![
            format!("CPU time of the tool (s; the workload alone {base:.3})"),
            format!("{p_cpu:.3}"),
            format!("{f_cpu:.3}"),
            format!("{:.2}x", p_cpu / f_cpu),
        ],
        vec![
            "bytes per sample".into(),
            format!("{p_b:.0} (ring records)"),
            format!("{f_b:.0} (perf.data / samples)"),
            format!("{:.2}x", p_b / f_b),
        ],
    ];
    let met = p_cpu <= f_cpu;
    Ok(Section {
        title: "9. Counter groups",
        method: format!(
            "`group seq {pages} {secs}` (tests/fixtures/group.c: {pages} page faults paced over \
             {secs} s of its CPU, then {secs} s of spinning) alone, under `profiler record -e \
             '{GROUP}'` and under `perf record -e '{GROUP}' -g`, 999 Hz, {rounds} rounds, the \
             tools alternating. The CPU time of each run's whole process tree (the tool and \
             the workload it waits for, from wait4) minus the workload's alone, medians: what \
             the tool itself spends, recording and writing its file (pprof, symbolized, for \
             the profiler; perf.data, unsymbolized, for perf; in-kernel sampling costs are \
             charged to the workload, whose work is paced by its own CPU time). Bytes per \
             sample: the profiler's ring-buffer bytes over its samples (`--unwind-stats`), \
             perf.data's size over the samples perf reports writing (with its mmap and comm \
             records)."
        ),
        headers: vec!["what", "profiler", "perf", "ratio"],
        rows,
        commands,
        goal: Goal {
            target: "counter groups cost no more CPU than perf record's leader sampling",
            measured: format!("{p_cpu:.3} s vs {f_cpu:.3} s; {p_b:.0} vs {f_b:.0} bytes/sample"),
            met,
            why: if met {
                String::new()
            } else {
                format!(
                    "{:+.0}% of perf's CPU time. Besides recording, the profiler names every \
                     frame and writes pprof before it exits (perf leaves naming to perf \
                     report); the two were not measured apart.",
                    (p_cpu / f_cpu - 1.0) * 100.0
                )
            },
        },
        notes: vec![],
        raw: json!({"runs": runs}),
    })
}

/// `ring_bytes / samples` from `--unwind-stats`' line.
fn profiler_bytes_per_sample(stderr: &str) -> anyhow::Result<f64> {
    let field = |name: &str| -> Option<f64> {
        stderr
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    match (field("ring_bytes="), field("samples=")) {
        (Some(b), Some(n)) if n > 0.0 => Ok(b / n),
        _ => anyhow::bail!("no unwind-stats line with samples: {stderr}"),
    }
}

/// The `(N samples)` of perf record's last line.
fn perf_samples(stderr: &str) -> anyhow::Result<f64> {
    stderr
        .rsplit_once(" samples)")
        .and_then(|(head, _)| head.rsplit_once('(').map(|(_, n)| n))
        .and_then(|n| n.trim().parse().ok())
        .filter(|n: &f64| *n > 0.0)
        .ok_or_else(|| anyhow::anyhow!("perf record reported no samples: {stderr}"))
}
