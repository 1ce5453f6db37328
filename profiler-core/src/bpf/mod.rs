//! Loading the embedded eBPF object, configuring its maps, attaching its perf_event programs to
//! perf events we opened ourselves, reading their ring buffers and loss counters, and the
//! unwinder's maps (module tables and process mappings) that `record` fills.
//!
//! One type per program: [`RecordProgram`] (`record`'s sampling, with its counter groups,
//! off-CPU time and unwind maps), [`OverflowProgram`] (libcpc's overflow notification) and
//! [`CgroupCounter`] (per-cgroup counting). The first two share their loading, attaching and
//! teardown through `object::Loaded`; every map and program is named by a constant of
//! `profiler_common::names`.

mod attach;
pub mod btf;
mod cgcount;
mod error;
mod features;
mod group;
mod maps;
mod object;
mod offcpu;
mod overflow_program;
mod privilege;
mod record_program;
mod ring;
mod rowspace;
mod unwind;

pub use cgcount::{CgroupCountStats, CgroupCounter, switch_every_cpu};
pub use error::BpfError;
pub use features::{Feature, KernelFeatures, kernel_release};
pub use group::GroupTotals;
pub use object::SamplerStats;
pub use offcpu::{OffCpuHook, OffCpuStats};
pub use overflow_program::{OverflowConfig, OverflowProgram};
pub use privilege::{Privilege, PrivilegeError, check_privileges};
pub use record_program::{RecordConfig, RecordProgram};
pub use ring::{MAX_BATCH_TIME, Records};
pub use rowspace::RowRange;
pub use unwind::{UnwindMapError, UnwindMaps};
