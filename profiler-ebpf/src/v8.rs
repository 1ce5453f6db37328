//! V8 (Node.js) frames in the user walk (`crate::unwind`): JavaScript code has no unwind
//! table (JIT code in anonymous memory, builtins without CFI), so its frames are walked by
//! frame pointer, which V8 keeps in every JS, stub and builtin frame. Before such a step, the
//! frame's slots say whether it is a JS frame: its context-or-marker slot holds a context (a
//! tagged pointer, low bit set) rather than a frame-type marker, and its function slot a
//! JSFunction (checked through its map's instance type). A JS frame's native word is then
//! replaced by two (`profiler_common::v8`): the JSFunction, and the bytecode offset of an
//! interpreted frame (its BytecodeArray slot checked the same way, its offset slot a Smi) or
//! the PC of a compiled one. User space names them soon after the sample.

use aya_ebpf::{helpers::bpf_probe_read_user, macros::map, maps::HashMap};
use profiler_common::{
    MAX_WALK_WORDS, record_flags,
    unwind::MAX_UNWIND_PROCS,
    v8::{V8_FRAME, V8_PC_TOP, V8Proc, v8_bytecode_offset},
};

use crate::unwind::Walk;

/// The V8 processes the walker knows, by tgid (user space adds them as it finds them).
#[map]
static V8_PROCS: HashMap<u32, V8Proc> =
    HashMap::with_max_entries(MAX_UNWIND_PROCS, aya_ebpf::bindings::BPF_F_NO_PREALLOC);
shared_name!(map V8_PROCS);

/// This process's entry (`enabled` 0 when it runs no V8 we know).
#[inline(always)]
pub(crate) fn process(tgid: u32) -> V8Proc {
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
/// Not inlined, and it answers through `w`: the frame-pointer step after it is then
/// verified once, whatever this found.
#[inline(never)]
pub(crate) fn js_frame(w: &mut Walk, top: u32) {
    let v = w.v8;
    let fp = w.bp;
    // (While an eval call's Python frames are pending, the last word is not this frame's.)
    if v.enabled == 0 || w.py_emit != 0 || fp == 0 || fp & 7 != 0 {
        return;
    }
    let Some(marker) = read(fp.wrapping_add_signed(i64::from(v.slot_marker))) else {
        return;
    };
    if marker & 1 == 0 {
        return; // a typed frame (entry, exit, stub, builtin...): its word stays native
    }
    let Some(function) = read(fp.wrapping_add_signed(i64::from(v.slot_function))) else {
        return;
    };
    let Some(ty) = instance_type(&v, function) else {
        return;
    };
    if ty < v.js_function_first || ty > v.js_function_last {
        return;
    }
    let mut data = w.pc | if top != 0 { V8_PC_TOP } else { 0 };
    // Interpreted and Sparkplug frames hold their BytecodeArray; only an interpreted one
    // keeps a Smi (the offset) in the next slot, Sparkplug its feedback vector.
    if let Some(bytecode) = read(fp.wrapping_add_signed(i64::from(v.slot_bytecode_array)))
        && instance_type(&v, bytecode) == Some(v.bytecode_array_type)
        && let Some(offset) = read(fp.wrapping_add_signed(i64::from(v.slot_bytecode_offset)))
        && offset & 1 == 0
    {
        data = v8_bytecode_offset((offset >> (v.smi_shift & 63)) as u32);
    }
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
    *word = V8_FRAME | function;
    w.stack.len += 1;
    w.flags |= record_flags::V8;
}

/// The instance type of the heap object `tagged`, through its map.
#[inline(always)]
fn instance_type(v: &V8Proc, tagged: u64) -> Option<u16> {
    // Heap objects are tagged 01 in their low two bits (no pointer compression).
    if tagged & 3 != 1 {
        return None;
    }
    let map = read(tagged - 1 + u64::from(v.heap_object_map))?;
    if map & 3 != 1 {
        return None;
    }
    // SAFETY: bpf_probe_read_user tolerates any address.
    unsafe { bpf_probe_read_user((map - 1 + u64::from(v.map_instance_type)) as *const u16) }.ok()
}

#[inline(always)]
fn read(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user tolerates any address.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}
