//! `record`'s sampling program: at each sample of a target it writes a record of only the
//! frames walked (kernel, then user; see `profiler_common::stack`), user stacks walked with
//! unwind tables where the process has them (`crate::unwind`), else with frame pointers; or,
//! with `capture::AGGREGATE`, counts the sample in a kernel map instead (a sample whose
//! process has no tables in the kernel yet still goes to the ring).

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_smp_processor_id, bpf_get_stack, bpf_ktime_get_ns, generated, generated::bpf_loop,
    },
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext as _},
};
use profiler_common::{
    AGGREGATE_ENTRIES, AGGREGATE_STACKS, AggregateKey, AggregateValue, DEFAULT_RING_BYTES,
    MAX_STACK_DEPTH, MAX_WALK_WORDS, RequestConfig, SamplerConfig, USER_HASH_SEED, UserStack,
    capture, filter,
    golabels::GO_LABEL_WORDS,
    group as group_consts, record_flags, request_flags,
    stack::{MAX_RECORD_FRAMES, STACK_COPY_HEAD_WORDS, STACK_HEADER_SIZE, StackSampleBuf},
    stack_id, stat, user_hash_finish, user_hash_step,
};

use crate::{
    golabels, group, regs,
    sampler::{CONFIG, REQUESTS, bump, request_cookie, targeted},
    unwind::{
        STACK_BYTES, Walk, Walked, copied_bytes, copy_allowed, copy_user_stack, user_frames,
        user_regs, wake_reader, walk_user,
    },
};

#[map]
pub(crate) static RECORD_EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RING_BYTES, 0);
shared_name!(map RECORD_EVENTS);

/// The record being assembled on this CPU (up to 2 KiB: too large for the BPF stack).
#[map]
static RECORD_BUF: PerCpuArray<StackSampleBuf> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map RECORD_BUF);

// In-kernel aggregation (`record --aggregate`): samples and their events per key, stacks
// by id.
#[map]
static AGGREGATE: HashMap<AggregateKey, AggregateValue> =
    HashMap::with_max_entries(AGGREGATE_ENTRIES, 0);
shared_name!(map AGGREGATE);

#[map]
static STACK_TRACES: StackTrace = StackTrace::with_max_entries(AGGREGATE_STACKS, 0);
shared_name!(map STACK_TRACES);

/// User stacks walked with unwind tables, by the hash of their frames (`AggregateKey`'s
/// `user_hash`). Preallocated: perf_event programs on kernels before 6.1 may only use
/// preallocated hash maps, and the loader sizes it only for `--aggregate` with tables.
#[map]
static USER_STACKS: HashMap<u64, UserStack> = HashMap::with_max_entries(AGGREGATE_STACKS, 0);
shared_name!(map USER_STACKS);

/// With unwind tables (needs `bpf_loop`, Linux 5.17). Always returns 0: perf writes
/// nothing itself.
#[unsafe(no_mangle)]
#[unsafe(link_section = "perf_event")]
pub fn record_sample(ctx: *mut core::ffi::c_void) -> u32 {
    on_sample::<true>(&PerfEventContext::new(ctx.cast()));
    0
}

/// Frame pointers only (`--call-graph fp`, and kernels without `bpf_loop`): the same
/// program without the unwinder's code.
#[unsafe(no_mangle)]
#[unsafe(link_section = "perf_event")]
pub fn record_fp(ctx: *mut core::ffi::c_void) -> u32 {
    on_sample::<false>(&PerfEventContext::new(ctx.cast()));
    0
}

#[inline(always)]
fn on_sample<const TABLES: bool>(ctx: &PerfEventContext) {
    let Some(config) = CONFIG.get(0) else {
        return;
    };
    // The test-only `broken` feature: a loop the verifier cannot prove ends, so that
    // `cargo xtask kernels --broken` shows a refusal is reported with the verifier's log.
    #[cfg(feature = "broken")]
    // SAFETY: a volatile read of the map value `config` borrows.
    while unsafe { core::ptr::read_volatile(&config.capture) } != 0 {}
    let cookie = request_cookie(ctx);
    // SAFETY: a plain map lookup; the value is copied out.
    let Some(request) = (unsafe { REQUESTS.get(cookie) }).copied() else {
        bump(stat::UNCONFIGURED);
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // The idle task (pid 0 on every CPU) when the run does not sample it is counted apart
    // from other tasks' samples the filters drop (a run that filters anything never wants
    // it). One exit for both: a branch of its own cost 6.1's verifier 70k instructions.
    if (pid_tgid == 0 && config.filter & filter::NO_IDLE != 0)
        || !targeted(config, tgid, pid_tgid as u32)
    {
        bump(if pid_tgid == 0 {
            stat::IDLE
        } else {
            stat::FILTERED
        });
        return;
    }
    let aggregated = config.capture & capture::AGGREGATE != 0;
    // The table walk, once, before the aggregation chooses: a sample it hands to the ring
    // keeps its walk, and the verifier checks the walk's loops at one call, not two.
    let walked = (TABLES
        && request.flags & request_flags::STACKS != 0
        && config.capture & capture::USER_STACK != 0
        && config.capture & capture::UNWIND_TABLES != 0)
        .then(|| walk_user(ctx, tgid));
    // The running goroutine's labels (for a Go process user space published; tables only:
    // it publishes processes as it loads their tables) are read where each path needs
    // them, not here: carried through the stack's code, their two outcomes cost the
    // verifier a sixth more of this program (66k instructions on 6.18).
    if aggregated
        && aggregate(ctx, config, &request, pid_tgid, walked, || {
            TABLES && go_process(walked) && golabels::read(tgid).is_some()
        })
    {
        return;
    }
    let Some(buf) = RECORD_BUF.get_ptr_mut(0) else {
        return;
    };
    // Before the walk: the verifier then checks the group's code once, not per walk.
    if aggregated {
        // A sample the aggregation sends to the ring: its thread's counter increases were
        // accounted and stay with it, for its next aggregated sample.
        group::no_tail();
    } else {
        group::prepare_tail(pid_tgid);
    }
    // SAFETY: this CPU's buffer (perf_event programs do not nest on one CPU); `ctx.ctx` is
    // the program's context, which the verifier lets us read.
    let (flags, frames) = unsafe {
        let h = &mut (*buf).header;
        h.time_ns = bpf_ktime_get_ns();
        h.cgroup_id = bpf_get_current_cgroup_id();
        h.ip = regs::pc(&(*ctx.ctx).regs);
        h.leaf_ret = 0;
        h.period = (*ctx.ctx).sample_period;
        h.pid = tgid;
        h.tid = pid_tgid as u32;
        h.cpu = bpf_get_smp_processor_id();
        h.request = request.index;
        h.flags = 0;
        h.comm = bpf_get_current_comm().unwrap_or([0; 16]);
        let stacks = request.flags & request_flags::STACKS != 0;
        let mut k = 0usize;
        // A sample taken in user mode has no kernel frames (the kernel's callchain skips
        // them): no helper call for it.
        if stacks
            && config.capture & capture::KERNEL_STACK != 0
            && !regs::user_mode(&(*ctx.ctx).regs)
        {
            let n = bpf_get_stack(
                ctx.as_ptr(),
                (*buf).frames.as_mut_ptr().cast(),
                STACK_BYTES,
                0,
            );
            if n >= 0 {
                k = (n as usize / 8).min(MAX_STACK_DEPTH);
            } else {
                bump(stat::STACK_ERRORS);
            }
        }
        let mut u = 0usize;
        if stacks && config.capture & capture::USER_STACK != 0 {
            u = user_stack(ctx, config, tgid, buf, k, walked);
        }
        (*buf).header.kernel_frames = k as u16;
        (*buf).header.user_frames = u as u16;
        ((*buf).header.flags, k + u)
    };
    let frames = frames.min(MAX_RECORD_FRAMES);
    let mut tail_words = 0;
    if let Some(tail) = group::GROUP_TAIL.get_ptr(0) {
        // SAFETY: copies the group's words (a constant size the verifier accepts; words past
        // `tail_words` are not sent) to frames[frames..], inside the buffer: frames <=
        // MAX_RECORD_FRAMES and the tail after the frames holds TAIL_WORDS more
        // (profiler_common::stack); `tail` is this CPU's slot, written by `prepare_tail`.
        unsafe {
            tail_words = ((*tail).words as usize).min(group_consts::TAIL_WORDS);
            // Without a group (most runs) there are no words: no helper call. The flags are
            // 0 then; set outside the branch, both paths reach the rest alike (inside it,
            // the verifier explored the rest twice: 20 % more on 6.1).
            if tail_words > 0 {
                generated::bpf_probe_read_kernel(
                    (*buf).frames.as_mut_ptr().add(frames).cast(),
                    (8 * group_consts::TAIL_WORDS) as u32,
                    (&raw const (*tail).data).cast(),
                );
            }
            (*buf).header.flags |= (*tail).flags as u32;
        }
    }
    let mut words = frames + tail_words;
    let go_labels = if TABLES && go_process(walked) {
        golabels::read(tgid)
    } else {
        None
    };
    if let Some(labels) = go_labels {
        // SAFETY: copies two words from our stack to frames[words..], inside the buffer:
        // words <= MAX_RECORD_FRAMES + TAIL_WORDS and the tail holds GO_LABEL_WORDS more
        // (profiler_common::stack).
        unsafe {
            let at = words.min(MAX_RECORD_FRAMES + group_consts::TAIL_WORDS);
            generated::bpf_probe_read_kernel(
                (*buf).frames.as_mut_ptr().add(at).cast(),
                (8 * GO_LABEL_WORDS) as u32,
                (&raw const labels).cast(),
            );
            (*buf).header.flags |= record_flags::GO_LABELS;
        }
        words += GO_LABEL_WORDS;
    }
    let flags = flags
        | if go_labels.is_some() {
            record_flags::GO_LABELS
        } else {
            0
        };
    let mut copied = 0usize;
    if TABLES && flags & record_flags::STACK_COPY != 0 {
        // SAFETY: this CPU's buffer; the copy goes after the frames and the group's words,
        // at word `words` (< 256 here: no user frames), where `copy` leaves room for it.
        let copy =
            |regs| unsafe { copy_user_stack(regs, (*buf).frames.as_mut_ptr().add(words & 0xff)) };
        match user_regs(ctx).map(copy) {
            Some(n) if words < 256 => {
                words += STACK_COPY_HEAD_WORDS;
                copied = n;
                copied_bytes(n as u64);
            }
            _ => {
                // SAFETY: as above.
                unsafe { (*buf).header.flags &= !record_flags::STACK_COPY };
                bump(stat::STACK_ERRORS);
            }
        }
    }
    let size = ((STACK_HEADER_SIZE + 8 * words + copied) as u64)
        .min(core::mem::size_of::<StackSampleBuf>() as u64);
    // Batch wake-ups: only wake the reader once enough is pending (it also polls on a
    // timer), or soon when tables are missing (so it loads them promptly) or the stack has
    // a runtime's frames (named while the process lives: see `wake_reader`).
    let pending = RECORD_EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    // SAFETY: this CPU's record buffer, filled above.
    let time_ns = unsafe { (*buf).header.time_ns };
    let wake = if pending + size >= config.wakeup_bytes
        || (TABLES && wake_reader(flags, time_ns, config.runtime_wakeup_ns()))
    {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    // SAFETY: copies `size` bytes (at most the whole buffer, which the bound above and the
    // buffer's size guarantee) of our per-CPU buffer into the ring.
    let rc = unsafe {
        generated::bpf_ringbuf_output(
            (&raw const RECORD_EVENTS).cast_mut().cast(),
            buf.cast(),
            size,
            wake as u64,
        )
    };
    bump(if rc == 0 { stat::SUBMITTED } else { stat::LOST });
}

/// Whether the walked process has goroutine labels to read (user space publishes a Go
/// process with its tables, so a process without a finished walk has none).
#[inline(always)]
fn go_process(walked: Option<Walked>) -> bool {
    matches!(walked, Some(Walked::Done(w)) if w.go_labels())
}

/// Walks the user stack into `frames[k..]` of the buffer; returns the frames written.
///
/// # Safety
/// `buf` is this CPU's record buffer and `k <= MAX_STACK_DEPTH`.
#[inline(always)]
unsafe fn user_stack(
    ctx: &PerfEventContext,
    config: &SamplerConfig,
    tgid: u32,
    buf: *mut StackSampleBuf,
    k: usize,
    walked: Option<Walked>,
) -> usize {
    // The verifier needs the bound spelled out: frames[k..k + MAX_WALK_WORDS] is in bounds.
    let k = k & 0x7f;
    // SAFETY: the buffer is ours; every write is of at most MAX_WALK_WORDS words from word
    // k <= 127 of `frames`, which has MAX_RECORD_FRAMES = 127 + MAX_WALK_WORDS words.
    unsafe {
        let mut walk_done = None;
        if let Some(walked) = walked {
            let time_ns = (*buf).header.time_ns;
            match walked {
                // A frame it cannot walk yet (a module being built, a mapping read since):
                // copied as for a process without tables, while the budget lasts.
                Walked::Done(walk)
                    if walk.wants_copy()
                        && copy_allowed(tgid, time_ns, config.wakeup_bytes, false) =>
                {
                    (*buf).header.flags |=
                        record_flags::UNWIND_NO_PROCESS | record_flags::STACK_COPY;
                    // A frame in no mapping (not a module being built): user space reloads
                    // the process at its own pace, not at every such copy.
                    (*buf).header.flags |= walk.flags & record_flags::UNWIND_NO_MAPPING;
                    bump(stat::UNWIND_NO_PROCESS);
                    return 0;
                }
                Walked::Done(walk) => {
                    if walk.flags & record_flags::UNWIND_PARTIAL != 0 {
                        bump(stat::UNWIND_PARTIAL);
                    }
                    walk_done = Some(walk);
                }
                Walked::NoProcess => {
                    // No frame-pointer guess: the stack is copied into the record (after the
                    // group's words, by the caller) and walked in user space with the same
                    // rows once they are loaded; past the process's budget of copies, no
                    // user stack (marked: user space counts it).
                    (*buf).header.flags |= record_flags::UNWIND_NO_PROCESS;
                    if copy_allowed(tgid, (*buf).header.time_ns, config.wakeup_bytes, false) {
                        (*buf).header.flags |= record_flags::STACK_COPY;
                    }
                    bump(stat::UNWIND_NO_PROCESS);
                    return 0;
                }
                Walked::NoUser => {}
            }
        }
        let dst = (*buf).frames.as_mut_ptr().add(k);
        let header = &raw mut (*buf).header;
        let leaf_ret = || user_regs(ctx).and_then(regs::leaf_ret);
        user_frames::<MAX_WALK_WORDS>(ctx.as_ptr(), walk_done, leaf_ret, header, dst)
            .unwrap_or_else(|| {
                bump(stat::STACK_ERRORS);
                0
            })
    }
}

/// Counts the sample and its period's events in `AGGREGATE` under (process, event, stacks,
/// cgroup); returns false when the sample is to be written to the ring instead. Every
/// counted sample ends in `AGGREGATED` or, when the map is full, `LOST`; stacks that lose
/// a hash slot are counted under [`stack_id::COLLISION`] (or [`stack_id::FULL`]), so the
/// totals stay exact. With a counter group, the thread's counter increases since its
/// previous counted sample are summed under the same key (`group::aggregate_values`).
///
/// With unwind tables (`TABLES`), user stacks are walked as in ring mode and kept once each
/// in `USER_STACKS` under a hash of their frames. A sample that walk cannot serve goes to
/// the ring, where user space handles it as in ring mode: its process has no tables in the
/// kernel yet (no frame-pointer guess is aggregated), a frame was in no mapping the
/// tables know (at most as often as such a record wakes the reader, so it rescans), or the
/// stack has a runtime's frames (named by user space from the process's memory, while it
/// lives).
#[inline(always)]
fn aggregate(
    ctx: &PerfEventContext,
    config: &SamplerConfig,
    request: &RequestConfig,
    pid_tgid: u64,
    walked: Option<Walked>,
    go_labels: impl FnOnce() -> bool,
) -> bool {
    let tgid = (pid_tgid >> 32) as u32;
    // The counters are accounted to the sampled thread whether or not the sample is counted.
    let values = group::account(pid_tgid, false);
    // Labels are read from the live process, as runtimes' frames are: the ring takes them.
    if go_labels() {
        return false;
    }
    let stacks = request.flags & request_flags::STACKS != 0;
    let mut user = None;
    if let Some(walked) = walked {
        match walked {
            // The ring path copies it (or keeps the frames walked, past the budget).
            Walked::Done(walk) if walk.wants_copy() => return false,
            // A runtime's frames are named from the live process: the ring takes them now,
            // not the aggregation user space reads later.
            Walked::Done(walk) if walk.flags & record_flags::RUNTIME_FRAMES != 0 => return false,
            Walked::Done(walk) => {
                // SAFETY: the helper only reads the clock.
                let now = unsafe { bpf_ktime_get_ns() };
                if walk.flags & record_flags::UNWIND_NO_MAPPING != 0
                    && wake_reader(walk.flags, now, config.runtime_wakeup_ns())
                {
                    return false;
                }
                // Deeper than a kept stack: the ring takes it whole.
                if walk.stack.len as usize > MAX_STACK_DEPTH {
                    return false;
                }
                if walk.flags & record_flags::UNWIND_PARTIAL != 0 {
                    bump(stat::UNWIND_PARTIAL);
                }
                user = Some(keep_user_stack(walk));
            }
            Walked::NoProcess => return false,
            // A kernel thread, or a kernel-mode sample whose user registers this kernel
            // cannot give: the frame-pointer walk below, as in ring mode.
            Walked::NoUser => {}
        }
    }
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
    let (user_stack, user_hash) = match user {
        Some(kept) => kept,
        None => (walk(capture::USER_STACK, BPF_F_USER_STACK as u64), 0),
    };
    let key = AggregateKey {
        pid: tgid,
        request: request.index,
        kernel_stack: walk(capture::KERNEL_STACK, 0),
        user_stack,
        // SAFETY: the helper only reads the current task's cgroup id.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        user_hash,
    };
    // SAFETY: the program's context, which the verifier lets us read.
    let period = unsafe { (*ctx.ctx).sample_period };
    let counted = add_sample(&key, period) || {
        let value = AggregateValue {
            count: 1,
            events: period,
            comm: bpf_get_current_comm().unwrap_or([0; 16]),
        };
        // BPF_NOEXIST: if another CPU inserted the key meanwhile, add to its entry instead.
        match AGGREGATE.insert(key, value, 1) {
            Ok(()) => true,
            Err(_) => add_sample(&key, period),
        }
    };
    if !counted {
        // The thread's counter increases stay with it, as a lost ring record's do.
        bump(stat::LOST);
        return true;
    }
    bump(stat::AGGREGATED);
    if let Some(values) = values {
        group::aggregate_values(pid_tgid, values, &key);
    }
    true
}

/// Keeps a table-walked user stack in `USER_STACKS` under the hash of its frames; returns
/// the key's `(user_stack, user_hash)`: [`stack_id::HASHED`] and the hash, or a marker when
/// the slot holds other frames (a 64-bit collision) or the map is full (both counted).
/// Hashing and comparing are `bpf_loop`s: the verifier checks one frame's step once, where
/// a loop bounded by the walk's length is checked per length (past its instruction limit).
#[inline(always)]
fn keep_user_stack(walk: &Walk) -> (i32, u64) {
    // SAFETY: a WalkStack begins with a UserStack's layout (profiler_common), and a walk of
    // at most MAX_STACK_DEPTH words (the caller checks) is whole in it.
    let stack = unsafe { &*(&raw const walk.stack).cast::<UserStack>() };
    let n = stack.len.min(MAX_STACK_DEPTH as u32);
    let mut lctx = StackLoop {
        stack,
        kept: stack,
        hash: USER_HASH_SEED,
        differ: 0,
    };
    // SAFETY: `hash_frame` is a BPF callback taking (index, ctx); `lctx` outlives the call.
    unsafe {
        bpf_loop(
            n,
            hash_frame as *mut core::ffi::c_void,
            (&raw mut lctx).cast(),
            0,
        );
    }
    let hash = user_hash_finish(lctx.hash, u64::from(n));
    // Most samples repeat a stack already kept: one lookup and a comparison.
    // SAFETY: a plain map lookup; the value is only read.
    let kept = match unsafe { USER_STACKS.get(hash) } {
        Some(kept) => kept,
        // BPF_NOEXIST: an entry is written once and never changed, so a reader on another
        // CPU never sees it half written (a new entry is linked in once it is filled).
        None => match USER_STACKS.insert(hash, stack, 1) {
            Ok(()) => return (stack_id::HASHED, hash),
            // -EEXIST: another CPU kept a stack under this hash meanwhile.
            // SAFETY: as above.
            Err(-17) => match unsafe { USER_STACKS.get(hash) } {
                Some(kept) => kept,
                None => return collision(stack_id::COLLISION),
            },
            Err(_) => return collision(stack_id::FULL),
        },
    };
    if kept.len != stack.len {
        return collision(stack_id::COLLISION);
    }
    lctx.kept = kept;
    // SAFETY: as above, with `compare_frame`.
    unsafe {
        bpf_loop(
            n,
            compare_frame as *mut core::ffi::c_void,
            (&raw mut lctx).cast(),
            0,
        );
    }
    if lctx.differ != 0 {
        return collision(stack_id::COLLISION);
    }
    (stack_id::HASHED, hash)
}

/// A user stack that could not be kept: counted, and marked `why` in the key.
#[inline(always)]
fn collision(why: i32) -> (i32, u64) {
    bump(stat::COLLISIONS);
    (why, 0)
}

/// What the `bpf_loop`s of [`keep_user_stack`] work on, on the caller's stack.
#[repr(C)]
struct StackLoop {
    stack: *const UserStack,
    /// The stack kept under the same hash, compared with `stack`.
    kept: *const UserStack,
    hash: u64,
    /// Non-zero once a frame differs.
    differ: u64,
}

/// Mixes frame `index` of the stack into the hash.
extern "C" fn hash_frame(index: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the StackLoop `keep_user_stack` passed; its pointers are map values.
    let c = unsafe { &mut *(ctx as *mut StackLoop) };
    let i = index as usize;
    if i >= MAX_STACK_DEPTH {
        return 1;
    }
    // SAFETY: as above.
    c.hash = user_hash_step(c.hash, unsafe { (*c.stack).frames[i] });
    0
}

/// Compares frame `index` of the two stacks; stops at the first that differs.
extern "C" fn compare_frame(index: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: as in `hash_frame`.
    let c = unsafe { &mut *(ctx as *mut StackLoop) };
    let i = index as usize;
    // SAFETY: as above.
    if i >= MAX_STACK_DEPTH || unsafe { (*c.kept).frames[i] != (*c.stack).frames[i] } {
        c.differ = 1;
        return 1;
    }
    0
}

/// Adds one sample of `period` events to an existing `AGGREGATE` entry; false if there is
/// none.
#[inline(always)]
fn add_sample(key: &AggregateKey, period: u64) -> bool {
    match AGGREGATE.get_ptr_mut(key) {
        Some(value) => {
            use core::intrinsics::{AtomicOrdering, atomic_xadd};
            // SAFETY: the pointer is to a live map value; CPUs share it, so the adds are
            // atomic (their results are unused, so LLVM emits the plain BPF atomic add).
            unsafe {
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*value).count, 1);
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                    &raw mut (*value).events,
                    period,
                );
            }
            true
        }
        None => false,
    }
}
