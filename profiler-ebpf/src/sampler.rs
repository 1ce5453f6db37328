//! The perf_event overflow handler: filter by target in the kernel, then capture one record
//! (ids, time, IP, user and kernel stacks) into the ring buffer, counting every drop.

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, pt_regs,
    },
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_task_btf, bpf_get_smp_processor_id, bpf_get_stack, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_user, bpf_task_pt_regs,
    },
    macros::{map, perf_event},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::PerfEventContext,
};
use profiler_common::{
    DEFAULT_RING_BYTES, MAX_STACK_DEPTH, MAX_TARGET_TGIDS, SampleRecord, SamplerConfig, capture,
    filter, record_flags, stat,
};

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

#[map]
static TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGET_TGIDS, 0);

#[map]
static CONFIG: Array<SamplerConfig> = Array::with_max_entries(1, 0);

#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Returns 0 always: the sample is fully handled here, so perf itself must not write it to a
/// perf buffer nor send a signal (Linux 6.10+ also keeps IOC_REFRESH budgets untouched).
#[perf_event]
pub fn sample(ctx: PerfEventContext) -> u32 {
    on_sample(&ctx);
    0
}

#[inline(always)]
fn bump(slot: u32) {
    if let Some(counter) = STATS.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot, and perf_event programs do not nest on one CPU.
        unsafe { *counter += 1 };
    }
}

#[inline(always)]
fn on_sample(ctx: &PerfEventContext) {
    let Some(config) = CONFIG.get(0) else {
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    // SAFETY: a plain map lookup; the value is only tested for presence.
    if config.filter & filter::TGID != 0 && unsafe { TGIDS.get(tgid) }.is_none() {
        bump(stat::FILTERED);
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<SampleRecord>(0) else {
        bump(stat::LOST);
        return;
    };
    let rec = entry.as_mut_ptr();
    let data = ctx.ctx;
    // SAFETY: `rec` points at a reserved, exclusively owned ring-buffer slot of the right size;
    // fields are written in place (the record is far larger than the 512-byte BPF stack), and
    // `data` is the program's context, which the verifier lets us read.
    unsafe {
        (*rec).time_ns = bpf_ktime_get_ns();
        (*rec).cgroup_id = bpf_get_current_cgroup_id();
        (*rec).ip = (*data).regs.rip;
        (*rec).period = (*data).sample_period;
        (*rec).pid = tgid;
        (*rec).tid = tid;
        (*rec).cpu = bpf_get_smp_processor_id();
        (*rec).request = 0;
        (*rec).flags = 0;
        (*rec)._pad0 = 0;
        (*rec).leaf_ret = 0;
        // Keep the word at the user stack pointer: user space uses it to recover the caller
        // of a function without a frame-pointer prologue (see symbolize::leaf).
        if let Some(sp) = user_sp(ctx)
            && let Ok(word) = bpf_probe_read_user(sp as *const u64)
        {
            (*rec).leaf_ret = word;
            (*rec).flags = record_flags::LEAF_RET;
        }
        (*rec).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        (*rec).kernel_frames = 0;
        (*rec).user_frames = 0;
        const STACK_BYTES: u32 = (MAX_STACK_DEPTH * 8) as u32;
        if config.capture & capture::KERNEL_STACK != 0 {
            let n = bpf_get_stack(
                ctx.as_ptr(),
                (*rec).kernel_stack.as_mut_ptr().cast(),
                STACK_BYTES,
                0,
            );
            if n >= 0 {
                (*rec).kernel_frames = (n as u32) / 8;
            } else {
                bump(stat::STACK_ERRORS);
            }
        }
        if config.capture & capture::USER_STACK != 0 {
            let n = bpf_get_stack(
                ctx.as_ptr(),
                (*rec).user_stack.as_mut_ptr().cast(),
                STACK_BYTES,
                BPF_F_USER_STACK as u64,
            );
            if n >= 0 {
                (*rec).user_frames = (n as u32) / 8;
            } else {
                bump(stat::STACK_ERRORS);
            }
        }
    }
    // Batch wake-ups: only wake the reader once enough is pending; it also polls on a timer.
    let pending = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let wake = if pending + SampleRecord::SIZE as u64 >= config.wakeup_bytes {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(wake as u64);
    bump(stat::SUBMITTED);
}

/// The user stack pointer of the sampled task: from the sample's registers when it was
/// taken in user mode (CPL 3), else from the user registers saved on kernel entry.
#[inline(always)]
fn user_sp(ctx: &PerfEventContext) -> Option<u64> {
    // SAFETY: the context is readable; the saved user registers are read with
    // bpf_probe_read_kernel, which tolerates any pointer.
    unsafe {
        let regs = &(*ctx.ctx).regs;
        if regs.cs & 3 == 3 {
            return Some(regs.rsp);
        }
        let user_regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs;
        if user_regs.is_null() {
            return None;
        }
        let cs = bpf_probe_read_kernel(core::ptr::addr_of!((*user_regs).cs)).ok()?;
        if cs & 3 != 3 {
            return None; // a kernel thread: no user context
        }
        bpf_probe_read_kernel(core::ptr::addr_of!((*user_regs).rsp)).ok()
    }
}
