//! V8 as a [`Runtime`]: the walker, its frames as stack frames, and its frame-pointer check
//! on copied stacks.

use std::sync::Arc;

use profiler_common::{runtimes::slots, v8::V8Proc};

use super::{JsFrame, V8Walker, walker::js_words};
use crate::{
    modules::Mapping,
    runtimes::{
        kernel::KernelMap,
        seam::{CopiedHook, Published, Runtime, Spec, StartCx, unnamed},
        shared::memory::Memory,
    },
    symbolize::{Frame, FrameKind},
};

pub static SPEC: Spec = Spec {
    name: "js",
    off_flag: "no-js",
    off_help: "Show no JavaScript frames: Node.js processes' stacks are native only (JIT \
               code as anonymous addresses). By default each V8 frame is named by its JS \
               function",
    label: "JavaScript",
    shows: "frames",
    kind: FrameKind::JavaScript,
    slot: slots::JS,
    map: KernelMap::V8,
    start,
};

fn start(_: &StartCx) -> Result<Box<dyn Runtime>, String> {
    Ok(Box::new(V8(V8Walker::default())))
}

struct V8(V8Walker);

impl Runtime for V8 {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        self.0.publish(pid, mappings)
    }

    fn forget(&mut self, pid: u32) {
        self.0.forget(pid);
    }

    /// Its JIT code flips between writable and executable pages: the kernel's walk goes
    /// through them by frame pointers, never copying the stack for them.
    fn walks_unmapped_code(&self, pid: u32) -> bool {
        self.0.entry(pid).is_some()
    }

    /// The names the walker caches are checked against the heap at each use (objects
    /// move), so nothing is cached here.
    fn name(&mut self, pid: u32, words: &[u64]) -> Option<Arc<[Frame]>> {
        // A frame the kernel found but user space could not read stays in the stack.
        Some(match self.0.frame(pid, words[0], words[1]) {
            Some(fs) => fs.iter().map(js_frame).collect(),
            None => unnamed(&SPEC),
        })
    }

    fn copied(&self, pid: u32) -> Option<Box<dyn CopiedHook>> {
        Some(Box::new(Copied(self.0.entry(pid)?)))
    }
}

/// A V8 process's JS frames found in stack copies as the kernel's walk finds them.
struct Copied(V8Proc);

impl CopiedHook for Copied {
    fn at_frame_pointer(
        &self,
        stack: &dyn Fn(u64) -> Option<u64>,
        heap: &dyn Memory,
        fp: u64,
        pc: u64,
        top: bool,
    ) -> Option<[u64; 2]> {
        js_words(&self.0, stack, heap, fp, pc, top)
    }

    fn jit(&self) -> bool {
        true
    }
}

/// A named JS frame as a stack frame.
fn js_frame(f: &JsFrame) -> Frame {
    Frame {
        function: Arc::from(f.function.as_str()),
        module: None,
        path: None,
        file: (!f.script.is_empty()).then(|| Arc::from(f.script.as_str())),
        line: f.line,
        kind: FrameKind::JavaScript,
        inlined: f.inlined,
        offset: None,
    }
}
