//! Measurement 6: Memory: peak RSS of the recorder process (VmHWM) during a 60 s, 999 Hz
//! system-wide recording, the profiler and perf record at the same time, same workload.

use std::process::Command;

use serde_json::json;

use super::{
    Ctx, Goal, Section,
    proc::{self, Background},
};

/// Peak RSS at most this many times perf record's, on the same run.
const GOAL_RATIO: f64 = 1.5;

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(60u64, 3).to_string();
    let pb = ctx.path("memory.pb").display().to_string();
    let data = ctx.path("memory.data").display().to_string();
    let w = ctx.work(0, ctx.ncpu as u32);
    let log = ctx.log("busy");
    let busy = Background::start(Command::new(&w[0]).args(&w[1..]), &log)?;
    let log = ctx.log("memory-profiler");
    let prof = proc::start(
        &mut ctx.profiler(&["record", "-a", "-F", "999", "-d", &secs, "-q", "-o", &pb]),
        &log,
    )?;
    let log = ctx.log("memory-perf");
    let perf = proc::start(
        &mut ctx.perf(&[
            "record", "-a", "-g", "-F", "999", "-q", "-o", &data, "--", "sleep", &secs,
        ]),
        &log,
    )?;
    let peaks = poll_peaks(&[prof.pid(), perf.pid()]);
    let (p, f) = (prof.wait(&[0])?, perf.wait(&[0])?);
    drop(busy);
    // Per process at 9999 Hz, one tool after the other on the same fixed work; then on real
    // software where this host has it (not part of the goal: what naming costs varies with
    // the DWARF of what ran).
    let calls = ctx.size(1500, 150);
    let w = ctx.work(calls, 1);
    let mut per_process = vec![one_process(ctx, "9999", "work (one process)".into(), &w)?];
    for (label, workload) in real_software(ctx)? {
        let tag = label
            .split_whitespace()
            .next()
            .unwrap_or("real")
            .to_string();
        per_process.push(one_process(ctx, &tag, label, &workload)?);
    }
    let work = &per_process[0];
    let (p1_peak, f1_peak) = (work.profiler.0, work.perf.0);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let (pm, fm) = (mib(peaks[0][2]), mib(peaks[1][2]));
    if peaks[0][2] == 0 || peaks[1][2] == 0 || p1_peak == 0 || f1_peak == 0 {
        anyhow::bail!("no VmHWM read from /proc");
    }
    let (mut rows, mut commands) = (Vec::new(), Vec::new());
    for (tool, [anon, file, hwm], run) in [
        ("profiler record", peaks[0], &p),
        ("perf record -g", peaks[1], &f),
    ] {
        rows.push(vec![
            tool.into(),
            format!("{:.1}", mib(hwm)),
            format!("{:.1}", mib(anon)),
            format!("{:.1}", mib(file)),
            format!("{:.2}", run.cpu_s),
        ]);
        commands.push(ctx.show(&run.command));
    }
    for one in &per_process {
        for (tool, (kib, run)) in [
            ("profiler record", &one.profiler),
            ("perf record -g", &one.perf),
        ] {
            rows.push(vec![
                format!("{tool} -F 9999 -- {}", one.label),
                format!("{:.1}", mib(*kib)),
                "-".into(),
                "-".into(),
                format!("{:.2}", run.cpu_s),
            ]);
            commands.push(ctx.show(&run.command));
        }
    }
    let raw_per_process: Vec<_> = per_process
        .iter()
        .map(|one| {
            json!({"workload": one.label, "profiler_hwm_kib": one.profiler.0, "perf_hwm_kib": one.perf.0})
        })
        .collect();
    Ok(Section {
        title: "6. Memory",
        method: format!(
            "`profiler record -a -F 999 -d {secs}` (pprof output) and `perf record -a -g -F \
             999 -- sleep {secs}` at the same time while `work 0 {n}` keeps every CPU busy; \
             peak RSS of each recorder process itself (VmHWM, the peak of its own image since \
             its exec, without the workload or perf's `sleep`; wait4's ru_maxrss counts the \
             parent's RSS at the fork, 45 MiB of xtask, so it cannot show a smaller peak), \
             and the peaks of RssAnon and RssFile + RssShmem, all from /proc/PID/status \
             polled every 10 ms. MiB.",
            n = ctx.ncpu
        ),
        headers: vec![
            "recorder",
            "peak RSS (MiB)",
            "peak anonymous (MiB)",
            "peak file-backed (MiB)",
            "CPU time (s)",
        ],
        rows,
        commands,
        goal: Goal {
            target: "peak RSS system-wide at most 1.5x perf record's; per process at 9999 Hz no more than perf's",
            measured: format!(
                "system-wide {pm:.1} MiB vs perf record's {fm:.1} MiB ({:.2}x); per process \
                 at 9999 Hz {:.1} MiB vs {:.1} MiB",
                pm / fm,
                mib(p1_peak),
                mib(f1_peak)
            ),
            met: pm <= GOAL_RATIO * fm && p1_peak <= f1_peak,
            why: format!(
                "Of the profiler's peak, {fa:.0} MiB are file-backed and {an:.0} MiB \
                 anonymous (the peaks of each, not at one moment). The file-backed part is \
                 the ring (1 MiB for 999 Hz on 2 CPUs; the kernel maps its data pages twice, \
                 all resident from the start), the pages blazesym reads of the file being \
                 named (one file at a time) and the profiler's own code; the anonymous part \
                 holds the distinct stacks and the names found. The unwind row array (32 MiB \
                 of kernel memory) is mapped only while a module's rows are written. The rows \
                 of real software are not part of the goal: naming in the recording process \
                 costs what reading that software's DWARF costs.",
                fa = mib(peaks[0][1]),
                an = mib(peaks[0][0])
            ),
        },
        notes: vec![],
        raw: json!({
            "duration_s": secs,
            "profiler": {"hwm_kib": peaks[0][2], "peak_anon_kib": peaks[0][0], "peak_file_kib": peaks[0][1], "cpu_s": p.cpu_s, "wall_s": p.wall_s},
            "perf": {"hwm_kib": peaks[1][2], "peak_anon_kib": peaks[1][0], "peak_file_kib": peaks[1][1], "cpu_s": f.cpu_s, "wall_s": f.wall_s},
            "per_process_9999hz": raw_per_process,
        }),
    })
}

/// One workload recorded at 9999 Hz by each tool in turn: (peak RSS, VmHWM in KiB; its run).
struct PerProcess {
    label: String,
    profiler: (u64, proc::Finished),
    perf: (u64, proc::Finished),
}

/// `workload` under the profiler, then under perf record -g.
fn one_process(
    ctx: &mut Ctx,
    tag: &str,
    label: String,
    workload: &[String],
) -> anyhow::Result<PerProcess> {
    let out = ctx.path(&format!("memory-{tag}.pb")).display().to_string();
    let mut profiler = ctx.profiler(&["record", "-F", "9999", "-q", "-o", &out, "--"]);
    profiler.args(workload);
    let out = ctx
        .path(&format!("memory-{tag}.data"))
        .display()
        .to_string();
    let mut perf = ctx.perf(&["record", "-F", "9999", "-g", "-q", "-o", &out, "--"]);
    perf.args(workload);
    let profiler = peak_of(&mut profiler, &ctx.log(&format!("memory-{tag}-profiler")))?;
    let perf = peak_of(&mut perf, &ctx.log(&format!("memory-{tag}-perf")))?;
    Ok(PerProcess {
        label,
        profiler,
        perf,
    })
}

/// Runs `cmd` to its end: its peak RSS (VmHWM, KiB) and its run.
fn peak_of(cmd: &mut Command, log: &std::path::Path) -> anyhow::Result<(u64, proc::Finished)> {
    let started = proc::start(cmd, log)?;
    let peak = poll_peaks(&[started.pid()])[0][2];
    Ok((peak, started.wait(&[0])?))
}

/// Distribution and interpreter workloads this host has: xz compressing 16 MB of base64
/// (2 MB with `--quick`; `xz -9 -T1`), and python3 running a busy loop (the interpreter
/// `python3` resolves to, e.g. pyenv's, which ships its DWARF).
fn real_software(ctx: &Ctx) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let mut found = Vec::new();
    if let Some(xz) = on_path("xz") {
        let input = ctx.path("memory-xz.txt");
        let size = ctx.size(16 << 20, 2 << 20);
        let mut text = String::with_capacity(size);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        while text.len() < size {
            // xorshift: incompressible enough that xz -9 works for a few seconds.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push(B64[(x >> 58) as usize] as char);
        }
        std::fs::write(&input, text)?;
        let input = input.display().to_string();
        found.push((
            "xz -9 -T1".to_string(),
            vec![
                xz,
                "-9".into(),
                "-T1".into(),
                "-k".into(),
                "-f".into(),
                input,
            ],
        ));
    }
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output();
    if let Ok(out) = python
        && out.status.success()
    {
        let exe = String::from_utf8_lossy(&out.stdout).trim().to_string();
        found.push((
            format!("python3 busy loop ({exe})"),
            vec![
                exe,
                "-c".into(),
                "sum(i * i for i in range(3_000_000))".into(),
            ],
        ));
    }
    Ok(found)
}

/// The first `name` on PATH.
fn on_path(name: &str) -> Option<String> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

/// Until every process of `pids` has exited (a zombie has no Rss lines): per process, the
/// peaks of [RssAnon, RssFile + RssShmem, VmHWM], KiB.
fn poll_peaks(pids: &[i32]) -> Vec<[u64; 3]> {
    let mut peaks = vec![[0u64; 3]; pids.len()];
    loop {
        let mut alive = false;
        for (peak, &pid) in peaks.iter_mut().zip(pids) {
            if let Some(now) = rss(pid) {
                alive = true;
                for (p, n) in peak.iter_mut().zip(now) {
                    *p = (*p).max(n);
                }
            }
        }
        if !alive {
            return peaks;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// [RssAnon, RssFile + RssShmem, VmHWM] of a live process, KiB; None once it has exited.
fn rss(pid: i32) -> Option<[u64; 3]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    Some([
        kib("RssAnon:")?,
        kib("RssFile:")? + kib("RssShmem:").unwrap_or(0),
        kib("VmHWM:")?,
    ])
}
