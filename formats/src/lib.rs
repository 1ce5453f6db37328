//! profiler-formats: the profile model with its readers and writers, and the parsers of what
//! comes from outside (JIT perf maps, cputrack/cpustat `-c` specs, files other users control).
//!
//! A crate of its own so that the fuzz targets, built under AddressSanitizer, do not build
//! the recorder, the symbolizer, the exporters and tokio with them. `profiler` re-exports
//! each module at its old path (`profiler::profile`, `profiler::tools::spec`, ...).
//!
//! Layers, one way: `profile` (the model and its formats) → `symbolize` (the frame type and
//! the symbol sources that need no symbolizer) → `untrusted` (opening the files of other
//! users); `profile` names containers from `cgroup`'s paths; `spec` (on
//! `profiler_core::cpc`) → `cnum`.

pub mod cgroup;
pub mod cnum;
pub mod profile;
mod read_at;
pub mod spec;
pub mod symbolize;
pub mod untrusted;

pub use read_at::ReadAt;
