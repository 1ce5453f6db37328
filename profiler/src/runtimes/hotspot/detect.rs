//! Finding HotSpot in a process: libjvm among its executable mappings, the exported VMStructs
//! symbols in its `.dynsym` (with the load bias), and the tables, version and layout read
//! from the live process.

use object::{Object, ObjectSymbol};

use super::{
    layout::{Layout, Unsupported},
    version::{JvmVersion, read_version},
    vmstructs::{ENTRY_WORDS, Exports, ReadTablesError, TABLES, TablesError, VmStructs},
};
use crate::{
    modules::Mapping,
    runtimes::shared::{
        elf::{ElfError, load_bias, process_mappings, with_elf},
        error::DetectError,
        memory::{Memory, ProcessMemory},
    },
};

/// Why a JVM is not walked: its tables, or its layout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotWalked {
    #[error(transparent)]
    Tables(#[from] TablesError),
    #[error(transparent)]
    Layout(#[from] Unsupported),
}

/// What [`detect`] found in a process.
#[derive(Debug)]
pub enum Detection {
    /// A HotSpot whose frames can be walked and named.
    Found {
        path: String,
        version: JvmVersion,
        layout: Box<Layout>,
    },
    /// A HotSpot we do not walk, and why (one line).
    Unsupported { path: String, reason: NotWalked },
    /// A HotSpot whose tables are not filled yet (libjvm's initialisers have not run): to
    /// be looked at again.
    NotReady,
    /// No HotSpot in this process.
    NotJvm,
}

/// Looks for HotSpot in the process `pid`.
pub fn detect(pid: u32) -> Result<Detection, DetectError> {
    detect_in(pid, &process_mappings(pid)?, &ProcessMemory::new(pid))
}

/// Looks for HotSpot in the process `pid` with these executable mappings, reading its
/// memory through `mem`.
pub fn detect_in<M: Memory + ?Sized>(
    pid: u32,
    maps: &[Mapping],
    mem: &M,
) -> Result<Detection, DetectError> {
    let Some(mapping) = libjvm_mapping(maps) else {
        return Ok(Detection::NotJvm);
    };
    let path = mapping.name.to_string();
    let exports = with_elf(pid, &mapping, |obj, _| exports(obj, &mapping))?.ok_or_else(|| {
        ElfError::NoSegment {
            path: path.clone(),
            offset: mapping.offset,
        }
    })?;
    let read_err = |source| DetectError::Read {
        pid,
        path: path.clone(),
        what: "VMStructs",
        source,
    };
    let unsupported = |reason: NotWalked| Detection::Unsupported {
        path: path.clone(),
        reason,
    };
    let tables = match VmStructs::read(mem, &exports) {
        Ok(t) => t,
        Err(ReadTablesError::Read(e)) => return Err(read_err(e)),
        Err(ReadTablesError::Tables(TablesError::NotFilled(_))) => return Ok(Detection::NotReady),
        Err(ReadTablesError::Tables(e)) => return Ok(unsupported(e.into())),
    };
    let Some(version) = read_version(mem, &tables).map_err(read_err)? else {
        let reason = Unsupported::Missing {
            version: "(version unknown)".into(),
            what: "Abstract_VM_Version::_vm_major_version".into(),
        };
        return Ok(unsupported(reason.into()));
    };
    Ok(match Layout::from_tables(&tables, version.clone()) {
        Ok(layout) => Detection::Found {
            path,
            version,
            layout: Box::new(layout),
        },
        Err(e) => unsupported(e.into()),
    })
}

/// The mapping of `libjvm.so` (HotSpot is always this shared library, loaded by the `java`
/// launcher or by an embedding program).
pub fn libjvm_mapping(maps: &[Mapping]) -> Option<Mapping> {
    maps.iter()
        .find(|m| m.name.rsplit('/').next() == Some("libjvm.so"))
        .cloned()
}

/// The runtime addresses of the exported table symbols; `None` when the mapping's offset is
/// in no load segment.
fn exports<'d, O: Object<'d>>(obj: &O, mapping: &Mapping) -> Option<Exports> {
    let bias = load_bias(obj, mapping)?;
    let mut out = Exports::default();
    for sym in obj.dynamic_symbols() {
        let Ok(name) = sym.name() else { continue };
        if sym.is_undefined() {
            continue;
        }
        if let Some(&wanted) = TABLES
            .iter()
            .chain(ENTRY_WORDS.iter())
            .find(|w| **w == name)
        {
            out.0.insert(wanted, sym.address().wrapping_add(bias));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::parse_maps;

    #[test]
    fn picks_libjvm() {
        let maps = parse_maps(
            "55d0c0a00000-55d0c0a01000 r-xp 00001000 08:01 10 /usr/lib/jvm/java-17-openjdk-amd64/bin/java\n\
             7f0000000000-7f0000100000 r-xp 00200000 08:01 11 /usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so\n\
             7f0000200000-7f0000300000 r-xp 00000000 08:01 13 /usr/lib/libc.so.6\n",
        );
        let m = libjvm_mapping(&maps).expect("libjvm");
        assert!(m.name.ends_with("/server/libjvm.so"));
        let maps = parse_maps(
            "7f0000000000-7f0000100000 r-xp 00000000 08:01 11 /opt/libjvm.so.bak\n\
             7f0000200000-7f0000300000 r-xp 00000000 08:01 13 /usr/lib/libc.so.6\n",
        );
        assert!(libjvm_mapping(&maps).is_none());
    }

    /// Debian's JDK 17 libjvm (when installed) exports all 24 symbols in `.dynsym`.
    #[test]
    fn libjvm_exports_every_table_symbol() {
        let path = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
        let Ok(file) = std::fs::File::open(path) else {
            eprintln!("skipped: no {path}");
            return;
        };
        let cache = object::ReadCache::new(&file);
        let obj = object::File::parse(&cache).expect("libjvm is an ELF file");
        let text = obj
            .segments()
            .find(|s| object::ObjectSegment::flags(s) == object::SegmentFlags::Elf { p_flags: 5 })
            .expect("an r-x segment");
        let (offset, _) = object::ObjectSegment::file_range(&text);
        let mapping = Mapping {
            start: 0x7f00_0000_0000 + (object::ObjectSegment::address(&text) & !0xfff),
            end: 0x7f00_1000_0000,
            offset: offset & !0xfff,
            dev: 1,
            ino: 1,
            name: path.into(),
        };
        let e = exports(&obj, &mapping).expect("bias");
        assert_eq!(e.0.len(), 24, "{:?}", e.0.keys());
        // Loaded at 0x7f00_0000_0000: every address moves by exactly that.
        let in_file = obj
            .dynamic_symbols()
            .find(|s| s.name() == Ok("gHotSpotVMStructs"))
            .expect("symbol")
            .address();
        assert_eq!(e.0["gHotSpotVMStructs"], 0x7f00_0000_0000 + in_file);
    }
}
