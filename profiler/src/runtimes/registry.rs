//! The runtimes the profiler knows ([`RUNTIMES`], the one list that names them all) and
//! the ones a recording started ([`Runtimes`]), which the recording goes through for every
//! runtime matter.

use std::{collections::HashSet, sync::Arc};

use profiler_common::runtimes::{rt_len, rt_slot};

use super::{
    go, hotspot, python, ruby,
    seam::{CopiedHook, Published, Runtime, Spec, StartCx, unnamed},
    v8,
};
use crate::{
    bpf::{UnwindMapError, UnwindMaps},
    modules::Mapping,
    symbolize::Frame,
};

/// Every runtime, in the order they look at a process and `--help` lists them.
pub const RUNTIMES: &[&Spec] = &[
    &python::runtime::SPEC,
    &v8::runtime::SPEC,
    &hotspot::runtime::SPEC,
    &ruby::runtime::SPEC,
    &go::runtime::SPEC,
];

/// The runtime called `name` on the command line.
pub fn by_name(name: &str) -> Option<&'static Spec> {
    RUNTIMES.iter().copied().find(|s| s.name == name)
}

/// What the runtimes not in `off` show ("Python frames", "Go labels"), in registry order.
pub fn shown_by(off: &[String]) -> Vec<String> {
    RUNTIMES
        .iter()
        .filter(|s| !off.iter().any(|o| o == s.name))
        .map(|s| format!("{} {}", s.label, s.shows))
        .collect()
}

/// The runtimes a recording walks, shared by the native unwinder's loader (which publishes
/// each process to them) and the collector (which names the frames their kernel walkers
/// wrote), both on the reader's thread.
pub struct Runtimes {
    started: Vec<Box<dyn Runtime>>,
    /// Reasons already said, so each is said once.
    said: HashSet<String>,
    /// Lines for the user not yet taken.
    pending: Vec<String>,
}

impl Runtimes {
    /// Starts every runtime not named in `off`: the started ones (`None` when none is), and
    /// a line for each that could not start.
    pub fn start(off: &[String]) -> (Option<Self>, Vec<String>) {
        let cx = StartCx::default();
        let mut started = Vec::new();
        let mut lines = Vec::new();
        for spec in RUNTIMES.iter().filter(|s| !off.iter().any(|o| o == s.name)) {
            match (spec.start)(&cx) {
                Ok(runtime) => started.push(runtime),
                Err(why) => lines.push(format!(
                    "{} {} are not shown: {why}",
                    spec.label, spec.shows
                )),
            }
        }
        let runtimes = (!started.is_empty()).then(|| Self {
            started,
            said: HashSet::new(),
            pending: Vec::new(),
        });
        (runtimes, lines)
    }

    /// A process being published to the native unwinder (new, or its mappings changed):
    /// each runtime looks at it, and the kernel learns which to hand over to.
    pub fn publish(
        &mut self,
        pid: u32,
        mappings: &[Mapping],
        maps: &mut UnwindMaps,
    ) -> Result<(), UnwindMapError> {
        for i in 0..self.started.len() {
            let runtime = &mut self.started[i];
            let spec = runtime.spec();
            match runtime.publish(pid, mappings) {
                Published::Walk(entry) => entry.set(maps, pid)?,
                Published::Native(why) => {
                    self.say(why.map(|w| {
                        format!(
                            "{} {} not shown for process {pid}: {w}",
                            spec.label, spec.shows
                        )
                    }));
                    spec.map.clear(maps, pid)?;
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
    pub fn needs_tables_first(&self, pid: u32, mappings: &[Mapping]) -> bool {
        self.started
            .iter()
            .any(|r| r.needs_tables_first(pid, mappings))
    }

    /// Whether some runtime looked at process `pid` too early to read it (a starting JVM),
    /// so that it is published again even when its mappings are the same.
    pub fn waiting(&self, pid: u32) -> bool {
        self.started.iter().any(|r| r.waiting(pid))
    }

    /// The processes some runtime looked at too early to read them.
    pub fn waiting_pids(&self) -> Vec<u32> {
        self.started.iter().flat_map(|r| r.waiting_pids()).collect()
    }

    /// Whether some runtime's kernel walker goes through process `pid`'s code in no mapping
    /// (see [`Runtime::walks_unmapped_code`]).
    pub fn walks_unmapped_code(&self, pid: u32) -> bool {
        self.started.iter().any(|r| r.walks_unmapped_code(pid))
    }

    /// A process that exited.
    pub fn forget(&mut self, pid: u32) {
        for r in &mut self.started {
            r.forget(pid);
        }
    }

    /// Lines to say (each reason once).
    pub fn take_lines(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending)
    }

    /// A runtime's frame at the start of `words` (a process's user frames, innermost
    /// first): how many words it takes, and the frame (`None` for one the runtime does not
    /// show); `None` when the first word is a native address no runtime names.
    pub fn frame(&mut self, pid: u32, words: &[u64]) -> Option<(usize, Option<Arc<[Frame]>>)> {
        let &word = words.first()?;
        let slot = rt_slot(word);
        if slot == 0 {
            let frames = self
                .started
                .iter_mut()
                .find_map(|r| r.name_native(pid, word))?;
            return Some((1, Some(frames)));
        }
        // A frame cut by the end of the walk is not named.
        let words = words.get(..rt_len(word))?;
        let frames = match self.started.iter_mut().find(|r| r.spec().slot == slot) {
            Some(r) => r.name(pid, words),
            // No kernel walker writes frames of a runtime not started; shown, not dropped.
            None => RUNTIMES.iter().find(|s| s.slot == slot).map(|s| unnamed(s)),
        };
        Some((words.len(), frames))
    }

    /// The labels of a sample's label words (`profiler_common::golabels`).
    pub fn labels(&mut self, pid: u32, words: [u64; 2]) -> Option<crate::profile::Labels> {
        self.started.iter_mut().find_map(|r| r.labels(pid, words))
    }

    /// The kernel steps to do again on process `pid`'s copied stacks.
    pub fn copied(&self, pid: u32) -> Vec<Box<dyn CopiedHook>> {
        self.started.iter().filter_map(|r| r.copied(pid)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_tags_are_unique() {
        for (i, a) in RUNTIMES.iter().enumerate() {
            assert_ne!(a.slot, 0, "{}: slot 0 is a native address", a.name);
            // A bit per slot in the kernel's hook entry (`RtProc::slots`).
            assert!(a.slot < 32, "{}", a.name);
            assert_eq!(by_name(a.name).map(|s| s.label), Some(a.label));
            for b in &RUNTIMES[i + 1..] {
                assert_ne!(a.name, b.name);
                assert_ne!(a.off_flag, b.off_flag);
                assert_ne!(a.slot, b.slot);
                assert_ne!(a.map, b.map);
            }
        }
    }

    #[test]
    fn what_the_runtimes_left_on_show() {
        let frames = |l: &[&str]| l.iter().map(|l| format!("{l} frames")).collect::<Vec<_>>();
        let mut all = frames(&["Python", "JavaScript", "Java", "Ruby"]);
        all.push("Go labels".into());
        assert_eq!(shown_by(&[]), all);
        all.remove(1);
        assert_eq!(shown_by(&["js".into()]), all);
    }
}
