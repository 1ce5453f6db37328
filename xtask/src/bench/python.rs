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
    let total = rounds as f64 * 3.0 * (secs + 10.0) + 30.0;
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
    let (kernel, cpu, samples, commands) = result?;
    let k = |i: usize| median(&kernel[i]);
    let c = |i: usize| median(&cpu[i]);
    let s = |i: usize| median(&samples[i]);
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
             to the sampled process). Samples are what each tool wrote. Medians.",
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
            target: "the whole CPU cost of Python frames at most a third of py-spy's at the same rate",
            measured: format!(
                "{:.3} s vs py-spy's {:.3} s ({ratio:.2}x); eBPF {:.0} ns per sample with Python \
                 frames, {:.0} ns without",
                c(1),
                c(2),
                k(1),
                k(0)
            ),
            met: ratio <= 1.0 / 3.0,
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
            "samples": samples,
        }),
    })
}

type Runs = (Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<Vec<f64>>, Vec<String>);

fn runs(
    ctx: &mut Ctx,
    spy: &std::path::Path,
    pid: &str,
    secs: f64,
    rounds: usize,
) -> anyhow::Result<Runs> {
    let mut kernel = vec![Vec::new(); 2];
    let mut cpu = vec![Vec::new(); 3];
    let mut samples = vec![Vec::new(); 3];
    let mut commands = Vec::new();
    for round in 0..rounds {
        for (i, extra) in [&["--no-python"][..], &[]].iter().enumerate() {
            let out = ctx.dir.join(format!("python-{round}-{i}.folded"));
            let mut args = vec!["record", "-F", HZ, "-p", pid, "-q", "-o"];
            let out_s = out.display().to_string();
            args.push(&out_s);
            args.extend(*extra);
            let log = ctx.log("python-profiler");
            let rec = proc::start(&mut ctx.profiler(&args), &log)?;
            rec.wait_attached(1)?;
            std::thread::sleep(std::time::Duration::from_secs_f64(secs));
            let (ns, cnt) = prog_stats(rec.pid())?;
            let f = rec.stop(Signal::SIGINT, &STOPPED)?;
            if cnt == 0 {
                bail!("the eBPF program never ran in `{}`", f.command);
            }
            kernel[i].push(ns as f64 / cnt as f64);
            cpu[i].push(f.cpu_s + ns as f64 / 1e9);
            samples[i].push(folded_samples(&out)?);
            if round == 0 {
                commands.push(ctx.show(&f.command));
            }
        }
        let out = ctx.dir.join(format!("python-{round}-spy.txt"));
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
        cpu[2].push(f.cpu_s);
        let text = std::fs::read_to_string(&out)?;
        let n: f64 = text
            .lines()
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        samples[2].push(n);
        if round == 0 {
            commands.push(ctx.show(&f.command));
        }
    }
    Ok((kernel, cpu, samples, commands))
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
