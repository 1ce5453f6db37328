//! Runtimes whose own frames a stack shows beside the native ones (interpreters, later JITs).
//!
//! A runtime is a plug-in with two halves: in user space it detects itself in a process
//! (maps, version, symbols), hands the kernel what its walker needs (offsets, address ranges)
//! and turns the walker's raw frames into names, files and lines; in the kernel it walks its
//! own frame chain when the native unwinder reaches a PC inside its code. This module holds
//! the user-space halves; Python is the first.

pub mod hotspot;
pub mod python;
pub mod shared;
pub mod v8;

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
};

use profiler_common::{
    hotspot::HS_FRAME,
    python::PY_FRAME,
    v8::{RUNTIME_FRAME_MASK, V8_FRAME},
};

use crate::{
    bpf::{UnwindMapError, UnwindMaps},
    modules::Mapping,
    symbolize::{Frame, FrameKind},
};

/// The runtimes a recording walks, shared by the native unwinder's loader (which publishes
/// each process to them) and the collector (which names the frames their kernel walkers
/// wrote), both on the reader's thread.
pub type SharedRuntimes = Arc<Mutex<Runtimes>>;

/// Every runtime a recording walks: CPython, V8 and HotSpot.
pub struct Runtimes {
    python: Option<python::PythonWalker>,
    v8: Option<v8::V8Walker>,
    hotspot: Option<hotspot::walker::HotspotWalker>,
    /// Reasons already said, so each is said once.
    said: HashSet<String>,
    /// Lines for the user not yet taken.
    pending: Vec<String>,
    /// Python frames named, by (pid, words): a code object's check value is in its words, so
    /// an entry never outlives the object it names. (V8 frames are cached by their walker,
    /// which checks each entry against the heap: objects move.)
    named: HashMap<RuntimeWords, Option<Arc<[Frame]>>>,
}

/// A runtime frame's words in one process: (pid, first word, second word).
type RuntimeWords = (u32, u64, u64);

/// The module VM stubs are shown in (the JVM's code cache: no file).
pub const CODE_CACHE_MODULE: &str = "[code cache]";

/// Entries of [`Runtimes::named`] kept before it is cleared.
const MAX_NAMED: usize = 1 << 20;

impl Runtimes {
    /// With the runtimes asked for: Python's kernel half reads the task's thread pointer at
    /// `task_fsbase` (from this kernel's BTF; `None`: no Python frames), V8's and
    /// HotSpot's need nothing.
    pub fn new(task_fsbase: Option<u32>, v8: bool, java: bool) -> Self {
        Self {
            python: task_fsbase.map(python::PythonWalker::new),
            v8: v8.then(v8::V8Walker::default),
            hotspot: java.then(hotspot::walker::HotspotWalker::default),
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
        if let Some(py) = self.python.as_mut() {
            match py.publish(pid, mappings) {
                python::Published::Walk(entry) => maps.set_python(pid, Some(&entry))?,
                python::Published::Native(why) => {
                    self.say(
                        why.map(|w| format!("Python frames not shown for process {pid}: {w}")),
                    );
                    maps.set_python(pid, None)?;
                }
            }
        }
        if let Some(js) = self.v8.as_mut() {
            match js.publish(pid, mappings) {
                v8::walker::Published::Walk(entry) => maps.set_v8(pid, Some(&entry))?,
                v8::walker::Published::Native(why) => {
                    self.say(
                        why.map(|w| format!("JavaScript frames not shown for process {pid}: {w}")),
                    );
                    maps.set_v8(pid, None)?;
                }
            }
        }
        if let Some(java) = self.hotspot.as_mut() {
            match java.publish(pid, mappings) {
                hotspot::walker::Published::Walk(entry) => maps.set_hotspot(pid, Some(&entry))?,
                hotspot::walker::Published::Native(why) => {
                    self.say(why.map(|w| format!("Java frames not shown for process {pid}: {w}")));
                    maps.set_hotspot(pid, None)?;
                }
            }
        }
        Ok(())
    }

    /// Queues a line for the user, unless it was said.
    fn say(&mut self, line: Option<String>) {
        if let Some(line) = line
            && self.said.insert(line.clone())
        {
            self.pending.push(line);
        }
    }

    /// Whether this process's native tables must be built at once, big modules too (cheap:
    /// its mappings' names): CPython's frames come only through the kernel's walk, which
    /// needs the eval loop's module (libpython) to reach them. JVMs and node are not held
    /// for theirs (libjvm's and node's CFI, 1.5 and 2.7 MiB, took 60 to 160 ms on the
    /// reader): published at once, their Java and JS frames are walked in the kernel from
    /// the first moments, a stack that reaches a module still being built is copied there
    /// and finished when it is (JS frames are found in copies too), and the reader goes on
    /// draining the ring meanwhile (a JVM started under `record` had 30 to 110 ms of its
    /// first Java unnamed; node's first waits under --off-cpu filled the ring).
    pub fn walks(&self, pid: u32, mappings: &[Mapping]) -> bool {
        self.python.is_some() && python::detect::is_candidate(pid, mappings)
    }

    /// Whether some runtime looked at process `pid` too early to read it (a starting JVM),
    /// so that it is published again even when its mappings are the same.
    pub fn waiting(&self, pid: u32) -> bool {
        self.hotspot.as_ref().is_some_and(|h| h.waiting(pid))
    }

    /// The processes some runtime looked at too early to read them.
    pub fn waiting_pids(&self) -> Vec<u32> {
        self.hotspot
            .as_ref()
            .map(|h| h.waiting_pids().collect())
            .unwrap_or_default()
    }

    /// A process that exited.
    pub fn forget(&mut self, pid: u32) {
        if let Some(py) = self.python.as_mut() {
            py.forget(pid);
        }
        if let Some(js) = self.v8.as_mut() {
            js.forget(pid);
        }
        if let Some(java) = self.hotspot.as_mut() {
            java.forget(pid);
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

    /// The kernel walker's entry for V8 process `pid`, if it is one.
    pub fn v8_entry(&self, pid: u32) -> Option<profiler_common::v8::V8Proc> {
        self.v8.as_ref()?.entry(pid)
    }

    /// The HotSpot walker's kernel entry for `pid` (a JVM whose code cache it reads).
    pub fn hotspot_entry(&self, pid: u32) -> Option<profiler_common::hotspot::HsProc> {
        self.hotspot.as_ref()?.entry(pid)
    }

    /// A runtime's frame at the start of `words` (a process's user frames, innermost
    /// first): how many words it takes, and the frame (`None` for one the runtime does not
    /// show); `None` when the first word is a native address.
    pub fn frame(&mut self, pid: u32, words: &[u64]) -> Option<(usize, Option<Arc<[Frame]>>)> {
        let (&word, &data) = (words.first()?, words.get(1)?);
        match word & RUNTIME_FRAME_MASK {
            PY_FRAME => Some((2, self.python_frame(pid, word, data))),
            V8_FRAME => {
                let frame = self.v8.as_mut().and_then(|v| v.frame(pid, word, data));
                // A frame the kernel found but user space could not read stays in the stack.
                let frames = match frame {
                    Some(fs) => fs
                        .iter()
                        .enumerate()
                        .map(|(i, f)| js_frame(f, i > 0))
                        .collect::<Arc<[Frame]>>(),
                    None => {
                        Arc::from([Frame::named("[unnamed JavaScript]", FrameKind::JavaScript)])
                    }
                };
                Some((2, Some(frames)))
            }
            HS_FRAME => {
                let frame = self.hotspot.as_mut().and_then(|h| h.frame(pid, word, data));
                let frames = match frame {
                    // Naming gives the innermost first; a physical frame's frames are
                    // outermost first here, as native inlined ones.
                    Some(fs) => fs
                        .iter()
                        .rev()
                        .enumerate()
                        .map(|(i, f)| java_frame(f, i > 0))
                        .collect::<Arc<[Frame]>>(),
                    None => Arc::from([Frame::named("[unnamed Java]", FrameKind::Java)]),
                };
                Some((2, Some(frames)))
            }
            // A native address: in a JVM's code cache, a VM stub is named by the VM's name
            // for it (JIT code with no table is otherwise an anonymous address).
            _ => {
                let name = self.hotspot.as_mut()?.stub(pid, word)?;
                let mut frame = Frame::named(&name, FrameKind::User);
                frame.module = Some(Arc::from(CODE_CACHE_MODULE));
                Some((1, Some(Arc::from([frame]))))
            }
        }
    }

    fn python_frame(&mut self, pid: u32, word: u64, data: u64) -> Option<Arc<[Frame]>> {
        if let Some(named) = self.named.get(&(pid, word, data)) {
            return named.clone();
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
        named
    }
}

/// A named JS frame as a stack frame (`inlined` into the one before it).
fn js_frame(f: &v8::JsFrame, inlined: bool) -> Frame {
    Frame {
        function: Arc::from(f.function.as_str()),
        module: None,
        path: None,
        file: (!f.script.is_empty()).then(|| Arc::from(f.script.as_str())),
        line: f.line,
        kind: FrameKind::JavaScript,
        inlined,
        offset: None,
    }
}

/// A named Java frame as a stack frame (`package.Class.method`, the class's source file;
/// `inlined` into the one before it).
fn java_frame(f: &hotspot::JavaFrame, inlined: bool) -> Frame {
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
