//! The walk the kernel half will do, done in user space on a stopped thread: the test's
//! reference for it.

use nix::{
    sys::{
        ptrace,
        wait::{WaitPidFlag, waitpid},
    },
    unistd::Pid,
};
use profiler::runtimes::{
    hotspot::{BlobKind, CodeCache, JavaFrame, Layout, Namer, PcKind, Tier},
    shared::memory::{Memory, ProcessMemory},
};

/// How a walk ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// Returned into the call stub: every Java frame walked.
    CallStub,
    /// The PC left the code cache (native code: the kernel hands back to its tables).
    Native,
    /// The top PC was in a compiled frame's prologue: not walked (truncated).
    Prologue,
    /// Something did not check out (named in the string): truncated.
    Broken(String),
}

#[derive(Debug)]
pub struct Walk {
    pub frames: Vec<JavaFrame>,
    pub end: End,
    /// The top compiled frame was in its epilogue (already popped).
    pub epilogue: bool,
}

impl Walk {
    pub fn names(&self) -> Vec<&str> {
        self.frames
            .iter()
            .map(|f| f.method.rsplit('.').next().unwrap_or(""))
            .collect()
    }
}

/// Registers a walk starts from.
struct Regs {
    pc: u64,
    sp: u64,
    fp: u64,
    /// The interpreter keeps the bcp here while it runs (its frame slot is then stale).
    r13: u64,
}

/// Stops the thread `tid`, walks its Java frames, lets it run on.
pub fn stop_and_walk(
    tid: u32,
    mem: &ProcessMemory,
    layout: &Layout,
    cache: &CodeCache,
    namer: &mut Namer<'_, ProcessMemory>,
) -> Walk {
    let pid = Pid::from_raw(tid as i32);
    ptrace::seize(pid, ptrace::Options::empty()).expect("PTRACE_SEIZE");
    ptrace::interrupt(pid).expect("PTRACE_INTERRUPT");
    waitpid(pid, Some(WaitPidFlag::__WALL)).expect("waitpid");
    let walked = ptrace::getregs(pid).map(|r| {
        let regs = Regs {
            pc: r.rip,
            sp: r.rsp,
            fp: r.rbp,
            r13: r.r13,
        };
        walk(mem, layout, cache, namer, &regs)
    });
    ptrace::detach(pid, None).expect("PTRACE_DETACH");
    walked.expect("PTRACE_GETREGS")
}

/// The walk the kernel half will do, from the stopped registers:
/// - a PC outside the code cache is native (the end here; the kernel's tables go on);
/// - the PC's blob (segment map): the interpreter → Method* at fp-24, bcp in r13 (top) or at
///   fp-64, caller: pc [fp+8], fp [fp], sp the sender-sp slot [fp-8] (a c2i adapter may
///   have extended the caller's frame, so not fp+16);
/// - an nmethod → (nmethod, pc offset), caller: sp + frame size, return address just below
///   it, saved rbp below that; a return address at the deopt handler means the real PC is
///   at sp + orig_pc_offset;
/// - the call stub's return address ends it; other stubs step by their frame size or rbp.
fn walk(
    mem: &ProcessMemory,
    layout: &Layout,
    cache: &CodeCache,
    namer: &mut Namer<'_, ProcessMemory>,
    regs: &Regs,
) -> Walk {
    let mut frames = Vec::new();
    let mut notes = Notes::default();
    let end = match walk_into(mem, layout, cache, namer, regs, &mut frames, &mut notes) {
        Ok(end) => end,
        Err(e) => End::Broken(format!("{e} ({})", notes.at)),
    };
    Walk {
        frames,
        end,
        epilogue: notes.epilogue,
    }
}

/// What a walk noticed on the way.
#[derive(Default)]
struct Notes {
    /// The top compiled frame was in its epilogue.
    epilogue: bool,
    /// The frame being stepped (for a broken walk's message).
    at: String,
}

fn walk_into(
    mem: &ProcessMemory,
    layout: &Layout,
    cache: &CodeCache,
    namer: &mut Namer<'_, ProcessMemory>,
    regs: &Regs,
    frames: &mut Vec<JavaFrame>,
    notes: &mut Notes,
) -> Result<End, String> {
    let read = |at: u64| mem.read_u64(at).map_err(|e| e.to_string());
    let slot = |fp: u64, off: i8| read(fp.wrapping_add_signed(i64::from(off)));
    let i = &layout.interpreter;
    let (mut pc, mut sp, mut fp) = (regs.pc, regs.sp, regs.fp);
    for depth in 0..64 {
        let top = depth == 0;
        if !cache.contains(pc) {
            return Ok(End::Native);
        }
        if pc == cache.call_stub_return {
            // Stopped right there: no Java frame, the thread is on its native side.
            return Ok(if frames.is_empty() {
                End::Native
            } else {
                End::CallStub
            });
        }
        let blob = cache
            .blob_at(mem, layout, pc)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no blob at {pc:#x}"))?;
        notes.at = format!("frame {depth} in {}, fp {fp:#x}, sp {sp:#x}", blob.name);
        let compiled = match blob.kind {
            BlobKind::Nmethod {
                compile_id, level, ..
            } => Some((compile_id, Tier::of_level(level))),
            BlobKind::NativeNmethod { compile_id } => Some((compile_id, Tier::Native)),
            _ => None,
        };
        if blob.kind == BlobKind::Interpreter {
            let method = slot(fp, i.method)?;
            let cm = namer.const_method(method).map_err(|e| e.to_string())?;
            let code = cm + u64::from(layout.method.cm_size);
            let code_size = namer.method(method).map_err(|e| e.to_string())?.code_size;
            let bci_of = |bcp: u64| {
                i32::try_from(bcp.wrapping_sub(code) as i64)
                    .ok()
                    .filter(|&b| b >= 0 && (b as u32) < code_size)
            };
            // The running frame's bcp is in r13 (its slot is stale) except where the
            // interpreter uses r13 for something else: in its invoke and return paths,
            // where the slot holds the bcp it saved for the call.
            let saved = || slot(fp, i.bcp).ok().and_then(bci_of);
            let bci = if top {
                bci_of(regs.r13).or_else(saved)
            } else {
                saved()
            };
            let bci = bci.ok_or_else(|| format!("no valid bcp (top: {top})"))?;
            frames.push(namer.interpreted(method, bci).map_err(|e| e.to_string())?);
            sp = slot(fp, i.sender_sp)?;
            (pc, fp) = (read(fp + 8)?, read(fp)?);
        } else if let Some((compile_id, tier)) = compiled {
            if top && pc < blob.frame_complete {
                return Ok(End::Prologue);
            }
            let mut at = pc;
            if !top && Some(pc) == blob.deopt_handler {
                at = read(sp.wrapping_add_signed(blob.orig_pc_offset.unwrap_or(0)))?;
            }
            let kind = if top {
                PcKind::Stopped
            } else {
                PcKind::ReturnAddress
            };
            let offset = u32::try_from(at.wrapping_sub(blob.code_begin))
                .map_err(|_| format!("pc {at:#x} before its code"))?;
            let named = namer
                .compiled(blob.addr, compile_id, tier, offset, kind)
                .map_err(|e| e.to_string())?;
            frames.extend(named);
            let caller = sp + blob.frame_size;
            let ret = read(caller - 8)?;
            if cache.contains(ret) {
                (sp, pc, fp) = (caller, ret, read(caller - 16)?);
            } else if top && cache.contains(read(sp)?) {
                // Compiled Java code returns only into the code cache (native code calls
                // it through the call stub): a top frame whose frame-size step leaves it
                // was stopped in its epilogue, its frame popped, rbp restored, the return
                // address on top of the stack.
                notes.epilogue = true;
                (sp, pc) = (sp + 8, read(sp)?);
            } else {
                return Err(format!(
                    "compiled frame returns to {ret:#x}, outside the code cache"
                ));
            }
        } else if blob.frame_size > 0 {
            sp += blob.frame_size;
            (pc, fp) = (read(sp - 8)?, read(sp - 16)?);
        } else {
            sp = fp + 16;
            (pc, fp) = (read(fp + 8)?, read(fp)?);
        }
    }
    Err("more than 64 frames".into())
}

/// What the stops saw.
#[derive(Debug, Default)]
pub struct Tally {
    pub stops: u32,
    /// Walks that reached the call stub.
    pub complete: u32,
    /// Stops in native code (libjvm, libc): nothing for this walk to do.
    pub native_top: u32,
    pub prologue: u32,
    /// Complete walks ending in a Java method the VM called (not main): that method.
    pub nested: Vec<String>,
    /// Complete walks ending in main past its last debug point (see the library test).
    pub method_only: u32,
    /// Complete walks whose top compiled frame was in its epilogue.
    pub epilogue: u32,
    /// Walks that stopped on something that did not check out: how many, the first few.
    pub broken: u32,
    pub why: Vec<String>,
}

impl Tally {
    pub fn broken(&mut self, why: String) {
        self.broken += 1;
        if self.why.len() < 5 {
            self.why.push(why);
        }
    }
}
