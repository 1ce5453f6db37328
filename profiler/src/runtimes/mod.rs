//! Runtimes whose own frames a stack shows beside the native ones (interpreters, later JITs).
//!
//! A runtime is a plug-in with two halves: in user space it detects itself in a process
//! (maps, version, symbols), hands the kernel what its walker needs (offsets, address ranges)
//! and turns the walker's raw frames into names, files and lines; in the kernel it walks its
//! own frame chain when the native unwinder reaches a PC inside its code. This module holds
//! the user-space halves; Python is the first.

pub mod elf;
pub mod hotspot;
pub mod libc;
pub mod python;
pub mod v8;

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use profiler_common::python::PY_FRAME;

use crate::{
    bpf::{UnwindMapError, UnwindMaps},
    modules::Mapping,
    symbolize::{Frame, FrameKind},
};

/// The runtimes a recording walks, shared by the native unwinder's loader (which publishes
/// each process to them) and the collector (which names the frames their kernel walkers
/// wrote), both on the reader's thread.
pub type SharedRuntimes = Arc<Mutex<Runtimes>>;

/// Every runtime a recording walks (Python; Java and Node are next on this seam).
pub struct Runtimes {
    python: Option<python::PythonWalker>,
    /// Reasons already said, so each is said once.
    said: HashSet<String>,
    /// Lines for the user not yet taken.
    pending: Vec<String>,
    /// Frames named, by (pid, words): a code object's check value is in its words, so an
    /// entry never outlives the object it names.
    named: HashMap<RuntimeWords, Option<Arc<[Frame]>>>,
}

/// A runtime frame's words in one process: (pid, first word, second word).
type RuntimeWords = (u32, u64, u64);

/// Entries of [`Runtimes::named`] kept before it is cleared.
const MAX_NAMED: usize = 1 << 20;

impl Runtimes {
    /// With the Python walker, whose kernel half reads the task's thread pointer at
    /// `task_fsbase` (from this kernel's BTF).
    pub fn with_python(task_fsbase: u32) -> Self {
        Self {
            python: Some(python::PythonWalker::new(task_fsbase)),
            said: HashSet::new(),
            pending: Vec::new(),
            named: HashMap::new(),
        }
    }

    /// A process being published to the native unwinder (new, or its mappings changed):
    /// each runtime looks at it, and the kernel learns which to hand over to.
    pub fn publish(
        &mut self,
        pid: u32,
        mappings: &[Mapping],
        maps: &mut UnwindMaps,
    ) -> Result<(), UnwindMapError> {
        let Some(py) = self.python.as_mut() else {
            return Ok(());
        };
        match py.publish(pid, mappings) {
            python::Published::Walk(entry) => maps.set_python(pid, Some(&entry)),
            python::Published::Native(why) => {
                if let Some(why) = why
                    && self.said.insert(why.clone())
                {
                    self.pending
                        .push(format!("Python frames not shown for process {pid}: {why}"));
                }
                maps.set_python(pid, None)
            }
        }
    }

    /// Whether some runtime may walk this process (cheap: its mappings' names), so that
    /// its native tables are worth building at once.
    pub fn walks(&self, pid: u32, mappings: &[Mapping]) -> bool {
        self.python.is_some() && python::detect::is_candidate(pid, mappings)
    }

    /// A process that exited.
    pub fn forget(&mut self, pid: u32) {
        if let Some(py) = self.python.as_mut() {
            py.forget(pid);
        }
    }

    /// Lines to say (each reason once).
    pub fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending)
    }

    /// (Python frames named, and not) so far.
    pub fn python_counts(&self) -> (u64, u64) {
        self.python
            .as_ref()
            .map_or((0, 0), |p| (p.named, p.unnamed))
    }

    /// A runtime's frame at the start of `words` (a process's user frames, innermost
    /// first): how many words it takes, and the frame (`None` for one the runtime does not
    /// show); `None` when the first word is a native address.
    pub fn frame(&mut self, pid: u32, words: &[u64]) -> Option<(usize, Option<Arc<[Frame]>>)> {
        let (&word, &data) = (words.first()?, words.get(1)?);
        if word & PY_FRAME == 0 {
            return None;
        }
        if let Some(named) = self.named.get(&(pid, word, data)) {
            return Some((2, named.clone()));
        }
        let frame = self
            .python
            .as_mut()
            .and_then(|py| py.frame(pid, word, data));
        let named: Option<Arc<[Frame]>> = frame.map(|f| {
            Arc::from([Frame {
                function: f.name,
                module: None,
                path: None,
                file: (!f.filename.is_empty()).then_some(f.filename),
                line: f.line.and_then(|l| u32::try_from(l).ok()),
                kind: FrameKind::Python,
                inlined: false,
                offset: None,
            }])
        });
        if self.named.len() >= MAX_NAMED {
            self.named.clear();
        }
        self.named.insert((pid, word, data), named.clone());
        Some((2, named))
    }
}
