//! Finding CRuby in a process: the ELF that holds the VM (a shared `libruby`, or a static
//! `ruby` executable), its version (`ruby_version`), the code range a native walk hands over
//! at (`rb_vm_exec`), how the running thread's execution context (EC) is reached, and the
//! VM's symbol table (for C method names).
//!
//! The EC, in the order tried:
//! - `ruby_current_ec` (3.0+), a `__thread` variable. A shared libruby is built with the
//!   general-dynamic TLS model: `R_X86_64_DTPMOD64` and `R_X86_64_DTPOFF64` relocations
//!   against the symbol, the module id written by the dynamic linker into the first's GOT
//!   slot (read from the process: 0 means not relocated yet, and the process is looked at
//!   again later), the offset in the module's block the symbol's value plus the second's
//!   addend. An initial-exec (`R_X86_64_TPOFF64`) slot holds the offset from the thread
//!   pointer instead. In an executable (module 1 in glibc) the symbol's value is the offset.
//! - `ruby_single_main_ractor` (3.0+): the main ractor's running EC (the GVL holder's).
//! - `ruby_current_execution_context_ptr` (2.x): the GVL holder's EC.

use std::{ops::Range, sync::Arc};

use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, ReadRef, RelocationFlags,
    RelocationTarget,
};
use profiler_common::ruby::{EC_GLOBAL, EC_MAIN_RACTOR, EC_TLS_DTV, EC_TLS_TPOFF, RubyProc};

use super::{
    layout::{GLOBAL_SYMBOLS_NAMES, Layout, Version, for_version},
    symbol_table,
};
use crate::{
    modules::Mapping,
    runtimes::shared::{
        self,
        elf::{ElfError, find_symbols, load_bias, process_mappings, with_elf},
        memory::{Memory, ProcessMemory},
    },
};

const R_X86_64_DTPMOD64: u32 = 16;
const R_X86_64_DTPOFF64: u32 = 17;
const R_X86_64_TPOFF64: u32 = 18;

/// glibc x86-64: `tcbhead_t.dtv` at `tp + 8`, 16-byte `dtv_t` entries.
const DTV_OFFSET: u8 = 8;
const DTV_ENTRY: u8 = 16;
/// `ep[-1]` hops from a block's ep to its method's (CRuby's own deepest is about 6).
const MAX_EP_HOPS: u8 = 8;

/// How the running thread's EC is found (runtime addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ec {
    /// `ruby_current_ec` in TLS module `module`'s block at `offset`.
    TlsDtv { module: u64, offset: i64 },
    /// `ruby_current_ec` at `offset` from the thread pointer.
    TlsTpOff { offset: i64 },
    /// `*ruby_single_main_ractor` + `running_ec`.
    MainRactor { addr: u64 },
    /// `ruby_current_execution_context_ptr`.
    Global { addr: u64 },
}

/// A Ruby found in a process.
#[derive(Clone, Debug)]
pub struct Ruby {
    pub pid: u32,
    /// The ELF holding the VM, as the process's maps name it.
    pub path: Arc<str>,
    pub version: Version,
    pub layout: Layout,
    /// Runtime address minus the ELF's virtual address.
    pub bias: u64,
    /// `rb_vm_exec`, runtime addresses: the native frame the Ruby frames replace.
    pub vm_exec: Range<u64>,
    pub ec: Ec,
    /// The VM's symbol table (runtime address), when found.
    pub symbols: Option<u64>,
    /// `ruby_single_main_ractor` (runtime address, 3.0+), whatever [`Self::ec`] is.
    pub main_ractor: Option<u64>,
}

impl Ruby {
    /// What the kernel walker gets.
    pub fn proc(&self, task_fsbase: u32) -> RubyProc {
        let l = &self.layout;
        let (ec_source, tls_module, tls_offset, global_addr) = match self.ec {
            Ec::TlsDtv { module, offset } => (EC_TLS_DTV, module, offset, 0),
            Ec::TlsTpOff { offset } => (EC_TLS_TPOFF, 0, offset, 0),
            Ec::MainRactor { addr } => (EC_MAIN_RACTOR, 0, 0, addr),
            Ec::Global { addr } => (EC_GLOBAL, 0, 0, addr),
        };
        RubyProc {
            version: self.version.hex(),
            task_fsbase,
            ec_source,
            max_ep_hops: MAX_EP_HOPS,
            dtv_offset: DTV_OFFSET,
            dtv_entry: DTV_ENTRY,
            _pad0: 0,
            tls_module,
            tls_offset,
            global_addr,
            ec_vm_stack: l.ec_vm_stack,
            ec_vm_stack_size: l.ec_vm_stack_size,
            ec_cfp: l.ec_cfp,
            ec_thread_ptr: l.ec_thread_ptr,
            cfp_size: l.cfp_size,
            cfp_pc: l.cfp_pc,
            cfp_iseq: l.cfp_iseq,
            cfp_ep: l.cfp_ep,
            thread_nt: l.thread_nt,
            thread_pthread: l.thread_pthread,
            native_tid: l.native_tid,
            ractor_running_ec: l.ractor_running_ec,
        }
    }
}

/// What [`detect`] found in a process.
#[derive(Debug)]
pub enum Detection {
    Found(Ruby),
    /// A Ruby looked at too early (its TLS module id not written yet): look again later.
    Waiting {
        path: String,
        why: String,
    },
    /// A Ruby we cannot walk, and why (one line, naming what is missing).
    Unsupported {
        path: String,
        why: String,
    },
    NotRuby,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct DetectError(#[from] shared::error::DetectError);

impl From<ElfError> for DetectError {
    fn from(e: ElfError) -> Self {
        Self(e.into())
    }
}

/// How the library reaches `ruby_current_ec` (file virtual addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsAccess {
    /// General dynamic: the GOT slot the module id is written to, and the offset.
    Dtv { module_slot: u64, offset: i64 },
    /// Initial exec: the GOT slot holding the offset from the thread pointer.
    TpOffSlot { slot: u64 },
    /// The executable's own TLS (module 1), at `offset`.
    Executable { offset: i64 },
}

/// What the ELF file says, before the process is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileFacts {
    pub version: Version,
    /// `rb_vm_exec` (file virtual addresses).
    pub vm_exec: Range<u64>,
    pub tls: Option<TlsAccess>,
    pub main_ractor: Option<u64>,
    pub global_ec: Option<u64>,
    pub symbols: Option<u64>,
}

/// Looks for Ruby in process `pid`.
pub fn detect(pid: u32) -> Result<Detection, DetectError> {
    let maps = process_mappings(pid)?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    detect_in(pid, &maps, exe.as_deref().and_then(|p| p.to_str()))
}

/// [`detect`] with the process's mappings and executable already read (a recording has
/// them when it publishes a process).
pub fn detect_in(pid: u32, maps: &[Mapping], exe: Option<&str>) -> Result<Detection, DetectError> {
    let Some((mapping, is_exe)) = pick_mapping(maps, exe) else {
        return Ok(Detection::NotRuby);
    };
    let path = mapping.name.to_string();
    let found = with_elf(pid, &mapping, |obj, data| {
        let bias = load_bias(obj, &mapping);
        (inspect(obj, data, is_exe), bias)
    })?;
    let (facts, bias) = match found {
        (Ok(facts), Some(bias)) => (facts, bias),
        (Ok(_), None) => {
            return Err(ElfError::NoSegment {
                path,
                offset: mapping.offset,
            }
            .into());
        }
        (Err(why), _) => return Ok(Detection::Unsupported { path, why }),
    };
    Ok(resolve(pid, path, &facts, bias, &ProcessMemory::new(pid)))
}

/// Whether `maps` may hold a Ruby (names only).
pub fn is_candidate(maps: &[Mapping], exe: Option<&str>) -> bool {
    pick_mapping(maps, exe).is_some()
}

/// A mapped `libruby*.so*`, else the executable when its name says ruby (`ruby`,
/// `ruby3.1`): a static build.
fn pick_mapping(maps: &[Mapping], exe: Option<&str>) -> Option<(Mapping, bool)> {
    let file_name = |m: &Mapping| m.name.rsplit('/').next().unwrap_or("").to_string();
    if let Some(m) = maps.iter().find(|m| {
        let n = file_name(m);
        n.starts_with("libruby") && n.contains(".so")
    }) {
        return Some((m.clone(), false));
    }
    let exe = exe.map(|e| e.strip_suffix(" (deleted)").unwrap_or(e))?;
    maps.iter()
        .find(|m| &*m.name == exe && file_name(m).starts_with("ruby"))
        .map(|m| (m.clone(), true))
}

/// The file's facts, or why this build cannot be walked.
pub fn inspect<'d, R: ReadRef<'d>>(
    obj: &object::File<'d, R>,
    data: R,
    is_exe: bool,
) -> Result<FileFacts, String> {
    // The symbols wanted below, found in one pass over the table (the symbol table's
    // name is the layout's, by version: every layout's name is looked for).
    let wanted = [
        "ruby_version",
        "rb_vm_exec",
        "ruby_current_ec",
        "ruby_single_main_ractor",
        "ruby_current_execution_context_ptr",
        "rb_id2str",
    ];
    let names: Vec<&str> = wanted
        .into_iter()
        .chain(GLOBAL_SYMBOLS_NAMES.iter().copied())
        .collect();
    let found = find_symbols(obj, data, &names);
    let find = |name: &str| found.iter().find(|s| s.name == name.as_bytes());
    let read = |addr: u64, len: u64| {
        obj.sections()
            .find_map(|s| s.data_range(addr, len).ok().flatten())
            .map(<[u8]>::to_vec)
    };
    let version_sym = find("ruby_version").ok_or("no ruby_version symbol")?;
    let raw = read(version_sym.address, 16).ok_or("ruby_version's bytes are not in the file")?;
    let raw = raw.split(|&b| b == 0).next().unwrap_or(&[]);
    let text = String::from_utf8_lossy(raw);
    let version = Version::parse(&text).ok_or_else(|| format!("ruby_version {text:?}"))?;
    let vm_exec = find("rb_vm_exec")
        .map(|s| s.address..s.address + s.size)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| format!("Ruby {version}: no rb_vm_exec symbol (.dynsym or .symtab)"))?;

    let current_ec = find("ruby_current_ec").filter(|s| s.tls);
    let tls = current_ec.and_then(|sym| {
        if is_exe {
            return Some(TlsAccess::Executable {
                offset: sym.address as i64,
            });
        }
        tls_access(obj, "ruby_current_ec", sym.address)
    });
    let at = |name: &str| find(name).map(|s| s.address);
    let main_ractor = at("ruby_single_main_ractor").filter(|_| version.major >= 3);
    let global_ec = at("ruby_current_execution_context_ptr");
    let layout_name = for_version(version).map(|l| l.global_symbols).ok();
    let symbols = layout_name.and_then(&at).or_else(|| {
        let id2str = at("rb_id2str")?;
        symbol_table::from_id2str(read, id2str).map(|f| f.symbols)
    });
    Ok(FileFacts {
        version,
        vm_exec,
        tls,
        main_ractor,
        global_ec,
        symbols,
    })
}

/// How the library's code reaches the TLS symbol `name` (value `value`): from its
/// dynamic relocations.
fn tls_access<'d, O: Object<'d>>(obj: &O, name: &str, value: u64) -> Option<TlsAccess> {
    let dynsym = obj.dynamic_symbol_table()?;
    let mut module_slot = None;
    let mut addend = 0;
    let mut tpoff_slot = None;
    for (slot, reloc) in obj.dynamic_relocations()? {
        let RelocationFlags::Elf { r_type } = reloc.flags() else {
            continue;
        };
        let RelocationTarget::Symbol(index) = reloc.target() else {
            continue;
        };
        let Ok(sym) = dynsym.symbol_by_index(index) else {
            continue;
        };
        if sym.name() != Ok(name) {
            continue;
        }
        match r_type {
            R_X86_64_DTPMOD64 => module_slot = Some(slot),
            R_X86_64_DTPOFF64 => addend = reloc.addend(),
            R_X86_64_TPOFF64 => tpoff_slot = Some(slot),
            _ => {}
        }
    }
    match (module_slot, tpoff_slot) {
        (Some(module_slot), _) => Some(TlsAccess::Dtv {
            module_slot,
            offset: (value as i64).wrapping_add(addend),
        }),
        (None, Some(slot)) => Some(TlsAccess::TpOffSlot { slot }),
        (None, None) => None,
    }
}

/// The Ruby in process `pid` (`mem`), from its file's facts and load bias.
pub fn resolve(
    pid: u32,
    path: String,
    facts: &FileFacts,
    bias: u64,
    mem: &dyn Memory,
) -> Detection {
    let layout = match for_version(facts.version) {
        Ok(l) => l,
        Err(e) => {
            return Detection::Unsupported {
                path,
                why: e.to_string(),
            };
        }
    };
    let runtime = |vaddr: u64| vaddr.wrapping_add(bias);
    let ec = match facts.tls {
        Some(TlsAccess::Dtv {
            module_slot,
            offset,
        }) => match mem.read_u64(runtime(module_slot)) {
            Ok(0) => {
                return Detection::Waiting {
                    path,
                    why: "ruby_current_ec's TLS module id is not written yet".into(),
                };
            }
            Ok(module) => Some(Ec::TlsDtv { module, offset }),
            Err(_) => None,
        },
        Some(TlsAccess::TpOffSlot { slot }) => mem
            .read_u64(runtime(slot))
            .ok()
            .map(|o| Ec::TlsTpOff { offset: o as i64 }),
        Some(TlsAccess::Executable { offset }) => Some(Ec::TlsDtv { module: 1, offset }),
        None => None,
    };
    let ec = ec
        .or_else(|| {
            facts
                .main_ractor
                .map(|a| Ec::MainRactor { addr: runtime(a) })
        })
        .or_else(|| facts.global_ec.map(|a| Ec::Global { addr: runtime(a) }));
    let Some(ec) = ec else {
        return Detection::Unsupported {
            path,
            why: format!(
                "Ruby {}: the running thread's EC cannot be found (no ruby_current_ec TLS \
                 relocation, no ruby_single_main_ractor or \
                 ruby_current_execution_context_ptr symbol)",
                facts.version
            ),
        };
    };
    Detection::Found(Ruby {
        pid,
        path: Arc::from(path),
        version: facts.version,
        layout,
        bias,
        vm_exec: runtime(facts.vm_exec.start)..runtime(facts.vm_exec.end),
        ec,
        symbols: facts.symbols.map(runtime),
        main_ractor: facts.main_ractor.map(runtime),
    })
}

#[cfg(test)]
mod tests;
