//! Measurement 12: JavaScript frames. One Node process running `library.js` (util.inspect,
//! URL parsing, regular expressions, JSON, a sort with a JS comparator) is recorded in turns
//! by `profiler record -p` without JS frames (`--no-js`) and with them (the default) at the
//! same rate: the eBPF program's ns per sample from the kernel's BPF statistics, and the
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

const NODE: &str = "/usr/bin/node";

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(6.0f64, 2.0);
    let rounds = ctx.rounds(3);
    let _stats = BpfStats::enable()?;
    let script = workspace_root().join("tests/fixtures/node/library.js");
    let total = rounds as f64 * 2.0 * (secs + 10.0) + 30.0;
    let log = ctx.log("node-target");
    let target = proc::start(
        Command::new(NODE).arg(&script).arg(format!("{total:.0}")),
        &log,
    )?;
    let pid = target.pid().to_string();
    let result = on_off_rounds(ctx, "node", &pid, "--no-js", secs, rounds);
    let _ = target.stop(Signal::SIGKILL, &[128 + 9, 0]);
    let OnOff {
        kernel,
        cpu,
        samples,
        commands,
        ..
    } = result?;
    let k = |i: usize| median(&kernel[i]);
    let c = |i: usize| median(&cpu[i]);
    let s = |i: usize| median(&samples[i]);
    let labels = ["profiler record --no-js", "profiler record (JS frames)"];
    let rows = (0..2)
        .map(|i| {
            vec![
                labels[i].to_string(),
                format!("{:.0}", k(i)),
                format!("{:.3}", c(i)),
                format!("{:.0}", s(i)),
                format!("{:.1}", 1e6 * c(i) / s(i).max(1.0)),
            ]
        })
        .collect();
    let ratio = k(1) / k(0).max(1.0);
    let per_sample = (1e6 * c(1) / s(1).max(1.0)) / (1e6 * c(0) / s(0).max(1.0));
    Ok(Section {
        title: "12. JavaScript frames",
        method: format!(
            "`node library.js` (Node's own util.inspect, URL parsing, regular expressions, \
             JSON and a sort with a JS comparator; one thread) runs throughout; in each of \
             {rounds} rounds it is recorded for {secs} s at 499 Hz by `profiler record -p PID \
             --no-js` and by `profiler record -p PID` (JS frames: the kernel checks each \
             frame-pointer frame's slots through V8's maps; the profiler names the frames from \
             node's heap soon after). The eBPF program's ns per run are the kernel's BPF \
             statistics of the profiler's perf_event program; the profiler's CPU is its own \
             process's user + system seconds plus the program's run time. Medians."
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
            target: "JS frames at most double the eBPF program's cost per sample of a native-only \
                     walk of the same process",
            measured: format!(
                "eBPF {:.0} ns per sample with JS frames, {:.0} ns without ({ratio:.2}x); the \
                 profiler's whole CPU per sample {per_sample:.2}x",
                k(1),
                k(0)
            ),
            met: ratio <= 2.0,
            why: "Per JS frame the kernel reads five words more than a frame-pointer step \
                  (marker, function, its map, the map's type, the bytecode slots); naming \
                  reads a function's name and positions once per (function, position) and \
                  then one word per frame to check the cache."
                .into(),
        },
        notes: vec![],
        raw: json!({
            "kernel_ns_per_run": kernel,
            "cpu_s": cpu,
            "samples": samples,
        }),
    })
}
