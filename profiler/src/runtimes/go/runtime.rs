//! Go as a [`Runtime`] on the seam: no frames of its own, a [`GoProc`] per Go process for
//! the kernel, and the label sets its samples carry read from the process once each.

use std::collections::HashMap;

use profiler_common::{golabels::GoProc, runtimes::slots};

use super::{
    detect::{Detection, detect},
    labels,
    offsets::LabelsKind,
};
use crate::{
    modules::Mapping,
    profile::Labels,
    runtimes::{
        kernel::{Entry, KernelMap},
        seam::{Published, Runtime, Spec, StartCx},
        shared::memory::ProcessMemory,
    },
    symbolize::FrameKind,
};

pub static SPEC: Spec = Spec {
    name: "go",
    off_flag: "no-go-labels",
    off_help: "Read no goroutine labels: samples of Go processes carry no pprof labels. By \
               default each sample carries the running goroutine's labels (pprof.Do, \
               SetGoroutineLabels), as Go's own CPU profiles do",
    label: "Go",
    shows: "labels",
    kind: FrameKind::User,
    slot: slots::GO,
    map: KernelMap::Go,
    start,
};

/// Label sets kept per process before the oldest are dropped (a service that makes a set
/// per request would otherwise grow this without end).
const MAX_SETS: usize = 4096;

fn start(cx: &StartCx) -> Result<Box<dyn Runtime>, String> {
    let fsbase = cx
        .task_fsbase()
        .map_err(|e| format!("the thread pointer's place in task_struct is not known ({e})"))?;
    Ok(Box::new(Go {
        fsbase,
        by_file: HashMap::new(),
        procs: HashMap::new(),
    }))
}

struct Go {
    fsbase: u32,
    /// What each executable (device, inode) was found to be.
    by_file: HashMap<(u64, u64), FileKind>,
    /// Each Go process's label layout and the sets read so far, by their two words.
    procs: HashMap<u32, Proc>,
}

/// What an executable is: not Go (`None`), Go whose labels can be read (its entry, but
/// the thread pointer's place, and its labels' layout), or Go whose cannot (why).
type FileKind = Option<Result<(GoProc, LabelsKind), String>>;

struct Proc {
    kind: LabelsKind,
    sets: HashMap<[u64; 2], Labels>,
}

/// Process `pid`'s executable mapping: the one of the file `/proc/PID/exe` names.
fn exe_mapping(pid: u32, mappings: &[Mapping]) -> Option<&Mapping> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_str()?;
    mappings.iter().find(|m| &*m.name == exe)
}

impl Runtime for Go {
    fn spec(&self) -> &'static Spec {
        &SPEC
    }

    fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        let Some(exe) = exe_mapping(pid, mappings) else {
            self.procs.remove(&pid);
            return Published::Native(None);
        };
        let Some(file) = exe.inode() else {
            return Published::Native(None);
        };
        let mem = ProcessMemory::new(pid);
        let fsbase = self.fsbase;
        let found = self
            .by_file
            .entry(file)
            .or_insert_with(|| match detect(pid, exe, &mem) {
                Detection::NotGo => None,
                Detection::Unsupported(why) => Some(Err(why)),
                Detection::Found(f) => Some(Ok((
                    GoProc {
                        tls_offset: f.tls_offset,
                        task_fsbase: fsbase,
                        g_m: f.offsets.g_m,
                        m_curg: f.offsets.m_curg,
                        g_labels: f.offsets.g_labels,
                        _pad0: [0; 3],
                    },
                    f.offsets.kind,
                ))),
            });
        match found {
            None => {
                self.procs.remove(&pid);
                Published::Native(None)
            }
            Some(Err(why)) => Published::Native(Some(format!("{}: {why}", exe.name))),
            Some(Ok((entry, kind))) => {
                let (entry, kind) = (*entry, *kind);
                self.procs.entry(pid).or_insert_with(|| Proc {
                    kind,
                    sets: HashMap::new(),
                });
                Published::Walk(Entry::Go(Box::new(entry)))
            }
        }
    }

    fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    fn name(
        &mut self,
        _pid: u32,
        _words: &[u64],
    ) -> Option<std::sync::Arc<[crate::symbolize::Frame]>> {
        None
    }

    fn labels(&mut self, pid: u32, words: [u64; 2]) -> Option<Labels> {
        let proc = self.procs.get_mut(&pid)?;
        if let Some(set) = proc.sets.get(&words) {
            return Some(set.clone());
        }
        // A set that cannot be read (the goroutine's labels were replaced and freed before
        // the record was read) is no label, not an error in the stack.
        let read = labels::read(&ProcessMemory::new(pid), proc.kind, words[0], words[1]).ok()?;
        let set = Labels::new(read.pairs);
        if proc.sets.len() >= MAX_SETS {
            proc.sets.clear();
        }
        proc.sets.insert(words, set.clone());
        Some(set)
    }
}
