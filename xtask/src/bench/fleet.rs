//! Measurement 14: fleet cost. A host as a fleet runs it (Python, Java and Node services
//! doing library work, tens of idle processes, a churn of short processes) profiled
//! system-wide by each agent in turn, at the same rate, sending to the same local OTLP
//! receiver: this profiler (`record -a --interval 10 --export otlp+grpc://`), the
//! OpenTelemetry eBPF profiler (the peer fleets run; `../shared/tools/otel-ebpf-profiler/`,
//! or `$OTEL_EBPF_PROFILER`), and `perf record -a -g` writing its file. Measured from /proc
//! while each runs: its CPU time in the first seconds (start-up) and after them (steady
//! state), its peak RSS (VmHWM), and the run time of its eBPF programs (fdinfo, with
//! `kernel.bpf_stats_enabled`), which the kernel charges to the sampled tasks.

use std::{
    fs,
    path::PathBuf,
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;
use serde_json::json;

use super::{
    Ctx, Goal, Section,
    env::BpfStats,
    export::Receivers,
    proc::{self, Background, fds_of},
};
use crate::util::workspace_root;

const JDK: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// Idle processes on the host (each a `sleep`).
const IDLE: usize = 40;

/// The peer's agent: `$OTEL_EBPF_PROFILER`, else the build beside the project.
fn otel_agent() -> Option<PathBuf> {
    std::env::var_os("OTEL_EBPF_PROFILER")
        .map(PathBuf::from)
        .or_else(|| Some(workspace_root().join("../shared/tools/otel-ebpf-profiler/ebpf-profiler")))
        .filter(|p| p.is_file())
}

/// One agent's run: CPU seconds at the end of start-up and at the end, the seconds between,
/// peak RSS, eBPF run time and runs, and the OTLP requests the receiver got meanwhile.
struct Run {
    startup_cpu_s: f64,
    steady_cpu_s: f64,
    steady_s: f64,
    /// From the start to the end of start-up (attached and settled), seconds.
    startup_s: f64,
    peak_rss_kib: u64,
    bpf_ns: u64,
    bpf_runs: u64,
    requests: usize,
    /// Steady-state CPU seconds by thread name (where the agent's time goes).
    threads: std::collections::BTreeMap<String, f64>,
    /// This profiler's own count of samples sent and of samples lost (ring full).
    samples: u64,
    lost: u64,
    command: String,
}

impl Run {
    fn steady_pct(&self) -> f64 {
        100.0 * self.steady_cpu_s / self.steady_s
    }

    fn bpf_pct(&self) -> f64 {
        100.0 * self.bpf_ns as f64 / 1e9 / (self.startup_s + self.steady_s)
    }
}

/// A /proc `stat` line's state letter and utime + stime (seconds).
fn stat_times(stat: &str) -> Option<(String, f64)> {
    let rest = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3) here.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((f.first()?.to_string(), ticks as f64 / hz))
}

/// utime + stime of `pid` (all its threads), seconds; `None` once it has ended.
fn cpu_of(pid: i32) -> Option<f64> {
    let (state, secs) = stat_times(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
    // A zombie has ended: its last times are no run's.
    (state != "Z").then_some(secs)
}

/// CPU seconds of `pid`'s threads by thread name (threads of one name summed).
fn cpu_by_thread(pid: i32) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(stat) = fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close), Some((_, secs))) =
            (stat.find(" ("), stat.rfind(") "), stat_times(&stat))
        else {
            continue;
        };
        *out.entry(stat[open + 2..close].to_string()).or_insert(0.0) += secs;
    }
    out
}

/// VmHWM of `pid`, KiB.
fn peak_rss(pid: i32) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Sums run_time_ns and run_cnt over every BPF program `pid` holds.
fn bpf_time(pid: i32) -> (u64, u64) {
    let (mut ns, mut cnt) = (0, 0);
    for fd in fds_of(pid, "anon_inode:bpf-prog") {
        let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        ns += field("run_time_ns:");
        cnt += field("run_cnt:");
    }
    (ns, cnt)
}

fn requests(log: &std::path::Path) -> usize {
    fs::read_to_string(log).map_or(0, |s| s.lines().count())
}

/// The samples and lost samples this profiler's requests from line `from` on declared (its
/// `profiler.samples` and `profiler.lost` counters); the peer's requests carry none.
fn declared(log: &std::path::Path, from: usize) -> (u64, u64) {
    let text = fs::read_to_string(log).unwrap_or_default();
    let (mut samples, mut lost) = (0, 0);
    for line in text.lines().skip(from) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let c = &v["summary"]["counters"];
        samples += c["profiler.samples"].as_u64().unwrap_or(0);
        lost += c["profiler.lost"].as_u64().unwrap_or(0);
    }
    (samples, lost)
}

/// Runs `cmd` until it has attached its perf events and `settle` seconds more (its start-up),
/// then `steady` seconds (its steady state), then stops it with SIGINT, as a user stops an
/// agent.
fn run_agent(
    ctx: &mut Ctx,
    what: &str,
    cmd: &mut Command,
    settle: f64,
    steady: f64,
    receiver_log: &std::path::Path,
) -> anyhow::Result<Run> {
    let before = requests(receiver_log);
    let log = ctx.log(&format!("fleet-{what}"));
    let running = proc::start(cmd, &log)?;
    let pid = running.pid();
    let t0 = Instant::now();
    let (mut startup, mut peak, mut bpf) = (None, 0, (0, 0));
    let mut threads_at_startup = std::collections::BTreeMap::new();
    let mut threads;
    let mut last_cpu;
    let mut attached: Option<f64> = None;
    loop {
        sleep(Duration::from_millis(250));
        let now = t0.elapsed().as_secs_f64();
        let Some(cpu) = cpu_of(pid) else {
            let f = running.wait(&[0])?;
            bail!("`{}` ended early: {}", f.command, f.stderr.trim());
        };
        last_cpu = cpu;
        threads = cpu_by_thread(pid);
        peak = peak.max(peak_rss(pid).unwrap_or(0));
        let b = bpf_time(pid);
        if b.1 >= bpf.1 {
            bpf = b;
        }
        if attached.is_none() && !fds_of(pid, "anon_inode:[perf_event]").is_empty() {
            attached = Some(now);
        }
        match (attached, startup) {
            (None, _) if now > 180.0 => {
                let _ = running.stop(Signal::SIGKILL, &[128 + 9]);
                bail!("`{what}` did not attach within 180 s");
            }
            (Some(at), None) if now >= at + settle => {
                startup = Some((cpu, now));
                threads_at_startup = threads.clone();
            }
            (_, Some((_, from))) if now >= from + steady => break,
            _ => {}
        }
    }
    let end_s = t0.elapsed().as_secs_f64();
    let f = running.stop(Signal::SIGINT, &[0, 130])?;
    let (startup_cpu_s, startup_at) = startup.context("no start-up reading")?;
    // Let the receiver log what arrived last.
    sleep(Duration::from_millis(500));
    let (samples, lost) = declared(receiver_log, before);
    let threads: std::collections::BTreeMap<String, f64> = threads
        .into_iter()
        .map(|(name, s)| {
            let before = threads_at_startup.get(&name).copied().unwrap_or(0.0);
            (name, s - before)
        })
        .collect();
    Ok(Run {
        threads,
        samples,
        lost,
        startup_cpu_s,
        steady_cpu_s: last_cpu - startup_cpu_s,
        steady_s: end_s - startup_at,
        startup_s: startup_at,
        peak_rss_kib: peak,
        bpf_ns: bpf.0,
        bpf_runs: bpf.1,
        requests: requests(receiver_log) - before,
        command: f.command,
    })
}

/// Starts the fleet host's load (killed when dropped).
fn start_load(ctx: &mut Ctx, secs: f64) -> anyhow::Result<Vec<Background>> {
    let fixtures = workspace_root().join("tests/fixtures");
    let classes = ctx.dir.join("fleet-classes");
    let javac = Command::new(format!("{JDK}/bin/javac"))
        .args(["-g", "-d"])
        .arg(&classes)
        .arg(fixtures.join("java/Services.java"))
        .status()
        .context("javac")?;
    anyhow::ensure!(javac.success(), "javac failed on Services.java");
    let total = format!("{:.0}", secs);
    let mut load = Vec::new();
    let mut start = |what: &str, cmd: &mut Command| -> anyhow::Result<()> {
        let log = ctx.log(&format!("fleet-load-{what}"));
        load.push(Background::start(cmd, &log)?);
        Ok(())
    };
    start(
        "python",
        Command::new("python3")
            .arg(fixtures.join("python/services.py"))
            .arg(&total),
    )?;
    start(
        "node",
        Command::new("node")
            .arg(fixtures.join("node/services.js"))
            .arg(&total),
    )?;
    start(
        "java",
        Command::new(format!("{JDK}/bin/java"))
            .arg("-cp")
            .arg(&classes)
            .arg("fixture.Services")
            .arg(&total),
    )?;
    for i in 0..IDLE {
        start(&format!("idle{i}"), Command::new("sleep").arg(&total))?;
    }
    // About 20 short processes a second (a `true` and a `sleep` every 0.1 s).
    start(
        "churn",
        Command::new("sh").args(["-c", "while :; do /bin/true; sleep 0.1; done"]),
    )?;
    Ok(load)
}

pub fn measure(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let secs = ctx.size(60.0f64, 10.0);
    let settle = ctx.size(10.0f64, 3.0);
    let rates: &[u32] = if ctx.quick { &[99] } else { &[20, 99] };
    let otel = otel_agent();
    let _stats = BpfStats::enable()?;
    let receiver_log = ctx.path("fleet-requests.jsonl");
    let receivers = Receivers::start(&receiver_log)?;
    let grpc = receivers.port("grpc");
    let agents = 3 + usize::from(otel.is_some());
    // Each agent's start (the peer loads its programs for 6 s or more) and its run.
    let total = rates.len() as f64 * agents as f64 * (secs + settle + 60.0) + 60.0;
    let _load = start_load(ctx, total)?;
    // Past the services' start and their JITs' first compilations.
    sleep(Duration::from_secs(ctx.size(10, 3)));
    let (mut rows, mut commands, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    let mut notes = Vec::new();
    let mut ratios: Vec<(u32, &str, f64, f64)> = Vec::new();
    for &rate in rates {
        let r = rate.to_string();
        let export = format!("otlp+grpc://127.0.0.1:{grpc}");
        // This profiler with `extra` arguments, as run `what`; it must have sent something.
        let mut ours_with = |what: &str, extra: &[&str]| -> anyhow::Result<Run> {
            let mut args = vec!["record", "-a", "-F", &r, "-q", "--interval", "10"];
            args.extend_from_slice(extra);
            args.extend(["--export", &export]);
            let mut cmd = ctx.profiler(&args);
            let run = run_agent(ctx, what, &mut cmd, settle, secs, &receiver_log)?;
            anyhow::ensure!(run.requests > 0, "`{}` sent nothing", run.command);
            Ok(run)
        };
        let ours = ours_with(&format!("profiler-{rate}"), &[])?;
        // Like for like with the peer: native frames as build ids and file offsets for the
        // store to name, runtime frames named on the host.
        let ours_addresses = ours_with(
            &format!("profiler-addresses-{rate}"),
            &["--symbolize", "none"],
        )?;
        let peer = match &otel {
            Some(agent) => {
                let run = run_agent(
                    ctx,
                    &format!("otel-{rate}"),
                    Command::new(agent).args([
                        "-collection-agent",
                        &format!("127.0.0.1:{grpc}"),
                        "-disable-tls",
                        "-samples-per-second",
                        &r,
                    ]),
                    settle,
                    secs,
                    &receiver_log,
                )
                .and_then(|run| {
                    anyhow::ensure!(run.requests > 0, "`{}` sent nothing", run.command);
                    Ok(run)
                });
                match run {
                    Ok(run) => Some(run),
                    // The peer is another project's build: `--quick` (CI) checks this
                    // harness, and says what the peer did rather than failing on it.
                    Err(e) if ctx.quick => {
                        notes.push(format!("the OpenTelemetry agent was not measured: {e:#}"));
                        None
                    }
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        let data = ctx.path(&format!("fleet-perf-{rate}.data"));
        let mut cmd = ctx.perf(&["record", "-a", "-g", "-F", &r, "-q", "-o"]);
        cmd.arg(&data);
        let perf = run_agent(
            ctx,
            &format!("perf-{rate}"),
            &mut cmd,
            settle,
            secs,
            &receiver_log,
        )?;
        let _ = fs::remove_file(&data);
        for (name, run) in [
            ("profiler record -a (OTLP gRPC)", Some(&ours)),
            (
                "profiler record -a --symbolize none (OTLP gRPC)",
                Some(&ours_addresses),
            ),
            ("OpenTelemetry eBPF profiler (OTLP gRPC)", peer.as_ref()),
            ("perf record -a -g (file)", Some(&perf)),
        ] {
            let Some(run) = run else { continue };
            rows.push(vec![
                name.to_string(),
                rate.to_string(),
                format!("{:.2}", run.steady_pct()),
                format!("{:.2} in {:.0} s", run.startup_cpu_s, run.startup_s),
                format!("{:.1}", run.peak_rss_kib as f64 / 1024.0),
                format!("{:.2}", run.bpf_pct()),
                format!("{:.0}", run.bpf_ns as f64 / run.bpf_runs.max(1) as f64),
                run.requests.to_string(),
                if run.samples + run.lost > 0 {
                    format!("{} / {}", run.lost, run.samples + run.lost)
                } else {
                    "-".into()
                },
            ]);
            raw.push(json!({
                "agent": name, "rate": rate, "steady_cpu_s": run.steady_cpu_s,
                "steady_s": run.steady_s, "startup_cpu_s": run.startup_cpu_s,
                "startup_s": run.startup_s,
                "peak_rss_kib": run.peak_rss_kib, "bpf_ns": run.bpf_ns,
                "bpf_runs": run.bpf_runs, "requests": run.requests,
                "samples": run.samples, "lost": run.lost,
                "steady_cpu_s_by_thread": run.threads,
            }));
            let mut top: Vec<(&String, &f64)> = run.threads.iter().collect();
            top.sort_by(|a, b| b.1.total_cmp(a.1));
            notes.push(format!(
                "{name} at {rate} Hz, steady CPU by thread: {}",
                top.iter()
                    .take(4)
                    .map(|(n, s)| format!("{n} {:.2} %", 100.0 * **s / run.steady_s))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if commands.len() < agents {
                commands.push(ctx.show(&run.command));
            }
        }
        if let Some(p) = &peer {
            for (what, run) in [("named", &ours), ("like for like", &ours_addresses)] {
                ratios.push((
                    rate,
                    what,
                    run.steady_pct() / p.steady_pct(),
                    run.peak_rss_kib as f64 / p.peak_rss_kib.max(1) as f64,
                ));
            }
        }
    }
    drop(receivers);
    let measured = if ratios.is_empty() {
        "the OpenTelemetry agent was not found (set OTEL_EBPF_PROFILER)".to_string()
    } else {
        ratios
            .iter()
            .map(|(rate, what, cpu, rss)| {
                format!("{rate} Hz, {what}: CPU {cpu:.2}x, RSS {rss:.2}x")
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let met = !ratios.is_empty() && ratios.iter().all(|(_, _, c, r)| *c <= 0.5 && *r <= 0.5);
    Ok(Section {
        title: "14. Fleet cost beside the OpenTelemetry eBPF profiler",
        method: format!(
            "A fleet-like host: Python 3 (`tests/fixtures/python/services.py`), Node \
             (`node/services.js`) and Java 17 (`java/Services.java`) each doing library work \
             on one thread, {IDLE} idle processes, and about 20 short processes a second. Each \
             agent in turn records the whole host at the rate shown, sending to \
             the same local OTLP gRPC receiver (`tests/export/receiver.py`); perf writes its \
             file. From /proc while it runs: CPU time (utime + stime of all its threads) until it \
             has attached its perf events and {settle:.0} s more (start-up), then over \
             {secs:.0} s (steady state, % of one CPU), peak \
             RSS (VmHWM), and its BPF programs' run time (fdinfo, `kernel.bpf_stats_enabled`; \
             charged by the kernel to the sampled tasks, not to the agent; % of one CPU and ns \
             per run). What each includes: this profiler names native and runtime frames on \
             the host and sends names, or with `--symbolize none` sends native frames as build \
             ids and file offsets and names runtime frames, as the OpenTelemetry agent does \
             (like for like); perf names nothing while recording. Continuous recording wakes \
             its reader for runtime frames at most every 50 ms (10 ms otherwise)."
        ),
        headers: vec![
            "agent",
            "Hz",
            "steady CPU (% of one CPU)",
            "start-up CPU (s)",
            "peak RSS (MiB)",
            "eBPF (% of one CPU)",
            "eBPF ns per run",
            "OTLP requests",
            "lost / samples (own count)",
        ],
        rows,
        commands,
        goal: Goal {
            target: "fleet host: steady CPU and peak RSS <= 0.5x the OpenTelemetry agent's",
            measured,
            met,
            why: if met {
                String::new()
            } else {
                "see the section's rows: where the steady CPU goes is in docs/plans/fleet-cost.md"
                    .into()
            },
        },
        notes,
        raw: json!(raw),
    })
}
