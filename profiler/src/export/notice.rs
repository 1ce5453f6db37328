//! What the exporter has to say while it runs (a store down and back, intervals dropped, the
//! totals at the end): values handed to the caller's [`Notify`], which the CLI prints after
//! `profiler: `.

use std::{io, sync::Arc};

use super::{Counts, ExportError};

/// Receives the exporter's notices, from its threads.
#[derive(Clone)]
pub struct Notify(Arc<dyn Fn(&Notice) + Send + Sync>);

impl Notify {
    pub fn new(f: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    pub fn tell(&self, notice: &Notice) {
        (self.0)(notice)
    }
}

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notify")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Notice {
    #[error("export: {url}: {intervals} intervals spooled by an earlier run are sent first")]
    Resuming { url: String, intervals: usize },
    #[error("export: {url}: reading a spooled interval: {source}; dropped")]
    SpoolRead { url: String, source: io::Error },
    #[error("export: {url}: the spool: {source}")]
    Spool { url: String, source: io::Error },
    #[error("export: {url}: reachable again after {failures} failed tries")]
    Reachable { url: String, failures: u32 },
    #[error("export: interval {seq} not accepted: {source} (not retried)")]
    NotAccepted { seq: u64, source: ExportError },
    #[error("export: {source}; retrying{}", if *.spooling { ", spooling intervals meanwhile" } else { "" })]
    Retrying { source: ExportError, spooling: bool },
    #[error("export: spooling at exit: {source}")]
    SpoolAtExit { source: io::Error },
    #[error("export: {url}: spooling an interval: {source}; it is dropped")]
    SpoolPush { url: String, source: io::Error },
    #[error(
        "export: {} sent, {} spooled, {} dropped ({url}: {} bytes sent{})",
        .counts.sent, .counts.spooled, .counts.dropped, .counts.bytes_sent,
        match .counts.rejected { 0 => String::new(), n => format!(", {n} of them refused by the store") }
    )]
    Totals { url: String, counts: Counts },
    #[error("export: {url}: the store rejected {profiles} profiles: {message}")]
    Rejected {
        url: String,
        profiles: i64,
        message: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_read_as_the_cli_prints_them() {
        let counts = Counts {
            sent: 3,
            spooled: 1,
            dropped: 2,
            rejected: 1,
            bytes_sent: 900,
        };
        let url = "http://store:4318".to_string();
        assert_eq!(
            Notice::Totals { url, counts }.to_string(),
            "export: 3 sent, 1 spooled, 2 dropped (http://store:4318: 900 bytes sent, 1 of \
             them refused by the store)"
        );
        let n = Notice::Reachable {
            url: "u".into(),
            failures: 4,
        };
        assert_eq!(
            n.to_string(),
            "export: u: reachable again after 4 failed tries"
        );
    }
}
