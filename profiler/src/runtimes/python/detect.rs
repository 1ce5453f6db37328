//! Finding CPython in a process: the ELF that holds the interpreter (a shared `libpython`, or
//! the executable of a static build), its version, the symbols a walker needs and the load
//! bias, read through the project's one table of opened files.

use std::{ops::Range, sync::Arc};

use object::{Object, ObjectSection, ObjectSymbol, ReadRef};
use profiler_common::python::PythonOffsets;

use super::{
    offsets::{self, DEBUG_OFFSETS_BYTES, DebugOffsetsError, check_debug_offsets},
    version::{Unsupported, Version, check},
};
use crate::{
    modules::Mapping,
    runtimes::shared::{
        self,
        elf::{ElfError, ElfSym, find_symbols, load_bias, process_mappings, with_elf},
        memory::{Memory, ProcessMemory},
    },
};

#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// As any runtime's detection fails (maps, ELF file, reading `_Py_DebugOffsets`).
    #[error(transparent)]
    Shared(#[from] shared::error::DetectError),
    /// The build's own offsets disagree with our table: never walked with either.
    #[error("{path} (process {pid}): {source}")]
    DebugOffsets {
        pid: u32,
        path: String,
        #[source]
        source: DebugOffsetsError,
    },
}

impl From<ElfError> for DetectError {
    fn from(e: ElfError) -> Self {
        Self::Shared(e.into())
    }
}

/// What [`detect`] found in a process.
#[derive(Debug)]
pub enum Detection {
    /// A CPython we can walk.
    Found(Interpreter),
    /// A CPython we do not walk, and why (one line).
    Unsupported { path: String, reason: Unsupported },
    /// No CPython in this process.
    NotPython,
}

/// Runtime addresses (load bias applied) of the symbols a walker uses; `None` where this
/// build has no such symbol.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Symbols {
    /// `_PyRuntime` (3.7+): on 3.13+ it starts with `_Py_DebugOffsets`.
    pub runtime: Option<u64>,
    /// `PyCode_Type`: what a code object's `ob_type` points at.
    pub code_type: u64,
    /// `_PyEval_EvalFrameDefault` and its `.cold` part (where the compiler split one off and
    /// the symbol table says so): the eval loop's code, where the native unwinder hands over.
    pub eval: Range<u64>,
    pub eval_cold: Option<Range<u64>>,
    /// 3.6's statics: `_PyThreadState_Current` (the thread holding the GIL), `interp_head`
    /// and `autoTLSkey` (the thread-state TLS key). Locals: from `.symtab` only.
    pub tstate_current: Option<u64>,
    pub interp_head: Option<u64>,
    pub tls_key: Option<u64>,
    /// `_Py_tss_tstate` (3.12+): the offset of the current thread state in libpython's TLS
    /// block (`st_value` of a TLS symbol, no bias).
    pub tls_tstate: Option<u64>,
}

/// A CPython found in a process.
#[derive(Clone, Debug)]
pub struct Interpreter {
    pub pid: u32,
    /// The ELF holding the interpreter, as the process's maps name it.
    pub path: Arc<str>,
    pub build_id: Option<Vec<u8>>,
    pub version: Version,
    /// Runtime address minus the ELF's virtual address.
    pub bias: u64,
    pub symbols: Symbols,
    pub offsets: PythonOffsets,
}

impl Interpreter {
    /// The eval loop's code ranges (runtime addresses): where the native unwinder, finding a
    /// frame's PC inside one, hands over to the Python walker.
    pub fn eval_ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        std::iter::once(self.symbols.eval.clone()).chain(self.symbols.eval_cold.clone())
    }

    /// Whether `pc` is in the eval loop.
    pub fn in_eval(&self, pc: u64) -> bool {
        self.eval_ranges().any(|r| r.contains(&pc))
    }
}

/// Looks for CPython in the process `pid`.
pub fn detect(pid: u32) -> Result<Detection, DetectError> {
    let maps = process_mappings(pid)?;
    let Some(mapping) = interpreter_mapping(pid, &maps) else {
        return Ok(Detection::NotPython);
    };
    let path = mapping.name.to_string();
    let found = with_elf(pid, &mapping, |obj, data| {
        inspect(obj, data, &path, &mapping)
    })??;
    Ok(match found {
        Ok((version, build_id, bias, symbols)) => match offsets::for_version(version) {
            Ok(offsets) => {
                if version.minor >= 13
                    && let Some(runtime) = symbols.runtime
                {
                    check_live_debug_offsets(pid, &path, runtime, version, &offsets)?;
                }
                Detection::Found(Interpreter {
                    pid,
                    path: Arc::from(path),
                    build_id,
                    version,
                    bias,
                    symbols,
                    offsets,
                })
            }
            Err(reason) => Detection::Unsupported { path, reason },
        },
        // A process just started: its libpython comes in a moment, and with it another look.
        Err(Unsupported::Launcher(_)) => Detection::NotPython,
        Err(reason) => Detection::Unsupported { path, reason },
    })
}

/// 3.13+ publish their own offsets at the start of `_PyRuntime`: they must agree with our
/// table, or the process is not walked at all (a loud error, not a guess).
fn check_live_debug_offsets(
    pid: u32,
    path: &str,
    runtime: u64,
    version: Version,
    table: &PythonOffsets,
) -> Result<(), DetectError> {
    let mut bytes = vec![0u8; DEBUG_OFFSETS_BYTES];
    ProcessMemory::new(pid)
        .read(runtime, &mut bytes)
        .map_err(|source| shared::error::DetectError::Read {
            pid,
            path: path.to_string(),
            what: "_Py_DebugOffsets",
            source,
        })?;
    check_debug_offsets(&bytes, version, table).map_err(|source| DetectError::DebugOffsets {
        pid,
        path: path.to_string(),
        source,
    })
}

/// The executable mapping of the interpreter's ELF, in the process `pid`.
/// Whether `pid`, with these mappings, may run CPython (cheap: names only), so that
/// [`detect`] is worth its reading.
pub fn is_candidate(pid: u32, maps: &[Mapping]) -> bool {
    interpreter_mapping(pid, maps).is_some()
}

fn interpreter_mapping(pid: u32, maps: &[Mapping]) -> Option<Mapping> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let exe = exe.as_deref().and_then(|p| p.to_str());
    pick_mapping(maps, exe.map(|e| e.strip_suffix(" (deleted)").unwrap_or(e)))
}

/// A versioned `libpython3.X.so` if one is mapped (the `python` executable of a shared build
/// holds nothing but `main`; `libpython3.so`, the stable-ABI stub an extension may pull in,
/// holds no interpreter), else the executable when its name says python (a static build
/// such as Debian's `/usr/bin/python3.11`).
fn pick_mapping(maps: &[Mapping], exe: Option<&str>) -> Option<Mapping> {
    let file_name = |m: &Mapping| m.name.rsplit('/').next().unwrap_or("").to_string();
    let versioned_lib = |m: &&Mapping| {
        let name = file_name(m);
        name.starts_with("libpython") && Version::from_file_name(&name).is_some()
    };
    if let Some(m) = maps.iter().find(versioned_lib) {
        return Some(m.clone());
    }
    maps.iter()
        .find(|m| Some(&*m.name) == exe && file_name(m).starts_with("python"))
        .cloned()
}

type Inspected = Result<(Version, Option<Vec<u8>>, u64, Symbols), Unsupported>;

fn inspect<'d, R: ReadRef<'d>>(
    obj: &object::File<'d, R>,
    data: R,
    path: &str,
    mapping: &Mapping,
) -> Result<Inspected, DetectError> {
    let bias = load_bias(obj, mapping).ok_or_else(|| ElfError::NoSegment {
        path: path.to_string(),
        offset: mapping.offset,
    })?;
    let table = SymbolTable::read(obj, data);
    let file_name = path.rsplit('/').next().unwrap_or(path);
    let from_name = Version::from_file_name(file_name);
    let free_threaded = from_name.is_some_and(|(_, t)| t);
    // Py_Version (3.11+) is the build's own word; then the PY_VERSION string; the file name
    // last (it has no micro version).
    let version = table
        .get("Py_Version")
        .and_then(|s| read_u32(obj, s.start))
        .map(Version::from_hex)
        .or_else(|| version_string(obj, from_name.map(|(mm, _)| mm)))
        .or_else(|| from_name.map(|((major, minor), _)| Version::new(major, minor, 0)));
    let Some(version) = version else {
        return Ok(Err(Unsupported::NoVersion(path.to_string())));
    };
    if let Err(reason) = check(version, free_threaded) {
        return Ok(Err(reason));
    }
    let missing = |symbol| Unsupported::MissingSymbol {
        path: path.to_string(),
        symbol,
    };
    let at = |name| table.get(name).map(|r| r.start + bias);
    let Some(eval) = table.get("_PyEval_EvalFrameDefault") else {
        if is_launcher(obj) {
            return Ok(Err(Unsupported::Launcher(path.to_string())));
        }
        return Ok(Err(missing("_PyEval_EvalFrameDefault")));
    };
    let Some(code_type) = at("PyCode_Type") else {
        return Ok(Err(missing("PyCode_Type")));
    };
    let runtime = at("_PyRuntime");
    if runtime.is_none() && version.minor >= 7 {
        return Ok(Err(missing("_PyRuntime")));
    }
    let symbols = Symbols {
        runtime,
        code_type,
        eval: eval.start + bias..eval.end + bias,
        eval_cold: table
            .get("_PyEval_EvalFrameDefault.cold")
            .map(|r| r.start + bias..r.end + bias),
        tstate_current: at("_PyThreadState_Current"),
        interp_head: at("interp_head"),
        tls_key: at("autoTLSkey"),
        tls_tstate: table.tls("_Py_tss_tstate"),
    };
    if version.minor == 6 && symbols.interp_head.is_none() {
        return Ok(Err(missing("interp_head")));
    }
    let build_id = obj.build_id().ok().flatten().map(<[u8]>::to_vec);
    Ok(Ok((version, build_id, bias, symbols)))
}

/// Whether this ELF (one without an eval loop) calls a libpython's main: the `python3.X`
/// executable of a shared build (pyenv's, python.org's `--enable-shared`), whose `main` is a
/// call to `Py_BytesMain` (3.7's `_Py_UnixMain`, `Py_Main` before).
fn is_launcher<'d, R: ReadRef<'d>>(obj: &object::File<'d, R>) -> bool {
    obj.dynamic_symbols().any(|s| {
        s.is_undefined() && matches!(s.name(), Ok("Py_BytesMain" | "_Py_UnixMain" | "Py_Main"))
    })
}

/// The symbols we look for, by name: from `.symtab` (locals and `.cold` parts), or from
/// `.dynsym` (all a stripped build has).
struct SymbolTable<'d> {
    found: Vec<ElfSym<'d>>,
}

const WANTED: &[&str] = &[
    "_PyRuntime",
    "_PyEval_EvalFrameDefault",
    "_PyEval_EvalFrameDefault.cold",
    "PyCode_Type",
    "Py_Version",
    "_PyThreadState_Current",
    "interp_head",
    "autoTLSkey",
    "_Py_tss_tstate",
];

impl<'d> SymbolTable<'d> {
    fn read<R: ReadRef<'d>>(obj: &object::File<'d, R>, data: R) -> Self {
        SymbolTable {
            found: find_symbols(obj, data, WANTED),
        }
    }

    fn find(&self, name: &str, tls: bool) -> Option<&ElfSym<'d>> {
        self.found
            .iter()
            .find(|s| s.name == name.as_bytes() && s.tls == tls)
    }

    /// The virtual address range of a (non-TLS) symbol.
    fn get(&self, name: &str) -> Option<Range<u64>> {
        self.find(name, false)
            .map(|s| s.address..s.address + s.size)
    }

    /// The TLS-block offset of a TLS symbol.
    fn tls(&self, name: &str) -> Option<u64> {
        self.find(name, true).map(|s| s.address)
    }
}

fn read_u32<'d, O: Object<'d>>(obj: &O, vaddr: u64) -> Option<u32> {
    obj.sections().find_map(|s| {
        let bytes = s.data_range(vaddr, 4).ok()??;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    })
}

/// The `PY_VERSION` string (`3.9.18`) in `.rodata`: a NUL-terminated version string of the
/// expected major.minor (any 2.x/3.x when the file name says nothing). The linker merges
/// string tails, so `PY_VERSION` is often the end of a longer string (a build path ending in
/// `Python-3.10.13`): tails count, from a start not preceded by a digit or a dot. More than
/// one distinct candidate is no answer.
fn version_string<'d, O: Object<'d>>(obj: &O, expected: Option<(u8, u8)>) -> Option<Version> {
    let data = obj.section_by_name(".rodata")?.data().ok()?;
    let mut found: Option<Version> = None;
    for s in data.split(|&b| b == 0) {
        let tail_from = s.len().saturating_sub(12);
        for start in tail_from..s.len() {
            let tail = &s[start..];
            let boundary = start == 0 || !(s[start - 1].is_ascii_digit() || s[start - 1] == b'.');
            if !boundary || !(tail.starts_with(b"3.") || tail.starts_with(b"2.")) {
                continue;
            }
            let Some(v) = std::str::from_utf8(tail).ok().and_then(Version::parse) else {
                continue;
            };
            if expected.is_some_and(|mm| mm != (v.major, v.minor)) {
                continue;
            }
            match found {
                Some(f) if f != v => return None,
                _ => found = Some(v),
            }
        }
    }
    found
}

#[cfg(test)]
mod tests;
