//! The overflow engine: one perf_event program for `record` and for libcpc overflow
//! notification. At each overflow it finds the request by the BPF link's attach cookie,
//! filters by target in the kernel, computes libcpc's virtual value (preset + count), writes
//! one record (ids, time, IP, value, optionally stacks) into the ring buffer, optionally
//! signals the overflowing thread, and counts every drop.

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP,
        bpf_perf_event_value, pt_regs,
    },
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_get_smp_processor_id,
        bpf_get_stack, bpf_ktime_get_ns, bpf_perf_event_read_value, bpf_perf_prog_read_value,
        bpf_probe_read_kernel, bpf_probe_read_user, bpf_send_signal_thread, bpf_task_pt_regs,
    },
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerfEventArray, RingBuf, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext as _},
};
use profiler_common::{
    AGGREGATE_ENTRIES, AGGREGATE_STACKS, AggregateKey, AggregateValue, DEFAULT_RING_BYTES,
    MAX_REQUESTS, MAX_SIBLINGS, MAX_STACK_DEPTH, MAX_TARGET_CGROUPS, MAX_TARGET_TGIDS,
    MAX_TARGET_TIDS, RequestConfig, SampleRecord, SamplerConfig, capture, filter, record_flags,
    request_flags, stack_id, stat,
};

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);

#[map]
pub(crate) static TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGET_TGIDS, 0);

#[map]
static TIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGET_TIDS, 0);

#[map]
static CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(MAX_TARGET_CGROUPS, 0);

#[map]
pub(crate) static CONFIG: Array<SamplerConfig> = Array::with_max_entries(1, 0);

#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

// The events of a notifying set, so a record can carry the whole set's values: request k of
// context c is at SIBk[c] (readable for events of the current task or CPU). One array per
// request because aya sizes every perf event array to the number of CPUs.
#[map]
static SIB0: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SIB1: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SIB2: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SIB3: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SIB4: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SIB5: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SIB6: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
static SIB7: PerfEventArray<u32> = PerfEventArray::new(0);

#[inline(always)]
fn sibling_map(k: usize) -> *mut core::ffi::c_void {
    let map: *const PerfEventArray<u32> = match k {
        0 => &raw const SIB0,
        1 => &raw const SIB1,
        2 => &raw const SIB2,
        3 => &raw const SIB3,
        4 => &raw const SIB4,
        5 => &raw const SIB5,
        6 => &raw const SIB6,
        _ => &raw const SIB7,
    };
    map as *mut core::ffi::c_void
}

/// The count of the event at `index` of `SIBk` (`BPF_F_CURRENT_CPU`: this CPU's), or `None`
/// when the slot is empty or the event cannot be read here.
#[inline(always)]
pub(crate) fn read_counter(k: usize, index: u64) -> Option<u64> {
    let mut v = bpf_perf_event_value {
        counter: 0,
        enabled: 0,
        running: 0,
    };
    // SAFETY: the map pointer is one of our PERF_EVENT_ARRAYs (repr(transparent) over its
    // definition, which the loader relocates); the helper writes one value into `v`.
    let rc = unsafe {
        bpf_perf_event_read_value(
            sibling_map(k),
            index,
            &mut v,
            core::mem::size_of::<bpf_perf_event_value>() as u32,
        )
    };
    (rc == 0).then_some(v.counter)
}

#[map]
static REQUESTS: HashMap<u64, RequestConfig> = HashMap::with_max_entries(MAX_REQUESTS, 0);

// In-kernel aggregation (`record --aggregate`): sample counts per key, stacks by id.
#[map]
static AGGREGATE: HashMap<AggregateKey, AggregateValue> =
    HashMap::with_max_entries(AGGREGATE_ENTRIES, 0);

#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(AGGREGATE_STACKS, 0);

/// Returns 0 (the sample is fully handled here: perf writes nothing and sends no signal, and
/// on Linux 6.10+ the IOC_REFRESH budget is untouched), except for a request that freezes on
/// overflow (libcpc's NOTIFY), where 1 lets perf spend the budget and disable the event.
///
/// Written without aya's `#[perf_event]` attribute, whose expansion (aya-ebpf-macros 0.2.0)
/// discards the function's value and always returns 0; this is that expansion, returning it.
#[unsafe(no_mangle)]
#[unsafe(link_section = "perf_event")]
pub fn sample(ctx: *mut core::ffi::c_void) -> u32 {
    on_sample(&PerfEventContext::new(ctx.cast()))
}

#[inline(always)]
pub(crate) fn bump(slot: u32) {
    if let Some(counter) = STATS.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot, and perf_event programs do not nest on one CPU.
        unsafe { *counter += 1 };
    }
}

#[inline(always)]
fn on_sample(ctx: &PerfEventContext) -> u32 {
    let Some(config) = CONFIG.get(0) else {
        return 0;
    };
    // SAFETY: the helper only reads the running program's attach cookie.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    // SAFETY: a plain map lookup; the value is copied out.
    let Some(request) = (unsafe { REQUESTS.get(cookie) }).copied() else {
        bump(stat::UNCONFIGURED);
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    // SAFETY (all three): plain map lookups; the values are only tested for presence.
    let dropped = (config.filter & filter::TGID != 0 && unsafe { TGIDS.get(tgid) }.is_none())
        || (config.filter & filter::TID != 0 && unsafe { TIDS.get(tid) }.is_none())
        || (config.filter & filter::CGROUP != 0
            && unsafe { CGROUPS.get(bpf_get_current_cgroup_id()) }.is_none());
    if dropped {
        bump(stat::FILTERED);
        return 0;
    }
    let freeze = if request.flags & request_flags::FREEZE != 0 {
        1
    } else {
        0
    };
    if request.flags & request_flags::SIGNAL != 0 {
        // SAFETY: signals the current (overflowing) thread; no memory is passed.
        unsafe { bpf_send_signal_thread(request.signal) };
    }
    if config.capture & capture::AGGREGATE != 0 {
        aggregate(ctx, config, &request, tgid);
        return freeze;
    }
    let mut count = bpf_perf_event_value {
        counter: 0,
        enabled: 0,
        running: 0,
    };
    // SAFETY: the helper writes one bpf_perf_event_value into our stack variable.
    let counted = unsafe {
        bpf_perf_prog_read_value(
            ctx.ctx,
            &mut count,
            core::mem::size_of::<bpf_perf_event_value>() as u32,
        )
    } == 0;
    let Some(mut entry) = EVENTS.reserve::<SampleRecord>(0) else {
        bump(stat::LOST);
        return freeze;
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
        (*rec).value = if counted {
            request.preset.wrapping_add(count.counter)
        } else {
            0
        };
        (*rec).pid = tgid;
        (*rec).tid = tid;
        (*rec).cpu = bpf_get_smp_processor_id();
        (*rec).request = request.index;
        (*rec).flags = 0;
        (*rec)._pad0 = 0;
        (*rec).leaf_ret = 0;
        let stacks = request.flags & request_flags::STACKS != 0;
        // Keep the word at the user stack pointer: user space uses it to recover the caller
        // of a function without a frame-pointer prologue (see symbolize::leaf).
        if stacks
            && let Some(sp) = user_sp(ctx)
            && let Ok(word) = bpf_probe_read_user(sp as *const u64)
        {
            (*rec).leaf_ret = word;
            (*rec).flags = record_flags::LEAF_RET;
        }
        (*rec).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        (*rec).addr = (*data).addr;
        (*rec).sibling_count = 0;
        (*rec)._pad1 = 0;
        read_siblings(&request, cookie, &mut *rec);
        (*rec).kernel_frames = 0;
        (*rec).user_frames = 0;
        const STACK_BYTES: u32 = (MAX_STACK_DEPTH * 8) as u32;
        if stacks && config.capture & capture::KERNEL_STACK != 0 {
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
        if stacks && config.capture & capture::USER_STACK != 0 {
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
    freeze
}

/// Counts the sample in `AGGREGATE` under (process, event, stack ids, cgroup). Every sample
/// ends in `AGGREGATED` or, when the map is full, `LOST`; stacks that lose a hash slot are
/// counted under [`stack_id::COLLISION`], so the totals stay exact.
#[inline(always)]
fn aggregate(ctx: &PerfEventContext, config: &SamplerConfig, request: &RequestConfig, tgid: u32) {
    let stacks = request.flags & request_flags::STACKS != 0;
    let walk = |wanted: u32, flags: u64| -> i32 {
        if !stacks || config.capture & wanted == 0 {
            return stack_id::NONE;
        }
        match ctx.get_stackid(&STACK_TRACES, flags) {
            Ok(id) => id as i32,
            Err(-17) => {
                // -EEXIST: the slot holds another stack with the same hash.
                bump(stat::COLLISIONS);
                stack_id::COLLISION
            }
            // -EFAULT: no stack of that kind (a user-mode sample's kernel stack, a kernel
            // thread's user stack), as bpf_get_stack's empty result in ring mode.
            Err(-14) => stack_id::NONE,
            Err(_) => {
                bump(stat::STACK_ERRORS);
                stack_id::NONE
            }
        }
    };
    let key = AggregateKey {
        pid: tgid,
        request: request.index,
        kernel_stack: walk(capture::KERNEL_STACK, 0),
        user_stack: walk(capture::USER_STACK, BPF_F_USER_STACK as u64),
        // SAFETY: the helper only reads the current task's cgroup id.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
    };
    if add_one(&key) {
        bump(stat::AGGREGATED);
        return;
    }
    let value = AggregateValue {
        count: 1,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    };
    // BPF_NOEXIST: if another CPU inserted the key meanwhile, add to its entry instead.
    let counted = match AGGREGATE.insert(key, value, 1) {
        Ok(()) => true,
        Err(_) => add_one(&key),
    };
    bump(if counted {
        stat::AGGREGATED
    } else {
        stat::LOST
    });
}

/// Adds one to the count of an existing `AGGREGATE` entry; false if there is none.
#[inline(always)]
fn add_one(key: &AggregateKey) -> bool {
    match AGGREGATE.get_ptr_mut(key) {
        Some(value) => {
            use core::intrinsics::{AtomicOrdering, atomic_xadd};
            // SAFETY: the pointer is to a live map value; CPUs share it, so the add is atomic
            // (its result is unused, so LLVM emits the plain BPF atomic add).
            unsafe {
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*value).count, 1)
            };
            true
        }
        None => false,
    }
}

/// Reads the virtual values of the set's requests (up to `MAX_SIBLINGS`) into the record.
#[inline(always)]
fn read_siblings(request: &RequestConfig, cookie: u64, rec: &mut SampleRecord) {
    let n = (request.siblings as usize).min(MAX_SIBLINGS);
    let context = cookie & !0xffff;
    for k in 0..MAX_SIBLINGS {
        if k >= n {
            break;
        }
        let Some(counter) = read_counter(k, u64::from(request.sibling_base)) else {
            break;
        };
        // SAFETY: a plain map lookup; the preset is copied out.
        let preset = unsafe { REQUESTS.get(context | k as u64) }.map_or(0, |c| c.preset);
        rec.siblings[k] = preset.wrapping_add(counter);
        rec.sibling_count = k as u32 + 1;
    }
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
