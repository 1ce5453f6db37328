//! Measurement 4: Post-processing: from a finished 30 s, 999 Hz system-wide recording to an SVG flame
//! graph (`profiler flamegraph` vs `perf script | inferno-collapse-perf |
//! inferno-flamegraph`), and `profiler report` vs `perf report --stdio`. Both recordings are
//! taken at the same time, of the same workload.

use std::process::Command;

use serde_json::json;

use super::{
    Ctx, Goal, Section, exists_nonempty,
    proc::{self, Background, median},
};

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(30u64, 3).to_string();
    let rounds = ctx.rounds(3);
    let pb = ctx.path("post.pb").display().to_string();
    let data = ctx.path("post.data").display().to_string();
    let w = ctx.work(0, ctx.ncpu as u32);
    let log = ctx.log("busy");
    let busy = Background::start(Command::new(&w[0]).args(&w[1..]), &log)?;
    let log = ctx.log("post-profiler-record");
    let prof = proc::start(
        &mut ctx.profiler(&["record", "-a", "-F", "999", "-d", &secs, "-q", "-o", &pb]),
        &log,
    )?;
    let log = ctx.log("post-perf-record");
    let perf = proc::start(
        &mut ctx.perf(&[
            "record", "-a", "-g", "-F", "999", "-q", "-o", &data, "--", "sleep", &secs,
        ]),
        &log,
    )?;
    let (rp, rf) = (prof.wait(&[0])?, perf.wait(&[0])?);
    drop(busy);
    let mut commands = vec![ctx.show(&rp.command), ctx.show(&rf.command)];

    let svg_p = ctx.path("profiler.svg");
    let svg_f = ctx.path("perf.svg");
    let pipeline = format!(
        "{} script -i {data} | {} | {} > {}",
        ctx.tools.perf.display(),
        ctx.tools.collapse.display(),
        ctx.tools.flamegraph.display(),
        svg_f.display()
    );
    let svg_p_s = svg_p.display().to_string();
    let profiler = ctx.tools.profiler.display().to_string();
    let perf_bin = ctx.tools.perf.display().to_string();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // (program, arguments): flame graph by each tool, then report by each.
    let jobs: [(String, Vec<String>); 4] = [
        (
            profiler.clone(),
            strings(&["flamegraph", "-i", &pb, "-o", &svg_p_s]),
        ),
        ("bash".into(), strings(&["-o", "pipefail", "-c", &pipeline])),
        (profiler, strings(&["report", "-i", &pb])),
        (perf_bin, strings(&["report", "--stdio", "-i", &data])),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); jobs.len()];
    for round in 0..rounds {
        // Pairs A B, then B A next round.
        for pair in [[0, 1], [2, 3]] {
            let order = if round % 2 == 0 {
                pair
            } else {
                [pair[1], pair[0]]
            };
            for j in order {
                let log = ctx.log("post");
                let f = proc::run(Command::new(&jobs[j].0).args(&jobs[j].1), &log, &[0])?;
                if j >= 2 && f.stdout.trim().is_empty() {
                    anyhow::bail!("`{}` printed no report", f.command);
                }
                times[j].push(f.wall_s);
                if round == 0 {
                    commands.push(ctx.show(&f.command).replace("bash -o pipefail -c ", ""));
                }
            }
        }
    }
    exists_nonempty(&svg_p)?;
    exists_nonempty(&svg_f)?;
    let m: Vec<f64> = times.iter().map(|t| median(t)).collect();
    let mut rows = vec![
        vec![
            "flame graph SVG".into(),
            format!("{:.3}", m[0]),
            format!("{:.3}", m[1]),
            format!("{:.1}x", m[1] / m[0]),
        ],
        vec![
            "report (text)".into(),
            format!("{:.3}", m[2]),
            format!("{:.3}", m[3]),
            format!("{:.1}x", m[3] / m[2]),
        ],
    ];
    rows.push(vec![
        format!("(the recording itself: {secs} s, then finishing)"),
        format!("{:.2}", rp.wall_s),
        format!("{:.2}", rf.wall_s),
        String::new(),
    ]);
    let speedup = m[1] / m[0];
    let size = |p: &str| std::fs::metadata(p).map_or(0, |m| m.len());
    Ok(Section {
        title: "4. Post-processing",
        method: format!(
            "`profiler record -a -F 999 -d {secs} -o post.pb` (pprof) and `perf record -a -g -F \
             999` run at the same time for {secs} s while `work 0 {n}` keeps every CPU busy. \
             Then, {rounds} rounds alternating the tools: wall time from the finished recording \
             to an SVG flame graph, and to the text report. Seconds, medians; the last column \
             is how many times faster the profiler is. The profiler symbolizes and aggregates \
             when the recording ends (perf does it in `perf script`/`perf report`), so the last \
             row gives each recording's own wall time, that finishing included.",
            n = ctx.ncpu
        ),
        headers: vec![
            "from a finished recording to",
            "profiler (s)",
            "perf (s)",
            "speed-up",
        ],
        rows,
        commands,
        goal: Goal {
            target: "flame graph at least 5x faster than perf script | inferno",
            measured: format!("{speedup:.1}x ({:.3} s vs {:.3} s)", m[0], m[1]),
            met: speedup >= 5.0,
            why: if speedup >= 5.0 {
                String::new()
            } else {
                "The profile is already symbolized and aggregated when it is written, so the \
                 remaining cost is decoding the pprof and laying out the SVG; closing it \
                 means writing the SVG straight from the recording (`record -o x.svg`)."
                    .into()
            },
        },
        notes: vec![format!(
            "Recording sizes: profiler pprof {} KiB, perf.data {} KiB.",
            size(&pb) / 1024,
            size(&data) / 1024
        )],
        raw: json!({
            "duration_s": secs,
            "flamegraph_s": {"profiler": times[0], "perf_inferno": times[1]},
            "report_s": {"profiler": times[2], "perf": times[3]},
            "record_wall_s": {"profiler": rp.wall_s, "perf": rf.wall_s},
            "bytes": {"profiler": size(&pb), "perf": size(&data)},
        }),
    })
}
