//! What every runtime's user-space half uses the same way: reading the process's memory
//! ([`memory`]), the ELF file behind a mapping ([`elf`]), the C library's thread-specific
//! data ([`libc`]), the errors of detection ([`error`]) and when a JIT's frames are left to
//! native stacks ([`jit`]). Nothing here names a runtime.

pub mod elf;
pub mod error;
pub mod jit;
pub mod libc;
pub mod memory;
