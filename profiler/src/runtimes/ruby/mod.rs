//! CRuby's user-space half (the kernel walker is not built yet, so this runtime is in no
//! registry list).
//!
//! - [`layout`]: per-release offsets, each value's source said there.
//! - [`objects`]: strings, arrays, class paths and method names read from a process.
//! - [`lines`]: the line of an instruction (the succinct bit-vector of 2.6+).

pub mod layout;
pub mod lines;
pub mod objects;

pub use layout::{Layout, LayoutError, Version};
