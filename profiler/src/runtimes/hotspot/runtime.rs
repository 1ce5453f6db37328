//! HotSpot as a [`Runtime`]: the walker, its frames and VM stubs as stack frames, and its
//! code-cache step on copied stacks.

use std::sync::Arc;

use profiler_common::{hotspot::HsProc, runtimes::slots};

use super::{JavaFrame, copied::java_step, walker::HotspotWalker};
use crate::{
    modules::Mapping,
    runtimes::{
        kernel::KernelMap,
        seam::{CopiedHook, CopiedStep, Published, RegsAt, Runtime, Spec, StartCx, unnamed},
        shared::memory::Memory,
    },
    symbolize::{Frame, FrameKind},
};

pub static SPEC: Spec = Spec {
    name: "java",
    off_flag: "no-java",
    off_help: "Show no Java frames: JVM processes' stacks are native only (JIT code and the \
               interpreter as anonymous addresses). By default each HotSpot frame is named \
               by its Java method, inlined methods as their own frames",
    label: "Java",
    shows: "frames",
    kind: FrameKind::Java,
    slot: slots::JAVA,
    map: KernelMap::Hotspot,
    start,
};

/// The module VM stubs are shown in (the JVM's code cache: no file).
pub const CODE_CACHE_MODULE: &str = "[code cache]";

fn start(_: &StartCx) -> Result<Box<dyn Runtime>, String> {
    Ok(Box::new(Hotspot(HotspotWalker::default())))
}

struct Hotspot(HotspotWalker);

impl Runtime for Hotspot {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        self.0.publish(pid, mappings)
    }

    fn waiting(&self, pid: u32) -> bool {
        self.0.waiting(pid)
    }

    fn waiting_pids(&self) -> Vec<u32> {
        self.0.waiting_pids().collect()
    }

    fn forget(&mut self, pid: u32) {
        self.0.forget(pid);
    }

    fn name(&mut self, pid: u32, words: &[u64]) -> Option<Arc<[Frame]>> {
        Some(match self.0.frame(pid, words[0], words[1]) {
            // Naming gives the innermost first; a physical frame's frames are outermost
            // first here, as native inlined ones.
            Some(fs) => fs
                .iter()
                .rev()
                .enumerate()
                .map(|(i, f)| java_frame(f, i > 0))
                .collect(),
            None => unnamed(&SPEC),
        })
    }

    /// In a JVM's code cache, a VM stub is named by the VM's name for it (JIT code with no
    /// table is otherwise an anonymous address).
    fn name_native(&mut self, pid: u32, pc: u64) -> Option<Arc<[Frame]>> {
        let name = self.0.stub(pid, pc)?;
        let mut frame = Frame::named(&name, FrameKind::User);
        frame.module = Some(Arc::from(CODE_CACHE_MODULE));
        Some(Arc::from([frame]))
    }

    fn copied(&self, pid: u32) -> Option<Box<dyn CopiedHook>> {
        Some(Box::new(Copied(self.0.entry(pid)?)))
    }
}

/// A JVM's Java frames found in stack copies as the kernel's walk finds them.
struct Copied(HsProc);

impl CopiedHook for Copied {
    fn step(
        &self,
        stack: &dyn Fn(u64) -> Option<u64>,
        heap: &dyn Memory,
        at: RegsAt,
    ) -> Option<CopiedStep> {
        java_step(&self.0, stack, heap, at)
    }
}

/// A named Java frame as a stack frame (`package.Class.method`, the class's source file;
/// `inlined` into the one before it).
fn java_frame(f: &JavaFrame, inlined: bool) -> Frame {
    Frame {
        function: Arc::from(f.method.as_str()),
        module: None,
        path: None,
        file: f.file.as_deref().map(Arc::from),
        line: f.line,
        kind: FrameKind::Java,
        inlined,
        offset: None,
    }
}
