//! CRuby's frames (`profiler_common::ruby`): the sampled thread's execution context, its
//! control frames from the current one out, each written as three words into the walk's
//! groups, one group per marked `rb_vm_exec` frame (innermost first: a group ends at the
//! frame its `vm_exec` call pushed first, flagged `FINISH`). Named in user space.

use aya_ebpf::helpers::{
    bpf_probe_read_kernel, bpf_probe_read_user, generated, generated::bpf_get_current_task,
};
use profiler_common::{
    record_flags,
    ruby::{
        EC_GLOBAL, EC_MAIN_RACTOR, EC_TLS_DTV, EC_TLS_TPOFF, ENV_FLAG_LOCAL, EP_ME_CREF,
        EP_SPECVAL, FRAME_CFUNC, FRAME_FLAG_FINISH, FRAME_ISEQ, FRAME_MAGIC_CFUNC,
        FRAME_MAGIC_DUMMY, FRAME_MAGIC_MASK, FRAME_WORDS, IMEMO_MASK, IMEMO_MENT, IMEMO_SHIFT,
        IMEMO_SVAR, RubyProc, SVAR_CREF_OR_ME, ruby_frame,
    },
    runtimes::{MAX_GROUP_WORDS, MAX_MARKS, slots},
};

use crate::{
    rt,
    unwind::{Walk, returned},
};

/// Most control frames one walk looks at.
const MAX_CFPS: u32 = 256;
/// `VM_FRAME_MAGIC_IFUNC`: a block written in C (its "iseq" is not one).
const FRAME_MAGIC_IFUNC: u64 = 0x6666_0001;
/// `RBasic.flags`' type bits (`T_MASK`) and an imemo's type (`T_IMEMO`).
const T_MASK: u64 = 0x1f;
const T_IMEMO: u64 = 0x1a;

/// What the Ruby walk's loop gets: the walk and the process's state. Its place is in
/// `Walk::loop_at`: the next control frame, the end of the VM stack (no frame at or past
/// it), and the mark whose group is being written.
#[repr(C)]
struct RubyCx {
    walk: *mut Walk,
    proc_: *const RubyProc,
}

const CFP: usize = 0;
const END: usize = 1;
const MARK: usize = 2;
/// [`method_entry`]'s answer.
const CME: usize = 3;
/// Whether frames go to the slot past the last mark ([`EXTRA`]), that run has ended
/// ([`EXTRA_CLOSED`]), and the walk then reached the VM stack's end with frames in it
/// ([`EXTRA_DONE`]).
const EXTRA_AT: usize = 4;
const EXTRA: u64 = 1;
const EXTRA_CLOSED: u64 = 2;
const EXTRA_DONE: u64 = 3;

/// Writes the Ruby frames of the walk's marks (`rt::finish`).
#[inline(always)]
pub(crate) fn annotate(w: &mut Walk) {
    let Some(p) = rt::state::<RubyProc>(w.tgid, slots::RUBY) else {
        return;
    };
    let Some((cfp, end)) = frames(p) else {
        w.flags |= record_flags::RUNTIME_ERROR;
        return;
    };
    let mut mark = 0;
    if !next_mark(w, &mut mark, 0) {
        return;
    }
    w.loop_at[CFP] = cfp;
    w.loop_at[END] = end;
    w.loop_at[MARK] = u64::from(mark);
    w.loop_at[EXTRA_AT] = 0;
    // The slot past the last mark, for one run more (see `step`).
    let n = w.marks_len as usize;
    if n < MAX_MARKS {
        w.marks[n].group_len = 0;
    }
    let mut cx = RubyCx { walk: w, proc_: p };
    // SAFETY: `step` is a BPF callback taking (index, ctx); `cx` outlives the call.
    unsafe {
        generated::bpf_loop(
            MAX_CFPS,
            step as *mut core::ffi::c_void,
            (&raw mut cx).cast(),
            0,
        );
    }
    // One run more than the marks, with the native walk whole and the Ruby one to its
    // end: the innermost run's frame is pushed but its `vm_exec` not yet called (the
    // sample is in the C code that pushed it, as `rb_yield`). That run is not running:
    // dropped, each mark takes the next run's frames.
    if w.loop_at[EXTRA_AT] == EXTRA_DONE
        && !w.wants_copy()
        && w.flags & record_flags::UNWIND_PARTIAL == 0
    {
        drop_top_run(w);
    }
}

/// Gives each mark the frames of the run after it (see [`annotate`]). Constant bounds, not
/// inlined: verified once, whatever the caller's state.
#[inline(never)]
fn drop_top_run(w: &mut Walk) {
    let n = w.marks_len as usize;
    for k in 0..MAX_MARKS - 1 {
        if k >= n {
            break;
        }
        w.marks[k].group_start = w.marks[k + 1].group_start;
        w.marks[k].group_len = w.marks[k + 1].group_len;
    }
}

/// The thread's current control frame and the VM stack's end; `None` when the thread has
/// no execution context (or it cannot be read).
#[inline(always)]
fn frames(p: &RubyProc) -> Option<(u64, u64)> {
    let ec = match p.ec_source {
        EC_TLS_DTV => {
            // glibc: the TCB's word at `dtv_offset` points at the DTV's entry 0; entry `m`
            // (`dtv_entry` bytes) starts with module m's TLS block.
            let dtv = read(thread_pointer(p)?.checked_add(u64::from(p.dtv_offset))?)?;
            // (No checked_mul: a 128-bit multiply is no BPF instruction.)
            if p.tls_module > 1 << 16 {
                return None;
            }
            let entry = p.tls_module * u64::from(p.dtv_entry);
            let block = read(dtv.checked_add(entry)?)?;
            if block == 0 || block == u64::MAX {
                return None; // not allocated for this thread
            }
            read(block.checked_add_signed(p.tls_offset)?)?
        }
        EC_TLS_TPOFF => read(thread_pointer(p)?.checked_add_signed(p.tls_offset)?)?,
        EC_GLOBAL => read(p.global_addr)?,
        EC_MAIN_RACTOR => read(read(p.global_addr)?.checked_add(u64::from(p.ractor_running_ec))?)?,
        _ => return None,
    };
    if ec == 0 {
        return None;
    }
    let cfp = read(ec + u64::from(p.ec_cfp))?;
    let stack = read(ec + u64::from(p.ec_vm_stack))?;
    let size = read(ec + u64::from(p.ec_vm_stack_size))?;
    if size > 1 << 32 {
        return None;
    }
    Some((cfp, stack.checked_add(size * 8)?))
}

/// The sampled task's thread pointer.
#[inline(always)]
fn thread_pointer(p: &RubyProc) -> Option<u64> {
    // SAFETY: the current task's field at an offset read from this kernel's BTF, read with
    // bpf_probe_read_kernel, which tolerates any address.
    unsafe {
        let task = bpf_get_current_task();
        bpf_probe_read_kernel((task + u64::from(p.task_fsbase)) as *const u64).ok()
    }
}

/// Moves `mark` to mark `from` when it is a Ruby one; false when it is not (or there is
/// none). Ruby is the only runtime that marks frames, so its marks are all the walk's; a
/// loop looking past other runtimes' marks cost the verifier more than the whole walk (the
/// 6.1 verifier could not bound one; unrolled, it passed a million instructions).
#[inline(always)]
fn next_mark(w: &Walk, mark: &mut u32, from: u32) -> bool {
    if from >= w.marks_len || from as usize >= MAX_MARKS {
        return false;
    }
    if w.marks[from as usize & (MAX_MARKS - 1)].slot != slots::RUBY {
        return false;
    }
    *mark = from;
    true
}

/// One control frame: its three words into the current mark's group. Returns 1 to stop.
/// Its work is a function of its own (`ruby_step`, see [`crate::unwind::returned`]):
/// verified once, whatever the walk before it.
extern "C" fn step(_index: u64, ctx: *mut core::ffi::c_void) -> i64 {
    // SAFETY: `ctx` is the RubyCx `annotate` passed: the walk is a map value, the process's
    // state a map value only read.
    let (w, p) = unsafe {
        let c = &*(ctx as *const RubyCx);
        (c.walk, c.proc_)
    };
    // (The callback must return 0 or 1, which the verifier is shown here.)
    i64::from(returned(ruby_step(w, p)) != 0)
}

/// [`step`]'s function.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn ruby_step(w: *mut Walk, p: *const RubyProc) -> u64 {
    // SAFETY: the walk's and the process's map values the caller passed (null tested).
    let (Some(w), Some(p)) = (unsafe { w.as_mut() }, unsafe { p.as_ref() }) else {
        return 1;
    };
    control_frame(w, p) as u64
}

#[inline(always)]
fn control_frame(w: &mut Walk, p: &RubyProc) -> i64 {
    let cfp = w.loop_at[CFP];
    if cfp == 0 || cfp.wrapping_add(u64::from(p.cfp_size)) > w.loop_at[END] {
        let extra = w.marks[w.marks_len as usize & (MAX_MARKS - 1)].group_len;
        if w.loop_at[EXTRA_AT] != 0 && extra != 0 {
            w.loop_at[EXTRA_AT] = EXTRA_DONE;
        }
        return 1;
    }
    w.loop_at[CFP] = cfp + u64::from(p.cfp_size);
    // The control frame in one read, and the ep's three words (method entry or cref, the
    // parent's ep, flags) in another: a helper call costs more than its bytes here.
    if !read_frame(w, cfp, p.cfp_size) {
        return fail(w);
    }
    let field = |w: &Walk, off: u16| w.rt_words[(off as usize / 8) & (FRAME_READ_WORDS - 1)];
    let (pc, iseq, ep) = (field(w, p.cfp_pc), field(w, p.cfp_iseq), field(w, p.cfp_ep));
    if ep == 0 {
        return 0;
    }
    let Some([me_cref, specval, flags]) = env(ep) else {
        return fail(w);
    };
    let magic = flags & FRAME_MAGIC_MASK;
    let kind = if magic == FRAME_MAGIC_CFUNC {
        Some(FRAME_CFUNC)
    } else if magic == FRAME_MAGIC_DUMMY || magic == FRAME_MAGIC_IFUNC || iseq == 0 {
        None
    } else {
        Some(FRAME_ISEQ)
    };
    if let Some(kind) = kind {
        if w.loop_at[EXTRA_AT] == EXTRA_CLOSED {
            // A second run past the marks: the native walk missed some; no guess.
            w.loop_at[EXTRA_AT] = 0;
            return 1;
        }
        method_entry(w, me_cref, specval, flags);
        let cme = w.loop_at[CME];
        if !write(w, kind, iseq, cme, pc) {
            return 1;
        }
    }
    // The first frame its vm_exec call pushed: the next frames are the next mark's.
    if flags & FRAME_FLAG_FINISH != 0 {
        let next = w.loop_at[MARK] as u32 + 1;
        let mut mark = 0;
        if w.loop_at[EXTRA_AT] != 0 {
            // The extra run ends (the thread's first frame, a dummy one, ends none).
            w.loop_at[EXTRA_AT] = EXTRA_CLOSED;
        } else if next_mark(w, &mut mark, next) {
            w.loop_at[MARK] = u64::from(mark);
        } else if next == w.marks_len && (next as usize) < MAX_MARKS {
            // One run more than marks so far: written past the last mark, in case the
            // innermost run turns out not to be running (see `annotate`).
            w.loop_at[MARK] = u64::from(next);
            w.loop_at[EXTRA_AT] = EXTRA;
        } else {
            return 1;
        }
    }
    0
}

/// Writes one frame into the current mark's group; false when the groups are full.
#[inline(always)]
fn write(w: &mut Walk, kind: u8, iseq: u64, cme: u64, pc: u64) -> bool {
    let k = w.loop_at[MARK] as usize & (MAX_MARKS - 1);
    let at = w.groups_len as usize;
    if at + FRAME_WORDS > MAX_GROUP_WORDS {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return false;
    }
    let words = if kind == FRAME_CFUNC {
        ruby_frame(kind, cme, cme, 0)
    } else {
        ruby_frame(kind, iseq, cme, pc)
    };
    w.groups[at] = words[0];
    w.groups[at + 1] = words[1];
    w.groups[at + 2] = words[2];
    if w.marks[k].group_len == 0 {
        w.marks[k].group_start = at as u16;
    }
    w.marks[k].group_len += FRAME_WORDS as u16;
    w.groups_len += FRAME_WORDS as u32;
    w.flags |= record_flags::RUNTIME_FRAMES;
    true
}

/// The method entry of the frame whose environment's words are `me_cref`, `specval` and
/// `flags` (`ep[-2..=0]`), as `rb_vm_frame_method_entry` finds it, into `loop_at[CME]` (0:
/// none): a method's (and a C method's) environment holds it, a block's is found in its
/// parent environments (two looked at: a block in a method, or in a block in a method;
/// deeper ones get none, their method's class then unnamed). Straight-line code, not
/// inlined, answering through `w`: a loop over the parents made the 7.x verifier take more
/// than two minutes under qemu.
#[inline(never)]
fn method_entry(w: &mut Walk, me_cref: u64, specval: u64, flags: u64) {
    let mut me = 0;
    if flags & ENV_FLAG_LOCAL != 0 {
        me = method_entry_of(me_cref, 1);
    } else if let Some([me1, spec1, flags1]) = env(specval & !3) {
        if flags1 & ENV_FLAG_LOCAL != 0 {
            me = method_entry_of(me1, 1);
        } else if let Some([me2, _, flags2]) = env(spec1 & !3)
            && flags2 & ENV_FLAG_LOCAL != 0
        {
            me = method_entry_of(me2, 1);
        }
    }
    w.loop_at[CME] = me;
}

/// Words of a control frame read at once (its size is at most this many).
const FRAME_READ_WORDS: usize = 8;

/// The control frame at `cfp` (`size` bytes of it) into `w.rt_words`, in one read.
#[inline(always)]
fn read_frame(w: &mut Walk, cfp: u64, size: u16) -> bool {
    const { assert!(FRAME_READ_WORDS == 8) };
    let n = u32::from(size).min(8 * FRAME_READ_WORDS as u32);
    // SAFETY: `rt_words` (a map value) has room for `n` bytes; bpf_probe_read_user
    // tolerates any address.
    let r = unsafe {
        generated::bpf_probe_read_user(
            w.rt_words.as_mut_ptr().cast(),
            n,
            cfp as *const core::ffi::c_void,
        )
    };
    r == 0
}

// `env`'s three words are ep[-2], ep[-1] and ep[0].
const _: () = assert!(EP_ME_CREF == 2 && EP_SPECVAL == 1);

/// An environment's `ep[-2]` (method entry or cref), `ep[-1]` (the parent's ep, tagged)
/// and `ep[0]` (flags), in one read; `None` for no ep or an unreadable one.
#[inline(always)]
fn env(ep: u64) -> Option<[u64; 3]> {
    if ep == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_user tolerates any address.
    unsafe { bpf_probe_read_user((ep.wrapping_sub(8 * EP_ME_CREF)) as *const [u64; 3]) }.ok()
}

/// `obj` if it is a method entry, or (`svar` non-zero: a method-level environment's) the
/// one an svar holds; 0 otherwise.
#[inline(always)]
fn method_entry_of(obj: u64, svar: u64) -> u64 {
    let t = imemo_type(obj);
    if t == IMEMO_MENT {
        return obj;
    }
    if svar != 0 && t == IMEMO_SVAR {
        let inner = read(obj + u64::from(SVAR_CREF_OR_ME)).unwrap_or(0);
        if imemo_type(inner) == IMEMO_MENT {
            return inner;
        }
    }
    0
}

/// The imemo type of `obj`, if it is an imemo (heap objects are 8-byte aligned; special
/// constants are not read); `u64::MAX` otherwise.
#[inline(always)]
fn imemo_type(obj: u64) -> u64 {
    if obj == 0 || obj & 7 != 0 {
        return u64::MAX;
    }
    match read(obj) {
        Some(flags) if flags & T_MASK == T_IMEMO => (flags >> IMEMO_SHIFT) & IMEMO_MASK,
        _ => u64::MAX,
    }
}

/// A frame that cannot be read: the rest stay native.
#[inline(always)]
fn fail(w: &mut Walk) -> i64 {
    w.flags |= record_flags::RUNTIME_ERROR;
    1
}

#[inline(always)]
fn read(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user tolerates any address.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}
