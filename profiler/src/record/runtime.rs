//! The runtimes a recording walks beside native code (Python, JavaScript), started with the
//! native unwinder they hang off: each process it publishes is shown to them, and the
//! collector names the frames their kernel walkers wrote. Without the unwind-table walker
//! (Linux before 5.17, `--call-graph fp`) there is nothing to hang off: stacks stay native.

use std::sync::{Arc, Mutex};

use super::{RecordOptions, Warn, Warning, collect::Collector, unwind::TableLoader};
use crate::{bpf::btf, runtimes::Runtimes};

/// Starts the runtimes the options ask for on `tables` and `collector`.
pub(super) fn start(
    opts: &RecordOptions,
    tables: Option<&mut TableLoader>,
    collector: &mut Collector,
    warnings: &mut dyn Warn,
) {
    if !opts.python && !opts.js && !opts.java {
        return;
    }
    let Some(tables) = tables else {
        return;
    };
    let fsbase = if opts.python {
        match btf::task_fsbase_offset() {
            Ok(off) => Some(off),
            Err(e) => {
                warnings.warn(Warning::new(format!(
                    "Python frames are not shown: the thread pointer's place in task_struct \
                     is not known ({e})"
                )));
                None
            }
        }
    } else {
        None
    };
    if fsbase.is_none() && !opts.js && !opts.java {
        return;
    }
    let runtimes = Arc::new(Mutex::new(Runtimes::new(fsbase, opts.js, opts.java)));
    tables.set_runtimes(runtimes.clone());
    collector.set_runtimes(runtimes);
}
