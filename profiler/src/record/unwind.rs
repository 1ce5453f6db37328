//! Keeping the sampler's unwind tables in step with the processes it samples. The program
//! marks records of processes it has no tables for (and wakes the reader at once), and those
//! with a frame in no known mapping (a library loaded since, or JIT code); this loads the
//! former and rescans the latter's mappings, backing off while they do not change.

use std::{
    collections::{HashMap, HashSet},
    sync::mpsc,
    time::{Duration, Instant},
};

use profiler_common::{
    offcpu, record_flags,
    stack::{STACK_HEADER_SIZE, StackSampleHeader, stack_copy},
    unwind::{MAX_PROC_MAPPINGS, ROWS_PENDING, UnwindMapping},
};

use super::copied;
use crate::runtimes::{SharedRuntimes, shared::memory::ProcessMemory};

use crate::{
    bpf::{RowRange, UnwindMapError, UnwindMaps},
    modules::{
        ElfFiles, MapHistory, Mapping, ModuleError, ModuleId, Registry, TableJob, UnwindTable,
        exec_mappings,
    },
};

/// Start of the kernel half of the x86-64 address space.
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;

/// Modules with more CFI than this have their tables built on a worker thread (rustc's
/// driver library has 6 MiB, libc 150 KiB), so that a big module does not hold up the reader
/// and every other process's tables (their process is published at once, its mapping of
/// that module marked pending: samples through it are copied, and walked here once it is
/// built); smaller ones are built at once.
/// Debian's python3 (about 400 KiB) took 0.4 s on the reader in a debug build.
const SYNC_CFI_BYTES: usize = 64 << 10;

type Built = (ModuleId, Result<UnwindTable, ModuleError>);

/// The thread that builds big modules' tables, one after another.
struct Worker {
    jobs: mpsc::Sender<(ModuleId, TableJob)>,
    done: mpsc::Receiver<Built>,
}

impl Worker {
    fn start() -> Option<Self> {
        let (jobs, rx) = mpsc::channel::<(ModuleId, TableJob)>();
        let (tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("unwind-tables".into())
            .spawn(move || {
                for (id, job) in rx {
                    let built = job.build();
                    // Building a big table leaves the thread's heap fragmented: give back
                    // what is free (the rows themselves are one block, mmapped).
                    // SAFETY: malloc_trim only releases free memory of the allocator.
                    unsafe { libc::malloc_trim(0) };
                    if tx.send((id, built)).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Self { jobs, done })
    }
}

/// Quickest retry of a process whose tables could not be loaded.
const RETRY: Duration = Duration::from_millis(10);
/// Least wait before reading a process again whose sample is in none of its mappings.
const STALE_RETRY: Duration = Duration::from_millis(1);
/// First and longest wait between rescans of a process whose frames miss its mappings.
const RESCAN_MIN: Duration = Duration::from_millis(5);
const RESCAN_MAX: Duration = Duration::from_secs(1);
/// How long after its first load a process is rescanned without backing off.
const YOUNG: Duration = Duration::from_millis(250);
/// How long a process a runtime could not read yet (a JVM making its tables) keeps the
/// quickest pace: past it, one that never becomes readable (libjvm loaded, no VM made)
/// backs off as any other.
const STARTING: Duration = Duration::from_secs(5);
/// How often processes are checked for having exited (their modules' rows may then be
/// evicted when the array is full).
const SWEEP: Duration = Duration::from_secs(1);
/// Module errors printed per run (the rest are counted).
const MAX_WARNINGS: usize = 5;

/// Whether two reads of a process's executable mappings have the same module-backed ones
/// (anonymous code regions aside).
fn same_modules(a: &[Mapping], b: &[Mapping]) -> bool {
    a.iter()
        .filter(|m| m.has_module())
        .eq(b.iter().filter(|m| m.has_module()))
}

/// Whether `mappings` has anonymous executable code that no published entry covers, while
/// the kernel's entry has room for it (past its room anonymous code is left out anyway).
fn new_anonymous_code(published: &[UnwindMapping], mappings: &[Mapping]) -> bool {
    published.len() < MAX_PROC_MAPPINGS
        && mappings.iter().any(|m| {
            !m.has_module()
                && !published
                    .iter()
                    .any(|e| e.start <= m.start && m.end <= e.end)
        })
}

/// The placed modules that may make room for module `id`, in the order to evict them: none
/// a process uses or `keep` lists; never used first, then the longest unused.
fn eviction_order(
    placed: &[ModuleId],
    users: &HashMap<ModuleId, u32>,
    unused_since: &HashMap<ModuleId, Instant>,
    keep: &[ModuleId],
    id: ModuleId,
) -> Vec<ModuleId> {
    let mut unused: Vec<(Option<Instant>, ModuleId)> = placed
        .iter()
        .filter(|m| !users.contains_key(m) && !keep.contains(m) && **m != id)
        .map(|&m| (unused_since.get(&m).copied(), m))
        .collect();
    // `None < Some(_)`: a module no process ever used goes first.
    unused.sort_unstable();
    unused.into_iter().map(|(_, m)| m).collect()
}

/// What [`TableLoader::rewrite`] made of a record.
pub enum Rewritten {
    /// Not a copied stack: the record as it is.
    Same,
    /// The copied stack walked: the record to use instead.
    Walked(Vec<u8>),
    /// Its process's tables are still being built: ask again later.
    Wait,
}

/// What the loader did (for the run's summary and the benchmark).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Process table loads (first loads and reloads after a change).
    pub loads: u64,
    /// Mappings whose module has no usable table (walked with frame pointers).
    pub modules_without_table: u64,
    /// Processes the kernel's process map could not take (walked with frame pointers).
    pub processes_without_table: u64,
    /// Modules whose rows were evicted from a full array (no live process mapped them).
    pub modules_evicted: u64,
    /// Bytes of rows in the kernel's table array, and of the array.
    pub row_bytes: u64,
    pub reserved_bytes: u64,
    /// Bytes of tables user space holds (the rows, before they are placed).
    pub user_bytes: u64,
    /// Processes with tables.
    pub processes: u64,
    /// Modules in the registry.
    pub modules: u64,
    /// Samples of processes without tables in the kernel yet, walked in user space from the
    /// copy of their stack the record carried.
    pub copies_walked: u64,
    /// Of those, the ones that could not be walked whole (their process gone before its
    /// tables were loaded, or the walk left the copy): kept as their sampled address only.
    pub copies_cut: u64,
}

/// Whether process `pid` has exited (gone, or a zombie: its exit hooks have run).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

struct ProcState {
    scanned: Instant,
    /// CLOCK_MONOTONIC ns (the records' clock) when its mappings were last read; `u64::MAX`
    /// when they will not be again (gone): a copied stack taken after it is walked only
    /// once they are read again (a library mapped since is in none of them).
    scanned_ns: u64,
    /// When its tables were first written (a young process's mappings are still coming:
    /// its exec and its loader map them over the first milliseconds).
    born: Instant,
    /// Wait before the next rescan prompted by an unknown mapping.
    backoff: Duration,
    mappings: Vec<Mapping>,
    /// Its entry as the kernel has it (for walking copied stacks the same way).
    entries: Vec<UnwindMapping>,
    /// The modules whose rows its kernel entry points at.
    modules: Vec<ModuleId>,
}

pub struct TableLoader {
    registry: Registry,
    maps: UnwindMaps,
    procs: HashMap<u32, ProcState>,
    /// Processes to (re)load, and whether the kernel had no entry at all.
    pending: HashMap<u32, bool>,
    warned: HashSet<std::sync::Arc<str>>,
    /// Warnings not yet taken by the session.
    warnings: Vec<super::Warning>,
    stats: TableStats,
    worker: Option<Worker>,
    /// Processes to publish again when a module's table is built.
    waiting: HashMap<ModuleId, HashSet<u32>>,
    /// Processes (and this one, for its preloaded libraries) whose entries use a placed
    /// module: a module with none may be evicted when the array is full.
    users: HashMap<ModuleId, u32>,
    /// When each placed module lost its last user: the array evicts the longest unused
    /// first, and only as many as the new rows need (a build host's rustc libraries, unused
    /// between two compiler runs, were evicted with every other unused module and rebuilt).
    unused_since: HashMap<ModuleId, Instant>,
    swept: Instant,
    /// Build every table on this thread (while preloading, before sampling starts).
    build_now: bool,
    /// Runtimes (Python) told of each process as it is published, before the native
    /// tables, so its first walked sample already has their frames.
    runtimes: Option<SharedRuntimes>,
}

impl TableLoader {
    pub fn new(maps: UnwindMaps) -> Self {
        Self {
            registry: Registry::new(),
            maps,
            procs: HashMap::new(),
            pending: HashMap::new(),
            warned: HashSet::new(),
            warnings: Vec::new(),
            stats: TableStats::default(),
            worker: Worker::start(),
            waiting: HashMap::new(),
            users: HashMap::new(),
            unused_since: HashMap::new(),
            swept: Instant::now(),
            build_now: false,
            runtimes: None,
        }
    }

    /// Tells `runtimes` of every process published from now on.
    pub fn set_runtimes(&mut self, runtimes: SharedRuntimes) {
        self.runtimes = Some(runtimes);
    }

    /// Builds and places the tables of this process's own modules (the C library, the
    /// dynamic loader, the vDSO), which most targets share, so a new process's first
    /// samples do not wait for them.
    pub fn preload_own(&mut self, files: &mut ElfFiles) -> Result<(), UnwindMapError> {
        let pid = std::process::id();
        let Ok(mappings) = exec_mappings(pid) else {
            return Ok(());
        };
        let shared: Vec<Mapping> = mappings
            .into_iter()
            .filter(|m| m.is_vdso() || m.name.contains(".so"))
            .collect();
        // Built here, whatever their size: nothing is sampled yet, and every target's first
        // samples walk through them. Never evicted: counted as used by this process.
        self.build_now = true;
        let entries = self.entries(pid, &shared, files);
        self.build_now = false;
        let (_, modules) = entries?;
        self.add_users(&modules);
        Ok(())
    }

    /// Builds and places the table of the executable a started command is about to exec (an
    /// ELF file; a script's interpreter is found at the exec, as before), whatever its size,
    /// while the child is parked: its process is published from its first sample with that
    /// module ready, where a big one (a Rust or C++ program's, over [`SYNC_CFI_BYTES`]) was
    /// built on the worker meanwhile and the samples through it were copied while the copy
    /// budget lasted and cut at that module after (`leaf` alone). Kept as used by this
    /// process (never evicted).
    pub fn preload_executable(
        &mut self,
        path: &std::path::Path,
        files: &mut ElfFiles,
    ) -> Result<(), UnwindMapError> {
        use std::{io::Read as _, os::unix::fs::MetadataExt as _};
        let mut magic = [0u8; 4];
        let is_elf = std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
            && magic == *b"\x7fELF";
        // The file table opens a module by its absolute path, as a mapping names it.
        let (true, Ok(path)) = (is_elf, std::fs::canonicalize(path)) else {
            return Ok(());
        };
        let Ok(meta) = std::fs::metadata(&path) else {
            return Ok(());
        };
        // The file as a mapping of its start: the registry knows modules by device and
        // inode, so the process's own mapping of it finds this module at its exec.
        let mapping = Mapping {
            start: 0,
            end: 0,
            offset: 0,
            dev: meta.dev(),
            ino: meta.ino(),
            name: path.to_string_lossy().into(),
        };
        self.build_now = true;
        let entries = self.entries(std::process::id(), &[mapping], files);
        self.build_now = false;
        let (_, modules) = entries?;
        self.add_users(&modules);
        Ok(())
    }

    /// Looks at one record's unwind marks.
    pub fn note(&mut self, rec: &StackSampleHeader) {
        let now = Instant::now();
        // A copy the kernel made for a frame in none of a published process's mappings (a
        // library mapped since, or a walk gone astray through a module without a table):
        // reloaded at the process's rescan pace, as a sample marked so. At every such copy
        // it was reloaded whole: on a build host, whose rustc's libLLVM did not fit in the
        // row array, ~10 times a second per rustc, most of the reader's time.
        let astray = rec.flags & record_flags::UNWIND_NO_MAPPING != 0
            && self
                .procs
                .get(&rec.pid)
                .is_some_and(|p| !p.entries.is_empty());
        if rec.flags & record_flags::UNWIND_NO_PROCESS != 0 && !astray {
            // (A process waiting for a module's table on the worker is published again when
            // it is built: its copies need no reload meanwhile.)
            let building = self.waiting.values().any(|pids| pids.contains(&rec.pid));
            let due = !building
                && self.procs.get(&rec.pid).is_none_or(|p| {
                    let age = now.duration_since(p.scanned);
                    // A copy taken after its mappings were read: a frame was in none of
                    // them (a library mapped since).
                    if rec.flags & record_flags::STACK_COPY != 0 && p.scanned_ns <= rec.time_ns {
                        return true;
                    }
                    // A user address in none of its mappings: what was read is another image
                    // (a fork's child read before its exec) or older; read again now, not
                    // RETRY later, or the copies of its first milliseconds are walked with it.
                    age >= RETRY
                        || (age >= STALE_RETRY
                            && rec.ip < KERNEL_SPACE
                            && !p
                                .entries
                                .iter()
                                .any(|e| e.start <= rec.ip && rec.ip < e.end))
                });
            if due {
                self.pending.insert(rec.pid, true);
            }
        } else if rec.flags & record_flags::UNWIND_NO_MAPPING != 0 {
            let due = self
                .procs
                .get(&rec.pid)
                .is_none_or(|p| now.duration_since(p.scanned) >= p.backoff);
            if due {
                self.pending.entry(rec.pid).or_insert(false);
            }
        }
    }

    /// Loads what `note` found missing; returns the processes whose mappings changed since
    /// they were last loaded (their symbolization maps need refreshing too). Files are
    /// opened through `files`, the symbolizer's table. With a `budget`, the processes left
    /// when it is spent stay pending for the next call (their copies are held meanwhile):
    /// a system-wide start on a busy host finds hundreds of processes, whose small modules
    /// are built on this thread, and the reader must not stop for seconds (its intervals
    /// are cut by its clock).
    pub fn load_pending(
        &mut self,
        (files, history): (&mut ElfFiles, &MapHistory),
        budget: Option<Duration>,
    ) -> Result<Vec<u32>, UnwindMapError> {
        let started = Instant::now();
        self.collect_built();
        self.sweep();
        self.note_waiting();
        let pending: Vec<(u32, bool)> = self.pending.drain().collect();
        let mut changed = Vec::new();
        let mut left = pending.into_iter();
        for (pid, absent) in left.by_ref() {
            if self.load(pid, absent, files, history)? {
                changed.push(pid);
            }
            if budget.is_some_and(|b| started.elapsed() >= b) {
                break;
            }
        }
        for (pid, absent) in left {
            *self.pending.entry(pid).or_default() |= absent;
        }
        Ok(changed)
    }

    /// [`Self::load`] with every module's table built on this thread, whatever its size:
    /// for processes given before sampling starts (`-p`), whose first samples would
    /// otherwise walk a big module (libpython, a Rust driver) with frame pointers until the
    /// worker has built it.
    pub fn load_now(
        &mut self,
        pid: u32,
        files: &mut ElfFiles,
        history: &MapHistory,
    ) -> Result<bool, UnwindMapError> {
        self.build_now = true;
        let loaded = self.load(pid, true, files, history);
        self.build_now = false;
        loaded
    }

    /// Loads (or refreshes) the tables of `pid`'s mappings. `absent`: the kernel has no
    /// entry for it (new, or exec'ed since), so it is written even if the mappings look the
    /// same as last time. Returns whether a process loaded before had new mappings.
    pub fn load(
        &mut self,
        pid: u32,
        absent: bool,
        files: &mut ElfFiles,
        history: &MapHistory,
    ) -> Result<bool, UnwindMapError> {
        let now = Instant::now();
        let now_ns = profiler_core::host::hrtime();
        // A process gone (or a zombie) before its tables were loaded: its mappings as the
        // kernel reported them, for the copied stacks of its samples.
        let live = exec_mappings(pid).ok().filter(|m| !m.is_empty());
        let gone = live.is_none();
        let mappings = live.or_else(|| Some(history.mappings(pid, None)?.to_vec()));
        let Some(mappings) = mappings else {
            // Gone (or not ours to read): remember the attempt so it is not retried at once.
            self.procs.insert(
                pid,
                ProcState {
                    scanned: now,
                    scanned_ns: u64::MAX,
                    born: now,
                    backoff: RESCAN_MAX,
                    mappings: Vec::new(),
                    entries: Vec::new(),
                    modules: Vec::new(),
                },
            );
            return Ok(false);
        };
        // Only mappings a module backs (files, the vDSO) make tables: a JIT's anonymous code
        // regions come and go (V8 flips its code pages between writable and executable)
        // and, compared too, reloaded the process and restarted the quickest rescans each
        // time: a busy node's maps read many times a second.
        // Anonymous code the published entry lacks (CPython's `-X perf` trampolines, mapped
        // when the interpreter turns them on, maybe long after its last library) is walked
        // in the kernel only once published: until then every stack through it is copied
        // and, past the process's copies, cut there. Not for a JIT whose kernel walker goes
        // through such code by frame pointers (V8 flips its code pages without end).
        let new_code = self.procs.get(&pid).is_some_and(|state| {
            new_anonymous_code(&state.entries, &mappings)
                && !self
                    .runtimes
                    .as_ref()
                    .and_then(|r| r.lock().ok().map(|r| r.walks_unmapped_code(pid)))
                    .unwrap_or(false)
        });
        if !absent
            && !new_code
            && let Some(state) = self.procs.get_mut(&pid)
            && same_modules(&state.mappings, &mappings)
        {
            state.mappings.clone_from(&mappings);
            state.scanned = now;
            state.scanned_ns = now_ns;
            // Back off only once the process has settled: a young one (or a starting JVM
            // not readable yet) rescans at the quickest pace, so its stacks are whole
            // milliseconds after its exec.
            let age = now.duration_since(state.born);
            let waiting = self
                .runtimes
                .as_ref()
                .and_then(|r| r.lock().ok().map(|r| r.waiting(pid)))
                .unwrap_or(false);
            state.backoff = if (waiting && age < STARTING) || age < YOUNG {
                RESCAN_MIN
            } else {
                (state.backoff * 2).min(RESCAN_MAX)
            };
            // Looked at too early by a runtime (a JVM whose tables were not made yet): its
            // mappings may never change again, so it is published again now.
            if waiting {
                self.publish_runtimes(pid, &mappings);
            }
            return Ok(false);
        }
        let changed = self
            .procs
            .get(&pid)
            .is_some_and(|p| !p.mappings.is_empty() && p.mappings != mappings);
        // A process whose runtime's frames come only through the kernel's walk (CPython) has
        // its modules built now, big ones too (see `Runtimes::needs_tables_first`).
        let was = self.build_now;
        self.build_now |= self
            .runtimes
            .as_ref()
            .and_then(|r| r.lock().ok().map(|r| r.needs_tables_first(pid, &mappings)))
            .unwrap_or(false);
        let entries = self.entries(pid, &mappings, files);
        self.build_now = was;
        let (entries, modules) = entries?;
        let published = entries.clone();
        if gone {
            // Nothing to publish to the kernel: kept for the copied stacks of its samples.
            self.add_users(&modules);
            if let Some(old) = self.procs.insert(
                pid,
                ProcState {
                    scanned: now,
                    scanned_ns: u64::MAX,
                    born: now,
                    backoff: RESCAN_MAX,
                    mappings,
                    entries: published,
                    modules,
                },
            ) {
                self.drop_users(&old.modules);
            }
            return Ok(false);
        }
        self.publish_runtimes(pid, &mappings);
        match self.maps.set_process(pid, &entries) {
            Ok(()) => {}
            // The kernel's process map full (or out of memory): this process walks with frame
            // pointers; the recording goes on.
            Err(e @ UnwindMapError::Update { .. }) => {
                self.stats.processes_without_table += 1;
                let name: std::sync::Arc<str> = std::sync::Arc::from("[process table]");
                self.warn(&name, &e);
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        // The process may have exited between reading its maps and now: its exit already
        // removed the kernel's entry (before ours was written), so ours would stay forever.
        // Its entry is still kept here, for the copied stacks of its samples.
        if exited(pid) {
            self.forget(pid);
            self.maps.remove_process(pid);
            self.add_users(&modules);
            self.procs.insert(
                pid,
                ProcState {
                    scanned: now,
                    scanned_ns: u64::MAX,
                    born: now,
                    backoff: RESCAN_MAX,
                    mappings,
                    entries: published,
                    modules,
                },
            );
            return Ok(false);
        }
        self.stats.loads += 1;
        self.add_users(&modules);
        let old = self.procs.insert(
            pid,
            ProcState {
                scanned: now,
                scanned_ns: now_ns,
                born: match self.procs.get(&pid) {
                    Some(p) if !absent => p.born,
                    _ => now,
                },
                backoff: RESCAN_MIN,
                mappings,
                entries: published,
                modules,
            },
        );
        if let Some(old) = old {
            self.drop_users(&old.modules);
        }
        Ok(changed)
    }

    /// Rescans, at their pace, the starting processes a runtime could not read yet (a JVM
    /// whose tables or code are not made yet): nothing else may bring them back, since a
    /// JVM's code is in mappings it already has, and its mappings may never change again.
    fn note_waiting(&mut self) {
        let now = Instant::now();
        for pid in self.starting_pids(now) {
            if self
                .procs
                .get(&pid)
                .is_some_and(|p| now.duration_since(p.scanned) >= p.backoff)
            {
                self.pending.entry(pid).or_insert(false);
            }
        }
    }

    /// The processes a runtime could not read yet, still starting at `now`.
    fn starting_pids(&self, now: Instant) -> Vec<u32> {
        let mut pids = self
            .runtimes
            .as_ref()
            .and_then(|r| r.lock().ok().map(|r| r.waiting_pids()))
            .unwrap_or_default();
        pids.retain(|pid| {
            self.procs
                .get(pid)
                .is_some_and(|p| now.duration_since(p.born) < STARTING)
        });
        pids
    }

    /// Whether some process waits, still starting, for a runtime to become readable.
    pub fn starting(&self) -> bool {
        !self.starting_pids(Instant::now()).is_empty()
    }

    /// Gives `pid`'s mappings to the runtimes' walkers (Python, V8, HotSpot), and their
    /// lines to the user.
    fn publish_runtimes(&mut self, pid: u32, mappings: &[Mapping]) {
        let Some(runtimes) = self.runtimes.clone() else {
            return;
        };
        let Ok(mut r) = runtimes.lock() else {
            return;
        };
        let published = r.publish(pid, mappings, &mut self.maps);
        self.warnings
            .extend(r.take_lines().into_iter().map(super::Warning::new));
        drop(r);
        if let Err(e) = published {
            let name: std::sync::Arc<str> = std::sync::Arc::from("[runtime table]");
            self.warn(&name, &e);
        }
    }

    fn add_users(&mut self, modules: &[ModuleId]) {
        for &id in modules {
            *self.users.entry(id).or_default() += 1;
            self.unused_since.remove(&id);
        }
    }

    fn drop_users(&mut self, modules: &[ModuleId]) {
        for id in modules {
            if let Some(n) = self.users.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    self.users.remove(id);
                    self.unused_since.insert(*id, Instant::now());
                }
            }
        }
    }

    /// Forgets the processes that exited (the kernel dropped their entries at exit), at
    /// most once per [`SWEEP`].
    fn sweep(&mut self) {
        if self.swept.elapsed() >= SWEEP {
            self.sweep_now();
        }
    }

    /// [`Self::sweep`] whatever the time since the last.
    fn sweep_now(&mut self) {
        self.swept = Instant::now();
        let gone: Vec<u32> = self.procs.keys().copied().filter(|&p| exited(p)).collect();
        for pid in gone {
            self.forget(pid);
        }
    }

    /// Places module `id`'s rows; when the array is full, evicts modules no process uses
    /// (never those of the process being published, `keep`), the longest unused first, until
    /// the rows fit.
    fn place(
        &mut self,
        id: ModuleId,
        table: &UnwindTable,
        keep: &[ModuleId],
    ) -> Result<RowRange, UnwindMapError> {
        let full = match self.maps.place(id, &table.rows) {
            Err(e @ UnwindMapError::Full { .. }) => e,
            other => return other,
        };
        self.sweep_now();
        let placed: Vec<ModuleId> = self.maps.placed().collect();
        let candidates = eviction_order(&placed, &self.users, &self.unused_since, keep, id);
        // Rows that would not fit even in all the room evictions could make (a libLLVM beside
        // the modules in use) evict nothing: each new process mapping them would otherwise
        // empty the array of every unused module, for nothing.
        let room: u64 = u64::from(self.maps.free_rows())
            + candidates
                .iter()
                .map(|&m| u64::from(self.maps.rows_of(m)))
                .sum::<u64>();
        if (table.rows.len() as u64) > room {
            return Err(full);
        }
        for m in candidates {
            self.maps.evict(m);
            self.registry.forget(m);
            self.unused_since.remove(&m);
            self.stats.modules_evicted += 1;
            match self.maps.place(id, &table.rows) {
                Err(UnwindMapError::Full { .. }) => {}
                other => return other,
            }
        }
        Err(full)
    }

    /// The kernel's view of `mappings`: each file-backed one with its module's rows (none
    /// where the module has no table; pending while it is being built), anonymous ones
    /// without (JIT code: frame pointers), so that an address in none is one mapped since.
    /// Past the kernel's room, anonymous ones are left out first. Also the modules whose
    /// rows the entries point at.
    fn entries(
        &mut self,
        pid: u32,
        mappings: &[Mapping],
        files: &mut ElfFiles,
    ) -> Result<(Vec<UnwindMapping>, Vec<ModuleId>), UnwindMapError> {
        let mut entries = Vec::with_capacity(mappings.len());
        let mut modules: Vec<ModuleId> = Vec::new();
        let files_mapped = mappings.iter().filter(|m| m.has_module()).count();
        let mut anon_room = MAX_PROC_MAPPINGS.saturating_sub(files_mapped);
        for m in mappings {
            if !m.has_module() {
                if anon_room > 0 {
                    anon_room -= 1;
                    entries.push(UnwindMapping {
                        start: m.start,
                        end: m.end,
                        ..Default::default()
                    });
                }
                continue;
            }
            let mut entry = UnwindMapping {
                start: m.start,
                end: m.end,
                ..Default::default()
            };
            let table = match self.registry.register(pid, m, files) {
                Ok((id, bias)) => match self.table(pid, id) {
                    Some(Ok(t)) => Ok(Some((id, bias, t))),
                    Some(Err(e)) => Err(e),
                    None => Ok(None),
                },
                Err(e) => Err(std::sync::Arc::new(e)),
            };
            match table {
                Ok(Some((id, bias, table)))
                    if !table.rows.is_empty() || self.maps.is_placed(id) =>
                {
                    match self.place(id, &table, &modules) {
                        Ok(range) => {
                            entry.bias = bias.wrapping_add(table.base);
                            entry.rows_start = range.start;
                            entry.rows_len = range.len;
                            if !modules.contains(&id) {
                                modules.push(id);
                            }
                            // The kernel's copy is the one used from now on.
                            self.registry.release_rows(id);
                        }
                        Err(e @ UnwindMapError::Full { .. }) => self.warn(&m.name, &e),
                        Err(e) => return Err(e),
                    }
                }
                // Being built on the worker: the kernel stops its walks there and copies
                // the stack, which is walked here once the table is published.
                Ok(None) => entry.rows_start = ROWS_PENDING,
                Ok(Some(_)) => {}
                Err(e) if e.said_elsewhere() => {}
                Err(e) => self.warn(&m.name, &e),
            }
            if entry.rows_len == 0 && entry.rows_start != ROWS_PENDING {
                self.stats.modules_without_table += 1;
            }
            entries.push(entry);
        }
        Ok((entries, modules))
    }

    /// Module `id`'s table: built now if small, else handed to the worker (`None` until it
    /// is done; `pid` is published again then).
    fn table(
        &mut self,
        pid: u32,
        id: ModuleId,
    ) -> Option<Result<std::sync::Arc<UnwindTable>, std::sync::Arc<ModuleError>>> {
        if let Some(t) = self.registry.table(id) {
            return Some(t);
        }
        if self.registry.building(id) {
            self.waiting.entry(id).or_default().insert(pid);
            return None;
        }
        if self.build_now || self.registry.cfi_bytes(id) <= SYNC_CFI_BYTES || self.worker.is_none()
        {
            return Some(self.registry.unwind_table(id));
        }
        if let (Some(job), Some(w)) = (self.registry.table_job(id), &self.worker)
            && let Err(mpsc::SendError((_, job))) = w.jobs.send((id, job))
        {
            // The worker is gone: build here.
            self.registry.finish_table(id, job.build());
            return self.registry.table(id);
        }
        self.waiting.entry(id).or_default().insert(pid);
        None
    }

    /// Stores the tables the worker finished and queues their processes for publishing.
    fn collect_built(&mut self) {
        let Some(w) = &self.worker else { return };
        let built: Vec<Built> = w.done.try_iter().collect();
        for (id, table) in built {
            self.registry.finish_table(id, table);
            for pid in self.waiting.remove(&id).unwrap_or_default() {
                self.pending.insert(pid, true);
            }
        }
    }

    fn warn(&mut self, name: &std::sync::Arc<str>, e: &dyn std::fmt::Display) {
        if self.warned.len() < MAX_WARNINGS && self.warned.insert(name.clone()) {
            self.warnings.push(super::Warning::new(format!(
                "{name}: no unwind table, frame pointers used: {e}"
            )));
        }
    }

    /// The warnings given since the last call.
    pub fn take_warnings(&mut self) -> Vec<super::Warning> {
        std::mem::take(&mut self.warnings)
    }

    /// Forgets a process that exited (the kernel's exit hook removed its entry).
    fn forget(&mut self, pid: u32) {
        if let Some(state) = self.procs.remove(&pid) {
            self.drop_users(&state.modules);
        }
        if let Some(r) = &self.runtimes
            && let Ok(mut r) = r.lock()
        {
            r.forget(pid);
        }
    }

    /// A record carrying a copy of its user stack (`record_flags::STACK_COPY`), rewritten
    /// with the user frames walked from the copy with its process's tables (loaded by
    /// [`Self::load_pending`] after [`Self::note`] saw the record); `None` for other records.
    /// A copy that cannot be walked whole keeps the sampled address alone, marked
    /// `UNWIND_PARTIAL` and counted: never a guess.
    /// `can_wait`: a copy of a process some of whose modules are still being built on the
    /// worker is left for later ([`Rewritten::Wait`]) rather than walked without them.
    pub fn rewrite(&mut self, record: &[u8], can_wait: bool) -> Rewritten {
        let Some((header, _)) = StackSampleHeader::parse(record) else {
            return Rewritten::Same;
        };
        // A counter group's values are differences from the thread's previous record, so a
        // record that carries them is never taken out of order.
        if can_wait
            && header.flags & record_flags::STACK_COPY != 0
            && header.flags & record_flags::GROUP_VALUES == 0
            && (self.pending.contains_key(&header.pid)
                || self.waiting.values().any(|pids| pids.contains(&header.pid)))
        {
            return Rewritten::Wait;
        }
        match self.rewrite_now(&header, record) {
            Some(r) => Rewritten::Walked(r),
            None => Rewritten::Same,
        }
    }

    /// Waits (until `deadline`) for the modules being built on the worker, and publishes
    /// the processes waiting for them: at the end of a run, so the copies held for them
    /// are walked with them.
    pub fn finish_building(
        &mut self,
        deadline: Instant,
        files: (&mut ElfFiles, &MapHistory),
    ) -> Result<(), UnwindMapError> {
        while !self.waiting.is_empty() {
            let Some(w) = &self.worker else { break };
            let left = deadline.saturating_duration_since(Instant::now());
            match w.done.recv_timeout(left) {
                Ok((id, table)) => {
                    self.registry.finish_table(id, table);
                    for pid in self.waiting.remove(&id).unwrap_or_default() {
                        self.pending.insert(pid, true);
                    }
                }
                Err(_) => break,
            }
        }
        self.load_pending(files, None).map(|_| ())
    }

    fn rewrite_now(&mut self, header: &StackSampleHeader, record: &[u8]) -> Option<Vec<u8>> {
        let header = *header;
        if header.flags & (record_flags::UNWIND_NO_PROCESS | record_flags::STACK_COPY)
            == record_flags::UNWIND_NO_PROCESS
            // (An off-CPU program's bare header only asks for a process's tables.)
            && (header.flags & offcpu::OFF_CPU == 0 || record.len() > STACK_HEADER_SIZE)
        {
            // Its process spent its budget of copies (or the ring's share): no user stack.
            self.stats.copies_walked += 1;
            self.stats.copies_cut += 1;
            return None;
        }
        let (head, bytes, _) = stack_copy(&header, record)?;
        self.stats.copies_walked += 1;
        // A kernel-mode sample in an exec, past the point of no return: the comm is the new
        // program's, the saved user registers the old image's (gone: nothing was copied).
        // The new image has no user stack yet; the sample's stack is the kernel's alone.
        if header.ip >= KERNEL_SPACE
            && bytes.is_empty()
            && self.procs.get(&header.pid).is_some_and(|p| {
                !p.entries.is_empty()
                    && !p
                        .entries
                        .iter()
                        .any(|e| e.start <= head.ip && head.ip < e.end)
            })
        {
            return copied::rewrite(record, &[], 0);
        }
        // Runtimes' frames (a V8 process's JS frames, a JVM's Java frames), found in the
        // copy as the kernel's walk finds them.
        let hooks = self
            .runtimes
            .as_ref()
            .and_then(|r| Some(r.lock().ok()?.copied(header.pid)))
            .unwrap_or_default();
        let mem = ProcessMemory::new(header.pid);
        let js_frame = |copy: &copied::Copy<'_>, fp: u64, pc: u64, top: bool| {
            let stack = |a| copy.read(a);
            hooks
                .iter()
                .find_map(|h| h.at_frame_pointer(&stack, &mem, fp, pc, top))
        };
        let java_frame = |copy: &copied::Copy<'_>, frame| {
            let stack = |a| copy.read(a);
            hooks.iter().find_map(|h| h.step(&stack, &mem, frame))
        };
        let walked = self
            .procs
            .get(&header.pid)
            .filter(|p| !p.entries.is_empty())
            .map(|p| {
                let copy = copied::Copy::new(&head, bytes);
                let maps = &self.maps;
                let rows = |start: u32, len: u32, pc: u32| maps.find_row(start, len, pc);
                let jit = hooks.iter().any(|h| h.jit());
                copied::walk(&p.entries, rows, &js_frame, &java_frame, jit, &head, &copy)
            });
        let (frames, flags) = match walked {
            Some((frames, flags)) if flags & record_flags::UNWIND_PARTIAL == 0 => (frames, flags),
            Some((frames, flags)) => {
                self.stats.copies_cut += 1;
                (frames, flags)
            }
            None => {
                self.stats.copies_cut += 1;
                (vec![head.ip], record_flags::UNWIND_PARTIAL)
            }
        };
        copied::rewrite(record, &frames, flags)
    }

    pub fn stats(&self) -> TableStats {
        TableStats {
            row_bytes: self.maps.row_bytes() as u64,
            reserved_bytes: self.maps.reserved_bytes() as u64,
            user_bytes: self.registry.table_bytes() as u64,
            processes: self.procs.len() as u64,
            modules: self.registry.len() as u64,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::parse_maps;

    #[test]
    fn anonymous_code_regions_do_not_change_a_process_s_modules() {
        let before = parse_maps(
            "55d0c000-55d0d000 r-xp 00001000 08:01 1234 /usr/bin/node\n\
             7f00a000-7f00b000 r-xp 00000000 00:00 0 \n\
             7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        let jit_moved = parse_maps(
            "55d0c000-55d0d000 r-xp 00001000 08:01 1234 /usr/bin/node\n\
             7f00c000-7f00e000 r-xp 00000000 00:00 0 \n\
             7f010000-7f011000 rwxp 00000000 00:00 0 \n\
             7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        assert!(same_modules(&before, &jit_moved));
        let library_loaded = parse_maps(
            "55d0c000-55d0d000 r-xp 00001000 08:01 1234 /usr/bin/node\n\
             7f00a000-7f00b000 r-xp 00000000 00:00 0 \n\
             7f020000-7f021000 r-xp 00001000 08:01 99 /usr/lib/libz.so.1\n\
             7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        assert!(!same_modules(&before, &library_loaded));
    }

    #[test]
    fn anonymous_code_the_entry_lacks_is_new_until_published() {
        let entry = |start, end| UnwindMapping {
            start,
            end,
            ..Default::default()
        };
        // The executable and the vDSO published, then `-X perf`'s trampoline arena mapped.
        let published = [entry(0x55d0c000, 0x55d0d000), entry(0x7ffd1000, 0x7ffd2000)];
        let arena = parse_maps(
            "55d0c000-55d0d000 r-xp 00001000 08:01 1234 /usr/bin/python3.12\n\
             7f00a000-7f00b000 r-xp 00000000 00:00 0 \n\
             7ffd1000-7ffd2000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        assert!(new_anonymous_code(&published, &arena));
        let republished = [
            entry(0x55d0c000, 0x55d0d000),
            entry(0x7f00a000, 0x7f00b000),
            entry(0x7ffd1000, 0x7ffd2000),
        ];
        assert!(!new_anonymous_code(&republished, &arena));
        // A file-backed mapping is the modules' business (`same_modules`), not this.
        let library = parse_maps("7f020000-7f021000 r-xp 00001000 08:01 99 /usr/lib/libz.so.1\n");
        assert!(!new_anonymous_code(&published, &library));
        // An entry already full has no room for it: nothing to gain from publishing again.
        let full = vec![entry(0x1000, 0x2000); MAX_PROC_MAPPINGS];
        assert!(!new_anonymous_code(&full, &arena));
    }

    #[test]
    fn a_full_array_evicts_the_longest_unused_first_and_never_a_used_one() {
        let t0 = Instant::now();
        let later = |ms| t0 + Duration::from_millis(ms);
        // 1 in use; 2 unused since 30 ms, 3 since 10 ms, 4 never used, 5 kept for the
        // process being published, 6 the module being placed.
        let users = HashMap::from([(1, 2)]);
        let since = HashMap::from([(2, later(30)), (3, later(10))]);
        let order = eviction_order(&[1, 2, 3, 4, 5, 6], &users, &since, &[5], 6);
        assert_eq!(order, vec![4, 3, 2]);
    }
}
