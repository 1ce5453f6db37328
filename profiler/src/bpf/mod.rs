//! Loading the embedded eBPF object, configuring its maps, attaching its perf_event program to
//! perf events we opened ourselves, and reading its ring buffer and loss counters.

mod cgcount;
mod features;
mod link;
mod loader;
mod privilege;
mod ring;
mod unwind;

pub use cgcount::{CgroupCountStats, CgroupCounter};
pub use features::{Feature, KernelFeatures, kernel_release};
pub use loader::{BpfError, Sampler, SamplerStats};
pub use privilege::{Privilege, check_privileges};
pub use ring::RecordStream;
pub use unwind::{RowRange, UnwindMapError, UnwindMaps};
