//! profiler: an eBPF-assisted CPU performance profiler for Linux with the libcpc model.
//!
//! Layers, one way: `cli` → `record` → `profiler_core` (`perf`, `bpf`, `cpc`) → kernel → ring
//! buffer → `profile` → `sink` (files, the table, the stores). `symbolize` turns addresses
//! into frames between the ring buffer and `profile`; `modules` (the ELF module registry)
//! builds the unwind tables `record` puts into the kernel. The counting model lives in
//! `profiler-core` (which `libcpc.so` also links); its modules are re-exported here under
//! their own names. So are those of `profiler-formats` (the profile model and its formats,
//! frames, perf maps, the `-c` spec parser, the untrusted-file rules: what the fuzz targets
//! build, without this crate).

pub use profiler_core::{host, perf};
pub use profiler_formats::{cgroup, untrusted};

/// The eBPF engine (`profiler_core::bpf`), plus its ring buffer read through tokio.
pub mod bpf {
    pub use crate::stream::RecordStream;
    pub use profiler_core::bpf::*;
}

/// libcpc's model (`profiler_core::cpc`), plus overflows read through tokio.
pub mod cpc {
    pub use crate::stream::OverflowStream;
    pub use profiler_core::cpc::*;
}

pub mod cli;
pub mod export;
pub mod modules;
pub mod output;
pub mod profile;
pub mod record;
pub mod runtimes;
pub mod sink;
mod stream;
pub mod symbolize;
pub mod tools;
