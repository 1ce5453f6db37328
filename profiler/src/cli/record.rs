//! `profiler record`.

use std::{ffi::OsString, io::IsTerminal as _, path::PathBuf, process::ExitCode, time::Duration};

use clap::Args;

use super::{
    EXIT_USAGE,
    exit::Ended,
    fail,
    record_error::RecordArgError,
    size::{byte_size, unwind_rows},
};
use crate::{
    export::{
        DEFAULT_SPOOL_MAX, Endpoint, ExportOptions, Exporter, parse_header, read_header_file,
    },
    output::is_stdout,
    profile::{By, Format, Ratio, ReportOptions, Sort},
    record::{CallGraph, Mode, RecordError, RecordOptions, Stop, Target, record_with},
    sink::{FileSink, Series, Sinks, TableSink},
};

/// `--call-graph` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CallGraphArg {
    /// Frame pointers only.
    Fp,
    /// Unwind tables (.eh_frame) where available, frame pointers elsewhere.
    Dwarf,
}

/// `--symbolize` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SymbolizeArg {
    /// Name every frame at the end of the run (or of each interval).
    Now,
    /// Leave user frames as (file, offset) with build ids, for `profiler symbolize` or a
    /// symbol server; kernel and JIT frames are still named (they cannot be later).
    None,
}

/// One target is required: processes, threads, a cgroup, or the whole system (`-a`, or the
/// CPUs of `-C`), which a command may bound (as in perf: `record -a -- sleep 5`). An
/// --interval run needs somewhere to send its intervals: a directory, a store, or both.
#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("target")
        .required(true)
        .multiple(true)
        .args(["pid", "tid", "all_cpus", "cpus", "cgroup", "command"])
))]
#[command(group(
    clap::ArgGroup::new("destination")
        .multiple(true)
        .args(["output", "export"])
))]
pub struct RecordArgs {
    /// Sampling frequency in Hz (per CPU).
    #[arg(
        short = 'F',
        long = "freq",
        default_value_t = 99,
        value_name = "HZ",
        conflicts_with = "count"
    )]
    pub freq: u64,
    /// Sample every N events instead (perf's -c; libcpc's preset 2^64 - N).
    #[arg(short = 'c', long = "count", value_name = "N")]
    pub count: Option<u64>,
    /// Events to sample (any name `profiler list` shows; repeat or comma-separate).
    #[arg(
        short = 'e',
        long = "event",
        value_delimiter = ',',
        default_value = "cpu-clock",
        value_name = "EVENT"
    )]
    pub event: Vec<String>,
    /// Counters to read at each sample of the one -e event (up to 8, comma-separated):
    /// each stack gets what each counter counted in its thread since the thread's previous
    /// sample. perf's `-e '{LEADER,EV2,..}:S'` says the same.
    #[arg(long = "read", value_delimiter = ',', value_name = "EVENT[,EVENT..]")]
    pub read: Vec<String>,
    /// Profile these threads only (comma-separated tids).
    #[arg(
        short = 't',
        long = "tid",
        value_delimiter = ',',
        value_name = "TID[,TID..]",
        conflicts_with_all = ["cgroup", "command", "all_cpus"]
    )]
    pub tid: Vec<u32>,
    /// Profile the tasks of this cgroup v2 directory.
    #[arg(
        short = 'G',
        long = "cgroup",
        value_name = "PATH",
        conflicts_with_all = ["command", "all_cpus"]
    )]
    pub cgroup: Option<PathBuf>,
    /// Only on these CPUs (e.g. `0-3,6`). Alone or with a command: these CPUs, whole (the
    /// command bounds the run); with -p, -t or -G: their samples on these CPUs.
    #[arg(short = 'C', long = "cpu", value_name = "CPULIST")]
    pub cpus: Option<String>,
    /// Sample user mode only.
    #[arg(long, conflicts_with = "kernel")]
    pub user: bool,
    /// Sample kernel mode only.
    #[arg(long)]
    pub kernel: bool,
    /// Profile these processes (comma-separated pids).
    #[arg(
        short,
        long,
        value_delimiter = ',',
        value_name = "PID[,PID..]",
        conflicts_with_all = ["tid", "cgroup", "command", "all_cpus"]
    )]
    pub pid: Vec<u32>,
    /// Profile the whole system (with a command: for as long as it runs).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// Whole CPUs: sample their idle tasks too, as perf does (the default, except in
    /// continuous mode: --interval or --export).
    #[arg(long, overrides_with = "no_idle")]
    pub idle: bool,
    /// Whole CPUs: do not sample their idle tasks (the default in continuous mode, as fleet
    /// agents do: an idle CPU then runs no eBPF program at all).
    #[arg(long = "no-idle", overrides_with = "idle")]
    pub no_idle: bool,
    /// Stop after this many seconds (default: until the command or targets exit, or Ctrl-C).
    #[arg(short, long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Write the profile to FILE (default `profile.pb.gz`, or `profile.svg`.. with --format;
    /// the previous one kept as `profile.pb.gz.old`): pprof, or by extension `.svg` (flame graph), `.folded`/`.txt`
    /// (folded stacks), `.json` (speedscope). `-` is standard output (the table then goes to
    /// stderr). With --interval: an existing directory (optional with --export: the
    /// intervals then go to the stores only).
    #[arg(short, long, value_name = "FILE|DIR")]
    pub output: Option<PathBuf>,
    /// The output's format, whatever its name.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Continuous mode: one profile per interval, written into the -o directory and/or
    /// sent to the --export stores (one of them is required).
    #[arg(long, value_name = "SECS", requires = "destination")]
    pub interval: Option<f64>,
    /// Rows of the printed table: function, module, pid, tid, comm, cpu, cgroup, event,
    /// or label:KEY (the value of a label the sampled code set).
    #[arg(long, default_value = "function", value_name = "ROWS")]
    pub by: By,
    /// Order of the printed table: self, total or name.
    #[arg(long, value_enum, default_value = "self")]
    pub sort: Sort,
    /// Rows in the printed table.
    #[arg(long, default_value_t = 25, value_name = "N")]
    pub limit: usize,
    /// With a counter group: a column of A/B per row (e.g. `instructions/cycles`, or
    /// `page-faults/cpu-clock` for faults per sample). Repeatable.
    #[arg(long, value_name = "A/B")]
    pub ratio: Vec<String>,
    /// Ring buffer size in pages (a power of two; perf's -m). Default: a quarter of a second of
    /// samples at the asked rate, 1 to 8 MiB (4 MiB for processes and commands).
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<u32>,
    /// Count samples per (process, stack) in a kernel map instead of sending each sample
    /// to user space: for long, low-rate production runs. No per-thread or per-CPU labels.
    #[arg(long)]
    pub aggregate: bool,
    /// Also record where the targets' threads wait: the time each spends off the CPU, under
    /// its stack when it left (event `off-cpu`, in nanoseconds; stacks end in `[off-cpu]`,
    /// or `[off-cpu:runnable]` for time preempted).
    #[arg(long = "off-cpu", conflicts_with = "aggregate")]
    pub off_cpu: bool,
    /// One wall-clock view (implies --off-cpu): on-CPU samples converted to nanoseconds
    /// (the period of cpu-clock) beside the off-CPU time, so each thread's stacks add up to
    /// its wall time.
    #[arg(long, conflicts_with = "aggregate")]
    pub wall: bool,
    /// With --off-cpu or --wall: drop waits shorter than USECS microseconds (they are
    /// counted and reported).
    #[arg(long = "min-block", value_name = "USECS")]
    pub min_block: Option<u64>,
    /// --no-python, --no-js, --no-java, --no-runtime NAME.
    #[command(flatten)]
    pub runtimes: super::runtime_flags::RuntimeFlags,
    /// Walk no stacks in the kernel (benchmarks: the eBPF program's cost without them).
    #[arg(long, hide = true)]
    pub no_stacks: bool,
    /// Record call stacks: accepted for perf's habit; stacks are always recorded (see
    /// --call-graph for how user stacks are walked).
    #[arg(short = 'g')]
    pub call_stacks: bool,
    /// How user stacks are walked: `dwarf` (unwind tables from .eh_frame where a module
    /// has them, frame pointers elsewhere) or `fp` (frame pointers only).
    #[arg(
        long = "call-graph",
        value_enum,
        default_value = "dwarf",
        value_name = "MODE"
    )]
    pub call_graph: CallGraphArg,
    /// When user frames are named: `now`, or `none` (pprof output keeps addresses and build
    /// ids; name them later with `profiler symbolize`).
    #[arg(long, value_enum, default_value = "now", value_name = "WHEN")]
    pub symbolize: SymbolizeArg,
    /// Also look for separate debug information under DIR (its `.build-id/` tree and
    /// `.gnu_debuglink` names), before /usr/lib/debug. Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dir: Vec<std::path::PathBuf>,
    /// Kernel memory for unwind tables: MiB, or a size with a K, M or G suffix, from 64K to
    /// 4G (8-byte rows; when it is full, the rows of modules no live process maps are
    /// evicted). Default 32M.
    #[arg(long = "unwind-memory", value_name = "SIZE", value_parser = unwind_rows)]
    pub unwind_memory: Option<u32>,
    /// Print the unwinder's and the ring's totals on stderr at the end (benchmarks).
    #[arg(long, hide = true)]
    pub unwind_stats: bool,
    /// Print no report (the output file is still written).
    #[arg(short, long)]
    pub quiet: bool,
    /// Send each interval (or, without --interval, the profile at the end) to a profile
    /// store: `otlp+grpc://HOST:4317`, `otlp+http://HOST:4318` (protobuf, gzip),
    /// `pyroscope+http://HOST:4040` (pprof to /ingest), `pyroscope+connect://HOST:4040`
    /// (Pyroscope's Push API); `otlp+grpcs`, `otlp+https`, `pyroscope+https`,
    /// `pyroscope+connects` for TLS. Repeatable.
    #[arg(long = "export", value_name = "URL")]
    pub export: Vec<String>,
    /// A header sent with every export request (`Authorization=Bearer ...`,
    /// `X-Scope-OrgID=tenant`). Repeatable.
    #[arg(long = "export-header", value_name = "K=V", requires = "export")]
    pub export_header: Vec<String>,
    /// Headers from a file, one `K=V` a line (keeps secrets off the command line).
    #[arg(long = "export-header-file", value_name = "FILE", requires = "export")]
    pub export_header_file: Option<PathBuf>,
    /// Trust the CA certificates of this PEM file instead of the system's (TLS exports).
    #[arg(long = "export-ca", value_name = "FILE", requires = "export")]
    pub export_ca: Option<PathBuf>,
    /// One `service.name` (OTLP) and application name (Pyroscope) for every process.
    /// Without it each process has its own: OTEL_SERVICE_NAME, or `service.name` in
    /// OTEL_RESOURCE_ATTRIBUTES, from its environment; else `unknown_service:EXE` (OTLP)
    /// or EXE (Pyroscope), EXE its executable's name.
    #[arg(long = "service-name", value_name = "NAME", requires = "export")]
    pub service_name: Option<String>,
    /// Keep intervals the store cannot take in DIR (sent in order when it is back, or by the
    /// next run); without it they wait in memory (8 intervals per store at most).
    #[arg(long = "spool", value_name = "DIR", requires = "export")]
    pub spool: Option<PathBuf>,
    /// The spool's bound per store (K, M or G suffix; default 256M): past it the oldest
    /// intervals are dropped, and counted.
    #[arg(long = "spool-max", value_name = "SIZE", value_parser = byte_size, requires = "spool")]
    pub spool_max: Option<u64>,
    /// At the end, how long to wait for pending intervals to be sent (the rest stays
    /// spooled).
    #[arg(
        long = "export-flush",
        value_name = "SECS",
        default_value_t = 5.0,
        requires = "export"
    )]
    pub export_flush: f64,
    /// The command to start and profile until it exits (options end at its name; `--`
    /// also ends them).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl RecordArgs {
    /// The exporter's options, when there is an --export.
    fn export_options(&self) -> Result<Option<ExportOptions>, RecordArgError> {
        if self.export.is_empty() {
            return Ok(None);
        }
        let endpoints = self
            .export
            .iter()
            .map(|u| Endpoint::parse(u))
            .collect::<Result<Vec<_>, _>>()?;
        let mut headers = self
            .export_header
            .iter()
            .map(|h| parse_header(h))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(f) = &self.export_header_file {
            headers.extend(read_header_file(f)?);
        }
        Ok(Some(ExportOptions {
            endpoints,
            headers,
            service_name: self.service_name.clone(),
            ca_file: self.export_ca.clone(),
            spool: self.spool.clone(),
            spool_max_bytes: self.spool_max.unwrap_or(DEFAULT_SPOOL_MAX),
            flush_timeout: seconds("export-flush", self.export_flush)?,
            notify: crate::export::Notify::new(|n| eprintln!("profiler: {n}")),
        }))
    }

    fn options(&self) -> Result<RecordOptions, RecordArgError> {
        // -a, or -C without a task target: whole CPUs (bounded by a command if one is given).
        let whole_cpus = self.all_cpus
            || (self.cpus.is_some()
                && self.pid.is_empty()
                && self.tid.is_empty()
                && self.cgroup.is_none());
        let target = if !self.command.is_empty() {
            Target::Command(self.command.clone())
        } else if whole_cpus {
            Target::SystemWide
        } else if !self.pid.is_empty() {
            Target::Pids(self.pid.clone())
        } else if !self.tid.is_empty() {
            Target::Tids(self.tid.clone())
        } else if let Some(cg) = &self.cgroup {
            Target::Cgroup(cg.clone())
        } else {
            return Err(RecordArgError::NoTarget);
        };
        let mut opts = RecordOptions::new(target);
        opts.whole_system = whole_cpus;
        let continuous = self.interval.is_some() || !self.export.is_empty();
        opts.idle = self.idle || (!self.no_idle && !continuous);
        opts.frequency_hz = self.freq;
        opts.period = self.count;
        opts.cpus = self
            .cpus
            .as_deref()
            .map(super::counters::cpu_list)
            .transpose()?;
        (opts.events, opts.read) =
            crate::record::split_group(&self.event, &self.read).map_err(RecordArgError::Group)?;
        opts.mode = match (self.user, self.kernel) {
            (true, _) => Mode::User,
            (_, true) => Mode::Kernel,
            _ => Mode::Both,
        };
        if let Some(secs) = self.duration {
            opts.duration = Some(seconds("duration", secs)?);
        }
        if let Some(secs) = self.interval {
            opts.interval = Some(seconds("interval", secs)?);
        }
        opts.status_line = std::io::stderr().is_terminal();
        opts.aggregate = self.aggregate;
        opts.runtimes_off = self.runtimes.off.clone();
        opts.stacks = !self.no_stacks;
        opts.unwind_stats = self.unwind_stats;
        if let Some(rows) = self.unwind_memory {
            opts.unwind_rows = rows;
        }
        opts.wall = self.wall;
        opts.off_cpu = self.off_cpu || self.wall;
        if let Some(us) = self.min_block {
            if !opts.off_cpu {
                return Err(RecordArgError::MinBlockWithoutOffCpu);
            }
            opts.min_block = Duration::from_micros(us);
        }
        opts.debug_dirs = self.debug_dir.clone();
        opts.symbolize_user = self.symbolize == SymbolizeArg::Now;
        opts.call_graph = match self.call_graph {
            CallGraphArg::Fp => CallGraph::FramePointer,
            CallGraphArg::Dwarf => CallGraph::Dwarf,
        };
        if let Some(pages) = self.mmap_pages {
            let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
                .ok()
                .flatten()
                .unwrap_or(4096) as u64;
            let bytes = u64::from(pages) * page;
            if !pages.is_power_of_two() || bytes > 1 << 30 {
                return Err(RecordArgError::MmapPages(pages));
            }
            opts.ring_bytes = Some(bytes as u32);
        }
        Ok(opts)
    }
}

fn seconds(what: &'static str, secs: f64) -> Result<Duration, RecordArgError> {
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(RecordArgError::Seconds { what, secs })
    }
}

/// What `record` writes when no `-o` is given, and what `report` and `flamegraph` read.
pub const DEFAULT_OUTPUT: &str = "profile.pb.gz";

pub fn run(args: RecordArgs) -> ExitCode {
    let mut opts = match args.options() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("profiler: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let names: Vec<String> = opts.events.iter().chain(&opts.read).cloned().collect();
    let ratios = match args
        .ratio
        .iter()
        .map(|r| Ratio::parse(r, &names))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(r) if !r.is_empty() && opts.read.is_empty() => {
            eprintln!("profiler: --ratio needs a counter group (-e '{{A,B}}:S' or --read)");
            return ExitCode::from(EXIT_USAGE);
        }
        Ok(r) => r,
        Err(msg) => {
            eprintln!("profiler: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let export = match args.export_options() {
        Ok(e) => e,
        Err(msg) => {
            eprintln!("profiler: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let report = ReportOptions {
        by: args.by,
        sort: args.sort,
        limit: args.limit,
        ratios,
    };
    let mut sinks = match sinks(&args, &mut opts, report, export.as_ref()) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            sinks.abandon();
            return fail(format!("starting the async runtime: {e}"));
        }
    };
    // What the run has to say is printed as it happens (the error, if any, comes after).
    let recorded = runtime.block_on(record_with(
        &opts,
        &mut |interval| sinks.interval(&interval),
        &mut Stderr { quiet: args.quiet },
    ));
    let outcome = match recorded {
        Ok(o) => o,
        Err(e) => {
            // The stores still flush the intervals they hold; no file is left half-made.
            sinks.abandon();
            if let RecordError::Usage(_) = e {
                eprintln!("profiler: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
            return fail(e);
        }
    };
    // The last (or, without --interval, the only) profile goes to every sink; a sink that
    // failed (now or at an interval) fails the run once the others are done.
    if let Err(e) = sinks.finish(&outcome.profile) {
        return fail(e);
    }
    let command = outcome.command_status.and_then(Ended::from_wait);
    match command {
        Some(Ended::Exited(0)) | None => {}
        Some(Ended::Exited(code)) => eprintln!("profiler: command exited with status {code}"),
        Some(Ended::Killed(sig)) => {
            let name = nix::sys::signal::Signal::try_from(sig).map_or("a signal", |s| s.as_str());
            eprintln!("profiler: command killed by {name}");
        }
    }
    // After the report and the output: 128 + signal when one ended the run, else the
    // command's own status (see `exit`).
    let interrupted = match outcome.stop {
        Stop::Signal(sig) => Some(sig),
        _ => None,
    };
    super::exit::status(interrupted, command)
}

/// Where the run's profiles go, in the order they finish: the stores first (their flush is
/// bounded by --export-flush), then the table, the file, the series' last interval. A new
/// output or store is one more `push`.
fn sinks(
    args: &RecordArgs,
    opts: &mut RecordOptions,
    report: ReportOptions,
    export: Option<&ExportOptions>,
) -> Result<Sinks, ExitCode> {
    // Without -o: profile.pb.gz, or profile.<ext> of the --format asked for.
    let default = match args.format {
        None | Some(Format::Pprof) => PathBuf::from(DEFAULT_OUTPUT),
        Some(f) => PathBuf::from(format!("profile.{}", f.extension())),
    };
    let path = args.output.as_deref().unwrap_or(&default);
    let to_stdout = args.interval.is_none() && is_stdout(path);
    // Our stdout carries the profile: the command's goes to stderr, as the table does.
    opts.command_stdout_to_stderr = to_stdout;
    let format = args.format.unwrap_or_else(|| match args.interval {
        None => Format::for_path(path),
        Some(_) => Format::Pprof,
    });
    // The outputs are checked before anything is attached: a file is created as a hidden
    // temp file now, a series' directory proved writable, the spools opened.
    let mut file = None;
    let mut series = None;
    match args.interval {
        // Only to the stores (clap let --interval through without -o because of --export).
        Some(_) if args.output.is_none() => {}
        Some(_) if Series::looks_like_a_file(path) => {
            eprintln!(
                "profiler: --interval writes one file per interval into a directory, and -o {} \
                 names a file: give -o a directory",
                path.display()
            );
            return Err(ExitCode::from(EXIT_USAGE));
        }
        Some(_) => match Series::open(path, format) {
            Ok(s) => series = Some(s),
            Err(e) => return Err(fail(e)),
        },
        None => match FileSink::create(path, format, &title(opts)) {
            Ok(f) => {
                let mut f = f.describing();
                if args.output.is_none() {
                    let mut old = default.clone().into_os_string();
                    old.push(".old");
                    f.keep_previous_as(PathBuf::from(old));
                }
                file = Some(f);
            }
            Err(e) => return Err(fail(e)),
        },
    }
    let exporter = match export.map(Exporter::start).transpose() {
        Ok(e) => e,
        Err(e) => return Err(fail(e)),
    };
    opts.status_extra = exporter.as_ref().map(Exporter::status);
    let mut sinks = Sinks::new(|n| eprintln!("profiler: {n}"));
    if let Some(x) = exporter {
        sinks.push(x);
    }
    if !args.quiet {
        // Our stdout carries the profile with `-o -`: the table goes to stderr then.
        let stream: Box<dyn std::io::Write> = match to_stdout {
            true => Box::new(std::io::stderr()),
            false => Box::new(std::io::stdout()),
        };
        sinks.push(TableSink::new(report, stream));
    }
    if let Some(f) = file {
        sinks.push(f);
    }
    if let Some(s) = series {
        sinks.push(s);
    }
    Ok(sinks)
}

fn title(opts: &RecordOptions) -> String {
    let what = match &opts.target {
        Target::Command(argv) => {
            let cmd = argv
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            match opts.whole_system {
                true => format!("all CPUs while {cmd} ran"),
                false => cmd,
            }
        }
        Target::Pids(p) => format!("pid {p:?}"),
        Target::Tids(t) => format!("tid {t:?}"),
        Target::SystemWide => "all CPUs".into(),
        Target::Cgroup(c) => format!("cgroup {}", c.display()),
    };
    format!("{} of {what}", opts.events.join(", "))
}

/// Prints a recording's warnings on stderr as they happen.
/// Prints each warning as it comes; `-q` silences the start line.
struct Stderr {
    quiet: bool,
}

impl crate::record::Warn for Stderr {
    fn warn(&mut self, warning: crate::record::Warning) {
        if !(self.quiet && warning.is_start()) {
            eprintln!("{warning}");
        }
    }
}
