//! From sampled addresses to named frames, in two steps.
//!
//! On arrival ([`Normalizer`], on the ring reader's thread), each user address is
//! normalized through the memory maps captured while its process lived into (ELF file, file
//! offset), the file opened and checked then; JIT code is named from the process's perf map
//! at once. Stacks then no longer depend on any process, which may exit and whose pid may be
//! reused. Later and elsewhere ([`Symbolizer`]), the offsets of each file are named in one
//! batch, and kernel addresses through kallsyms. A miss is a value (`[module]+0xoffset`),
//! never an error.

mod frame;
pub mod go;
mod inflated;
mod kallsyms;
mod leaf;
mod maps;
mod plt;
mod resolve;
mod warm;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use blazesym::symbolize::{
    self as bz, Input, Symbolized,
    source::{Elf, Source},
};
pub use profiler_formats::symbolize::{
    Frame, FrameKind, Identity, PerfMap, by_build_id, files_by_id,
};

use crate::modules::ElfFiles;
pub use crate::modules::{ElfFile, FileId};

use crate::modules::MapHistory;
pub use maps::{MapEntry, ProcessMaps};
pub use resolve::{SymbolizeErrors, Symbolizer};

/// A location in a file: (path, file offset).
type FileKey = (Arc<str>, u64);

/// A user address, normalized on arrival.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum UserFrame {
    /// An offset in an ELF file (a return address already moved back into its call).
    File { file: FileId, offset: u64 },
    /// Named on arrival (JIT code from a perf map), or nothing can name it.
    Named(Arc<[Frame]>),
}

impl UserFrame {
    /// The (file, offset) of a frame in a file; `None` for one named on arrival.
    pub fn in_file(&self) -> Option<(FileId, u64)> {
        match self {
            UserFrame::File { file, offset } => Some((*file, *offset)),
            UserFrame::Named(_) => None,
        }
    }
}

/// How the function around an address starts, and how far into it the address is.
type PrologueAt = Option<(leaf::Prologue, u64)>;

/// A process's map snapshots, one per program image (command name) it was seen running.
#[derive(Default)]
struct Images {
    snaps: Vec<([u8; 16], Arc<ProcessMaps>)>,
}

impl Images {
    fn get(&self, comm: Option<&[u8; 16]>) -> Option<&ProcessMaps> {
        comm.and_then(|c| self.snaps.iter().rev().find(|(k, _)| k == c))
            .or(self.snaps.last())
            .map(|(_, m)| m.as_ref())
    }
}

/// The arrival side: per-process map snapshots, perf maps and the opened ELF files.
pub struct Normalizer {
    /// Reads function starts for the frame-pointer path's leaf-caller check (see [`leaf`]).
    inner: bz::Symbolizer,
    maps: HashMap<u32, Images>,
    prologue_cache: HashMap<FileKey, PrologueAt>,
    /// Go binaries' function tables by path (`None`: not Go), for their frame sizes.
    go_tables: HashMap<Arc<str>, Option<Arc<go::GoTable>>>,
    call_cache: HashMap<FileKey, bool>,
    /// JIT symbols per process (`/tmp/perf-PID.map`), read while it lives.
    perf_maps: HashMap<u32, PerfMap>,
    jit_cache: HashMap<(u32, u64), Arc<[Frame]>>,
    /// The ELF files blazesym reads, opened and checked by us.
    elf: ElfFiles,
    /// Each process's uid, read when it was first seen: who may own its perf map.
    uids: HashMap<u32, u32>,
    /// Processes whose perf map was refused (not read again).
    refused_maps: HashSet<u32>,
    /// Refused perf maps, one line each, until taken.
    refusals: Vec<String>,
    /// Per process: when its maps were last re-read for an address outside them, and the
    /// wait before the next re-read (see [`Normalizer::refresh`]).
    refreshed: HashMap<u32, (Instant, Duration)>,
    /// Each process's mappings as the kernel reported them since the start (the sideband),
    /// for processes gone, or exec'ed into another image, before their samples are read.
    history: MapHistory,
}

/// Files up to this size have their symbols read for the leaf-caller check of a process
/// still waiting for its unwind tables (an executable or a common library, not a compiler's
/// 150 MiB library).
const SMALL_FILE_BYTES: u64 = 16 << 20;

/// The profiled processes are of the profiler's own architecture: their leaf callers are
/// recovered with its instructions (see [`leaf`]).
const AARCH64: bool = cfg!(target_arch = "aarch64");
/// First and longest wait between two re-reads of one process's maps. Frame-pointer walks
/// of code built without them yield addresses in no mapping, many a second: re-reading the
/// maps of a process with thousands of mappings (rustc) at each one held the reader for
/// seconds beside a Rust build, and late samples lost their processes' maps.
const REFRESH_MIN: Duration = Duration::from_millis(5);
const REFRESH_MAX: Duration = Duration::from_secs(1);

impl Default for Normalizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Normalizer {
    pub fn new() -> Self {
        let inner = bz::Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(true)
            .build();
        Self {
            inner,
            maps: HashMap::new(),
            prologue_cache: HashMap::new(),
            go_tables: HashMap::new(),
            call_cache: HashMap::new(),
            perf_maps: HashMap::new(),
            jit_cache: HashMap::new(),
            elf: ElfFiles::default(),
            uids: HashMap::new(),
            refused_maps: HashSet::new(),
            refusals: Vec::new(),
            refreshed: HashMap::new(),
            history: MapHistory::default(),
        }
    }

    /// The mappings reported by the kernel, to apply its sideband records to.
    pub fn history_mut(&mut self) -> &mut MapHistory {
        &mut self.history
    }

    /// The table of opened files and the mappings' history (the unwinder's registry reads
    /// through the one, a gone process's mappings from the other).
    pub fn files_and_history(&mut self) -> (&mut ElfFiles, &MapHistory) {
        (&mut self.elf, &self.history)
    }

    /// `pid`'s mappings when it ran `comm`, as the kernel reported them.
    fn reported_maps(&self, pid: u32, comm: Option<&[u8; 16]>) -> Option<Arc<ProcessMaps>> {
        let maps = self.history.mappings(pid, comm)?;
        Some(Arc::new(ProcessMaps::from_mappings(maps)))
    }

    /// The files refused since the last call (perf maps and ELF files of targets that were
    /// FIFOs, symlinks, devices, too large, foreign or replaced), one line each, once each.
    pub fn take_refusals(&mut self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.refusals);
        out.extend(self.elf.take_refusals());
        out
    }

    /// Reads `pid`'s perf map under the untrusted-file rules; a refusal is noted once.
    fn read_perf_map(&mut self, pid: u32) -> Option<PerfMap> {
        if self.refused_maps.contains(&pid) {
            return None;
        }
        match PerfMap::read(pid, self.uids.get(&pid).copied()) {
            Ok(map) => map,
            Err(why) => {
                self.refusals
                    .push(format!("perf map of process {pid}: {why}"));
                self.refused_maps.insert(pid);
                None
            }
        }
    }

    /// Captures `pid`'s memory maps the first time it is seen running the program named
    /// `comm` (call while it may still live). An exec replaces a process's maps and its
    /// command name: a pid sampled before and after an exec (a forked child that execs)
    /// gets a snapshot per image. `None`: any image will do (no name is known).
    pub fn observe(&mut self, pid: u32, comm: Option<[u8; 16]>) {
        if pid == 0 {
            return;
        }
        let images = self.maps.entry(pid).or_default();
        let seen = match comm {
            Some(c) => images.snaps.iter().any(|(k, _)| *k == c),
            None => !images.snaps.is_empty(),
        };
        if seen {
            return;
        }
        let first = images.snaps.is_empty();
        let last = images.snaps.last().map(|(_, m)| m.clone());
        // What the kernel reported of this image (`None` for processes that predate the
        // recording, or without the sideband).
        let reported = self.history.image(pid, comm.as_ref());
        let maps = match ProcessMaps::read(pid) {
            // Alive but running another image since (an exec): the one sampled.
            Ok(_) if reported == Some(false) => {
                self.reported_maps(pid, comm.as_ref()).unwrap_or_default()
            }
            // A zombie's maps read as empty: as gone, the kernel's report, else the last
            // image seen, is the best guess.
            Ok(m) if m.entries().is_empty() && (last.is_some() || reported.is_some()) => self
                .reported_maps(pid, comm.as_ref())
                .or(last)
                .unwrap_or_default(),
            // A process whose exec the sideband saw: what it reported, /proc's mappings over
            // it (a read that races the process's exit can end early: the file is made a
            // page at a time, the process's memory unlocked between pages).
            Ok(m) => {
                let m = match reported
                    .filter(|&latest| latest)
                    .and_then(|_| self.reported_maps(pid, comm.as_ref()))
                {
                    Some(r) => r.merged(&m),
                    None => m,
                };
                // Threads with their own names share one snapshot when nothing changed.
                match last {
                    Some(last) if *last == m => last,
                    _ => Arc::new(m),
                }
            }
            // Gone: never /proc (its pid may be another process's by now).
            Err(_) => self
                .reported_maps(pid, comm.as_ref())
                .or(last)
                .unwrap_or_default(),
        };
        let images = self.maps.entry(pid).or_default();
        images.snaps.push((comm.unwrap_or_default(), maps));
        if first {
            if let Some(uid) = crate::untrusted::process_uid(pid) {
                self.uids.insert(pid, uid);
            }
            if let Some(map) = self.read_perf_map(pid) {
                self.perf_maps.insert(pid, map);
            }
        }
    }

    /// Reads `pid`'s maps again (a library was mapped since they were captured) and merges
    /// them into its latest snapshot.
    pub fn merge_current_maps(&mut self, pid: u32) {
        let Some(last) = self.maps.get_mut(&pid).and_then(|i| i.snaps.last_mut()) else {
            return self.observe(pid, None);
        };
        match ProcessMaps::read(pid) {
            Ok(now) if !now.entries().is_empty() && *last.1 != now => {
                last.1 = Arc::new(last.1.merged(&now));
            }
            _ => {}
        }
    }

    /// The maps of `pid` when it ran `comm` (else its latest image).
    fn maps_of(&self, pid: u32, comm: Option<&[u8; 16]>) -> Option<&ProcessMaps> {
        self.maps.get(&pid)?.get(comm)
    }

    /// Drops what is kept per process for processes that have exited (their stacks are
    /// normalized already), so memory follows the live processes, not every process a long
    /// run ever saw.
    pub fn forget_exited(&mut self) {
        let alive = |pid: &u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
        self.maps.retain(|pid, _| alive(pid));
        self.perf_maps.retain(|pid, _| alive(pid));
        self.jit_cache.retain(|(pid, _), _| alive(pid));
        self.uids.retain(|pid, _| alive(pid));
        self.refused_maps.retain(|pid| alive(pid));
        self.refreshed.retain(|pid, _| alive(pid));
        self.maps.shrink_to_fit();
        self.perf_maps.shrink_to_fit();
        self.jit_cache.shrink_to_fit();
    }

    /// The one table of opened files, which the unwinder's registry reads files through too.
    pub fn files(&mut self) -> &mut ElfFiles {
        &mut self.elf
    }

    /// The files `ids` that are open, shared (not handed over: they stay open here), for
    /// naming ahead while recording ([`crate::record`]'s prefetch).
    pub fn open_files(&self, ids: impl IntoIterator<Item = FileId>) -> HashMap<FileId, ElfFile> {
        ids.into_iter()
            .filter_map(|id| Some((id, self.elf.get(id)?)))
            .collect()
    }

    /// The open files `ids` (those an interval's stacks refer to), for whoever names their
    /// offsets; our own descriptors are closed, to be opened again when a sample needs them,
    /// so open files follow what is sampled, not everything a long run saw.
    pub fn hand_over(&mut self, ids: impl IntoIterator<Item = FileId>) -> HashMap<FileId, ElfFile> {
        let out = self.open_files(ids);
        self.elf.close_all();
        // blazesym named the files by our descriptor numbers, which will be reused: start
        // afresh (this also lets go of what it parsed).
        self.inner = Self::new().inner;
        self.prologue_cache.clear();
        self.go_tables.clear();
        self.call_cache.clear();
        out
    }

    /// The JIT function at `addr` from the process's perf map; the map is read again once
    /// per unresolved address, since JITs keep appending to it.
    fn jit(&mut self, pid: u32, addr: u64, module: Option<Arc<str>>) -> Arc<[Frame]> {
        if let Some(f) = self.jit_cache.get(&(pid, addr)) {
            return f.clone();
        }
        let mut name = self.perf_maps.get(&pid).and_then(|m| m.find(addr)).cloned();
        if name.is_none()
            && let Some(map) = self.read_perf_map(pid)
        {
            name = map.find(addr).cloned();
            self.perf_maps.insert(pid, map);
        }
        let mut frame = Frame::unknown(FrameKind::User, module);
        if let Some(name) = name {
            frame.function = name;
            frame.module = Some(Arc::from(format!("perf-{pid}.map").as_str()));
        }
        let frames: Arc<[Frame]> = Arc::from([frame]);
        self.jit_cache.insert((pid, addr), frames.clone());
        frames
    }

    /// Re-reads `pid`'s maps (after an address fell outside every known mapping: a dlopen),
    /// unless they were re-read less than a wait ago; the wait doubles while re-reads find
    /// nothing new (from [`REFRESH_MIN`] up to [`REFRESH_MAX`]) and starts over when they do.
    /// Returns whether they were re-read.
    fn refresh(&mut self, pid: u32, comm: Option<&[u8; 16]>) -> bool {
        let now = Instant::now();
        let wait = match self.refreshed.get(&pid) {
            Some(&(at, wait)) if now.duration_since(at) < wait => return false,
            Some(&(_, wait)) => wait,
            None => REFRESH_MIN,
        };
        let key = comm.copied().unwrap_or_default();
        let mut changed = false;
        // A zombie's (or a gone process's) maps are no better than what we have; the
        // kernel's report of its mappings may be.
        let read = ProcessMaps::read(pid)
            .ok()
            .filter(|m| !m.entries().is_empty())
            .or_else(|| self.reported_maps(pid, comm).map(|m| (*m).clone()));
        if let Some(maps) = read {
            let images = self.maps.entry(pid).or_default();
            changed = images
                .snaps
                .iter()
                .rev()
                .find(|(k, _)| *k == key)
                .is_none_or(|(_, m)| **m != maps);
            images.snaps.retain(|(k, _)| *k != key);
            images.snaps.push((key, Arc::new(maps)));
        }
        let wait = if changed {
            REFRESH_MIN
        } else {
            (wait * 2).min(REFRESH_MAX)
        };
        self.refreshed.insert(pid, (now, wait));
        true
    }

    /// Normalizes one user address of `pid` running `comm`. `is_return` addresses are
    /// moved back into the call instruction.
    pub fn normalize(
        &mut self,
        pid: u32,
        comm: Option<&[u8; 16]>,
        addr: u64,
        is_return: bool,
    ) -> UserFrame {
        let lookup = if is_return {
            addr.saturating_sub(1)
        } else {
            addr
        };
        let found = self
            .maps_of(pid, comm)
            .and_then(|m| m.find(lookup))
            .cloned();
        let entry = match found {
            Some(e) => e,
            None => {
                if !self.refresh(pid, comm) {
                    // Not re-read so soon: unnamed this time, and not remembered as such
                    // (a library just loaded is found at a later re-read).
                    return UserFrame::Named(Arc::from([Frame::unknown(FrameKind::User, None)]));
                }
                match self
                    .maps_of(pid, comm)
                    .and_then(|m| m.find(lookup))
                    .cloned()
                {
                    Some(e) => e,
                    // Code the maps never showed (a process gone before we saw it, or a
                    // JIT region since unmapped): its perf map may still name it.
                    None => return UserFrame::Named(self.jit(pid, lookup, None)),
                }
            }
        };
        if entry.path.is_none() && entry.name.as_ref() != "[vdso]" {
            // Anonymous executable memory: JIT-generated code.
            return UserFrame::Named(self.jit(pid, lookup, Some(entry.name.clone())));
        }
        let offset = lookup - entry.start + entry.offset;
        match self.elf.id_for(pid, &entry) {
            Some(file) => UserFrame::File { file, offset },
            None => UserFrame::Named(Arc::from([Frame::at_offset(
                FrameKind::User,
                entry.name.clone(),
                entry.path.clone(),
                offset,
            )])),
        }
    }

    /// Names one user address at once (one-off lookups; recordings normalize on arrival and
    /// name whole batches).
    pub fn user_now(
        &mut self,
        pid: u32,
        comm: Option<&[u8; 16]>,
        addr: u64,
        is_return: bool,
    ) -> Arc<[Frame]> {
        match self.normalize(pid, comm, addr, is_return) {
            UserFrame::Named(frames) => frames,
            UserFrame::File { file, offset } => {
                let Some(elf) = self.elf.get(file) else {
                    return Arc::from([Frame::unknown(FrameKind::User, None)]);
                };
                let name = Some((elf.name.clone(), elf.path.clone()));
                let files = HashMap::from([(file, elf)]);
                let mut symbolizer = Symbolizer::new(&[]);
                symbolizer.resolve_user(&files, [(file, offset)]);
                symbolizer.user(file, offset, name)
            }
        }
    }

    /// The checked file behind `entry` of `pid`.
    fn checked_file(&mut self, pid: u32, entry: &MapEntry) -> Option<ElfFile> {
        let id = self.elf.id_for(pid, entry)?;
        self.elf.get(id)
    }

    /// The caller frame a frame-pointer walk missed, if any (see [`leaf`]): given the user
    /// IP, the walked caller and the leaf's candidate return address (x86-64's word at the
    /// stack pointer, aarch64's link register), returns the return address to insert after
    /// the IP. `small_files_only`: not worth reading a big file's symbols for
    /// (a process about to have its unwind tables).
    pub fn missing_leaf_caller(
        &mut self,
        pid: u32,
        comm: Option<&[u8; 16]>,
        ip: u64,
        walked: Option<u64>,
        sp_word: u64,
        small_files_only: bool,
    ) -> Option<u64> {
        if walked == Some(sp_word) {
            return None;
        }
        let (entry, offset) = self.file_offset(pid, comm, ip)?;
        let key = (entry.path.clone()?, offset);
        let known = self.prologue_cache.get(&key).copied();
        let (prologue, offset_in_fn) = match known {
            Some(v) => v?,
            None => {
                let file = self.checked_file(pid, &entry)?;
                if small_files_only && file.file.metadata().ok()?.len() > SMALL_FILE_BYTES {
                    return None;
                }
                // A Go binary says exactly where each PC's return address is (its pcsp
                // table: 0 bytes of frame means at the stack pointer), stripped or not.
                if let Some(go) = self.go_table(&key.0, &file) {
                    let found = go
                        .vaddr(offset)
                        .and_then(|pc| go.frame_size(pc))
                        .map(|size| match size {
                            0 => (leaf::Prologue::Frameless, 0),
                            _ => (leaf::Prologue::FramePointer { prologue_len: 0 }, 1),
                        });
                    self.prologue_cache.insert(key, found);
                    found?
                } else {
                    let mut src = Elf::new(file.fd_path());
                    src.debug_syms = false;
                    let found = match self
                        .inner
                        .symbolize_single(&Source::Elf(src), Input::FileOffset(offset))
                    {
                        Ok(Symbolized::Sym(sym)) => {
                            let start = offset - sym.offset as u64;
                            let prologue = if AARCH64 {
                                // At its return (x29 restored already) a function's return
                                // address is in x30, as before its record was linked.
                                let returning = leaf::read_bytes::<4>(&file.file, offset)
                                    .is_some_and(|b| leaf::returns_aarch64(&b));
                                leaf::read_bytes::<32>(&file.file, start).map(|b| {
                                    if returning {
                                        leaf::Prologue::Frameless
                                    } else {
                                        leaf::classify_prologue_aarch64(&b)
                                    }
                                })
                            } else {
                                leaf::read_bytes::<8>(&file.file, start)
                                    .map(|b| leaf::classify_prologue(&b))
                            };
                            prologue.map(|p| (p, sym.offset as u64))
                        }
                        _ => None,
                    };
                    self.prologue_cache.insert(key, found);
                    found?
                }
            }
        };
        if !leaf::return_address_at_sp(prologue, offset_in_fn) {
            return None;
        }
        let (ret_entry, ret_offset) = self.file_offset(pid, comm, sp_word)?;
        // A frameless aarch64 function that calls others has x30 pointing back into itself
        // after a call returns: not a caller.
        if AARCH64
            && ret_entry.path == entry.path
            && ret_offset <= offset
            && ret_offset >= offset - offset_in_fn
        {
            return None;
        }
        let key = (ret_entry.path.clone()?, ret_offset);
        let is_call = match self.call_cache.get(&key) {
            Some(&v) => v,
            None => {
                let file = self.checked_file(pid, &ret_entry)?;
                let v = if AARCH64 {
                    ret_offset >= 4
                        && leaf::read_bytes::<4>(&file.file, ret_offset - 4)
                            .is_some_and(|b| leaf::preceded_by_call_aarch64(&b))
                } else {
                    ret_offset >= 7
                        && leaf::read_bytes::<7>(&file.file, ret_offset - 7)
                            .is_some_and(|b| leaf::preceded_by_call(&b))
                };
                self.call_cache.insert(key, v);
                v
            }
        };
        is_call.then_some(sp_word)
    }

    /// The Go function table of the file at `path` (kept: a few, read once each).
    fn go_table(&mut self, path: &Arc<str>, file: &ElfFile) -> Option<Arc<go::GoTable>> {
        const MAX_GO_TABLES: usize = 8;
        if let Some(t) = self.go_tables.get(path) {
            return t.clone();
        }
        if self.go_tables.len() >= MAX_GO_TABLES {
            self.go_tables.clear();
        }
        let t = go::GoTable::read(&file.file).ok().flatten().map(Arc::new);
        self.go_tables.insert(path.clone(), t.clone());
        t
    }

    /// (mapping, file offset) of a user address of `pid` in a file, from the captured maps.
    fn file_offset(&self, pid: u32, comm: Option<&[u8; 16]>, addr: u64) -> Option<(MapEntry, u64)> {
        let e = self.maps_of(pid, comm)?.find(addr)?;
        e.path.as_ref()?;
        Some((e.clone(), addr - e.start + e.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> [u8; 16] {
        let mut n = [0u8; 16];
        n[..s.len()].copy_from_slice(s.as_bytes());
        n
    }

    #[test]
    fn an_image_per_command_name_and_the_latest_otherwise() {
        let maps = |start| {
            Arc::new(ProcessMaps::parse(&format!(
                "{start:x}-{:x} r-xp 00000000 00:00 0 /bin/x\n",
                start + 0x1000
            )))
        };
        let images = Images {
            snaps: vec![(name("sh"), maps(0x1000)), (name("chain"), maps(0x5000))],
        };
        let start = |m: Option<&ProcessMaps>| m.unwrap().entries()[0].start;
        assert_eq!(start(images.get(Some(&name("sh")))), 0x1000);
        assert_eq!(start(images.get(Some(&name("chain")))), 0x5000);
        assert_eq!(start(images.get(Some(&name("other")))), 0x5000);
        assert_eq!(start(images.get(None)), 0x5000);
        assert!(Images::default().get(None).is_none());
    }

    #[test]
    fn threads_with_other_names_share_one_snapshot() {
        let mut s = Normalizer::new();
        let pid = std::process::id();
        s.observe(pid, Some(name("main")));
        s.observe(pid, Some(name("worker")));
        s.observe(pid, Some(name("main")));
        let snaps = &s.maps[&pid].snaps;
        assert_eq!(snaps.len(), 2);
        // Unless the maps changed between the two reads, the snapshot is shared.
        if snaps[0].1 == snaps[1].1 {
            assert!(Arc::ptr_eq(&snaps[0].1, &snaps[1].1));
        }
    }

    /// A process whose exec the sideband reported keeps what it reported beside what /proc
    /// says now: a /proc read cut short (by the process's exit) loses none of its mappings.
    #[test]
    fn what_the_sideband_reported_fills_in_proc_s_maps() {
        use crate::perf::SideRecord;
        let mut s = Normalizer::new();
        let pid = std::process::id();
        let h = s.history_mut();
        h.apply(&SideRecord::Comm {
            pid,
            tid: pid,
            comm: name("tests"),
            exec: true,
            time: 0,
        });
        // A mapping /proc cannot have (the top of the user address space is the stack's).
        h.apply(&SideRecord::Mmap {
            pid,
            addr: 0x7fff_ffff_0000,
            len: 0x1000,
            pgoff: 0,
            dev: 1,
            ino: 2,
            path: "/lib/ld-linux.so".into(),
            time: 1,
        });
        s.observe(pid, Some(name("tests")));
        let maps = s.maps_of(pid, Some(&name("tests"))).unwrap();
        let proc = ProcessMaps::read(pid).unwrap();
        assert_eq!(maps.entries().len(), proc.entries().len() + 1);
        assert_eq!(
            maps.find(0x7fff_ffff_0010).map(|e| e.name.as_ref()),
            Some("ld-linux.so")
        );
        let text = proc.entries()[0].start;
        assert_eq!(maps.find(text), proc.find(text), "/proc's own entries kept");
    }
}
