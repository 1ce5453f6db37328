//! Off-CPU time (`record --off-cpu`): the `sched:sched_switch` program of `record`'s object
//! (see `profiler_common::offcpu`), its configuration, its counters and the records of the
//! threads still off the CPU when a recording stops.

use aya::programs::{TracePoint, trace_point::TracePointLinkId};
use profiler_common::{
    names::{maps as map, programs},
    offcpu::{OffCpuBuf, OffCpuConfig, Total, TotalKey, stat},
    stack::StackCopyBuf,
};

use super::{
    BpfError, RecordProgram,
    maps::{self, Counters},
};

/// The off-CPU program that goes with sampling program `sampling`: the one walking with
/// unwind tables, or with frame pointers.
pub(super) fn off_cpu_program(sampling: &str) -> &'static str {
    if sampling == programs::RECORD_SAMPLE {
        programs::OFFCPU_SWITCH
    } else {
        programs::OFFCPU_SWITCH_FP
    }
}

/// The off-CPU program's totals (summed over CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuStats {
    /// Switch-outs of targets whose stack was kept.
    pub kept: u64,
    /// Waits added to the in-kernel totals (the thread came back).
    pub totalled: u64,
    /// Waits written to the ring one by one (the totals map was full).
    pub written: u64,
    /// Waits written to the ring with a copy of their stack (no unwind tables yet).
    pub copied: u64,
    /// Waits written to the ring one by one because their stack has a runtime's frames.
    pub runtime: u64,
    /// Waits shorter than the minimum, dropped, and their nanoseconds.
    pub short: u64,
    pub short_ns: u64,
    /// Records the ring had no room for.
    pub lost: u64,
    /// Switch-outs not kept because the pending map was full.
    pub full: u64,
    pub stack_errors: u64,
    /// Waits whose return the program did not see, ended from the scheduler's run time of
    /// the thread when it next left the CPU, and those dropped for want of it.
    pub unseen_ended: u64,
    pub unseen_dropped: u64,
    /// Switches at which the kernel did not run the program (its `recursion_misses`: another
    /// eBPF program was running on that CPU).
    pub skipped: u64,
}

/// The attached off-CPU program; [`RecordProgram::stop_off_cpu`] detaches it (dropping the sampler
/// does too).
#[derive(Debug)]
pub struct OffCpuHook {
    program: &'static str,
    link: TracePointLinkId,
}

impl RecordProgram {
    /// Configures, loads and attaches the off-CPU program matching the loaded sampling
    /// program (unwind tables or frame pointers). The object must have been loaded with
    /// `capture::OFF_CPU`, which sizes its pending map.
    pub fn start_off_cpu(&mut self, config: OffCpuConfig) -> Result<OffCpuHook, BpfError> {
        let program = off_cpu_program(self.program_name());
        let ebpf = self.loaded.ebpf_mut();
        maps::set_config(ebpf, map::OFFCPU_CONFIG, config)?;
        let tp = ebpf
            .program_mut(program)
            .ok_or(BpfError::Missing("the off-CPU program"))?;
        // Loaded with the sampling program when the object was (`RecordConfig`'s `OFF_CPU`).
        super::object::load_tracepoint(program, tp)?;
        let tp: &mut TracePoint = tp.try_into()?;
        let link = tp.attach("sched", "sched_switch")?;
        Ok(OffCpuHook { program, link })
    }

    /// Detaches the off-CPU program: no record is written or kept after this returns.
    pub fn stop_off_cpu(&mut self, hook: OffCpuHook) -> Result<(), BpfError> {
        let tp: &mut TracePoint = self
            .loaded
            .ebpf_mut()
            .program_mut(hook.program)
            .ok_or(BpfError::Missing("the off-CPU program"))?
            .try_into()?;
        Ok(tp.detach(hook.link)?)
    }

    /// The off-CPU program's counters.
    pub fn off_cpu_stats(&self) -> Result<OffCpuStats, BpfError> {
        let stats = Counters::open(self.loaded.ebpf(), map::OFFCPU_STATS)?;
        Ok(OffCpuStats {
            kept: stats.sum(stat::KEPT)?,
            totalled: stats.sum(stat::TOTALLED)?,
            written: stats.sum(stat::WRITTEN)?,
            copied: stats.sum(stat::COPIED)?,
            runtime: stats.sum(stat::RUNTIME)?,
            short: stats.sum(stat::SHORT)?,
            short_ns: stats.sum(stat::SHORT_NS)?,
            lost: stats.sum(stat::LOST)?,
            full: stats.sum(stat::FULL)?,
            stack_errors: stats.sum(stat::STACK_ERRORS)?,
            unseen_ended: stats.sum(stat::UNSEEN_ENDED)?,
            unseen_dropped: stats.sum(stat::UNSEEN_DROPPED)?,
            skipped: [programs::OFFCPU_SWITCH, programs::OFFCPU_SWITCH_FP]
                .into_iter()
                .filter_map(|name| recursion_misses(self.loaded.ebpf(), name))
                .sum(),
        })
    }

    /// The in-kernel totals per (thread, stack), as they are now.
    pub fn off_cpu_totals(&self) -> Result<Vec<(TotalKey, Total)>, BpfError> {
        // Entries are never removed while the program runs.
        maps::entries(self.loaded.ebpf(), map::OFFCPU_TOTALS)
    }

    /// The stack copies kept for threads off the CPU now, by tid (threads that left while
    /// their process had no unwind tables).
    pub fn off_cpu_copies(&self) -> Result<std::collections::HashMap<u32, StackCopyBuf>, BpfError> {
        let copies = maps::hash_map::<u32, StackCopyBuf>(self.loaded.ebpf(), map::OFFCPU_COPIES)?;
        Ok(copies.iter().filter_map(Result::ok).collect())
    }

    /// The kept records of threads off the CPU now (their `time_ns` is when they left).
    pub fn off_cpu_pending(&self) -> Result<Vec<OffCpuBuf>, BpfError> {
        let pending = maps::hash_map::<u32, OffCpuBuf>(self.loaded.ebpf(), map::OFFCPU_PENDING)?;
        // An entry removed between listing and reading (its thread came back) is skipped.
        Ok(pending
            .iter()
            .filter_map(Result::ok)
            .map(|(_, v)| v)
            .collect())
    }
}

/// The kernel's count of the runs of program `name` it skipped (`recursion_misses` in its
/// fdinfo, Linux 5.12+); `None` if it is not loaded or the kernel does not say.
fn recursion_misses(ebpf: &aya::Ebpf, name: &str) -> Option<u64> {
    use std::os::fd::{AsFd, AsRawFd};
    let fd = ebpf.program(name)?.fd().ok()?.as_fd().as_raw_fd();
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("recursion_misses:"))
        .and_then(|v| v.trim().parse().ok())
}
