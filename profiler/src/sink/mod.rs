//! Where finished profiles go. A [`Sink`] takes each interval of a continuous recording and
//! the run's last profile: a file in one format (pprof, folded, SVG, speedscope, the report
//! as text), the printed table, continuous mode's directory of interval files, the exporters
//! to profile stores. `record`, `report` and `flamegraph` build a [`Sinks`] list from their
//! options and hand it every profile; adding an output or a store is its module and one
//! line where the list is built.
//!
//! Sinks never print: what they did is a [`Notice`] the caller prints.

mod export;
mod file;
mod series;
mod table;

use std::{cell::OnceCell, io, sync::Arc};

pub use file::FileSink;
pub use series::Series;
pub use table::TableSink;

use crate::{
    output::OutputError,
    profile::{Profile, pprof},
};

/// One profile on its way to the sinks, with its pprof message made at most once, for
/// whichever sinks want it (a pprof file, a pprof series, the exporters): the file and the
/// stores get the same message.
pub struct Outgoing<'a> {
    pub profile: &'a Profile,
    pprof: OnceCell<Arc<pprof::proto::Profile>>,
}

impl<'a> Outgoing<'a> {
    pub fn new(profile: &'a Profile) -> Self {
        Self {
            profile,
            pprof: OnceCell::new(),
        }
    }

    /// The profile's pprof message, encoded on first use.
    pub fn pprof(&self) -> &Arc<pprof::proto::Profile> {
        self.pprof
            .get_or_init(|| Arc::new(pprof::encode(self.profile)))
    }
}

/// A destination for profiles.
pub trait Sink {
    /// Takes one interval of a continuous recording. A file of the whole run ignores it
    /// (the default): it takes only the last profile, at [`Sink::finish`].
    fn interval(
        &mut self,
        _profile: &Outgoing<'_>,
        _tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        Ok(())
    }

    /// Takes the run's last profile (the whole run, or the last, partial interval) and
    /// completes the output: a file is put in place, an exporter flushes what it holds.
    fn finish(
        self: Box<Self>,
        last: &Outgoing<'_>,
        tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError>;

    /// The run failed and has no last profile. By default the sink is dropped (an
    /// unfinished file is removed); an exporter still flushes the intervals it holds.
    fn abandon(self: Box<Self>) {}
}

/// Why a sink could not take a profile.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// An interval's file (continuous mode) could not be created, written or renamed.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The run's file could not be written.
    #[error("writing {name}: {source}")]
    Write { name: String, source: io::Error },
    /// The run's file was written but could not be put in place (or flushed).
    #[error("writing {name}: {source}")]
    Commit { name: String, source: OutputError },
    /// The printed table could not be written.
    #[error("writing the report: {0}")]
    Table(io::Error),
}

/// What a sink did or has to say, for the caller to print after `profiler: `.
#[derive(Debug)]
pub enum Notice<'a> {
    /// The run's file is in place: `what` names its format (record says it; flamegraph
    /// does not).
    Written {
        what: Option<&'static str>,
        name: String,
    },
    /// An interval's file is in place.
    Interval {
        path: std::path::PathBuf,
        samples: u64,
        lost: u64,
    },
    /// Only one of the profile's events is shown; the note names the others.
    OneEvent(String),
    /// A sink could not take an interval; the others did, and the run goes on.
    Failed(&'a SinkError),
}

impl std::fmt::Display for Notice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::Written {
                what: Some(what),
                name,
            } => write!(f, "{what} written to {name}"),
            Notice::Written { what: None, name } => write!(f, "wrote {name}"),
            Notice::Interval {
                path,
                samples,
                lost,
            } => write!(
                f,
                "wrote {} ({samples} samples, {lost} lost)",
                path.display()
            ),
            Notice::OneEvent(note) => f.write_str(note),
            Notice::Failed(e) => write!(f, "error: {e}"),
        }
    }
}

/// The sinks of a run, in the order they are handed each profile.
pub struct Sinks {
    sinks: Vec<Box<dyn Sink>>,
    tell: Box<dyn FnMut(&Notice<'_>)>,
    /// The first interval a sink could not take: the run goes on, and fails at the end.
    failed: Option<SinkError>,
}

impl Sinks {
    /// An empty list whose notices go to `tell`.
    pub fn new(tell: impl FnMut(&Notice<'_>) + 'static) -> Self {
        Self {
            sinks: Vec::new(),
            tell: Box::new(tell),
            failed: None,
        }
    }

    pub fn push(&mut self, sink: impl Sink + 'static) {
        self.sinks.push(Box::new(sink));
    }

    /// Hands one interval to every sink. A sink that fails is told about at once and
    /// remembered (the run fails at the end); the others still take the interval, and the
    /// failing one is handed the next.
    pub fn interval(&mut self, profile: &Profile) {
        let out = Outgoing::new(profile);
        for sink in &mut self.sinks {
            if let Err(e) = sink.interval(&out, &mut *self.tell) {
                (self.tell)(&Notice::Failed(&e));
                self.failed.get_or_insert(e);
            }
        }
    }

    /// Hands the last profile to every sink, in order, each completing its output whatever
    /// the ones before it did. The first failure is returned: of the end, else of an
    /// interval.
    pub fn finish(mut self, last: &Profile) -> Result<(), SinkError> {
        let out = Outgoing::new(last);
        let mut first = None;
        for sink in self.sinks.drain(..) {
            if let Err(e) = sink.finish(&out, &mut *self.tell) {
                first.get_or_insert(e);
            }
        }
        match first.or(self.failed) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The run failed: each sink keeps what it must (an exporter flushes, a file is not
    /// left half-written).
    pub fn abandon(self) {
        for sink in self.sinks {
            sink.abandon();
        }
    }
}

#[cfg(test)]
mod tests;
