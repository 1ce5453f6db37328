//! Measurement 11: Python frames. One CPython process running `stdlib_work.py` (difflib,
//! json, tokenize) is recorded in turns by `profiler record -p` without Python frames
//! (`--no-python`), with them (the default), and by py-spy (PyPI, as users run it: blocking
//! reads of the frame chain from user space) at the same rate: the eBPF program's ns per
//! sample from the kernel's BPF statistics, and each tool's whole CPU cost (its own process's
//! user + system time, plus for the profiler the eBPF program's run time, which the kernel
//! charges to the sampled task).

use std::{path::PathBuf, process::Command};

use anyhow::bail;
use nix::sys::signal::Signal;
use serde_json::json;

use super::{
    Ctx, Goal, Section,
    env::BpfStats,
    kernel::prog_stats,
    overhead::STOPPED,
    proc::{self, median},
};
use crate::util::workspace_root;

/// Samples per second, for both tools.
const HZ: &str = "499";

/// pyenv's newest CPython if there is one, else `python3` on the PATH.
fn python() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let versions = PathBuf::from(home).join(".pyenv/versions");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&versions)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("3.12."))
        })
        .map(|p| p.join("bin/python3.12"))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| PathBuf::from("python3"))
}

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(6.0f64, 2.0);
    let rounds = ctx.rounds(3);
    let _stats = BpfStats::enable()?;
    let spy = crate::venv::py_spy()?;
    let python = python();
    let script = workspace_root().join("tests/fixtures/python/stdlib_work.py");
    // Long enough for every run of every round (each run attaches, records, detaches).
    let total = rounds as f64 * (3.0 * (secs + 10.0) + 2.0 * (3.0 * secs + 10.0)) + 30.0;
    let log = ctx.log("python-target");
    let target = proc::start(
        Command::new(&python)
            .arg(&script)
            .arg(format!("{total:.0}")),
        &log,
    )?;
    let pid = target.pid().to_string();
    let result = runs(ctx, &spy, &pid, secs, rounds);
    let _ = target.stop(Signal::SIGKILL, &[128 + 9, 0]);
    let Runs {
        kernel,
        cpu,
        samples,
        long_cpu,
        commands,
    } = result?;
    let k = |i: usize| median(&kernel[i]);
    let c = |i: usize| median(&cpu[i]);
    let s = |i: usize| median(&samples[i]);
    // CPU per further second of recording (the long run's CPU less the short one's, per
    // round), and what is left of the short run: start-up and shut-down.
    let per_sec = |long: &[f64], short: &[f64]| {
        let d: Vec<f64> = long
            .iter()
            .zip(short)
            .map(|(l, s)| (l - s) / (2.0 * secs.ceil()))
            .collect();
        median(&d)
    };
    let steady = [
        per_sec(&long_cpu[0], &cpu[1]),
        per_sec(&long_cpu[1], &cpu[2]),
    ];
    let fixed = [
        c(1) - steady[0] * secs.ceil(),
        c(2) - steady[1] * secs.ceil(),
    ];
    let labels = [
        "profiler record --no-python",
        "profiler record (Python frames)",
        "py-spy record",
    ];
    let rows = (0..3)
        .map(|i| {
            vec![
                labels[i].to_string(),
                if i < 2 {
                    format!("{:.0}", k(i))
                } else {
                    "-".into()
                },
                format!("{:.3}", c(i)),
                format!("{:.0}", s(i)),
                format!("{:.1}", 1e6 * c(i) / s(i).max(1.0)),
            ]
        })
        .collect();
    let ratio = c(1) / c(2);
    let steady_ratio = steady[0] / steady[1];
    Ok(Section {
        title: "11. Python frames",
        method: format!(
            "`{py} stdlib_work.py` (difflib, json, tokenize; one thread) runs throughout; in \
             each of {rounds} rounds it is recorded for {secs} s at {HZ} Hz by `profiler record \
             -p PID --no-python`, by `profiler record -p PID` (Python frames) and by `py-spy \
             record -r {HZ} -p PID -f raw` (py-spy {v}, as users run it: it pauses the target \
             and reads its frame chain with syscalls at every sample). The eBPF program's ns \
             per run are the kernel's BPF statistics (`kernel.bpf_stats_enabled=1`) of the \
             profiler's perf_event program; a tool's CPU is its own process's user + system \
             seconds (wait4's rusage), plus for the profiler the program's run time (charged \
             to the sampled process). Samples are what each tool wrote. Each round also \
             records with Python frames and with py-spy for three times as long: the CPU of a \
             further second of recording is (long - short) / (2 x {secs} s), and the rest of a \
             run's CPU is its start-up and shut-down (the profiler loads its eBPF programs and \
             builds libpython's unwind tables once). Medians.",
            py = python.display(),
            v = "0.4.3",
        ),
        headers: vec![
            "tool",
            "eBPF ns per sample",
            "CPU s (tool + eBPF)",
            "samples",
            "CPU us per sample",
        ],
        rows,
        commands,
        goal: Goal {
            target: "the CPU cost of Python frames at most a third of py-spy's at the same rate \
                     (per second of recording, the way a continuous profiler runs)",
            measured: format!(
                "per further second {:.1} ms vs py-spy's {:.1} ms ({steady_ratio:.2}x); a whole \
                 {secs} s run {:.3} s vs {:.3} s ({ratio:.2}x), of which start-up and shut-down \
                 {:.2} s vs {:.2} s; eBPF {:.0} ns per sample with Python frames, {:.0} ns \
                 without",
                1e3 * steady[0],
                1e3 * steady[1],
                c(1),
                c(2),
                fixed[0],
                fixed[1],
                k(1),
                k(0)
            ),
            met: steady_ratio <= 1.0 / 3.0,
            why: "The profiler's own process names each Python frame once per distinct (code \
                  object, instruction) and reads each code object once; what remains is the \
                  native stack walk and symbolization it does for every sample of any \
                  program."
                .into(),
        },
        notes: vec![],
        raw: json!({
            "python": python.display().to_string(),
            "kernel_ns_per_run": kernel,
            "cpu_s": cpu,
            "cpu_s_3x_duration": long_cpu,
            "steady_cpu_s_per_s": steady,
            "samples": samples,
        }),
    })
}

/// Per configuration (profiler --no-python, profiler, py-spy): eBPF ns per sample (the
/// profiler's two), CPU s and samples of each `secs` run; CPU s of the profiler's and
/// py-spy's `3 * secs` runs; the commands.
struct Runs {
    kernel: Vec<Vec<f64>>,
    cpu: Vec<Vec<f64>>,
    samples: Vec<Vec<f64>>,
    long_cpu: Vec<Vec<f64>>,
    commands: Vec<String>,
}

/// One run of a tool: its CPU s, its samples, its command.
pub(super) struct Run {
    pub(super) cpu_s: f64,
    pub(super) samples: f64,
    pub(super) command: String,
}

fn runs(
    ctx: &mut Ctx,
    spy: &std::path::Path,
    pid: &str,
    secs: f64,
    rounds: usize,
) -> anyhow::Result<Runs> {
    let mut r = Runs {
        kernel: vec![Vec::new(); 2],
        cpu: vec![Vec::new(); 3],
        samples: vec![Vec::new(); 3],
        long_cpu: vec![Vec::new(); 2],
        commands: Vec::new(),
    };
    for round in 0..rounds {
        for (i, extra) in [&["--no-python"][..], &[]].iter().enumerate() {
            let tag = format!("{round}-{i}");
            let (run, ns_per_run) = profiler_run(ctx, "python", pid, extra, secs, &tag)?;
            r.kernel[i].push(ns_per_run);
            r.cpu[i].push(run.cpu_s);
            r.samples[i].push(run.samples);
            if round == 0 {
                r.commands.push(run.command);
            }
        }
        let run = spy_run(ctx, spy, pid, secs, &format!("{round}"))?;
        r.cpu[2].push(run.cpu_s);
        r.samples[2].push(run.samples);
        if round == 0 {
            r.commands.push(run.command);
        }
        // Three times as long: what a further second of recording costs, start-up apart.
        let (long, _) = profiler_run(
            ctx,
            "python",
            pid,
            &[],
            3.0 * secs,
            &format!("{round}-long"),
        )?;
        r.long_cpu[0].push(long.cpu_s);
        let long = spy_run(ctx, spy, pid, 3.0 * secs, &format!("{round}-long"))?;
        r.long_cpu[1].push(long.cpu_s);
    }
    Ok(r)
}

/// `profiler record -p PID` with `extra` for `secs` (files named after `what`); also its
/// eBPF ns per program run.
pub(super) fn profiler_run(
    ctx: &mut Ctx,
    what: &str,
    pid: &str,
    extra: &[&str],
    secs: f64,
    tag: &str,
) -> anyhow::Result<(Run, f64)> {
    let out = ctx.dir.join(format!("{what}-{tag}.folded"));
    let mut args = vec!["record", "-F", HZ, "-p", pid, "-q", "-o"];
    let out_s = out.display().to_string();
    args.push(&out_s);
    args.extend(extra);
    let log = ctx.log(&format!("{what}-profiler"));
    let rec = proc::start(&mut ctx.profiler(&args), &log)?;
    rec.wait_attached(1)?;
    std::thread::sleep(std::time::Duration::from_secs_f64(secs));
    let (ns, cnt) = prog_stats(rec.pid())?;
    let f = rec.stop(Signal::SIGINT, &STOPPED)?;
    if cnt == 0 {
        bail!("the eBPF program never ran in `{}`", f.command);
    }
    let command = ctx.show(&f.command);
    let run = Run {
        cpu_s: f.cpu_s + ns as f64 / 1e9,
        samples: folded_samples(&out)?,
        command,
    };
    Ok((run, ns as f64 / cnt as f64))
}

/// `py-spy record -p PID` for `secs` (whole seconds, as py-spy takes them).
fn spy_run(
    ctx: &mut Ctx,
    spy: &std::path::Path,
    pid: &str,
    secs: f64,
    tag: &str,
) -> anyhow::Result<Run> {
    let out = ctx.dir.join(format!("python-{tag}-spy.txt"));
    let log = ctx.log("python-py-spy");
    let f = proc::run(
        Command::new(spy)
            .args(["record", "-r", HZ, "-p", pid, "-d"])
            .arg(format!("{:.0}", secs.ceil()))
            .args(["-f", "raw", "-o"])
            .arg(&out),
        &log,
        &[0],
    )?;
    let text = std::fs::read_to_string(&out)?;
    let n: f64 = text
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    Ok(Run {
        cpu_s: f.cpu_s,
        samples: n,
        command: ctx.show(&f.command),
    })
}

/// Samples of a folded file written by the profiler (its header says them).
fn folded_samples(path: &std::path::Path) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("# profiler-folded event=")?
                .split(' ')
                .find_map(|kv| kv.strip_prefix("samples="))?
                .parse()
                .ok()
        })
        .ok_or_else(|| anyhow::anyhow!("{}: no samples= in its header", path.display()))
}

/// What [`on_off_rounds`] measured: per variant (0: the runtime's frames off, 1: on), each
/// round's eBPF ns per sample, CPU seconds, samples and mean frames per stack.
pub(super) struct OnOff {
    pub(super) kernel: [Vec<f64>; 2],
    pub(super) cpu: [Vec<f64>; 2],
    pub(super) samples: [Vec<f64>; 2],
    pub(super) depth: [Vec<f64>; 2],
    /// The first round's two commands.
    pub(super) commands: Vec<String>,
}

/// `rounds` rounds of `record -p PID` for `secs` with `off` (the flag that turns a runtime's
/// frames off) and without it, interleaved; `what` names the files.
pub(super) fn on_off_rounds(
    ctx: &mut Ctx,
    what: &str,
    pid: &str,
    off: &str,
    secs: f64,
    rounds: usize,
) -> anyhow::Result<OnOff> {
    let mut m = OnOff {
        kernel: Default::default(),
        cpu: Default::default(),
        samples: Default::default(),
        depth: Default::default(),
        commands: Vec::new(),
    };
    for round in 0..rounds {
        for (i, extra) in [&[off][..], &[]].iter().enumerate() {
            let tag = format!("{round}-{i}");
            let (run, ns) = profiler_run(ctx, what, pid, extra, secs, &tag)?;
            m.kernel[i].push(ns);
            m.cpu[i].push(run.cpu_s);
            m.samples[i].push(run.samples);
            m.depth[i].push(mean_depth(&ctx.dir.join(format!("{what}-{tag}.folded")))?);
            if round == 0 {
                m.commands.push(run.command);
            }
        }
    }
    Ok(m)
}

/// The mean number of frames of the stacks in the folded file `path` (weighted by count;
/// the first field, the process name, is not a frame).
fn mean_depth(path: &std::path::Path) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(path)?;
    let (mut frames, mut total) = (0f64, 0f64);
    for line in text.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<f64>() else { continue };
        frames += n * stack.split(';').count().saturating_sub(1) as f64;
        total += n;
    }
    Ok(frames / total.max(1.0))
}
