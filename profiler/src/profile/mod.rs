//! The profile model and its formats, from `profiler_formats::profile` (a crate of its own,
//! so the fuzz targets build them without the recorder); here, what needs the symbolizer.

pub mod pprof;

pub use profiler_formats::profile::*;
