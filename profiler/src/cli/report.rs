//! `profiler report` and `profiler flamegraph`: render a recorded profile file (pprof or
//! folded) without touching the kernel.

use std::{path::PathBuf, process::ExitCode};

use clap::Args;

use super::fail;
use crate::{
    profile::{By, Format, Profile, Ratio, ReadError, ReportOptions, Sort, read_profile},
    sink::{FileSink, Sinks, TableSink},
};

/// What `record` writes when it is given no `-o`.
const DEFAULT_INPUT: &str = super::record::DEFAULT_OUTPUT;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The profile to read: pprof (as `record -o` writes) or folded stacks; `-` is
    /// standard input. Default `profile.pb.gz`.
    #[arg(value_name = "FILE", conflicts_with = "input")]
    pub file: Option<PathBuf>,
    /// The profile to read, as FILE (either spelling, not both).
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Rows of the table: function, module, pid, tid, comm, cpu, cgroup, event, or
    /// label:KEY (the value of a label the sampled code set, a goroutine's pprof label).
    #[arg(long, default_value = "function", value_name = "ROWS")]
    pub by: By,
    /// Order: self, total or name.
    #[arg(long, value_enum, default_value = "self")]
    pub sort: Sort,
    /// Rows in the table.
    #[arg(long, default_value_t = 25, value_name = "N")]
    pub limit: usize,
    /// The event to show (default: the first of the profile; one event at a time, as
    /// events of different units do not add up).
    #[arg(short, long, value_name = "EVENT")]
    pub event: Option<String>,
    /// Only the samples of this cgroup (its path, as `--by cgroup` shows it).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// With a counter group: a column of A/B per row (e.g. `instructions/cycles`).
    /// Repeatable.
    #[arg(long, value_name = "A/B")]
    pub ratio: Vec<String>,
}

#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// The profile to read: pprof (as `record -o` writes) or folded stacks; `-` is
    /// standard input. Default `profile.pb.gz`.
    #[arg(value_name = "FILE", conflicts_with = "input")]
    pub file: Option<PathBuf>,
    /// The profile to read, as FILE (either spelling, not both).
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Where to write the SVG (default `flamegraph.svg`), or the folded stacks with
    /// --folded (default `flamegraph.folded`); `-` is standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write folded stacks instead of an SVG.
    #[arg(long)]
    pub folded: bool,
    /// A differential flame graph of AFTER against BEFORE (red grew, blue shrank).
    #[arg(long, num_args = 2, value_names = ["BEFORE", "AFTER"], conflicts_with_all = ["file", "input", "folded"])]
    pub diff: Option<Vec<PathBuf>>,
    /// The graph's title.
    #[arg(long, default_value = "Flame Graph")]
    pub title: String,
    /// The event to draw (default: the first of the profile; one event at a time).
    #[arg(short, long, value_name = "EVENT")]
    pub event: Option<String>,
    /// Only the samples of this cgroup (one container's flame graph).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
}

/// The profile to read: FILE or `-i FILE` (clap refuses both), else record's default output.
fn input(file: &Option<PathBuf>, input: &Option<PathBuf>) -> PathBuf {
    file.clone()
        .or_else(|| input.clone())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_INPUT))
}

/// Why an input profile cannot be shown as asked.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{}: no samples of event '{event}' (it has: {})", .path.display(), .have.join(", "))]
    NoEvent {
        path: PathBuf,
        event: String,
        have: Vec<String>,
    },
    #[error("{}: no samples in cgroup {cgroup}", .path.display())]
    NoCgroup { path: PathBuf, cgroup: String },
}

/// The profile of `path`, narrowed to one event and/or cgroup.
fn load(
    path: &std::path::Path,
    event: Option<&str>,
    cgroup: Option<&str>,
) -> Result<Profile, LoadError> {
    let mut profile = read_profile(path)?;
    if let Some(event) = event {
        if !profile.events().iter().any(|e| e.as_ref() == event) {
            return Err(LoadError::NoEvent {
                path: path.to_owned(),
                event: event.to_string(),
                have: profile.events().iter().map(|e| e.to_string()).collect(),
            });
        }
        profile = profile.for_event(event);
    }
    if let Some(cgroup) = cgroup {
        let cg = profile.clone();
        profile
            .stacks
            .retain(|s| cg.cgroup_name(s.cgroup).as_ref() == cgroup);
        if profile.stacks.is_empty() {
            return Err(LoadError::NoCgroup {
                path: path.to_owned(),
                cgroup: cgroup.to_string(),
            });
        }
    }
    if cgroup.is_some() {
        // The summary line counts what is shown; lost and filtered stay the run's.
        profile.info.samples = profile.samples();
    }
    Ok(profile)
}

/// One event of `profile`: as narrowed by `-e`, else the first, the others named on stderr.
fn one_event(profile: Profile) -> Profile {
    let (one, note) = crate::profile::one_event(&profile);
    if let Some(note) = note {
        eprintln!("profiler: {note}");
    }
    one
}

pub fn run_report(args: ReportArgs) -> ExitCode {
    let path = input(&args.file, &args.input);
    let profile = match load(&path, args.event.as_deref(), args.cgroup.as_deref()) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let names: Vec<String> = profile.events().iter().map(|e| e.to_string()).collect();
    let ratios = match args
        .ratio
        .iter()
        .map(|r| Ratio::parse(r, &names))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(r) if !r.is_empty() && profile.info.counters.is_empty() => {
            return fail(format!(
                "{}: --ratio needs a profile of a counter group (record -e '{{A,B}}:S')",
                path.display()
            ));
        }
        Ok(r) => r,
        Err(e) => return fail(format!("{}: {e}", path.display())),
    };
    let opts = ReportOptions {
        by: args.by,
        sort: args.sort,
        limit: args.limit,
        ratios,
    };
    let mut sinks = Sinks::new(|n| eprintln!("profiler: {n}"));
    sinks.push(TableSink::new(opts, Box::new(std::io::stdout())));
    match sinks.finish(&profile) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

pub fn run_flamegraph(args: FlamegraphArgs) -> ExitCode {
    // Inputs are read (and refused) before the output file is created.
    let (event, cgroup) = (args.event.as_deref(), args.cgroup.as_deref());
    let inputs = match &args.diff {
        Some(pair) => pair
            .iter()
            .map(|p| load(p, event, cgroup))
            .collect::<Result<Vec<_>, _>>(),
        None => load(&input(&args.file, &args.input), event, cgroup).map(|p| vec![p]),
    };
    let inputs = match inputs {
        Ok(i) => i.into_iter().map(one_event).collect::<Vec<_>>(),
        Err(e) => return fail(e),
    };
    let path = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(match args.folded {
            true => "flamegraph.folded",
            false => "flamegraph.svg",
        })
    });
    let mut inputs = inputs.into_iter();
    let first = inputs.next().expect("one input, or two with --diff");
    let (sink, profile) = match inputs.next() {
        Some(after) => (FileSink::create_diff(&path, first, &args.title), after),
        None => {
            let format = match args.folded {
                true => Format::Folded,
                false => Format::Svg,
            };
            (FileSink::create(&path, format, &args.title), first)
        }
    };
    let mut sinks = Sinks::new(|n| eprintln!("profiler: {n}"));
    match sink {
        Ok(s) => sinks.push(s),
        Err(e) => return fail(e),
    }
    match sinks.finish(&profile) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
