//! `profiler symbolize`: name the frames of a profile recorded with `record --symbolize
//! none`, on any host that has the files (or their debug files).

use std::{path::PathBuf, process::ExitCode};

use clap::Args;

use super::fail;
use crate::{
    output::Output,
    profile::pprof::{read_message, symbolize_message, write_message},
};

#[derive(Debug, Args)]
pub struct SymbolizeArgs {
    /// The pprof profile to read (as `record --symbolize none -o` wrote it).
    #[arg(short, long, value_name = "FILE")]
    pub input: PathBuf,
    /// Where to write the named profile (pprof); `-` is standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Also look for debug files under DIR (its `.build-id/` tree), before /usr/lib/debug,
    /// and for recorded files that are no longer at their path (moved, or copied from the
    /// host that ran them), by build id (a Go binary's own), in DIR and its
    /// subdirectories. Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dir: Vec<PathBuf>,
}

pub fn run(args: SymbolizeArgs) -> ExitCode {
    let bytes = match std::fs::read(&args.input) {
        Ok(b) => b,
        Err(e) => return fail(format!("cannot read {}: {e}", args.input.display())),
    };
    let mut message = match read_message(&bytes) {
        Ok(m) => m,
        Err(e) => return fail(format!("{}: {e}", args.input.display())),
    };
    let done = symbolize_message(&mut message, &args.debug_dir);
    for m in &done.missing {
        eprintln!("profiler: warning: no file or debug file here for {m}");
    }
    let mut out = match Output::create(&args.output) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let name = out.name();
    if let Err(e) = write_message(&message, &mut out) {
        return fail(format!("cannot write {name}: {e}"));
    }
    if let Err(e) = out.commit() {
        return fail(e);
    }
    eprintln!(
        "profiler: {} locations named, {} left unnamed; written to {name}",
        done.named, done.unnamed,
    );
    ExitCode::SUCCESS
}
