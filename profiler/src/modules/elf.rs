//! Reading what the registry needs from the ELF file behind a process's mapping (opened and
//! checked by the file table): identity (build id, device and inode), load segments, and the
//! call frame information sections. Only the headers and those sections are read.

use std::{fs::File, io, os::unix::fs::MetadataExt};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ReadCache};
use profiler_formats::ReadAt;

use super::cfi::{Arch, CfiSections, Section};

/// Largest CFI section read into memory.
const MAX_SECTION_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("fstat({path}): {source}")]
    Stat { path: String, source: io::Error },
    #[error("{path}: not an ELF file we can read: {source}")]
    Parse {
        path: String,
        source: object::read::Error,
    },
}

/// A load segment: file bytes `[offset, offset + filesz)` at `[vaddr, vaddr + filesz)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    /// PF_X: the segment holds code.
    pub exec: bool,
}

/// What the registry keeps of one ELF file.
#[derive(Debug, Default)]
pub struct ElfInfo {
    pub build_id: Option<Vec<u8>>,
    pub dev: u64,
    pub ino: u64,
    /// Size and modification time of the file as opened (part of its identity).
    pub size: u64,
    pub mtime_ns: i128,
    pub segments: Vec<Segment>,
    pub cfi: CfiSections,
}

/// Reads identity, segments and CFI of an opened ELF file.
/// (The file table opened and checked it; reads go through its descriptor, each at an
/// explicit position, so sharing it with the symbolizer is safe.)
pub fn read(file: &File, path: &str) -> Result<ElfInfo, ElfError> {
    let meta = file.metadata().map_err(|source| ElfError::Stat {
        path: path.to_string(),
        source,
    })?;
    let cache = ReadCache::new(ReadAt::new(file));
    let parse = |source| ElfError::Parse {
        path: path.to_string(),
        source,
    };
    let elf = object::File::parse(&cache).map_err(parse)?;
    let mut info = parse_object(&elf);
    info.dev = meta.dev();
    info.ino = meta.ino();
    info.size = meta.size();
    info.mtime_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
    Ok(info)
}

fn parse_object<'data, O: Object<'data>>(elf: &O) -> ElfInfo {
    let segments = elf
        .segments()
        .map(|s| {
            let (offset, filesz) = s.file_range();
            let exec =
                matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & 1 != 0);
            Segment {
                vaddr: s.address(),
                offset,
                filesz,
                exec,
            }
        })
        .collect();
    let section = |name: &str| {
        let s = elf.section_by_name(name)?;
        if s.size() > MAX_SECTION_BYTES {
            return None;
        }
        Some(Section {
            addr: s.address(),
            data: s.data().ok()?.to_vec(),
        })
    };
    let addr = |name: &str| elf.section_by_name(name).map_or(0, |s| s.address());
    let arch = match elf.architecture() {
        object::Architecture::Aarch64 => Arch::Aarch64,
        _ => Arch::X86_64,
    };
    ElfInfo {
        build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
        dev: 0,
        ino: 0,
        size: 0,
        mtime_ns: 0,
        segments,
        cfi: CfiSections {
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            debug_frame: section(".debug_frame"),
            text_addr: addr(".text"),
            got_addr: addr(".got"),
            arch,
            plt: elf
                .section_by_name(".plt")
                .map(|s| (s.address(), s.address() + s.size())),
            signal_trampoline: (arch == Arch::Aarch64)
                .then(|| aarch64_sigreturn(elf))
                .flatten(),
            go: elf.section_by_name(".gopclntab").is_some()
                || elf.section_by_name(".go.buildinfo").is_some(),
            gopclntab: section(".gopclntab").or_else(|| section(".data.rel.ro.gopclntab")),
        },
    }
}

/// The arm64 vDSO's `__kernel_rt_sigreturn` (`mov x8, #139; svc #0`) with the `nop` before
/// it, which the kernel's CFI (where there is any) covers too.
fn aarch64_sigreturn<'data, O: Object<'data>>(elf: &O) -> Option<(u64, u64)> {
    let sym = elf
        .dynamic_symbols()
        .chain(elf.symbols())
        .find(|s| s.name() == Ok("__kernel_rt_sigreturn"))?;
    Some((sym.address().checked_sub(4)?, sym.address() + 8))
}

impl ElfInfo {
    /// The virtual address file offset `offset` (a mapping's, so page aligned) is loaded at:
    /// through the executable load segment whose pages hold it, else any load segment.
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        let holds = |s: &&Segment| offset >= s.offset & !0xfff && offset < s.offset + s.filesz;
        let seg = self
            .segments
            .iter()
            .filter(holds)
            .find(|s| s.exec)
            .or_else(|| self.segments.iter().find(holds))?;
        Some(seg.vaddr.wrapping_add(offset).wrapping_sub(seg.offset))
    }

    /// The file offset of virtual address `vaddr`, if a load segment holds it.
    pub fn offset_of_vaddr(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz)
            .map(|s| s.offset + (vaddr - s.vaddr))
    }
}
