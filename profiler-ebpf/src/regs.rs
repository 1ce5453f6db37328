//! The user registers a walk starts from, for the architecture the object is built for
//! (`bpf_target_arch`, which aya-build sets from the profiler's target): x86-64's rip, rsp
//! and rbp; aarch64's pc, sp, x29 and the link register x30, which holds a leaf's return
//! address until the leaf saves it.

use aya_ebpf::bindings::bpf_user_pt_regs_t;
use profiler_common::unwind::SignalFrame;

/// A task's user registers, as the walk uses them.
#[derive(Clone, Copy)]
pub(crate) struct UserRegs {
    pub(crate) pc: u64,
    pub(crate) sp: u64,
    /// The frame pointer (rbp, x29).
    pub(crate) bp: u64,
    /// The link register (aarch64's x30); 0 on x86-64.
    pub(crate) lr: u64,
}

/// Per architecture: whether a sample was taken in user mode, the registers, HotSpot's
/// bytecode pointer register, and `strip_ra`, which clears what aarch64's pointer
/// authentication signs into a return address's unused high bits.
#[cfg(bpf_target_arch = "x86_64")]
mod arch {
    use aya_ebpf::helpers::bpf_probe_read_kernel;

    use super::{UserRegs, bpf_user_pt_regs_t};

    #[inline(always)]
    pub(crate) fn user_mode(r: &bpf_user_pt_regs_t) -> bool {
        r.cs & 3 == 3
    }

    #[inline(always)]
    pub(crate) fn user_regs(r: &bpf_user_pt_regs_t) -> UserRegs {
        UserRegs {
            pc: r.rip,
            sp: r.rsp,
            bp: r.rbp,
            lr: 0,
        }
    }

    #[inline(always)]
    pub(crate) fn pc(r: &bpf_user_pt_regs_t) -> u64 {
        r.rip
    }

    /// The user registers saved at `r` (kernel memory), field by field: the whole struct
    /// would take the BPF stack the walk needs.
    ///
    /// # Safety
    /// None beyond the helper's: bpf_probe_read_kernel tolerates any pointer.
    #[inline(always)]
    pub(crate) unsafe fn saved(r: *const bpf_user_pt_regs_t) -> Option<UserRegs> {
        // SAFETY: field addresses only (no read through `r`); each read is the helper's.
        unsafe {
            let cs: u64 = bpf_probe_read_kernel(&raw const (*r).cs).ok()?;
            if cs & 3 != 3 {
                return None;
            }
            Some(UserRegs {
                pc: bpf_probe_read_kernel(&raw const (*r).rip).ok()?,
                sp: bpf_probe_read_kernel(&raw const (*r).rsp).ok()?,
                bp: bpf_probe_read_kernel(&raw const (*r).rbp).ok()?,
                lr: 0,
            })
        }
    }

    /// HotSpot's interpreter keeps the bytecode pointer in r13.
    #[inline(always)]
    pub(crate) fn hotspot_bcp(r: &bpf_user_pt_regs_t) -> u64 {
        r.r13
    }

    #[inline(always)]
    pub(crate) fn strip_ra(ra: u64) -> u64 {
        ra
    }
}

#[cfg(bpf_target_arch = "aarch64")]
mod arch {
    use aya_ebpf::helpers::bpf_probe_read_kernel;

    use super::{UserRegs, bpf_user_pt_regs_t};

    /// `pstate`'s mode bits: EL0 (user) is 0.
    const PSR_MODE_MASK: u64 = 0xf;

    #[inline(always)]
    pub(crate) fn user_mode(r: &bpf_user_pt_regs_t) -> bool {
        r.pstate & PSR_MODE_MASK == 0
    }

    #[inline(always)]
    pub(crate) fn user_regs(r: &bpf_user_pt_regs_t) -> UserRegs {
        UserRegs {
            pc: r.pc,
            sp: r.sp,
            bp: r.regs[29],
            lr: strip_ra(r.regs[30]),
        }
    }

    #[inline(always)]
    pub(crate) fn pc(r: &bpf_user_pt_regs_t) -> u64 {
        r.pc
    }

    /// The user registers saved at `r` (kernel memory), field by field: the whole struct
    /// (272 bytes) would take the BPF stack the walk needs.
    ///
    /// # Safety
    /// None beyond the helper's: bpf_probe_read_kernel tolerates any pointer.
    #[inline(always)]
    pub(crate) unsafe fn saved(r: *const bpf_user_pt_regs_t) -> Option<UserRegs> {
        // SAFETY: field addresses only (no read through `r`); each read is the helper's.
        unsafe {
            let pstate: u64 = bpf_probe_read_kernel(&raw const (*r).pstate).ok()?;
            if pstate & PSR_MODE_MASK != 0 {
                return None;
            }
            let x = (&raw const (*r).regs).cast::<u64>();
            Some(UserRegs {
                pc: bpf_probe_read_kernel(&raw const (*r).pc).ok()?,
                sp: bpf_probe_read_kernel(&raw const (*r).sp).ok()?,
                bp: bpf_probe_read_kernel(x.add(29)).ok()?,
                lr: strip_ra(bpf_probe_read_kernel(x.add(30)).ok()?),
            })
        }
    }

    /// The HotSpot walker is not built for aarch64 (its interpreter keeps the bcp in x22,
    /// and its frames differ): user space never publishes a JVM there.
    #[inline(always)]
    pub(crate) fn hotspot_bcp(_r: &bpf_user_pt_regs_t) -> u64 {
        0
    }

    #[inline(always)]
    pub(crate) fn strip_ra(ra: u64) -> u64 {
        ra & profiler_common::unwind::AARCH64_USER_ADDR_MASK
    }
}

pub(crate) use arch::{hotspot_bcp, pc, saved, strip_ra, user_mode, user_regs};

/// Where a frame-pointer walk keeps the word user space checks for the caller of a leaf
/// that has not pushed a frame yet (`record_flags::LEAF_RET`): x86-64's stack pointer
/// (the return address `call` pushed). None on aarch64, whose leaf keeps its return address
/// in x30: user space's check reads x86 prologues only.
#[inline(always)]
pub(crate) fn leaf_ret_at(r: UserRegs) -> Option<u64> {
    if cfg!(bpf_target_arch = "x86_64") {
        Some(r.sp)
    } else {
        None
    }
}

/// Where the signal trampoline's stack pointer has the interrupted frame's registers.
#[cfg(bpf_target_arch = "x86_64")]
pub(crate) const SIGNAL: SignalFrame = profiler_common::unwind::SIGNAL_FRAME_X86_64;
#[cfg(bpf_target_arch = "aarch64")]
pub(crate) const SIGNAL: SignalFrame = profiler_common::unwind::SIGNAL_FRAME_AARCH64;
