//! What a CRuby walker needs to know about one Ruby process, and the frames it writes.
//!
//! User space fills one [`RubyProc`] per process it detects (version, where the running
//! thread's execution context is, the offsets of the structs the walk reads) and the kernel
//! walker reads it from `RT_STATE` unchanged. Offsets are bytes from the start of the struct
//! named; [`NONE`] marks a field this version does not have.
//!
//! The walk, as CRuby's own `vm_backtrace.c` does it: the execution context (EC) of the
//! sampled thread gives `cfp`, its current control frame, and the VM stack's end; control
//! frames are `cfp_size` bytes apart and grow down from the stack's end, and are walked from
//! `cfp` up to and including the one two frames below the end (`vm_stack + vm_stack_size`
//! VALUEs; the frame right below it is the dummy `th_init` pushed, as `backtrace_each`
//! skips it). For each frame, `ep[0]` (the env flags) says its type: a C method
//! ([`FRAME_MAGIC_CFUNC`]), a dummy (skipped), or bytecode (an iseq). The method entry
//! (CME) is `ep[-2]` of the method-level ep, reached through `ep[-1]` (the previous ep,
//! tagged) in blocks. Each frame shown becomes 3 words ([`ruby_frame`]):
//!
//! ```text
//! word 0  rt_word(slots::RUBY, 3, kind, iseq or CME)   kind: FRAME_ISEQ or FRAME_CFUNC
//! word 1  the CME (0: none, a <main> or <top (required)> frame)
//! word 2  the frame's pc (an address in the iseq's encoded instructions; 0 for a C method)
//! ```
//!
//! User space names them from the process's memory: the iseq's label and path, the line
//! from the pc, the class and method from the CME.

use crate::runtimes::{rt_flags, rt_payload, rt_word, slots};

/// An offset this version's struct does not have.
pub const NONE: u16 = u16::MAX;

/// [`RubyProc::ec_source`]: not known yet (a library whose TLS module id the dynamic linker
/// has not written yet): the walker writes no Ruby frame.
pub const EC_NONE: u8 = 0;
/// [`RubyProc::ec_source`]: `ruby_current_ec` (3.0+), a `__thread` variable reached through
/// the thread's DTV: `dtv = *(tp + dtv_offset)`, `block = dtv[tls_module * dtv_entry]`,
/// `ec = *(block + tls_offset)` (the general-dynamic model a shared libruby is built with).
pub const EC_TLS_DTV: u8 = 1;
/// [`RubyProc::ec_source`]: `ruby_current_ec` at a fixed offset from the thread pointer,
/// `ec = *(tp + tls_offset)` (initial-exec or TLSDESC with static TLS).
pub const EC_TLS_TPOFF: u8 = 2;
/// [`RubyProc::ec_source`]: a global holding the EC of the thread that holds the GVL:
/// `ec = *global_addr` (2.x's `ruby_current_execution_context_ptr`). Only the sampled
/// thread's if its `thread_ptr` says so (checked with the thread offsets).
pub const EC_GLOBAL: u8 = 3;
/// [`RubyProc::ec_source`]: the main ractor's running EC, `ec = *(*global_addr +
/// ractor_running_ec)` (`ruby_single_main_ractor`, 3.0+): as [`EC_GLOBAL`], the GVL
/// holder's.
pub const EC_MAIN_RACTOR: u8 = 4;

/// A frame's kind, in the six flag bits of its first word: bytecode (the payload is the
/// iseq).
pub const FRAME_ISEQ: u8 = 0;
/// A frame's kind: a C method (`VM_FRAME_MAGIC_CFUNC`; the payload is the CME).
pub const FRAME_CFUNC: u8 = 1;
/// The flag bits the kind takes (the others are reserved: zero).
pub const FRAME_KIND_MASK: u8 = 0x3;

/// Words of one Ruby frame.
pub const FRAME_WORDS: usize = 3;

/// `VM_FRAME_MAGIC_MASK`: the frame type bits of `ep[0]` (the same 2.6 to 3.4, checked in
/// 3.1.2's MJIT header).
pub const FRAME_MAGIC_MASK: u64 = 0x7fff_0001;
/// `VM_FRAME_MAGIC_CFUNC`: a C method's frame.
pub const FRAME_MAGIC_CFUNC: u64 = 0x5555_0001;
/// `VM_FRAME_MAGIC_DUMMY`: a frame the VM pushes for itself (not shown).
pub const FRAME_MAGIC_DUMMY: u64 = 0x7999_0001;
/// `VM_FRAME_FLAG_FINISH`: the first frame a `vm_exec` invocation pushed (its group of
/// frames ends there).
pub const FRAME_FLAG_FINISH: u64 = 0x20;
/// `VM_ENV_FLAG_LOCAL`: a method-level ep (its `ep[-2]` holds the method entry).
pub const ENV_FLAG_LOCAL: u64 = 0x2;
/// `ep` indexes (negative, in words): `VM_ENV_DATA_INDEX_ME_CREF` and `_SPECVAL`.
pub const EP_ME_CREF: u64 = 2;
pub const EP_SPECVAL: u64 = 1;
/// An imemo's type: `(flags >> 12) & 0xf`; a method entry, and an svar (holding the method
/// entry at `+8`, `vm_svar.cref_or_me`). Same in 2.6 to 3.4.
pub const IMEMO_SHIFT: u32 = 12;
pub const IMEMO_MASK: u64 = 0xf;
pub const IMEMO_MENT: u64 = 6;
pub const IMEMO_SVAR: u64 = 2;
pub const SVAR_CREF_OR_ME: u16 = 8;

/// Ruby `(major, minor, patch)` as [`RubyProc::version`] holds it.
pub const fn ruby_version(major: u8, minor: u8, patch: u8) -> u32 {
    ((major as u32) << 16) | ((minor as u32) << 8) | patch as u32
}

/// What the kernel walker knows of one Ruby process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RubyProc {
    /// [`ruby_version`].
    pub version: u32,
    /// `task_struct.thread.fsbase`, where the task's thread pointer is (from BTF).
    pub task_fsbase: u32,
    /// [`EC_TLS_DTV`], [`EC_TLS_TPOFF`], [`EC_GLOBAL`], [`EC_MAIN_RACTOR`] or [`EC_NONE`].
    pub ec_source: u8,
    /// Most `ep[-1]` hops from a block's ep to its method-level ep (CRuby's own nesting
    /// rarely passes 6).
    pub max_ep_hops: u8,
    /// glibc x86-64: `tcbhead_t.dtv` is at `tp + 8` (`dtv_offset`); a `dtv_t` is 16 bytes
    /// (`dtv_entry`) and the pointer there is to entry 0 (the generation; the length is
    /// the entry before it), so module `m`'s block is the word at `dtv + m * 16`. A module
    /// loaded at start (libruby as a `DT_NEEDED`) has static TLS: its block is always there.
    pub dtv_offset: u8,
    pub dtv_entry: u8,
    pub _pad0: u32,
    /// [`EC_TLS_DTV`]: the TLS module id (as the dynamic linker wrote it in the GOT).
    pub tls_module: u64,
    /// [`EC_TLS_DTV`]: `ruby_current_ec`'s offset in the module's block; [`EC_TLS_TPOFF`]:
    /// its offset from the thread pointer (negative on x86-64).
    pub tls_offset: i64,
    /// [`EC_GLOBAL`], [`EC_MAIN_RACTOR`]: the global's runtime address.
    pub global_addr: u64,

    /// `rb_execution_context_t`: `vm_stack`, `vm_stack_size` (in VALUEs), `cfp`,
    /// `thread_ptr`.
    pub ec_vm_stack: u16,
    pub ec_vm_stack_size: u16,
    pub ec_cfp: u16,
    pub ec_thread_ptr: u16,
    /// `sizeof(rb_control_frame_t)` and its `pc`, `iseq`, `ep`.
    pub cfp_size: u16,
    pub cfp_pc: u16,
    pub cfp_iseq: u16,
    pub cfp_ep: u16,
    /// Whose EC a global gives ([`EC_GLOBAL`], [`EC_MAIN_RACTOR`]): `rb_thread_t.nt`
    /// (3.2+, [`NONE`] before), then the `pthread_t` (in `rb_thread_t` before 3.2, in
    /// `rb_native_thread` since) and the kernel tid (`rb_native_thread.tid`, 3.2+).
    pub thread_nt: u16,
    pub thread_pthread: u16,
    pub native_tid: u16,
    /// `rb_ractor_t.threads.running_ec` (3.0+).
    pub ractor_running_ec: u16,
}

const _: () = assert!(core::mem::size_of::<RubyProc>() == 64);
const _: () = assert!(core::mem::align_of::<RubyProc>() == 8);

// SAFETY: `RubyProc` is `#[repr(C)]` with fixed-width integer fields and explicit padding
// (size asserted above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RubyProc {}

/// The three words of one Ruby frame: `kind` ([`FRAME_ISEQ`], [`FRAME_CFUNC`]), the iseq
/// (bytecode) or CME (C method) it ran, its CME (0: none) and its pc (0 for a C method).
pub const fn ruby_frame(kind: u8, iseq_or_cme: u64, cme: u64, pc: u64) -> [u64; FRAME_WORDS] {
    [
        rt_word(
            slots::RUBY,
            FRAME_WORDS as u8,
            kind & FRAME_KIND_MASK,
            iseq_or_cme,
        ),
        cme,
        pc,
    ]
}

/// The kind of a Ruby frame from its first word.
pub const fn ruby_frame_kind(word: u64) -> u8 {
    rt_flags(word) & FRAME_KIND_MASK
}

/// The iseq (bytecode frame) or CME (C method) of a Ruby frame's first word.
pub const fn ruby_frame_object(word: u64) -> u64 {
    rt_payload(word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::{rt_len, rt_slot};

    #[test]
    fn a_frame_says_runtime_length_kind_and_its_objects() {
        let [w0, cme, pc] = ruby_frame(FRAME_ISEQ, 0x7f00_1234_5678, 0x7f00_0000_1000, 0x55aa);
        assert_eq!((rt_slot(w0), rt_len(w0)), (slots::RUBY, FRAME_WORDS));
        assert_eq!(ruby_frame_kind(w0), FRAME_ISEQ);
        assert_eq!(ruby_frame_object(w0), 0x7f00_1234_5678);
        assert_eq!((cme, pc), (0x7f00_0000_1000, 0x55aa));

        let [w0, cme, pc] = ruby_frame(FRAME_CFUNC, 0x7f00_0000_1000, 0x7f00_0000_1000, 0);
        assert_eq!((rt_slot(w0), rt_len(w0)), (slots::RUBY, FRAME_WORDS));
        assert_eq!(ruby_frame_kind(w0), FRAME_CFUNC);
        assert_eq!(ruby_frame_object(w0), 0x7f00_0000_1000);
        assert_eq!((cme, pc), (0x7f00_0000_1000, 0));
    }

    #[test]
    fn the_kind_keeps_to_its_bits() {
        let [w0, ..] = ruby_frame(0xff, 0, 0, 0);
        assert_eq!(ruby_frame_kind(w0), FRAME_KIND_MASK);
        assert_eq!(rt_flags(w0) & !FRAME_KIND_MASK, 0);
        assert_eq!(ruby_frame_object(w0), 0);
    }

    #[test]
    fn versions_order_as_releases() {
        assert!(ruby_version(2, 7, 8) < ruby_version(3, 0, 0));
        assert!(ruby_version(3, 1, 2) < ruby_version(3, 1, 10));
        assert_eq!(ruby_version(3, 4, 7), 0x03_04_07);
    }
}
