//! Off-CPU time (`record --off-cpu`): a program on `sched:sched_switch` keeps the stack of a
//! target thread when it leaves the CPU, and when the thread comes back counts the
//! nanoseconds it was away under that stack.
//!
//! Each wait is added in the kernel to the totals of its (thread, stack) in `OFFCPU_TOTALS`,
//! which user space reads at the end (and at each interval); where that map is full, the wait
//! goes through the ring as an off-CPU record.
//!
//! An off-CPU record is a `record` sample ([`crate::stack::StackSampleHeader`] and its frames)
//! with [`OFF_CPU`] in its flags, followed by one more word: the nanoseconds off the CPU. Its
//! `time_ns` is when the thread left the CPU and its `cpu` the CPU it left.

use crate::{
    MAX_STACK_DEPTH,
    stack::{STACK_HEADER_SIZE, StackSampleHeader},
};

/// Most frames an off-CPU record carries (kernel and user): a thread's waits are kept
/// per thread until it runs again, so they hold perf's depth, not a deep walk's.
pub const OFFCPU_FRAMES: usize = 2 * MAX_STACK_DEPTH;

/// [`StackSampleHeader::flags`] bit: an off-CPU record (its last word is the time away).
/// Bits from 16 up are this module's; `record_flags` uses the low ones.
pub const OFF_CPU: u32 = 1 << 16;
/// [`StackSampleHeader::flags`] bit: the thread was preempted (runnable, waiting for a CPU),
/// not blocked.
pub const RUNNABLE: u32 = 1 << 17;

/// Threads that can be off the CPU with a kept stack at once (the pending map's entries).
pub const PENDING_ENTRIES: u32 = 8192;
/// Distinct (thread, stack) totals the kernel keeps (`OFFCPU_TOTALS`); waits of further
/// pairs go through the ring one by one.
pub const TOTALS_ENTRIES: u32 = 4096;

/// `sched_switch`'s `prev_state` bits that mean the task is exiting (`X`, `Z`): it will not
/// come back, so its stack is not kept.
pub const STATE_DEAD: u64 = 0x10 | 0x20;
/// `prev_state` bits of a task that blocked (`S`, `D`, ... `I`); none of them (`R`, or
/// `R+` preempted) is a runnable task.
pub const STATE_BLOCKED: u64 = 0xff;

/// Run-time configuration of the off-CPU program (slot 0 of `OFFCPU_CONFIG`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuConfig {
    /// Waits shorter than this are dropped (counted in [`stat::SHORT`]).
    pub min_block_ns: u64,
    /// The request index off-CPU records carry (the `off-cpu` event's index).
    pub request: u32,
    /// Offsets of `prev_state` (a `long`) and `next_pid` in the `sched:sched_switch` record,
    /// from tracefs (they differ between kernels).
    pub prev_state_offset: u32,
    pub next_pid_offset: u32,
    /// Non-zero: keep the stacks of preempted (runnable) threads too.
    pub runnable: u32,
    /// Offsets of `se.sum_exec_runtime` and `se.prev_sum_exec_runtime` in `task_struct`
    /// (from the kernel's BTF; 0 when unknown). A thread seen leaving the CPU with its record
    /// still kept came back unseen; their difference is how long it has run since, so when
    /// it came back.
    pub task_runtime_offset: u32,
    pub task_prev_runtime_offset: u32,
    /// Fault injection for tests (0 in use): every Nth return of a kept thread on a CPU is
    /// ignored, as a kernel that does not run the program at every switch would.
    pub skip_returns: u32,
    pub _pad: u32,
}

/// The per-CPU buffer an off-CPU record is assembled in, and the pending map's value: a
/// `record` sample with room for the weight after its last frame (and a spare word, so the
/// verifier sees every frame index in bounds).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuBuf {
    pub header: StackSampleHeader,
    pub frames: [u64; OFFCPU_FRAMES + 2],
}

/// Key of the in-kernel totals: a thread and a hash of its stack (FNV-1a over the frames and
/// the [`RUNNABLE`] bit), with the frame counts as a check.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TotalKey {
    pub hash: u64,
    pub tid: u32,
    /// Kernel frames, and user frames << 16.
    pub frames: u32,
}

/// Value of the in-kernel totals: the time and number of waits of one (thread, stack), and
/// the record of the first of them (its header and frames name the stack).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Total {
    /// Nanoseconds off the CPU (added atomically).
    pub ns: u64,
    pub waits: u64,
    pub record: OffCpuBuf,
}

/// FNV-1a parameters of [`TotalKey::hash`].
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Slots of the per-CPU `OFFCPU_STATS` array.
pub mod stat {
    /// Switch-outs of target threads whose stack was kept.
    pub const KEPT: u32 = 0;
    /// Records written (a kept thread came back).
    pub const WRITTEN: u32 = 1;
    /// Waits shorter than `min_block_ns`, dropped.
    pub const SHORT: u32 = 2;
    /// Their nanoseconds.
    pub const SHORT_NS: u32 = 3;
    /// Records the ring had no room for.
    pub const LOST: u32 = 4;
    /// Switch-outs not kept because the pending map was full.
    pub const FULL: u32 = 5;
    /// Their stack walks that failed (the record is still written).
    pub const STACK_ERRORS: u32 = 6;
    /// Waits added to the in-kernel totals (the others are `WRITTEN`, `COPIED` or `RUNTIME` to
    /// the ring).
    pub const TOTALLED: u32 = 7;
    /// Waits written to the ring with a copy of their user stack (their process had no
    /// unwind tables yet when they began), for user space to walk.
    pub const COPIED: u32 = 8;
    /// Waits written to the ring one by one because their stack has a runtime's frames
    /// (named from the live process, never left in a total read later).
    pub const RUNTIME: u32 = 9;
    /// Waits whose return was not seen (the kernel skipped the program at that switch): the
    /// thread left the CPU again with its record still kept. Ended where the scheduler's run
    /// time of the thread says it came back, and written to the ring (not the totals).
    pub const UNSEEN_ENDED: u32 = 10;
    /// As [`UNSEEN_ENDED`], but without a usable run time: dropped.
    pub const UNSEEN_DROPPED: u32 = 11;
    /// Returns of kept threads looked at (paces `OffCpuConfig::skip_returns`).
    pub const RETURNS: u32 = 12;
    pub const COUNT: u32 = 13;
}

const _: () = assert!(core::mem::size_of::<OffCpuConfig>() == 40);
const _: () = assert!(core::mem::size_of::<TotalKey>() == 16);
const _: () = assert!(core::mem::size_of::<Total>() == 16 + core::mem::size_of::<OffCpuBuf>());
const _: () =
    assert!(core::mem::size_of::<OffCpuBuf>() == STACK_HEADER_SIZE + 8 * (OFFCPU_FRAMES + 2));

// SAFETY: repr(C), integers and arrays of integers only, no implicit padding (the size
// asserts above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for OffCpuConfig {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for OffCpuBuf {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for TotalKey {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for Total {}

/// The innermost frame of off-CPU stacks, so every output shows them as such.
pub const MARKER: &str = "[off-cpu]";
/// The innermost frame of the time preempted threads waited for a CPU ([`RUNNABLE`]).
pub const RUNNABLE_MARKER: &str = "[off-cpu:runnable]";

/// The marker frame of an off-CPU record with these flags.
pub fn marker(flags: u32) -> &'static str {
    if flags & RUNNABLE != 0 {
        RUNNABLE_MARKER
    } else {
        MARKER
    }
}

/// The nanoseconds an off-CPU record weighs (the word after its frames), or `None` if the
/// record is not an off-CPU record or is too short.
pub fn weight(header: &StackSampleHeader, bytes: &[u8]) -> Option<u64> {
    if header.flags & OFF_CPU == 0 {
        return None;
    }
    let n = usize::from(header.kernel_frames) + usize::from(header.user_frames);
    let at = STACK_HEADER_SIZE + 8 * n;
    let word = bytes.get(at..at + 8)?;
    Some(u64::from_ne_bytes(word.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_is_the_word_after_the_frames() {
        let header = StackSampleHeader {
            flags: OFF_CPU,
            kernel_frames: 1,
            user_frames: 2,
            ..Default::default()
        };
        let mut bytes = [0u8; STACK_HEADER_SIZE + 4 * 8];
        bytes[STACK_HEADER_SIZE + 3 * 8..].copy_from_slice(&12_345u64.to_ne_bytes());
        assert_eq!(weight(&header, &bytes), Some(12_345));
        assert_eq!(weight(&header, &bytes[..bytes.len() - 1]), None);
        let sampled = StackSampleHeader { flags: 0, ..header };
        assert_eq!(weight(&sampled, &bytes), None);
    }
}
