//! Java frames in a copied stack: the kernel's HotSpot step (`profiler-ebpf/src/hotspot.rs`,
//! `step`), rule for rule, done in user space on the stack copy of a record taken before its
//! process had unwind tables (a JVM's first moments, and the waits begun then), so that
//! those records get the Java frames the kernel's walk would have written. Frame slots are
//! read from the copy alone; the code cache, Method* and ConstMethod from the live process
//! (they outlive the frames of a starting JVM).

use profiler_common::hotspot::{
    HS_BLOCK_BYTES, HS_COMPILED, HS_MAX_HOPS, HS_PROLOGUE_BUILT, HS_PROLOGUE_BUILT_RBP_LIVE,
    HS_PROLOGUE_RA_ABOVE_RBP, HS_TOP, HS_VEP_OFFSET, HS_VEP_POINTER, HsField, HsProc, MAX_HS_HEAPS,
    NATIVE_NMETHOD_NAME, NMETHOD_NAME, hs_compiled, hs_field, hs_frame, hs_interpreted,
    hs_prologue,
};

use crate::runtimes::{
    seam::{CopiedStep, RegsAt},
    shared::memory::Memory,
};

/// The step at `f` in the JVM `e`, or `None` when `f.pc` is outside its code cache (native
/// code: the tables go on). `stack(addr)`: a word of the copied stack; `heap`: the process.
/// A copy carries no r13, so a stopped interpreted frame's bcp comes from its slot (as for
/// off-CPU records in the kernel).
pub fn java_step<M: Memory + ?Sized>(
    e: &HsProc,
    stack: impl Fn(u64) -> Option<u64>,
    heap: &M,
    f: RegsAt,
) -> Option<CopiedStep> {
    // As the kernel's walk: a return address is looked up one byte back, inside its call.
    let at = if f.top { f.pc } else { f.pc.wrapping_sub(1) };
    if e.enabled == 0 || at < e.low || at >= e.high {
        return None;
    }
    let heap_word = |addr: u64| heap.read_u64(addr).ok();
    let step = if f.pc == e.call_stub_return {
        Some(CopiedStep::FramePointer)
    } else if f.pc >= e.interpreter_low && f.pc < e.interpreter_high {
        interpreted(e, &stack, &heap_word, f)
    } else {
        blob(e, &stack, heap, f)
    };
    Some(step.unwrap_or(CopiedStep::Stop))
}

/// An interpreted frame: Method* and bcp from its slots; a native method's (code size 0)
/// has bci 0.
fn interpreted(
    e: &HsProc,
    stack: &impl Fn(u64) -> Option<u64>,
    heap: &impl Fn(u64) -> Option<u64>,
    f: RegsAt,
) -> Option<CopiedStep> {
    if f.bp < f.sp || f.bp & 7 != 0 {
        return None;
    }
    let slot = |off: i8| stack(f.bp.wrapping_add_signed(i64::from(off)));
    let method = slot(e.slot_method)?;
    let cm = heap(method.wrapping_add(u64::from(e.method_const_method)))?;
    let size = heap(cm.wrapping_add(u64::from(e.cm_code_size)))? & 0xffff;
    let bci = if size == 0 {
        0
    } else {
        let code = cm.wrapping_add(u64::from(e.cm_size));
        let bci = slot(e.slot_bcp)?.wrapping_sub(code);
        if bci >= size {
            return None;
        }
        bci
    };
    let sp = slot(e.slot_sender_sp)?;
    let pc = stack(f.bp.wrapping_add(8))?;
    let bp = stack(f.bp)?;
    Some(CopiedStep::Next {
        words: Some([hs_frame(0, method), hs_interpreted(cm, bci as u32)]),
        pc,
        sp,
        bp,
    })
}

/// A frame in a code blob (an nmethod, a JNI wrapper, a stub), found through its heap's
/// segment map and read as one block, as the kernel reads it.
fn blob<M: Memory + ?Sized>(
    e: &HsProc,
    stack: &impl Fn(u64) -> Option<u64>,
    heap: &M,
    f: RegsAt,
) -> Option<CopiedStep> {
    let block = block_of(e, heap, f.pc)?;
    let len = usize::from(e.block_bytes).clamp(8, HS_BLOCK_BYTES as usize);
    let mut bytes = [0u8; HS_BLOCK_BYTES as usize + 8];
    heap.read(block, &mut bytes[..len]).ok()?;
    // (`bytes` has 8 bytes past the largest offset a field may have.)
    let field = |fl: &HsField| {
        let at = usize::from(fl.offset) & (HS_BLOCK_BYTES as usize - 1);
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        hs_field(u64::from_le_bytes(word), fl)
    };
    if field(&e.used) & 0xff == 0 {
        return None;
    }
    let blob = block + u64::from(e.blob);
    let frame_size = field(&e.frame_size).wrapping_mul(8);
    let name = heap.read_u64(field(&e.name)).ok()?;
    let address = |fl: &HsField, is_offset: u8| {
        if is_offset != 0 {
            blob.wrapping_add(field(fl))
        } else {
            field(fl)
        }
    };
    if name == NMETHOD_NAME || name == NATIVE_NMETHOD_NAME {
        let code = address(&e.code, e.code_is_offset);
        let mut state = HS_PROLOGUE_BUILT;
        let entry = f.top && f.pc < code.wrapping_add(field(&e.frame_complete));
        if entry {
            // The prologue: where the caller is follows from the PC (as in the kernel).
            let vep = match e.verified_entry_is {
                HS_VEP_POINTER => field(&e.verified_entry),
                HS_VEP_OFFSET => code.wrapping_add(field(&e.verified_entry)),
                _ => return None,
            };
            let early = f.pc <= vep;
            let insn = if early {
                0
            } else {
                heap.read_u64(f.pc - 3).ok()?
            };
            state = hs_prologue(early, insn);
        }
        let framed = state >= HS_PROLOGUE_BUILT;
        let mut at = f.pc;
        if !f.top && f.pc == address(&e.deopt, e.deopt_is_offset) {
            // Returning into the deopt handler: the PC it was deoptimised at is in the frame.
            at = stack(f.sp.wrapping_add(field(&e.orig_pc_offset)))?;
        }
        if (framed && (frame_size == 0 || frame_size > 1 << 20))
            || at < blob
            || at - blob > u64::from(u32::MAX)
        {
            return None;
        }
        let word = hs_frame(HS_COMPILED | if f.top { HS_TOP } else { 0 }, blob);
        let words = Some([
            word,
            hs_compiled(field(&e.compile_id) as u32, (at - blob) as u32),
        ]);
        if !framed {
            // Nothing pushed yet, or only rbp: the return address on top, or above rbp.
            let above = if state == HS_PROLOGUE_RA_ABOVE_RBP {
                8
            } else {
                0
            };
            let ra = stack(f.sp + above).filter(|&ra| ra >= e.low && ra < e.high)?;
            let bp = if above != 0 { stack(f.sp)? } else { f.bp };
            return Some(CopiedStep::Next {
                words,
                pc: ra,
                sp: f.sp + above + 8,
                bp,
            });
        }
        let caller = f.sp + frame_size;
        let ra = stack(caller - 8)?;
        if ra >= e.low && ra < e.high {
            let bp = if state == HS_PROLOGUE_BUILT_RBP_LIVE {
                f.bp
            } else {
                stack(caller - 16)?
            };
            return Some(CopiedStep::Next {
                words,
                pc: ra,
                sp: caller,
                bp,
            });
        }
        // A stopped frame whose frame-size step leaves the code cache is in its epilogue:
        // its frame popped, the return address on top of the stack (not in the prologue).
        let ra = stack(f.sp).filter(|_| f.top && !entry)?;
        return (ra >= e.low && ra < e.high).then_some(CopiedStep::Next {
            words,
            pc: ra,
            sp: f.sp + 8,
            bp: f.bp,
        });
    }
    // A stub, an adapter, a runtime blob: stepped by its frame size, or by rbp; stopped
    // in a frameless stub (vtable, itable), by the return address on top of the stack.
    if frame_size == 0 || frame_size > 1 << 20 {
        if f.top
            && let Some(ra) = stack(f.sp).filter(|&ra| ra >= e.low && ra < e.high)
        {
            return Some(CopiedStep::Next {
                words: None,
                pc: ra,
                sp: f.sp + 8,
                bp: f.bp,
            });
        }
        return Some(CopiedStep::FramePointer);
    }
    let caller = frame_size + f.sp;
    Some(CopiedStep::Next {
        words: None,
        pc: stack(caller - 8)?,
        sp: caller,
        bp: stack(caller - 16)?,
    })
}

/// The start of the code block holding `pc`, through its heap's segment map (each used
/// segment's byte: how many segments back the block starts; 0 at its start, 0xff free).
fn block_of<M: Memory + ?Sized>(e: &HsProc, heap: &M, pc: u64) -> Option<u64> {
    let h = e.heaps[..usize::from(e.heaps_len).min(MAX_HS_HEAPS)]
        .iter()
        .find(|h| pc >= h.low && pc < h.high)?;
    let shift = h.log2_segment & 31;
    let mut segment = (pc - h.low) >> shift;
    let byte = |at: u64| {
        let mut b = [0u8; 1];
        heap.read(h.segmap + at, &mut b)
            .ok()
            .map(|()| u64::from(b[0]))
    };
    let mut tag = byte(segment)?;
    if tag == 0xff {
        return None;
    }
    for _ in 0..HS_MAX_HOPS {
        if tag == 0 {
            return Some(h.low + (segment << shift));
        }
        if tag > segment {
            return None;
        }
        segment -= tag;
        tag = byte(segment)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use profiler_common::hotspot::HsHeap;

    use super::*;
    use crate::runtimes::shared::memory::FakeMemory;

    /// A JVM whose code cache is 0x10_0000..0x20_0000: the interpreter at 0x10_0000..
    /// 0x10_1000, the call stub returning at 0x10_2000, one heap of 64-byte segments from
    /// 0x11_0000 whose segment map is at 0x30_0000; blocks' blob at +16, fields in it.
    fn jvm() -> HsProc {
        let field = |offset, size| HsField {
            offset,
            size,
            signed: 0,
        };
        let mut heaps = [HsHeap::default(); MAX_HS_HEAPS];
        heaps[0] = HsHeap {
            low: 0x11_0000,
            high: 0x20_0000,
            segmap: 0x30_0000,
            log2_segment: 6,
            _pad: 0,
        };
        HsProc {
            enabled: 1,
            heaps_len: 1,
            slot_method: -24,
            slot_bcp: -64,
            slot_sender_sp: -8,
            block_bytes: 128,
            method_const_method: 8,
            cm_code_size: 16,
            cm_size: 48,
            low: 0x10_0000,
            high: 0x20_0000,
            interpreter_low: 0x10_0000,
            interpreter_high: 0x10_1000,
            call_stub_return: 0x10_2000,
            heaps,
            blob: 16,
            used: field(0, 1),
            name: field(24, 8),
            frame_size: field(32, 4),
            code: field(40, 8),
            frame_complete: field(48, 4),
            compile_id: field(56, 4),
            deopt: field(64, 8),
            orig_pc_offset: field(72, 4),
            ..HsProc::default()
        }
    }

    fn words(at: &[(u64, u64)]) -> HashMap<u64, u64> {
        at.iter().copied().collect()
    }

    #[test]
    fn an_interpreted_frame_from_its_slots() {
        let e = jvm();
        let mut heap = FakeMemory::default();
        // Method 0x50_0000 -> ConstMethod 0x60_0000, 40 bytes of bytecodes after 48.
        heap.put(0x50_0008, &0x60_0000u64.to_le_bytes());
        heap.put(0x60_0010, &40u64.to_le_bytes());
        let bp = 0x7f00_0100;
        let stack = words(&[
            (bp - 24, 0x50_0000),
            (bp - 64, 0x60_0000 + 48 + 7),
            (bp - 8, 0x7f00_0200),
            (bp, 0x7f00_0300),
            (bp + 8, 0x10_2000),
        ]);
        let f = RegsAt {
            pc: 0x10_0100,
            sp: 0x7f00_0080,
            bp,
            top: true,
        };
        let step = java_step(&e, |a| stack.get(&a).copied(), &heap, f);
        assert_eq!(
            step,
            Some(CopiedStep::Next {
                words: Some([hs_frame(0, 0x50_0000), hs_interpreted(0x60_0000, 7)]),
                pc: 0x10_2000,
                sp: 0x7f00_0200,
                bp: 0x7f00_0300,
            })
        );
        // Its caller returns into the call stub: left by frame pointer.
        let f = RegsAt {
            pc: 0x10_2000,
            top: false,
            ..f
        };
        assert_eq!(
            java_step(&e, |a| stack.get(&a).copied(), &heap, f),
            Some(CopiedStep::FramePointer)
        );
        // A bcp past the method's bytecodes: not walked.
        let bad = words(&[(bp - 24, 0x50_0000), (bp - 64, 0x60_0000 + 48 + 40)]);
        let f = RegsAt { top: true, ..f };
        let f = RegsAt { pc: 0x10_0100, ..f };
        assert_eq!(
            java_step(&e, |a| bad.get(&a).copied(), &heap, f),
            Some(CopiedStep::Stop)
        );
        // Native code: not this walk's.
        let f = RegsAt { pc: 0x40_0000, ..f };
        assert_eq!(java_step(&e, |a| stack.get(&a).copied(), &heap, f), None);
    }

    #[test]
    fn a_compiled_frame_through_the_segment_map() {
        let e = jvm();
        let mut heap = FakeMemory::default();
        // The block at segment 2 (0x11_0080) spans segments 2..6: map bytes 0, 1, 2, 3.
        heap.put(0x30_0000, &[0xff, 0xff, 0, 1, 2, 3, 0xff, 0xff]);
        let block = 0x11_0080u64;
        let blob = block + 16;
        let mut b = vec![0u8; 136];
        b[0] = 1; // used
        b[24..32].copy_from_slice(&0x70_0000u64.to_le_bytes()); // name
        b[32..36].copy_from_slice(&6u32.to_le_bytes()); // frame size: 6 words
        b[40..48].copy_from_slice(&(blob + 0x20).to_le_bytes()); // code
        b[48..52].copy_from_slice(&0x10u32.to_le_bytes()); // frame complete
        b[56..60].copy_from_slice(&42u32.to_le_bytes()); // compile id
        b[64..72].copy_from_slice(&(blob + 0x100).to_le_bytes()); // deopt handler
        heap.put(block, &b);
        heap.put(0x70_0000, b"nmethod\0");
        let sp = 0x7f00_0000u64;
        let stack = words(&[(sp + 40, 0x10_0200), (sp + 32, 0x7f00_0400)]);
        let pc = 0x11_0100;
        let f = RegsAt {
            pc,
            sp,
            bp: 0,
            top: true,
        };
        assert_eq!(
            java_step(&e, |a| stack.get(&a).copied(), &heap, f),
            Some(CopiedStep::Next {
                words: Some([
                    hs_frame(HS_COMPILED | HS_TOP, blob),
                    hs_compiled(42, (pc - blob) as u32)
                ]),
                pc: 0x10_0200,
                sp: sp + 48,
                bp: 0x7f00_0400,
            })
        );
        // Stopped in its prologue (before frame complete): not walked.
        let f = RegsAt {
            pc: blob + 0x28,
            ..f
        };
        assert_eq!(
            java_step(&e, |a| stack.get(&a).copied(), &heap, f),
            Some(CopiedStep::Stop)
        );
        // A free segment: no block.
        let f = RegsAt { pc: 0x11_0000, ..f };
        assert_eq!(
            java_step(&e, |a| stack.get(&a).copied(), &heap, f),
            Some(CopiedStep::Stop)
        );
    }

    #[test]
    fn a_compiled_frame_stopped_in_its_prologue() {
        // JDK 25's C2 entry, code at blob + 0x20: the inline cache check (8 bytes), the
        // verified entry at +8 (the stack bang), push rbp at +0xf, sub rsp at +0x10, the
        // entry barrier at +0x14 (frame complete at +0x1c). A 6-word frame.
        let mut e = jvm();
        e.verified_entry_is = HS_VEP_OFFSET;
        e.verified_entry = HsField {
            offset: 72,
            size: 2,
            signed: 0,
        };
        let mut heap = FakeMemory::default();
        heap.put(0x30_0000, &[0xff, 0xff, 0, 1, 2, 3, 0xff, 0xff]);
        let block = 0x11_0080u64;
        let blob = block + 16;
        let code = blob + 0x20;
        let mut b = vec![0u8; 136];
        b[0] = 1; // used
        b[24..32].copy_from_slice(&0x70_0000u64.to_le_bytes()); // name
        b[32..36].copy_from_slice(&6u32.to_le_bytes()); // frame size: 6 words
        b[40..48].copy_from_slice(&code.to_le_bytes()); // code
        b[48..52].copy_from_slice(&0x1cu32.to_le_bytes()); // frame complete
        b[56..60].copy_from_slice(&42u32.to_le_bytes()); // compile id
        b[72..74].copy_from_slice(&8u16.to_le_bytes()); // verified entry
        heap.put(block, &b);
        heap.put(
            code,
            &[
                0x44, 0x8b, 0x56, 0x08, 0x44, 0x3b, 0x50, 0x08, // mov, cmp (the ic check)
                0x89, 0x84, 0x24, 0x00, 0xc0, 0xfe, 0xff, // mov [rsp-0x14000], eax
                0x55, // push rbp
                0x48, 0x83, 0xec, 0x20, // sub rsp, 0x20
                0x41, 0x81, 0x7f, 0x20, 0x01, 0x00, 0x00, 0x00, // cmp [r15+0x20], 1
            ],
        );
        heap.put(0x70_0000, b"nmethod\0");
        let sp = 0x7f00_0000u64;
        let (ra, rbp) = (0x10_0200u64, 0x7f00_0400u64);
        let step = |pc: u64, stack: &[(u64, u64)]| {
            let stack = words(stack);
            let f = RegsAt {
                pc,
                sp,
                bp: 0x55,
                top: true,
            };
            java_step(&e, |a| stack.get(&a).copied(), &heap, f)
        };
        let next = |pc: u64, sp: u64, bp: u64| {
            Some(CopiedStep::Next {
                words: Some([
                    hs_frame(HS_COMPILED | HS_TOP, blob),
                    hs_compiled(42, (pc - blob) as u32),
                ]),
                pc: ra,
                sp,
                bp,
            })
        };
        // The ic check, the verified entry, push rbp: the return address on top.
        for pc in [code + 4, code + 8, code + 0xf] {
            assert_eq!(step(pc, &[(sp, ra)]), next(pc, sp + 8, 0x55), "{pc:#x}");
        }
        // sub rsp after push rbp: rbp on top, the return address above it.
        let pc = code + 0x10;
        assert_eq!(step(pc, &[(sp, rbp), (sp + 8, ra)]), next(pc, sp + 16, rbp));
        // The entry barrier: the frame is built, stepped by its size.
        let pc = code + 0x14;
        assert_eq!(
            step(pc, &[(sp + 40, ra), (sp + 32, rbp)]),
            next(pc, sp + 48, rbp)
        );
        // Built, no return address where the frame size says: not walked (the top of a
        // frame being built is no epilogue's return address).
        assert_eq!(step(pc, &[(sp, ra)]), Some(CopiedStep::Stop));
        // No return address into the code cache where the prologue says: not walked.
        assert_eq!(step(code + 8, &[(sp, 0x40_0000)]), Some(CopiedStep::Stop));
    }

    #[test]
    fn a_stub_without_a_frame_size() {
        let e = jvm();
        let mut heap = FakeMemory::default();
        heap.put(0x30_0000, &[0]);
        let block = 0x11_0000u64;
        let mut b = vec![0u8; 136];
        b[0] = 1; // used
        b[24..32].copy_from_slice(&0x70_0000u64.to_le_bytes()); // name
        heap.put(block, &b);
        heap.put(0x70_0000, b"vtable chunks\0");
        let sp = 0x7f00_0000u64;
        // Stopped in it, a return address into the code cache on top: popped.
        let stack = words(&[(sp, 0x11_0400)]);
        let f = RegsAt {
            pc: 0x11_0020,
            sp,
            bp: 0x7f00_0100,
            top: true,
        };
        assert_eq!(
            java_step(&e, |a| stack.get(&a).copied(), &heap, f),
            Some(CopiedStep::Next {
                words: None,
                pc: 0x11_0400,
                sp: sp + 8,
                bp: 0x7f00_0100,
            })
        );
        // A saved rbp on top (an rbp frame built), or a caller's frame: by frame pointer.
        let saved = words(&[(sp, 0x7f00_0100)]);
        assert_eq!(
            java_step(&e, |a| saved.get(&a).copied(), &heap, f),
            Some(CopiedStep::FramePointer)
        );
        let f = RegsAt { top: false, ..f };
        assert_eq!(
            java_step(&e, |a| stack.get(&a).copied(), &heap, f),
            Some(CopiedStep::FramePointer)
        );
    }
}
