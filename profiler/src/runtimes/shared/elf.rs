//! The ELF file behind a runtime's mapping (an interpreter, libnode), opened through the
//! project's table of opened files and parsed with `object`: what every runtime's
//! detection starts with, and the errors every runtime's detection shares.

use object::{Object, ObjectSegment, ReadCache};

use crate::modules::{ElfFiles, MapEntry, Mapping, ReadAt, exec_mappings};

#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("reading /proc/{pid}/maps: {source}")]
    Maps {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no load segment holds file offset {offset:#x} of its mapping")]
    NoSegment { path: String, offset: u64 },
    #[error("{path} (process {pid}): not opened: {why}")]
    Open { pid: u32, path: String, why: String },
    #[error("{path}: not an ELF file we can read: {source}")]
    Parse {
        path: String,
        #[source]
        source: object::read::Error,
    },
}

/// The executable mappings of process `pid`, where a runtime's detection looks for its file.
pub fn process_mappings(pid: u32) -> Result<Vec<Mapping>, ElfError> {
    exec_mappings(pid).map_err(|source| ElfError::Maps { pid, source })
}

/// Hands the parsed file that `mapping` of process `pid` maps to `inspect`.
pub fn with_elf<T>(
    pid: u32,
    mapping: &Mapping,
    inspect: impl for<'a> FnOnce(
        &object::File<'a, &'a ReadCache<ReadAt<'a>>>,
        &'a ReadCache<ReadAt<'a>>,
    ) -> T,
) -> Result<T, ElfError> {
    let path = mapping.name.to_string();
    let mut files = ElfFiles::default();
    let read = files.read_once(pid, &MapEntry::from(mapping.clone()), |elf| {
        let cache = ReadCache::new(ReadAt::new(&elf.file));
        let obj = object::File::parse(&cache).map_err(|source| ElfError::Parse {
            path: path.clone(),
            source,
        })?;
        Ok(inspect(&obj, &cache))
    });
    read.unwrap_or_else(|| {
        let why = files.take_refusals().join("; ");
        Err(ElfError::Open {
            pid,
            path,
            why: if why.is_empty() {
                "not found".into()
            } else {
                why
            },
        })
    })
}

/// Runtime address minus virtual address of the file `mapping` maps, from the load segment
/// holding the mapping's file offset; `None` when no segment holds it.
pub fn load_bias<'d, O: Object<'d>>(obj: &O, mapping: &Mapping) -> Option<u64> {
    obj.segments().find_map(|s| {
        let (offset, size) = s.file_range();
        let holds = mapping.offset >= offset & !0xfff && mapping.offset < offset + size;
        holds.then(|| {
            mapping
                .start
                .wrapping_sub(mapping.offset)
                .wrapping_sub(s.address().wrapping_sub(offset))
        })
    })
}
