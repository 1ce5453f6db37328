//! Per-cgroup counting: one counting perf event per CPU per event, shared by all cgroups,
//! and the `cg_switch` program on `sched_switch` that adds each CPU's counter deltas to the
//! cgroup of the task switched out (see profiler-ebpf's cgcount.rs). The number of perf
//! events is CPUs × events, whatever the number of cgroups.

use std::{
    collections::BTreeMap,
    os::fd::{AsFd, OwnedFd},
};

use aya::{Ebpf, maps::PerCpuHashMap, programs::RawTracePoint};
use profiler_common::{
    CgroupCounts, MAX_CGROUP_EVENTS, MAX_COUNTED_CGROUPS, cg_stat,
    names::{maps as map, programs},
};

use super::{
    BpfError,
    maps::{self, Counters, map_err},
    object::{MapSizes, load_object},
};
use crate::{
    kernel,
    perf::{EventAttr, PerfEvent, Scope},
};

/// Totals the program kept besides the counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupCountStats {
    pub switches: u64,
    /// Deltas lost because the per-cgroup map was full.
    pub dropped: u64,
    pub read_errors: u64,
}

pub struct CgroupCounter {
    // Declared first: the program detaches (with the object) before the events close.
    ebpf: Ebpf,
    events: Vec<PerfEvent>,
    cpus: Vec<u32>,
    nevents: usize,
}

impl CgroupCounter {
    /// Opens `events` (counting, as `Cpc::request_attrs` builds them) on each of `cpus`,
    /// attaches the program, then starts the counters.
    pub fn start(events: &[(EventAttr, String)], cpus: &[u32]) -> Result<Self, BpfError> {
        if events.is_empty() || events.len() > MAX_CGROUP_EVENTS {
            return Err(BpfError::Missing(
                "room for that many events (1 to 8 per-cgroup counters)",
            ));
        }
        // Only the counting maps are needed at size; the sampling programs' stay minimal.
        let mut ebpf = load_object(MapSizes {
            events: page_size(),
            cg_counts: MAX_COUNTED_CGROUPS,
            ..MapSizes::default()
        })?;
        maps::set_config(&mut ebpf, map::CG_CONFIG, events.len() as u32)?;
        let mut opened = Vec::with_capacity(events.len() * cpus.len());
        for (k, (attr, name)) in events.iter().enumerate() {
            let mut attr = *attr;
            attr.set_disabled(true)
                .set_inherit(false)
                .set_inherit_thread(false);
            let map_fd: OwnedFd = maps::perf_event_array(&ebpf, map::SIBLINGS[k])?
                .try_clone_to_owned()
                .map_err(BpfError::Sibling)?;
            for &cpu in cpus {
                let ev = PerfEvent::open(&attr, Scope::Cpu(cpu), None, || name.clone())?;
                kernel::linux()
                    .bpf_perf_event_array_set(map_fd.as_fd(), cpu, ev.as_fd())
                    .map_err(BpfError::Sibling)?;
                opened.push(ev);
            }
        }
        let program: &mut RawTracePoint = ebpf
            .program_mut(programs::CG_SWITCH)
            .ok_or(BpfError::Missing(programs::CG_SWITCH))?
            .try_into()?;
        let t0 = std::time::Instant::now();
        program.load()?;
        super::object::say_verified(programs::CG_SWITCH, t0, || program.info());
        // The link belongs to the program, which this value owns: detached on drop.
        program.attach("sched_switch")?;
        for ev in &opened {
            ev.enable(false)?;
        }
        Ok(Self {
            ebpf,
            events: opened,
            cpus: cpus.to_vec(),
            nevents: events.len(),
        })
    }

    /// Perf events this counter holds open (CPUs × events).
    pub fn perf_events(&self) -> usize {
        self.events.len()
    }

    /// Forces a context switch on every counted CPU, so the deltas of the tasks running
    /// there now are attributed before a read ([`switch_every_cpu`]).
    pub fn flush(&self) {
        switch_every_cpu(&self.cpus);
    }

    /// Totals per cgroup id so far (summed over CPUs), one value per event.
    pub fn read(&mut self) -> Result<BTreeMap<u64, Vec<u64>>, BpfError> {
        let name = map::CG_COUNTS;
        let map: PerCpuHashMap<_, u64, CgroupCounts> =
            PerCpuHashMap::try_from(self.ebpf.map(name).ok_or(BpfError::Missing(name))?)
                .map_err(map_err(name))?;
        let mut out = BTreeMap::new();
        for entry in map.iter() {
            let (cgroup, per_cpu) = entry.map_err(map_err(name))?;
            let mut sum = vec![0u64; self.nevents];
            for counts in per_cpu.iter() {
                for (k, v) in sum.iter_mut().enumerate() {
                    *v = v.wrapping_add(counts.values[k]);
                }
            }
            out.insert(cgroup, sum);
        }
        Ok(out)
    }

    pub fn stats(&mut self) -> Result<CgroupCountStats, BpfError> {
        let stats = Counters::open(&self.ebpf, map::CG_STATS)?;
        Ok(CgroupCountStats {
            switches: stats.sum(cg_stat::SWITCHES)?,
            dropped: stats.sum(cg_stat::DROPPED)?,
            read_errors: stats.sum(cg_stat::READ_ERRORS)?,
        })
    }
}

fn page_size() -> u32 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096) as u32
}

/// Forces a context switch on each of `cpus` (this thread visits each in turn), so that
/// `sched_switch` hooks account what the tasks running there now counted.
pub fn switch_every_cpu(cpus: &[u32]) {
    use nix::{sched::CpuSet, unistd::Pid};
    let me = Pid::from_raw(0);
    let Ok(saved) = nix::sched::sched_getaffinity(me) else {
        return;
    };
    for &cpu in cpus {
        let mut only = CpuSet::new();
        if only.set(cpu as usize).is_ok() && nix::sched::sched_setaffinity(me, &only).is_ok() {
            // Running here switched the previous task out; a short sleep switches this
            // thread out too, so even the CPU's idle time is accounted.
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    let _ = nix::sched::sched_setaffinity(me, &saved);
}
