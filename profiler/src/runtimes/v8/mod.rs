//! V8 (Node.js): placeholder doc, written below.

pub mod heap;
pub mod layout;
