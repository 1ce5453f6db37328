//! Why looking for a runtime in a process failed, in the ways every runtime's detection can
//! fail; a runtime with failures of its own wraps this in its own error.
//!
//! Not an error: "not this runtime", or "a version we do not walk" (values of each
//! runtime's `Detection`).

use super::{elf::ElfError, memory::ReadError};

#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// Its maps, its ELF file.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// The runtime's own tables in the live process (`what`: which).
    #[error("{path} (process {pid}): reading {what}: {source}")]
    Read {
        pid: u32,
        path: String,
        what: &'static str,
        #[source]
        source: ReadError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line a user sees is the one each runtime said before the variant was shared.
    #[test]
    fn a_failed_read_says_what_was_read() {
        let e = DetectError::Read {
            pid: 7,
            path: "/usr/lib/libjvm.so".into(),
            what: "VMStructs",
            source: ReadError::invalid("C string", 0x10, "no NUL in 4 bytes"),
        };
        assert_eq!(
            e.to_string(),
            "/usr/lib/libjvm.so (process 7): reading VMStructs: C string at 0x10: no NUL in 4 bytes"
        );
    }
}
