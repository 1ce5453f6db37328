//! Measurement 13: Java frames. One JVM (Debian's JDK 17) running `Library.java` (regex
//! matching, TimSort with a comparator, String.format) is recorded in turns by `profiler
//! record -p` without Java frames (`--no-java`) and with them (the default) at the same rate: the eBPF program's ns per sample from the kernel's BPF statistics, and the
//! profiler's whole CPU per sample (its own process's user + system time, plus the eBPF
//! program's run time, which the kernel charges to the sampled task).

use std::process::Command;

use nix::sys::signal::Signal;
use serde_json::json;

use super::{
    Ctx, Goal, Section,
    env::BpfStats,
    proc::{self, median},
    runtime_cost::{OnOff, on_off_rounds},
};
use crate::util::workspace_root;

const JDK: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(6.0f64, 2.0);
    let rounds = ctx.rounds(3);
    let _stats = BpfStats::enable()?;
    let classes = ctx.dir.join("java-classes");
    let src = workspace_root().join("tests/fixtures/java");
    let javac = Command::new(format!("{JDK}/bin/javac"))
        .args(["-g", "-d"])
        .arg(&classes)
        .arg(src.join("Library.java"))
        .status()?;
    anyhow::ensure!(javac.success(), "javac failed on Library.java");
    let total = rounds as f64 * 2.0 * (secs + 10.0) + 30.0;
    let log = ctx.log("java-target");
    let target = proc::start(
        Command::new(format!("{JDK}/bin/java"))
            .arg("-cp")
            .arg(&classes)
            .arg("fixture.Library")
            .arg(format!("{total:.0}")),
        &log,
    )?;
    // Past the JVM's start and its first compilations: the steady state is measured.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let pid = target.pid().to_string();
    let result = on_off_rounds(ctx, "java", &pid, "--no-java", secs, rounds);
    let _ = target.stop(Signal::SIGKILL, &[128 + 9, 0]);
    let OnOff {
        kernel,
        cpu,
        samples,
        depth,
        commands,
    } = result?;
    let k = |i: usize| median(&kernel[i]);
    let c = |i: usize| median(&cpu[i]);
    let s = |i: usize| median(&samples[i]);
    let d = |i: usize| median(&depth[i]);
    let labels = ["profiler record --no-java", "profiler record (Java frames)"];
    let rows = (0..2)
        .map(|i| {
            vec![
                labels[i].to_string(),
                format!("{:.0}", k(i)),
                format!("{:.3}", c(i)),
                format!("{:.0}", s(i)),
                format!("{:.1}", 1e6 * c(i) / s(i).max(1.0)),
                format!("{:.1}", d(i)),
                format!("{:.0}", k(i) / d(i).max(1.0)),
            ]
        })
        .collect();
    let ratio = k(1) / k(0).max(1.0);
    let per_frame = (k(1) / d(1).max(1.0)) / (k(0) / d(0).max(1.0)).max(1.0);
    let per_sample = (1e6 * c(1) / s(1).max(1.0)) / (1e6 * c(0) / s(0).max(1.0));
    Ok(Section {
        title: "13. Java frames",
        method: format!(
            "`java fixture.Library` (Debian's JDK 17; the JDK's regex matching, TimSort with a \
             comparator and String.format; one thread) runs throughout, measured from 3 s after \
             its start; in each of {rounds} rounds it is recorded for {secs} s at 499 Hz by \
             `profiler record -p PID --no-java` and by `profiler record -p PID` (Java frames: \
             the kernel finds each code-cache PC's blob through the segment map and reads the \
             interpreter's slots; the profiler names the frames from metaspace and the \
             nmethods' debug data soon after). The eBPF program's ns per run are the kernel's \
             BPF statistics of the profiler's perf_event program; the profiler's CPU is its \
             own process's user + system seconds plus the program's run time. Medians."
        ),
        headers: vec![
            "tool",
            "eBPF ns per sample",
            "CPU s (tool + eBPF)",
            "samples",
            "CPU us per sample",
            "frames per stack",
            "eBPF ns per frame",
        ],
        rows,
        commands,
        goal: Goal {
            target: "Java frames at most double the eBPF program's cost per frame of a \
                     native-only walk of the same process",
            measured: format!(
                "eBPF {:.0} ns per sample with Java frames ({:.1} frames a stack), {:.0} ns \
                 without ({:.1} frames: the walk stops in the first compiled Java frame): \
                 {ratio:.2}x per sample, {per_frame:.2}x per frame; the profiler's whole CPU \
                 per sample {per_sample:.2}x",
                k(1),
                d(1),
                k(0),
                d(0)
            ),
            met: per_frame <= 2.0,
            why: "Without Java frames the code cache has no unwind table and its frames are \
                  walked by frame pointer (compiled Java frames keep none, so those stacks end \
                  early and cost little); with them, a compiled frame costs a segment-map walk \
                  (one byte per hop) and one read of the blob's header, an interpreted one four \
                  words. Naming reads a method or nmethod once, then serves it from a cache."
                .into(),
        },
        notes: vec![],
        raw: json!({
            "kernel_ns_per_run": kernel,
            "cpu_s": cpu,
            "samples": samples,
            "frames_per_stack": depth,
        }),
    })
}
