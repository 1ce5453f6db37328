// The eBPF crate's library target is empty: the programs live in the `profiler` binary target,
// which aya-build compiles for bpfel-unknown-none. This keeps `cargo` happy on the host.
#![no_std]
