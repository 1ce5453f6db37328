//! What the kernel walker needs to walk HotSpot's Java frames (a JVM's interpreter and JIT
//! code): the code cache's bounds and heaps (segment maps), the interpreter's code, the call
//! stub's return address, the interpreter frame's slots, and where a code blob keeps the
//! fields the walk reads.
//!
//! User space fills one [`HsProc`] per process from the JVM's own VMStructs
//! (`runtimes::hotspot::Layout`); the walk reads it from a map unchanged. A Java frame is
//! recorded as two words: [`hs_frame`] of the Method* (interpreted) or the nmethod
//! ([`HS_COMPILED`], [`HS_TOP`] when its PC is the stopped instruction), then
//! [`hs_interpreted`] or [`hs_compiled`]. User space names them soon after the sample.

use crate::runtimes::{rt_word, slots};

/// A Java frame's first word (`crate::runtimes`, two words): the Method* or nmethod, with
/// [`HS_COMPILED`] and [`HS_TOP`] in its runtime bits.
pub const fn hs_frame(flags: u8, address: u64) -> u64 {
    rt_word(slots::JAVA, 2, flags, address)
}
/// The frame is compiled code: the word holds the nmethod, not a Method*.
pub const HS_COMPILED: u8 = 1;
/// A compiled frame's PC is the stopped instruction, not a return address.
pub const HS_TOP: u8 = 2;

/// The second word of an interpreted frame: the low 32 bits of its ConstMethod* (user space
/// checks the Method* still has it: a redefined or unloaded class is not misnamed) above
/// the bci.
pub const fn hs_interpreted(const_method: u64, bci: u32) -> u64 {
    (const_method << 32) | bci as u64
}

/// The second word of a compiled frame: the nmethod's compile id (a different one at that
/// address later means the nmethod was freed and its memory reused) above the PC's offset
/// from the nmethod (the deoptimised PC for a frame returning into the deopt handler).
pub const fn hs_compiled(compile_id: u32, pc_offset: u32) -> u64 {
    ((compile_id as u64) << 32) | pc_offset as u64
}

/// Code heaps the walk searches (JDK 9+ with tiered compilation has 3).
pub const MAX_HS_HEAPS: usize = 4;
/// Bytes of a code block (HeapBlock header, then the CodeBlob) the walk reads at most; every
/// field it needs must lie inside (user space checks).
pub const HS_BLOCK_BYTES: u32 = 512;
/// Segment map hops followed before a PC is given up as in no blob.
pub const HS_MAX_HOPS: u32 = 32;

/// One code heap: its reserved range, its segment map, its segment size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HsHeap {
    pub low: u64,
    pub high: u64,
    pub segmap: u64,
    pub log2_segment: u32,
    pub _pad: u32,
}

/// A field of a code block: byte offset from the block's start, width (1, 2, 4 or 8) and
/// whether it is signed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HsField {
    pub offset: u16,
    pub size: u8,
    pub signed: u8,
}

/// What the kernel walker knows of one JVM (`HS_PROCS`, by tgid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HsProc {
    /// Non-zero: the process runs a HotSpot whose frames are walked.
    pub enabled: u8,
    /// Heaps in `heaps`.
    pub heaps_len: u8,
    /// Interpreter frame slots (bytes from rbp): Method*, the saved bcp, the sender sp.
    pub slot_method: i8,
    pub slot_bcp: i8,
    pub slot_sender_sp: i8,
    /// Non-zero: the blob's code start is an offset from the blob (23+), else a pointer;
    /// likewise the deoptimisation handler.
    pub code_is_offset: u8,
    pub deopt_is_offset: u8,
    /// How `verified_entry` gives the nmethod's verified entry point: [`HS_VEP_NONE`] (the
    /// build exports none: a frame stopped in its prologue is not walked),
    /// [`HS_VEP_POINTER`] (≤ 22) or [`HS_VEP_OFFSET`] (from the code start, 23+).
    pub verified_entry_is: u8,
    /// Bytes of the code block read (every field below inside it).
    pub block_bytes: u16,
    /// `Method::_constMethod`, `ConstMethod::_code_size` (a u2), `sizeof(ConstMethod)` (the
    /// bytecodes follow it).
    pub method_const_method: u16,
    pub cm_code_size: u16,
    pub cm_size: u16,
    /// `[CodeCache::_low_bound, _high_bound)`: a PC outside is native code.
    pub low: u64,
    pub high: u64,
    /// The template interpreter's code.
    pub interpreter_low: u64,
    pub interpreter_high: u64,
    /// Where Java code returns into the call stub (native code called Java there).
    pub call_stub_return: u64,
    pub heaps: [HsHeap; MAX_HS_HEAPS],
    /// Fields of the code block (from its start: the HeapBlock header, then the blob at
    /// `blob`): `_used`, the blob's `_name` pointer, `_frame_size` (words), code start,
    /// `_frame_complete_offset` (from the code start), and an nmethod's `_compile_id`,
    /// deoptimisation handler, `_orig_pc_offset` and verified entry point.
    pub blob: u16,
    pub _pad2: u16,
    pub used: HsField,
    pub name: HsField,
    pub frame_size: HsField,
    pub code: HsField,
    pub frame_complete: HsField,
    pub compile_id: HsField,
    pub deopt: HsField,
    pub orig_pc_offset: HsField,
    pub verified_entry: HsField,
}

const _: () = assert!(core::mem::size_of::<HsHeap>() == 32);
const _: () = assert!(core::mem::size_of::<HsField>() == 4);
const _: () = assert!(core::mem::size_of::<HsProc>() == 16 + 40 + 32 * MAX_HS_HEAPS + 40);
const _: () = assert!(core::mem::align_of::<HsProc>() == 8);

/// [`HsProc::verified_entry_is`]: no verified entry point known.
pub const HS_VEP_NONE: u8 = 0;
/// [`HsProc::verified_entry_is`]: a pointer (`nmethod::_verified_entry_point`).
pub const HS_VEP_POINTER: u8 = 1;
/// [`HsProc::verified_entry_is`]: an offset from the code start
/// (`nmethod::_verified_entry_offset`).
pub const HS_VEP_OFFSET: u8 = 2;

/// [`hs_prologue`]: the return address is on top of the stack (nothing pushed yet).
pub const HS_PROLOGUE_RA_TOP: u8 = 0;
/// [`hs_prologue`]: rbp is pushed on top of the stack, the return address above it.
pub const HS_PROLOGUE_RA_ABOVE_RBP: u8 = 1;
/// [`hs_prologue`]: the frame is built (rsp lowered by the frame size): stepped by it.
pub const HS_PROLOGUE_BUILT: u8 = 2;
/// [`hs_prologue`]: the frame is built but rbp is not saved in it yet (the instruction
/// saving it is the stopped one): stepped by the frame size, rbp kept.
pub const HS_PROLOGUE_BUILT_RBP_LIVE: u8 = 3;

/// Where a compiled frame stopped before its frame is complete (x86_64 HotSpot, C1, C2 and
/// JNI wrappers) has its caller: `at_or_before_vep`, whether the PC is at or before the
/// nmethod's verified entry point (the inline cache check and the first instruction of the
/// entry: nothing pushed yet); else `insn`, the 8 code bytes from 3 before the PC (the
/// stopped instruction at byte 3). After the verified entry HotSpot's x86_64 prologue is
/// the stack bang (`mov [rsp-N], eax`, maybe several), `push rbp`, `mov rbp, rsp` (JNI
/// wrappers, PreserveFramePointer), `sub rsp, N`, then the nmethod entry barrier; C2's
/// frameless-bang variant is `sub rsp, N` at the entry then `mov [rsp+N-16], rbp`.
pub const fn hs_prologue(at_or_before_vep: bool, insn: u64) -> u8 {
    if at_or_before_vep {
        return HS_PROLOGUE_RA_TOP;
    }
    let b = insn.to_le_bytes();
    let (prev3, prev1) = ([b[0], b[1], b[2]], b[2]);
    match [b[3], b[4], b[5], b[6]] {
        // push rbp; the stack bang.
        [0x55, ..] | [0x89, 0x84, 0x24, _] => HS_PROLOGUE_RA_TOP,
        // mov rbp, rsp (after push rbp).
        [0x48, 0x89, 0xe5, _] => HS_PROLOGUE_RA_ABOVE_RBP,
        // sub rsp, imm8 / imm32 after push rbp or mov rbp, rsp.
        [0x48, 0x83 | 0x81, 0xec, _]
            if prev1 == 0x55 || (prev3[0] == 0x48 && prev3[1] == 0x89 && prev3[2] == 0xe5) =>
        {
            HS_PROLOGUE_RA_ABOVE_RBP
        }
        // mov [rsp+disp8/32], rbp: C2's frame built by `sub rsp` first.
        [0x48, 0x89, 0x6c | 0xac, 0x24] => HS_PROLOGUE_BUILT_RBP_LIVE,
        _ => HS_PROLOGUE_BUILT,
    }
}

/// The first 8 bytes of an nmethod's blob name (`"nmethod"`).
pub const NMETHOD_NAME: u64 = u64::from_le_bytes(*b"nmethod\0");
/// The first 8 bytes of a JNI wrapper's blob name (`"native nmethod"`).
pub const NATIVE_NMETHOD_NAME: u64 = u64::from_le_bytes(*b"native n");

/// The value of `field` from `word`, the 8 little-endian bytes at its offset: its low
/// `size` bytes, widened (sign extended when signed).
pub fn hs_field(word: u64, field: &HsField) -> u64 {
    let bits = 8 * u32::from(field.size & 15).clamp(1, 8);
    if bits >= 64 {
        return word;
    }
    let shift = 64 - bits;
    if field.signed != 0 {
        (((word << shift) as i64) >> shift) as u64
    } else {
        (word << shift) >> shift
    }
}

// SAFETY: `#[repr(C)]` with fixed-width integer fields and explicit padding (sizes
// asserted above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for HsProc {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::{rt_flags, rt_payload, rt_slot};

    #[test]
    fn a_java_frame_keeps_its_flags_and_address() {
        let w = hs_frame(HS_COMPILED | HS_TOP, 0x7f12_3456_7000);
        assert_eq!(rt_slot(w), slots::JAVA);
        assert_eq!(rt_flags(w), HS_COMPILED | HS_TOP);
        assert_eq!(rt_payload(w), 0x7f12_3456_7000);
        assert_eq!(
            hs_interpreted(0x7f00_dead_beef, 17) >> 32 & 0xffff_ffff,
            0xdead_beef
        );
        assert_eq!(hs_compiled(77, 0x140), 77 << 32 | 0x140);
    }

    #[test]
    fn a_prologue_is_read_by_its_instruction() {
        // 8 code bytes from 3 before the PC (the stopped instruction at byte 3).
        let at = |before: [u8; 3], insn: &[u8]| {
            let mut b = [0x90u8; 8];
            b[..3].copy_from_slice(&before);
            b[3..3 + insn.len()].copy_from_slice(insn);
            u64::from_le_bytes(b)
        };
        let bang = [0x89, 0x84, 0x24, 0x00, 0xc0];
        assert_eq!(hs_prologue(true, 0), HS_PROLOGUE_RA_TOP);
        assert_eq!(
            hs_prologue(false, at([0xc0, 0xfe, 0xff], &bang)),
            HS_PROLOGUE_RA_TOP
        );
        assert_eq!(
            hs_prologue(false, at([0xc0, 0xfe, 0xff], &[0x55])),
            HS_PROLOGUE_RA_TOP
        );
        // sub rsp after push rbp (C1, C2), after mov rbp, rsp (JNI wrappers).
        let sub8 = [0x48, 0x83, 0xec, 0x20];
        let sub32 = [0x48, 0x81, 0xec, 0x00, 0x01];
        assert_eq!(
            hs_prologue(false, at([0xfe, 0xff, 0x55], &sub8)),
            HS_PROLOGUE_RA_ABOVE_RBP
        );
        assert_eq!(
            hs_prologue(false, at([0x48, 0x89, 0xe5], &sub32)),
            HS_PROLOGUE_RA_ABOVE_RBP
        );
        assert_eq!(
            hs_prologue(false, at([0xff, 0xff, 0x55], &[0x48, 0x89, 0xe5])),
            HS_PROLOGUE_RA_ABOVE_RBP
        );
        // C2 without a bang: sub rsp at the entry, then rbp saved into the frame.
        assert_eq!(
            hs_prologue(
                false,
                at([0x00, 0x00, 0x00], &[0x48, 0x89, 0x6c, 0x24, 0x10])
            ),
            HS_PROLOGUE_BUILT_RBP_LIVE
        );
        // The entry barrier (cmp [r15+0x20], imm32): built.
        assert_eq!(
            hs_prologue(
                false,
                at([0x83, 0xec, 0x20], &[0x41, 0x81, 0x7f, 0x20, 0x01])
            ),
            HS_PROLOGUE_BUILT
        );
    }

    #[test]
    fn fields_widen_by_their_width_and_sign() {
        let f = |size, signed| HsField {
            offset: 0,
            size,
            signed,
        };
        assert_eq!(hs_field(0xffff_ffff_ffff_fffe, &f(4, 1)), (-2i64) as u64);
        assert_eq!(hs_field(0xffff_ffff_ffff_fffe, &f(4, 0)), 0xffff_fffe);
        assert_eq!(hs_field(0x1234_8001, &f(2, 1)), (-32767i64) as u64);
        assert_eq!(hs_field(0x1234_0101, &f(1, 0)), 1);
        assert_eq!(hs_field(u64::MAX, &f(8, 0)), u64::MAX);
    }
}
