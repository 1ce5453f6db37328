//! The user-space half of the kernel's Python walker: for each process the native unwinder
//! publishes, whether it runs a CPython we can walk and the [`PyProc`] entry that tells the
//! kernel how; then, for each Python frame a record carries, its name, file and line, read
//! from the process (code objects cached, checked against the value the kernel read).

use std::{collections::HashMap, sync::Arc};

use profiler_common::python::{NONE, PyProc, TSS_INT, TSS_PY_TSS_T, py_frame_parts};

use super::{
    code::{CodeCache, PyFrame, line_at},
    detect::{Detection, Interpreter, detect, is_candidate},
};
use crate::{
    modules::Mapping,
    runtimes::{
        kernel::Entry,
        seam::Published,
        shared::{
            libc::{TsdLayout, tsd_layout},
            memory::ProcessMemory,
        },
    },
};

/// What a process runs, as far as the walker is concerned.
enum Proc {
    Python {
        interpreter: Box<Interpreter>,
        mem: ProcessMemory,
        codes: CodeCache,
    },
    /// Not CPython, or one we do not walk (said once).
    Native,
}

/// Python processes the kernel walker knows, and their code objects.
pub struct PythonWalker {
    /// `thread.fsbase` in this kernel's `task_struct`.
    task_fsbase: u32,
    procs: HashMap<u32, Proc>,
    /// glibc layouts, by the C library's path (every process of a host shares a few).
    tsd: HashMap<Arc<str>, TsdLayout>,
    /// Python frames named, and those that could not be (by why).
    pub named: u64,
    pub unnamed: u64,
}

impl PythonWalker {
    pub fn new(task_fsbase: u32) -> Self {
        Self {
            task_fsbase,
            procs: HashMap::new(),
            tsd: HashMap::new(),
            named: 0,
            unnamed: 0,
        }
    }

    /// Looks at a process the native unwinder is publishing (new, or its mappings changed).
    pub fn publish(&mut self, pid: u32, mappings: &[Mapping]) -> Published {
        if !is_candidate(pid, mappings) {
            self.procs.insert(pid, Proc::Native);
            return Published::Native(None);
        }
        if let Some(Proc::Python { interpreter, .. }) = self.procs.get(&pid)
            && mappings.iter().any(|m| m.name == interpreter.path)
        {
            let interpreter = interpreter.clone();
            return match self.entry(&interpreter) {
                Ok(e) => Published::Walk(Entry::Python(Box::new(e))),
                Err(why) => Published::Native(Some(why.to_string())),
            };
        }
        let interpreter = match detect(pid) {
            Ok(Detection::Found(i)) => i,
            Ok(Detection::NotPython) => {
                self.procs.insert(pid, Proc::Native);
                return Published::Native(None);
            }
            Ok(Detection::Unsupported { path, reason }) => {
                self.procs.insert(pid, Proc::Native);
                return Published::Native(Some(format!("{path}: {reason}")));
            }
            Err(e) => {
                self.procs.insert(pid, Proc::Native);
                return Published::Native(Some(e.to_string()));
            }
        };
        let entry = match self.entry(&interpreter) {
            Ok(e) => e,
            Err(why) => {
                self.procs.insert(pid, Proc::Native);
                return Published::Native(Some(why.to_string()));
            }
        };
        let codes = CodeCache::new(interpreter.offsets, interpreter.symbols.code_type);
        self.procs.insert(
            pid,
            Proc::Python {
                interpreter: Box::new(interpreter),
                mem: ProcessMemory::new(pid),
                codes,
            },
        );
        Published::Walk(Entry::Python(Box::new(entry)))
    }

    /// The kernel's entry for an interpreter.
    fn entry(&mut self, i: &Interpreter) -> Result<PyProc, EntryError> {
        let o = &i.offsets;
        let (tss_key_addr, tss_kind) = match (i.symbols.runtime, i.symbols.tls_key) {
            // The Py_tss_t: `_is_initialized` (an int), then the key.
            (Some(runtime), _) if o.runtime_tss_key != NONE => {
                (runtime + u64::from(o.runtime_tss_key), TSS_PY_TSS_T)
            }
            (_, Some(key)) => (key, TSS_INT),
            _ => return Err(EntryError::NoKey(i.path.to_string())),
        };
        let maps = crate::modules::exec_mappings(i.pid)
            .map_err(|source| EntryError::Maps { pid: i.pid, source })?;
        let libc = maps
            .iter()
            .find(|m| m.name.rsplit('/').next() == Some("libc.so.6"))
            .map(|m| m.name.clone())
            .ok_or(EntryError::NoGlibc(i.pid))?;
        let tsd = match self.tsd.get(&libc) {
            Some(t) => *t,
            None => {
                let t = tsd_layout(i.pid)?;
                self.tsd.insert(libc, t);
                t
            }
        };
        let cold = i.symbols.eval_cold.clone().unwrap_or(0..0);
        Ok(PyProc {
            eval_start: i.symbols.eval.start,
            eval_end: i.symbols.eval.end,
            cold_start: cold.start,
            cold_end: cold.end,
            tss_key_addr,
            task_fsbase: self.task_fsbase,
            tsd_first_block: tsd.first_block,
            tsd_first_block_keys: tsd.first_block_keys,
            tss_kind,
            _pad: [0; 7],
            offsets: i.offsets,
        })
    }

    /// Forgets a process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Names one Python frame of process `pid` (its two words as the kernel wrote them).
    /// `None` for a frame the interpreter does not show either (3.11+: a frame still
    /// setting up, before its first traceable instruction); an unreadable frame is named
    /// `[python: why]`, never dropped.
    pub fn frame(&mut self, pid: u32, word: u64, data: u64) -> Option<PyFrame> {
        let (code, check, offset) = py_frame_parts(word, data);
        let Some(Proc::Python {
            interpreter,
            mem,
            codes,
        }) = self.procs.get_mut(&pid)
        else {
            self.unnamed += 1;
            return Some(unreadable("not a known Python process"));
        };
        let check = (check != 0).then_some(u64::from(check));
        match codes.get(mem, code, check) {
            Ok(info) => {
                let offset = i64::from(offset);
                if interpreter.offsets.code_firsttraceable != NONE
                    && offset < 2 * i64::from(info.firsttraceable)
                {
                    return None;
                }
                self.named += 1;
                Some(PyFrame {
                    name: info.name.clone(),
                    filename: info.filename.clone(),
                    line: line_at(&interpreter.offsets, &info, offset),
                })
            }
            Err(e) => {
                self.unnamed += 1;
                Some(unreadable(&e.to_string()))
            }
        }
    }
}

/// Why a CPython process gets no walker entry.
#[derive(Debug, thiserror::Error)]
enum EntryError {
    #[error("{0}: no thread-state key symbol")]
    NoKey(String),
    #[error("reading /proc/{pid}/maps: {source}")]
    Maps {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("process {0}: no glibc (libc.so.6), which the thread-state lookup needs")]
    NoGlibc(u32),
    #[error(transparent)]
    Tsd(#[from] crate::runtimes::shared::libc::TsdError),
}

/// A Python frame whose code object could not be read.
fn unreadable(why: &str) -> PyFrame {
    PyFrame {
        name: Arc::from(format!("[python: {why}]")),
        filename: Arc::from(""),
        line: None,
    }
}
