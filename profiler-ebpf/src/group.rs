//! Counter groups for `record`: the group's counters are per-CPU events in `SIB0..SIB7`
//! (at each CPU's index). At every context switch, and at every sample, what each counter
//! advanced on this CPU since the last such moment is added to the current task's values in
//! `GROUP_TASKS` (when it is a target), so one task's events never land on another's.
//! A sample's record carries the sampled thread's values; user space takes the difference
//! from the previous sample of the same thread.

use aya_ebpf::{
    bindings::{BPF_F_CURRENT_CPU, bpf_perf_event_value},
    helpers::{bpf_get_current_pid_tgid, bpf_perf_event_read_value},
    macros::{map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::{RawTracePointContext, TracePointContext},
};
use profiler_common::{
    AGGREGATE_ENTRIES, AggregateKey,
    group::{
        AFTER_EXIT, AGGREGATE_FULL, GroupConfig, GroupCpu, GroupTail, GroupValues, LOST_SLOTS,
        MAX_COUNTERS, MAX_TASKS, READ_ERRORS, UPDATES, scale,
    },
    record_flags,
};

use crate::sampler::{CONFIG, sibling_map, targeted};

#[map]
pub(crate) static GROUP_CONFIG: Array<GroupConfig> = Array::with_max_entries(1, 0);
shared_name!(map GROUP_CONFIG);

/// Each counter's reading at the last accounting on this CPU, and scratch space.
#[map]
static GROUP_CPU: PerCpuArray<GroupCpu> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map GROUP_CPU);

/// Each target thread's values so far (a thread runs on one CPU at a time, but the idle
/// tasks of all CPUs share tid 0, so values are added atomically).
#[map]
pub(crate) static GROUP_TASKS: HashMap<u32, GroupValues> = HashMap::with_max_entries(MAX_TASKS, 0);
shared_name!(map GROUP_TASKS);

/// Events of targets `GROUP_TASKS` had no room for, per counter; read errors; updates.
#[map]
static GROUP_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(LOST_SLOTS, 0);
shared_name!(map GROUP_LOST);

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn group_switch(_ctx: RawTracePointContext) -> i32 {
    // The task being switched out is still `current` here.
    let pid_tgid = bpf_get_current_pid_tgid();
    account(pid_tgid, true);
    0
}

/// Target threads past `sched_process_exit`: their counting has ended, as a per-task
/// counter's does there. A fork clears its child's tid (a tid is reused only after its
/// thread is gone); LRU, so a full map forgets the longest-dead threads first.
#[map]
static GROUP_EXITED: LruHashMap<u32, u8> = LruHashMap::with_max_entries(MAX_TASKS, 0);
shared_name!(map GROUP_EXITED);

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn group_exit(_ctx: RawTracePointContext) -> i32 {
    // The exiting task is `current`: what it counted up to here is its last.
    let pid_tgid = bpf_get_current_pid_tgid();
    if account(pid_tgid, false).is_some() {
        let _ = GROUP_EXITED.insert(pid_tgid as u32, 1, 0);
    }
    0
}

#[tracepoint]
pub fn group_fork(ctx: TracePointContext) -> u32 {
    let Some(config) = GROUP_CONFIG.get(0) else {
        return 0;
    };
    // SAFETY: reads 4 bytes of the tracepoint record at the offset tracefs gave user space.
    if let Ok(child) = unsafe { ctx.read_at::<i32>(config.fork_child_offset as usize) } {
        let _ = GROUP_EXITED.remove(child as u32);
    }
    0
}

#[inline(always)]
fn add_lost(slot: u32, n: u64) {
    if let Some(counter) = GROUP_LOST.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot; the accounting does not nest on one CPU.
        unsafe { *counter += n };
    }
}

/// What each counter advanced on this CPU since the last accounting here (scaled when
/// multiplexed), into `cpu.deltas`; moves the baselines on. `switching`: at a context
/// switch, counters that count the switch itself get it now. Unused slots fail to read and
/// count 0. Everything is in map memory (see `GroupCpu`).
///
/// # Safety
/// `cpu` is this CPU's `GROUP_CPU` slot.
#[inline(always)]
unsafe fn advance(config: &GroupConfig, cpu: *mut GroupCpu, switching: bool) {
    let at_switch = if switching {
        config.counted_at_switch
    } else {
        0
    };
    for k in 0..MAX_COUNTERS {
        // SAFETY: the map pointer is one of our PERF_EVENT_ARRAYs; the helper writes one
        // bpf_perf_event_value (CounterBase has its layout) into this CPU's slot; the
        // slot's fields are plain integers.
        unsafe {
            let rc = bpf_perf_event_read_value(
                sibling_map(k),
                BPF_F_CURRENT_CPU,
                (&raw mut (*cpu).read).cast::<bpf_perf_event_value>(),
                core::mem::size_of::<bpf_perf_event_value>() as u32,
            );
            if rc != 0 {
                (*cpu).deltas[k] = 0;
                if (k as u32) < config.counters {
                    add_lost(READ_ERRORS, 1);
                }
                continue;
            }
            let v = (*cpu).read;
            let base = &mut (*cpu).base[k];
            let extra = u64::from((at_switch >> k) & 1);
            (*cpu).deltas[k] = scale(
                v.counter.wrapping_sub(base.counter),
                v.enabled.wrapping_sub(base.enabled),
                v.running.wrapping_sub(base.running),
            ) + extra;
            base.counter = v.counter + extra;
            base.enabled = v.enabled;
            base.running = v.running;
        }
    }
}

/// Adds what the counters advanced to the current task (if it is a target); returns its
/// values, or `None` when it has no entry (not a target, the map full, no group).
#[inline(always)]
pub(crate) fn account(pid_tgid: u64, switching: bool) -> Option<*mut GroupValues> {
    let config = GROUP_CONFIG.get(0)?;
    if config.counters == 0 {
        return None;
    }
    let cpu = GROUP_CPU.get_ptr_mut(0)?;
    // SAFETY: this CPU's slot (the accounting does not nest on one CPU).
    unsafe { advance(config, cpu, switching) };
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    let sampler = CONFIG.get(0)?;
    if !targeted(sampler, tgid, tid) {
        return None;
    }
    // SAFETY: a plain map lookup, only tested for presence.
    if config.exits != 0 && unsafe { GROUP_EXITED.get(tid) }.is_some() {
        for k in 0..MAX_COUNTERS {
            // SAFETY: as above.
            add_lost(AFTER_EXIT + k as u32, unsafe { (*cpu).deltas[k] });
        }
        return None;
    }
    add_lost(UPDATES, 1);
    if GROUP_TASKS.get_ptr_mut(tid).is_none() {
        let zero = GroupValues {
            values: [0; MAX_COUNTERS],
        };
        // BPF_NOEXIST: if it appeared meanwhile (the idle tasks), add to that entry.
        let _ = GROUP_TASKS.insert(tid, zero, 1);
    }
    let Some(values) = GROUP_TASKS.get_ptr_mut(tid) else {
        for k in 0..MAX_COUNTERS {
            // SAFETY: as above.
            add_lost(k as u32, unsafe { (*cpu).deltas[k] });
        }
        return None;
    };
    use core::intrinsics::{AtomicOrdering, atomic_xadd};
    for k in 0..MAX_COUNTERS {
        // SAFETY: a live map value, added to atomically (see GROUP_TASKS); `cpu` as above.
        unsafe {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                &raw mut (*values).values[k],
                (*cpu).deltas[k],
            )
        };
    }
    Some(values)
}

/// The group's words of this CPU's next record.
#[map]
pub(crate) static GROUP_TAIL: PerCpuArray<GroupTail> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map GROUP_TAIL);

/// At a sample: accounts the counters to the sampled thread and prepares the record's group
/// words in `GROUP_TAIL` (none without a group; a count of 0 when the thread has no entry).
/// Called before the stacks are walked and returning nothing, so the verifier checks the
/// walk once whatever happened here.
#[inline(always)]
pub(crate) fn prepare_tail(pid_tgid: u64) {
    let Some(tail) = GROUP_TAIL.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of a per-CPU array (perf_event programs do not nest).
    unsafe {
        (*tail).words = 0;
        (*tail).flags = 0;
    }
    let Some(config) = GROUP_CONFIG.get(0) else {
        return;
    };
    if config.counters == 0 {
        return;
    }
    let n = (config.counters as usize).min(MAX_COUNTERS);
    let values = account(pid_tgid, false);
    // SAFETY: as above; `values` is a live map value.
    unsafe {
        match values {
            Some(v) => {
                (*tail).data[0] = n as u64;
                for k in 0..MAX_COUNTERS {
                    (*tail).data[1 + k] = (*v).values[k];
                }
                (*tail).words = 1 + n as u64;
            }
            None => {
                (*tail).data[0] = 0;
                (*tail).words = 1;
            }
        }
        (*tail).flags = u64::from(record_flags::GROUP_VALUES);
    }
}

/// A record without group words: what the in-kernel aggregation sends to the ring (the
/// thread's counter increases stay with it, for its next aggregated sample).
#[inline(always)]
pub(crate) fn no_tail() {
    if let Some(tail) = GROUP_TAIL.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a per-CPU array (perf_event programs do not nest).
        unsafe {
            (*tail).words = 0;
            (*tail).flags = 0;
        }
    }
}

// `record --aggregate` with a group (both maps are sized only then):

/// Each sampled thread's `GROUP_TASKS` values at its last sample.
#[map]
static GROUP_SAMPLED: HashMap<u32, GroupValues> = HashMap::with_max_entries(MAX_TASKS, 0);
shared_name!(map GROUP_SAMPLED);

/// Each counter's increases summed per aggregation key (the keys of `AGGREGATE`).
#[map]
static AGGREGATE_GROUP: HashMap<AggregateKey, GroupValues> =
    HashMap::with_max_entries(AGGREGATE_ENTRIES, 0);
shared_name!(map AGGREGATE_GROUP);

/// The entry of `key` in `map`, inserted as zeros if it has none (`None`: the map is full).
#[inline(always)]
fn entry<K>(map: &HashMap<K, GroupValues>, key: &K) -> Option<*mut GroupValues> {
    if let Some(v) = map.get_ptr_mut(key) {
        return Some(v);
    }
    let zero = GroupValues {
        values: [0; MAX_COUNTERS],
    };
    // BPF_NOEXIST: if another CPU inserted it meanwhile, that entry is used.
    let _ = map.insert(key, zero, 1);
    map.get_ptr_mut(key)
}

/// Adds what each counter of the sampled thread (whose `GROUP_TASKS` values are `values`)
/// advanced since its last counted sample to `key`'s sums. Called only once the sample is
/// counted under `key`; when either map has no room the increases stay with the thread
/// (counted in `AGGREGATE_FULL`).
#[inline(always)]
pub(crate) fn aggregate_values(pid_tgid: u64, values: *mut GroupValues, key: &AggregateKey) {
    let tid = pid_tgid as u32;
    let (Some(sampled), Some(sums)) = (entry(&GROUP_SAMPLED, &tid), entry(&AGGREGATE_GROUP, key))
    else {
        add_lost(AGGREGATE_FULL, 1);
        return;
    };
    use core::intrinsics::{AtomicOrdering, atomic_xadd};
    for k in 0..MAX_COUNTERS {
        // SAFETY: live map values. Sums are shared by CPUs, and the idle tasks of all CPUs
        // share tid 0, so both adds are atomic; `sampled` moves on by exactly what was added
        // to the sums, so the sums over all keys equal the threads' `GROUP_SAMPLED` values.
        unsafe {
            let d = (*values).values[k].wrapping_sub((*sampled).values[k]);
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*sums).values[k], d);
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*sampled).values[k], d);
        }
    }
}
