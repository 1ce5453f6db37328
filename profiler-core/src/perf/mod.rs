//! Safe wrappers over perf_event_open(2): attribute building, owned event fds and ioctls.
//!
//! Every syscall goes through the crate's [`crate::kernel`] seam, so the rest of the crate
//! deals only in owned values whose `Drop` closes (and so detaches) what they opened.

mod attr;
mod event;
mod sideband;

pub use attr::{EventAttr, SamplePolicy, SoftwareEvent};
pub use event::{PerfError, PerfEvent, Scope};
pub use sideband::{SideRecord, Sideband, SidebandError};
