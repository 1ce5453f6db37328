//! Measurement 7: Stacks without frame pointers: `profiler record` (unwind tables from
//! .eh_frame, walked in the kernel) against `perf record --call-graph dwarf` (stack copies
//! unwound afterwards) on the same workload: `work` built as distributions build C (-O2,
//! no frame pointers). Cost to the workload, bytes per sample, time from the workload's end
//! to a flame graph, samples whose stack reaches the thread's root, the eBPF program's cost
//! with tables and with frame pointers, and the memory the tables hold system-wide.

use std::{fs, process::Command};

use anyhow::Context as _;
use nix::sys::signal::Signal;
use serde_json::json;

use super::{
    Ctx, Goal, Section,
    env::BpfStats,
    kernel::prog_stats,
    overhead::STOPPED,
    proc::{self, Background, median, work_end, work_seconds},
    slowdown,
};

/// `work`'s flags for this section: no frame pointers, and no sibling calls (so the chain
/// main > outer > middle > leaf stays a chain of frames).
const FLAGS: [&str; 5] = [
    "-O2",
    "-g",
    "-fomit-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-pthread",
];

/// The `work` fixture without frame pointers, compiled into the scratch directory.
fn work_nofp(ctx: &Ctx) -> anyhow::Result<String> {
    let src = crate::util::workspace_root().join("tests/fixtures/work.c");
    let out = ctx.path("work_nofp");
    let status = Command::new("cc")
        .args(FLAGS)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .context("running cc")?;
    anyhow::ensure!(
        status.success(),
        "compiling work.c without frame pointers failed"
    );
    Ok(out.display().to_string())
}

/// Share (percent) of the samples in `text` (folded stacks of `work_nofp`) whose stack
/// holds the whole chain from the thread's start: start_thread > run > outer > middle > leaf.
fn whole_share_folded(text: &str) -> (u64, u64) {
    let (mut whole, mut total) = (0, 0);
    for line in text.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        if !stack.starts_with("work_nofp;") {
            continue;
        }
        total += n;
        if stack.contains("start_thread;run;outer;middle;leaf") {
            whole += n;
        }
    }
    (whole, total)
}

/// The same from `perf script -F comm,ip,sym` output (frames innermost first, each
/// `ADDRESS SYMBOL`).
fn whole_share_perf(text: &str) -> (u64, u64) {
    let (mut whole, mut total) = (0, 0);
    for sample in text.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        if !head.trim_start().starts_with("work_nofp") {
            continue;
        }
        total += 1;
        let frames: Vec<&str> = lines.filter_map(|l| l.split_whitespace().nth(1)).collect();
        let chain = ["leaf", "middle", "outer", "run", "start_thread"];
        if frames
            .windows(chain.len())
            .any(|w| w.iter().zip(chain).all(|(f, c)| *f == c))
        {
            whole += 1;
        }
    }
    (whole, total)
}

/// The `key=value` fields of the profiler's `unwind-stats` line.
fn unwind_stats(stderr: &str) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("unwind-stats "))
        .context("no unwind-stats line")?;
    Ok(line
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect())
}

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let work = work_nofp(ctx)?;
    let calls = ctx.size(1500, 150).to_string();
    let rounds = ctx.rounds(3);
    let (mut alone, mut prof, mut perf) = (Vec::new(), Vec::new(), Vec::new());
    let (mut prof_after, mut perf_after) = (Vec::new(), Vec::new());
    let (mut prof_bytes, mut perf_bytes) = (Vec::new(), Vec::new());
    let (mut prof_whole, mut perf_whole) = (Vec::new(), Vec::new());
    let mut commands = Vec::new();
    let folded = ctx.path("unwind.folded").display().to_string();
    let svg = ctx.path("unwind-profiler.svg").display().to_string();
    let data = ctx.path("unwind-perf.data").display().to_string();
    let perf_svg = ctx.path("unwind-perf.svg").display().to_string();
    for _ in 0..rounds {
        let f = proc::run(
            Command::new(&work).args([&calls, "1"]),
            &ctx.log("unwind-base"),
            &[0],
        )?;
        alone.push(work_seconds(&f)?);

        // The profiler: straight to a flame graph (its post-processing is part of the run),
        // then once more to folded stacks, to count whole stacks.
        let _ = fs::remove_file(&svg);
        let (f, svg_at) = proc::run_until_file(
            &mut ctx.profiler(&[
                "record",
                "-F",
                "999",
                "-q",
                "--unwind-stats",
                "-o",
                &svg,
                "--",
                &work,
                &calls,
                "1",
            ]),
            &ctx.log("unwind-profiler"),
            &[0],
            std::path::Path::new(&svg),
        )?;
        let (w, c) = work_seconds(&f)?;
        prof.push((w, c));
        let svg_at = svg_at.context("the profiler wrote no flame graph")?;
        prof_after.push(svg_at - work_end(&f)?);
        let stats = unwind_stats(&f.stderr)?;
        prof_bytes.push(stats["ring_bytes"] as f64 / stats["samples"].max(1) as f64);
        if commands.is_empty() {
            commands.push(ctx.show(&f.command));
        }
        let f2 = proc::run(
            &mut ctx.profiler(&[
                "record", "-F", "999", "-q", "-o", &folded, "--", &work, &calls, "1",
            ]),
            &ctx.log("unwind-profiler-folded"),
            &[0],
        )?;
        let (whole, total) = whole_share_folded(&fs::read_to_string(&folded)?);
        prof_whole.push(whole as f64 * 100.0 / total.max(1) as f64);
        if commands.len() == 1 {
            commands.push(ctx.show(&f2.command));
        }

        // perf: record with stack copies, then unwind and draw.
        let f = proc::run(
            &mut ctx.perf(&[
                "record",
                "-F",
                "999",
                "-q",
                "--call-graph",
                "dwarf",
                "-o",
                &data,
                "--",
                &work,
                &calls,
                "1",
            ]),
            &ctx.log("unwind-perf"),
            &[0],
        )?;
        let (w, c) = work_seconds(&f)?;
        perf.push((w, c));
        let pipeline = format!(
            "{} script -i {data} | {} | {} > {perf_svg}",
            ctx.tools.perf.display(),
            ctx.tools.collapse.display(),
            ctx.tools.flamegraph.display(),
        );
        let g = proc::run(
            Command::new("bash").args(["-o", "pipefail", "-c", &pipeline]),
            &ctx.log("unwind-perf-svg"),
            &[0],
        )?;
        perf_after.push(f.ended_s - work_end(&f)? + g.wall_s);
        let script = Command::new(&ctx.tools.perf)
            .args(["script", "-F", "comm,ip,sym", "-i", &data])
            .stderr(std::process::Stdio::null())
            .output()?;
        let (whole, total) = whole_share_perf(&String::from_utf8_lossy(&script.stdout));
        perf_whole.push(whole as f64 * 100.0 / total.max(1) as f64);
        perf_bytes.push(fs::metadata(&data)?.len() as f64 / total.max(1) as f64);
        if commands.len() == 2 {
            commands.push(ctx.show(&f.command));
            commands.push(ctx.show(&format!("bash -o pipefail -c '{pipeline}'")));
        }
    }

    // The cost of one sample to the workload where it stands out of the noise (9999 Hz):
    // (wall time under the tool - alone, same round) / samples, for the profiler, perf with
    // stack copies, and perf with no call graph at all: the timer and overflow path that any
    // sampler pays (perf's small record on top).
    let mut per_sample: [Vec<f64>; 3] = Default::default();
    let data9 = ctx.path("unwind-9999.data").display().to_string();
    let folded9 = ctx.path("unwind-9999.folded").display().to_string();
    for _ in 0..rounds {
        let f = proc::run(
            Command::new(&work).args([&calls, "1"]),
            &ctx.log("unwind-9999-base"),
            &[0],
        )?;
        let (aw, ac) = work_seconds(&f)?;
        let mut tools = [
            ctx.profiler(&["record", "-F", "9999", "-q", "-o", &folded9, "--"]),
            ctx.perf(&[
                "record",
                "-F",
                "9999",
                "-q",
                "--call-graph",
                "dwarf",
                "-o",
                &data9,
                "--",
            ]),
            ctx.perf(&["record", "-F", "9999", "-q", "-o", &data9, "--"]),
        ];
        for (i, cmd) in tools.iter_mut().enumerate() {
            let f = proc::run(
                cmd.args([&work, &calls, "1"]),
                &ctx.log("unwind-9999"),
                &[0],
            )?;
            let (w, _) = work_seconds(&f)?;
            per_sample[i].push((w - aw) / (9999.0 * ac) * 1e9);
            if commands.len() == 4 + i {
                commands.push(ctx.show(&f.command));
            }
        }
    }
    let [ps_prof, ps_dwarf, ps_floor] = per_sample.each_ref().map(|v| median(v));

    // The eBPF program's cost per sample, tables vs frame pointers, and the tables' memory
    // for a whole system, with the no-frame-pointer workload busy on every CPU.
    let _stats = BpfStats::enable()?;
    let busy = Background::start(
        Command::new(&work).args(["0", &ctx.ncpu.to_string()]),
        &ctx.log("unwind-busy"),
    )?;
    let secs = ctx.size(5.0, 1.5);
    let mut ns = [Vec::new(), Vec::new()];
    let mut memory = Vec::new();
    for _ in 0..rounds {
        for (i, mode) in ["dwarf", "fp"].iter().enumerate() {
            let rec = proc::start(
                &mut ctx.profiler(&[
                    "record",
                    "-a",
                    "-F",
                    "999",
                    "-q",
                    "--unwind-stats",
                    "--call-graph",
                    mode,
                ]),
                &ctx.log("unwind-kernel"),
            )?;
            rec.wait_attached(ctx.ncpu)?;
            std::thread::sleep(std::time::Duration::from_secs_f64(secs));
            let (t, n) = prog_stats(rec.pid())?;
            let f = rec.stop(Signal::SIGINT, &STOPPED)?;
            ns[i].push(t as f64 / n.max(1) as f64);
            if *mode == "dwarf" {
                memory.push(unwind_stats(&f.stderr)?);
                if commands.len() == 7 {
                    commands.push(format!(
                        "{}  # /proc/PID/fdinfo of its bpf-prog fds after {secs} s",
                        ctx.show(&f.command)
                    ));
                }
            }
        }
    }
    drop(busy);

    let m = |v: &[f64]| median(v);
    let (aw, ac) = (m(&col(&alone, 0)), m(&col(&alone, 1)));
    let (pw, pc) = (m(&col(&prof, 0)), m(&col(&prof, 1)));
    let (fw, fc) = (m(&col(&perf, 0)), m(&col(&perf, 1)));
    let (ps, fs_) = (slowdown(pw, aw), slowdown(fw, aw));
    let (pcs, fcs) = (slowdown(pc, ac), slowdown(fc, ac));
    let (nst, nsf) = (m(&ns[0]), m(&ns[1]));
    let last = memory.last().cloned().unwrap_or_default();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let kernel_bytes = last.get("reserved_bytes").copied().unwrap_or(0)
        + last.get("processes").copied().unwrap_or(0) * 8200;
    let user_bytes = last.get("user_bytes").copied().unwrap_or(0);
    let rows = vec![
        vec![
            "workload wall time slowdown (CPU time)".into(),
            format!("{ps:+.1}% ({pcs:+.1}%)"),
            format!("{fs_:+.1}% ({fcs:+.1}%)"),
        ],
        vec![
            "cost of one sample to the workload at 9999 Hz, ns (wall time)".into(),
            format!("{ps_prof:.0}"),
            format!("{ps_dwarf:.0}"),
        ],
        vec![
            "the same under perf record without a call graph (the timer and overflow path any sampler pays), ns".into(),
            "-".into(),
            format!("{ps_floor:.0}"),
        ],
        vec![
            "bytes per sample (ring record / perf.data)".into(),
            format!("{:.0}", m(&prof_bytes)),
            format!("{:.0}", m(&perf_bytes)),
        ],
        vec![
            "workload end to flame graph on disk, ms (the profiler's SVG / perf record's end + perf script pipeline)"
                .into(),
            format!(
                "{:.1} ({:.0}x sooner)",
                1e3 * m(&prof_after),
                m(&perf_after) / m(&prof_after).max(1e-6)
            ),
            format!("{:.0}", 1e3 * m(&perf_after)),
        ],
        vec![
            "samples with the whole chain start_thread > run > outer > middle > leaf".into(),
            format!("{:.2}%", m(&prof_whole)),
            format!("{:.2}%", m(&perf_whole)),
        ],
        vec![
            "eBPF program ns per sample, tables / frame pointers (record -a)".into(),
            format!("{nst:.0} / {nsf:.0}"),
            "-".into(),
        ],
        vec![
            "unwind tables, system-wide: kernel (row array + per-process maps) / user space".into(),
            format!(
                "{:.1} MiB ({:.1} MiB of rows used, {} modules, {} processes) / {:.1} MiB",
                mib(kernel_bytes),
                mib(last.get("row_bytes").copied().unwrap_or(0)),
                last.get("modules").copied().unwrap_or(0),
                last.get("processes").copied().unwrap_or(0),
                mib(user_bytes)
            ),
            "-".into(),
        ],
    ];
    let cost_met = ps_prof <= ps_dwarf / 2.0;
    let mem_met = kernel_bytes + user_bytes < 64 << 20;
    let sooner = m(&perf_after) / m(&prof_after).max(1e-6);
    let met = cost_met && mem_met && sooner >= 100.0 && m(&prof_whole) + 2.0 >= m(&perf_whole);
    Ok(Section {
        title: "7. Stacks without frame pointers vs perf --call-graph dwarf",
        method: format!(
            "`work {calls} 1` compiled with `cc {}` (no frame pointers, no sibling calls), \
             alone and under each tool at 999 Hz, {rounds} rounds, medians. Slowdowns are of \
             the workload's own wall and CPU time (it prints them). Cost of one sample: at 9999 Hz, \
             (the workload's wall time under the tool - alone in the same round) / (9999 x its \
             CPU seconds alone), for the profiler, perf --call-graph dwarf and perf record \
             without a call graph. Bytes per sample: the \
             profiler's ring-buffer bytes (`--unwind-stats`) / samples, perf.data's size / \
             samples. Flame-graph time: from the workload's exit (the CLOCK_MONOTONIC time it \
             prints last) to the flame graph on disk: the profiler's SVG appearing (it \
             drains, names what it had not named ahead while recording, and writes it itself, \
             renaming a finished file into place; detaching goes on beside it), perf record's exit plus perf script | inferno. Whole stacks are counted in the profiler's folded output \
             (a second run) and in perf script's. The eBPF cost and the tables' memory come \
             from `record -a` for {secs} s while `work 0 {n}` (no frame pointers) keeps every \
             CPU busy, with `--call-graph dwarf` then `fp`: the kernel's run_time_ns / \
             run_cnt of the perf_event program, and `--unwind-stats`; kernel memory is the \
             preallocated row array plus 8 KiB per process entry.",
            FLAGS.join(" "),
            n = ctx.ncpu
        ),
        headers: vec!["what", "profiler", "perf --call-graph dwarf"],
        rows,
        commands,
        goal: Goal {
            target: "cost to the workload at most half of perf --call-graph dwarf's; tables \
                     under 64 MiB system-wide; workload end to flame graph 100x sooner than \
                     perf's; as many whole stacks as perf",
            measured: format!(
                "per sample {ps_prof:.0} ns vs {ps_dwarf:.0} ns (at 999 Hz: slowdown {ps:+.1}% vs \
                 {fs_:+.1}%); tables {:.1} MiB; flame graph {sooner:.0}x \
                 sooner; whole stacks {:.2}% vs {:.2}%",
                mib(kernel_bytes + user_bytes),
                m(&prof_whole),
                m(&perf_whole)
            ),
            met,
            why: if met {
                String::new()
            } else {
                format!(
                    "Missed where the rows say. One sample costs the workload {ps_prof:.0} ns \
                     under the profiler and {ps_dwarf:.0} ns under perf --call-graph dwarf; \
                     perf without any call graph still costs {ps_floor:.0} ns: the timer \
                     interrupt and the overflow path, which every sampler on perf events pays \
                     before its own work, {}. Above that floor the profiler adds {:.0} ns to \
                     perf's {:.0} ns. Of the profiler's share, its eBPF program is \
                     {nst:.0} ns with tables and {nsf:.0} ns with frame pointers (two \
                     bpf_probe_read_user and two binary searches per frame). perf pays after \
                     the run instead: it writes {:.0} bytes per sample and unwinds them in perf \
                     script. At 999 Hz both slow this workload by about a percent ({ps:+.1}% vs \
                     {fs_:+.1}%), within this shared VM's run-to-run noise.",
                    if ps_floor > ps_dwarf / 2.0 {
                        "already more than half of perf's whole cost: no sampler on this path \
                         can cost half of perf's here"
                    } else {
                        "less than half of perf's whole cost"
                    },
                    ps_prof - ps_floor,
                    ps_dwarf - ps_floor,
                    m(&perf_bytes)
                )
            },
        },
        notes: vec![],
        raw: json!({
            "alone": alone, "profiler": prof, "perf": perf,
            "after_s": {"profiler": prof_after, "perf": perf_after},
            "bytes_per_sample": {"profiler": prof_bytes, "perf": perf_bytes},
            "whole_pct": {"profiler": prof_whole, "perf": perf_whole},
            "ebpf_ns": {"tables": ns[0], "fp": ns[1]},
            "per_sample_ns_9999hz": {"profiler": per_sample[0], "perf_dwarf": per_sample[1], "perf_no_callgraph": per_sample[2]},
            "unwind_stats": memory,
        }),
    })
}

fn col(v: &[(f64, f64)], i: usize) -> Vec<f64> {
    v.iter().map(|t| if i == 0 { t.0 } else { t.1 }).collect()
}
