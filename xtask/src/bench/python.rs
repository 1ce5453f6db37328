//! Measurement 11: Python frames. One CPython process running `stdlib_work.py` (difflib,
//! json, tokenize) is recorded in turns by `profiler record -p` without Python frames
//! (`--no-python`), with them (the default), and by py-spy (PyPI, as users run it: blocking
//! reads of the frame chain from user space) at the same rate: the eBPF program's ns per
//! sample from the kernel's BPF statistics, and each tool's whole CPU cost (its own process's
//! user + system time, plus for the profiler the eBPF program's run time, which the kernel
//! charges to the sampled task).

use std::{path::PathBuf, process::Command};

use serde_json::json;

use super::{
    Ctx, Goal, Section,
    env::BpfStats,
    proc,
    runtime_cost::{HZ, Run, measure_target},
};
use crate::util::workspace_root;

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
    let _stats = BpfStats::enable()?;
    let spy = crate::venv::py_spy()?;
    let python = python();
    let script = workspace_root().join("tests/fixtures/python/stdlib_work.py");
    let sampler =
        |ctx: &mut Ctx, pid: &str, secs: f64, tag: &str| spy_run(ctx, &spy, pid, secs, tag);
    let m = measure_target(
        ctx,
        "python",
        "--no-python",
        Command::new(&python).arg(&script),
        &sampler,
    )?;
    let (secs, rounds, steady) = (m.secs, m.rounds, m.steady);
    let (k, c) = (|i| m.kernel(i), |i| m.cpu(i));
    let fixed = [
        c(1) - steady[0] * secs.ceil(),
        c(2) - steady[1] * secs.ceil(),
    ];
    let rows = m.rows([
        "profiler record --no-python",
        "profiler record (Python frames)",
        "py-spy record",
    ]);
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
        commands: m.runs.commands.clone(),
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
            "kernel_ns_per_run": m.runs.kernel,
            "cpu_s": m.runs.cpu,
            "cpu_s_3x_duration": m.runs.long_cpu,
            "steady_cpu_s_per_s": steady,
            "samples": m.runs.samples,
        }),
    })
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
