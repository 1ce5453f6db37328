//! What the bench needs before it measures: the binaries (profiler, perf, inferno), the
//! fixtures compiled with their own header flags, the host-wide lock, and the machine's
//! description for the report.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use nix::fcntl::{Flock, FlockArg};

use crate::util::{cargo, output, run, workspace_root};

/// inferno's command-line tools, the version the workspace's library uses.
const INFERNO_VERSION: &str = "0.12.8";

pub struct Tools {
    pub profiler: PathBuf,
    pub sample_bench: PathBuf,
    pub perf: PathBuf,
    pub collapse: PathBuf,
    pub flamegraph: PathBuf,
    /// Compiled fixtures live here (`work`, `spin`, `pingpong`, `group`).
    pub bin: PathBuf,
}

impl Tools {
    pub fn fixture(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }
}

/// The bench's builds: the release profiler and its per-sample example, and inferno from
/// crates.io when no inferno is on PATH (`cargo xtask warm` makes them ahead of the bench).
pub fn build() -> anyhow::Result<()> {
    // The packages of the kernels' release build (`cargo xtask install`'s), so that both
    // unify their dependencies' features alike and share every artifact: with `-p profiler`
    // alone, a build after the kernels' rebuilt tonic and the profiler (about 2 minutes).
    let mut args = vec!["build", "--release"];
    for p in crate::release::INSTALLED {
        args.extend(["-p", p]);
    }
    args.extend(["--bin", "profiler", "--example", "bench_sample"]);
    cargo(&args)?;
    inferno("inferno-collapse-perf").map(drop)
}

/// Builds what is measured (release: a debug build's reader and symbolizer are many times
/// slower, which would be measured instead), finds or installs perf and inferno, and compiles
/// the fixtures into `dir`.
pub fn prepare(dir: &Path) -> anyhow::Result<Tools> {
    build()?;
    let target = workspace_root().join("target/release");
    let bin = dir.join("bin");
    fs::create_dir_all(&bin)?;
    for name in ["work", "spin", "pingpong", "group"] {
        compile_fixture(name, &bin)?;
    }
    Ok(Tools {
        profiler: target.join("profiler"),
        sample_bench: target.join("examples/bench_sample"),
        perf: perf()?,
        collapse: inferno("inferno-collapse-perf")?,
        flamegraph: inferno("inferno-flamegraph")?,
        bin,
    })
}

/// Compiles `tests/fixtures/NAME.c` with the flags its first line declares (`/* cc FLAGS -o`).
fn compile_fixture(name: &str, bin: &Path) -> anyhow::Result<()> {
    let src = workspace_root().join(format!("tests/fixtures/{name}.c"));
    let text = fs::read_to_string(&src).with_context(|| format!("reading {}", src.display()))?;
    let header = text.lines().next().unwrap_or_default();
    let flags: Vec<&str> = header
        .split_whitespace()
        .skip_while(|w| *w != "cc")
        .skip(1)
        .take_while(|w| *w != "-o")
        .collect();
    if flags.is_empty() {
        bail!("{}: no `/* cc FLAGS -o` header", src.display());
    }
    run(Command::new("cc")
        .args(&flags)
        .arg("-o")
        .arg(bin.join(name))
        .arg(&src))
}

/// perf from Debian's linux-perf, installed when missing.
fn perf() -> anyhow::Result<PathBuf> {
    let path = PathBuf::from("/usr/bin/perf");
    let works =
        |p: &Path| output(Command::new(p).arg("--version")).is_ok_and(|o| o.status.success());
    if !works(&path) {
        run(Command::new("apt-get").args(["update", "-q"]))?;
        run(Command::new("apt-get").args(["install", "-y", "-q", "linux-perf"]))?;
        if !works(&path) {
            bail!("perf does not run after installing linux-perf");
        }
    }
    Ok(path)
}

/// An inferno tool from PATH or the cache, else `cargo install inferno` into the cache.
fn inferno(tool: &str) -> anyhow::Result<PathBuf> {
    if let Ok(o) = output(Command::new("sh").args(["-c", &format!("command -v {tool}")]))
        && o.status.success()
    {
        return Ok(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    }
    let root = cache_dir();
    let path = root.join("bin").join(tool);
    if !path.exists() {
        run(Command::new(env!("CARGO"))
            .args([
                "install",
                "inferno",
                "--locked",
                "--version",
                INFERNO_VERSION,
            ])
            .arg("--root")
            .arg(&root))?;
    }
    Ok(path)
}

fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/profiler")
}

/// Takes the host-wide lock the privileged tests take, for the whole bench: nobody else's
/// BPF programs or perf events run beside the measurements, and ours disturb no test.
pub fn lock() -> anyhow::Result<Flock<fs::File>> {
    let path = std::env::temp_dir().join("profiler-tests.lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(l),
        Err((file, _)) => {
            eprintln!("bench: waiting for {} (tests running)", path.display());
            Flock::lock(file, FlockArg::LockExclusive)
                .map_err(|(_, e)| anyhow::anyhow!("flock {}: {e}", path.display()))
        }
    }
}

/// Turns on the kernel's BPF run-time statistics while alive; restores the old value.
pub struct BpfStats(String);

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    pub fn enable() -> anyhow::Result<Self> {
        let old = fs::read_to_string(BPF_STATS).with_context(|| format!("reading {BPF_STATS}"))?;
        fs::write(BPF_STATS, "1").with_context(|| format!("writing {BPF_STATS}"))?;
        Ok(Self(old.trim().to_string()))
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = fs::write(BPF_STATS, &self.0);
    }
}

pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// One line per fact about the machine and the software measured.
pub fn machine(tools: &Tools) -> Vec<(String, String)> {
    let cmd_line = |c: &mut Command| {
        output(c)
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let mem = fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(String::new(), |k| {
            format!("{:.1} GiB", k as f64 / 1048576.0)
        });
    let pmu = if Path::new("/sys/bus/event_source/devices/cpu").exists() {
        "hardware PMU present"
    } else {
        "no hardware PMU (software events only)"
    };
    let commit = cmd_line(
        Command::new("git")
            .args(["-C"])
            .arg(workspace_root())
            .args(["describe", "--always", "--dirty"]),
    );
    vec![
        ("CPU".into(), format!("{} x {model}", online_cpus())),
        ("memory".into(), mem),
        ("PMU".into(), pmu.into()),
        (
            "kernel".into(),
            cmd_line(Command::new("uname").args(["-r"])),
        ),
        (
            "load average at start".into(),
            fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        (
            "perf".into(),
            cmd_line(Command::new(&tools.perf).arg("--version")),
        ),
        (
            "inferno".into(),
            format!("{INFERNO_VERSION} (cargo install inferno)"),
        ),
        ("profiler".into(), format!("commit {commit}")),
        (
            "sysctl".into(),
            [
                "perf_event_max_sample_rate",
                "perf_cpu_time_max_percent",
                "perf_event_paranoid",
            ]
            .iter()
            .map(|k| {
                let v = fs::read_to_string(format!("/proc/sys/kernel/{k}")).unwrap_or_default();
                format!("kernel.{k}={}", v.trim())
            })
            .collect::<Vec<_>>()
            .join(", "),
        ),
    ]
}
