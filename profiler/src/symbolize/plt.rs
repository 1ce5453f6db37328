//! Names for PLT stubs. A call into another library goes through a 16-byte stub in `.plt`
//! (or `.plt.sec` when the file is built for IBT); no symbol table covers the stubs, so a
//! symbolizer gives them the name of whatever symbol precedes the section (`_init`). The
//! stubs are in the order of the `.rela.plt` relocations, each naming the dynamic symbol it
//! jumps to: stub `i` is `name@plt`, as perf names it.

use std::{fs::File, sync::Arc};

use crate::modules::ReadAt;
use object::{
    Endianness, ReadCache, ReadRef,
    elf::{R_X86_64_IRELATIVE, R_X86_64_JUMP_SLOT, SHT_DYNSYM},
    read::elf::{ElfFile64, FileHeader, Rela, SectionHeader, Sym},
};

/// Size of one PLT stub on x86-64.
const STUB: u64 = 16;

/// The PLT sections of one file and the name of each stub, by file offset.
#[derive(Debug, Default)]
pub struct PltStubs {
    /// File ranges of `.plt`, `.plt.sec` and `.plt.got`.
    sections: Vec<(u64, u64)>,
    /// (file offset of the stub, name), sorted.
    stubs: Vec<(u64, Arc<str>)>,
}

impl PltStubs {
    /// Reads the PLT of an ELF file; a file without one (or not ELF) has no stubs.
    pub fn read(file: &File) -> Self {
        let cache = ReadCache::new(ReadAt::new(file));
        Self::parse(&cache).unwrap_or_default()
    }

    fn parse<'d, R: ReadRef<'d>>(data: R) -> Option<Self> {
        let elf = ElfFile64::<Endianness, R>::parse(data).ok()?;
        let endian = elf.endian();
        let sections = elf.elf_section_table();
        let by_name = |want: &str| {
            sections.iter().find(|s| {
                sections
                    .section_name(endian, s)
                    .is_ok_and(|n| n == want.as_bytes())
            })
        };
        let range = |s: &<object::elf::FileHeader64<Endianness> as FileHeader>::SectionHeader| {
            let start = s.sh_offset(endian);
            (start, start + s.sh_size(endian))
        };
        let plt = by_name(".plt");
        let plt_sec = by_name(".plt.sec");
        let mut out = PltStubs {
            sections: [plt, plt_sec, by_name(".plt.got")]
                .into_iter()
                .flatten()
                .map(range)
                .collect(),
            stubs: Vec::new(),
        };
        // With `.plt.sec` the stubs there are in relocation order; otherwise `.plt` starts
        // with the resolver's own 16 bytes, then one stub per relocation.
        let first = match (plt_sec, plt) {
            (Some(sec), _) => range(sec).0,
            (None, Some(plt)) => range(plt).0 + STUB,
            (None, None) => return Some(out),
        };
        let end = match (plt_sec, plt) {
            (Some(sec), _) => range(sec).1,
            (_, Some(plt)) => range(plt).1,
            _ => 0,
        };
        let dynsym = sections.symbols(endian, data, SHT_DYNSYM).ok()?;
        let rela_plt = by_name(".rela.plt")?;
        let (relas, _) = rela_plt.rela(endian, data).ok()??;
        for (i, rela) in relas.iter().enumerate() {
            let at = first + i as u64 * STUB;
            if at + STUB > end {
                break;
            }
            let name = match rela.r_type(endian, false) {
                R_X86_64_JUMP_SLOT => {
                    let index = rela.r_sym(endian, false);
                    dynsym
                        .symbol(object::SymbolIndex(index as usize))
                        .ok()
                        .and_then(|s| s.name(endian, dynsym.strings()).ok())
                        .map(|n| format!("{}@plt", String::from_utf8_lossy(n)))
                }
                // An ifunc resolved at load time: the stub jumps to whichever was chosen.
                R_X86_64_IRELATIVE => Some(format!("*ABS*+{:#x}@plt", rela.r_addend(endian))),
                _ => None,
            };
            if let Some(name) = name {
                out.stubs.push((at, Arc::from(name)));
            }
        }
        out.stubs.sort_by_key(|s| s.0);
        Some(out)
    }

    /// Whether `offset` is in a PLT section (its name, if any, comes from here, never from
    /// the symbol table).
    pub fn contains(&self, offset: u64) -> bool {
        self.sections
            .iter()
            .any(|&(s, e)| s <= offset && offset < e)
    }

    /// The name of the stub holding `offset`; `None` in a PLT section's header or in
    /// `.plt.got`, whose stubs have no relocation to name them.
    pub fn name(&self, offset: u64) -> Option<Arc<str>> {
        let i = self.stubs.partition_point(|s| s.0 <= offset);
        let (at, name) = self.stubs.get(i.checked_sub(1)?)?;
        (offset < at + STUB).then(|| name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libc our tests run with calls a few of its own functions through its PLT.
    #[test]
    fn libcs_stubs_are_named_by_their_relocations() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(path) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("libc.so"))
        else {
            return; // a static build
        };
        let stubs = PltStubs::read(&File::open(path).unwrap());
        assert!(!stubs.sections.is_empty(), "{path} has a .plt");
        assert!(!stubs.stubs.is_empty(), "{path}: named stubs");
        for (at, name) in &stubs.stubs {
            assert!(stubs.contains(*at), "{name} at {at:#x} in a PLT section");
            assert_eq!(stubs.name(*at + 5).as_deref(), Some(name.as_ref()));
            assert!(name.ends_with("@plt"), "{name}");
        }
        assert_eq!(stubs.name(0), None);
    }
}
