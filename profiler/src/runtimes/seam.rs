//! What a runtime is to the rest of the profiler: a [`Spec`] in the registry and, once
//! started for a recording, a [`Runtime`] the recording shows each process to, asks to name
//! the frames its kernel walker wrote, and tells of exits. Nothing outside `runtimes/` names
//! a runtime; the registry (`registry.rs`) is the one list of them.

use std::{cell::OnceCell, sync::Arc};

use crate::{
    modules::Mapping,
    runtimes::{
        kernel::{Entry, KernelMap},
        shared::memory::Memory,
    },
    symbolize::{Frame, FrameKind},
};

/// A runtime the profiler knows, whether a recording starts it or not.
pub struct Spec {
    /// Its name on the command line: `--no-runtime NAME`.
    pub name: &'static str,
    /// Its own flag saying the same (`--no-python`), kept from before `--no-runtime`.
    pub off_flag: &'static str,
    /// That flag's help.
    pub off_help: &'static str,
    /// How users call its frames: "{label} {shows} are not shown".
    pub label: &'static str,
    /// What it adds to samples: "frames" (its own frames), or "labels" (Go's goroutine
    /// labels, on native frames).
    pub shows: &'static str,
    /// The kind of the frames it names.
    pub kind: FrameKind,
    /// Its slot (`profiler_common::runtimes::slots`): its kernel walker's frames carry it
    /// in their first word.
    pub slot: u8,
    /// The kernel map its entries go to.
    pub map: KernelMap,
    /// Starts it for one recording, or says why it cannot be (one line).
    pub start: fn(&StartCx) -> Result<Box<dyn Runtime>, String>,
}

/// What runtimes may need to start, read from the kernel once and only if one asks.
#[derive(Default)]
pub struct StartCx {
    task_fsbase: OnceCell<Result<u32, String>>,
}

impl StartCx {
    /// `thread.fsbase` in this kernel's `task_struct` (from its BTF): where a kernel walker
    /// finds a task's thread pointer.
    pub fn task_fsbase(&self) -> Result<u32, String> {
        self.task_fsbase
            .get_or_init(|| crate::bpf::btf::task_fsbase_offset().map_err(|e| e.to_string()))
            .clone()
    }
}

/// A runtime started for a recording: the processes it found and how to name their frames.
pub trait Runtime: Send {
    fn spec(&self) -> &'static Spec;

    /// Whether this process's native tables must be built before it is published, big
    /// modules too (cheap: mapping names only): a runtime whose frames come only through the
    /// kernel's walk of a native module (CPython's eval loop) needs that module's tables.
    fn needs_tables_first(&self, _pid: u32, _mappings: &[Mapping]) -> bool {
        false
    }

    /// Looks at a process being published (new, or its mappings changed): what its kernel
    /// walker needs, or why there is nothing to walk.
    fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published;

    /// Whether it looked at process `pid` too early to read it (a starting JVM), so that it
    /// is published again even when its mappings are the same.
    fn waiting(&self, _pid: u32) -> bool {
        false
    }

    /// The processes it looked at too early.
    fn waiting_pids(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Whether its kernel walker goes through process `pid`'s code in no mapping by frame
    /// pointers (a JIT that maps and flips code pages without end: V8), so that new
    /// anonymous code there needs no new publication.
    fn walks_unmapped_code(&self, _pid: u32) -> bool {
        false
    }

    /// A process that exited.
    fn forget(&mut self, pid: u32);

    /// Names the frame whose words (as many as the first says,
    /// `profiler_common::runtimes::rt_len`, the first with [`Spec::slot`]) its kernel walker wrote in process `pid`: `None` for a frame the
    /// runtime does not show either. A frame that cannot be read is named as such, never
    /// dropped.
    fn name(&mut self, pid: u32, words: &[u64]) -> Option<Arc<[Frame]>>;

    /// The labels of the label words its kernel half wrote for a sample of process `pid`
    /// (`profiler_common::golabels`); `None` when they are not its own.
    fn labels(&mut self, _pid: u32, _words: [u64; 2]) -> Option<crate::profile::Labels> {
        None
    }

    /// Names a native address of process `pid` that is its own (HotSpot's stubs in the code
    /// cache); `None` for any other.
    fn name_native(&mut self, _pid: u32, _pc: u64) -> Option<Arc<[Frame]>> {
        None
    }

    /// Its kernel step, to do again in user space on the stack copies of process `pid`.
    fn copied(&self, _pid: u32) -> Option<Box<dyn CopiedHook>> {
        None
    }
}

/// What [`Runtime::publish`] found in a process.
pub enum Published {
    /// Give the kernel this entry.
    Walk(Entry),
    /// Nothing to walk: no entry (and why, when it is this runtime at all; said once).
    Native(Option<String>),
}

/// A runtime's kernel step, done in user space on a copied stack (a process's first
/// moments, before it had unwind tables) by the same rules: `stack(addr)` reads a word of
/// the copy, `heap` the live process.
pub trait CopiedHook {
    /// Before a frame is left by frame pointer: the two words of the runtime's frame at
    /// `fp` (`top`: `pc` is the stopped instruction), if it is one (V8's JS frames).
    fn at_frame_pointer(
        &self,
        _stack: &dyn Fn(u64) -> Option<u64>,
        _heap: &dyn Memory,
        _fp: u64,
        _pc: u64,
        _top: bool,
    ) -> Option<[u64; 2]> {
        None
    }

    /// Before a frame's mapping is looked up: the step of a frame only the runtime can
    /// step (HotSpot's code cache); `None` outside its code.
    fn step(
        &self,
        _stack: &dyn Fn(u64) -> Option<u64>,
        _heap: &dyn Memory,
        _at: RegsAt,
    ) -> Option<CopiedStep> {
        None
    }

    /// The process runs a JIT whose code may be in no mapping the tables list (V8 flips
    /// its code pages between writable and executable): a leaf in none is walked on by
    /// frame pointer.
    fn jit(&self) -> bool {
        false
    }
}

/// Registers at a frame of a copied stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegsAt {
    pub pc: u64,
    pub sp: u64,
    pub bp: u64,
    /// `pc` is the stopped instruction (not a return address).
    pub top: bool,
}

/// What [`CopiedHook::step`] did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopiedStep {
    /// The frame's two words (a runtime frame; `None`: one it does not show, a stub) and
    /// its caller's registers.
    Next {
        words: Option<[u64; 2]>,
        pc: u64,
        sp: u64,
        bp: u64,
    },
    /// Leave this frame by frame pointer (HotSpot's call stub, a stub that keeps rbp).
    FramePointer,
    /// The frame could not be walked: the walk ends here, partial.
    Stop,
}

/// A frame shown as `[unnamed {label}]`: the kernel found it, user space could not read it.
pub fn unnamed(spec: &Spec) -> Arc<[Frame]> {
    Arc::from([Frame::named(
        &format!("[unnamed {}]", spec.label),
        spec.kind,
    )])
}
