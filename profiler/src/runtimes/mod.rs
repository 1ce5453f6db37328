//! Runtimes whose own frames a stack shows beside the native ones (interpreters, later JITs).
//!
//! A runtime is a plug-in with two halves: in user space it detects itself in a process
//! (maps, version, symbols), hands the kernel what its walker needs (offsets, address ranges)
//! and turns the walker's raw frames into names, files and lines; in the kernel it walks its
//! own frame chain when the native unwinder reaches a PC inside its code. This module holds
//! the user-space halves; Python is the first.

pub mod libc;
pub mod python;
