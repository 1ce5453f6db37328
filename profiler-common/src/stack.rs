//! `record`'s sample: a fixed header followed by only the frames actually walked (kernel
//! frames, then user frames, innermost first), so a record is as long as its stacks.

use crate::{MAX_STACK_DEPTH, MAX_WALK_WORDS};

/// Most frames one record carries (kernel, then user: a table walk's words).
pub const MAX_RECORD_FRAMES: usize = MAX_STACK_DEPTH + MAX_WALK_WORDS;

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
    /// ([`crate::group::TAIL_WORDS`], written right after the frames walked), a goroutine's
    /// label words after them ([`crate::golabels::GO_LABEL_WORDS`]), and one word so that a
    /// masked offset of up to 255 frames stays inside.
    pub tail: [u64; GROUP_TAIL_ROOM],
    /// Room for a copy of the user stack ([`crate::record_flags::STACK_COPY`]), written
    /// right after the frames and the group's words, at a word offset of at most 255.
    pub copy: [u64; COPY_ROOM],
}

/// Most bytes of user stack a record copies when its process has no unwind tables yet: the
/// aligned 512-byte blocks from the one holding the stack pointer up (perf's `--call-graph
/// dwarf` copies 8 KiB by default).
pub const STACK_COPY_BYTES: usize = 16 << 10;
/// The copy is read in blocks of this many bytes, aligned, so a read never crosses the top
/// of the stack's mapping (which is page aligned): a block that cannot be read ends it.
pub const STACK_COPY_BLOCK: usize = 512;
/// Words before a copy's bytes: [`StackCopyHead`].
pub const STACK_COPY_HEAD_WORDS: usize = 5;

/// What precedes the copied bytes: the user registers at the sample and where the copy
/// starts (`start`, 512-byte aligned, at or below `sp`) and how long it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackCopyHead {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// aarch64's link register x30 (the leaf's return address until it saves it); 0 on
    /// x86-64.
    pub lr: u64,
    /// Bytes copied from `sp & !(STACK_COPY_BLOCK - 1)` (a multiple of the block).
    pub len: u64,
}

/// A copy of a user stack on its own: the off-CPU program keeps one per thread switched
/// out while its process had no tables, until the thread is switched back in.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackCopyBuf {
    pub head: StackCopyHead,
    pub bytes: [u8; STACK_COPY_BYTES],
}

// SAFETY: repr(C), integers only, no implicit padding (sizes asserted below).
#[cfg(feature = "user")]
unsafe impl aya::Pod for StackCopyBuf {}

const _: () =
    assert!(core::mem::size_of::<StackCopyBuf>() == 8 * STACK_COPY_HEAD_WORDS + STACK_COPY_BYTES);

/// Words of [`StackSampleBuf::copy`]: from any word offset up to 255 after `frames`, a head
/// and [`STACK_COPY_BYTES`] fit.
pub const COPY_ROOM: usize = (256 + STACK_COPY_HEAD_WORDS + STACK_COPY_BYTES / 8)
    .saturating_sub(MAX_RECORD_FRAMES + GROUP_TAIL_ROOM);

/// Words of [`StackSampleBuf::tail`].
pub const GROUP_TAIL_ROOM: usize = crate::group::TAIL_WORDS + crate::golabels::GO_LABEL_WORDS + 1;

pub const STACK_HEADER_SIZE: usize = core::mem::size_of::<StackSampleHeader>();

const _: () = assert!(STACK_HEADER_SIZE == 80);
const _: () = assert!(STACK_HEADER_SIZE.is_multiple_of(8));
const _: () = assert!(
    core::mem::size_of::<StackSampleBuf>()
        == STACK_HEADER_SIZE + 8 * (MAX_RECORD_FRAMES + GROUP_TAIL_ROOM + COPY_ROOM)
);
const _: () = assert!(core::mem::size_of::<StackCopyHead>() == 8 * STACK_COPY_HEAD_WORDS);
const _: () = assert!(STACK_COPY_BYTES.is_multiple_of(STACK_COPY_BLOCK));
// A per-CPU array's value must stay under the kernel's 32 KiB per-CPU allocation unit.
const _: () = assert!(core::mem::size_of::<StackSampleBuf>() < 32 << 10);
const _: () = assert!(
    MAX_RECORD_FRAMES + GROUP_TAIL_ROOM
        >= 255 + crate::group::TAIL_WORDS + crate::golabels::GO_LABEL_WORDS
);
const _: () = assert!(
    MAX_RECORD_FRAMES + GROUP_TAIL_ROOM + COPY_ROOM
        >= 256 + STACK_COPY_HEAD_WORDS + STACK_COPY_BYTES / 8
);

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

/// Where what follows a record's group words starts: after its frames and its group's
/// words, if any.
fn after_group(header: &StackSampleHeader, bytes: &[u8]) -> Option<usize> {
    let n = usize::from(header.kernel_frames) + usize::from(header.user_frames);
    let mut at = STACK_HEADER_SIZE + 8 * n;
    if header.flags & crate::record_flags::GROUP_VALUES != 0 {
        let count = frame_at(bytes.get(at..at + 8)?, 0) as usize;
        at += 8 + 8 * count.min(crate::group::MAX_COUNTERS);
    }
    Some(at)
}

/// The running goroutine's label words ([`crate::record_flags::GO_LABELS`],
/// [`crate::golabels`]), or `None` when the record carries none (or is truncated).
pub fn go_labels(
    header: &StackSampleHeader,
    bytes: &[u8],
) -> Option<[u64; crate::golabels::GO_LABEL_WORDS]> {
    if header.flags & crate::record_flags::GO_LABELS == 0 {
        return None;
    }
    let at = after_group(header, bytes)?;
    let words = bytes.get(at..at + 8 * crate::golabels::GO_LABEL_WORDS)?;
    Some([frame_at(words, 0), frame_at(words, 1)])
}

/// Where a record's stack copy starts ([`crate::record_flags::STACK_COPY`]): after its
/// frames and its group's words, if any, then its goroutine's labels or an off-CPU
/// record's time away.
fn copy_at(header: &StackSampleHeader, bytes: &[u8]) -> Option<usize> {
    let mut at = after_group(header, bytes)?;
    if header.flags & crate::record_flags::GO_LABELS != 0 {
        at += 8 * crate::golabels::GO_LABEL_WORDS;
    }
    if header.flags & crate::offcpu::OFF_CPU != 0 {
        at += 8;
    }
    Some(at)
}

/// A record's copy of the user stack: the registers, and the bytes copied from
/// `StackCopyHead::sp` rounded down to [`STACK_COPY_BLOCK`]; `None` when the record has none
/// (or is truncated). Also the record's length up to the copy.
pub fn stack_copy<'a>(
    header: &StackSampleHeader,
    bytes: &'a [u8],
) -> Option<(StackCopyHead, &'a [u8], usize)> {
    if header.flags & crate::record_flags::STACK_COPY == 0 {
        return None;
    }
    let at = copy_at(header, bytes)?;
    let head = bytes.get(at..at + 8 * STACK_COPY_HEAD_WORDS)?;
    let head = StackCopyHead {
        ip: frame_at(head, 0),
        sp: frame_at(head, 1),
        bp: frame_at(head, 2),
        lr: frame_at(head, 3),
        len: frame_at(head, 4),
    };
    let start = at + 8 * STACK_COPY_HEAD_WORDS;
    let len = usize::try_from(head.len).ok()?.min(STACK_COPY_BYTES);
    Some((head, bytes.get(start..start + len)?, at))
}

/// The `i`-th frame of a record's frame bytes.
pub fn frame_at(frames: &[u8], i: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&frames[8 * i..8 * i + 8]);
    u64::from_ne_bytes(word)
}
