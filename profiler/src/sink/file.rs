//! The run's profile as one file (or standard output) in one format: pprof, folded stacks,
//! a flame graph SVG (or a differential one), speedscope, or the report as text. The file is
//! created when the sink is (so an unwritable path fails before anything runs) and put in
//! place only once complete.

use std::path::PathBuf;

use super::{Notice, Outgoing, Sink, SinkError};
use crate::{
    output::{Output, OutputError},
    profile::{Format, Profile, pprof, write_diff_flamegraph},
};

/// How the profile becomes the file's bytes.
enum Render {
    Format(Format),
    /// A differential flame graph of the profile handed over against `before`.
    Diff {
        before: Box<Profile>,
    },
}

pub struct FileSink {
    out: Output,
    render: Render,
    /// The flame graph's title.
    title: String,
    /// How the notice names the format once the file is in place (`None`: `wrote FILE`).
    what: Option<&'static str>,
}

impl FileSink {
    /// Creates `path` (`-` is standard output) now, for a profile in `format`.
    pub fn create(
        path: &std::path::Path,
        format: Format,
        title: &str,
    ) -> Result<Self, OutputError> {
        Ok(Self {
            out: Output::create(path)?,
            render: Render::Format(format),
            title: title.to_string(),
            what: None,
        })
    }

    /// Creates `path` for a differential flame graph of the profile handed over (after)
    /// against `before`.
    pub fn create_diff(
        path: &std::path::Path,
        before: Profile,
        title: &str,
    ) -> Result<Self, OutputError> {
        Ok(Self {
            out: Output::create(path)?,
            render: Render::Diff {
                before: Box::new(before),
            },
            title: title.to_string(),
            what: None,
        })
    }

    /// The notice once written says `WHAT written to FILE` (record's wording).
    pub fn describing(mut self) -> Self {
        self.what = Some(match &self.render {
            Render::Format(f) => describe(*f),
            Render::Diff { .. } => "differential flame graph",
        });
        self
    }

    /// At commit, a file already at the path is kept as `old` (as perf keeps
    /// `perf.data.old`); nothing for standard output.
    pub fn keep_previous_as(&mut self, old: PathBuf) {
        if let Output::File(f) = &mut self.out {
            f.keep_previous_as(old);
        }
    }
}

impl Sink for FileSink {
    fn finish(
        self: Box<Self>,
        last: &Outgoing<'_>,
        tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        let FileSink {
            mut out,
            render,
            title,
            what,
        } = *self;
        let name = out.name();
        let written = match render {
            // The message the other sinks (a store) take too, encoded once.
            Render::Format(Format::Pprof) => pprof::write_message(last.pprof(), &mut out),
            Render::Format(f) => f.write(last.profile, &title, &mut out),
            Render::Diff { before } => {
                write_diff_flamegraph(&before, last.profile, &title, &mut out)
            }
        };
        written.map_err(|source| SinkError::Write {
            name: name.clone(),
            source,
        })?;
        let to_stdout = out.is_stdout();
        out.commit().map_err(|source| SinkError::Commit {
            name: name.clone(),
            source,
        })?;
        if !to_stdout {
            tell(&Notice::Written { what, name });
        }
        Ok(())
    }
}

/// The format's name in record's notice.
fn describe(format: Format) -> &'static str {
    match format {
        Format::Pprof => "pprof profile",
        Format::Folded => "folded stacks",
        Format::Svg => "flame graph",
        Format::Speedscope => "speedscope profile",
        Format::Report => "report",
    }
}
