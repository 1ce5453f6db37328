//! cputrack's rows on their way out: table or JSON, times relative to the start. A write
//! error (a closed pipe) is remembered rather than returned, so the tracker can finish
//! the ptrace step it is in before it stops.

use std::io::{self, Write};

use super::super::{
    format::{self, TrackLayout},
    json,
    sample::Sample,
    spec::SetSpec,
};

pub struct Emitter {
    out: Box<dyn Write>,
    json: bool,
    layout: TrackLayout,
    /// hrtime of time 0.000.
    t0: u64,
    /// The first write error.
    pub failed: Option<io::Error>,
}

impl Emitter {
    pub fn new(out: Box<dyn Write>, json: bool, layout: TrackLayout) -> Emitter {
        Emitter {
            out,
            json,
            layout,
            t0: crate::host::hrtime(),
            failed: None,
        }
    }

    fn put(&mut self, line: &str) {
        if self.failed.is_none()
            && let Err(e) = self.out.write_all(line.as_bytes())
        {
            self.failed = Some(e);
        }
    }

    /// The header (of the first set, as cputrack prints it), under `note` if there is one;
    /// none in JSON.
    pub fn header(&mut self, first: &SetSpec, note: Option<&str>) {
        if !self.json {
            if let Some(note) = note {
                self.put(&format!("# {note}\n"));
            }
            let line = format::track_header(&self.layout, &first.pics());
            self.put(&line);
        }
    }

    /// Starts the clock: rows are timed from now.
    pub fn zero_time(&mut self) {
        self.t0 = crate::host::hrtime();
    }

    /// Seconds since the start for a sample time (0: now).
    fn seconds(&self, hrtime: u64) -> f64 {
        let at = if hrtime == 0 {
            crate::host::hrtime()
        } else {
            hrtime
        };
        at.saturating_sub(self.t0) as f64 / 1e9
    }

    pub fn counts(&mut self, ids: (i32, i32), event: &str, sample: &Sample, set: &SetSpec) {
        let t = self.seconds(sample.hrtime);
        let line = if self.json {
            json::track_row(t, ids, event, sample, set, self.layout.tick_column)
        } else {
            format::track_row(&self.layout, t, ids.0, ids.1, event, sample, &set.text)
        };
        self.put(&line);
    }

    pub fn fork(&mut self, pid: i32, lwp: i32, child: i32) {
        let t = self.seconds(0);
        let line = if self.json {
            json::track_fork(t, pid, lwp, child)
        } else {
            format::track_fork(&self.layout, t, pid, lwp, child)
        };
        self.put(&line);
    }

    /// The exec row naming the new image, at `hrtime` (the latest of the totals printed).
    pub fn exec_args(&mut self, hrtime: u64, pid: i32, lwp: i32, argv: &str) {
        let t = self.seconds(hrtime);
        let line = if self.json {
            json::track_exec_args(t, pid, lwp, argv)
        } else {
            format::track_exec_args(&self.layout, t, pid, lwp, argv)
        };
        self.put(&line);
    }

    pub fn flush(&mut self) {
        if self.failed.is_none()
            && let Err(e) = self.out.flush()
        {
            self.failed = Some(e);
        }
    }
}
