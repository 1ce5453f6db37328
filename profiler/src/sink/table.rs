//! The report's table of the run's profile, written to the terminal stream it is handed
//! (standard output, or standard error when standard output carries the profile).

use std::io::{self, Write};

use super::{Notice, Outgoing, Sink, SinkError};
use crate::profile::{By, ReportOptions, one_event, render_report};

pub struct TableSink {
    options: ReportOptions,
    out: Box<dyn Write>,
}

impl TableSink {
    pub fn new(options: ReportOptions, out: Box<dyn Write>) -> Self {
        Self { options, out }
    }
}

impl Sink for TableSink {
    fn finish(
        mut self: Box<Self>,
        last: &Outgoing<'_>,
        tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        let profile = last.profile;
        // `--by event` lists every event, each in its unit; other tables show one event
        // (values of different units do not add up), the others named in a note.
        let table = match self.options.by {
            By::Event => render_report(profile, self.options),
            _ => {
                let (one, note) = one_event(profile);
                if let Some(note) = note {
                    tell(&Notice::OneEvent(note));
                }
                render_report(&one, self.options)
            }
        };
        // A reader that went away (`| head`) ends the table quietly.
        match self
            .out
            .write_all(table.as_bytes())
            .and_then(|()| self.out.flush())
        {
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(SinkError::Table(e)),
            _ => Ok(()),
        }
    }
}
