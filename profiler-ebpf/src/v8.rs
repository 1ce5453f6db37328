//! V8 (Node.js) frames in the user walk (`crate::unwind`): JavaScript code has no unwind
//! table (JIT code in anonymous memory, builtins without CFI), so its frames are walked by
//! frame pointer, which V8 keeps in every JS, stub and builtin frame. Before such a step, the
//! frame's slots say whether it is a JS frame: its context-or-marker slot holds a context (a
//! tagged pointer, low bit set) rather than a frame-type marker, and its function slot a
//! JSFunction (checked through its map's instance type). A JS frame's native word is then
//! replaced by two (`profiler_common::v8`): the JSFunction, and the bytecode offset of an
//! interpreted frame (its BytecodeArray slot checked the same way, its offset slot a Smi) or
//! the PC of a compiled one. User space names them soon after the sample.

use aya_ebpf::{helpers::generated, macros::map, maps::HashMap};
use profiler_common::{
    MAX_WALK_WORDS, record_flags,
    unwind::MAX_UNWIND_PROCS,
    v8::{V8_PC_TOP, V8Proc, v8_bytecode_offset, v8_frame},
};

use crate::unwind::{Walk, returned};

/// The V8 processes the walker knows, by tgid (user space adds them as it finds them).
#[map]
static V8_PROCS: HashMap<u32, V8Proc> =
    HashMap::with_max_entries(MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map V8_PROCS);

/// This process's entry (`enabled` 0 when it runs no V8 we know).
#[inline(always)]
pub(crate) fn process(tgid: u32, has: bool) -> V8Proc {
    if !has {
        return V8Proc::default();
    }
    // SAFETY: a plain map lookup; the value is copied out.
    match unsafe { V8_PROCS.get(tgid) } {
        Some(p) => *p,
        None => V8Proc::default(),
    }
}

/// Forgets a process (exec, exit).
#[inline(always)]
pub(crate) fn forget(tgid: u32) {
    let _ = V8_PROCS.remove(tgid);
}

/// Before the frame at `w.bp` is left by frame pointer: when it is a JS frame, its word
/// (the last one written) becomes the frame's two. `top`: `w.pc` is the stopped instruction,
/// not a return address.
///
/// A function of its own (`v8_js_frame`, see [`crate::unwind::returned`]), answering
/// through `w`: verified once, and the frame-pointer step after it is verified once,
/// whatever this found. Its reads land in the walk's scratch word (a map value), not on the
/// BPF stack: it runs two calls below the program, whose frames together may not pass 512
/// bytes (6.1 refused it at 544).
#[inline(always)]
pub(crate) fn js_frame(w: &mut Walk, top: u32) {
    returned(v8_js_frame(w, top));
}

/// [`js_frame`]'s function (returns 0: a global BPF function returns a scalar).
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn v8_js_frame(w: *mut Walk, top: u32) -> u64 {
    // SAFETY: the walk's map value the caller passed (null tested).
    if let Some(w) = unsafe { w.as_mut() } {
        frame(w, top);
    }
    0
}

#[inline(always)]
fn frame(w: &mut Walk, top: u32) {
    // (While an eval call's Python frames are pending, the last word is not this frame's.)
    if w.v8.enabled == 0 || w.py_emit != 0 {
        return;
    }
    let slot = &raw mut w.scratch;
    let Some((function, data)) = js_words(&w.v8, w.bp, w.pc, top, slot) else {
        return;
    };
    // The frame's native word is the last written; its data word goes after it. (Checked
    // with `get_mut`: indexing here left a bounds-check panic call the verifier refuses.)
    let n = w.stack.len as usize;
    if n == 0 || n >= MAX_WALK_WORDS {
        return;
    }
    let Some(next) = w.stack.frames.get_mut(n) else {
        return;
    };
    *next = data;
    let Some(word) = w.stack.frames.get_mut(n - 1) else {
        return;
    };
    *word = v8_frame(function);
    w.stack.len += 1;
    w.flags |= record_flags::RUNTIME_FRAMES;
}

/// The JSFunction and the second word of the JS frame at `fp`, if it is one (`slot`: where
/// reads land).
#[inline(always)]
fn js_words(v: &V8Proc, fp: u64, pc: u64, top: u32, slot: *mut u64) -> Option<(u64, u64)> {
    if fp == 0 || fp & 7 != 0 {
        return None;
    }
    let marker = read(slot, fp.wrapping_add_signed(i64::from(v.slot_marker)))?;
    if marker & 1 == 0 {
        return None; // a typed frame (entry, exit, stub, builtin...): its word stays native
    }
    let function = read(slot, fp.wrapping_add_signed(i64::from(v.slot_function)))?;
    let ty = instance_type(v, slot, function)?;
    if ty < v.js_function_first || ty > v.js_function_last {
        return None;
    }
    let mut data = pc | if top != 0 { V8_PC_TOP } else { 0 };
    // Interpreted and Sparkplug frames hold their BytecodeArray; only an interpreted one
    // keeps a Smi (the offset) in the next slot, Sparkplug its feedback vector.
    if let Some(bytecode) = read(
        slot,
        fp.wrapping_add_signed(i64::from(v.slot_bytecode_array)),
    ) && instance_type(v, slot, bytecode) == Some(v.bytecode_array_type)
        && let Some(offset) = read(
            slot,
            fp.wrapping_add_signed(i64::from(v.slot_bytecode_offset)),
        )
        && offset & 1 == 0
    {
        data = v8_bytecode_offset((offset >> (v.smi_shift & 63)) as u32);
    }
    Some((function, data))
}

/// The instance type of the heap object `tagged`, through its map.
#[inline(always)]
fn instance_type(v: &V8Proc, slot: *mut u64, tagged: u64) -> Option<u16> {
    // Heap objects are tagged 01 in their low two bits (no pointer compression).
    if tagged & 3 != 1 {
        return None;
    }
    let map = read(slot, tagged - 1 + u64::from(v.heap_object_map))?;
    if map & 3 != 1 {
        return None;
    }
    // Eight bytes from the type's offset (a Map is far larger): the low two are the type.
    read(slot, map - 1 + u64::from(v.map_instance_type)).map(|w| w as u16)
}

/// The user word at `addr`, read into the scratch word `slot`.
#[inline(always)]
fn read(slot: *mut u64, addr: u64) -> Option<u64> {
    // SAFETY: `slot` is the walk's scratch word in this CPU's map value; the helper
    // tolerates any source address.
    unsafe {
        if generated::bpf_probe_read_user(slot.cast(), 8, addr as *const core::ffi::c_void) != 0 {
            return None;
        }
        Some(*slot)
    }
}
