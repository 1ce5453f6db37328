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
    // Per process at 9999 Hz, one tool after the other on the same fixed work.
    let calls = ctx.size(1500, 150);
    let w = ctx.work(calls, 1);
    let out = ctx.path("memory-9999.pb").display().to_string();
    let mut cmd = ctx.profiler(&["record", "-F", "9999", "-q", "-o", &out, "--"]);
    cmd.args(&w);
    let started = proc::start(&mut cmd, &ctx.log("memory-9999-profiler"))?;
    let p1_peak = poll_peaks(&[started.pid()])[0][2];
    let p1 = started.wait(&[0])?;
    let out = ctx.path("memory-9999.data").display().to_string();
    let mut cmd = ctx.perf(&["record", "-F", "9999", "-g", "-q", "-o", &out, "--"]);
    cmd.args(&w);
    let started = proc::start(&mut cmd, &ctx.log("memory-9999-perf"))?;
    let f1_peak = poll_peaks(&[started.pid()])[0][2];
    let f1 = started.wait(&[0])?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let (pm, fm) = (mib(peaks[0][2]), mib(peaks[1][2]));
    if peaks[0][2] == 0 || peaks[1][2] == 0 || p1_peak == 0 || f1_peak == 0 {
        anyhow::bail!("no VmHWM read from /proc");
    }
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
        rows: vec![
            vec![
                "profiler record".into(),
                format!("{pm:.1}"),
                format!("{:.1}", mib(peaks[0][0])),
                format!("{:.1}", mib(peaks[0][1])),
                format!("{:.2}", p.cpu_s),
            ],
            vec![
                "perf record -g".into(),
                format!("{fm:.1}"),
                format!("{:.1}", mib(peaks[1][0])),
                format!("{:.1}", mib(peaks[1][1])),
                format!("{:.2}", f.cpu_s),
            ],
            vec![
                "profiler record -F 9999 -- work (one process)".into(),
                format!("{:.1}", mib(p1_peak)),
                "-".into(),
                "-".into(),
                format!("{:.2}", p1.cpu_s),
            ],
            vec![
                "perf record -g -F 9999 -- work (one process)".into(),
                format!("{:.1}", mib(f1_peak)),
                "-".into(),
                "-".into(),
                format!("{:.2}", f1.cpu_s),
            ],
        ],
        commands: vec![
            ctx.show(&p.command),
            ctx.show(&f.command),
            ctx.show(&p1.command),
            ctx.show(&f1.command),
        ],
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
                 the ring (sized to the rate: 1 MiB for 999 Hz on 2 CPUs; its data pages are \
                 mapped twice), the ELF and DWARF data of the file being symbolized (one file \
                 at a time) and the profiler's own code; the anonymous part holds the \
                 distinct stacks and the names found. The unwind row array (32 MiB of kernel \
                 memory) is mapped only while a module's rows are written.",
                fa = mib(peaks[0][1]),
                an = mib(peaks[0][0])
            ),
        },
        notes: vec![],
        raw: json!({
            "duration_s": secs,
            "profiler": {"hwm_kib": peaks[0][2], "peak_anon_kib": peaks[0][0], "peak_file_kib": peaks[0][1], "cpu_s": p.cpu_s, "wall_s": p.wall_s},
            "perf": {"hwm_kib": peaks[1][2], "peak_anon_kib": peaks[1][0], "peak_file_kib": peaks[1][1], "cpu_s": f.cpu_s, "wall_s": f.wall_s},
            "per_process_9999hz": {"profiler_hwm_kib": p1_peak, "perf_hwm_kib": f1_peak},
        }),
    })
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
