//! `cargo xtask bench`: this project against perf on this machine, in one run, interleaved
//! (A B A B ...), written to BENCHMARKS.md (medians, ratios, the machine, the commands) and
//! bench/results.json (every run's numbers). `--quick` (CI) runs every measurement once with
//! small sizes, writes to target/bench/, and asserts nothing about speed; it fails only when a
//! measurement could not be taken.

mod counting;
pub mod env;
mod export;
mod fleet;
mod group;
mod java;
mod javascript;
mod kernel;
mod loss;
mod memory;
mod offcpu;
mod overhead;
mod post;
mod proc;
mod python;
mod report;
mod ruby;
mod runtime_cost;
mod unwind;

use std::{
    ffi::OsStr,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use serde_json::Value;

use crate::{setup::setup, util::workspace_root};
use env::Tools;

/// One measurement's results, as the report shows them.
pub struct Section {
    pub title: &'static str,
    /// What was run and how the numbers are derived.
    pub method: String,
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
    /// Representative commands, exactly as run (`$W` is the scratch directory).
    pub commands: Vec<String>,
    pub goal: Goal,
    pub notes: Vec<String>,
    pub raw: Value,
}

/// A target from the issue and whether this run met it.
pub struct Goal {
    pub target: &'static str,
    pub measured: String,
    pub met: bool,
    /// Where missed: why, and what would close it.
    pub why: String,
}

pub struct Ctx {
    pub tools: Tools,
    pub dir: PathBuf,
    pub quick: bool,
    pub ncpu: usize,
    /// End-to-end cost of one sample (profiler ns, perf ns, rounds), from the overhead runs.
    pub per_sample: Option<(f64, f64, usize)>,
    runs: usize,
}

impl Ctx {
    /// `full` rounds, or 1 with `--quick`.
    pub fn rounds(&self, full: usize) -> usize {
        if self.quick { 1 } else { full }
    }

    /// `full`, or `quick` with `--quick`.
    pub fn size<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }

    /// The profiler (and perf, below) run in the scratch directory: a recording without
    /// `-o` writes its profile where it runs, and must not land in the checkout (two did,
    /// twice).
    pub fn profiler<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = Command::new(&self.tools.profiler);
        c.args(args).current_dir(&self.dir);
        c
    }

    pub fn perf<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = Command::new(&self.tools.perf);
        c.args(args).current_dir(&self.dir);
        c
    }

    /// The fixed-work fixture: `threads` threads of `calls` leaf() calls (0: until killed).
    pub fn work(&self, calls: u64, threads: u32) -> Vec<String> {
        vec![
            self.tools.fixture("work").display().to_string(),
            calls.to_string(),
            threads.to_string(),
        ]
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A fresh log path prefix for one run's stdout/stderr.
    pub fn log(&mut self, what: &str) -> PathBuf {
        self.runs += 1;
        self.dir
            .join("logs")
            .join(format!("{:04}-{what}", self.runs))
    }

    /// A command line as the report prints it: tools by name, the scratch directory as `$W`.
    pub fn show(&self, cmd: &str) -> String {
        let bin = format!("{}/", self.tools.bin.display());
        cmd.replace(&*self.tools.profiler.to_string_lossy(), "profiler")
            .replace(&*self.tools.sample_bench.to_string_lossy(), "bench_sample")
            .replace(&*self.tools.perf.to_string_lossy(), "perf")
            .replace(
                &*self.tools.collapse.to_string_lossy(),
                "inferno-collapse-perf",
            )
            .replace(
                &*self.tools.flamegraph.to_string_lossy(),
                "inferno-flamegraph",
            )
            .replace(&bin, "./")
            .replace(&*self.dir.to_string_lossy(), "$W")
    }
}

pub fn bench(quick: bool, only: Option<&str>) -> anyhow::Result<()> {
    let started = Instant::now();
    setup()?;
    let root = workspace_root();
    let dir = root.join("target/bench");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("logs"))?;
    let tools = env::prepare(&dir)?;
    let _lock = env::lock()?;
    let machine = env::machine(&tools);
    let mut ctx = Ctx {
        tools,
        dir,
        quick,
        ncpu: env::online_cpus(),
        per_sample: None,
        runs: 0,
    };
    type Measure = fn(&mut Ctx) -> anyhow::Result<Section>;
    let measures: [(&str, Measure); 15] = [
        ("overhead", overhead::measure),
        ("kernel cost", kernel::measure),
        ("loss", loss::measure),
        ("post-processing", post::measure),
        ("counting", counting::measure),
        ("memory", memory::measure),
        ("stacks without frame pointers", unwind::measure),
        ("offcpu", offcpu::measure),
        ("group", group::measure),
        ("export", export::measure),
        ("python", python::measure),
        ("javascript", javascript::measure),
        ("java frames", java::measure),
        ("fleet", fleet::measure),
        ("ruby frames", ruby::measure),
    ];
    let mut sections = Vec::new();
    for (name, measure) in measures {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let t = Instant::now();
        eprintln!("bench: {name}...");
        let section = measure(&mut ctx).map_err(|e| e.context(format!("measuring {name}")))?;
        eprintln!("bench: {name} done in {:.0} s", t.elapsed().as_secs_f64());
        sections.push(section);
    }
    let (md, json) = if quick || only.is_some() {
        (ctx.dir.join("BENCHMARKS.md"), ctx.dir.join("results.json"))
    } else {
        (root.join("BENCHMARKS.md"), root.join("bench/results.json"))
    };
    report::write(&md, &json, &machine, &sections, quick || only.is_some())?;
    eprintln!(
        "bench: wrote {} and {} in {:.0} s",
        md.display(),
        json.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `x / base - 1` in percent.
pub fn slowdown(x: f64, base: f64) -> f64 {
    (x / base - 1.0) * 100.0
}

pub fn exists_nonempty(p: &Path) -> anyhow::Result<()> {
    match fs::metadata(p) {
        Ok(m) if m.len() > 0 => Ok(()),
        _ => anyhow::bail!("{} was not written", p.display()),
    }
}
