//! The signals that end a recording: hooked before anything is set up, so that a Ctrl-C
//! during the set-up still ends in an orderly report.

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::RecordError;

/// The signals that end a recording in an orderly report.
pub(super) struct StopSignals {
    pub int: Signal,
    pub term: Signal,
    pub hup: Signal,
}

impl StopSignals {
    pub fn hook() -> Result<Self, RecordError> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).map_err(io("installing SIGINT handler"))?,
            term: signal(SignalKind::terminate()).map_err(io("installing SIGTERM handler"))?,
            hup: signal(SignalKind::hangup()).map_err(io("installing SIGHUP handler"))?,
        })
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> RecordError {
    move |source| RecordError::Io { what, source }
}
