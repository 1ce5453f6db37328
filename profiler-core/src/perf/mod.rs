//! Safe wrappers over perf_event_open(2): attribute building, owned event fds and ioctls.
//!
//! Every syscall goes through [`sys`], the one place with `unsafe`, so the rest of the crate
//! deals only in owned values whose `Drop` closes (and so detaches) what they opened.

mod attr;
mod event;
pub(crate) mod sys;

pub use attr::{EventAttr, SamplePolicy, SoftwareEvent};
pub use event::{PerfError, PerfEvent, Scope};
