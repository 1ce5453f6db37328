//! Runtimes whose own frames a stack shows beside the native ones (interpreters, later JITs).
//!
//! A runtime is a plug-in with two halves: in user space it detects itself in a process
//! (maps, version, symbols), hands the kernel what its walker needs (offsets, address ranges)
//! and turns the walker's raw frames into names, files and lines; in the kernel it walks its
//! own frame chain when the native unwinder reaches a PC inside its code. This module holds
//! the user-space halves: each implements [`seam::Runtime`] and has a [`seam::Spec`] in
//! [`registry::RUNTIMES`], which the rest of the profiler goes through; what they share is
//! in [`shared`].

pub mod go;
pub mod hotspot;
pub mod kernel;
pub mod python;
pub mod registry;
pub mod ruby;
pub mod seam;
pub mod shared;
pub mod v8;

use std::sync::{Arc, Mutex};

/// The runtimes a recording walks, shared by the native unwinder's loader (which publishes
/// each process to them) and the collector (which names the frames their kernel walkers
/// wrote), both on the reader's thread.
pub type SharedRuntimes = Arc<Mutex<registry::Runtimes>>;
