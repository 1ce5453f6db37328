//! `profiler stat`: cpustat's options, plus `-C cpulist` and `--json`.

use std::process::ExitCode;

use clap::Args;

use super::{
    counters::{self, StatRequest, Voice},
    usage::UsageError,
};
use crate::tools::{
    cgstat::CgroupStatOptions,
    stat::{Stamp, StatOptions},
};

/// cpustat: count events on every CPU (or those of -C), a row per CPU each interval and a
/// total row per set at the end (Ctrl-C ends early, totals still printed).
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct StatArgs {
    /// An event set: [picN=]event[,attr[N][=value]][,nouser[N]][,sys[N]],... (repeat -c to
    /// cycle through several sets, one per sample).
    #[arg(short = 'c', value_name = "SPEC")]
    pub specs: Vec<String>,
    /// No header.
    #[arg(short = 'n')]
    pub no_header: bool,
    /// Add the tick column.
    #[arg(short = 't')]
    pub tick: bool,
    /// Name the library function in error messages.
    #[arg(short = 'D')]
    pub debug: bool,
    /// Soak each CPU with an idle-priority spinner while a system-only set is bound.
    #[arg(short = 's')]
    pub soak: bool,
    /// Print a time stamp before each row: u (seconds since the epoch) or d (date).
    #[arg(short = 'T', value_name = "u|d")]
    pub stamp: Option<String>,
    /// With several sets, cycle through them every PERIOD seconds (resting in between).
    #[arg(short = 'p', value_name = "PERIOD", allow_hyphen_values = true)]
    pub period: Option<String>,
    /// Only these CPUs (e.g. 0-3,6); default: every online CPU.
    #[arg(short = 'C', value_name = "CPULIST")]
    pub cpus: Option<String>,
    /// One JSON object per row instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Count per cgroup, with one set of per-CPU counters shared by every cgroup: rows for
    /// every cgroup that counted anything, or for those of LIST (comma-separated paths
    /// relative to the cgroup v2 root or absolute in it, globs allowed:
    /// `--for-each-cgroup=system.slice/docker-*.scope`). Each counts its whole subtree.
    #[arg(
        long = "for-each-cgroup",
        value_name = "LIST",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub for_each_cgroup: Option<Vec<String>>,
    /// The same as --for-each-cgroup=LIST (perf stat's -G).
    #[arg(short = 'G', value_name = "LIST")]
    pub cgroups: Vec<String>,
    /// Print this help and the events this host can count.
    #[arg(short = 'h', long = "help")]
    pub help: bool,
    /// Seconds between samples (default 5), then the number of samples (default:
    /// until interrupted).
    #[arg(value_name = "INTERVAL [COUNT]", num_args = 0..)]
    pub operands: Vec<String>,
}

/// `-T u|d`: cpustat looks at the first character only.
pub fn stamp(text: &str) -> Result<Stamp, UsageError> {
    match text.chars().next() {
        Some('u') => Ok(Stamp::Unix),
        Some('d') => Ok(Stamp::Date),
        _ => Err(UsageError::Stamp(text.to_string())),
    }
}

pub fn run(args: StatArgs) -> ExitCode {
    let voice = Voice {
        name: "profiler",
        debug: args.debug,
    };
    let cpc = match counters::open_or_help(voice, args.help, "stat") {
        Ok(c) => c,
        Err(code) => return code,
    };
    if args.for_each_cgroup.is_some() || !args.cgroups.is_empty() {
        return per_cgroup(voice, &cpc, args);
    }
    let parsed = (|| -> Result<StatOptions, UsageError> {
        let (interval, count) = counters::stat_operands(&args.operands)?;
        Ok(StatOptions {
            sets: Vec::new(),
            interval,
            count,
            period: args
                .period
                .as_deref()
                .map(|p| counters::seconds("period", p))
                .transpose()?,
            cpus: args.cpus.as_deref().map(counters::cpu_list).transpose()?,
            soak: args.soak,
            tick: args.tick,
            header: !args.no_header,
            json: args.json,
            stamp: args.stamp.as_deref().map(stamp).transpose()?,
            prog: "profiler",
        })
    })();
    match parsed {
        Ok(opts) => counters::run_stat(
            voice,
            &cpc,
            StatRequest {
                specs: args.specs,
                opts,
            },
        ),
        Err(e) => voice.usage(e),
    }
}

/// `--for-each-cgroup` / `-G`: one set, counted per cgroup.
fn per_cgroup(voice: Voice, cpc: &crate::cpc::Cpc, args: StatArgs) -> ExitCode {
    let unsupported = [
        (args.soak, "-s"),
        (args.tick, "-t"),
        (args.stamp.is_some(), "-T"),
        (args.period.is_some(), "-p"),
    ];
    if let Some((_, flag)) = unsupported.iter().find(|(on, _)| *on) {
        return voice.usage(format!("{flag} cannot be used with per-cgroup counting"));
    }
    if args.specs.len() > 1 {
        return voice.usage("per-cgroup counting takes one event set (one -c)");
    }
    let parsed = (|| -> Result<CgroupStatOptions, UsageError> {
        let (interval, count) = counters::stat_operands(&args.operands)?;
        let patterns = args
            .for_each_cgroup
            .iter()
            .flatten()
            .chain(&args.cgroups)
            .flat_map(|l| l.split(','))
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        Ok(CgroupStatOptions {
            patterns,
            glob: true,
            interval: Some(interval),
            count,
            cpus: args.cpus.as_deref().map(counters::cpu_list).transpose()?,
            header: !args.no_header,
            json: args.json,
        })
    })();
    match parsed {
        Ok(opts) => counters::run_cgroup_stat(voice, cpc, &args.specs, opts, None),
        Err(e) => voice.usage(e),
    }
}
