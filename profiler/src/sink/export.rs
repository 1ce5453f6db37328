//! The exporters to profile stores (`record --export`) as a sink: every interval is queued
//! for every store, then the last profile; at the end pending intervals get the flush
//! timeout and the rest stays spooled. What the exporter has to say goes to the `Notify`
//! its options were given.

use super::{Notice, Outgoing, Sink, SinkError};
use crate::export::Exporter;

impl Sink for Exporter {
    fn interval(
        &mut self,
        interval: &Outgoing<'_>,
        _tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        self.submit(interval.pprof().clone(), interval.profile.info.frequency_hz);
        Ok(())
    }

    fn finish(
        mut self: Box<Self>,
        last: &Outgoing<'_>,
        tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        self.interval(last, tell)?;
        // A store that is away is not the run's failure: its intervals are spooled or
        // counted as dropped, and the totals say so.
        Exporter::finish(*self);
        Ok(())
    }

    fn abandon(self: Box<Self>) {
        Exporter::finish(*self);
    }
}
