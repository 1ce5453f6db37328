//! Reading the in-kernel aggregation map (`record --aggregate`): samples and the events they
//! stand for (the sum of their periods) per (process, event, stacks, cgroup), turned into
//! per-interval deltas for the collector. Entries are never deleted while recording (a
//! delete would race with the kernel's increments and lose counts), so each read reports
//! what grew since the last one. With a counter group, the
//! kernel also sums each counter's per-thread increases per key (`AGGREGATE_GROUP`): their
//! growth goes to the same stacks, as the counters' events.

use std::collections::HashMap;

use profiler_common::{AggregateKey, group::MAX_COUNTERS, stack_id};

use super::{
    Collector, RecordError,
    collect::{CountedStack, Weight},
    feature::{self, Feature, Kernel, Shared},
};
use crate::bpf::{BpfError, RecordProgram};

/// `--aggregate` in the list of features: the program counts stacks in a map instead of
/// writing records, read each interval and at the end.
pub(super) const SPEC: feature::Spec = feature::Spec {
    validate: |_| Ok(()),
    capture: |opts| match opts.aggregate {
        true => profiler_common::capture::AGGREGATE,
        false => 0,
    },
    start: |s| {
        if !s.opts.aggregate {
            return Ok(None);
        }
        // A counter group's counters are the events that follow (its feature comes next).
        let first_counter = (!s.counters.is_empty()).then_some(s.first_event);
        Ok(Some(Box::new(AggregateReader::new(first_counter))))
    },
};

impl Feature for AggregateReader {
    /// Processes that ended since are named from what the kernel reported.
    fn observe(
        &mut self,
        kernel: &mut Kernel<'_>,
        collector: &mut Collector,
    ) -> Result<(), RecordError> {
        kernel.read_mappings(collector);
        Ok(AggregateReader::observe(self, kernel.sampler, collector)?)
    }

    fn read(
        &mut self,
        kernel: &mut Kernel<'_>,
        collector: &mut Collector,
        shared: &mut Shared,
    ) -> Result<(), RecordError> {
        kernel.read_mappings(collector);
        AggregateReader::read(self, kernel.sampler, collector)?;
        shared.counters_on_stacks = self.counters.as_ref().map(|c| c.attributed);
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct AggregateReader {
    /// Samples and events as of the last read, and each key's command.
    seen: HashMap<AggregateKey, (Weight, [u8; 16])>,
    /// Stacks by id; a stack-map slot is never overwritten without BPF_F_REUSE_STACKID.
    stacks: HashMap<i32, Vec<u64>>,
    /// The counter group's sums, when one is recorded.
    counters: Option<CounterSums>,
}

/// A counter group's sums per key as of the last read.
struct CounterSums {
    /// The event index of the group's first counter (the sampled events come first).
    first_event: u32,
    seen: HashMap<AggregateKey, [u64; MAX_COUNTERS]>,
    /// Each counter's increases handed to the collector so far: its events on stacks.
    attributed: [u64; MAX_COUNTERS],
}

impl AggregateReader {
    /// A reader that also reads a counter group's sums (whose first counter is event
    /// `first_counter`), or only the counts.
    fn new(first_counter: Option<u32>) -> Self {
        Self {
            counters: first_counter.map(|first_event| CounterSums {
                first_event,
                seen: HashMap::new(),
                attributed: [0; MAX_COUNTERS],
            }),
            ..Default::default()
        }
    }

    /// Captures the memory maps of processes that appeared since the last look, so their
    /// stacks can be symbolized even if they exit before the end.
    fn observe(
        &mut self,
        sampler: &mut RecordProgram,
        collector: &mut Collector,
    ) -> Result<(), BpfError> {
        for (key, value) in sampler.aggregated()? {
            if let std::collections::hash_map::Entry::Vacant(e) = self.seen.entry(key) {
                collector.observe(key.pid);
                e.insert((Weight::default(), value.comm));
            }
        }
        Ok(())
    }

    /// Adds what every entry gained since the last read to `collector`.
    fn read(
        &mut self,
        sampler: &mut RecordProgram,
        collector: &mut Collector,
    ) -> Result<(), BpfError> {
        // The sums first: the kernel adds to a key's sums only after counting the sample
        // under it, so every key listed here is in the counts listed next (with its command).
        let sums = match self.counters {
            Some(_) => sampler.aggregated_counters()?,
            None => Vec::new(),
        };
        for (key, value) in sampler.aggregated()? {
            let now = Weight {
                value: value.events,
                samples: value.count,
            };
            let before = self
                .seen
                .insert(key, (now, value.comm))
                .map_or(Weight::default(), |(n, _)| n);
            let delta = Weight {
                value: now.value.saturating_sub(before.value),
                samples: now.samples.saturating_sub(before.samples),
            };
            if delta.samples == 0 {
                continue;
            }
            let (kernel, user) = self.stacks_of(sampler, &key)?;
            collector.add_counted(
                key.request,
                &counted(&key, value.comm, &kernel, &user),
                delta,
            );
        }
        for (key, now) in sums {
            let Some(c) = self.counters.as_mut() else {
                break;
            };
            let before = c.seen.insert(key, now).unwrap_or([0; MAX_COUNTERS]);
            let mut deltas = [0u64; MAX_COUNTERS];
            for k in 0..MAX_COUNTERS {
                // Sums only grow; wrapping keeps the totals exact even if one did not.
                deltas[k] = now[k].wrapping_sub(before[k]);
                c.attributed[k] = c.attributed[k].wrapping_add(deltas[k]);
            }
            if deltas == [0; MAX_COUNTERS] {
                continue;
            }
            let first = c.first_event;
            let comm = self.seen.get(&key).map_or([0; 16], |&(_, comm)| comm);
            let (kernel, user) = self.stacks_of(sampler, &key)?;
            collector.add_counter_weights(first, &counted(&key, comm, &kernel, &user), &deltas);
        }
        Ok(())
    }

    /// The kernel and user stacks of `key` (empty where it has none).
    fn stacks_of(
        &mut self,
        sampler: &mut RecordProgram,
        key: &AggregateKey,
    ) -> Result<(Vec<u64>, Vec<u64>), BpfError> {
        Ok((
            self.stack(sampler, key.kernel_stack)?,
            self.stack(sampler, key.user_stack)?,
        ))
    }

    fn stack(&mut self, sampler: &mut RecordProgram, id: i32) -> Result<Vec<u64>, BpfError> {
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

fn counted<'a>(
    key: &AggregateKey,
    comm: [u8; 16],
    kernel: &'a [u64],
    user: &'a [u64],
) -> CountedStack<'a> {
    CountedStack {
        pid: key.pid,
        cgroup: key.cgroup_id,
        comm,
        kernel,
        user,
        missing: (key.kernel_stack == stack_id::COLLISION || key.user_stack == stack_id::COLLISION)
            .then_some("[stack hash collision]"),
    }
}
