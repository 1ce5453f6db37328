//! `profiler track`: cputrack's options, plus `--json`.

use std::{ffi::OsString, path::PathBuf, process::ExitCode};

use clap::Args;

use super::counters::{self, TrackRequest, Voice};
use crate::tools::{cgstat::CgroupStatOptions, track::TrackOptions};

/// cputrack: count events per thread of a command or process, following threads (and
/// with -f and -e, fork and exec).
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct TrackArgs {
    /// An event set: [picN=]event[,attr[N][=value]][,nouser[N]][,sys[N]],... (repeat -c to
    /// cycle through several sets, one per sample). Default: perf stat's events (cycles,
    /// instructions, branches, branch-misses with a PMU; else task-clock, context-switches,
    /// cpu-migrations, page-faults), user and system mode.
    #[arg(short = 'c', value_name = "SPEC")]
    pub specs: Vec<String>,
    /// Seconds between samples; 0: only thread, fork, exec and exit rows.
    #[arg(
        short = 'T',
        value_name = "SECS",
        default_value = "1",
        allow_hyphen_values = true
    )]
    pub interval: String,
    /// Stop tracking a process after this many samples (0: unlimited).
    #[arg(short = 'N', value_name = "COUNT", allow_hyphen_values = true)]
    pub count: Option<String>,
    /// Follow exec (otherwise tracking of a process ends at its exec).
    #[arg(short = 'e')]
    pub follow_exec: bool,
    /// Follow fork and vfork (adds a pid column).
    #[arg(short = 'f')]
    pub follow_fork: bool,
    /// No header.
    #[arg(short = 'n')]
    pub no_header: bool,
    /// Add the tick column (cycles with a PMU, else task time at the nominal clock).
    #[arg(short = 't')]
    pub tick: bool,
    /// Also print init_lwp and fini_lwp rows.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Name the library function in error messages.
    #[arg(short = 'D')]
    pub debug: bool,
    /// Write the rows to FILE (line-buffered).
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Attach to this running process instead of starting a command.
    #[arg(short = 'p', value_name = "PID", allow_hyphen_values = true)]
    pub pid: Option<String>,
    /// One JSON object per row instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Count the tasks of this cgroup (v2 path, relative to its root or absolute; its whole
    /// subtree) instead of a command or process: a row every -T seconds and a total.
    #[arg(short = 'G', value_name = "CGROUP")]
    pub cgroup: Option<String>,
    /// Print this help and the events this host can count.
    #[arg(short = 'h', long = "help")]
    pub help: bool,
    /// The command to start (options end at its name; `--` also ends them).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

pub fn run(args: TrackArgs) -> ExitCode {
    let voice = Voice {
        name: "profiler",
        debug: args.debug,
    };
    let cpc = match counters::open_or_help(voice, args.help, "track") {
        Ok(c) => c,
        Err(code) => return code,
    };
    let interval = match counters::seconds("interval", &args.interval) {
        Ok(d) => (!d.is_zero()).then_some(d),
        Err(e) => return voice.usage(e),
    };
    let samples = match args.count.as_deref().map(|c| counters::count("count", c)) {
        None => None,
        Some(Ok(n)) => (n > 0).then_some(n),
        Some(Err(e)) => return voice.usage(e),
    };
    // No -c: perf stat's default events, named above the header.
    let (specs, header_note) = match args.specs.is_empty() {
        true => {
            let set = counters::default_set(&cpc);
            (
                vec![set.to_string()],
                Some(format!("no -c given: counting {set}")),
            )
        }
        false => (args.specs.clone(), None),
    };
    if let Some(cgroup) = args.cgroup.clone() {
        return per_cgroup(voice, &cpc, cgroup, &specs, &args, interval, samples);
    }
    let pid = match args.pid.as_deref().map(counters::pid).transpose() {
        Ok(p) => p,
        Err(e) => return voice.usage(e),
    };
    let opts = TrackOptions {
        sets: Vec::new(),
        interval,
        samples,
        follow_fork: args.follow_fork,
        follow_exec: args.follow_exec,
        verbose: args.verbose,
        tick: args.tick,
        header: !args.no_header,
        json: args.json,
        debug: args.debug,
        header_note,
    };
    let req = TrackRequest {
        specs,
        opts,
        command: args.command,
        pid,
        output: args.output,
    };
    counters::run_track(voice, &cpc, req)
}

/// `track -G CGROUP`: the cgroup's counts from the shared per-CPU counters.
fn per_cgroup(
    voice: Voice,
    cpc: &crate::cpc::Cpc,
    cgroup: String,
    specs: &[String],
    args: &TrackArgs,
    interval: Option<std::time::Duration>,
    samples: Option<u64>,
) -> ExitCode {
    if args.pid.is_some() || !args.command.is_empty() {
        return voice.usage("give -G, -p or a command, only one");
    }
    let unsupported = [
        (args.follow_exec, "-e"),
        (args.follow_fork, "-f"),
        (args.tick, "-t"),
        (args.verbose, "-v"),
    ];
    if let Some((_, flag)) = unsupported.iter().find(|(on, _)| *on) {
        return voice.usage(format!("{flag} cannot be used with -G"));
    }
    if specs.len() > 1 {
        return voice.usage("-G takes one event set (one -c)");
    }
    let opts = CgroupStatOptions {
        patterns: vec![cgroup],
        glob: false,
        interval,
        count: samples,
        cpus: None,
        header: !args.no_header,
        json: args.json,
    };
    counters::run_cgroup_stat(voice, cpc, specs, opts, args.output.as_deref())
}
