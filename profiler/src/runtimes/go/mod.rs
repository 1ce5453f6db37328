//! Go's goroutine labels (`runtime/pprof`'s `pprof.Do`, `SetGoroutineLabels`) on samples:
//! Go code is native (named by the symbolizer, `.gopclntab` included), so this runtime
//! adds no frames; its kernel half gives each sample of a Go process the running
//! goroutine's label set (`profiler_common::golabels`) and this half reads its keys and
//! values from the process.

mod detect;
mod labels;
mod offsets;
pub mod runtime;
