//! The kernel's maps of runtime entries, as they are until the kernel has one map of
//! opaque per-runtime states (issue 46's seam, step 4): one typed map per runtime. This is
//! the one place that routes a runtime's entry to its map; it goes with that step.

use profiler_common::{hotspot::HsProc, python::PyProc, v8::V8Proc};

use crate::bpf::{UnwindMapError, UnwindMaps};

/// What a runtime's kernel walker reads for one process.
pub enum Entry {
    Python(Box<PyProc>),
    V8(Box<V8Proc>),
    Hotspot(Box<HsProc>),
}

/// Which map a runtime's entries go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelMap {
    Python,
    V8,
    Hotspot,
}

impl Entry {
    /// Puts this entry in its map for process `pid`.
    pub fn set(&self, maps: &mut UnwindMaps, pid: u32) -> Result<(), UnwindMapError> {
        match self {
            Entry::Python(e) => maps.set_python(pid, Some(e)),
            Entry::V8(e) => maps.set_v8(pid, Some(e)),
            Entry::Hotspot(e) => maps.set_hotspot(pid, Some(e)),
        }
    }
}

impl KernelMap {
    /// Removes process `pid`'s entry from this map, if it has one.
    pub fn clear(self, maps: &mut UnwindMaps, pid: u32) -> Result<(), UnwindMapError> {
        match self {
            KernelMap::Python => maps.set_python(pid, None),
            KernelMap::V8 => maps.set_v8(pid, None),
            KernelMap::Hotspot => maps.set_hotspot(pid, None),
        }
    }
}
