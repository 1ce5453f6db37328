//! `record`: sample a target on cpu-clock with the eBPF program, collect stacks, and return a
//! symbolized [`Profile`]. Everything attached is owned by values that detach on drop, so
//! every exit path (error, signal, panic) leaves nothing behind.

mod aggregate;
mod collect;
mod pidfd;
mod status;
mod unwind;
mod workload;

use std::{ffi::OsString, future::Future, pin::Pin, sync::Arc, time::Duration};

use nix::sys::wait::WaitStatus;
use profiler_common::{
    RequestConfig, SamplerConfig, capture, filter, request_flags, stack::StackSampleHeader,
};
use tokio::signal::unix::{SignalKind, signal};

pub use collect::Collector;
pub use unwind::{TableLoader, TableStats};
pub use workload::{Workload, WorkloadError, resolve_command};

use crate::{
    bpf::{BpfError, Sampler, SamplerStats, UnwindMapError, check_privileges},
    cpc::events::{Catalog, Event, EventError, EventKind},
    perf::{PerfError, PerfEvent, SamplePolicy, Scope},
    profile::{Profile, RunInfo},
};
use aggregate::AggregateReader;
use pidfd::PidFd;
use status::StatusLine;

/// What to profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// These processes (all their threads).
    Pids(Vec<u32>),
    /// These threads only.
    Tids(Vec<u32>),
    /// Everything on every CPU.
    SystemWide,
    /// The tasks of a cgroup v2 directory (and its descendants' tasks are not included:
    /// the kernel's cgroup id is the task's own cgroup).
    Cgroup(std::path::PathBuf),
    /// A command started by the profiler, profiled until it exits.
    Command(Vec<OsString>),
}

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallGraph {
    /// Frame pointers only (`bpf_get_stack`), with the leaf-caller heuristic.
    FramePointer,
    /// Unwind tables from `.eh_frame` where a module has them, frame pointers elsewhere.
    #[default]
    Dwarf,
}

/// Which privilege levels to sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Both,
    User,
    Kernel,
}

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub target: Target,
    /// Events to sample (catalogue names); each sample is labelled with its event.
    pub events: Vec<String>,
    pub frequency_hz: u64,
    /// Sample every N events instead of at a frequency (perf's `-c`, libcpc's preset).
    pub period: Option<u64>,
    pub mode: Mode,
    /// Only these CPUs (default: every online CPU).
    pub cpus: Option<Vec<u32>>,
    pub duration: Option<Duration>,
    pub ring_bytes: u32,
    /// Reader poll interval when the kernel has not woken it (batched wake-ups).
    pub poll: Duration,
    /// Continuous mode: hand over a profile of each interval as it ends.
    pub interval: Option<Duration>,
    /// Print a status line (elapsed, samples, lost) to stderr every second.
    pub status_line: bool,
    /// Count samples per (process, stack) in the kernel instead of one record per sample.
    pub aggregate: bool,
    /// Walk stacks in the eBPF program (false only to measure the program's cost without
    /// them: every sample then has an empty stack).
    pub stacks: bool,
    /// How user stacks are walked.
    pub call_graph: CallGraph,
    /// Print the unwinder's and the ring's totals to stderr at the end (benchmarks).
    pub unwind_stats: bool,
}

impl RecordOptions {
    pub fn new(target: Target) -> Self {
        Self {
            target,
            events: vec!["cpu-clock".into()],
            frequency_hz: 99,
            period: None,
            mode: Mode::Both,
            cpus: None,
            duration: None,
            ring_bytes: profiler_common::DEFAULT_RING_BYTES,
            poll: Duration::from_millis(100),
            interval: None,
            status_line: false,
            aggregate: false,
            stacks: true,
            call_graph: CallGraph::default(),
            unwind_stats: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{0}")]
    Usage(String),
    #[error("process {0} does not exist")]
    NoSuchProcess(u32),
    #[error("thread {0} does not exist")]
    NoSuchThread(u32),
    #[error("{0}")]
    Event(String),
    #[error("{0}")]
    Privilege(String),
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Unwind(#[from] UnwindMapError),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

/// Why the recording ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Duration,
    /// A signal asked us to stop (its number); the report is still produced.
    Signal(i32),
    CommandExited,
    TargetsExited,
}

pub struct RecordOutcome {
    pub profile: Profile,
    pub stop: Stop,
    pub command_status: Option<WaitStatus>,
}

/// Checks that can fail before anything is attached: ranges, privileges, targets.
pub fn validate(opts: &RecordOptions) -> Result<(), RecordError> {
    if opts.frequency_hz == 0 {
        return Err(RecordError::Usage("frequency must be at least 1 Hz".into()));
    }
    if let Some(max) = max_sample_rate()
        && opts.frequency_hz > max
    {
        return Err(RecordError::Usage(format!(
            "frequency {} Hz is above kernel.perf_event_max_sample_rate ({max}); use -F {max} or less",
            opts.frequency_hz
        )));
    }
    if let Target::Pids(pids) = &opts.target {
        if pids.is_empty() {
            return Err(RecordError::Usage("no process id given".into()));
        }
        for &pid in pids {
            if pid == 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(RecordError::NoSuchProcess(pid));
            }
        }
    }
    if let Target::Tids(tids) = &opts.target {
        for &tid in tids {
            if tid == 0 || !std::path::Path::new(&format!("/proc/{tid}")).exists() {
                return Err(RecordError::NoSuchThread(tid));
            }
        }
    }
    if let Target::Cgroup(path) = &opts.target
        && !path.join("cgroup.procs").exists()
    {
        return Err(RecordError::Usage(format!(
            "{} is not a cgroup v2 directory (no cgroup.procs)",
            path.display()
        )));
    }
    if let Some(cpus) = &opts.cpus {
        let online = online_cpus()?;
        if let Some(cpu) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(RecordError::Usage(format!(
                "cpu {cpu} is not online (online: {online:?})"
            )));
        }
    }
    match opts.period {
        Some(0) => return Err(RecordError::Usage("period must be at least 1".into())),
        // perf_event_open refuses sample periods with the top bit set (EINVAL).
        Some(n) if n > i64::MAX as u64 => {
            return Err(RecordError::Usage(format!(
                "period {n} is above the kernel's limit ({}); use -c {} or less",
                i64::MAX,
                i64::MAX
            )));
        }
        _ => {}
    }
    if let Target::Command(argv) = &opts.target {
        resolve_command(&argv[0])?;
    }
    check_privileges()
        .require_bpf_and_perfmon()
        .map_err(RecordError::Privilege)
}

/// Resolves event names through the catalogue; events this host cannot count are an error
/// here, not an empty profile.
fn resolve_events(catalog: &Catalog, names: &[String]) -> Result<Vec<Event>, RecordError> {
    if let Some(n) = names
        .iter()
        .enumerate()
        .find_map(|(i, n)| names[..i].contains(n).then_some(n))
    {
        return Err(RecordError::Usage(format!(
            "event '{n}' is given twice; name each event once"
        )));
    }
    names
        .iter()
        .map(|n| {
            // A name that is not an event (unknown, malformed) is a usage error, with the
            // catalogue's suggestions; one this host cannot count is a runtime error below.
            let event = catalog.resolve(n).map_err(|e| match e {
                EventError::Unavailable { .. } => RecordError::Event(e.to_string()),
                _ if perf_modifier(catalog, n) => RecordError::Usage(format!(
                    "malformed event '{n}': perf's :u/:k modifiers are not part of event \
                     names; sample one mode with --user or --kernel"
                )),
                _ => RecordError::Usage(e.to_string()),
            })?;
            if let Some(reason) = catalog.unavailable_reason(&event) {
                return Err(RecordError::Event(format!("cannot sample '{n}': {reason}")));
            }
            if event.kind == EventKind::Tracepoint {
                return Err(RecordError::Event(format!(
                    "cannot sample tracepoint '{n}' with record yet (tracepoints take tracepoint \
                     programs, not perf_event ones)"
                )));
            }
            Ok(event)
        })
        .collect()
}

/// Whether `name` is a known event with a perf modifier suffix (`cpu-clock:u`).
fn perf_modifier(catalog: &Catalog, name: &str) -> bool {
    name.rsplit_once(':').is_some_and(|(base, m)| {
        !m.is_empty() && m.chars().all(|c| "ukhpPGHS".contains(c)) && catalog.resolve(base).is_ok()
    })
}

/// Adds children of the filtered processes to the filter as they fork; a warning if the
/// kernel lacks what that needs (the run goes on without it).
fn follow_children(catalog: &Catalog, sampler: &mut Sampler, whose: &str) {
    let group_dead = tracepoint_field_offset(catalog, "sched_process_exit", "group_dead");
    let followed = tracepoint_field_offset(catalog, "sched_process_fork", "child_pid")
        .ok_or_else(|| "sched:sched_process_fork is not in tracefs".to_string())
        .and_then(|off| {
            sampler
                .follow_forks(off, group_dead)
                .map_err(|e| e.to_string())
        });
    if let Err(e) = followed {
        eprintln!("profiler: warning: not following {whose} children: {e}");
    }
}

/// The offset of `field` in `sched:EVENT` records, from its tracefs format. Offsets differ
/// between kernels (6.18 has `__data_loc` comms and puts fork's `child_pid` at 20, older
/// kernels at 44); exit's `group_dead` exists from 6.16 on.
fn tracepoint_field_offset(catalog: &Catalog, event: &str, field: &str) -> Option<u32> {
    let format = catalog
        .tracing_root()?
        .join(format!("events/sched/{event}/format"));
    parse_field_offset(&std::fs::read_to_string(format).ok()?, field)
}

/// `offset:N` of field `name` in a tracefs `format` file.
fn parse_field_offset(format: &str, name: &str) -> Option<u32> {
    format.lines().find_map(|l| {
        let mut parts = l.trim().split(';').map(str::trim);
        let field = parts.next()?.strip_prefix("field:")?;
        if field.rsplit(' ').next()? != name {
            return None;
        }
        parts.find_map(|p| p.strip_prefix("offset:"))?.parse().ok()
    })
}

/// A cgroup v2 id: the inode number of its directory.
fn cgroup_id(path: &std::path::Path) -> Result<u64, RecordError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|m| m.ino())
        .map_err(|source| RecordError::Io {
            what: "reading the cgroup directory",
            source,
        })
}

fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn online_cpus() -> Result<Vec<u32>, RecordError> {
    crate::host::online_cpus().map_err(|source| RecordError::Io {
        what: "reading /sys/devices/system/cpu/online",
        source,
    })
}

/// Records until the duration passes, the command or all target processes exit, or SIGINT,
/// SIGTERM or SIGHUP arrives. Must run inside a tokio runtime.
pub async fn record(opts: &RecordOptions) -> Result<RecordOutcome, RecordError> {
    record_with(opts, &mut |_| {}).await
}

/// [`record`], handing `on_interval` the profile of each `opts.interval` as it ends (the
/// outcome then holds the last, partial interval). Lost and filtered counts are per interval.
pub async fn record_with(
    opts: &RecordOptions,
    on_interval: &mut dyn FnMut(Profile),
) -> Result<RecordOutcome, RecordError> {
    validate(opts)?;
    let io = |what| move |source| RecordError::Io { what, source };
    // Signals are hooked first, so a Ctrl-C during set-up still ends in an orderly report.
    let mut sigint = signal(SignalKind::interrupt()).map_err(io("installing SIGINT handler"))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(io("installing SIGTERM handler"))?;
    let mut sighup = signal(SignalKind::hangup()).map_err(io("installing SIGHUP handler"))?;

    // Events are resolved before a command is started: a bad name starts nothing.
    let catalog = Catalog::load();
    let events = resolve_events(&catalog, &opts.events)?;
    let mut workload = match &opts.target {
        Target::Command(argv) => Some(Workload::prepare(argv)?),
        _ => None,
    };
    let config = SamplerConfig {
        filter: match &opts.target {
            Target::SystemWide => 0,
            Target::Tids(_) => filter::TID,
            Target::Cgroup(_) => filter::CGROUP,
            Target::Pids(_) | Target::Command(_) => filter::TGID,
        },
        capture: match opts.mode {
            Mode::Both => capture::USER_STACK | capture::KERNEL_STACK,
            Mode::User => capture::USER_STACK,
            Mode::Kernel => capture::KERNEL_STACK,
        },
        wakeup_bytes: u64::from(opts.ring_bytes / 4),
        ..Default::default()
    };
    // Unwind tables serve ring-buffer records of user stacks (in-kernel aggregation keys
    // stacks by the kernel's stack map, which only frame pointers fill).
    let mut tables = opts.call_graph == CallGraph::Dwarf
        && !opts.aggregate
        && opts.stacks
        && config.capture & capture::USER_STACK != 0;
    if tables && !crate::bpf::KernelFeatures::get().bpf_loop() {
        // Known from the kernel's BTF: no failed load, one line.
        eprintln!(
            "profiler: this kernel ({}) has no bpf_loop (Linux 5.17): walking user stacks \
             with frame pointers",
            crate::bpf::kernel_release()
        );
        tables = false;
    }
    let config = SamplerConfig {
        capture: config.capture
            | if opts.aggregate {
                capture::AGGREGATE
            } else {
                0
            }
            | if tables { capture::UNWIND_TABLES } else { 0 },
        ..config
    };
    let mut sampler = match Sampler::load_record(config, opts.ring_bytes) {
        // The unwinder needs bpf_loop (Linux 5.17); older kernels walk frame pointers.
        Err(BpfError::Program(e)) if config.capture & capture::UNWIND_TABLES != 0 => {
            eprintln!(
                "profiler: warning: the kernel refused the unwind-table program (it needs \
                 Linux 5.17 or newer for bpf_loop); walking stacks with frame pointers: {e}"
            );
            let config = SamplerConfig {
                capture: config.capture & !capture::UNWIND_TABLES,
                ..config
            };
            Sampler::load_record(config, opts.ring_bytes)?
        }
        other => other?,
    };
    let tables = tables && sampler.program_name() == "record_sample";
    let mut tables = if tables {
        let mut loader = TableLoader::new(sampler.take_unwind_maps()?);
        loader.preload_own()?;
        if let Err(e) = sampler.hook_unwind_lifecycle() {
            eprintln!("profiler: warning: exec and exit do not refresh unwind tables: {e}");
        }
        Some(loader)
    } else {
        None
    };
    for i in 0..events.len() {
        let config = RequestConfig {
            index: i as u32,
            flags: if opts.stacks {
                request_flags::STACKS
            } else {
                0
            },
            ..Default::default()
        };
        sampler.set_request(i as u64, config)?;
    }
    let mut pidfds = Vec::new();
    match (&opts.target, &workload) {
        (Target::Pids(pids), _) => {
            for &pid in pids {
                sampler.add_tgid(pid)?;
                if let Some(t) = tables.as_mut() {
                    t.load(pid, true)?;
                }
                // A target that is already gone is not an error: it simply contributes nothing.
                if let Ok(fd) = PidFd::open(pid) {
                    pidfds.push(fd);
                }
            }
            // Children the targets start while profiled are profiled too (as perf's
            // inherited events do); the run still ends when the given processes exit.
            follow_children(&catalog, &mut sampler, "the processes'");
        }
        (Target::Tids(tids), _) => {
            for &tid in tids {
                sampler.add_tid(tid)?;
            }
        }
        (Target::Cgroup(path), _) => sampler.add_cgroup(cgroup_id(path)?)?,
        (Target::Command(_), Some(w)) => {
            sampler.add_tgid(w.pid())?;
            // Children of the command are profiled too (a shell script's commands, say).
            follow_children(&catalog, &mut sampler, "the command's");
        }
        _ => {}
    }
    // One event per CPU per requested event, shared by all targets: the program filters in
    // the kernel and labels each sample with its event (the link's cookie).
    let policy = match opts.period {
        Some(n) => SamplePolicy::Period(n),
        None => SamplePolicy::Frequency(opts.frequency_hz),
    };
    let cpus = match &opts.cpus {
        Some(c) => c.clone(),
        None => online_cpus()?,
    };
    for (i, event) in events.iter().enumerate() {
        let mut attr = event.attr();
        attr.set_sample_policy(policy);
        attr.set_exclude_user(opts.mode == Mode::Kernel);
        attr.set_exclude_kernel(opts.mode == Mode::User);
        for &cpu in &cpus {
            let ev = PerfEvent::open(&attr, Scope::Cpu(cpu), None, || event.name.clone())?;
            sampler.attach(ev, i as u64)?;
        }
    }
    let mut records = sampler.take_records()?;
    for event in sampler.events() {
        event.enable(false)?;
    }
    // The run's duration is the time sampled: from here, not from before the set-up (loading
    // and attaching take a tenth of a second, which would inflate short runs' durations).
    let started = std::time::Instant::now();
    let exit_watch = match workload.as_mut() {
        Some(w) => {
            w.start()?;
            // The exec has happened: the program and its loader are mapped.
            if let Some(t) = tables.as_mut() {
                t.load(w.pid(), true)?;
            }
            Some(w.pidfd().map_err(io("pidfd_open"))?)
        }
        None => None,
    };

    let mut collector = Collector::default();
    // Bytes of records read from the ring (for `unwind_stats`).
    let mut ring_bytes = 0u64;
    let deadline: Pin<Box<dyn Future<Output = ()>>> = match opts.duration {
        Some(d) => Box::pin(tokio::time::sleep(d)),
        None => Box::pin(std::future::pending()),
    };
    tokio::pin!(deadline);
    let all_targets_exited = async {
        if pidfds.is_empty() {
            std::future::pending::<()>().await;
        }
        for fd in &pidfds {
            fd.exited().await;
        }
    };
    tokio::pin!(all_targets_exited);
    let command_exited = async {
        match &exit_watch {
            Some(fd) => fd.exited().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(command_exited);

    let names: Vec<Arc<str>> = events.iter().map(|e| Arc::from(e.name.as_str())).collect();
    // What the kernel counted up to the last interval (continuous mode reports deltas).
    let mut reported = SamplerStats::default();
    let mut interval_started = std::time::Instant::now();
    let run_info = |stats: &SamplerStats,
                    reported: &mut SamplerStats,
                    since: std::time::Instant,
                    until: std::time::Instant| {
        let info = RunInfo {
            event: opts.events.join(","),
            frequency_hz: opts.frequency_hz,
            period: opts.period,
            duration_ms: until.duration_since(since).as_millis() as u64,
            samples: 0,
            lost: stats.lost - reported.lost,
            filtered: stats.filtered - reported.filtered,
            stack_errors: stats.stack_errors - reported.stack_errors,
            collisions: stats.collisions - reported.collisions,
            untracked: stats.follow_failed - reported.follow_failed,
            refused: 0,
        };
        *reported = *stats;
        info
    };
    let every = |d: Option<Duration>| {
        let d = d.unwrap_or(Duration::from_secs(3600));
        tokio::time::interval_at(tokio::time::Instant::now() + d, d)
    };
    let mut intervals = every(opts.interval);
    let mut status_ticks = every(Some(Duration::from_secs(1)));
    let mut status = StatusLine::new(opts.status_line);
    let mut aggregated = AggregateReader::default();
    // In aggregate mode, new processes are looked for once a second (to capture their maps).
    let mut observe_ticks = every(Some(Duration::from_secs(1)));

    let stop = loop {
        tokio::select! {
            biased;
            _ = sigint.recv() => break Stop::Signal(libc::SIGINT),
            _ = sigterm.recv() => break Stop::Signal(libc::SIGTERM),
            _ = sighup.recv() => break Stop::Signal(libc::SIGHUP),
            _ = &mut deadline => break Stop::Duration,
            _ = &mut command_exited => break Stop::CommandExited,
            _ = &mut all_targets_exited => break Stop::TargetsExited,
            _ = intervals.tick(), if opts.interval.is_some() => {
                if opts.aggregate {
                    aggregated.read(&mut sampler, &mut collector)?;
                }
                let stats = sampler.stats()?;
                let now = std::time::Instant::now();
                let info = run_info(&stats, &mut reported, interval_started, now);
                interval_started = std::time::Instant::now();
                on_interval(collector.take_profile(info, &names));
            }
            _ = status_ticks.tick(), if status.enabled() => {
                let stats = sampler.stats()?;
                status.show(started.elapsed(), stats.submitted + stats.aggregated, stats.lost);
            }
            _ = observe_ticks.tick(), if opts.aggregate => {
                aggregated.observe(&mut sampler, &mut collector)?;
            }
            _ = records.next_batch_bytes(opts.poll, |bytes| {
                ring_bytes += bytes.len() as u64;
                if let Some((header, frames)) = StackSampleHeader::parse(bytes) {
                    collector.add(&header, frames);
                    if let Some(t) = tables.as_mut() {
                        t.note(&header);
                    }
                }
            }) => {
                if let Some(t) = tables.as_mut() {
                    for pid in t.load_pending()? {
                        collector.refresh_maps(pid);
                    }
                }
            }
        }
    };
    status.clear();
    // Close the events first so nothing new arrives, then take what is still in the ring.
    // Disabling is immediate on every CPU (detaching waits for RCU grace periods, event by
    // event), so the duration ends where sampling really ended.
    for event in sampler.events() {
        let _ = event.disable(false);
    }
    let ended = std::time::Instant::now();
    sampler.detach_all();
    records.drain_bytes(|bytes| {
        ring_bytes += bytes.len() as u64;
        if let Some((header, frames)) = StackSampleHeader::parse(bytes) {
            collector.add(&header, frames);
        }
    });
    if opts.aggregate {
        aggregated.read(&mut sampler, &mut collector)?;
    }
    let stats = sampler.stats()?;
    if opts.unwind_stats {
        let (partial, no_process) = sampler.unwind_counts()?;
        let t = tables.as_ref().map(|t| t.stats()).unwrap_or_default();
        eprintln!(
            "unwind-stats samples={} ring_bytes={ring_bytes} partial={partial} \
             no_process={no_process} modules={} processes={} loads={} \
             modules_without_table={} row_bytes={} reserved_bytes={} user_bytes={}",
            stats.submitted,
            t.modules,
            t.processes,
            t.loads,
            t.modules_without_table,
            t.row_bytes,
            t.reserved_bytes,
            t.user_bytes
        );
    }
    drop(sampler);
    let command_status = workload.as_mut().and_then(|w| w.try_reap());
    let since = if opts.interval.is_some() {
        interval_started
    } else {
        started
    };
    let info = run_info(&stats, &mut reported, since, ended);
    Ok(RecordOutcome {
        profile: collector.take_profile(info, &names),
        stop,
        command_status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_the_kernel_refuses_are_usage_errors() {
        let mut opts = RecordOptions::new(Target::SystemWide);
        for (period, text) in [
            (0, "period must be at least 1"),
            (1 << 63, "use -c 9223372036854775807 or less"),
        ] {
            opts.period = Some(period);
            match validate(&opts) {
                Err(RecordError::Usage(msg)) => assert!(msg.contains(text), "{msg}"),
                other => panic!("{period}: {:?}", other.err()),
            }
        }
    }

    #[test]
    fn event_names_that_are_not_events_are_usage_errors() {
        let catalog = Catalog::load();
        for (names, text) in [
            (&["page-fault"][..], "did you mean page-faults"),
            (&["cpu-clock:u"], "--user or --kernel"),
            (&["cpu-clock", "cpu-clock"], "given twice"),
        ] {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            match resolve_events(&catalog, &names) {
                Err(RecordError::Usage(msg)) => assert!(msg.contains(text), "{msg}"),
                other => panic!("{names:?}: {:?}", other.err()),
            }
        }
    }

    #[test]
    fn tracefs_field_offsets() {
        let v6_18 = "name: sched_process_fork\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";
        assert_eq!(parse_field_offset(v6_18, "child_pid"), Some(20));
        assert_eq!(parse_field_offset(v6_18, "parent_pid"), Some(12));
        let v5 = "\tfield:char child_comm[16];\toffset:28;\tsize:16;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;\n";
        assert_eq!(parse_field_offset(v5, "child_pid"), Some(44));
        assert_eq!(parse_field_offset(v5, "missing"), None);
    }
}
