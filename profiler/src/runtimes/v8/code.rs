//! A JSFunction's Code object: its kind, its instructions, and the script position of a PC in
//! optimized code (Maglev, TurboFan) from the Code's own source position table.

use super::{heap::Heap, positions::decode_source_positions};
use crate::runtimes::python::process::{Memory, ReadError};

/// A Code object as a frame walk needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeInfo {
    /// The tagged pointer.
    pub code: u64,
    /// `CodeKind` (see [`super::layout::CodeKinds`]).
    pub kind: u32,
    /// Where its instructions are (V8 11.1.204+: a pointer into the code space, or into the
    /// embedded builtins for the interpreter trampoline and lazy-compile stubs).
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
    let start = heap.field(code, l.fields.code_instruction_start)?;
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
    let e = entries
        .iter()
        .take_while(|e| e.code_offset <= offset)
        .last()?;
    (e.inlining_id == 0).then_some(e.script_offset)
}
