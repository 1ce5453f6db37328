//! Counter groups (`record -e '{LEADER,EV2,..}:S'`, `record --read`): samples are taken on
//! the leader, and every other counter of the group is read per thread. The counters are
//! per-CPU; at each context switch (and at each sample) the program adds what each counter
//! advanced on that CPU to the task that ran, so a thread's value counts only its own
//! events however the counters are bound. A record of a group carries, after its frames,
//! one word with the number of values and then the thread's values (scaled by
//! enabled/running time when multiplexed); records without a group are unchanged.

/// Most counters read with one leader (one per `SIB0..SIB7` perf event array).
pub const MAX_COUNTERS: usize = crate::MAX_SIBLINGS;

/// Words a record's group values take at most: the count, then the values.
pub const TAIL_WORDS: usize = 1 + MAX_COUNTERS;

/// Most threads whose values the `GROUP_TASKS` map keeps (values of others are counted in
/// `GROUP_LOST`).
pub const MAX_TASKS: u32 = 32768;

/// Slot of `GROUP_LOST` (per CPU, `LOST_SLOTS` slots) counting failed counter reads;
/// slots `0..MAX_COUNTERS` hold the events of tasks the map had no room for.
pub const READ_ERRORS: u32 = MAX_COUNTERS as u32;
/// Slot of `GROUP_LOST` counting the accounting runs (switches and samples) that did work.
pub const UPDATES: u32 = MAX_COUNTERS as u32 + 1;
/// Slot of `GROUP_LOST` counting aggregated samples whose counter increases found no room
/// (`GROUP_SAMPLED` or `AGGREGATE_GROUP` full): the increases stay with the thread, for its
/// next sample or its `unattributed` rest, as a lost ring record's do.
pub const AGGREGATE_FULL: u32 = MAX_COUNTERS as u32 + 2;
/// Slots `AFTER_EXIT..AFTER_EXIT + MAX_COUNTERS` of `GROUP_LOST`: per counter, the events
/// targets counted after `sched_process_exit` (the futex and `clear_child_tid` writes of
/// their exit). A per-task counter (`perf stat -p`, `track`) has stopped by then, on 6.16
/// and later before the exit releases the address space, so they are not the target's.
pub const AFTER_EXIT: u32 = MAX_COUNTERS as u32 + 3;
pub const LOST_SLOTS: u32 = AFTER_EXIT + MAX_COUNTERS as u32;

/// Slot 0 of the `GROUP_CONFIG` array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupConfig {
    /// Counters in use: the first `counters` of `SIB0..SIB7`, at each CPU's index.
    pub counters: u32,
    /// Bit k: counter k counts one event per context switch, *after* the `sched_switch`
    /// tracepoint (`context-switches`): that event belongs to the task switched out.
    pub counted_at_switch: u32,
    /// 1: a target's counting ends at its `sched_process_exit` (the group's exit and fork
    /// programs are attached; the fork program clears a reused tid's mark).
    pub exits: u32,
    /// Offset of `child_pid` in `sched:sched_process_fork` records (from tracefs).
    pub fork_child_offset: u32,
}

/// A counter's reading at the last accounting on a CPU (`GROUP_BASE`, per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterBase {
    pub counter: u64,
    pub enabled: u64,
    pub running: u64,
}

/// A CPU's working state (`GROUP_CPU`, per CPU): each counter's reading at the last
/// accounting there, and scratch space, all in map memory (the verifier does not track map
/// values slot by slot, so the accounting's branches do not multiply its states).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupCpu {
    pub base: [CounterBase; MAX_COUNTERS],
    /// What each counter advanced since the last accounting (scaled).
    pub deltas: [u64; MAX_COUNTERS],
    /// `bpf_perf_event_read_value`'s output (the layout of `struct bpf_perf_event_value`).
    pub read: CounterBase,
}

/// A thread's counter values so far (`GROUP_TASKS`, keyed by tid). Also, with
/// `record --aggregate`, a sampled thread's values at its last sample (`GROUP_SAMPLED`,
/// keyed by tid) and each counter's increases summed per aggregation key (`AGGREGATE_GROUP`,
/// keyed by `AggregateKey`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupValues {
    pub values: [u64; MAX_COUNTERS],
}

/// A sample's group words, prepared before its stacks are walked (`GROUP_TAIL`, per CPU):
/// the words to append (0 without a group, else 1 + the number of values), the record flags
/// to add, and the words themselves (the number of values, then the values).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupTail {
    pub words: u64,
    pub flags: u64,
    pub data: [u64; TAIL_WORDS],
}

/// `counter` advanced by `dc` while enabled `de` and running `dr` nanoseconds: scaled as
/// `stat` scales a multiplexed count (`dc * de / dr`), unscaled when it always ran.
#[inline(always)]
pub fn scale(dc: u64, de: u64, dr: u64) -> u64 {
    if dr == 0 || dr >= de {
        return dc;
    }
    if dc < (1 << 32) && de < (1 << 32) {
        dc * de / dr
    } else {
        dc / dr * de + (dc % dr) * (de / dr)
    }
}

const _: () = assert!(core::mem::size_of::<GroupConfig>() == 16);
const _: () = assert!(core::mem::size_of::<CounterBase>() == 24);
const _: () = assert!(core::mem::size_of::<GroupCpu>() == 32 * MAX_COUNTERS + 24);
const _: () = assert!(core::mem::size_of::<GroupValues>() == 8 * MAX_COUNTERS);
const _: () = assert!(core::mem::size_of::<GroupTail>() == 8 * (2 + TAIL_WORDS));

// SAFETY: repr(C) structs of integers without implicit padding (sizes asserted above).
#[cfg(feature = "user")]
unsafe impl aya::Pod for GroupConfig {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for CounterBase {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for GroupValues {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for GroupCpu {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for GroupTail {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_is_stats() {
        assert_eq!(scale(1000, 10, 10), 1000);
        assert_eq!(scale(1000, 10, 0), 1000);
        assert_eq!(scale(1000, 20, 10), 2000);
        assert_eq!(scale(u64::MAX / 4, 4 << 32, 2 << 32), u64::MAX / 4 * 2);
    }
}
