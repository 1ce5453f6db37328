//! Measurement 6: Memory: peak RSS of the recorder process (wait4's ru_maxrss) during a 60 s, 999 Hz
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
    // Until both have exited (a zombie has no Rss lines), the peaks of their anonymous and
    // file-backed resident memory: ru_maxrss alone cannot say which dominates.
    let mut peaks = [[0u64; 2]; 2];
    loop {
        let mut alive = false;
        for (i, pid) in [prof.pid(), perf.pid()].into_iter().enumerate() {
            if let Some([anon, file]) = rss(pid) {
                alive = true;
                peaks[i][0] = peaks[i][0].max(anon);
                peaks[i][1] = peaks[i][1].max(file);
            }
        }
        if !alive {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (p, f) = (prof.wait(&[0])?, perf.wait(&[0])?);
    drop(busy);
    // Per process at 9999 Hz, one tool after the other on the same fixed work.
    let calls = ctx.size(1500, 150);
    let w = ctx.work(calls, 1);
    let out = ctx.path("memory-9999.pb").display().to_string();
    let mut cmd = ctx.profiler(&["record", "-F", "9999", "-q", "-o", &out, "--"]);
    cmd.args(&w);
    let p1 = proc::run(&mut cmd, &ctx.log("memory-9999-profiler"), &[0])?;
    let out = ctx.path("memory-9999.data").display().to_string();
    let mut cmd = ctx.perf(&["record", "-F", "9999", "-g", "-q", "-o", &out, "--"]);
    cmd.args(&w);
    let f1 = proc::run(&mut cmd, &ctx.log("memory-9999-perf"), &[0])?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let (pm, fm) = (mib(p.maxrss_kib), mib(f.maxrss_kib));
    if p.maxrss_kib == 0 || f.maxrss_kib == 0 {
        anyhow::bail!("wait4 reported no peak RSS");
    }
    Ok(Section {
        title: "6. Memory",
        method: format!(
            "`profiler record -a -F 999 -d {secs}` (pprof output) and `perf record -a -g -F \
             999 -- sleep {secs}` at the same time while `work 0 {n}` keeps every CPU busy; \
             peak RSS of each process from wait4(2) (ru_maxrss; for perf it includes its \
             `sleep` child, which is smaller), and the peaks of RssAnon and RssFile + \
             RssShmem from /proc/PID/status polled every 50 ms. MiB.",
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
                format!("{:.1}", mib(p1.maxrss_kib)),
                "-".into(),
                "-".into(),
                format!("{:.2}", p1.cpu_s),
            ],
            vec![
                "perf record -g -F 9999 -- work (one process)".into(),
                format!("{:.1}", mib(f1.maxrss_kib)),
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
                 at 9999 Hz {:.1} MiB vs {:.1} MiB (both include the workload, a child)",
                pm / fm,
                mib(p1.maxrss_kib),
                mib(f1.maxrss_kib)
            ),
            met: pm <= GOAL_RATIO * fm && p1.maxrss_kib <= f1.maxrss_kib,
            why: format!(
                "Of the profiler's peak, {fa:.0} MiB are file-backed and {an:.0} MiB \
                 anonymous. 16 MiB of the file-backed part is record's 8 MiB ring, whose \
                 data pages the kernel maps twice (4 MiB, 8 MiB resident, for one process); \
                 perf's rings are 516 KiB per CPU. The unwind row array (32 MiB) is no \
                 longer mapped except while a module's rows are written. The rest is the \
                 ELF and DWARF data of the file being symbolized (one file at a time, its \
                 symbolizer dropped after it; libc's 4 MiB debug file among them) and the \
                 profiler's own code; the anonymous part holds the distinct stacks and the \
                 names found. Closing it: a ring sized to the sample rate, and symbols read \
                 without the line tables where a report does not print lines.",
                fa = mib(peaks[0][1]),
                an = mib(peaks[0][0])
            ),
        },
        notes: vec![],
        raw: json!({
            "duration_s": secs,
            "profiler": {"maxrss_kib": p.maxrss_kib, "peak_anon_kib": peaks[0][0], "peak_file_kib": peaks[0][1], "cpu_s": p.cpu_s, "wall_s": p.wall_s},
            "perf": {"maxrss_kib": f.maxrss_kib, "peak_anon_kib": peaks[1][0], "peak_file_kib": peaks[1][1], "cpu_s": f.cpu_s, "wall_s": f.wall_s},
            "per_process_9999hz": {"profiler_maxrss_kib": p1.maxrss_kib, "perf_maxrss_kib": f1.maxrss_kib},
        }),
    })
}

/// [RssAnon, RssFile + RssShmem] of a live process, KiB; None once it has exited.
fn rss(pid: i32) -> Option<[u64; 2]> {
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
    ])
}
