//! The kernel's maps of runtime entries: Python, V8 and HotSpot each have a typed map of
//! their own (until they move onto the seam); a runtime on the seam (`Hooked`: Ruby) gives
//! the code ranges whose native frames its frames replace and an opaque state
//! (`RT_PROCS`, `RT_STATE`). This is the one place that routes a runtime's entry to its map.

use profiler_common::{
    golabels::GoProc, hotspot::HsProc, python::PyProc, runtimes::RtState, v8::V8Proc,
};

use crate::bpf::{UnwindMapError, UnwindMaps};

/// What a runtime's kernel walker reads for one process.
pub enum Entry {
    Python(Box<PyProc>),
    V8(Box<V8Proc>),
    Hotspot(Box<HsProc>),
    /// Where the sampler finds a Go process's goroutine labels.
    Go(Box<GoProc>),
    /// A runtime on the seam: its slot, the ranges it marks, its state.
    Hooked {
        slot: u8,
        ranges: Vec<(u64, u64)>,
        state: Box<RtState>,
    },
}

/// Which map a runtime's entries go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelMap {
    Python,
    V8,
    Hotspot,
    Go,
    /// A runtime on the seam, by slot.
    Hooked(u8),
}

impl Entry {
    /// Puts this entry in its map for process `pid`.
    pub fn set(&self, maps: &mut UnwindMaps, pid: u32) -> Result<(), UnwindMapError> {
        match self {
            Entry::Python(e) => maps.set_python(pid, Some(e)),
            Entry::V8(e) => maps.set_v8(pid, Some(e)),
            Entry::Hotspot(e) => maps.set_hotspot(pid, Some(e)),
            Entry::Go(e) => maps.set_go(pid, Some(e)),
            Entry::Hooked {
                slot,
                ranges,
                state,
            } => maps.set_hooked(pid, *slot, Some((ranges, state))),
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
            KernelMap::Go => maps.set_go(pid, None),
            KernelMap::Hooked(slot) => maps.set_hooked(pid, slot, None),
        }
    }
}
