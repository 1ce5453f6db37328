//! profiler: an eBPF-assisted CPU performance profiler for Linux with the libcpc model.
//!
//! Layers, one way: `cli` → `record` → (`perf`, `bpf`) → kernel → ring buffer → `profile`
//! → writers. `symbolize` turns addresses into frames between the ring buffer and `profile`.

pub mod bpf;
pub mod cgroup;
pub mod cli;
pub mod cpc;
pub mod host;
pub mod modules;
pub mod output;
pub mod perf;
pub mod profile;
pub mod record;
pub mod symbolize;
pub mod tools;
pub mod untrusted;
