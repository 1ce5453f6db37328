//! CRuby's user-space half (the kernel walker is not built yet, so this runtime is in no
//! registry list).
//!
//! - [`layout`]: per-release offsets, each value's source said there.
//! - [`symbol_table`]: the VM's symbol table read off `rb_id2str`'s code where it is not
//!   exported.
//! - [`naming`]: the three frame words to a label (`Foo#bar`, `block in Foo#bar`,
//!   `Array#each`), a path and a line ([`lines`]), reading objects with [`objects`].

pub mod layout;
pub mod lines;
pub mod naming;
pub mod objects;
pub mod symbol_table;

pub use layout::{Layout, LayoutError, Version};
pub use naming::{NameError, Names, RubyFrame};
