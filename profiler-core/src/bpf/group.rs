//! Counter groups of the record program (`record --read`): per-CPU counting events read by
//! the `sched_switch` hook into per-thread values, and what the hook counted.

use std::os::fd::AsFd;

use profiler_common::{
    group,
    names::{maps as map, programs},
};

use super::{
    BpfError, RecordProgram,
    maps::{self, Counters},
};
use crate::perf::PerfEvent;

/// What a counter group's program counted ([`RecordProgram::group_values`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupTotals {
    /// Each target thread's values (by counter) up to now.
    pub threads: std::collections::HashMap<u32, [u64; group::MAX_COUNTERS]>,
    /// Events of target threads the per-thread map had no room for, by counter.
    pub untracked: [u64; group::MAX_COUNTERS],
    /// Events of target threads after their `sched_process_exit`, by counter: not theirs by
    /// a per-task counter's account, so in no total.
    pub after_exit: [u64; group::MAX_COUNTERS],
    /// Counter reads that failed (an event missing on a CPU).
    pub read_errors: u64,
    /// Aggregated samples whose counter increases found no room in the aggregation's group
    /// maps (they stayed with their thread: its next sample, or its unattributed rest).
    pub aggregate_full: u64,
}

impl RecordProgram {
    /// Reads `counters` (per-CPU counting events of CPU `cpu`, in order) into the records of
    /// `record`'s samples, per thread: loads the `sched_switch` hook that moves each CPU's
    /// counter deltas to the task switched out, and keeps the events (enabled with the
    /// others). Call once, with every CPU's counters, before enabling. Load with
    /// `RecordConfig::group` for the per-thread map at full size.
    pub fn start_group(
        &mut self,
        counters: Vec<(u32, Vec<PerfEvent>)>,
        config: group::GroupConfig,
    ) -> Result<(), BpfError> {
        maps::set_config(self.loaded.ebpf_mut(), map::GROUP_CONFIG, config)?;
        for (cpu, events) in counters {
            for (k, event) in events.into_iter().enumerate() {
                self.loaded.set_sibling(k, cpu, event.as_fd())?;
                self.loaded.keep(event);
            }
        }
        self.loaded
            .attach_raw_tracepoint(programs::GROUP_SWITCH, "sched_switch")?;
        if config.exits != 0 {
            // Fork first: a tid must never keep an exit mark its new thread did not earn.
            self.loaded
                .attach_tracepoint(programs::GROUP_FORK, "sched", "sched_process_fork")?;
            self.loaded
                .attach_raw_tracepoint(programs::GROUP_EXIT, "sched_process_exit")?;
        }
        Ok(())
    }

    /// Every thread's counter values so far (`start_group`), and per counter the events of
    /// targets the per-thread map had no room for, and the counter reads that failed.
    pub fn group_values(&self) -> Result<GroupTotals, BpfError> {
        let ebpf = self.loaded.ebpf();
        let threads = maps::entries::<u32, group::GroupValues>(ebpf, map::GROUP_TASKS)?
            .into_iter()
            .map(|(tid, v)| (tid, v.values))
            .collect();
        let lost = Counters::open(ebpf, map::GROUP_LOST)?;
        let mut untracked = [0u64; group::MAX_COUNTERS];
        let mut after_exit = [0u64; group::MAX_COUNTERS];
        for k in 0..group::MAX_COUNTERS {
            untracked[k] = lost.sum(k as u32)?;
            after_exit[k] = lost.sum(group::AFTER_EXIT + k as u32)?;
        }
        Ok(GroupTotals {
            threads,
            untracked,
            after_exit,
            read_errors: lost.sum(group::READ_ERRORS)?,
            aggregate_full: lost.sum(group::AGGREGATE_FULL)?,
        })
    }
}
