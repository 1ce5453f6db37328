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
/// on-stack-replaced or deoptimized code is not in the function; see [`code_at_pc`]).
pub fn code_of<M: Memory + ?Sized>(
    heap: &Heap<'_, M>,
    function: u64,
) -> Result<CodeInfo, ReadError> {
    let code = heap.field(function, heap.layout.fields.js_function_code)?;
    code_info(heap, code)
}

/// Most words of a FeedbackVector scanned for on-stack-replaced code (its header and
/// slots; a function's vector has a slot per IC and loop, rarely more than a few hundred).
const MAX_FEEDBACK_WORDS: usize = 4096;
/// The FeedbackVector's header fields before its slots, scanned with them (V8 10.x-11.x
/// have five to seven).
const FEEDBACK_HEADER_WORDS: usize = 8;

/// The code `function`'s frame ran at `pc` (`top`: the stopped instruction, else a return
/// address): the code the function holds when it holds `pc`; else optimized code compiled
/// for on-stack replacement (a hot loop entered while the function ran its bytecode), which
/// V8 (10.4+) keeps weakly in the slot of that loop in the function's FeedbackVector, not
/// in the function. Code objects do not overlap, so Code in the vector holding `pc` is the
/// code the frame ran. `None` when neither holds it.
pub fn code_at_pc<M: Memory + ?Sized>(
    heap: &Heap<'_, M>,
    function: u64,
    pc: u64,
    top: bool,
) -> Option<CodeInfo> {
    let inside = if top { pc } else { pc.checked_sub(1)? };
    let current = code_of(heap, function).ok()?;
    if current.contains(inside) {
        return Some(current);
    }
    let l = heap.layout;
    let f = l.feedback?;
    let cell = heap.field(function, f.js_function_feedback_cell).ok()?;
    let vector = heap.field(cell, f.feedback_cell_value).ok()?;
    if heap.instance_type(vector).ok()? != f.feedback_vector_type {
        return None;
    }
    // `length` (int32, the slots) follows the map in every version read.
    let mut b = [0u8; 4];
    let word = u64::from(l.tagged_size);
    heap.mem.read(l.untag(vector) + word, &mut b).ok()?;
    let slots = usize::try_from(i32::from_le_bytes(b)).ok()?;
    let words = (FEEDBACK_HEADER_WORDS + slots).min(MAX_FEEDBACK_WORDS);
    let mut bytes = vec![0u8; words * 8];
    heap.mem.read(l.untag(vector) + word, &mut bytes).ok()?;
    // Every Code object has the same map: the function's own code's.
    let code_map = heap.field(current.code, l.fields.heap_object_map).ok()?;
    bytes
        .chunks_exact(8)
        .filter_map(|w| Some(u64::from_le_bytes(w.try_into().ok()?)))
        .filter(|w| w & 3 == 3)
        .filter_map(strong)
        .filter(|&c| heap.field(c, l.fields.heap_object_map).ok() == Some(code_map))
        .filter_map(|c| code_info(heap, c).ok())
        .find(|c| c.contains(inside))
}

/// Code objects' instructions start on this boundary (V8's kCodeAlignment is 32 or 64 on
/// x64 and arm64).
const CODE_ALIGN: u64 = 32;
/// How far before a PC the start of the code holding it is looked for: a callee stopped in
/// its first or last instructions, or a small function that runs without a frame.
const CODE_SCAN: u64 = 16 << 10;

/// The Code whose instructions hold `pc`, found from the header V8 puts right before every
/// Code's first instruction (read off `known`, a Code of the same process): the map word
/// and, from 11.1, the pointer back to the Code object (10.x keeps its instructions inside
/// the Code itself). Each candidate is checked to be a Code whose instructions start there
/// and hold `pc`.
pub fn code_holding<M: Memory + ?Sized>(
    heap: &Heap<'_, M>,
    known: &CodeInfo,
    pc: u64,
) -> Option<CodeInfo> {
    let l = heap.layout;
    let word = |buf: &[u8], at: u64, base: u64| -> Option<u64> {
        let i = usize::try_from(at.checked_sub(base)?).ok()?;
        Some(u64::from_le_bytes(buf.get(i..i + 8)?.try_into().ok()?))
    };
    // (offset of the map word before the instructions, that map, offset of the pointer to
    // the Code when the instructions are not inside it)
    let (map_off, map, back) = match l.fields.code_instructions {
        CodeStart::Inline(at) => {
            let at = u64::from(at);
            (
                at,
                heap.field(known.code, l.fields.heap_object_map).ok()?,
                None,
            )
        }
        CodeStart::Pointer(_) => {
            let mut b = [0u8; 16];
            heap.mem.read(known.start.checked_sub(16)?, &mut b).ok()?;
            let map = word(&b, 0, 0)?;
            (word(&b, 8, 0)? == known.code).then_some((16, map, Some(8)))?
        }
    };
    let top = pc & !(CODE_ALIGN - 1);
    let low = top.saturating_sub(CODE_SCAN);
    let base = low.checked_sub(map_off)?;
    let mut buf = vec![0u8; usize::try_from(top - base + 8).ok()?];
    heap.mem.read(base, &mut buf).ok()?;
    let mut start = top;
    while start >= low {
        if word(&buf, start - map_off, base) == Some(map) {
            let code = match back {
                Some(b) => word(&buf, start - b, base)?,
                None => start - map_off + l.heap_object_tag,
            };
            if let Ok(c) = code_info(heap, code)
                && c.start == start
                && c.contains(pc)
            {
                return Some(c);
            }
        }
        start -= CODE_ALIGN;
    }
    None
}

/// The SharedFunctionInfo optimized `code` was compiled for, from its DeoptimizationData
/// (the slot before the inlining positions, as in 10.x and 11.x), checked to be one.
pub fn code_shared<M: Memory + ?Sized>(heap: &Heap<'_, M>, code: &CodeInfo) -> Option<u64> {
    let l = heap.layout;
    let slots = l.deopt?;
    let deopt = heap
        .field(code.code, l.fields.code_deoptimization_data)
        .ok()?;
    let data = heap.fixed_array(deopt).ok()?;
    let sfi = *data.get(usize::from(slots.inlining_positions.checked_sub(1)?))?;
    heap.expect(sfi, l.types.shared_function_info, "SharedFunctionInfo")
        .ok()
}

/// The Code object `code` (tagged) as a frame walk needs it.
pub fn code_info<M: Memory + ?Sized>(heap: &Heap<'_, M>, code: u64) -> Result<CodeInfo, ReadError> {
    let l = heap.layout;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::v8::{heap::tests::FakeHeap, layout::Layout, testdata::layout_11_3};

    /// A Code object at `addr` (its map `map`) of `kind` with instructions at `start`.
    fn code(h: &FakeHeap, l: &Layout, map: u64, addr: u64, start: u64, size: u32) -> u64 {
        h.put_u64(addr, map);
        match l.fields.code_instructions {
            CodeStart::Pointer(at) => h.put_u64(addr + u64::from(at), start),
            CodeStart::Inline(_) => unreachable!("11.3 points to its instructions"),
        }
        let flags = l.code_kinds.turbofan << l.code_kinds.shift;
        h.put(addr + u64::from(l.fields.code_flags), &flags.to_le_bytes());
        h.put(
            addr + u64::from(l.fields.code_instruction_size),
            &size.to_le_bytes(),
        );
        addr + 1
    }

    #[test]
    fn the_code_holding_a_pc_is_found_from_the_header_before_it() {
        let l = layout_11_3();
        let h = FakeHeap::default();
        let heap = Heap::new(&h, &l);
        let code_map = h.map(0x100, l.types.code);
        let stream_map = 0x777_0001;
        // Instructions live in the code space, each after a header of (map, its Code).
        h.put(0x20_0000, &vec![0u8; 0x10_000]);
        let known = code(&h, &l, code_map, 0x4000, 0x20_9000, 0x100);
        let callee = code(&h, &l, code_map, 0x4100, 0x20_9400, 0x80);
        for (start, c) in [(0x20_9000u64, known), (0x20_9400, callee)] {
            h.put_u64(start - 16, stream_map);
            h.put_u64(start - 8, c);
        }
        // The map word before an aligned address, but no Code after it: passed over.
        h.put_u64(0x20_9200 - 16, stream_map);
        h.put_u64(0x20_9200 - 8, 0x1234);
        let known_code = known;
        let known = code_info(&heap, known).unwrap();
        let at = |pc| code_holding(&heap, &known, pc).map(|c| c.code);
        assert_eq!(at(0x20_9400), Some(callee), "its first instruction");
        assert_eq!(at(0x20_947f), Some(callee), "its last byte");
        assert_eq!(at(0x20_9480), None, "past its end, before the next");
        assert_eq!(at(0x20_9210), None, "after the header with no Code");
        assert_eq!(at(0x20_9050), Some(known_code));
    }

    #[test]
    fn on_stack_replaced_code_is_found_in_the_feedback_vector() {
        let l = layout_11_3();
        let f = l.feedback.expect("11.3 exports them");
        let h = FakeHeap::default();
        let heap = Heap::new(&h, &l);
        let code_map = h.map(0x100, l.types.code);
        let vector_map = h.map(0x200, f.feedback_vector_type);
        let other_map = h.map(0x300, l.types.byte_array);
        // The function runs code at 0x9000..0x9100; its loop's OSR code is at
        // 0xa000..0xa200, weakly in its vector's third slot, after a weak Map-like object.
        let function = 0x1000 + 1;
        let own = code(&h, &l, code_map, 0x4000, 0x9000, 0x100);
        let osr = code(&h, &l, code_map, 0x4100, 0xa000, 0x200);
        h.put_u64(0x1000 + u64::from(l.fields.js_function_code), own);
        h.put_u64(0x1000 + u64::from(f.js_function_feedback_cell), 0x2000 + 1);
        h.put_u64(0x2000 + u64::from(f.feedback_cell_value), 0x3000 + 1);
        h.put_u64(0x3000, vector_map);
        h.put(0x3008, &3i32.to_le_bytes());
        h.put(0x300c, &[0; 4]);
        h.put_u64(0x4200, other_map);
        let header = FEEDBACK_HEADER_WORDS as u64;
        for i in 1..header + 3 {
            h.put_u64(0x3008 + 8 * i, 0);
        }
        h.put_u64(0x3008 + 8 * header, 0x4200 + 3);
        h.put_u64(0x3008 + 8 * (header + 2), osr | 2);
        let at = |pc, top| code_at_pc(&heap, function, pc, top).map(|c| c.start);
        assert_eq!(at(0x9010, true), Some(0x9000), "the function's own code");
        assert_eq!(at(0xa010, true), Some(0xa000), "OSR code, from the vector");
        assert_eq!(
            at(0xa200, false),
            Some(0xa000),
            "a return address at its end"
        );
        assert_eq!(at(0xa000, false), None, "a return address just before it");
        assert_eq!(at(0xb000, true), None, "neither");
    }
}
