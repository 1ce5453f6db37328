//! Following children: a process forked by a target process becomes a target too, in the
//! kernel, before it can run (sched:sched_process_fork fires in the parent during fork).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};

use crate::sampler::{CONFIG, TGIDS};

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
    // other process while the thread lives.
    let _ = TGIDS.insert(child as u32, 1, 0);
    0
}
