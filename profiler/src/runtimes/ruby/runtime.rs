//! CRuby as a [`Runtime`] on the seam: each process's `rb_vm_exec` range is a hook (its
//! native frames are replaced by the Ruby frames each call runs), its [`RubyProc`] the
//! kernel walker's state; the frames the walker writes named from the process's memory.

use std::{collections::HashMap, sync::Arc};

use profiler_common::{
    ruby::RubyProc,
    runtimes::{RtState, slots},
};

use super::{
    Detection, Names,
    detect::{detect_in, is_candidate},
};
use crate::{
    modules::Mapping,
    runtimes::{
        kernel::{Entry, KernelMap},
        seam::{Published, Runtime, Spec, StartCx, unnamed},
        shared::memory::ProcessMemory,
    },
    symbolize::{Frame, FrameKind},
};

pub static SPEC: Spec = Spec {
    name: "ruby",
    off_flag: "no-ruby",
    off_help: "Show no Ruby frames: CRuby processes' stacks are native only (the VM's C \
               frames). By default each rb_vm_exec call is replaced by the Ruby methods and \
               blocks it runs",
    label: "Ruby",
    shows: "frames",
    kind: FrameKind::Ruby,
    slot: slots::RUBY,
    map: KernelMap::Hooked(slots::RUBY),
    start,
};

/// Process `pid`'s executable, as `/proc/PID/exe` names it.
fn exe(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
}

/// The kernel half reads the task's thread pointer (the EC is a `__thread` variable).
fn start(cx: &StartCx) -> Result<Box<dyn Runtime>, String> {
    let fsbase = cx
        .task_fsbase()
        .map_err(|e| format!("the thread pointer's place in task_struct is not known ({e})"))?;
    Ok(Box::new(Ruby {
        fsbase,
        procs: HashMap::new(),
        waiting: Vec::new(),
    }))
}

struct Ruby {
    fsbase: u32,
    /// Each Ruby process's frame names.
    procs: HashMap<u32, Names>,
    /// Processes looked at before the dynamic linker wrote libruby's TLS module id.
    waiting: Vec<u32>,
}

impl Runtime for Ruby {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    /// Its frames come only through the kernel's walk of libruby (its `rb_vm_exec`
    /// frames), which needs libruby's table from the first sample.
    fn needs_tables_first(&self, pid: u32, mappings: &[Mapping]) -> bool {
        is_candidate(mappings, exe(pid).as_deref())
    }

    fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        self.waiting.retain(|&p| p != pid);
        // The mappings and executable read once, for the cheap check and the detection.
        let exe = exe(pid);
        if !is_candidate(mappings, exe.as_deref()) {
            self.procs.remove(&pid);
            return Published::Native(None);
        }
        match detect_in(pid, mappings, exe.as_deref()) {
            Ok(Detection::Found(ruby)) => {
                let state = RtState::of::<RubyProc>(&ruby.proc(self.fsbase));
                self.procs
                    .insert(pid, Names::new(ruby.layout, ruby.symbols));
                Published::Walk(Entry::Hooked {
                    slot: slots::RUBY,
                    ranges: vec![(ruby.vm_exec.start, ruby.vm_exec.end)],
                    state: Box::new(state),
                })
            }
            Ok(Detection::Waiting { .. }) => {
                self.waiting.push(pid);
                Published::Native(None)
            }
            Ok(Detection::Unsupported { path, why }) => {
                self.procs.remove(&pid);
                Published::Native(Some(format!("{path}: {why}")))
            }
            Ok(Detection::NotRuby) => Published::Native(None),
            Err(e) => Published::Native(Some(e.to_string())),
        }
    }

    fn waiting(&self, pid: u32) -> bool {
        self.waiting.contains(&pid)
    }

    fn waiting_pids(&self) -> Vec<u32> {
        self.waiting.clone()
    }

    fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
        self.waiting.retain(|&p| p != pid);
    }

    fn name(&mut self, pid: u32, words: &[u64]) -> Option<Arc<[Frame]>> {
        let Some(names) = self.procs.get_mut(&pid) else {
            return Some(unnamed(&SPEC));
        };
        // A frame the kernel found but user space could not read stays in the stack.
        Some(match names.frame(&ProcessMemory::new(pid), words) {
            Ok(f) => Arc::from([Frame {
                function: f.label,
                module: None,
                path: None,
                file: f.file,
                line: f.line,
                kind: FrameKind::Ruby,
                inlined: false,
                offset: None,
            }]),
            Err(_) => unnamed(&SPEC),
        })
    }
}
