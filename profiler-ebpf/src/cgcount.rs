//! Per-cgroup counting with one set of per-CPU counters shared by every cgroup (the design of
//! perf's `--bpf-counters --for-each-cgroup`): at each context switch on a CPU, what each
//! counter advanced since the last switch there is added to the cgroup of the task being
//! switched out. User space forces a switch on every CPU before reading, so the running
//! task's share is attributed too.

use aya_ebpf::{
    bindings::BPF_F_CURRENT_CPU,
    helpers::bpf_get_current_cgroup_id,
    macros::{map, raw_tracepoint},
    maps::{Array, PerCpuArray, PerCpuHashMap},
    programs::RawTracePointContext,
};
use profiler_common::{CgroupCounts, MAX_CGROUP_EVENTS, MAX_COUNTED_CGROUPS, cg_stat};

use crate::sampler::read_counter;

/// The number of events in use (the first N of `SIB*`).
#[map]
static CG_CONFIG: Array<u32> = Array::with_max_entries(1, 0);
shared_name!(map CG_CONFIG);

/// Counter values at the last switch, per CPU and event.
#[map]
static CG_PREV: PerCpuArray<u64> = PerCpuArray::with_max_entries(MAX_CGROUP_EVENTS as u32, 0);
shared_name!(map CG_PREV);

/// Totals per cgroup id, per CPU (summed by user space; no atomics needed).
#[map]
static CG_COUNTS: PerCpuHashMap<u64, CgroupCounts> =
    PerCpuHashMap::with_max_entries(MAX_COUNTED_CGROUPS, 0);
shared_name!(map CG_COUNTS);

#[map]
static CG_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(cg_stat::COUNT, 0);
shared_name!(map CG_STATS);

// Event k of CPU c is at SIBk[c]: the sampler's per-request perf event arrays, unused by
// the sampler in the object instance that per-cgroup counting loads (each load has its own
// maps).

#[inline(always)]
fn bump(slot: u32) {
    if let Some(counter) = CG_STATS.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot; a raw tracepoint does not nest with itself on one CPU.
        unsafe { *counter += 1 };
    }
}

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn cg_switch(_ctx: RawTracePointContext) -> i32 {
    account();
    0
}

#[inline(always)]
fn account() {
    let Some(&n) = CG_CONFIG.get(0) else {
        return;
    };
    let mut deltas = CgroupCounts::default();
    let mut any = false;
    for k in 0..MAX_CGROUP_EVENTS {
        if k >= n as usize {
            break;
        }
        let Some(counter) = read_counter(k, BPF_F_CURRENT_CPU) else {
            bump(cg_stat::READ_ERRORS);
            continue;
        };
        let Some(prev) = CG_PREV.get_ptr_mut(k as u32) else {
            continue;
        };
        // SAFETY: this CPU's slot of a per-CPU array.
        unsafe {
            deltas.values[k] = counter.wrapping_sub(*prev);
            *prev = counter;
        }
        any |= deltas.values[k] != 0;
    }
    if !any {
        return;
    }
    bump(cg_stat::SWITCHES);
    // The task being switched out is still `current` here.
    // SAFETY: the helper only reads the current task's cgroup id.
    let cgroup = unsafe { bpf_get_current_cgroup_id() };
    match CG_COUNTS.get_ptr_mut(cgroup) {
        Some(totals) => {
            for k in 0..MAX_CGROUP_EVENTS {
                // SAFETY: this CPU's copy of the cgroup's totals.
                unsafe { (*totals).values[k] += deltas.values[k] };
            }
        }
        None => {
            // A new entry: this CPU's copy gets the deltas, the other CPUs' copies zeros.
            if CG_COUNTS.insert(cgroup, deltas, 0).is_err() {
                bump(cg_stat::DROPPED);
            }
        }
    }
}
