//! CPython as a [`Runtime`]: the walker, and its frames as stack frames (cached).

use std::{collections::HashMap, sync::Arc};

use profiler_common::runtimes::slots;

use super::{PythonWalker, detect::is_candidate};
use crate::{
    modules::Mapping,
    runtimes::{
        kernel::KernelMap,
        seam::{Published, Runtime, Spec, StartCx},
    },
    symbolize::{Frame, FrameKind},
};

pub static SPEC: Spec = Spec {
    name: "python",
    off_flag: "no-python",
    off_help: "Show no Python frames: CPython processes' stacks are native only (the eval \
               loop's C frames). By default each eval call is replaced by the Python \
               functions it runs",
    label: "Python",
    shows: "frames",
    kind: FrameKind::Python,
    slot: slots::PYTHON,
    map: KernelMap::Python,
    start,
};

/// Entries of [`Python::named`] kept before it is cleared.
const MAX_NAMED: usize = 1 << 20;

/// The kernel half reads the task's thread pointer: no Python frames without its place.
fn start(cx: &StartCx) -> Result<Box<dyn Runtime>, String> {
    let fsbase = cx
        .task_fsbase()
        .map_err(|e| format!("the thread pointer's place in task_struct is not known ({e})"))?;
    Ok(Box::new(Python {
        walker: PythonWalker::new(fsbase),
        named: HashMap::new(),
    }))
}

struct Python {
    walker: PythonWalker,
    /// Frames named, by (pid, words): a code object's check value is in its words, so an
    /// entry never outlives the object it names.
    named: HashMap<FrameWords, Option<Arc<[Frame]>>>,
}

/// A Python frame's words in one process: (pid, first word, second word).
type FrameWords = (u32, u64, u64);

impl Runtime for Python {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn needs_tables_first(&self, pid: u32, mappings: &[Mapping]) -> bool {
        is_candidate(pid, mappings)
    }

    fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        self.walker.publish(pid, mappings)
    }

    fn forget(&mut self, pid: u32) {
        self.walker.forget(pid);
    }

    fn name(&mut self, pid: u32, words: &[u64]) -> Option<Arc<[Frame]>> {
        let key = (pid, words[0], words[1]);
        if let Some(named) = self.named.get(&key) {
            return named.clone();
        }
        let frame = self.walker.frame(pid, words[0], words[1]);
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
        self.named.insert(key, named.clone());
        named
    }
}
