//! What symbolization produces and reads that needs no symbolizer: the [`Frame`] of a
//! stack, JIT perf maps, and the build ids that tie a file to its debug file. The
//! symbolizer itself (blazesym, kallsyms, the normalizer) is `profiler::symbolize`.

mod debug_file;
mod frame;
mod perfmap;

pub use debug_file::{Identity, by_build_id, files_by_id};
pub use frame::{Frame, FrameKind};
pub use perfmap::PerfMap;
