//! profiler-core: the counting model that both the `profiler` tool and `libcpc.so` stand on.
//!
//! Layers, one way: `cpc` (libcpc's handles, sets, bindings and buffers) → `events` (the
//! event catalogue: names to perf attributes) and `bpf` (the eBPF loader and overflow
//! engine) → `perf` (perf events) → `kernel`, the one module that makes the perf_event_open,
//! ioctl, counter read and bpf(2) calls, behind a trait that unit tests fake. `host` holds the
//! facts about this machine the others read the same way (online CPUs, threads, sample-rate
//! limit, the monotonic clock).
//!
//! Nothing here parses command lines, writes profiles, symbolizes or runs an async runtime:
//! readers of the engine's ring buffer block in poll(2), and `profiler` adapts them to tokio.

pub mod bpf;
pub mod cpc;
pub mod events;
pub mod host;
pub mod kernel;
pub mod perf;
