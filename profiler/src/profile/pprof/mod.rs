//! pprof files (`profiler_formats::profile::pprof`), and naming their unnamed locations
//! with the symbolizer (`profiler symbolize`).

mod symbolize;

pub use profiler_formats::profile::pprof::*;
pub use symbolize::{Symbolized, symbolize_message};
