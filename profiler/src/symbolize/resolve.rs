//! Naming normalized addresses: (ELF file, file offset) and kernel addresses. All the
//! offsets one batch needs in one file go to blazesym in one call. The blazesym symbolizers
//! of the files named most recently are kept ([`WARM_FILES`] of them, each with the file's
//! PLT stubs and identity), so a continuous run that finds a few new offsets in a large
//! file each interval does not parse and index it again each time; memory holds those few
//! files' symbols, not every file a long run has seen. Names already found are cached
//! (bounded).

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
};

use blazesym::symbolize::{
    self as bz, Input, Symbolized,
    source::{Elf, Source},
};

use super::{
    ElfFile, FileId,
    debug_file::{Identity, by_build_id},
    frame::{self, Frame, FrameKind},
    inflated::Inflated,
    kallsyms::KernelSymbols,
    plt::PltStubs,
};

/// Directories searched for separate debug information (their `.build-id/` trees, and
/// `.gnu_debuglink` names), after any given with `--debug-dir`.
const SYSTEM_DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];
/// Cached names beyond this are dropped (and found again when needed).
const MAX_CACHED: usize = 1 << 20;
/// Files whose parsed symbols are kept between batches (the least recently named is dropped).
const WARM_FILES: usize = 8;

/// What naming one file needs, kept between batches: blazesym's symbolizer holds the file's
/// parsed symbol table and DWARF once it has read them.
struct Warm {
    id: FileId,
    symbolizer: bz::Symbolizer,
    plt: PltStubs,
    identity: Option<Identity>,
    /// Descriptors of what blazesym reads (the file, or its inflated copy; the separate
    /// debug file), owned here: blazesym caches by path, and `/proc/self/fd/N` names the
    /// same file only while N stays open. `None` until needed; `Some(None)`: none there.
    own: Option<Option<std::fs::File>>,
    debug: Option<Option<std::fs::File>>,
}

fn fd_path(file: &std::fs::File) -> PathBuf {
    PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(file)
    ))
}

/// What the symbolizer could not name in one batch.
#[derive(Debug, Default)]
pub struct SymbolizeErrors {
    /// Files blazesym could not read (their addresses stay unnamed), one line each.
    pub files: Vec<String>,
}

/// The later step: file offsets (and kernel addresses) to names, as blazesym says
/// "symbolize"; the arrival step, addresses to file offsets, is [`super::Normalizer`].
pub struct Symbolizer {
    /// `None` until the first kernel address; then the table, or `Some(None)` if kallsyms
    /// could not be read (every kernel frame is then unknown, as with kallsyms hidden).
    kernel: Option<Option<KernelSymbols>>,
    kernel_cache: HashMap<u64, Arc<[Frame]>>,
    user_cache: HashMap<(FileId, u64), Arc<[Frame]>>,
    debug_dirs: Vec<PathBuf>,
    inflated: Inflated,
    /// The files named most recently, the latest last.
    warm: Vec<Warm>,
    /// False: user frames keep their offsets (`record --symbolize none`).
    user: bool,
}

/// Why one file's offsets could not be symbolized (its frames are then misses).
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error("the symbolizer failed on this file")]
    Panicked,
    #[error(transparent)]
    Blazesym(blazesym::Error),
}

impl Symbolizer {
    /// `debug_dirs`: roots to search for debug files before the system's.
    pub fn new(debug_dirs: &[PathBuf]) -> Self {
        let mut dirs = debug_dirs.to_vec();
        dirs.extend(SYSTEM_DEBUG_DIRS.iter().map(PathBuf::from));
        Self {
            kernel: None,
            kernel_cache: HashMap::new(),
            user_cache: HashMap::new(),
            debug_dirs: dirs,
            inflated: Inflated::default(),
            warm: Vec::new(),
            user: true,
        }
    }

    /// Whether user frames are named (else they keep their file offsets, to be named later).
    pub fn name_user_frames(&mut self, yes: bool) {
        self.user = yes;
    }

    /// Names every (file, offset) of `wanted` not yet known: one blazesym call per file.
    /// `files` holds the open files the offsets are in.
    pub fn resolve_user(
        &mut self,
        files: &HashMap<FileId, ElfFile>,
        wanted: impl IntoIterator<Item = (FileId, u64)>,
    ) -> SymbolizeErrors {
        self.resolve_user_files(files, wanted, None)
    }

    /// [`Symbolizer::resolve_user`] ahead of time, while recording, in files of at most
    /// `max_bytes` (a bigger one is read once, by the batch at the end, not twice): a file
    /// that cannot be read is left for the batch that needs it, which then says so and
    /// counts it.
    pub fn prefetch_user(
        &mut self,
        files: &HashMap<FileId, ElfFile>,
        wanted: impl IntoIterator<Item = (FileId, u64)>,
        max_bytes: u64,
    ) {
        self.resolve_user_files(files, wanted, Some(max_bytes));
    }

    /// `ahead`: naming ahead, in files of at most that many bytes.
    fn resolve_user_files(
        &mut self,
        files: &HashMap<FileId, ElfFile>,
        wanted: impl IntoIterator<Item = (FileId, u64)>,
        ahead: Option<u64>,
    ) -> SymbolizeErrors {
        if self.user_cache.len() > MAX_CACHED {
            self.user_cache.clear();
        }
        if !self.user {
            return SymbolizeErrors::default();
        }
        let mut by_file: BTreeMap<FileId, Vec<u64>> = BTreeMap::new();
        for (id, offset) in wanted {
            if !self.user_cache.contains_key(&(id, offset)) {
                by_file.entry(id).or_default().push(offset);
            }
        }
        let mut errors = SymbolizeErrors::default();
        for (id, mut offsets) in by_file {
            offsets.sort_unstable();
            offsets.dedup();
            let Some(file) = files.get(&id) else {
                continue;
            };
            if let Some(max) = ahead
                && file.file.metadata().map_or(true, |m| m.len() > max)
            {
                continue;
            }
            let frames = match self.file_frames(id, file, &offsets) {
                Ok(frames) => frames,
                Err(_) if ahead.is_some() => continue,
                Err(why) => {
                    errors.files.push(format!("{}: {why}", file.path));
                    offsets
                        .iter()
                        .map(|&o| miss(&file.name, Some(&file.path), o))
                        .collect()
                }
            };
            for (offset, f) in offsets.into_iter().zip(frames) {
                self.user_cache.insert((id, offset), f);
            }
        }
        errors
    }

    /// The warm entry of file `id` (made now if it has none), moved to the end.
    fn warm(&mut self, id: FileId, file: &ElfFile) -> &mut Warm {
        match self.warm.iter().position(|w| w.id == id) {
            Some(i) => {
                let w = self.warm.remove(i);
                self.warm.push(w);
            }
            None => {
                if self.warm.len() >= WARM_FILES {
                    self.warm.remove(0);
                }
                self.warm.push(Warm {
                    id,
                    symbolizer: bz::Symbolizer::builder()
                        .enable_code_info(true)
                        .enable_inlined_fns(true)
                        .enable_demangling(true)
                        .set_debug_dirs(Some(&self.debug_dirs))
                        .build(),
                    plt: PltStubs::read(&file.file),
                    identity: Identity::read(&file.file),
                    own: None,
                    debug: None,
                });
            }
        }
        self.warm.last_mut().expect("just pushed")
    }

    /// The frames of one file's offsets (sorted), in their order.
    fn file_frames(
        &mut self,
        id: FileId,
        file: &ElfFile,
        offsets: &[u64],
    ) -> Result<Vec<Arc<[Frame]>>, FileError> {
        let debug_dirs = std::mem::take(&mut self.debug_dirs);
        let result = self.file_frames_with(id, file, offsets, &debug_dirs);
        self.debug_dirs = debug_dirs;
        result
    }

    fn file_frames_with(
        &mut self,
        id: FileId,
        file: &ElfFile,
        offsets: &[u64],
        debug_dirs: &[PathBuf],
    ) -> Result<Vec<Arc<[Frame]>>, FileError> {
        // (Taken out so the inflated copies can be made while the entry is borrowed.)
        let mut inflated = std::mem::take(&mut self.inflated);
        let w = self.warm(id, file);
        let rest: Vec<u64> = offsets
            .iter()
            .copied()
            .filter(|&o| !w.plt.contains(o))
            .collect();
        // A debug file found by build id is read instead of the file, at the virtual
        // addresses the two share; else the file itself, by file offset (blazesym follows
        // its debuglink or MiniDebugInfo).
        let vaddrs: Option<Vec<u64>> = w
            .identity
            .as_ref()
            .and_then(|i| rest.iter().map(|&o| i.vaddr(o)).collect());
        let debug = match (&vaddrs, &w.identity) {
            (Some(_), Some(i)) => w
                .debug
                .get_or_insert_with(|| {
                    let path = by_build_id(debug_dirs, i.build_id.as_deref()?)?;
                    std::fs::File::open(inflated.path_for(&path)).ok()
                })
                .as_ref(),
            _ => None,
        };
        let (path, input) = match (debug, &vaddrs) {
            (Some(d), Some(v)) => (fd_path(d), Input::VirtOffset(v.as_slice())),
            _ => {
                let own = w.own.get_or_insert_with(|| {
                    std::fs::File::open(inflated.path_of(&file.file, file.fd_path())).ok()
                });
                match own {
                    Some(f) => (fd_path(f), Input::FileOffset(rest.as_slice())),
                    None => (file.fd_path(), Input::FileOffset(rest.as_slice())),
                }
            }
        };
        self.inflated = inflated;
        let w = self.warm.last().expect("the entry just used");
        let src = Elf {
            debug_syms: true,
            ..Elf::new(path)
        };
        let symbols = if rest.is_empty() {
            Vec::new()
        } else {
            // A file another user controls must not take the whole profile down with it.
            let call =
                std::panic::AssertUnwindSafe(|| w.symbolizer.symbolize(&Source::Elf(src), input));
            match std::panic::catch_unwind(call) {
                Ok(r) => r.map_err(FileError::Blazesym)?,
                Err(_) => {
                    // Its state may be anything now: made again next time.
                    self.warm.pop();
                    return Err(FileError::Panicked);
                }
            }
        };
        let plt = &w.plt;
        let mut symbols = rest.iter().zip(symbols);
        let path = Some(&file.path);
        Ok(offsets
            .iter()
            .map(|&o| {
                if plt.contains(o) {
                    return match plt.name(o) {
                        Some(name) => {
                            let mut f = Frame::named(&name, FrameKind::User);
                            f.module = Some(file.name.clone());
                            f.path = Some(file.path.clone());
                            Arc::from([f])
                        }
                        None => miss(&file.name, path, o),
                    };
                }
                match symbols.next() {
                    Some((_, Symbolized::Sym(sym))) => {
                        frame::from_sym(&sym, FrameKind::User, &file.name, path)
                    }
                    _ => miss(&file.name, path, o),
                }
            })
            .collect())
    }

    /// The frames of virtual addresses of a file of which only the separate debug file
    /// `debug` is at hand (named `name`, at `path` where it was recorded).
    pub fn debug_file_frames(
        &mut self,
        debug: &std::path::Path,
        name: &Arc<str>,
        path: &Arc<str>,
        vaddrs: &[u64],
    ) -> Vec<Arc<[Frame]>> {
        let symbolizer = bz::Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(true)
            .build();
        let src = Elf {
            debug_syms: true,
            ..Elf::new(self.inflated.path_for(debug))
        };
        let call = std::panic::AssertUnwindSafe(|| {
            symbolizer.symbolize(&Source::Elf(src), Input::VirtOffset(vaddrs))
        });
        let found = std::panic::catch_unwind(call)
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let mut found = found.into_iter();
        vaddrs
            .iter()
            .map(|&v| match found.next() {
                Some(Symbolized::Sym(sym)) => {
                    frame::from_sym(&sym, FrameKind::User, name, Some(path))
                }
                _ => miss(name, Some(path), v),
            })
            .collect()
    }

    /// The frames of a resolved (file, offset); a miss if it was never resolved.
    pub fn user(
        &self,
        id: FileId,
        offset: u64,
        name: Option<(Arc<str>, Arc<str>)>,
    ) -> Arc<[Frame]> {
        match self.user_cache.get(&(id, offset)) {
            Some(f) => f.clone(),
            None => match name {
                Some((name, path)) => miss(&name, Some(&path), offset),
                None => Arc::from([Frame::unknown(FrameKind::User, None)]),
            },
        }
    }

    /// Reads the kernel's symbols (kept for later calls) without naming anything.
    pub fn load_kernel_symbols(&mut self) -> Option<&KernelSymbols> {
        self.kernel
            .get_or_insert_with(|| KernelSymbols::load().ok())
            .as_ref()
    }

    /// Names every kernel address of `addrs` not yet known.
    pub fn resolve_kernel(&mut self, addrs: impl IntoIterator<Item = u64>) {
        if self.kernel_cache.len() > MAX_CACHED {
            self.kernel_cache.clear();
        }
        let mut new: Vec<u64> = addrs
            .into_iter()
            .filter(|a| !self.kernel_cache.contains_key(a))
            .collect();
        new.sort_unstable();
        new.dedup();
        if new.is_empty() {
            return;
        }
        let module: Arc<str> = Arc::from("[kernel.kallsyms]");
        let symbols = self.load_kernel_symbols();
        let frames: Vec<(u64, Arc<[Frame]>)> = new
            .into_iter()
            .map(|addr| {
                let f = match symbols.and_then(|s| s.find(addr)) {
                    Some(name) => Frame {
                        module: Some(module.clone()),
                        ..Frame::named(&name, FrameKind::Kernel)
                    },
                    None => Frame::unknown(FrameKind::Kernel, Some(module.clone())),
                };
                (addr, Arc::from([f]))
            })
            .collect();
        self.kernel_cache.extend(frames);
    }

    /// The frames of a resolved kernel address.
    pub fn kernel(&self, addr: u64) -> Arc<[Frame]> {
        self.kernel_cache.get(&addr).cloned().unwrap_or_else(|| {
            Arc::from([Frame::unknown(
                FrameKind::Kernel,
                Some(Arc::from("[kernel.kallsyms]")),
            )])
        })
    }
}

/// An address no symbol covers: its module and offset, so it stays a value one can look up.
fn miss(name: &Arc<str>, path: Option<&Arc<str>>, offset: u64) -> Arc<[Frame]> {
    Arc::from([Frame::at_offset(
        FrameKind::User,
        name.clone(),
        path.cloned(),
        offset,
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{Normalizer, UserFrame};

    #[inline(never)]
    fn first_named_function() -> u64 {
        std::hint::black_box(1)
    }

    #[inline(never)]
    fn second_named_function() -> u64 {
        std::hint::black_box(2)
    }

    /// (file, offset) of `addr` in this process.
    fn file_offset(n: &mut Normalizer, addr: u64) -> (FileId, u64) {
        let pid = std::process::id();
        match n.normalize(pid, None, addr, false) {
            UserFrame::File { file, offset } => (file, offset),
            UserFrame::Named(f) => panic!("{addr:#x} not in a file: {f:?}"),
        }
    }

    fn names(s: &Symbolizer, id: FileId, offset: u64) -> Vec<String> {
        s.user(id, offset, None)
            .iter()
            .map(|f| f.function.to_string())
            .collect()
    }

    #[test]
    fn a_file_named_again_reuses_its_parsed_symbols_and_files_stay_apart() {
        let mut n = Normalizer::new();
        n.observe(std::process::id(), None);
        let (exe, first) = file_offset(&mut n, first_named_function as *const () as usize as u64);
        let (exe2, second) =
            file_offset(&mut n, second_named_function as *const () as usize as u64);
        let (libc, getpid) = file_offset(&mut n, libc::getpid as *const () as usize as u64);
        assert_eq!(exe, exe2);
        assert_ne!(exe, libc);
        let files = n.open_files([exe, libc]);
        let mut s = Symbolizer::new(&[]);
        // Two batches in one file: the second finds the first's entry.
        s.resolve_user(&files, [(exe, first)]);
        s.resolve_user(&files, [(exe, second)]);
        assert_eq!(s.warm.len(), 1);
        assert!(
            names(&s, exe, first)
                .iter()
                .any(|n| n.ends_with("first_named_function")),
            "{:?}",
            names(&s, exe, first)
        );
        assert!(
            names(&s, exe, second)
                .iter()
                .any(|n| n.ends_with("second_named_function")),
            "{:?}",
            names(&s, exe, second)
        );
        // The same offset in another file is that file's, not a cached name of the first.
        s.resolve_user(&files, [(libc, getpid), (exe, getpid)]);
        assert_eq!(s.warm.len(), 2);
        assert!(
            names(&s, libc, getpid).iter().any(|n| n.contains("getpid")),
            "{:?}",
            names(&s, libc, getpid)
        );
        assert!(
            !names(&s, exe, getpid).iter().any(|n| n.contains("getpid")),
            "{:?}",
            names(&s, exe, getpid)
        );
        // Past WARM_FILES files, the least recently named goes first.
        for id in 100..100 + WARM_FILES as FileId {
            let w = s.warm(id, &files[&exe]);
            assert_eq!(w.id, id);
        }
        assert_eq!(s.warm.len(), WARM_FILES);
        assert!(s.warm.iter().all(|w| w.id != exe && w.id != libc));
    }
}
