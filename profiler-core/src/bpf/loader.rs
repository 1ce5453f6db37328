//! The sampler: the embedded eBPF object, its maps, and the perf events it is attached to.

use std::os::fd::{AsFd, BorrowedFd};

use aya::{
    Ebpf, EbpfError, EbpfLoader,
    maps::{Array, HashMap, MapData, MapError, PerCpuArray, RingBuf, StackTraceMap},
    programs::{PerfEvent as PerfEventProgram, ProgramError},
};
use profiler_common::{
    AGGREGATE_ENTRIES, AGGREGATE_STACKS, AggregateKey, AggregateValue, MAX_SIBLINGS, NO_GROUP_DEAD,
    RequestConfig, SamplerConfig, capture, group, stat, unwind::DEFAULT_UNWIND_ROWS,
};

use super::{KernelFeatures, attach::Attachments, ring::Records};
use crate::{
    kernel::{self, Kernel},
    perf::{PerfError, PerfEvent},
};

/// The eBPF object built from `profiler-ebpf` by `build.rs` (empty under `AYA_BUILD_SKIP=1`).
pub(super) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// The libcpc overflow program and its ring.
const PROGRAM: &str = "sample";
const RING: &str = "EVENTS";
/// `record`'s sampling programs (with unwind tables, and frame pointers only) and their ring
/// (`Sampler::load_record`).
const RECORD_PROGRAM: &str = "record_sample";
const RECORD_FP_PROGRAM: &str = "record_fp";
const RECORD_RING: &str = "RECORD_EVENTS";
/// The counter group's `sched_switch` hook (`Sampler::start_group`).
const GROUP_PROGRAM: &str = "group_switch";
/// The size of the ring a sampler does not use (the smallest the kernel takes).
const UNUSED_RING_BYTES: u32 = 4096;

/// The per-request perf event arrays (`SIB0`..`SIB7`): the values of a set's other requests
/// for the sampler, the counters for per-cgroup counting.
pub(super) const SIBLING_MAPS: [&str; MAX_SIBLINGS] = [
    "SIB0", "SIB1", "SIB2", "SIB3", "SIB4", "SIB5", "SIB6", "SIB7",
];

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "this binary was built without its eBPF object (AYA_BUILD_SKIP=1); rebuild after \
         `cargo xtask setup`"
    )]
    Stub,
    #[error("loading the eBPF object: {0}")]
    Load(#[from] EbpfError),
    #[error("eBPF program: {0}")]
    Program(#[from] ProgramError),
    #[error("eBPF map `{name}`: {source}")]
    Map {
        name: &'static str,
        source: MapError,
    },
    #[error("eBPF object has no {0}")]
    Missing(&'static str),
    #[error("attaching the eBPF program: {0}")]
    Attach(#[from] PerfError),
    #[error("the eBPF ring buffer: {0}")]
    Ring(std::io::Error),
    #[error("bpf(BPF_LINK_CREATE) for a perf event: {0}")]
    Link(std::io::Error),
    #[error("bpf(BPF_MAP_UPDATE_ELEM) of a perf event array: {0}")]
    Sibling(std::io::Error),
    #[error("ioctl(PERF_EVENT_IOC_SET_BPF): {0}")]
    SetBpf(std::io::Error),
    #[error(
        "{what} needs BPF attach cookies (bpf_get_attach_cookie, Linux 5.15 or newer); \
         this kernel ({release}) has none"
    )]
    NoAttachCookies { what: &'static str, release: String },
}

fn map_err(name: &'static str) -> impl FnOnce(MapError) -> BpfError {
    move |source| BpfError::Map { name, source }
}

/// Totals of the per-CPU counters the program keeps; every sample it saw is in exactly one of
/// `submitted`, `aggregated`, `lost` or `filtered`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerStats {
    pub submitted: u64,
    pub lost: u64,
    pub filtered: u64,
    pub stack_errors: u64,
    pub unconfigured: u64,
    /// Samples counted in the in-kernel aggregation map.
    pub aggregated: u64,
    /// Stacks that lost their stack-map slot to another with the same hash.
    pub collisions: u64,
    /// Children of targets that could not join the in-kernel filter (it was full).
    pub follow_failed: u64,
}

/// What a counter group's program counted ([`Sampler::group_values`]).
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

/// The loaded sampling program and everything attached to it. Dropping it closes the perf
/// events (which detaches the program from them) and unloads program and maps.
pub struct Sampler {
    // Declared first: links detach before the events and the program they join close.
    attached: Attachments,
    ebpf: Ebpf,
    /// The perf_event program attached, and the ring it writes.
    program: &'static str,
    ring: &'static str,
}

impl Sampler {
    /// Loads the object with a ring buffer of `ring_bytes` and the given configuration, for
    /// libcpc overflow records ([`profiler_common::SampleRecord`]).
    pub fn load(config: SamplerConfig, ring_bytes: u32) -> Result<Self, BpfError> {
        Self::load_in(kernel::linux(), config, ring_bytes)
    }

    /// [`Sampler::load`] with links made through the given seam (aya loads the object).
    pub fn load_in(
        kernel: &'static dyn Kernel,
        config: SamplerConfig,
        ring_bytes: u32,
    ) -> Result<Self, BpfError> {
        Self::load_program(kernel, config, ring_bytes, PROGRAM, RING, 1, 1)
    }

    /// As [`Sampler::load`], for `record`'s samples (`profiler_common::stack` records, or
    /// in-kernel aggregation).
    pub fn load_record(config: SamplerConfig, ring_bytes: u32) -> Result<Self, BpfError> {
        Self::load_record_sized(config, ring_bytes, DEFAULT_UNWIND_ROWS)
    }

    /// [`Sampler::load_record`] with a row array of `unwind_rows` rows (8 bytes each) when
    /// the configuration walks with unwind tables.
    pub fn load_record_sized(
        config: SamplerConfig,
        ring_bytes: u32,
        unwind_rows: u32,
    ) -> Result<Self, BpfError> {
        Self::load_record_group(config, ring_bytes, unwind_rows, false)
    }

    /// [`Sampler::load_record_sized`]; with `group`, its per-thread counter map at full size
    /// (see [`Sampler::start_group`]).
    pub fn load_record_group(
        config: SamplerConfig,
        ring_bytes: u32,
        unwind_rows: u32,
        group: bool,
    ) -> Result<Self, BpfError> {
        let tasks = if group { group::MAX_TASKS } else { 1 };
        let tables = config.capture & capture::UNWIND_TABLES != 0;
        let (program, rows) = if tables {
            (RECORD_PROGRAM, unwind_rows.max(1))
        } else {
            (RECORD_FP_PROGRAM, 1)
        };
        Self::load_program(
            kernel::linux(),
            config,
            ring_bytes,
            program,
            RECORD_RING,
            rows,
            tasks,
        )
    }

    fn load_program(
        kernel: &'static dyn Kernel,
        config: SamplerConfig,
        ring_bytes: u32,
        program_name: &'static str,
        ring: &'static str,
        unwind_rows: u32,
        group_tasks: u32,
    ) -> Result<Self, BpfError> {
        if OBJECT.is_empty() {
            return Err(BpfError::Stub);
        }
        raise_memlock_rlimit();
        // The aggregation maps cost ~20 MiB of kernel memory at full size: only when used;
        // their counter group maps only with a group too.
        let aggregate = config.capture & capture::AGGREGATE != 0;
        let (entries, stacks) = if aggregate {
            (AGGREGATE_ENTRIES, AGGREGATE_STACKS)
        } else {
            (1, 1)
        };
        let (group_sums, group_sampled) = if aggregate && group_tasks > 1 {
            (AGGREGATE_ENTRIES, group_tasks)
        } else {
            (1, 1)
        };
        // Unwind tables (32 MiB of rows at the default size) only when record walks with them:
        // `unwind_rows` is 1 otherwise.
        // The off-CPU pending and totals maps (~26 MiB at full size): only with
        // `record --off-cpu`.
        let (pending, totals) = if config.capture & capture::OFF_CPU != 0 {
            use profiler_common::offcpu::{PENDING_ENTRIES, TOTALS_ENTRIES};
            (PENDING_ENTRIES, TOTALS_ENTRIES)
        } else {
            (1, 1)
        };
        let (events, record_events) = if ring == RING {
            (ring_bytes, UNUSED_RING_BYTES)
        } else {
            (UNUSED_RING_BYTES, ring_bytes)
        };
        let mut ebpf = EbpfLoader::new()
            // The kernel's BTF that new() parsed (18 MiB) goes before the load, not after:
            // the programs have no CO-RE relocations to apply (a test checks).
            .btf(None)
            .map_max_entries(RING, events)
            .map_max_entries(RECORD_RING, record_events)
            .map_max_entries("UNWIND_ROWS", unwind_rows)
            .map_max_entries("AGGREGATE", entries)
            .map_max_entries("STACK_TRACES", stacks)
            .map_max_entries("CG_COUNTS", 1)
            .map_max_entries("GROUP_TASKS", group_tasks)
            .map_max_entries("AGGREGATE_GROUP", group_sums)
            .map_max_entries("GROUP_SAMPLED", group_sampled)
            .map_max_entries("OFFCPU_PENDING", pending)
            .map_max_entries("OFFCPU_TOTALS", totals)
            // The helpers this kernel has: the verifier drops the branches of the others.
            .override_global("KERNEL_FEATURES", &KernelFeatures::get().ebpf_bits(), true)
            .load(OBJECT)?;
        let program: &mut PerfEventProgram = ebpf
            .program_mut(program_name)
            .ok_or(BpfError::Missing("the perf_event program"))?
            .try_into()?;
        program.load()?;
        let mut sampler = Self {
            attached: Attachments::new(kernel),
            ebpf,
            program: program_name,
            ring,
        };
        let mut cfg: Array<_, SamplerConfig> =
            Array::try_from(sampler.map("CONFIG")?).map_err(map_err("CONFIG"))?;
        cfg.set(0, config, 0).map_err(map_err("CONFIG"))?;
        Ok(sampler)
    }

    /// The name of the perf_event program loaded.
    pub fn program_name(&self) -> &'static str {
        self.program
    }

    /// The loaded object, for the unwinder's maps (`super::unwind`).
    pub(super) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    fn map(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, BpfError> {
        self.ebpf.map_mut(name).ok_or(BpfError::Missing(name))
    }

    /// Adds a process to the in-kernel tgid filter.
    pub fn add_tgid(&mut self, tgid: u32) -> Result<(), BpfError> {
        let mut tgids: HashMap<_, u32, u8> =
            HashMap::try_from(self.map("TGIDS")?).map_err(map_err("TGIDS"))?;
        tgids.insert(tgid, 1, 0).map_err(map_err("TGIDS"))
    }

    /// Says what the program does at overflows of events attached with `cookie`.
    pub fn set_request(&mut self, cookie: u64, config: RequestConfig) -> Result<(), BpfError> {
        let mut requests: HashMap<_, u64, RequestConfig> =
            HashMap::try_from(self.map("REQUESTS")?).map_err(map_err("REQUESTS"))?;
        requests
            .insert(cookie, config, 0)
            .map_err(map_err("REQUESTS"))
    }

    /// Runs the program on every overflow of `event` (cookie `cookie`) and keeps `event`
    /// alive with the sampler.
    pub fn attach(&mut self, event: PerfEvent, cookie: u64) -> Result<(), BpfError> {
        let prog = perf_program(&self.ebpf, self.program)?.fd()?;
        self.attached.attach(prog.as_fd(), event, cookie)
    }

    /// Runs the program on every overflow of an event someone else owns. The link (kept by
    /// the sampler) holds the event open: drop the sampler with the event's owner.
    pub fn link(&mut self, event: BorrowedFd<'_>, cookie: u64) -> Result<(), BpfError> {
        let prog = perf_program(&self.ebpf, self.program)?.fd()?;
        self.attached.link(prog.as_fd(), event, cookie)
    }

    /// Puts the event of request `index` (below `MAX_SIBLINGS`) for context `context` (below
    /// the number of CPUs) where records can read its value.
    pub fn set_sibling(
        &mut self,
        index: usize,
        context: u32,
        event: BorrowedFd<'_>,
    ) -> Result<(), BpfError> {
        let name = *SIBLING_MAPS
            .get(index)
            .ok_or(BpfError::Missing("sibling array for that request"))?;
        let map = match self.ebpf.map(name) {
            Some(aya::maps::Map::PerfEventArray(data)) => data,
            _ => return Err(BpfError::Missing("sibling perf event array")),
        };
        self.attached.set_array(map.fd().as_fd(), context, event)
    }

    /// The attached events, to enable or disable them.
    pub fn events(&self) -> &[PerfEvent] {
        self.attached.events()
    }

    /// Closes every perf event: no new samples arrive after this returns.
    pub fn detach_all(&mut self) {
        self.attached.clear();
    }

    /// Takes the ring buffer for reading (once).
    pub fn take_records(&mut self) -> Result<Records, BpfError> {
        let map = self
            .ebpf
            .take_map(self.ring)
            .ok_or(BpfError::Missing("the ring buffer map"))?;
        let ring: RingBuf<MapData> = RingBuf::try_from(map).map_err(map_err("ring buffer"))?;
        Ok(Records::new(ring))
    }

    /// How many times the kernel ran the program (needs BPF run-time stats enabled, e.g.
    /// with `aya::sys::enable_stats`): an account of overflows independent of our counters.
    pub fn run_count(&self) -> Result<u64, BpfError> {
        let program = self
            .ebpf
            .program(self.program)
            .ok_or(BpfError::Missing("the perf_event program"))?;
        Ok(program.info()?.run_count())
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
        let mut cfg: Array<_, SamplerConfig> =
            Array::try_from(self.map("CONFIG")?).map_err(map_err("CONFIG"))?;
        let mut config = cfg.get(&0, 0).map_err(map_err("CONFIG"))?;
        config.follow_forks = 1;
        config.fork_child_offset = child_offset;
        config.exit_group_dead_offset = group_dead_offset.unwrap_or(NO_GROUP_DEAD);
        cfg.set(0, config, 0).map_err(map_err("CONFIG"))?;
        // Exit first: a task must never join the filter without a way out of it.
        for (name, tracepoint) in [
            ("on_exit", "sched_process_exit"),
            ("on_fork", "sched_process_fork"),
        ] {
            let program: &mut aya::programs::TracePoint = self
                .ebpf
                .program_mut(name)
                .ok_or(BpfError::Missing(name))?
                .try_into()?;
            program.load()?;
            // The link belongs to the program, which the sampler owns: detached on drop.
            program.attach("sched", tracepoint)?;
        }
        Ok(())
    }

    /// Adds a thread to the in-kernel filter (`filter::TID`).
    pub fn add_tid(&mut self, tid: u32) -> Result<(), BpfError> {
        let mut tids: HashMap<_, u32, u8> =
            HashMap::try_from(self.map("TIDS")?).map_err(map_err("TIDS"))?;
        tids.insert(tid, 1, 0).map_err(map_err("TIDS"))
    }

    /// Adds a cgroup (v2 id, the directory's inode number) to the filter (`filter::CGROUP`).
    pub fn add_cgroup(&mut self, id: u64) -> Result<(), BpfError> {
        let mut cgroups: HashMap<_, u64, u8> =
            HashMap::try_from(self.map("CGROUPS")?).map_err(map_err("CGROUPS"))?;
        cgroups.insert(id, 1, 0).map_err(map_err("CGROUPS"))
    }

    /// Reads `counters` (per-CPU counting events of CPU `cpu`, in order) into the records of
    /// `record`'s samples, per thread: loads the `sched_switch` hook that moves each CPU's
    /// counter deltas to the task switched out, and keeps the events (enabled with the
    /// others). Call once, with every CPU's counters, before enabling.
    pub fn start_group(
        &mut self,
        counters: Vec<(u32, Vec<PerfEvent>)>,
        config: group::GroupConfig,
    ) -> Result<(), BpfError> {
        let mut cfg: Array<_, group::GroupConfig> =
            Array::try_from(self.map("GROUP_CONFIG")?).map_err(map_err("GROUP_CONFIG"))?;
        cfg.set(0, config, 0).map_err(map_err("GROUP_CONFIG"))?;
        for (cpu, events) in counters {
            for (k, event) in events.into_iter().enumerate() {
                self.set_sibling(k, cpu, event.as_fd())?;
                self.attached.keep(event);
            }
        }
        let program: &mut aya::programs::RawTracePoint = self
            .ebpf
            .program_mut(GROUP_PROGRAM)
            .ok_or(BpfError::Missing("program `group_switch`"))?
            .try_into()?;
        program.load()?;
        // The link belongs to the program, which the sampler owns: detached on drop.
        program.attach("sched_switch")?;
        if config.exits != 0 {
            // Fork first: a tid must never keep an exit mark its new thread did not earn.
            let fork: &mut aya::programs::TracePoint = self
                .ebpf
                .program_mut("group_fork")
                .ok_or(BpfError::Missing("program `group_fork`"))?
                .try_into()?;
            fork.load()?;
            fork.attach("sched", "sched_process_fork")?;
            let exit: &mut aya::programs::RawTracePoint = self
                .ebpf
                .program_mut("group_exit")
                .ok_or(BpfError::Missing("program `group_exit`"))?
                .try_into()?;
            exit.load()?;
            exit.attach("sched_process_exit")?;
        }
        Ok(())
    }

    /// Every thread's counter values so far (`start_group`), and per counter the events of
    /// targets the per-thread map had no room for, and the counter reads that failed.
    pub fn group_values(&mut self) -> Result<GroupTotals, BpfError> {
        let tasks: HashMap<_, u32, group::GroupValues> =
            HashMap::try_from(self.map("GROUP_TASKS")?).map_err(map_err("GROUP_TASKS"))?;
        let threads = tasks
            .iter()
            .map(|e| e.map(|(tid, v)| (tid, v.values)))
            .collect::<Result<_, _>>()
            .map_err(map_err("GROUP_TASKS"))?;
        let lost: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.map("GROUP_LOST")?).map_err(map_err("GROUP_LOST"))?;
        let slot = |i: u32| -> Result<u64, BpfError> {
            Ok(lost.get(&i, 0).map_err(map_err("GROUP_LOST"))?.iter().sum())
        };
        let mut untracked = [0u64; group::MAX_COUNTERS];
        let mut after_exit = [0u64; group::MAX_COUNTERS];
        for k in 0..group::MAX_COUNTERS {
            untracked[k] = slot(k as u32)?;
            after_exit[k] = slot(group::AFTER_EXIT + k as u32)?;
        }
        Ok(GroupTotals {
            threads,
            untracked,
            after_exit,
            read_errors: slot(group::READ_ERRORS)?,
            aggregate_full: slot(group::AGGREGATE_FULL)?,
        })
    }

    /// Sums the per-CPU counters.
    pub fn stats(&mut self) -> Result<SamplerStats, BpfError> {
        let stats: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.map("STATS")?).map_err(map_err("STATS"))?;
        let slot = |i: u32| -> Result<u64, BpfError> {
            Ok(stats.get(&i, 0).map_err(map_err("STATS"))?.iter().sum())
        };
        Ok(SamplerStats {
            submitted: slot(stat::SUBMITTED)?,
            lost: slot(stat::LOST)?,
            filtered: slot(stat::FILTERED)?,
            stack_errors: slot(stat::STACK_ERRORS)?,
            unconfigured: slot(stat::UNCONFIGURED)?,
            aggregated: slot(stat::AGGREGATED)?,
            collisions: slot(stat::COLLISIONS)?,
            follow_failed: slot(stat::FOLLOW_FAILED)?,
        })
    }

    /// Every entry of the in-kernel aggregation map (`capture::AGGREGATE`), as it is now.
    pub fn aggregated(&mut self) -> Result<Vec<(AggregateKey, AggregateValue)>, BpfError> {
        let map: HashMap<_, AggregateKey, AggregateValue> =
            HashMap::try_from(self.map("AGGREGATE")?).map_err(map_err("AGGREGATE"))?;
        // An entry can vanish between listing and reading only if removed; we never remove.
        map.iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("AGGREGATE"))
    }

    /// Every entry of the aggregation's counter sums (`record --aggregate` with a group): each
    /// counter's increases per aggregation key, as they are now.
    pub fn aggregated_counters(
        &mut self,
    ) -> Result<Vec<(AggregateKey, [u64; group::MAX_COUNTERS])>, BpfError> {
        let map: HashMap<_, AggregateKey, group::GroupValues> =
            HashMap::try_from(self.map("AGGREGATE_GROUP")?).map_err(map_err("AGGREGATE_GROUP"))?;
        map.iter()
            .map(|e| e.map(|(key, v)| (key, v.values)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_err("AGGREGATE_GROUP"))
    }

    /// The frames (innermost first) of stack `id` of the aggregation's stack-trace map.
    pub fn stack_trace(&mut self, id: u32) -> Result<Vec<u64>, BpfError> {
        let map: StackTraceMap<_> =
            StackTraceMap::try_from(self.map("STACK_TRACES")?).map_err(map_err("STACK_TRACES"))?;
        let trace = map.get(&id, 0).map_err(map_err("STACK_TRACES"))?;
        Ok(trace.frames().iter().map(|f| f.ip).collect())
    }
}

/// The loaded perf_event program called `name`.
fn perf_program<'a>(ebpf: &'a Ebpf, name: &str) -> Result<&'a PerfEventProgram, BpfError> {
    Ok(ebpf
        .program(name)
        .ok_or(BpfError::Missing("the perf_event program"))?
        .try_into()?)
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; lift it so they load there too.
fn raise_memlock_rlimit() {
    use nix::sys::resource::{Resource, setrlimit};
    let inf = nix::sys::resource::RLIM_INFINITY;
    // Failure is harmless on memcg-accounted kernels; loading reports the real error if any.
    let _ = setrlimit(Resource::RLIMIT_MEMLOCK, inf, inf);
}

#[cfg(test)]
mod tests {
    /// The loader drops the kernel's BTF before loading (`.btf(None)`): right only while no
    /// program asks for CO-RE relocations.
    #[test]
    fn the_programs_need_no_kernel_btf() {
        if super::OBJECT.is_empty() {
            eprintln!("skipped: built without the eBPF object (AYA_BUILD_SKIP)");
            return;
        }
        let object = aya_obj::Object::parse(super::OBJECT).expect("the eBPF object parses");
        assert!(
            !object.has_btf_relocations(),
            "a program uses CO-RE relocations: load with the kernel's BTF again"
        );
    }
}
