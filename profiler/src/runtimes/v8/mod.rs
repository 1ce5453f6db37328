//! V8 (Node.js): placeholder doc, written below.

pub mod code;
pub mod detect;
pub mod heap;
pub mod layout;
pub mod naming;

pub use detect::{DetectError, Detection, detect, detect_in};
pub use layout::{Layout, Unsupported, V8Version};
pub use naming::{JsFrame, LineKind, Namer, Position};
