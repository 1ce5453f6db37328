//! Command-line interface: parsing and validation, one module per subcommand.

mod counters;
pub mod docs;
mod examples;
mod exit;
mod getopt;
mod list;
mod persona;
mod record;
mod record_error;
mod report;
mod runtime_flags;
mod size;
mod stat;
mod symbolize;
mod track;
mod usage;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// An eBPF-assisted CPU profiler with the libcpc counting model.
#[derive(Debug, Parser)]
#[command(name = "profiler", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sample stacks on any event; print the hottest functions, write pprof, SVG, folded.
    #[command(after_help = examples::RECORD)]
    Record(Box<record::RecordArgs>),
    /// Print the top table of a recorded profile (pprof or folded).
    #[command(after_help = examples::REPORT)]
    Report(report::ReportArgs),
    /// Render a recorded profile as a flame graph SVG (or folded stacks, or a diff).
    #[command(after_help = examples::FLAMEGRAPH)]
    Flamegraph(report::FlamegraphArgs),
    /// Count events per thread of a command or process (Solaris cputrack).
    #[command(after_help = examples::TRACK)]
    Track(track::TrackArgs),
    /// Count events per CPU, system-wide (Solaris cpustat).
    #[command(after_help = examples::STAT)]
    Stat(stat::StatArgs),
    /// List the counter interface and the events this host can count.
    #[command(after_help = examples::LIST)]
    List(list::ListArgs),
    /// Name the frames of a profile recorded with `record --symbolize none`.
    #[command(after_help = examples::SYMBOLIZE)]
    Symbolize(symbolize::SymbolizeArgs),
}

/// Exit status for usage errors (bad flags, bad values), as getopt tools use.
pub const EXIT_USAGE: u8 = 2;
/// Exit status for runtime errors.
pub const EXIT_FAILURE: u8 = 1;

/// Parses `args`; usage errors become one line on stderr and exit status 2.
pub fn parse<I, T>(args: I) -> Result<Cli, ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args).map_err(|e| {
        use clap::error::ErrorKind;
        match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = e.print();
                if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(EXIT_USAGE)
                } else {
                    ExitCode::SUCCESS
                }
            }
            _ => {
                eprintln!("profiler: {} (see 'profiler --help')", one_line(&e));
                ExitCode::from(EXIT_USAGE)
            }
        }
    })
}

/// clap's message without its usage block and tips: the first line, minus the "error: " tag,
/// with the indented lines clap lists under it (the missing arguments: `... not provided:
/// --output <FILE|DIR>`), plus clap's suggestion for a misspelt subcommand, flag or value
/// ("did you mean ..?").
fn one_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let text = e.render().to_string();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("invalid arguments");
    let mut line = first
        .strip_prefix("error: ")
        .unwrap_or(first)
        .trim()
        .to_string();
    let listed: Vec<&str> = lines
        .take_while(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty())
        .map(str::trim)
        .collect();
    if !listed.is_empty() {
        line = format!("{} {}", line, listed.join(", "));
    }
    let suggested = [
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .find_map(|kind| match e.get(kind)? {
        ContextValue::String(s) => Some(vec![s.clone()]),
        ContextValue::Strings(v) if !v.is_empty() => Some(v.clone()),
        _ => None,
    });
    if let Some(names) = suggested {
        let names: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
        line += &format!("; did you mean {}?", names.join(" or "));
    }
    line
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Record(args) => record::run(*args),
        Command::Report(args) => report::run_report(args),
        Command::Flamegraph(args) => report::run_flamegraph(args),
        Command::Track(args) => track::run(args),
        Command::Stat(args) => stat::run(args),
        Command::List(args) => list::run(args),
        Command::Symbolize(args) => symbolize::run(args),
    }
}

/// Runs the `cputrack` or `cpustat` persona when argv\[0\] names one (a link to this
/// binary); `None` otherwise.
pub fn run_persona(args: &[std::ffi::OsString]) -> Option<ExitCode> {
    let who = persona::persona(args.first()?)?;
    Some(persona::run(who, args))
}

/// Runs `profiler __docs SHARE` (the man pages and completions `cargo xtask install`
/// writes); `None` for any other command line. Outside clap, so that neither the pages nor
/// the completions it writes offer it.
pub fn run_docs(args: &[std::ffi::OsString]) -> Option<ExitCode> {
    if args.get(1)? != "__docs" {
        return None;
    }
    Some(match &args[2..] {
        [share] => docs::run(std::path::Path::new(share)),
        _ => {
            eprintln!("profiler: usage: profiler __docs SHARE_DIR");
            ExitCode::from(EXIT_USAGE)
        }
    })
}

/// Prints a runtime error as one line and returns exit status 1.
pub(crate) fn fail(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("profiler: error: {err}");
    ExitCode::from(EXIT_FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(args: &[&str]) -> Cli {
        Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn unknown_flag_is_one_line() {
        let e = Cli::try_parse_from(["profiler", "record", "--bogus", "-a"]).unwrap_err();
        let line = one_line(&e);
        assert_eq!(line, "unexpected argument '--bogus' found");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn record_targets_are_exclusive_and_required() {
        for bad in [
            &["profiler", "record"][..],
            &["profiler", "record", "-a", "-p", "1"],
            &["profiler", "record", "-p", "1", "--", "true"],
            &["profiler", "record", "-p", "x"],
            &["profiler", "record", "-a", "-F", "0x"],
        ] {
            assert!(
                Cli::try_parse_from(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
        let Command::Record(r) =
            parse_ok(&["profiler", "record", "-p", "1,2", "-F", "999"]).command
        else {
            panic!("record")
        };
        assert_eq!(r.pid, vec![1, 2]);
        assert_eq!(r.freq, 999);
        let Command::Record(r) =
            parse_ok(&["profiler", "record", "-d", "1.5", "--", "ls", "-l"]).command
        else {
            panic!("record")
        };
        assert_eq!(r.command, vec!["ls", "-l"]);
        assert_eq!(r.duration, Some(1.5));
        let Command::Record(r) = parse_ok(&["profiler", "record", "-a"]).command else {
            panic!("record")
        };
        assert!(r.all_cpus);
        assert_eq!(r.freq, 99, "default frequency");
    }

    fn record(args: &[&str]) -> record::RecordArgs {
        match parse_ok(args).command {
            Command::Record(r) => *r,
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn perf_habits_parse() {
        // The command without `--`, its own flags left to it.
        let r = record(&["profiler", "record", "-F", "999", "./toucher", "-x", "--y"]);
        assert_eq!(r.command, vec!["./toucher", "-x", "--y"]);
        assert_eq!(r.freq, 999);
        // -g is accepted beside --call-graph.
        let r = record(&["profiler", "record", "-g", "--call-graph", "fp", "--", "ls"]);
        assert!(r.call_stacks);
        assert_eq!(r.call_graph, record::CallGraphArg::Fp);
        // -a or -C with a command: whole CPUs while it runs.
        for args in [
            &["profiler", "record", "-a", "--", "sleep", "1"][..],
            &["profiler", "record", "-C", "0", "sleep", "1"],
        ] {
            let r = record(args);
            assert_eq!(r.command, vec!["sleep", "1"]);
            assert!(r.all_cpus || r.cpus.is_some());
        }
        // -C alone is a target (those CPUs, whole); -t, -G, -p still exclude a command and -a.
        assert_eq!(
            record(&["profiler", "record", "-C", "1"]).cpus.as_deref(),
            Some("1")
        );
        for bad in [
            &["profiler", "record", "-t", "1", "-a"][..],
            &["profiler", "record", "-G", "/x", "--", "ls"],
            &["profiler", "record", "-p", "1", "-t", "2"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn missing_arguments_are_named_on_the_one_line() {
        let line = |args: &[&str]| one_line(&Cli::try_parse_from(args).unwrap_err());
        assert_eq!(
            line(&["profiler", "record", "-a", "--interval", "10"]),
            "the following required arguments were not provided: \
             <--output <FILE|DIR>|--export <URL>>"
        );
        let l = line(&["profiler", "record"]);
        assert!(
            l.ends_with("not provided: <--pid <PID[,PID..]>|--tid <TID[,TID..]>|--all-cpus|--cpu <CPULIST>|--cgroup <PATH>|CMD>"),
            "{l}"
        );
        assert!(
            line(&["profiler", "record", "-a", "--spool", "d"]).ends_with("--export <URL>"),
            "the option --spool requires"
        );
        let l = line(&["profiler", "symbolize", "-i", "x"]);
        assert!(l.ends_with("not provided: --output <FILE>"), "{l}");
        assert!(!l.contains('\n'));
    }

    #[test]
    fn an_interval_goes_to_a_directory_or_a_store() {
        let r = record(&[
            "profiler",
            "record",
            "-a",
            "--interval",
            "10",
            "--export",
            "otlp+grpc://127.0.0.1:4317",
        ]);
        assert_eq!((r.interval, r.output), (Some(10.0), None));
        let r = record(&["profiler", "record", "-a", "--interval", "1", "-o", "d"]);
        assert_eq!(r.output.as_deref(), Some(std::path::Path::new("d")));
    }

    #[test]
    fn typos_get_a_suggestion_on_one_line() {
        let e = Cli::try_parse_from(["profiler", "reprot"]).unwrap_err();
        assert_eq!(
            one_line(&e),
            "unrecognized subcommand 'reprot'; did you mean 'report'?"
        );
        let e = Cli::try_parse_from(["profiler", "record", "--durration", "1", "-a"]).unwrap_err();
        assert_eq!(
            one_line(&e),
            "unexpected argument '--durration' found; did you mean '--duration'?"
        );
    }

    #[test]
    fn every_subcommand_help_ends_with_examples() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        cli.build();
        for sub in cli.get_subcommands_mut().filter(|s| s.get_name() != "help") {
            let help = sub.render_help().to_string();
            let tail = help.rsplit_once("Examples:\n").map(|(_, t)| t);
            let lines: Vec<&str> = tail
                .unwrap_or_default()
                .lines()
                .filter(|l| l.trim_start().starts_with("profiler "))
                .collect();
            assert!((2..=3).contains(&lines.len()), "{}: {help}", sub.get_name());
        }
    }
}
