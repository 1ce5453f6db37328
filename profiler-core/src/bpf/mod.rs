//! Loading the embedded eBPF object, configuring its maps, attaching its perf_event programs to
//! perf events we opened ourselves, reading their ring buffers and loss counters, and the
//! unwinder's maps (module tables and process mappings) that `record` fills.

mod attach;
mod cgcount;
mod features;
mod loader;
mod offcpu;
mod privilege;
mod ring;
mod rowspace;
mod unwind;

pub use cgcount::{CgroupCountStats, CgroupCounter, switch_every_cpu};
pub use features::{Feature, KernelFeatures, kernel_release};
pub use loader::{BpfError, GroupTotals, Sampler, SamplerStats};
pub use offcpu::{OffCpuHook, OffCpuStats};
pub use privilege::{Privilege, PrivilegeError, check_privileges};
pub use ring::{MAX_BATCH_TIME, Records};
pub use rowspace::RowRange;
pub use unwind::{UnwindMapError, UnwindMaps};
