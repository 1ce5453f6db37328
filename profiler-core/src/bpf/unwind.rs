//! The sampler's unwind maps, from user space: module tables are written into the
//! `UNWIND_ROWS` array (one contiguous run per module, placed once and shared by every
//! process mapping it), and each process's mappings into `UNWIND_PROCS`.
//!
//! A module's rows are written through a mapping of only the pages they cover, unmapped
//! right after: the array is reserved whole (32 MiB), and keeping all of it mapped counted
//! every page in the profiler's resident size.

use std::{
    cell::RefCell,
    collections::HashMap as StdHashMap,
    os::fd::{AsFd as _, AsRawFd, RawFd},
};

use aya::{
    Ebpf, Pod,
    maps::{HashMap, Map, MapData},
};
use profiler_common::{
    golabels::GoProc,
    hotspot::HsProc,
    names::{maps as map, programs},
    python::PyProc,
    runtimes::{MAX_HOOK_RANGES, RtKey, RtProc, RtRange, RtState},
    stat,
    unwind::{
        DEFAULT_UNWIND_ROWS, MAX_PROC_MAPPINGS, ProcUnwind, ROWS_PER_FENCE, UnwindMapping,
        UnwindRow, proc_runtimes,
    },
    v8::V8Proc,
};

use super::{
    BpfError, RecordProgram,
    maps::Counters,
    rowspace::{RowRange, RowSpace},
};

/// `UNWIND_ROWS` (written through short-lived mappings) and `UNWIND_PROCS`.
pub struct UnwindMaps {
    /// The array's fd, owned by `_rows_map`.
    rows_fd: RawFd,
    space: RowSpace,
    /// Keeps the array's fd alive.
    _rows_map: Map,
    /// `UNWIND_FENCES` (every `ROWS_PER_FENCE`th row's pc), written beside the rows.
    fences_fd: RawFd,
    _fences_map: Map,
    procs: HashMap<MapData, u32, ProcUnwind>,
    /// The Python walker's processes (`PY_PROCS`): runtimes the walk hands over to.
    python: HashMap<MapData, u32, PyProc>,
    /// The V8 walker's processes (`V8_PROCS`).
    v8: HashMap<MapData, u32, V8Proc>,
    /// The HotSpot walker's processes (`HS_PROCS`).
    hotspot: HashMap<MapData, u32, HsProc>,
    /// Go processes whose samples carry goroutine labels (`GO_PROCS`).
    go: HashMap<MapData, u32, GoProc>,
    /// Runtimes' hooks (`RT_PROCS`) and states (`RT_STATE`), and which slots each process
    /// has a state for (to remove them with it).
    rt_procs: HashMap<MapData, u32, RtProc>,
    rt_state: HashMap<MapData, RtKey, RtState>,
    rt_slots: StdHashMap<u32, u32>,
    /// Which runtimes have an entry for each process (`ProcUnwind::runtimes`).
    runtime_bits: StdHashMap<u32, u32>,
    placed: StdHashMap<u32, RowRange>,
    /// Pages of the array mapped one at a time for [`UnwindMaps::find_row`]. Not a view of
    /// the array or of a module's run: mapping a BPF array maps every page of the range at
    /// once (`remap_vmalloc_range`), so a view of the whole array counted 32 MiB in the
    /// profiler's resident size, and a compiler's run 10 MiB for one copied stack.
    pages: RefCell<RowPages>,
}

/// Copies `values` to byte `start` of the BPF_F_MMAPABLE array behind `fd`, through a
/// mapping of just the pages they fall in (the array's data starts page-aligned at offset 0
/// of its fd), unmapped at once.
fn write_at<T: Copy>(fd: RawFd, start: usize, values: &[T]) -> Result<(), UnwindMapError> {
    let page = page_size();
    let end = start + size_of_val(values);
    let map_start = start / page * page;
    let map_len = end.div_ceil(page) * page - map_start;
    let offset = libc::off_t::try_from(map_start)
        .map_err(|_| UnwindMapError::Mmap(std::io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: mmap of a BPF_F_MMAPABLE array's fd, shared and writable, of whole pages
    // inside the array (the caller's range is within it); checked before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            offset,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(UnwindMapError::Mmap(std::io::Error::last_os_error()));
    }
    // SAFETY: [start, end) lies inside [map_start, map_start + map_len), the mapping just
    // made; the kernel reads the array concurrently, but a range is only published (through
    // UNWIND_PROCS) after it is written. The mapping is ours alone and unmapped once.
    unsafe {
        std::ptr::copy_nonoverlapping(
            values.as_ptr().cast::<u8>(),
            ptr.cast::<u8>().add(start - map_start),
            size_of_val(values),
        );
        libc::munmap(ptr, map_len);
    }
    Ok(())
}

/// The fences of rows placed at index `first`: the first fence's index and the pcs of the
/// rows at every multiple of `ROWS_PER_FENCE` in `[first, first + rows.len())`.
fn fences(first: usize, rows: &[UnwindRow]) -> (usize, Vec<u32>) {
    let per = ROWS_PER_FENCE as usize;
    let k0 = first.div_ceil(per);
    let fences = (k0..(first + rows.len()).div_ceil(per))
        .map(|k| rows[k * per - first].pc)
        .collect();
    (k0, fences)
}

/// Most pages of the row array kept mapped for lookups (1 MiB with 4 KiB pages; the oldest
/// is unmapped first).
const MAX_ROW_PAGES: usize = 256;

/// Pages of the row array mapped read-only, by page number, in the order they were mapped.
#[derive(Default)]
struct RowPages {
    mapped: StdHashMap<usize, RowPage>,
    order: std::collections::VecDeque<usize>,
}

/// One read-only shared mapping of one page of the row array.
struct RowPage(*mut libc::c_void);

impl Drop for RowPage {
    fn drop(&mut self) {
        // SAFETY: the one-page mapping `UnwindMaps::row` made, unmapped once.
        unsafe { libc::munmap(self.0, page_size()) };
    }
}

// SAFETY: the page is a read-only mapping owned by the value; nothing else aliases it
// mutably from this process (rows are written through separate, short-lived mappings).
unsafe impl Send for RowPage {}

impl RecordProgram {
    /// Takes the unwind maps out of the object (the program keeps using them). The program
    /// must have been loaded with `capture::UNWIND_TABLES`, which sizes `UNWIND_ROWS`.
    pub fn take_unwind_maps(&mut self) -> Result<UnwindMaps, UnwindMapError> {
        let ebpf = self.loaded.ebpf_mut();
        let rows_map = ebpf
            .take_map(map::UNWIND_ROWS)
            .ok_or(BpfError::Missing(map::UNWIND_ROWS))?;
        let procs = take_by_pid(ebpf, map::UNWIND_PROCS)?;
        let python = take_by_pid(ebpf, map::PY_PROCS)?;
        let v8 = take_by_pid(ebpf, map::V8_PROCS)?;
        let hotspot = take_by_pid(ebpf, map::HS_PROCS)?;
        let go = take_by_pid(ebpf, map::GO_PROCS)?;
        let rt_procs = take_by_pid(ebpf, map::RT_PROCS)?;
        let rt_state = {
            let m = ebpf
                .take_map(map::RT_STATE)
                .ok_or(BpfError::Missing(map::RT_STATE))?;
            HashMap::try_from(m).map_err(|source| BpfError::Map {
                name: map::RT_STATE,
                source,
            })?
        };
        let fences_map = ebpf
            .take_map(map::UNWIND_FENCES)
            .ok_or(BpfError::Missing(map::UNWIND_FENCES))?;
        let Map::Array(fences) = &fences_map else {
            return Err(BpfError::Missing("array map `UNWIND_FENCES`").into());
        };
        let fences_fd = fences.fd().as_fd().as_raw_fd();
        let Map::Array(data) = &rows_map else {
            return Err(BpfError::Missing("array map `UNWIND_ROWS`").into());
        };
        // The loader sized the array (DEFAULT_UNWIND_ROWS when tables are on).
        let capacity = data
            .info()
            .map(|i| i.max_entries())
            .unwrap_or(DEFAULT_UNWIND_ROWS);
        let rows_fd = data.fd().as_fd().as_raw_fd();
        Ok(UnwindMaps {
            rows_fd,
            space: RowSpace::new(capacity),
            _rows_map: rows_map,
            fences_fd,
            _fences_map: fences_map,
            procs,
            python,
            v8,
            hotspot,
            go,
            rt_procs,
            rt_state,
            rt_slots: StdHashMap::new(),
            runtime_bits: StdHashMap::new(),
            placed: StdHashMap::new(),
            pages: RefCell::default(),
        })
    }
}

/// The hash map `name` (by tgid) taken out of the object.
fn take_by_pid<V: Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<HashMap<MapData, u32, V>, BpfError> {
    let m = ebpf.take_map(name).ok_or(BpfError::Missing(name))?;
    HashMap::try_from(m).map_err(|source| BpfError::Map { name, source })
}

/// Writes a runtime's entry for `pid` into its map `name` (`Some`), or removes it.
fn set_runtime_entry<V: Pod>(
    m: &mut HashMap<MapData, u32, V>,
    name: &'static str,
    pid: u32,
    entry: Option<&V>,
) -> Result<(), UnwindMapError> {
    match entry {
        Some(e) => m
            .insert(pid, e, 0)
            .map_err(|source| UnwindMapError::Update { map: name, source }),
        None => {
            let _ = m.remove(&pid);
            Ok(())
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UnwindMapError {
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error("mmap of the UNWIND_ROWS array: {0}")]
    Mmap(std::io::Error),
    #[error(
        "the unwind row array is full ({capacity} rows); this module walks with frame pointers"
    )]
    Full { capacity: u32 },
    #[error("process {pid}: more than {MAX_HOOK_RANGES} runtime code ranges (runtime slot {slot})")]
    Hooks { pid: u32, slot: u8 },
    #[error("bpf(BPF_MAP_UPDATE_ELEM) of {map}: {}", errno_text(.source))]
    Update {
        map: &'static str,
        source: aya::maps::MapError,
    },
}

/// A map error with the errno the syscall returned, when it was a syscall that failed.
fn errno_text(e: &aya::maps::MapError) -> String {
    match e {
        aya::maps::MapError::SyscallError(s) => format!("{}: {}", s.call, s.io_error),
        other => other.to_string(),
    }
}

impl UnwindMaps {
    /// The rows of module `id`, written on first call.
    pub fn place(&mut self, id: u32, rows: &[UnwindRow]) -> Result<RowRange, UnwindMapError> {
        if let Some(r) = self.placed.get(&id) {
            return Ok(*r);
        }
        let len = u32::try_from(rows.len()).unwrap_or(u32::MAX);
        let range = self.space.alloc(len).ok_or(UnwindMapError::Full {
            capacity: self.space.capacity(),
        })?;
        if let Err(e) = self.write_rows(range.start as usize, rows) {
            self.space.release(range);
            return Err(e);
        }
        self.placed.insert(id, range);
        Ok(range)
    }

    /// Gives module `id`'s rows back (no process entry may point at them any more); its
    /// run is reused by later modules.
    pub fn evict(&mut self, id: u32) {
        if let Some(range) = self.placed.remove(&id) {
            self.space.release(range);
        }
    }

    /// The modules whose rows are in the array.
    pub fn placed(&self) -> impl Iterator<Item = u32> + '_ {
        self.placed.keys().copied()
    }

    /// Copies `rows` to index `first` of the row array, and the fences that fall in them
    /// (every `ROWS_PER_FENCE`th index's pc) to the fence array. The fences of a run are
    /// its own rows', so a module's search never reads another's.
    fn write_rows(&self, first: usize, rows: &[UnwindRow]) -> Result<(), UnwindMapError> {
        if rows.is_empty() {
            return Ok(());
        }
        write_at(self.rows_fd, first * size_of::<UnwindRow>(), rows)?;
        let (k0, fences) = fences(first, rows);
        if fences.is_empty() {
            return Ok(());
        }
        write_at(self.fences_fd, k0 * size_of::<u32>(), &fences)
    }

    /// The row of the run `[start, start + len)` (a placed module's rows, sorted by pc) whose
    /// range holds `pc`: the last row at or below it, found by binary search as the kernel's
    /// walk does, for walking a copied stack in user space. `None` when below the first row,
    /// outside the array, or a page cannot be mapped.
    pub fn find_row(&self, start: u32, len: u32, pc: u32) -> Option<UnwindRow> {
        let end = start.checked_add(len)?;
        if end > self.space.capacity() {
            return None;
        }
        let (mut lo, mut hi) = (start, end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.row(mid)?.pc <= pc {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == start {
            return None;
        }
        self.row(lo - 1)
    }

    /// Row `index` of the array, through a mapping of its page (kept, at most
    /// [`MAX_ROW_PAGES`]).
    fn row(&self, index: u32) -> Option<UnwindRow> {
        let page = page_size();
        let at = index as usize * size_of::<UnwindRow>();
        let number = at / page;
        let mut pages = self.pages.borrow_mut();
        if !pages.mapped.contains_key(&number) {
            if pages.order.len() >= MAX_ROW_PAGES
                && let Some(oldest) = pages.order.pop_front()
            {
                pages.mapped.remove(&oldest);
            }
            let offset = libc::off_t::try_from(number * page).ok()?;
            // SAFETY: a read-only shared mapping of one page inside the BPF_F_MMAPABLE
            // array's fd (`index` is below its capacity); owned by the RowPage, which
            // unmaps it.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    self.rows_fd,
                    offset,
                )
            };
            if base == libc::MAP_FAILED {
                return None;
            }
            pages.mapped.insert(number, RowPage(base));
            pages.order.push_back(number);
        }
        let base = pages.mapped.get(&number)?.0;
        // SAFETY: `at % page` + a row's size is within the page mapped above (rows are 8
        // bytes, pages a multiple of 8); rows are plain integers, so any bit pattern is valid,
        // and a run is written before it is published.
        Some(unsafe {
            base.cast::<u8>()
                .add(at % page)
                .cast::<UnwindRow>()
                .read_unaligned()
        })
    }

    /// How many rows module `id` holds in the array (0 when it holds none).
    pub fn rows_of(&self, id: u32) -> u32 {
        self.placed.get(&id).map_or(0, |r| r.len)
    }

    /// Rows no module holds.
    pub fn free_rows(&self) -> u32 {
        self.space.capacity() - self.space.used()
    }

    /// Whether module `id`'s rows are in the array.
    pub fn is_placed(&self, id: u32) -> bool {
        self.placed.contains_key(&id)
    }

    /// Publishes a process's mappings (at most `MAX_PROC_MAPPINGS`, the rest dropped).
    pub fn set_process(
        &mut self,
        pid: u32,
        mappings: &[UnwindMapping],
    ) -> Result<(), UnwindMapError> {
        let mut value = ProcUnwind::default();
        let n = mappings.len().min(MAX_PROC_MAPPINGS);
        value.mappings[..n].copy_from_slice(&mappings[..n]);
        value.count = n as u32;
        value.runtimes = self.runtime_bits.get(&pid).copied().unwrap_or(0);
        self.procs
            .insert(pid, value, 0)
            .map_err(|source| UnwindMapError::Update {
                map: map::UNWIND_PROCS,
                source,
            })
    }

    /// Forgets a process (it exited).
    pub fn remove_process(&mut self, pid: u32) {
        let _ = self.procs.remove(&pid);
        let _ = self.python.remove(&pid);
        let _ = self.v8.remove(&pid);
        let _ = self.hotspot.remove(&pid);
        let _ = self.rt_procs.remove(&pid);
        for slot in 0..32 {
            if self
                .rt_slots
                .get(&pid)
                .is_some_and(|s| s & (1 << slot) != 0)
            {
                let _ = self.rt_state.remove(&RtKey { tgid: pid, slot });
            }
        }
        self.rt_slots.remove(&pid);
        self.runtime_bits.remove(&pid);
    }

    /// Notes whether runtime `bit` (`proc_runtimes`) has an entry for `pid`; a change
    /// reaches the process's published entry at once (a runtime may find a process after it
    /// was published: a starting JVM).
    fn set_runtime_bit(&mut self, pid: u32, bit: u32, on: bool) -> Result<(), UnwindMapError> {
        let old = self.runtime_bits.get(&pid).copied().unwrap_or(0);
        let new = if on { old | bit } else { old & !bit };
        if new == old {
            return Ok(());
        }
        if new == 0 {
            self.runtime_bits.remove(&pid);
        } else {
            self.runtime_bits.insert(pid, new);
        }
        let Ok(mut value) = self.procs.get(&pid, 0) else {
            return Ok(());
        };
        value.runtimes = new;
        self.procs
            .insert(pid, value, 0)
            .map_err(|source| UnwindMapError::Update {
                map: map::UNWIND_PROCS,
                source,
            })
    }

    /// Tells the walk that runtime `slot` runs in `pid` (`Some`: the code ranges whose
    /// native frames its frames replace, and its state), or no longer does. Other runtimes'
    /// ranges in the process are kept.
    pub fn set_hooked(
        &mut self,
        pid: u32,
        slot: u8,
        entry: Option<(&[(u64, u64)], &RtState)>,
    ) -> Result<(), UnwindMapError> {
        let mut hooks = self.rt_procs.get(&pid, 0).unwrap_or_default();
        let kept: Vec<RtRange> = hooks.ranges[..(hooks.len as usize).min(MAX_HOOK_RANGES)]
            .iter()
            .filter(|r| r.slot != slot)
            .copied()
            .collect();
        let ranges = entry.map_or(&[][..], |(r, _)| r);
        if kept.len() + ranges.len() > MAX_HOOK_RANGES {
            return Err(UnwindMapError::Hooks { pid, slot });
        }
        hooks = RtProc::default();
        for (i, r) in kept
            .iter()
            .copied()
            .chain(ranges.iter().map(|&(start, end)| RtRange {
                start,
                end,
                slot,
                _pad: [0; 7],
            }))
            .enumerate()
        {
            hooks.ranges[i] = r;
            hooks.slots |= 1 << r.slot;
            hooks.len += 1;
        }
        let key = RtKey {
            tgid: pid,
            slot: u32::from(slot),
        };
        let slots = self.rt_slots.entry(pid).or_default();
        match entry {
            Some((_, state)) => {
                self.rt_state
                    .insert(key, state, 0)
                    .map_err(|source| UnwindMapError::Update {
                        map: map::RT_STATE,
                        source,
                    })?;
                *slots |= 1 << slot;
            }
            None => {
                let _ = self.rt_state.remove(&key);
                *slots &= !(1 << slot);
            }
        }
        if hooks.len == 0 {
            let _ = self.rt_procs.remove(&pid);
            return self.set_runtime_bit(pid, proc_runtimes::HOOKS, false);
        }
        self.rt_procs
            .insert(pid, hooks, 0)
            .map_err(|source| UnwindMapError::Update {
                map: map::RT_PROCS,
                source,
            })?;
        self.set_runtime_bit(pid, proc_runtimes::HOOKS, true)
    }

    /// Tells the walker that `pid` runs CPython (`Some`), or no longer does.
    pub fn set_python(&mut self, pid: u32, entry: Option<&PyProc>) -> Result<(), UnwindMapError> {
        set_runtime_entry(&mut self.python, map::PY_PROCS, pid, entry)?;
        self.set_runtime_bit(pid, proc_runtimes::PYTHON, entry.is_some())
    }

    /// Tells the walker that `pid` runs V8 (`Some`), or no longer does.
    pub fn set_v8(&mut self, pid: u32, entry: Option<&V8Proc>) -> Result<(), UnwindMapError> {
        set_runtime_entry(&mut self.v8, map::V8_PROCS, pid, entry)?;
        self.set_runtime_bit(pid, proc_runtimes::V8, entry.is_some())
    }

    /// Tells the walker that `pid` runs HotSpot (`Some`), or no longer does.
    pub fn set_hotspot(&mut self, pid: u32, entry: Option<&HsProc>) -> Result<(), UnwindMapError> {
        set_runtime_entry(&mut self.hotspot, map::HS_PROCS, pid, entry)?;
        self.set_runtime_bit(pid, proc_runtimes::HOTSPOT, entry.is_some())
    }

    /// Tells the sampler where process `pid`'s goroutine labels are (`Some`), or that it
    /// no longer runs Go.
    pub fn set_go(&mut self, pid: u32, entry: Option<&GoProc>) -> Result<(), UnwindMapError> {
        set_runtime_entry(&mut self.go, map::GO_PROCS, pid, entry)?;
        self.set_runtime_bit(pid, proc_runtimes::GO, entry.is_some())
    }

    /// Bytes of rows in use.
    pub fn row_bytes(&self) -> usize {
        self.space.used() as usize * size_of::<UnwindRow>()
    }

    /// Bytes of the row array (allocated whole by the kernel when the map is created).
    pub fn reserved_bytes(&self) -> usize {
        self.space.capacity() as usize * size_of::<UnwindRow>()
    }
}

/// The page size (mmap offsets and lengths are in whole pages).
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

impl RecordProgram {
    /// Drops a process's tables in the kernel when it execs or exits (the exec'ed image's
    /// are loaded on its next sample).
    pub fn hook_unwind_lifecycle(&mut self) -> Result<(), BpfError> {
        self.loaded
            .attach_tracepoint(programs::UNWIND_EXEC, "sched", "sched_process_exec")?;
        self.loaded
            .attach_tracepoint(programs::UNWIND_EXIT, "sched", "sched_process_exit")
    }

    /// (table walks that stopped short, samples of processes without tables), summed over
    /// CPUs.
    pub fn unwind_counts(&self) -> Result<(u64, u64), BpfError> {
        let stats = Counters::open(self.loaded.ebpf(), map::STATS)?;
        Ok((
            stats.sum(stat::UNWIND_PARTIAL)?,
            stats.sum(stat::UNWIND_NO_PROCESS)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(pcs: std::ops::Range<u32>) -> Vec<UnwindRow> {
        pcs.map(|pc| UnwindRow {
            pc: pc * 10,
            cfa_offset: 0,
            cfa: 0,
            rbp: 0,
        })
        .collect()
    }

    #[test]
    fn fences_are_the_runs_own_rows_at_multiples_of_the_block() {
        let per = ROWS_PER_FENCE as usize;
        // A run from 100 to 300: its fences are rows 128, 192 and 256 (indices 28, 92, 156
        // of the run).
        let r = rows(0..200);
        assert_eq!(fences(100, &r), (2, vec![280, 920, 1560]));
        // A run starting on a fence has it as its first row; one ending on a fence does not
        // have that fence (the next run's).
        let r = rows(0..(2 * per as u32));
        assert_eq!(fences(per, &r), (1, vec![0, 10 * per as u32]));
        // A run inside one block has none.
        assert_eq!(fences(per + 1, &rows(0..10)).1, Vec::<u32>::new());
        assert_eq!(fences(0, &[]).1, Vec::<u32>::new());
    }
}
