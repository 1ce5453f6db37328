//! `profiler list`: the counter interface and every event, usable here or not (and why).

use std::{io::Write as _, process::ExitCode};

use clap::Args;

use super::counters::{self, Voice};
use crate::tools::caps;

/// List the counter interface, the events this host can count (by kind), the generic
/// PAPI names and what they map to, the attributes, and what is unavailable here and why.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ListArgs) -> ExitCode {
    let voice = Voice {
        name: "profiler",
        debug: false,
    };
    let cpc = match counters::open(voice) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let text = if args.json {
        caps::list_json(&cpc)
    } else {
        caps::list_text(&cpc)
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => voice.fail(format!("writing the list: {e}")),
    }
}
