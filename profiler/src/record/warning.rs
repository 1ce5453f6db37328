//! What a recording has to say that is not an error: the run goes on (or went on) without
//! something, or tells what it kept and dropped. Values the caller prints (the CLI on stderr),
//! never printed here.

use std::fmt;

/// One line for the user, as the CLI prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    kind: Kind,
    text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Something the run does without (`profiler: warning: ...`).
    Warning,
    /// What the run did, for the user (`profiler: ...`).
    Note,
    /// A line of figures for scripts (printed as is).
    Figures,
    /// The run has started recording (`-q` silences it, as every message but errors).
    Started,
}

impl Warning {
    /// The run goes on without something.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            kind: Kind::Warning,
            text: text.into(),
        }
    }

    /// What the run did or decided.
    pub fn note(text: impl Into<String>) -> Self {
        Self {
            kind: Kind::Note,
            text: text.into(),
        }
    }

    /// Recording has begun: everything is attached and enabled. Said for targets that were
    /// already running (a script that attaches, then starts a load, waits for this line).
    pub fn started(text: impl Into<String>) -> Self {
        Self {
            kind: Kind::Started,
            text: text.into(),
        }
    }

    /// Whether this is the start line ([`Self::started`]), which `-q` silences.
    pub fn is_start(&self) -> bool {
        self.kind == Kind::Started
    }

    /// A line of figures printed as is (`--unwind-stats`).
    pub fn figures(text: impl Into<String>) -> Self {
        Self {
            kind: Kind::Figures,
            text: text.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Warning => write!(f, "profiler: warning: {}", self.text),
            Kind::Note | Kind::Started => write!(f, "profiler: {}", self.text),
            Kind::Figures => f.write_str(&self.text),
        }
    }
}

/// Where a run's warnings go as they happen: the CLI prints each at once (a warning about
/// the set-up is not held until a long run ends); tests and callers that want them all
/// afterwards pass a `Vec`.
pub trait Warn {
    fn warn(&mut self, warning: Warning);

    fn warn_all(&mut self, warnings: Vec<Warning>) {
        for w in warnings {
            self.warn(w);
        }
    }
}

impl Warn for Vec<Warning> {
    fn warn(&mut self, warning: Warning) {
        self.push(warning);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_printed() {
        assert_eq!(
            Warning::new("not following").to_string(),
            "profiler: warning: not following"
        );
        assert_eq!(
            Warning::note("off-cpu: 3 waits").to_string(),
            "profiler: off-cpu: 3 waits"
        );
        assert_eq!(Warning::figures("a=1").to_string(), "a=1");
        let start = Warning::started("recording pid 7");
        assert_eq!(start.to_string(), "profiler: recording pid 7");
        assert!(start.is_start() && !Warning::note("x").is_start());
    }
}
