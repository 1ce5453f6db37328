//! Measurement 2: In-kernel cost per sample: the eBPF perf_event program's run_time_ns / run_cnt from the
//! kernel's BPF statistics, read from the profiler's own program fds while it records, with
//! and without stacks. perf has no BPF program; its anchor is the end-to-end cost per sample
//! derived in the same way for both tools from a 9999 Hz per-process run.

use std::{fs, process::Command};

use anyhow::bail;
use nix::sys::signal::Signal;
use serde_json::json;

use super::{
    Ctx, Goal, Section,
    env::BpfStats,
    overhead::STOPPED,
    proc::{self, Background, fds_of, median},
};

/// BPF_PROG_TYPE_PERF_EVENT.
const PERF_EVENT_PROG: u64 = 7;

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(5.0, 1.5);
    let rounds = ctx.rounds(3);
    let _stats = BpfStats::enable()?;
    let w = ctx.work(0, ctx.ncpu as u32);
    let log = ctx.log("busy");
    let busy = Background::start(Command::new(&w[0]).args(&w[1..]), &log)?;
    // (label, extra record options): both stacks, each alone, none.
    let variants: [(&str, &[&str]); 4] = [
        ("with both stacks (default)", &[]),
        ("user stack only (--user)", &["--user"]),
        ("kernel stack only (--kernel)", &["--kernel"]),
        ("without stacks (--no-stacks)", &["--no-stacks"]),
    ];
    let mut runs: Vec<Vec<serde_json::Value>> = vec![Vec::new(); variants.len()];
    let mut commands = Vec::new();
    for _ in 0..rounds {
        for (i, (_, extra)) in variants.iter().enumerate() {
            // Into the bench's scratch, not the default profile.pb.gz in the caller's cwd.
            let out = ctx.path("kernel-cost.pb.gz").display().to_string();
            let mut args = vec!["record", "-a", "-F", "999", "-q", "-o", &out];
            args.extend(*extra);
            let log = ctx.log("kernel-cost");
            let rec = proc::start(&mut ctx.profiler(&args), &log)?;
            rec.wait_attached(ctx.ncpu)?;
            std::thread::sleep(std::time::Duration::from_secs_f64(secs));
            let (ns, cnt) = prog_stats(rec.pid())?;
            let f = rec.stop(Signal::SIGINT, &STOPPED)?;
            if cnt == 0 {
                bail!("the eBPF program never ran in `{}`", f.command);
            }
            runs[i].push(
                json!({"run_time_ns": ns, "run_cnt": cnt, "ns_per_run": ns as f64 / cnt as f64}),
            );
            if commands.len() < variants.len() {
                commands.push(format!(
                    "{}  # /proc/PID/fdinfo of its bpf-prog fds after {secs} s",
                    ctx.show(&f.command)
                ));
            }
        }
    }
    commands.insert(0, "sysctl -w kernel.bpf_stats_enabled=1".into());
    drop(busy);
    let per = |v: &[serde_json::Value]| {
        median(
            &v.iter()
                .filter_map(|x| x["ns_per_run"].as_f64())
                .collect::<Vec<_>>(),
        )
    };
    let ns: Vec<f64> = runs.iter().map(|r| per(r)).collect();
    let (ws, wo) = (ns[0], ns[3]);

    // The anchor: (workload time under the tool - alone) / samples, at 9999 Hz per process,
    // from the overhead runs.
    // None when section 1 did not run (`--only`): its rows are left out.
    let e2e = ctx.per_sample;
    let mut rows: Vec<Vec<String>> = variants
        .iter()
        .zip(&ns)
        .map(|((label, _), ns)| {
            vec![
                format!("profiler eBPF program, {label}"),
                format!("{ns:.0}"),
                rounds.to_string(),
            ]
        })
        .collect();
    if let Some(e2e) = e2e {
        rows.extend([
            vec![
                "profiler, end to end per sample (workload wall time)".into(),
                format!("{:.0}", e2e.0),
                format!("{}", e2e.2),
            ],
            vec![
                "perf record -g, end to end per sample (workload wall time)".into(),
                format!("{:.0}", e2e.1),
                format!("{}", e2e.2),
            ],
        ]);
    }
    let e2e_text = match e2e {
        Some((e0, e1, _)) => format!(
            "The end-to-end cost per sample to the workload is of the same order for both \
             tools ({e0:.0} ns vs {e1:.0} ns, rows 5 and 6). "
        ),
        None => "Section 1 did not run, so the end-to-end rows are left out. ".into(),
    };
    let met = ws < 1000.0;
    Ok(Section {
        title: "2. In-kernel cost per sample",
        method: format!(
            "With `kernel.bpf_stats_enabled=1`, `profiler record -a -F 999` runs for {secs} s \
             while `work 0 {n}` keeps every CPU busy; the kernel's run_time_ns and run_cnt of \
             the profiler's perf_event program are read from /proc/PID/fdinfo of its program \
             fds before it stops. `--user` and `--kernel` walk one stack (and sample \
             only that mode), the hidden `--no-stacks` none. perf has no BPF program to compare; the \
             last two rows are the end-to-end cost of one sample to the sampled workload, the \
             same way for both tools: (median wall time under the tool - median alone) / \
             (9999 Hz x the workload's CPU seconds), per process, from the runs of section 1. \
             Nanoseconds; medians.",
            n = ctx.ncpu
        ),
        headers: vec!["what", "ns per sample (median)", "runs"],
        rows,
        commands,
        goal: Goal {
            target: "in-kernel cost per sample with stacks under 1 us mean",
            measured: format!("{ws:.0} ns with stacks, {wo:.0} ns without"),
            why: format!(
                "Without stacks the program costs {wo:.0} ns (ring-buffer reserve and submit, \
                 time, comm, cgroup id, the counter read, the ring's fill query, and the BPF \
                 statistics' own clock reads); the user stack walk alone (the program's own walker: \
                 .eh_frame tables where a module has them, frame pointers elsewhere) brings it \
                 to {un:.0} ns, both walks (the default) to {ws:.0} ns, and a kernel-mode \
                 sample's kernel stack (the kernel's ORC unwinder, in a VM, the walk perf \
                 record -g pays in its sample path too) to {kn:.0} ns. {e2e_text}\
                 Closing it needs fewer walks rather than faster ones: sample without stacks \
                 where counts suffice, or walk only the mode the sample was taken in.",
                un = ns[1],
                kn = ns[2],
            ),
            met,
        },
        notes: vec![],
        raw: json!({
            "variants": variants.iter().zip(&runs).map(|((label, _), r)| json!({"variant": label, "runs": r})).collect::<Vec<_>>(),
            "end_to_end_ns": e2e.map(|e| json!({"profiler": e.0, "perf": e.1, "rounds": e.2})),
        }),
    })
}

/// Sums run_time_ns and run_cnt over `pid`'s perf_event programs.
pub(super) fn prog_stats(pid: i32) -> anyhow::Result<(u64, u64)> {
    let (mut ns, mut cnt, mut progs) = (0, 0, 0);
    for fd in fds_of(pid, "anon_inode:bpf-prog") {
        let info = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))?;
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if field("prog_type:") == Some(PERF_EVENT_PROG) {
            progs += 1;
            ns += field("run_time_ns:").unwrap_or(0);
            cnt += field("run_cnt:").unwrap_or(0);
        }
    }
    if progs == 0 {
        bail!("process {pid} holds no perf_event BPF program");
    }
    Ok((ns, cnt))
}
