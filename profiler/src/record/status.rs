//! The live status line of long runs: elapsed time, samples, lost, rewritten in place on a
//! terminal's stderr once a second. Disabled (silent) when stderr is not a terminal.

use std::{io::Write as _, sync::Arc, time::Duration};

/// More of the status line, from outside the recording (the exporter's totals).
#[derive(Clone)]
pub struct StatusExtra(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for StatusExtra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusExtra")
    }
}

pub struct StatusLine {
    enabled: bool,
    shown: bool,
    extra: Option<StatusExtra>,
}

impl StatusLine {
    pub fn new(enabled: bool, extra: Option<StatusExtra>) -> Self {
        Self {
            enabled,
            shown: false,
            extra,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn show(&mut self, elapsed: Duration, samples: u64, lost: u64) {
        let mut err = std::io::stderr().lock();
        let extra = self.extra.as_ref().map(|e| (e.0)());
        let _ = write!(
            err,
            "\r{}\x1b[K",
            text(elapsed, samples, lost, extra.as_deref())
        );
        let _ = err.flush();
        self.shown = true;
    }

    /// Erases the line, so the report starts on a clean one.
    pub fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

fn text(elapsed: Duration, samples: u64, lost: u64, extra: Option<&str>) -> String {
    let secs = elapsed.as_secs();
    let extra = extra.map(|e| format!(", {e}")).unwrap_or_default();
    format!(
        "profiler: recording {:02}:{:02}:{:02}, {samples} samples, {lost} lost{extra} (Ctrl-C to stop)",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text() {
        assert_eq!(
            text(Duration::from_secs(3725), 12, 3, None),
            "profiler: recording 01:02:05, 12 samples, 3 lost (Ctrl-C to stop)"
        );
        assert_eq!(
            text(Duration::from_secs(5), 1, 0, Some("export: 4 sent")),
            "profiler: recording 00:00:05, 1 samples, 0 lost, export: 4 sent (Ctrl-C to stop)"
        );
    }
}
