//! The live status line of long runs: elapsed time, samples, lost, rewritten in place on a
//! terminal's stderr once a second. Disabled (silent) when stderr is not a terminal.

use std::{io::Write as _, time::Duration};

pub struct StatusLine {
    enabled: bool,
    shown: bool,
}

impl StatusLine {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            shown: false,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn show(&mut self, elapsed: Duration, samples: u64, lost: u64) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{}\x1b[K", text(elapsed, samples, lost));
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

fn text(elapsed: Duration, samples: u64, lost: u64) -> String {
    let secs = elapsed.as_secs();
    format!(
        "profiler: recording {:02}:{:02}:{:02}, {samples} samples, {lost} lost (Ctrl-C to stop)",
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
            text(Duration::from_secs(3725), 12, 3),
            "profiler: recording 01:02:05, 12 samples, 3 lost (Ctrl-C to stop)"
        );
    }
}
