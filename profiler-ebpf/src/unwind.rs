//! User stacks walked with unwind tables built from `.eh_frame` (see
//! `profiler_common::unwind`): one `bpf_loop` iteration per frame finds the frame's mapping
//! and row by binary search, computes the CFA, and reads the return address and saved rbp
//! with `bpf_probe_read_user`. Where there is no table (no mapping: JIT code; a module
//! without `.eh_frame`; an address no FDE covers), that frame is walked with the frame
//! pointer, as `bpf_get_stack` would.

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, bpf_user_pt_regs_t},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_get_stack, bpf_probe_read_user,
        bpf_task_pt_regs, generated, generated::bpf_loop,
    },
    macros::{map, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::{PerfEventContext, TracePointContext},
};
use profiler_common::{
    MAX_STACK_DEPTH, MAX_WALK_WORDS, WalkStack,
    hotspot::{HS_BLOCK_BYTES, HsProc},
    kernel_features,
    python::PyProc,
    record_flags,
    runtimes::{MAX_GROUP_WORDS, MAX_MARKS, RtMark, RtProc},
    stack::{STACK_COPY_BLOCK, STACK_COPY_BYTES, STACK_COPY_HEAD_WORDS, StackSampleHeader},
    unwind::{
        DEFAULT_UNWIND_ROWS, FENCES_PER_ENTRY, MAX_PROC_MAPPINGS, MAX_UNWIND_PROCS, ProcUnwind,
        ROWS_PENDING, ROWS_PER_FENCE, UnwindMapping, UnwindRow, cfa, fence_entries, proc_runtimes,
    },
    v8::V8Proc,
};

use crate::{
    hotspot, python,
    regs::{self, UserRegs},
    rt,
    sampler::kernel_has,
    v8,
};

/// Bytes of one stack's frames, the size every copy of one is made with.
pub(crate) const STACK_BYTES: u32 = (MAX_STACK_DEPTH * 8) as u32;

/// Every module's rows, each module a sorted run (user space sizes the array at load).
#[map]
static UNWIND_ROWS: Array<UnwindRow> =
    Array::with_max_entries(DEFAULT_UNWIND_ROWS, aya_ebpf::bindings::BPF_F_MMAPABLE);
shared_name!(map UNWIND_ROWS);

/// Every [`ROWS_PER_FENCE`]th row's pc, written with the rows (user space sizes it with them).
#[map]
static UNWIND_FENCES: Array<[u32; FENCES_PER_ENTRY as usize]> = Array::with_max_entries(
    fence_entries(DEFAULT_UNWIND_ROWS),
    aya_ebpf::bindings::BPF_F_MMAPABLE,
);
shared_name!(map UNWIND_FENCES);

/// Per process (tgid): its executable mappings and where their tables are.
#[map]
static UNWIND_PROCS: HashMap<u32, ProcUnwind> =
    HashMap::with_max_entries(MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map UNWIND_PROCS);

/// Stack copies made per process (tgid) while it has no tables: each process gets
/// [`COPY_BUDGET`] (its first moments, which its tables normally follow within
/// milliseconds); past that its samples carry no user stack (marked, counted), so a process
/// whose tables never come cannot fill the ring with copies.
#[map]
static COPIES: LruHashMap<u32, u32> = LruHashMap::with_max_entries(MAX_UNWIND_PROCS, 0);
shared_name!(map COPIES);

/// Copies one process may make before its tables are loaded (16 KiB each at most).
const COPY_BUDGET: u32 = 256;

/// The stack bytes copied into the ring since `COPY_WINDOW[0]` (ns), all CPUs together.
#[map]
static COPY_WINDOW: Array<[u64; 2]> = Array::with_max_entries(1, 0);
shared_name!(map COPY_WINDOW);

/// The window over which copies are limited to a share of the ring.
const COPY_WINDOW_NS: u64 = 100_000_000;

/// Copies a process's waits may make past [`COPY_BUDGET`] (see [`copy_allowed`]).
const WAIT_COPIES: u32 = 64;

/// Whether process `tgid` may copy its stack into one more record: within its budget, and
/// while the copies of the last [`COPY_WINDOW_NS`] (of every process, on every CPU) stay
/// under a share of the ring's wake-up mark `wakeup_bytes` (a burst of new processes on a
/// busy host must not fill the ring with copies and lose samples). A `wait` (an off-CPU
/// record, weighing its whole time away, often a hundred samples' worth) goes first: samples
/// stop at half the mark and at the budget, waits at the mark and [`WAIT_COPIES`] past it,
/// so a process's first sleep is not lost to the copies of the spinning before it.
#[inline(always)]
pub(crate) fn copy_allowed(tgid: u32, now: u64, wakeup_bytes: u64, wait: bool) -> bool {
    let (limit, budget) = if wait {
        (wakeup_bytes, COPY_BUDGET + WAIT_COPIES)
    } else {
        (wakeup_bytes / 2, COPY_BUDGET)
    };
    let Some(w) = COPY_WINDOW.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: a live map value shared by CPUs; a lost update only shifts the limit a little.
    unsafe {
        if now.wrapping_sub((*w)[0]) >= COPY_WINDOW_NS {
            (*w)[0] = now;
            (*w)[1] = 0;
        }
        if (*w)[1] >= limit {
            return false;
        }
    }
    copy_budget(tgid, budget)
}

/// Counts `bytes` copied into the current window.
#[inline(always)]
pub(crate) fn copied_bytes(bytes: u64) {
    if let Some(w) = COPY_WINDOW.get_ptr_mut(0) {
        use core::intrinsics::{AtomicOrdering, atomic_xadd};
        // SAFETY: a live map value; CPUs add to it concurrently, so the add is atomic.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*w)[1], bytes) };
    }
}

/// Whether process `tgid` has copies left in its budget (without taking one).
#[inline(always)]
fn copies_left(tgid: u32) -> bool {
    // SAFETY: a plain map lookup; the value is only read.
    unsafe { COPIES.get(tgid) }.is_none_or(|n| *n < COPY_BUDGET)
}

/// Whether process `tgid` has copies left in `budget` (and takes one).
#[inline(always)]
fn copy_budget(tgid: u32, budget: u32) -> bool {
    match COPIES.get_ptr_mut(tgid) {
        Some(n) => {
            // SAFETY: a live map value; a lost increment between CPUs only grants one more.
            unsafe {
                if *n >= budget {
                    return false;
                }
                *n += 1;
            }
            true
        }
        None => COPIES.insert(tgid, 1, 0).is_ok(),
    }
}

/// The walk in progress on this CPU (the frames are too large for the BPF stack).
#[repr(C)]
pub(crate) struct Walk {
    pub(crate) pc: u64,
    pub(crate) sp: u64,
    pub(crate) bp: u64,
    /// aarch64's link register while it may still hold this frame's return address (the
    /// sampled frame, or one a signal interrupted); 0 otherwise, and on x86-64.
    lr: u64,
    /// Non-zero: `pc` is an interrupted instruction (the first frame, or the frame a signal
    /// interrupted), not a return address, so its row is looked up at `pc`, not `pc - 1`.
    exact: u32,
    /// `record_flags` bits.
    pub(crate) flags: u32,
    /// The Python walk (`crate::python`): its state, the next Python frame to write, whether
    /// an eval call's Python frames are being written (the native walk waits meanwhile), and
    /// whether the native walk ended at that eval call's caller.
    pub(crate) py_state: u32,
    pub(crate) py_emit: u32,
    pub(crate) py_frame: u64,
    /// The innermost eval call's run of Python frames, checked where it ends
    /// (`crate::python::end_run`) and given back to the next eval call out if it was a
    /// caller's: whether to check, 3.11-3.12's `_PyCFrame` it was found through (else 0),
    /// where its words start, its first frame and the eval call's own pc.
    pub(crate) py_run_check: u32,
    pub(crate) py_run_at: u32,
    pub(crate) py_cframe: u64,
    pub(crate) py_run_frame: u64,
    pub(crate) py_eval_pc: u64,
    pub(crate) native_done: u32,
    /// Non-zero: a frame is in a module whose table is still being built (or in no known
    /// mapping); the walk stopped there (marked partial), or, in a V8 process, went on by
    /// frame pointer. The caller copies the stack for user space to walk whole once it can
    /// ([`Walk::wants_copy`]), or, past the copy budget, keeps the frames walked: exact,
    /// never guessed past that frame (but for V8's frame-pointer frames).
    pending: u32,
    pub(crate) tgid: u32,
    /// The process's `proc_runtimes` bits.
    pub(crate) runtimes: u32,
    /// The process's V8 entry (`enabled` 0 when it runs none): JS frames are found where
    /// the walk goes by frame pointer ([`v8::js_frame`]).
    pub(crate) v8: V8Proc,
    /// Where [`v8::js_frame`] and [`hotspot::step`] read user words to (a map value, so
    /// not the BPF stack).
    pub(crate) scratch: u64,
    /// The sampled task's user r13 (0 when unknown): HotSpot's interpreter keeps the
    /// running frame's bytecode pointer there.
    pub(crate) r13: u64,
    /// The process's HotSpot entry (`enabled` 0 when it runs none): PCs in its code cache
    /// are walked by [`hotspot::step`].
    pub(crate) hs: HsProc,
    /// [`hotspot::step`]'s values between its reads (kept here, not on the BPF stack: it
    /// runs two calls below the program, whose frames may not pass 512 bytes together).
    pub(crate) hs_v: [u64; 4],
    /// [`hotspot::step`]'s caller pc until the frame is written.
    pub(crate) pc_next: u64,
    /// [`hotspot::step`]'s `top`.
    pub(crate) hs_top: u32,
    _pad1: u32,
    /// Where [`hotspot::step`] reads a code block's header and blob fields to.
    pub(crate) hs_block: [u8; HS_BLOCK_BYTES as usize + 8],
    /// The frames walked (`len` of them), laid out as the in-kernel aggregation keeps a
    /// stack, so one of at most MAX_STACK_DEPTH words is stored from here without a copy.
    pub(crate) stack: WalkStack,
    /// The process's runtime hooks (`crate::rt`), the native frames marked, and the runtime
    /// frames that replace them (`groups`, spliced through `out`).
    pub(crate) hooks: RtProc,
    pub(crate) marks_len: u32,
    pub(crate) groups_len: u32,
    /// A runtime's or the splice's place in its loop (kept here, a map value, not in the
    /// loop's context on the BPF stack: the verifier tracks stack values precisely, so
    /// counters there made it verify the loop's body again for each count).
    pub(crate) loop_at: [u64; 6],
    /// A runtime's record read in one helper call (a Ruby control frame), here rather than
    /// on the BPF stack: a 64-byte stack buffer filled by a read of variable size made
    /// 7.x's verifier pass a million instructions.
    pub(crate) rt_words: [u64; 8],
    pub(crate) marks: [RtMark; MAX_MARKS],
    pub(crate) groups: [u64; MAX_GROUP_WORDS],
    pub(crate) out: [u64; MAX_WALK_WORDS],
    /// A window of the user stack read in one helper call (`win_len` bytes from `win_at`;
    /// 0: none yet), which the next frames' return addresses and saved registers are read
    /// from: one read per few frames instead of two per frame ([`Walk::stack_word`]).
    win_at: u64,
    win_len: u64,
    /// The word [`unwind_fill_window`] was asked for.
    win_word: u64,
    win: [u64; WINDOW_WORDS],
    /// [`unwind_find_row`]'s bounds between its steps.
    search: [u32; 2],
}

/// Words of the user stack read at once (1 KiB: a few frames of most code).
const WINDOW_WORDS: usize = 128;

// A per-CPU map value may not pass 32 KiB (PCPU_MIN_UNIT_SIZE).
const _: () = assert!(core::mem::size_of::<Walk>() <= 32 << 10);

#[map]
static WALK: PerCpuArray<Walk> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map WALK);

/// When this CPU last woke the reader for a frame in an unknown mapping (ns).
#[map]
static WOKE_AT: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map WOKE_AT);

/// When some CPU last woke the reader for a record with a runtime's frames (ns; one slot
/// for all CPUs, updated without a lock: a race costs one extra wake-up).
#[map]
static RUNTIME_WOKE_AT: Array<u64> = Array::with_max_entries(1, 0);
shared_name!(map RUNTIME_WOKE_AT);

/// Least time between two wake-ups for unknown mappings on one CPU: JIT code is in no
/// mapping for good, and must not wake the reader at every sample.
const MAPPING_WAKEUP_NS: u64 = 10_000_000;

/// Whether a record with these `record_flags` should wake the reader at once: always for a
/// process without tables (so it loads them), at most every `MAPPING_WAKEUP_NS` per CPU for
/// a frame in an unknown mapping (a library just loaded), at most every `runtime_ns`
/// (`SamplerConfig::runtime_wakeup_ns`) over all CPUs for a runtime's frames: their names
/// are read from the process's memory, so a record should reach the reader before the
/// process exits, without a wake-up per sample of a busy host.
#[inline(always)]
pub(crate) fn wake_reader(flags: u32, now: u64, runtime_ns: u64) -> bool {
    if flags & record_flags::UNWIND_NO_PROCESS != 0 {
        return true;
    }
    let (slot, least) = if flags & record_flags::UNWIND_NO_MAPPING != 0 {
        (WOKE_AT.get_ptr_mut(0), MAPPING_WAKEUP_NS)
    } else if flags & (record_flags::RUNTIME_FRAMES | record_flags::GO_LABELS) != 0 {
        (RUNTIME_WOKE_AT.get_ptr_mut(0), runtime_ns)
    } else {
        return false;
    };
    let Some(last) = slot else {
        return false;
    };
    // SAFETY: a live map value: this CPU's slot (perf_event programs do not nest on one
    // CPU), or the shared one, whose racing writes only cost a wake-up.
    unsafe {
        if now.wrapping_sub(*last) < least {
            return false;
        }
        *last = now;
    }
    true
}

/// What a `bpf_loop` iteration needs, on the caller's stack.
#[repr(C)]
struct LoopCtx {
    walk: *mut Walk,
    proc_: *const ProcUnwind,
    /// This CPU's copy of the process's CPython entry ([`python::process`]).
    py: *const PyProc,
}

/// The outcome of [`walk_user`].
#[derive(Clone, Copy)]
pub(crate) enum Walked {
    Done(&'static Walk),
    /// The process has no tables yet: the caller copies the stack for user space to walk
    /// once they are loaded.
    NoProcess,
    /// No user context (a kernel thread).
    NoUser,
}

/// Walks the current task's user stack into this CPU's [`Walk`].
#[inline(always)]
pub(crate) fn walk_user(ctx: &PerfEventContext, tgid: u32) -> Walked {
    let Some(regs) = user_regs(ctx) else {
        return Walked::NoUser;
    };
    // r13 only from a sample taken in user mode (a task in the kernel stopped in a
    // syscall or fault, where HotSpot's interpreter frame slot holds the bcp too).
    // SAFETY: the context is readable.
    let r13 = unsafe {
        let regs = &(*ctx.ctx).regs;
        if regs::user_mode(regs) {
            regs::hotspot_bcp(regs)
        } else {
            0
        }
    };
    walk_user_from(regs, r13, tgid)
}

/// Walks the current task's user stack from its user registers (and r13, 0 when unknown).
#[inline(always)]
pub(crate) fn walk_user_from(regs: UserRegs, r13: u64, tgid: u32) -> Walked {
    // SAFETY: a plain map lookup; the value is only read.
    let Some(proc_) = (unsafe { UNWIND_PROCS.get(tgid) }) else {
        return Walked::NoProcess;
    };
    let Some(walk) = WALK.get_ptr_mut(0) else {
        return Walked::NoUser;
    };
    // Only the runtimes the process has are looked up (each lookup a helper call).
    let has = proc_.runtimes;
    // SAFETY: this CPU's slot; perf_event programs do not nest on one CPU.
    unsafe {
        (*walk).pc = regs.pc;
        (*walk).sp = regs.sp;
        (*walk).bp = regs.bp;
        (*walk).lr = regs.lr;
        (*walk).stack.len = 0;
        (*walk).exact = 1;
        (*walk).flags = record_flags::UNWIND_TABLES;
        (*walk).py_state = python::NOT_STARTED;
        (*walk).py_emit = 0;
        (*walk).py_frame = 0;
        (*walk).py_run_check = 0;
        (*walk).native_done = 0;
        (*walk).pending = 0;
        (*walk).win_len = 0;
        (*walk).tgid = tgid;
        (*walk).runtimes = has;
        (*walk).r13 = r13;
        (*walk).v8 = v8::process(tgid, has & proc_runtimes::V8 != 0);
        hotspot::load(tgid, has & proc_runtimes::HOTSPOT != 0, &mut (*walk).hs);
        rt::load(&mut *walk, tgid, has & proc_runtimes::HOOKS != 0);
    }
    let py = python::process(tgid, has & proc_runtimes::PYTHON != 0);
    if py.is_null() {
        return Walked::NoUser;
    }
    let mut lctx = LoopCtx {
        walk,
        proc_: proc_ as *const ProcUnwind,
        py,
    };
    // SAFETY: `step` is a BPF callback taking (index, ctx); `lctx` outlives the call.
    unsafe {
        bpf_loop(
            MAX_WALK_WORDS as u32,
            step as *mut core::ffi::c_void,
            (&raw mut lctx).cast(),
            0,
        );
        rt::finish(&mut *walk);
    }
    // SAFETY: as above.
    Walked::Done(unsafe { &*walk })
}

impl Walk {
    /// Whether the walk stopped at a frame it could not walk yet (see `pending`).
    #[inline(always)]
    pub(crate) fn wants_copy(&self) -> bool {
        self.pending != 0
    }

    /// Whether the process is a Go process user space published for goroutine labels
    /// (only such a process has a `GO_PROCS` entry: the others pay no lookup).
    #[inline(always)]
    pub(crate) fn go_labels(&self) -> bool {
        self.runtimes & proc_runtimes::GO != 0
    }
}

/// Writes a user stack to `dst` (room for `ROOM` words, at least MAX_STACK_DEPTH), for the
/// sampler and the off-CPU program alike: a finished table walk's frames (its flags into
/// `header`; the outermost frames past `ROOM` cut, marked partial), else the frame-pointer
/// walk, `bpf_get_stack` on the program's context `ctx`, keeping `leaf_ret()` in `header`
/// (the leaf's return address if it has not linked a frame yet: x86-64's word at the stack
/// pointer, aarch64's link register; user space recovers the caller of a leaf without a
/// frame-pointer prologue from it). Returns the frames written; `None` when `bpf_get_stack`
/// failed (the caller counts it).
///
/// # Safety
/// `dst` has room for `ROOM` words; `header` is the record's, in the same buffer.
#[inline(always)]
pub(crate) unsafe fn user_frames<const ROOM: usize>(
    ctx: *mut core::ffi::c_void,
    walked: Option<&Walk>,
    leaf_ret: impl FnOnce() -> Option<u64>,
    header: *mut StackSampleHeader,
    dst: *mut u64,
) -> Option<usize> {
    const { assert!(ROOM >= MAX_STACK_DEPTH && ROOM <= MAX_WALK_WORDS) };
    // SAFETY: the caller's buffer; every write is of at most ROOM words to `dst`.
    unsafe {
        if let Some(walk) = walked {
            let len = walk.stack.len as usize;
            let n = if len > ROOM {
                (*header).flags |= record_flags::UNWIND_PARTIAL;
                ROOM
            } else {
                len
            };
            // Only the words walked: a deep walk is long, most are short.
            generated::bpf_probe_read_kernel(
                dst.cast(),
                (n * 8) as u32,
                walk.stack.frames.as_ptr().cast(),
            );
            (*header).flags |= walk.flags;
            return Some(n);
        }
        if let Some(word) = leaf_ret() {
            (*header).leaf_ret = word;
            (*header).flags |= record_flags::LEAF_RET;
        }
        let n = bpf_get_stack(ctx, dst.cast(), STACK_BYTES, BPF_F_USER_STACK as u64);
        (n >= 0).then(|| (n as usize / 8).min(MAX_STACK_DEPTH))
    }
}

/// Copies the sampled task's user registers and the stack above its stack pointer to `dst`
/// ([`profiler_common::stack::StackCopyHead`], then the bytes), for a process without tables:
/// the aligned [`STACK_COPY_BLOCK`]-byte blocks from the one holding rsp up, until one cannot
/// be read (the top of the stack) or [`STACK_COPY_BYTES`] are copied. Returns the bytes
/// copied.
///
/// # Safety
/// `dst` has room for `STACK_COPY_HEAD_WORDS` words and `STACK_COPY_BYTES` bytes.
#[inline(always)]
pub(crate) unsafe fn copy_user_stack(regs: UserRegs, dst: *mut u64) -> usize {
    let start = regs.sp & !(STACK_COPY_BLOCK as u64 - 1);
    let mut len = 0usize;
    // SAFETY: the caller's room; every read is of one block inside it.
    unsafe {
        *dst = regs.pc;
        *dst.add(1) = regs.sp;
        *dst.add(2) = regs.bp;
        *dst.add(3) = regs.lr;
        let bytes = dst.add(STACK_COPY_HEAD_WORDS).cast::<u8>();
        for i in 0..STACK_COPY_BYTES / STACK_COPY_BLOCK {
            let at = i * STACK_COPY_BLOCK;
            let rc = generated::bpf_probe_read_user(
                bytes.add(at).cast(),
                STACK_COPY_BLOCK as u32,
                (start + at as u64) as *const core::ffi::c_void,
            );
            if rc != 0 {
                break;
            }
            len = at + STACK_COPY_BLOCK;
        }
        *dst.add(4) = len as u64;
    }
    len
}

/// The user registers of the sampled task: from the sample's registers when it was taken
/// in user mode, else from those saved on kernel entry.
#[inline(always)]
pub(crate) fn user_regs(ctx: &PerfEventContext) -> Option<UserRegs> {
    // SAFETY: the context is readable; the saved user registers are read with
    // bpf_probe_read_kernel, which tolerates any pointer.
    unsafe {
        let regs = &(*ctx.ctx).regs;
        if regs::user_mode(regs) {
            return Some(regs::user_regs(regs));
        }
    }
    saved_user_regs()
}

/// The user registers the current task saved on kernel entry (`None` for a kernel
/// thread, and on kernels without `bpf_task_pt_regs`, before 5.15: the check on the loader's
/// constant lets the verifier drop the call there).
#[inline(always)]
pub(crate) fn saved_user_regs() -> Option<UserRegs> {
    if !kernel_has(kernel_features::TASK_PT_REGS) {
        return None;
    }
    // SAFETY: the helpers return the current task and its saved registers, which are read
    // with bpf_probe_read_kernel, which tolerates any pointer.
    unsafe {
        // The kernel's pt_regs starts with the user-visible registers on both architectures.
        let user = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const bpf_user_pt_regs_t;
        if user.is_null() {
            return None;
        }
        // None for a kernel thread: no user context.
        regs::saved(user)
    }
}

/// One frame: record `pc` (or, for a CPython eval call, the Python frames it runs, over
/// the next iterations), then find the caller's pc, sp and bp. Returns 1 to stop.
extern "C" fn step(_index: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the LoopCtx `walk_user` passed, whose pointers are to map values.
    let (w, p, py) = unsafe {
        let c = &*(ctx as *const LoopCtx);
        (&mut *c.walk, &*c.proc_, &*c.py)
    };
    if w.py_emit != 0 {
        return python::step(w, py);
    }
    let n = w.stack.len as usize;
    if n >= MAX_WALK_WORDS {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return 1;
    }
    if w.pc == 0 {
        w.stack.frames[n] = 0;
        w.stack.len += 1;
        return 1;
    }
    let at = if w.exact != 0 { w.pc } else { w.pc - 1 };
    w.exact = 0;
    python::check_begins(w, py, at);
    rt::mark(w, at);
    // An eval call's Python frames take its place (from this slot) once its caller is found.
    w.stack.frames[n] = w.pc;
    if w.py_emit == 0 {
        w.stack.len += 1;
    }
    let r = native_step(w, p, py, at);
    if r != 0 && w.py_emit != 0 {
        // The native walk ends here, after the eval call's Python frames.
        w.native_done = 1;
        return 0;
    }
    r
}

/// The caller of the native frame at `at` (its pc, sp and bp into `w`); `py` is the
/// process's CPython entry (empty when it runs none). Returns 1 to stop.
#[inline(always)]
fn native_step(w: &mut Walk, p: &ProcUnwind, py: &PyProc, at: u64) -> i64 {
    let top = u32::from(at == w.pc);
    // JVM code (JIT, interpreter, stubs) has no tables and is mapped without end.
    if hotspot::owns(w, at) {
        return match hotspot::step(w, top) {
            hotspot::Step::Next => i64::from(w.pc == 0),
            hotspot::Step::Stop => 1,
            hotspot::Step::FramePointer => frame_pointer_step(w, top),
        };
    }
    let Some(m) = find_mapping(p, at) else {
        // Mapped since the process's tables were read (its entry lists every executable
        // mapping, anonymous ones too): a library just loaded, whose frames the frame
        // pointer would only guess. The stack is copied, for user space to walk once it
        // has read the mappings again, while the process has copies left; past them (code
        // mapped and unmapped without end: a JIT), the frame pointer, the record marked.
        w.flags |= record_flags::UNWIND_NO_MAPPING;
        // Not in a V8 process: its JIT code is mapped without end, and walked through
        // here (frame pointers, JS frames named) rather than copied.
        if w.v8.enabled == 0 && copies_left(w.tgid) {
            w.pending = 1;
            w.flags |= record_flags::UNWIND_PARTIAL;
            return 1;
        }
        return frame_pointer_step(w, top);
    };
    if m.rows_len == 0 {
        if m.rows_start == ROWS_PENDING {
            w.pending = 1;
            // A V8 process's JS frames, and the builtins between them, keep frame pointers:
            // while its big module's table is built, its walk goes on by them (below), and is
            // kept when the stack cannot be copied (its copies spent, or the ring's share of
            // copies taken by other new processes), so its JS frames are not cut at the
            // module's first frame (an interpreter trampoline in node). (One frame-pointer
            // step for both cases: each inlined copy of it costs the 7.x verifier dearly.)
            if w.v8.enabled == 0 {
                w.flags |= record_flags::UNWIND_PARTIAL;
                return 1;
            }
        } else if python::perf_trampoline(w, py) {
            // Code without a table (anonymous memory: JIT code, `python -X perf`'s
            // trampolines; a module without `.eh_frame`).
            return 0;
        }
        return frame_pointer_step(w, top);
    }
    if at < m.bias || at - m.bias > u64::from(u32::MAX) {
        return frame_pointer_step(w, top);
    }
    let Some(row) = find_row(w, m.rows_start, m.rows_len, (at - m.bias) as u32) else {
        return frame_pointer_step(w, top);
    };
    let cfa_addr = match row.cfa & cfa::KIND {
        cfa::RSP => w.sp + u64::from(row.cfa_offset),
        cfa::RBP => w.bp + u64::from(row.cfa_offset),
        cfa::PLT => w.sp + u64::from(row.cfa_offset) + if w.pc & 15 >= 11 { 8 } else { 0 },
        cfa::END => return 1,
        cfa::SIGNAL => return signal_step(w),
        _ => return frame_pointer_step(w, top),
    };
    // The caller's stack is above this frame's (or, for a frame that pushed nothing and
    // returns through the link register, at it): anything else is a corrupt walk.
    let ra_at = row.return_address_at(cfa_addr);
    if cfa_addr < w.sp || (cfa_addr == w.sp && ra_at.is_some()) {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return 1;
    }
    // Only a frame whose registers the walk has can return through the link register.
    let ra = match ra_at {
        Some(at) => w.stack_word(at),
        None => (w.lr != 0).then_some(w.lr),
    };
    let Some(ra) = ra else {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return 1;
    };
    if let Some(at) = row.saved_bp_at(cfa_addr) {
        match w.stack_word(at) {
            Some(bp) => w.bp = bp,
            None => {
                w.flags |= record_flags::UNWIND_PARTIAL;
                return 1;
            }
        }
    }
    w.sp = cfa_addr;
    w.pc = regs::strip_ra(ra);
    w.lr = 0;
    // A zero return address ends the chain (what `_start`'s caller slot holds).
    if w.pc == 0 { 1 } else { 0 }
}

/// The rt_sigreturn trampoline: the interrupted frame's registers are in the ucontext at sp.
#[inline(always)]
fn signal_step(w: &mut Walk) -> i64 {
    let (Some(bp), Some(sp), Some(pc)) = (
        w.stack_word(w.sp + regs::SIGNAL.bp),
        w.stack_word(w.sp + regs::SIGNAL.sp),
        w.stack_word(w.sp + regs::SIGNAL.pc),
    ) else {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return 1;
    };
    // The interrupted frame's link register, which may hold its return address.
    w.lr = match regs::SIGNAL.lr {
        Some(at) => w.stack_word(w.sp + at).map_or(0, regs::strip_ra),
        None => 0,
    };
    w.bp = bp;
    w.sp = sp;
    w.pc = pc;
    w.exact = 1;
    0
}

/// A frame without a table row: its caller through the frame pointer (first, in a V8
/// process, the frame is written as a JS frame if it is one; `top`: its pc is the stopped
/// instruction). A zero rbp is the outermost frame of frame-pointer code; one below the stack
/// pointer is not a frame.
#[inline(always)]
fn frame_pointer_step(w: &mut Walk, top: u32) -> i64 {
    v8::js_frame(w, top);
    w.flags |= record_flags::UNWIND_FP;
    if w.bp == 0 {
        return 1;
    }
    if w.bp < w.sp {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return 1;
    }
    let (Some(next_bp), Some(ra)) = (w.stack_word(w.bp), w.stack_word(w.bp + 8)) else {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return 1;
    };
    w.sp = w.bp + 16;
    w.bp = next_bp;
    w.pc = regs::strip_ra(ra);
    w.lr = 0;
    if w.pc == 0 { 1 } else { 0 }
}

impl Walk {
    /// The user stack's word at `addr`: from the window when it holds it, else through
    /// [`unwind_fill_window`], which reads a new one.
    #[inline(always)]
    fn stack_word(&mut self, addr: u64) -> Option<u64> {
        let off = addr.wrapping_sub(self.win_at);
        if off < self.win_len && off & 7 == 0 {
            return Some(self.win[(off / 8) as usize & (WINDOW_WORDS - 1)]);
        }
        match returned(unwind_fill_window(self, addr)) {
            0 => None,
            _ => Some(self.win_word),
        }
    }
}

/// Reads the word at `addr` into `win_word` (returns 1; 0 when it cannot be read) and a new
/// window holding it: from the stack pointer when that is near (the walk reads upwards, and
/// every word of this frame is above it), else from `addr`, to at most the end of that page
/// (so the read cannot run past the top of the stack). A function of its own (see
/// [`returned`]).
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn unwind_fill_window(w: *mut Walk, addr: u64) -> u64 {
    // SAFETY: this CPU's walk, which the caller passed (null tested).
    let Some(w) = (unsafe { w.as_mut() }) else {
        return 0;
    };
    w.win_len = 0;
    if addr & 7 != 0 {
        // SAFETY: bpf_probe_read_user tolerates any address.
        return match unsafe { bpf_probe_read_user(addr as *const u64) } {
            Ok(v) => {
                w.win_word = v;
                1
            }
            Err(_) => 0,
        };
    }
    let near = w.sp & !7;
    let at = if near <= addr && addr - near < (WINDOW_WORDS as u64 * 4) && near >> 12 == addr >> 12
    {
        near
    } else {
        addr
    };
    let room = 4096 - (at & 4095);
    let len = returned(if room < WINDOW_WORDS as u64 * 8 {
        room
    } else {
        WINDOW_WORDS as u64 * 8
    });
    if len < 8 || len > WINDOW_WORDS as u64 * 8 {
        return 0;
    }
    // SAFETY: `len` bytes fit the window; bpf_probe_read_user tolerates any address.
    let rc = unsafe {
        generated::bpf_probe_read_user(
            w.win.as_mut_ptr().cast(),
            len as u32,
            at as *const core::ffi::c_void,
        )
    };
    if rc != 0 {
        return 0;
    }
    w.win_at = at;
    w.win_len = len;
    w.win_word = w.win[((addr - at) / 8) as usize & (WINDOW_WORDS - 1)];
    1
}

/// What a BPF function of its own returned, read so that LLVM cannot carry what it knows of
/// the function's body into the caller: it would drop checks the verifier asks of the
/// caller (an index's mask, a `bpf_loop` callback's 0 or 1).
///
/// A function of its own is a global one (`#[unsafe(no_mangle)] extern "C"`): the verifier
/// checks it once, alone, with unknown arguments (pointers to be tested for null), and at a
/// call only that the arguments fit. Inlined, or as a static BPF function, its code is
/// checked again for every state the walk reaches it in: the binary searches for a frame's
/// mapping and row were 270k of `record_sample`'s 397k verified instructions natively.
#[inline(always)]
pub(crate) fn returned(v: u64) -> u64 {
    // SAFETY: a read of a local.
    unsafe { core::ptr::read_volatile(&v) }
}

/// The mapping holding `addr` (mappings are sorted and disjoint).
#[inline(always)]
fn find_mapping(p: &ProcUnwind, addr: u64) -> Option<&UnwindMapping> {
    match returned(unwind_find_mapping(p, addr)) {
        0 => None,
        i => Some(&p.mappings[(i - 1) as usize & (MAX_PROC_MAPPINGS - 1)]),
    }
}

/// [`find_mapping`] as a function of its own (see [`returned`]): the index of the mapping
/// plus one, 0 for none.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn unwind_find_mapping(p: *const ProcUnwind, addr: u64) -> u64 {
    // SAFETY: a map value the caller passed (null tested).
    match unsafe { p.as_ref() }.and_then(|p| mapping_index(p, addr)) {
        Some(i) => u64::from(i) + 1,
        None => 0,
    }
}

#[inline(always)]
fn mapping_index(p: &ProcUnwind, addr: u64) -> Option<u32> {
    let mut lo = 0u32;
    let mut hi = p.count.min(MAX_PROC_MAPPINGS as u32);
    // log2(MAX_PROC_MAPPINGS) + 1 halvings find any entry.
    for _ in 0..9 {
        if lo >= hi {
            return None;
        }
        let mid = (lo + hi) / 2;
        let m = &p.mappings[mid as usize & (MAX_PROC_MAPPINGS - 1)];
        if addr < m.start {
            hi = mid;
        } else if addr >= m.end {
            lo = mid + 1;
        } else {
            return Some(mid);
        }
    }
    None
}

/// The last row at or before `pc` in `UNWIND_ROWS[start..start + len]`.
#[inline(always)]
fn find_row(w: &mut Walk, start: u32, len: u32, pc: u32) -> Option<UnwindRow> {
    match returned(unwind_find_row(w, start, len, pc)) {
        0 => None,
        i => UNWIND_ROWS.get((i - 1) as u32).copied(),
    }
}

/// [`find_row`] as a function of its own (see [`returned`]): the row's index plus one, 0 for
/// none. `w` is this CPU's walk, whose `search` holds the search's bounds.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn unwind_find_row(w: *mut Walk, start: u32, len: u32, pc: u32) -> u64 {
    // SAFETY: this CPU's walk, which the caller passed (null tested).
    match unsafe { w.as_mut() }.and_then(|w| row_index(&mut w.search, start, len, pc)) {
        Some(i) => u64::from(i) + 1,
        None => 0,
    }
}

/// A search's bounds, kept in map memory between its steps: read back from there, they are
/// values the verifier knows nothing of, so every step's two outcomes meet in one state. Kept
/// in registers, each step's bounds are new ranges, and the steps' outcomes multiply (a
/// search of the fences and then of a block passed the verifier's million instructions).
#[inline(always)]
fn bounds(at: &[u32; 2]) -> (u32, u32) {
    // SAFETY: reads of a map value's fields.
    unsafe {
        (
            core::ptr::read_volatile(&at[0]),
            core::ptr::read_volatile(&at[1]),
        )
    }
}

#[inline(always)]
fn set_bounds(at: &mut [u32; 2], lo: u32, hi: u32) {
    // SAFETY: writes of a map value's fields.
    unsafe {
        core::ptr::write_volatile(&mut at[0], lo);
        core::ptr::write_volatile(&mut at[1], hi);
    }
}

/// The run's fences are those of the indices `k * ROWS_PER_FENCE` inside it: its own rows'
/// pcs, sorted. The last fence at or below `pc` bounds the answer to its block of rows (or
/// to the rows before the run's first fence), which is then halved.
#[inline(always)]
fn row_index(at: &mut [u32; 2], start: u32, len: u32, pc: u32) -> Option<u32> {
    let first = *UNWIND_ROWS.get(start)?;
    if first.pc > pc {
        return None;
    }
    let end = start.saturating_add(len);
    let (first_fence, end_fence) = (start.div_ceil(ROWS_PER_FENCE), end.div_ceil(ROWS_PER_FENCE));
    let fence = |k: u32| -> Option<u32> {
        let entry = UNWIND_FENCES.get(k / FENCES_PER_ENTRY)?;
        Some(entry[(k % FENCES_PER_ENTRY) as usize])
    };
    if first_fence < end_fence && fence(first_fence)? <= pc {
        // Invariant: fence(lo) <= pc, and the answer's fence is below hi. 2^24 rows have
        // 2^18 fences.
        set_bounds(at, first_fence, end_fence);
        for _ in 0..19 {
            let (lo, hi) = bounds(at);
            if hi <= lo + 1 {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            if fence(mid)? <= pc {
                set_bounds(at, mid, hi);
            } else {
                set_bounds(at, lo, mid);
            }
        }
        let (k, _) = bounds(at);
        let lo = k.checked_mul(ROWS_PER_FENCE)?;
        set_bounds(at, lo, lo.saturating_add(ROWS_PER_FENCE).min(end));
    } else {
        set_bounds(at, start, (first_fence * ROWS_PER_FENCE).min(end));
    }
    // Invariant: rows[lo].pc <= pc, and the answer is below hi; at most ROWS_PER_FENCE rows.
    for _ in 0..7 {
        let (lo, hi) = bounds(at);
        if hi <= lo + 1 {
            break;
        }
        let mid = lo + (hi - lo) / 2;
        if UNWIND_ROWS.get(mid)?.pc <= pc {
            set_bounds(at, mid, hi);
        } else {
            set_bounds(at, lo, mid);
        }
    }
    Some(bounds(at).0)
}

/// `sched:sched_process_exec`: the process's old mappings are gone, so are its tables; its
/// next sample asks user space for the new image's.
#[tracepoint]
pub fn unwind_exec(_ctx: TracePointContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let _ = UNWIND_PROCS.remove(tgid);
    let _ = COPIES.remove(tgid);
    crate::golabels::forget(tgid);
    python::forget(tgid);
    v8::forget(tgid);
    hotspot::forget(tgid);
    rt::forget(tgid);
    0
}

/// `sched:sched_process_exit`: a process's entry goes when its leader exits (other threads
/// exiting leave it alone).
#[tracepoint]
pub fn unwind_exit(_ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if pid_tgid >> 32 == pid_tgid & 0xffff_ffff {
        let _ = UNWIND_PROCS.remove((pid_tgid >> 32) as u32);
        let _ = COPIES.remove((pid_tgid >> 32) as u32);
        crate::golabels::forget((pid_tgid >> 32) as u32);
        python::forget((pid_tgid >> 32) as u32);
        v8::forget((pid_tgid >> 32) as u32);
        hotspot::forget((pid_tgid >> 32) as u32);
        rt::forget((pid_tgid >> 32) as u32);
    }
    0
}
