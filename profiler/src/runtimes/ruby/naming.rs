//! Ruby frames named from a process's memory: the three words the kernel walker writes
//! (`profiler_common::ruby::ruby_frame`) become a label composed as
//! `rb_profile_frame_full_label` does (`Foo#bar`, `block in Foo#bar`, `Foo.baz`, `<main>`,
//! `Array#each`), the iseq's path and the line of its pc.
//!
//! Left: class paths in 3.2 (object shapes), and up to 3.1 without the VM's symbol table,
//! so labels there are Ruby's plain ones (`bar`, `block in bar`, `each`); a C method's name
//! without the symbol table (neither exported nor found in `rb_id2str`'s code) is a
//! placeholder; `#<Class:...>` singletons of non-class objects show the method alone.

use std::{collections::HashMap, sync::Arc};

use profiler_common::ruby::{FRAME_CFUNC, FRAME_ISEQ, ruby_frame_kind, ruby_frame_object};

use super::{
    classes::ClassPaths,
    layout::{ISEQ_TYPE_METHOD, Layout},
    lines::{InsnsInfo, line_at},
    objects::{id_name, is_object, read_path, read_string},
};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// A C method's name when the VM's symbol table is not known.
pub const UNKNOWN_C_METHOD: &str = "[C method]";

/// Entries of [`Names::frames`] kept before it is cleared.
const MAX_FRAMES: usize = 1 << 18;
/// Most `local_iseq` links followed (a block's is its method's directly).
const MAX_LOCAL_HOPS: usize = 4;

/// One Ruby frame as a person reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RubyFrame {
    pub label: Arc<str>,
    /// The iseq's path (`None` for a C method).
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum NameError {
    #[error("not a Ruby frame of 3 words")]
    Words,
    #[error("frame kind {0} is not one we write")]
    Kind(u8),
    #[error("pc {pc:#x} is outside iseq {iseq:#x}'s instructions (moved or freed)")]
    Stale { iseq: u64, pc: u64 },
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// What a frame needs of an iseq, read once per iseq address and instruction buffer.
#[derive(Clone, Debug)]
struct Iseq {
    encoded: u64,
    size: u64,
    label: Arc<str>,
    base_label: Arc<str>,
    path: Option<Arc<str>>,
    first_lineno: i32,
    insns: InsnsInfo,
    /// The method's name when this iseq is (in) a method: the method iseq's `base_label`.
    method_name: Option<Arc<str>>,
}

/// One process's frame names.
pub struct Names {
    layout: Layout,
    /// `ruby_global_symbols` (or 2.6's `global_symbols`), when found.
    symbols: Option<u64>,
    /// By the frame's three words: an iseq frame is checked (its pc inside the iseq's
    /// instructions) when first read, so an iseq moved by compaction and another at its old
    /// address is not taken for it; the same three words again are the same frame (the
    /// instruction buffer a pc points into is not moved, only freed with its iseq).
    frames: HashMap<[u64; 3], RubyFrame>,
    iseqs: HashMap<u64, Arc<Iseq>>,
    classes: ClassPaths,
}

impl Names {
    pub fn new(layout: Layout, symbols: Option<u64>) -> Names {
        Names {
            layout,
            symbols,
            frames: HashMap::new(),
            iseqs: HashMap::new(),
            classes: ClassPaths::new(symbols),
        }
    }

    /// Names the frame `words` (as the kernel wrote them) of the process `mem` reads.
    pub fn frame(&mut self, mem: &dyn Memory, words: &[u64]) -> Result<RubyFrame, NameError> {
        let words: [u64; 3] = words.try_into().map_err(|_| NameError::Words)?;
        if let Some(f) = self.frames.get(&words) {
            return Ok(f.clone());
        }
        let [w0, cme, pc] = words;
        let frame = match ruby_frame_kind(w0) {
            FRAME_ISEQ => self.iseq_frame(mem, ruby_frame_object(w0), cme, pc)?,
            FRAME_CFUNC => self.cfunc_frame(mem, ruby_frame_object(w0))?,
            k => return Err(NameError::Kind(k)),
        };
        if self.frames.len() >= MAX_FRAMES {
            self.frames.clear();
            self.iseqs.clear();
        }
        self.frames.insert(words, frame.clone());
        Ok(frame)
    }

    fn iseq_frame(
        &mut self,
        mem: &dyn Memory,
        iseq_addr: u64,
        cme: u64,
        pc: u64,
    ) -> Result<RubyFrame, NameError> {
        let mut iseq = self.iseq(mem, iseq_addr, false)?;
        if !iseq.holds(pc) {
            // Read again: the cached iseq may be an old one that was at this address.
            iseq = self.iseq(mem, iseq_addr, true)?;
            if !iseq.holds(pc) {
                return Err(NameError::Stale {
                    iseq: iseq_addr,
                    pc,
                });
            }
        }
        // `calc_pos`: the pc is past the instruction running, except at the start.
        let pos = (pc - iseq.encoded) / 8;
        let pos = pos.saturating_sub(1);
        let line = match line_at(mem, &self.layout, &iseq.insns, pos)? {
            Some(l) => l,
            None => iseq.first_lineno,
        };
        let qualified = match (&iseq.method_name, is_object(cme)) {
            (Some(name), true) => Some(self.qualified(mem, cme, name)?),
            _ => None,
        };
        let label = full_label(&iseq.label, &iseq.base_label, qualified.as_deref());
        Ok(RubyFrame {
            label,
            file: iseq.path.clone(),
            line: u32::try_from(line).ok(),
        })
    }

    fn cfunc_frame(&mut self, mem: &dyn Memory, cme: u64) -> Result<RubyFrame, NameError> {
        let l = &self.layout;
        let def = mem.read_u64(cme + u64::from(l.cme_def))?;
        let id = mem.read_u64(def + u64::from(l.def_original_id))?;
        let name: Arc<str> = match self.symbols {
            Some(symbols) => Arc::from(id_name(mem, l, symbols, id)?),
            None => Arc::from(UNKNOWN_C_METHOD),
        };
        let qualified = self.qualified(mem, cme, &name)?;
        Ok(RubyFrame {
            label: Arc::from(qualified),
            file: None,
            line: None,
        })
    }

    /// `rb_profile_frame_qualified_method_name`: `Class#name` (`Class.name` for a
    /// singleton's method), or the name alone where the class path is not known.
    fn qualified(&mut self, mem: &dyn Memory, cme: u64, name: &str) -> Result<String, ReadError> {
        let class = mem.read_u64(cme + u64::from(self.layout.cme_defined_class))?;
        Ok(match self.classes.path(mem, &self.layout, class)? {
            Some((path, singleton)) => {
                format!("{path}{}{name}", if singleton { "." } else { "#" })
            }
            None => name.to_string(),
        })
    }

    /// The iseq at `addr`, from the cache unless `fresh`.
    fn iseq(&mut self, mem: &dyn Memory, addr: u64, fresh: bool) -> Result<Arc<Iseq>, ReadError> {
        if !fresh && let Some(i) = self.iseqs.get(&addr) {
            return Ok(i.clone());
        }
        let iseq = Arc::new(self.read_iseq(mem, addr)?);
        self.iseqs.insert(addr, iseq.clone());
        Ok(iseq)
    }

    fn read_iseq(&self, mem: &dyn Memory, addr: u64) -> Result<Iseq, ReadError> {
        let l = &self.layout;
        let body = Body::read(mem, l, addr)?;
        let string =
            |v: u64| -> Result<Arc<str>, ReadError> { Ok(Arc::from(read_string(mem, l, v)?)) };
        let label = string(body.word(l.body_label))?;
        let base_label = string(body.word(l.body_base_label))?;
        let path = read_path(mem, l, body.word(l.body_pathobj))
            .ok()
            .map(Arc::from);
        let first = body.word(l.body_first_lineno);
        let first_lineno = if l.first_lineno_value {
            (first as i64 >> 1) as i32
        } else {
            first as u32 as i32
        };
        // `rb_iseq_method_name`: the method iseq's base label, when this iseq's local
        // iseq is a method body.
        let mut local = body.clone();
        let mut at = addr;
        for _ in 0..MAX_LOCAL_HOPS {
            let next = local.word(l.body_local_iseq);
            if next == 0 || next == at {
                break;
            }
            at = next;
            local = Body::read(mem, l, next)?;
        }
        let method_name = if local.u32_at(l.body_type) == ISEQ_TYPE_METHOD {
            Some(string(local.word(l.body_base_label))?)
        } else {
            None
        };
        Ok(Iseq {
            encoded: body.word(l.body_iseq_encoded),
            size: u64::from(body.u32_at(l.body_iseq_size)),
            label,
            base_label,
            path,
            first_lineno,
            insns: InsnsInfo {
                body: body.word(l.insns_body),
                positions: body.word(l.insns_positions),
                size: body.u32_at(l.insns_size),
                succ_index_table: body.word(l.insns_succ),
            },
            method_name,
        })
    }
}

impl Iseq {
    /// Whether `pc` is in (or just past) this iseq's instructions.
    fn holds(&self, pc: u64) -> bool {
        pc >= self.encoded && pc <= self.encoded + 8 * self.size
    }
}

/// The bytes of an `rb_iseq_constant_body` up to the last field naming reads.
#[derive(Clone)]
struct Body(Vec<u8>);

impl Body {
    fn read(mem: &dyn Memory, l: &Layout, iseq: u64) -> Result<Body, ReadError> {
        let body = mem.read_u64(iseq + u64::from(l.iseq_body))?;
        if !is_object(body) {
            return Err(ReadError::invalid("iseq body", iseq, "null"));
        }
        let end = [
            l.body_label,
            l.body_base_label,
            l.body_pathobj,
            l.body_first_lineno,
            l.insns_body,
            l.insns_positions,
            l.insns_size,
            l.insns_succ,
            l.body_local_iseq,
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        let mut b = vec![0u8; usize::from(end) + 8];
        mem.read(body, &mut b)?;
        Ok(Body(b))
    }

    fn word(&self, at: u16) -> u64 {
        let at = usize::from(at);
        u64::from_le_bytes(self.0[at..at + 8].try_into().unwrap_or_default())
    }

    fn u32_at(&self, at: u16) -> u32 {
        let at = usize::from(at);
        u32::from_le_bytes(self.0[at..at + 4].try_into().unwrap_or_default())
    }
}

/// `rb_profile_frame_full_label`: the label as it is when there is no qualified name or the
/// qualified name is the base label; else the label's prefix before its base label
/// (`block in `, `rescue in `) followed by the qualified name.
pub fn full_label(label: &str, base_label: &str, qualified: Option<&str>) -> Arc<str> {
    match qualified {
        Some(q) if q != base_label => {
            let prefix = label.len().saturating_sub(base_label.len());
            let prefix = label.get(..prefix).unwrap_or("");
            Arc::from(format!("{prefix}{q}"))
        }
        _ => Arc::from(label),
    }
}

#[cfg(test)]
mod tests;
