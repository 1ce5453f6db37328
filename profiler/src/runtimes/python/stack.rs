//! A user-space stack reader, py-spy style: for each thread of a CPython process, its Python
//! frames read with `process_vm_readv`. It is the reference the kernel walker is checked
//! against (same offsets, same check values, same line decoding), and what tests use.

use profiler_common::python::{
    FRAME_OBJECT, NONE, OWNED_BY_CSTACK, OWNED_BY_GENERATOR, PythonOffsets,
};

use super::{
    code::{CodeCache, PyFrame, byte_offset},
    detect::{DetectError, Detection, Interpreter, detect},
    version::Unsupported,
};
use crate::runtimes::shared::memory::{Memory, ProcessMemory, ReadError};

/// Most interpreters, threads per interpreter and frames per thread followed: a cycle in
/// memory being rewritten under us ends there instead of looping.
const MAX_INTERPRETERS: usize = 64;
const MAX_THREADS: usize = 4096;
const MAX_FRAMES: usize = 16384;

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(transparent)]
    Detect(#[from] DetectError),
    #[error("process {0}: no Python interpreter in its maps")]
    NotPython(u32),
    #[error("{path}: {reason}")]
    Unsupported { path: String, reason: Unsupported },
}

/// One thread's Python stack, innermost frame first.
#[derive(Debug)]
pub struct ThreadStack {
    /// Address of the thread's `PyThreadState`.
    pub tstate: u64,
    /// `PyThreadState.thread_id`: the `pthread_t` (`threading.get_ident()`).
    pub thread_id: u64,
    /// The kernel's thread id (3.11+).
    pub native_thread_id: Option<u32>,
    /// Each frame, or why it could not be read (kept in place, never dropped).
    pub frames: Vec<Result<PyFrame, ReadError>>,
}

/// A CPython process being read.
pub struct PythonProcess {
    pub interpreter: Interpreter,
    mem: ProcessMemory,
    codes: CodeCache,
}

impl PythonProcess {
    /// Finds CPython in `pid` ([`detect`] has checked the table against the process's own
    /// `_Py_DebugOffsets` on 3.13+).
    pub fn attach(pid: u32) -> Result<PythonProcess, AttachError> {
        let interpreter = match detect(pid)? {
            Detection::Found(i) => i,
            Detection::NotPython => return Err(AttachError::NotPython(pid)),
            Detection::Unsupported { path, reason } => {
                return Err(AttachError::Unsupported { path, reason });
            }
        };
        let mem = ProcessMemory::new(pid);
        let codes = CodeCache::new(interpreter.offsets, interpreter.symbols.code_type);
        Ok(PythonProcess {
            interpreter,
            mem,
            codes,
        })
    }

    /// The `pthread_key_t` under which each thread keeps its `PyThreadState` (the
    /// "autoTSSkey"): what a kernel walker emulating `pthread_getspecific` needs to find the
    /// current thread's state without a TLS model of libpython. 3.7+: the `Py_tss_t` in
    /// `_PyRuntime` (initialised flag, then the key); 3.6: the `int autoTLSkey`.
    pub fn tss_key(&self) -> Result<u32, ReadError> {
        let o = &self.interpreter.offsets;
        match (
            self.interpreter.symbols.runtime,
            self.interpreter.symbols.tls_key,
        ) {
            (Some(runtime), _) if o.runtime_tss_key != NONE => {
                let at = runtime + u64::from(o.runtime_tss_key);
                let word = self.mem.read_u64(at)?;
                if word as u32 == 0 {
                    return Err(ReadError::invalid("Py_tss_t", at, "not initialised"));
                }
                Ok((word >> 32) as u32)
            }
            (_, Some(key)) => {
                let value = self.mem.read_u64(key)? as u32 as i32;
                u32::try_from(value)
                    .map_err(|_| ReadError::invalid("autoTLSkey", key, format!("{value}")))
            }
            _ => Err(ReadError::invalid("TSS key", 0, "no symbol for it")),
        }
    }

    /// The process's memory (for checks beside the walk).
    pub fn memory(&self) -> &ProcessMemory {
        &self.mem
    }

    /// Code objects read so far.
    pub fn cached_codes(&self) -> usize {
        self.codes.len()
    }

    /// Every thread's stack, of every interpreter.
    pub fn stacks(&mut self) -> Result<Vec<ThreadStack>, ReadError> {
        let o = self.interpreter.offsets;
        let head = match (
            self.interpreter.symbols.runtime,
            self.interpreter.symbols.interp_head,
        ) {
            (Some(runtime), _) if o.runtime_interpreters_head != NONE => {
                runtime + u64::from(o.runtime_interpreters_head)
            }
            (_, Some(head)) => head,
            _ => return Err(ReadError::invalid("interpreters", 0, "no head symbol")),
        };
        let mut out = Vec::new();
        let mut interp = self.mem.read_u64(head)?;
        for _ in 0..MAX_INTERPRETERS {
            if interp == 0 {
                break;
            }
            let mut tstate = self
                .mem
                .read_u64(interp + u64::from(o.interp_threads_head))?;
            for _ in 0..MAX_THREADS {
                if tstate == 0 {
                    break;
                }
                out.push(self.thread(tstate)?);
                tstate = self.mem.read_u64(tstate + u64::from(o.tstate_next))?;
            }
            interp = self.mem.read_u64(interp + u64::from(o.interp_next))?;
        }
        Ok(out)
    }

    fn thread(&mut self, tstate: u64) -> Result<ThreadStack, ReadError> {
        let o = self.interpreter.offsets;
        let thread_id = self.mem.read_u64(tstate + u64::from(o.tstate_thread_id))?;
        let native_thread_id = if o.tstate_native_thread_id == NONE {
            None
        } else {
            Some(
                self.mem
                    .read_u64(tstate + u64::from(o.tstate_native_thread_id))?
                    as u32,
            )
        };
        let mut frame = self.mem.read_u64(tstate + u64::from(o.tstate_frame))?;
        if o.cframe_current_frame != NONE && frame != 0 {
            frame = self
                .mem
                .read_u64(frame + u64::from(o.cframe_current_frame))?;
        }
        let mut frames = Vec::new();
        for _ in 0..MAX_FRAMES {
            if frame == 0 {
                break;
            }
            let (back, read) = if o.frame_kind == FRAME_OBJECT {
                self.frame_object(&o, frame)?
            } else {
                self.interpreter_frame(&o, frame)?
            };
            frames.extend(read);
            frame = back;
        }
        Ok(ThreadStack {
            tstate,
            thread_id,
            native_thread_id,
            frames,
        })
    }

    /// A `PyFrameObject` (≤3.10): its code, `f_lasti` and `f_back`.
    fn frame_object(
        &mut self,
        o: &PythonOffsets,
        frame: u64,
    ) -> Result<(u64, Option<Result<PyFrame, ReadError>>), ReadError> {
        let back = self.mem.read_u64(frame + u64::from(o.frame_back))?;
        let code = self.mem.read_u64(frame + u64::from(o.frame_code))?;
        let lasti = self.mem.read_u64(frame + u64::from(o.frame_instr))? & 0xffff_ffff;
        Ok((back, Some(self.codes.frame(&self.mem, code, lasti, None))))
    }

    /// A `_PyInterpreterFrame` (3.11+). Frames the C stack owns (the shim an eval call
    /// pushes, 3.12+) and incomplete ones (still before their first traceable instruction)
    /// are skipped, as the interpreter's own tracebacks skip them.
    fn interpreter_frame(
        &mut self,
        o: &PythonOffsets,
        frame: u64,
    ) -> Result<(u64, Option<Result<PyFrame, ReadError>>), ReadError> {
        let back = self.mem.read_u64(frame + u64::from(o.frame_back))?;
        let code = self.mem.read_u64(frame + u64::from(o.frame_code))?;
        let instr = self.mem.read_u64(frame + u64::from(o.frame_instr))?;
        let mut owner = [0u8; 1];
        self.mem
            .read(frame + u64::from(o.frame_owner), &mut owner)?;
        if self.interpreter.version.minor >= 12 && owner[0] == OWNED_BY_CSTACK {
            return Ok((back, None));
        }
        let info = match self.codes.get(&self.mem, code, None) {
            Ok(info) => info,
            Err(e) => return Ok((back, Some(Err(e)))),
        };
        let offset = byte_offset(o, code, instr);
        if owner[0] != OWNED_BY_GENERATOR && offset < 2 * i64::from(info.firsttraceable) {
            return Ok((back, None));
        }
        Ok((
            back,
            Some(self.codes.frame(&self.mem, code, instr, Some(info.check))),
        ))
    }
}
