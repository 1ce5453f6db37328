//! The runtimes a recording walks beside native code (Python, JavaScript, Java), started with
//! the native unwinder they hang off: each process it publishes is shown to them, and the
//! collector names the frames their kernel walkers wrote. Without the unwind-table walker
//! (Linux before 5.17, `--call-graph fp`) there is nothing to hang off: stacks stay native.

use std::sync::{Arc, Mutex};

use super::{RecordOptions, Warn, Warning, collect::Collector, unwind::TableLoader};
use crate::runtimes::registry::Runtimes;

/// Starts the runtimes the options leave on, on `tables` and `collector`.
pub(super) fn start(
    opts: &RecordOptions,
    tables: Option<&mut TableLoader>,
    collector: &mut Collector,
    warnings: &mut dyn Warn,
) {
    let Some(tables) = tables else {
        return;
    };
    let (runtimes, lines) = Runtimes::start(&opts.runtimes_off);
    for line in lines {
        warnings.warn(Warning::new(line));
    }
    let Some(runtimes) = runtimes else {
        return;
    };
    let runtimes = Arc::new(Mutex::new(runtimes));
    tables.set_runtimes(runtimes.clone());
    collector.set_runtimes(runtimes);
}
