//! Off-CPU time (`record --off-cpu`): the `sched:sched_switch` program of `record`'s object
//! (see `profiler_common::offcpu`), its configuration, its counters and the records of the
//! threads still off the CPU when a recording stops.

use aya::{
    maps::{Array, HashMap, MapError, PerCpuArray},
    programs::{TracePoint, trace_point::TracePointLinkId},
};
use profiler_common::offcpu::{OffCpuBuf, OffCpuConfig, Total, TotalKey, stat};

use super::{BpfError, Sampler};

/// The program walking with unwind tables (with `record_sample`), and with frame pointers.
const TABLES_PROGRAM: &str = "offcpu_switch";
const FP_PROGRAM: &str = "offcpu_switch_fp";

/// The off-CPU program's totals (summed over CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuStats {
    /// Switch-outs of targets whose stack was kept.
    pub kept: u64,
    /// Waits added to the in-kernel totals (the thread came back).
    pub totalled: u64,
    /// Waits written to the ring one by one (the totals map was full).
    pub written: u64,
    /// Waits shorter than the minimum, dropped, and their nanoseconds.
    pub short: u64,
    pub short_ns: u64,
    /// Records the ring had no room for.
    pub lost: u64,
    /// Switch-outs not kept because the pending map was full.
    pub full: u64,
    pub stack_errors: u64,
}

/// The attached off-CPU program; [`Sampler::stop_off_cpu`] detaches it (dropping the sampler
/// does too).
#[derive(Debug)]
pub struct OffCpuHook {
    program: &'static str,
    link: TracePointLinkId,
}

fn map_err(name: &'static str) -> impl FnOnce(MapError) -> BpfError {
    move |source| BpfError::Map { name, source }
}

impl Sampler {
    /// Configures, loads and attaches the off-CPU program matching the loaded sampling
    /// program (unwind tables or frame pointers). The object must have been loaded with
    /// `capture::OFF_CPU`, which sizes its pending map.
    pub fn start_off_cpu(&mut self, config: OffCpuConfig) -> Result<OffCpuHook, BpfError> {
        let program = if self.program_name() == "record_sample" {
            TABLES_PROGRAM
        } else {
            FP_PROGRAM
        };
        let ebpf = self.ebpf_mut();
        let map = ebpf
            .map_mut("OFFCPU_CONFIG")
            .ok_or(BpfError::Missing("OFFCPU_CONFIG"))?;
        let mut cfg: Array<_, OffCpuConfig> =
            Array::try_from(map).map_err(map_err("OFFCPU_CONFIG"))?;
        cfg.set(0, config, 0).map_err(map_err("OFFCPU_CONFIG"))?;
        let tp: &mut TracePoint = ebpf
            .program_mut(program)
            .ok_or(BpfError::Missing("the off-CPU program"))?
            .try_into()?;
        tp.load()?;
        let link = tp.attach("sched", "sched_switch")?;
        Ok(OffCpuHook { program, link })
    }

    /// Detaches the off-CPU program: no record is written or kept after this returns.
    pub fn stop_off_cpu(&mut self, hook: OffCpuHook) -> Result<(), BpfError> {
        let tp: &mut TracePoint = self
            .ebpf_mut()
            .program_mut(hook.program)
            .ok_or(BpfError::Missing("the off-CPU program"))?
            .try_into()?;
        Ok(tp.detach(hook.link)?)
    }

    /// The off-CPU program's counters.
    pub fn off_cpu_stats(&mut self) -> Result<OffCpuStats, BpfError> {
        let map = self
            .ebpf_mut()
            .map_mut("OFFCPU_STATS")
            .ok_or(BpfError::Missing("OFFCPU_STATS"))?;
        let stats: PerCpuArray<_, u64> =
            PerCpuArray::try_from(map).map_err(map_err("OFFCPU_STATS"))?;
        let slot = |i: u32| -> Result<u64, BpfError> {
            Ok(stats
                .get(&i, 0)
                .map_err(map_err("OFFCPU_STATS"))?
                .iter()
                .sum())
        };
        Ok(OffCpuStats {
            kept: slot(stat::KEPT)?,
            totalled: slot(stat::TOTALLED)?,
            written: slot(stat::WRITTEN)?,
            short: slot(stat::SHORT)?,
            short_ns: slot(stat::SHORT_NS)?,
            lost: slot(stat::LOST)?,
            full: slot(stat::FULL)?,
            stack_errors: slot(stat::STACK_ERRORS)?,
        })
    }

    /// The in-kernel totals per (thread, stack), as they are now.
    pub fn off_cpu_totals(&mut self) -> Result<Vec<(TotalKey, Total)>, BpfError> {
        let map = self
            .ebpf_mut()
            .map_mut("OFFCPU_TOTALS")
            .ok_or(BpfError::Missing("OFFCPU_TOTALS"))?;
        let totals: HashMap<_, TotalKey, Total> =
            HashMap::try_from(map).map_err(map_err("OFFCPU_TOTALS"))?;
        // Entries are never removed while the program runs.
        totals
            .iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("OFFCPU_TOTALS"))
    }

    /// The stack copies kept for threads off the CPU now, by tid (threads that left while
    /// their process had no unwind tables).
    pub fn off_cpu_copies(
        &mut self,
    ) -> Result<std::collections::HashMap<u32, profiler_common::stack::StackCopyBuf>, BpfError>
    {
        let map = self
            .ebpf_mut()
            .map_mut("OFFCPU_COPIES")
            .ok_or(BpfError::Missing("OFFCPU_COPIES"))?;
        let copies: HashMap<_, u32, profiler_common::stack::StackCopyBuf> =
            HashMap::try_from(map).map_err(map_err("OFFCPU_COPIES"))?;
        Ok(copies.iter().filter_map(Result::ok).collect())
    }

    /// The kept records of threads off the CPU now (their `time_ns` is when they left).
    pub fn off_cpu_pending(&mut self) -> Result<Vec<OffCpuBuf>, BpfError> {
        let map = self
            .ebpf_mut()
            .map_mut("OFFCPU_PENDING")
            .ok_or(BpfError::Missing("OFFCPU_PENDING"))?;
        let pending: HashMap<_, u32, OffCpuBuf> =
            HashMap::try_from(map).map_err(map_err("OFFCPU_PENDING"))?;
        // An entry removed between listing and reading (its thread came back) is skipped.
        Ok(pending
            .iter()
            .filter_map(Result::ok)
            .map(|(_, v)| v)
            .collect())
    }
}
