//! Measurement 15: Ruby frames. One Debian `ruby3.1` process running `stdlib_work.rb` (CSV,
//! ERB, Time and URI parsing) is recorded in turns by `profiler record -p` without Ruby
//! frames (`--no-ruby`), with them (the default), and by rbspy (crates.io, as users run it:
//! it pauses the target and reads its control frames from user space at every sample) at
//! the same rate: the eBPF program's ns per sample from the kernel's BPF statistics, and
//! each tool's whole CPU (its own process's user + system time, plus for the profiler the
//! eBPF program's run time, which the kernel charges to the sampled task).

use std::{path::Path, process::Command};

use serde_json::json;

use super::{
    Ctx, Goal, Section,
    env::BpfStats,
    proc,
    runtime_cost::{HZ, Run, measure_target},
};
use crate::util::workspace_root;

const RUBY: &str = "/usr/bin/ruby3.1";
const RBSPY: &str = "0.55.0";

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let _stats = BpfStats::enable()?;
    anyhow::ensure!(
        Path::new(RUBY).exists(),
        "no {RUBY}: apt-get install ruby3.1 (cargo xtask test installs it)"
    );
    let spy = crate::tools::rbspy()?;
    let script = workspace_root().join("tests/fixtures/ruby/stdlib_work.rb");
    let sampler =
        |ctx: &mut Ctx, pid: &str, secs: f64, tag: &str| rbspy_run(ctx, &spy, pid, secs, tag);
    let m = measure_target(
        ctx,
        "ruby",
        "--no-ruby",
        Command::new(RUBY).arg(&script),
        &sampler,
    )?;
    let (secs, rounds, steady) = (m.secs, m.rounds, m.steady);
    let (k, c) = (|i| m.kernel(i), |i| m.cpu(i));
    let rows = m.rows([
        "profiler record --no-ruby",
        "profiler record (Ruby frames)",
        "rbspy record",
    ]);
    let kernel_ratio = k(1) / k(0).max(1.0);
    let steady_ratio = steady[0] / steady[1];
    Ok(Section {
        title: "15. Ruby frames",
        method: format!(
            "`ruby3.1 stdlib_work.rb` (Debian's CRuby 3.1.2; CSV written and parsed, an ERB \
             template rendered, ISO 8601 times and URIs parsed; one thread) runs throughout; \
             in each of {rounds} rounds it is recorded for {secs} s at {HZ} Hz by `profiler \
             record -p PID --no-ruby`, by `profiler record -p PID` (Ruby frames: the kernel \
             walks the thread's control frames at each rb_vm_exec frame; the profiler names \
             them from the process's memory soon after) and by `rbspy record -r {HZ} -p PID` \
             (rbspy {RBSPY} from crates.io, as users run it: it pauses the target at every \
             sample). The eBPF program's ns per run are the kernel's BPF statistics of the \
             profiler's perf_event program; a tool's CPU is its own process's user + system \
             seconds, plus for the profiler the program's run time. Each round also records \
             with Ruby frames and with rbspy for three times as long: the CPU of a further \
             second of recording is (long - short) / (2 x {secs} s). Medians."
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
            target: "Ruby frames at most double the eBPF program's cost per sample of a \
                     native-only walk, and the CPU of a further second of recording below \
                     rbspy's at the same rate",
            measured: format!(
                "eBPF {:.0} ns per sample with Ruby frames, {:.0} ns without \
                 ({kernel_ratio:.2}x); per further second {:.1} ms vs rbspy's {:.1} ms \
                 ({steady_ratio:.2}x); a whole {secs} s run {:.3} s vs {:.3} s",
                k(1),
                k(0),
                1e3 * steady[0],
                1e3 * steady[1],
                c(1),
                c(2),
            ),
            met: kernel_ratio <= 2.0 && steady_ratio < 1.0,
            why: "Per control frame the kernel reads four words (pc, iseq, ep, the ep's flags) \
                  and a method entry's one to three; naming reads an iseq's label, path and \
                  line table once per (iseq, pc) in user space."
                .into(),
        },
        notes: vec![],
        raw: json!({
            "ruby": RUBY,
            "rbspy": RBSPY,
            "kernel_ns_per_run": m.runs.kernel,
            "cpu_s": m.runs.cpu,
            "cpu_s_3x_duration": m.runs.long_cpu,
            "steady_cpu_s_per_s": steady,
            "samples": m.runs.samples,
        }),
    })
}

/// `rbspy record -p PID` for `secs` (whole seconds), collapsed stacks into a file.
fn rbspy_run(ctx: &mut Ctx, spy: &Path, pid: &str, secs: f64, tag: &str) -> anyhow::Result<Run> {
    let out = ctx.dir.join(format!("ruby-{tag}-rbspy.txt"));
    let log = ctx.log("ruby-rbspy");
    let f = proc::run(
        Command::new(spy)
            .args(["record", "--silent", "-r", HZ, "-p", pid, "-d"])
            .arg(format!("{:.0}", secs.ceil()))
            .args(["-o", "collapsed", "-f"])
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
