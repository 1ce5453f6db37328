//! Names for PLT stubs. A call into another library goes through a 16-byte stub in `.plt`
//! (or `.plt.sec` when the file is built for IBT); no symbol table covers the stubs, so a
//! symbolizer gives them the name of whatever symbol precedes the section (`_init`). The
//! stubs are in the order of the `.rela.plt` relocations, each naming the dynamic symbol it
//! jumps to: stub `i` is `name@plt`, as perf names it. `.plt.got` holds stubs for functions
//! whose GOT slot is also used directly (`__cxa_finalize`): each is a `jmp *slot(%rip)`, and the
//! `.rela.dyn` relocation of that slot names it. aarch64 is laid out the same way, with a
//! 32-byte header (lazy binding's entry) before 16-byte stubs and its own relocation types.

use std::{fs::File, sync::Arc};

use crate::modules::ReadAt;
use object::{
    Endianness, ReadCache, ReadRef,
    elf::{
        EM_AARCH64, R_AARCH64_IRELATIVE, R_AARCH64_JUMP_SLOT, R_X86_64_GLOB_DAT,
        R_X86_64_IRELATIVE, R_X86_64_JUMP_SLOT, SHT_DYNSYM,
    },
    read::elf::{ElfFile64, FileHeader, Rela, SectionHeader, Sym},
};

/// Size of one PLT stub (x86-64 and aarch64 alike).
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
        // `.plt`'s header, and the relocation types of a stub's slot and of an ifunc's.
        let (header, jump_slot, irelative) = if elf.elf_header().e_machine(endian) == EM_AARCH64 {
            (32, R_AARCH64_JUMP_SLOT, R_AARCH64_IRELATIVE)
        } else {
            (STUB, R_X86_64_JUMP_SLOT, R_X86_64_IRELATIVE)
        };
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
        let plt_got = by_name(".plt.got");
        let mut out = PltStubs {
            sections: [plt, plt_sec, plt_got]
                .into_iter()
                .flatten()
                .map(range)
                .collect(),
            stubs: Vec::new(),
        };
        // With `.plt.sec` the stubs there are in relocation order; otherwise `.plt` starts
        // with the resolver's own 16 bytes, then one stub per relocation.
        let dynsym = sections.symbols(endian, data, SHT_DYNSYM).ok()?;
        let symbol_name = |index: u32| {
            dynsym
                .symbol(object::SymbolIndex(index as usize))
                .ok()
                .and_then(|s| s.name(endian, dynsym.strings()).ok())
                .filter(|n| !n.is_empty())
                .map(|n| format!("{}@plt", String::from_utf8_lossy(n)))
        };
        if let Some(got) = plt_got {
            out.stubs
                .extend(plt_got_stubs(data, endian, sections, got, &symbol_name));
        }
        let first = match (plt_sec, plt) {
            (Some(sec), _) => range(sec).0,
            (None, Some(plt)) => range(plt).0 + header,
            (None, None) => {
                out.stubs.sort_by_key(|s| s.0);
                return Some(out);
            }
        };
        let end = match (plt_sec, plt) {
            (Some(sec), _) => range(sec).1,
            (_, Some(plt)) => range(plt).1,
            _ => 0,
        };
        let Some(rela_plt) = by_name(".rela.plt") else {
            out.stubs.sort_by_key(|s| s.0);
            return Some(out);
        };
        let (relas, _) = rela_plt.rela(endian, data).ok()??;
        for (i, rela) in relas.iter().enumerate() {
            let at = first + i as u64 * STUB;
            if at + STUB > end {
                break;
            }
            let kind = rela.r_type(endian, false);
            let name = if kind == jump_slot {
                symbol_name(rela.r_sym(endian, false))
            } else if kind == irelative {
                // An ifunc resolved at load time: the stub jumps to whichever was chosen.
                Some(format!("*ABS*+{:#x}@plt", rela.r_addend(endian)))
            } else {
                None
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

    /// The name of the stub holding `offset`; `None` in `.plt`'s header (the resolver's
    /// entry) or in a stub whose jump names no symbol.
    pub fn name(&self, offset: u64) -> Option<Arc<str>> {
        let i = self.stubs.partition_point(|s| s.0 <= offset);
        let (at, name) = self.stubs.get(i.checked_sub(1)?)?;
        // A `.plt.got` stub is 8 bytes (16 with IBT), never more than a `.plt` one.
        (offset < at + STUB).then(|| name.clone())
    }
}

type SectionTable<'d, R> =
    object::read::elf::SectionTable<'d, object::elf::FileHeader64<Endianness>, R>;

/// The stubs of `.plt.got`, by file offset: each is `jmp *disp32(%rip)` (`ff 25`, after an
/// optional `endbr64` and `bnd` prefix), whose target is a GOT slot that a `GLOB_DAT`
/// relocation of `.rela.dyn` names.
fn plt_got_stubs<'d, R: ReadRef<'d>>(
    data: R,
    endian: Endianness,
    sections: &SectionTable<'d, R>,
    got: &<object::elf::FileHeader64<Endianness> as FileHeader>::SectionHeader,
    symbol_name: &dyn Fn(u32) -> Option<String>,
) -> Vec<(u64, Arc<str>)> {
    let (offset, addr) = (got.sh_offset(endian), got.sh_addr(endian));
    let Ok(bytes) = got.data(endian, data) else {
        return Vec::new();
    };
    // GOT slot (virtual address) -> symbol, from every RELA section's GLOB_DAT entries.
    let mut slots = std::collections::HashMap::new();
    for section in sections.iter() {
        if let Ok(Some((relas, _))) = section.rela(endian, data) {
            for rela in relas {
                if rela.r_type(endian, false) == R_X86_64_GLOB_DAT {
                    slots.insert(rela.r_offset(endian), rela.r_sym(endian, false));
                }
            }
        }
    }
    let stride = match got.sh_entsize(endian) {
        8 | 16 => got.sh_entsize(endian) as usize,
        _ => 8,
    };
    let mut out = Vec::new();
    for (i, stub) in bytes.chunks(stride).enumerate() {
        let Some(jmp) = stub.windows(2).position(|w| w == [0xff, 0x25]) else {
            continue;
        };
        let Some(disp) = stub.get(jmp + 2..jmp + 6) else {
            continue;
        };
        let disp = i32::from_le_bytes(disp.try_into().expect("4 bytes")) as i64;
        let next = addr + (i * stride + jmp + 6) as u64;
        let slot = next.wrapping_add_signed(disp);
        if let Some(name) = slots.get(&slot).and_then(|&sym| symbol_name(sym)) {
            out.push((offset + (i * stride) as u64, Arc::from(name)));
        }
    }
    out
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

    /// Debian's arm64 libc (the cross toolchain's package): every stub objdump names, named
    /// the same (objdump reads the same relocations; the stub addresses are what is checked).
    #[test]
    fn aarch64_stubs_match_objdump() {
        let path = "/usr/aarch64-linux-gnu/lib/libc.so.6";
        if !std::path::Path::new(path).exists() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "{path} missing under CI=true (cargo xtask setup installs it)"
            );
            return;
        }
        let out = std::process::Command::new("aarch64-linux-gnu-objdump")
            .args(["-d", "-j", ".plt", path])
            .output()
            .expect("aarch64-linux-gnu-objdump (binutils-aarch64-linux-gnu)");
        let text = String::from_utf8_lossy(&out.stdout);
        // `0000000000027260 <realloc@plt>:`; the header is `<realloc@plt-0x20>`.
        let theirs: Vec<(u64, &str)> = text
            .lines()
            .filter_map(|l| {
                let (addr, rest) = l.split_once(" <")?;
                let name = rest.strip_suffix(">:")?;
                (!name.contains("@plt-"))
                    .then(|| Some((u64::from_str_radix(addr, 16).ok()?, name)))?
            })
            .collect();
        assert!(theirs.len() >= 10, "{theirs:?}");
        let stubs = PltStubs::read(&File::open(path).unwrap());
        // The file's .plt is loaded where it lies in the file (offset = address here).
        for (addr, name) in &theirs {
            assert_eq!(stubs.name(*addr + 8).as_deref(), Some(*name), "{addr:#x}");
        }
        let header = theirs[0].0 - 32;
        assert!(stubs.contains(header));
        assert_eq!(stubs.name(header), None);
    }

    /// Debian's libm calls `__cxa_finalize` through `.plt.got` (an 8-byte `jmp *slot(%rip)`
    /// whose slot a GLOB_DAT relocation names), as most shared libraries built by gcc do.
    #[test]
    fn plt_got_stubs_are_named_by_their_got_slot() {
        use object::{Object, ObjectSection, ObjectSymbol};
        let path = "/lib/x86_64-linux-gnu/libm.so.6";
        let Ok(file) = File::open(path) else {
            return; // not a Debian-like host
        };
        let cache = ReadCache::new(ReadAt::new(&file));
        let elf = ElfFile64::<Endianness, _>::parse(&cache).unwrap();
        let Some(got) = elf.section_by_name(".plt.got") else {
            return;
        };
        let (start, _) = got.file_range().unwrap();
        let stubs = PltStubs::read(&file);
        let name = stubs
            .name(start + 3)
            .expect("the first .plt.got stub is named");
        assert!(name.ends_with("@plt"), "{name}");
        // The name is the symbol the stub's GOT slot holds (objdump calls it the same).
        let base = name.trim_end_matches("@plt");
        assert!(
            elf.dynamic_symbols().any(|s| s.name() == Ok(base)),
            "{base} is a dynamic symbol of {path}"
        );
        assert!(stubs.contains(start));
    }
}
