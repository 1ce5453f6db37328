//! `profiler stat`: cpustat's options, plus `-C cpulist` and `--json`.

use std::process::ExitCode;

use clap::Args;

use super::counters::{self, StatRequest, Voice};
use crate::tools::stat::{Stamp, StatOptions};

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
    /// Print this help and the events this host can count.
    #[arg(short = 'h', long = "help")]
    pub help: bool,
    /// Seconds between samples (default 5), then the number of samples (default:
    /// until interrupted).
    #[arg(value_name = "INTERVAL [COUNT]", num_args = 0..)]
    pub operands: Vec<String>,
}

/// `-T u|d`: cpustat looks at the first character only.
pub fn stamp(text: &str) -> Result<Stamp, String> {
    match text.chars().next() {
        Some('u') => Ok(Stamp::Unix),
        Some('d') => Ok(Stamp::Date),
        _ => Err(format!("invalid -T \"{text}\": expected u or d")),
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
    let parsed = (|| -> Result<StatOptions, String> {
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
