//! Naming normalized addresses: (ELF file, file offset) and kernel addresses. All the
//! offsets one batch needs in one file go to blazesym in one call. A file's parsed state is
//! kept while the run keeps naming addresses in it, and let go once it is idle
//! ([`super::warm`]), so memory holds the files being named now, not every file a long run
//! has seen. Names already found are cached (bounded).

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
    ElfFile, FileId, Frame, FrameKind, frame,
    go::GoTable,
    inflated::Inflated,
    kallsyms::KernelSymbols,
    warm::{WarmFile, WarmFiles},
};

/// Directories searched for separate debug information (their `.build-id/` trees, and
/// `.gnu_debuglink` names), after any given with `--debug-dir`.
const SYSTEM_DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];
/// Cached names beyond this are dropped (and found again when needed).
const MAX_CACHED: usize = 1 << 20;

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
    /// False: user frames keep their offsets (`record --symbolize none`).
    user: bool,
    /// Files whose Go function table was refused (said once each).
    go_refused: std::collections::HashSet<FileId>,
    /// One blazesym symbolizer for the run: it keeps each warm file's parsed state (symbol
    /// table, DWARF units) between batches; [`WarmFiles`] says when to let a file go.
    bz: bz::Symbolizer,
    warm: WarmFiles,
}

/// One file's frames, and why its Go function table was refused, if it was.
type FileFrames = (Vec<Arc<[Frame]>>, Option<String>);

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
            inflated: Inflated::default(),
            user: true,
            go_refused: Default::default(),
            bz: bz::Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .set_debug_dirs(Some(&dirs))
                .build(),
            debug_dirs: dirs,
            warm: WarmFiles::default(),
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
        let named_some = !by_file.is_empty();
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
                Ok((frames, go_refused)) => {
                    if let Some(why) = go_refused
                        && self.go_refused.insert(id)
                    {
                        errors.files.push(format!("{}: {why}", file.path));
                    }
                    frames
                }
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
        if named_some {
            self.warm.cool(&mut self.bz);
        }
        errors
    }

    /// The frames of one file's offsets (sorted), in their order, and why the file's Go
    /// function table was refused, if it was.
    fn file_frames(
        &mut self,
        id: FileId,
        file: &ElfFile,
        offsets: &[u64],
    ) -> Result<FileFrames, FileError> {
        let warm = self.warm.get(id, file, &self.debug_dirs);
        let rest: Vec<u64> = offsets
            .iter()
            .copied()
            .filter(|&o| !warm.plt.contains(o))
            .collect();
        // A debug file found by build id is read instead of the file, at the virtual
        // addresses the two share; else the file itself, by file offset (blazesym follows
        // its debuglink or MiniDebugInfo).
        let separate = warm.separate.as_ref().and_then(|debug| {
            let i = warm.identity.as_ref()?;
            let vaddrs: Option<Vec<u64>> = rest.iter().map(|&o| i.vaddr(o)).collect();
            Some((debug, vaddrs?))
        });
        let (path, input) = match &separate {
            Some((debug, vaddrs)) => (
                self.inflated.path_for(debug),
                Input::VirtOffset(vaddrs.as_slice()),
            ),
            None => (
                self.inflated.path_of(&file.file, file.fd_path()),
                Input::FileOffset(rest.as_slice()),
            ),
        };
        let symbols = if rest.is_empty() {
            Vec::new()
        } else {
            warm.read_as(path.clone());
            let src = Elf {
                debug_syms: true,
                ..Elf::new(path)
            };
            // A file another user controls must not take the whole profile down with it.
            let bz = &self.bz;
            let call = std::panic::AssertUnwindSafe(|| bz.symbolize(&Source::Elf(src), input));
            let symbols = std::panic::catch_unwind(call);
            warm.release_pages();
            symbols
                .map_err(|_| FileError::Panicked)?
                .map_err(FileError::Blazesym)?
        };
        let mut symbols = rest.iter().zip(symbols);
        let path = Some(&file.path);
        let frames = offsets
            .iter()
            .map(|&o| {
                if warm.plt.contains(o) {
                    return match warm.plt.name(o) {
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
                    // Go's own table names what no symbol does (Go binaries linked with
                    // -s -w); read at the first such offset, kept while the file is warm.
                    _ => go_frames(warm, file, o).unwrap_or_else(|| miss(&file.name, path, o)),
                }
            })
            .collect();
        let go_refused = match &warm.go {
            Some(Err(why)) => Some(why.clone()),
            _ => None,
        };
        Ok((frames, go_refused))
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

/// The frames Go's function table gives file offset `o` of `file`, if it has that table.
fn go_frames(warm: &mut WarmFile, file: &ElfFile, o: u64) -> Option<Arc<[Frame]>> {
    let table = warm
        .go
        .get_or_insert_with(|| GoTable::read(&file.file).map_err(|why| why.to_string()));
    let vaddr = warm.identity.as_ref()?.vaddr(o)?;
    table
        .as_ref()
        .ok()?
        .as_ref()?
        .frames(vaddr, &file.name, Some(&file.path))
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

    /// (file, offset) of `addr` in this process.
    fn file_offset(n: &mut Normalizer, addr: u64) -> (FileId, u64) {
        match n.normalize(std::process::id(), None, addr, false) {
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

    /// Names are kept by (file, offset): one offset in two files has each file's name.
    #[test]
    fn one_offset_in_two_files_has_each_files_name() {
        let mut n = Normalizer::new();
        n.observe(std::process::id(), None);
        let (libc, getpid) = file_offset(&mut n, libc::getpid as *const () as usize as u64);
        let (exe, _) = file_offset(
            &mut n,
            one_offset_in_two_files_has_each_files_name as *const () as usize as u64,
        );
        assert_ne!(exe, libc);
        let files = n.open_files([exe, libc]);
        let mut s = Symbolizer::new(&[]);
        s.resolve_user(&files, [(libc, getpid), (exe, getpid)]);
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
    }

    /// A file stays warm between batches and names the same after it was let go (its
    /// blazesym state evicted and read again).
    #[test]
    fn a_file_let_go_names_the_same_when_read_again() {
        let mut n = Normalizer::new();
        n.observe(std::process::id(), None);
        let (libc, getpid) = file_offset(&mut n, libc::getpid as *const () as usize as u64);
        let files = n.open_files([libc]);
        let mut s = Symbolizer::new(&[]);
        s.resolve_user(&files, [(libc, getpid)]);
        let first = names(&s, libc, getpid);
        assert!(first.iter().any(|n| n.contains("getpid")), "{first:?}");
        assert_eq!(s.warm.len(), 1, "libc is kept warm after its batch");
        s.warm.cool(&mut s.bz);
        assert_eq!(
            s.warm.len(),
            1,
            "kept through one batch that did not need it"
        );
        s.warm.cool(&mut s.bz);
        assert_eq!(s.warm.len(), 0, "a file two batches did not need is let go");
        s.user_cache.clear();
        s.resolve_user(&files, [(libc, getpid)]);
        assert_eq!(names(&s, libc, getpid), first);
    }
}
