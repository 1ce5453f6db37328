//! The names of the eBPF object's maps, programs and globals, spelled once for user space.
//!
//! The eBPF crate names a map by its `#[map]` static and a program by its function, and
//! aya-ebpf's attributes take string literals only, so the object cannot be built from these
//! constants. A unit test of `profiler-core` (in `bpf::object`) parses the built object and
//! asserts that each constant names a map or program of it and that each of its maps and
//! programs has a constant here: the two spellings cannot drift apart.

/// Map names (the `#[map]` statics of `profiler-ebpf`).
pub mod maps {
    // The target filters, the sampler's configuration and counters (sampler.rs).
    pub const TGIDS: &str = "TGIDS";
    pub const TIDS: &str = "TIDS";
    pub const CGROUPS: &str = "CGROUPS";
    pub const CONFIG: &str = "CONFIG";
    pub const STATS: &str = "STATS";
    pub const REQUESTS: &str = "REQUESTS";
    /// libcpc's overflow records.
    pub const EVENTS: &str = "EVENTS";
    /// The per-request perf event arrays, [`SIBLINGS`] in order.
    pub const SIB0: &str = "SIB0";
    pub const SIB1: &str = "SIB1";
    pub const SIB2: &str = "SIB2";
    pub const SIB3: &str = "SIB3";
    pub const SIB4: &str = "SIB4";
    pub const SIB5: &str = "SIB5";
    pub const SIB6: &str = "SIB6";
    pub const SIB7: &str = "SIB7";
    /// The perf event arrays by request index (below [`crate::MAX_SIBLINGS`]).
    pub const SIBLINGS: [&str; crate::MAX_SIBLINGS] =
        [SIB0, SIB1, SIB2, SIB3, SIB4, SIB5, SIB6, SIB7];

    // `record`'s samples and in-kernel aggregation (record.rs).
    pub const RECORD_EVENTS: &str = "RECORD_EVENTS";
    pub const RECORD_BUF: &str = "RECORD_BUF";
    pub const AGGREGATE: &str = "AGGREGATE";
    pub const STACK_TRACES: &str = "STACK_TRACES";
    pub const USER_STACKS: &str = "USER_STACKS";

    // The unwinder (unwind.rs).
    pub const UNWIND_ROWS: &str = "UNWIND_ROWS";
    /// Every `ROWS_PER_FENCE`th row's pc (`crate::unwind::ROWS_PER_FENCE`).
    pub const UNWIND_FENCES: &str = "UNWIND_FENCES";
    pub const UNWIND_PROCS: &str = "UNWIND_PROCS";
    pub const COPIES: &str = "COPIES";
    pub const COPY_WINDOW: &str = "COPY_WINDOW";
    pub const WALK: &str = "WALK";
    pub const WOKE_AT: &str = "WOKE_AT";
    pub const RUNTIME_WOKE_AT: &str = "RUNTIME_WOKE_AT";
    /// The Python walker's processes (`crate::python::PyProc`, by tgid).
    pub const PY_PROCS: &str = "PY_PROCS";
    /// This CPU's copy of the walked process's entry (or an empty one) for the walk.
    pub const PY_CUR: &str = "PY_CUR";
    /// The V8 walker's processes (`crate::v8::V8Proc`, by tgid).
    pub const V8_PROCS: &str = "V8_PROCS";
    /// The HotSpot walker's processes (`crate::hotspot::HsProc`, by tgid).
    pub const HS_PROCS: &str = "HS_PROCS";
    /// Go processes whose goroutine labels samples carry (`crate::golabels::GoProc`).
    pub const GO_PROCS: &str = "GO_PROCS";
    /// Runtimes' hooks per process (`crate::runtimes::RtProc`, by tgid).
    pub const RT_PROCS: &str = "RT_PROCS";
    /// Runtimes' states per process (`crate::runtimes::RtState`, by tgid and slot).
    pub const RT_STATE: &str = "RT_STATE";

    // Counter groups (group.rs).
    pub const GROUP_CONFIG: &str = "GROUP_CONFIG";
    pub const GROUP_CPU: &str = "GROUP_CPU";
    pub const GROUP_TASKS: &str = "GROUP_TASKS";
    pub const GROUP_LOST: &str = "GROUP_LOST";
    pub const GROUP_EXITED: &str = "GROUP_EXITED";
    pub const GROUP_TAIL: &str = "GROUP_TAIL";
    pub const GROUP_SAMPLED: &str = "GROUP_SAMPLED";
    pub const AGGREGATE_GROUP: &str = "AGGREGATE_GROUP";

    // Off-CPU time (offcpu.rs).
    pub const OFFCPU_CONFIG: &str = "OFFCPU_CONFIG";
    pub const OFFCPU_PENDING: &str = "OFFCPU_PENDING";
    pub const OFFCPU_BUF: &str = "OFFCPU_BUF";
    pub const OFFCPU_TOTALS: &str = "OFFCPU_TOTALS";
    pub const OFFCPU_TOTAL_BUF: &str = "OFFCPU_TOTAL_BUF";
    pub const OFFCPU_STATS: &str = "OFFCPU_STATS";
    pub const OFFCPU_COPIES: &str = "OFFCPU_COPIES";
    pub const OFFCPU_COPY_BUF: &str = "OFFCPU_COPY_BUF";
    pub const OFFCPU_OUT: &str = "OFFCPU_OUT";

    // Per-cgroup counting (cgcount.rs).
    pub const CG_CONFIG: &str = "CG_CONFIG";
    pub const CG_PREV: &str = "CG_PREV";
    pub const CG_COUNTS: &str = "CG_COUNTS";
    pub const CG_STATS: &str = "CG_STATS";

    /// Every map of the object.
    pub const ALL: &[&str] = &[
        TGIDS,
        TIDS,
        CGROUPS,
        CONFIG,
        STATS,
        REQUESTS,
        EVENTS,
        SIB0,
        SIB1,
        SIB2,
        SIB3,
        SIB4,
        SIB5,
        SIB6,
        SIB7,
        RECORD_EVENTS,
        RECORD_BUF,
        AGGREGATE,
        STACK_TRACES,
        USER_STACKS,
        UNWIND_ROWS,
        UNWIND_FENCES,
        UNWIND_PROCS,
        COPIES,
        COPY_WINDOW,
        WALK,
        WOKE_AT,
        RUNTIME_WOKE_AT,
        PY_PROCS,
        PY_CUR,
        V8_PROCS,
        HS_PROCS,
        GO_PROCS,
        RT_PROCS,
        RT_STATE,
        GROUP_CONFIG,
        GROUP_CPU,
        GROUP_TASKS,
        GROUP_LOST,
        GROUP_EXITED,
        GROUP_TAIL,
        GROUP_SAMPLED,
        AGGREGATE_GROUP,
        OFFCPU_CONFIG,
        OFFCPU_PENDING,
        OFFCPU_BUF,
        OFFCPU_TOTALS,
        OFFCPU_TOTAL_BUF,
        OFFCPU_STATS,
        OFFCPU_COPIES,
        OFFCPU_COPY_BUF,
        OFFCPU_OUT,
        CG_CONFIG,
        CG_PREV,
        CG_COUNTS,
        CG_STATS,
    ];
}

/// Program names (the functions of `profiler-ebpf`), as `bpftool prog` and the tests show them.
pub mod programs {
    /// libcpc's overflow program (perf_event).
    pub const SAMPLE: &str = "sample";
    /// `record`'s sampling program walking with unwind tables, and with frame pointers only
    /// (perf_event).
    pub const RECORD_SAMPLE: &str = "record_sample";
    pub const RECORD_FP: &str = "record_fp";
    /// Following forks: `sched:sched_process_fork` and `sched:sched_process_exit`.
    pub const ON_FORK: &str = "on_fork";
    pub const ON_EXIT: &str = "on_exit";
    /// Dropping a process's unwind tables: `sched:sched_process_exec` and `_exit`.
    pub const UNWIND_EXEC: &str = "unwind_exec";
    pub const UNWIND_EXIT: &str = "unwind_exit";
    /// Counter groups: raw `sched_switch`, `sched:sched_process_fork`, raw
    /// `sched_process_exit`.
    pub const GROUP_SWITCH: &str = "group_switch";
    pub const GROUP_FORK: &str = "group_fork";
    pub const GROUP_EXIT: &str = "group_exit";
    /// Off-CPU time on `sched:sched_switch`, with unwind tables and with frame pointers.
    pub const OFFCPU_SWITCH: &str = "offcpu_switch";
    pub const OFFCPU_SWITCH_FP: &str = "offcpu_switch_fp";
    /// Per-cgroup counting on raw `sched_switch`.
    pub const CG_SWITCH: &str = "cg_switch";

    /// Every program of the object.
    pub const ALL: &[&str] = &[
        SAMPLE,
        RECORD_SAMPLE,
        RECORD_FP,
        ON_FORK,
        ON_EXIT,
        UNWIND_EXEC,
        UNWIND_EXIT,
        GROUP_SWITCH,
        GROUP_FORK,
        GROUP_EXIT,
        OFFCPU_SWITCH,
        OFFCPU_SWITCH_FP,
        CG_SWITCH,
    ];
}

/// Globals the loader sets before the programs load (`#[no_mangle]` statics).
pub mod globals {
    /// The helpers this kernel has ([`crate::kernel_features`]).
    pub const KERNEL_FEATURES: &str = "KERNEL_FEATURES";
}
