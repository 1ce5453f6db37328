//! What a CPython walker needs to know about one interpreter build: the struct offsets of the
//! thread states, frames and code objects it follows, and how to read an instruction offset.
//!
//! User space fills one [`PythonOffsets`] per interpreter it detects (from its per-version
//! table, checked against `_Py_DebugOffsets` where the build publishes them) and the kernel
//! walker reads it from a map unchanged, so it is byte for byte the same on both sides.
//! Offsets are bytes from the start of the struct named; [`NONE`] marks a field this
//! version does not have.

use crate::runtimes::{rt_payload, rt_word, slots};

/// An offset this version's struct does not have.
pub const NONE: u16 = u16::MAX;

/// [`PythonOffsets::frame_kind`]: `PyFrameObject` chain through `f_back` (3.6–3.10).
pub const FRAME_OBJECT: u8 = 1;
/// [`PythonOffsets::frame_kind`]: `_PyInterpreterFrame` chain through `previous` (3.11+).
pub const INTERPRETER_FRAME: u8 = 2;

/// [`PythonOffsets::instr_kind`]: `f_lasti`, an `int` in bytes of bytecode (3.6–3.9).
pub const LASTI_BYTES: u8 = 1;
/// [`PythonOffsets::instr_kind`]: `f_lasti`, an `int` in 2-byte code units (3.10).
pub const LASTI_UNITS: u8 = 2;
/// [`PythonOffsets::instr_kind`]: `prev_instr`, a pointer to the last code unit started
/// (3.11, 3.12); the offset is the pointer minus the code's first unit.
pub const PREV_INSTR: u8 = 3;
/// [`PythonOffsets::instr_kind`]: `instr_ptr`, a pointer to the code unit being run (3.13+).
pub const INSTR_PTR: u8 = 4;

/// [`PythonOffsets::line_table`]: `co_lnotab`, (byte delta, signed line delta) pairs (≤3.9).
pub const LNOTAB: u8 = 1;
/// [`PythonOffsets::line_table`]: 3.10's `co_linetable`, (byte delta, line delta) pairs where
/// -128 means "no line".
pub const LINETABLE_310: u8 = 2;
/// [`PythonOffsets::line_table`]: the location table of 3.11+ (varint entries per code-unit run).
pub const LOCATIONS_311: u8 = 3;

/// `_PyInterpreterFrame.owner` of a frame the C stack owns (3.12+: the shim frame an eval
/// call pushes first, so the frame after it is where that native call entered).
pub const OWNED_BY_CSTACK: u8 = 3;
/// `_PyInterpreterFrame.owner` of a generator's frame.
pub const OWNED_BY_GENERATOR: u8 = 1;

/// One interpreter build's layout, as the walker reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonOffsets {
    /// `PY_VERSION_HEX >> 8`: 0x030b07 for 3.11.7.
    pub version: u32,
    /// [`FRAME_OBJECT`] or [`INTERPRETER_FRAME`].
    pub frame_kind: u8,
    /// [`LASTI_BYTES`], [`LASTI_UNITS`], [`PREV_INSTR`] or [`INSTR_PTR`].
    pub instr_kind: u8,
    /// [`LNOTAB`], [`LINETABLE_310`] or [`LOCATIONS_311`].
    pub line_table: u8,
    pub _pad0: u8,

    /// `_PyRuntimeState.interpreters.head` ([`NONE`] on 3.6: the static `interp_head`).
    pub runtime_interpreters_head: u16,
    /// `_PyRuntimeState.gilstate.tstate_current` (3.7–3.11), the thread holding the GIL.
    pub runtime_tstate_current: u16,
    /// The `Py_tss_t` of the thread-state TSS key in `_PyRuntimeState` (3.7+), whose
    /// `pthread_key_t` is 4 bytes further (after `_is_initialized`).
    pub runtime_tss_key: u16,
    /// `PyInterpreterState.next`.
    pub interp_next: u16,
    /// `PyInterpreterState.tstate_head` / `threads.head` (3.12+).
    pub interp_threads_head: u16,
    /// `PyThreadState.next`.
    pub tstate_next: u16,
    /// `PyThreadState.interp`.
    pub tstate_interp: u16,
    /// `PyThreadState.frame` (≤3.10), `.cframe` (3.11, 3.12) or `.current_frame` (3.13+).
    pub tstate_frame: u16,
    /// `_PyCFrame.current_frame` when `tstate_frame` is a `cframe` pointer, else [`NONE`].
    pub cframe_current_frame: u16,
    /// `PyThreadState.thread_id` (the `pthread_t`).
    pub tstate_thread_id: u16,
    /// `PyThreadState.native_thread_id` (the kernel tid, 3.11+).
    pub tstate_native_thread_id: u16,
    /// `f_back` (≤3.10) / `previous` (3.11+).
    pub frame_back: u16,
    /// `f_code` (≤3.12) / `f_executable` (3.13+).
    pub frame_code: u16,
    /// `f_lasti` / `prev_instr` / `instr_ptr`, as [`Self::instr_kind`] says.
    pub frame_instr: u16,
    /// `_PyInterpreterFrame.owner` (3.11+).
    pub frame_owner: u16,
    /// `_PyInterpreterFrame.is_entry` (3.11 only; 3.12+ mark entries with a shim frame).
    pub frame_is_entry: u16,
    pub code_filename: u16,
    pub code_name: u16,
    /// `co_qualname` (3.11+).
    pub code_qualname: u16,
    /// `co_firstlineno` (an `int`).
    pub code_firstlineno: u16,
    /// `co_lnotab` (≤3.9) / `co_linetable` (3.10+): a bytes object.
    pub code_linetable: u16,
    /// `co_code`, a bytes object (≤3.10).
    pub code_code: u16,
    /// `co_code_adaptive`, the code units inline in the code object (3.11+).
    pub code_adaptive: u16,
    /// `_co_firsttraceable` (an `int`, 3.11+): frames whose instruction is before it are
    /// incomplete (still setting up) and not shown by the interpreter either.
    pub code_firsttraceable: u16,
    /// `PyBytesObject.ob_size` and `.ob_sval`.
    pub bytes_size: u16,
    pub bytes_data: u16,
    /// `PyASCIIObject.length` and `.state`.
    pub unicode_length: u16,
    pub unicode_state: u16,
    /// Where the characters of a compact ASCII string start (`sizeof(PyASCIIObject)`) and of
    /// any other compact string (`sizeof(PyCompactUnicodeObject)`).
    pub unicode_ascii_data: u16,
    pub unicode_compact_data: u16,
    /// `PyObject.ob_type`.
    pub object_type: u16,
    pub _pad1: u16,
}

const _: () = assert!(core::mem::size_of::<PythonOffsets>() == 72);
const _: () = assert!(core::mem::align_of::<PythonOffsets>() == 4);

// SAFETY: `PythonOffsets` is `#[repr(C)]` with fixed-width integer fields and explicit
// padding (size asserted above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for PythonOffsets {}

/// [`PyProc::tss_kind`]: the key is the `pthread_key_t` of a `Py_tss_t` (3.7+), read as
/// one word: `_is_initialized` in the low half, the key in the high half.
pub const TSS_PY_TSS_T: u8 = 1;
/// [`PyProc::tss_kind`]: the key is 3.6's `int autoTLSkey` (-1 until initialised).
pub const TSS_INT: u8 = 2;

/// What the kernel walker knows of one CPython process (`PY_PROCS`, by tgid): where its
/// eval loop is (a native frame there is replaced by its Python frames), how to find the
/// current thread's `PyThreadState` (glibc's `pthread_getspecific` emulated from the
/// thread pointer), and the build's [`PythonOffsets`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyProc {
    /// `_PyEval_EvalFrameDefault`, runtime addresses, `[start, end)`.
    pub eval_start: u64,
    pub eval_end: u64,
    /// Its `.cold` part, or `0..0`.
    pub cold_start: u64,
    pub cold_end: u64,
    /// Where the thread-state key is in the process ([`Self::tss_kind`] says how to read it):
    /// read at each walk, so a process detected before `Py_Initialize` made the key works
    /// once it has.
    pub tss_key_addr: u64,
    /// Offset of `thread.fsbase` in the kernel's `task_struct` (from its BTF): the thread
    /// pointer, which on x86-64 glibc is the thread's `struct pthread`.
    pub task_fsbase: u32,
    /// Offset of `specific_1stblock` in glibc's `struct pthread`.
    pub tsd_first_block: u16,
    /// Keys held in that first block (32).
    pub tsd_first_block_keys: u16,
    /// [`TSS_PY_TSS_T`] or [`TSS_INT`].
    pub tss_kind: u8,
    pub _pad: [u8; 7],
    pub offsets: PythonOffsets,
}

const _: () = assert!(core::mem::size_of::<PyProc>() == 56 + 72);
const _: () = assert!(core::mem::align_of::<PyProc>() == 8);

// SAFETY: `PyProc` is `#[repr(C)]` with fixed-width integer fields and explicit padding
// (size asserted above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for PyProc {}

/// A Python frame's first word: the code object's address (`crate::runtimes`, two words);
/// the next word is [`py_frame_data`].
pub const fn py_frame(code: u64) -> u64 {
    rt_word(slots::PYTHON, 2, 0, code)
}

/// The second word of a Python frame: the code object's [`py_check`] above the byte offset
/// of the frame's instruction in its bytecode (as the interpreter counts: `f_lasti` in
/// bytes, or the distance of the instruction pointer from the first code unit; negative
/// before the first instruction).
pub const fn py_frame_data(check: u32, byte_offset: i32) -> u64 {
    ((check as u64) << 32) | byte_offset as u32 as u64
}

/// A code object's check value, read cheaply where it starts by the kernel walker and
/// compared by user space with the object it has cached at that address: its first line
/// mixed with the low half of its `co_name` pointer. 0 means "not read".
pub const fn py_check(firstlineno: i32, name_ptr: u64) -> u32 {
    let v = (name_ptr as u32) ^ (firstlineno as u32).rotate_left(16);
    if v == 0 { 1 } else { v }
}

/// A Python frame's words taken apart: (code object address, check, byte offset).
pub const fn py_frame_parts(word: u64, data: u64) -> (u64, u32, i32) {
    (rt_payload(word), (data >> 32) as u32, data as u32 as i32)
}
