//! Off-CPU time (`record --off-cpu`, see `profiler_common::offcpu`): on `sched:sched_switch`
//! the task leaving the CPU is still `current`, so its kernel and user stacks are walked as
//! `record`'s samples walk them (unwind tables or frame pointers; the user registers are
//! those saved on kernel entry) and kept in `OFFCPU_PENDING` under its tid with the time.
//! When the tid is switched back in, the kept record is written to `record`'s ring with the
//! nanoseconds it was away, unless that is below the configured minimum (counted).

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id, bpf_get_stack, bpf_ktime_get_ns, bpf_probe_read_kernel,
        generated,
    },
    macros::{map, tracepoint},
    maps::{Array, HashMap, PerCpuArray},
    programs::TracePointContext,
};
use profiler_common::{
    MAX_STACK_DEPTH, SamplerConfig, capture,
    offcpu::{
        FNV_OFFSET, FNV_PRIME, OFF_CPU, OFFCPU_FRAMES, OffCpuBuf, OffCpuConfig, PENDING_ENTRIES,
        RUNNABLE, STATE_BLOCKED, STATE_DEAD, TOTALS_ENTRIES, Total, TotalKey, stat,
    },
    record_flags,
    stack::{
        STACK_COPY_BYTES, STACK_COPY_HEAD_WORDS, STACK_HEADER_SIZE, StackCopyBuf, StackSampleBuf,
    },
};

use crate::{
    record::RECORD_EVENTS,
    regs,
    sampler::{CONFIG, targeted},
    unwind::{
        STACK_BYTES, Walked, copied_bytes, copy_allowed, copy_user_stack, saved_user_regs,
        user_frames, wake_reader, walk_user_from,
    },
};

#[map]
static OFFCPU_CONFIG: Array<OffCpuConfig> = Array::with_max_entries(1, 0);
shared_name!(map OFFCPU_CONFIG);

/// The record of each target thread now off the CPU, by tid (sized at load: 1 entry when
/// off-CPU time is not recorded).
#[map]
static OFFCPU_PENDING: HashMap<u32, OffCpuBuf> = HashMap::with_max_entries(PENDING_ENTRIES, 0);
shared_name!(map OFFCPU_PENDING);

/// The record being assembled on this CPU (too large for the BPF stack).
#[map]
static OFFCPU_BUF: PerCpuArray<OffCpuBuf> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map OFFCPU_BUF);

/// Time off the CPU per (thread, stack), read by user space (sized at load).
#[map]
static OFFCPU_TOTALS: HashMap<TotalKey, Total> = HashMap::with_max_entries(TOTALS_ENTRIES, 0);
shared_name!(map OFFCPU_TOTALS);

/// A new total being assembled on this CPU (too large for the BPF stack).
#[map]
static OFFCPU_TOTAL_BUF: PerCpuArray<Total> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map OFFCPU_TOTAL_BUF);

#[map]
static OFFCPU_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);
shared_name!(map OFFCPU_STATS);

/// A copy of the user stack of each thread switched out while its process had no unwind
/// tables (`record_flags::STACK_COPY` on its pending record), by tid: its wait's record
/// carries it, and user space walks it once the tables are loaded.
#[map]
static OFFCPU_COPIES: HashMap<u32, StackCopyBuf> =
    HashMap::with_max_entries(COPY_ENTRIES, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map OFFCPU_COPIES);

/// Threads with a copy kept at once (each 16 KiB, allocated when kept).
const COPY_ENTRIES: u32 = 1024;

/// A copy being made on this CPU.
#[map]
static OFFCPU_COPY_BUF: PerCpuArray<StackCopyBuf> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map OFFCPU_COPY_BUF);

/// A wait's record with its copy, assembled on this CPU at switch-in.
#[map]
static OFFCPU_OUT: PerCpuArray<StackSampleBuf> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map OFFCPU_OUT);

/// Adds one to counter `slot` of this CPU and returns its new value.
#[inline(always)]
fn bump(slot: u32) -> u64 {
    match OFFCPU_STATS.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot; tracepoint programs do not nest on one CPU.
        Some(counter) => unsafe {
            *counter += 1;
            *counter
        },
        None => 0,
    }
}

#[inline(always)]
fn add(slot: u32, n: u64) {
    if let Some(counter) = OFFCPU_STATS.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot; tracepoint programs do not nest on one CPU.
        unsafe { *counter += n };
    }
}

/// With unwind tables (needs `bpf_loop`, Linux 5.17, like `record_sample`).
#[tracepoint]
pub fn offcpu_switch(ctx: TracePointContext) -> u32 {
    on_switch::<true>(&ctx);
    0
}

/// Frame pointers only (the companion of `record_fp`).
#[tracepoint]
pub fn offcpu_switch_fp(ctx: TracePointContext) -> u32 {
    on_switch::<false>(&ctx);
    0
}

#[inline(always)]
fn on_switch<const TABLES: bool>(ctx: &TracePointContext) {
    let (Some(oc), Some(config)) = (OFFCPU_CONFIG.get(0), CONFIG.get(0)) else {
        return;
    };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: a field of the tracepoint record at the offset tracefs gave.
    let next = unsafe { ctx.read_at::<i32>(oc.next_pid_offset as usize) };
    if let Ok(next) = next
        && next > 0
    {
        switch_in(next as u32, now, oc, config);
    }
    // SAFETY: as above.
    let Ok(state) = (unsafe { ctx.read_at::<u64>(oc.prev_state_offset as usize) }) else {
        return;
    };
    switch_out::<TABLES>(ctx, oc, config, state, now);
}

/// `tid` is back on a CPU: writes its kept record with the time it was away.
#[inline(always)]
fn switch_in(tid: u32, now: u64, oc: &OffCpuConfig, config: &SamplerConfig) {
    let Some(buf) = OFFCPU_PENDING.get_ptr_mut(tid) else {
        return;
    };
    // Fault injection for the tests: every Nth return on a CPU is not looked at, as if the
    // kernel had not run the program for it.
    if oc.skip_returns != 0 && bump(stat::RETURNS).is_multiple_of(u64::from(oc.skip_returns)) {
        return;
    }
    // SAFETY: a live value of the pending map; only this tid's switches touch it, and a
    // thread is switched in on one CPU at a time.
    unsafe {
        let away = now.saturating_sub((*buf).header.time_ns);
        finish(tid, buf, away, oc, config, now);
    }
    forget(tid);
}

/// The current thread, leaving the CPU, still has a kept record `buf`: the kernel did not run
/// this program when the thread came back (some switches never reach the tracepoint; see
/// docs/off-cpu.md). The wait ended when the thread last got the CPU: `now` less the time
/// the scheduler says it has run since. Written to the ring (with its stack copy, if it has
/// one) as a wait that ended then, or dropped (counted) without the kernel's fields.
///
/// # Safety
/// `buf` is the live value of the pending map for the current thread.
#[inline(always)]
unsafe fn unseen_return(
    tid: u32,
    buf: *mut OffCpuBuf,
    oc: &OffCpuConfig,
    config: &SamplerConfig,
    now: u64,
) {
    // SAFETY: the caller's map value.
    let left = unsafe { (*buf).header.time_ns };
    let Some(ran) = ran_since_picked(oc).filter(|&ran| ran < now.saturating_sub(left)) else {
        add(stat::UNSEEN_DROPPED, 1);
        return;
    };
    let away = now - ran - left;
    if away < oc.min_block_ns {
        add(stat::SHORT, 1);
        add(stat::SHORT_NS, away);
        return;
    }
    // Through the ring, not the totals: rare, and a second inlined copy of the totals'
    // hashing would cost the verifier more than the rest of the program.
    // SAFETY: the caller's map value; the thread's stack copy is still its old wait's.
    let written = unsafe {
        if copied(buf) {
            with_copy(tid, buf, away, config, now)
        } else {
            to_ring(buf, away, config, now)
        }
    };
    add(
        if written {
            stat::UNSEEN_ENDED
        } else {
            stat::LOST
        },
        1,
    );
}

/// How long the current task has run since the scheduler last gave it the CPU
/// (`se.sum_exec_runtime - se.prev_sum_exec_runtime`, both brought up to date before
/// `sched_switch` fires); `None` where the offsets are unknown.
#[inline(always)]
fn ran_since_picked(oc: &OffCpuConfig) -> Option<u64> {
    if oc.task_runtime_offset == 0 || oc.task_prev_runtime_offset == 0 {
        return None;
    }
    // SAFETY: bpf_get_current_task has no preconditions; bpf_probe_read_kernel tolerates
    // any address.
    unsafe {
        let task = generated::bpf_get_current_task();
        let sum =
            bpf_probe_read_kernel((task + u64::from(oc.task_runtime_offset)) as *const u64).ok()?;
        let prev =
            bpf_probe_read_kernel((task + u64::from(oc.task_prev_runtime_offset)) as *const u64)
                .ok()?;
        sum.checked_sub(prev)
    }
}

/// Counts the wait of `tid` (its kept record `buf`, `away` ns; `now` paces the reader's
/// wake-ups): in the totals, or through the ring, or as too short.
///
/// # Safety
/// `buf` is a live value of the pending map.
#[inline(always)]
unsafe fn finish(
    tid: u32,
    buf: *mut OffCpuBuf,
    away: u64,
    oc: &OffCpuConfig,
    config: &SamplerConfig,
    now: u64,
) {
    // SAFETY: the caller's map value.
    unsafe {
        // A runtime's frames are named while the process lives: never summed in the totals.
        let runtime = (*buf).header.flags & record_flags::RUNTIME_FRAMES != 0;
        if away < oc.min_block_ns {
            add(stat::SHORT, 1);
            add(stat::SHORT_NS, away);
        } else if copied(buf) {
            // Its user stack is a copy to walk in user space: a record of its own, never
            // summed in the totals (whose key is the walked frames).
            let written = with_copy(tid, buf, away, config, now);
            add(if written { stat::COPIED } else { stat::LOST }, 1);
        } else if !runtime && total(tid, buf, away) {
            add(stat::TOTALLED, 1);
        } else {
            let written = if runtime {
                stat::RUNTIME
            } else {
                stat::WRITTEN
            };
            add(
                if to_ring(buf, away, config, now) {
                    written
                } else {
                    stat::LOST
                },
                1,
            );
        }
    }
}

/// Whether the kept record `buf` carries a copy of the user stack instead of its frames.
///
/// # Safety
/// `buf` is a live value of the pending map.
#[inline(always)]
unsafe fn copied(buf: *const OffCpuBuf) -> bool {
    // SAFETY: the caller's map value.
    unsafe { (*buf).header.flags & record_flags::STACK_COPY != 0 }
}

/// Writes the wait (kept record `buf`, `away` ns) to the ring as one record; false if the
/// ring had no room.
///
/// # Safety
/// `buf` is a live value of the pending map.
#[inline(always)]
unsafe fn to_ring(buf: *mut OffCpuBuf, away: u64, config: &SamplerConfig, now: u64) -> bool {
    // SAFETY: the caller's map value; n is bounded below.
    unsafe {
        let n = (usize::from((*buf).header.kernel_frames) + usize::from((*buf).header.user_frames))
            .min(OFFCPU_FRAMES)
            & 0xff;
        (*buf).frames[n] = away;
        let size = (STACK_HEADER_SIZE + 8 * (n + 1)) as u64;
        output(buf.cast(), size, (*buf).header.flags, config, now)
    }
}

/// Writes `size` bytes at `data` to `record`'s ring; false if it had no room. The reader is
/// woken once a quarter of the ring waits, or soon (`wake_reader`) when `flags` say the
/// process lacks unwind tables (so the reader loads them) or the stack has a runtime's
/// frames (named while the process lives).
///
/// # Safety
/// `data` points at `size` readable bytes of a map value.
#[inline(always)]
unsafe fn output(data: *const u8, size: u64, flags: u32, config: &SamplerConfig, now: u64) -> bool {
    let pending = RECORD_EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let wake = if pending + size >= config.wakeup_bytes
        || wake_reader(flags, now, config.runtime_wakeup_ns())
    {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    // SAFETY: the caller's bytes; the helper copies them into the ring.
    let rc = unsafe {
        generated::bpf_ringbuf_output(
            (&raw const RECORD_EVENTS).cast_mut().cast(),
            data.cast_mut().cast(),
            size,
            wake as u64,
        )
    };
    rc == 0
}

/// Forgets the kept record (and stack copy) of `tid`.
#[inline(always)]
fn forget(tid: u32) {
    let _ = OFFCPU_PENDING.remove(tid);
    if copied_any(tid) {
        let _ = OFFCPU_COPIES.remove(tid);
    }
}

/// Whether thread `tid` has a copy kept.
#[inline(always)]
fn copied_any(tid: u32) -> bool {
    // SAFETY: a plain map lookup; nothing is read.
    unsafe { OFFCPU_COPIES.get(tid) }.is_some()
}

/// Writes the wait of `tid` (its kept record `buf`, `away` ns) to the ring with the copy of
/// its user stack: header, kernel frames, the time away, then the copy.
///
/// # Safety
/// `buf` is a live value of the pending map.
#[inline(always)]
unsafe fn with_copy(
    tid: u32,
    buf: *mut OffCpuBuf,
    away: u64,
    config: &SamplerConfig,
    now: u64,
) -> bool {
    let (Some(out), Some(copy)) = (OFFCPU_OUT.get_ptr_mut(0), OFFCPU_COPIES.get_ptr(tid)) else {
        return false;
    };
    // SAFETY: this CPU's buffer, large enough for a header, 256 words and a copy after
    // them (profiler_common::stack); the reads are of whole map values.
    unsafe {
        generated::bpf_probe_read_kernel(
            out.cast(),
            core::mem::size_of::<OffCpuBuf>() as u32,
            buf.cast(),
        );
        // A copied stack has no user frames: n is the kernel's, at most 127.
        let n = usize::from((*out).header.kernel_frames) & 0x7f;
        (*out).header.user_frames = 0;
        (*out).frames[n] = away;
        generated::bpf_probe_read_kernel(
            (*out).frames.as_mut_ptr().add(n + 1).cast(),
            core::mem::size_of::<StackCopyBuf>() as u32,
            copy.cast(),
        );
        let len = ((*copy).head.len as usize).min(STACK_COPY_BYTES);
        let size = ((STACK_HEADER_SIZE + 8 * (n + 1 + STACK_COPY_HEAD_WORDS) + len) as u64)
            .min(core::mem::size_of::<StackSampleBuf>() as u64);
        output(out.cast(), size, 0, config, now)
    }
}

/// Adds `away` to the totals of (`tid`, the stack of `buf`); false if the map is full.
///
/// # Safety
/// `buf` is a live value of the pending map.
#[inline(always)]
unsafe fn total(tid: u32, buf: *mut OffCpuBuf, away: u64) -> bool {
    // SAFETY: reads of the caller's map value, within its frames (n is bounded below).
    let key = unsafe {
        let (k, u) = ((*buf).header.kernel_frames, (*buf).header.user_frames);
        let n = (usize::from(k) + usize::from(u)).min(OFFCPU_FRAMES);
        let mut hash = FNV_OFFSET ^ u64::from((*buf).header.flags & RUNNABLE);
        for i in 0..OFFCPU_FRAMES {
            if i >= n {
                break;
            }
            hash = (hash ^ (*buf).frames[i]).wrapping_mul(FNV_PRIME);
        }
        TotalKey {
            hash,
            tid,
            frames: u32::from(k) | u32::from(u) << 16,
        }
    };
    if let Some(t) = OFFCPU_TOTALS.get_ptr_mut(key) {
        use core::intrinsics::{AtomicOrdering, atomic_xadd};
        // SAFETY: a live map value; user space reads it concurrently, so the adds are atomic.
        unsafe {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*t).ns, away);
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*t).waits, 1);
        }
        return true;
    }
    let Some(new) = OFFCPU_TOTAL_BUF.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: this CPU's buffer; the record is copied whole from the pending map's value.
    unsafe {
        (*new).ns = away;
        (*new).waits = 1;
        generated::bpf_probe_read_kernel(
            (&raw mut (*new).record).cast(),
            core::mem::size_of::<OffCpuBuf>() as u32,
            buf.cast(),
        );
    }
    // BPF_NOEXIST: a thread is switched in on one CPU at a time, so no other CPU adds this
    // key meanwhile; failing here means the map is full.
    // SAFETY: the buffer is ours and holds a whole value.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let added = OFFCPU_TOTALS.insert(key, unsafe { &*new }, 1);
    added.is_ok()
}

/// The current task leaves the CPU in `state`: keeps its stack if it is a target.
#[inline(always)]
fn switch_out<const TABLES: bool>(
    ctx: &TracePointContext,
    oc: &OffCpuConfig,
    config: &SamplerConfig,
    state: u64,
    now: u64,
) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    if tid == 0 {
        return;
    }
    // Running now, so back since its last switch-out: a record still kept is a return the
    // program did not see. (Looked at here for an exiting thread, and just before the new
    // record is kept for the others: not in front of the walk, which the verifier would
    // then check once per outcome.)
    if state & STATE_DEAD != 0 {
        if let Some(old) = OFFCPU_PENDING.get_ptr_mut(tid) {
            // SAFETY: the live value of the pending map for tid.
            unsafe { unseen_return(tid, old, oc, config, now) };
            forget(tid);
        }
        // Exiting tasks never come back.
        return;
    }
    let runnable = state & STATE_BLOCKED == 0;
    if runnable && oc.runnable == 0 {
        return;
    }
    if !targeted(config, tgid, tid) {
        return;
    }
    let Some(buf) = OFFCPU_BUF.get_ptr_mut(0) else {
        return;
    };
    // Whether it is runnable goes into the record before the walk, and nothing after the
    // walk asks again: its two values reached the walk as two states, which the verifier
    // did not merge (the walk was verified twice: 620,855 instructions on 6.18).
    // SAFETY: this CPU's buffer (tracepoint programs do not nest on one CPU).
    unsafe { (*buf).header.flags = OFF_CPU | if runnable { RUNNABLE } else { 0 } };
    // The table walk first, from one verifier state (after the kernel stack's two outcomes,
    // the verifier checked the walk's loops once per outcome). `Some(None)`: a kernel thread.
    let walked = (TABLES
        && config.capture & capture::USER_STACK != 0
        && config.capture & capture::UNWIND_TABLES != 0)
        .then(|| saved_user_regs().map(|regs| walk_user_from(regs, 0, tgid)));
    // SAFETY: this CPU's buffer (tracepoint programs do not nest on one CPU); the helpers
    // write at most STACK_BYTES into frames that have room for them.
    unsafe {
        let h = &mut (*buf).header;
        h.time_ns = now;
        h.cgroup_id = bpf_get_current_cgroup_id();
        h.ip = 0;
        h.leaf_ret = 0;
        h.period = 0;
        h.pid = tgid;
        h.tid = tid;
        h.cpu = bpf_get_smp_processor_id();
        h.request = oc.request;
        h.comm = bpf_get_current_comm().unwrap_or([0; 16]);
        let mut k = 0usize;
        if config.capture & capture::KERNEL_STACK != 0 {
            let n = bpf_get_stack(
                ctx.as_ptr(),
                (*buf).frames.as_mut_ptr().cast(),
                STACK_BYTES,
                0,
            );
            if n >= 0 {
                k = (n as usize / 8).min(MAX_STACK_DEPTH);
            } else {
                add(stat::STACK_ERRORS, 1);
            }
        }
        let mut u = 0usize;
        if config.capture & capture::USER_STACK != 0 {
            u = user_stack(ctx, config, tgid, buf, k, walked);
        }
        (*buf).header.kernel_frames = k as u16;
        (*buf).header.user_frames = u as u16;
        // Before this switch-out's copy replaces the old wait's, and its record the old one.
        if let Some(old) = OFFCPU_PENDING.get_ptr_mut(tid) {
            unseen_return(tid, old, oc, config, now);
        }
        if TABLES && (*buf).header.flags & record_flags::STACK_COPY != 0 && !keep_copy(tid) {
            (*buf).header.flags &= !record_flags::STACK_COPY;
        }
    }
    // By reference: a copy of the value would not fit the 512-byte BPF stack.
    // SAFETY: the buffer is ours and holds a whole value of the map.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let kept = OFFCPU_PENDING.insert(tid, unsafe { &*buf }, 0);
    if kept.is_err() {
        add(stat::FULL, 1);
        return;
    }
    add(stat::KEPT, 1);
    // SAFETY: a read of this CPU's buffer.
    let flags = unsafe { (*buf).header.flags };
    if TABLES
        && flags & (record_flags::UNWIND_NO_PROCESS | record_flags::UNWIND_NO_MAPPING) != 0
        // At most every 10 ms per CPU, whichever is missing.
        && wake_reader(record_flags::UNWIND_NO_MAPPING, now, config.runtime_wakeup_ns())
    {
        // The walk lacked tables (a new process, a library mapped since): a header without
        // frames or weight tells the reader which process to load (and counts nothing), as a
        // sample's record would; a process that only waits has no samples to say it.
        // SAFETY: the first STACK_HEADER_SIZE bytes of this CPU's buffer are its header.
        unsafe {
            (*buf).header.kernel_frames = 0;
            (*buf).header.user_frames = 0;
            (*buf).header.flags &= !record_flags::STACK_COPY;
            generated::bpf_ringbuf_output(
                (&raw const RECORD_EVENTS).cast_mut().cast(),
                buf.cast(),
                STACK_HEADER_SIZE as u64,
                BPF_RB_FORCE_WAKEUP as u64,
            );
        }
    }
}

/// Copies the current task's user stack (from the registers it saved on kernel entry) into
/// `OFFCPU_COPIES` under `tid`; false if it could not be kept.
#[inline(always)]
fn keep_copy(tid: u32) -> bool {
    let (Some(regs), Some(copy)) = (saved_user_regs(), OFFCPU_COPY_BUF.get_ptr_mut(0)) else {
        return false;
    };
    // SAFETY: this CPU's buffer: a head and STACK_COPY_BYTES bytes, as the copy needs.
    let len = unsafe { copy_user_stack(regs, copy.cast()) };
    copied_bytes(len as u64);
    // SAFETY: the buffer holds a whole value of the map.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let kept = OFFCPU_COPIES.insert(tid, unsafe { &*copy }, 0);
    kept.is_ok()
}

/// Writes the current task's user stack into `frames[k..]` of the buffer: its table walk
/// (`walked`, made from the registers it saved on kernel entry; `Some(None)` for a kernel
/// thread) or, without tables, its frame pointers; returns the frames written.
///
/// # Safety
/// `buf` is this CPU's off-CPU buffer and `k <= MAX_STACK_DEPTH`.
#[inline(always)]
unsafe fn user_stack(
    ctx: &TracePointContext,
    config: &SamplerConfig,
    tgid: u32,
    buf: *mut OffCpuBuf,
    k: usize,
    walked: Option<Option<Walked>>,
) -> usize {
    let k = k & 0x7f;
    // SAFETY: every write is of MAX_STACK_DEPTH words from word k <= 127 of `frames`, which
    // has OFFCPU_FRAMES + 2 = 256 words (a deeper table walk is cut there, marked partial).
    unsafe {
        let mut walk_done = None;
        if let Some(walked) = walked {
            let Some(walked) = walked else {
                return 0; // a kernel thread
            };
            let now = (*buf).header.time_ns;
            match walked {
                // A frame it cannot walk yet: copied while the budget lasts (as below).
                Walked::Done(walk)
                    if walk.wants_copy() && copy_allowed(tgid, now, config.wakeup_bytes, true) =>
                {
                    (*buf).header.flags |=
                        record_flags::UNWIND_NO_PROCESS | record_flags::STACK_COPY;
                    // A frame in no mapping (not a module being built): user space reloads
                    // the process at its own pace, not at every such copy.
                    (*buf).header.flags |= walk.flags & record_flags::UNWIND_NO_MAPPING;
                    return 0;
                }
                Walked::Done(walk) => walk_done = Some(walk),
                Walked::NoProcess => {
                    // No frame-pointer guess: the caller copies the stack (a thread blocked
                    // from its start waits with the stack it had then).
                    (*buf).header.flags |= record_flags::UNWIND_NO_PROCESS;
                    if copy_allowed(tgid, now, config.wakeup_bytes, true) {
                        (*buf).header.flags |= record_flags::STACK_COPY;
                    }
                    return 0;
                }
                Walked::NoUser => {}
            }
        }
        let leaf_ret = || saved_user_regs().and_then(regs::leaf_ret);
        let dst = (*buf).frames.as_mut_ptr().add(k);
        let header = &raw mut (*buf).header;
        user_frames::<MAX_STACK_DEPTH>(ctx.as_ptr(), walk_done, leaf_ret, header, dst)
            .unwrap_or_else(|| {
                add(stat::STACK_ERRORS, 1);
                0
            })
    }
}
