//! CPython's user-space half: find the interpreter in a process, read its version and
//! symbols, give the walker its offsets, read code objects and lines from the process, and
//! (for tests, and as the reference the kernel walker is checked against) walk each thread's
//! Python stack from user space.
//!
//! Supported: CPython 3.6 to 3.13 with the GIL, as a shared `libpython` or a static binary,
//! with or without `.symtab`. Anything else is [`Unsupported`] with a one-line reason.
//!
//! The pieces, in the order a profiler uses them:
//! - [`detect()`](detect::detect): the interpreter's ELF in the maps, its [`Version`] (`Py_Version`, else the
//!   `PY_VERSION` string, else the file name), its [`Symbols`] with the load bias applied
//!   (`_PyRuntime`, the eval loop and its `.cold` part, `PyCode_Type`, the thread-state
//!   TLS/TSS symbols) and its [`PythonOffsets`](profiler_common::python::PythonOffsets).
//! - [`offsets`]: the per-version table (checked against DWARF in tests, and against
//!   `_Py_DebugOffsets` of the live process on 3.13+ by [`PythonProcess::attach`]).
//! - [`objects`]: bytes and string objects, bounded (the memory reader is
//!   [`crate::runtimes::shared::memory`]).
//! - [`code`]: code objects by address, validated by [`check_value`], and frames with lines.
//! - [`lines`]: the three line-table formats.
//! - [`stack`]: every thread's Python stack, read from user space.
//!
//! For the kernel walker: when a native frame's PC is in [`Interpreter::in_eval`], find the
//! thread's `PyThreadState` as `pthread_getspecific(key)` would (key from
//! [`PythonProcess::tss_key`], glibc's layout from [`crate::runtimes::shared::libc::tsd_layout`],
//! the thread pointer from the task's `fsbase`): it works for shared and static builds
//! alike, and the integration test checks it finds every thread's state. Then walk with the [`PythonOffsets`](profiler_common::python::PythonOffsets)
//! exactly as [`stack`] does (the same skips: 3.12+ frames owned by the C stack, 3.11+
//! incomplete frames), and record per Python frame (code object address, the raw `f_lasti`
//! or instruction pointer, [`check_value`] of the code object); user space turns that into
//! a [`PyFrame`] with [`CodeCache::frame`].

pub mod code;
pub mod detect;
pub mod lines;
pub mod objects;
pub mod offsets;
pub mod runtime;
pub mod stack;
pub mod version;
pub mod walker;

pub use code::{CodeCache, CodeInfo, PyFrame, check_value};
pub use detect::{DetectError, Detection, Interpreter, Symbols, detect};
pub use offsets::{DebugOffsetsError, check_debug_offsets, for_version as offsets_for};
pub use stack::{AttachError, PythonProcess, ThreadStack};
pub use version::{Unsupported, Version};
pub use walker::PythonWalker;

#[cfg(test)]
mod dwarf_check;

#[cfg(test)]
pub(crate) mod test_support {
    use std::{path::PathBuf, process::Command};

    use super::Version;

    /// Every CPython 3.6–3.13 installed here (pyenv's and Debian's), with its version.
    pub fn interpreters() -> Vec<(PathBuf, Version)> {
        let root = std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))
            .unwrap_or_else(|| PathBuf::from("/root/.pyenv"));
        let mut candidates: Vec<PathBuf> = std::fs::read_dir(root.join("versions"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let mut parts = name.split('.');
                let mm = format!("{}.{}", parts.next()?, parts.next()?);
                Some(e.path().join("bin").join(format!("python{mm}")))
            })
            .collect();
        candidates.push(PathBuf::from("/usr/bin/python3.11"));
        let mut found: Vec<(PathBuf, Version)> = candidates
            .into_iter()
            .filter(|p| p.exists())
            .filter_map(|p| {
                let out = Command::new(&p)
                    .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
                    .output()
                    .ok()?;
                let v = Version::parse(String::from_utf8_lossy(&out.stdout).trim())?;
                super::version::check(v, false).ok()?;
                Some((p, v))
            })
            .collect();
        found.sort();
        found
    }
}
