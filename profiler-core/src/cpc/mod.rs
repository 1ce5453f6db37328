//! The libcpc(3LIB) counting model on Linux perf events: a handle ([`Cpc`]), sets of
//! requests ([`Set`]), bindings to a thread, process, CPU or cgroup, and buffers ([`Buf`])
//! with libcpc's arithmetic. Each libcpc function has a method of the same name on [`Cpc`];
//! ownership replaces the destroy calls, `Result<_, CpcError>` replaces -1 and errno, and
//! every error carries the errno and subcode libcpc would report.

mod bind;
mod binder;
mod buf;
pub mod consts;
mod cpumodel;
mod engine;
mod error;
/// The event catalogue (`crate::events`), where libcpc's API has always shown it.
pub use crate::events;
mod group;
mod handle;
mod handler;
mod overflow;
mod request;
mod sampling;
mod set;
mod sigsafe;
#[cfg(test)]
mod tests;

pub use bind::Lwp;
pub use buf::Buf;
pub use engine::OverflowPolicy;
pub use error::{CpcError, ErrorHandler, Subcode};
pub use handle::{Cpc, NoBpf, SOFTWARE_NPIC};
pub use handler::OverflowHandler;
pub use overflow::{Overflow, Overflows};
pub use set::{Attr, Request, Set};
