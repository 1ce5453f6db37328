//! pprof, the project's native profile file: a gzip-compressed `perftools.profiles.Profile`
//! protobuf, as `go tool pprof`, Parca and Pyroscope read it.
//!
//! What goes in: one pprof sample per distinct (stack, event, pid, tid, cpu, cgroup, comm)
//! with labels `event`, `pid`, `tid`, `comm`, `cpu`, `cgroup` (path) and `cgroup_id`;
//! mappings named by the module's file with its GNU build id; locations whose lines list
//! inlined functions innermost first, as the format wants; and the run's counters (samples,
//! lost, filtered, stack errors) as `profiler.KEY=VALUE` comments, so nothing the report
//! shows is lost in the file.

pub mod proto;
mod read;
mod split;
mod write;

pub use read::{PprofError, read_message, read_pprof};
pub use split::split;
pub use write::{encode, write_message, write_pprof};

/// The comment prefix for the run's own counters.
const COMMENT_PREFIX: &str = "profiler.";
/// The module name of kernel frames.
const KERNEL_MODULE: &str = "[kernel.kallsyms]";

#[cfg(test)]
mod tests;
