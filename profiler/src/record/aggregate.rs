//! Reading the in-kernel aggregation map (`record --aggregate`): counts per (process, event,
//! stacks, cgroup), turned into per-interval deltas for the collector. Entries are never
//! deleted while recording (a delete would race with the kernel's increments and lose
//! counts), so each read reports what grew since the last one.

use std::collections::HashMap;

use profiler_common::{AggregateKey, stack_id};

use super::Collector;
use crate::bpf::{BpfError, Sampler};

#[derive(Default)]
pub struct AggregateReader {
    /// Counts as of the last read.
    seen: HashMap<AggregateKey, u64>,
    /// Stacks by id; a stack-map slot is never overwritten without BPF_F_REUSE_STACKID.
    stacks: HashMap<i32, Vec<u64>>,
}

impl AggregateReader {
    /// Captures the memory maps of processes that appeared since the last look, so their
    /// stacks can be symbolized even if they exit before the end.
    pub fn observe(
        &mut self,
        sampler: &mut Sampler,
        collector: &mut Collector,
    ) -> Result<(), BpfError> {
        for (key, _) in sampler.aggregated()? {
            if let std::collections::hash_map::Entry::Vacant(e) = self.seen.entry(key) {
                collector.observe(key.pid);
                e.insert(0);
            }
        }
        Ok(())
    }

    /// Adds what every entry gained since the last read to `collector`.
    pub fn read(
        &mut self,
        sampler: &mut Sampler,
        collector: &mut Collector,
    ) -> Result<(), BpfError> {
        for (key, value) in sampler.aggregated()? {
            let before = self.seen.insert(key, value.count).unwrap_or(0);
            let delta = value.count.saturating_sub(before);
            if delta == 0 {
                continue;
            }
            let kernel = self.stack(sampler, key.kernel_stack)?;
            let user = self.stack(sampler, key.user_stack)?;
            let missing = (key.kernel_stack == stack_id::COLLISION
                || key.user_stack == stack_id::COLLISION)
                .then_some("[stack hash collision]");
            collector.add_counted(
                key.request,
                key.pid,
                key.cgroup_id,
                value.comm,
                &kernel,
                &user,
                missing,
                delta,
            );
        }
        Ok(())
    }

    fn stack(&mut self, sampler: &mut Sampler, id: i32) -> Result<Vec<u64>, BpfError> {
        if id < 0 {
            return Ok(Vec::new());
        }
        if let Some(s) = self.stacks.get(&id) {
            return Ok(s.clone());
        }
        let frames = sampler.stack_trace(id as u32)?;
        self.stacks.insert(id, frames.clone());
        Ok(frames)
    }
}
