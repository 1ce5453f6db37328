//! Why text in one of the event grammars (raw codes, cache names, sysfs format and event
//! files, `pmu/terms/`, tracefs) does not parse. [`super::EventError::Malformed`] and
//! [`super::EventError::Unavailable`] carry its text as their reason.

use std::{fmt, io, sync::Arc};

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GrammarError {
    // sysfs format files (`config:0-7`).
    #[error("config word '{0}' is not supported")]
    ConfigWord(String),
    #[error("format '{0}' has no ':'")]
    NoColon(String),
    #[error("bit range '{0}' is reversed")]
    ReversedRange(String),
    #[error("'{0}' is not a bit number 0-63")]
    NotABit(String),

    // perf's cache grammar.
    #[error("{cache} supports only {ops}")]
    CacheOp { cache: &'static str, ops: String },

    // `pmu/terms/` and sysfs event files.
    #[error("no terms between the slashes")]
    NoTerms,
    #[error("'{0}' is not a term (name or name=value)")]
    NotATerm(String),
    #[error("'{0}' is not a number (decimal or 0x hex)")]
    NotANumber(String),
    #[error("unreadable: {0}")]
    Unreadable(SharedIo),

    // Raw codes: perf's `rNNNN`, libcpc's strtol numbers.
    #[error("raw code 'r{0}' has more than 16 hex digits")]
    RawTooLong(String),
    #[error("perf raw codes are bare hex: write r{digits} or {hex}")]
    RawHexPrefix { hex: String, digits: String },
    #[error("'r' must be followed by hex digits only (e.g. r01c2)")]
    RawNotHex,
    #[error("'{text}' is not a number: strtol(3) stops at '{bad}' (base {radix})")]
    NotStrtol { text: String, bad: char, radix: u32 },
    #[error("raw codes cannot be negative")]
    Negative,
    #[error("'{0}' does not fit in a C long")]
    NotALong(String),
}

/// An I/O error a parsed table keeps (and clones) with what failed to parse; equal when the
/// kind and errno are.
#[derive(Clone, Debug)]
pub(crate) struct SharedIo(pub(crate) Arc<io::Error>);

impl PartialEq for SharedIo {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind() && self.0.raw_os_error() == other.0.raw_os_error()
    }
}

impl Eq for SharedIo {}

impl fmt::Display for SharedIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a host has no tracepoints.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoTracing {
    #[error("{0} has no events/ directory")]
    NoEventsDir(std::path::PathBuf),
    #[error(
        "tracefs is not mounted at {tracefs} or {debugfs} (as root: mount -t tracefs nodev \
         {tracefs})"
    )]
    NotMounted {
        tracefs: &'static str,
        debugfs: &'static str,
    },
    #[error("tracefs is not mounted and mounting it at {at} failed: {source}")]
    MountFailed {
        at: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("no tracing root was given")]
    NotGiven,
}
