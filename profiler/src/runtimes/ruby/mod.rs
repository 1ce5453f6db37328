//! CRuby: its kernel walker (`profiler-ebpf/src/ruby.rs`) runs on the seam's hooks; this
//! is the user-space half (`runtime.rs`, in the registry): find the VM in a process, read
//! its version, symbols and the way to the running thread's execution context, give the
//! walker its offsets ([`profiler_common::ruby::RubyProc`]), and name the frames it writes.
//!
//! Supported: CRuby 2.6 to 3.4 on x86-64, as a shared `libruby` (with `.dynsym` only, as
//! distributions ship it) or a static `ruby`. Anything else is one line saying why.
//!
//! The pieces, in the order a profiler uses them:
//! - [`detect()`](detect::detect): the ELF, `ruby_version`, `rb_vm_exec`'s range, the EC
//!   (TLS `ruby_current_ec` through the DTV, else the main ractor's running EC, else 2.x's
//!   global), the VM's symbol table (exported, or read off `rb_id2str`'s code:
//!   [`symbol_table`]).
//! - [`layout`]: per-release offsets, each value's source said there.
//! - [`naming`]: the three frame words to a label (`Foo#bar`, `block in Foo#bar`,
//!   `Array#each`), a path and a line ([`lines`]: the succinct bit-vector of 2.6+), reading
//!   objects with [`objects`] and class paths with [`classes`].

pub mod classes;
pub mod detect;
pub mod layout;
pub mod lines;
pub mod naming;
pub mod objects;
pub mod runtime;
pub mod symbol_table;

pub use detect::{Detection, Ec, Ruby, detect};
pub use layout::{Layout, LayoutError, Version};
pub use naming::{NameError, Names, RubyFrame};
