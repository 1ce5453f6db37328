//! Types shared by the eBPF programs and user space.
//!
//! Every type here crosses the kernel/user boundary byte for byte, so each one is `#[repr(C)]`,
//! uses fixed-width fields only, spells its padding out and has its size asserted at compile
//! time. No `usize`, `bool` or `Option` may appear in these structs.
#![no_std]

pub mod golabels;
pub mod group;
pub mod hotspot;
pub mod names;
pub mod offcpu;
pub mod python;
pub mod ruby;
pub mod runtimes;
pub mod stack;
pub mod unwind;
pub mod v8;

/// Deepest stack captured per sample, per side (user and kernel). perf's default is 127 too.
pub const MAX_STACK_DEPTH: usize = 127;

/// Most words a user walk with unwind tables keeps: native frames (one word each) and
/// runtime frames (a CPython frame is two), so that a 200-deep Python recursion is whole
/// (on 3.6-3.10 each Python call also has its C frames: about five words a level).
pub const MAX_WALK_WORDS: usize = 1023;

/// Default ring-buffer size in bytes (a power of two and a multiple of the page size).
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;

/// Most processes the in-kernel tgid filter can hold.
pub const MAX_TARGET_TGIDS: u32 = 8192;

/// Bits of [`SamplerConfig::filter`].
pub mod filter {
    /// Only samples whose tgid is in the `TGIDS` map are kept.
    pub const TGID: u32 = 1 << 0;
    /// Only samples whose tid is in the `TIDS` map are kept.
    pub const TID: u32 = 1 << 1;
    /// Only samples whose cgroup v2 id is in the `CGROUPS` map are kept.
    pub const CGROUP: u32 = 1 << 2;
    /// The idle task's samples are dropped (counted as `stat::IDLE`). Clock events do not
    /// exclude idle in the kernel, so that every expiry of their timer runs the program and
    /// their time can be checked against the program's runs.
    pub const NO_IDLE: u32 = 1 << 3;
}

/// Most threads and cgroups the in-kernel filters can hold.
pub const MAX_TARGET_TIDS: u32 = 16384;
pub const MAX_TARGET_CGROUPS: u32 = 4096;

/// Bits of [`SamplerConfig::capture`].
pub mod capture {
    /// Walk and store the user-space stack.
    pub const USER_STACK: u32 = 1 << 0;
    /// Walk and store the kernel stack.
    pub const KERNEL_STACK: u32 = 1 << 1;
    /// Count samples per (process, event, stacks, cgroup) in the `AGGREGATE` map instead of
    /// writing one ring-buffer record per sample (`record --aggregate`).
    pub const AGGREGATE: u32 = 1 << 2;
    /// Walk user stacks with the unwind tables of `UNWIND_PROCS`/`UNWIND_ROWS` (frame
    /// pointers where a process or mapping has none). With [`AGGREGATE`], the walked stacks
    /// are kept in `USER_STACKS` ([`crate::UserStack`]); a sample whose process has no
    /// tables yet goes to the ring as an ordinary record instead.
    pub const UNWIND_TABLES: u32 = 1 << 3;
    /// Off-CPU time is recorded too (`record --off-cpu`, see [`crate::offcpu`]): sizes the
    /// pending map at load.
    pub const OFF_CPU: u32 = 1 << 8;
}

/// Bits of the eBPF object's `KERNEL_FEATURES` constant: the helpers this kernel has, set by
/// the loader before the programs load. It lives in the read-only data the verifier knows, so
/// the branches that call a missing helper are dead code it never checks.
pub mod kernel_features {
    /// `bpf_get_attach_cookie` (Linux 5.15): requests told apart by the link's cookie.
    /// Without it every overflow is of the request whose cookie is `DEFAULT_COOKIE`.
    pub const ATTACH_COOKIE: u32 = 1 << 0;
    /// `bpf_get_current_task_btf` and `bpf_task_pt_regs` (Linux 5.15): the user registers of
    /// a sample taken in kernel mode (for the frameless-caller recovery).
    pub const TASK_PT_REGS: u32 = 1 << 1;
    /// Everything (the default of the object, for the newest kernels).
    pub const ALL: u32 = ATTACH_COOKIE | TASK_PT_REGS;
}

/// Entries of the in-kernel aggregation map: distinct (process, event, stacks, cgroup) keys.
pub const AGGREGATE_ENTRIES: u32 = 65536;
/// Distinct stacks the aggregation's stack-trace map holds (kernel stacks, and user stacks
/// walked with frame pointers), and distinct table-walked user stacks (`USER_STACKS`).
pub const AGGREGATE_STACKS: u32 = 16384;

/// Most events per-cgroup counting attributes at once: one per sibling perf event array
/// (`SIB0`..`SIB7`), which per-cgroup counting reuses for its counters.
pub const MAX_CGROUP_EVENTS: usize = MAX_SIBLINGS;
/// Most distinct cgroups per-cgroup counting keeps totals for.
pub const MAX_COUNTED_CGROUPS: u32 = 16384;

/// Per-cgroup totals, one per counting event (`CG_COUNTS` values; per CPU in the kernel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupCounts {
    pub values: [u64; MAX_CGROUP_EVENTS],
}

/// Slots of the per-CPU `CG_STATS` array of per-cgroup counting.
pub mod cg_stat {
    /// Context switches at which deltas were attributed.
    pub const SWITCHES: u32 = 0;
    /// Deltas dropped because `CG_COUNTS` was full (the cgroup got no entry).
    pub const DROPPED: u32 = 1;
    /// Counter reads that failed (an event missing on a CPU).
    pub const READ_ERRORS: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// Stack ids in an [`AggregateKey`] that are not ids of the stack-trace map.
pub mod stack_id {
    /// The stack was not asked for, or could not be walked.
    pub const NONE: i32 = -1;
    /// Another stack had the same hash and holds the slot (`bpf_get_stackid` -EEXIST, or
    /// a `USER_STACKS` entry under the same 64-bit hash with other frames).
    pub const COLLISION: i32 = -2;
    /// A user stack walked with unwind tables: its frames are the `USER_STACKS` entry
    /// under [`super::AggregateKey::user_hash`].
    pub const HASHED: i32 = -3;
    /// A table-walked user stack `USER_STACKS` had no room for (every slot holds another
    /// stack); counted with the collisions.
    pub const FULL: i32 = -4;
}

/// Key of the in-kernel aggregation map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AggregateKey {
    pub pid: u32,
    /// The request (event) index, as in [`SampleRecord::request`].
    pub request: u32,
    /// Ids in the stack-trace map, or a [`stack_id`] value.
    pub kernel_stack: i32,
    pub user_stack: i32,
    pub cgroup_id: u64,
    /// With `user_stack` [`stack_id::HASHED`]: the key of the user stack in `USER_STACKS`
    /// (a hash of its frames); 0 otherwise.
    pub user_hash: u64,
}

/// A user stack walked with unwind tables, as `USER_STACKS` keeps it for the in-kernel
/// aggregation: `len` frames, innermost first (the words after them are not part of it).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UserStack {
    pub len: u32,
    /// Explicit padding.
    pub _pad: u32,
    pub frames: [u64; MAX_STACK_DEPTH],
}

/// A user stack as the table walk writes it: [`UserStack`]'s layout with room for
/// [`MAX_WALK_WORDS`]; a walk of at most [`MAX_STACK_DEPTH`] words is a `UserStack` as it is.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WalkStack {
    pub len: u32,
    /// Explicit padding.
    pub _pad: u32,
    pub frames: [u64; MAX_WALK_WORDS],
}

impl UserStack {
    /// The stack's frames.
    pub fn frames(&self) -> &[u64] {
        &self.frames[..(self.len as usize).min(MAX_STACK_DEPTH)]
    }
}

/// The start of a user stack's hash, the key it is kept under in `USER_STACKS`: the kernel
/// mixes in each frame ([`user_hash_step`]), then their number ([`user_hash_finish`]); a
/// slot holding other frames under the same hash is detected there and counted.
pub const USER_HASH_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// One frame into a user stack's hash (a multiply-xorshift step, a few instructions in BPF).
#[inline(always)]
pub fn user_hash_step(hash: u64, frame: u64) -> u64 {
    let h = (hash ^ frame).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 29)
}

/// The end of a user stack's hash: the number of frames mixed in, then murmur3's finalizer.
#[inline(always)]
pub fn user_hash_finish(hash: u64, len: u64) -> u64 {
    let mut h = hash ^ len;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Value of the in-kernel aggregation map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AggregateValue {
    /// Samples with this key (added atomically: CPUs share the entry).
    pub count: u64,
    /// The events they stand for: the sum of their periods (added atomically).
    pub events: u64,
    /// The command of the first sample with this key.
    pub comm: [u8; 16],
}

/// Slots of the per-CPU `STATS` array. Every overflow the program sees lands in exactly one
/// of `SUBMITTED`, `AGGREGATED`, `LOST`, `FILTERED` or `UNCONFIGURED`, so nothing is dropped
/// uncounted.
pub mod stat {
    /// Records written to the ring buffer.
    pub const SUBMITTED: u32 = 0;
    /// Samples dropped because the ring buffer had no room.
    pub const LOST: u32 = 1;
    /// Samples dropped by the in-kernel target filter.
    pub const FILTERED: u32 = 2;
    /// Stack walks that failed (the record is still written, with an empty stack).
    pub const STACK_ERRORS: u32 = 3;
    /// Overflows of an event whose cookie has no `REQUESTS` entry (dropped; a bug if seen).
    pub const UNCONFIGURED: u32 = 4;
    /// Samples counted in the aggregation map (`capture::AGGREGATE`; a full map is `LOST`).
    pub const AGGREGATED: u32 = 5;
    /// Stacks the stack maps could not store because another stack holds their hash slot
    /// (or `USER_STACKS` is full): their samples are still counted, under a marker.
    pub const COLLISIONS: u32 = 6;
    /// Children of targets that could not join the `TGIDS` filter (the map was full): their
    /// samples are filtered out, so each is reported as an untracked process.
    pub const FOLLOW_FAILED: u32 = 7;
    /// Table-unwound user stacks that did not reach the outermost frame (a frame without a
    /// rule, an unreadable stack, the depth limit); the record is marked
    /// [`super::record_flags::UNWIND_PARTIAL`].
    pub const UNWIND_PARTIAL: u32 = 8;
    /// Samples of processes without unwind tables yet (their stack copied or left out,
    /// marked [`super::record_flags::UNWIND_NO_PROCESS`] so user space loads them; with
    /// in-kernel aggregation such a sample goes to the ring).
    pub const UNWIND_NO_PROCESS: u32 = 9;
    /// Samples of the idle task dropped because the run does not want them
    /// (`filter::NO_IDLE`).
    pub const IDLE: u32 = 10;
    /// Number of slots.
    pub const COUNT: u32 = 11;
}

/// Most other requests' values one record carries (`SampleRecord::siblings`).
pub const MAX_SIBLINGS: usize = 8;

/// Most requests the overflow engine tells apart (attach cookies `0..MAX_REQUESTS`).
pub const MAX_REQUESTS: u32 = 1024;

/// Bits of [`RequestConfig::flags`].
pub mod request_flags {
    /// Walk and store user and kernel stacks (as `SamplerConfig::capture` says).
    pub const STACKS: u32 = 1 << 0;
    /// libcpc's freeze: let perf consume the event's IOC_REFRESH budget, which disables it
    /// (and, for a group leader, the whole set) until user space restarts it.
    pub const FREEZE: u32 = 1 << 1;
    /// Send `RequestConfig::signal` to the overflowing thread (libcpc's SIGEMT).
    pub const SIGNAL: u32 = 1 << 2;
}

/// What the program does at an overflow of one request, keyed in the `REQUESTS` map by the
/// attach cookie of the perf event's BPF link.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestConfig {
    /// libcpc preset: the virtual value is `preset + count` (wrapping).
    pub preset: u64,
    /// Request index reported in the record.
    pub index: u32,
    /// [`request_flags`] bits.
    pub flags: u32,
    /// Signal number for [`request_flags::SIGNAL`].
    pub signal: u32,
    /// This context's index in the `SIB0..SIB7` perf event arrays.
    pub sibling_base: u32,
    /// How many requests of the set to read into the record (0: none).
    pub siblings: u32,
    /// Explicit padding.
    pub _pad: u32,
}

/// Bits of [`SampleRecord::flags`].
pub mod record_flags {
    /// `leaf_ret` holds the word at the user stack pointer.
    pub const LEAF_RET: u32 = 1 << 0;
    /// The user stack was walked with unwind tables.
    pub const UNWIND_TABLES: u32 = 1 << 1;
    /// The process has no unwind tables loaded: user space should load them.
    pub const UNWIND_NO_PROCESS: u32 = 1 << 2;
    /// A frame's address was in no mapping the tables know (JIT code, or a library mapped
    /// after the tables were loaded): walked on with the frame pointer.
    pub const UNWIND_NO_MAPPING: u32 = 1 << 3;
    /// The walk stopped before the outermost frame.
    pub const UNWIND_PARTIAL: u32 = 1 << 4;
    /// Some frame was found through the frame pointer (no table row for it).
    pub const UNWIND_FP: u32 = 1 << 5;
    /// A counter group's values follow the frames (`crate::group`).
    pub const GROUP_VALUES: u32 = 1 << 6;
    /// The process had no unwind tables: instead of user frames, the record carries a copy
    /// of the user stack after its frames and group words (`crate::stack::stack_copy`),
    /// which user space walks with the same rows once it has loaded them.
    pub const STACK_COPY: u32 = 1 << 7;
    /// Some user frames are a runtime's (`crate::runtimes`): user space names them from the
    /// process's memory, so they must reach it while the process lives (through the ring,
    /// never only in an in-kernel total read later).
    pub const RUNTIME_FRAMES: u32 = 1 << 8;
    /// A runtime's walk failed (no thread state, or a frame that could not be read): its
    /// frames from there on are native.
    pub const RUNTIME_ERROR: u32 = 1 << 9;
    /// The running goroutine's labels follow the frames and group words
    /// (`crate::golabels`, `crate::stack::go_labels`).
    pub const GO_LABELS: u32 = 1 << 10;
}

/// Run-time configuration of the sampling program, slot 0 of the `CONFIG` array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerConfig {
    /// [`filter`] bits; 0 keeps every sample (system-wide).
    pub filter: u32,
    /// [`capture`] bits.
    pub capture: u32,
    /// Wake the reader only once this many bytes are pending (batched wake-ups); the reader
    /// also polls on a timer, so a quiet run is still drained. 0 wakes on every record.
    pub wakeup_bytes: u64,
    /// Non-zero: a process forked by a tgid in `TGIDS` joins `TGIDS` (follow children).
    pub follow_forks: u32,
    /// Offset of `child_pid` in the `sched:sched_process_fork` record (it differs between
    /// kernels, so user space reads it from tracefs).
    pub fork_child_offset: u32,
    /// Offset of `group_dead` in the `sched:sched_process_exit` record, or
    /// [`NO_GROUP_DEAD`] on kernels whose record has no such field (before 6.16).
    pub exit_group_dead_offset: u32,
    /// Least milliseconds between two wake-ups of the reader for records with a runtime's
    /// frames (named from the process's memory, so read while it lives); 0:
    /// [`DEFAULT_RUNTIME_WAKEUP_MS`]. Continuous recording asks for more: each wake-up costs
    /// the reader a batch, and a fleet host's runtimes keep it awake.
    pub runtime_wakeup_ms: u32,
}

/// [`SamplerConfig::runtime_wakeup_ms`] when it is 0.
pub const DEFAULT_RUNTIME_WAKEUP_MS: u32 = 10;

impl SamplerConfig {
    /// [`SamplerConfig::runtime_wakeup_ms`] in nanoseconds, the default for 0.
    #[inline(always)]
    pub fn runtime_wakeup_ns(&self) -> u64 {
        let ms = if self.runtime_wakeup_ms == 0 {
            DEFAULT_RUNTIME_WAKEUP_MS
        } else {
            self.runtime_wakeup_ms
        };
        u64::from(ms) * 1_000_000
    }
}

/// [`SamplerConfig::exit_group_dead_offset`] when the exit record has no `group_dead`: a
/// process then leaves the filter when its main thread exits.
pub const NO_GROUP_DEAD: u32 = u32::MAX;

/// One overflow, as written to the ring buffer by the libcpc overflow program (`record`'s
/// samples are [`stack::StackSampleHeader`]s with their frames).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SampleRecord {
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
    /// cgroup v2 id of the sampled task.
    pub cgroup_id: u64,
    /// Instruction pointer at the overflow (user or kernel address).
    pub ip: u64,
    /// The sample period the event ran with when it overflowed.
    pub period: u64,
    /// libcpc's virtual counter at the overflow: the request's preset plus the event's count
    /// (it wraps past 0 at the overflow the preset was chosen for).
    pub value: u64,
    /// Data address of the sample (`bpf_perf_event_data.addr`): the faulting address for
    /// page-fault events, the PMU's data address for precise sampling (PEBS loads), else 0.
    pub addr: u64,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// Index of the request (event) that overflowed.
    pub request: u32,
    /// Thread name (`comm`), NUL padded.
    pub comm: [u8; 16],
    /// Virtual values (preset + count) of the set's requests at the overflow, by index, when
    /// the request asked for them (`RequestConfig::siblings`).
    pub siblings: [u64; MAX_SIBLINGS],
    /// Valid entries of `siblings`.
    pub sibling_count: u32,
    /// Explicit padding.
    pub _pad1: u32,
}

const _: () = assert!(core::mem::size_of::<SamplerConfig>() == 32);
const _: () = assert!(core::mem::size_of::<SampleRecord>() == 152);
const _: () = assert!(core::mem::align_of::<SampleRecord>() == 8);
const _: () = assert!(core::mem::size_of::<RequestConfig>() == 32);
const _: () = assert!(core::mem::size_of::<AggregateKey>() == 32);
const _: () = assert!(core::mem::size_of::<UserStack>() == 8 + 8 * MAX_STACK_DEPTH);
const _: () = assert!(core::mem::size_of::<WalkStack>() == 8 + 8 * MAX_WALK_WORDS);
const _: () = assert!(MAX_WALK_WORDS >= MAX_STACK_DEPTH);
const _: () = assert!(core::mem::size_of::<AggregateValue>() == 32);
const _: () = assert!(core::mem::size_of::<CgroupCounts>() == 8 * MAX_CGROUP_EVENTS);

// SAFETY: both types are repr(C), contain only integers and arrays of integers, and have no
// implicit padding (checked by the size asserts above), so every bit pattern is valid.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SamplerConfig {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SampleRecord {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for stack::StackSampleHeader {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for RequestConfig {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for AggregateKey {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for AggregateValue {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for UserStack {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for CgroupCounts {}

impl SampleRecord {
    /// Byte size of one record in the ring buffer.
    pub const SIZE: usize = core::mem::size_of::<SampleRecord>();

    /// The thread name up to its first NUL.
    pub fn comm_bytes(&self) -> &[u8] {
        let end = self
            .comm
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.comm.len());
        &self.comm[..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(frames: &[u64]) -> u64 {
        let h = frames
            .iter()
            .fold(USER_HASH_SEED, |h, &f| user_hash_step(h, f));
        user_hash_finish(h, frames.len() as u64)
    }

    /// The kernel keeps a user stack under this hash: stacks that differ in a frame, in
    /// order or only in length (a trailing zero frame) get different keys.
    #[test]
    fn a_user_stack_hash_depends_on_every_frame_its_order_and_its_length() {
        let a = [0x401136, 0x401178, 0x7f00_0002_9d90];
        assert_eq!(hash(&a), hash(&[0x401136, 0x401178, 0x7f00_0002_9d90]));
        let keys = [
            hash(&a),
            hash(&[a[1], a[0], a[2]]),
            hash(&[a[0], a[1], a[2] + 1]),
            hash(&[a[0], a[1], a[2], 0]),
            hash(&a[..2]),
            hash(&[]),
            hash(&[0]),
        ];
        // no_std: pairwise.
        for (i, x) in keys.iter().enumerate() {
            for (j, y) in keys.iter().enumerate() {
                assert!(
                    i == j || x != y,
                    "stacks {i} and {j} share a key: {keys:x?}"
                );
            }
        }
    }
}
