//! Go's own function table, `.gopclntab`, read as the Go runtime reads it for panics and
//! `runtime.Callers`: the table stays in binaries linked with `-s -w`, which drop `.symtab`
//! and DWARF. Layouts of Go 1.16-1.17 (magic 0xfffffffa), 1.18-1.19 (0xfffffff0) and 1.20 and
//! later (0xfffffff1); older tables are refused. Every offset is checked before it is used: a
//! corrupt table gives no name, never a wrong one.

/// Funcdata slot of the inline tree, pcdata slot of the inline-tree index (Go 1.12 on).
const FUNCDATA_INL_TREE: u32 = 3;
const PCDATA_INL_TREE_INDEX: u32 = 2;
/// Inlined calls deeper than this are cut (a loop in a corrupt tree ends here).
const MAX_INLINE_DEPTH: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Go116,
    Go118,
    Go120,
}

impl Layout {
    pub fn of_magic(magic: u32) -> Option<Self> {
        match magic {
            0xffff_fffa => Some(Self::Go116),
            0xffff_fff0 => Some(Self::Go118),
            0xffff_fff1 => Some(Self::Go120),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PclntabError {
    #[error("Go function table of an unsupported layout (magic {0:#x}; Go 1.16 or later is read)")]
    Magic(u32),
    #[error("Go function table is corrupt: {0}")]
    Corrupt(&'static str),
}

/// Where a function's inline tree lives: Go 1.18 and later give funcdata as offsets from
/// `moduledata.gofunc`, older ones as addresses.
pub trait Image {
    /// `len` bytes at virtual address `vaddr` of the binary, if it has them.
    fn read(&self, vaddr: u64, len: usize) -> Option<Vec<u8>>;
    /// `moduledata.gofunc` (Go 1.18+), if it was found.
    fn gofunc(&self) -> Option<u64>;
}

/// One frame of a PC: a function, the file and line it is at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFrame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A parsed table header over the table's bytes.
#[derive(Debug)]
pub struct Pclntab {
    data: Vec<u8>,
    /// Virtual address of the table's first byte (funcdata alignment in Go 1.16).
    vaddr: u64,
    layout: Layout,
    quantum: u64,
    nfunc: usize,
    text_start: u64,
    funcname: usize,
    cu: usize,
    filetab: usize,
    pctab: usize,
    pcln: usize,
}

/// What a lookup needs of one `_func`.
struct Func {
    /// Offset of the `_func` in `data`.
    at: usize,
    entry: u64,
    nameoff: u32,
    pcsp: u32,
    pcfile: u32,
    pcln: u32,
    npcdata: u32,
    cu_offset: u32,
    nfuncdata: u32,
}

impl Pclntab {
    /// Parses the header of the table `data` loaded at `vaddr`; `text` is the `.text`
    /// address, used when the header's own start of text is 0 (newer linkers, PIE).
    pub fn parse(data: Vec<u8>, vaddr: u64, text: Option<u64>) -> Result<Self, PclntabError> {
        let magic = u32_at(&data, 0).ok_or(PclntabError::Corrupt("shorter than its header"))?;
        let layout = Layout::of_magic(magic).ok_or(PclntabError::Magic(magic))?;
        let (pad, quantum, ptr) = (data[4] | data[5], data[6], data[7]);
        if pad != 0 || ptr != 8 || !matches!(quantum, 1 | 2 | 4) {
            return Err(PclntabError::Corrupt(
                "its header is not a 64-bit Go table's",
            ));
        }
        let word = |i: usize| u64_at(&data, 8 * i).ok_or(PclntabError::Corrupt("short header"));
        let nfunc = word(1)?;
        // Words after nfunc and nfiles: 1.18+ has the start of text first.
        let (text_start, first) = match layout {
            Layout::Go116 => (0, 3),
            Layout::Go118 | Layout::Go120 => (word(3)?, 4),
        };
        let offsets = [
            word(first)?,
            word(first + 1)?,
            word(first + 2)?,
            word(first + 3)?,
            word(first + 4)?,
        ];
        let len = data.len() as u64;
        if offsets.windows(2).any(|w| w[0] > w[1]) || offsets[4] > len || nfunc > len {
            return Err(PclntabError::Corrupt(
                "its section offsets are out of order",
            ));
        }
        let [funcname, cu, filetab, pctab, pcln] = offsets.map(|o| o as usize);
        let text_start = match (text_start, text) {
            (0, Some(t)) => t,
            (t, _) => t,
        };
        let table = Self {
            data,
            vaddr,
            layout,
            quantum: u64::from(quantum),
            nfunc: nfunc as usize,
            text_start,
            funcname,
            cu,
            filetab,
            pctab,
            pcln,
        };
        // The function table (nfunc entries and the end) must fit.
        if table
            .pcln
            .checked_add((table.nfunc + 1) * table.ftab_stride())
            .is_none_or(|end| end > table.data.len())
        {
            return Err(PclntabError::Corrupt(
                "its function table runs past its end",
            ));
        }
        Ok(table)
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn ftab_stride(&self) -> usize {
        match self.layout {
            Layout::Go116 => 16,
            _ => 8,
        }
    }

    /// Entry PC and `_func` offset of function-table entry `i` (`i == nfunc`: the end).
    fn ftab(&self, i: usize) -> Option<(u64, usize)> {
        let at = self.pcln + i * self.ftab_stride();
        match self.layout {
            Layout::Go116 => Some((
                u64_at(&self.data, at)?,
                u64_at(&self.data, at + 8)? as usize,
            )),
            _ => Some((
                self.text_start + u64::from(u32_at(&self.data, at)?),
                u32_at(&self.data, at + 4)? as usize,
            )),
        }
    }

    /// The PCs the table covers.
    pub fn range(&self) -> Option<(u64, u64)> {
        Some((self.ftab(0)?.0, self.ftab(self.nfunc)?.0))
    }

    /// The entry PC of the function called `name` (a linear search: detection looks up
    /// one or two names per binary).
    pub fn entry_of(&self, name: &str) -> Option<u64> {
        let name_at = match self.layout {
            Layout::Go116 => 8,
            Layout::Go118 | Layout::Go120 => 4,
        };
        (0..self.nfunc).find_map(|i| {
            let (entry, funcoff) = self.ftab(i)?;
            let nameoff = u32_at(&self.data, self.pcln.checked_add(funcoff)? + name_at)?;
            (self.name(nameoff)? == name).then_some(entry)
        })
    }

    /// The function holding `pc`.
    fn func(&self, pc: u64) -> Option<Func> {
        let (start, end) = self.range()?;
        if pc < start || pc >= end || self.nfunc == 0 {
            return None;
        }
        // The last entry whose start is at or below pc.
        let (mut lo, mut hi) = (0, self.nfunc);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if self.ftab(mid)?.0 <= pc {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let (entry, funcoff) = self.ftab(lo)?;
        let at = self.pcln.checked_add(funcoff)?;
        let d = &self.data;
        let f = match self.layout {
            Layout::Go116 => Func {
                at,
                entry: u64_at(d, at)?,
                nameoff: u32_at(d, at + 8)?,
                pcsp: u32_at(d, at + 20)?,
                pcfile: u32_at(d, at + 24)?,
                pcln: u32_at(d, at + 28)?,
                npcdata: u32_at(d, at + 32)?,
                cu_offset: u32_at(d, at + 36)?,
                nfuncdata: u32::from(*d.get(at + 43)?),
            },
            Layout::Go118 | Layout::Go120 => Func {
                at,
                entry: self.text_start + u64::from(u32_at(d, at)?),
                nameoff: u32_at(d, at + 4)?,
                pcsp: u32_at(d, at + 16)?,
                pcfile: u32_at(d, at + 20)?,
                pcln: u32_at(d, at + 24)?,
                npcdata: u32_at(d, at + 28)?,
                cu_offset: u32_at(d, at + 32)?,
                nfuncdata: u32::from(
                    *d.get(at + if self.layout == Layout::Go118 { 39 } else { 43 })?,
                ),
            },
        };
        // The function table and the function must agree on where it starts.
        (f.entry == entry).then_some(f)
    }

    fn pcdata_at(&self) -> usize {
        match self.layout {
            Layout::Go118 => 40,
            _ => 44,
        }
    }

    /// A NUL-terminated string at `base + off`, bounded by `end`.
    fn string(&self, base: usize, end: usize, off: u32) -> Option<String> {
        let start = base.checked_add(off as usize)?;
        let bytes = self.data.get(start..end)?;
        let n = bytes.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&bytes[..n]).into_owned())
    }

    fn name(&self, nameoff: u32) -> Option<String> {
        self.string(self.funcname, self.cu, nameoff)
            .filter(|n| !n.is_empty())
    }

    /// The runs of pc-value table `off` of the function entered at `entry`: (start, end,
    /// value), as Go's `step` decodes them (zig-zag value deltas, PC deltas in quanta; a
    /// zero value delta after the first pair ends the table). None for offset 0.
    fn runs(&self, off: u32, entry: u64) -> impl Iterator<Item = (u64, u64, i32)> + '_ {
        let mut p = (off != 0)
            .then(|| self.pctab.checked_add(off as usize))
            .flatten()
            .unwrap_or(usize::MAX);
        let (mut val, mut at) = (-1i32, entry);
        let mut first = true;
        std::iter::from_fn(move || {
            if *self.data.get(p)? == 0 && !first {
                return None;
            }
            let (uv, n) = uvarint(self.data.get(p..)?)?;
            p += n;
            val = val.wrapping_add(if uv & 1 != 0 {
                !(uv >> 1) as i32
            } else {
                (uv >> 1) as i32
            });
            let (pcd, n) = uvarint(self.data.get(p..)?)?;
            p += n;
            let start = at;
            at = at.checked_add(pcd.checked_mul(self.quantum)?)?;
            first = false;
            Some((start, at, val))
        })
    }

    /// The value of pc-value table `off` at `pc` in the function entered at `entry`.
    fn pcvalue(&self, off: u32, entry: u64, pc: u64) -> Option<i32> {
        self.runs(off, entry)
            .find(|&(_, end, _)| pc < end)
            .map(|(_, _, v)| v)
    }

    fn pcdata_slot(&self, f: &Func, slot: u32) -> Option<u32> {
        if slot >= f.npcdata {
            return None;
        }
        u32_at(&self.data, f.at + self.pcdata_at() + 4 * slot as usize).filter(|&o| o != 0)
    }

    /// Virtual address of funcdata `slot` of `f`.
    fn funcdata(&self, f: &Func, slot: u32, image: &dyn Image) -> Option<u64> {
        if slot >= f.nfuncdata {
            return None;
        }
        let after_pcdata = f.at + self.pcdata_at() + 4 * f.npcdata as usize;
        match self.layout {
            Layout::Go116 => {
                // Pointer-sized words, 8-aligned in memory.
                let mut at = after_pcdata;
                if (self.vaddr + at as u64) & 4 != 0 {
                    at += 4;
                }
                u64_at(&self.data, at + 8 * slot as usize).filter(|&a| a != 0)
            }
            _ => {
                let off = u32_at(&self.data, after_pcdata + 4 * slot as usize)?;
                if off == u32::MAX {
                    return None;
                }
                Some(image.gofunc()? + u64::from(off))
            }
        }
    }

    fn file(&self, f: &Func, pc: u64) -> Option<String> {
        let fileno = self.pcvalue(f.pcfile, f.entry, pc)?;
        let at = self
            .cu
            .checked_add(4 * (f.cu_offset as usize).checked_add(usize::try_from(fileno).ok()?)?)?;
        if at + 4 > self.filetab {
            return None;
        }
        let off = u32_at(&self.data, at).filter(|&o| o != u32::MAX)?;
        self.string(self.filetab, self.pctab, off)
    }

    /// Every function's frame sizes, in address order: `each(start, end, size, flag)` for
    /// each run of PCs with one pcsp value (`size` -1: none known), `flag` the function's
    /// `funcFlag` (1 TOPFRAME: a walk ends there; 2 SPWRITE: it moves the stack pointer
    /// arbitrarily). For unwind rows of binaries that have no other CFI.
    pub fn frame_runs(&self, mut each: impl FnMut(u64, u64, i32, u8)) {
        for i in 0..self.nfunc {
            let (Some((entry, _)), Some((end, _))) = (self.ftab(i), self.ftab(i + 1)) else {
                return;
            };
            let Some(f) = self.func(entry) else {
                each(entry, end, -1, 0);
                continue;
            };
            let flag_at = match self.layout {
                Layout::Go116 => 41, // 1.17's flag; 1.16's padding (0)
                Layout::Go118 => 37,
                Layout::Go120 => 41,
            };
            let flag = self.data.get(f.at + flag_at).copied().unwrap_or(0);
            let mut at = entry;
            for (_, next, size) in self.runs(f.pcsp, entry) {
                if at >= end {
                    break;
                }
                let next = next.min(end);
                each(at, next, size, flag);
                at = next;
            }
            if at < end {
                each(at, end, -1, flag);
            }
        }
    }

    /// The bytes between the stack pointer and the return address at `pc` (its function's
    /// pcsp table): 0 where the function has no frame (yet, or any more), so that the
    /// return address into its caller is the word at the stack pointer.
    pub fn frame_size(&self, pc: u64) -> Option<u32> {
        let f = self.func(pc)?;
        self.pcvalue(f.pcsp, f.entry, pc)
            .and_then(|v| u32::try_from(v).ok())
    }

    fn line(&self, f: &Func, pc: u64) -> Option<u32> {
        self.pcvalue(f.pcln, f.entry, pc)
            .and_then(|l| u32::try_from(l).ok())
            .filter(|&l| l > 0)
    }

    /// The frames of `pc`, innermost first: the functions inlined at it, then the function
    /// the table holds. `None` when the table does not cover `pc` or cannot name it.
    pub fn frames(&self, pc: u64, image: &dyn Image) -> Option<Vec<GoFrame>> {
        let f = self.func(pc)?;
        let name = self.name(f.nameoff)?;
        let tree = self
            .pcdata_slot(&f, PCDATA_INL_TREE_INDEX)
            .zip(self.funcdata(&f, FUNCDATA_INL_TREE, image));
        let mut frames = Vec::new();
        let mut at = pc;
        if let Some((index_table, tree)) = tree {
            let stride = if self.layout == Layout::Go120 { 16 } else { 20 };
            while frames.len() < MAX_INLINE_DEPTH {
                let Some(ix) = self.pcvalue(index_table, f.entry, at) else {
                    break;
                };
                let Ok(ix) = u64::try_from(ix) else {
                    break; // -1: no inlined call here
                };
                let Some(entry) = image.read(tree + ix * stride, stride as usize) else {
                    break;
                };
                let (nameoff, parent_pc) = match self.layout {
                    Layout::Go120 => (u32_at(&entry, 4)?, u32_at(&entry, 8)?),
                    _ => (u32_at(&entry, 12)?, u32_at(&entry, 16)?),
                };
                frames.push(GoFrame {
                    function: self.name(nameoff)?,
                    file: self.file(&f, at),
                    line: self.line(&f, at),
                });
                // The caller's instruction placed at the inlined call.
                at = f.entry + u64::from(parent_pc);
            }
        }
        frames.push(GoFrame {
            function: name,
            file: self.file(&f, at),
            line: self.line(&f, at),
        });
        Some(frames)
    }
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        d.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        d.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// An unsigned LEB128 value (at most 32 bits, as Go writes them) and its length.
fn uvarint(d: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in d.iter().enumerate().take(5) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
#[path = "pclntab_tests.rs"]
mod tests;
