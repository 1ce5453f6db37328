//! Naming Java frames from metaspace (never the Java heap): a Method* and bci → class, method,
//! source file and line; an nmethod and a PC offset → its PcDesc's scope chain, inlined
//! methods expanded innermost first. Cached by the cookies that change when the memory is
//! reused: a ConstMethod's address for methods (a redefined class gets new ones), the compile
//! id for nmethods (freed nmethods' memory is reused with a new id).

use std::{collections::HashMap, sync::Arc};

use super::{
    layout::{DebugData, Layout},
    stream::{line_at, line_table, scope_chain},
};
use crate::runtimes::shared::memory::{Memory, ReadError};

/// Longest line table read after a method's bytecodes.
const MAX_LINE_TABLE: usize = 64 << 10;
/// Most line table entries believed.
const MAX_LINES: usize = 1 << 16;
/// Longest Symbol read (class names can be long; HotSpot's own limit is 65535).
const MAX_SYMBOL: u16 = u16::MAX;
/// Largest PcDesc array, scopes data or metadata copied from one nmethod.
const MAX_DEBUG_BYTES: u64 = 4 << 20;
/// Deepest inlining followed (C2's MaxInlineLevel is 15).
const MAX_SCOPES: usize = 64;
/// Entries kept in each cache before it is cleared.
const MAX_CACHED: usize = 1 << 16;

/// How a frame ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Interpreted,
    /// C1 (comp levels 1–3).
    C1,
    /// C2 (comp level 4).
    C2,
    /// A JNI wrapper.
    Native,
}

impl Tier {
    pub fn of_level(level: u8) -> Tier {
        if level >= 4 { Tier::C2 } else { Tier::C1 }
    }
}

/// How a frame's line was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// The bci being run (interpreted: from the bcp) or called from (a compiled return
    /// address: the PcDesc at exactly that PC).
    Exact,
    /// A compiled frame's stopped PC: the next debug point after it (HotSpot's own
    /// `pc_desc_near` rule; compiled code only records bcis at safepoints and calls).
    NextDebugPoint,
    /// A compiled frame's stopped PC with no debug point after it: the last one before it.
    PreviousDebugPoint,
    /// No line: no scope describes the PC (the method only), or the class has no table.
    None,
}

/// One named Java frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JavaFrame {
    /// `package.Class.method`, dotted as JFR prints it.
    pub method: String,
    /// The method's descriptor, e.g. `(J)J`.
    pub signature: String,
    /// The class's SourceFile attribute, e.g. `Chain.java`.
    pub file: Option<String>,
    pub line: Option<u32>,
    pub bci: Option<i32>,
    pub line_kind: LineKind,
    pub tier: Tier,
    /// Inlined into the frame below it (pprof inlining: same physical frame).
    pub inlined: bool,
}

/// Whether a compiled frame's PC is where the thread stopped or a return address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcKind {
    Stopped,
    ReturnAddress,
    /// Stopped in its prologue (before its frame is complete): the method is entered, none
    /// of its code run, so no debug point (the next one may be inside an inlined callee).
    Entry,
}

/// A method's names and line table, read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodInfo {
    pub class: String,
    pub name: String,
    pub signature: String,
    pub file: Option<String>,
    pub lines: Vec<(u32, u32)>,
    pub code_size: u32,
}

impl MethodInfo {
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.class, self.name)
    }
}

/// What naming keeps of an nmethod (its debug info is freed with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NmethodInfo {
    pub compile_id: u32,
    pub method: u64,
    /// (pc offset from the code start, scope decode offset), in address order.
    pub pcs: Vec<(i32, i32)>,
    pub scopes: Vec<u8>,
    /// Metadata words (Method* among them); scopes name methods by 1-based index here.
    pub metadata: Vec<u64>,
}

/// Names Java frames of one process.
pub struct Namer<'a, M: Memory + ?Sized> {
    mem: &'a M,
    layout: &'a Layout,
    methods: HashMap<u64, Arc<MethodInfo>>,
    nmethods: HashMap<(u64, u32), Arc<NmethodInfo>>,
    /// Method* → ConstMethod* as last read: used only when the process can no longer be
    /// read (its last samples are named after it exited).
    const_methods: HashMap<u64, u64>,
}

/// What a [`Namer`] read, kept between uses (a recording names a process's frames a few
/// at a time, over its whole life).
#[derive(Default)]
pub struct NamerCache {
    methods: HashMap<u64, Arc<MethodInfo>>,
    nmethods: HashMap<(u64, u32), Arc<NmethodInfo>>,
    const_methods: HashMap<u64, u64>,
}

impl<'a, M: Memory + ?Sized> Namer<'a, M> {
    pub fn new(mem: &'a M, layout: &'a Layout) -> Self {
        Self::resume(mem, layout, NamerCache::default())
    }

    /// A namer that starts with what an earlier one of the same process read.
    pub fn resume(mem: &'a M, layout: &'a Layout, cache: NamerCache) -> Self {
        Namer {
            mem,
            layout,
            methods: cache.methods,
            nmethods: cache.nmethods,
            const_methods: cache.const_methods,
        }
    }

    /// What this namer read, for [`Namer::resume`].
    pub fn into_cache(self) -> NamerCache {
        NamerCache {
            methods: self.methods,
            nmethods: self.nmethods,
            const_methods: self.const_methods,
        }
    }

    /// A Method*'s ConstMethod* (the cookie its names are cached by); in a process that
    /// can no longer be read, the one last read.
    pub fn const_method(&mut self, method: u64) -> Result<u64, ReadError> {
        let cm = match self
            .mem
            .read_u64(method + u64::from(self.layout.method.const_method))
        {
            Ok(cm) => cm,
            Err(e) => return self.const_methods.get(&method).copied().ok_or(e),
        };
        if cm == 0 || cm % 8 != 0 {
            return Err(ReadError::invalid(
                "Method",
                method,
                format!("ConstMethod* {cm:#x}"),
            ));
        }
        if self.const_methods.len() >= MAX_CACHED {
            self.const_methods.clear();
        }
        self.const_methods.insert(method, cm);
        Ok(cm)
    }

    /// Names and line table of the method `method`.
    pub fn method(&mut self, method: u64) -> Result<Arc<MethodInfo>, ReadError> {
        let cm = self.const_method(method)?;
        if let Some(m) = self.methods.get(&cm) {
            return Ok(m.clone());
        }
        let info = Arc::new(self.read_method(cm)?);
        if self.methods.len() >= MAX_CACHED {
            self.methods.clear();
        }
        self.methods.insert(cm, info.clone());
        Ok(info)
    }

    fn read_method(&self, cm: u64) -> Result<MethodInfo, ReadError> {
        let (mem, l) = (self.mem, &self.layout.method);
        let cp = mem.read_u64(cm + u64::from(l.cm_constants))?;
        let entries = cp + u64::from(l.cp_size);
        let entry_symbol = |index: i64| -> Result<String, ReadError> {
            let sym = mem.read_u64(entries + 8 * index as u64)?;
            self.symbol(sym)
        };
        let holder = mem.read_u64(cp + u64::from(l.cp_pool_holder))?;
        let class = self
            .symbol(mem.read_u64(holder + u64::from(l.klass_name))?)?
            .replace('/', ".");
        let name = entry_symbol(l.cm_name_index.read(mem, cm)?)?;
        let signature = entry_symbol(l.cm_signature_index.read(mem, cm)?)?;
        let file_index = l.cp_source_file_name_index.read(mem, cp)?;
        let file = if file_index == 0 {
            None
        } else {
            Some(entry_symbol(file_index)?)
        };
        let code_size = l.cm_code_size.read(mem, cm)? as u32;
        let flags = l.cm_flags.read(mem, cm)? as u32;
        let lines = if flags & l.has_linenumber_table != 0 {
            let at = cm + u64::from(l.cm_size) + u64::from(code_size);
            self.line_table(at)?
        } else {
            Vec::new()
        };
        Ok(MethodInfo {
            class,
            name,
            signature,
            file,
            lines,
            code_size,
        })
    }

    /// The compressed line table at `at`, read a page at a time until its terminator.
    fn line_table(&self, at: u64) -> Result<Vec<(u32, u32)>, ReadError> {
        let mut bytes = Vec::new();
        while bytes.len() < MAX_LINE_TABLE {
            let here = at + bytes.len() as u64;
            let mut chunk = vec![0u8; (0x1000 - (here & 0xfff)) as usize];
            self.mem.read(here, &mut chunk)?;
            bytes.extend_from_slice(&chunk);
            if let Some(t) = line_table(&bytes, self.layout.unsigned5_x, MAX_LINES) {
                return Ok(t);
            }
        }
        Err(ReadError::invalid("line table", at, "no end"))
    }

    fn symbol(&self, sym: u64) -> Result<String, ReadError> {
        let l = &self.layout.method;
        let len = l.symbol_length.read(self.mem, sym)?;
        if !(0..=i64::from(MAX_SYMBOL)).contains(&len) {
            return Err(ReadError::invalid("Symbol", sym, format!("length {len}")));
        }
        let mut b = vec![0u8; len as usize];
        self.mem.read(sym + u64::from(l.symbol_body), &mut b)?;
        // Symbols are modified UTF-8; names in practice are plain UTF-8.
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// An interpreted frame: `method` at `bci` (exact).
    pub fn interpreted(&mut self, method: u64, bci: i32) -> Result<JavaFrame, ReadError> {
        let m = self.method(method)?;
        if bci < 0 || bci as u32 >= m.code_size.max(1) {
            return Err(ReadError::invalid(
                "interpreted frame",
                method,
                format!("bci {bci} outside {} bytes of code", m.code_size),
            ));
        }
        Ok(frame(&m, Some(bci), Tier::Interpreted, false))
    }

    /// What naming keeps of the nmethod at `nmethod`, which the walk saw with `compile_id`
    /// (a different id there now: the nmethod was freed and its memory reused).
    pub fn nmethod(
        &mut self,
        nmethod: u64,
        compile_id: u32,
    ) -> Result<Arc<NmethodInfo>, ReadError> {
        if let Some(n) = self.nmethods.get(&(nmethod, compile_id)) {
            return Ok(n.clone());
        }
        let info = Arc::new(self.read_nmethod(nmethod, compile_id)?);
        if self.nmethods.len() >= MAX_CACHED {
            self.nmethods.clear();
        }
        self.nmethods.insert((nmethod, compile_id), info.clone());
        Ok(info)
    }

    fn read_nmethod(&self, nm: u64, compile_id: u32) -> Result<NmethodInfo, ReadError> {
        let (mem, n) = (self.mem, &self.layout.nmethod);
        let now = n.compile_id.read(mem, nm)? as u32;
        if now != compile_id {
            return Err(ReadError::invalid(
                "nmethod",
                nm,
                format!("compile id {now}, not {compile_id}: freed and reused"),
            ));
        }
        // The nmethod's field `s` as an offset from `base`.
        let off = |s: super::layout::Scalar, base: u64| {
            s.read(mem, nm).map(|v| base.wrapping_add_signed(v))
        };
        let (pcs, scopes, metadata) = match n.debug {
            DebugData::InBlob {
                scopes_data_begin,
                metadata,
                scopes_pcs,
                dependencies,
            } => {
                let scopes = mem.read_u64(nm + u64::from(scopes_data_begin))?;
                let pcs = off(scopes_pcs, nm)?;
                let meta = off(metadata, nm)?;
                (pcs..off(dependencies, nm)?, scopes..pcs, meta..scopes)
            }
            DebugData::Split {
                immutable_data,
                immutable_size,
                scopes_pcs,
                scopes_data,
                mutable_data,
                mutable_size,
                relocation_size,
            } => {
                let imm = mem.read_u64(nm + u64::from(immutable_data))?;
                let pcs = off(scopes_pcs, imm)?;
                let data = off(scopes_data, imm)?;
                let end = imm.wrapping_add_signed(immutable_size.read(mem, nm)?);
                let mutable = mem.read_u64(nm + u64::from(mutable_data))?;
                let meta = mutable.wrapping_add_signed(relocation_size.read(mem, nm)?);
                let meta_end = mutable.wrapping_add_signed(mutable_size.read(mem, nm)?);
                (pcs..data, data..end, meta..meta_end)
            }
        };
        let read = |r: std::ops::Range<u64>, what: &'static str| -> Result<Vec<u8>, ReadError> {
            let len = r.end.wrapping_sub(r.start);
            if r.start > r.end || len > MAX_DEBUG_BYTES {
                return Err(ReadError::invalid(
                    what,
                    nm,
                    format!("range {:#x}..{:#x}", r.start, r.end),
                ));
            }
            let mut b = vec![0u8; len as usize];
            mem.read(r.start, &mut b)?;
            Ok(b)
        };
        let size = usize::from(n.pc_desc_size).max(8);
        let (pc_at, scope_at) = (
            usize::from(n.pc_desc_pc_offset),
            usize::from(n.pc_desc_scope_decode_offset),
        );
        let i32_at =
            |b: &[u8], at: usize| i32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let pcs = read(pcs, "PcDescs")?
            .chunks_exact(size)
            .map(|d| (i32_at(d, pc_at), i32_at(d, scope_at)))
            .collect();
        let metadata = read(metadata, "nmethod metadata")?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Ok(NmethodInfo {
            compile_id,
            method: mem.read_u64(nm + u64::from(n.method))?,
            pcs,
            scopes: read(scopes, "scopes data")?,
            metadata,
        })
    }

    /// A compiled frame: the nmethod `nmethod` (seen with `compile_id`, at `level`), at
    /// `pc_offset` from its code start. Inlined methods come first (innermost), each its
    /// own frame; the nmethod's own method last. With no scope for the PC: the method only.
    pub fn compiled(
        &mut self,
        nmethod: u64,
        compile_id: u32,
        tier: Tier,
        pc_offset: u32,
        pc: PcKind,
    ) -> Result<Vec<JavaFrame>, ReadError> {
        let info = self.nmethod(nmethod, compile_id)?;
        let off = pc_offset as i64;
        let scoped = |(p, scope): &&(i32, i32)| *p >= 0 && *scope > 0;
        let (desc, kind) = match pc {
            PcKind::Entry => (None, LineKind::None),
            // The PcDesc recorded for this very return address (the call's).
            PcKind::ReturnAddress => (
                info.pcs.iter().find(|(p, _)| i64::from(*p) == off),
                LineKind::Exact,
            ),
            // The first debug point after the PC, as AsyncGetCallTrace and JFR take it
            // (`pc_desc_near(pc + 1)`): a debug point records the state after the
            // instruction ending at its offset, so an instruction starting there is the
            // next one's. When that is the end sentinel (no scope: the PC is in code laid
            // out after the last debug point, e.g. C1's loop header after its back-edge
            // poll), the last one at or before it (a PC stopped at a debug point's own
            // offset, C1's back-edge poll's: measured 5 % of a C1 loop's samples, which were
            // left without a line when only points strictly before it were looked at).
            PcKind::Stopped => match info.pcs.iter().find(|(p, _)| i64::from(*p) > off) {
                Some(d) if d.1 > 0 => (Some(d), LineKind::NextDebugPoint),
                _ => (
                    info.pcs
                        .iter()
                        .rev()
                        .filter(|(p, _)| i64::from(*p) <= off)
                        .find(scoped),
                    LineKind::PreviousDebugPoint,
                ),
            },
        };
        let chain = desc.filter(|(_, scope)| *scope > 0).and_then(|(_, scope)| {
            scope_chain(
                &info.scopes,
                *scope as u32,
                self.layout.unsigned5_x,
                MAX_SCOPES,
            )
        });
        let Some(mut chain) = chain.filter(|c| !c.is_empty()) else {
            let m = self.method(info.method)?;
            let mut f = frame(&m, None, tier, false);
            f.line_kind = LineKind::None;
            return Ok(vec![f]);
        };
        if kind == LineKind::PreviousDebugPoint {
            // The PC is past that point, maybe out of the methods inlined there (measured:
            // C2 cold code credited 6 % of library stops to an inlined Integer.valueOf):
            // only the compiled method itself, at that point's line.
            chain.drain(..chain.len() - 1);
        }
        let last = chain.len() - 1;
        let mut out = Vec::with_capacity(chain.len());
        for (i, scope) in chain.iter().enumerate() {
            let method = match scope.method_index {
                0 => info.method,
                i => *info.metadata.get(i as usize - 1).ok_or_else(|| {
                    ReadError::invalid("scope", nmethod, format!("metadata index {i}"))
                })?,
            };
            let m = self.method(method)?;
            let mut f = frame(&m, (scope.bci >= 0).then_some(scope.bci), tier, i < last);
            f.line_kind = if f.line.is_some() {
                kind
            } else {
                LineKind::None
            };
            out.push(f);
        }
        Ok(out)
    }
}

fn frame(m: &MethodInfo, bci: Option<i32>, tier: Tier, inlined: bool) -> JavaFrame {
    let line = bci.and_then(|b| line_at(&m.lines, b as u32));
    JavaFrame {
        method: m.qualified(),
        signature: m.signature.clone(),
        file: m.file.clone(),
        line,
        bci,
        line_kind: if line.is_some() {
            LineKind::Exact
        } else {
            LineKind::None
        },
        tier,
        inlined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::hotspot::testdata::{LEAF, MIDDLE, NM, layout17, process};

    #[test]
    fn interpreted_frames_named_with_lines() {
        let l = layout17();
        let m = process();
        let mut n = Namer::new(&m, &l);
        let f = n.interpreted(LEAF, 5).expect("named");
        assert_eq!(f.method, "fixture.Chain.leaf");
        assert_eq!(f.signature, "(J)J");
        assert_eq!(f.file.as_deref(), Some("Chain.java"));
        assert_eq!(
            (f.line, f.bci, f.line_kind),
            (Some(6), Some(5), LineKind::Exact)
        );
        assert_eq!(n.interpreted(LEAF, 3).unwrap().line, Some(5));
        // A bci past the method's code is refused (a frame still being built).
        assert!(n.interpreted(LEAF, 10).is_err());
        assert_eq!(
            n.interpreted(MIDDLE, 7).unwrap().method,
            "fixture.Chain.middle"
        );
    }

    #[test]
    fn compiled_frames_expand_inlining() {
        let l = layout17();
        let m = process();
        let mut n = Namer::new(&m, &l);
        // Stopped before the debug point at 0x20: leaf inlined into middle.
        let fs = n
            .compiled(NM, 42, Tier::C2, 0x10, PcKind::Stopped)
            .expect("named");
        let got: Vec<_> = fs
            .iter()
            .map(|f| (f.method.as_str(), f.line, f.inlined, f.line_kind))
            .collect();
        let near = LineKind::NextDebugPoint;
        assert_eq!(
            got,
            [
                ("fixture.Chain.leaf", Some(6), true, near),
                ("fixture.Chain.middle", Some(11), false, near)
            ]
        );
        // Stopped past the last debug point (only the sentinel after it): the one before
        // it, for the compiled method only (the PC may have left the inlined leaf).
        // Stopped in its prologue: the compiled method, no line (not the inlined leaf).
        let fs = n.compiled(NM, 42, Tier::C2, 0x10, PcKind::Entry).unwrap();
        assert_eq!(
            fs.iter()
                .map(|f| (f.method.as_str(), f.line, f.line_kind))
                .collect::<Vec<_>>(),
            [("fixture.Chain.middle", None, LineKind::None)]
        );
        let fs = n.compiled(NM, 42, Tier::C2, 0x70, PcKind::Stopped).unwrap();
        assert_eq!(fs.len(), 1);
        assert_eq!(
            (
                fs[0].method.as_str(),
                fs[0].line,
                fs[0].inlined,
                fs[0].line_kind
            ),
            (
                "fixture.Chain.middle",
                Some(11),
                false,
                LineKind::PreviousDebugPoint
            )
        );
        assert_eq!(
            n.compiled(NM, 42, Tier::C2, 0x50, PcKind::Stopped)
                .unwrap()
                .len(),
            2
        );
        // Stopped exactly at a debug point (0x20, in leaf): the instruction starting there
        // is the next point's (0x40, middle's call), as JFR takes it.
        let fs = n.compiled(NM, 42, Tier::C2, 0x20, PcKind::Stopped).unwrap();
        assert_eq!(
            fs.iter().map(|f| f.method.as_str()).collect::<Vec<_>>(),
            ["fixture.Chain.middle"]
        );
        // A return address is looked up exactly.
        let fs = n
            .compiled(NM, 42, Tier::C2, 0x40, PcKind::ReturnAddress)
            .unwrap();
        assert_eq!(fs.len(), 1);
        assert_eq!((fs[0].line, fs[0].line_kind), (Some(11), LineKind::Exact));
        // No PcDesc there: the nmethod's method only, without a line.
        let fs = n
            .compiled(NM, 42, Tier::C1, 0x30, PcKind::ReturnAddress)
            .unwrap();
        assert_eq!(fs.len(), 1);
        assert_eq!(fs[0].method, "fixture.Chain.middle");
        assert_eq!(
            (fs[0].line, fs[0].line_kind, fs[0].tier),
            (None, LineKind::None, Tier::C1)
        );
        // Another compile id there now: freed and reused, not named.
        let err = n
            .compiled(NM, 41, Tier::C2, 0x10, PcKind::Stopped)
            .unwrap_err();
        assert!(err.to_string().contains("freed and reused"), "{err}");
    }
}
