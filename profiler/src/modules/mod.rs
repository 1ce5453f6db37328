//! The module registry: one entry per ELF file that any profiled process maps (keyed by build
//! id, else device and inode), shared by every process that maps it. A module knows where its
//! code is loaded relative to file offsets, and owns its unwind table (built from `.eh_frame`
//! on first demand). Files come from the one table of opened files ([`ElfFiles`], which the
//! symbolizer names addresses through too): one place opens and checks them, through
//! `/proc/PID/map_files/`, so a process in another mount namespace, or one whose file was
//! deleted or replaced, still resolves to what it maps.

mod cfi;
mod elf;
mod files;
mod history;
mod maps;

use std::{collections::HashMap, sync::Arc};

use profiler_common::unwind::UnwindRow;
pub use profiler_formats::ReadAt;

pub use cfi::CfiError;
pub use elf::ElfError;
pub use files::{ElfFile, ElfFiles, FileId};
pub use history::MapHistory;
pub use maps::{MapEntry, Mapping, exec_mappings, parse as parse_maps, parse_any_line};

/// Index of a module in its [`Registry`].
pub type ModuleId = u32;

/// What makes two mappings the same module: the same file, never only the same build id. A
/// copy of a binary with the same build id (patched, stripped, damaged, or made so on
/// purpose by any user) is another file with tables of its own, so it cannot change the
/// stacks of the file it copies.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModuleKey {
    /// The file as opened (not as named): device, inode, size and modification time, and
    /// its build id (a file rewritten in place under the same inode is another module).
    File {
        build_id: Option<Vec<u8>>,
        dev: u64,
        ino: u64,
        size: u64,
        mtime_ns: i128,
    },
    /// The kernel's vDSO (the same image in every process).
    Vdso,
}

/// A module's unwind rows, `pc` relative to `base` (a virtual address of the ELF file).
#[derive(Debug, Default)]
pub struct UnwindTable {
    pub base: u64,
    pub rows: Vec<UnwindRow>,
}

#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error("{path}: {source}")]
    Cfi { path: Arc<str>, source: CfiError },
    #[error("{path}: the unwind table is still being built")]
    Building { path: Arc<str> },
    #[error("{path}: file offset {offset:#x} is in no load segment")]
    NoSegment { path: Arc<str>, offset: u64 },
    /// The file table could not open it (gone, or refused: it says why, once).
    #[error("{path}: not opened")]
    NotOpened { path: Arc<str> },
}

impl ModuleError {
    /// Nothing to say about the module: its file could not be opened, because its process
    /// exited first, or for a reason the file table reports itself.
    pub fn said_elsewhere(&self) -> bool {
        matches!(self, ModuleError::NotOpened { .. })
    }
}

/// One ELF file.
#[derive(Debug)]
pub struct Module {
    pub key: ModuleKey,
    /// The path it was first seen mapped at (as the mapping process names it).
    pub path: Arc<str>,
    info: elf::ElfInfo,
    /// Built on first demand; `Err` is kept so a bad file is parsed once.
    table: Option<Result<Arc<UnwindTable>, Arc<ModuleError>>>,
    /// Its [`TableJob`] was handed out and has not finished.
    building: bool,
}

impl Module {
    pub fn build_id(&self) -> Option<&[u8]> {
        self.info.build_id.as_deref()
    }

    /// The file offset of one of the module's virtual addresses.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.info.offset_of_vaddr(vaddr)
    }
}

/// Every module seen, and the mappings already resolved to one.
#[derive(Default)]
pub struct Registry {
    modules: Vec<Module>,
    by_key: HashMap<ModuleKey, ModuleId>,
    /// (device, inode) as /proc/PID/maps shows them, to the module: a mapping of a file
    /// already known is resolved without opening it again.
    by_inode: HashMap<(u64, u64), ModuleId>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn module(&self, id: ModuleId) -> &Module {
        &self.modules[id as usize]
    }

    pub fn len(&self) -> usize {
        self.modules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }

    pub fn build_id(&self, id: ModuleId) -> Option<&[u8]> {
        self.module(id).build_id()
    }

    /// The module `mapping` of process `pid` maps, and its load bias (address minus the
    /// module's virtual address).
    pub fn register(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        files: &mut ElfFiles,
    ) -> Result<(ModuleId, u64), ModuleError> {
        let known = mapping.inode().and_then(|i| self.by_inode.get(&i).copied());
        let id = match known {
            Some(id) => id,
            None => self.resolve(pid, mapping, files)?,
        };
        let module = &self.modules[id as usize];
        let vaddr =
            module
                .info
                .vaddr_of_offset(mapping.offset)
                .ok_or_else(|| ModuleError::NoSegment {
                    path: module.path.clone(),
                    offset: mapping.offset,
                })?;
        Ok((id, mapping.start.wrapping_sub(vaddr)))
    }

    /// Reads the file behind a mapping (opened by the file table), and finds or adds its
    /// module.
    fn resolve(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        files: &mut ElfFiles,
    ) -> Result<ModuleId, ModuleError> {
        let info = files
            .read_once(pid, &MapEntry::from(mapping.clone()), |f| {
                elf::read(&f.file, &mapping.name)
            })
            .ok_or_else(|| ModuleError::NotOpened {
                path: mapping.name.clone(),
            })??;
        let key = if mapping.is_vdso() {
            ModuleKey::Vdso
        } else {
            ModuleKey::File {
                build_id: info.build_id.clone().filter(|b| !b.is_empty()),
                dev: info.dev,
                ino: info.ino,
                size: info.size,
                mtime_ns: info.mtime_ns,
            }
        };
        let id = match self.by_key.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.modules.len() as ModuleId;
                self.modules.push(Module {
                    key: key.clone(),
                    path: mapping.name.clone(),
                    info,
                    table: None,
                    building: false,
                });
                self.by_key.insert(key, id);
                id
            }
        };
        if let Some(inode) = mapping.inode() {
            self.by_inode.insert(inode, id);
        }
        Ok(id)
    }

    /// The module's unwind table, built from its CFI the first time it is asked for.
    pub fn unwind_table(&mut self, id: ModuleId) -> Result<Arc<UnwindTable>, Arc<ModuleError>> {
        if let Some(job) = self.table_job(id) {
            let built = job.build();
            self.finish_table(id, built);
        }
        // None: its job was handed out earlier and is still running.
        self.table(id).unwrap_or_else(|| {
            Err(Arc::new(ModuleError::Building {
                path: self.modules[id as usize].path.clone(),
            }))
        })
    }

    /// Forgets module `id` (its rows were evicted from the kernel's array): the next mapping
    /// of its file resolves to a new module, whose table is built again.
    pub fn forget(&mut self, id: ModuleId) {
        let module = &mut self.modules[id as usize];
        if self.by_key.get(&module.key) == Some(&id) {
            self.by_key.remove(&module.key);
        }
        self.by_inode.retain(|_, m| *m != id);
        module.table = None;
        module.info.cfi = Default::default();
    }

    /// Frees the rows of the module's table (its base stays): they were copied where they
    /// are used (the kernel's row array).
    pub fn release_rows(&mut self, id: ModuleId) {
        let module = &mut self.modules[id as usize];
        if let Some(Ok(t)) = &module.table
            && !t.rows.is_empty()
        {
            module.table = Some(Ok(Arc::new(UnwindTable {
                base: t.base,
                rows: Vec::new(),
            })));
        }
    }

    /// Whether the module's table job was handed out and has not finished.
    pub fn building(&self, id: ModuleId) -> bool {
        self.modules[id as usize].building
    }

    /// The work of building the module's table, taken out of the registry (so it can run
    /// elsewhere) the first time it is asked for; `None` once taken.
    pub fn table_job(&mut self, id: ModuleId) -> Option<TableJob> {
        let module = &mut self.modules[id as usize];
        if module.building || module.table.is_some() {
            return None;
        }
        module.building = true;
        Some(TableJob {
            path: module.path.clone(),
            cfi: std::mem::take(&mut module.info.cfi),
        })
    }

    /// Stores the outcome of the module's [`TableJob`].
    pub fn finish_table(&mut self, id: ModuleId, built: Result<UnwindTable, ModuleError>) {
        let module = &mut self.modules[id as usize];
        module.building = false;
        module.table = Some(built.map(Arc::new).map_err(Arc::new));
    }

    /// The module's table once built (`None` before).
    pub fn table(&self, id: ModuleId) -> Option<Result<Arc<UnwindTable>, Arc<ModuleError>>> {
        self.modules[id as usize].table.clone()
    }

    /// Bytes of CFI the module's table is (to be) built from.
    pub fn cfi_bytes(&self, id: ModuleId) -> usize {
        let cfi = &self.modules[id as usize].info.cfi;
        [&cfi.eh_frame, &cfi.debug_frame]
            .iter()
            .filter_map(|s| s.as_ref())
            .map(|s| s.data.len())
            .sum()
    }

    /// Bytes of the unwind rows held here (built and not yet released).
    pub fn table_bytes(&self) -> usize {
        self.modules
            .iter()
            .filter_map(|m| m.table.as_ref()?.as_ref().ok())
            .map(|t| t.rows.len() * std::mem::size_of::<UnwindRow>())
            .sum()
    }
}

/// A module's CFI, to evaluate into its table (on any thread).
pub struct TableJob {
    path: Arc<str>,
    cfi: cfi::CfiSections,
}

impl TableJob {
    pub fn build(self) -> Result<UnwindTable, ModuleError> {
        let cfi::Rows { base, rows } = cfi::rows(&self.cfi).map_err(|source| ModuleError::Cfi {
            path: self.path.clone(),
            source,
        })?;
        Ok(UnwindTable { base, rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::unwind::cfa;

    #[test]
    fn own_executable_has_a_table_covering_main_code() {
        let mut registry = Registry::new();
        let mut files = ElfFiles::default();
        let pid = std::process::id();
        let mappings = exec_mappings(pid).expect("own maps");
        let here = own_executable_has_a_table_covering_main_code as *const () as usize as u64;
        let mapping = mappings
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("a mapping holds this function");
        let (id, bias) = registry
            .register(pid, mapping, &mut files)
            .expect("register");
        let table = registry.unwind_table(id).expect("table");
        assert!(table.rows.len() > 100, "{} rows", table.rows.len());
        assert!(table.rows.windows(2).all(|w| w[0].pc < w[1].pc), "sorted");
        let rel = (here - bias - table.base) as u32;
        let i = table.rows.partition_point(|r| r.pc <= rel) - 1;
        // A function's first instruction: the CFA is rsp + 8.
        assert_eq!((table.rows[i].cfa, table.rows[i].cfa_offset), (cfa::RSP, 8));
        // A second registration of the same file is the same module.
        let (again, _) = registry
            .register(pid, mapping, &mut files)
            .expect("register");
        assert_eq!(again, id);
        assert!(registry.build_id(id).is_some_and(|b| !b.is_empty()));
    }

    #[test]
    fn a_copy_with_the_same_build_id_is_another_module() {
        let mut registry = Registry::new();
        let mut files = ElfFiles::default();
        let pid = std::process::id();
        let mappings = exec_mappings(pid).expect("own maps");
        let here = a_copy_with_the_same_build_id_is_another_module as *const () as usize as u64;
        let mapping = mappings
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("a mapping holds this function");
        let (real, _) = registry
            .register(pid, mapping, &mut files)
            .expect("register");
        // The same bytes under another inode, its .eh_frame overwritten with garbage.
        let dir = std::env::temp_dir().join(format!("modules-copy-{pid}"));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("copy");
        let mut bytes = std::fs::read(&*mapping.name).expect("read own executable");
        let elf = object::read::File::parse(&*bytes).expect("parse");
        use object::{Object as _, ObjectSection as _};
        let (at, len) = elf
            .section_by_name(".eh_frame")
            .and_then(|s| s.file_range())
            .expect(".eh_frame");
        drop(elf);
        bytes[at as usize..(at + len) as usize].fill(0xa5);
        std::fs::write(&copy, &bytes).unwrap();
        let file = std::fs::File::open(&copy).unwrap();
        let info = elf::read(&file, copy.to_str().unwrap()).expect("read copy");
        assert_eq!(info.build_id.as_deref(), registry.build_id(real));
        let meta = std::fs::metadata(&copy).unwrap();
        use std::os::unix::fs::MetadataExt as _;
        // At addresses this process does not map, so the file is opened by path.
        let damaged = Mapping {
            start: 0x10_0000_0000,
            end: 0x10_0000_0000 + (mapping.end - mapping.start),
            dev: meta.dev(),
            ino: meta.ino(),
            name: std::sync::Arc::from(copy.to_str().unwrap()),
            ..mapping.clone()
        };
        let (other, _) = registry
            .register(pid, &damaged, &mut files)
            .expect("register the copy");
        assert_ne!(
            other, real,
            "a copy with the same build id is its own module"
        );
        assert!(
            registry.unwind_table(other).is_err(),
            "the copy's CFI is garbage"
        );
        let table = registry.unwind_table(real).expect("the real file's table");
        assert!(table.rows.len() > 100);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn libc_has_a_signal_trampoline_and_plt_rows() {
        let mut registry = Registry::new();
        let mut files = ElfFiles::default();
        let pid = std::process::id();
        let mappings = exec_mappings(pid).expect("own maps");
        let Some(libc) = mappings.iter().find(|m| m.name.contains("libc.so")) else {
            return; // a static build
        };
        let (id, _) = registry
            .register(pid, libc, &mut files)
            .expect("register libc");
        let table = registry.unwind_table(id).expect("table");
        assert!(
            table.rows.iter().any(|r| r.cfa == cfa::SIGNAL),
            "__restore_rt"
        );
        assert!(table.rows.iter().any(|r| r.cfa == cfa::PLT), ".plt");
    }
}
