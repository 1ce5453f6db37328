//! Reading the in-kernel aggregation map (`record --aggregate`): samples and the events they
//! stand for (the sum of their periods) per (process, event, stacks, cgroup), turned into
//! per-interval deltas for the collector. User stacks are walked with unwind tables where
//! the kernel runs the walker (kept once each in `USER_STACKS`, by hash); a sample whose
//! process has no tables in the kernel yet comes through the ring as in ring mode. Entries are never deleted while recording (a
//! delete would race with the kernel's increments and lose counts), so each read reports
//! what grew since the last one. With a counter group, the
//! kernel also sums each counter's per-thread increases per key (`AGGREGATE_GROUP`): their
//! growth goes to the same stacks, as the counters' events.

use std::collections::HashMap;

use profiler_common::{AggregateKey, group::MAX_COUNTERS, stack_id};

use super::{
    CallGraph, Collector, Mode, RecordError, RecordOptions, Warn, Warning,
    collect::{CountedStack, Weight},
    feature::{self, Feature, Kernel, Shared},
};
use crate::{
    bpf::{BpfError, RecordProgram},
    profile::RunInfo,
};

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
        let mut reader = AggregateReader::new(first_counter);
        reader.frame_pointers = frame_pointers(s.opts, s.sampler.walks_with_tables());
        if let Some(w) = &reader.frame_pointers {
            s.warnings.warn(w.clone());
        }
        Ok(Some(Box::new(reader)))
    },
};

/// What the run says when user stacks are aggregated as frame pointers give them (once at
/// the start, again with the summary), or `None` when they are walked with unwind tables.
fn frame_pointers(opts: &RecordOptions, tables: bool) -> Option<Warning> {
    if tables || !opts.stacks || opts.mode == Mode::Kernel {
        return None;
    }
    const WHAT: &str = "--aggregate walks user stacks with frame pointers";
    const SO: &str = "code built without them loses its callers";
    Some(match opts.call_graph {
        CallGraph::FramePointer => Warning::note(format!("{WHAT} (--call-graph fp): {SO}")),
        CallGraph::Dwarf if !crate::bpf::KernelFeatures::get().bpf_loop() => Warning::new(format!(
            "{WHAT}: this kernel ({}) has no bpf_loop (Linux 5.17) for the unwind-table \
                 walker; {SO}",
            crate::bpf::kernel_release()
        )),
        CallGraph::Dwarf => Warning::new(format!(
            "{WHAT}: the kernel refused the unwind-table walker; {SO}"
        )),
    })
}

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

    /// At the end, the frame-pointer note again, beside the summary.
    fn info(
        &mut self,
        _sampler: &mut RecordProgram,
        _info: &mut RunInfo,
        _shared: &Shared,
        last: bool,
        warnings: &mut dyn Warn,
    ) -> Result<(), RecordError> {
        if last && let Some(w) = &self.frame_pointers {
            warnings.warn(w.clone());
        }
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct AggregateReader {
    /// Samples and events as of the last read, and each key's command.
    seen: HashMap<AggregateKey, (Weight, [u8; 16])>,
    /// Stacks by id; a stack-map slot is never overwritten without BPF_F_REUSE_STACKID.
    stacks: HashMap<i32, Vec<u64>>,
    /// Table-walked user stacks by hash (the kernel never changes an entry).
    user_stacks: HashMap<u64, Vec<u64>>,
    /// Said at the start and the end when user stacks are walked with frame pointers.
    frame_pointers: Option<Warning>,
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
        let user = match key.user_stack {
            stack_id::HASHED => self.user_stack(sampler, key.user_hash)?,
            id => self.stack(sampler, id)?,
        };
        Ok((self.stack(sampler, key.kernel_stack)?, user))
    }

    fn user_stack(&mut self, sampler: &mut RecordProgram, hash: u64) -> Result<Vec<u64>, BpfError> {
        if let Some(s) = self.user_stacks.get(&hash) {
            return Ok(s.clone());
        }
        // Kept before the key that names it was counted: always there.
        let frames = sampler.user_stack(hash)?.unwrap_or_default();
        self.user_stacks.insert(hash, frames.clone());
        Ok(frames)
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
        missing: missing(key),
    }
}

/// Why `key` has no stack: one of its stacks lost its slot.
fn missing(key: &AggregateKey) -> Option<&'static str> {
    let lost = |id: i32| key.kernel_stack == id || key.user_stack == id;
    if lost(stack_id::COLLISION) {
        Some("[stack hash collision]")
    } else if lost(stack_id::FULL) {
        Some("[stack map full]")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_that_lost_its_slot_is_named_why() {
        let key = |kernel_stack, user_stack| AggregateKey {
            kernel_stack,
            user_stack,
            ..Default::default()
        };
        assert_eq!(missing(&key(3, stack_id::HASHED)), None);
        assert_eq!(missing(&key(stack_id::NONE, 7)), None);
        assert_eq!(
            missing(&key(3, stack_id::COLLISION)),
            Some("[stack hash collision]")
        );
        assert_eq!(
            missing(&key(stack_id::COLLISION, stack_id::HASHED)),
            Some("[stack hash collision]")
        );
        assert_eq!(missing(&key(3, stack_id::FULL)), Some("[stack map full]"));
    }

    #[test]
    fn frame_pointers_are_said_only_when_user_stacks_are_walked_with_them() {
        let opts = RecordOptions {
            aggregate: true,
            ..RecordOptions::new(crate::record::Target::SystemWide)
        };
        assert_eq!(frame_pointers(&opts, true), None);
        let kernel_only = RecordOptions {
            mode: Mode::Kernel,
            ..opts.clone()
        };
        assert_eq!(frame_pointers(&kernel_only, false), None);
        let fp = RecordOptions {
            call_graph: CallGraph::FramePointer,
            ..opts
        };
        assert_eq!(
            frame_pointers(&fp, false).map(|w| w.to_string()),
            Some(
                "profiler: --aggregate walks user stacks with frame pointers (--call-graph fp): \
                 code built without them loses its callers"
                    .into()
            )
        );
    }
}
