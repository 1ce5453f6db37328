//! The ELF files behind sampled mappings, opened safely before anything reads them.
//!
//! A mapping's path comes from `/proc/PID/maps` of a process another user may own: by the
//! time it is symbolized the path may name a FIFO, a device or another file. Each file is
//! opened once (while the process lives, through `/proc/PID/map_files`, which is the mapped
//! file itself; afterwards by its path, refusing symlinks), checked to be a regular file of
//! bounded size with the device and inode the mapping had, and kept open; blazesym then reads
//! it as `/proc/self/fd/N`, so nothing can be swapped between the check and the read.

use std::{
    collections::HashMap,
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use super::maps::MapEntry;
use crate::untrusted::{self, MAX_ELF_BYTES, Refusal, Rules};

/// Opened and checked ELF files by (device, inode), or why one was refused.
#[derive(Default)]
pub struct ElfFiles {
    files: HashMap<(u64, u64), Result<(File, PathBuf), ()>>,
    /// One line per refused file: what and why.
    refusals: Vec<String>,
}

impl ElfFiles {
    /// A path blazesym may open for `entry` of `pid` (`/proc/self/fd/N` of a checked file),
    /// or `None` when the file cannot be had safely (refusals are kept for the summary).
    pub fn path_for(&mut self, pid: u32, entry: &MapEntry) -> Option<PathBuf> {
        let key = (entry.dev, entry.inode);
        if let Some(known) = self.files.get(&key) {
            return known.as_ref().ok().map(|(_, p)| p.clone());
        }
        let path = entry.path.as_deref()?;
        let opened = open_mapped(pid, entry, path);
        let value = match opened {
            Ok(file) => {
                let fd_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
                Ok((file, fd_path))
            }
            Err(Refusal::NotFound) => Err(()),
            Err(why) => {
                self.refusals.push(format!("{path} (process {pid}): {why}"));
                Err(())
            }
        };
        let result = value.as_ref().ok().map(|(_, p)| p.clone());
        self.files.insert(key, value);
        result
    }

    /// Closes every file (blazesym must be reset at the same time: it names them by fd).
    pub fn clear(&mut self) {
        self.files.clear();
        self.files.shrink_to_fit();
    }

    /// The refusals so far, each once.
    pub fn take_refusals(&mut self) -> Vec<String> {
        std::mem::take(&mut self.refusals)
    }
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
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::symbolize::ProcessMaps;

    #[test]
    fn our_own_executable_is_opened_once_and_a_swapped_identity_refused() {
        let maps = ProcessMaps::read(std::process::id()).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let entry = maps
            .entries()
            .iter()
            .find(|e| e.path.as_deref() == exe.to_str())
            .expect("our executable is mapped")
            .clone();
        let mut files = ElfFiles::default();
        let p = files.path_for(std::process::id(), &entry).expect("opened");
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!((meta.dev(), meta.ino()), (entry.dev, entry.inode));
        assert_eq!(files.path_for(std::process::id(), &entry), Some(p));
        // A mapping whose file is no longer the one at its path (another inode) is refused.
        let mut gone = entry.clone();
        gone.inode += 1;
        gone.start = 1;
        gone.end = 2;
        assert_eq!(files.path_for(u32::MAX - 3, &gone), None);
        let refusals = files.take_refusals();
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert!(refusals[0].contains("replaced"), "{refusals:?}");
    }
}
