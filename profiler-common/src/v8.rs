//! What the kernel walker needs to find V8's JavaScript frames (Node.js): which frame-pointer
//! slots to read, and how to check that a slot holds a JSFunction or a BytecodeArray.
//!
//! User space fills one [`V8Proc`] per process from the build's `v8dbg_*` metadata
//! (`runtimes::v8::Layout`); the walk reads it from a map unchanged. A JS frame is recorded as
//! two words, [`v8_frame`] (the JSFunction), then [`v8_bytecode_offset`] for an interpreted
//! frame or the frame's PC for a compiled one; user space names them soon after the sample,
//! while the function still lives.

use crate::runtimes::{rt_word, slots};

/// A JS frame's first word: its JSFunction (a tagged pointer; `crate::runtimes`, two words);
/// the next word says where in the function it was.
pub const fn v8_frame(function: u64) -> u64 {
    rt_word(slots::JS, 2, 0, function)
}

/// The second word of an interpreted frame: this bit above the frame's bytecode-offset slot's
/// Smi value (still biased by the BytecodeArray's header, as V8 keeps it). Without it the
/// word is a PC: with [`V8_PC_TOP`] the stopped instruction, else a return address.
pub const V8_BYTECODE: u64 = 1 << 63;

/// See [`V8_BYTECODE`].
pub const V8_PC_TOP: u64 = 1 << 62;

/// The second word of an interpreted frame with the raw (biased) offset `smi_value`.
pub const fn v8_bytecode_offset(smi_value: u32) -> u64 {
    V8_BYTECODE | smi_value as u64
}

/// What the kernel walker knows of one V8 process (`V8_PROCS`, by tgid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V8Proc {
    /// Non-zero: the process runs V8 and its frames are walked.
    pub enabled: u8,
    /// Frame-pointer-relative slots (bytes): the context-or-frame-type marker, the function,
    /// the BytecodeArray and the bytecode offset.
    pub slot_marker: i8,
    pub slot_function: i8,
    pub slot_bytecode_array: i8,
    pub slot_bytecode_offset: i8,
    pub _pad0: [u8; 3],
    /// `HeapObject::map` and `Map::instance_type` (bytes from the untagged object).
    pub heap_object_map: u16,
    pub map_instance_type: u16,
    /// The JSFunction instance types (a range: constructors are subtypes).
    pub js_function_first: u16,
    pub js_function_last: u16,
    /// `BYTECODE_ARRAY_TYPE`.
    pub bytecode_array_type: u16,
    pub _pad1: u16,
    /// A Smi's value is the word shifted right by this (32 without pointer compression).
    pub smi_shift: u32,
}

const _: () = assert!(core::mem::size_of::<V8Proc>() == 24);
const _: () = assert!(core::mem::align_of::<V8Proc>() == 4);

// SAFETY: `V8Proc` is `#[repr(C)]` with fixed-width integer fields and explicit padding
// (size asserted above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for V8Proc {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::{rt_payload, rt_slot};

    #[test]
    fn a_js_frame_keeps_its_function() {
        let w = v8_frame(0x1f00_0000_0001);
        assert_eq!((rt_slot(w), rt_payload(w)), (slots::JS, 0x1f00_0000_0001));
        assert_eq!(v8_bytecode_offset(60) & !V8_BYTECODE, 60);
    }
}
