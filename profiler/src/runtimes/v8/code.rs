//! A JSFunction's Code object: its kind, its instructions, and the script position of a PC in
//! optimized code (Maglev, TurboFan) from the Code's own source position table.

use super::{
    heap::Heap,
    layout::CodeStart,
    positions::{SourcePosition, decode_source_positions},
};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// A Code object as a frame walk needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeInfo {
    /// The tagged pointer.
    pub code: u64,
    /// `CodeKind` (see [`super::layout::CodeKinds`]).
    pub kind: u32,
    /// Where its instructions are (V8 11.1.204+: a pointer into the code space, or into the
    /// embedded builtins for the interpreter trampoline and lazy-compile stubs; 10.x: inside
    /// the object).
    pub start: u64,
    pub size: u32,
}

impl CodeInfo {
    pub fn contains(&self, pc: u64) -> bool {
        (self.start..self.start + u64::from(self.size)).contains(&pc)
    }
}

/// The Code a JSFunction currently runs (not necessarily the code of an older frame of it:
/// on-stack-replaced or deoptimized code is not in the function).
pub fn code_of<M: Memory + ?Sized>(
    heap: &Heap<'_, M>,
    function: u64,
) -> Result<CodeInfo, ReadError> {
    let l = heap.layout;
    let code = heap.field(function, l.fields.js_function_code)?;
    heap.expect(code, l.types.code, "Code")?;
    let start = match l.fields.code_instructions {
        CodeStart::Pointer(at) => heap.field(code, at)?,
        CodeStart::Inline(at) => l.untag(code) + u64::from(at),
    };
    let mut b = [0u8; 4];
    heap.mem
        .read(l.untag(code) + u64::from(l.fields.code_flags), &mut b)?;
    let flags = u32::from_le_bytes(b);
    heap.mem.read(
        l.untag(code) + u64::from(l.fields.code_instruction_size),
        &mut b,
    )?;
    let size = u32::from_le_bytes(b);
    Ok(CodeInfo {
        code,
        kind: (flags & l.code_kinds.mask) >> l.code_kinds.shift,
        start,
        size,
    })
}

/// Most levels of inlining followed (V8 inlines far fewer).
const MAX_INLINING_DEPTH: usize = 64;

/// Where `pc` is in optimized `code`, innermost first: each function running there (the
/// SharedFunctionInfo of one inlined into it, `None` for the code's own function) and its
/// script offset. An inlined callee's caller position is its `InliningPosition` in the
/// DeoptimizationData, whose literals hold the callee. `None` as [`position_of_pc`] says, or
/// when the inlining data cannot be read.
pub fn positions_of_pc<M: Memory + ?Sized>(
    heap: &Heap<'_, M>,
    code: &CodeInfo,
    pc: u64,
    top: bool,
) -> Option<Vec<(Option<u64>, u32)>> {
    let l = heap.layout;
    let e = entry_of_pc(heap, code, pc, top)?;
    let (mut inlining, mut offset) = (e.inlining_id, e.script_offset);
    if inlining == 0 {
        return Some(vec![(None, offset)]);
    }
    let slots = l.deopt?;
    let deopt = heap
        .field(code.code, l.fields.code_deoptimization_data)
        .ok()?;
    let data = heap.fixed_array(deopt).ok()?;
    let literals = heap
        .fixed_array(*data.get(usize::from(slots.literal_array))?)
        .ok()?;
    let positions = heap
        .byte_array(*data.get(usize::from(slots.inlining_positions))?)
        .ok()?;
    let mut out = Vec::new();
    for _ in 0..MAX_INLINING_DEPTH {
        if inlining == 0 {
            out.push((None, offset));
            return Some(out);
        }
        let at = (inlining as usize - 1) * 16;
        let rec = positions.get(at..at + 16)?;
        let packed = u64::from_le_bytes(rec[..8].try_into().ok()?);
        let id = u32::from_le_bytes(rec[8..12].try_into().ok()?);
        let sfi = strong(*literals.get(id as usize)?)?;
        out.push((Some(sfi), offset));
        // The call's position in the caller: packed as a table entry's.
        let script = ((packed >> 1) & ((1 << 30) - 1)) as i64 - 1;
        if packed & 1 != 0 || script < 0 {
            return None;
        }
        offset = script as u32;
        inlining = ((packed >> 31) & 0xffff) as u32;
    }
    None
}

/// A weak reference (tag `11`) as a strong pointer (tag `01`); `None` once cleared.
fn strong(word: u64) -> Option<u64> {
    match word & 3 {
        1 => Some(word),
        3 if word != 3 && word as u32 != 3 => Some(word & !2),
        _ => None,
    }
}

/// The script offset of `pc` in optimized `code`, when it belongs to the function itself
/// (inlining id 0); `top` says whether `pc` is the stopped instruction (else a return
/// address, looked up one byte back, inside its call). `None` for Sparkplug code (its table
/// maps PCs to bytecode offsets, another encoding), a PC outside the code, or a position
/// inside an inlined callee (the caller's position then sits in the deoptimization data).
pub fn position_of_pc<M: Memory + ?Sized>(
    heap: &Heap<'_, M>,
    code: &CodeInfo,
    pc: u64,
    top: bool,
) -> Option<u32> {
    let e = entry_of_pc(heap, code, pc, top)?;
    (e.inlining_id == 0).then_some(e.script_offset)
}

/// The source position table's entry for `pc` in optimized `code`.
fn entry_of_pc<M: Memory + ?Sized>(
    heap: &Heap<'_, M>,
    code: &CodeInfo,
    pc: u64,
    top: bool,
) -> Option<SourcePosition> {
    let l = heap.layout;
    let kinds = &l.code_kinds;
    if code.kind != kinds.maglev && code.kind != kinds.turbofan {
        return None;
    }
    let pc = if top { pc } else { pc.checked_sub(1)? };
    if !code.contains(pc) {
        return None;
    }
    let offset = u32::try_from(pc - code.start).ok()?;
    let table = heap.field(code.code, l.fields.code_source_positions).ok()?;
    if heap.instance_type(table).ok()? != l.types.byte_array {
        return None;
    }
    let entries = decode_source_positions(&heap.byte_array(table).ok()?);
    entries
        .iter()
        .take_while(|e| e.code_offset <= offset)
        .last()
        .copied()
}
