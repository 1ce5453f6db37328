//! Unwind tables shared by user space (which builds them from `.eh_frame`) and the sampler
//! (which walks user stacks with them).
//!
//! A module's table is a run of [`UnwindRow`]s, sorted by address, in the global `UNWIND_ROWS`
//! array; a process's executable mappings, sorted by start, point at their module's run
//! ([`ProcUnwind`] in `UNWIND_PROCS`, keyed by tgid).

/// Rows the global `UNWIND_ROWS` array holds by default (8 bytes each: 32 MiB).
pub const DEFAULT_UNWIND_ROWS: u32 = 4 << 20;
/// Most executable mappings per process with an entry in [`ProcUnwind`].
pub const MAX_PROC_MAPPINGS: usize = 256;
/// Most processes with unwind entries at once (the map is not preallocated).
pub const MAX_UNWIND_PROCS: u32 = 8192;
/// Most rows one module's table may have (the in-kernel binary search does 24 steps).
pub const MAX_MODULE_ROWS: u32 = 1 << 24;

/// How the canonical frame address (the caller's stack pointer) is found, [`UnwindRow::cfa`].
pub mod cfa {
    /// CFA = rsp + offset.
    pub const RSP: u8 = 0;
    /// CFA = rbp + offset.
    pub const RBP: u8 = 1;
    /// A PLT stub: CFA = rsp + offset, plus 8 once the stub has pushed its argument
    /// (`(rip & 15) >= 11`), the expression every x86-64 linker's `.plt` FDE has.
    pub const PLT: u8 = 2;
    /// The rt_sigreturn trampoline: rsp points at a `ucontext`, whose saved registers are
    /// the interrupted frame's.
    pub const SIGNAL: u8 = 3;
    /// The outermost frame (the return address is undefined): the walk is complete.
    pub const END: u8 = 4;
    /// No usable rule here (no FDE covers the address, or one we cannot evaluate): fall back
    /// to the frame pointer.
    pub const NONE: u8 = 5;
}

/// One row: from `pc` (relative to the module's table base) to the next row's, the CFA is
/// `cfa` + `cfa_offset`, the return address is at CFA - 8, and the caller's rbp is at
/// CFA + 8 * `rbp` (`rbp` 0: rbp is unchanged).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UnwindRow {
    pub pc: u32,
    pub cfa_offset: u16,
    pub cfa: u8,
    pub rbp: i8,
}

/// One executable mapping of a process: addresses in `[start, end)` find their row at
/// `addr - bias` in `UNWIND_ROWS[rows_start..rows_start + rows_len]`; `rows_len` 0: the
/// module has no table (walk it with the frame pointer), or, with `rows_start`
/// [`ROWS_PENDING`], its table is still being built (the walk stops: the stack is copied
/// and walked in user space once it is, never guessed through with the frame pointer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindMapping {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub rows_start: u32,
    pub rows_len: u32,
}

/// `UnwindMapping::rows_start` of a module whose table is being built (`rows_len` 0).
pub const ROWS_PENDING: u32 = u32::MAX;

/// The executable mappings of one process, sorted by `start`, `count` valid.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcUnwind {
    pub count: u32,
    pub _pad: u32,
    pub mappings: [UnwindMapping; MAX_PROC_MAPPINGS],
}

impl Default for ProcUnwind {
    fn default() -> Self {
        Self {
            count: 0,
            _pad: 0,
            mappings: [UnwindMapping::default(); MAX_PROC_MAPPINGS],
        }
    }
}

const _: () = assert!(core::mem::size_of::<UnwindRow>() == 8);
const _: () = assert!(core::mem::size_of::<UnwindMapping>() == 32);
const _: () = assert!(core::mem::size_of::<ProcUnwind>() == 8 + 32 * MAX_PROC_MAPPINGS);
// The kernel indexes mappings with `& (MAX_PROC_MAPPINGS - 1)`.
const _: () = assert!(MAX_PROC_MAPPINGS.is_power_of_two());

// SAFETY: repr(C), integers only, no implicit padding (sizes asserted above).
#[cfg(feature = "user")]
unsafe impl aya::Pod for UnwindRow {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for UnwindMapping {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for ProcUnwind {}
