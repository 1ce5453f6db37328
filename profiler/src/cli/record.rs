//! `profiler record`.

use std::{ffi::OsString, io::Write as _, path::PathBuf, process::ExitCode, time::Duration};

use clap::Args;

use super::{EXIT_USAGE, fail};
use crate::{
    output::AtomicFile,
    profile::{Profile, TopTable, write_folded},
    record::{Mode, RecordError, RecordOptions, Stop, Target, record},
};

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "tid", "all_cpus", "cgroup", "command"])))]
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
    /// Profile these threads only (comma-separated tids).
    #[arg(
        short = 't',
        long = "tid",
        value_delimiter = ',',
        value_name = "TID[,TID..]"
    )]
    pub tid: Vec<u32>,
    /// Profile the tasks of this cgroup v2 directory.
    #[arg(short = 'G', long = "cgroup", value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Only on these CPUs (e.g. `0-3,6`); with any target.
    #[arg(short = 'C', long = "cpu", value_name = "CPULIST")]
    pub cpus: Option<String>,
    /// Sample user mode only.
    #[arg(long, conflicts_with = "kernel")]
    pub user: bool,
    /// Sample kernel mode only.
    #[arg(long)]
    pub kernel: bool,
    /// Profile these processes (comma-separated pids).
    #[arg(short, long, value_delimiter = ',', value_name = "PID[,PID..]")]
    pub pid: Vec<u32>,
    /// Profile the whole system.
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// Stop after this many seconds (default: until the command or targets exit, or Ctrl-C).
    #[arg(short, long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Write folded stacks (`comm;outer;..;leaf COUNT`) to FILE, for flame graphs.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Rows in the top-functions table.
    #[arg(long, default_value_t = 25, value_name = "N")]
    pub limit: usize,
    /// The command to start and profile until it exits (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl RecordArgs {
    fn options(&self) -> Result<RecordOptions, String> {
        let target = if self.all_cpus {
            Target::SystemWide
        } else if !self.pid.is_empty() {
            Target::Pids(self.pid.clone())
        } else if !self.tid.is_empty() {
            Target::Tids(self.tid.clone())
        } else if let Some(cg) = &self.cgroup {
            Target::Cgroup(cg.clone())
        } else {
            Target::Command(self.command.clone())
        };
        let mut opts = RecordOptions::new(target);
        opts.frequency_hz = self.freq;
        opts.period = self.count;
        opts.cpus = self
            .cpus
            .as_deref()
            .map(super::counters::cpu_list)
            .transpose()?;
        opts.events = self.event.clone();
        opts.mode = match (self.user, self.kernel) {
            (true, _) => Mode::User,
            (_, true) => Mode::Kernel,
            _ => Mode::Both,
        };
        if let Some(secs) = self.duration {
            if !(secs.is_finite() && secs > 0.0) {
                return Err(format!(
                    "invalid duration {secs}: must be a positive number of seconds"
                ));
            }
            opts.duration = Some(Duration::from_secs_f64(secs));
        }
        Ok(opts)
    }
}

pub fn run(args: RecordArgs) -> ExitCode {
    let opts = match args.options() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("profiler: {msg}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // The output file is created (as a hidden temp file) before anything is attached.
    let mut output = match args.output.as_deref().map(AtomicFile::create).transpose() {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(format!("starting the async runtime: {e}")),
    };
    let outcome = match runtime.block_on(record(&opts)) {
        Ok(o) => o,
        Err(e @ RecordError::Usage(_)) => {
            eprintln!("profiler: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) => return fail(e),
    };
    let profile = &outcome.profile;
    print_report(profile, args.limit);
    if let Some(mut out) = output.take() {
        let path = out.path().display().to_string();
        let written = write_folded(profile, &mut out).map_err(|e| e.to_string());
        match written.and_then(|()| out.commit().map_err(|e| e.to_string())) {
            Ok(()) => eprintln!("profiler: folded stacks written to {path}"),
            Err(e) => return fail(format!("writing {path}: {e}")),
        }
    }
    if let Some(status) = outcome.command_status {
        use nix::sys::wait::WaitStatus;
        match status {
            WaitStatus::Exited(_, 0) => {}
            WaitStatus::Exited(_, code) => eprintln!("profiler: command exited with status {code}"),
            WaitStatus::Signaled(_, sig, _) => eprintln!("profiler: command killed by {sig}"),
            _ => {}
        }
    }
    match outcome.stop {
        // 128 + signal, as shells report it, after the report has been written.
        Stop::Signal(sig) => ExitCode::from(128 + sig as u8),
        _ => ExitCode::SUCCESS,
    }
}

fn print_report(profile: &Profile, limit: usize) {
    let info = &profile.info;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{} samples of {} {} in {:.2} s; lost {}; filtered in kernel {}{}",
        info.samples,
        info.event,
        match info.period {
            Some(n) => format!("every {n} events"),
            None => format!("at {} Hz", info.frequency_hz),
        },
        info.duration_ms as f64 / 1000.0,
        info.lost,
        info.filtered,
        if info.stack_errors > 0 {
            format!("; stack walk errors {}", info.stack_errors)
        } else {
            String::new()
        },
    );
    if info.samples == 0 {
        let _ = writeln!(
            out,
            "no samples: the target used no CPU while it was profiled"
        );
        return;
    }
    let events = profile.events();
    for event in &events {
        if events.len() > 1 {
            let _ = writeln!(out, "== {event} ==");
        }
        let _ = write!(
            out,
            "{}",
            TopTable::build(&profile.for_event(event)).render(limit)
        );
    }
    if let Some(hot) = profile.hottest() {
        let chain: Vec<&str> = hot.frames.iter().map(|f| f.function.as_ref()).collect();
        let _ = writeln!(
            out,
            "hottest stack ({:.1}%, {}): {}",
            100.0 * hot.count as f64 / profile.total().max(1) as f64,
            hot.comm,
            chain.join(" > ")
        );
    }
}
