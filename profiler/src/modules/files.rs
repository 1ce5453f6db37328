//! The ELF files behind sampled mappings, opened safely before anything reads them.
//!
//! A mapping's path comes from `/proc/PID/maps` of a process another user may own: by the
//! time it is symbolized the path may name a FIFO, a device or another file. Each file is
//! opened once (while the process lives, through `/proc/PID/map_files`, which is the mapped
//! file itself; afterwards by its path, refusing symlinks), checked to be a regular file of
//! bounded size with the device and inode the mapping had, and kept open; blazesym then reads
//! it as `/proc/self/fd/N`, so nothing can be swapped between the check and the read.
//! This is the one table of opened files: the unwinder's module registry reads a file's
//! identity and CFI through it too (with [`super::ReadAt`]), so every file is opened and
//! checked in one place, and while the symbolizer holds one open the registry reads that
//! descriptor.

use std::{
    collections::HashMap,
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::Arc,
};

use super::maps::{MapEntry, exec_mappings};
use crate::untrusted::{self, MAX_ELF_BYTES, Refusal, Rules};

/// A file's number in its [`ElfFiles`], stable for the whole run.
pub type FileId = u32;

/// One opened and checked ELF file, as handed to whoever symbolizes its addresses.
#[derive(Clone, Debug)]
pub struct ElfFile {
    /// File name (`libc.so.6`, `[vdso]`).
    pub name: Arc<str>,
    /// The path the mapping named (for reports and pprof mappings).
    pub path: Arc<str>,
    pub file: Arc<File>,
}

impl ElfFile {
    /// The path blazesym may open: our own descriptor of the checked file.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

struct Known {
    name: Arc<str>,
    path: Arc<str>,
    /// `None`: not open now (closed after a hand-over); `Some(Err)`: refused, for good.
    open: Option<Result<Arc<File>, ()>>,
    /// The file as last handed over: while whoever took it still holds it (intervals
    /// waiting to be symbolized), it is taken again instead of opened a second time.
    handed: std::sync::Weak<File>,
}

/// Every ELF file seen by (device, inode), each with a stable id; a file is kept open from
/// the sample that first needs it until it is handed over (or cleared).
#[derive(Default)]
pub struct ElfFiles {
    ids: HashMap<(u64, u64), FileId>,
    known: Vec<Known>,
    /// The vDSO image, the same in every process: one file (a memfd holding a copy).
    vdso: Option<Option<FileId>>,
    /// One line per refused file: what and why.
    refusals: Vec<String>,
}

impl ElfFiles {
    /// The id of the file behind `entry` of `pid`, opened now if it is not open (while the
    /// process may still live); `None` when it cannot be had safely (refusals are kept for
    /// the summary) or the mapping has no file.
    pub fn id_for(&mut self, pid: u32, entry: &MapEntry) -> Option<FileId> {
        if entry.path.is_none() {
            return (entry.name.as_ref() == "[vdso]")
                .then(|| self.vdso_id())
                .flatten();
        }
        let key = (entry.dev, entry.inode);
        let id = match self.ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.known.len() as FileId;
                self.known.push(Known {
                    name: entry.name.clone(),
                    path: entry.path.clone()?,
                    open: None,
                    handed: std::sync::Weak::new(),
                });
                self.ids.insert(key, id);
                id
            }
        };
        let known = &mut self.known[id as usize];
        if known.open.is_none()
            && let Some(file) = known.handed.upgrade()
        {
            known.open = Some(Ok(file));
        }
        if known.open.is_none() {
            known.open = Some(match open_mapped(pid, entry, &known.path) {
                Ok(file) => Ok(Arc::new(file)),
                Err(Refusal::NotFound) => Err(()),
                Err(why) => {
                    self.refusals
                        .push(format!("{} (process {pid}): {why}", known.path));
                    Err(())
                }
            });
        }
        matches!(known.open, Some(Ok(_))).then_some(id)
    }

    fn vdso_id(&mut self) -> Option<FileId> {
        if let Some(known) = self.vdso {
            return known;
        }
        let id = vdso_file().map(|file| {
            let id = self.known.len() as FileId;
            let name: Arc<str> = Arc::from("[vdso]");
            self.known.push(Known {
                name: name.clone(),
                path: name,
                open: Some(Ok(Arc::new(file))),
                handed: std::sync::Weak::new(),
            });
            id
        });
        self.vdso = Some(id);
        id
    }

    /// The file `id`, if it is open.
    pub fn get(&self, id: FileId) -> Option<ElfFile> {
        let known = self.known.get(id as usize)?;
        match &known.open {
            Some(Ok(file)) => Some(ElfFile {
                name: known.name.clone(),
                path: known.path.clone(),
                file: file.clone(),
            }),
            _ => None,
        }
    }

    /// Reads the file behind `entry` of `pid` once (the unwinder's registry: identity and
    /// CFI), with the same checks as for symbolizing; a file that was not open before is
    /// closed again after, so open files still follow what samples need.
    pub fn read_once<T>(
        &mut self,
        pid: u32,
        entry: &MapEntry,
        read: impl FnOnce(&ElfFile) -> T,
    ) -> Option<T> {
        let was_open = self
            .ids
            .get(&(entry.dev, entry.inode))
            .is_some_and(|&id| self.get(id).is_some());
        let id = self.id_for(pid, entry)?;
        let out = read(&self.get(id)?);
        if !was_open {
            self.close(id);
        }
        Some(out)
    }

    /// Closes every open file except the vDSO's copy (whoever was handed one keeps it open
    /// until done); the next sample that needs a file takes it back from them if they still
    /// hold it, else opens it again.
    pub fn close_all(&mut self) {
        for id in 0..self.known.len() {
            self.close(id as FileId);
        }
    }

    fn close(&mut self, id: FileId) {
        if Some(id) == self.vdso.flatten() {
            return;
        }
        let k = &mut self.known[id as usize];
        if let Some(Ok(file)) = &k.open {
            k.handed = Arc::downgrade(file);
            k.open = None;
        }
    }

    /// The refusals so far, each once.
    pub fn take_refusals(&mut self) -> Vec<String> {
        std::mem::take(&mut self.refusals)
    }
}

/// A copy of our own vDSO in a memory file (blazesym reads files; the kernel maps the same
/// image into every process of our architecture).
fn vdso_file() -> Option<File> {
    use std::io::Write as _;
    // SAFETY: getauxval has no preconditions; AT_SYSINFO_EHDR is the vDSO's address or 0.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    let own = exec_mappings(std::process::id()).ok()?;
    let m = own.iter().find(|e| e.is_vdso())?;
    if m.start != base {
        return None;
    }
    // SAFETY: the kernel maps the vDSO readable for the life of the process, and
    // [start, end) is its mapping as /proc/self/maps reports it.
    let image =
        unsafe { std::slice::from_raw_parts(m.start as *const u8, (m.end - m.start) as usize) };
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"vdso".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor we just created and own.
    let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.write_all(image).ok()?;
    Some(file)
}

/// The mapped file of `entry`: through `map_files` while the process lives (the kernel's
/// own reference to the mapped file: no path lookup at all), else by path in our root.
fn open_mapped(pid: u32, entry: &MapEntry, path: &str) -> Result<File, Refusal> {
    let rules = Rules {
        max_bytes: MAX_ELF_BYTES,
        owner: None,
        identity: Some((entry.dev, entry.inode)),
    };
    let map_file = PathBuf::from(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        entry.start, entry.end
    ));
    match open_map_file(&map_file) {
        Ok(file) => {
            untrusted::check(&file, &rules)?;
            Ok(file)
        }
        // Gone (or no CAP_SYS_ADMIN for map_files): the path, with the same checks.
        Err(_) => untrusted::open(None, Path::new(path), &rules),
    }
}

/// Opens a `map_files` entry, following its magic link (which is the point), without
/// blocking.
fn open_map_file(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileExt, MetadataExt};

    use super::*;
    use crate::symbolize::ProcessMaps;

    /// The mapping of this test binary's code.
    fn own_executable() -> MapEntry {
        let maps = ProcessMaps::read(std::process::id()).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        maps.entries()
            .iter()
            .find(|e| e.path.as_deref() == exe.to_str())
            .expect("our executable is mapped")
            .clone()
    }

    #[test]
    fn our_own_executable_is_opened_once_and_a_swapped_identity_refused() {
        let entry = own_executable();
        let mut files = ElfFiles::default();
        let id = files.id_for(std::process::id(), &entry).expect("opened");
        let meta = std::fs::metadata(files.get(id).unwrap().fd_path()).unwrap();
        assert_eq!((meta.dev(), meta.ino()), (entry.dev, entry.inode));
        assert_eq!(files.id_for(std::process::id(), &entry), Some(id));
        files.close_all();
        assert!(files.get(id).is_none(), "closed");
        assert_eq!(
            files.id_for(std::process::id(), &entry),
            Some(id),
            "reopened"
        );
        // A mapping whose file is no longer the one at its path (another inode) is refused.
        let mut gone = entry.clone();
        gone.inode += 1;
        gone.start = 1;
        gone.end = 2;
        assert_eq!(files.id_for(u32::MAX - 3, &gone), None);
        let refusals = files.take_refusals();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert!(refusals[0].contains("replaced"), "{refusals:?}");
    }

    #[test]
    fn a_file_read_once_stays_open_only_if_it_was() {
        let entry = own_executable();
        let mut files = ElfFiles::default();
        let pid = std::process::id();
        let head = |f: &ElfFile| {
            let mut b = [0u8; 4];
            f.file.read_exact_at(&mut b, 0).map(|()| b).ok()
        };
        assert_eq!(files.read_once(pid, &entry, head), Some(Some(*b"\x7fELF")));
        let id = files.ids[&(entry.dev, entry.inode)];
        assert!(files.get(id).is_none(), "closed: nothing needed it open");
        assert_eq!(
            files.id_for(pid, &entry),
            Some(id),
            "the same file, opened again"
        );
        assert!(files.read_once(pid, &entry, head).is_some());
        assert!(files.get(id).is_some(), "still open for the symbolizer");
    }

    #[test]
    fn the_vdso_is_one_file_with_its_symbols() {
        let maps = ProcessMaps::read(std::process::id()).unwrap();
        let Some(vdso) = maps.entries().iter().find(|e| e.name.as_ref() == "[vdso]") else {
            return;
        };
        let mut files = ElfFiles::default();
        let id = files.id_for(std::process::id(), vdso).expect("vdso copy");
        assert_eq!(files.id_for(1, vdso), Some(id));
        let bytes = std::fs::read(files.get(id).unwrap().fd_path()).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF");
    }
}
