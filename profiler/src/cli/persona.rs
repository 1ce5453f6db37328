//! The binary invoked as `cputrack` or `cpustat` (a link named so): the Solaris command
//! lines exactly, read with getopt (`cputrack -c spec -T 0.5 command args`,
//! `cpustat -c spec 1 3`), with Solaris's exit statuses.

use std::{
    ffi::{OsStr, OsString},
    path::{Path, PathBuf},
    process::ExitCode,
};

use super::{
    counters::{self, StatRequest, TrackRequest, Voice},
    getopt::{Getopt, Opt},
    stat::stamp,
    usage::UsageError,
};
use crate::tools::{format::TICK_NAME, stat::StatOptions, track::TrackOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persona {
    Cputrack,
    Cpustat,
}

/// The persona argv\[0\] names, if any.
pub fn persona(argv0: &OsStr) -> Option<Persona> {
    match Path::new(argv0).file_name()?.to_str()? {
        "cputrack" => Some(Persona::Cputrack),
        "cpustat" => Some(Persona::Cpustat),
        _ => None,
    }
}

fn cputrack_usage() -> String {
    format!(
        "Usage:\n\tcputrack [-T secs] [-N count] [-Defhntv] [-o file]\n\
         \t\t-c events [command [args] | -p pid]\n\n\
         \t-T secs\t  seconds between samples, default 1\n\
         \t-N count  number of samples, default unlimited\n\
         \t-D\t  enable debug mode\n\
         \t-e\t  follow exec(2), and execve(2)\n\
         \t-f\t  follow fork(2), and vfork(2)\n\
         \t-h\t  print extended usage information\n\
         \t-n\t  suppress titles\n\
         \t-t\t  include virtualized {TICK_NAME} register\n\
         \t-v\t  verbose mode\n\
         \t-o file\t  write cpu statistics to this file\n\
         \t-c events specify processor events to be monitored\n\
         \t-p pid\t  pid of existing process to capture\n\n\
         \tUse cpustat(8) to monitor system-wide statistics.\n"
    )
}

fn cpustat_usage() -> String {
    format!(
        "Usage:\n\tcpustat [-c events] [-p period] [-nstD] [-T d|u] [interval [count]]\n\n\
         \t-c events specify processor events to be monitored\n\
         \t-n\t  suppress titles\n\
         \t-p period cycle through event list periodically\n\
         \t-s\t  run user soaker thread for system-only events\n\
         \t-t\t  include {TICK_NAME} register\n\
         \t-T d|u\t  Display a timestamp in date (d) or unix time_t (u)\n\
         \t-D\t  enable debug mode\n\
         \t-h\t  print extended usage information\n\n\
         \tUse cputrack(1) to monitor per-process statistics.\n"
    )
}

pub fn run(who: Persona, args: &[OsString]) -> ExitCode {
    let name = match who {
        Persona::Cputrack => "cputrack",
        Persona::Cpustat => "cpustat",
    };
    let mut voice = Voice { name, debug: false };
    let cpc = match counters::open(voice) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let spec = match who {
        Persona::Cputrack => "T:N:Defhntvo:r:c:p:",
        Persona::Cpustat => "Dc:hntT:sp:",
    };
    let rest = args.get(1..).unwrap_or_default();
    let mut g = Getopt::new(rest, spec);
    let mut opts: Vec<Opt> = Vec::new();
    let mut error: Option<String> = None;
    for o in g.by_ref() {
        match o {
            Ok(o) => opts.push(o),
            Err(e) => {
                error.get_or_insert(e.to_string());
            }
        }
    }
    let operands = g.operands().to_vec();
    voice.debug = opts.contains(&Opt::Flag('D'));
    if opts.contains(&Opt::Flag('h')) {
        let usage = match who {
            Persona::Cputrack => cputrack_usage(),
            Persona::Cpustat => cpustat_usage(),
        };
        super::counters::print_help(&usage, &cpc);
        return ExitCode::SUCCESS;
    }
    if let Some(e) = error {
        return voice.usage(e);
    }
    match who {
        Persona::Cputrack => match cputrack(opts, operands) {
            Ok(req) => counters::run_track(voice, &cpc, req),
            Err(e) => voice.usage(e),
        },
        Persona::Cpustat => match cpustat(opts, &operands) {
            Ok(req) => counters::run_stat(voice, &cpc, req),
            Err(e) => voice.usage(e),
        },
    }
}

fn text(v: &OsString) -> String {
    v.to_string_lossy().into_owned()
}

fn cputrack(opts: Vec<Opt>, operands: Vec<OsString>) -> Result<TrackRequest, UsageError> {
    let mut o = TrackOptions {
        sets: Vec::new(),
        interval: Some(std::time::Duration::from_secs(1)),
        samples: None,
        follow_fork: false,
        follow_exec: false,
        verbose: false,
        tick: false,
        header: true,
        json: false,
        debug: false,
        header_note: None,
    };
    let (mut specs, mut pid, mut output) = (Vec::new(), None, None::<PathBuf>);
    for opt in opts {
        match opt {
            Opt::Arg('T', v) => {
                let d = counters::seconds("interval", &text(&v))?;
                o.interval = (!d.is_zero()).then_some(d);
            }
            Opt::Arg('N', v) => {
                o.samples = Some(counters::count("count", &text(&v))?).filter(|n| *n > 0)
            }
            Opt::Arg('o', v) => output = Some(PathBuf::from(v)),
            Opt::Arg('c', v) => specs.push(text(&v)),
            Opt::Arg('p', v) => pid = Some(counters::pid(&text(&v))?),
            Opt::Arg('r', _) => return Err(UsageError::Unsupported('r')),
            Opt::Flag('D') => o.debug = true,
            Opt::Flag('e') => o.follow_exec = true,
            Opt::Flag('f') => o.follow_fork = true,
            Opt::Flag('n') => o.header = false,
            Opt::Flag('t') => o.tick = true,
            Opt::Flag('v') => o.verbose = true,
            Opt::Arg(c, _) | Opt::Flag(c) => return Err(UsageError::Illegal(c)),
        }
    }
    Ok(TrackRequest {
        specs,
        opts: o,
        command: operands,
        pid,
        output,
    })
}

fn cpustat(opts: Vec<Opt>, operands: &[OsString]) -> Result<StatRequest, UsageError> {
    let operands: Vec<String> = operands.iter().map(text).collect();
    let (interval, count) = counters::stat_operands(&operands)?;
    let mut o = StatOptions {
        sets: Vec::new(),
        interval,
        count,
        period: None,
        cpus: None,
        soak: false,
        tick: false,
        header: true,
        json: false,
        stamp: None,
        prog: "cpustat",
    };
    let mut specs = Vec::new();
    for opt in opts {
        match opt {
            Opt::Arg('c', v) => specs.push(text(&v)),
            Opt::Arg('p', v) => o.period = Some(counters::seconds("period", &text(&v))?),
            Opt::Arg('T', v) => o.stamp = Some(stamp(&text(&v))?),
            Opt::Flag('D') => {}
            Opt::Flag('n') => o.header = false,
            Opt::Flag('t') => o.tick = true,
            Opt::Flag('s') => o.soak = true,
            Opt::Arg(c, _) | Opt::Flag(c) => return Err(UsageError::Illegal(c)),
        }
    }
    Ok(StatRequest { specs, opts: o })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn parse_track(v: &[&str]) -> Result<TrackRequest, UsageError> {
        let a = os(v);
        let mut g = Getopt::new(&a, "T:N:Defhntvo:r:c:p:");
        let opts: Vec<Opt> = g.by_ref().map(Result::unwrap).collect();
        cputrack(opts, g.operands().to_vec())
    }

    #[test]
    fn names() {
        assert_eq!(
            persona(OsStr::new("/usr/bin/cputrack")),
            Some(Persona::Cputrack)
        );
        assert_eq!(persona(OsStr::new("cpustat")), Some(Persona::Cpustat));
        assert_eq!(persona(OsStr::new("profiler")), None);
    }

    #[test]
    fn cputrack_lines() {
        let r = parse_track(&["-c", "page-faults", "-T", "0.5", "-fev", "ls", "-l"]).unwrap();
        assert_eq!(r.specs, ["page-faults"]);
        assert_eq!(r.opts.interval, Some(std::time::Duration::from_millis(500)));
        assert!(r.opts.follow_fork && r.opts.follow_exec && r.opts.verbose);
        assert_eq!(r.command, os(&["ls", "-l"]));
        let r = parse_track(&["-T", "0", "-N", "0", "-c", "x", "-p", "12"]).unwrap();
        assert_eq!(
            (r.opts.interval, r.opts.samples, r.pid),
            (None, None, Some(12))
        );
        assert_eq!(
            parse_track(&["-r", "x", "ls"]).unwrap_err().to_string(),
            "option -r is not supported"
        );
        assert!(parse_track(&["-N", "-1", "ls"]).is_err());
        assert!(parse_track(&["-p", "0"]).is_err());
    }

    #[test]
    fn cpustat_lines() {
        let a = os(&["-c", "cpu-clock", "-T", "u", "-tn", "1", "3"]);
        let mut g = Getopt::new(&a, "Dc:hntT:sp:");
        let opts: Vec<Opt> = g.by_ref().map(Result::unwrap).collect();
        let r = cpustat(opts, g.operands()).unwrap();
        assert_eq!(r.specs, ["cpu-clock"]);
        assert_eq!(r.opts.count, Some(3));
        assert_eq!(r.opts.stamp, Some(crate::tools::stat::Stamp::Unix));
        assert!(r.opts.tick && !r.opts.header);
        assert!(cpustat(vec![], &os(&["0"])).is_err());
        assert!(cpustat(vec![Opt::Arg('T', "x".into())], &[]).is_err());
    }
}
