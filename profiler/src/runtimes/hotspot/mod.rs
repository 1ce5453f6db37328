//! HotSpot (Java), user-space half: find libjvm in a process, read its VMStructs from the
//! live process into one typed layout, find the code blob of a PC, and name Java frames.
//! Not wired into `record` yet (the kernel walk is the other half); the research behind it is
//! `HOTSPOT-RESEARCH.md` beside this module.

pub mod code;
pub mod detect;
pub mod layout;
pub mod naming;
pub mod stream;
#[cfg(test)]
pub(crate) mod testdata;
pub mod version;
pub mod vmstructs;

pub use code::{Blob, BlobKind, CodeCache, MAX_SEGMAP_HOPS};
pub use detect::{DetectError, Detection, NotWalked, detect, detect_in};
pub use layout::{Layout, Unsupported};
pub use naming::{JavaFrame, LineKind, MethodInfo, Namer, PcKind, Tier};
pub use version::JvmVersion;
