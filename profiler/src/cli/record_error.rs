//! Why `record`'s arguments were refused. The texts are what the user sees after
//! `profiler: `.

use crate::export::ExportError;

use super::usage::UsageError;

#[derive(Debug, thiserror::Error)]
pub enum RecordArgError {
    #[error("give a target: -p, -t, -G, -a, -C or a command")]
    NoTarget,
    #[error("--min-block needs --off-cpu or --wall")]
    MinBlockWithoutOffCpu,
    #[error("invalid --mmap-pages {0}: must be a power of two, at most 1 GiB of pages")]
    MmapPages(u32),
    #[error("invalid {what} {secs}: must be a positive number of seconds")]
    Seconds { what: &'static str, secs: f64 },
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// A malformed `-e '{A,B}:S'` counter group.
    #[error(transparent)]
    Group(#[from] crate::record::GroupError),
    #[error(transparent)]
    Export(#[from] ExportError),
}
