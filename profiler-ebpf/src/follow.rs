//! Following children: a process forked by a target process becomes a target too, in the
//! kernel, before it can run (sched:sched_process_fork fires in the parent during fork), and
//! leaves the filter when it exits (sched:sched_process_exit), so a run that forks without
//! end (`make -j`, a test runner) never fills the map. A child that finds the map full is
//! counted (`stat::FOLLOW_FAILED`), never dropped silently.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};
use profiler_common::{NO_GROUP_DEAD, stat};

use crate::sampler::{CONFIG, TGIDS, bump};

#[tracepoint]
pub fn on_fork(ctx: TracePointContext) -> u32 {
    let Some(config) = CONFIG.get(0) else {
        return 0;
    };
    if config.follow_forks == 0 {
        return 0;
    }
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: a plain map lookup; the value is only tested for presence.
    if unsafe { TGIDS.get(parent) }.is_none() {
        return 0;
    }
    // SAFETY: reads 4 bytes of the tracepoint record at the offset tracefs gave user space.
    let Ok(child) = (unsafe { ctx.read_at::<i32>(config.fork_child_offset as usize) }) else {
        return 0;
    };
    // A new thread fires this too (its tid is added as well): harmless, as a tid names no
    // other process while the thread lives, and it is removed when the thread exits.
    if TGIDS.insert(child as u32, 1, 0).is_err() {
        bump(stat::FOLLOW_FAILED);
    }
    0
}

/// Removes an exiting task from `TGIDS`: a thread's own entry (added at its creation) at
/// once, the process's entry when its last thread exits (`group_dead`; on kernels without
/// that field, when the main thread exits).
#[tracepoint]
pub fn on_exit(ctx: TracePointContext) -> u32 {
    let Some(config) = CONFIG.get(0) else {
        return 0;
    };
    if config.follow_forks == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    if tid != tgid {
        let _ = TGIDS.remove(tid);
    }
    let group_dead = if config.exit_group_dead_offset == NO_GROUP_DEAD {
        tid == tgid
    } else {
        // SAFETY: reads 1 byte of the tracepoint record at the offset tracefs gave.
        (unsafe { ctx.read_at::<u8>(config.exit_group_dead_offset as usize) }).is_ok_and(|b| b != 0)
    };
    if group_dead {
        let _ = TGIDS.remove(tgid);
    }
    0
}
