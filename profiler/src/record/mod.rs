//! `record`: sample a target on cpu-clock with the eBPF program, collect stacks, and return a
//! symbolized [`Profile`]. Everything attached is owned by values that detach on drop, so
//! every exit path (error, signal, panic) leaves nothing behind.

mod aggregate;
mod batch;
mod collect;
mod copied;
mod decode;
mod error;
mod feature;
mod features;
mod group;
mod offcpu;
mod pidfd;
mod prefetch;
mod runtime;
mod session;
mod skipped;
mod sources;
mod status;
mod stops;
mod symbolizing;
mod unwind;
mod warning;
mod workload;

use std::{ffi::OsString, time::Duration};

use nix::sys::wait::WaitStatus;

pub use collect::Collector;
pub use error::{FollowError, RecordError, SampleEventError, UsageError};
pub use group::{GroupError, split_group};
pub use offcpu::OffCpuUsage;
pub use session::Session;
pub use status::StatusExtra;
pub use unwind::{TableLoader, TableStats};
pub use warning::{Warn, Warning};
pub use workload::{Workload, WorkloadError, resolve_command};

use crate::{
    bpf::{RecordProgram, check_privileges},
    cpc::events::{Catalog, Event, EventError, EventKind},
    profile::Profile,
};

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
    /// Sample the whole system (or the CPUs of `cpus`), whatever the target: with a
    /// `Target::Command`, the command only bounds the run (perf's `record -a -- sleep 5`).
    pub whole_system: bool,
    /// With `whole_system`: sample the CPUs' idle tasks too (perf's habit; a continuous agent
    /// leaves them out). Other targets never sample them: their events exclude idle, so no
    /// eBPF program runs on an idle CPU to filter the sample out.
    pub idle: bool,
    /// With a `Target::Command`: its standard output goes to our stderr (the profile is
    /// being written to our stdout, `-o -`).
    pub command_stdout_to_stderr: bool,
    /// Events to sample (catalogue names); each sample is labelled with its event.
    pub events: Vec<String>,
    pub frequency_hz: u64,
    /// Sample every N events instead of at a frequency (perf's `-c`, libcpc's preset).
    pub period: Option<u64>,
    pub mode: Mode,
    /// Only these CPUs (default: every online CPU).
    pub cpus: Option<Vec<u32>>,
    pub duration: Option<Duration>,
    /// The ring buffer's size (`-m`); `None`: sized to the rate ([`Self::ring_size`]).
    pub ring_bytes: Option<u32>,
    /// Reader poll interval when the kernel has not woken it (batched wake-ups).
    pub poll: Duration,
    /// Continuous mode: hand over a profile of each interval as it ends.
    pub interval: Option<Duration>,
    /// Searched for separate debug information before the system's directories.
    pub debug_dirs: Vec<std::path::PathBuf>,
    /// Name user frames (else they stay file offsets, to be named later).
    pub symbolize_user: bool,
    /// Print a status line (elapsed, samples, lost) to stderr every second.
    pub status_line: bool,
    /// What else the status line says (the exporter's totals).
    pub status_extra: Option<StatusExtra>,
    /// Count samples per (process, stack) in the kernel instead of one record per sample.
    pub aggregate: bool,
    /// Walk stacks in the eBPF program (false only to measure the program's cost without
    /// them: every sample then has an empty stack).
    pub stacks: bool,
    /// How user stacks are walked.
    pub call_graph: CallGraph,
    /// Print the unwinder's and the ring's totals to stderr at the end (benchmarks).
    pub unwind_stats: bool,
    /// Rows of the kernel's unwind table array (8 bytes each).
    pub unwind_rows: u32,
    /// Counters read at each sample of the (one) sampled event, attributed per thread to
    /// the samples' stacks (a counter group; at most `profiler_common::group::MAX_COUNTERS`).
    pub read: Vec<String>,
    /// Record off-CPU time too: the `off-cpu` event, in nanoseconds (`offcpu`).
    pub off_cpu: bool,
    /// With `off_cpu`: one wall-clock view (on-CPU samples converted to nanoseconds).
    pub wall: bool,
    /// With `off_cpu`: waits shorter than this are dropped (and counted).
    pub min_block: Duration,
    /// The runtimes whose frames are not shown, by name (`runtimes::registry::RUNTIMES`):
    /// every other one's are, with the unwind-table walker.
    pub runtimes_off: Vec<String>,
}

impl RecordOptions {
    pub fn new(target: Target) -> Self {
        Self {
            target,
            whole_system: false,
            idle: true,
            command_stdout_to_stderr: false,
            events: vec!["cpu-clock".into()],
            frequency_hz: 99,
            period: None,
            mode: Mode::Both,
            cpus: None,
            duration: None,
            ring_bytes: None,
            poll: Duration::from_millis(100),
            interval: None,
            debug_dirs: Vec::new(),
            symbolize_user: true,
            status_line: false,
            status_extra: None,
            aggregate: false,
            stacks: true,
            call_graph: CallGraph::default(),
            unwind_stats: false,
            unwind_rows: profiler_common::unwind::DEFAULT_UNWIND_ROWS,
            read: Vec::new(),
            off_cpu: false,
            wall: false,
            min_block: Duration::ZERO,
            runtimes_off: Vec::new(),
        }
    }

    /// The ring buffer's size: as asked, else about a quarter of a second of samples at the
    /// asked rate on every sampled CPU (160 bytes a sample: a record is an 80-byte header and 8
    /// bytes a frame; the benchmarks measure 120 on average, 185 with a counter group),
    /// a power of two from 1 MiB up to 8 MiB for whole CPUs and 4 MiB for some tasks (their
    /// threads bound their rate). The reader drains at least every `poll` (100 ms) and when a
    /// quarter of the ring is full, so this leaves it more than 150 ms of slack before a
    /// sample is lost (and counted). The whole ring counts twice in RSS from the start (the
    /// kernel maps its pages twice, for wrap-around reads, when it is mapped): 9999 Hz for
    /// one process on 2 CPUs needs 1 MiB (2 MiB of RSS), not 4 (8 MiB). With a period
    /// (`-c`) the rate is unknown: the largest size. So with `--off-cpu`, whose records come
    /// at the target's switch rate, each with its frames or, before its process's tables are
    /// in, a 16 KiB stack copy (a new node waits 50 times a second while its tables are
    /// built: 1 MiB lost 8 of them beside busy CPUs).
    pub fn ring_size(&self) -> u32 {
        if let Some(bytes) = self.ring_bytes {
            return bytes;
        }
        let max = match self.target {
            _ if self.whole_system => profiler_common::DEFAULT_RING_BYTES,
            Target::SystemWide | Target::Cgroup(_) => profiler_common::DEFAULT_RING_BYTES,
            _ => profiler_common::DEFAULT_RING_BYTES / 2,
        };
        if self.period.is_some() || self.off_cpu {
            return max;
        }
        let cpus = match &self.cpus {
            Some(cpus) => cpus.len(),
            None => crate::host::online_cpus().map_or(1, |c| c.len()),
        };
        let per_second = self
            .frequency_hz
            .saturating_mul(cpus.max(1) as u64)
            .saturating_mul(self.events.len().max(1) as u64)
            .saturating_mul(160);
        (per_second / 4)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX)
            .clamp(1 << 20, u64::from(max)) as u32
    }
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
    /// The events and programs being detached (each waits for an RCU grace period): the
    /// profile can be written meanwhile; dropping this waits until all are gone.
    pub detaching: Detaching,
}

/// A thread detaching what a recording attached; dropping it waits for the thread.
pub struct Detaching(Option<std::thread::JoinHandle<()>>);

impl Detaching {
    pub(crate) fn new(thread: std::thread::JoinHandle<()>) -> Self {
        Self(Some(thread))
    }
}

impl Drop for Detaching {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            let _ = t.join();
        }
    }
}

/// Checks that can fail before anything is attached: ranges, privileges, targets.
pub fn validate(opts: &RecordOptions) -> Result<(), RecordError> {
    if opts.frequency_hz == 0 {
        return Err(UsageError::ZeroFrequency.into());
    }
    if let Some(max) = crate::host::max_sample_rate()
        && opts.frequency_hz > max
    {
        return Err(UsageError::FrequencyAboveLimit {
            hz: opts.frequency_hz,
            max,
        }
        .into());
    }
    if let Target::Pids(pids) = &opts.target {
        if pids.is_empty() {
            return Err(UsageError::NoProcess.into());
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
        return Err(UsageError::NotACgroup(path.clone()).into());
    }
    if let Some(cpus) = &opts.cpus {
        let online = online_cpus()?;
        if let Some(cpu) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(UsageError::CpuOffline { cpu: *cpu, online }.into());
        }
    }
    match opts.period {
        Some(0) => return Err(UsageError::ZeroPeriod.into()),
        // perf_event_open refuses sample periods with the top bit set (EINVAL).
        Some(n) if n > i64::MAX as u64 => {
            return Err(UsageError::PeriodAboveLimit(n).into());
        }
        _ => {}
    }
    features::validate(opts)?;
    if let Target::Command(argv) = &opts.target {
        resolve_command(&argv[0])?;
    }
    Ok(check_privileges().require_bpf_and_perfmon()?)
}

/// Resolves event names through the catalogue; events this host cannot count are an error
/// here, not an empty profile.
fn resolve_events(catalog: &Catalog, names: &[String]) -> Result<Vec<Event>, RecordError> {
    if let Some(n) = names
        .iter()
        .enumerate()
        .find_map(|(i, n)| names[..i].contains(n).then_some(n))
    {
        return Err(UsageError::DuplicateEvent(n.clone()).into());
    }
    names
        .iter()
        .map(|n| {
            // A name that is not an event (unknown, malformed) is a usage error, with the
            // catalogue's suggestions; one this host cannot count is a runtime error below.
            let event = catalog.resolve(n).map_err(|e| match e {
                EventError::Unavailable { .. } => SampleEventError::Unavailable(e).into(),
                _ if perf_modifier(catalog, n) => UsageError::PerfModifier(n.clone()).into(),
                _ => RecordError::from(UsageError::NotAnEvent(e)),
            })?;
            if let Some(reason) = catalog.unavailable_reason(&event) {
                return Err(SampleEventError::Unsupported {
                    event: n.clone(),
                    reason,
                }
                .into());
            }
            if event.kind == EventKind::Tracepoint {
                return Err(SampleEventError::Tracepoint(n.clone()).into());
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
fn follow_children(
    catalog: &Catalog,
    sampler: &mut RecordProgram,
    whose: &str,
    warnings: &mut dyn Warn,
) {
    let group_dead = tracepoint_field_offset(catalog, "sched_process_exit", "group_dead");
    let followed = match tracepoint_field_offset(catalog, "sched_process_fork", "child_pid") {
        Some(off) => sampler
            .follow_forks(off, group_dead)
            .map_err(FollowError::Bpf),
        None => Err(FollowError::NoForkTracepoint),
    };
    if let Err(e) = followed {
        warnings.warn(Warning::new(format!("not following {whose} children: {e}")));
    }
}

/// The offset of `field` in `sched:EVENT` records, from its tracefs format. Offsets differ
/// between kernels (6.18 has `__data_loc` comms and puts fork's `child_pid` at 20, older
/// kernels at 44); exit's `group_dead` exists from 6.16 on.
pub(crate) fn tracepoint_field_offset(catalog: &Catalog, event: &str, field: &str) -> Option<u32> {
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

fn online_cpus() -> Result<Vec<u32>, RecordError> {
    crate::host::online_cpus().map_err(|source| RecordError::Io {
        what: "reading /sys/devices/system/cpu/online",
        source,
    })
}

/// Records until the duration passes, the command or all target processes exit, or SIGINT,
/// SIGTERM or SIGHUP arrives. Must run inside a tokio runtime.
pub async fn record(
    opts: &RecordOptions,
    warnings: &mut dyn Warn,
) -> Result<RecordOutcome, RecordError> {
    record_with(opts, &mut |_| {}, warnings).await
}

/// [`record`], handing `on_interval` the profile of each `opts.interval` as it ends (the
/// outcome then holds the last, partial interval). Lost and filtered counts are per interval.
/// What the run has to say besides the profile goes to `warnings`, in the order it happened,
/// kept when the run fails (the caller prints it).
pub async fn record_with(
    opts: &RecordOptions,
    on_interval: &mut dyn FnMut(Profile),
    warnings: &mut dyn Warn,
) -> Result<RecordOutcome, RecordError> {
    // `--wall`: every profile handed over is the wall-clock view.
    let wall = opts.wall;
    let view = move |p: Profile| match wall {
        true => crate::profile::wall_view(&p),
        false => p,
    };
    let mut on_interval = |p: Profile| on_interval(view(p));
    let mut session = Session::setup(opts, warnings)?;
    let stop = session.run(&mut on_interval).await?;
    let mut outcome = session.finish(stop, &mut on_interval).await?;
    outcome.profile = view(outcome.profile);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_is_sized_to_the_rate_unless_asked() {
        const MIB: u32 = 1 << 20;
        let mut opts = RecordOptions::new(Target::SystemWide);
        opts.cpus = Some(vec![0, 1]);
        opts.frequency_hz = 999;
        assert_eq!(opts.ring_size(), MIB, "999 Hz on 2 CPUs: 0.3 MB a second");
        opts.frequency_hz = 9999;
        assert_eq!(opts.ring_size(), MIB, "9999 Hz on 2 CPUs: 3.2 MB a second");
        opts.frequency_hz = 50_000;
        assert_eq!(opts.ring_size(), 4 * MIB);
        opts.frequency_hz = 100_000;
        assert_eq!(opts.ring_size(), 8 * MIB);
        opts.cpus = Some((0..256).collect());
        opts.frequency_hz = 999;
        assert_eq!(opts.ring_size(), 8 * MIB, "at most 8 MiB");
        opts.period = Some(10_000);
        assert_eq!(opts.ring_size(), 8 * MIB, "a period: the rate is unknown");
        let mut task = RecordOptions::new(Target::Command(vec!["true".into()]));
        task.cpus = Some((0..16).collect());
        task.frequency_hz = 9999;
        assert_eq!(task.ring_size(), 4 * MIB, "tasks: at most 4 MiB");
        task.cpus = Some(vec![0, 1]);
        task.frequency_hz = 99;
        assert_eq!(task.ring_size(), MIB);
        task.off_cpu = true;
        assert_eq!(
            task.ring_size(),
            4 * MIB,
            "--off-cpu: the switch rate is unknown"
        );
        task.ring_bytes = Some(4096);
        assert_eq!(task.ring_size(), 4096, "-m wins");
    }

    #[test]
    fn periods_the_kernel_refuses_are_usage_errors() {
        let mut opts = RecordOptions::new(Target::SystemWide);
        for (period, text) in [
            (0, "period must be at least 1"),
            (1 << 63, "use -c 9223372036854775807 or less"),
        ] {
            opts.period = Some(period);
            match validate(&opts) {
                Err(RecordError::Usage(e)) => {
                    let msg = e.to_string();
                    assert!(msg.contains(text), "{msg}")
                }
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
                Err(RecordError::Usage(e)) => {
                    let msg = e.to_string();
                    assert!(msg.contains(text), "{msg}")
                }
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
