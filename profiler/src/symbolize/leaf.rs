//! Recovering the caller of a function that has no frame-pointer prologue.
//!
//! A frame-pointer walk finds each caller through the saved `rbp` chain. A function that
//! never pushes `rbp` (compilers omit it in leaf functions, even under
//! `-fno-omit-frame-pointer`) leaves its caller's frame unlinked, so the walk skips the caller.
//! When the sample was taken in such a function, or on the first instruction of any
//! function, the word at the stack pointer is the return address into that caller. We accept
//! it only if the bytes before it are a `call` instruction, so a random stack word is never
//! taken for a frame.
//!
//! aarch64 is the same with its own instructions: `bl` leaves the return address in x30 (the
//! sample's link register is the candidate), and a function links its frame record by
//! `mov x29, sp` (or `add x29, sp, #n`) a few instructions in.

use std::{fs::File, os::unix::fs::FileExt};

/// `push %rbp; mov %rsp,%rbp`, optionally after `endbr64`.
const PUSH_MOV: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// How a function starts, as far as the frame-pointer walk is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prologue {
    /// Sets up `rbp`; the walk is right once past `prologue_len` bytes.
    FramePointer { prologue_len: u64 },
    /// Never sets up `rbp`.
    Frameless,
}

pub fn classify_prologue(bytes: &[u8]) -> Prologue {
    if bytes.starts_with(&PUSH_MOV) {
        Prologue::FramePointer { prologue_len: 0 }
    } else if bytes.starts_with(&ENDBR64) && bytes[4..].starts_with(&PUSH_MOV) {
        Prologue::FramePointer { prologue_len: 4 }
    } else {
        Prologue::Frameless
    }
}

/// An aarch64 function's first instructions: the record is linked by the first
/// `add x29, sp, #imm` (`mov x29, sp` is its #0 form) among them.
pub fn classify_prologue_aarch64(bytes: &[u8; 32]) -> Prologue {
    const ADD_X29_SP_MASK: u32 = 0xff80_03ff;
    const ADD_X29_SP: u32 = 0x9100_03fd;
    bytes
        .chunks_exact(4)
        .position(|w| {
            let insn = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            insn & ADD_X29_SP_MASK == ADD_X29_SP
        })
        .map_or(Prologue::Frameless, |i| Prologue::FramePointer {
            prologue_len: 4 * i as u64,
        })
}

/// True if an aarch64 instruction is a function's return, or the authentication of its
/// return address just before it (`ret`, `retaa`, `retab`, `autiasp`, `autibsp`): the
/// frame record is unlinked by then.
pub fn returns_aarch64(insn: &[u8; 4]) -> bool {
    matches!(
        u32::from_le_bytes(*insn),
        0xd65f_03c0 | 0xd65f_0bff | 0xd65f_0fff | 0xd503_23bf | 0xd503_23ff
    )
}

/// True if the aarch64 instruction before a return address is a call: `bl`, or `blr`
/// (with or without pointer authentication: `blraa`, `blrab`, `blraaz`, `blrabz`).
pub fn preceded_by_call_aarch64(before: &[u8; 4]) -> bool {
    let insn = u32::from_le_bytes(*before);
    insn & 0xfc00_0000 == 0x9400_0000
        || insn & 0xffff_fc1f == 0xd63f_0000
        || insn & 0xfeff_f800 == 0xd63f_0800
}

/// True if the sampled instruction, `offset_in_fn` bytes into a function starting with
/// `prologue`, has the return address at the stack pointer and no frame of its own yet.
pub fn return_address_at_sp(prologue: Prologue, offset_in_fn: u64) -> bool {
    match prologue {
        Prologue::Frameless => true,
        Prologue::FramePointer { prologue_len } => offset_in_fn <= prologue_len,
    }
}

/// True if the bytes ending just before a return address are a call instruction: `call
/// rel32` (e8), or an indirect `call r/m` (ff /2) of 2, 3, 6 or 7 bytes.
pub fn preceded_by_call(before: &[u8; 7]) -> bool {
    let ff2 = |i: usize| before[i] == 0xff && (before[i + 1] >> 3) & 7 == 2;
    before[2] == 0xe8 || ff2(5) || ff2(4) || ff2(1) || ff2(0)
}

/// Reads `N` bytes of `file` at `offset` (a positional read: the descriptor is shared).
pub fn read_bytes<const N: usize>(file: &File, offset: u64) -> Option<[u8; N]> {
    let mut buf = [0u8; N];
    file.read_exact_at(&mut buf, offset).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_aarch64_prologues_and_calls() {
        let code = |insns: &[u32]| {
            let mut b = [0u8; 32];
            for (i, insn) in insns.iter().enumerate() {
                b[4 * i..4 * i + 4].copy_from_slice(&insn.to_le_bytes());
            }
            b
        };
        // paciasp; stp x29, x30, [sp, #-32]!; mov x29, sp
        assert_eq!(
            classify_prologue_aarch64(&code(&[0xd503_233f, 0xa9be_7bfd, 0x9100_03fd])),
            Prologue::FramePointer { prologue_len: 8 }
        );
        // sub sp, sp, #0x40; stp x29, x30, [sp, #0x30]; add x29, sp, #0x30
        assert_eq!(
            classify_prologue_aarch64(&code(&[0xd101_03ff, 0xa903_7bfd, 0x9100_c3fd])),
            Prologue::FramePointer { prologue_len: 8 }
        );
        // A leaf: ldr w0, [x0]; add w0, w0, #1; ret
        assert_eq!(
            classify_prologue_aarch64(&code(&[0xb940_0000, 0x1100_0400, 0xd65f_03c0])),
            Prologue::Frameless
        );
        // bl <+0x40>, blr x3, blraaz x8; not: ret, add
        for call in [0x9400_0010u32, 0xd63f_0060, 0xd63f_091f] {
            assert!(preceded_by_call_aarch64(&call.to_le_bytes()), "{call:#x}");
        }
        for other in [0xd65f_03c0u32, 0x1100_0400] {
            assert!(
                !preceded_by_call_aarch64(&other.to_le_bytes()),
                "{other:#x}"
            );
        }
        // ret, retaa, autiasp; not: ldp x29, x30, [sp], #16
        for ret in [0xd65f_03c0u32, 0xd65f_0bff, 0xd503_23bf] {
            assert!(returns_aarch64(&ret.to_le_bytes()), "{ret:#x}");
        }
        assert!(!returns_aarch64(&0xa8c1_7bfdu32.to_le_bytes()));
    }

    #[test]
    fn classifies_prologues() {
        assert_eq!(
            classify_prologue(&[0x55, 0x48, 0x89, 0xe5, 0, 0, 0, 0]),
            Prologue::FramePointer { prologue_len: 0 }
        );
        assert_eq!(
            classify_prologue(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5]),
            Prologue::FramePointer { prologue_len: 4 }
        );
        // chain.c's leaf at -O1: `mov 0x2e98(%rip),%rax`, no frame.
        assert_eq!(
            classify_prologue(&[0x48, 0x8b, 0x05, 0x98, 0x2e, 0, 0, 0xba]),
            Prologue::Frameless
        );
    }

    #[test]
    fn return_address_only_where_no_frame_exists() {
        assert!(return_address_at_sp(Prologue::Frameless, 40));
        let fp = Prologue::FramePointer { prologue_len: 4 };
        assert!(return_address_at_sp(fp, 0));
        assert!(return_address_at_sp(fp, 4));
        assert!(!return_address_at_sp(fp, 5));
    }

    #[test]
    fn recognises_call_instructions() {
        // `call 1191 <leaf>` at 11c4 in chain.c: e8 c8 ff ff ff, return address 11c9.
        assert!(preceded_by_call(&[
            0x48, 0x89, 0xe8, 0xc8, 0xff, 0xff, 0xff
        ]));
        // `call *%rax`: ff d0.
        assert!(preceded_by_call(&[0, 0, 0, 0, 0, 0xff, 0xd0]));
        // `call *0x10(%rax)`: ff 50 10.
        assert!(preceded_by_call(&[0, 0, 0, 0, 0xff, 0x50, 0x10]));
        // `call *0x2fe2(%rip)`: ff 15 e2 2f 00 00.
        assert!(preceded_by_call(&[0, 0xff, 0x15, 0xe2, 0x2f, 0, 0]));
        // `jmp *%rax` (ff e0, /4) and plain data are not calls.
        assert!(!preceded_by_call(&[0, 0, 0, 0, 0, 0xff, 0xe0]));
        assert!(!preceded_by_call(&[1, 2, 3, 4, 5, 6, 7]));
    }
}
