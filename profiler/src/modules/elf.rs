//! Opening the ELF file behind a process's mapping without trusting it, and reading what the
//! registry needs from it: identity (build id, device and inode), load segments, and the
//! call frame information sections. Only the headers and those sections are read.

use std::{
    fs::File,
    io,
    os::unix::fs::{MetadataExt, OpenOptionsExt},
    path::Path,
};

use object::{Object, ObjectSection, ObjectSegment, ReadCache};

use crate::untrusted::{self, MAX_ELF_BYTES, Refusal, Rules};

use super::cfi::{CfiSections, Section};

/// Largest CFI section read into memory.
const MAX_SECTION_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("open({path}): {source}")]
    Open { path: String, source: io::Error },
    #[error("{path}: {source}")]
    Refused { path: String, source: Refusal },
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
    pub segments: Vec<Segment>,
    pub cfi: CfiSections,
}

/// Opens `path` (a `/proc/PID/map_files/` entry, a magic link the kernel resolves to the
/// mapped file itself) without blocking on a FIFO or device, and checks with
/// [`untrusted::check`] that it is a regular file of bounded size, and the mapped one
/// (`identity`: device and inode as the maps show them).
pub fn open_untrusted(
    path: &Path,
    identity: Option<(u64, u64)>,
) -> Result<(File, std::fs::Metadata), ElfError> {
    let name = || path.display().to_string();
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|source| ElfError::Open {
            path: name(),
            source,
        })?;
    let rules = Rules {
        max_bytes: MAX_ELF_BYTES,
        owner: None,
        identity,
    };
    let refused = |source| ElfError::Refused {
        path: name(),
        source,
    };
    untrusted::check(&file, &rules).map_err(refused)?;
    let meta = file.metadata().map_err(|e| {
        refused(Refusal::Io {
            call: "fstat",
            source: e,
        })
    })?;
    Ok((file, meta))
}

/// Reads identity, segments and CFI of an opened ELF file.
pub fn read(file: File, meta: &std::fs::Metadata, path: &str) -> Result<ElfInfo, ElfError> {
    let cache = ReadCache::new(file);
    let parse = |source| ElfError::Parse {
        path: path.to_string(),
        source,
    };
    let elf = object::File::parse(&cache).map_err(parse)?;
    let mut info = parse_object(&elf);
    info.dev = meta.dev();
    info.ino = meta.ino();
    Ok(info)
}

/// Reads an ELF image that is in memory (the vDSO).
pub fn read_bytes(data: &[u8]) -> Result<ElfInfo, ElfError> {
    let elf = object::File::parse(data).map_err(|source| ElfError::Parse {
        path: "[vdso]".into(),
        source,
    })?;
    Ok(parse_object(&elf))
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
    ElfInfo {
        build_id: elf.build_id().ok().flatten().map(<[u8]>::to_vec),
        dev: 0,
        ino: 0,
        segments,
        cfi: CfiSections {
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            debug_frame: section(".debug_frame"),
            text_addr: addr(".text"),
            got_addr: addr(".got"),
        },
    }
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
