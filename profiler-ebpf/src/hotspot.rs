//! HotSpot (Java) frames in the user walk (`crate::unwind`): a PC inside a JVM's code cache
//! is handed here instead of to the unwind tables (JIT code and the interpreter have none).
//! The interpreter's frames are walked by frame pointer, their Method* and bytecode pointer
//! read from the frame's slots; a compiled frame's code blob is found through its heap's
//! segment map and the frame stepped over by the blob's frame size; other stubs by their
//! frame size, frame pointer or (stopped without a frame) the return address on top of the
//! stack. Each Java frame's native word becomes two
//! (`profiler_common::hotspot`), named in user space soon after the sample.

use aya_ebpf::{helpers::generated, macros::map, maps::HashMap};
use profiler_common::{
    MAX_WALK_WORDS,
    hotspot::{
        HS_BLOCK_BYTES, HS_COMPILED, HS_MAX_HOPS, HS_PROLOGUE_BUILT, HS_PROLOGUE_BUILT_RBP_LIVE,
        HS_PROLOGUE_RA_ABOVE_RBP, HS_TOP, HS_VEP_OFFSET, HS_VEP_POINTER, HsField, HsProc,
        MAX_HS_HEAPS, NATIVE_NMETHOD_NAME, NMETHOD_NAME, hs_compiled, hs_field, hs_frame,
        hs_interpreted, hs_prologue,
    },
    record_flags,
    unwind::MAX_UNWIND_PROCS,
};

use crate::unwind::{Walk, returned};

/// The JVMs the walker knows, by tgid (user space adds them once their code cache exists).
#[map]
static HS_PROCS: HashMap<u32, HsProc> =
    HashMap::with_max_entries(MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map HS_PROCS);

/// What [`step`] asks of the walk.
pub(crate) enum Step {
    /// The caller's registers are in the walk: go on.
    Next,
    /// Stop here (the record is marked partial when the frame could not be walked).
    Stop,
    /// Leave this frame by frame pointer (the call stub, a stub that keeps rbp).
    FramePointer,
}

/// Copies process `tgid`'s entry into `dst` (`enabled` 0 when it runs no HotSpot we know).
#[inline(always)]
pub(crate) fn load(tgid: u32, has: bool, dst: &mut HsProc) {
    if !has {
        dst.enabled = 0;
        return;
    }
    // SAFETY: a plain map lookup; the value is copied out.
    match unsafe { HS_PROCS.get(tgid) } {
        Some(p) => *dst = *p,
        None => dst.enabled = 0,
    }
}

/// Forgets a process (exec, exit).
#[inline(always)]
pub(crate) fn forget(tgid: u32) {
    let _ = HS_PROCS.remove(tgid);
}

/// Whether `at` is in the walked process's code cache (then [`step`] walks the frame).
#[inline(always)]
pub(crate) fn owns(w: &Walk, at: u64) -> bool {
    w.hs.enabled != 0 && at >= w.hs.low && at < w.hs.high
}

/// The frame at `w.pc` (in the code cache; its native word is the last written; `top`: the
/// stopped instruction): its Java words written and its caller found.
///
/// A function of its own (`hotspot_step`, see [`crate::unwind::returned`]): verified once,
/// whatever the walk around it; its reads land in the walk's scratch space (a map value),
/// not on the BPF stack.
#[inline(always)]
pub(crate) fn step(w: &mut Walk, top: u32) -> Step {
    match returned(hotspot_step(w, top)) {
        0 => Step::Next,
        1 => Step::Stop,
        _ => Step::FramePointer,
    }
}

/// [`step`]'s function: 0 [`Step::Next`], 1 [`Step::Stop`], 2 [`Step::FramePointer`].
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn hotspot_step(w: *mut Walk, top: u32) -> u64 {
    // SAFETY: the walk's map value the caller passed (null tested).
    let Some(w) = (unsafe { w.as_mut() }) else {
        return 1;
    };
    match frame_step(w, top) {
        Step::Next => 0,
        Step::Stop => 1,
        Step::FramePointer => 2,
    }
}

#[inline(always)]
fn frame_step(w: &mut Walk, top: u32) -> Step {
    if w.py_emit != 0 {
        return Step::Stop;
    }
    w.hs_top = top;
    let pc = w.pc;
    if pc == w.hs.call_stub_return {
        return Step::FramePointer;
    }
    if pc >= w.hs.interpreter_low && pc < w.hs.interpreter_high {
        return interpreted(w);
    }
    let Some(block) = block_of(w, pc) else {
        return partial(w);
    };
    // The block's header and the blob's fields, in one read.
    let len = u32::from(w.hs.block_bytes).clamp(8, HS_BLOCK_BYTES);
    // SAFETY: `hs_block` has HS_BLOCK_BYTES + 8 bytes; `len` is at most HS_BLOCK_BYTES.
    let rc = unsafe {
        generated::bpf_probe_read_user(
            w.hs_block.as_mut_ptr().cast(),
            len,
            block as *const core::ffi::c_void,
        )
    };
    if rc != 0 || field(w, &w.hs.used) & 0xff == 0 {
        return partial(w);
    }
    w.hs_v[0] = block + u64::from(w.hs.blob);
    w.hs_v[1] = field(w, &w.hs.frame_size).wrapping_mul(8);
    let name_at = field(w, &w.hs.name);
    let Some(name) = read(w, name_at) else {
        return partial(w);
    };
    if name == NMETHOD_NAME || name == NATIVE_NMETHOD_NAME {
        return compiled(w);
    }
    // A stub, an adapter, a runtime blob: stepped by its frame size, or by rbp.
    if w.hs_v[1] == 0 || w.hs_v[1] > 1 << 20 {
        // No frame size: a stub that builds an rbp frame, or one stopped where it has none
        // (the vtable and itable stubs, which jump on to the method; any stub at its first
        // or last instruction), its return address on top of the stack. Only compiled code
        // calls those, so a top word in the code cache is that return address (after
        // `enter` the top is the saved rbp, in C2 code a data register, not code).
        if w.hs_top != 0
            && let Some(ra) = read(w, w.sp)
            && ra >= w.hs.low
            && ra < w.hs.high
        {
            w.sp += 8;
            w.pc = ra;
            return Step::Next;
        }
        return Step::FramePointer;
    }
    w.hs_v[1] += w.sp;
    let Some(ra) = read(w, w.hs_v[1] - 8) else {
        return partial(w);
    };
    w.pc_next = ra;
    let Some(bp) = read(w, w.hs_v[1] - 16) else {
        return partial(w);
    };
    w.sp = w.hs_v[1];
    w.pc = w.pc_next;
    w.bp = bp;
    Step::Next
}

/// An interpreted frame: Method* and bcp from its slots (the stopped frame's bcp from r13,
/// which the interpreter keeps it in, unless r13 holds no bcp of this method: in its invoke
/// and return paths r13 is a temporary and the slot holds the saved one).
///
/// A native method's frame (the interpreter's native entry, bytecode size 0) has no bcp:
/// bci 0.
///
/// Values between reads are kept in `w.hs_v` (see there): [0] Method*, [1] ConstMethod*,
/// [2] the code size then the bci, [3] the sender sp (the caller's sp); the caller's pc in
/// `w.pc_next`.
#[inline(always)]
fn interpreted(w: &mut Walk) -> Step {
    if w.bp < w.sp || w.bp & 7 != 0 {
        return partial(w);
    }
    let Some(method) = read(w, w.bp.wrapping_add_signed(i64::from(w.hs.slot_method))) else {
        return partial(w);
    };
    w.hs_v[0] = method;
    let Some(cm) = read(w, method.wrapping_add(u64::from(w.hs.method_const_method))) else {
        return partial(w);
    };
    w.hs_v[1] = cm;
    let Some(size) = read(w, cm.wrapping_add(u64::from(w.hs.cm_code_size))) else {
        return partial(w);
    };
    w.hs_v[2] = size & 0xffff;
    let code = w.hs_v[1].wrapping_add(u64::from(w.hs.cm_size));
    if w.hs_v[2] == 0 {
        // A native method (no bytecodes): the interpreter's native entry keeps no bcp.
    } else if w.hs_top != 0 && w.r13.wrapping_sub(code) < w.hs_v[2] {
        w.hs_v[2] = w.r13 - code;
    } else {
        let Some(bcp) = read(w, w.bp.wrapping_add_signed(i64::from(w.hs.slot_bcp))) else {
            return partial(w);
        };
        let code = w.hs_v[1].wrapping_add(u64::from(w.hs.cm_size));
        if bcp.wrapping_sub(code) >= w.hs_v[2] {
            return partial(w);
        }
        w.hs_v[2] = bcp - code;
    }
    let Some(sender_sp) = read(w, w.bp.wrapping_add_signed(i64::from(w.hs.slot_sender_sp))) else {
        return partial(w);
    };
    w.hs_v[3] = sender_sp;
    let Some(ra) = read(w, w.bp + 8) else {
        return partial(w);
    };
    w.pc_next = ra;
    let Some(bp) = read(w, w.bp) else {
        return partial(w);
    };
    if !java_words(
        w,
        hs_frame(0, w.hs_v[0]),
        hs_interpreted(w.hs_v[1], w.hs_v[2] as u32),
    ) {
        return Step::Stop;
    }
    w.sp = w.hs_v[3];
    w.pc = w.pc_next;
    w.bp = bp;
    Step::Next
}

/// A compiled frame (an nmethod or a JNI wrapper) at `blob` whose frame is `w.hs_v[1]`
/// bytes; `w.hs_v[0]` is the blob, [2] the PC it ran at. A stopped frame in its prologue
/// (before its frame is complete) is left as far as it is built ([`hs_prologue`]).
#[inline(always)]
fn compiled(w: &mut Walk) -> Step {
    let code = blob_address(w, &w.hs.code, w.hs.code_is_offset);
    let mut state = HS_PROLOGUE_BUILT;
    let entry = w.hs_top != 0 && w.pc < code.wrapping_add(field(w, &w.hs.frame_complete));
    if entry {
        // The prologue: the frame is not complete, its caller maybe not where the frame
        // size says. Where it is follows from the PC: at or before the verified entry
        // (the inline cache check, the entry's first instruction: a megamorphic call's
        // stub jumps there, and the mispredicted jump's samples land on it) the return
        // address is on top of the stack; after it, from the instruction (`hs_prologue`).
        let vep = match w.hs.verified_entry_is {
            HS_VEP_POINTER => field(w, &w.hs.verified_entry),
            HS_VEP_OFFSET => code.wrapping_add(field(w, &w.hs.verified_entry)),
            _ => return partial(w),
        };
        let early = w.pc <= vep;
        let insn = if early {
            0
        } else {
            match read(w, w.pc - 3) {
                Some(insn) => insn,
                None => return partial(w),
            }
        };
        state = hs_prologue(early, insn);
    }
    let framed = state >= HS_PROLOGUE_BUILT;
    w.hs_v[2] = w.pc;
    if w.hs_top == 0 {
        let deopt = blob_address(w, &w.hs.deopt, w.hs.deopt_is_offset);
        // Returning into the deopt handler: the PC it was deoptimised at is in the frame.
        if w.pc == deopt {
            match read(w, w.sp.wrapping_add(field(w, &w.hs.orig_pc_offset))) {
                Some(orig) => w.hs_v[2] = orig,
                None => return partial(w),
            }
        }
    }
    let (blob, at) = (w.hs_v[0], w.hs_v[2]);
    if (framed && (w.hs_v[1] == 0 || w.hs_v[1] > 1 << 20))
        || at < blob
        || at - blob > u64::from(u32::MAX)
    {
        return partial(w);
    }
    let word = hs_frame(HS_COMPILED | if w.hs_top != 0 { HS_TOP } else { 0 }, blob);
    let data = hs_compiled(field(w, &w.hs.compile_id) as u32, (at - blob) as u32);
    if !java_words(w, word, data) {
        return Step::Stop;
    }
    if !framed {
        // Nothing pushed yet, or only rbp: the return address on top, or above rbp.
        let above: u64 = if state == HS_PROLOGUE_RA_ABOVE_RBP {
            8
        } else {
            0
        };
        let Some(ra) = read(w, w.sp + above) else {
            return partial(w);
        };
        if ra < w.hs.low || ra >= w.hs.high {
            return partial(w);
        }
        w.pc_next = ra;
        if above != 0 {
            let Some(bp) = read(w, w.sp) else {
                return partial(w);
            };
            w.bp = bp;
        }
        w.sp += above + 8;
        w.pc = w.pc_next;
        return Step::Next;
    }
    // The caller's sp.
    w.hs_v[1] += w.sp;
    let Some(ra) = read(w, w.hs_v[1] - 8) else {
        return partial(w);
    };
    if ra >= w.hs.low && ra < w.hs.high {
        w.pc_next = ra;
        let Some(bp) = read(w, w.hs_v[1] - 16) else {
            return partial(w);
        };
        w.sp = w.hs_v[1];
        w.pc = w.pc_next;
        if state != HS_PROLOGUE_BUILT_RBP_LIVE {
            w.bp = bp;
        }
        return Step::Next;
    }
    // Compiled code returns only into the code cache (native code enters Java through the
    // call stub): a stopped frame whose frame-size step leaves it is in its epilogue, its
    // frame popped, rbp restored, the return address on top of the stack (not in the
    // prologue: there the top of the built frame is no return address).
    if w.hs_top != 0
        && !entry
        && let Some(ra) = read(w, w.sp)
        && ra >= w.hs.low
        && ra < w.hs.high
    {
        w.sp += 8;
        w.pc = ra;
        return Step::Next;
    }
    partial(w)
}

/// The start of the code block holding `pc` (its HeapBlock header), through its heap's
/// segment map: each used segment's byte says how many segments back the block starts (0
/// at the start, 0xff free), followed at most [`HS_MAX_HOPS`] times.
#[inline(always)]
fn block_of(w: &mut Walk, pc: u64) -> Option<u64> {
    // The heap's start, segment map, log2 segment size and the segment: in `w.hs_v`.
    let mut found = false;
    for i in 0..MAX_HS_HEAPS {
        let h = &w.hs.heaps[i];
        if i < usize::from(w.hs.heaps_len) && pc >= h.low && pc < h.high {
            w.hs_v = [h.low, h.segmap, u64::from(h.log2_segment & 31), 0];
            found = true;
            break;
        }
    }
    if !found {
        return None;
    }
    w.hs_v[3] = (pc - w.hs_v[0]) >> w.hs_v[2];
    let mut tag = byte(w, w.hs_v[1] + w.hs_v[3])?;
    if tag == 0xff {
        return None;
    }
    for _ in 0..HS_MAX_HOPS {
        if tag == 0 {
            return Some(w.hs_v[0] + (w.hs_v[3] << w.hs_v[2]));
        }
        if tag > w.hs_v[3] {
            return None;
        }
        w.hs_v[3] -= tag;
        tag = byte(w, w.hs_v[1] + w.hs_v[3])?;
    }
    None
}

/// Writes a Java frame's two words in place of its native one (the last written).
#[inline(always)]
fn java_words(w: &mut Walk, word: u64, data: u64) -> bool {
    let n = w.stack.len as usize;
    if n == 0 || n >= MAX_WALK_WORDS {
        w.flags |= record_flags::UNWIND_PARTIAL;
        return false;
    }
    // (`get_mut`: indexing left a bounds-check panic call the verifier refuses.)
    let Some(next) = w.stack.frames.get_mut(n) else {
        return false;
    };
    *next = data;
    let Some(last) = w.stack.frames.get_mut(n - 1) else {
        return false;
    };
    *last = word;
    w.stack.len += 1;
    w.flags |= record_flags::RUNTIME_FRAMES;
    true
}

#[inline(always)]
fn partial(w: &mut Walk) -> Step {
    w.flags |= record_flags::UNWIND_PARTIAL;
    Step::Stop
}

/// The block field `f` (read by [`step`] into the walk's block buffer).
#[inline(always)]
fn field(w: &Walk, f: &HsField) -> u64 {
    let at = usize::from(f.offset) & (HS_BLOCK_BYTES as usize - 1);
    // SAFETY: `at + 8` is inside the buffer of HS_BLOCK_BYTES + 8 bytes.
    let word = unsafe { core::ptr::read_unaligned(w.hs_block.as_ptr().add(at).cast::<u64>()) };
    hs_field(word, f)
}

/// The code address the blob field `f` gives: a pointer, or (`is_offset`, newer JDKs) an
/// offset from the blob (`w.hs_v[0]`).
#[inline(always)]
fn blob_address(w: &Walk, f: &HsField, is_offset: u8) -> u64 {
    if is_offset != 0 {
        w.hs_v[0].wrapping_add(field(w, f))
    } else {
        field(w, f)
    }
}

/// The user word at `addr`, read into the walk's scratch word.
#[inline(always)]
fn read(w: &mut Walk, addr: u64) -> Option<u64> {
    let slot = &raw mut w.scratch;
    // SAFETY: the walk's scratch word in this CPU's map value; the helper tolerates any
    // source address.
    unsafe {
        if generated::bpf_probe_read_user(slot.cast(), 8, addr as *const core::ffi::c_void) != 0 {
            return None;
        }
        Some(*slot)
    }
}

/// The user byte at `addr`.
#[inline(always)]
fn byte(w: &mut Walk, addr: u64) -> Option<u64> {
    let slot = &raw mut w.scratch;
    // SAFETY: as in `read`, one byte into the scratch word.
    unsafe {
        *slot = 0;
        if generated::bpf_probe_read_user(slot.cast(), 1, addr as *const core::ffi::c_void) != 0 {
            return None;
        }
        Some(*slot & 0xff)
    }
}
