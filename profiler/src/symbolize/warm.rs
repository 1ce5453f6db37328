//! What naming keeps of a file between batches. A continuous recording names a few new
//! addresses in the same files every interval (a service's new leaf PCs in libpython, node,
//! libjvm): building each file's state again for them (its ELF headers and PLT, blazesym's
//! sorted symbol table and parsed DWARF units) was most of the symbolizing thread's time on
//! a fleet host. A file stays warm while batches keep naming addresses in it, and is let
//! go (its blazesym state evicted, its descriptors closed) once [`IDLE_CALLS`] batches in a
//! row needed nothing of it, or when more than [`MAX_WARM_FILES`] are warm: memory holds
//! the few files a run is naming now (their parsed state and the pages read of them), not
//! every file it has seen. Counted in batches, not seconds, so it holds at any interval.
//! The pages blazesym read of a warm file's mapping are handed back after each batch
//! ([`WarmFile::release_pages`]): they stay in the page cache, and a later batch faults in
//! only what it reads, so a warm file costs its parsed state, not the megabytes of symbol
//! table and DWARF once touched.

use std::{collections::HashMap, path::PathBuf};

use blazesym::symbolize::{
    self as bz,
    evict::{self, Evict},
};

use super::{ElfFile, FileId, Identity, by_build_id, go::GoTable, plt::PltStubs};
use crate::modules::parse_any_line;

/// A file no batch of this many in a row needed is let go.
const IDLE_CALLS: u64 = 2;
/// At most this many files are kept warm; beyond, the least recently used are let go.
const MAX_WARM_FILES: usize = 4;

/// A file as `stat` and `/proc/self/maps` tell it: (device, inode, size).
type FileKey = (u64, u64, u64);

/// One file's state kept between batches.
pub(super) struct WarmFile {
    pub identity: Option<Identity>,
    pub plt: PltStubs,
    /// The separate debug file found by build id, if any.
    pub separate: Option<PathBuf>,
    /// Go's function table: `None` until a frame needs it; then the table, or why it was
    /// refused.
    pub go: Option<Result<Option<GoTable>, String>>,
    /// The paths blazesym was given for this file (a file reopened is read through a new
    /// `/proc/self/fd/N`), all evicted with it, and the (device, inode, size) each names.
    paths: Vec<(PathBuf, Option<FileKey>)>,
    /// The batch that last needed it.
    used: u64,
}

impl WarmFile {
    /// Notes that blazesym was given `path` for this file.
    pub fn read_as(&mut self, path: PathBuf) {
        if !self.paths.iter().any(|(p, _)| *p == path) {
            let id = std::fs::metadata(&path).ok().map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino(), m.size())
            });
            self.paths.push((path, id));
        }
    }

    /// Hands back the pages blazesym read of this file's mappings, after each batch's
    /// call: each file it maps whole, shared and read-only, from offset 0, and nothing else
    /// is mapped so. Unmapping them changes no byte blazesym sees (the next read faults the
    /// file's bytes back from the page cache), only what stays resident: a batch's peak is
    /// one file's pages, as when each file had a symbolizer of its own.
    pub fn release_pages(&self) {
        let ids: Vec<FileKey> = self.paths.iter().filter_map(|(_, id)| *id).collect();
        if ids.is_empty() {
            return;
        }
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .map_or(4096, |p| p as u64);
        for line in maps.lines() {
            let Some((start, end)) = whole_file_mapping(line, &ids, page) else {
                continue;
            };
            // SAFETY: [start, end) is a shared read-only mapping of this process of a whole file
            // blazesym reads (checked above): MADV_DONTNEED only drops its page table
            // entries, and the next read faults the same bytes back from the file.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

/// The warm files, by id.
#[derive(Default)]
pub(super) struct WarmFiles {
    files: HashMap<FileId, WarmFile>,
    /// Batches that named something so far.
    batch: u64,
}

impl WarmFiles {
    /// File `id`'s kept state, read now if it has none.
    pub fn get(&mut self, id: FileId, file: &ElfFile, debug_dirs: &[PathBuf]) -> &mut WarmFile {
        let warm = self.files.entry(id).or_insert_with(|| {
            let identity = Identity::read(&file.file);
            let separate = identity
                .as_ref()
                .and_then(|i| by_build_id(debug_dirs, i.build_id.as_deref()?));
            WarmFile {
                plt: PltStubs::read(&file.file),
                identity,
                separate,
                go: None,
                paths: Vec::new(),
                used: 0,
            }
        });
        warm.used = self.batch;
        warm
    }

    /// Ends a batch that named something: lets go of the files the last [`IDLE_CALLS`]
    /// batches did not need, and of the least recently used beyond [`MAX_WARM_FILES`].
    pub fn cool(&mut self, bz: &mut bz::Symbolizer) {
        let batch = self.batch;
        self.batch += 1;
        let mut idle: Vec<FileId> = self
            .files
            .iter()
            .filter(|(_, w)| batch - w.used >= IDLE_CALLS)
            .map(|(&id, _)| id)
            .collect();
        if self.files.len() - idle.len() > MAX_WARM_FILES {
            let mut by_use: Vec<(u64, FileId)> = self
                .files
                .iter()
                .filter(|(id, _)| !idle.contains(id))
                .map(|(&id, w)| (w.used, id))
                .collect();
            by_use.sort_unstable();
            let over = by_use.len() - MAX_WARM_FILES;
            idle.extend(by_use.into_iter().take(over).map(|(_, id)| id));
        }
        for id in idle {
            if let Some(w) = self.files.remove(&id) {
                for (path, _) in w.paths {
                    // Evicting a path blazesym never read is not an error.
                    let _ = bz.evict(&Evict::Elf(evict::Elf::new(path)));
                }
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.files.len()
    }
}

/// The range of a `/proc/self/maps` line if it maps one of `files` (device, inode, size)
/// whole, shared and read-only from offset 0, as blazesym maps the files it reads (a loaded
/// library's segments are private, and a private page may have been written before an
/// `mprotect`; a shared read-only mapping's pages are the file's).
fn whole_file_mapping(line: &str, files: &[FileKey], page: u64) -> Option<(usize, usize)> {
    let (m, perms) = parse_any_line(line)?;
    let whole = |&(dev, ino, size): &FileKey| {
        (dev, ino) == (m.dev, m.ino) && m.end - m.start == size.div_ceil(page) * page
    };
    (perms == "r--s" && m.offset == 0 && files.iter().any(whole))
        .then_some((m.start as usize, m.end as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a shared read-only mapping of a whole known file from offset 0 is handed back:
    /// never a library's segment, a private or writable mapping, or another file.
    #[test]
    fn only_whole_file_mappings_are_released() {
        let dev = libc::makedev(0xfd, 1);
        let files = [(dev, 1234, 0x2_1001)];
        let at = |line: &str| whole_file_mapping(line, &files, 4096);
        assert_eq!(
            at("7f0000000000-7f0000022000 r--s 00000000 fd:01 1234   /usr/bin/node"),
            Some((0x7f00_0000_0000, 0x7f00_0002_2000))
        );
        // A loaded library's first segment: offset 0, but not the whole file.
        assert_eq!(
            at("7f0000000000-7f0000003000 r--p 00000000 fd:01 1234 /x"),
            None
        );
        assert_eq!(
            at("7f0000000000-7f0000022000 r--p 00001000 fd:01 1234 /x"),
            None
        );
        assert_eq!(
            at("7f0000000000-7f0000022000 rw-p 00000000 fd:01 1234 /x"),
            None
        );
        assert_eq!(
            at("7f0000000000-7f0000022000 r-xp 00000000 fd:01 1234 /x"),
            None
        );
        assert_eq!(
            at("7f0000000000-7f0000022000 r--p 00000000 fd:01 1235 /x"),
            None
        );
        assert_eq!(
            at("7f0000000000-7f0000022000 r--p 00000000 fd:02 1234 /x"),
            None
        );
        assert_eq!(
            at("7f0000000000-7f0000022000 rw-s 00000000 fd:01 1234 /x"),
            None
        );
        // A private mapping could hold pages written before an mprotect: never touched.
        assert_eq!(
            at("7f0000000000-7f0000022000 r--p 00000000 fd:01 1234 /x"),
            None
        );
    }
}
