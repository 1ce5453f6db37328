//! CPython frames in the user walk (`crate::unwind`): where a native frame's PC is in a
//! Python process's eval loop, that frame is replaced by the Python frames that eval call
//! runs, read from the interpreter's frame chain, so the stack reads Python → C → Python in
//! the order it was called, with every native frame between.
//!
//! The chain starts at the thread's `PyThreadState`, found as `pthread_getspecific` finds it
//! (the thread pointer from the task, the key from the process), which works for shared and
//! static builds alike. Each eval call owns: one frame on 3.6–3.10 (a `PyFrameObject`);
//! frames up to the one marked `is_entry` on 3.11; frames up to the shim frame the C stack
//! owns on 3.12+ (skipped). A frame is two words (`profiler_common::python::py_frame`).

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel, bpf_probe_read_user, generated::bpf_get_current_task},
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use profiler_common::{
    MAX_WALK_WORDS,
    python::{
        FRAME_OBJECT, INSTR_PTR, LASTI_BYTES, LASTI_UNITS, NONE, OWNED_BY_CSTACK, PREV_INSTR,
        PyProc, TSS_INT, TSS_PY_TSS_T, py_check, py_frame, py_frame_data,
    },
    record_flags,
    unwind::MAX_UNWIND_PROCS,
};

use crate::unwind::{Walk, returned};

/// The Python processes the walker knows, by tgid (user space adds them as it finds them).
#[map]
static PY_PROCS: HashMap<u32, PyProc> =
    HashMap::with_max_entries(MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map PY_PROCS);

/// The walk's Python state ([`Walk::py_state`]).
pub(crate) const NOT_STARTED: u32 = 0;
pub(crate) const WALKING: u32 = 1;
pub(crate) const FAILED: u32 = 2;

/// This CPU's copy of the walked process's entry: the walk always gets a pointer to it (an
/// entry whose eval ranges are empty when the process runs no CPython), so the walk's
/// callback is verified once, not once for "no Python" and again for "Python".
#[map]
static PY_CUR: PerCpuArray<PyProc> = PerCpuArray::with_max_entries(1, 0);
shared_name!(map PY_CUR);

/// This process's entry (copied to this CPU's [`PY_CUR`]); null only if that map is gone.
#[inline(always)]
pub(crate) fn process(tgid: u32, has: bool) -> *const PyProc {
    let Some(cur) = PY_CUR.get_ptr_mut(0) else {
        return core::ptr::null();
    };
    // SAFETY: this CPU's slot (perf_event programs do not nest on one CPU) and a map value
    // that is only read.
    unsafe {
        match has.then(|| PY_PROCS.get(tgid)).flatten() {
            Some(p) => *cur = *p,
            None => {
                (*cur).eval_end = 0;
                (*cur).cold_end = 0;
            }
        }
    }
    cur
}

/// Forgets a process (exec, exit).
#[inline(always)]
pub(crate) fn forget(tgid: u32) {
    let _ = PY_PROCS.remove(tgid);
}

#[inline(always)]
fn in_eval(p: &PyProc, at: u64) -> bool {
    (p.eval_start <= at && at < p.eval_end) || (p.cold_start <= at && at < p.cold_end)
}

/// Sets `w.py_emit` when the native frame at `at` is an eval call whose Python frames
/// replace it: the first such frame finds the thread's current Python frame. After a
/// failure (or once the chain is used up) eval frames stay native.
///
/// A function of its own (`python_check_begins`, see [`crate::unwind::returned`]), and it
/// answers through `w` rather than a return value: verified once, and every path through it
/// returns to the same verifier state, so the native step after it is verified once, not
/// once per way this can end (that multiplied the program's verification cost).
///
/// The function is called only for a frame in the eval loop (the test inline, so a native
/// frame pays no call).
#[inline(always)]
pub(crate) fn check_begins(w: &mut Walk, p: &PyProc, at: u64) {
    if in_eval(p, at) {
        returned(python_check_begins(w, p, at));
    }
}

/// [`check_begins`]'s function (returns 0: a global BPF function returns a scalar).
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn python_check_begins(w: *mut Walk, p: *const PyProc, at: u64) -> u64 {
    // SAFETY: the walk's and the process's map values the caller passed (null tested).
    if let (Some(w), Some(p)) = (unsafe { w.as_mut() }, unsafe { p.as_ref() }) {
        begins(w, p, at);
    }
    0
}

#[inline(always)]
fn begins(w: &mut Walk, p: &PyProc, at: u64) {
    if !in_eval(p, at) {
        return;
    }
    match w.py_state {
        NOT_STARTED => match current_frame(p) {
            Some((frame, cframe)) => {
                w.py_frame = frame;
                w.py_state = WALKING;
                // The innermost eval call's run, checked where it ends (`end_run`).
                w.py_cframe = cframe;
                w.py_run_check = 1;
                w.py_run_at = w.stack.len;
                w.py_run_frame = frame;
                w.py_eval_pc = w.pc;
            }
            None => {
                w.py_state = FAILED;
                w.flags |= record_flags::RUNTIME_ERROR;
                return;
            }
        },
        WALKING => {}
        _ => return,
    }
    if w.py_frame != 0 {
        w.py_emit = 1;
    }
}

/// The current thread's innermost Python frame (0 when it runs none), and on 3.11-3.12 the
/// address of the `_PyCFrame` it was found through (else 0).
#[inline(always)]
fn current_frame(p: &PyProc) -> Option<(u64, u64)> {
    let o = &p.offsets;
    let key = match p.tss_kind {
        TSS_PY_TSS_T => {
            let word = read(p.tss_key_addr)?;
            if word as u32 == 0 {
                return None; // not initialised yet
            }
            (word >> 32) as u32
        }
        TSS_INT => {
            let key = read(p.tss_key_addr)? as u32 as i32;
            if key < 0 {
                return None;
            }
            key as u32
        }
        _ => return None,
    };
    if key >= u32::from(p.tsd_first_block_keys) {
        return None;
    }
    // SAFETY: the current task's field at an offset read from this kernel's BTF, read with
    // bpf_probe_read_kernel, which tolerates any address.
    let thread: u64 = unsafe {
        let task = bpf_get_current_task();
        bpf_probe_read_kernel((task + u64::from(p.task_fsbase)) as *const u64).ok()?
    };
    if thread == 0 {
        return None;
    }
    let tstate = read(thread + u64::from(p.tsd_first_block) + 16 * u64::from(key) + 8)?;
    if tstate == 0 {
        return None;
    }
    let mut frame = read(tstate + u64::from(o.tstate_frame))?;
    let mut cframe = 0;
    if o.cframe_current_frame != NONE && frame != 0 {
        cframe = frame;
        frame = read(frame + u64::from(o.cframe_current_frame))?;
    }
    Some((frame, cframe))
}

/// One iteration of the walk while an eval call's Python frames are being written: writes
/// the next one (or skips the shim that ends the call on 3.12+). Returns 1 to end the walk.
/// A function of its own (`python_step`, see [`crate::unwind::returned`]).
#[inline(always)]
pub(crate) fn step(w: &mut Walk, p: &PyProc) -> i64 {
    // (The walk's callback must return 0 or 1, which the verifier is shown here.)
    i64::from(returned(python_step(w, p)) != 0)
}

/// [`step`]'s function.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn python_step(w: *mut Walk, p: *const PyProc) -> u64 {
    // SAFETY: the walk's and the process's map values the caller passed (null tested).
    let (Some(w), Some(p)) = (unsafe { w.as_mut() }, unsafe { p.as_ref() }) else {
        return 1;
    };
    frame_step(w, p) as u64
}

#[inline(always)]
fn frame_step(w: &mut Walk, p: &PyProc) -> i64 {
    let o = &p.offsets;
    let frame = w.py_frame;
    if frame == 0 {
        return end_call(w);
    }
    let Some(back) = read(frame + u64::from(o.frame_back)) else {
        return fail(w);
    };
    if o.frame_kind != FRAME_OBJECT {
        let Some(owner) = read_u8(frame + u64::from(o.frame_owner)) else {
            return fail(w);
        };
        if o.version >= 0x030c00 && owner == OWNED_BY_CSTACK {
            w.py_frame = back;
            return end_run(w, frame);
        }
    }
    let n = w.stack.len as usize;
    if n + 2 > MAX_WALK_WORDS {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return 1;
    }
    let (Some(code), Some(raw)) = (
        read(frame + u64::from(o.frame_code)),
        read(frame + u64::from(o.frame_instr)),
    ) else {
        return fail(w);
    };
    // A frame caught while being pushed (or freed) can hold words that are no code object
    // (0xffffffff was seen on 3.12) or point back at itself: end the walk with an error
    // rather than write hundreds of garbage frames.
    if back == frame || !plausible_object(code) {
        return fail(w);
    }
    let offset = match o.instr_kind {
        LASTI_BYTES => raw as u32 as i32,
        LASTI_UNITS => (raw as u32 as i32).wrapping_mul(2),
        PREV_INSTR | INSTR_PTR => raw.wrapping_sub(code + u64::from(o.code_adaptive)) as i32,
        _ => -1,
    };
    let check = match (
        read(code + u64::from(o.code_firstlineno)),
        read(code + u64::from(o.code_name)),
    ) {
        (Some(first), Some(name)) => py_check(first as u32 as i32, name),
        _ => 0,
    };
    w.stack.frames[n] = py_frame(code);
    w.stack.frames[n + 1] = py_frame_data(check, offset);
    w.stack.len += 2;
    w.flags |= record_flags::RUNTIME_FRAMES;
    w.py_frame = back;
    let ends = if o.frame_kind == FRAME_OBJECT {
        true
    } else if o.frame_is_entry != NONE {
        read_u8(frame + u64::from(o.frame_is_entry)).is_none_or(|e| e != 0)
    } else {
        false
    };
    if ends { end_run(w, w.py_cframe) } else { 0 }
}

/// An eval call's run of Python frames ends; for the innermost call, `own` is an address
/// that must be a local of its C frame: 3.12+'s shim frame that ends the run, 3.11's
/// `_PyCFrame` (0 when neither). Below its CFA (the caller's sp, found before the run was
/// written), or it is a caller's: the call had not made its frame current yet, or had
/// already popped it (a generator resumed by C), and the run is the next call's out. Its
/// native frame is put back and the run is written again there, as it would be a moment
/// later.
#[inline(always)]
fn end_run(w: &mut Walk, own: u64) -> i64 {
    if w.py_run_check != 0 {
        w.py_run_check = 0;
        let at = w.py_run_at as usize;
        if w.native_done == 0 && own >= w.sp && at < MAX_WALK_WORDS {
            w.stack.frames[at] = w.py_eval_pc;
            w.stack.len = at as u32 + 1;
            w.py_frame = w.py_run_frame;
        }
    }
    end_call(w)
}

/// `python -X perf` (3.12+) calls each eval loop through a copy of a four-instruction
/// trampoline in anonymous memory (no unwind table, no frame pointer): `sub $8,%rsp;
/// call *%rcx; add $8,%rsp; ret`. When the caller's pc returns into such a copy (the six
/// bytes before it are the `sub` and the `call`), its caller is found as that code says:
/// the return address at sp + 8, the CFA at sp + 16, rbp untouched. True when it was one.
#[inline(always)]
pub(crate) fn perf_trampoline(w: &mut Walk, p: &PyProc) -> bool {
    if p.eval_end == 0 || w.pc < 6 {
        return false;
    }
    let Some(code) = read(w.pc - 6) else {
        return false;
    };
    // 48 83 ec 08 (sub $8,%rsp), ff d1 (call *%rcx), little-endian.
    if code & 0xffff_ffff_ffff != 0xd1ff_08ec_8348 {
        return false;
    }
    let Some(ra) = read(w.sp + 8) else {
        return false;
    };
    w.sp += 16;
    w.pc = ra;
    true
}

/// The eval call's frames are written: the native walk resumes at its caller (already
/// found), unless it had ended there.
#[inline(always)]
fn end_call(w: &mut Walk) -> i64 {
    w.py_emit = 0;
    if w.native_done != 0 { 1 } else { 0 }
}

/// A frame that cannot be read: the rest of the walk is native.
#[inline(always)]
fn fail(w: &mut Walk) -> i64 {
    w.py_state = FAILED;
    w.flags |= record_flags::RUNTIME_ERROR;
    end_call(w)
}

/// An address a CPython object can have: 8-aligned, above the first page, in user space.
#[inline(always)]
fn plausible_object(addr: u64) -> bool {
    addr & 7 == 0 && (0x1000..1 << 56).contains(&addr)
}

#[inline(always)]
fn read(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user tolerates any address.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}

#[inline(always)]
fn read_u8(addr: u64) -> Option<u8> {
    // SAFETY: as `read`.
    unsafe { bpf_probe_read_user(addr as *const u8) }.ok()
}
