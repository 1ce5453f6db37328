//! `record`'s sample: a fixed header followed by only the frames actually walked (kernel
//! frames, then user frames, innermost first), so a record is as long as its stacks.

use crate::MAX_STACK_DEPTH;

/// Most frames one record carries (kernel and user).
pub const MAX_RECORD_FRAMES: usize = 2 * MAX_STACK_DEPTH;

/// The fixed part of a `record` sample in the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackSampleHeader {
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
    /// cgroup v2 id of the sampled task.
    pub cgroup_id: u64,
    /// Instruction pointer at the sample (user or kernel address).
    pub ip: u64,
    /// The user word at the stack pointer ([`crate::record_flags::LEAF_RET`]): the return
    /// address of a leaf without a frame-pointer prologue (frame-pointer walks only).
    pub leaf_ret: u64,
    /// The events this sample stands for: the period of the overflow that took it
    /// (`bpf_perf_event_data.sample_period`). At a frequency (`-F`) the kernel changes the
    /// period from sample to sample; 0 in off-CPU records (their weight is time).
    pub period: u64,
    /// Process id (tgid), thread id, CPU.
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// Index of the request (event) that overflowed.
    pub request: u32,
    /// [`crate::record_flags`] bits.
    pub flags: u32,
    /// Frames that follow: kernel first, then user.
    pub kernel_frames: u16,
    pub user_frames: u16,
    /// Thread name (`comm`), NUL padded.
    pub comm: [u8; 16],
}

/// The per-CPU buffer a record is assembled in before it is copied to the ring.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackSampleBuf {
    pub header: StackSampleHeader,
    pub frames: [u64; MAX_RECORD_FRAMES],
    /// Room after the last possible frame for a counter group's values
    /// ([`crate::group::TAIL_WORDS`], written right after the frames walked), and one word
    /// so that a masked offset of up to 255 frames stays inside.
    pub tail: [u64; GROUP_TAIL_ROOM],
}

/// Words of [`StackSampleBuf::tail`].
pub const GROUP_TAIL_ROOM: usize = crate::group::TAIL_WORDS + 1;

pub const STACK_HEADER_SIZE: usize = core::mem::size_of::<StackSampleHeader>();

const _: () = assert!(STACK_HEADER_SIZE == 80);
const _: () = assert!(STACK_HEADER_SIZE.is_multiple_of(8));
const _: () = assert!(
    core::mem::size_of::<StackSampleBuf>()
        == STACK_HEADER_SIZE + 8 * (MAX_RECORD_FRAMES + GROUP_TAIL_ROOM)
);
const _: () = assert!(MAX_RECORD_FRAMES + GROUP_TAIL_ROOM >= 255 + crate::group::TAIL_WORDS);

impl StackSampleHeader {
    /// The thread name up to its first NUL.
    pub fn comm_bytes(&self) -> &[u8] {
        let end = self
            .comm
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.comm.len());
        &self.comm[..end]
    }

    /// Parses a record: its header and the bytes of its frames (kernel, then user), or
    /// `None` if `bytes` is shorter than the header says.
    pub fn parse(bytes: &[u8]) -> Option<(StackSampleHeader, &[u8])> {
        if bytes.len() < STACK_HEADER_SIZE {
            return None;
        }
        // SAFETY: at least STACK_HEADER_SIZE bytes, the header is plain integers (any bit
        // pattern is valid), and read_unaligned makes no alignment assumption.
        let header =
            unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<StackSampleHeader>()) };
        let n = usize::from(header.kernel_frames) + usize::from(header.user_frames);
        let frames = bytes.get(STACK_HEADER_SIZE..STACK_HEADER_SIZE + 8 * n)?;
        Some((header, frames))
    }
}

/// The counter group's values of a record ([`crate::record_flags::GROUP_VALUES`]): the
/// words after its frames, or `None` when the record carries none (or is truncated).
pub fn group_values<'a>(header: &StackSampleHeader, bytes: &'a [u8]) -> Option<&'a [u8]> {
    if header.flags & crate::record_flags::GROUP_VALUES == 0 {
        return None;
    }
    let n = usize::from(header.kernel_frames) + usize::from(header.user_frames);
    let at = STACK_HEADER_SIZE + 8 * n;
    let count = frame_at(bytes.get(at..at + 8)?, 0) as usize;
    if count > crate::group::MAX_COUNTERS {
        return None;
    }
    bytes.get(at + 8..at + 8 + 8 * count)
}

/// The `i`-th frame of a record's frame bytes.
pub fn frame_at(frames: &[u8], i: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&frames[8 * i..8 * i + 8]);
    u64::from_ne_bytes(word)
}
