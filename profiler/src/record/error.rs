//! What can go wrong in `record`, by domain: the command line asked for something impossible
//! (usage), an event this host cannot sample, missing privileges, or the layers below (BPF,
//! perf events, the workload, the unwinder's maps, the system calls `record` makes itself).

use std::path::PathBuf;

use crate::{
    bpf::{BpfError, PrivilegeError, UnwindMapError},
    cpc::events::EventError,
    perf::PerfError,
};

use super::workload::WorkloadError;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error("process {0} does not exist")]
    NoSuchProcess(u32),
    #[error("thread {0} does not exist")]
    NoSuchThread(u32),
    #[error(transparent)]
    Event(#[from] SampleEventError),
    #[error(transparent)]
    Privilege(#[from] PrivilegeError),
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

/// Options that cannot work whatever the host: the CLI exits with its usage status.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("frequency must be at least 1 Hz")]
    ZeroFrequency,
    #[error(
        "frequency {hz} Hz is above kernel.perf_event_max_sample_rate ({max}); use -F {max} or less"
    )]
    FrequencyAboveLimit { hz: u64, max: u64 },
    #[error("no process id given")]
    NoProcess,
    #[error("{} is not a cgroup v2 directory (no cgroup.procs)", .0.display())]
    NotACgroup(PathBuf),
    #[error("cpu {cpu} is not online (online: {online:?})")]
    CpuOffline { cpu: u32, online: Vec<u32> },
    #[error("period must be at least 1")]
    ZeroPeriod,
    #[error("period {0} is above the kernel's limit ({max}); use -c {max} or less", max = i64::MAX)]
    PeriodAboveLimit(u64),
    #[error("event '{0}' is given twice; name each event once")]
    DuplicateEvent(String),
    #[error(
        "malformed event '{0}': perf's :u/:k modifiers are not part of event names; sample one \
         mode with --user or --kernel"
    )]
    PerfModifier(String),
    /// A malformed counter group (`{LEADER,EV2,..}:S`, `--read`).
    #[error(transparent)]
    Group(#[from] super::group::GroupError),
    /// Off-CPU options that do not go together (`--off-cpu`, `--wall`).
    #[error(transparent)]
    OffCpu(#[from] super::offcpu::OffCpuUsage),
    /// Not an event name at all (unknown, malformed), with the catalogue's suggestions.
    #[error(transparent)]
    NotAnEvent(EventError),
}

/// Why the children of the targets are not followed (a warning: the run goes on).
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("sched:sched_process_fork is not in tracefs")]
    NoForkTracepoint,
    #[error(transparent)]
    Bpf(BpfError),
}

/// An event that exists but that `record` cannot sample here.
#[derive(Debug, thiserror::Error)]
pub enum SampleEventError {
    #[error(transparent)]
    Unavailable(EventError),
    #[error("cannot sample '{event}': {reason}")]
    Unsupported { event: String, reason: String },
    #[error(
        "cannot sample tracepoint '{0}' with record yet (tracepoints take tracepoint programs, \
         not perf_event ones)"
    )]
    Tracepoint(String),
}
