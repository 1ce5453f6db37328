//! Loading the embedded eBPF object, configuring its maps, attaching its perf_event program to
//! perf events we opened ourselves, and reading its ring buffer and loss counters.

mod attach;
mod cgcount;
mod loader;
mod privilege;
mod ring;

pub use cgcount::{CgroupCountStats, CgroupCounter};
pub use loader::{BpfError, Sampler, SamplerStats};
pub use privilege::{Privilege, PrivilegeError, check_privileges};
pub use ring::{MAX_BATCH_TIME, Records};
