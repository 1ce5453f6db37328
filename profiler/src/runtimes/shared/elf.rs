//! The ELF file behind a runtime's mapping (an interpreter, libnode), opened through the
//! project's table of opened files and parsed with `object`: what every runtime's
//! detection starts with, and the errors every runtime's detection shares.

use object::{
    Object, ObjectSegment, ObjectSymbol, ReadCache, ReadRef, SymbolKind,
    read::{
        StringTable,
        elf::{ElfFile, FileHeader, SectionHeader, Sym, SymbolTable},
    },
};

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

/// One symbol of a file's symbol tables, as runtimes' detection looks them up.
#[derive(Clone, Copy, Debug)]
pub struct ElfSym<'d> {
    pub name: &'d [u8],
    pub address: u64,
    pub size: u64,
    /// Defined in this file (not an import).
    pub defined: bool,
    /// A thread-local symbol: its address is an offset in the TLS block.
    pub tls: bool,
}

/// Visits every symbol of `obj`'s `.symtab`, or of its `.dynsym` when it has none (`data`:
/// the bytes `obj` was parsed from). The table's string section is read in one piece: through a
/// `ReadCache` each name is a read and an allocation of its own, and node's 235,000 symbols
/// took 1.4 s of a debug build (0.15 s of a release one) on the reader's thread, while the
/// stacks of its first second waited in the ring.
pub fn for_each_symbol<'d, R: ReadRef<'d>>(
    obj: &object::File<'d, R>,
    data: R,
    mut visit: impl FnMut(ElfSym<'d>),
) {
    match obj {
        object::File::Elf64(elf) => elf_symbols(elf, data, &mut visit),
        object::File::Elf32(elf) => elf_symbols(elf, data, &mut visit),
        // Not ELF (no runtime's file is): the same table rule through `object`'s iterators.
        _ => {
            let symtab = obj.symbols().next().is_some();
            let table = if symtab {
                obj.symbols()
            } else {
                obj.dynamic_symbols()
            };
            for sym in table {
                if let Ok(name) = sym.name_bytes() {
                    visit(ElfSym {
                        name,
                        address: sym.address(),
                        size: sym.size(),
                        defined: !sym.is_undefined(),
                        tls: sym.kind() == SymbolKind::Tls,
                    });
                }
            }
        }
    }
}

/// The first defined symbol of each name in `wanted`, in one pass of [`for_each_symbol`]
/// (a runtime's detection looks up a handful of names).
pub fn find_symbols<'d, R: ReadRef<'d>>(
    obj: &object::File<'d, R>,
    data: R,
    wanted: &[&str],
) -> Vec<ElfSym<'d>> {
    let mut found: Vec<ElfSym<'d>> = Vec::new();
    for_each_symbol(obj, data, |sym| {
        if sym.defined
            && wanted.iter().any(|w| w.as_bytes() == sym.name)
            && !found.iter().any(|f| f.name == sym.name)
        {
            found.push(sym);
        }
    });
    found
}

fn elf_symbols<'d, Elf: FileHeader, R: ReadRef<'d>>(
    elf: &ElfFile<'d, Elf, R>,
    data: R,
    visit: &mut impl FnMut(ElfSym<'d>),
) {
    // .symtab holds every symbol of .dynsym too; a stripped file has .dynsym alone.
    let table = match elf.elf_symbol_table() {
        t if t.is_empty() => elf.elf_dynamic_symbol_table(),
        t => t,
    };
    table_symbols(elf, table, data, visit);
}

fn table_symbols<'d, Elf: FileHeader, R: ReadRef<'d>>(
    elf: &ElfFile<'d, Elf, R>,
    table: &SymbolTable<'d, Elf, R>,
    data: R,
    visit: &mut impl FnMut(ElfSym<'d>),
) {
    if table.is_empty() {
        return;
    }
    let endian = elf.endian();
    let Ok(section) = elf.elf_section_table().section(table.string_section()) else {
        return;
    };
    let Ok(bytes) = section.data(endian, data) else {
        return;
    };
    let strings = StringTable::new(bytes, 0, bytes.len() as u64);
    // Index 0 is the null symbol.
    for sym in table.symbols().iter().skip(1) {
        let Ok(name) = sym.name(endian, strings) else {
            continue;
        };
        visit(ElfSym {
            name,
            address: sym.st_value(endian).into(),
            size: sym.st_size(endian).into(),
            defined: !sym.is_undefined(endian),
            tls: sym.st_type() == object::elf::STT_TLS,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `for_each_symbol` visits is what `object` itself iterates: the test binary's
    /// `.symtab`, and libc's `.dynsym` (Debian strips its `.symtab`).
    #[test]
    fn symbols_read_in_one_piece_are_the_tables_symbols() {
        let exe = std::env::current_exe().unwrap();
        for path in [exe.to_str().unwrap(), "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
            let Ok(file) = std::fs::File::open(path) else {
                continue;
            };
            let cache = ReadCache::new(crate::modules::ReadAt::new(&file));
            let obj = object::File::parse(&cache).unwrap();
            let mut ours = Vec::new();
            for_each_symbol(&obj, &cache, |s| {
                ours.push((s.name.to_vec(), s.address, s.size, s.defined, s.tls));
            });
            let table: Vec<_> = match obj.symbols().next() {
                Some(_) => obj.symbols().collect(),
                None => obj.dynamic_symbols().collect(),
            };
            let theirs: Vec<_> = table
                .iter()
                .filter_map(|s| {
                    Some((
                        s.name_bytes().ok()?.to_vec(),
                        s.address(),
                        s.size(),
                        !s.is_undefined(),
                        s.kind() == SymbolKind::Tls,
                    ))
                })
                .collect();
            assert!(theirs.len() > 100, "{path}: {} symbols", theirs.len());
            assert_eq!(ours, theirs, "{path}");
        }
    }
}
