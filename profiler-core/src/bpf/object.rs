//! What the record program and libcpc's overflow program share: the embedded object loaded
//! with its maps sized, the perf_event program attached to events, the events and links held,
//! the target filters, the ring the program writes and its counters. Each program's type
//! ([`super::RecordProgram`], [`super::OverflowProgram`]) wraps one [`Loaded`].

use std::os::fd::{AsFd, BorrowedFd};

use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, RingBuf},
    programs::{PerfEvent as PerfEventProgram, Program, RawTracePoint, TracePoint},
};
use profiler_common::{
    RequestConfig, SamplerConfig,
    names::{globals, maps as map},
    stat,
    unwind::fence_entries,
};

use super::{
    BpfError, KernelFeatures,
    attach::Attachments,
    maps::{self, Counters},
    ring::Records,
};
use crate::{kernel::Kernel, perf::PerfEvent};

/// The eBPF object built from `profiler-ebpf` by `build.rs` (empty under `AYA_BUILD_SKIP=1`).
pub(super) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// The size of a ring no program of the load writes (the smallest the kernel takes).
pub(super) const UNUSED_RING_BYTES: u32 = 4096;

/// The sizes (max entries; bytes for rings) of the maps that cost memory at their built-in
/// size. Every program loads the whole object, so each says how big the maps it does not
/// use are too: [`MapSizes::default`] makes them all minimal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MapSizes {
    pub events: u32,
    pub record_events: u32,
    pub unwind_rows: u32,
    pub aggregate: u32,
    pub stack_traces: u32,
    pub user_stacks: u32,
    pub group_tasks: u32,
    pub aggregate_group: u32,
    pub group_sampled: u32,
    pub offcpu_pending: u32,
    pub offcpu_totals: u32,
    pub cg_counts: u32,
}

impl Default for MapSizes {
    fn default() -> Self {
        Self {
            events: UNUSED_RING_BYTES,
            record_events: UNUSED_RING_BYTES,
            unwind_rows: 1,
            aggregate: 1,
            stack_traces: 1,
            user_stacks: 1,
            group_tasks: 1,
            aggregate_group: 1,
            group_sampled: 1,
            offcpu_pending: 1,
            offcpu_totals: 1,
            cg_counts: 1,
        }
    }
}

impl MapSizes {
    fn apply(&self, loader: &mut EbpfLoader<'_>) {
        loader
            .map_max_entries(map::EVENTS, self.events)
            .map_max_entries(map::RECORD_EVENTS, self.record_events)
            .map_max_entries(map::UNWIND_ROWS, self.unwind_rows)
            .map_max_entries(map::UNWIND_FENCES, fence_entries(self.unwind_rows))
            .map_max_entries(map::AGGREGATE, self.aggregate)
            .map_max_entries(map::STACK_TRACES, self.stack_traces)
            .map_max_entries(map::USER_STACKS, self.user_stacks)
            .map_max_entries(map::CG_COUNTS, self.cg_counts)
            .map_max_entries(map::GROUP_TASKS, self.group_tasks)
            .map_max_entries(map::AGGREGATE_GROUP, self.aggregate_group)
            .map_max_entries(map::GROUP_SAMPLED, self.group_sampled)
            .map_max_entries(map::OFFCPU_PENDING, self.offcpu_pending)
            .map_max_entries(map::OFFCPU_TOTALS, self.offcpu_totals);
    }
}

/// Totals of the per-CPU counters the program keeps; every sample it saw is in exactly one of
/// `submitted`, `aggregated`, `lost`, `filtered`, `idle` or `unconfigured` ([`Self::runs`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerStats {
    pub submitted: u64,
    pub lost: u64,
    pub filtered: u64,
    pub stack_errors: u64,
    pub unconfigured: u64,
    /// Samples counted in the in-kernel aggregation map.
    pub aggregated: u64,
    /// Stacks that lost their stack-map slot to another with the same hash (or found the
    /// user stack map full).
    pub collisions: u64,
    /// Children of targets that could not join the in-kernel filter (it was full).
    pub follow_failed: u64,
    /// Samples of the idle task the run did not want (`filter::NO_IDLE`).
    pub idle: u64,
}

impl SamplerStats {
    /// Every run of the program: each overflow the kernel handed it.
    pub fn runs(&self) -> u64 {
        self.submitted + self.aggregated + self.lost + self.filtered + self.idle + self.unconfigured
    }
}

/// The loaded object, its perf_event program and everything attached to it. Dropping it
/// detaches the links, closes the perf events and unloads programs and maps.
pub(super) struct Loaded {
    // Declared first: links detach before the events and the program they join close.
    attached: Attachments,
    ebpf: Ebpf,
    /// The perf_event program attached, and the ring it writes.
    program: &'static str,
    ring: &'static str,
}

impl Loaded {
    /// Loads the object with `sizes`, loads its perf_event program `program` (which writes
    /// `ring`) and, at the same time, its tracepoint programs `with`, and writes `config`;
    /// links are made through `kernel`.
    pub fn load(
        kernel: &'static dyn Kernel,
        sizes: MapSizes,
        program: &'static str,
        ring: &'static str,
        config: SamplerConfig,
        with: &[&'static str],
    ) -> Result<Self, BpfError> {
        let mut ebpf = load_object(sizes)?;
        load_together(&mut ebpf, program, with)?;
        maps::set_config(&mut ebpf, map::CONFIG, config)?;
        Ok(Self {
            attached: Attachments::new(kernel),
            ebpf,
            program,
            ring,
        })
    }

    /// The name of the perf_event program loaded.
    pub fn program_name(&self) -> &'static str {
        self.program
    }

    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Adds a process to the in-kernel tgid filter (`filter::TGID`).
    pub fn add_tgid(&mut self, tgid: u32) -> Result<(), BpfError> {
        maps::insert(&mut self.ebpf, map::TGIDS, tgid, 1u8)
    }

    /// Adds a thread to the in-kernel filter (`filter::TID`).
    pub fn add_tid(&mut self, tid: u32) -> Result<(), BpfError> {
        maps::insert(&mut self.ebpf, map::TIDS, tid, 1u8)
    }

    /// Adds a cgroup (v2 id, the directory's inode number) to the filter (`filter::CGROUP`).
    pub fn add_cgroup(&mut self, id: u64) -> Result<(), BpfError> {
        maps::insert(&mut self.ebpf, map::CGROUPS, id, 1u8)
    }

    /// Says what the program does at overflows of events attached with `cookie`.
    pub fn set_request(&mut self, cookie: u64, config: RequestConfig) -> Result<(), BpfError> {
        maps::insert(&mut self.ebpf, map::REQUESTS, cookie, config)
    }

    /// Runs the program on every overflow of `event` (cookie `cookie`) and keeps `event`.
    pub fn attach(&mut self, event: PerfEvent, cookie: u64) -> Result<(), BpfError> {
        let prog = perf_program(&self.ebpf, self.program)?.fd()?;
        self.attached.attach(prog.as_fd(), event, cookie)
    }

    /// Runs the program on every overflow of an event someone else owns; the link holds the
    /// event open.
    pub fn link(&mut self, event: BorrowedFd<'_>, cookie: u64) -> Result<(), BpfError> {
        let prog = perf_program(&self.ebpf, self.program)?.fd()?;
        self.attached.link(prog.as_fd(), event, cookie)
    }

    /// Puts the event of request `index` (below `MAX_SIBLINGS`) for context `context` where
    /// the programs can read its value.
    pub fn set_sibling(
        &mut self,
        index: usize,
        context: u32,
        event: BorrowedFd<'_>,
    ) -> Result<(), BpfError> {
        let name = *map::SIBLINGS
            .get(index)
            .ok_or(BpfError::Missing("sibling array for that request"))?;
        let array = maps::perf_event_array(&self.ebpf, name)?;
        self.attached.set_array(array, context, event)
    }

    /// Keeps `event` open (and in [`Loaded::events`]) without the program attached.
    pub fn keep(&mut self, event: PerfEvent) {
        self.attached.keep(event);
    }

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
        let ring: RingBuf<MapData> =
            RingBuf::try_from(map).map_err(maps::map_err("ring buffer"))?;
        Ok(Records::new(ring))
    }

    /// How many times the kernel ran the perf_event program (needs BPF run-time stats).
    pub fn run_count(&self) -> Result<u64, BpfError> {
        Ok(perf_program(&self.ebpf, self.program)?.info()?.run_count())
    }

    /// Sums the per-CPU counters.
    pub fn stats(&self) -> Result<SamplerStats, BpfError> {
        let stats = Counters::open(&self.ebpf, map::STATS)?;
        Ok(SamplerStats {
            submitted: stats.sum(stat::SUBMITTED)?,
            lost: stats.sum(stat::LOST)?,
            filtered: stats.sum(stat::FILTERED)?,
            stack_errors: stats.sum(stat::STACK_ERRORS)?,
            unconfigured: stats.sum(stat::UNCONFIGURED)?,
            aggregated: stats.sum(stat::AGGREGATED)?,
            collisions: stats.sum(stat::COLLISIONS)?,
            follow_failed: stats.sum(stat::FOLLOW_FAILED)?,
            idle: stats.sum(stat::IDLE)?,
        })
    }

    /// Loads tracepoint program `name` (unless it is already) and attaches it to
    /// `category:event`; the link belongs
    /// to the program, which this value owns: detached on drop.
    pub fn attach_tracepoint(
        &mut self,
        name: &'static str,
        category: &str,
        event: &str,
    ) -> Result<(), BpfError> {
        let program = self.ebpf.program_mut(name).ok_or(BpfError::Missing(name))?;
        load_tracepoint(name, program)?;
        let program: &mut TracePoint = program.try_into()?;
        program.attach(category, event)?;
        Ok(())
    }

    /// Loads raw tracepoint program `name` and attaches it to `event` (detached on drop).
    pub fn attach_raw_tracepoint(
        &mut self,
        name: &'static str,
        event: &str,
    ) -> Result<(), BpfError> {
        let program: &mut RawTracePoint = self
            .ebpf
            .program_mut(name)
            .ok_or(BpfError::Missing(name))?
            .try_into()?;
        let t0 = std::time::Instant::now();
        program.load()?;
        say_verified(name, t0, || program.info());
        program.attach(event)?;
        Ok(())
    }
}

/// With `PROFILER_DEBUG_VERIFIER` set, one stderr line per program loaded: its name, how
/// long the kernel took to load it (the verifier, mostly) and the instructions it verified
/// (the kernel matrix's `load` check reports them per kernel).
pub(super) fn say_verified(
    name: &str,
    t0: std::time::Instant,
    info: impl FnOnce() -> Result<aya::programs::ProgramInfo, aya::programs::ProgramError>,
) {
    if std::env::var_os("PROFILER_DEBUG_VERIFIER").is_none() {
        return;
    }
    let took = t0.elapsed();
    let insns = info().ok().and_then(|i| i.verified_instruction_count());
    match insns {
        Some(n) => eprintln!("verifier: {name} {:.2} s {n} insns", took.as_secs_f64()),
        None => eprintln!("verifier: {name} {:.2} s", took.as_secs_f64()),
    }
}

/// Loads the object (every program and map; no program is loaded into the kernel yet) with
/// the maps sized as `sizes` says.
pub(super) fn load_object(sizes: MapSizes) -> Result<Ebpf, BpfError> {
    if OBJECT.is_empty() {
        return Err(BpfError::Stub);
    }
    raise_memlock_rlimit();
    // The helpers this kernel has: the verifier drops the branches of the others.
    let features = KernelFeatures::get().ebpf_bits();
    let mut loader = EbpfLoader::new();
    // The kernel's BTF that new() parsed (18 MiB) goes before the load, not after: the
    // programs have no CO-RE relocations to apply (a test checks).
    loader.btf(None);
    sizes.apply(&mut loader);
    Ok(loader
        .override_global(globals::KERNEL_FEATURES, &features, true)
        .load(OBJECT)?)
}

/// Loads perf_event program `program` and tracepoint programs `with`, each verified on a
/// thread of its own: the verifier is most of `record`'s start (seconds under emulation,
/// docs/kernels.md), and a privileged load runs beside another (no global verifier lock
/// since 5.3). Every load is waited for; the first error is returned.
fn load_together(ebpf: &mut Ebpf, program: &str, with: &[&'static str]) -> Result<(), BpfError> {
    let mut perf = None;
    let mut others = Vec::new();
    for (name, p) in ebpf.programs_mut() {
        if name == program {
            perf = Some(p);
        } else if let Some(name) = with.iter().find(|w| **w == name) {
            others.push((*name, p));
        }
    }
    let perf: &mut PerfEventProgram = perf
        .ok_or(BpfError::Missing("the perf_event program"))?
        .try_into()?;
    std::thread::scope(|scope| {
        let loads: Vec<_> = others
            .into_iter()
            .map(|(name, p)| scope.spawn(move || load_tracepoint(name, p)))
            .collect();
        let t0 = std::time::Instant::now();
        let mut result = perf.load().map_err(BpfError::from);
        say_verified(program, t0, || perf.info());
        for load in loads {
            let other = load.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            result = result.and(other);
        }
        result
    })
}

/// Loads tracepoint program `name` (unless it is already), saying how long it took.
pub(super) fn load_tracepoint(name: &str, program: &mut Program) -> Result<(), BpfError> {
    let tp: &mut TracePoint = program.try_into()?;
    if tp.fd().is_ok() {
        return Ok(());
    }
    let t0 = std::time::Instant::now();
    tp.load()?;
    say_verified(name, t0, || tp.info());
    Ok(())
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
    use profiler_common::names;

    /// The object, parsed; `None` (and the test skipped) in a build without it.
    fn parsed() -> Option<aya_obj::Object> {
        if super::OBJECT.is_empty() {
            eprintln!("skipped: built without the eBPF object (AYA_BUILD_SKIP)");
            return None;
        }
        Some(aya_obj::Object::parse(super::OBJECT).expect("the eBPF object parses"))
    }

    /// The loader drops the kernel's BTF before loading (`.btf(None)`): right only while no
    /// program asks for CO-RE relocations.
    #[test]
    fn the_programs_need_no_kernel_btf() {
        let Some(object) = parsed() else { return };
        assert!(
            !object.has_btf_relocations(),
            "a program uses CO-RE relocations: load with the kernel's BTF again"
        );
    }

    /// The names in `of_object` without a constant, and the constants `of_object` lacks.
    fn differences<'a>(
        of_object: impl Iterator<Item = &'a String>,
        shared: &[&str],
    ) -> (Vec<String>, Vec<String>) {
        let of_object: std::collections::BTreeSet<&str> = of_object.map(String::as_str).collect();
        let shared: std::collections::BTreeSet<&str> = shared.iter().copied().collect();
        let owned = |set: std::collections::btree_set::Difference<'_, &str>| {
            set.map(|n| n.to_string()).collect::<Vec<_>>()
        };
        (
            owned(of_object.difference(&shared)),
            owned(shared.difference(&of_object)),
        )
    }

    /// The eBPF crate spells map and program names as identifiers (its attributes take
    /// literals only), user space as `profiler_common::names`: both lists must be the same.
    #[test]
    fn every_map_and_program_of_the_object_has_its_shared_name() {
        let Some(object) = parsed() else { return };
        // Sections the compiler adds for read-only data and globals are maps too, unnamed
        // by us.
        let maps = object.maps.keys().filter(|n| !n.starts_with('.'));
        assert_eq!(
            differences(maps, names::maps::ALL),
            (vec![], vec![]),
            "(maps without a constant, constants naming no map)"
        );
        assert_eq!(
            differences(object.programs.keys(), names::programs::ALL),
            (vec![], vec![]),
            "(programs without a constant, constants naming no program)"
        );
        for all in [names::maps::ALL, names::programs::ALL] {
            let distinct: std::collections::BTreeSet<_> = all.iter().collect();
            assert_eq!(distinct.len(), all.len(), "a name listed twice: {all:?}");
        }
    }
}
