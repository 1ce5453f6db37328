//! What `profiler track`/`stat` and the `cputrack`/`cpustat` personas share once their
//! command lines are read: opening libcpc, parsing `-c` sets, validating values, opening
//! `-o`, running, and turning every failure into one line and cputrack's exit status
//! (2 for usage, 1 for library or process errors).

use std::{
    ffi::OsString,
    io::{LineWriter, Write},
    path::Path,
    process::ExitCode,
};

pub use super::usage::{count, cpu_list, pid, seconds, stat_operands};
use super::{
    EXIT_FAILURE, EXIT_USAGE,
    exit::{self, Ended},
};
use crate::{
    cpc::{Cpc, CpcError},
    tools::{
        self,
        cgstat::{CgroupStatError, CgroupStatOptions, cgroup_stat},
        spec::{self, SetSpec, SpecContext},
        stat::{StatOptions, stat},
        track::{Target, TrackOptions, track},
    },
};

/// Who is speaking ("cputrack", or "profiler") and whether `-D` asked for function names.
#[derive(Clone, Copy, Debug)]
pub struct Voice {
    pub name: &'static str,
    pub debug: bool,
}

impl Voice {
    /// A usage error: one line, exit status 2.
    pub fn usage(&self, msg: impl std::fmt::Display) -> ExitCode {
        eprintln!("{}: {msg}", self.name);
        ExitCode::from(EXIT_USAGE)
    }

    /// A runtime error: one line, exit status 1.
    pub fn fail(&self, msg: impl std::fmt::Display) -> ExitCode {
        eprintln!("{}: {msg}", self.name);
        ExitCode::from(EXIT_FAILURE)
    }

    /// An error of a libcpc-side function, named with `-D` as cputrack does.
    fn with_func(&self, func: &str, msg: impl std::fmt::Display) -> String {
        if self.debug {
            format!("{func}: {msg}")
        } else {
            msg.to_string()
        }
    }

    pub fn cpc(&self, e: &CpcError) -> String {
        self.with_func(e.func, &e.message)
    }
}

/// Prints usage and capabilities; a closed stdout (`| head`) is not an error.
pub fn print_help(usage: &str, cpc: &Cpc) {
    let _ = write!(
        std::io::stdout().lock(),
        "{usage}\n{}",
        crate::tools::caps::capabilities(cpc)
    );
}

/// `cpc_open`, or the line cputrack prints when it fails (exit status 1).
/// Opens the handle for `profiler <subcommand>`; with `-h` prints the subcommand's usage and
/// the host's capabilities instead and ends the run (exit 0), as cputrack -h does.
pub fn open_or_help(voice: Voice, help: bool, subcommand: &str) -> Result<Cpc, ExitCode> {
    let cpc = open(voice)?;
    if help {
        use clap::CommandFactory;
        let mut cli = super::Cli::command();
        cli.build(); // names the subcommand "profiler <name>" in its usage line
        // The examples end the text, after the capabilities.
        let (usage, examples) = cli
            .find_subcommand_mut(subcommand)
            .map(|c| {
                let examples = c.get_after_help().map(|e| e.to_string());
                let mut c = c.clone().after_help(None::<&str>);
                (c.render_help().to_string(), examples)
            })
            .unwrap_or_default();
        print_help(&usage, &cpc);
        if let Some(examples) = examples {
            let _ = writeln!(std::io::stdout().lock(), "\n{examples}");
        }
        return Err(ExitCode::SUCCESS);
    }
    Ok(cpc)
}

pub fn open(voice: Voice) -> Result<Cpc, ExitCode> {
    tools::open_cpc().map_err(|e| {
        voice.fail(format!(
            "cannot access performance counter library - {}",
            voice.cpc(&e)
        ))
    })
}

/// Every `-c` argument as a set; the first bad one is a usage error.
pub fn sets(voice: Voice, cpc: &Cpc, specs: &[String]) -> Result<Vec<SetSpec>, ExitCode> {
    if specs.is_empty() {
        return Err(voice.usage("no event specification: give at least one -c"));
    }
    let ctx = SpecContext::for_cpc(cpc);
    specs
        .iter()
        .map(|s| spec::parse(s, &ctx).map_err(|e| voice.usage(voice.with_func(e.func(), e))))
        .collect()
}

/// `profiler track`'s set when no `-c` is given, perf stat's default events: hardware ones
/// where the host has a cpu PMU, software ones otherwise; user and system mode (`sys`), as
/// perf stat counts them.
pub fn default_set(cpc: &Cpc) -> &'static str {
    match cpc.catalog().cpu_pmu_name() {
        Some(_) => "cycles,instructions,branches,branch-misses,sys",
        None => "task-clock,context-switches,cpu-migrations,page-faults,sys",
    }
}

/// `-o file` (line-buffered, as cputrack sets it), or stdout (line-buffered already) for no
/// `-o` or `-o -`.
pub fn output(voice: Voice, path: Option<&Path>) -> Result<Box<dyn Write>, ExitCode> {
    match path {
        None => Ok(Box::new(std::io::stdout())),
        Some(p) if crate::output::is_stdout(p) => Ok(Box::new(std::io::stdout())),
        Some(p) => crate::output::create_streaming(p)
            .map(|f| Box::new(LineWriter::new(f)) as Box<dyn Write>)
            .map_err(|e| voice.fail(format!("cannot open '{}' for writing: {e}", p.display()))),
    }
}

/// cputrack's command line once read.
#[derive(Debug)]
pub struct TrackRequest {
    pub specs: Vec<String>,
    pub opts: TrackOptions,
    pub command: Vec<OsString>,
    pub pid: Option<i32>,
    pub output: Option<std::path::PathBuf>,
}

/// Validates and runs cputrack.
pub fn run_track(voice: Voice, cpc: &Cpc, mut req: TrackRequest) -> ExitCode {
    req.opts.sets = match sets(voice, cpc, &req.specs) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let target = match (req.pid, req.command.is_empty()) {
        (Some(_), false) => return voice.usage("give -p or a command, not both"),
        (None, true) => return voice.usage("no command to start and no -p pid"),
        (Some(pid), true) => Target::Pid(pid),
        (None, false) => Target::Command(req.command),
    };
    let out = match output(voice, req.output.as_deref()) {
        Ok(o) => o,
        Err(code) => return code,
    };
    match track(cpc, &req.opts, &target, out, Box::new(std::io::stderr())) {
        Ok(outcome) if outcome.errors => ExitCode::from(EXIT_FAILURE),
        Ok(outcome) => {
            use crate::tools::track::ptrace::Report;
            let command = match outcome.command_end {
                Some(Report::Exited { code, .. }) => Some(Ended::Exited(code)),
                Some(Report::Killed { signal, .. }) => Some(Ended::Killed(signal)),
                _ => None,
            };
            exit::status(outcome.interrupted.map(|s| s as i32), command)
        }
        Err(tools::track::TrackError::Bind(e)) => voice.fail(voice.cpc(&e)),
        Err(e) => voice.fail(e),
    }
}

/// cpustat's command line once read.
#[derive(Debug)]
pub struct StatRequest {
    pub specs: Vec<String>,
    pub opts: StatOptions,
}

/// Validates and runs cpustat.
pub fn run_stat(voice: Voice, cpc: &Cpc, mut req: StatRequest) -> ExitCode {
    req.opts.sets = match sets(voice, cpc, &req.specs) {
        Ok(s) => s,
        Err(code) => return code,
    };
    match stat(
        cpc,
        &req.opts,
        Box::new(std::io::stdout()),
        Box::new(std::io::stderr()),
    ) {
        Ok(outcome) if outcome.errors => ExitCode::from(EXIT_FAILURE),
        Ok(outcome) => exit::status(outcome.interrupted.map(|s| s as i32), None),
        // The reader went away (`| head`): a normal end.
        Err(tools::stat::StatError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(tools::stat::StatError::Cpc(e)) => voice.fail(voice.cpc(&e)),
        Err(e) => voice.fail(e),
    }
}

/// Per-cgroup counting (`stat --for-each-cgroup`, `track -G`): one set, rows to `output`
/// (stdout when `None`).
pub fn run_cgroup_stat(
    voice: Voice,
    cpc: &Cpc,
    specs: &[String],
    opts: CgroupStatOptions,
    output_path: Option<&Path>,
) -> ExitCode {
    let set = match sets(voice, cpc, specs) {
        Ok(mut s) => s.remove(0),
        Err(code) => return code,
    };
    let out = match output(voice, output_path) {
        Ok(o) => o,
        Err(code) => return code,
    };
    match cgroup_stat(cpc, &set, &opts, out, Box::new(std::io::stderr())) {
        Ok(interrupted) => exit::status(interrupted.map(|s| s as i32), None),
        Err(CgroupStatError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(CgroupStatError::Cpc(e)) => voice.fail(voice.cpc(&e)),
        Err(e) => voice.fail(e),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{super::usage::UsageError, *};

    #[test]
    fn values() {
        assert_eq!(seconds("x", "0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("x", "0"), Ok(Duration::ZERO));
        assert!(seconds("x", "-1").is_err());
        assert!(seconds("x", "nan").is_err());
        assert!(seconds("x", "1s").is_err());
        assert_eq!(count("x", "3"), Ok(3));
        assert!(count("x", "-3").is_err());
        assert_eq!(pid("42"), Ok(42));
        assert!(pid("0").is_err());
        assert_eq!(cpu_list("0-2,1,5"), Ok(vec![0, 1, 2, 5]));
        assert!(cpu_list("2-1").is_err());
        assert!(cpu_list("a").is_err());
        assert!(cpu_list("").is_err());
    }

    #[test]
    fn cpustat_operands() {
        let s = |v: &[&str]| stat_operands(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&[]), Ok((Duration::from_secs(5), None)));
        assert_eq!(s(&["0.5", "4"]), Ok((Duration::from_millis(500), Some(4))));
        assert_eq!(s(&["0"]), Err(UsageError::ZeroInterval));
        assert_eq!(s(&["1", "0"]), Err(UsageError::ZeroCount));
        assert_eq!(
            s(&["1", "2", "3"]).unwrap_err().to_string(),
            "too many operands: 1 2 3"
        );
        assert_eq!(
            s(&["x"]).unwrap_err().to_string(),
            "invalid interval \"x\": expected seconds (>= 0)"
        );
    }
}
