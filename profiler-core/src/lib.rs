//! profiler-core: the counting model that both the `profiler` tool and `libcpc.so` stand on.
//!
//! Layers, one way: `cpc` (libcpc's handles, sets, bindings, buffers and the event
//! catalogue) → `bpf` (the eBPF overflow engine and its loader) and `perf` (perf events) →
//! the kernel, through `kernel` (the one module that makes the syscalls). `host` holds the facts about this machine they all read the same way.
//!
//! Nothing here parses command lines, writes profiles, symbolizes or runs an async runtime:
//! readers of the engine's ring buffer block in poll(2), and `profiler` adapts them to tokio.

pub mod bpf;
pub mod cpc;
pub mod host;
pub mod kernel;
pub mod perf;
