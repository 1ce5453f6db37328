//! Measurement 8: Off-CPU time on a switch-heavy workload (`pingpong`: two threads passing a
//! byte over pipes, a context switch per pass), against what users do today without
//! `perf --off-cpu` (Debian's perf 6.1 is built without it): `perf record -a -e
//! sched:sched_switch -g` while the workload runs, then `perf script` and a fold that pairs
//! each thread's switch-out with its next switch-in, then inferno-flamegraph. Measured: the
//! workload's slowdown, the recorder's own CPU time, the time from the workload's end to the
//! flame graph, and how much of the off-CPU time each puts under the workload's `receive()`.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    fs,
    process::Command,
};

use anyhow::Context as _;
use serde_json::json;

use super::{
    Ctx, Goal, Section, exists_nonempty,
    proc::{self, Finished, median, work_seconds},
};

/// CLOCK_MONOTONIC in seconds (the clock of the fixture's `work-end` line).
fn monotonic() -> f64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .unwrap_or(nix::sys::time::TimeSpec::new(0, 0));
    t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9
}

/// The fixture's `work-end T` line.
fn work_end(f: &Finished) -> anyhow::Result<f64> {
    f.stderr
        .lines()
        .find_map(|l| l.strip_prefix("work-end "))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no work-end line from `{}`", f.command))
}

/// One recorder run: the workload's wall time, the recorder's own CPU time (its rusage
/// includes the workload it reaps, whose CPU time the fixture reports), and the seconds from
/// the workload's end to the recorder's exit.
struct Run {
    work_s: f64,
    own_cpu_s: f64,
    stop_s: f64,
}

fn recorder_run(ctx: &mut Ctx, cmd: &mut Command, what: &str) -> anyhow::Result<(Run, Finished)> {
    let log = ctx.log(what);
    let f = proc::run(cmd, &log, &[0])?;
    let ended = monotonic();
    let (work_s, work_cpu) = work_seconds(&f)?;
    let run = Run {
        work_s,
        own_cpu_s: (f.cpu_s - work_cpu).max(0.0),
        stop_s: ended - work_end(&f)?,
    };
    Ok((run, f))
}

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let passes = ctx.size(200_000u64, 20_000).to_string();
    let rounds = ctx.rounds(5);
    let pp = ctx.tools.fixture("pingpong").display().to_string();
    let svg_p = ctx.path("offcpu-profiler.svg").display().to_string();
    let data = ctx.path("offcpu.data").display().to_string();
    let script = ctx.path("offcpu.script");
    let folded_f = ctx.path("offcpu-perf.folded");
    let svg_f = ctx.path("offcpu-perf.svg");
    let mut alone = Vec::new();
    let (mut prof, mut perf): (Vec<Run>, Vec<Run>) = (Vec::new(), Vec::new());
    // perf's pipeline after the recording: script, fold, flame graph (seconds each).
    let mut post: Vec<[f64; 3]> = Vec::new();
    let mut data_mib = Vec::new();
    let mut commands = Vec::new();
    let mut perf_fold = BTreeMap::new();
    for round in 0..rounds {
        // A B C, then rotated: each tool runs first, second and third in turn.
        for k in 0..3 {
            match (k + round) % 3 {
                0 => {
                    let log = ctx.log("offcpu-alone");
                    let f = proc::run(Command::new(&pp).arg(&passes), &log, &[0])?;
                    alone.push(work_seconds(&f)?.0);
                    if round == 0 {
                        commands.push(ctx.show(&f.command));
                    }
                }
                1 => {
                    let mut cmd = ctx.profiler(&[
                        "record",
                        "--off-cpu",
                        "-F",
                        "99",
                        "-q",
                        "-o",
                        &svg_p,
                        "--",
                        &pp,
                        &passes,
                    ]);
                    let (run, f) = recorder_run(ctx, &mut cmd, "offcpu-profiler")?;
                    exists_nonempty(std::path::Path::new(&svg_p))?;
                    prof.push(run);
                    if round == 0 {
                        commands.push(ctx.show(&f.command));
                    }
                }
                _ => {
                    let mut cmd = ctx.perf(&[
                        "record",
                        "-a",
                        "-e",
                        "sched:sched_switch",
                        "-g",
                        "-q",
                        "-o",
                        &data,
                        "--",
                        &pp,
                        &passes,
                    ]);
                    let (run, f) = recorder_run(ctx, &mut cmd, "offcpu-perf")?;
                    data_mib.push(fs::metadata(&data)?.len() as f64 / (1 << 20) as f64);
                    let (times, folded, shown) = perf_pipeline(ctx, &data, &script, &folded_f)?;
                    let log = ctx.log("offcpu-perf-flamegraph");
                    let started = std::time::Instant::now();
                    let fg = proc::run(
                        Command::new("bash").args([
                            "-o",
                            "pipefail",
                            "-c",
                            &format!(
                                "{} < {} > {}",
                                ctx.tools.flamegraph.display(),
                                folded_f.display(),
                                svg_f.display()
                            ),
                        ]),
                        &log,
                        &[0],
                    )?;
                    let fg_s = started.elapsed().as_secs_f64();
                    exists_nonempty(&svg_f)?;
                    post.push([times[0], times[1], fg_s]);
                    perf.push(run);
                    if round == 0 {
                        commands.push(ctx.show(&f.command));
                        commands.extend(shown);
                        commands.push(ctx.show(&fg.command).replace("bash -o pipefail -c ", ""));
                    }
                    perf_fold = folded;
                }
            }
        }
    }
    // Where the off-CPU time is: one more profiler run to folded stacks.
    let folded_p = ctx.path("offcpu-profiler.folded").display().to_string();
    let mut cmd = ctx.profiler(&[
        "record",
        "--off-cpu",
        "-F",
        "99",
        "-q",
        "-o",
        &folded_p,
        "--",
        &pp,
        &passes,
    ]);
    let (_, f) = recorder_run(ctx, &mut cmd, "offcpu-profiler-folded")?;
    commands.push(ctx.show(&f.command));
    let prof_fold: BTreeMap<String, u64> = fs::read_to_string(&folded_p)?
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(s, _)| s.starts_with("off-cpu;"))
        .filter_map(|(s, n)| Some((s.to_string(), n.parse().ok()?)))
        .collect();
    let (p_under, p_total) = share_under(&prof_fold, "receive");
    let (f_under, f_total) = share_under(&perf_fold, "receive");

    let base = median(&alone);
    let med = |v: &[Run], f: fn(&Run) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let (pw, fw) = (med(&prof, |r| r.work_s), med(&perf, |r| r.work_s));
    let (pc, fc) = (med(&prof, |r| r.own_cpu_s), med(&perf, |r| r.own_cpu_s));
    let (ps, fs_) = (med(&prof, |r| r.stop_s), med(&perf, |r| r.stop_s));
    let col = |i: usize| median(&post.iter().map(|p| p[i]).collect::<Vec<_>>());
    // perf's own part (the fold is this harness's code, built for debugging): the recorder
    // after the end, perf script, the flame graph; and with the fold.
    let perf_own = fs_ + col(0) + col(2);
    let perf_to_svg = perf_own + col(1);
    let pct = |x: f64| (x / base - 1.0) * 100.0;
    let share = |u: u64, t: u64| 100.0 * u as f64 / t.max(1) as f64;
    let rows = vec![
        vec![
            "pingpong alone".into(),
            format!("{base:.3}"),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ],
        vec![
            "profiler record --off-cpu (SVG)".into(),
            format!("{pw:.3}"),
            format!("{:+.1} %", pct(pw)),
            format!("{pc:.2}"),
            format!("{ps:.2}"),
            format!(
                "{:.1} % of {:.2} s",
                share(p_under, p_total),
                p_total as f64 / 1e9
            ),
        ],
        vec![
            "perf record -a -e sched:sched_switch -g, perf script, fold, inferno".into(),
            format!("{fw:.3}"),
            format!("{:+.1} %", pct(fw)),
            format!("{fc:.2}"),
            format!(
                "{perf_own:.2} (record {fs_:.2} + script {:.2} + flame graph {:.2}); \
                 {perf_to_svg:.2} with the fold ({:.2})",
                col(0),
                col(2),
                col(1)
            ),
            format!(
                "{:.1} % of {:.2} s",
                share(f_under, f_total),
                f_total as f64 / 1e9
            ),
        ],
    ];
    let met = pw <= fw && ps <= perf_own;
    let mut notes = vec![format!(
        "perf.data per run: {:.1} MiB (median); the profiler keeps totals in the kernel and \
         writes no data file.",
        median(&data_mib)
    )];
    notes.push(bcc_note(ctx));
    Ok(Section {
        title: "8. Off-CPU time on a switch-heavy workload",
        method: format!(
            "`pingpong {passes}`: two threads pass a byte back and forth over two pipes, so \
             every pass blocks one thread in read() (2 x passes / wall time alone: about {} \
             switches per second here). Alone, under `profiler record --off-cpu` writing the flame graph itself, \
             and under `perf record -a -e sched:sched_switch -g` (what users of Debian's perf \
             6.1, built without `--off-cpu`, can do: system-wide, because a thread's switch-in \
             is recorded in the context of the task it replaces), whose output is turned into \
             an off-CPU flame graph by `perf script --ns`, a fold pairing each thread's \
             switch-out with its next switch-in (written in xtask/src/bench/offcpu.rs, \
             counting time at the switch-out stack) and inferno-flamegraph. {rounds} rounds, \
             rotated; medians. Workload time is the fixture's own wall time; the recorder's \
             CPU time is its rusage minus the workload's CPU time; stop to flame graph is \
             from the workload's end (its CLOCK_MONOTONIC stamp) to the recorder's exit, plus \
             for perf the post-processing (the fold is timed apart: it is this harness's \
             code, in a debug build). The last column is the share of the workload's blocked \
             time (not preempted) whose stack has the fixture's `receive()`, where it \
             blocks in read().",
            (2.0 * passes.parse::<f64>().unwrap_or(0.0) / base) as u64
        ),
        headers: vec![
            "run",
            "workload wall (s)",
            "slowdown",
            "recorder CPU (s)",
            "stop to flame graph (s)",
            "off-CPU time under receive()",
        ],
        rows,
        commands,
        goal: Goal {
            target: "a switch-heavy workload slowed no more than by perf's recording, and \
                     its off-CPU flame graph sooner than perf's pipeline gives one",
            measured: format!(
                "workload {:+.1} % with the profiler vs {:+.1} % with perf; flame graph \
                 {ps:.2} s after the end vs {perf_own:.2} s (without the fold)",
                pct(pw),
                pct(fw)
            ),
            met,
            why: if met {
                String::new()
            } else {
                "The profiler walks every switch-out's stack (unwind tables, in the kernel) \
                 and updates a hash map at every switch-in; perf only copies a frame-pointer \
                 callchain into its buffer. See the rows for which part costs more."
                    .into()
            },
        },
        notes,
        raw: json!({
            "passes": passes,
            "alone_s": alone,
            "profiler": prof.iter().map(|r| json!({"work_s": r.work_s, "own_cpu_s": r.own_cpu_s, "stop_s": r.stop_s})).collect::<Vec<_>>(),
            "perf": perf.iter().map(|r| json!({"work_s": r.work_s, "own_cpu_s": r.own_cpu_s, "stop_s": r.stop_s})).collect::<Vec<_>>(),
            "perf_post_s": post,
            "perf_data_mib": data_mib,
            "under_receive": {"profiler": [p_under, p_total], "perf": [f_under, f_total]},
        }),
    })
}

/// Seconds of `perf script` and of the fold, the folded stacks, the commands as shown.
type PerfPost = ([f64; 2], BTreeMap<String, u64>, Vec<String>);

/// `perf script` into a file, then the fold; returns their times, the folded stacks and the
/// commands as shown.
fn perf_pipeline(
    ctx: &mut Ctx,
    data: &str,
    script: &std::path::Path,
    folded: &std::path::Path,
) -> anyhow::Result<PerfPost> {
    let log = ctx.log("offcpu-perf-script");
    let started = std::time::Instant::now();
    let f = proc::run(
        Command::new("bash").args([
            "-o",
            "pipefail",
            "-c",
            &format!(
                "{} script --ns -i {data} -F comm,tid,time,event,ip,sym,dso,trace > {}",
                ctx.tools.perf.display(),
                script.display()
            ),
        ]),
        &log,
        &[0],
    )?;
    let script_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let stacks = fold(&fs::read_to_string(script)?, "pingpong");
    let mut text = String::new();
    for (stack, ns) in &stacks {
        let _ = writeln!(text, "{stack} {ns}");
    }
    fs::write(folded, text)?;
    let fold_s = started.elapsed().as_secs_f64();
    let shown = vec![
        ctx.show(&f.command).replace("bash -o pipefail -c ", ""),
        "(fold: xtask's off-CPU fold of the script output)".to_string(),
    ];
    Ok(([script_s, fold_s], stacks, shown))
}

/// Off-CPU folded stacks from `perf script` output of `sched:sched_switch` with callchains:
/// each switch-out of a `comm` thread is kept with its stack, and the time until that
/// thread's next switch-in is added to the stack (`comm;outer;..;inner;[off-cpu] NS`).
fn fold(script: &str, comm: &str) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    let mut away: HashMap<u32, (u64, String)> = HashMap::new();
    for block in script.split("\n\n") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let Some(header) = lines.next() else {
            continue;
        };
        let field = |name: &str| {
            header
                .split_whitespace()
                .find_map(|t| t.strip_prefix(name))
                .map(str::to_string)
        };
        let Some(t) = header
            .split_whitespace()
            .find_map(|t| t.strip_suffix(':').filter(|t| t.contains('.')))
            .and_then(parse_ns)
        else {
            continue;
        };
        if let Some(next) = field("next_pid=").and_then(|p| p.parse::<u32>().ok())
            && let Some((t0, stack)) = away.remove(&next)
        {
            *out.entry(stack).or_default() += t.saturating_sub(t0);
        }
        let (Some(prev), Some(prev_comm)) = (
            field("prev_pid=").and_then(|p| p.parse::<u32>().ok()),
            field("prev_comm="),
        ) else {
            continue;
        };
        if prev_comm != comm {
            continue;
        }
        // Frames are innermost first: `ADDR SYM (DSO)`.
        let mut frames: Vec<&str> = lines
            .map(|l| {
                let l = l.trim();
                let sym = l.split_once(' ').map_or(l, |(_, rest)| rest);
                sym.rsplit_once(" (").map_or(sym, |(s, _)| s)
            })
            .collect();
        frames.reverse();
        // `R` and `R+`: preempted, runnable; any other state blocked (as the profiler marks).
        let marker = match field("prev_state=").as_deref() {
            Some(s) if s.starts_with('R') => "[off-cpu:runnable]",
            _ => "[off-cpu]",
        };
        let stack = format!("{comm};{};{marker}", frames.join(";"));
        away.insert(prev, (t, stack));
    }
    out
}

/// `SECONDS.NANOSECONDS` as nanoseconds.
fn parse_ns(t: &str) -> Option<u64> {
    let (s, frac) = t.split_once('.')?;
    let frac = format!("{frac:0<9}");
    Some(s.parse::<u64>().ok()? * 1_000_000_000 + frac.get(..9)?.parse::<u64>().ok()?)
}

/// Nanoseconds of blocked stacks (ending in `[off-cpu]`) with `function` among their frames,
/// and of all blocked stacks.
fn share_under(stacks: &BTreeMap<String, u64>, function: &str) -> (u64, u64) {
    let blocked = stacks.iter().filter(|(s, _)| s.ends_with(";[off-cpu]"));
    let total = blocked.clone().map(|(_, n)| n).sum();
    let under = blocked
        .filter(|(s, _)| s.split(';').any(|f| f == function))
        .map(|(_, n)| n)
        .sum();
    (under, total)
}

/// Whether BCC's offcputime runs here, in one sentence for the notes.
fn bcc_note(ctx: &mut Ctx) -> String {
    let log = ctx.log("offcpu-bcc");
    let tool = "/usr/sbin/offcputime-bpfcc";
    if !std::path::Path::new(tool).exists() {
        return "BCC's offcputime (Debian's bpfcc-tools) is not installed, so it was not \
                compared."
            .into();
    }
    match proc::run(Command::new(tool).args(["-f", "1"]), &log, &[0]) {
        Ok(_) => "BCC's offcputime ran but is not compared yet.".into(),
        Err(_) => {
            let err = fs::read_to_string(log.with_extension("err")).unwrap_or_default();
            let why = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string();
            format!(
                "BCC's offcputime (Debian's bpfcc-tools 0.26) does not run on this kernel, so \
                 it is not compared: `{}` fails with \"{why}\" (BCC \
                 compiles its program at run time against the kernel's headers, which Debian \
                 has no package of for this kernel, and it attaches a kprobe to \
                 finish_task_switch, while this kernel has no kprobes).",
                ctx.show(&format!("{tool} -f 1"))
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fold_pairs_a_switch_out_with_the_next_switch_in() {
        let script = "\
pingpong  10 100.000000100: sched:sched_switch: prev_comm=pingpong prev_pid=10 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
\tffffffff82265ec8 __schedule ([kernel.kallsyms])
\t            1338 receive (/tmp/pingpong)
\t            1400 main (/tmp/pingpong)

swapper/0  0 100.000000350: sched:sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=pingpong next_pid=10 next_prio=120
\tffffffff82265ec8 __schedule ([kernel.kallsyms])
";
        let folded = fold(script, "pingpong");
        assert_eq!(
            folded.into_iter().collect::<Vec<_>>(),
            [(
                "pingpong;main;receive;__schedule;[off-cpu]".to_string(),
                250
            )]
        );
        assert_eq!(parse_ns("12.5"), Some(12_500_000_000));
    }
}
