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
    pub _pad0: u8,
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
    /// deoptimisation handler and `_orig_pc_offset`.
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
    pub _pad3: u32,
}

const _: () = assert!(core::mem::size_of::<HsHeap>() == 32);
const _: () = assert!(core::mem::size_of::<HsField>() == 4);
const _: () = assert!(core::mem::size_of::<HsProc>() == 16 + 40 + 32 * MAX_HS_HEAPS + 40);
const _: () = assert!(core::mem::align_of::<HsProc>() == 8);

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
