//! The Solaris counter tools on the libcpc model: cputrack (per-thread counting of a
//! command or process, following threads, fork and exec), cpustat (per-CPU counting of
//! the whole system), and the capability listings behind their `-h` and `profiler list`.
//!
//! - [`spec`]: the `-c` event specification parser;
//! - [`format`] and [`json`]: the rows, in cputrack/cpustat's exact table formats or JSON;
//! - [`track`]: the ptrace-based follower; [`stat`]: the per-CPU sampler;
//! - [`caps`]: what this host can count.

pub mod caps;
pub mod cgstat;
pub mod counting;
pub mod format;
pub mod json;
pub mod sample;
pub mod signals;
pub mod soak;
pub mod stat;
pub mod track;

pub use profiler_formats::{cnum, spec};

use crate::cpc::{Cpc, consts::VER_CURRENT};

/// Opens the libcpc handle the tools use. Errors go to the caller (who prints them once),
/// not to libcpc's default handler.
pub fn open_cpc() -> Result<Cpc, crate::cpc::CpcError> {
    let cpc = Cpc::open(VER_CURRENT)?;
    cpc.set_error_handler(Some(std::sync::Arc::new(|_, _, _| {})));
    Ok(cpc)
}
