//! What the runtime-frame measurements (11 Python, 12 JavaScript, 13 Java, 15 Ruby) share:
//! rounds of `profiler record -p PID` with a runtime's frames off and on, and beside the
//! runtime's own sampler, with the CPU of a further second of recording.

use std::process::Command;

use anyhow::bail;
use nix::sys::signal::Signal;

use super::{Ctx, kernel::prog_stats, overhead::STOPPED, proc};

/// Samples per second, for every tool.
pub(super) const HZ: &str = "499";

/// Per configuration (the profiler without the runtime's frames, with them, the runtime's
/// sampler): eBPF ns per sample (the profiler's two), CPU s and samples of each `secs` run;
/// CPU s of the profiler's and the sampler's `3 * secs` runs; the commands.
pub(super) struct Runs {
    pub(super) kernel: Vec<Vec<f64>>,
    pub(super) cpu: Vec<Vec<f64>>,
    pub(super) samples: Vec<Vec<f64>>,
    pub(super) long_cpu: Vec<Vec<f64>>,
    pub(super) commands: Vec<String>,
}

/// One run of a tool: its CPU s, its samples, its command.
pub(super) struct Run {
    pub(super) cpu_s: f64,
    pub(super) samples: f64,
    pub(super) command: String,
}

/// A runtime's sampler recording process `pid` for `secs` (files tagged `tag`).
pub(super) type Sampler<'a> = &'a dyn Fn(&mut Ctx, &str, f64, &str) -> anyhow::Result<Run>;

/// `rounds` rounds of: `record -p PID` with `off` (the flag that turns the runtime `what`'s
/// frames off) and without it, the runtime's `sampler`, then the profiler and the sampler
/// for three times as long (what a further second of recording costs, start-up apart).
pub(super) fn runs(
    ctx: &mut Ctx,
    what: &str,
    off: &str,
    sampler: Sampler,
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
        for (i, extra) in [&[off][..], &[]].iter().enumerate() {
            let tag = format!("{round}-{i}");
            let (run, ns_per_run) = profiler_run(ctx, what, pid, extra, secs, &tag)?;
            r.kernel[i].push(ns_per_run);
            r.cpu[i].push(run.cpu_s);
            r.samples[i].push(run.samples);
            if round == 0 {
                r.commands.push(run.command);
            }
        }
        let run = sampler(ctx, pid, secs, &format!("{round}"))?;
        r.cpu[2].push(run.cpu_s);
        r.samples[2].push(run.samples);
        if round == 0 {
            r.commands.push(run.command);
        }
        let long_tag = format!("{round}-long");
        let (long, _) = profiler_run(ctx, what, pid, &[], 3.0 * secs, &long_tag)?;
        r.long_cpu[0].push(long.cpu_s);
        let long = sampler(ctx, pid, 3.0 * secs, &long_tag)?;
        r.long_cpu[1].push(long.cpu_s);
    }
    Ok(r)
}

/// What [`measure_target`] measured.
pub(super) struct Measured {
    pub(super) runs: Runs,
    /// [`steady`]'s CPU per further second (the profiler's, the sampler's).
    pub(super) steady: [f64; 2],
    pub(super) secs: f64,
    pub(super) rounds: usize,
}

/// A runtime section's rounds ([`runs`]: 6 s runs, 3 rounds; 2 s and 1 with `--quick`)
/// against one process of `target` (the runtime doing library work, given the seconds to
/// run as its last argument: long enough for every run), started here and killed after.
pub(super) fn measure_target(
    ctx: &mut Ctx,
    what: &str,
    off: &str,
    target: &mut Command,
    sampler: Sampler,
) -> anyhow::Result<Measured> {
    let secs = ctx.size(6.0f64, 2.0);
    let rounds = ctx.rounds(3);
    // Each run attaches, records, detaches: three short runs and two long ones a round.
    let total = rounds as f64 * (3.0 * (secs + 10.0) + 2.0 * (3.0 * secs + 10.0)) + 30.0;
    target.arg(format!("{total:.0}"));
    let log = ctx.log(&format!("{what}-target"));
    let running = proc::start(target, &log)?;
    let pid = running.pid().to_string();
    let result = runs(ctx, what, off, sampler, &pid, secs, rounds);
    let _ = running.stop(Signal::SIGKILL, &[128 + 9, 0]);
    let runs = result?;
    let steady = steady(&runs, secs);
    Ok(Measured {
        runs,
        steady,
        secs,
        rounds,
    })
}

impl Measured {
    /// Medians per configuration (0: the runtime's frames off, 1: on, 2: the sampler): the
    /// eBPF program's ns per sample (the profiler's two), CPU s, samples.
    pub(super) fn kernel(&self, i: usize) -> f64 {
        proc::median(&self.runs.kernel[i])
    }

    pub(super) fn cpu(&self, i: usize) -> f64 {
        proc::median(&self.runs.cpu[i])
    }

    pub(super) fn samples(&self, i: usize) -> f64 {
        proc::median(&self.runs.samples[i])
    }

    /// The section's table: per configuration (named by `labels`), eBPF ns per sample, CPU
    /// s, samples, CPU us per sample.
    pub(super) fn rows(&self, labels: [&str; 3]) -> Vec<Vec<String>> {
        (0..3)
            .map(|i| {
                vec![
                    labels[i].to_string(),
                    if i < 2 {
                        format!("{:.0}", self.kernel(i))
                    } else {
                        "-".into()
                    },
                    format!("{:.3}", self.cpu(i)),
                    format!("{:.0}", self.samples(i)),
                    format!("{:.1}", 1e6 * self.cpu(i) / self.samples(i).max(1.0)),
                ]
            })
            .collect()
    }
}

/// CPU per further second of recording, per tool (the profiler with the runtime's frames,
/// the sampler): each round's long run's CPU less its short one's, over the difference in
/// whole seconds; medians.
pub(super) fn steady(r: &Runs, secs: f64) -> [f64; 2] {
    let per_sec = |long: &[f64], short: &[f64]| {
        let d: Vec<f64> = long
            .iter()
            .zip(short)
            .map(|(l, s)| (l - s) / (2.0 * secs.ceil()))
            .collect();
        proc::median(&d)
    };
    [
        per_sec(&r.long_cpu[0], &r.cpu[1]),
        per_sec(&r.long_cpu[1], &r.cpu[2]),
    ]
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
