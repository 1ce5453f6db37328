//! `record`'s program: sampling (with unwind tables or frame pointers) into its ring or the
//! in-kernel aggregation, the target filters and following forks. Its counter groups, off-CPU
//! time and unwind maps are in `group.rs`, `offcpu.rs` and `unwind.rs`.

use std::os::fd::BorrowedFd;

use profiler_common::{
    AGGREGATE_ENTRIES, AGGREGATE_STACKS, AggregateKey, AggregateValue, DEFAULT_RING_BYTES,
    NO_GROUP_DEAD, RequestConfig, SamplerConfig, UserStack, capture, group,
    names::{maps as map, programs},
    offcpu::{PENDING_ENTRIES, TOTALS_ENTRIES},
    unwind::DEFAULT_UNWIND_ROWS,
};

use super::{
    BpfError, SamplerStats,
    maps::{self, map_err},
    object::{Loaded, MapSizes},
    ring::Records,
};
use crate::{
    kernel::{self, Kernel},
    perf::PerfEvent,
};

/// How to load the record program: what it captures and how big its maps are.
#[derive(Clone, Copy, Debug)]
pub struct RecordConfig {
    /// The program's configuration; its `capture` bits also size the maps (unwind rows with
    /// `UNWIND_TABLES`, aggregation with `AGGREGATE`, off-CPU maps with `OFF_CPU`).
    pub sampler: SamplerConfig,
    /// Bytes of the ring the samples are written to.
    pub ring_bytes: u32,
    /// Rows (8 bytes each) of the unwind row array, when walking with unwind tables.
    pub unwind_rows: u32,
    /// A counter group reads counters into the samples ([`RecordProgram::start_group`]): its
    /// per-thread maps at full size.
    pub group: bool,
    /// Links are made through this seam.
    pub kernel: &'static dyn Kernel,
}

impl Default for RecordConfig {
    fn default() -> Self {
        Self {
            sampler: SamplerConfig::default(),
            ring_bytes: DEFAULT_RING_BYTES,
            unwind_rows: DEFAULT_UNWIND_ROWS,
            group: false,
            kernel: kernel::linux(),
        }
    }
}

impl RecordConfig {
    /// The program this configuration loads: with unwind tables, or frame pointers only.
    fn program(&self) -> &'static str {
        if self.tables() {
            programs::RECORD_SAMPLE
        } else {
            programs::RECORD_FP
        }
    }

    fn tables(&self) -> bool {
        self.sampler.capture & capture::UNWIND_TABLES != 0
    }

    /// The maps this configuration uses at size; the others stay minimal. The big ones cost
    /// kernel memory (unwind rows 32 MiB, aggregation ~20 MiB and 16 MiB more for its
    /// table-walked user stacks, off-CPU ~26 MiB at full size).
    fn sizes(&self) -> MapSizes {
        let capture = self.sampler.capture;
        let aggregate = capture & capture::AGGREGATE != 0;
        let group_tasks = if self.group { group::MAX_TASKS } else { 1 };
        let mut sizes = MapSizes {
            record_events: self.ring_bytes,
            group_tasks,
            ..MapSizes::default()
        };
        if self.tables() {
            sizes.unwind_rows = self.unwind_rows.max(1);
        }
        if aggregate {
            sizes.aggregate = AGGREGATE_ENTRIES;
            sizes.stack_traces = AGGREGATE_STACKS;
            // Table-walked user stacks (about 1 KiB each, preallocated: 16 MiB).
            if self.tables() {
                sizes.user_stacks = AGGREGATE_STACKS;
            }
            // The aggregation's counter group maps only with a group too.
            if self.group {
                sizes.aggregate_group = AGGREGATE_ENTRIES;
                sizes.group_sampled = group_tasks;
            }
        }
        if capture & capture::OFF_CPU != 0 {
            sizes.offcpu_pending = PENDING_ENTRIES;
            sizes.offcpu_totals = TOTALS_ENTRIES;
        }
        sizes
    }
}

/// The loaded record program and everything attached to it. Dropping it detaches and closes
/// everything and unloads programs and maps.
pub struct RecordProgram {
    pub(super) loaded: Loaded,
}

impl RecordProgram {
    /// Loads the object for `record` as `config` says.
    pub fn load(config: RecordConfig) -> Result<Self, BpfError> {
        // The off-CPU program is verified beside the sampling one, not after it.
        let off_cpu = config.sampler.capture & capture::OFF_CPU != 0;
        let with = match off_cpu {
            true => vec![super::offcpu::off_cpu_program(config.program())],
            false => Vec::new(),
        };
        let loaded = Loaded::load(
            config.kernel,
            config.sizes(),
            config.program(),
            map::RECORD_EVENTS,
            config.sampler,
            &with,
        )?;
        Ok(Self { loaded })
    }

    /// The name of the perf_event program loaded ([`programs::RECORD_SAMPLE`] or
    /// [`programs::RECORD_FP`]).
    pub fn program_name(&self) -> &'static str {
        self.loaded.program_name()
    }

    /// Whether the loaded program walks with unwind tables.
    pub fn walks_with_tables(&self) -> bool {
        self.program_name() == programs::RECORD_SAMPLE
    }

    pub fn add_tgid(&mut self, tgid: u32) -> Result<(), BpfError> {
        self.loaded.add_tgid(tgid)
    }

    pub fn add_tid(&mut self, tid: u32) -> Result<(), BpfError> {
        self.loaded.add_tid(tid)
    }

    pub fn add_cgroup(&mut self, id: u64) -> Result<(), BpfError> {
        self.loaded.add_cgroup(id)
    }

    /// Says what the program does with samples of events attached with `cookie`.
    pub fn set_request(&mut self, cookie: u64, config: RequestConfig) -> Result<(), BpfError> {
        self.loaded.set_request(cookie, config)
    }

    /// Runs the program on every overflow of `event` (cookie `cookie`) and keeps `event`.
    pub fn attach(&mut self, event: PerfEvent, cookie: u64) -> Result<(), BpfError> {
        self.loaded.attach(event, cookie)
    }

    /// Puts the event of request `index` for context `context` where the programs read it.
    pub fn set_sibling(
        &mut self,
        index: usize,
        context: u32,
        event: BorrowedFd<'_>,
    ) -> Result<(), BpfError> {
        self.loaded.set_sibling(index, context, event)
    }

    /// The attached (and kept) events, to enable or disable them.
    pub fn events(&self) -> &[PerfEvent] {
        self.loaded.events()
    }

    /// Closes every perf event: no new samples arrive after this returns.
    pub fn detach_all(&mut self) {
        self.loaded.detach_all();
    }

    /// Takes the ring buffer for reading (once).
    pub fn take_records(&mut self) -> Result<Records, BpfError> {
        self.loaded.take_records()
    }

    /// How many times the kernel ran the sampling program (needs BPF run-time stats).
    pub fn run_count(&self) -> Result<u64, BpfError> {
        self.loaded.run_count()
    }

    /// Sums the per-CPU counters.
    pub fn stats(&self) -> Result<SamplerStats, BpfError> {
        self.loaded.stats()
    }

    /// Makes children of target processes targets too, and takes exited tasks out of the
    /// filter: loads the fork and exit tracepoint programs and attaches them to
    /// `sched:sched_process_fork` (whose `child_pid` is at `child_offset`) and
    /// `sched:sched_process_exit` (whose `group_dead` is at `group_dead_offset`, if any).
    pub fn follow_forks(
        &mut self,
        child_offset: u32,
        group_dead_offset: Option<u32>,
    ) -> Result<(), BpfError> {
        let ebpf = self.loaded.ebpf_mut();
        let mut config: SamplerConfig = maps::config(ebpf, map::CONFIG)?;
        config.follow_forks = 1;
        config.fork_child_offset = child_offset;
        config.exit_group_dead_offset = group_dead_offset.unwrap_or(NO_GROUP_DEAD);
        maps::set_config(ebpf, map::CONFIG, config)?;
        // Exit first: a task must never join the filter without a way out of it.
        self.loaded
            .attach_tracepoint(programs::ON_EXIT, "sched", "sched_process_exit")?;
        self.loaded
            .attach_tracepoint(programs::ON_FORK, "sched", "sched_process_fork")
    }

    /// Every entry of the in-kernel aggregation map (`capture::AGGREGATE`), as it is now.
    pub fn aggregated(&self) -> Result<Vec<(AggregateKey, AggregateValue)>, BpfError> {
        // An entry can vanish between listing and reading only if removed; we never remove.
        maps::entries(self.loaded.ebpf(), map::AGGREGATE)
    }

    /// Every entry of the aggregation's counter sums (`record --aggregate` with a group): each
    /// counter's increases per aggregation key, as they are now.
    pub fn aggregated_counters(
        &self,
    ) -> Result<Vec<(AggregateKey, [u64; group::MAX_COUNTERS])>, BpfError> {
        let sums = maps::entries::<AggregateKey, group::GroupValues>(
            self.loaded.ebpf(),
            map::AGGREGATE_GROUP,
        )?;
        Ok(sums.into_iter().map(|(key, v)| (key, v.values)).collect())
    }

    /// The frames (innermost first) of the table-walked user stack the aggregation keeps
    /// under `hash` (`AggregateKey::user_hash`); `None` if there is none.
    pub fn user_stack(&self, hash: u64) -> Result<Option<Vec<u64>>, BpfError> {
        let name = map::USER_STACKS;
        match maps::hash_map::<u64, UserStack>(self.loaded.ebpf(), name)?.get(&hash, 0) {
            Ok(stack) => Ok(Some(stack.frames().to_vec())),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err(name)(e)),
        }
    }

    /// The frames (innermost first) of stack `id` of the aggregation's stack-trace map.
    pub fn stack_trace(&self, id: u32) -> Result<Vec<u64>, BpfError> {
        let name = map::STACK_TRACES;
        let map = self
            .loaded
            .ebpf()
            .map(name)
            .ok_or(BpfError::Missing(name))?;
        let traces = aya::maps::StackTraceMap::try_from(map).map_err(map_err(name))?;
        let trace = traces.get(&id, 0).map_err(map_err(name))?;
        Ok(trace.frames().iter().map(|f| f.ip).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(capture: u32, group: bool) -> RecordConfig {
        RecordConfig {
            sampler: SamplerConfig {
                capture,
                ..Default::default()
            },
            ring_bytes: 1 << 20,
            unwind_rows: 1000,
            group,
            ..Default::default()
        }
    }

    #[test]
    fn frame_pointers_alone_size_only_the_ring() {
        let c = config(capture::USER_STACK, false);
        assert_eq!(c.program(), programs::RECORD_FP);
        assert_eq!(
            c.sizes(),
            MapSizes {
                record_events: 1 << 20,
                ..MapSizes::default()
            }
        );
    }

    #[test]
    fn each_capture_bit_and_the_group_size_their_own_maps() {
        let c = config(
            capture::UNWIND_TABLES | capture::AGGREGATE | capture::OFF_CPU,
            true,
        );
        assert_eq!(c.program(), programs::RECORD_SAMPLE);
        assert_eq!(
            c.sizes(),
            MapSizes {
                events: 4096,
                record_events: 1 << 20,
                unwind_rows: 1000,
                aggregate: AGGREGATE_ENTRIES,
                stack_traces: AGGREGATE_STACKS,
                user_stacks: AGGREGATE_STACKS,
                group_tasks: group::MAX_TASKS,
                aggregate_group: AGGREGATE_ENTRIES,
                group_sampled: group::MAX_TASKS,
                offcpu_pending: PENDING_ENTRIES,
                offcpu_totals: TOTALS_ENTRIES,
                cg_counts: 1,
            }
        );
        // Aggregation without a group leaves the group's aggregation maps minimal; a group
        // without aggregation sizes only the per-thread map.
        let aggregate = config(capture::AGGREGATE, false).sizes();
        assert_eq!((aggregate.aggregate_group, aggregate.group_sampled), (1, 1));
        // Aggregation with frame pointers keeps no table-walked user stacks.
        assert_eq!(aggregate.user_stacks, 1);
        let group = config(0, true).sizes();
        assert_eq!(
            (group.group_tasks, group.aggregate_group, group.aggregate),
            (group::MAX_TASKS, 1, 1)
        );
    }
}
