//! Naming Go code from the binary's own function table (see [`pclntab`]) where no symbol
//! table does: Go binaries linked with `-s -w` (the way release and container builds ship)
//! keep `.gopclntab`, which the Go runtime needs for its own tracebacks.

mod pclntab;

use std::{fs::File, os::unix::fs::FileExt, sync::Arc};

use object::{Object, ObjectSection, ObjectSegment, ReadCache, SegmentFlags};
use profiler_formats::ReadAt;

use pclntab::Image;
pub use pclntab::{Layout, Pclntab, PclntabError};

use super::{Frame, FrameKind};

/// Largest function table read (Go's own, for a 200 MB binary, is about 40 MB).
const MAX_TABLE_BYTES: u64 = 256 << 20;
/// Largest data segment searched for the module data (the inline trees' base).
const MAX_DATA_BYTES: u64 = 64 << 20;

/// The Go table of one binary, with what its inline trees need.
pub struct GoTable {
    table: Pclntab,
    file: Arc<File>,
    /// (vaddr, file offset, size in the file) of each load segment.
    segments: Vec<(u64, u64, u64)>,
    gofunc: Option<u64>,
}

impl Image for GoTable {
    fn read(&self, vaddr: u64, len: usize) -> Option<Vec<u8>> {
        let &(v, off, _) = self
            .segments
            .iter()
            .find(|&&(v, _, size)| vaddr >= v && vaddr + len as u64 <= v + size)?;
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, off + (vaddr - v)).ok()?;
        Some(buf)
    }

    fn gofunc(&self) -> Option<u64> {
        self.gofunc
    }
}

impl GoTable {
    /// The Go table of `file`: `Ok(None)` for a binary that has none (not Go, or Go
    /// older than 1.16's layout is not told apart from that: both get no Go names).
    pub fn read(file: &Arc<File>) -> Result<Option<Self>, PclntabError> {
        let cache = ReadCache::new(ReadAt::new(file.as_ref()));
        let Ok(elf) = object::File::parse(&cache) else {
            return Ok(None);
        };
        let segments: Vec<(u64, u64, u64)> = elf
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (s.address(), off, size)
            })
            .collect();
        let text = elf.section_by_name(".text").map(|s| s.address());
        let section = elf
            .section_by_name(".gopclntab")
            .or_else(|| elf.section_by_name(".data.rel.ro.gopclntab"));
        let (vaddr, data) = match section {
            Some(s) if s.size() <= MAX_TABLE_BYTES => match s.data() {
                Ok(d) => (s.address(), d.to_vec()),
                Err(_) => return Err(PclntabError::Corrupt("its section cannot be read")),
            },
            Some(_) => return Err(PclntabError::Corrupt("larger than 256 MiB")),
            // No section for it (PIE, or no section headers at all): search the read-only
            // segments for the header, in a file that says it is Go or says nothing (a
            // stripped C library's misses must not read its whole data each batch).
            None if is_go(&elf) || elf.sections().next().is_none() => {
                match find_in_segments(file, &elf) {
                    Some(found) => found,
                    None => return Ok(None),
                }
            }
            None => return Ok(None),
        };
        let table = Pclntab::parse(data, vaddr, text)?;
        let mut go = Self {
            table,
            file: file.clone(),
            segments,
            gofunc: None,
        };
        if go.table.layout() != Layout::Go116 {
            go.gofunc = go.find_gofunc(&elf, vaddr);
        }
        Ok(Some(go))
    }

    /// `moduledata.gofunc`: the module data is the data word that points at the table,
    /// checked by the two slices after it (the function names and the compile units).
    fn find_gofunc<'d, O: Object<'d>>(&self, elf: &O, pclntab: u64) -> Option<u64> {
        let index = match self.table.layout() {
            Layout::Go116 => return None,
            Layout::Go118 => 38,
            Layout::Go120 => 40,
        };
        let header = self.read(pclntab, 72)?;
        let word = |d: &[u8], i: usize| {
            d.get(8 * i..8 * i + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        let (funcname, cu) = (word(&header, 4)?, word(&header, 5)?);
        for seg in elf.segments() {
            let writable = matches!(seg.flags(), SegmentFlags::Elf { p_flags } if p_flags & 2 != 0);
            let (off, size) = seg.file_range();
            if !writable || size == 0 || size > MAX_DATA_BYTES {
                continue;
            }
            let mut data = vec![0; size as usize];
            self.file.read_exact_at(&mut data, off).ok()?;
            for at in (0..data.len().saturating_sub(8 * (index + 1))).step_by(8) {
                let m = &data[at..];
                if word(m, 0) == Some(pclntab)
                    && word(m, 1) == Some(pclntab + funcname)
                    && word(m, 4) == Some(pclntab + cu)
                {
                    return word(m, index).filter(|&g| read_only(elf, g));
                }
            }
        }
        None
    }

    /// The virtual address of file offset `offset`, through the load segment holding it.
    pub fn vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(_, off, size)| offset >= off && offset < off + size)
            .map(|&(v, off, _)| v + (offset - off))
    }

    /// Bytes between the stack pointer and the return address at `pc`: 0 where the
    /// function has no frame (so the word at the stack pointer returns into its caller).
    pub fn frame_size(&self, pc: u64) -> Option<u32> {
        self.table.frame_size(pc)
    }

    /// The entry address (virtual) of the function called `name`.
    pub fn entry_of(&self, name: &str) -> Option<u64> {
        self.table.entry_of(name)
    }

    /// `len` bytes of the file at virtual address `vaddr` (code or read-only data).
    pub fn bytes_at(&self, vaddr: u64, len: usize) -> Option<Vec<u8>> {
        Image::read(self, vaddr, len)
    }

    /// The function holding virtual address `pc`, without what is inlined at it.
    pub fn function(&self, pc: u64) -> Option<String> {
        self.table.frames(pc, self)?.pop().map(|f| f.function)
    }

    /// The frames of virtual address `pc`, as [`Frame`]s in call order (the function, then
    /// what was inlined into it), or `None` when the table does not name it.
    pub fn frames(
        &self,
        pc: u64,
        module: &Arc<str>,
        path: Option<&Arc<str>>,
    ) -> Option<Arc<[Frame]>> {
        let mut go = self.table.frames(pc, self)?;
        go.reverse();
        Some(
            go.into_iter()
                .enumerate()
                .map(|(i, f)| Frame {
                    function: Arc::from(f.function),
                    module: Some(module.clone()),
                    path: path.cloned(),
                    file: f.file.map(Arc::from),
                    line: f.line,
                    kind: FrameKind::User,
                    inlined: i > 0,
                    offset: None,
                })
                .collect(),
        )
    }
}

/// A Go build's own marks: its build information, or its build id note.
fn is_go<'d, O: Object<'d>>(elf: &O) -> bool {
    elf.section_by_name(".go.buildinfo").is_some()
        || elf.section_by_name(".note.go.buildid").is_some()
}

/// True if `vaddr` is in a load segment that is neither writable nor executable, as Go's
/// funcdata (`go:func.*`) is: a wrong word taken for `gofunc` is refused, not followed.
fn read_only<'d, O: Object<'d>>(elf: &O, vaddr: u64) -> bool {
    elf.segments().any(|s| {
        let (_, size) = s.file_range();
        matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & 3 == 0)
            && vaddr >= s.address()
            && vaddr < s.address() + size
    })
}

/// (vaddr, bytes from there to the segment's end) of a Go table header found in a
/// read-only segment: 8-aligned, a known magic, then `00 00 quantum 08`.
fn find_in_segments<'d, O: Object<'d>>(file: &File, elf: &O) -> Option<(u64, Vec<u8>)> {
    for seg in elf.segments() {
        let flags = match seg.flags() {
            SegmentFlags::Elf { p_flags } => p_flags,
            _ => continue,
        };
        let (off, size) = seg.file_range();
        if flags & 3 != 0 || size == 0 || size > MAX_TABLE_BYTES {
            continue; // executable or writable
        }
        let mut data = vec![0; size as usize];
        file.read_exact_at(&mut data, off).ok()?;
        let found = (0..data.len().saturating_sub(8)).step_by(8).find(|&at| {
            let h = &data[at..at + 8];
            Layout::of_magic(u32::from_le_bytes(h[..4].try_into().unwrap())).is_some()
                && h[4] == 0
                && h[5] == 0
                && matches!(h[6], 1 | 2 | 4)
                && h[7] == 8
        });
        if let Some(at) = found {
            return Some((seg.address() + at as u64, data.split_off(at)));
        }
    }
    None
}
