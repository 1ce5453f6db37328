//! Unwind tables shared by user space (which builds them from `.eh_frame`) and the sampler
//! (which walks user stacks with them).
//!
//! A module's table is a run of [`UnwindRow`]s, sorted by address, in the global `UNWIND_ROWS`
//! array; a process's executable mappings, sorted by start, point at their module's run
//! ([`ProcUnwind`] in `UNWIND_PROCS`, keyed by tgid).

/// Rows the global `UNWIND_ROWS` array holds by default (8 bytes each: 32 MiB).
pub const DEFAULT_UNWIND_ROWS: u32 = 4 << 20;
/// Rows per fence: `UNWIND_FENCES[k]` is the pc of row `k * ROWS_PER_FENCE`, so a search
/// halves a module's fences (a few cache lines) and then one block of this many rows, not the
/// module's whole run (a cache and TLB miss per halving in a big module).
pub const ROWS_PER_FENCE: u32 = 64;
/// Fences per entry of `UNWIND_FENCES` (a BPF array rounds each value up to 8 bytes, so
/// single `u32`s would not lie one after the other in the array's memory).
pub const FENCES_PER_ENTRY: u32 = 16;
/// Entries of `UNWIND_FENCES` for an array of `rows` rows.
pub const fn fence_entries(rows: u32) -> u32 {
    let n = rows.div_ceil(ROWS_PER_FENCE).div_ceil(FENCES_PER_ENTRY);
    if n == 0 { 1 } else { n }
}
/// Most executable mappings per process with an entry in [`ProcUnwind`].
pub const MAX_PROC_MAPPINGS: usize = 256;
/// Most processes with unwind entries at once (the map is not preallocated).
pub const MAX_UNWIND_PROCS: u32 = 8192;
/// Most rows one module's table may have (the in-kernel binary search does 24 steps).
pub const MAX_MODULE_ROWS: u32 = 1 << 24;

/// How the canonical frame address (the caller's stack pointer) is found: the low four
/// bits of [`UnwindRow::cfa`] ([`cfa::KIND`]); the high bits say where the return address
/// is ([`ra`]). "rsp" and "rbp" name the stack and frame pointers of either architecture
/// (x86-64's rsp and rbp, aarch64's sp and x29).
pub mod cfa {
    /// CFA = rsp + offset.
    pub const RSP: u8 = 0;
    /// CFA = rbp + offset.
    pub const RBP: u8 = 1;
    /// A PLT stub: CFA = rsp + offset, plus 8 once the stub has pushed its argument
    /// (`(rip & 15) >= 11`), the expression every x86-64 linker's `.plt` FDE has.
    pub const PLT: u8 = 2;
    /// The rt_sigreturn trampoline: rsp points at the signal frame, whose saved registers
    /// are the interrupted frame's.
    pub const SIGNAL: u8 = 3;
    /// The outermost frame (the return address is undefined): the walk is complete.
    pub const END: u8 = 4;
    /// No usable rule here (no FDE covers the address, or one we cannot evaluate): fall back
    /// to the frame pointer.
    pub const NONE: u8 = 5;
    /// The bits of [`super::UnwindRow::cfa`] holding the kind above.
    pub const KIND: u8 = 0x0f;
}

/// Where the return address is, in the high bits of [`UnwindRow::cfa`]. None set: at
/// CFA - 8 (always so on x86-64, where `call` pushes it). aarch64's `bl` leaves it in the
/// link register x30, which a function saves (or not) where its CFI says.
pub mod ra {
    /// Still in the link register (a leaf, a prologue before it is saved, a PLT stub): only
    /// the frame whose registers the walk has (the sampled one, or one a signal
    /// interrupted) can have it.
    pub const LR: u8 = 0x10;
    /// Saved with the frame pointer as a frame record: rbp's slot is CFA + 8 * `rbp`, the
    /// return address's the word after it.
    pub const RECORD: u8 = 0x20;
    /// Saved at CFA + 8 * `rbp` on its own; the frame pointer is unchanged.
    pub const SLOT: u8 = 0x40;
    /// The slots count from the CFA rule's register (CFA - `cfa_offset`), not from the
    /// CFA: aarch64 keeps the frame record at the bottom of a frame, past `rbp`'s reach
    /// from the CFA in a frame over 1 KiB.
    pub const FROM_REGISTER: u8 = 0x80;
}

/// One row: from `pc` (relative to the module's table base) to the next row's, the CFA is
/// `cfa & cfa::KIND` + `cfa_offset`, the return address is where the [`ra`] bits of `cfa`
/// say (CFA - 8 when none is set), and the caller's rbp is at CFA + 8 * `rbp` (`rbp` 0: rbp
/// is unchanged; with [`ra::SLOT`], `rbp` is the return address's slot instead).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UnwindRow {
    pub pc: u32,
    pub cfa_offset: u16,
    pub cfa: u8,
    pub rbp: i8,
}

impl UnwindRow {
    /// The address of `rbp`'s slot, given the CFA.
    #[inline(always)]
    fn slot(&self, cfa_addr: u64) -> u64 {
        let base = if self.cfa & ra::FROM_REGISTER != 0 {
            cfa_addr.wrapping_sub(u64::from(self.cfa_offset))
        } else {
            cfa_addr
        };
        base.wrapping_add_signed(i64::from(self.rbp) * 8)
    }

    /// Where the return address is, given the CFA; `None`: still in the link register.
    #[inline(always)]
    pub fn return_address_at(&self, cfa_addr: u64) -> Option<u64> {
        if self.cfa & ra::LR != 0 {
            None
        } else if self.cfa & ra::RECORD != 0 {
            Some(self.slot(cfa_addr).wrapping_add(8))
        } else if self.cfa & ra::SLOT != 0 {
            Some(self.slot(cfa_addr))
        } else {
            Some(cfa_addr.wrapping_sub(8))
        }
    }

    /// Where the caller's frame pointer is saved, given the CFA; `None`: unchanged.
    #[inline(always)]
    pub fn saved_bp_at(&self, cfa_addr: u64) -> Option<u64> {
        let saved = if self.cfa & ra::RECORD != 0 {
            true
        } else {
            self.rbp != 0 && self.cfa & ra::SLOT == 0
        };
        saved.then(|| self.slot(cfa_addr))
    }
}

/// Where a signal trampoline (`__restore_rt`, `__kernel_rt_sigreturn`) finds the
/// interrupted frame's registers: byte offsets from its stack pointer, where the kernel put
/// the signal frame.
#[derive(Clone, Copy, Debug)]
pub struct SignalFrame {
    pub bp: u64,
    pub sp: u64,
    pub pc: u64,
    /// The link register, on architectures that have one.
    pub lr: Option<u64>,
}

/// x86-64: rsp points at the `ucontext`: `uc_mcontext` at 40, whose `struct sigcontext`
/// has rbp at 80, rsp at 120, rip at 128.
pub const SIGNAL_FRAME_X86_64: SignalFrame = SignalFrame {
    bp: 40 + 80,
    sp: 40 + 120,
    pc: 40 + 128,
    lr: None,
};

/// aarch64: sp points at `struct rt_sigframe`: a 128-byte siginfo, then the `ucontext`,
/// whose `uc_mcontext` (at 176) is the fault address, then `regs[31]`, sp and pc (checked
/// against the arm64 glibc headers' offsetof: regs at 312, sp 560, pc 568).
const AARCH64_REGS: u64 = 128 + 176 + 8;
pub const SIGNAL_FRAME_AARCH64: SignalFrame = SignalFrame {
    bp: AARCH64_REGS + 29 * 8,
    sp: AARCH64_REGS + 31 * 8,
    pc: AARCH64_REGS + 32 * 8,
    lr: Some(AARCH64_REGS + 30 * 8),
};

/// aarch64 user addresses are below 2^52 (52-bit VAs; 48 by default): above them, pointer
/// authentication signs return addresses, which a walk clears.
pub const AARCH64_USER_ADDR_MASK: u64 = (1 << 52) - 1;

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

/// Which runtime walkers have an entry for a process ([`ProcUnwind::runtimes`]): the walk
/// looks up only those, so a native process pays no runtime's lookup.
pub mod proc_runtimes {
    pub const PYTHON: u32 = 1 << 0;
    pub const V8: u32 = 1 << 1;
    pub const HOTSPOT: u32 = 1 << 2;
    /// Hooks of seam runtimes (`RT_PROCS`: Ruby, ...).
    pub const HOOKS: u32 = 1 << 3;
    /// A Go process whose samples carry goroutine labels (`GO_PROCS`).
    pub const GO: u32 = 1 << 4;
}

/// The executable mappings of one process, sorted by `start`, `count` valid.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProcUnwind {
    pub count: u32,
    /// [`proc_runtimes`] bits.
    pub runtimes: u32,
    pub mappings: [UnwindMapping; MAX_PROC_MAPPINGS],
}

impl Default for ProcUnwind {
    fn default() -> Self {
        Self {
            count: 0,
            runtimes: 0,
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
